"""A stand-in for a batched ManiSkill BaseEnv (the GPU simulation, which this machine cannot run).

It mirrors the API surface fastenv's backend uses (mani-skill 3.0.1): ``_step_action`` calls
``agent.set_action`` and then runs the physics; the agent has a ``controller`` with per-env
tensors and a ``robot`` articulation with drive targets; ``get_info``, ``get_reward``,
``get_obs`` (which captures the sensors), ``reset(options={"env_idx"})``, ``scene.set_timestep``.

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


class FakeManiSkillEnv(gym.Env):
    STEP = 0.5  # the action tests send: each active sub-step moves an env by STEP * timestep

    def __init__(self, num_envs: int = 4, obs_mode: str = "rgb+depth+state", max_goal: int = 9, render_mode=None) -> None:
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
        self.gen = torch.Generator().manual_seed(0)
        self._viewer = None

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
        return {"success": success, "fail": torch.zeros(self.num_envs, dtype=torch.bool), "elapsed_steps": self._elapsed_steps}

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

    def reset(self, seed=None, options=None):
        options = options or {}
        idx = options.get("env_idx", torch.arange(self.num_envs))
        if seed is not None:
            self.gen.manual_seed(int(seed[0] if isinstance(seed, list) else seed))
        idx = torch.as_tensor(idx)
        self.pos[idx] = 0.0
        steps = torch.randint(2, self.max_goal + 1, (len(idx),), generator=self.gen)
        self.goal_steps[idx] = steps
        self.goal[idx] = self.goal_after(steps)
        self._elapsed_steps[idx] = 0
        info = self.get_info()
        return self.get_obs(info), info

    def step(self, action):
        """BaseEnv.step, for the stock reference."""
        action = self._step_action(action)
        self._elapsed_steps += 1
        info = self.get_info()
        obs = self.get_obs(info)
        reward = self.get_reward(obs, action, info)
        return obs, reward, info["success"] | info["fail"], torch.zeros(self.num_envs, dtype=torch.bool), info

    def render(self):
        return torch.zeros(self.num_envs, 8, 8, 3, dtype=torch.uint8)

    def close(self):
        pass
