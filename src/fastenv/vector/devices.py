"""Which GPU each worker renders on: spread over the visible GPUs, respecting ``CUDA_VISIBLE_DEVICES``.

A worker is pinned to one GPU by the environment it starts with: ``CUDA_VISIBLE_DEVICES=<id>``, so
CUDA, torch and SAPIEN (ManiSkill's renderer) see that GPU as their device 0. Its EGL device
(MuJoCo's and robosuite's, LIBERO's renderer) is not a CUDA id: the worker finds the EGL device that
is the same GPU by identity when it builds its first LIBERO env (``fastenv.gpus``), so an inherited
``MUJOCO_EGL_DEVICE_ID`` is dropped. Worker ``w`` gets GPU ``devices[w % len(devices)]``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from fastenv.gpus import nvidia_device_files as _nvidia_devices


def visible_gpus(environ: Mapping[str, str] | None = None, probe: Any = _nvidia_devices) -> list[str]:
    """The GPU ids workers may render on: ``CUDA_VISIBLE_DEVICES``'s entries where it is set (empty
    or "-1": none), else every NVIDIA GPU of the machine."""
    environ = os.environ if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return list(probe())
    entries = [entry.strip() for entry in listed.split(",") if entry.strip()]
    return [] if entries[:1] == ["-1"] else entries


def worker_environments(
    render_devices: Any, num_workers: int, environ: Mapping[str, str] | None = None, probe: Any = _nvidia_devices
) -> list[dict[str, str | None]]:
    """Per worker, the variables that pin it to its GPU (``render_devices``: None, "auto" or GPU ids).

    None: none (every worker inherits this process's environment). "auto": the visible GPUs, none
    if there are no GPUs. A list: those GPUs, each of which must be visible.
    """
    if render_devices is None:
        return [{} for _ in range(num_workers)]
    environ = os.environ if environ is None else environ
    visible = visible_gpus(environ, probe)
    where = "CUDA_VISIBLE_DEVICES=" + repr(environ["CUDA_VISIBLE_DEVICES"]) if "CUDA_VISIBLE_DEVICES" in environ else "the machine's NVIDIA devices"
    if isinstance(render_devices, str):
        if render_devices != "auto":
            raise ValueError(f"render_devices must be None, 'auto' or a list of GPU ids, got {render_devices!r}")
        chosen = visible
    else:
        if not isinstance(render_devices, Sequence) or not render_devices:
            raise ValueError(f"render_devices must be None, 'auto' or a non-empty list of GPU ids, got {render_devices!r}")
        chosen = []
        for device in render_devices:
            if isinstance(device, bool) or not isinstance(device, (int, str)) or not str(device).isdigit():
                raise ValueError(f"render_devices holds GPU ids (non-negative integers), got {device!r}")
            if str(device) not in visible:
                raise ValueError(f"render_devices: GPU {device} is not visible here; visible GPUs: {visible} (from {where})")
            chosen.append(str(device))
    if not chosen:
        return [{} for _ in range(num_workers)]
    # None: unset in the worker (it matches its EGL device to its GPU itself).
    return [{"CUDA_VISIBLE_DEVICES": chosen[w % len(chosen)], "MUJOCO_EGL_DEVICE_ID": None} for w in range(num_workers)]


__all__ = ["visible_gpus", "worker_environments"]
