"""Base class of the fastenv wrappers: keeps the sub-step API reachable through the stack."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fastenv.backends.base import Info, ObsType
from fastenv.core import SimEnv, as_sim_env


class FastenvWrapper(gym.Wrapper):
    """A wrapper whose inner env speaks fastenv's sub-step API.

    A foreign env (or a foreign wrapper, which hides the API) is first put in the generic adapter,
    so fastenv never bypasses a wrapper it does not know, such as a ``TimeLimit``.
    """

    def __init__(self, env: gym.Env) -> None:
        if not isinstance(env, (SimEnv, FastenvWrapper)):
            env = as_sim_env(env)
        super().__init__(env)

    def available_modalities(self) -> tuple[str, ...]:
        """Observation keys the simulator can produce."""
        return self.env.available_modalities()

    def select_modalities(self, keys: Sequence[str] | None) -> None:
        """Produce only ``keys`` below this wrapper."""
        self.env.select_modalities(keys)

    def make_headless(self, render_mode: str | None = None) -> None:
        """Close any viewer below this wrapper."""
        self.env.make_headless(render_mode)

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        """Advance one action without an observation: (reward, terminated, truncated, info)."""
        return self.env.substep(action)

    def observe(self) -> ObsType:
        """The observation of the current state."""
        return self.env.observe()
