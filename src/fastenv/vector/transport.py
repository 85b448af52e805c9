"""How a PipelineVectorEnv reaches its workers: local processes (here) or Ray actors (ray_backend).

A transport starts and stops workers, carries commands to them and their replies back, and owns
the arrays the vector env reads results from. ``ProcessTransport`` uses one shared-memory block
for the arrays and pipes for commands and infos.
"""

from __future__ import annotations

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

from fastenv.vector import worker as w
from fastenv.vector.shared import SharedArrays


class WorkerError(RuntimeError):
    """An env raised inside a worker (the message carries the worker's traceback).

    Raised by ``step``/``recv``, it also carries what the other envs of the call produced:
    ``results`` are the usual (obs, rewards, terminations, truncations, infos) of every env asked
    for (``env_ids``, in the call's order), valid where ``valid`` is True. The other rows belong to
    ``failed_env_ids`` (the env that raised and the envs its worker stepped in the same batch),
    which have no result: their observation is the last one the caller saw, reward 0, no flags, no
    info; reset them to continue. Other failures leave these attributes None.
    """

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
def child_environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of a child's start (it inherits them)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
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
    """Worker processes on this machine: pipes for commands and infos, one shared-memory block."""

    def __init__(
        self, context: Any, pipeline_stages: int, threads: int | None, spin_wait: float, worker_environments: Sequence[Mapping[str, str]] = ()
    ) -> None:
        self._ctx = context
        self._worker_environments = list(worker_environments)  # per worker: variables it starts with (its GPU)
        self._stages = pipeline_stages
        self._threads = threads
        self._spin_wait = spin_wait
        self._poller = select.poll()
        self._fd_worker: dict[int, Worker] = {}
        self._shared: SharedArrays | None = None

    def start(self, worker: Worker, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        parent, child = self._ctx.Pipe()
        process = self._ctx.Process(
            target=w.worker_main,
            args=(w.PickledFns(env_fns), worker.env_ids.tolist(), child, self._stages, self._threads, self._spin_wait),
            name=f"fastenv-worker-{worker.index}",
            daemon=True,
        )
        fd, note = tempfile.mkstemp(prefix="fastenv-worker-note-")
        os.close(fd)
        own = self._worker_environments[worker.index] if worker.index < len(self._worker_environments) else {}
        with child_environment({**w.limit_threads(self._threads), w.MAIN_GUARD_NOTE: note, **own}):
            process.start()
        child.close()
        worker.handle = _Process(process, parent, note)
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
        self._shared = SharedArrays(specs, num_envs)
        return self._shared.arrays

    def attach(self, worker: Worker, obs_space: Any, act_space: Any) -> None:
        worker.handle.conn.send((w.ATTACH, self._shared.handle(), obs_space, act_space))

    def send(self, worker: Worker, message: tuple) -> bool:
        try:
            worker.handle.conn.send(message)
            return True
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError):
            return False

    def poll(self, busy: list[Worker], timeout: float) -> list[tuple[Worker, tuple | None]]:
        """Messages from the busy workers within ``timeout``; (worker, None) for one that died.

        A worker's death closes its end of the pipe, which the poll reports (EOF on read).
        """
        events = self._poller.poll(0)
        if not events and self._spin_wait > 0:
            # Poll without sleeping for a moment, yielding the core: a blocked process takes tens
            # of microseconds to wake, which dominates the step time of fast envs.
            end = time.perf_counter() + min(self._spin_wait, timeout)
            while not events and time.perf_counter() < end:
                os.sched_yield()
                events = self._poller.poll(0)
        if not events:
            events = self._poller.poll(timeout * 1000.0)
        out = []
        for fd, _ in events:
            worker = self._fd_worker.get(fd)
            if worker is None:
                continue  # a restarted worker's old pipe
            try:
                out.append((worker, worker.handle.conn.recv()))  # further messages: the next poll
            except (EOFError, OSError):
                worker.handle.process.join(1.0)
                out.append((worker, None))
        return out

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
