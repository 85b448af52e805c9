"""Which option goes where: read from the signatures that take them, never listed by hand.

An entry point's keyword arguments are the env's options (its ``make_env``'s parameters) and the
vector env's (``PipelineVectorEnv``'s), as Gymnasium's ``make_vec`` keeps ``vector_kwargs``
apart; the flat form (both in one call) is taken apart here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from gymnasium.vector import AutoresetMode

from fastenv._validation import check_discount, check_positive_int
from fastenv.vector import VECTOR_OPTIONS
from fastenv.vector.pipeline import autoreset_mode_of

__all__ = [
    "VECTOR_OPTIONS", "built_by_rllib", "check_chunk_options", "env_options", "rllib_autoreset", "split_options", "with_defaults",
]

# Parameters of an entry point that are not options of one env.
_NOT_ENV_OPTIONS = ("num_envs",)


def env_options(make_env: Callable[..., Any]) -> dict[str, Any]:
    """``make_env``'s options and their defaults (``inspect.Parameter.empty`` where required)."""
    return {
        name: p.default
        for name, p in inspect.signature(make_env).parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in _NOT_ENV_OPTIONS
    }


def split_options(
    make_env: Callable[..., Any], kwargs: Mapping[str, Any], vector_options: tuple[str, ...] = VECTOR_OPTIONS
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``kwargs`` taken apart into (env options, vector options); an unknown name raises TypeError.

    The vector options may come flat, among the env's, or apart in ``vector_kwargs`` (a dict), as
    ``gymnasium.make_vec`` takes them for its own vector envs.
    """
    kwargs = dict(kwargs)
    apart = dict(kwargs.pop("vector_kwargs", None) or {})
    known = env_options(make_env)
    wrong = sorted(set(apart) - set(vector_options))
    if wrong:
        raise TypeError(f"vector_kwargs holds the vector env's options {list(vector_options)}; got {wrong}")
    twice = sorted(set(apart) & set(kwargs))
    if twice:
        raise TypeError(f"{twice} given both in vector_kwargs and as keyword arguments: give each once")
    unknown = sorted(set(kwargs) - set(known) - set(vector_options))
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; env options: {sorted(known)}, vector options: {list(vector_options)}")
    env = {key: value for key, value in kwargs.items() if key in known}
    vector = {key: value for key, value in kwargs.items() if key not in known}
    return env, {**vector, **apart}


def with_defaults(make_env: Callable[..., Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` completed with ``make_env``'s defaults (what a worker's ``make_env`` will see)."""
    defaults = {key: value for key, value in env_options(make_env).items() if value is not inspect.Parameter.empty}
    return {**defaults, **options}


def check_chunk_options(*, chunk: Any, gamma: Any) -> None:
    """``wrap()``'s chunk options, checked before any env is built."""
    if chunk is not None:
        check_positive_int("chunk", chunk)
    if gamma is not None:
        check_discount("gamma", gamma)
        if chunk is None:
            raise ValueError("gamma discounts rewards inside a chunk; pass chunk= as well")



def built_by_rllib(frame: FrameType | None) -> bool:
    """Whether an RLlib env runner's ``make_env`` is building this env (it calls ``gym.make_vec``).

    ``frame`` is the entry point's caller; RLlib's ``make_env`` is a few frames above it (its
    ``gym.make_vec``, and Gymnasium's ``SyncVectorEnv`` building single envs). Read by module name:
    nothing of Ray is imported.
    """
    for _ in range(8):
        if frame is None:
            return False
        if frame.f_code.co_name == "make_env" and str(frame.f_globals.get("__name__", "")).startswith("ray.rllib."):
            return True
        frame = frame.f_back
    return False


def rllib_autoreset(vector: dict[str, Any], frame: FrameType | None) -> dict[str, Any]:
    """``vector`` (a vector entry point's vector options) in the autoreset mode its caller reads.

    RLlib's env runners read a step after an episode's end as the next episode's reset
    (NEXT_STEP, Gymnasium's default); fastenv's default, SAME_STEP, would end each episode on the
    next one's first observation. Built by RLlib, the vector env runs NEXT_STEP, and another mode
    asked for is refused.
    """
    if not built_by_rllib(frame):
        return vector
    mode = autoreset_mode_of(vector.get("autoreset_mode", AutoresetMode.NEXT_STEP))
    if mode is not AutoresetMode.NEXT_STEP:
        raise ValueError(
            f"RLlib's env runners read episode ends in Gymnasium's NEXT_STEP autoreset mode, got autoreset_mode={mode}: "
            "leave autoreset_mode out of env_config (fastenv's vector env then runs NEXT_STEP under RLlib)"
        )
    return {**vector, "autoreset_mode": AutoresetMode.NEXT_STEP}
