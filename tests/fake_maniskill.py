"""A stand-in for ManiSkill's BaseEnv: the API surface fastenv's backend uses, on CPU torch tensors.

Each env moves a point by its action times the physics step (so simulated time is observable),
succeeds when its own step count reaches a seeded goal, and counts renders per camera.
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


class FakeManiSkillEnv(gym.Env):
    def __init__(self, num_envs: int = 4, obs_mode: str = "rgb+depth+state", max_goal: int = 9) -> None:
        self.num_envs = num_envs
        self.device = torch.device("cpu")
        self.obs_mode = obs_mode
        textures = set(obs_mode.split("+"))
        self.obs_mode_struct = SimpleNamespace(
            visual=SimpleNamespace(**{t: t in textures for t in ("rgb", "depth", "segmentation", "position", "normal", "albedo")}),
        )
        self._sensors = {"base_camera": object(), "hand_camera": object()}
        self.scene = FakeScene()
        self.single_action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.max_goal = max_goal
        self.pos = torch.zeros(num_envs, 3)
        self.sim_time = torch.zeros(num_envs)
        self.own_steps = torch.zeros(num_envs, dtype=torch.int64)
        self.goal = torch.full((num_envs,), max_goal)
        self._elapsed_steps = torch.zeros(num_envs, dtype=torch.int32)
        self.renders: list[tuple[str, ...]] = []
        self.gen = torch.Generator().manual_seed(0)
        self._viewer = None

    @property
    def unwrapped(self):
        return self

    def _step_action(self, action):
        action = torch.as_tensor(action, dtype=torch.float32)
        self.pos += action * self.scene.timestep
        self.sim_time += self.scene.timestep
        self.own_steps += (action.abs().sum(1) > 0).long()
        return action

    def get_info(self):
        return {"success": self.own_steps >= self.goal, "fail": torch.zeros(self.num_envs, dtype=torch.bool), "elapsed_steps": self._elapsed_steps}

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
        self.pos[idx] = torch.rand(len(idx), 3, generator=self.gen) - 0.5
        self.own_steps[idx] = 0
        self.goal[idx] = torch.randint(2, self.max_goal + 1, (len(idx),), generator=self.gen)
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

    def close(self):
        pass
