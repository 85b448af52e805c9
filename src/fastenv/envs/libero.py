"""LIBERO's Gymnasium entry points: ``make_sim`` (the backend) -> ``wrap`` -> the vector env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fastenv.backends import libero
from fastenv.backends.libero import DEFAULT_MODALITIES
from fastenv.envs.options import (
    check_chunk_options,
    split_options,
    with_defaults,
)
from fastenv.vector import BatchedEnv, PipelineVectorEnv, make_pipeline
from fastenv.wrappers import wrap

__all__ = ["make_env", "make_vec"]


def make_env(
    suite: str = "libero_10",
    task_id: int = 0,
    *,
    num_envs: int | None = None,
    chunk: int | None = 8,
    modalities: Sequence[str] | None = DEFAULT_MODALITIES,
    camera_size: int | tuple[int, int] = 128,
    gamma: float | None = None,
    max_episode_steps: int | None = None,
    init_state_id: int | None = None,
    render_mode: str | None = None,
    hard_reset: bool = False,
    fast_substep: bool = True,
    flatten: bool = False,
    episode_statistics: bool = False,
    **vector_options: Any,
) -> gym.Env:
    """Build a slim, headless, chunked LIBERO env (the ``fastenv/Libero-v0`` entry point).

    Args:
        suite: LIBERO suite name, e.g. "libero_10", "libero_spatial".
        task_id: task index in the suite.
        chunk: sub-actions per action (None: plain 7-D actions).
        modalities: observation keys to keep (None: the stock set).
        camera_size: image side, or (height, width).
        gamma: discount inside a chunk (None sums rewards).
        max_episode_steps: simulator steps before truncation (default: the suite's budget).
        init_state_id: fixed init state; None draws one per reset from the seed.
        render_mode: None or "rgb_array".
        hard_reset: reload the model at each reset (robosuite's default, slow); the default resets
            in place, bit for bit equal to a freshly built stock env (see ``LiberoAdapter``).
        fast_substep: False runs robosuite's own control loop (bit for bit the same; for measuring).
        flatten: one float32 Box observation (kept keys concatenated) and flat (K*7) actions.
        episode_statistics: add ``info["episode"]`` at each episode's end: the undiscounted return
            and the length in simulator steps (and the time), whatever ``chunk`` and ``gamma``.
        num_envs: with a value, N envs in worker processes, returned batched as one env; the
            vector options (``num_workers``, ``pipeline_stages``, ...) may be passed too.

    Examples:
        >>> env = gym.make("fastenv/Libero-v0", suite="libero_10", task_id=0, chunk=8)
    """
    _check(chunk=chunk, gamma=gamma, camera_size=camera_size, max_episode_steps=max_episode_steps,
           render_mode=render_mode, modalities=modalities)
    if num_envs is not None or vector_options:
        single = dict(
            suite=suite, task_id=task_id, chunk=chunk, modalities=modalities, camera_size=camera_size,
            gamma=gamma, max_episode_steps=max_episode_steps, init_state_id=init_state_id,
            render_mode=render_mode, hard_reset=hard_reset, fast_substep=fast_substep, flatten=flatten,
            episode_statistics=episode_statistics,
        )
        return BatchedEnv(make_vec(1 if num_envs is None else num_envs, **vector_options, **single))
    env = libero.make_sim(
        suite, task_id, modalities=modalities, camera_size=camera_size, max_episode_steps=max_episode_steps,
        init_state_id=init_state_id, render_mode=render_mode, hard_reset=hard_reset, fast_substep=fast_substep,
    )
    return wrap(
        env, chunk=chunk, modalities=modalities, render_mode=render_mode, gamma=gamma, flatten=flatten,
        episode_statistics=episode_statistics,
    )


def make_vec(num_envs: int = 1, **kwargs: Any) -> PipelineVectorEnv:
    """N LIBERO envs in a ``PipelineVectorEnv`` (the ``fastenv/Libero-v0`` vector entry point).

    ``kwargs`` are ``make_env``'s (suite, task_id, chunk, ...) and the vector options
    (num_workers, pipeline_stages, step_timeout, threads_per_worker, ...), given flat or apart as
    ``vector_kwargs={...}`` (called directly: ``gym.make_vec`` keeps ``vector_kwargs`` for its own
    vector envs).

    Examples:
        >>> envs = gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2, pipeline_stages=2, chunk=8)
    """
    env_options, vector_options = split_options(make_env, kwargs)
    _check(**with_defaults(make_env, env_options))
    return make_pipeline(make_env, num_envs, **vector_options, **env_options)


def _check(
    *, chunk: Any, gamma: Any, camera_size: Any, max_episode_steps: Any, render_mode: Any, modalities: Any, **_: Any
) -> None:
    """Every option that can be checked before anything is imported or built."""
    check_chunk_options(chunk=chunk, gamma=gamma)
    libero.check_options(camera_size=camera_size, max_episode_steps=max_episode_steps, render_mode=render_mode, modalities=modalities)
