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
world), ``vector_env`` (the batched env as a vector env). Here: ``make_sim`` (one CPU env as a
``SimEnv``), ``make_batched`` (a GPU env driven in place) and ``adopt``; the Gymnasium entry points
(``make_env``, ``make_vec``, ``make_cpu_env``) are assembled in ``fastenv.envs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fastenv.backends._vulkan import configure_vulkan
from fastenv.backends.maniskill.adapter import ManiSkillAdapter
from fastenv.backends.maniskill.batch import ManiSkillBatch
from fastenv.backends.maniskill.observations import (
    TEXTURES,
    extract,
    obs_mode_for,
    produced_keys,
    split_key,
)
from fastenv.backends.maniskill.task import (
    build,
    check_assets,
    cuda_available,
    fastenv_render_mode,
    maniskill_registry,
    registered_max_steps,
    uses_gpu,
    vulkan_unavailable_reason,
)
from fastenv.backends.maniskill.vector_env import ManiSkillVectorEnv
from fastenv.core import SimEnv
from fastenv.core.protocol import KEEP

__all__ = [
    "TEXTURES",
    "ManiSkillAdapter",
    "ManiSkillBatch",
    "ManiSkillVectorEnv",
    "adopt",
    "build",
    "check_assets",
    "check_task",
    "configure_vulkan",
    "cuda_available",
    "extract",
    "fastenv_render_mode",
    "make_batched",
    "make_sim",
    "obs_mode_for",
    "produced_keys",
    "split_key",
    "uses_gpu",
    "vulkan_unavailable_reason",
]


# -- construction ------------------------------------------------------------------------------------
def make_sim(
    env_id: str = "PickCube-v1",
    *,
    modalities: Sequence[str] | None = ("state",),
    camera_size: int | tuple[int, int] | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    ignore_terminations: bool = False,
    **env_kwargs: Any,
) -> SimEnv:
    """One ManiSkill env on ManiSkill's CPU simulation as a ``SimEnv`` (numpy in, numpy out)."""
    env_kwargs.setdefault("sim_backend", "physx_cpu")
    env = build(env_id, 1, modalities=modalities, camera_size=camera_size, render_mode=render_mode, **env_kwargs)
    if max_episode_steps is None:
        max_episode_steps = maniskill_registry()[env_id].max_episode_steps
    adapter = ManiSkillAdapter(env, keys=modalities, owned=True, ignore_terminations=ignore_terminations)
    return SimEnv(adapter, max_episode_steps=max_episode_steps)


def make_batched(
    env_id: str,
    num_envs: int,
    *,
    modalities: Sequence[str] | None,
    chunk: int | None,
    gamma: float | None,
    camera_size: int | tuple[int, int] | None,
    pipeline_stages: int,
    max_episode_steps: int | None,
    render_mode: str | None,
    sim_backend: str | None,
    ignore_terminations: bool = False,
    **env_kwargs: Any,
) -> ManiSkillVectorEnv:
    """N envs in one physics world on the GPU, driven in place by fastenv's executor."""
    env = build(
        env_id, num_envs, modalities=modalities, camera_size=camera_size, render_mode=render_mode,
        sim_backend=sim_backend or "physx_cuda", **env_kwargs,
    )
    if max_episode_steps is None:
        max_episode_steps = maniskill_registry()[env_id].max_episode_steps
    return ManiSkillVectorEnv(
        env, modalities=modalities, chunk=chunk, gamma=gamma, max_episode_steps=max_episode_steps,
        pipeline_stages=pipeline_stages, render_mode=fastenv_render_mode(render_mode), ignore_terminations=ignore_terminations,
    )


def check_task(env_id: str) -> None:
    """Refuse an unknown task, or one whose assets are not here, before any worker starts."""
    if env_id not in maniskill_registry():
        raise ValueError(f"unknown ManiSkill env_id {env_id!r}; known: {sorted(maniskill_registry())}")
    check_assets(env_id, maniskill_registry()[env_id])


def adopt(env: gym.Env, **options: Any) -> Any:
    """A ManiSkill env someone built (the registry's entry).

    A CPU env of one becomes a ``SimEnv`` (fastenv's wrappers then go on top); a batched env is
    driven in place as a ``ManiSkillVectorEnv`` built with ``wrap()``'s options.
    """
    base = env.unwrapped
    if int(base.num_envs) == 1 and not getattr(getattr(base, "device", None), "type", "cpu") == "cuda":
        return SimEnv(ManiSkillAdapter(env), max_episode_steps=registered_max_steps(env))
    if options.get("flatten") or options.get("episode_statistics") or not options.get("headless", True):
        raise ValueError("for batched ManiSkill envs wrap() takes chunk, modalities, gamma and render_mode")
    return ManiSkillVectorEnv(
        env, modalities=options.get("modalities"), chunk=options.get("chunk"), gamma=options.get("gamma"),
        render_mode=options.get("render_mode", KEEP),
    )


def __getattr__(name: str) -> Any:
    # These entry points lived here before the assembly layer: an old script is told their home,
    # which is named, not imported (fastenv.envs is the layer above).
    if name in ("make_env", "make_vec", "make_cpu_env"):
        raise AttributeError(f"{__name__}.{name} moved to fastenv.envs.maniskill.{name} (from fastenv.envs.maniskill import {name})")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
