"""``fastenv eval``'s workers as Ray actors, across the machines of a Ray cluster (``backend="ray"``).

Each actor holds a ``fastenv.eval.worker.Worker`` (its env slots) and answers the same commands
as a local worker process. The runner talks to it as to a local one, through a pipe: a thread per
actor (``RayProcess``) takes each command from the pipe, calls the actor and sends its answer
back, so the runner's loop, its batching, restarts and results are the same for both. A lost
actor (its process or its node) ends its thread: the runner sees the pipe close, as it sees a
local worker die, and starts another. The actors are placed with the vector env's
``RayOptions`` (``num_cpus``, ``num_gpus``, ``resources``, ``placement_strategy``, ...); videos
are written on the node that filmed them.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Mapping
from typing import Any

from fastenv.eval.protocol import Protocol
from fastenv.eval.worker import Worker


class EvalActor:
    """The actor: a worker's env slots."""

    def __init__(self, index: int, protocol: Protocol, record_actions: bool, video_dir: str | None) -> None:
        self.worker = Worker(index, protocol, record_actions, video_dir)

    def pid(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def handle(self, message: tuple) -> tuple | None:
        return self.worker.handle(message)

    def close(self) -> None:
        self.worker.close()


class RayCluster:
    """Ray, started (or joined at ``address``) once, and the actors' placement."""

    def __init__(self, options: Mapping[str, Any] | None) -> None:
        from fastenv._deps import require
        from fastenv.vector.ray_backend import RayOptions

        self.ray = require("ray", "ray", "Ray")
        options = dict(options or {})
        unknown = sorted(set(options) - set(RayOptions.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown ray_options {unknown}; allowed: {sorted(RayOptions.__dataclass_fields__)}")
        self.options = RayOptions(**options)
        if not self.ray.is_initialized():  # started here, never shut down here (Ray stops with the process)
            self.ray.init(address=self.options.address, include_dashboard=False, logging_level="warning", log_to_driver=False)
        self.actor_class = self.ray.remote(EvalActor)

    def actor_options(self) -> dict[str, Any]:
        o = self.options
        return dict(num_cpus=o.num_cpus, num_gpus=o.num_gpus, resources=dict(o.resources) or None,
                    scheduling_strategy=o.placement_strategy if o.placement_strategy in ("SPREAD", "DEFAULT") else "SPREAD",
                    runtime_env=dict(o.runtime_env) if o.runtime_env else None, max_restarts=0, max_concurrency=1)  # one thread: its GL contexts


class RayProcess:
    """A Ray actor behind a pipe, with what the runner reads off a local process (``sentinel``,
    ``is_alive``, ``kill``, ``join``, ``exitcode``)."""

    def __init__(self, cluster: RayCluster, index: int, protocol: Protocol, record_actions: bool, video_dir: str | None) -> None:
        self.ray = cluster.ray
        self.actor = cluster.actor_class.options(**cluster.actor_options()).remote(index, protocol, record_actions, video_dir)
        self.conn, theirs = multiprocessing.Pipe()
        self.sentinel, self._alive = multiprocessing.Pipe(duplex=False)  # readable (at EOF) once the bridge ended
        self.pid: int | None = None
        self.node: str | None = None
        self.exitcode: str | None = None
        self._thread = threading.Thread(target=self._bridge, args=(theirs,), daemon=True, name=f"fastenv-eval-ray-{index}")
        self._thread.start()

    def _bridge(self, conn: Any) -> None:
        try:
            self.pid, self.node = self.ray.get(self.actor.pid.remote())
            conn.send(("hello", self.pid))
            while True:
                message = conn.recv()
                if message[0] == "close":
                    self.ray.get(self.actor.close.remote())
                    break
                conn.send(self.ray.get(self.actor.handle.remote(message)))
        except Exception as exc:  # noqa: BLE001 (the actor or its node lost, or the runner closed its end)
            self.exitcode = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            conn.close()
            self._alive.close()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def kill(self) -> None:
        try:
            self.ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001 (already gone)
            pass

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
