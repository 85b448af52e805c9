"""Where the benchmark's work runs, and what it holds: cores, pinning, the policy's device, memory.

The policy runs in the calling process, on whole physical cores of its own; the env processes are
pinned to the other cores. A row is run only where its processes fit in the memory left.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from fastenv.machine import available_memory, process_memory


def cores(policy_cores: int) -> tuple[list[int], list[int]]:
    """(policy cores, env cores) among the cores this process may run on (cgroups included): the
    policy's are whole physical cores (their SMT siblings with them, ``fastenv.machine.split_cores``)."""
    from fastenv.machine import split_cores

    return split_cores(policy_cores)


class Pinned:
    """An env factory that first pins its process to ``cores`` when it runs in another process.

    Gymnasium's ``AsyncVectorEnv`` also calls its first factory in the calling process (a dummy
    env, for the spaces): that process, the policy's, keeps its own cores.
    """

    def __init__(self, fn: Callable[[], Any], cores: list[int]) -> None:
        self.fn, self.cores, self.owner = fn, cores, os.getpid()

    def __call__(self) -> Any:
        if os.getpid() != self.owner:
            os.sched_setaffinity(0, self.cores)
        return self.fn()


def policy_device(name: str) -> Any:
    """The torch device ``name`` names; "auto": CUDA where there is one, else the CPU."""
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def cpu_seconds(pids: Sequence[int]) -> float:
    """The user and system CPU seconds of the processes ``pids`` so far (those gone count none)."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except (psutil.Error, OSError):
            pass
    return total


def rss_mb(pids: Sequence[int]) -> float:
    """The resident memory of the processes ``pids``, in MB."""
    return round(sum(process_memory(pid) or 0 for pid in pids) / 2**20, 1)


def memory_fits(per_process_mb: float | None, processes: int, fraction: float) -> tuple[bool, str]:
    """Whether ``processes`` of ``per_process_mb`` each fit in ``fraction`` of the memory available,
    and if not, why (unknown sizes fit)."""
    left = available_memory()
    if per_process_mb is None or left is None:
        return True, ""
    need = per_process_mb * processes * 2**20
    if need <= fraction * left:
        return True, ""
    return False, (f"{processes} processes of about {per_process_mb:.0f} MB each need {need / 2**30:.1f} GB, over "
                   f"{fraction:.0%} of the {left / 2**30:.1f} GB available")


class GpuMemory:
    """The GPU's used memory and each process's, through NVML (None without an NVIDIA GPU)."""

    def __init__(self) -> None:
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.handle = None

    def read(self, env_pids: Sequence[int]) -> dict[str, float | None] | None:
        if self.handle is None:
            return None
        nv = self.nvml
        mine: dict[int, int] = {}
        for getter in (nv.nvmlDeviceGetGraphicsRunningProcesses, nv.nvmlDeviceGetComputeRunningProcesses):
            try:
                for p in getter(self.handle):
                    if p.usedGpuMemory is not None:
                        mine[p.pid] = max(mine.get(p.pid, 0), p.usedGpuMemory)
            except Exception:
                pass
        envs = [mine[pid] for pid in env_pids if pid in mine]
        return {"device_used_mb": round(nv.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20, 1),
                "policy_process_mb": round(mine[os.getpid()] / 2**20, 1) if os.getpid() in mine else None,
                "env_processes_mb": round(sum(envs) / 2**20, 1) if envs else None,
                "env_processes_seen": len(envs)}


def process_endings(processes: Sequence[Any]) -> str:
    """How the processes that ended did (an exit code, or the signal that ended them: SIGKILL is
    often the kernel's out-of-memory killer, SIGSEGV a crash in native code such as a GL driver),
    with the memory left on the host; "" when none has ended."""
    import signal

    ended = []
    for i, process in enumerate(processes):
        process.join(timeout=0.5)  # an ending process's code is set once it is reaped
        code = process.exitcode
        if code is None:
            continue
        if code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit code {code}"
        ended.append(f"env process {i} ended ({how})")
    if not ended:
        return ""
    free = available_memory()
    return ", ".join(ended) + ("" if free is None else f"; host memory available {free / 2**30:.1f} GiB")
