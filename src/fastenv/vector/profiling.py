"""Where a rollout's wall time goes: the vector env's profiler (``PipelineVectorEnv(profile=True)``).

Worker side, the executor's calls into its envs are timed (only while profiling: the batch is
swapped for a timed one, so a vector env that does not profile runs exactly the code it did):

- ``physics``: sub-steps without observation (controller, physics, reward, termination; for
  envs sharing one world, the world step of all of them),
- ``step``: the last sub-step of each chunk (or each plain step) together with its observation,
  which the simulator's own step produces (fastenv cannot time the two apart),
- ``observe``: observations taken on their own (final observations of episodes that ended
  inside a chunk),
- ``reset``: resets, autoresets included.

Main-process side, around ``step``/``send``/``recv``/``reset``:

- ``transport_wait``: the caller's time inside those calls (waiting for workers, moving
  results; what the envs' work does not hide),
- ``policy``: the caller's time between one call returning and the next starting (policy
  inference, learning, logging: everything outside fastenv).

Worker seconds are summed over workers (they overlap in wall time); main-process seconds are
wall time. ``cpu_seconds`` holds the worker categories' CPU time (all threads of the worker
process): where workers share cores, their wall-clock seconds include time spent waiting for a
core, and CPU seconds are the work. Counts say how many env calls each category holds.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

WORKER_CATEGORIES = ("physics", "step", "observe", "reset")
MAIN_CATEGORIES = ("transport_wait", "policy")


class Timings:
    """Seconds and counts per category."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, seconds: float, count: int = 1, cpu_seconds: float = 0.0) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu_seconds
        self.counts[name] = self.counts.get(name, 0) + count

    def as_dict(self) -> dict[str, Any]:
        return {"seconds": dict(self.seconds), "cpu_seconds": dict(self.cpu_seconds), "counts": dict(self.counts)}


class TimedBatch:
    """The executor's batch of envs, its calls timed into ``timings`` (everything else passes through)."""

    def __init__(self, batch: Any, timings: Timings) -> None:
        self._batch = batch
        self._timings = timings

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def _timed(self, category: str, method: Callable[..., Any], rows: Any, *args: Any) -> Any:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            return method(rows, *args)
        finally:
            self._timings.add(category, time.perf_counter() - start, len(rows), time.process_time() - cpu)

    def substep(self, rows: Any, actions: Any) -> Any:
        return self._timed("physics", self._batch.substep, rows, actions)

    def step(self, rows: Any, actions: Any) -> Any:
        return self._timed("step", self._batch.step, rows, actions)

    def observe(self, rows: Any) -> Any:
        return self._timed("observe", self._batch.observe, rows)

    def reset(self, rows: Any, seeds: Any = None, options: Any = None) -> Any:
        return self._timed("reset", self._batch.reset, rows, seeds, options)


class ProfileRequest:
    """A command for a worker's profiler, sent as a CALL target: start, stop, reset or report."""

    def __init__(self, action: str) -> None:
        if action not in ("start", "stop", "reset", "report"):
            raise ValueError(f"unknown profiler action {action!r}")
        self.action = action


class MainClock:
    """The caller's time inside fastenv's calls and between them (policy and the rest)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.started = time.perf_counter()
        self.inside = 0.0
        self.outside = 0.0
        self.calls = 0
        self._depth = 0
        self._entered = 0.0
        self._last_exit: float | None = None

    def enter(self) -> None:
        if self._depth == 0:
            now = time.perf_counter()
            if self._last_exit is not None:
                self.outside += now - self._last_exit
            self._entered = now
        self._depth += 1

    def exit(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            now = time.perf_counter()
            self.inside += now - self._entered
            self._last_exit = now
            self.calls += 1


def timed(method: Callable[..., Any]) -> Callable[..., Any]:
    """Count a vector env method's time as the caller's time inside fastenv (when profiling)."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        clock = self._clock
        if clock is None:
            return method(self, *args, **kwargs)
        clock.enter()
        try:
            return method(self, *args, **kwargs)
        finally:
            clock.exit()

    return wrapper


def report(worker_reports: list[dict[str, Any]], clock: MainClock) -> dict[str, Any]:
    """One breakdown from the workers' timings and the main-process clock."""
    seconds = {name: 0.0 for name in WORKER_CATEGORIES}
    cpu = {name: 0.0 for name in WORKER_CATEGORIES}
    counts = {name: 0 for name in WORKER_CATEGORIES}
    for rep in worker_reports:
        for name, value in rep["seconds"].items():
            seconds[name] = seconds.get(name, 0.0) + value
        for name, value in rep.get("cpu_seconds", {}).items():
            cpu[name] = cpu.get(name, 0.0) + value
        for name, value in rep["counts"].items():
            counts[name] = counts.get(name, 0) + value
    seconds["transport_wait"] = clock.inside
    seconds["policy"] = clock.outside
    counts["transport_wait"] = clock.calls
    return {
        **seconds,
        "wall": time.perf_counter() - clock.started,
        "cpu_seconds": cpu,
        "counts": counts,
        "workers": len(worker_reports),
    }
