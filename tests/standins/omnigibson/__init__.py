"""A stand-in for OmniGibson: the API surface fastenv's BEHAVIOR adapter calls, and its stock step.

OmniGibson (Isaac Sim) cannot be installed on machines without an RTX GPU, so the adapter is
driven against this module instead. It mirrors, from BEHAVIOR-1K's source (the ``in_vec_env``
line of ``OmniGibson/omnigibson``: ``envs/env_base.py``, ``envs/vec_env_base.py``,
``simulator.py``, ``tasks/task_base.py``, ``termination_conditions/timeout.py``, ``macros.py``,
``utils/gym_utils.py``), the calls and their contracts:

- ``launch(physics_dt, rendering_dt, sim_step_dt, device, viewer_width, viewer_height)`` builds
  Kit's app through ``lazy.isaacsim.SimulationApp(config, experience=...)`` and sets ``sim``;
- ``sim.step()`` runs ``sim_step_dt // rendering_dt`` loops; with ``render_on_step`` each loop
  renders once after ``rendering_dt / physics_dt`` physics steps, without it the loop runs the
  physics steps only (asserting that ratio is an exact integer, as OmniGibson does);
  ``sim.render()`` renders without physics; ``set_simulation_dt(physics_dt, rendering_dt,
  sim_step_dt)`` validates the ratios; scenes are imported only into a stopped simulator;
- ``Environment(configs, in_vec_env=False)``: loads its scene, robot and task with the simulator
  stopped; a lone env plays and runs ``post_play_load`` (spaces, then ``reset()``) itself, an env
  built ``in_vec_env`` waits for the caller (``VectorEnvironment``) to play and finish loading;
  ``step`` = ``_pre_step`` (the robot's controller takes the action as its goal and keeps it),
  ``sim.step()``, ``_post_step`` (``get_obs`` then ``task.step``, the timeout condition a
  truncation, any other a termination, then ``_current_step += 1``); ``reset(get_obs=True)``
  resets the task and variables, then steps the simulator once and observes; observations are
  flat dicts keyed ``robot::sensor::modality`` holding torch tensors, RGB as RGBA uint8;
- ``BehaviorTask.step(env, action)`` -> ``(reward, done, info)`` with
  ``info["done"]["termination_conditions"][name] = {"done", "success"}`` and
  ``info["done"]["success"]``; ``Timeout`` is done when ``env.episode_steps >= max_steps``.

What it simulates instead of PhysX and RTX: each robot is a damped spring towards its
controller's goal (integrated per physics step, so the physics step size and the number of
world steps show in the state), and a camera image is a function of the robot's state at the
last render (camera buffers hold the last render, as Replicator's do). Everything the tests
need to see is counted here: physics steps, renders, simulated time, and every robot's goal at
every physics step (``sim.goal_log``).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterable

import gymnasium as gym
import numpy as np
import torch as th

from omnigibson import lazy
from omnigibson.macros import gm

sim = None
app = None
ACTION_DIM = 4


def launch(physics_dt=None, rendering_dt=None, sim_step_dt=None, device=None, viewer_width=1280, viewer_height=720):
    global app, sim
    assert sim is None, "OmniGibson is already launched"
    app = lazy.isaacsim.SimulationApp({"headless": gm.HEADLESS}, experience="omnigibson.kit")
    sim = Simulator(physics_dt, rendering_dt, sim_step_dt, device, viewer_width, viewer_height)
    return app


class Simulator:
    def __init__(self, physics_dt, rendering_dt, sim_step_dt, device, viewer_width, viewer_height):
        self.initial_physics_dt, self.initial_rendering_dt = physics_dt, rendering_dt
        self.device, self.viewer_width, self.viewer_height = device or "cpu", viewer_width, viewer_height
        self._physics_dt, self._rendering_dt = physics_dt, rendering_dt
        self._validate_dts(physics_dt, rendering_dt, sim_step_dt)
        self._sim_step_dt = sim_step_dt
        self._n_steps_per_loop = int(sim_step_dt // rendering_dt)
        self._render_on_step = True
        self._state = "stopped"
        self.scenes: list[Scene] = []
        self.current_time = 0.0
        self.physics_steps = 0
        self.renders = 0
        self.goal_log: list[list[th.Tensor]] = []  # every robot's goal at every physics step

    # -- time -------------------------------------------------------------------------------------
    def get_physics_dt(self):
        return self._physics_dt

    def get_rendering_dt(self):
        return self._rendering_dt

    def get_sim_step_dt(self):
        return self._sim_step_dt

    @staticmethod
    def _validate_dts(physics_dt, rendering_dt, sim_step_dt):
        ratio = rendering_dt / physics_dt
        assert math.isclose(ratio, round(ratio)), f"Rendering dt ({rendering_dt}) must be a multiple of physics dt ({physics_dt})"
        assert rendering_dt >= physics_dt
        ratio = sim_step_dt / rendering_dt
        assert math.isclose(ratio, round(ratio)), f"Sim step dt ({sim_step_dt}) must be a multiple of rendering dt ({rendering_dt})"
        assert sim_step_dt >= rendering_dt

    def set_simulation_dt(self, physics_dt=None, rendering_dt=None, sim_step_dt=None):
        if physics_dt is not None:
            self._physics_dt = physics_dt
        if rendering_dt is not None:
            self._rendering_dt = rendering_dt
        if sim_step_dt is not None:
            self._validate_dts(self._physics_dt, self._rendering_dt, sim_step_dt)
            self._sim_step_dt = sim_step_dt
            self._n_steps_per_loop = int(sim_step_dt // self._rendering_dt)
        else:
            self._validate_dts(self._physics_dt, self._rendering_dt, self._sim_step_dt)

    @property
    def n_physics_timesteps_per_render(self):
        n = self.get_rendering_dt() / self.get_physics_dt()
        assert n.is_integer(), "render_timestep must be a multiple of physics_timestep"
        return int(n)

    # -- state ------------------------------------------------------------------------------------
    def is_playing(self):
        return self._state == "playing"

    def is_stopped(self):
        return self._state == "stopped"

    def play(self):
        if not self.is_playing():
            self._state = "playing"
            self.render()

    def stop(self):
        # Stopping Isaac's timeline puts every prim back to its authored (USD) state.
        self._state = "stopped"
        self.current_time = 0.0
        for scene in self.scenes:
            for robot in scene.robots:
                robot.set_state(robot.authored_state)

    @contextlib.contextmanager
    def render_on_step(self, value):
        original = self._render_on_step
        self._render_on_step = value
        yield
        self._render_on_step = original

    def import_scene(self, scene):
        assert self.is_stopped(), "Simulator must be stopped while importing a scene!"
        scene.idx = len(self.scenes)
        self.scenes.append(scene)
        self.play()
        self.step()
        self.stop()

    # -- stepping ---------------------------------------------------------------------------------
    def step(self):
        assert self.is_playing(), "Simulator must be playing to step"
        for _ in range(self._n_steps_per_loop):
            if self._render_on_step:
                for _ in range(round(self._rendering_dt / self._physics_dt)):
                    self._physics_step()
                self.render()
            else:
                for _ in range(self.n_physics_timesteps_per_render):
                    self._physics_step()

    def _physics_step(self):
        for scene in self.scenes:
            for robot in scene.robots:
                robot.integrate(self._physics_dt)
        self.current_time += self._physics_dt
        self.physics_steps += 1
        self.goal_log.append([robot.goal.clone() for scene in self.scenes for robot in scene.robots])

    def render(self):
        self.renders += 1
        for scene in self.scenes:
            for robot in scene.robots:
                for sensor in robot.sensors.values():
                    sensor.capture(robot)


class VisionSensor:
    def __init__(self, name, modalities, image_height=128, image_width=128):
        self.name, self.modalities = name, list(modalities)
        self.image_height, self.image_width = image_height, image_width
        self.captures = 0
        self._buffers = {m: th.zeros(self._shape(m), dtype=self._dtype(m)) for m in self.modalities}

    def _shape(self, modality):
        return (self.image_height, self.image_width, 4) if modality == "rgb" else (self.image_height, self.image_width)

    @staticmethod
    def _dtype(modality):
        return th.uint8 if modality == "rgb" else th.float32

    def load_observation_space(self):
        spaces = {}
        for m in self.modalities:
            if m == "rgb":
                spaces[m] = gym.spaces.Box(0, 255, self._shape(m), np.uint8)
            else:
                spaces[m] = gym.spaces.Box(0.0, np.inf, self._shape(m), np.float32)
        return gym.spaces.Dict(spaces)

    def capture(self, robot):
        self.captures += 1
        rows = th.arange(self.image_height, dtype=th.float64)[:, None]
        cols = th.arange(self.image_width, dtype=th.float64)[None, :]
        for m in self.modalities:
            if m == "rgb":
                chans = [((robot.pos[c % ACTION_DIM] + 3.0) * 41.0 + rows + 2 * cols) % 256 for c in range(3)]
                rgba = th.stack([*chans, th.full_like(chans[0], 255.0)], dim=-1)
                self._buffers[m] = rgba.floor().to(th.uint8)
            else:
                self._buffers[m] = (robot.pos.abs().sum() + rows * 0.01 + cols * 0.001).to(th.float32)

    def get_obs(self):
        return {m: self._buffers[m].clone() for m in self.modalities}, {}


class Robot:
    """A damped spring per action dimension towards its controller's goal."""

    STIFFNESS, DAMPING = 40.0, 6.0

    def __init__(self, name, obs_modalities, sensor_config=None, **kwargs):
        self.name = name
        self.action_dim = ACTION_DIM
        self.action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.obs_modalities = list(obs_modalities)
        self.authored_state = (th.zeros(ACTION_DIM, dtype=th.float64), th.zeros(ACTION_DIM, dtype=th.float64))
        self.pos, self.vel = (t.clone() for t in self.authored_state)
        self.goal = th.zeros(ACTION_DIM, dtype=th.float64)
        self.sensors = {}
        vision_modalities = [m for m in self.obs_modalities if m != "proprio"]
        if vision_modalities:
            cfg = (sensor_config or {}).get("VisionSensor", {})
            modalities = cfg.get("modalities", vision_modalities)
            kwargs = cfg.get("sensor_kwargs", {})
            sensor = VisionSensor(f"{name}:zed_link:Camera:0", modalities, **kwargs)
            self.sensors[sensor.name] = sensor

    def set_state(self, state):
        self.pos, self.vel = state[0].clone(), state[1].clone()

    def reset(self):
        self.vel = th.zeros(ACTION_DIM, dtype=th.float64)
        self.goal = self.pos.clone()  # controllers restart holding the current pose

    def apply_action(self, action):
        assert action.shape == (self.action_dim,), f"action of shape {tuple(action.shape)}"
        self.goal = action.to(th.float64).clone()

    def integrate(self, dt):
        self.vel = self.vel + (self.STIFFNESS * (self.goal - self.pos) - self.DAMPING * self.vel) * dt
        self.pos = self.pos + self.vel * dt

    def load_observation_space(self):
        spaces = {name: sensor.load_observation_space() for name, sensor in self.sensors.items()}
        if "proprio" in self.obs_modalities:
            spaces["proprio"] = gym.spaces.Box(-np.inf, np.inf, (2 * ACTION_DIM,), np.float32)
        return gym.spaces.Dict(spaces)

    def get_obs(self):
        obs, info = {}, {}
        for name, sensor in self.sensors.items():
            obs[name], info[name] = sensor.get_obs()
        if "proprio" in self.obs_modalities:
            obs["proprio"] = th.cat([self.pos, self.vel]).to(th.float32)
        return obs, info


class Scene:
    def __init__(self, scene_model, **kwargs):
        self.scene_model = scene_model
        self.robots: list[Robot] = []
        self.idx = None
        self._initial_state = None

    def add_object(self, robot):
        self.robots.append(robot)

    def update_initial_file(self):
        self._initial_state = [(r.pos.clone(), r.vel.clone()) for r in self.robots]

    def reset(self):
        for robot, state in zip(self.robots, self._initial_state):
            robot.set_state(state)


class BehaviorTask:
    """Termination: ``timeout`` (a failure) and ``predicate`` (the BDDL goal: the robot's first
    joint past ``GOAL``). Reward: the potential (distance to the goal) decrease since the last step."""

    GOAL = 0.6

    def __init__(self, activity_name, activity_definition_id=0, activity_instance_id=0, termination_config=None, **kwargs):
        self.activity_name = activity_name
        self.activity_instance_id = activity_instance_id
        self.max_steps = (termination_config or {}).get("max_steps", 500)
        self._loaded = False
        self._potential = None

    def load(self, env):
        assert sim.is_stopped(), "Simulator must be stopped before loading tasks!"
        self._loaded = True

    def post_play_load(self, env):
        pass

    def _distance(self, env):
        return float(max(self.GOAL - env.robots[0].pos[0].item(), 0.0))

    def reset(self, env):
        env.scene.reset()
        for robot in env.robots:
            # the pre-sampled instance puts the robot in its start pose
            robot.set_state((th.full((ACTION_DIM,), -0.1 * self.activity_instance_id, dtype=th.float64), th.zeros(ACTION_DIM, dtype=th.float64)))
            robot.reset()
        self._potential = self._distance(env)

    def step(self, env, action):
        assert self._loaded, "Task must be loaded using load() before calling step()!"
        timeout = env.episode_steps >= self.max_steps
        goal = env.robots[0].pos[0].item() >= self.GOAL
        done_info = {
            "termination_conditions": {
                "timeout": {"done": timeout, "success": False},
                "predicate": {"done": goal, "success": goal},
            },
            "success": goal,
        }
        potential = self._distance(env)
        reward = self._potential - potential
        self._potential = potential
        return reward, timeout or goal, copy.deepcopy({"reward": {"potential": reward}, "done": done_info})


def _flat(dic, prefix=""):
    out = {}
    for key, value in dic.items():
        name = f"{prefix}::{key}" if prefix else key
        if isinstance(value, (dict, gym.spaces.Dict)):
            out.update(_flat(value, name))
        else:
            out[name] = value
    return out


def _merge(base, extra):
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


class Environment(gym.Env):
    def __init__(self, configs, in_vec_env=False):
        self.render_mode = "rgb_array"
        self.in_vec_env = in_vec_env
        self.config = {
            "env": {"action_frequency": 30, "rendering_frequency": 30, "physics_frequency": 120, "device": None,
                    "automatic_reset": False, "flatten_action_space": True, "flatten_obs_space": True},
            "render": {"viewer_width": 1280, "viewer_height": 720},
            "scene": {}, "robots": [], "task": {},
        }
        for config in configs if isinstance(configs, (list, tuple)) else [configs]:
            _merge(self.config, copy.deepcopy(config))
        env_cfg = self.config["env"]
        self._automatic_reset = env_cfg["automatic_reset"]
        physics_dt = 1.0 / env_cfg["physics_frequency"]
        rendering_dt = 1.0 / env_cfg["rendering_frequency"]
        sim_step_dt = 1.0 / env_cfg["action_frequency"]
        device = env_cfg["device"] or "cpu"
        width, height = self.config["render"]["viewer_width"], self.config["render"]["viewer_height"]
        if sim is not None:
            assert sim.initial_physics_dt == physics_dt, "Physics frequency mismatch!"
            assert sim.initial_rendering_dt == rendering_dt, "Rendering frequency mismatch!"
            assert sim.device == device and sim.viewer_width == width and sim.viewer_height == height
        else:
            launch(physics_dt=physics_dt, rendering_dt=rendering_dt, sim_step_dt=sim_step_dt, device=device,
                   viewer_width=width, viewer_height=height)
        self._current_episode = 0
        self._current_step = 0
        self._loaded = False
        self.load()
        if not self.in_vec_env:
            sim.play()
            self.post_play_load()

    def load(self):
        assert sim.is_stopped(), "Simulator must be stopped before loading scene!"
        self._scene = Scene(**{k: v for k, v in self.config["scene"].items() if k != "type"})
        sim.import_scene(self._scene)
        for robot_cfg in self.config["robots"]:
            robot_cfg = {k: v for k, v in robot_cfg.items() if k not in ("type", "action_normalize")}
            self._scene.add_object(Robot(**robot_cfg))
        task_cfg = {k: v for k, v in self.config["task"].items() if k != "type"}
        self._task = BehaviorTask(**task_cfg)
        self._task.load(env=self)

    def post_play_load(self):
        self.task.post_play_load(env=self)
        self.scene.update_initial_file()
        self.observation_space = gym.spaces.Dict(_flat({r.name: r.load_observation_space() for r in self.robots}))
        lows = np.concatenate([r.action_space.low for r in self.robots])
        highs = np.concatenate([r.action_space.high for r in self.robots])
        self.action_space = gym.spaces.Box(lows, highs, dtype=np.float32)
        self.reset()
        self._loaded = True

    @property
    def task(self):
        return self._task

    @property
    def scene(self):
        return self._scene

    @property
    def robots(self):
        return self.scene.robots

    @property
    def episode_steps(self):
        return self._current_step

    def close(self):
        pass

    def get_obs(self):
        obs, info = {}, {}
        for robot in self.robots:
            obs[robot.name], info[robot.name] = robot.get_obs()
        return _flat(obs), info

    def _convert_action_to_tensor(self, action):
        if isinstance(action, dict):
            return {k: th.as_tensor(v, dtype=th.float).flatten() for k, v in action.items()}
        if isinstance(action, Iterable):
            return th.as_tensor(action, dtype=th.float).flatten()
        return action

    def _pre_step(self, action):
        action = self._convert_action_to_tensor(action)
        if not isinstance(action, dict):
            action_dict, idx = {}, 0
            for robot in self.robots:
                action_dict[robot.name] = action[idx : idx + robot.action_dim]
                idx += robot.action_dim
        else:
            action_dict = action
        for robot in self.robots:
            robot.apply_action(action_dict[robot.name])

    def _post_step(self, action):
        obs, obs_info = self.get_obs()
        reward, done, info = self.task.step(self, action)
        info["episode_length"] = self._current_step
        info["obs_info"] = obs_info
        if done and self._automatic_reset:
            info["last_observation"] = obs
            obs = self.reset()
        terminated = truncated = False
        for name, condition in info["done"]["termination_conditions"].items():
            if condition["done"]:
                if name == "timeout":
                    truncated = True
                else:
                    terminated = True
        assert (terminated or truncated) == done, "Terminated and truncated must match done!"
        self._current_step += 1
        return obs, reward, terminated, truncated, info

    def step(self, action, n_render_iterations=1):
        action = self._convert_action_to_tensor(action)
        self._pre_step(action)
        sim.step()
        for _ in range(n_render_iterations - 1):
            sim.render()
        return self._post_step(action)

    def _reset_variables(self):
        self._current_episode += 1
        self._current_step = 0

    def reset(self, get_obs=True, **kwargs):
        self.task.reset(self)
        self._reset_variables()
        if get_obs:
            sim.step()
            obs, info = self.get_obs()
            if self._loaded:
                compatible = {k: v.numpy() for k, v in obs.items()}
                if not self.observation_space.contains(compatible):
                    raise ValueError("Observation space does not match returned observations!")
            return obs, {"obs_info": info}
        return None


class VectorEnvironment:
    def __init__(self, num_envs, config):
        self.num_envs = num_envs
        if sim is not None:
            sim.stop()
        self.envs = [Environment(configs=copy.deepcopy(config), in_vec_env=True) for _ in range(num_envs)]
        sim.play()
        for env in self.envs:
            env.post_play_load()
