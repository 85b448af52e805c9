"""Which option goes where: read from the signatures that take them, never listed by hand.

An entry point's keyword arguments are the env's options (its ``make_env``'s parameters) and the
vector env's (``PipelineVectorEnv``'s), as Gymnasium's ``make_vec`` keeps ``vector_kwargs``
apart; the flat form (both in one call) is taken apart here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from fastenv._validation import check_discount, check_positive_int
from fastenv.vector import VECTOR_OPTIONS

__all__ = [
    "VECTOR_OPTIONS", "check_chunk_options", "env_options", "split_options", "with_defaults",
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
