"""ManiSkill3 backend (mani-skill 3.0.x on SAPIEN), the only package that imports ManiSkill.

ManiSkill runs its envs two ways, and fastenv follows:

- On CUDA (``sim_backend="physx_cuda"``) all parallel envs live in one physics system on the GPU.
  ``ManiSkillVectorEnv`` drives that batched env in place (``ManiSkillBatch`` under fastenv's
  executor) and keeps every tensor on its device.
- On the CPU (``physx_cpu``) a process holds one env. ``ManiSkillAdapter`` makes it a fastenv
  simulator adapter (numpy in, numpy out), and N of them run in fastenv's process (or Ray) workers
  with pipeline stages, dynamic batching and same-step autoreset, as LIBERO envs do.

Either way: headless (no viewer, no human-render camera unless ``render_mode="rgb_array"`` or
``"all"``; ManiSkill's frame-giving modes, "sensors" and "all" too, are "rgb_array" to fastenv);
pruning at the source (the obs mode asks only for the kept textures, sensors no kept key reads
are not built or not captured, images sized by ``camera_size``); sub-steps run the controller,
physics, evaluation (``get_info``) and reward without ``get_obs``, which is where ManiSkill
renders; the observation is taken at a chunk's end, and where an episode ends inside it.

Written against mani-skill 3.0.1 (``BaseEnv.step``, ``_step_action``, ``get_info``,
``get_reward``, ``get_obs``, ``reset(options={"env_idx": ...})``, ``scene.set_timestep``, the
agents' ``set_action`` and articulation drive targets).

A concern per module: ``task`` (the machine, finding and building a task lean), ``observations``
(keys, obs modes, what is captured), ``adapter`` (one CPU env), ``batch`` (many envs in one
world), ``vector_env`` (the batched env as a vector env); the entry points are here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv

from fastenv._validation import check_positive_int
from fastenv.backends._vulkan import configure_vulkan  # noqa: F401  (re-exported: its home before)
from fastenv.backends.base import KEEP
from fastenv.backends.maniskill.adapter import ManiSkillAdapter, _row  # noqa: F401  (_row: re-exported for the tests)
from fastenv.backends.maniskill.batch import ManiSkillBatch
from fastenv.backends.maniskill.observations import (
    TEXTURES,
    extract,
    obs_mode_for,
    produced_keys,
    split_key,
)
from fastenv.backends.maniskill.task import (
    _maniskill,
    _registered_max_steps,
    build,
    check_assets,
    cuda_available,
    fastenv_render_mode,
    uses_gpu,
    vulkan_unavailable_reason,
)
from fastenv.backends.maniskill.vector_env import ManiSkillVectorEnv

__all__ = [
    "TEXTURES",
    "ManiSkillAdapter",
    "ManiSkillBatch",
    "ManiSkillVectorEnv",
    "adopt",
    "build",
    "check_assets",
    "cuda_available",
    "extract",
    "make_cpu_env",
    "make_env",
    "make_vec",
    "obs_mode_for",
    "produced_keys",
    "split_key",
    "uses_gpu",
    "vulkan_unavailable_reason",
]


# -- construction ------------------------------------------------------------------------------------
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
    from fastenv.core import SimEnv
    from fastenv.wrappers import wrap

    env_kwargs.setdefault("sim_backend", "physx_cpu")
    env = build(env_id, 1, modalities=modalities, camera_size=camera_size, render_mode=render_mode, **env_kwargs)
    if max_episode_steps is None:
        max_episode_steps = _maniskill()[env_id].max_episode_steps
    adapter = ManiSkillAdapter(env, keys=modalities, owned=True, ignore_terminations=ignore_terminations)
    sim = SimEnv(adapter, max_episode_steps=max_episode_steps)
    return wrap(sim, chunk=chunk, gamma=gamma, render_mode=fastenv_render_mode(render_mode), episode_statistics=episode_statistics)


_VECTOR_OPTIONS = ("num_workers", "step_timeout", "startup_timeout", "threads_per_worker", "max_restarts", "spin_wait", "info_format", "context", "backend", "ray_options", "layout", "tune_options", "render_devices")


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
    (``PipelineVectorEnv``: ``num_workers``, ``backend="ray"`` and the other vector options apply).

    Examples:
        >>> envs = gym.make_vec("fastenv/ManiSkill-v0", num_envs=8, env_id="PickCube-v1", chunk=8)
    """
    num_envs = check_positive_int("num_envs", num_envs)
    vector = {key: kwargs.pop(key) for key in _VECTOR_OPTIONS if key in kwargs}
    if uses_gpu(num_envs, sim_backend):
        if vector:
            raise ValueError(f"{sorted(vector)} are options of the CPU workers; a GPU env is batched in one process")
        ignore_terminations = kwargs.pop("ignore_terminations", False)
        env = build(
            env_id, num_envs, modalities=modalities, camera_size=camera_size, render_mode=render_mode,
            sim_backend=sim_backend or "physx_cuda", **kwargs,
        )
        if max_episode_steps is None:
            max_episode_steps = _maniskill()[env_id].max_episode_steps
        return ManiSkillVectorEnv(
            env, modalities=modalities, chunk=chunk, gamma=gamma, max_episode_steps=max_episode_steps,
            pipeline_stages=pipeline_stages or 1, render_mode=fastenv_render_mode(render_mode), ignore_terminations=ignore_terminations,
        )
    from fastenv.vector import make_pipeline

    if env_id not in _maniskill():  # fail here, not in every worker
        raise ValueError(f"unknown ManiSkill env_id {env_id!r}; known: {sorted(_maniskill())}")
    check_assets(env_id, _maniskill()[env_id])
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
    from fastenv.vector import BatchedEnv

    if num_envs is None and not uses_gpu(1, kwargs.get("sim_backend")) and "pipeline_stages" not in kwargs:
        return make_cpu_env(**kwargs)
    return BatchedEnv(make_vec(1 if num_envs is None else num_envs, **kwargs))


def adopt(env: gym.Env, **options: Any) -> Any:
    """A ManiSkill env someone built (the registry's entry).

    A CPU env of one becomes a ``SimEnv`` (fastenv's wrappers then go on top); a batched env is
    driven in place as a ``ManiSkillVectorEnv`` built with ``wrap()``'s options.
    """
    base = env.unwrapped
    if int(base.num_envs) == 1 and not getattr(getattr(base, "device", None), "type", "cpu") == "cuda":
        from fastenv.core import SimEnv

        return SimEnv(ManiSkillAdapter(env), max_episode_steps=_registered_max_steps(env))
    if options.get("flatten") or options.get("episode_statistics") or not options.get("headless", True):
        raise ValueError("for batched ManiSkill envs wrap() takes chunk, modalities, gamma and render_mode")
    return ManiSkillVectorEnv(
        env, modalities=options.get("modalities"), chunk=options.get("chunk"), gamma=options.get("gamma"),
        render_mode=options.get("render_mode", KEEP),
    )
