"""ManiSkill's Gymnasium entry points: a CPU env in fastenv's stack and workers, or a GPU env driven in place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv._validation import check_positive_int
from fastenv.backends import maniskill
from fastenv.envs.options import VECTOR_OPTIONS, split_options
from fastenv.vector import BatchedEnv, make_pipeline
from fastenv.vector.pipeline import autoreset_mode_of
from fastenv.wrappers import wrap

__all__ = ["make_cpu_env", "make_env", "make_vec"]


def make_cpu_env(
    env_id: str = "PickCube-v1",
    *,
    modalities: Sequence[str] | None = ("state",),
    chunk: int | None = 8,
    gamma: float | None = None,
    camera_size: int | tuple[int, int] | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    episode_statistics: bool = False,
    ignore_terminations: bool = False,
    **env_kwargs: Any,
) -> gym.Env:
    """One ManiSkill env on ManiSkill's CPU simulation, in fastenv's single-env stack (numpy)."""
    sim = maniskill.make_sim(
        env_id, modalities=modalities, camera_size=camera_size, max_episode_steps=max_episode_steps,
        render_mode=render_mode, ignore_terminations=ignore_terminations, **env_kwargs,
    )
    return wrap(sim, chunk=chunk, gamma=gamma, render_mode=maniskill.fastenv_render_mode(render_mode), episode_statistics=episode_statistics)


def make_vec(
    num_envs: int = 1,
    *,
    env_id: str = "PickCube-v1",
    modalities: Sequence[str] | None = ("state",),
    chunk: int | None = 8,
    gamma: float | None = None,
    camera_size: int | tuple[int, int] | None = None,
    pipeline_stages: int | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    sim_backend: str | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """A ManiSkill task built lean for RL, as a vector env (``fastenv/ManiSkill-v0``).

    With CUDA (or ``sim_backend="physx_cuda"``) the N envs are one batched env on the GPU,
    driven in place (``ManiSkillVectorEnv``). Without, each is a CPU env in fastenv's workers
    (``PipelineVectorEnv``: ``num_workers``, ``backend="ray"`` and the other vector options apply,
    flat or apart as ``vector_kwargs={...}`` when called directly: ``gym.make_vec`` keeps
    ``vector_kwargs`` for its own vector envs).

    Examples:
        >>> envs = gym.make_vec("fastenv/ManiSkill-v0", num_envs=8, env_id="PickCube-v1", chunk=8)
    """
    num_envs = check_positive_int("num_envs", num_envs)
    _, vector = split_options(make_cpu_env, {key: kwargs.pop(key) for key in (*VECTOR_OPTIONS, "vector_kwargs") if key in kwargs})
    if maniskill.uses_gpu(num_envs, sim_backend):
        mode = autoreset_mode_of(vector.pop("autoreset_mode", AutoresetMode.SAME_STEP))
        if mode is not AutoresetMode.SAME_STEP:
            raise ValueError(f"the GPU env (batched in one process) autoresets in the same step only: autoreset_mode must be SAME_STEP, got {mode}; "
                             "the CPU workers (sim_backend='physx_cpu') run every mode, RLlib's NEXT_STEP among them")
        if vector:
            raise ValueError(f"{sorted(vector)} are options of the CPU workers; a GPU env is batched in one process")
        return maniskill.make_batched(
            env_id, num_envs, modalities=modalities, chunk=chunk, gamma=gamma, camera_size=camera_size,
            pipeline_stages=pipeline_stages or 1, max_episode_steps=max_episode_steps, render_mode=render_mode,
            sim_backend=sim_backend, **kwargs,
        )
    maniskill.check_task(env_id)  # fail here, not in every worker
    if sim_backend is not None:
        kwargs["sim_backend"] = sim_backend
    if pipeline_stages is not None:
        vector["pipeline_stages"] = pipeline_stages
    return make_pipeline(
        make_cpu_env, num_envs, env_id=env_id, modalities=modalities, chunk=chunk,
        gamma=gamma, camera_size=camera_size, max_episode_steps=max_episode_steps, render_mode=render_mode,
        **vector, **kwargs,
    )


def make_env(num_envs: int | None = None, **kwargs: Any) -> gym.Env:
    """``gym.make("fastenv/ManiSkill-v0", env_id=..., ...)``: one CPU env, or with ``num_envs`` the
    vector env as one batched gymnasium.Env."""
    if num_envs is None and not maniskill.uses_gpu(1, kwargs.get("sim_backend")) and "pipeline_stages" not in kwargs:
        return make_cpu_env(**kwargs)
    return BatchedEnv(make_vec(1 if num_envs is None else num_envs, **kwargs))
