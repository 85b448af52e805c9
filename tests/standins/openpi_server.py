"""openpi's websocket policy server (``src/openpi/serving/websocket_policy_server.py``), as a stand-in
built from its protocol: openpi itself is not on the package index.

The protocol, as openpi's server speaks it: on a new connection the server sends its metadata
(msgpack with openpi-client's numpy extension); then for each message it unpacks an observation
dict, calls ``policy.infer(obs)``, adds ``server_timing`` and sends the packed dict back. A policy
that raises makes the server send the traceback as a text frame and close the connection with
code 1011. ``GET /healthz`` answers 200. The server answers each connection in its own task, one
message at a time, on one event loop.

Here it runs on a thread (``start``), with ``stop()`` to take it down (a server that disappears)
and ``stall`` to stop answering (a server that hangs).
"""

from __future__ import annotations

import asyncio
import http
import threading
import time
import traceback
from typing import Any


class PolicyServer:
    def __init__(self, infer: Any, metadata: dict | None = None) -> None:
        self.infer = infer
        self.metadata = metadata or {}
        self.stall = False
        self.connections = 0
        self.requests = 0
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    async def _handler(self, websocket: Any) -> None:
        import websockets
        from openpi_client import msgpack_numpy

        self.connections += 1
        packer = msgpack_numpy.Packer()
        await websocket.send(packer.pack(self.metadata))
        while True:
            try:
                obs = msgpack_numpy.unpackb(await websocket.recv())
                self.requests += 1
                while self.stall:
                    await asyncio.sleep(0.05)
                start = time.monotonic()
                action = dict(self.infer(obs))
                action["server_timing"] = {"infer_ms": 1000 * (time.monotonic() - start)}
                await websocket.send(packer.pack(action))
            except websockets.ConnectionClosed:
                break
            except Exception:
                await websocket.send(traceback.format_exc())
                await websocket.close(code=1011, reason="Internal server error. Traceback included in previous frame.")
                raise

    @staticmethod
    def _health(connection: Any, request: Any) -> Any:
        if request.path == "/healthz":
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        return None

    async def _serve(self, ready: threading.Event) -> None:
        from websockets.asyncio.server import serve

        self._stop = asyncio.Event()
        async with serve(self._handler, "127.0.0.1", 0, compression=None, max_size=None, process_request=self._health) as server:
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            await self._stop.wait()

    def start(self) -> PolicyServer:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(ready),), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the stand-in policy server did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self.stall = False
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
