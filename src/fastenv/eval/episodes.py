"""The episode list of an evaluation: fixed before anything runs, each episode named by its id.

An episode is (suite, task, init state, seed); its id is ``"suite/task/init_state"`` (the seed is
the run's, one for every episode). Its result depends on nothing else: not on the worker that
ran it, the batch its requests came in, the episodes before it on the same env, or restarts.
``episode_list`` builds the list the reference loops run (openpi's and OFT's: episode ``i`` of a
task on its init state ``i``), checking every suite and task before anything is built.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MAX_STEPS", "Episode", "episode_list", "parse_tasks", "suite_tasks"]

# The policy steps an episode may take, per suite: openpi's examples/libero/main.py and
# OpenVLA-OFT's run_libero_eval.py (each: its longest training demo, plus a margin).
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}


@dataclass(frozen=True)
class Episode:
    """One episode of an evaluation."""

    suite: str
    task: int
    init_state: int
    seed: int

    @property
    def id(self) -> str:
        return f"{self.suite}/{self.task}/{self.init_state}"

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, **asdict(self)}

    @classmethod
    def from_id(cls, episode_id: str, seed: int) -> Episode:
        parts = str(episode_id).split("/")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
            raise ValueError(f"an episode id is SUITE/TASK/INIT_STATE (e.g. libero_spatial/3/17), got {episode_id!r}")
        return cls(parts[0], int(parts[1]), int(parts[2]), seed)


def suite_tasks(suite: str) -> tuple[int, int]:
    """``(number of tasks, init states per task)`` of a LIBERO suite; an unknown suite is refused
    with the known ones (LIBERO's benchmark table is read; no simulator is built)."""
    from fastenv.backends.libero.task import load_suite

    bench = load_suite(suite)
    return bench.n_tasks, len(bench.get_task_init_states(0))


def parse_tasks(text: str | Sequence[int] | None) -> list[int] | None:
    """``"0,3,5-7"`` -> ``[0, 3, 5, 6, 7]``; None: every task."""
    if text is None or not isinstance(text, str):
        return None if text is None else [int(t) for t in text]
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"tasks are ids and ranges like 0,3,5-7; got {text!r}")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def episode_list(
    suites: Iterable[str], *, tasks: Sequence[int] | Mapping[str, Sequence[int]] | None = None, episodes: int = 50,
    seed: int = 7, first_init_state: int = 0,
) -> list[Episode]:
    """Every episode of ``suites``: for each task (all, or ``tasks``), ``episodes`` episodes on init
    states ``first_init_state .. first_init_state + episodes - 1``, in suite, task, init state
    order. Unknown suites, tasks, or more episodes than a task has init states, are refused."""
    suites = list(suites)
    if not suites:
        raise ValueError("no suite given: expected one or more of " + ", ".join(MAX_STEPS))
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes per task must be an int >= 1, got {episodes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    out: list[Episode] = []
    for suite in suites:
        if suite not in MAX_STEPS:
            close = difflib.get_close_matches(str(suite).lower(), list(MAX_STEPS), n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown LIBERO suite {suite!r}; {hint}the evaluation knows {sorted(MAX_STEPS)} (their step budgets)")
        n_tasks, n_states = suite_tasks(suite)
        chosen = tasks.get(suite) if isinstance(tasks, Mapping) else tasks
        chosen = list(range(n_tasks)) if chosen is None else list(chosen)
        bad = [t for t in chosen if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_tasks]
        if bad:
            raise ValueError(f"{suite} has tasks 0..{n_tasks - 1}; got {bad}")
        if not 0 <= first_init_state or first_init_state + episodes > n_states:
            raise ValueError(f"{suite}'s tasks have {n_states} init states; episodes {first_init_state}.."
                             f"{first_init_state + episodes - 1} asked")
        out += [Episode(suite, t, first_init_state + i, seed) for t in chosen for i in range(episodes)]
    ids = [e.id for e in out]
    if len(set(ids)) != len(ids):
        raise ValueError("the episode list names an episode twice (a suite or task given twice?)")
    return out
