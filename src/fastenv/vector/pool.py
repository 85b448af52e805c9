"""The workers of a PipelineVectorEnv: commands sent, replies handled, dead or stuck workers replaced.

``WorkerPool`` owns the workers, the transport that reaches them and the arrays they write their
results to, and keeps a record of each env (``EnvRecord``: idle, its action sent, or its result
arrived, and what its worker reported) and of each command in flight (``Command``: it waits on
some envs of one worker). The vector env checks the caller's arguments, asks the pool, and reads
the results the pool marked arrived (``results``).
"""

from __future__ import annotations

import enum
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fastenv.vector import worker as w
from fastenv.vector.errors import AlreadyPendingCallError
from fastenv.vector.layout import Layout
from fastenv.vector.progress import BuildProgress
from fastenv.vector.shared import leaf_specs
from fastenv.vector.transport import Transport, Worker, WorkerError, worker_error

EMPTY: dict = {}  # shared, never mutated: the info of an env that reported none
_NOTHING = (EMPTY, None)  # (info, final info) of an env whose step reported neither


class EnvStatus(enum.Enum):
    """Where an env's last action stands."""

    IDLE = "idle"  # none in flight
    PENDING = "pending"  # sent, its result not arrived
    READY = "ready"  # its result arrived, not yet received


class Restart(enum.Enum):
    """Where an env stands after its worker was replaced."""

    NONE = "none"
    NEXT = "next"  # its worker is new: the next action it is sent resets it instead of running
    RESULT = "result"  # its ready result is that reset: a transition that did not happen


@dataclass
class EnvRecord:
    """What the pool knows about one env: one record per env."""

    status: EnvStatus = EnvStatus.IDLE
    by_ids: bool = False  # sent with env_ids (dynamic batching) rather than by stage
    info: dict = field(default_factory=lambda: EMPTY)
    final: dict | None = None  # the step info of an episode that ended (autoreset)
    restart: Restart = Restart.NONE
    error: tuple[str, str, int, str] | None = None  # (message, traceback, env that raised, its builtin class) from its worker


@dataclass
class Command:
    worker: int
    kind: str
    gids: list[int]
    per_env: bool = False
    result: Any = None
    done: bool = False


def _rows_of(dtypes: dict[str, Any] | None, gids: list[int]) -> dict[str, Any] | None:
    """A step's action ``dtypes`` for one worker: rows sent along with the command cut to its envs."""
    if dtypes is None:
        return None
    return {path: given if isinstance(given, np.dtype) else given[gids] for path, given in dtypes.items()}


def _only_ended(entries: list[tuple[int, dict, dict | None]]) -> bool:
    """True when a step reply lists only ended episodes with empty infos (as the mailbox's slot carries them)."""
    for _, info, final in entries:
        if info or final is None or final:
            return False
    return True


class WorkerPool:
    """N envs in worker processes (or Ray actors): their commands, replies, records and arrays.

    Sends step, reset, call and set_attr commands, one per worker owning some of the envs;
    handles the replies as they arrive, marking each env's record; waits with deadlines, and
    replaces a worker that died or went silent (its envs come back reset, reported truncated).

    Args:
        env_fns: the N env constructors (each worker calls those of its envs).
        layout: which worker holds which env, and the pipeline stages.
        transport: how the workers are started and reached.
        step_timeout: seconds a worker with work may stay silent before it is replaced.
        startup_timeout: seconds a worker may take to build its envs.
        max_restarts: replacements allowed per worker before the failure is raised.
        spin_wait: seconds to try for the next reply before sleeping on it.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        layout: Layout,
        transport: Transport,
        *,
        step_timeout: float,
        startup_timeout: float,
        max_restarts: int,
        spin_wait: float,
    ) -> None:
        self.env_fns = list(env_fns)
        self.layout = layout
        self.transport = transport
        self.step_timeout = step_timeout
        self.startup_timeout = startup_timeout
        self.max_restarts = max_restarts
        self.spin_wait = spin_wait
        n = layout.num_envs
        self.workers = [Worker(i, layout.worker_envs(i)) for i in range(layout.num_workers)]
        self.envs = [EnvRecord() for _ in range(n)]
        self.all_ids = np.arange(n)
        self.busy_envs = 0  # envs not idle (sent, or arrived and not yet received): the hot path checks this
        self.fresh: set[int] = set()  # envs of a replaced worker, to be reset by their next step or reset()
        self.ready_queue: deque[int] = deque()  # envs sent with env_ids whose results arrived, in order
        self.failed: set[int] = set()  # envs that lost their state in a worker error: reset before stepping
        self.seed_base: int | None = None  # the int seed of the last reset: a replaced worker's envs are seeded from it
        self.commands: dict[int, Command] = {}
        self._next_cmd = 0
        # The arrays the workers write to (``open_arrays``), and the actions' leaves in their wide dtypes.
        self.obs: Any = None
        self.final_obs: Any = None
        self.actions: Any = None
        self.rewards: Any = None
        self.terminations: Any = None
        self.truncations: Any = None
        self.action_leaves: dict[str, np.ndarray] = {}
        self._spaces: tuple[gym.Space, gym.Space] | None = None  # (observation, action) of one env, for the workers' arrays
        self.closed = False
        self._cache_groups()

    # -- start and stop -------------------------------------------------------------------------
    def start(self, progress: bool | None) -> list[dict[str, Any]]:
        """Start every worker; the description of each one's envs (spaces, metadata...)."""
        descriptions = []
        with BuildProgress(self.layout.num_envs, self.layout.num_workers, enabled=progress) as building:
            for worker in self.workers:
                self._spawn(worker)
            for worker in self.workers:
                descriptions.append(self._await_ready(worker))
                building.ready()
        return descriptions

    def open_arrays(self, obs_space: gym.Space, act_space: gym.Space) -> None:
        """Make the arrays the workers write to, and hand them to every worker."""
        self._spaces = (obs_space, act_space)
        arrays = self.transport.arrays(w.array_specs(obs_space, act_space), self.layout.num_envs)
        (self.obs, self.final_obs, self.actions, self.rewards, self.terminations, self.truncations) = w.buffers(arrays, obs_space, act_space)
        self.action_leaves = {path: arrays[path] for path, _, _ in leaf_specs(act_space, "actions")}
        for worker in self.workers:
            self._attach(worker)

    def close(self) -> None:
        """Stop the workers (asking first, then killing) and free the arrays."""
        if self.closed:
            return
        self.closed = True
        self.obs = self.final_obs = self.actions = None
        self.rewards = self.terminations = self.truncations = None
        self.action_leaves = {}
        self.transport.stop(self.workers)

    def _spawn(self, worker: Worker) -> None:
        self.transport.start(worker, [self.env_fns[i] for i in worker.env_ids])
        worker.deadline = time.monotonic() + self.startup_timeout

    def _await_ready(self, worker: Worker) -> dict[str, Any]:
        description = self.transport.ready(worker, self.startup_timeout)
        worker.pid = description.get("pid")
        worker.deadline = float("inf")
        return description

    def _attach(self, worker: Worker) -> None:
        self.transport.attach(worker, *self._spaces)

    # -- state ----------------------------------------------------------------------------------
    def regroup(self, layout: Layout) -> None:
        """Take ``layout``'s pipeline stages (the same envs on the same workers)."""
        self.layout = layout
        self._cache_groups()

    def in_flight(self) -> np.ndarray:
        """Ids of the envs whose actions were sent and whose results were not yet received."""
        idle = EnvStatus.IDLE
        return np.array([gid for gid, env in enumerate(self.envs) if env.status is not idle], dtype=np.int64)

    def check_idle(self, gids: np.ndarray, what: str, stepping: bool = True) -> None:
        """Refuse to send ``gids`` anything while an action is in flight, or (``stepping``) to step
        an env that lost its state in a worker error."""
        if not self.busy_envs and not (stepping and self.failed):
            return
        idle = EnvStatus.IDLE
        busy = [gid for gid in gids.tolist() if self.envs[gid].status is not idle]
        if busy:
            raise AlreadyPendingCallError(
                f"{what}: envs {busy} still have actions in flight; recv() them first", "step" if stepping else "reset"
            )
        if stepping and self.failed:
            lost = sorted(self.failed.intersection(gids.tolist()))
            if lost:
                raise RuntimeError(
                    f"{what}: envs {lost} have no result of their last step (a worker error): "
                    "reset them first, reset(options={'reset_mask': mask})"
                )

    # -- commands -------------------------------------------------------------------------------
    def _new_command(self, worker: Worker, kind: str, gids: list[int], per_env: bool = False) -> int:
        cmd = self._next_cmd
        self._next_cmd += 1
        self.commands[cmd] = Command(worker.index, kind, gids, per_env)
        if not worker.commands:
            worker.deadline = time.monotonic() + self.step_timeout
        worker.commands.add(cmd)
        return cmd

    def _ensure_alive(self, worker: Worker) -> None:
        if not self.transport.alive(worker):
            self._restart(worker, f"worker {worker.index} died ({self.transport.describe_exit(worker)})")

    def _cache_groups(self) -> None:
        """Worker groups of the whole batch and of each stage, computed once for the hot path."""
        layout = self.layout
        self._groups: dict[tuple[int, int], list[tuple[Worker, list[int]]]] = {}
        self._group_ids: dict[tuple[int, int], np.ndarray] = {}
        self._group_sizes = {layout.num_envs, layout.stage_size}
        for ids in [self.all_ids] + [layout.stage_envs(k) for k in range(layout.num_stages)]:
            key = (int(ids[0]), len(ids))
            self._group_ids[key] = ids
            owners = ids % layout.num_workers
            self._groups[key] = [(wk, ids[owners == wk.index].tolist()) for wk in self.workers]
        self._whole = self._groups[(0, layout.num_envs)]  # every env, one group per worker: step()'s

    def split(self, gids: np.ndarray) -> list[tuple[Worker, list[int]]]:
        """``gids`` grouped by worker (cached for the whole batch and for each stage)."""
        if gids is self.all_ids:  # step(): no key to build, no ids to compare
            return self._whole
        key = (int(gids[0]), len(gids)) if len(gids) in self._group_sizes else None
        groups = self._groups.get(key) if key is not None else None
        if groups is None or not np.array_equal(gids, self._group_ids[key]):
            owners = gids % self.layout.num_workers
            groups = [(wk, gids[owners == wk.index].tolist()) for wk in self.workers]
            groups = [(wk, mine) for wk, mine in groups if mine]
        return groups

    def send_steps(self, gids: np.ndarray, per_env: bool, dtypes: dict[str, Any] | None) -> None:
        """Send step commands (one per worker) for ``gids``, whose actions are in the arrays
        (``dtypes``: how they were given, see ``PipelineVectorEnv._write_actions``)."""
        envs = self.envs
        pending = EnvStatus.PENDING
        for gid in gids.tolist():
            env = envs[gid]
            env.status, env.by_ids = pending, per_env
        self.busy_envs += len(gids)
        for worker, mine in self.split(gids):
            self._send_step(worker, mine, per_env, dtypes)

    def _send_step(self, worker: Worker, gids: list[int], per_env: bool, dtypes: dict[str, Any] | None = None) -> None:
        restarts = {}
        for gid in gids if worker.restarts else ():  # only a replaced worker has envs to restart
            env = self.envs[gid]
            if env.restart is Restart.NEXT:
                # This env's worker was replaced: its action is not run; the env is reset and the
                # episode reported truncated, marked worker_restarted (a transition that did not happen).
                env.restart = Restart.RESULT
                self.fresh.discard(gid)
                restarts[gid] = self._restart_seed(gid, worker.restarts)
        cmd = self._new_command(worker, w.STEP, list(gids), per_env)
        if not self.transport.send(worker, (w.STEP, cmd, tuple(gids), restarts, per_env, _rows_of(dtypes, gids))):
            self._restart(worker, f"worker {worker.index} could not be reached")

    def step_whole(self, dtypes: dict[str, Any] | None) -> list[int] | None:
        """Step every env, keeping no per-env record while all goes as usual; the envs whose episode ended.

        The common step of fast envs: every env idle, none waiting for a restart, replies that
        carry no info (``mailbox``'s slots) within ``spin_wait``. Anything else (an info, an
        error, a dead or slow worker) hands the step to the records: it is then as if
        ``send_steps`` had sent it, and None is returned for ``wait`` and the results to finish.
        """
        sent: dict[int, tuple[Worker, list[int]]] = {}
        unreachable = []
        transport = self.transport
        for worker, mine in self._whole:  # one group per worker, every worker
            cmd = self._next_cmd
            self._next_cmd += 1
            sent[cmd] = (worker, mine)
            if not transport.send(worker, (w.STEP, cmd, tuple(mine), {}, False, _rows_of(dtypes, mine))):
                unreachable.append(worker)
        if unreachable:
            self._adopt(sent, [])
            for worker in unreachable:
                self._restart(worker, f"worker {worker.index} could not be reached")
            return None
        os.sched_yield()  # a worker sharing this core takes its command now; no reply can be here yet
        ended: list[int] = []
        pending = set(sent)
        busy = self.workers
        while pending:
            messages = transport.poll(busy, self.spin_wait)
            if not messages:  # a slow step: the records' wait sleeps, and watches the deadlines
                self._adopt(sent, ended, pending)
                return None
            for i, (worker, message) in enumerate(messages):
                if message is not None and message[0] == w.STEP and message[1] in pending and _only_ended(message[2]):
                    pending.discard(message[1])
                    ended += [gid for gid, _, _ in message[2]]
                    continue
                self._adopt(sent, ended, pending)
                for worker, message in messages[i:]:
                    if message is None:
                        self._restart(worker, f"worker {worker.index} died ({transport.describe_exit(worker)})")
                    else:
                        self._handle(worker, message)
                return None
            if pending and len(self.workers) > 1:
                busy = [sent[cmd][0] for cmd in pending]
        return ended

    def _adopt(self, sent: dict[int, tuple[Worker, list[int]]], ended: list[int], pending: set[int] | None = None) -> None:
        """Record a ``step_whole`` step as ``send_steps`` would have: the commands still
        ``pending`` (all when None) in flight, the others' envs arrived (``ended``: those whose
        episode ended, with empty infos)."""
        now = time.monotonic()
        envs = self.envs
        for cmd, (worker, mine) in sent.items():
            if pending is None or cmd in pending:
                self.commands[cmd] = Command(worker.index, w.STEP, list(mine), False)
                if not worker.commands:
                    worker.deadline = now + self.step_timeout
                worker.commands.add(cmd)
                status = EnvStatus.PENDING
            else:
                status = EnvStatus.READY
            for gid in mine:
                env = envs[gid]
                env.status, env.by_ids, env.info, env.final = status, False, EMPTY, None
        for gid in ended:
            envs[gid].final = {}
        self.busy_envs += self.layout.num_envs

    def _restart_seed(self, gid: int, restarts: int) -> int | None:
        if self.seed_base is None:
            return None
        return self.seed_base + gid + self.layout.num_envs * restarts

    def request(self, gids: np.ndarray, kind: str, message: Callable[[int, list[int]], tuple]) -> list[Command]:
        """Send ``message(cmd, envs)`` to each worker owning some of ``gids``; wait for all replies."""
        commands = []
        for worker, mine in self.split(gids):
            self._ensure_alive(worker)
            cmd = self._new_command(worker, kind, mine)
            if not self.transport.send(worker, message(cmd, mine)):
                self._restart(worker, f"worker {worker.index} could not be reached")
                self.commands.pop(cmd, None)
                cmd = self._new_command(worker, kind, mine)
                self.transport.send(worker, message(cmd, mine))
            commands.append(cmd)
        self.wait(lambda: all(self.commands[c].done for c in commands))
        return [self.commands.pop(c) for c in commands]

    def reset(self, gids: np.ndarray, seeds: list[int | None], options: dict[str, Any] | None) -> list[tuple[int, dict]]:
        """Reset ``gids`` (idle) with ``seeds`` (one per env, by id); (env id, reset info) of each.

        An env whose reset raised has no state to step from: it is marked failed, and the first
        error is raised (a ``WorkerError``, also of the env's error class where that is a builtin).
        """
        for worker, mine in self.split(gids):
            self._ensure_alive(worker)
            for gid in mine:
                if seeds[gid] is None and self.envs[gid].restart is Restart.NEXT:
                    # A fresh env (its worker was replaced) has no generator state to go on from:
                    # seed it as a restart does, so its episodes stay reproducible.
                    seeds[gid] = self._restart_seed(gid, worker.restarts)
        commands = self.request(gids, w.RESET, lambda cmd, mine: (w.RESET, cmd, mine, [seeds[g] for g in mine], options))
        infos: list[tuple[int, dict]] = []
        failures = []
        for command in commands:
            if isinstance(command.result, Exception):
                failures.append(command.result)
                continue
            infos += [(gid, info) for gid, info, _ in command.result]
        errors = {}
        for gid in gids.tolist():
            env = self.envs[gid]
            if env.error is not None:
                errors[gid] = env.error
            env.status, env.error, env.restart, env.info, env.final = EnvStatus.IDLE, None, Restart.NONE, EMPTY, None
        self.fresh.difference_update(gids.tolist())
        self.failed.difference_update(gids.tolist())
        self.failed.update(errors)  # an env whose reset raised has no state to step from either
        if errors:
            text, tb, _, builtin = next(iter(errors.values()))
            raise worker_error(f"reset failed for envs {sorted(errors)}: {text}\n{tb}", builtin)
        if failures:
            raise WorkerError(f"reset failed for envs ?: {failures[0]}\n")
        return infos

    def call(self, gids: np.ndarray, target: Any, args: tuple, kwargs: dict) -> tuple[Any, ...]:
        """``target`` (a name, or a function to apply) called on each of ``gids``; results in their order."""
        results: dict[int, Any] = {}
        for command in self.request(gids, w.CALL, lambda cmd, mine: (w.CALL, cmd, mine, target, args, kwargs)):
            if isinstance(command.result, Exception):
                raise command.result
            results.update(zip(command.gids, command.result))
        return tuple(results[i] for i in gids.tolist())

    def set_attr(self, gids: np.ndarray, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` on each of ``gids`` to its value in ``values`` (indexed by env id)."""
        for command in self.request(gids, w.SET_ATTR, lambda cmd, mine: (w.SET_ATTR, cmd, mine, name, [values[g] for g in mine])):
            if isinstance(command.result, Exception):
                raise command.result

    # -- receiving ------------------------------------------------------------------------------
    def _handle(self, worker: Worker, message: tuple) -> None:
        kind = message[0]
        if kind == w.ENV:
            _, cmd, (gid, info, final) = message
            self._complete(gid, info, final)
            command = self.commands.get(cmd)
            if command is not None:
                command.gids.remove(gid)
                if not command.gids:
                    self._finish(worker, cmd)
        elif kind == w.STEP:
            _, cmd, replies = message
            command = self.commands.get(cmd)
            if command is not None:
                # Only envs with an info or a finished episode are in the reply.
                got = {gid: (info, final) for gid, info, final in replies} if replies else {}
                envs = self.envs
                pending, ready = EnvStatus.PENDING, EnvStatus.READY
                for gid in command.gids:
                    env = envs[gid]
                    if env.error is None and env.status is pending:  # (an env that raised was received already)
                        env.info, env.final = got.get(gid, _NOTHING)
                        env.status = ready
                self._finish(worker, cmd)
        elif kind in (w.RESET, w.RESULT):
            _, cmd, payload = message
            command = self.commands.get(cmd)
            if command is not None:
                command.result, command.done = payload, True
                self._finish(worker, cmd)
        elif kind == w.ERROR:
            _, cmd, gids, text, tb, origin, builtin = message
            command = self.commands.get(cmd)
            for gid in gids:
                if gid is None:
                    continue
                env = self.envs[gid]
                env.error = (text, tb, origin, builtin)
                if env.status is EnvStatus.PENDING:  # ready to be collected, which raises the error
                    env.status = EnvStatus.READY
                    if env.by_ids:
                        self.ready_queue.append(gid)
                if command is not None and command.per_env and gid in command.gids:
                    command.gids.remove(gid)
                    if not command.gids:
                        self._finish(worker, cmd)
            if command is not None and command.kind in (w.CALL, w.SET_ATTR):
                command.result, command.done = worker_error(f"worker {worker.index}: {text}\n{tb}", builtin), True
                self._finish(worker, cmd)
        if worker.commands:
            worker.deadline = time.monotonic() + self.step_timeout

    def _finish(self, worker: Worker, cmd: int) -> None:
        worker.commands.discard(cmd)
        command = self.commands[cmd]
        if command.kind == w.STEP:
            del self.commands[cmd]
        if not worker.commands:
            worker.deadline = float("inf")

    def _complete(self, gid: int, info: dict, final: dict | None) -> None:
        env = self.envs[gid]
        env.info, env.final, env.status = info, final, EnvStatus.READY
        if env.by_ids:
            self.ready_queue.append(gid)

    def _pump(self, timeout: float | None) -> int:
        """Handle what the busy workers send within ``timeout``; restart dead or stuck ones.

        Returns the number of messages handled.
        """
        busy = [worker for worker in self.workers if worker.commands]
        if not busy:
            return 0
        soonest = min(worker.deadline for worker in busy) - time.monotonic()
        wait_for = max(0.0, soonest if timeout is None else min(timeout, soonest))
        messages = self.transport.poll(busy, wait_for)
        for worker, message in messages:
            if message is None:
                self._restart(worker, f"worker {worker.index} died ({self.transport.describe_exit(worker)})")
            else:
                self._handle(worker, message)
        now = time.monotonic()
        for worker in busy:
            if worker.commands and now > worker.deadline:
                self._restart(worker, f"worker {worker.index} sent nothing for step_timeout={self.step_timeout}s")
        return len(messages)

    def pump_arrived(self) -> None:
        """Handle every message that has already arrived, without waiting for more."""
        while self._pump(0.0):
            pass

    def wait(self, done: Callable[[], bool], deadline: float | None = None) -> bool:
        """Pump until ``done()`` or ``deadline`` (monotonic); False if the deadline came first."""
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if not any(worker.commands for worker in self.workers):
                return done()
            self._pump(None if deadline is None else deadline - now)
        return True

    def no_commands(self) -> bool:
        return not any(worker.commands for worker in self.workers)

    def all_ready(self, gids: list[int]) -> Callable[[], bool]:
        envs = [self.envs[gid] for gid in gids]
        ready = EnvStatus.READY
        return lambda: all(env.status is ready for env in envs)

    # -- worker failure -------------------------------------------------------------------------
    def _restart(self, worker: Worker, reason: str) -> None:
        """Replace a dead or stuck worker; its envs come back reset and reported truncated."""
        self.transport.kill(worker)
        lost: list[tuple[int, bool]] = []
        for cmd in sorted(worker.commands):
            command = self.commands.pop(cmd)
            if command.kind == w.STEP:
                lost += [
                    (gid, command.per_env)
                    for gid in command.gids
                    if self.envs[gid].status is EnvStatus.PENDING and self.envs[gid].error is None
                ]
            else:
                command.result, command.done = WorkerError(f"{reason} during {command.kind}"), True
                self.commands[cmd] = command  # keep the failed result for its waiter
        worker.commands.clear()
        worker.restarts += 1
        if worker.restarts > self.max_restarts:
            self.close()
            raise WorkerError(f"{reason}; worker {worker.index} failed {worker.restarts} times (max_restarts={self.max_restarts})")
        self._spawn(worker)
        self._await_ready(worker)
        self._attach(worker)
        # Every env of the worker is new: the next action of each resets it instead of running.
        for gid in worker.env_ids.tolist():
            self.envs[gid].restart = Restart.NEXT
        self.fresh.update(worker.env_ids.tolist())
        for per_env in (False, True):
            gids = [gid for gid, p in lost if p == per_env]
            if gids:
                self._send_step(worker, gids, per_env)
