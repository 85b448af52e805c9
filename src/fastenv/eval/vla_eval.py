"""vla-eval's model servers serving fastenv's episodes: ``VlaEvalPolicy``.

vla-eval (``pip install vla-eval``) runs a model behind a WebSocket server
(``vla_eval.model_servers``: ``PredictModelServer`` subclasses for pi0, OpenVLA-OFT, GR00T, ...)
and runs its benchmarks as that server's clients. ``VlaEvalPolicy`` is such a client: it speaks
the protocol vla-eval's benchmarks speak and sends each env's observation as vla-eval's LIBERO
benchmark would, so a model server started for vla-eval serves ``fastenv eval`` unchanged.

The protocol (vla-eval 0.8: ``protocol/messages.py``, ``connection.py``, ``model_servers/serve.py``,
``model_servers/predict.py``, ``runners/sync_runner.py``):

- Messages are msgpack maps ``{"type", "payload", "seq", "timestamp"}``, one per WebSocket
  frame. A numpy array travels as ``{"__ndarray__": True, "data", "dtype", "shape"}``; an HWC
  uint8 image may travel as ``{"__image__": True, "format": "png" | "jpeg" | "raw", ...}``
  (vla-eval's own client encodes images as PNG, lossless). The server decodes both.
- A connection opens with ``HELLO`` both ways. The server's reply names it (``model_server``)
  and carries ``observation_params``: what the benchmark should send (``send_wrist_image``,
  ``send_state``; OFT adds ``quat_no_antipodal`` and ``env_seed``). vla-eval merges these into
  its benchmark's parameters; this client reads them the same way.
- A session is a connection: the server keeps the model's chunk buffer per session. An episode
  is what lies between ``EPISODE_START`` (payload ``{"task": {"name", "suite", "task_id",
  "episode_idx"}}``; the server empties the session's chunk buffer) and ``EPISODE_END``
  (payload ``{"metrics": {"success": ...}, "steps": ...}``). Neither gets an answer (a failing
  ``EPISODE_START`` gets an ``ERROR`` with its ``seq``).
- Each ``OBSERVATION`` gets one ``ACTION`` with the observation's ``seq`` (or an ``ERROR``). A
  connection's observations are served one at a time, so the server batches across
  connections: ``PredictModelServer(max_batch_size=N, max_wait_time=s)`` gathers the
  observations of concurrent sessions into ``predict_batch`` calls. vla-eval runs one
  connection per shard process, each running one episode at a time; this client holds one
  connection per env slot (worker, slot), reused across the slot's episodes, and sends a
  batch's observations at once, so the server sees as many concurrent sessions as there are
  envs waiting.

**One action per observation: every step renders.** A ``PredictModelServer`` with
``chunk_size`` (pi0's and OFT's servers default to 10, GR00T's to 16) answers each observation
with one action ``{"actions": (7,)}``: the first row of a new chunk, then the chunk's next rows
from the session's buffer without running the model, until the buffer is empty. vla-eval's
LIBERO benchmark sends an observation every step and steps the one action it gets. So this
policy has ``reads_chunk_starts_only = False`` (the runner renders both cameras every step)
and answers each request with a chunk of one row: run it with ``Protocol(replan_steps=1)``.
(A server built with ``chunk_size=None`` returns its model's raw output; a 2-D answer is passed
on as the chunk, though vla-eval's own LIBERO benchmark would refuse it.)

The observation, as vla-eval's LIBERO benchmark builds it (``benchmarks/libero/benchmark.py``,
``make_obs``)::

    {"images": {"agentview": image, "wrist": wrist_image},   # "wrist" if send_wrist_image
     "task_description": instruction,
     "states": (8,) float64}                                 # if send_state

made from fastenv's element (``fastenv.eval.protocol.openpi_element``) with these conversions:

- Images: vla-eval's LIBERO sends the 256 x 256 camera renders flipped on both axes (rotated
  180 degrees) and NOT resized. fastenv's element holds them rotated the same way and resized
  with padding to ``Protocol.resize_size`` (224 by default, as openpi's client does), and that
  is what is sent. pi0's LIBERO server config (``image_resolution: 224``) resizes the 256 render
  with PIL's bilinear filter itself, the very pixels of fastenv's 224 element; a server that
  resizes on its own (OFT, GR00T, ...) gets a resize of the 224 image instead of the 256 one.
  To send exactly vla-eval's images, run with ``Protocol(resize_size=256)`` (the camera size:
  the element is then the rotated render, unresized).
- State: the same 8 values (end effector position, orientation as an axis-angle, the gripper's
  two joints), but vla-eval's LIBERO turns the quaternion into an axis-angle after flipping it
  to ``w >= 0`` (an angle of at most pi) unless the server asks for ``quat_no_antipodal`` (OFT
  does), while fastenv's element has robosuite's ``quat2axisangle`` (no flip: the angle may
  exceed pi). The flip is applied here from the axis-angle (an angle ``a > pi`` about ``u``
  becomes ``2 pi - a`` about ``-u``), and the three values are rounded to float32 as vla-eval's are.
- Not sent: ``controller_states`` (the controller's pose, which vla-eval's LIBERO adds with
  ``send_state`` and only X-VLA's server reads; fastenv's element does not hold it).

Env-side differences the policy does not see (the runner's protocol decides them): vla-eval's
LIBERO steps the gripper as its sign (-1 or +1), seeds the env with ``env_seed`` (OFT asks for
0), and waits ``num_steps_wait`` (10) dummy steps, as openpi's loop does.

Bounded waits: a batch gets ``timeout`` seconds. Requests not answered by then, and those whose
connection is refused or drops, raise ``PolicyUnavailable`` naming their episodes (with the
answers that did come); their connections are closed and made again, with a new
``EPISODE_START``, for the next request. An ``ERROR`` answer from the server (its model raised)
is not a lost connection: it stops the run with the server's message.

``vla_eval`` itself is not needed on this side: the client needs ``websockets`` and ``msgpack``
(and Pillow for ``image_format="png"``), imported when a connection is made.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.eval.policies import BatchPolicy, PolicyUnavailable, Request

__all__ = ["VlaEvalPolicy", "vla_eval_observation", "vla_eval_state"]

LIBERO_BENCHMARK = "vla_eval.benchmarks.libero.benchmark:LIBEROBenchmark"  # what this client stands in for
PROTOCOL_VERSION = 1


def vla_eval_state(state: Any, quat_no_antipodal: bool = False) -> np.ndarray:
    """fastenv's 8-D LIBERO state as vla-eval's LIBERO benchmark sends it (``states``).

    The axis-angle (values 3:6, robosuite's ``quat2axisangle``: an angle in [0, 2 pi]) is flipped
    to the quaternion with ``w >= 0`` (an angle of at most pi), as vla-eval's ``quat_to_axisangle``
    does, unless ``quat_no_antipodal``; either way it is rounded to float32 as vla-eval's is.
    """
    s = np.array(state, dtype=np.float64).reshape(-1)
    if s.size != 8:
        raise ValueError(f"a LIBERO state has 8 values (position, axis-angle, gripper joints), got {s.size}")
    aa = s[3:6].copy()
    angle = float(np.linalg.norm(aa))
    if not quat_no_antipodal and angle > math.pi:
        aa = -aa / angle * (2.0 * math.pi - angle)
    s[3:6] = aa.astype(np.float32)
    return s


def vla_eval_observation(element: Mapping[str, Any], *, send_wrist_image: bool, send_state: bool,
                         quat_no_antipodal: bool = False) -> dict[str, Any]:
    """fastenv's openpi-style element as the observation vla-eval's LIBERO benchmark sends."""
    images = {"agentview": np.ascontiguousarray(element["observation/image"], dtype=np.uint8)}
    if send_wrist_image:
        images["wrist"] = np.ascontiguousarray(element["observation/wrist_image"], dtype=np.uint8)
    obs: dict[str, Any] = {"images": images, "task_description": str(element["prompt"])}
    if send_state:
        obs["states"] = vla_eval_state(element["observation/state"], quat_no_antipodal)
    return obs


# -- the wire format ---------------------------------------------------------------------------

def _encoder(image_format: str) -> Any:
    def encode(obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            if image_format == "png" and obj.ndim == 3 and obj.dtype == np.uint8 and obj.shape[2] in (1, 3, 4):
                import io

                from PIL import Image

                buf = io.BytesIO()
                Image.fromarray(obj[:, :, 0] if obj.shape[2] == 1 else obj).save(buf, format="PNG")
                return {"__image__": True, "format": "png", "data": buf.getvalue(), "shape": list(obj.shape)}
            return {"__ndarray__": True, "data": obj.tobytes(), "dtype": obj.dtype.str, "shape": list(obj.shape)}
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, np.integer):
            return int(obj)
        if isinstance(obj, np.floating):
            return float(obj)
        raise TypeError(f"cannot send a {type(obj).__name__} to a vla-eval server")

    return encode


def _decode(obj: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    if obj.get("__ndarray__"):
        dtype = np.dtype(obj["dtype"])
        if dtype.kind not in "biuf":
            raise ValueError(f"the server sent an array of dtype {dtype}")
        return np.frombuffer(obj["data"], dtype=dtype).reshape(obj["shape"]).copy()
    if obj.get("__image__"):
        if obj.get("format") == "raw":
            return np.frombuffer(obj["data"], dtype=np.dtype(obj["dtype"])).reshape(obj["shape"]).copy()
        import io

        from PIL import Image

        return np.array(Image.open(io.BytesIO(obj["data"])))
    return obj


def _pack(kind: str, payload: Mapping[str, Any], seq: int, image_format: str) -> bytes:
    import msgpack

    message = {"type": kind, "payload": payload, "seq": seq, "timestamp": time.time()}
    return msgpack.packb(message, default=_encoder(image_format), use_bin_type=True)


def _unpack(data: bytes | str) -> dict[str, Any]:
    import msgpack

    if isinstance(data, str):
        raise TypeError("the server sent a text frame; vla-eval's protocol is binary msgpack")
    message = msgpack.unpackb(data, object_hook=_decode, raw=False)
    if not isinstance(message, dict) or not {"type", "payload", "seq"} <= set(message):
        got = sorted(message) if isinstance(message, dict) else type(message).__name__
        raise ValueError(f"the server sent a message that is not vla-eval's ({got})")
    return message


def _plain(value: Any) -> Any:
    """A value msgpack can carry as it is (for EPISODE_END's payload)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


class _Unavailable(Exception):
    """A connection refused, dropped or broken: the request's episode goes back to the runner."""


class _ServerError(RuntimeError):
    """The server answered ERROR (its model raised)."""


@dataclass
class _Slot:
    """One env slot's connection (a vla-eval session) and the episode it is in."""

    key: tuple[int, int]
    ws: Any = None
    seq: int = 0
    episode: str | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq


class VlaEvalPolicy(BatchPolicy):
    """A vla-eval model server (``PredictModelServer``: pi0, OFT, GR00T, ...) as fastenv's policy.

    Args:
        url: the server's WebSocket address, as vla-eval's ``server.url`` (``ws://host:port``;
            ``host:port`` is read as ``ws://host:port``).
        timeout: seconds a batch may wait for its answers (connecting included); the requests
            still unanswered raise ``PolicyUnavailable``.
        send_wrist_image: whether the observation holds the wrist camera (see the module's
            docstring); None follows the server's ``observation_params`` (its HELLO reply), else
            vla-eval's LIBERO default (False), as vla-eval's orchestrator does.
        send_state: whether it holds the robot's state; None as for ``send_wrist_image``.
        quat_no_antipodal: whether the state's axis-angle skips vla-eval's w >= 0 flip; None as
            for ``send_wrist_image``.
        image_format: ``"raw"`` (arrays as they are) or ``"png"`` (vla-eval's client default:
            lossless, smaller, slower to encode). The server decodes both to the same pixels.

    One connection per env slot, kept across the slot's episodes; ``EPISODE_START`` goes out
    before an episode's first observation, ``EPISODE_END`` (with the result) when it ends.
    Each request is answered with a chunk of one row (the server's action for that step): run
    with ``Protocol(replan_steps=1)``; every step renders.
    """

    reads_chunk_starts_only = False

    def __init__(self, url: str = "ws://localhost:8000", *, timeout: float = 30.0, send_wrist_image: bool | None = None,
                 send_state: bool | None = None, quat_no_antipodal: bool | None = None, image_format: str = "raw") -> None:
        url = str(url)
        if "://" not in url:
            url = f"ws://{url}"
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(f"a vla-eval model server is reached at ws://host:port, got {url!r}")
        if image_format not in ("raw", "png"):
            raise ValueError(f"image_format must be 'raw' or 'png', got {image_format!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.url, self.timeout, self.image_format = url, float(timeout), image_format
        self.overrides = {"send_wrist_image": send_wrist_image, "send_state": send_state, "quat_no_antipodal": quat_no_antipodal}
        self.server_info: dict[str, Any] | None = None  # the server's HELLO reply
        self._slots: dict[tuple[int, int], _Slot] = {}
        self._fresh: set[str] = set()  # episodes started (start_episode) whose EPISODE_START is not sent yet
        self._fresh_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    # -- what is sent ----------------------------------------------------------------------------
    def observation_params(self) -> dict[str, bool]:
        """What the observations hold: the constructor's choices, else the server's
        ``observation_params``, else vla-eval's LIBERO defaults."""
        asked = (self.server_info or {}).get("observation_params") or {}
        return {k: bool(asked.get(k, False)) if v is None else bool(v) for k, v in self.overrides.items()}

    def observation(self, request: Request) -> dict[str, Any]:
        """The observation sent for ``request`` (vla-eval's LIBERO ``make_obs``)."""
        return vla_eval_observation(request.element, **self.observation_params())

    @staticmethod
    def task_info(request: Request) -> dict[str, Any]:
        """``EPISODE_START``'s task, as vla-eval's sync runner sends it (the task's plain fields)."""
        meta = request.meta or {}
        parts = request.episode.split("/")
        suite = meta.get("suite", parts[0] if len(parts) == 3 else "")
        task = meta.get("task", int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 0)
        init = meta.get("init_state", int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 0)
        return {"name": str(request.element.get("prompt", "")), "suite": str(suite), "task_id": int(task), "episode_idx": int(init)}

    # -- the runner's calls ----------------------------------------------------------------------
    def open(self, num_workers: int) -> None:
        self._ensure_loop()

    def start_episode(self, episode: str, meta: Mapping[str, Any], worker: int) -> None:
        with self._fresh_lock:  # its EPISODE_START goes out before its first observation, on its slot's connection
            self._fresh.add(episode)

    def infer(self, requests: Sequence[Request]) -> Sequence[np.ndarray]:
        if not requests:
            return []
        self._ensure_loop()
        outcomes = self._run(self._serve_batch(list(requests)), self.timeout)
        out: list[np.ndarray | None] = [None] * len(requests)
        failed: list[str] = []
        reasons: set[str] = set()
        errors: list[str] = []
        for i, (request, outcome) in enumerate(zip(requests, outcomes)):
            if isinstance(outcome, _ServerError):
                errors.append(f"episode {request.episode}: {outcome}")
            elif isinstance(outcome, BaseException):
                failed.append(request.episode)
                reasons.add(str(outcome))
            else:
                out[i] = outcome
        if errors:
            raise RuntimeError(f"vla-eval's model server at {self.url} answered with an error: " + "; ".join(errors))
        if failed:
            raise PolicyUnavailable(f"vla-eval's model server at {self.url}: {'; '.join(sorted(reasons))}", failed, out)
        return out  # type: ignore[return-value]

    def end_episode(self, episode: str, result: Mapping[str, Any]) -> None:
        with self._fresh_lock:
            self._fresh.discard(episode)
        if self._loop is None:
            return
        payload = {"metrics": {"success": bool(result.get("success", False))}, "fastenv": _plain(dict(result))}
        if "steps" in result:
            payload["steps"] = _plain(result["steps"])
        with contextlib.suppress(Exception):  # the episode is over; a lost connection is made again when next needed
            self._run(self._end(episode, payload), self.timeout)

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None:
            return
        with contextlib.suppress(Exception):  # closing what may be gone already
            self._run(self._close_all(), 5.0)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5)
        if not loop.is_running():
            loop.close()
        self._loop = self._thread = None
        self._slots.clear()

    def describe(self) -> dict[str, Any]:
        info = self.server_info or {}
        return {
            "form": "vla-eval model server", "url": self.url, "timeout_s": self.timeout, "image_format": self.image_format,
            "server": {k: info[k] for k in ("model_server", "harness_version", "protocol_version", "observation_params") if k in info},
            "observation": self.observation_params(), "one_action_per_observation": True,
        }

    # -- the event loop (one thread, all connections) --------------------------------------------
    def _ensure_loop(self) -> None:
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="vla-eval-client", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread

    def _run(self, coro: Any, timeout: float) -> Any:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout + 10.0)  # the coroutine keeps its own deadline; this is a backstop

    async def _serve_batch(self, requests: list[Request]) -> list[Any]:
        tasks = [asyncio.ensure_future(self._serve_one(r)) for r in requests]
        _, pending = await asyncio.wait(tasks, timeout=self.timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        outcomes: list[Any] = []
        for task in tasks:
            if task in pending:
                outcomes.append(_Unavailable(f"no answer within {self.timeout:g} s"))
            elif task.exception() is not None:
                exc = task.exception()
                if not isinstance(exc, (_Unavailable, _ServerError)):
                    raise exc  # a bug, not a lost server: the run stops with it
                outcomes.append(exc)
            else:
                outcomes.append(task.result())
        return outcomes

    def _slot(self, request: Request) -> _Slot:
        key = (int(request.worker), int(request.slot))
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = _Slot(key)
        return slot

    async def _serve_one(self, request: Request) -> np.ndarray:
        slot = self._slot(request)
        async with slot.lock:
            try:
                return await self._act(slot, request)
            except asyncio.CancelledError:
                self._abort(slot)  # an answer may still come on it: the connection cannot be trusted
                raise
            except _ServerError:
                raise  # the server is there and said why: its connection stays
            except Exception as exc:  # sorted below: a lost server, or a bug
                self._abort(slot)
                if isinstance(exc, (OSError, EOFError)) or type(exc).__module__.startswith("websockets"):
                    raise _Unavailable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc
                raise RuntimeError(f"episode {request.episode}: talking to vla-eval's model server at {self.url}: "
                                   f"{type(exc).__name__}: {exc}") from exc

    async def _connect(self, slot: _Slot) -> Any:
        if slot.ws is not None:
            return slot.ws
        try:
            from websockets.asyncio.client import connect
        except ImportError as exc:
            raise ImportError("a vla-eval model server is reached through websockets (>= 13) and msgpack: "
                              "pip install 'websockets>=13' msgpack") from exc
        __version__ = getattr(sys.modules.get("fastenv"), "__version__", "?")  # the package this module is part of

        ws = await connect(self.url, compression=None, max_size=None, ping_interval=None, open_timeout=None, close_timeout=1)
        slot.seq, slot.episode = 0, None
        seq = slot.next_seq()
        hello = {"harness_version": f"fastenv {__version__}", "protocol_version": PROTOCOL_VERSION, "benchmark": LIBERO_BENCHMARK}
        await ws.send(_pack("hello", hello, seq, "raw"))
        reply = _unpack(await ws.recv())
        if reply["type"] != "hello":
            await ws.close()
            raise RuntimeError(f"vla-eval's model server at {self.url} answered HELLO with {reply['type']!r}")
        self.server_info = dict(reply["payload"])
        slot.ws = ws
        return ws

    async def _act(self, slot: _Slot, request: Request) -> np.ndarray:
        ws = await self._connect(slot)
        with self._fresh_lock:
            fresh = request.episode in self._fresh
            self._fresh.discard(request.episode)
        start_seq = None
        if fresh or slot.episode != request.episode:
            if slot.episode is not None:  # an episode left open on this connection (never ended): end it as a disconnect would
                await ws.send(_pack("episode_end", {}, slot.next_seq(), "raw"))
            start_seq = slot.next_seq()
            await ws.send(_pack("episode_start", {"task": self.task_info(request)}, start_seq, "raw"))
            slot.episode = request.episode
        seq = slot.next_seq()
        data = _pack("observation", self.observation(request), seq, self.image_format)
        await ws.send(data)
        while True:
            reply = _unpack(await ws.recv())
            if reply["type"] == "error" and reply["seq"] in (seq, start_seq):
                slot.episode = None if reply["seq"] == start_seq else slot.episode
                detail = reply["payload"].get("error", reply["payload"]) if isinstance(reply["payload"], dict) else reply["payload"]
                raise _ServerError(str(detail))
            if reply["type"] == "action" and reply["seq"] == seq:
                return self._chunk(reply["payload"])
            # anything else (a late answer to an earlier message) is not this request's

    @staticmethod
    def _chunk(payload: Any) -> np.ndarray:
        actions = payload.get("actions", payload.get("action")) if isinstance(payload, dict) else None
        if actions is None:
            got = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
            raise _ServerError(f"its ACTION has no 'actions' ({got})")
        array = np.asarray(actions, dtype=np.float64)
        return array.reshape(1, -1) if array.ndim == 1 else array

    async def _end(self, episode: str, payload: dict[str, Any]) -> None:
        for slot in list(self._slots.values()):
            if slot.episode != episode or slot.ws is None:
                continue
            async with slot.lock:
                if slot.episode != episode or slot.ws is None:
                    continue
                try:
                    await asyncio.wait_for(slot.ws.send(_pack("episode_end", payload, slot.next_seq(), "raw")), self.timeout)
                    slot.episode = None
                except BaseException:
                    self._abort(slot)
                    raise

    def _abort(self, slot: _Slot) -> None:
        ws, slot.ws, slot.episode = slot.ws, None, None
        if ws is None:
            return
        transport = getattr(ws, "transport", None)
        if transport is not None:
            transport.abort()  # no closing handshake with a server that may not answer

    async def _close_all(self) -> None:
        for slot in list(self._slots.values()):
            ws, slot.ws, slot.episode = slot.ws, None, None
            if ws is not None:
                try:
                    await asyncio.wait_for(ws.close(), 2.0)
                except Exception:  # noqa: BLE001
                    transport = getattr(ws, "transport", None)
                    if transport is not None:
                        transport.abort()
