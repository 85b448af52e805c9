"""A stand-in for a batched ManiSkill BaseEnv (the GPU simulation, which this machine cannot run).

It mirrors the API surface fastenv's backend uses (mani-skill 3.0.1): ``_step_action`` calls
``agent.set_action`` and then runs the physics; the agent has a ``controller`` with per-env
tensors and a ``robot`` articulation with drive targets; ``get_info``, ``get_reward``,
``get_obs`` (which captures the sensors), ``reset(options={"env_idx"})``, ``scene.set_timestep``;
the spaces, ``metadata`` and ``elapsed_steps`` that ManiSkill's own ``ManiSkillVectorEnv`` and
``TimeLimitWrapper`` read, so the stock wrappers run over it as the reference.

Seeding is BaseEnv's (3.0.1), copied: ``_set_main_rng``/``_set_episode_rng`` keep one seed and
one ``BatchedRNG`` entry per env, a seed list replaces them all; a seeded (or
``enhanced_determinism``) reset draws from torch's generator seeded with ``_episode_seed[0]``,
jointly for the reset envs (as ``torch.rand((b, ...))`` in PickCube), an unseeded one from torch's
global generator; the start height is drawn per env from ``_batched_episode_rng[env_idx]`` (as
PegInsertionSide's sizes). Construction resets with seeds 2022 + i, as BaseEnv's.

Its controller is absolute, like ManiSkill's ``pd_joint_pos``: an action is a velocity target,
kept until the next action, so a substituted zero action is visible (the env stops) while a held
target is not. Each env moves by its target times the physics step; it succeeds when its first
coordinate passes a seeded goal; every render is counted per camera.
"""

from __future__ import annotations

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces


class FakeScene:
    def __init__(self) -> None:
        self.timestep = 0.01

    def set_timestep(self, dt: float) -> None:
        self.timestep = dt


class FakeArticulation:
    def __init__(self, n: int) -> None:
        self._targets = torch.zeros(n, 3)
        self._velocities = torch.zeros(n, 3)
        self.active_joints = ["joint_x", "joint_y", "joint_z"]

    def get_drive_targets(self):
        return self._targets

    def get_drive_velocities(self):
        return self._velocities

    def set_joint_drive_targets(self, targets, joints=None, joint_indices=None):
        self._targets = targets.clone()

    def set_joint_drive_velocity_targets(self, velocities, joints=None, joint_indices=None):
        self._velocities = velocities.clone()


class FakeController:
    """Absolute targets (as pd_joint_pos): the action is the target, written to the drives."""

    def __init__(self, robot: FakeArticulation, n: int) -> None:
        self.robot = robot
        self._target_qpos = torch.zeros(n, 3)

    def set_action(self, action):
        self._target_qpos = torch.as_tensor(action, dtype=torch.float32).clone()
        self.robot.set_joint_drive_targets(self._target_qpos, joints=self.robot.active_joints)


class FakeAgent:
    def __init__(self, n: int) -> None:
        self.robot = FakeArticulation(n)
        self.controller = FakeController(self.robot, n)

    def set_action(self, action):
        self.controller.set_action(action)


class BatchedRNG:
    """mani_skill.envs.utils.randomization.batched_rng.BatchedRNG: one RandomState per env."""

    def __init__(self, rngs: list) -> None:
        self.rngs = list(rngs)
        self.batch_size = len(self.rngs)

    @classmethod
    def from_seeds(cls, seeds) -> "BatchedRNG":
        return cls([np.random.RandomState(seed) for seed in seeds])

    @classmethod
    def from_rngs(cls, rngs) -> "BatchedRNG":
        return cls(rngs)

    def __getitem__(self, idx):
        idx = np.asarray(idx.cpu() if hasattr(idx, "cpu") else idx)
        if idx.ndim:
            return BatchedRNG.from_rngs([self.rngs[i] for i in idx])
        return self.rngs[int(idx)]

    def __setitem__(self, idx, value) -> None:
        idx = np.asarray(idx.cpu() if hasattr(idx, "cpu") else idx)
        if idx.ndim:
            for i, v in zip(idx, value.rngs if isinstance(value, BatchedRNG) else value):
                self.rngs[i] = v
        else:
            self.rngs[int(idx)] = value

    def uniform(self, *args, **kwargs) -> np.ndarray:
        return np.array([rng.uniform(*args, **kwargs) for rng in self.rngs])

    def randint(self, *args, **kwargs) -> np.ndarray:
        return np.array([rng.randint(*args, **kwargs) for rng in self.rngs])


def _space_of(obs, unbatched: bool = False):
    """gym_utils.convert_observation_to_space, for tensors."""
    if isinstance(obs, dict):
        return spaces.Dict({k: _space_of(v, unbatched) for k, v in obs.items()})
    dtype = np.dtype(str(obs.dtype).replace("torch.", ""))
    low, high = (-np.inf, np.inf) if dtype.kind == "f" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
    return spaces.Box(low, high, tuple(obs.shape[1:] if unbatched else obs.shape), dtype)


class FakeManiSkillEnv(gym.Env):
    STEP = 0.5  # the action tests send: each active sub-step moves an env by STEP * timestep

    def __init__(
        self, num_envs: int = 4, obs_mode: str = "rgb+depth+state", max_goal: int = 9, render_mode=None, enhanced_determinism: bool = False
    ) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.obs_mode = obs_mode
        self.render_mode = render_mode
        textures = set(obs_mode.split("+"))
        self.obs_mode_struct = SimpleNamespace(
            visual=SimpleNamespace(**{t: t in textures for t in ("rgb", "depth", "segmentation", "position", "normal", "albedo")}),
        )
        self._sensors = {"base_camera": object(), "hand_camera": object()}
        self.scene = FakeScene()
        self.agent = FakeAgent(num_envs)
        self.single_action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.max_goal = max_goal
        self.pos = torch.zeros(num_envs, 3)
        self.sim_time = torch.zeros(num_envs)
        self.goal = torch.full((num_envs,), float(max_goal))
        self.goal_steps = torch.full((num_envs,), max_goal)  # active sub-steps to reach the goal
        self._elapsed_steps = torch.zeros(num_envs, dtype=torch.int32)
        self.renders: list[tuple[str, ...]] = []
        self.physics_targets: list[torch.Tensor] = []
        self._viewer = None
        self.metadata = {"render_modes": ["rgb_array"]}  # an instance dict: ManiSkillVectorEnv updates it
        self._enhanced_determinism = enhanced_determinism
        self.reconfiguration_freq = 0  # BaseEnv's default with many envs: partial resets allowed
        self._main_seed = None
        self._batched_episode_rng = None
        self._set_main_rng([2022 + i for i in range(num_envs)])
        obs, _ = self.reset(seed=[2022 + i for i in range(num_envs)])
        self.single_observation_space = _space_of(obs, unbatched=True)
        self.observation_space = _space_of(obs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    @property
    def elapsed_steps(self):
        return self._elapsed_steps

    @property
    def unwrapped(self):
        return self

    def _step_action(self, action):
        if action is not None:
            self.agent.set_action(torch.as_tensor(action, dtype=torch.float32))
        # the physics: every env moves by its held drive target
        targets = self.agent.robot.get_drive_targets()
        self.physics_targets.append(targets.clone())  # what each physics step ran with
        self.pos += targets * self.scene.timestep
        self.sim_time += self.scene.timestep
        return action

    def goal_after(self, steps: torch.Tensor) -> torch.Tensor:
        """The goal an env reaches after ``steps`` active sub-steps of action STEP (one physics step each)."""
        return (steps.float() - 0.5) * self.STEP * self.scene.timestep

    def get_info(self):
        success = self.pos[:, 0] >= self.goal
        # on the GPU ManiSkill reports a copy of its (all-env) step counter
        return {"elapsed_steps": self._elapsed_steps.clone(), "success": success, "fail": torch.zeros(self.num_envs, dtype=torch.bool)}

    def get_reward(self, obs, action, info):
        return -self.pos.norm(dim=1)

    def get_obs(self, info=None):
        self.renders.append(tuple(self._sensors))
        state = torch.cat([self.pos, self.sim_time[:, None]], dim=1)
        if self.obs_mode == "state":
            return state.clone()
        data = {}
        for cam in self._sensors:
            data[cam] = {}
            if self.obs_mode_struct.visual.rgb:
                data[cam]["rgb"] = (self.pos[:, :1, None, None].expand(-1, 4, 4, 3) * 100).to(torch.uint8)
            if self.obs_mode_struct.visual.depth:
                data[cam]["depth"] = self.pos[:, 1:2, None, None].expand(-1, 4, 4, 1).to(torch.int16)
        return {"state": state, "sensor_data": data, "sensor_param": {}}

    # -- BaseEnv.reset, _set_main_rng and _set_episode_rng of mani-skill 3.0.1 (no reconfiguration) --
    def reset(self, seed=None, options=None):
        options = options or {}
        env_idx = torch.as_tensor(options["env_idx"]) if "env_idx" in options else torch.arange(self.num_envs)
        self._set_main_rng(seed)
        self._set_episode_rng(seed, env_idx)
        self._elapsed_steps[env_idx] = 0
        if seed is not None or self._enhanced_determinism:
            with torch.random.fork_rng():
                torch.manual_seed(int(self._episode_seed[0]))
                self._initialize_episode(env_idx)
        else:
            self._initialize_episode(env_idx)
        info = self.get_info()
        obs = self.get_obs(info)
        info["reconfigure"] = False
        return obs, info

    def _set_main_rng(self, seed):
        if seed is None:
            if self._main_seed is not None:
                return
            seed = np.random.RandomState().randint(2**31, size=(self.num_envs,))
        if not np.iterable(seed):
            seed = [seed]
        self._main_seed = seed
        self._main_rng = np.random.RandomState(self._main_seed[0])
        if len(self._main_seed) == 1 and self.num_envs > 1:
            self._main_seed = self._main_seed + np.random.RandomState(self._main_seed[0]).randint(2**31, size=(self.num_envs - 1,)).tolist()
        self._batched_main_rng = BatchedRNG.from_seeds(self._main_seed)

    def _set_episode_rng(self, seed, env_idx):
        if seed is not None or self._enhanced_determinism:
            env_idx = np.asarray(env_idx)
            if seed is None:
                self._episode_seed[env_idx] = self._batched_main_rng[env_idx].randint(2**31)
            else:
                if not np.iterable(seed):
                    seed = [seed]
                self._episode_seed = np.asarray(seed, dtype=np.int64)
                if len(self._episode_seed) == 1 and self.num_envs > 1:
                    self._episode_seed = np.concatenate(
                        (self._episode_seed, np.random.RandomState(self._episode_seed[0]).randint(2**31, size=(self.num_envs - 1,)))
                    )
            if seed is not None or self._batched_episode_rng is None:
                self._batched_episode_rng = BatchedRNG.from_seeds(self._episode_seed)
            else:
                self._batched_episode_rng[env_idx] = BatchedRNG.from_seeds(self._episode_seed[env_idx])
            self._episode_rng = self._batched_episode_rng[0]

    def _initialize_episode(self, env_idx):
        b = len(env_idx)
        steps = torch.randint(2, self.max_goal + 1, (b,))  # torch's generator, jointly for the b envs
        self.goal_steps[env_idx] = steps
        self.goal[env_idx] = self.goal_after(steps)
        self.pos[env_idx] = 0.0
        self.pos[env_idx, 2] = torch.as_tensor(self._batched_episode_rng[env_idx].uniform(-1, 1), dtype=torch.float32)

    def step(self, action):
        """BaseEnv.step, for the stock reference."""
        action = self._step_action(action)
        self._elapsed_steps += 1
        info = self.get_info()
        obs = self.get_obs(info)
        reward = self.get_reward(obs, action, info)
        return obs, reward, info["success"] | info["fail"], torch.zeros(self.num_envs, dtype=torch.bool), info

    control_mode = "pd_joint_delta_pos"

    def get_state_dict(self):
        """BaseEnv.get_state_dict's layout: actors' and articulations' batched states."""
        return {
            "actors": {"cube": torch.cat([self.pos, self.sim_time[:, None]], dim=1).clone()},
            "articulations": {"robot": self.agent.robot.get_drive_targets().clone()},
        }

    def render(self):
        """The human render camera's frames (a picture of each env's position)."""
        frames = torch.zeros(self.num_envs, 8, 8, 3, dtype=torch.uint8)
        frames[..., 0] = (self.pos[:, :1, None] * 40).clamp(0, 255).to(torch.uint8)
        frames[..., 1] = (self.pos[:, 2:3, None] * 100 + 128).clamp(0, 255).to(torch.uint8)
        return frames

    def close(self):
        pass
