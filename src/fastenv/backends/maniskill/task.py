"""ManiSkill's tasks: whether this machine can run them, finding one and its assets, building it lean."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fastenv import gpus
from fastenv._deps import require
from fastenv.backends._vulkan import configure_vulkan
from fastenv.backends.maniskill.observations import obs_mode_for

# ManiSkill's render modes that give frames as arrays ("sensors": the cameras' images tiled; "all":
# those and the human-render cameras'). fastenv's wrappers call all of them "rgb_array".
FRAME_RENDER_MODES = ("rgb_array", "sensors", "all")


def fastenv_render_mode(render_mode: str | None) -> str | None:
    """The render mode fastenv's wrappers see for a ManiSkill one: "rgb_array" for any that gives frames."""
    return "rgb_array" if render_mode in FRAME_RENDER_MODES else render_mode


# -- the machine -----------------------------------------------------------------------------------
def vulkan_unavailable_reason() -> str | None:
    """Why ManiSkill cannot build its envs here, or None when SAPIEN finds a rendering device."""
    configure_vulkan()
    try:
        import sapien
    except ImportError:
        from fastenv._deps import install_command

        return f"ManiSkill is not installed ({install_command('maniskill')})"
    try:
        sapien.render.RenderMaterial()  # building any task creates render materials
    except RuntimeError as exc:
        return (
            f"no Vulkan rendering device: SAPIEN says {exc!r} (ManiSkill needs one to build any task; "
            "bash scripts/vulkan.sh installs Mesa's CPU driver on Debian 12)"
        )
    return None


def cuda_available() -> bool:
    """True when torch sees a CUDA device (ManiSkill's GPU simulation can run)."""
    torch = sys.modules.get("torch") or require("torch", "maniskill", "PyTorch")
    return bool(torch.cuda.is_available())


def maniskill_registry() -> Any:
    configure_vulkan()
    require("mani_skill", "maniskill", "ManiSkill3 (the PyPI package mani-skill)")
    import mani_skill.envs  # noqa: F401  (registers the tasks)
    from mani_skill.utils.registration import REGISTERED_ENVS

    return REGISTERED_ENVS


def check_assets(env_id: str, spec: Any) -> None:
    """Refuse a task whose assets are not downloaded (ManiSkill would ask on stdin, then fail offline)."""
    from mani_skill.utils import assets

    missing = []
    for asset_id in spec.asset_download_ids or []:
        ids = (
            assets.expand_data_group_into_individual_data_source_ids(asset_id)
            if asset_id in assets.DATA_GROUPS
            else [asset_id]
        )
        missing += [i for i in ids if not assets.is_data_source_downloaded(i)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(
            f"ManiSkill task {env_id!r} needs assets that are not downloaded ({shown}); download them first "
            f"(needs internet): python -m mani_skill.utils.download_asset {env_id}"
        )


# -- ManiSkill's render-device fallback -------------------------------------------------------------
RENDER_FALLBACK = 'but CUDA device was not found. Falling back to "cpu" device'


class _RenderFallbackFilter:
    """Drops ManiSkill's per-env 'Requested to use render device "sapien_cuda", but CUDA device was not
    found. Falling back to "cpu" device' on a machine without CUDA, where rendering on the CPU's
    Vulkan device is what is meant (ManiSkill's default render_backend asks for CUDA); every other
    record passes, and so does this one where torch sees CUDA (there SAPIEN not finding it is news)."""

    def filter(self, record: Any) -> bool:
        return RENDER_FALLBACK not in record.getMessage() or cuda_available()


def quiet_render_fallback() -> None:
    """Install the filter on ManiSkill's logger, once per process."""
    from mani_skill.utils.logging_utils import logger

    if not any(isinstance(f, _RenderFallbackFilter) for f in logger.filters):
        logger.addFilter(_RenderFallbackFilter())


# -- building a task -------------------------------------------------------------------------------
def uses_gpu(num_envs: int, sim_backend: str | None) -> bool:
    """Whether a ManiSkill task should run batched on the GPU (else: one CPU env per process)."""
    if sim_backend is not None and sim_backend != "auto":
        return "cuda" in sim_backend or sim_backend == "gpu"
    return num_envs > 1 and cuda_available()


def build(
    env_id: str,
    num_envs: int,
    *,
    modalities: Sequence[str] | None,
    camera_size: int | tuple[int, int] | None,
    render_mode: str | None,
    **env_kwargs: Any,
) -> gym.Env:
    """A ManiSkill task built lean: only the kept textures and cameras, no human-render camera unless asked."""
    registered = maniskill_registry()
    if env_id not in registered:
        raise ValueError(f"unknown ManiSkill env_id {env_id!r}; known: {sorted(registered)}")
    spec = registered[env_id]
    check_assets(env_id, spec)
    quiet_render_fallback()
    keys = list(modalities) if modalities is not None else None
    cameras = None
    if keys is not None:
        cameras = frozenset(k.rsplit("_", 1)[0] for k in keys if k != "state")
        env_kwargs.setdefault("obs_mode", obs_mode_for(keys, sorted(cameras)))
    if camera_size is not None:
        h, w = (camera_size, camera_size) if isinstance(camera_size, int) else camera_size
        env_kwargs.setdefault("sensor_configs", dict(width=w, height=h))
    cls = type(spec.cls.__name__, (_Pruned, spec.cls), {"_fastenv_cameras": cameras, "_fastenv_render": render_mode in ("rgb_array", "all")})
    env = cls(num_envs=num_envs, render_mode=render_mode, **{**spec.default_kwargs, **env_kwargs})
    note_render_device(env)
    return env


def note_render_device(env: Any) -> dict[str, Any] | None:
    """Record the Vulkan device SAPIEN renders this process's envs on (``fastenv.gpus``): the CUDA
    device's own (SAPIEN matches its Vulkan device to CUDA's), else the first Vulkan device that
    renders (on a machine without CUDA, Mesa's lavapipe). Said once where that is the CPU beside a GPU."""
    if gpus.renderer_in_use() is not None:
        return gpus.renderer_in_use()
    device = getattr(env.unwrapped, "_render_device", None)
    if device is None or not hasattr(device, "is_cuda"):
        return None
    if device.is_cuda():
        return gpus.note_renderer("Vulkan", device.name, f"cuda:{device.cuda_id}, PCI {device.pci_string}")
    import sapien

    names = [line.split(":", 1)[1].strip() for line in sapien.render.get_device_summary().splitlines() if line.startswith("GPU:")]
    return gpus.note_renderer("Vulkan", names[0] if names else None, str(device))


class _Pruned:
    """Mixin for a ManiSkill task class: only the kept sensors, no human-render cameras unless asked."""

    _fastenv_cameras: frozenset[str] | None = None
    _fastenv_render: bool = False

    @property
    def _default_sensor_configs(self) -> Any:
        from mani_skill.sensors.camera import parse_camera_configs

        configs = parse_camera_configs(super()._default_sensor_configs)
        if self._fastenv_cameras is None:
            return list(configs.values())
        # a digital twin loads its green-screen overlay for each of these cameras (kept or not)
        overlaid = set(getattr(self, "rgb_overlay_paths", None) or ())
        return [c for uid, c in configs.items() if uid in self._fastenv_cameras or uid in overlaid]

    @property
    def _default_human_render_camera_configs(self) -> Any:
        return super()._default_human_render_camera_configs if self._fastenv_render else []


# -- a built env -----------------------------------------------------------------------------------
def registered_max_steps(env: gym.Env) -> int | None:
    current = env
    while current is not None:
        for name in ("_max_episode_steps", "max_episode_steps"):
            value = getattr(current, name, None)
            if isinstance(value, int):
                return value
        current = getattr(current, "env", None)
    spec = getattr(env, "spec", None)
    return getattr(spec, "max_episode_steps", None)


def close_viewer(base: Any) -> None:
    if getattr(base, "_viewer", None) is not None:
        base._viewer.close()
        base._viewer = None
