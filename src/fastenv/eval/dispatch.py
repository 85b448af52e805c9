"""The evaluation's loop: episodes handed to worker processes' env slots, the policies called on batches.

The loop in this process hands each episode to a free env slot of the least busy worker (among
those, a slot whose env holds the episode's task, so envs are rebuilt only when a slot changes
task), collects the requests of envs that need a chunk, and calls the policy on a batch when
``max_batch`` are waiting, when the oldest has waited ``batch_timeout`` seconds, or when every
running episode is waiting (no more can come). Each policy is called on a thread of its own
(``fastenv.eval.lanes``): while it computes, the workers step the envs that have their chunks,
and with several policies (one server per GPU) worker ``w`` is served by policy ``w % P``, each
policy batching its own workers' requests.

A worker that dies, or sends nothing for ``hang_timeout`` seconds while it has work, is killed
and started again; its episodes run again from their start (an episode's result depends on the
episode only, so they come out the same). An episode restarted more than ``retries`` times
stops the run, with the reason. ``fastenv.eval.runner`` plans the run, writes its results and
owns this loop's start and end.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastenv.eval.episodes import Episode
from fastenv.eval.lanes import Lane, lane_workers, share_of_cpus
from fastenv.eval.policies import BatchPolicy, PolicyUnavailable, Request
from fastenv.eval.protocol import Protocol, check_chunk
from fastenv.machine import available_cpus

__all__ = ["EvalError", "Dispatcher", "Worker"]


class EvalError(RuntimeError):
    """The run stopped: a bad answer from the policy, an env that raised, an episode that kept
    losing its worker. What was written stays written (``--resume`` goes on from it)."""


@dataclass
class Worker:
    """One worker process (or Ray actor) and its env slots: which episode each runs, which task its env holds."""

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




class Dispatcher:
    """One evaluation's state: workers, slots, the policies' lanes (their waiting requests), results."""

    def __init__(self, policies: Sequence[BatchPolicy], protocol: Protocol, todo: list[Episode], *, workers: int,
                 envs_per_worker: int, max_envs: int, max_batch: int | None, batch_timeout: float | None, hang_timeout: float,
                 retries: int, film: set[str], video_dir: str | None, record_actions: bool, context: str,
                 on_result: Callable[[dict[str, Any]], None], time_limit: float | None = None, cluster: Any = None) -> None:
        self.protocol = protocol
        self.queue: deque[Episode] = deque(todo)
        self.by_id = {e.id: e for e in todo}
        self.hang_timeout, self.retries = hang_timeout, retries
        self.film, self.video_dir, self.record = film, video_dir, record_actions
        self.ctx = multiprocessing.get_context(context)
        self.on_result = on_result
        slots = min(workers * envs_per_worker, max_envs)
        per = [slots // workers + (1 if i < slots % workers else 0) for i in range(workers)]
        self.workers = [Worker(i, list(range(n))) for i, n in enumerate(per) if n]
        self.by_index = {w.index: w for w in self.workers}
        tune = max_batch is None and batch_timeout is None
        self.lanes: list[Lane] = []
        for p, indices in enumerate(lane_workers(max(w.index for w in self.workers) + 1, len(policies))):
            mine = [i for i in indices if i in self.by_index]
            n = sum(len(self.by_index[i].slots) for i in mine)
            self.lanes.append(Lane(p, policies[p], mine, n, max_batch=max_batch if max_batch is not None else max(1, n),
                                   batch_timeout=batch_timeout if batch_timeout is not None else 0.01, tune=tune))
        self.lane_of = {i: lane for lane in self.lanes for i in lane.workers}
        self.cpus = available_cpus()
        self.attempts: Counter[str] = Counter()
        self.restarts = 0
        self.deadline = None if time_limit is None else time.monotonic() + time_limit
        self.cluster = cluster  # a RayCluster: workers are Ray actors

    # -- workers --------------------------------------------------------------------------------
    def _spawn(self, w: Worker) -> None:
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

    def _replace(self, w: Worker, why: str) -> None:
        """Kill ``w``, put its episodes back at the front of the queue, start it again. Its requests
        in a call out are dropped when the answers come (its start count has moved on)."""
        lost = list(w.busy.values())
        lane = self.lane_of[w.index]
        lane.pending = [(t, r) for t, r in lane.pending if r.worker != w.index]
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
        for lane in self.lanes:
            lane.close()

    # -- the loop -------------------------------------------------------------------------------
    def started_all(self) -> bool:
        """Whether no more episodes start: none left, or the time limit passed."""
        return not self.queue or (self.deadline is not None and time.monotonic() >= self.deadline)

    def _assign(self) -> None:
        """Hand queued episodes to free slots, the least busy worker first.

        Each episode goes to a free slot of a worker with the fewest busy slots (its envs step one
        after another, so a busier worker runs each of them slower). Among those workers' free
        slots, one whose env already holds a queued episode's task takes that episode (a rebuild
        costs seconds); a worker busier than another with a free slot never does, so an env is
        built anew rather than a busier worker loaded further. Otherwise the first free slot of
        the least busy worker (the lowest index among equals) takes an episode of a task no free
        slot holds, else the first in line.
        """
        while not self.started_all():
            free = [(w, s) for w in self.workers for s in w.slots if s not in w.busy]
            if not free:
                return
            least = min(len(w.busy) for w, _ in free)
            free = [(w, s) for w, s in free if len(w.busy) == least]
            pick = None
            for w, slot in free:
                held = w.tasks.get(slot)
                if held is not None:
                    pick = next((e for e in self.queue if (e.suite, e.task) == held), None)
                    if pick is not None:
                        break
            if pick is None:
                w, slot = free[0]
                taken = {t for ww in self.workers for s, t in ww.tasks.items() if s not in ww.busy}
                pick = next((e for e in self.queue if (e.suite, e.task) not in taken), self.queue[0])
            self.queue.remove(pick)
            self.attempts[pick.id] += 1
            self.lane_of[w.index].submit("start_episode", pick.id, pick.as_dict(), w.index)
            w.busy[slot] = pick.id
            w.tasks[slot] = (pick.suite, pick.task)
            w.conn.send(("start", slot, pick.as_dict(), self.attempts[pick.id], pick.id in self.film))
            w.last_seen = time.monotonic() if len(w.busy) == 1 else w.last_seen

    def _receive(self, w: Worker) -> None:
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
        lane = self.lane_of[w.index]
        if kind == "obs":
            _, _, episode, element, step, seconds = message
            if seconds is not None:
                lane.chunk_seconds.append(seconds)
            e = self.by_id[episode]
            lane.pending.append((time.monotonic(), Request(episode, element, step, w.index, slot,
                                                           {"suite": e.suite, "task": e.task, "init_state": e.init_state, "seed": e.seed})))
        elif kind == "done":
            result = message[2]
            w.busy.pop(slot, None)
            w.max_rss_mb = max(w.max_rss_mb, result.get("worker_max_rss_mb", 0.0))
            result["attempts"] = self.attempts[result["id"]]
            if len(self.lanes) > 1:
                result["policy"] = lane.index
            lane.submit("end_episode", result["id"], dict(result))
            self.on_result(result)
        elif kind == "error":
            _, _, episode, text = message
            w.busy.pop(slot, None)
            lines = [line for line in text.strip().splitlines() if line and not line[0].isspace() and ":" in line and
                     not line.startswith(("Traceback", "During handling", "The above exception"))]
            last = lines[-1] if lines else (text.strip().splitlines() or ["?"])[-1]
            raise EvalError(f"episode {episode}: the env raised on worker {w.index}: {last}\n{text}")

    def _working(self, w: Worker) -> bool:
        """Whether ``w`` owes an answer (a slot busy that is not waiting for the policy)."""
        waiting = self.lane_of[w.index].waiting(w.index)
        return any(slot not in waiting for slot in w.busy)

    def _call(self, lane: Lane) -> None:
        batch = lane.take()
        lane.call(batch, [self.by_index[r.worker].starts for r in batch])

    def _collect(self, lane: Lane) -> None:
        """What ``lane``'s thread finished: a call's chunks go to their envs; a hook that raised stops the run."""
        name = "the policy" if len(self.lanes) == 1 else f"policy {lane.index}"
        for method, args, value, error, seconds in lane.results():
            if method != "infer":
                raise EvalError(f"{name} raised in {method} (episode {args[0]}): {type(error).__name__}: {error}") from error
            batch = args[0]
            failed: dict[str, str] = {}
            if error is None:
                chunks = value
            elif isinstance(error, PolicyUnavailable):
                chunks = list(error.answers or [None] * len(batch))
                failed = {episode: str(error) for episode in error.episodes}
            elif isinstance(error, EvalError):
                raise error
            else:
                episodes = ", ".join(r.episode for r in batch)
                raise EvalError(f"{name} raised on a batch of {len(batch)} (episodes {episodes}): {type(error).__name__}: {error}") from error
            if len(chunks) != len(batch):
                raise EvalError(f"{name} returned {len(chunks)} chunks for a batch of {len(batch)} requests "
                                f"(episodes {', '.join(r.episode for r in batch)})")
            # a worker with all its busy slots in this call owed nothing: its silence was no hang
            idle = {r.worker for r, _ in lane.inflight or () if not self._working(self.by_index[r.worker])}
            inflight, lane.inflight = lane.inflight or [], None
            lane.record(len(batch), seconds, share_of_cpus(self.cpus, len(lane.workers), len(self.workers)), measured=not failed)
            now = time.monotonic()
            for (request, starts), chunk in zip(inflight, chunks):
                w = self.by_index[request.worker]
                if w.starts != starts or w.busy.get(request.slot) != request.episode:
                    continue  # its worker was replaced while the policy computed: the episode runs again anyway
                if request.episode in failed or chunk is None:
                    self._restart_unserved(w, request, failed.get(request.episode, "the policy gave no chunk"))
                    continue
                try:
                    chunk = check_chunk(chunk, request.episode, self.protocol.replan_steps)
                except ValueError as exc:
                    raise EvalError(str(exc)) from None
                lane.served += 1
                if w.index in idle:
                    w.last_seen = now
                w.conn.send(("act", request.slot, chunk[: self.protocol.replan_steps]))  # the rows the loop uses

    def _restart_unserved(self, w: Worker, request: Request, why: str) -> None:
        """The policy could not serve ``request``: its episode starts again (its slot is freed)."""
        w.busy.pop(request.slot, None)
        self._again(request.episode, f"the policy did not answer ({why})")

    def loop(self) -> None:
        if not self.queue:
            return
        for w in self.workers:
            self._spawn(w)
        for lane in self.lanes:
            lane.start()
        while not self.started_all() or any(w.busy for w in self.workers):
            self._assign()
            now = time.monotonic()
            timeout = 1.0
            for lane in self.lanes:
                due = lane.due(sum(len(self.by_index[i].busy) for i in lane.workers), now)
                if due == 0.0:
                    self._call(lane)
                elif due is not None:
                    timeout = min(timeout, due)
            conns = {w.conn: w for w in self.workers}
            sentinels = {w.proc.sentinel: w for w in self.workers}
            wakes = {lane.wake: lane for lane in self.lanes}
            ready = multiprocessing.connection.wait([*wakes, *conns, *sentinels], timeout)
            for item in ready:
                if item in wakes:
                    self._collect(wakes[item])
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
