"""Build a PipelineVectorEnv from one env factory."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from fastenv._validation import check_positive_int
from fastenv.vector.pipeline import PipelineVectorEnv

# The keyword arguments that are the vector env's, not the env's: read from its signature.
VECTOR_OPTIONS: tuple[str, ...] = tuple(
    name for name in inspect.signature(PipelineVectorEnv.__init__).parameters if name not in ("self", "env_fns")
)


def make_pipeline(make_env: Callable[..., gym.Env], num_envs: int, **kwargs: Any) -> PipelineVectorEnv:
    """N copies of ``make_env(**env_kwargs)`` in a PipelineVectorEnv.

    ``kwargs`` holds both the vector options (``num_workers``, ``pipeline_stages``, ...) and the
    env's own keyword arguments; each worker calls ``make_env`` itself.

    Examples:
        >>> envs = make_pipeline(make_libero_env, 4, num_workers=2, chunk=8)
    """
    num_envs = check_positive_int("num_envs", num_envs)
    vector = {key: kwargs.pop(key) for key in VECTOR_OPTIONS if key in kwargs}
    fn = functools.partial(make_env, **kwargs)
    return PipelineVectorEnv([fn] * num_envs, **vector)
