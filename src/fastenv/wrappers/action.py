"""ActionChunk: one action is a chunk of K sub-actions; observe only at the chunk's end."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv._validation import check_action, check_discount, check_positive_int
from fastenv.backends.base import Info, ObsType
from fastenv.wrappers.base import FastenvWrapper


def chunk_space(space: spaces.Space, chunk: int) -> spaces.Space:
    """The action space of ``chunk`` consecutive actions of ``space``."""
    if isinstance(space, spaces.Box):
        low = np.broadcast_to(space.low, (chunk, *space.shape))
        high = np.broadcast_to(space.high, (chunk, *space.shape))
        return spaces.Box(low=low, high=high, dtype=space.dtype)
    if isinstance(space, spaces.Discrete):
        return spaces.MultiDiscrete(
            np.full(chunk, space.n), dtype=space.dtype, start=np.full(chunk, space.start)
        )
    if isinstance(space, spaces.MultiDiscrete):
        return spaces.MultiDiscrete(
            np.broadcast_to(space.nvec, (chunk, *space.shape)),
            dtype=space.dtype,
            start=np.broadcast_to(space.start, (chunk, *space.shape)),
        )
    raise TypeError(f"ActionChunk supports Box, Discrete and MultiDiscrete action spaces, got {space}")


class ActionChunk(FastenvWrapper):
    """Execute an action chunk of K sub-actions per step and observe once, at its end.

    Each sub-action runs a full simulator sub-step (controller, physics, reward, termination);
    only the last one produces an observation. Rewards are summed, or discounted with ``gamma``
    (then ``info["chunk_discount"] = gamma**k`` for the k executed sub-steps). A termination or
    truncation stops the chunk: the remaining sub-actions are not executed.
    ``info["chunk_steps"]`` is k and ``info["chunk_rewards"]`` the K sub-step rewards (0 after k).

    Args:
        env: the env to chunk.
        chunk: K, the number of sub-actions per action (>= 1).
        gamma: discount applied inside the chunk, or None to sum the rewards.

    Example:
        >>> env = ActionChunk(env, chunk=8)   # action_space: Box(8, act_dim)
    """

    def __init__(self, env: gym.Env, chunk: int, gamma: float | None = None) -> None:
        self.chunk = check_positive_int("chunk", chunk)
        self.gamma = None if gamma is None else check_discount("gamma", gamma)
        super().__init__(env)
        self._sub_action_space = self.env.action_space
        self.action_space = chunk_space(self._sub_action_space, self.chunk)
        if self.gamma is not None:
            self._discounts = self.gamma ** np.arange(self.chunk, dtype=np.float64)

    def step(self, action: Any) -> tuple[ObsType, SupportsFloat, bool, bool, Info]:
        actions = check_action(action, self.action_space, "action chunk")
        rewards = np.zeros(self.chunk, dtype=np.float64)
        last = self.chunk - 1
        for k in range(self.chunk):
            if k == last:
                obs, reward, terminated, truncated, info = self.env.step(actions[k])
            else:
                reward, terminated, truncated, info = self.env.substep(actions[k])
            rewards[k] = reward
            if terminated or truncated:
                if k < last:
                    obs = self.env.observe()
                break
        return obs, self._chunk_reward(rewards, k + 1), terminated, truncated, self._chunk_info(info, rewards, k + 1)

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        """Execute a whole chunk without producing an observation."""
        actions = check_action(action, self.action_space, "action chunk")
        rewards = np.zeros(self.chunk, dtype=np.float64)
        for k in range(self.chunk):
            reward, terminated, truncated, info = self.env.substep(actions[k])
            rewards[k] = reward
            if terminated or truncated:
                break
        return self._chunk_reward(rewards, k + 1), terminated, truncated, self._chunk_info(info, rewards, k + 1)

    def _chunk_reward(self, rewards: np.ndarray, steps: int) -> float:
        if self.gamma is None:
            return float(rewards[:steps].sum())
        return float(rewards[:steps] @ self._discounts[:steps])

    def _chunk_info(self, info: Info, rewards: np.ndarray, steps: int) -> Info:
        info = dict(info)
        info["chunk_steps"] = steps
        info["chunk_rewards"] = rewards
        if self.gamma is not None:
            info["chunk_discount"] = self.gamma**steps
        return info
