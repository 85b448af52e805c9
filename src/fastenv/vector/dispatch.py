"""How a PipelineVectorEnv talks to its workers: commands sent, replies handled, dead or stuck workers replaced.

Each env has a record (``_EnvState``: idle, its action sent, or its result arrived, and what its
worker reported); each command (``_Command``) waits on some envs of one worker. ``_WorkerDispatch``
is the vector env's side of it, mixed into ``PipelineVectorEnv``, which builds the workers
(``_spawn``, ``_await_ready``, ``_attach``) and holds the state these methods read and update.
"""

from __future__ import annotations

import enum
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.vector import worker as w
from fastenv.vector.layout import Layout
from fastenv.vector.transport import Transport, Worker, WorkerError

IDLE, PENDING, READY = 0, 1, 2  # no action in flight / action sent / result arrived, not yet received
_EMPTY: dict = {}  # shared, never mutated: the info of an env that reported none
_NOTHING = (_EMPTY, None)  # (info, final info) of an env whose step reported neither


class Restart(enum.IntEnum):
    """Where an env stands after its worker was replaced."""

    NONE = 0
    NEXT = 1  # its worker is new: the next action it is sent resets it instead of running
    RESULT = 2  # its ready result is that reset: a transition that did not happen


@dataclass
class _EnvState:
    """What the vector env knows about one env: one record per env."""

    status: int = IDLE
    by_ids: bool = False  # sent with env_ids (dynamic batching) rather than by stage
    info: dict = field(default_factory=lambda: _EMPTY)
    final: dict | None = None  # the step info of an episode that ended (autoreset)
    restart: Restart = Restart.NONE
    error: tuple[str, str, int] | None = None  # (message, traceback, env that raised) from its worker


@dataclass
class _Command:
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


class _WorkerDispatch:
    """Commands to the workers and their replies (mixed into ``PipelineVectorEnv``).

    Sends step, reset, call and set_attr commands, one per worker owning some of the envs;
    handles the replies as they arrive, marking each env's record; waits with deadlines, and
    replaces a worker that died or went silent (its envs come back reset, reported truncated).
    """

    # Kept by PipelineVectorEnv.
    num_envs: int
    num_workers: int
    pipeline_stages: int
    step_timeout: float
    max_restarts: int
    layout: Layout
    _transport: Transport
    _workers: list[Worker]
    _envs: list[_EnvState]
    _commands: dict[int, _Command]
    _next_cmd: int
    _ready_queue: deque[int]
    _seed_base: int | None
    _all_ids: np.ndarray
    _busy_envs: int
    _fresh: set[int]
    spin_wait: float

    # -- commands -------------------------------------------------------------------------------
    def _new_command(self, worker: Worker, kind: str, gids: list[int], per_env: bool = False) -> int:
        cmd = self._next_cmd
        self._next_cmd += 1
        self._commands[cmd] = _Command(worker.index, kind, gids, per_env)
        if not worker.commands:
            worker.deadline = time.monotonic() + self.step_timeout
        worker.commands.add(cmd)
        return cmd

    def _send(self, worker: Worker, message: tuple) -> bool:
        return self._transport.send(worker, message)

    def _ensure_alive(self, worker: Worker) -> None:
        if not self._transport.alive(worker):
            self._restart(worker, f"worker {worker.index} died ({self._transport.describe_exit(worker)})")

    def _cache_groups(self) -> None:
        """Worker groups of the whole batch and of each stage, computed once for the hot path."""
        self._groups: dict[tuple[int, int], list[tuple[Worker, list[int]]]] = {}
        self._group_ids: dict[tuple[int, int], np.ndarray] = {}
        self._group_sizes = {self.num_envs, self.layout.stage_size}
        for ids in [self._all_ids] + [self.layout.stage_envs(k) for k in range(self.pipeline_stages)]:
            key = (int(ids[0]), len(ids))
            self._group_ids[key] = ids
            owners = ids % self.num_workers
            self._groups[key] = [(wk, ids[owners == wk.index].tolist()) for wk in self._workers]

    def _split(self, gids: np.ndarray) -> list[tuple[Worker, list[int]]]:
        """``gids`` grouped by worker (cached for the whole batch and for each stage)."""
        if gids is self._all_ids:  # step(): no key to build, no ids to compare
            return self._groups[(0, self.num_envs)]
        key = (int(gids[0]), len(gids)) if len(gids) in self._group_sizes else None
        groups = self._groups.get(key) if key is not None else None
        if groups is None or not np.array_equal(gids, self._group_ids[key]):
            owners = gids % self.num_workers
            groups = [(wk, gids[owners == wk.index].tolist()) for wk in self._workers]
            groups = [(wk, mine) for wk, mine in groups if mine]
        return groups

    def _dispatch_steps(self, gids: np.ndarray, per_env: bool, dtypes: dict[str, Any] | None) -> None:
        """Send step commands (one per worker) for ``gids``, whose actions are in shared memory
        (``dtypes``: how they were given, from ``_write_actions``)."""
        envs = self._envs
        for gid in gids.tolist():
            env = envs[gid]
            env.status, env.by_ids = PENDING, per_env
        self._busy_envs += len(gids)
        for worker, mine in self._split(gids):
            self._send_step(worker, mine, per_env, dtypes)

    def _send_step(self, worker: Worker, gids: list[int], per_env: bool, dtypes: dict[str, Any] | None = None) -> None:
        restarts = {}
        for gid in gids if worker.restarts else ():  # only a replaced worker has envs to restart
            env = self._envs[gid]
            if env.restart == Restart.NEXT:
                # This env's worker was replaced: its action is not run; the env is reset and the
                # episode reported truncated, marked worker_restarted (a transition that did not happen).
                env.restart = Restart.RESULT
                self._fresh.discard(gid)
                restarts[gid] = self._restart_seed(gid, worker.restarts)
        cmd = self._new_command(worker, w.STEP, list(gids), per_env)
        if not self._send(worker, (w.STEP, cmd, tuple(gids), restarts, per_env, _rows_of(dtypes, gids))):
            self._restart(worker, f"worker {worker.index} could not be reached")

    def _step_whole(self, dtypes: dict[str, Any] | None) -> list[int] | None:
        """Step every env, keeping no per-env record while all goes as usual; the envs whose episode ended.

        The common step of fast envs: every env idle, none waiting for a restart, replies that
        carry no info (``mailbox``'s slots) within ``spin_wait``. Anything else (an info, an
        error, a dead or slow worker) hands the step to the records: it is then as if
        ``_dispatch_steps`` had sent it, and None is returned for ``_wait`` and ``_gather`` to finish.
        """
        sent: dict[int, tuple[Worker, list[int]]] = {}
        unreachable = []
        for worker, mine in self._split(self._all_ids):  # one group per worker, every worker
            cmd = self._next_cmd
            self._next_cmd += 1
            sent[cmd] = (worker, mine)
            if not self._send(worker, (w.STEP, cmd, tuple(mine), {}, False, _rows_of(dtypes, mine))):
                unreachable.append(worker)
        if unreachable:
            self._adopt(sent, [])
            for worker in unreachable:
                self._restart(worker, f"worker {worker.index} could not be reached")
            return None
        os.sched_yield()  # a worker sharing this core takes its command now; no reply can be here yet
        ended: list[int] = []
        pending = set(sent)
        busy = self._workers
        while pending:
            messages = self._transport.poll(busy, self.spin_wait)
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
                        self._restart(worker, f"worker {worker.index} died ({self._transport.describe_exit(worker)})")
                    else:
                        self._handle(worker, message)
                return None
            if pending and len(self._workers) > 1:
                busy = [sent[cmd][0] for cmd in pending]
        return ended

    def _adopt(self, sent: dict[int, tuple[Worker, list[int]]], ended: list[int], pending: set[int] | None = None) -> None:
        """Record a ``_step_whole`` step as ``_dispatch_steps`` would have: the commands still
        ``pending`` (all when None) in flight, the others' envs arrived (``ended``: those whose
        episode ended, with empty infos)."""
        now = time.monotonic()
        envs = self._envs
        for cmd, (worker, mine) in sent.items():
            if pending is None or cmd in pending:
                self._commands[cmd] = _Command(worker.index, w.STEP, list(mine), False)
                if not worker.commands:
                    worker.deadline = now + self.step_timeout
                worker.commands.add(cmd)
                status = PENDING
            else:
                status = READY
            for gid in mine:
                env = envs[gid]
                env.status, env.by_ids, env.info, env.final = status, False, _EMPTY, None
        for gid in ended:
            envs[gid].final = {}
        self._busy_envs += self.num_envs

    def _restart_seed(self, gid: int, restarts: int) -> int | None:
        if self._seed_base is None:
            return None
        return self._seed_base + gid + self.num_envs * restarts

    def _request(self, gids: np.ndarray, kind: str, message: Callable[[int, list[int]], tuple]) -> list[_Command]:
        """Send ``message(cmd, envs)`` to each worker owning some of ``gids``; wait for all replies."""
        commands = []
        for worker, mine in self._split(gids):
            self._ensure_alive(worker)
            cmd = self._new_command(worker, kind, mine)
            if not self._send(worker, message(cmd, mine)):
                self._restart(worker, f"worker {worker.index} could not be reached")
                self._commands.pop(cmd, None)
                cmd = self._new_command(worker, kind, mine)
                self._send(worker, message(cmd, mine))
            commands.append(cmd)
        self._wait(lambda: all(self._commands[c].done for c in commands))
        return [self._commands.pop(c) for c in commands]

    # -- receiving ------------------------------------------------------------------------------
    def _handle(self, worker: Worker, message: tuple) -> None:
        kind = message[0]
        if kind == w.ENV:
            _, cmd, (gid, info, final) = message
            self._complete(gid, info, final)
            command = self._commands.get(cmd)
            if command is not None:
                command.gids.remove(gid)
                if not command.gids:
                    self._finish(worker, cmd)
        elif kind == w.STEP:
            _, cmd, replies = message
            command = self._commands.get(cmd)
            if command is not None:
                # Only envs with an info or a finished episode are in the reply.
                got = {gid: (info, final) for gid, info, final in replies} if replies else {}
                envs = self._envs
                for gid in command.gids:
                    env = envs[gid]
                    if env.error is None and env.status == PENDING:  # (an env that raised was received already)
                        env.info, env.final = got.get(gid, _NOTHING)
                        env.status = READY
                self._finish(worker, cmd)
        elif kind in (w.RESET, w.RESULT):
            _, cmd, payload = message
            command = self._commands.get(cmd)
            if command is not None:
                command.result, command.done = payload, True
                self._finish(worker, cmd)
        elif kind == w.ERROR:
            _, cmd, gids, text, tb, origin = message
            command = self._commands.get(cmd)
            for gid in gids:
                if gid is None:
                    continue
                env = self._envs[gid]
                env.error = (text, tb, origin)
                if env.status == PENDING:  # ready to be collected, which raises the error
                    env.status = READY
                    if env.by_ids:
                        self._ready_queue.append(gid)
                if command is not None and command.per_env and gid in command.gids:
                    command.gids.remove(gid)
                    if not command.gids:
                        self._finish(worker, cmd)
            if command is not None and command.kind in (w.CALL, w.SET_ATTR):
                command.result, command.done = WorkerError(f"worker {worker.index}: {text}\n{tb}"), True
                self._finish(worker, cmd)
        if worker.commands:
            worker.deadline = time.monotonic() + self.step_timeout

    def _finish(self, worker: Worker, cmd: int) -> None:
        worker.commands.discard(cmd)
        command = self._commands[cmd]
        if command.kind == w.STEP:
            del self._commands[cmd]
        if not worker.commands:
            worker.deadline = float("inf")

    def _complete(self, gid: int, info: dict, final: dict | None) -> None:
        env = self._envs[gid]
        env.info, env.final, env.status = info, final, READY
        if env.by_ids:
            self._ready_queue.append(gid)

    def _pump(self, timeout: float | None) -> int:
        """Handle what the busy workers send within ``timeout``; restart dead or stuck ones.

        Returns the number of messages handled.
        """
        busy = [worker for worker in self._workers if worker.commands]
        if not busy:
            return 0
        soonest = min(worker.deadline for worker in busy) - time.monotonic()
        wait_for = max(0.0, soonest if timeout is None else min(timeout, soonest))
        messages = self._transport.poll(busy, wait_for)
        for worker, message in messages:
            if message is None:
                self._restart(worker, f"worker {worker.index} died ({self._transport.describe_exit(worker)})")
            else:
                self._handle(worker, message)
        now = time.monotonic()
        for worker in busy:
            if worker.commands and now > worker.deadline:
                self._restart(worker, f"worker {worker.index} sent nothing for step_timeout={self.step_timeout}s")
        return len(messages)

    def _pump_arrived(self) -> None:
        """Handle every message that has already arrived, without waiting for more."""
        while self._pump(0.0):
            pass

    def _wait(self, done: Callable[[], bool], deadline: float | None = None) -> bool:
        """Pump until ``done()`` or ``deadline`` (monotonic); False if the deadline came first."""
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            if not any(worker.commands for worker in self._workers):
                return done()
            self._pump(None if deadline is None else deadline - now)
        return True

    def _no_commands(self) -> bool:
        return not any(worker.commands for worker in self._workers)

    def _all_ready(self, gids: list[int]) -> Callable[[], bool]:
        envs = [self._envs[gid] for gid in gids]
        return lambda: all(env.status == READY for env in envs)

    # -- worker failure -------------------------------------------------------------------------
    def _restart(self, worker: Worker, reason: str) -> None:
        """Replace a dead or stuck worker; its envs come back reset and reported truncated."""
        self._transport.kill(worker)
        lost: list[tuple[int, bool]] = []
        for cmd in sorted(worker.commands):
            command = self._commands.pop(cmd)
            if command.kind == w.STEP:
                lost += [
                    (gid, command.per_env)
                    for gid in command.gids
                    if self._envs[gid].status == PENDING and self._envs[gid].error is None
                ]
            else:
                command.result, command.done = WorkerError(f"{reason} during {command.kind}"), True
                self._commands[cmd] = command  # keep the failed result for its waiter
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
            self._envs[gid].restart = Restart.NEXT
        self._fresh.update(worker.env_ids.tolist())
        for per_env in (False, True):
            gids = [gid for gid, p in lost if p == per_env]
            if gids:
                self._send_step(worker, gids, per_env)
