"""The policies ``fastenv eval`` evaluates, behind one interface: a batch of requests in, a chunk each out.

A request is one env asking for a chunk: its episode, the observation the protocol prepared for it
(openpi's element: ``observation/image``, ``observation/wrist_image``, ``observation/state``,
``prompt``), the policy step it is at and the worker that holds it. A policy answers each request
with a chunk of actions, ``(rows, 7)``; the runner checks it (shape, finite values, at least the
protocol's ``replan_steps`` rows) and names the episode when it is not.

Forms:

- ``CallablePolicy(fn)``: a Python callable on a batch of observations, the documented form. ``fn``
  gets a dict of stacked arrays (``observation/image``: ``(B, 224, 224, 3)`` uint8, ...,
  ``prompt``: a list of B strings, ``episode``: a list of B episode ids) and returns ``(B, rows, 7)``
  (or a list of B ``(rows, 7)`` arrays).
- ``OpenpiPolicy``: openpi's websocket policy server, through ``openpi-client``, one connection per
  worker (as openpi's own client holds one per evaluation process).
- ``fastenv.eval.vla_eval.VlaEvalPolicy``: vla-eval's model-server protocol.
- ``fastenv.eval.lerobot_eval.LeRobotPolicy``: a LeRobot ``PreTrainedPolicy``.

A remote policy that stops answering raises ``PolicyUnavailable`` for the requests it could not
serve: the runner starts those episodes again (a bounded number of times) and then stops with the
reason. Any other exception from a policy stops the run at once, keeping what was written.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "BatchPolicy", "CallablePolicy", "CostlyPolicy", "OpenpiPolicy", "PolicyUnavailable", "ProjectionPolicy", "Request",
    "stack_elements",
]


@dataclass
class Request:
    """One env's request for a chunk."""

    episode: str  # the episode's id, e.g. "libero_spatial/3/17"
    element: dict[str, Any]  # the observation the protocol prepared
    step: int  # policy steps taken in this episode so far
    worker: int  # the worker process holding the env
    slot: int = 0  # the env within the worker
    meta: dict[str, Any] = field(default_factory=dict)  # the episode's suite, task, init state, seed


class PolicyUnavailable(RuntimeError):
    """A remote policy did not answer (refused, disconnected, or no answer within its timeout).

    ``episodes`` are the requests' episodes it could not serve: the runner runs them again from
    their start. ``answers`` (one per request of the call, None where it failed) are the chunks it
    did get: the runner serves those.
    """

    def __init__(self, message: str, episodes: Sequence[str], answers: Sequence[Any] | None = None) -> None:
        super().__init__(message)
        self.episodes = list(episodes)
        self.answers = None if answers is None else list(answers)


class BatchPolicy:
    """What the runner calls. Subclasses implement ``infer``; the hooks default to nothing.

    ``open(num_workers)`` once before the first request; ``start_episode`` when an episode starts
    on a worker (before its first request), ``end_episode`` with its result; ``close()`` at the end,
    also after an error.
    """

    #: True when the policy reads an observation only when it asks for a chunk (the runner then
    #: renders only those steps); False for a server that is sent every step's observation.
    reads_chunk_starts_only: bool = True

    def open(self, num_workers: int) -> None:
        pass

    def start_episode(self, episode: str, meta: Mapping[str, Any], worker: int) -> None:
        pass

    def infer(self, requests: Sequence[Request]) -> Sequence[np.ndarray]:
        raise NotImplementedError

    def end_episode(self, episode: str, result: Mapping[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        """What the results JSON records about the policy."""
        return {"form": type(self).__name__}


def stack_elements(requests: Sequence[Request]) -> dict[str, Any]:
    """The requests' elements as one batch: arrays stacked on a new first axis, strings in lists,
    and ``episode``: the episode ids."""
    keys = list(requests[0].element)
    batch: dict[str, Any] = {}
    for key in keys:
        values = [r.element[key] for r in requests]
        batch[key] = list(values) if isinstance(values[0], str) else np.stack([np.asarray(v) for v in values])
    batch["episode"] = [r.episode for r in requests]
    return batch


class CallablePolicy(BatchPolicy):
    """A Python callable on a batch of observations (``stack_elements``) returning ``(B, rows, 7)``."""

    def __init__(self, fn: Callable[[dict[str, Any]], Any], name: str | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"the policy must be callable on a batch of observations, got {type(fn).__name__}")
        self.fn = fn
        self.name = name or getattr(fn, "__qualname__", type(fn).__name__)

    def infer(self, requests: Sequence[Request]) -> Sequence[np.ndarray]:
        out = self.fn(stack_elements(requests))
        if isinstance(out, Mapping) and "actions" in out:  # openpi's answer shape
            out = out["actions"]
        if isinstance(out, np.ndarray):
            if out.ndim != 3 or out.shape[0] != len(requests):
                raise ValueError(f"the policy returned an array of shape {out.shape} for a batch of {len(requests)}: "
                                 f"expected (batch, rows, action_dim) = ({len(requests)}, rows, 7)")
            return list(out)
        out = list(out)
        if len(out) != len(requests):
            raise ValueError(f"the policy returned {len(out)} chunks for a batch of {len(requests)} observations")
        return out

    def describe(self) -> dict[str, Any]:
        return {"form": "callable", "name": self.name}


def _features(element: Mapping[str, Any]) -> np.ndarray:
    """Both images pooled to 8 x 8 cells, and the state: what ``ProjectionPolicy`` reads."""
    pooled = []
    for key in ("observation/image", "observation/wrist_image"):
        image = np.asarray(element[key], dtype=np.float64)
        h, w = image.shape[0] // 8, image.shape[1] // 8
        pooled.append(image[: 8 * h, : 8 * w].reshape(8, h, 8, w, -1).mean(axis=(1, 3)).ravel() / 255)
    return np.concatenate([*pooled, np.asarray(element["observation/state"], dtype=np.float64).ravel()])


class ProjectionPolicy(BatchPolicy):
    """A deterministic stand-in for a VLA: a fixed random projection of both images and the state,
    ``tanh(W @ features)`` as a chunk of ``rows`` x 7. It reads everything it is given, so an
    observation prepared wrongly changes its actions; each row is computed alone, so its answer
    does not depend on the batch it came in."""

    def __init__(self, rows: int = 10, seed: int = 0) -> None:
        self.rows, self.seed = rows, seed
        self._w: np.ndarray | None = None

    def chunk(self, element: Mapping[str, Any]) -> np.ndarray:
        features = _features(element)
        if self._w is None or self._w.shape[1] != features.size:
            rng = np.random.default_rng(self.seed)
            self._w = rng.normal(size=(self.rows * 7, features.size)) / np.sqrt(features.size)
        return np.tanh(self._w @ features).reshape(self.rows, 7)

    def __call__(self, element: Mapping[str, Any]) -> np.ndarray:
        return self.chunk(element)

    def infer(self, requests: Sequence[Request]) -> Sequence[np.ndarray]:
        return [self.chunk(r.element) for r in requests]

    def describe(self) -> dict[str, Any]:
        return {"form": "projection stand-in", "rows": self.rows, "seed": self.seed}


class CostlyPolicy(BatchPolicy):
    """``policy`` with a VLA's inference cost added as a wait (``fastenv.policy_cost``): each call
    takes at least ``a + b x batch`` seconds, the CPU free meanwhile."""

    def __init__(self, policy: BatchPolicy, cost: Any) -> None:
        from fastenv.policy_cost import inference_cost

        self.policy = policy
        self.cost = inference_cost(cost) if isinstance(cost, str) else cost
        self.reads_chunk_starts_only = policy.reads_chunk_starts_only

    def open(self, num_workers: int) -> None:
        self.policy.open(num_workers)

    def start_episode(self, episode: str, meta: Mapping[str, Any], worker: int) -> None:
        self.policy.start_episode(episode, meta, worker)

    def infer(self, requests: Sequence[Request]) -> Sequence[np.ndarray]:
        start = time.perf_counter()
        out = self.policy.infer(requests)
        left = self.cost.seconds(len(requests)) - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return out

    def end_episode(self, episode: str, result: Mapping[str, Any]) -> None:
        self.policy.end_episode(episode, result)

    def close(self) -> None:
        self.policy.close()

    def describe(self) -> dict[str, Any]:
        c = self.cost
        return {**self.policy.describe(), "cost": {"name": c.name, "per_call_s": c.per_call_s, "per_sample_s": c.per_sample_s}}


class OpenpiPolicy(BatchPolicy):
    """openpi's websocket policy server (``scripts/serve_policy.py``), through ``openpi-client``.

    One ``WebsocketClientPolicy`` per worker, as openpi's evaluation holds one per process; a
    batch's requests go out on their workers' connections at once (the server answers each
    connection in turn). A request not answered within ``timeout`` seconds, or a connection
    refused or dropped, raises ``PolicyUnavailable`` for its episodes (the connection is made
    again for the next request).
    """

    def __init__(self, host: str = "localhost", port: int | None = 8000, *, timeout: float = 120.0, api_key: str | None = None) -> None:
        try:
            from openpi_client import websocket_client_policy  # noqa: F401
        except ImportError as exc:
            raise ImportError("an openpi policy server is reached through openpi-client: pip install openpi-client") from exc
        self.host, self.port, self.timeout, self.api_key = host, port, timeout, api_key
        self._clients: dict[int, Any] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.metadata: dict[str, Any] | None = None

    def open(self, num_workers: int) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, num_workers), thread_name_prefix="openpi-client")

    def _client(self, worker: int) -> Any:
        client = self._clients.get(worker)
        if client is None:
            from openpi_client.websocket_client_policy import WebsocketClientPolicy

            client = self._clients[worker] = WebsocketClientPolicy(self.host, self.port, api_key=self.api_key)
            if self.metadata is None:
                self.metadata = client.get_server_metadata()
        return client

    def _drop(self, worker: int) -> None:
        client = self._clients.pop(worker, None)
        if client is not None:
            try:
                client._ws.close()  # openpi-client keeps its connection as _ws and has no close()
            except Exception:  # noqa: BLE001 (already gone)
                pass

    def _serve(self, worker: int, requests: list[Request]) -> list[np.ndarray]:
        client = self._client(worker)
        return [np.asarray(client.infer(r.element)["actions"]) for r in requests]

    def infer(self, requests: Sequence[Request]) -> Sequence[np.ndarray]:
        if self._pool is None:
            self.open(1)
        by_worker: dict[int, list[int]] = {}
        for i, r in enumerate(requests):
            by_worker.setdefault(r.worker, []).append(i)
        futures = {w: self._pool.submit(self._serve, w, [requests[i] for i in idx]) for w, idx in by_worker.items()}
        out: list[np.ndarray | None] = [None] * len(requests)
        failed: list[str] = []
        reasons: list[str] = []
        deadline = time.monotonic() + self.timeout
        for w, future in futures.items():
            idx = by_worker[w]
            try:
                answers = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                reasons.append(f"no answer within {self.timeout:g} s")
                self._drop(w)
                failed += [requests[i].episode for i in idx]
                continue
            except (OSError, EOFError) as exc:  # refused, reset
                reasons.append(f"{type(exc).__name__}: {exc}")
                self._drop(w)
                failed += [requests[i].episode for i in idx]
                continue
            except Exception as exc:
                if type(exc).__module__.startswith("websockets"):  # ConnectionClosed, InvalidURI, ...
                    reasons.append(f"{type(exc).__name__}: {exc}")
                    self._drop(w)
                    failed += [requests[i].episode for i in idx]
                    continue
                raise
            for i, answer in zip(idx, answers):
                out[i] = answer
        if failed:
            where = f"ws://{self.host}" + (f":{self.port}" if self.port is not None else "")
            raise PolicyUnavailable(f"openpi's policy server at {where}: {'; '.join(sorted(set(reasons)))}", failed, out)
        return out  # type: ignore[return-value]

    def close(self) -> None:
        for w in list(self._clients):
            self._drop(w)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def describe(self) -> dict[str, Any]:
        return {"form": "openpi websocket server", "host": self.host, "port": self.port, "metadata": self.metadata}
