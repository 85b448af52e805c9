"""``fastenv.eval.run``: an episode list over worker processes, the policy called on batches of ready envs.

The loop in this process hands episodes to free env slots (a slot that holds an env of the
episode's task first, so envs are rebuilt only when a slot changes task), collects the requests
of envs that need a chunk, and calls the policy on a batch when ``max_batch`` are waiting, when
the oldest has waited ``batch_timeout`` seconds, or when every running episode is waiting (no
more can come). While the policy computes, the workers step the envs that have their chunks.

A worker that dies, or sends nothing for ``hang_timeout`` seconds while it has work, is killed
and started again; its episodes run again from their start (an episode's result depends on the
episode only, so they come out the same). An episode restarted more than ``retries`` times
stops the run, with the reason. Results are written as each episode ends (``OUT.episodes.jsonl``)
and as one JSON at the end (also when the run stops early, marked incomplete); ``resume=True``
skips the episodes already written.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.eval.episodes import Episode, episode_list
from fastenv.eval.policies import (
    BatchPolicy,
    CallablePolicy,
    PolicyUnavailable,
    Request,
)
from fastenv.eval.protocol import Protocol, check_chunk

__all__ = ["EvalError", "run", "summarize", "format_table"]

TUNE_AFTER_CALLS = 16  # policy calls (and chunks stepped) measured before B_max and T_max are chosen


class EvalError(RuntimeError):
    """The run stopped: a bad answer from the policy, an env that raised, an episode that kept
    losing its worker. What was written stays written (``--resume`` goes on from it)."""


@dataclass
class _Worker:
    index: int
    slots: list[int]
    proc: Any = None
    conn: Any = None
    pid: int | None = None
    last_seen: float = 0.0
    busy: dict[int, str] = field(default_factory=dict)  # slot -> episode id
    tasks: dict[int, tuple[str, int]] = field(default_factory=dict)  # slot -> the task its env holds
    starts: int = 0
    max_rss_mb: float = 0.0


def _digest(episodes: Sequence[Episode]) -> str:
    return hashlib.sha256(json.dumps([e.as_dict() for e in episodes]).encode()).hexdigest()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


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


class _Run:
    """One evaluation's state: workers, slots, requests waiting for the policy, results."""

    def __init__(self, policy: BatchPolicy, protocol: Protocol, todo: list[Episode], *, workers: int, envs_per_worker: int,
                 max_envs: int, max_batch: int, batch_timeout: float, hang_timeout: float, retries: int, film: set[str],
                 video_dir: str | None, record_actions: bool, context: str, on_result: Callable[[dict[str, Any]], None],
                 tune: bool = False, cluster: Any = None) -> None:
        self.policy, self.protocol = policy, protocol
        self.queue: deque[Episode] = deque(todo)
        self.by_id = {e.id: e for e in todo}
        self.max_batch, self.batch_timeout, self.hang_timeout, self.retries = max_batch, batch_timeout, hang_timeout, retries
        self.film, self.video_dir, self.record = film, video_dir, record_actions
        self.ctx = multiprocessing.get_context(context)
        self.on_result = on_result
        slots = min(workers * envs_per_worker, max_envs)
        per = [slots // workers + (1 if i < slots % workers else 0) for i in range(workers)]
        self.workers = [_Worker(i, list(range(n))) for i, n in enumerate(per) if n]
        self.pending: list[tuple[float, Request]] = []
        self.attempts: Counter[str] = Counter()
        self.restarts = 0
        self.calls, self.served, self.policy_seconds = 0, 0, 0.0
        self.batch_sizes: list[int] = []
        self.call_seconds: list[float] = []
        self.chunk_seconds: list[float] = []
        self.tuned: dict[str, Any] | None = None
        self.tuning = tune
        self.cluster = cluster  # a RayCluster: workers are Ray actors

    # -- workers --------------------------------------------------------------------------------
    def _spawn(self, w: _Worker) -> None:
        from fastenv.eval import worker as worker_module

        if self.cluster is not None:  # a Ray actor behind a pipe: the same commands and answers
            from fastenv.eval.ray_workers import RayProcess

            proc = RayProcess(self.cluster, w.index, self.protocol, self.record, self.video_dir)
            w.proc, w.conn, w.pid, w.last_seen = proc, proc.conn, None, time.monotonic()
            w.busy.clear()
            w.tasks.clear()
            w.starts += 1
            return
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=worker_module.main, args=(w.index, child, self.protocol, self.record, self.video_dir),
                                daemon=True, name=f"fastenv-eval-{w.index}")
        proc.start()
        child.close()
        w.proc, w.conn, w.pid, w.last_seen = proc, parent, proc.pid, time.monotonic()
        w.busy.clear()
        w.tasks.clear()
        w.starts += 1

    def _replace(self, w: _Worker, why: str) -> None:
        """Kill ``w``, put its episodes back at the front of the queue, start it again."""
        lost = list(w.busy.values())
        self.pending = [(t, r) for t, r in self.pending if r.worker != w.index]
        if w.proc.is_alive():
            w.proc.kill()
        w.conn.close()
        w.proc.join(5)
        self.restarts += 1
        for episode in sorted(lost, reverse=True):
            self._again(episode, f"its worker {why}")
        self._spawn(w)

    def _again(self, episode: str, why: str) -> None:
        if self.attempts[episode] > self.retries:
            raise EvalError(f"episode {episode}: {why} on each of its {self.attempts[episode]} attempts; stopped (retries={self.retries})")
        self.queue.appendleft(self.by_id[episode])

    def close(self) -> None:
        for w in self.workers:
            if w.proc is None:
                continue
            try:
                w.conn.send(("close", 0))
            except (OSError, ValueError):
                pass
        for w in self.workers:
            if w.proc is None:
                continue
            w.proc.join(10)
            if w.proc.is_alive() or self.cluster is not None:  # (an actor's resources are freed now, not at exit)
                w.proc.kill()
                w.proc.join(5)

    # -- the loop -------------------------------------------------------------------------------
    def _assign(self) -> None:
        for w in self.workers:
            for slot in w.slots:
                if slot in w.busy or not self.queue:
                    continue
                held = w.tasks.get(slot)
                pick = next((e for e in self.queue if (e.suite, e.task) == held), None) if held is not None else None
                if pick is None:  # a task no other free slot holds, else the first in line
                    taken = {t for ww in self.workers for s, t in ww.tasks.items() if s not in ww.busy}
                    pick = next((e for e in self.queue if (e.suite, e.task) not in taken), self.queue[0])
                self.queue.remove(pick)
                self.attempts[pick.id] += 1
                self.policy.start_episode(pick.id, pick.as_dict(), w.index)
                w.busy[slot] = pick.id
                w.tasks[slot] = (pick.suite, pick.task)
                w.conn.send(("start", slot, pick.as_dict(), self.attempts[pick.id], pick.id in self.film))
                w.last_seen = time.monotonic() if len(w.busy) == 1 else w.last_seen

    def _receive(self, w: _Worker) -> None:
        try:
            message = w.conn.recv()
        except (EOFError, OSError):
            self._replace(w, "died")
            return
        w.last_seen = time.monotonic()
        kind = message[0]
        if kind == "hello":
            w.pid = message[1]
            return
        slot = message[1]
        if kind == "obs":
            _, _, episode, element, step, seconds = message
            if seconds is not None:
                self.chunk_seconds.append(seconds)
            e = self.by_id[episode]
            self.pending.append((time.monotonic(), Request(episode, element, step, w.index, slot,
                                                           {"suite": e.suite, "task": e.task, "init_state": e.init_state, "seed": e.seed})))
        elif kind == "done":
            result = message[2]
            w.busy.pop(slot, None)
            w.max_rss_mb = max(w.max_rss_mb, result.get("worker_max_rss_mb", 0.0))
            result["attempts"] = self.attempts[result["id"]]
            self.policy.end_episode(result["id"], result)
            self.on_result(result)
        elif kind == "error":
            _, _, episode, text = message
            w.busy.pop(slot, None)
            lines = [line for line in text.strip().splitlines() if line and not line[0].isspace() and ":" in line and
                     not line.startswith(("Traceback", "During handling", "The above exception"))]
            last = lines[-1] if lines else (text.strip().splitlines() or ["?"])[-1]
            raise EvalError(f"episode {episode}: the env raised on worker {w.index}: {last}\n{text}")

    def _working(self, w: _Worker) -> bool:
        """Whether ``w`` owes an answer (a slot busy that is not waiting for the policy)."""
        waiting = {r.slot for _, r in self.pending if r.worker == w.index}
        return any(slot not in waiting for slot in w.busy)

    def _serve(self, batch: list[Request]) -> None:
        start = time.perf_counter()
        failed: dict[str, str] = {}
        try:
            chunks = list(self.policy.infer(batch))
        except PolicyUnavailable as exc:
            answers = exc.answers or [None] * len(batch)
            chunks = list(answers)
            failed = {episode: str(exc) for episode in exc.episodes}
        except EvalError:
            raise
        except Exception as exc:
            episodes = ", ".join(r.episode for r in batch)
            raise EvalError(f"the policy raised on a batch of {len(batch)} (episodes {episodes}): {type(exc).__name__}: {exc}") from exc
        finally:
            self.policy_seconds += time.perf_counter() - start
            self.call_seconds.append(time.perf_counter() - start)
        if len(chunks) != len(batch):
            raise EvalError(f"the policy returned {len(chunks)} chunks for a batch of {len(batch)} requests "
                            f"(episodes {', '.join(r.episode for r in batch)})")
        self.calls += 1
        self.batch_sizes.append(len(batch))
        if self.tuning and self.tuned is None and self.calls >= TUNE_AFTER_CALLS and len(self.chunk_seconds) >= TUNE_AFTER_CALLS:
            self._tune()
        workers = {w.index: w for w in self.workers}
        for request, chunk in zip(batch, chunks):
            w = workers[request.worker]
            if request.episode in failed or chunk is None:
                self._restart_unserved(w, request, failed.get(request.episode, "the policy gave no chunk"))
                continue
            try:
                chunk = check_chunk(chunk, request.episode, self.protocol.replan_steps)
            except ValueError as exc:
                raise EvalError(str(exc)) from None
            self.served += 1
            if not self._working(w):
                w.last_seen = time.monotonic()
            w.conn.send(("act", request.slot, chunk[: self.protocol.replan_steps]))  # the rows the loop uses

    def _tune(self) -> None:
        """B_max and T_max from what the first calls measured: the policy's seconds as ``a + b x
        batch`` (least squares over the calls), the envs' seconds per chunk (their median), and
        fastenv's tuning model (``fastenv.tuning.CostModel``, what ``fastenv tune`` predicts with)
        over B in {N/4, N/2, 3N/4, N} and T in {2, 10, 50} ms."""
        from fastenv.tuning.model import CostModel, Costs
        from fastenv.vector.plan import Candidate

        sizes = np.asarray(self.batch_sizes[: len(self.call_seconds)], float)
        seconds = np.asarray(self.call_seconds[: len(sizes)], float)
        if np.ptp(sizes) > 0:
            b, a = np.polyfit(sizes, seconds, 1)
            a, b = max(0.0, float(a)), max(0.0, float(b))
        else:
            a, b = float(np.median(seconds)), 0.0
        step = float(np.median(self.chunk_seconds))
        n = sum(len(w.slots) for w in self.workers)
        model = CostModel(Costs(step_wall=step, step_cpu=step, policy_wall=(a, b), policy_cpu=(0.0, 0.0), cpus=_cpus()))
        options = [Candidate(len(self.workers), max_batch=bb, timeout=t)
                   for bb in sorted({max(1, round(n * f)) for f in (0.25, 0.5, 0.75, 1.0)}) for t in (0.002, 0.01, 0.05)]
        best = max(options, key=lambda c: model.predict(c, n).steps_per_s)
        self.max_batch, self.batch_timeout = best.max_batch, best.timeout
        self.tuned = {"max_batch": best.max_batch, "batch_timeout": best.timeout, "policy_seconds": [a, b],
                      "chunk_seconds": step, "after_calls": self.calls, "bound": model.predict(best, n).bound,
                      "by": "fastenv.tuning.CostModel"}

    def _restart_unserved(self, w: _Worker, request: Request, why: str) -> None:
        """The policy could not serve ``request``: its episode starts again (its slot is freed)."""
        w.busy.pop(request.slot, None)
        self._again(request.episode, f"the policy did not answer ({why})")

    def loop(self) -> None:
        if not self.queue:
            return
        for w in self.workers:
            self._spawn(w)
        while self.queue or any(w.busy for w in self.workers):
            self._assign()
            now = time.monotonic()
            if self.pending:
                oldest = self.pending[0][0]
                running = sum(len(w.busy) for w in self.workers)
                if len(self.pending) >= self.max_batch or len(self.pending) >= running or now - oldest >= self.batch_timeout:
                    batch = [r for _, r in self.pending[: self.max_batch]]
                    self.pending = self.pending[self.max_batch:]
                    self._serve(batch)
                    continue
                timeout = max(0.0, oldest + self.batch_timeout - now)
            else:
                timeout = 1.0
            conns = {w.conn: w for w in self.workers}
            sentinels = {w.proc.sentinel: w for w in self.workers}
            ready = multiprocessing.connection.wait([*conns, *sentinels], timeout)
            for item in ready:
                if item in conns and conns[item].conn is item:
                    self._receive(conns[item])
            for item in ready:
                w = sentinels.get(item)
                if w is not None and w.proc.sentinel is item and not w.proc.is_alive() and not w.conn.poll():
                    self._replace(w, f"died (exit code {w.proc.exitcode})")
            now = time.monotonic()
            for w in self.workers:
                if self._working(w) and now - w.last_seen > self.hang_timeout:
                    self._replace(w, f"sent nothing for {self.hang_timeout:g} s (hung)")


def _as_policy(policy: Any) -> BatchPolicy:
    if isinstance(policy, BatchPolicy):
        return policy
    if callable(policy):
        return CallablePolicy(policy)
    raise TypeError(f"policy must be a fastenv.eval.BatchPolicy or a callable on a batch of observations, got {type(policy).__name__}")


def run(
    policy: Any,
    suites: Sequence[str] | str = ("libero_spatial",),
    *,
    tasks: Sequence[int] | None = None,
    episodes: int = 50,
    seed: int = 7,
    protocol: Protocol | str = "openpi",
    only: Sequence[str] | str | None = None,
    workers: int | None = None,
    envs_per_worker: int = 2,
    max_envs: int | None = None,
    max_batch: int | None = None,
    batch_timeout: float | None = None,
    hang_timeout: float = 600.0,
    retries: int = 2,
    out: str | os.PathLike | None = None,
    resume: bool = False,
    video: int = 0,
    video_dir: str | os.PathLike | None = None,
    record_actions: bool = False,
    progress: bool = True,
    context: str = "spawn",
    backend: str = "local",
    ray_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate ``policy`` on every episode of ``suites`` and return (and write to ``out``) the results.

    Args:
        policy: a ``BatchPolicy`` (``OpenpiPolicy``, ``VlaEvalPolicy``, ``LeRobotPolicy``, ...) or a
            callable on a batch of observations (``fastenv.eval.policies.CallablePolicy``).
        suites: the LIBERO suites (``episode_list``).
        tasks: the tasks of each suite (default: all).
        episodes: episodes per task, on its init states ``0 .. episodes - 1``.
        seed: the envs' seed, as the reference loops seed them.
        protocol: the loop's numbers, ``"openpi"`` (default), ``"oft"`` or a ``Protocol``.
        only: episode ids to run alone (``"libero_spatial/3/17"``), from the same list.
        workers: worker processes (default: the CPUs this process may use).
        envs_per_worker: env slots per worker.
        max_envs: at most this many envs alive in all (default: workers x envs_per_worker).
        max_batch: B_max, the policy's largest batch. The policy is called when ``max_batch`` envs
            wait for a chunk, when the oldest has waited ``batch_timeout``, or when every running
            episode waits. Where neither is given, the first calls run with every env slot and
            10 ms, then fastenv's tuning model chooses both from the policy's and the envs'
            measured costs (the JSON's ``run.tuned``).
        batch_timeout: T_max, in seconds.
        hang_timeout: a worker silent that long while it has work is replaced.
        retries: restarts of an episode before the run stops.
        out: the results JSON, refused if it exists unless ``resume``.
        resume: keep the episodes ``out`` holds and run the others.
        video: film the first ``video`` episodes of each task (every step's third-person frame,
            at the protocol's frame rate).
        video_dir: where the videos go (default: beside ``out``).
        record_actions: keep every action in the results (their digest is always kept).
        progress: show a progress bar.
        context: the multiprocessing start method (spawn or forkserver).
        backend: ``"local"`` (worker processes here) or ``"ray"`` (Ray actors over a cluster).
        ray_options: where the actors run (the vector env's ``RayOptions``: ``address``,
            ``num_cpus``, ``num_gpus``, ``resources``, ``placement_strategy``, ``runtime_env``).

    Returns:
        The payload written to ``out``: the episode list, each episode's result (success, length,
        return, the digest of its actions), the success rates per task and suite, and the run's
        figures (episodes per hour, the policy's calls, batch sizes and busy share, workers'
        memory, restarts).

    Examples:
        >>> from fastenv.eval import run
        >>> from fastenv.eval.policies import ProjectionPolicy
        >>> if __name__ == "__main__":
        ...     results = run(ProjectionPolicy(), "libero_spatial", tasks=[0], episodes=2, workers=2)
    """
    policy = _as_policy(policy)
    protocol = Protocol.named(protocol) if isinstance(protocol, str) else protocol
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be 'openpi', 'oft' or a fastenv.eval.Protocol, got {protocol!r}")
    if not policy.reads_chunk_starts_only and protocol.replan_steps != 1:
        raise ValueError(f"{type(policy).__name__} answers one action per observation (its server reads every step): the protocol "
                         f"must ask at every step, replan_steps=1 (--replan-steps 1), got {protocol.replan_steps}")
    suites = [suites] if isinstance(suites, str) else list(suites)
    for name, value, low in (("envs_per_worker", envs_per_worker, 1), ("retries", retries, 0), ("video", video, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    for name, value in (("workers", workers), ("max_envs", max_envs), ("max_batch", max_batch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be an int >= 1 (or None for its default), got {value!r}")
    for name, value in (("batch_timeout", batch_timeout), ("hang_timeout", hang_timeout)):
        if name == "batch_timeout" and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if backend not in ("local", "ray"):
        raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
    if ray_options is not None and backend != "ray":
        raise ValueError("ray_options are for backend='ray'")
    if context not in multiprocessing.get_all_start_methods() or context == "fork":
        raise ValueError(f"context must be 'spawn' or 'forkserver' (LIBERO's renderer does not survive a fork), got {context!r}")
    the_list = episode_list(suites, tasks=tasks, episodes=episodes, seed=seed)
    if only is not None:
        only = [only] if isinstance(only, str) else list(only)
        known = {e.id: e for e in the_list}
        for episode in only:
            Episode.from_id(episode, seed)  # the id's form
            if episode not in known:
                raise ValueError(f"episode {episode!r} is not in the list of suites {suites}, tasks {tasks if tasks is not None else 'all'}, "
                                 f"{episodes} episodes per task (give the options the list was made with)")
        todo_list = [known[e] for e in dict.fromkeys(only)]
    else:
        todo_list = the_list
    digest = _digest(the_list + [Episode("protocol:" + json.dumps(protocol.as_dict(), sort_keys=True), 0, 0, 0)])
    out_path = Path(out) if out is not None else None
    written: dict[str, dict[str, Any]] = {}
    if out_path is not None:
        if out_path.exists() and not resume:
            raise ValueError(f"{out_path} exists: resume=True (--resume) goes on from it, or give another path")
        written = _read_written(out_path, digest) if resume else {}
        out_path.parent.mkdir(parents=True, exist_ok=True)
    films = set()
    if video:
        if video_dir is None:
            video_dir = (out_path.parent / (out_path.stem + "_videos")) if out_path is not None else Path("videos")
        Path(video_dir).mkdir(parents=True, exist_ok=True)
        try:
            import imageio  # noqa: F401
        except ImportError as exc:
            raise ImportError("videos are written with imageio: pip install imageio imageio-ffmpeg") from exc
        seen: Counter[tuple[str, int]] = Counter()
        for e in the_list:
            if seen[(e.suite, e.task)] < video:
                films.add(e.id)
            seen[(e.suite, e.task)] += 1
    todo = [e for e in todo_list if e.id not in written]
    workers = workers if workers is not None else _cpus()
    workers = max(1, min(workers, len(todo) or 1))
    max_envs = max_envs if max_envs is not None else workers * envs_per_worker
    slots = min(workers * envs_per_worker, max_envs, max(1, len(todo)))
    workers = min(workers, slots)
    tune = max_batch is None and batch_timeout is None
    max_batch = max_batch if max_batch is not None else slots
    batch_timeout = batch_timeout if batch_timeout is not None else 0.01

    results: dict[str, dict[str, Any]] = dict(written)
    lines = None
    if out_path is not None:
        lines = open(out_path.with_name(out_path.name + ".episodes.jsonl"), "a")  # noqa: SIM115 (closed below)
        if lines.tell() == 0:
            lines.write(json.dumps({"episode_list_sha256": digest}) + "\n")
            lines.flush()
    bar = _Progress(len(todo), progress)
    successes = sum(bool(r["success"]) for r in written.values())

    def on_result(result: dict[str, Any]) -> None:
        nonlocal successes
        results[result["id"]] = result
        successes += bool(result["success"])
        if lines is not None:
            lines.write(json.dumps(result) + "\n")
            lines.flush()
        bar.update(len(results), successes)

    cluster = None
    if backend == "ray" and todo:
        from fastenv.eval.ray_workers import RayCluster

        cluster = RayCluster(ray_options)
    state = _Run(policy, protocol, todo, workers=workers, envs_per_worker=envs_per_worker, max_envs=max_envs, max_batch=max_batch,
                 batch_timeout=batch_timeout, hang_timeout=hang_timeout, retries=retries, film=films,
                 video_dir=None if video_dir is None else str(video_dir), record_actions=record_actions, context=context,
                 on_result=on_result, tune=tune, cluster=cluster)
    start = time.perf_counter()
    error: BaseException | None = None
    try:
        policy.open(len(state.workers))
        state.loop()
    except BaseException as exc:  # written below either way; KeyboardInterrupt too
        error = exc
        raise
    finally:
        seconds = time.perf_counter() - start
        bar.close()
        try:
            state.close()
        finally:
            policy.close()
        ran = [r for r in results.values() if r["id"] not in written]
        order = {e.id: i for i, e in enumerate(the_list)}
        payload = {
            "fastenv_eval": 1,
            "complete": error is None and all(e.id in results for e in todo_list),
            "stopped": None if error is None else f"{type(error).__name__}: {error}".splitlines()[0],
            "protocol": protocol.as_dict(),
            "suites": suites, "tasks": None if tasks is None else list(tasks), "episodes_per_task": episodes, "seed": seed,
            "only": only,
            "episode_list_sha256": digest,
            "episode_list": [e.as_dict() for e in the_list],
            "episodes": sorted(results.values(), key=lambda r: order.get(r["id"], 0)),
            **summarize(list(results.values()), [e for e in the_list if only is None or e.id in set(only)]),
            "run": {
                "seconds": seconds, "episodes_run": len(ran), "resumed_from": len(written),
                "episodes_per_hour": 3600 * len(ran) / seconds if seconds > 0 and ran else None,
                "env_steps": sum(r["length"] + protocol.num_steps_wait for r in ran),
                "camera_renders": sum(r["camera_renders"] for r in ran),
                "workers": len(state.workers), "env_slots": sum(len(w.slots) for w in state.workers), "max_batch": state.max_batch,
                "batch_timeout": state.batch_timeout, "tuned": state.tuned, "restarts": state.restarts,
                "policy": {**policy.describe(), "calls": state.calls, "served": state.served,
                           "mean_batch": float(np.mean(state.batch_sizes)) if state.batch_sizes else None,
                           "busy_seconds": state.policy_seconds, "busy_share": state.policy_seconds / seconds if seconds > 0 else None},
                "worker_max_rss_mb": {w.index: round(w.max_rss_mb, 1) for w in state.workers}, "backend": backend,
            },
        }
        if lines is not None:
            lines.close()
            tmp = out_path.with_name(out_path.name + ".tmp")
            tmp.write_text(json.dumps(payload, indent=1))
            tmp.replace(out_path)
            if payload["complete"]:
                out_path.with_name(out_path.name + ".episodes.jsonl").unlink(missing_ok=True)
    return payload
