"""The server regime's policy process: one call's observations gathered and copied once, the
actions and fingerprints of ``ExactChunkPolicy``, a VLA's cost spent on top; the policy timed
alone at each batch size (``P(B)``, fitted as ``a + b x B``); and its loop over a vector env in
each mode a layout runs (``PolicyLoop``, ``run_loop``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastenv.bench.envs import IMAGE_KEYS, SERVER_MODALITIES, STATE_KEY
from fastenv.bench.same_data import Trajectories


class ServerPolicy:
    """The policy process's side of a call: observations gathered into one pinned host buffer, one
    copy to the device, ``ExactChunkPolicy``'s actions and fingerprints, the VLA's cost (the
    transformer on the views, or a wait), one copy back.

    ``glue_s`` accumulates the seconds spent around the policy's own work (host copies, starting the
    device copies, reading the result back); ``work_s`` the policy's own (the head, the transformer
    or the wait, up to the result on the device).
    """

    def __init__(self, image_shapes: Sequence[tuple[int, int, int]], state_dim: int, chunk: int, max_batch: int, device: Any,
                 cost: Any = None, compute: str = "wait", seed: int = 0) -> None:
        import torch

        from fastenv.bench.policies import ExactChunkPolicy

        self.torch = torch
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.cost, self.compute = cost, compute
        self.chunk = chunk
        self.head = ExactChunkPolicy(list(image_shapes), state_dim, chunk, 7, seed=seed).to(self.device)
        self.model = None
        if compute == "transformer":
            if not self.cuda:
                raise ValueError(f"policy_compute='transformer' runs on CUDA; the policy's device is {self.device}")
            from fastenv.bench.policies import VLASizedTransformer

            self.model = VLASizedTransformer(chunk=chunk, views=len(image_shapes), device=self.device)
        pin = self.cuda
        self.max_batch = max_batch
        self.host = [torch.empty((max_batch, *shape), dtype=torch.uint8, pin_memory=pin) for shape in image_shapes]
        self.host_state = torch.empty((max_batch, state_dim), dtype=torch.float32, pin_memory=pin)
        self.host_noise = torch.empty((max_batch, chunk * 7), dtype=torch.int64, pin_memory=pin)
        self.views = [h.numpy() for h in self.host]
        if self.cuda:
            self.dev = [torch.empty_like(h, device=self.device) for h in self.host]
            self.dev_state = torch.empty_like(self.host_state, device=self.device)
            self.dev_noise = torch.empty_like(self.host_noise, device=self.device)
            self.out_actions = torch.empty((max_batch, chunk, 7), dtype=torch.float32, pin_memory=True)
            self.out_prints = torch.empty((max_batch,), dtype=torch.int64, pin_memory=True)
        else:
            self.dev, self.dev_state, self.dev_noise = self.host, self.host_state, self.host_noise
        self.calls = 0
        self.glue_s = 0.0
        self.work_s = 0.0
        self.launch_s = 0.0  # of work_s: this process's time to hand the device its work (eager kernel launches)
        self.device_s = 0.0  # the device's time from the work's first kernel to its last (CUDA events), stalls included
        self.last: dict[str, float] = {}
        if self.cuda:
            self.events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": str(self.device), "head": "ExactChunkPolicy (integer arithmetic)", "compute": self.compute}
        if self.model is not None:
            out["model"] = f"VLASizedTransformer ({self.model.parameters_count() / 1e9:.1f}B parameters, bf16, {len(self.host)} views)"
            out["gpu"] = self.torch.cuda.get_device_name(self.device)
        if self.cost is not None:
            out["cost"] = {"name": self.cost.name, "per_call_s": self.cost.per_call_s, "per_sample_s": self.cost.per_sample_s,
                           "spent_as": "the transformer's own work" if self.model is not None else "a wait (time.sleep)"}
        return out

    def __call__(self, images: Sequence[np.ndarray], state: np.ndarray, env_ids: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions (B, K, 7) float32 and fingerprints (B,) int64 of the observations of ``env_ids``."""
        torch = self.torch
        t0 = time.perf_counter()
        b = len(env_ids)
        if b > self.max_batch:
            raise ValueError(f"a batch of {b} observations; this policy was sized for at most {self.max_batch}")
        for view, image in zip(self.views, images):
            np.copyto(view[:b], image)
        np.copyto(self.host_state.numpy()[:b], state)
        np.copyto(self.host_noise.numpy()[:b], self.head.noise(env_ids, counts))
        if self.cuda:
            for dev, host in zip(self.dev, self.host):
                dev[:b].copy_(host[:b], non_blocking=True)
            self.dev_state[:b].copy_(self.host_state[:b], non_blocking=True)
            self.dev_noise[:b].copy_(self.host_noise[:b], non_blocking=True)
        t1 = time.perf_counter()
        if self.cuda:
            self.events[0].record()
        images_dev = [d[:b] for d in self.dev]
        actions = self.head.act(images_dev, self.dev_state[:b], env_ids, counts, noise=self.dev_noise[:b])
        prints = self.head.fingerprint(images_dev, self.dev_state[:b])
        if self.model is not None:
            self.model.run(b, images=torch.stack(images_dev, dim=1))
        device_s = None
        if self.cuda:
            self.events[1].record()
            self.out_actions[:b].copy_(actions, non_blocking=True)
            self.out_prints[:b].copy_(prints, non_blocking=True)
            launched = time.perf_counter()
            torch.cuda.synchronize(self.device)  # the transformer's kernels and the copies back are done
            device_s = self.events[0].elapsed_time(self.events[1]) / 1000.0
            actions_np, prints_np = self.out_actions[:b].numpy().copy(), self.out_prints[:b].numpy().copy()
        else:
            actions_np, prints_np = actions.numpy(), prints.numpy()
        t2 = time.perf_counter()
        if self.cost is not None and self.model is None:
            self.cost.wait(b, t2 - t1)  # the VLA's cost as a wait, what the head took counted against it
        t3 = time.perf_counter()
        self.calls += 1
        self.glue_s += t1 - t0
        self.work_s += t3 - t1
        self.last = {"call_s": t3 - t0, "glue_s": t1 - t0}
        if device_s is not None:
            self.launch_s += launched - t1
            self.device_s += device_s
            self.last.update(launch_s=launched - t1, device_s=device_s)
        return actions_np, prints_np


def synthetic_batch(image_shapes: Sequence[tuple[int, int, int]], state_dim: int, batch: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    images = [rng.integers(0, 256, (batch, *shape), dtype=np.uint8) for shape in image_shapes]
    return images, rng.standard_normal((batch, state_dim)).astype(np.float32)


def calibration_batches(envs: Sequence[int]) -> list[int]:
    """Batch sizes to time the policy at: 1, every N and its halves and quarters."""
    sizes = {1}
    for n in envs:
        sizes |= {n, max(1, n // 2), max(1, n // 4)}
    return sorted(sizes)


def calibrate_policy(policy: ServerPolicy, image_shapes: Sequence[tuple[int, int, int]], state_dim: int, batches: Sequence[int],
                     repeats: int = 3) -> list[dict[str, float]]:
    """The policy's seconds per call alone, median of ``repeats`` after one warm-up, at each batch size."""
    points = []
    big_images, big_state = synthetic_batch(image_shapes, state_dim, max(batches))
    for _ in range(3):  # the device's clocks and the libraries' first choices settle on the largest batch
        policy(big_images, big_state, np.arange(max(batches)), np.zeros(max(batches), dtype=np.int64))
    for b in batches:
        images, state = synthetic_batch(image_shapes, state_dim, b, seed=b)
        ids, counts = np.arange(b), np.zeros(b, dtype=np.int64)
        policy(images, state, ids, counts)  # warm-up: kernels for this shape
        times, parts = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            policy(images, state, ids, counts)
            times.append(time.perf_counter() - start)
            parts.append(policy.last)
        point = {"batch": b, "seconds": statistics.median(times), "spread": max(times) - min(times)}
        for key in ("launch_s", "device_s"):
            if all(key in p for p in parts):
                point[key] = statistics.median(p[key] for p in parts)
        points.append(point)
    return points


def policy_seconds_at(points: Sequence[dict[str, float]], batch: float) -> float:
    """``P(batch)``: the calibration's points, linearly between them (the end segments extended)."""
    xs = np.array([p["batch"] for p in points], float)
    ys = np.array([p["seconds"] for p in points], float)
    if len(xs) == 1:
        return float(ys[0])
    if batch <= xs[0]:
        i = 0
    elif batch >= xs[-1]:
        i = len(xs) - 2
    else:
        i = int(np.searchsorted(xs, batch)) - 1
    slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
    return float(ys[i] + slope * (batch - xs[i]))


def policy_counters(policy: ServerPolicy, before: dict[str, float] | None = None) -> dict[str, float]:
    """The policy's accumulated seconds (glue, work, launch, device), or their growth since ``before``."""
    now = {"glue": policy.glue_s, "work": policy.work_s, "launch": policy.launch_s, "device": policy.device_s}
    return now if before is None else {key: now[key] - before[key] for key in now}


def policy_spread(points: Sequence[dict[str, float]], batch: float) -> float:
    """The policy's relative spread over its calibration's repeats at the batch nearest ``batch``."""
    near = min(points, key=lambda p: (abs(p["batch"] - batch), p["batch"]))
    return near["spread"] / near["seconds"] if near["seconds"] > 0 else 0.0


def policy_value_at(points: Sequence[dict[str, float]], batch: float, key: str) -> float:
    """``key`` of the calibration's points at ``batch``, linearly between them (as ``policy_seconds_at``)."""
    return policy_seconds_at([{"batch": p["batch"], "seconds": p[key]} for p in points], batch)


def local_fit(points: Sequence[dict[str, float]], num_envs: int) -> tuple[float, float]:
    """``(a, b)`` fitted over the calibration points in [N/4, N] (the batches a layout of N envs makes)."""
    from fastenv.tuning.bound import fit_policy_cost

    near = [p for p in points if num_envs / 4 <= p["batch"] <= num_envs] or list(points)
    return fit_policy_cost([p["batch"] for p in near], [p["seconds"] for p in near])


class PolicyLoop:
    """Drives a vector env with ``ServerPolicy``: the calls, their sizes and times, the trajectories."""

    def __init__(self, envs: Any, policy: ServerPolicy, n: int, chunk: int) -> None:
        self.envs, self.policy, self.n, self.chunk = envs, policy, n, chunk
        self.counts = np.zeros(n, dtype=np.int64)  # chunks sent to each env
        self.trajectories = Trajectories(n, SERVER_MODALITIES)
        self.timing = False
        self.calls: list[tuple[int, float]] = []  # (batch, seconds) of timed calls
        self.policy_s = 0.0

    def act(self, obs: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
        start = time.perf_counter()
        actions, prints = self.policy([obs[k] for k in IMAGE_KEYS], obs[STATE_KEY], ids, self.counts[ids])
        seconds = time.perf_counter() - start
        self.counts[ids] += 1
        self.trajectories.observed(ids, prints)
        if self.timing:
            self.calls.append((len(ids), seconds))
            self.policy_s += seconds
        return actions

    def stepped(self, ids: np.ndarray, result: tuple) -> dict[str, np.ndarray]:
        obs, rewards, terminated, truncated, infos = result
        self.trajectories.stepped(ids, rewards, terminated, truncated, infos)
        return obs

    def step_all(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        ids = np.arange(self.n)
        return self.stepped(ids, self.envs.step(self.act(obs, ids)))


def run_loop(loop: PolicyLoop, mode: str, cand: Any, cfg: Any, obs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Time ``loop`` in ``mode`` ("step", "pipeline", "dynamic") for ``cfg.seconds`` (a ``ServerConfig``) and at least
    ``cfg.min_chunks`` chunks of every env; returns env steps, seconds and every env's newest
    observation (``obs``: the chunks still in flight are collected after the clock stops)."""
    envs, n, k = loop.envs, loop.n, cfg.chunk
    newest = {key: value.copy() for key, value in obs.items()}

    def keep(ids: np.ndarray, got: dict[str, np.ndarray]) -> None:
        for key, value in got.items():
            newest[key][ids] = value
    start_counts = loop.counts.copy()
    loop.timing = True
    start = time.perf_counter()
    done = 0

    def enough() -> bool:
        return time.perf_counter() - start >= cfg.seconds and int((loop.counts - start_counts).min()) >= cfg.min_chunks + 1

    if mode == "step":
        while not enough():
            obs = loop.step_all(obs)
            done += n
    elif mode == "pipeline":
        m = envs.layout.stage_size
        stages = [np.arange(s * m, (s + 1) * m) for s in range(cand.pipeline_stages)]
        for s, ids in enumerate(stages):
            envs.send(loop.act({key: obs[key][ids] for key in SERVER_MODALITIES}, ids), stage=s)
        while True:
            for s, ids in enumerate(stages):
                stage_obs = loop.stepped(ids, envs.recv(stage=s))
                done += m
                if enough():
                    break
                envs.send(loop.act(stage_obs, ids), stage=s)  # the other stages step meanwhile
            else:
                continue
            break
        wall = time.perf_counter() - start
        keep(stages[s], stage_obs)
        for t in range(s + 1, s + len(stages)):  # the stages still in flight: collected, not counted
            keep(stages[t % len(stages)], loop.stepped(stages[t % len(stages)], envs.recv(stage=t % len(stages))))
        loop.timing = False
        return {"env_steps": done * k, "seconds": wall, "obs": newest}
    else:
        ids = np.arange(n)
        envs.send(loop.act(obs, ids), env_ids=ids)
        while not enough():
            result = envs.recv(max_batch=cand.max_batch, timeout=cand.timeout)
            ids = np.asarray(result[4]["env_ids"])
            batch_obs = loop.stepped(ids, result)
            done += len(ids)
            envs.send(loop.act(batch_obs, ids), env_ids=ids)
        wall = time.perf_counter() - start
        while len(envs.in_flight()):
            result = envs.recv(max_batch=n)
            ids = np.asarray(result[4]["env_ids"])
            keep(ids, loop.stepped(ids, result))
        loop.timing = False
        return {"env_steps": done * k, "seconds": wall, "obs": newest}
    wall = time.perf_counter() - start
    loop.timing = False
    return {"env_steps": done * k, "seconds": wall, "obs": obs}
