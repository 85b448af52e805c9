"""How a PipelineVectorEnv reaches its workers: local processes (here) or Ray actors (ray_backend).

A transport starts and stops workers, carries commands to them and their replies back, and owns
the arrays the vector env reads results from. ``ProcessTransport`` uses one shared-memory block
for the arrays and each worker's mailbox (``mailbox``: step commands and replies without infos
in shared memory, everything else pickled through a pipe, every message counted by a semaphore).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import select
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from fastenv.vector import mailbox as mb
from fastenv.vector import worker as w
from fastenv.vector.shared import SharedArrays

MAILBOX_COMMANDS, MAILBOX_REPLIES = "mailbox/commands", "mailbox/replies"


class WorkerError(RuntimeError):
    """An env raised inside a worker (the message carries the worker's traceback).

    Raised by ``step``/``recv``, it also carries what the other envs of the call produced:
    ``results`` are the usual (obs, rewards, terminations, truncations, infos) of every env asked
    for (``env_ids``, in the call's order), valid where ``valid`` is True. The other rows belong to
    ``failed_env_ids`` (the env that raised and the envs its worker stepped in the same batch),
    which have no result: their observation is the last one the caller saw, reward 0, no flags, no
    info; reset them to continue. Other failures leave these attributes None.

    An env's error whose class is a builtin exception (or derives from one) arrives as an instance
    of that class too (``worker_error``): ``except ValueError`` catches a ValueError raised in a
    worker, and ``get_attr`` of a missing attribute raises an ``AttributeError``.
    """

    builtin: str | None = None  # the builtin exception class this error is also an instance of

    def __init__(
        self,
        message: str,
        *,
        failed_env_ids: np.ndarray | None = None,
        results: tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]] | None = None,
        env_ids: np.ndarray | None = None,
        valid: np.ndarray | None = None,
    ) -> None:
        super().__init__(message)
        self.failed_env_ids = failed_env_ids
        self.results = results
        self.env_ids = env_ids
        self.valid = valid

    __str__ = RuntimeError.__str__  # the message as given (KeyError's own would quote it)

    def __reduce__(self) -> tuple:
        return (_rebuild_worker_error, (self.builtin, self.args), self.__dict__)


_WITH_BUILTIN: dict[str, type[WorkerError]] = {}


def _with_builtin(builtin: str | None) -> type[WorkerError]:
    """``WorkerError`` made also a subclass of the builtin exception class named ``builtin``."""
    base = getattr(builtins, builtin, None) if builtin else None
    if not (isinstance(base, type) and issubclass(base, Exception)) or issubclass(WorkerError, base):
        return WorkerError
    if builtin not in _WITH_BUILTIN:
        try:
            _WITH_BUILTIN[builtin] = type("WorkerError", (WorkerError, base), {"__module__": __name__, "builtin": builtin})
        except TypeError:  # a class whose instance layout cannot be combined with RuntimeError's
            _WITH_BUILTIN[builtin] = WorkerError
    return _WITH_BUILTIN[builtin]


def worker_error(message: str, builtin: str | None = None, **fields: Any) -> WorkerError:
    """A ``WorkerError`` that is also an instance of the builtin exception class ``builtin`` (its name)."""
    try:
        return _with_builtin(builtin)(message, **fields)
    except TypeError:  # a class whose constructor takes other arguments (UnicodeDecodeError...)
        return WorkerError(message, **fields)


def _rebuild_worker_error(builtin: str | None, args: tuple) -> WorkerError:
    return worker_error(*args, builtin)


@dataclass
class Worker:
    """One worker as the vector env sees it; ``handle`` belongs to the transport."""

    index: int
    env_ids: np.ndarray
    handle: Any = None
    pid: int | None = None
    deadline: float = float("inf")
    restarts: int = 0
    commands: set[int] = field(default_factory=set)


class Transport(Protocol):
    """What the vector env needs from a way of running workers."""

    def start(self, worker: Worker, env_fns: Sequence[Callable[[], gym.Env]]) -> None: ...

    def ready(self, worker: Worker, timeout: float) -> dict[str, Any]: ...

    def arrays(self, specs: list, num_envs: int) -> dict[str, np.ndarray]: ...

    def attach(self, worker: Worker, obs_space: Any, act_space: Any) -> None: ...

    def send(self, worker: Worker, message: tuple) -> bool: ...

    def poll(self, busy: list[Worker], timeout: float) -> list[tuple[Worker, tuple | None]]: ...

    def kill(self, worker: Worker) -> None: ...

    def stop(self, workers: list[Worker]) -> None: ...


@contextlib.contextmanager
def child_environment(variables: Mapping[str, str | None]) -> Iterator[None]:
    """Set environment variables (None: unset) for the duration of a child's start (it inherits them)."""
    saved = {name: os.environ.get(name) for name in variables}
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class _Process:
    process: Any
    conn: Any
    mailbox: mb.Mailbox
    note: str = ""  # where the worker writes why it could not start (see worker.check_not_bootstrapping)


def _read_note(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


class ProcessTransport:
    """Worker processes on this machine: one shared-memory block, a mailbox per worker."""

    def __init__(
        self,
        context: Any,
        pipeline_stages: int,
        threads: int | None,
        spin_wait: float,
        worker_environments: Sequence[Mapping[str, str]] = (),
        autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    ) -> None:
        self._ctx = context
        self._autoreset_mode = autoreset_mode
        self._worker_environments = list(worker_environments)  # per worker: variables it starts with (its GPU)
        self._stages = pipeline_stages
        self._threads = threads
        self._spin_wait = spin_wait
        self._poller = select.poll()  # the pipes: a worker's death hangs up its pipe
        self._fd_worker: dict[int, Worker] = {}
        self._shared: SharedArrays | None = None
        self._slot_length = 0
        self._num_workers = 0
        # Every worker posts it after each message: the one thing a waiting vector env sleeps on.
        self._wake = context.Semaphore(0)

    def start(self, worker: Worker, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        parent, child = self._ctx.Pipe()
        inbox, outbox = self._ctx.Semaphore(0), self._ctx.Semaphore(0)
        process = self._ctx.Process(
            target=w.worker_main,
            args=(w.PickledFns(env_fns), worker.env_ids.tolist(), child, self._stages, self._threads, self._spin_wait, (inbox, outbox, self._wake), self._autoreset_mode),
            name=f"fastenv-worker-{worker.index}",
            daemon=True,
        )
        self._slot_length = max(self._slot_length, mb.slot_length(len(worker.env_ids)))
        self._num_workers = max(self._num_workers, worker.index + 1)
        fd, note = tempfile.mkstemp(prefix="fastenv-worker-note-")
        os.close(fd)
        own = self._worker_environments[worker.index] if worker.index < len(self._worker_environments) else {}
        with child_environment({**w.limit_threads(self._threads), w.MAIN_GUARD_NOTE: note, **own}):
            process.start()
        child.close()
        worker.handle = _Process(process, parent, mb.Mailbox(parent, inbox, outbox, w.STEP, w.ENV), note)
        self._poller.register(parent.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        self._fd_worker[parent.fileno()] = worker

    def ready(self, worker: Worker, timeout: float) -> dict[str, Any]:
        conn = worker.handle.conn
        if not conn.poll(timeout):
            _remove(worker.handle.note)
            raise WorkerError(f"worker {worker.index} built no env within startup_timeout={timeout}s")
        try:
            message = conn.recv()
        except (EOFError, OSError) as exc:
            worker.handle.process.join(5.0)
            why = _read_note(worker.handle.note)
            if why:
                raise WorkerError(f"worker {worker.index} could not start: {why}") from None
            code = worker.handle.process.exitcode
            raise WorkerError(
                f"worker {worker.index} died while building its envs (exit code {code}); its own output above says why"
            ) from exc
        finally:
            _remove(worker.handle.note)
        if message[0] == w.STARTUP_ERROR:
            raise WorkerError(f"worker {worker.index} failed to build its envs: {message[1]}\n{message[2]}")
        return message[1]

    def arrays(self, specs: list, num_envs: int) -> dict[str, np.ndarray]:
        # Each worker's two mailbox slots are a row of these (rows indexed by worker).
        mailboxes = [(name, (self._slot_length,), np.dtype(np.int64), self._num_workers) for name in (MAILBOX_COMMANDS, MAILBOX_REPLIES)]
        self._shared = SharedArrays([*specs, *mailboxes], num_envs)
        return {path: array for path, array in self._shared.arrays.items() if path not in (MAILBOX_COMMANDS, MAILBOX_REPLIES)}

    def attach(self, worker: Worker, obs_space: Any, act_space: Any) -> None:
        arrays = self._shared.arrays
        worker.handle.mailbox.attach(arrays[MAILBOX_COMMANDS][worker.index], arrays[MAILBOX_REPLIES][worker.index])
        self.send(worker, (w.ATTACH, self._shared.handle(), obs_space, act_space, (MAILBOX_COMMANDS, MAILBOX_REPLIES, worker.index)))

    def send(self, worker: Worker, message: tuple) -> bool:
        try:
            worker.handle.mailbox.send(message)
            return True
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            return False

    def poll(self, busy: list[Worker], timeout: float) -> list[tuple[Worker, tuple | None]]:
        """Messages from the busy workers within ``timeout``; (worker, None) for one that died.

        Takes the messages there are; else tries again for ``spin_wait`` seconds, yielding the
        core (a process that sleeps takes tens of microseconds to wake, which dominates the step
        of a fast env); else sleeps until a worker posts, waking now and then to see whether one
        has died (its pipe hangs up).
        """
        out = self._take(busy)
        if out:
            return out
        now = time.perf_counter()
        deadline = now + timeout
        end = now + min(self._spin_wait, timeout)
        check = now + mb.CHECK_PEER_EVERY
        while now < end:
            os.sched_yield()
            out = self._take(busy)
            if out:
                return out
            now = time.perf_counter()
            if now > check:  # a long spin_wait still sees a worker die
                check = now + mb.CHECK_PEER_EVERY
                if self._hung_up(busy):
                    break
        while True:
            dead = self._hung_up(busy)
            if dead:
                out = self._take(busy)  # what they sent before they died comes first
                for worker in dead:
                    worker.handle.process.join(1.0)  # so its exit code can be told
                return out + [(worker, None) for worker in dead]
            # A token left by a message already taken only makes this loop go round once more.
            self._wake.acquire(True, max(0.0, min(deadline - time.perf_counter(), mb.CHECK_PEER_EVERY)))
            out = self._take(busy)
            if out or time.perf_counter() >= deadline:
                return out

    def _take(self, busy: list[Worker]) -> list[tuple[Worker, tuple | None]]:
        out: list[tuple[Worker, tuple | None]] = []
        for worker in busy:
            for message in worker.handle.mailbox.take():
                self._wake.acquire(False)  # one wake token per message, so they do not pile up
                out.append((worker, message))
        return out

    def _hung_up(self, busy: list[Worker]) -> list[Worker]:
        hung = {fd for fd, event in self._poller.poll(0) if event & (select.POLLHUP | select.POLLERR)}
        return [worker for worker in busy if not worker.handle.conn.closed and worker.handle.conn.fileno() in hung]

    def alive(self, worker: Worker) -> bool:
        return worker.handle.process.is_alive()

    def describe_exit(self, worker: Worker) -> str:
        return f"exit code {worker.handle.process.exitcode}"

    def kill(self, worker: Worker) -> None:
        process = worker.handle.process
        if process.is_alive():
            process.kill()
        process.join(5.0)
        self._forget(worker)

    def _forget(self, worker: Worker) -> None:
        _remove(worker.handle.note)
        conn = worker.handle.conn
        fd = conn.fileno() if not conn.closed else None
        if fd is not None and self._fd_worker.get(fd) is worker:
            del self._fd_worker[fd]
            with contextlib.suppress(KeyError, ValueError):
                self._poller.unregister(fd)
        with contextlib.suppress(OSError):
            conn.close()

    def stop(self, workers: list[Worker]) -> None:
        """Ask every worker to close its envs, kill the ones that do not, free the shared memory."""
        started = [wk for wk in workers if wk.handle is not None]
        for worker in started:
            self.send(worker, (w.CLOSE,))
        deadline = time.monotonic() + 10.0
        for worker in started:
            process = worker.handle.process
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5.0)
            self._forget(worker)
        if self._shared is not None:
            self._shared.close()
            self._shared = None
