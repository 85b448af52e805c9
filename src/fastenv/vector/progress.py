"""What a user sees while the workers build their envs (which takes seconds to minutes)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TextIO

# Where build lines go while a caller draws a progress bar of its own (None: the stream)
_route: Callable[[str], None] | None = None


@contextlib.contextmanager
def lines_through(write: Callable[[str], None]) -> Iterator[None]:
    """While inside, every ``BuildProgress`` made without a ``stream`` hands ``write`` whole lines.

    A progress bar redraws its own line: a line written to the terminal beside it lands on the
    bar's line, so a caller that shows one passes its writer (tqdm's ``tqdm.write``), which prints
    above the bar.

    Examples:
        >>> with lines_through(lambda line: tqdm.write(line, file=sys.stderr)):
        ...     envs = PipelineVectorEnv(fns, num_workers=2)
    """
    global _route
    previous, _route = _route, write
    try:
        yield
    finally:
        _route = previous


class BuildProgress:
    """A line on stderr while the workers build, shown once the build has taken ``delay`` seconds.

    On a terminal the line updates in place (workers ready, seconds so far); elsewhere (a log) one
    line says the build started and one when it is done. A fast build prints nothing.

    Examples:
        >>> with BuildProgress(num_envs=8, num_workers=2) as progress:
        ...     for worker in workers:
        ...         wait_for(worker)
        ...         progress.ready()
    """

    def __init__(self, num_envs: int, num_workers: int, *, enabled: bool | None = None, delay: float = 2.0, stream: TextIO | None = None) -> None:
        self.num_envs, self.num_workers = num_envs, num_workers
        self.enabled = True if enabled is None else bool(enabled)
        self.delay = 0.0 if enabled else delay
        self.route = _route if stream is None else None
        self.stream = stream if stream is not None else sys.stderr
        # routed lines are printed whole, as in a log: the router's bar holds the terminal's line
        self.tty = self.route is None and bool(getattr(self.stream, "isatty", lambda: False)())
        self._ready = 0
        self._shown = False
        self._start = time.monotonic()
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> BuildProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._tick, name="fastenv-build-progress", daemon=True)
            self._thread.start()
        return self

    def ready(self) -> None:
        """One more worker has built its envs."""
        with self._lock:
            self._ready += 1

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._shown:
                seconds = time.monotonic() - self._start
                outcome = f"built in {seconds:.1f} s" if exc_type is None else f"failed after {seconds:.1f} s"
                self._write(f"fastenv: {self.num_envs} envs in {self.num_workers} workers {outcome}", end=True)

    def _tick(self) -> None:
        if self._done.wait(self.delay):
            return
        while True:
            with self._lock:
                seconds = time.monotonic() - self._start
                if self.tty or not self._shown:
                    self._write(
                        f"fastenv: building {self.num_envs} envs in {self.num_workers} workers: "
                        f"{self._ready}/{self.num_workers} ready, {seconds:.0f} s",
                        end=not self.tty,
                    )
                self._shown = True
            if self._done.wait(1.0):
                return

    def _write(self, text: str, *, end: bool) -> None:
        if self.route is not None:
            self.route(text)
            return
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if end else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
