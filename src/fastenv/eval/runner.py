"""``fastenv.eval.run``: an episode list over worker processes, the policy called on batches of ready envs.

``run`` reads as its phases: check the policies, plan the episodes (the list, what an earlier run
already wrote, which to film, how many workers and env slots), hand them to the loop
(``fastenv.eval.dispatch``: worker processes, batching, lost workers replaced), and write the
results. Results are written as each episode ends (``OUT.episodes.jsonl``) and as one JSON at the
end (also when the run stops early, marked incomplete); ``resume=True`` skips the episodes already
written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.eval.config import EvalConfig
from fastenv.eval.dispatch import Dispatcher, EvalError
from fastenv.eval.episodes import Episode, episode_list
from fastenv.eval.lanes import Lane
from fastenv.eval.policies import BatchPolicy, CallablePolicy
from fastenv.eval.protocol import Protocol
from fastenv.machine import available_cpus

__all__ = ["EvalConfig", "EvalError", "run", "summarize", "format_table"]


def _digest(episodes: Sequence[Episode]) -> str:
    return hashlib.sha256(json.dumps([e.as_dict() for e in episodes]).encode()).hexdigest()


def _read_written(out: Path, digest: str) -> dict[str, dict[str, Any]]:
    """The episodes ``out`` (its JSON, and the lines written as episodes ended) already holds."""
    done: dict[str, dict[str, Any]] = {}
    if out.exists():
        payload = json.loads(out.read_text())
        if payload.get("episode_list_sha256") != digest:
            raise ValueError(f"--resume: {out} holds another episode list (other suites, tasks, episodes, seed or protocol); "
                             "give the same options, or another --out")
        done.update({r["id"]: r for r in payload.get("episodes", [])})
    lines = out.with_name(out.name + ".episodes.jsonl")
    if lines.exists():
        for number, line in enumerate(lines.read_text().splitlines()):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short when the run was killed: that episode runs again
            if number == 0:
                if record.get("episode_list_sha256") != digest:
                    raise ValueError(f"--resume: {lines} holds another episode list; give the same options, or another --out")
                continue
            done[record["id"]] = record
    return done


def summarize(results: Sequence[dict[str, Any]], episodes: Sequence[Episode]) -> dict[str, Any]:
    """Success rates per task, per suite and in all, over the episodes that have results."""
    by_id = {r["id"]: r for r in results}
    tasks: dict[str, dict[str, Any]] = {}
    suites: dict[str, dict[str, Any]] = {}
    for e in episodes:
        r = by_id.get(e.id)
        for table, key in ((tasks, f"{e.suite}/{e.task}"), (suites, e.suite)):
            row = table.setdefault(key, {"episodes": 0, "successes": 0, "planned": 0})
            row["planned"] += 1
            if r is not None:
                row["episodes"] += 1
                row["successes"] += int(bool(r["success"]))
    for table in (tasks, suites):
        for row in table.values():
            row["success_rate"] = row["successes"] / row["episodes"] if row["episodes"] else None
    n = sum(r["episodes"] for r in suites.values())
    s = sum(r["successes"] for r in suites.values())
    return {"tasks": tasks, "suites": suites, "total": {"episodes": n, "successes": s, "planned": len(episodes),
                                                        "success_rate": s / n if n else None}}


def format_table(summary: dict[str, Any]) -> str:
    """The per-suite success rates (and the tasks of a run of one suite), as a text table."""
    rows = [("suite", "episodes", "successes", "success rate")]
    one_suite = len(summary["suites"]) == 1
    for suite, row in summary["suites"].items():
        if one_suite:
            for task, t in summary["tasks"].items():
                rate = "-" if t["success_rate"] is None else f"{100 * t['success_rate']:.1f}%"
                rows.append((f"  task {task.split('/')[-1]}", f"{t['episodes']}/{t['planned']}", str(t["successes"]), rate))
        rate = "-" if row["success_rate"] is None else f"{100 * row['success_rate']:.1f}%"
        rows.append((suite, f"{row['episodes']}/{row['planned']}", str(row["successes"]), rate))
    total = summary["total"]
    if not one_suite:
        rate = "-" if total["success_rate"] is None else f"{100 * total['success_rate']:.1f}%"
        rows.append(("all", f"{total['episodes']}/{total['planned']}", str(total["successes"]), rate))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class _Progress:
    def __init__(self, total: int, enabled: bool) -> None:
        self.bar = None
        if enabled and total:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            # smoothing=0: the estimate is the average rate since the start, not the last few episodes'
            self.bar = tqdm(total=total, unit="episode", smoothing=0, dynamic_ncols=True, file=sys.stderr)

    def update(self, done: int, successes: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"successes {successes}/{done}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _as_policy(policy: Any) -> BatchPolicy:
    if isinstance(policy, BatchPolicy):
        return policy
    if callable(policy):
        return CallablePolicy(policy)
    raise TypeError(f"policy must be a fastenv.eval.BatchPolicy or a callable on a batch of observations, got {type(policy).__name__}")


def _as_policies(policy: Any) -> list[BatchPolicy]:
    """One policy, or a list of them (one per server): each a ``BatchPolicy`` or a callable."""
    if not isinstance(policy, (list, tuple)):
        return [_as_policy(policy)]
    if not policy:
        raise ValueError("policy: an empty list; give one policy, or one per server")
    policies = [_as_policy(p) for p in policy]
    if len({id(p) for p in policy}) != len(policy):
        raise ValueError("policy: the same object appears twice in the list; each server needs a policy object of its own "
                         "(each is called from a thread of its own)")
    if len({p.reads_chunk_starts_only for p in policies}) > 1:
        raise ValueError("policy: the policies disagree on what they read (some a chunk's start only, some every step); "
                         "give policies of one kind")
    return policies


def _policy_figures(lanes: Sequence[Lane], seconds: float) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``run.policy`` (the one policy, or all of them summed) and ``run.policies`` (each)."""
    each = [lane.figures(seconds) for lane in lanes]
    keys = ("calls", "served", "mean_batch", "busy_seconds", "busy_share")
    if len(each) == 1:
        one = each[0]
        return {**lanes[0].policy.describe(), **{k: one[k] for k in keys}}, each
    sizes = [b for lane in lanes for b in lane.batch_sizes]
    shares = [p["busy_share"] for p in each if p["busy_share"] is not None]
    return {"form": "several policies", "count": len(each), "calls": sum(p["calls"] for p in each),
            "served": sum(p["served"] for p in each), "mean_batch": float(np.mean(sizes)) if sizes else None,
            "busy_seconds": sum(p["busy_seconds"] for p in each),
            "busy_share": float(np.mean(shares)) if shares else None}, each  # the policies' mean share


def _config(config: Any, args: tuple, kwargs: dict[str, Any]) -> EvalConfig:
    """``run``'s config: the ``EvalConfig`` given, the defaults, or the old keyword form's arguments
    (``run(policy, suites, tasks=..., ...)``: built into one, with a DeprecationWarning)."""
    if isinstance(config, EvalConfig):
        if args or kwargs:
            raise TypeError(f"run(policy, config) takes nothing more; got {len(args)} more arguments and {sorted(kwargs)}: "
                            "set them in the EvalConfig")
        return config
    if config is None and not args and not kwargs:
        return EvalConfig()
    if args:
        raise TypeError(f"run(policy, suites, **options) takes the options by keyword; got {len(args)} more positional arguments")
    unknown = sorted(set(kwargs) - set(EvalConfig.field_names()))
    if unknown:
        raise TypeError(f"run() got unknown options {unknown}; expected some of {EvalConfig.field_names()}")
    warnings.warn("fastenv.eval.run(policy, suites, **options) is deprecated and goes in the next release: "
                  "run(policy, fastenv.eval.EvalConfig(suites=..., **options))", DeprecationWarning, stacklevel=3)
    return EvalConfig(**({"suites": config} if config is not None else {}), **kwargs)


def _check_policies(policies: Sequence[BatchPolicy], config: EvalConfig) -> None:
    """What the config asks of the policies: a protocol they can answer, a worker each at least."""
    protocol = config.protocol
    assert isinstance(protocol, Protocol)
    policy = policies[0]
    if not policy.reads_chunk_starts_only and protocol.replan_steps != 1:
        raise ValueError(f"{type(policy).__name__} answers one action per observation (its server reads every step): the protocol "
                         f"must ask at every step, replan_steps=1 (--replan-steps 1), got {protocol.replan_steps}")
    if config.workers is not None and config.workers < len(policies):
        raise ValueError(f"{len(policies)} policies need at least {len(policies)} workers (worker w is served by policy "
                         f"w % {len(policies)}), got EvalConfig.workers={config.workers}")


@dataclass
class _Plan:
    """What a run will do, fixed before anything starts: the episode list (and its digest), the
    episodes to run (without those ``out`` already holds), the ones to film, and the layout."""

    the_list: list[Episode]
    todo_list: list[Episode]  # the list, or ``only``'s episodes
    digest: str
    out: Path | None
    written: dict[str, dict[str, Any]]
    films: set[str]
    video_dir: str | None
    todo: list[Episode]
    workers: int
    max_envs: int

    @classmethod
    def make(cls, config: EvalConfig) -> _Plan:
        protocol = config.protocol
        assert isinstance(protocol, Protocol)
        the_list = episode_list(config.suites, tasks=config.tasks, episodes=config.episodes, seed=config.seed)
        for suite in dict.fromkeys(e.suite for e in the_list):
            protocol.steps_for(suite)  # a suite without a published budget needs max_steps: refused before anything starts
        todo_list = the_list
        if config.only is not None:
            known = {e.id: e for e in the_list}
            for episode in config.only:
                Episode.from_id(episode, config.seed)  # the id's form
                if episode not in known:
                    tasks = config.tasks if config.tasks is not None else "all"
                    raise ValueError(f"EvalConfig.only: episode {episode!r} is not in the list of suites {list(config.suites)}, tasks "
                                     f"{tasks}, {config.episodes} episodes per task (give the options the list was made with)")
            todo_list = [known[e] for e in dict.fromkeys(config.only)]
        digest = _digest(the_list + [Episode("protocol:" + json.dumps(protocol.as_dict(), sort_keys=True), 0, 0, 0)])
        out = Path(config.out) if config.out is not None else None
        written: dict[str, dict[str, Any]] = {}
        if out is not None:
            if out.exists() and not config.resume:
                raise ValueError(f"{out} exists: resume=True (--resume) goes on from it, or give another path")
            written = _read_written(out, digest) if config.resume else {}
            out.parent.mkdir(parents=True, exist_ok=True)
        films: set[str] = set()
        video_dir = config.video_dir
        if config.video:
            if video_dir is None:
                video_dir = (out.parent / (out.stem + "_videos")) if out is not None else Path("videos")
            Path(video_dir).mkdir(parents=True, exist_ok=True)
            try:
                import imageio  # noqa: F401
            except ImportError as exc:
                raise ImportError("videos are written with imageio: pip install imageio imageio-ffmpeg") from exc
            seen: Counter[tuple[str, int]] = Counter()
            for e in the_list:
                if seen[(e.suite, e.task)] < config.video:
                    films.add(e.id)
                seen[(e.suite, e.task)] += 1
        todo = [e for e in todo_list if e.id not in written]
        workers = config.workers if config.workers is not None else available_cpus()
        workers = max(1, min(workers, len(todo) or 1))
        max_envs = config.max_envs if config.max_envs is not None else workers * config.envs_per_worker
        slots = min(workers * config.envs_per_worker, max_envs, max(1, len(todo)))
        return cls(the_list, todo_list, digest, out, written, films, None if video_dir is None else str(video_dir), todo,
                   min(workers, slots), max_envs)


class _Written:
    """Each result as it comes: kept, counted on the bar, appended to ``OUT.episodes.jsonl``."""

    def __init__(self, plan: _Plan, progress: bool) -> None:
        self.results: dict[str, dict[str, Any]] = dict(plan.written)
        self.lines = None
        if plan.out is not None:
            self.lines = open(plan.out.with_name(plan.out.name + ".episodes.jsonl"), "a")  # noqa: SIM115 (closed by finish)
            if self.lines.tell() == 0:
                self.lines.write(json.dumps({"episode_list_sha256": plan.digest}) + "\n")
                self.lines.flush()
        self.bar = _Progress(len(plan.todo), progress)
        self.successes = sum(bool(r["success"]) for r in plan.written.values())

    def __call__(self, result: dict[str, Any]) -> None:
        self.results[result["id"]] = result
        self.successes += bool(result["success"])
        if self.lines is not None:
            self.lines.write(json.dumps(result) + "\n")
            self.lines.flush()
        self.bar.update(len(self.results), self.successes)

    def finish(self, plan: _Plan, payload: dict[str, Any]) -> None:
        """The results JSON, written whole (a complete run's episode lines go)."""
        if self.lines is None or plan.out is None:
            return
        self.lines.close()
        tmp = plan.out.with_name(plan.out.name + ".tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        tmp.replace(plan.out)
        if payload["complete"]:
            plan.out.with_name(plan.out.name + ".episodes.jsonl").unlink(missing_ok=True)


def _payload(config: EvalConfig, plan: _Plan, state: Dispatcher, written: _Written, seconds: float, error: BaseException | None) -> dict[str, Any]:
    """The results: the episode list, each episode's result, the success rates, the run's figures."""
    protocol = config.protocol
    assert isinstance(protocol, Protocol)
    results = written.results
    ran = [r for r in results.values() if r["id"] not in plan.written]
    unstarted = len(state.queue)
    if error is None and unstarted:
        stopped = f"time limit of {config.time_limit:g} s: {unstarted} episodes not started (resume=True goes on)"
    else:
        stopped = None if error is None else f"{type(error).__name__}: {error}".splitlines()[0]
    policy_figures, each_policy = _policy_figures(state.lanes, seconds)
    lane = state.lanes[0] if len(state.lanes) == 1 else None
    order = {e.id: i for i, e in enumerate(plan.the_list)}
    only = None if config.only is None else list(config.only)
    return {
        "fastenv_eval": 1,
        "complete": error is None and all(e.id in results for e in plan.todo_list),
        "stopped": stopped,
        "protocol": protocol.as_dict(),
        "suites": list(config.suites), "tasks": None if config.tasks is None else list(config.tasks),
        "episodes_per_task": config.episodes, "seed": config.seed,
        "only": only,
        "episode_list_sha256": plan.digest,
        "episode_list": [e.as_dict() for e in plan.the_list],
        "episodes": sorted(results.values(), key=lambda r: order.get(r["id"], 0)),
        **summarize(list(results.values()), [e for e in plan.the_list if only is None or e.id in set(only)]),
        "run": {
            "seconds": seconds, "episodes_run": len(ran), "resumed_from": len(plan.written),
            "episodes_per_hour": 3600 * len(ran) / seconds if seconds > 0 and ran else None,
            "env_steps": sum(r["length"] + protocol.num_steps_wait for r in ran),
            "camera_renders": sum(r["camera_renders"] for r in ran),
            "workers": len(state.workers), "env_slots": sum(len(w.slots) for w in state.workers),
            # B_max, T_max and their choice: the one policy's (with several, each policy's in "policies")
            "max_batch": lane.max_batch if lane else None, "batch_timeout": lane.batch_timeout if lane else None,
            "tuned": lane.tuned if lane else None, "restarts": state.restarts,
            "policy": policy_figures, "policies": each_policy, "time_limit": config.time_limit,
            # a worker that finished no episode has no figure (None: idle), not 0 MB
            "worker_max_rss_mb": {w.index: round(w.max_rss_mb, 1) if w.max_rss_mb > 0 else None for w in state.workers},
            "backend": config.backend,
        },
    }


def run(policy: Any, config: EvalConfig | None = None, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Evaluate ``policy`` on every episode of ``config`` and return (and write to ``config.out``) the results.

    Args:
        policy: a ``BatchPolicy`` (``OpenpiPolicy``, ``VlaEvalPolicy``, ``LeRobotPolicy``, ...) or a
            callable on a batch of observations (``fastenv.eval.policies.CallablePolicy``); or a
            list of them, one per server (GPU) serving the same model: worker ``w`` is served by
            policy ``w % len(policy)``, each batching its own workers' requests, the calls to
            different policies overlapping in time.
        config: an ``EvalConfig`` (``fastenv.eval.config``: each field documented there); None: its
            defaults. The old form, ``run(policy, suites, tasks=..., episodes=..., ...)`` with the
            config's fields as keywords, still works for one release, with a DeprecationWarning.

    Returns:
        The payload written to ``config.out``: the episode list, each episode's result (success,
        length, return, the digest of its actions), the success rates per task and suite, and the
        run's figures (episodes per hour, the policy's calls, batch sizes and busy share, the fit of
        its cost and the B_max/T_max chosen from it, workers' memory, restarts; per policy in
        ``run.policies``).

    Examples:
        >>> from fastenv.eval import EvalConfig, run
        >>> from fastenv.eval.policies import ProjectionPolicy
        >>> if __name__ == "__main__":
        ...     results = run(ProjectionPolicy(), EvalConfig(suites="libero_spatial", tasks=[0], episodes=2, workers=2))
    """
    config = _config(config, args, kwargs)
    policies = _as_policies(policy)
    _check_policies(policies, config)
    plan = _Plan.make(config)
    written = _Written(plan, config.progress)
    cluster = None
    if config.backend == "ray" and plan.todo:
        from fastenv.eval.ray_workers import RayCluster

        cluster = RayCluster(config.ray_options)
    state = Dispatcher(policies, config.protocol, plan.todo, workers=plan.workers, envs_per_worker=config.envs_per_worker,  # type: ignore[arg-type]
                 max_envs=plan.max_envs, max_batch=config.max_batch, batch_timeout=config.batch_timeout, hang_timeout=config.hang_timeout,
                 retries=config.retries, film=plan.films, video_dir=plan.video_dir, record_actions=config.record_actions,
                 context=config.context, on_result=written, time_limit=config.time_limit, cluster=cluster)
    start = time.perf_counter()
    error: BaseException | None = None
    opened: list[BatchPolicy] = []
    try:
        for lane in state.lanes:
            lane.policy.open(max(1, len(lane.workers)))
            opened.append(lane.policy)
        state.loop()
    except BaseException as exc:  # written below either way; KeyboardInterrupt too
        error = exc
        raise
    finally:
        seconds = time.perf_counter() - start
        written.bar.close()
        try:
            state.close()
        finally:
            for p in opened:
                with contextlib.suppress(Exception):  # one policy's failing close does not keep the others open
                    p.close()
        payload = _payload(config, plan, state, written, seconds, error)
        written.finish(plan, payload)
    return payload
