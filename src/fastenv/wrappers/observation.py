"""PruneModalities: keep only some observation keys, and have the simulator produce only those."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from fastenv.core.protocol import check_known_keys
from fastenv.wrappers.action import ActionChunk


def _source_below(env: gym.Env) -> tuple[Any, gym.Wrapper | None]:
    """(the env producing the keys, the first wrapper on the way that may change observations).

    The producer is the first env of the stack that selects modalities itself (a ``SimEnv``).
    Wrappers that never touch observations (fastenv's, Gymnasium's reward, action and
    bookkeeping wrappers) are looked through.
    """
    current: Any = env
    while True:
        if callable(getattr(type(current), "request_modalities", None)):
            return current, None
        if not isinstance(current, gym.Wrapper):
            return None, None
        if isinstance(current, gym.ObservationWrapper) and not isinstance(current, PruneModalities):
            return None, current
        if not isinstance(current, _OBSERVATION_PRESERVING) and type(current).step is not gym.Wrapper.step:
            return None, current
        current = current.env


class PruneModalities(gym.ObservationWrapper):
    """Keep only ``modalities``; the simulator stops producing (rendering) the rest where it can.

    The keys are asked of the simulator itself when it is reachable through wrappers that do not
    change observations; it then produces the union of what every wrapper over it asked for, so
    two wrappers over one env each get exactly their own keys. Otherwise the keys are only
    filtered (and a warning says that the simulator still produces all of them).

    Args:
        env: the env to prune (its observation space must be a Dict).
        modalities: observation keys to keep, as the simulator names them.

    Raises:
        ValueError: an unknown key (the message lists the available ones), or a space that is
            not a Dict (e.g. a ``FlattenModalities`` below: prune first, then flatten).

    Examples:
        >>> env = PruneModalities(env, ["agentview_image", "robot0_proprio-state"])
    """

    def __init__(self, env: gym.Env, modalities: Sequence[str]) -> None:
        if isinstance(modalities, str):
            raise TypeError(f"modalities must be a sequence of keys, got the string {modalities!r}")
        super().__init__(env)
        below = env.observation_space
        if not isinstance(below, spaces.Dict):
            raise ValueError(
                f"PruneModalities needs a Dict observation space, got {type(below).__name__}: {below} "
                "(prune before flattening: PruneModalities goes below FlattenModalities)"
            )
        source, blocker = _source_below(env)
        inner_prune = _inner_prune(env)
        if source is not None and inner_prune is None:
            available: Sequence[str] = source.available_modalities()
        else:
            available = list(below.spaces)
        self.modalities = tuple(check_known_keys(modalities, available))
        self._source = source
        if source is not None:
            source.request_modalities(self, self.modalities)
        elif blocker is not None:
            warnings.warn(
                f"PruneModalities: {type(blocker).__name__} may change observations, so the keys are only "
                "filtered and the simulator still produces all of them; put PruneModalities below it",
                stacklevel=2,
            )
        space = env.observation_space
        self.observation_space = spaces.Dict({key: space[key] for key in self.modalities})

    def observation(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {key: observation[key] for key in self.modalities}

    def close(self) -> None:
        if self._source is not None:
            self._source.release_modalities(self)
            self._source = None
        super().close()


def _inner_prune(env: gym.Env) -> PruneModalities | None:
    current: Any = env
    while isinstance(current, gym.Wrapper):
        if isinstance(current, PruneModalities):
            return current
        current = current.env
    return None


# Wrappers known not to read or change observations (besides Gymnasium's reward/action wrappers).
_OBSERVATION_PRESERVING: tuple[type, ...] = (
    gym.RewardWrapper,
    gym.ActionWrapper,
    ActionChunk,
    gym.wrappers.OrderEnforcing,
    gym.wrappers.PassiveEnvChecker,
    gym.wrappers.TimeLimit,
    gym.wrappers.RecordEpisodeStatistics,
)
