"""``fastenv doctor``: what this machine and its install give fastenv's fast paths, and what to do where
one does not serve.

In the spirit of ``numpy.show_runtime()`` and ``python -m torch.utils.collect_env``: facts read from
this process (the CPU's SIMD extensions, numpy's BLAS and the kernel set it dispatched to, what
numba compiles for and whether its cache holds LIBERO's control loop for this CPU, the MuJoCo and
GL a LIBERO env renders with, whether SAPIEN finds a Vulkan device for ManiSkill), then one LIBERO
env built and stepped here, and for each of its fast paths whether it serves; where one steps
aside, the line it said and what to change.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
import warnings
from typing import Any

from fastenv.core.fast_paths import FastPath

# What to do where a LIBERO fast path steps aside: the first hint whose words appear in its lines.
# Each fast path gives the same data either way: stepping aside costs time, never equality.
_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("numba is not installed",), "install numba: {numba}"),
    (("background",), "it is compiling in a background process: wait for it, or run `fastenv compile` once per machine"),
    (("numpy's BLAS", "CBLAS", "np.dot differs"),
     "use numpy's own wheel from PyPI, whose OpenBLAS fastenv calls as numpy does (`pip install --force-reinstall numpy`), "
     "or report this output as an issue"),
    (("np.convolve",), "report this output as an issue: this numpy sums a short convolution in a way fastenv does not reproduce"),
    (("mj_fullM", "mj_implicit", "split in two", "mj_copyData"),
     "use a MuJoCo the stacks table lists as serving (docs/backends/libero-stacks.md), e.g. 3.3 or later"),
    (("not compiled with numba",), "let robosuite compile its controller with numba (unset robosuite's numba switch)"),
    (("reproduces",), "this env's robot, controller or contact check is not the one the fast path reproduces: nothing to change"),
    (("differs from robosuite", "torques differ"),
     "report this output as an issue: the compiled arithmetic differs from robosuite's on this machine (docs/troubleshooting.md)"),
)
_SWITCHES = {  # fast paths a user can turn off, and how they were turned off
    FastPath.IN_PLACE_RESET: "hard_reset=True was asked for: pass hard_reset=False (the default) for resets in place",
    FastPath.FAST_CONTROL_LOOP: "fast_substep=False was asked for: leave it True (the default)",
    FastPath.SHARED_RENDER_CONTEXT: "FASTENV_SHARE_RENDER=0 is set: unset it",
}


def cpu() -> dict[str, Any]:
    """The CPU: its model, the cores this process may use, the SIMD extensions numpy found."""
    from fastenv.machine import available_cpus

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    except OSError:
        pass
    features: dict[str, bool] = {}
    try:
        from numpy._core._multiarray_umath import (
            __cpu_features__ as features,  # numpy 2
        )
    except ImportError:
        try:
            from numpy.core._multiarray_umath import (
                __cpu_features__ as features,  # numpy 1
            )
        except ImportError:
            pass
    simd = [name for name in ("SSE42", "AVX", "AVX2", "FMA3", "AVX512F", "AVX512_SKX", "AVX512_ICL", "AVX512_SPR", "ASIMD", "SVE")
            if features.get(name)]
    return {"model": model, "machine": platform.machine(), "cpus_available": available_cpus(), "cpu_count": os.cpu_count(), "simd": simd}


def versions() -> dict[str, str]:
    import importlib.metadata as metadata

    out = {"python": platform.python_version()}
    for name in ("fastenv-rl", "numpy", "numba", "gymnasium", "mujoco", "robosuite", "torch", "mani-skill", "threadpoolctl"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def compiled_loop() -> dict[str, Any]:
    """numpy's BLAS, how it sums a convolution, numba's target, and whether numba's cache holds LIBERO's
    control loop compiled for this CPU."""
    from fastenv.backends.libero import machine_facts
    from fastenv.backends.libero.task import import_libero

    import_libero()  # MuJoCo's GL platform chosen before MuJoCo is imported, robosuite's import notices dropped
    out = machine_facts.describe()
    if importlib.util.find_spec("numba") is None or importlib.util.find_spec("robosuite") is None:
        out["cache"] = None
        return out
    from fastenv.backends.libero import compiled

    built = compiled.kernel()
    cache: dict[str, Any] = {"functions": list(compiled.KERNELS)}
    if built is not None:
        kernels = built._kernels
        cache["folder"] = kernels.control._cache._cache_path
        cache["writable"] = os.access(cache["folder"], os.W_OK) if os.path.isdir(cache["folder"]) else None
        cache["for this CPU"] = {name: machine_facts.cached_here(getattr(kernels, name)) for name in compiled.KERNELS}
        cache["not run here"] = compiled.unused(kernels)
        cache["complete"] = compiled.cached(kernels)
    out["cache"] = cache
    return out


def libero_env(suite: str, task_id: int, camera_size: int = 64) -> dict[str, Any]:
    """Build one LIBERO env here (one camera), step it, and say which fast paths serve it and what
    the ones that do not said."""
    import gymnasium as gym
    import numpy as np

    from fastenv.backends.libero import compiled
    from fastenv.backends.libero.mujoco_facts import installed_stack

    out: dict[str, Any] = {"task": f"{suite}/{task_id}", "stack": installed_stack(), "MUJOCO_GL": os.environ.get("MUJOCO_GL")}
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", RuntimeWarning)
        env = gym.make("fastenv/Libero-v0", suite=suite, task_id=task_id, chunk=4, camera_size=camera_size,
                       modalities=("agentview_image", "robot0_proprio-state"))
        try:
            env.reset(seed=0)
            compiled.wait_ready(timeout=180.0)  # a background compile this call started: its result, not the Python loop's
            for _ in range(3):
                env.step(np.zeros(env.action_space.shape, dtype=env.action_space.dtype))
            out["fast_paths"] = env.unwrapped.fast_paths()
            out["renderer"] = _gl_renderer(env.unwrapped.adapter._raw)
            out["render"] = env.unwrapped.renderer()
        finally:
            env.close()
    out["seconds"] = round(time.perf_counter() - start, 1)
    lines = list(dict.fromkeys(str(w.message) for w in said if str(w.message).startswith("fastenv:")))
    out["said"] = lines
    out["aside"] = {path: advice(path, lines) for path, on in out["fast_paths"].items() if not on}
    return out


def advice(path: str, lines: list[str]) -> dict[str, str]:
    """Why ``path`` does not serve (the lines that name it, else all) and what to do."""
    from fastenv._deps import install_command

    words = {FastPath.COMPILED_POLICY_STEP: ("policy step",)}.get(path, (path,))
    mine = [line for line in lines if any(w in line for w in words)]
    if not mine and path in _SWITCHES:  # it said nothing: it was turned off
        return {"why": "turned off", "do": _SWITCHES[path]}
    why = " ".join(mine or lines) or "it did not serve and said nothing (run with python -W always to see its warnings)"
    for keys, hint in _HINTS:
        if any(k in why for k in keys):
            return {"why": why, "do": hint.format(numba=install_command("numba"))}
    return {"why": why, "do": "see docs/troubleshooting.md (\"A fast path steps aside\")"}


def _gl_renderer(raw: Any) -> str | None:
    """The OpenGL renderer the env's camera renders with (GL_RENDERER), where PyOpenGL can ask."""
    from fastenv.backends.libero.adapter import make_gl_current

    try:
        make_gl_current(raw)
        from OpenGL.GL import GL_RENDERER, GL_VERSION, glGetString

        return f"{glGetString(GL_RENDERER).decode()} (OpenGL {glGetString(GL_VERSION).decode()})"
    except Exception:
        return None


def maniskill() -> dict[str, Any]:
    """Whether ManiSkill is installed and SAPIEN finds a Vulkan device (asked in a child process:
    SAPIEN and MuJoCo's GL do not share a process here)."""
    if importlib.util.find_spec("mani_skill") is None:
        from fastenv._deps import install_command

        return {"installed": False, "do": install_command("maniskill")}
    code = (
        "import json; from fastenv.backends.maniskill.task import vulkan_unavailable_reason as r; why = r(); summary = None\n"
        "if why is None:\n"
        "    import sapien; summary = sapien.render.get_device_summary()\n"
        "print(json.dumps({'why': why, 'devices': summary}))"
    )
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        found = json.loads(run.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError) as error:
        return {"installed": True, "vulkan": False, "why": f"the probe failed ({error})", "do": "bash scripts/vulkan.sh"}
    devices = [line.strip() for line in (found["devices"] or "").splitlines() if line.strip().startswith("GPU:")]
    return {"installed": True, "vulkan": found["why"] is None, "why": found["why"], "devices": devices}


def render_devices() -> dict[str, Any]:
    """The GPUs and what renders on them (``fastenv.gpus.report``): CUDA's devices, EGL's list, the
    EGL device matched to each CUDA device, the EGL and Vulkan vendor libraries found."""
    from fastenv import gpus

    return gpus.report()


def _renderer(env: Any) -> dict[str, Any]:
    import os

    return {**env.unwrapped.renderer(), "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}


def worker_renderers(suite: str, task_id: int, num_workers: int) -> list[dict[str, Any]]:
    """What each of ``num_workers`` vector-env workers renders with, one per visible GPU
    (``render_devices="auto"``), each building one LIBERO env with a 32-px camera."""
    import functools

    from fastenv.envs.libero import make_env
    from fastenv.vector import PipelineVectorEnv

    make = functools.partial(make_env, suite, task_id, camera_size=32, modalities=("agentview_image",))
    envs = PipelineVectorEnv([make] * num_workers, num_workers=num_workers, render_devices="auto")
    try:
        return list(envs.apply(_renderer))
    finally:
        envs.close()


def diagnose(suite: str = "libero_goal", task_id: int = 3, env: bool = True) -> dict[str, Any]:
    """Everything ``fastenv doctor`` reports, as a dict."""
    from fastenv import gpus

    report: dict[str, Any] = {"cpu": cpu(), "versions": versions(), "render devices": render_devices()}
    libero = importlib.util.find_spec("libero") is not None
    if libero:
        report["compiled loop"] = compiled_loop()
        if env:
            report["libero env"] = libero_env(suite, task_id)
            visible = len(report["render devices"]["cuda"] or []) if gpus.nvidia_gpu_visible() else 0
            if visible:
                report["workers"] = worker_renderers(suite, task_id, visible)
    else:
        from fastenv._deps import install_command

        report["libero"] = {"installed": False, "do": install_command("libero")}
    report["maniskill"] = maniskill()
    return report


def format_render(report: dict[str, Any]) -> list[str]:
    """The GPUs, EGL's devices and their match, the vendor libraries, each worker's renderer."""
    r = report.get("render devices")
    if r is None:
        return []
    lines = []
    cuda, egl = r["cuda"], r["egl"]
    lines.append("  GPUs      " + ("no CUDA driver" if cuda is None else "CUDA sees none" if not cuda else "; ".join(
        f"CUDA {d['index']}: {d['name']} ({d['uuid']}, PCI {d['pci_bus_id']}) -> EGL device "
        + (f"{m['egl_device']} (by {m['by']})" if (m := r["matches"][str(d["index"])])["egl_device"] is not None else f"NONE: {m['why']}")
        for d in cuda)))
    if egl is not None:
        lines.append("  EGL       devices: " + ("; ".join(
            f"#{d['index']} {'NVIDIA' if d['nvidia'] else 'CPU (Mesa)' if d['software'] else d['driver'] or 'other'}"
            + (f" {d['uuid']}" if d["uuid"] else "") for d in egl) or "none"))
    libs = r["vendor_libraries"]
    lines.append("  vendors   " + "; ".join(
        f"{name}: " + (", ".join(f"{f['library']} ({'loads' if f['loadable'] else 'does NOT load'})" for f in libs[api]) or "none found")
        for api, name in (("egl", "EGL"), ("vulkan", "Vulkan"))))
    for w in report.get("workers", []):
        lines.append(f"  worker    pid {w['pid']} (CUDA_VISIBLE_DEVICES={w['CUDA_VISIBLE_DEVICES']}): {w['renderer']} ({w['api']}"
                     + (f", EGL device {w['egl_device']} by {w['matched_by']}" if w.get("egl_device") is not None else "")
                     + (", CPU renderer" if w["software"] else "") + ")")
    return lines


def format_report(report: dict[str, Any]) -> str:
    """The report as one screen of text."""
    c, v = report["cpu"], report["versions"]
    lines = [
        "fastenv doctor",
        f"  CPU       {c['model']} ({c['machine']}), {c['cpus_available']} of {c['cpu_count']} CPUs usable; "
        f"SIMD: {', '.join(c['simd']) or 'unknown'}",
        "  versions  " + ", ".join(f"{k} {x}" for k, x in v.items()),
    ]
    loop = report.get("compiled loop")
    if loop is not None:
        b, n = loop["blas"], loop["numba"]
        kernel = f"{b['core_type']} kernels" if b["core_type"] else "kernel set unknown (pip install threadpoolctl tells)"
        forced = f", forced by OPENBLAS_CORETYPE={b['OPENBLAS_CORETYPE']}" if b["OPENBLAS_CORETYPE"] else ""
        lines.append(f"  BLAS      numpy's: {b['vendor']} {b['version'] or ''} ({b['library']}), {kernel}{forced}; "
                     + ("the compiled loop calls it as numpy does (np.dot equal)" if b["np.dot equal"] else f"NOT USABLE: {b['why']}"))
        form = loop["convolve_form"]
        lines.append("  convolve  numpy sums np.convolve's short kernel " + {
            "sequential": "in order, in its own loop (not BLAS): reproduced", "fused": "in order with fused multiply-adds: reproduced",
            "blas": "with BLAS ddot: reproduced"}.get(form, "in a way fastenv does not reproduce: the compiled loop steps aside"))
        goal = loop.get("set_goal")
        if goal is not None:
            lines.append("  set_goal  numpy's norm, cos, sin and 3 x 3 np.dot in robosuite's set_goal: " + (
                "reproduced (it runs compiled, an env step in one call)" if goal["reproduced"]
                else f"not reproduced ({goal['why']}): robosuite's set_goal runs in Python"))
        if n.get("numba"):
            simd = "AVX-512" if n["avx512"] else "AVX2" if n["avx2"] else "no AVX2"
            chosen = f" (NUMBA_CPU_NAME={n['cpu_name_set']})" if n["cpu_name_set"] else ""
            lines.append(f"  numba     {n['numba']} compiles for {n['cpu_name']}{chosen}, {simd}")
        cache = loop.get("cache")
        if cache and "folder" in cache:
            here = [name for name, ok in cache["for this CPU"].items() if ok]
            state = ("holds the control loop compiled for this CPU" if cache["complete"]
                     else f"holds {len(here)} of {len(cache['functions'])} functions for this CPU: `fastenv compile` fills it")
            unused = f"; not run here: {', '.join(cache['not run here'])}" if cache["not run here"] else ""
            lines.append(f"  cache     {cache['folder']}: {state}{unused}")
    env = report.get("libero env")
    if env is not None:
        stack = ", ".join(f"{k} {x}" for k, x in env["stack"].items() if k in ("libero distribution", "robosuite", "mujoco"))
        lines.append(f"  LIBERO    {stack}; MUJOCO_GL={env['MUJOCO_GL']}; renderer: {env['renderer'] or 'unknown'}")
        lines.append(f"  fast paths of a LIBERO env ({env['task']}, built and stepped here in {env['seconds']} s):")
        for path, on in env["fast_paths"].items():
            lines.append(f"    {'serves' if on else 'ASIDE '}  {path}")
            if not on:
                lines.append(f"            why: {env['aside'][path]['why']}")
                lines.append(f"            do:  {env['aside'][path]['do']}")
    elif "libero" in report:
        lines.append(f"  LIBERO    not installed: {report['libero']['do']}")
    m = report["maniskill"]
    if not m["installed"]:
        lines.append(f"  ManiSkill not installed: {m['do']}")
    elif m["vulkan"]:
        lines.append(f"  ManiSkill Vulkan device found: {'; '.join(d.removeprefix('GPU: ') for d in m['devices'][:3]) or 'yes'}")
    else:
        lines.append(f"  ManiSkill NO Vulkan device: {m['why']}")
    lines += format_render(report)
    aside = list(env["aside"]) if env else []
    lines.append("All of a LIBERO env's fast paths serve here." if env and not aside else
                 f"Stepping aside here: {', '.join(aside)} (same data, more time)." if aside else "")
    return "\n".join(line for line in lines if line)
