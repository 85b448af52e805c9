"""Flat spaces for libraries that want them: one float32 Box observation, one flat action vector."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv._validation import check_real_array


class FlattenModalities(gym.ObservationWrapper):
    """Concatenate the kept observation keys (in the Dict space's order) into one float32 Box.

    Examples:
        >>> env = FlattenModalities(env)   # {"robot0_proprio-state": (39,), "object-state": (112,)} -> (151,)
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or not all(isinstance(s, spaces.Box) for s in space.spaces.values()):
            raise ValueError(f"FlattenModalities needs a Dict of Box spaces, got {space}")
        self._keys = list(space.spaces)
        low = np.concatenate([s.low.astype(np.float32).ravel() for s in space.spaces.values()])
        high = np.concatenate([s.high.astype(np.float32).ravel() for s in space.spaces.values()])
        self.observation_space = spaces.Box(low, high, dtype=np.float32)

    def observation(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(observation[key], dtype=np.float32).ravel() for key in self._keys])


class FlattenActionChunk(gym.ActionWrapper):
    """Accept a chunk of actions Box(K, d) as one flat vector Box(K * d).

    Examples:
        >>> env = FlattenActionChunk(ActionChunk(env, chunk=8))   # action_space: Box(56,)
    """

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        space = env.action_space
        if not isinstance(space, spaces.Box):
            raise ValueError(f"FlattenActionChunk needs a Box action space, got {space}")
        self._shape = space.shape
        self.action_space = spaces.Box(space.low.ravel(), space.high.ravel(), dtype=space.dtype)

    def action(self, action: Any) -> np.ndarray:
        return check_real_array(action, self.action_space.shape, "action").reshape(self._shape)
