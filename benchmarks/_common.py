"""Helpers shared by the benchmarks: timing, tables and JSON output."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``fn`` in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000.0


def machine() -> dict[str, Any]:
    """What the numbers were measured on: the CPU (its model name, family and model numbers, and the
    microarchitecture LLVM detects, which names the generation where the model name does not), the
    cores, and the kernel set numpy's BLAS runs there."""
    import numpy  # noqa: F401  (loaded before threadpoolctl looks: it reads the BLAS of loaded libraries only)

    # imported here: a benchmark's --before child imports this module beside an earlier fastenv
    from fastenv.machine import available_cpus, measured_on

    out = measured_on()
    out.setdefault("numpy_blas", None)  # None: threadpoolctl is not installed here, so it was not read
    out["cpus_available"] = available_cpus()
    out["cpu_id"] = cpu_id()
    out["llvm_host_cpu"] = llvm_host_cpu()
    return out


def cpu_id(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, Any] | None:
    """The first CPU's vendor, family, model and stepping (Linux's ``/proc/cpuinfo``), None where not read."""
    keys = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "stepping": "stepping"}
    out: dict[str, Any] = {}
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return None
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        name = keys.get(key.strip())
        if name is not None:
            value = value.strip()
            out[name] = int(value) if value.isdigit() else value
    return out or None


def llvm_host_cpu() -> str | None:
    """The CPU name LLVM detects here (what numba compiles for, e.g. ``znver3``, ``sapphirerapids``), None without llvmlite."""
    try:
        import llvmlite.binding as llvm
    except ImportError:
        return None
    return llvm.get_host_cpu_name()


def no_paths(line: str) -> str:
    """An error line without the folders of the machine it ran on (from site-packages on)."""
    return re.sub(r"/[^\s'\"]*/site-packages/", "<site-packages>/", line)


def print_docs_table(path: str | Path, render: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """Print a results JSON as the docs' table (``render`` makes it) and return the JSON."""
    payload = json.loads(Path(path).read_text())
    print(render(payload))
    return payload


def wait_for_background_compile(cache: str) -> float:
    """Block until no process holds fastenv's compile lock under the numba cache ``cache``; the seconds waited."""
    import fcntl
    import os

    start = time.perf_counter()
    for folder, _, files in os.walk(cache):
        if "fastenv-compile.lock" in files:
            with open(os.path.join(folder, "fastenv-compile.lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
    return time.perf_counter() - start


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2))
    return path


def print_table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> None:
    """Print ``rows`` with (key, header, format) columns."""
    headers = [h for _, h, _ in columns]
    cells = [[format(row[k], f) if row.get(k) is not None else "-" for k, _, f in columns] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))


def gpu_query() -> list[dict[str, float]] | None:
    """Utilisation (%) and memory used (MB) of each GPU, or None without ``nvidia-smi``."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=10)
    if done.returncode:
        return None
    rows = [line.split(",") for line in done.stdout.strip().splitlines() if line.strip()]
    return [{"util": float(u), "memory_mb": float(m)} for u, m in rows]


def gpu_memory_mb() -> float | None:
    """Memory in use on all GPUs together (MB), or None without ``nvidia-smi``."""
    gpus = gpu_query()
    return sum(g["memory_mb"] for g in gpus) if gpus else None


@contextmanager
def figure(path: str | Path, title: str, figsize: tuple[float, float] = (7, 4)) -> Iterator[Any]:
    """The axes of a one-plot figure; on exit titled, gridded, with its legend, saved to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    try:
        yield ax
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
