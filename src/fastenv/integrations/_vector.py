"""What the RL library adapters share, written once: the autoreset mode each needs (and the error
when a vector env has another), the keys of an ended env's SAME_STEP info that are not its
reset's, and per-env seeds as Gymnasium's vector envs take them.

Each ``fastenv.integrations.<library>`` offers ``make_vec(env_id, num_envs, **kwargs)`` and, where
the library takes an object of its own, a ``<Library>VecEnv`` over a Gymnasium vector env.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from fastenv.core.infos import STEP_KEYS

# An ended env's keys in a SAME_STEP info that are not its reset's: the final observation, the
# step's own info, and the keys of the transition (chunk_rewards, ...) set at the top level.
FINAL_KEYS = ("final_obs", "final_info", *STEP_KEYS)


def require_autoreset(vector_env: Any, mode: AutoresetMode, adapter: str, why: str) -> None:
    """Refuse ``vector_env`` unless it autoresets in ``mode`` (``metadata["autoreset_mode"]``, which
    every Gymnasium 1.x vector env declares: one that declares none is refused too), saying why
    ``adapter`` needs that mode and how to make such an env."""
    got = getattr(vector_env, "metadata", {}).get("autoreset_mode")
    if got != mode:
        raise ValueError(f"{adapter} needs a vector env with {mode.name} autoreset ({why}), got autoreset_mode={got}: "
                         f"make it with gym.make_vec(..., autoreset_mode={mode.value!r})")


def make_vector_env(env_id: str, num_envs: int, mode: AutoresetMode, adapter: str, why: str, **kwargs: Any) -> gym.vector.VectorEnv:
    """``gym.make_vec(env_id, num_envs, autoreset_mode=mode, **kwargs)``; another mode in ``kwargs`` is refused."""
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    given = kwargs.pop("autoreset_mode", mode)
    if AutoresetMode(given) is not mode:
        raise ValueError(f"{adapter} needs {mode.name} autoreset ({why}), got autoreset_mode={given!r}: leave it out")
    return gym.make_vec(env_id, num_envs=int(num_envs), autoreset_mode=mode, **kwargs)


def per_env_seeds(seed: int | Sequence[int | None] | None, n: int) -> list[int | None]:
    """Gymnasium's vector seeds: None for every env, ``seed + i`` for env i, or one per env.

    Example:
        >>> per_env_seeds(3, 2), per_env_seeds(None, 2), per_env_seeds([5, None], 2)
        ([3, 4], [None, None], [5, None])
    """
    if seed is None:
        return [None] * n
    if isinstance(seed, (int, np.integer)):
        return [int(seed) + i for i in range(n)]
    seeds = list(seed)
    if len(seeds) != n:
        raise ValueError(f"seed must be None, an int or {n} seeds, got {len(seeds)} seeds")
    return seeds


def renamed(module: str, names: Mapping[str, tuple[str, Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving old names (old -> (new name, object)) with a DeprecationWarning, for one release."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new, value = names[name]
        warnings.warn(f"{module}.{name} is now {module}.{new}; the old name goes in the next release", DeprecationWarning, stacklevel=2)
        return value

    return __getattr__
