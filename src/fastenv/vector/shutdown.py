"""A terminated run ends as an interrupted one does: SIGTERM to the main process closes its vector
envs (the workers asked to stop, shared memory and semaphores freed) before it exits, instead of
leaving the workers to find their pipes broken and Python's resource tracker to report leaks.

``watch(env)`` is called by each vector env with worker processes. Where SIGTERM still has its
default action and the env is built in the main thread, SIGTERM then raises ``SystemExit(143)``
(128 + 15, the status a shell reports for a terminated process) in the main thread, so
``finally`` blocks and context managers run; at exit, every vector env still open is closed. A
handler the program set itself is left alone.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
import weakref
from typing import Any

_open: weakref.WeakSet[Any] = weakref.WeakSet()
_installed = False


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _close_open() -> None:
    for env in list(_open):
        with contextlib.suppress(Exception):
            env.close()


def watch(env: Any) -> None:
    """Close ``env`` at exit, and let SIGTERM end the process through ``SystemExit``."""
    global _installed
    _open.add(env)
    if _installed:
        return
    _installed = True
    atexit.register(_close_open)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
