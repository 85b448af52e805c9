"""What this process may use of the machine: CPUs (cgroup limits included), memory, GPUs.

``os.cpu_count()`` counts the host's cores; a container or a batch job is usually given fewer,
through its CPU affinity or a cgroup CPU quota. Layouts are planned with what the process
actually gets.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from pathlib import Path
from typing import Any

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_quota(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs allowed by the cgroup's quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            return quota_us / period_us
    except (OSError, ValueError):
        pass
    return None


def available_cpus(root: Path = CGROUP_ROOT) -> int:
    """CPUs this process may use: its affinity, capped by a cgroup CPU quota (rounded up), at least 1.

    Examples:
        >>> available_cpus() <= (os.cpu_count() or 1)
        True
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    quota = _cgroup_quota(root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def available_memory(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes of memory this process may still use: MemAvailable, capped by a cgroup limit; None if unknown."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    try:
        limit = (root / "memory.max").read_text().strip()
        if limit != "max":
            used = int((root / "memory.current").read_text())
            left = int(limit) - used
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


CPU_ROOT = Path("/sys/devices/system/cpu")


def parse_cpu_list(text: str) -> list[int]:
    """CPUs of a sysfs list such as ``"0,8"`` or ``"0-1,4"``.

    Examples:
        >>> parse_cpu_list("0-2,8")
        [0, 1, 2, 8]
    """
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        out += list(range(int(low), int(high or low) + 1))
    return out


def thread_siblings(cpu: int, root: Path = CPU_ROOT) -> list[int]:
    """The logical CPUs sharing ``cpu``'s physical core (SMT, hyper-threads), itself included; [cpu] if unknown."""
    try:
        siblings = parse_cpu_list((root / f"cpu{cpu}" / "topology" / "thread_siblings_list").read_text())
    except (OSError, ValueError):
        return [cpu]
    return sorted(set(siblings) | {cpu})


def split_cores(count: int, available: list[int] | None = None, root: Path = CPU_ROOT) -> tuple[list[int], list[int]]:
    """(``count`` CPUs for one process, the rest) among ``available`` (default: this process's affinity).

    Whole physical cores go to the first part: a CPU's SMT siblings join it, so no other process
    shares its core's execution units, as long as the rest keeps at least one CPU. With no more
    than ``count`` CPUs available, both parts are all of them.
    """
    available = sorted(os.sched_getaffinity(0)) if available is None else sorted(available)
    if len(available) <= count:
        return available, available
    first: list[int] = []
    for cpu in available:
        if len(first) >= count:
            break
        if cpu not in first:
            first += [s for s in thread_siblings(cpu, root) if s in available and s not in first]
    rest = [c for c in available if c not in first]
    if not rest:  # whole cores would leave nothing: the plain split
        return available[:count], available[count:]
    return sorted(first), rest


def process_memory(pid: int) -> int | None:
    """Resident memory of process ``pid`` in bytes (Linux), None if unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def release_free_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing).

    Building a simulator frees large transient buffers that glibc keeps in the process; after a
    build they would count in its resident memory (and in ``fastenv tune``'s memory figures)
    although nothing uses them.
    """
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None


def gpu_count() -> int:
    """CUDA GPUs visible to torch, if torch is already imported (importing it here would cost seconds); else 0."""
    torch = sys.modules.get("torch")
    if torch is None:
        return 0
    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception:  # a broken CUDA install: no usable GPU
        return 0


def describe() -> dict[str, object]:
    """The machine as a layout plan records it."""
    memory = available_memory()
    return {
        "cpus": available_cpus(),
        "cpu_count": os.cpu_count(),
        "memory_available_gb": None if memory is None else round(memory / 2**30, 2),
        "gpus": gpu_count(),
    }


def _cpu_model() -> str | None:
    """The CPU's model name (Linux's /proc/cpuinfo), None where not read."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return None


def measured_on() -> dict[str, Any]:
    """What a benchmark's numbers were measured on: the CPU, Python, and the kernel set numpy's BLAS runs there."""
    import platform

    out: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "mujoco_gl": os.environ.get("MUJOCO_GL"),
    }
    numba = sys.modules.get("numba")
    if numba is not None:  # what numba compiled the benchmark's code for (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES where set)
        from numba.core.registry import cpu_target

        out["numba_target"] = {"cpu_name": cpu_target.target_context.codegen().magic_tuple()[1],
                               "NUMBA_CPU_NAME": os.environ.get("NUMBA_CPU_NAME"), "NUMBA_CPU_FEATURES": os.environ.get("NUMBA_CPU_FEATURES")}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return out
    blas = [i for i in threadpool_info() if i.get("user_api") == "blas" and "numpy" in i.get("filepath", "")]
    if blas:
        out["numpy_blas"] = {"vendor": blas[0].get("internal_api"), "version": blas[0].get("version"),
                             "core_type": blas[0].get("architecture"), "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}
    return out
