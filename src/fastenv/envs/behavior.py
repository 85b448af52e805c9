"""BEHAVIOR's Gymnasium entry point: ``make_sim`` (the backend) -> ``wrap`` -> the vector env."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastenv.backends import behavior
from fastenv.backends.behavior import DEFAULT_MODALITIES, BehaviorSettings
from fastenv.envs.options import VECTOR_OPTIONS, split_options
from fastenv.vector import BatchedEnv, make_pipeline
from fastenv.wrappers import wrap

__all__ = ["make_env"]


def make_env(
    task: str = "turning_on_radio",
    *,
    chunk: int | None = 32,
    num_envs: int | None = None,
    pipeline_stages: int = 1,
    scene: str = "house_single_floor",
    robot: str = "R1Pro",
    modalities: Sequence[str] = DEFAULT_MODALITIES,
    camera_size: int | tuple[int, int] = 128,
    max_episode_steps: int = 500,
    gamma: float | None = None,
    threads: int | None = None,
    render_mode: str | None = None,
    **options: Any,
) -> Any:
    """A headless, chunked BEHAVIOR env (``gym.make("fastenv/Behavior-v0", ...)``).

    With ``pipeline_stages > 1``, ``num_envs`` or a vector option, the envs run in fastenv's
    vector env (one env per stage by default) and are returned batched as one env. Other
    ``options`` are ``BehaviorSettings``' fields and the vector options (flat, or apart as
    ``vector_kwargs={...}``).

    Examples:
        >>> env = gym.make("fastenv/Behavior-v0", task="turning_on_radio", chunk=32, pipeline_stages=2)
    """
    behavior.check_installed()  # before any worker is spawned
    size = (camera_size, camera_size) if isinstance(camera_size, int) else tuple(camera_size)
    vector = {key: options.pop(key) for key in list(options) if key in (*VECTOR_OPTIONS, "vector_kwargs")}
    _, vector = split_options(make_env, vector)
    settings = BehaviorSettings(
        task=task, scene=scene, robot=robot, modalities=tuple(modalities), camera_size=size,
        max_episode_steps=max_episode_steps, threads=threads, **options,
    )
    if num_envs is not None or pipeline_stages > 1 or vector:
        n = pipeline_stages if num_envs is None else num_envs
        if "layout" not in vector:  # (a layout sets the stages itself)
            vector["pipeline_stages"] = pipeline_stages
        vector.setdefault("startup_timeout", 1800.0)  # Isaac Sim's first launch builds shader caches
        return BatchedEnv(
            make_pipeline(_make_single, n, settings=settings, chunk=chunk, gamma=gamma, render_mode=render_mode, **vector)
        )
    return _make_single(settings=settings, chunk=chunk, gamma=gamma, render_mode=render_mode)


def _make_single(*, settings: BehaviorSettings, chunk: int | None, gamma: float | None, render_mode: str | None) -> Any:
    return wrap(behavior.make_sim(settings, render_mode=render_mode), chunk=chunk, render_mode=render_mode, gamma=gamma)
