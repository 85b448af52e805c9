"""Conformance: fastenv against the stock simulator, swept over a simulator's task space.

Each backend module (``conformance.libero``, ``conformance.maniskill``) lists its cases (a task,
a key set, a mode) and runs each one twice, through fastenv and through the stock simulator
stepped one action at a time on the same seeds and actions, comparing every value exactly
(``np.array_equal``). ``fastenv conform`` runs a sweep and writes the per-case table as JSON.
"""

from __future__ import annotations

import gc
import json
import platform
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Case:
    """One conformance check: a task of a backend, a key set, a mode."""

    backend: str  # "libero", "maniskill"
    task: str  # "libero_90/35", "PickCube-v1"
    keys: str  # the key set's label: "stock", "default", or one key
    mode: tuple[tuple[str, Any], ...] = ()  # (option, value) pairs: hard_reset, fast_substep, chunk...

    @property
    def id(self) -> str:
        mode = ",".join(f"{k}={v}" for k, v in self.mode)
        return f"{self.backend}:{self.task}[{self.keys}]({mode})"

    def option(self, name: str, default: Any = None) -> Any:
        return dict(self.mode).get(name, default)


@dataclass
class Outcome:
    """What one case gave: passed, how many values were compared, the first difference if any."""

    case: Case
    passed: bool
    compared: int = 0
    difference: str | None = None  # where the first difference is: step, key, max |diff|
    seconds: float = 0.0
    skipped: str | None = None  # why the case could not run here (a missing asset...), never a failure

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["case"] = {"id": self.case.id, **asdict(self.case), "mode": dict(self.case.mode)}
        return out


class Mismatch(AssertionError):
    """fastenv and the stock simulator disagree (the message says where)."""


@dataclass
class Comparer:
    """Compares values exactly and counts them; raises ``Mismatch`` at the first difference."""

    compared: int = 0
    where: list[str] = field(default_factory=list)

    def equal(self, label: str, ours: Any, stock: Any) -> None:
        if isinstance(stock, dict):
            if not isinstance(ours, dict) or set(ours) != set(stock):
                got = sorted(ours) if isinstance(ours, dict) else type(ours).__name__
                raise Mismatch(f"{label}: keys {got} != stock {sorted(stock)}")
            for key in stock:
                self.equal(f"{label}[{key}]", ours[key], stock[key])
            return
        a, b = np.asarray(ours), np.asarray(stock)
        if a.shape != b.shape or a.dtype != b.dtype:
            raise Mismatch(f"{label}: {a.dtype}{list(a.shape)} != stock {b.dtype}{list(b.shape)}")
        if not np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"):  # NaN where stock has NaN is equal
            detail = ""
            if a.dtype.kind in "fiu" and a.size:
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
                detail = f": {int((diff > 0).sum())} of {a.size} entries differ, max |diff| {float(diff.max()):.3g}"
            raise Mismatch(f"{label} differs from stock{detail}")
        self.compared += int(a.size) or 1


def run_cases(
    cases: Sequence[Case], check: Callable[[Case, Comparer], None], *, progress: bool = True
) -> list[Outcome]:
    """Run ``check(case, comparer)`` for every case; a ``Mismatch`` fails the case, ``Skip`` skips it."""
    outcomes = []
    bar = _progress(len(cases)) if progress else None
    for case in cases:
        comparer = Comparer()
        start = time.perf_counter()
        try:
            check(case, comparer)
            outcome = Outcome(case, True, comparer.compared)
        except Mismatch as exc:
            outcome = Outcome(case, False, comparer.compared, difference=str(exc))
        except Skip as exc:
            outcome = Outcome(case, True, comparer.compared, skipped=str(exc))
        outcome.seconds = round(time.perf_counter() - start, 3)
        outcomes.append(outcome)
        if bar is not None:
            bar.set_postfix_str(f"{case.task} {'ok' if outcome.passed else 'DIFFERS'}")
            bar.update()
    if bar is not None:
        bar.close()
    return outcomes


class Resident:
    """The one runner (a task's envs) a backend keeps alive between cases, replaced when its key changes."""

    def __init__(self) -> None:
        self.key: Any = None
        self.runner: Any = None

    def get(self, key: Any, build: Callable[[], Any]) -> Any:
        if self.runner is None or self.key != key:
            self.close()
            self.runner, self.key = build(), key
        return self.runner

    def close(self) -> None:
        """Close the runner's envs, if any."""
        runner, self.runner, self.key = self.runner, None, None
        if runner is not None:
            runner.close()
            gc.collect()


class Skip(Exception):
    """The case cannot run on this machine (it says why); counted apart, never as a pass."""


def sample(cases: Sequence[Case], count: int | None, seed: int | str | None) -> list[Case]:
    """``count`` cases drawn with ``seed`` (all of them when count is None), in their order."""
    if count is None or count >= len(cases):
        return list(cases)
    rng = random.Random(seed)
    chosen = sorted(rng.sample(range(len(cases)), count))
    return [cases[i] for i in chosen]


def summary(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """Counts per task and in all: cases, passed, failed, skipped, values compared."""
    per_task: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = per_task.setdefault(f"{o.case.backend}:{o.case.task}", {"cases": 0, "passed": 0, "failed": 0, "skipped": 0, "compared": 0})
        row["cases"] += 1
        row["compared"] += o.compared
        if o.skipped is not None:
            row["skipped"] += 1
        elif o.passed:
            row["passed"] += 1
        else:
            row["failed"] += 1
    total = {k: sum(r[k] for r in per_task.values()) for k in ("cases", "passed", "failed", "skipped", "compared")}
    return {"total": total, "tasks": per_task}


def write_table(path: str, outcomes: Sequence[Outcome], *, command: str, seconds: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the sweep's table (every case, the summary, the command and the machine) as JSON."""
    payload = {
        "command": command,
        "seconds": round(seconds, 1),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "processor": platform.machine()},
        "summary": summary(outcomes),
        "differences": [o.as_dict() for o in outcomes if not o.passed],
        "cases": [o.as_dict() for o in outcomes],
        **(extra or {}),
    }
    with open(path, "w") as f:
        json.dump(payload, f, indent=1, default=str)
    return payload


def _progress(total: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="case", leave=False)


BACKENDS = {
    "libero": "fastenv.conformance.libero",
    "libero_rates": "fastenv.conformance.libero_rates",
    "maniskill": "fastenv.conformance.maniskill",
}


def sample_seed() -> str:
    """The seed of a sampled sweep: ``FASTENV_CONFORM_SEED``, else the checked-out commit, else "0".

    So CI checks a different sample at every commit, and any failure names the seed to replay.
    """
    import os
    import subprocess

    seed = os.environ.get("FASTENV_CONFORM_SEED")
    if seed:
        return seed
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=os.path.dirname(__file__))
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "0"


def select(
    backend: str,
    *,
    tasks: Sequence[str] | None = None,
    sample_tasks: int | None = None,
    seed: int | str | None = None,
    shard: tuple[int, int] | None = None,
) -> tuple[Any, list[str]]:
    """The backend's conformance module and the tasks to sweep: all, or ``sample_tasks`` drawn with ``seed``.

    ``shard=(i, n)`` keeps every n-th task from the i-th (to split a sweep over processes).
    """
    import importlib

    if backend not in BACKENDS:
        raise ValueError(f"unknown conformance backend {backend!r}; available: {sorted(BACKENDS)}")
    module = importlib.import_module(BACKENDS[backend])
    chosen = list(tasks) if tasks else list(module.tasks())
    chosen = sample(chosen, sample_tasks, f"{seed}:tasks")
    if shard is not None:
        i, n = shard
        if not 0 <= i < n:
            raise ValueError(f"shard must be i/n with 0 <= i < n, got {i}/{n}")
        chosen = chosen[i::n]
    return module, chosen


def sweep(
    module: Any,
    tasks: Sequence[str],
    *,
    cases_per_task: int | None = None,
    seed: int | str | None = None,
    progress: bool = True,
    after_task: Callable[[str, list[Outcome]], None] | None = None,
) -> list[Outcome]:
    """List each task's cases (a sample of ``cases_per_task`` drawn with ``seed``) and run them, task by task.

    A task whose cases cannot even be listed here (a missing asset) gives one skipped case.
    ``after_task(task, outcomes so far)`` runs after each task (to save a long sweep as it goes).
    """
    outcomes: list[Outcome] = []
    try:
        for task in tasks:
            try:
                task_cases = module.cases([task])
            except Skip as exc:
                outcomes.append(Outcome(Case(module.BACKEND, task, "-"), True, skipped=str(exc)))
            else:
                outcomes += run_cases(sample(task_cases, cases_per_task, f"{seed}:{task}"), module.check, progress=progress)
            if after_task is not None:
                after_task(task, outcomes)
    finally:
        close = getattr(module, "close", None)
        if close is not None:
            close()
    return outcomes


def merge_tables(paths: Sequence[str], out: str, *, command: str, seconds: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """One table from the tables of a sweep's shards (their cases, summed again)."""
    outcomes = []
    for path in paths:
        with open(path) as f:
            for row in json.load(f)["cases"]:
                c = row["case"]
                case = Case(c["backend"], c["task"], c["keys"], tuple(c["mode"].items()))
                outcomes.append(Outcome(case, row["passed"], row["compared"], row["difference"], row["seconds"], row["skipped"]))
    return write_table(out, outcomes, command=command, seconds=seconds, extra=extra)
