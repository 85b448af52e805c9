"""``fastenv bench --regime server``: many envs per policy, as on a GPU server, against the bound.

One policy process (this one, on a core of its own) serves N LIBERO envs. Each policy call over
B observations costs ``P(B) = a + b x B``: a VLA-sized transformer on CUDA
(``fastenv.policy.VLASizedTransformer``, pi0's shape, run on the batch's camera views) or, on a
machine without a GPU, a VLA's published cost as a wait that leaves the CPU free
(``fastenv.policy_cost``). The run has three parts:

1. **Calibrate.** Time the policy alone on batches of synthetic observations and fit ``a`` and
   ``b``; step fastenv's envs alone (one per env core) and read the env side's CPU seconds per
   env step ``c`` from the profiler, for the choice.
2. **Choose.** For each N, ``fastenv.tuning.server.choose_layout`` picks workers, stages or
   batching with ``fastenv tune``'s cost model from the measured ``a``, ``b`` and ``c``.
3. **Measure.** For each N: Default (Gymnasium's ``AsyncVectorEnv``, one process per env, LIBERO's
   stock observations after every step, the policy on the whole batch) and fastenv at the chosen
   layout (its full stack: two cameras and proprioception kept, one observation per chunk, in-place
   resets, the compiled control loop). The bound's ``c`` is read the way the row runs: from
   fastenv's envs over its own timed window (every chunk they stepped, the resets that fell there
   taken out and one added per mean episode of the rows). Before that window the same envs run
   the same way for ``calibration_windows`` short windows; how far their ``c`` differ (max / min - 1)
   is its spread. A row above its bound by more than that spread is a calibration fault, named in
   the table and the JSON (``calibration_fault``), not a result.

Each row gives env steps per second, x Default, **x bound** (``fastenv.tuning.server``:
``min(N K / P(N), C / c)``, and the closed loop's best beside it), the policy's busy share and
time per call (in the loop and alone at the same batch), the time spent around its calls, GPU
memory (render contexts and policy) and host memory.

The policy is ``fastenv.policy.ExactChunkPolicy``: integer arithmetic, so each env's actions are
the same bits in any batch and on any device, and every fastenv row's data is checked against
Default's (each env's rewards, dones, kept observations and final observations, chunk by chunk).
The observations of a call are copied into one pinned host buffer and to the GPU once; the
actions and the observations' fingerprints come back in one copy.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.bench import Pinned, episode_lengths, output_file, stepwise_env
from fastenv.machine import available_memory, measured_on, process_memory, thread_siblings

IMAGE_KEYS = ("agentview_image", "robot0_eye_in_hand_image")
STATE_KEY = "robot0_proprio-state"
SERVER_MODALITIES = (*IMAGE_KEYS, STATE_KEY)  # what pi0 reads on LIBERO: two views and the robot's state


@dataclass
class ServerConfig:
    """Options of ``fastenv bench --regime server``."""

    suite: str = "libero_10"
    task_id: int = 0
    envs: tuple[int, ...] | None = None  # None: the machine's cores x (1, 4, 8)
    chunk: int = 8
    camera_size: int = 128
    device: str = "auto"
    policy_cost: str | None = "pi0-eager"
    policy_compute: str = "auto"  # "wait", "transformer" (CUDA), "auto": the transformer on CUDA
    seconds: float = 20.0  # timed per row (at least min_chunks chunks of every env)
    min_chunks: int = 3
    episode_steps: int = 160
    policy_cores: int = 1
    rows: tuple[str, ...] = ("Default", "fastenv")
    default_envs: tuple[int, ...] | None = None  # the N at which Default runs (None: every N)
    memory_fraction: float = 0.8  # a row whose processes would need more of the memory available is not run
    calibration_chunks: int = 4  # chunks of every env in one calibration window
    calibration_windows: int = 3  # windows c is read over (its spread: how far they differ)
    seed: int = 0
    out: str = "results"
    layouts: dict[int, Any] = field(default_factory=dict)  # N -> a Candidate to run instead of the chosen one

    def check(self) -> None:
        for name in ("chunk", "camera_size", "min_chunks", "episode_steps", "policy_cores", "calibration_chunks", "calibration_windows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.seconds > 0:
            raise ValueError(f"seconds must be > 0, got {self.seconds}")
        if self.envs is not None:
            if not self.envs or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.envs):
                raise ValueError(f"envs must be env counts >= 1, got {self.envs!r}")
        unknown = set(self.rows) - {"Default", "fastenv"}
        if unknown or not self.rows:
            raise ValueError(f"rows must be among 'Default' and 'fastenv', got {list(self.rows)}")
        if self.policy_compute not in ("auto", "wait", "transformer"):
            raise ValueError(f"policy_compute must be 'auto', 'wait' or 'transformer', got {self.policy_compute!r}")
        if self.camera_size % 4:
            raise ValueError(f"camera_size must be a multiple of 4 (the policy's image blocks), got {self.camera_size}")
        if not 0 < self.memory_fraction <= 1:
            raise ValueError(f"memory_fraction must be in (0, 1], got {self.memory_fraction}")
        from fastenv.policy_cost import inference_cost

        inference_cost(self.policy_cost)  # a clear ValueError on an unknown preset
        output_file(self.out, "fastenv_bench_server.json")


def default_envs(cores: int) -> tuple[int, ...]:
    """N scaled to the machine: its cores x 1, 4 and 8 (16, 64 and 128 on 16 cores)."""
    return tuple(sorted({max(1, cores * f) for f in (1, 4, 8)}))


# -- the policy ------------------------------------------------------------------------------------
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

        from fastenv.policy import ExactChunkPolicy

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
            from fastenv.policy import VLASizedTransformer

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
    from fastenv.tuning.server import fit_policy_cost

    near = [p for p in points if num_envs / 4 <= p["batch"] <= num_envs] or list(points)
    return fit_policy_cost([p["batch"] for p in near], [p["seconds"] for p in near])


# -- the envs --------------------------------------------------------------------------------------
def _fastenv_fns(cfg: ServerConfig, n: int, env_cores: list[int], lengths: Sequence[int] | None = None) -> list[Callable[[], Any]]:
    from fastenv.envs.libero import make_env

    lengths = list(lengths) if lengths is not None else _lengths(cfg, n)
    return [Pinned(functools.partial(make_env, cfg.suite, cfg.task_id, chunk=cfg.chunk, modalities=SERVER_MODALITIES,
                                      camera_size=cfg.camera_size, max_episode_steps=length, hard_reset=False, fast_substep=True),
                    env_cores) for length in lengths]


def _default_fns(cfg: ServerConfig, n: int, env_cores: list[int]) -> list[Callable[[], Any]]:
    return [Pinned(functools.partial(stepwise_env, cfg.chunk, cfg.suite, cfg.task_id, modalities=None, camera_size=cfg.camera_size,
                                      max_episode_steps=length, hard_reset=True, fast_substep=False), env_cores)
            for length in _lengths(cfg, n)]


def _lengths(cfg: ServerConfig, n: int) -> list[int]:
    from fastenv.bench import BenchConfig

    return episode_lengths(BenchConfig(num_envs=n, episode_steps=cfg.episode_steps, seed=cfg.seed))


def calibration_pool(cfg: ServerConfig, env_cores: list[int], workers: int) -> Any:
    """fastenv's envs alone for the choice's calibration: ``workers`` workers of one env each, on the
    rows' episode lengths."""
    from fastenv.vector import PipelineVectorEnv

    return PipelineVectorEnv(_fastenv_fns(cfg, workers, env_cores), num_workers=workers, profile=True)


def env_windows(loop: _Loop, cfg: ServerConfig, mode: str, cand: Any,
                obs: dict[str, np.ndarray]) -> tuple[list[dict[str, float]], dict[str, np.ndarray]]:
    """``cfg.calibration_windows`` windows of ``loop``'s envs run in ``mode`` (as a row runs them),
    each of ``cfg.calibration_chunks`` chunks of every env: per window its env steps, its envs'
    seconds stepping them and, apart, resetting. Returns the windows and the envs' newest observations."""
    envs = loop.envs
    window = dataclasses.replace(cfg, seconds=1e-9, min_chunks=cfg.calibration_chunks - 1)
    out = []
    for _ in range(cfg.calibration_windows):
        envs.reset_profile()
        before = loop.counts.copy()
        obs = run_loop(loop, mode, cand, window, obs)["obs"]
        # every chunk sent was stepped: run_loop collects the ones in flight
        out.append(profiled(envs.profile_report(), int((loop.counts - before).sum()) * cfg.chunk))
    loop.calls, loop.policy_s = [], 0.0  # the calibration's calls are not the row's
    return out, obs


def profiled(report: dict[str, Any], env_steps: int) -> dict[str, float]:
    """A window as ``env_cost`` reads it, from the profiler's ``report`` over ``env_steps`` env steps:
    the envs' seconds stepping them and, apart, resetting."""
    cpu, wall = report["cpu_seconds"], {k: report.get(k, 0.0) for k in report["cpu_seconds"]}
    return {"env_steps": env_steps, "step_cpu_total_s": sum(v for k, v in cpu.items() if k != "reset"),
            "step_wall_total_s": sum(v for k, v in wall.items() if k != "reset"), "reset_cpu_total_s": cpu.get("reset", 0.0),
            "reset_wall_total_s": wall.get("reset", 0.0), "resets": report["counts"].get("reset", 0)}


def pooled(windows: Sequence[dict[str, float]], resets: int = 0, reset_cpu_s: float = 0.0, reset_wall_s: float = 0.0) -> dict[str, Any]:
    """The windows' totals: env steps, seconds per env step stepping (resets apart), and the resets
    (theirs, plus ``resets`` more that took ``reset_cpu_s`` and ``reset_wall_s`` in all)."""
    steps = sum(w["env_steps"] for w in windows)
    return {"windows": list(windows), "env_steps": steps,
            "step_cpu_s": sum(w["step_cpu_total_s"] for w in windows) / steps if steps else 0.0,
            "step_wall_s": sum(w["step_wall_total_s"] for w in windows) / steps if steps else 0.0,
            "resets": resets + sum(w["resets"] for w in windows),
            "reset_cpu_total_s": reset_cpu_s + sum(w["reset_cpu_total_s"] for w in windows),
            "reset_wall_total_s": reset_wall_s + sum(w["reset_wall_total_s"] for w in windows)}


def calibrate_envs(envs: Any, policy: ServerPolicy, cfg: ServerConfig) -> dict[str, Any]:
    """The env side's cost for the choice: ``envs`` (``calibration_pool``) warmed up, one reset each
    timed, then ``env_windows`` of whole steps with the policy's actions."""
    loop = _Loop(envs, policy, envs.num_envs, cfg.chunk)
    obs, _ = envs.reset(seed=cfg.seed + 10**4)
    for _ in range(2):
        obs = loop.step_all(obs)
    envs.reset_profile()
    obs, _ = envs.reset(seed=cfg.seed + 2 * 10**4)  # resets, timed
    report = envs.profile_report()
    windows, _ = env_windows(loop, cfg, "step", None, obs)
    return {"workers": envs.num_envs, **pooled(windows, report["counts"].get("reset", 0), report["cpu_seconds"].get("reset", 0.0),
                                                 report.get("reset", 0.0))}


def amortized(calibration: dict[str, Any], cfg: ServerConfig, n: int, resets: dict[str, Any] | None = None) -> dict[str, Any]:
    """``c`` and its spread from ``calibration``: its ``timed`` window's c where it has one (a row's
    own), else its median window's, the spread its windows'. A reset costs what all the resets seen
    cost on average (its windows', its timed window's and ``resets``', the choice's calibration's), once
    per mean episode of the rows of ``n`` envs."""
    from fastenv.tuning.server import env_cost

    timed = calibration.get("timed")
    pools = [calibration] + ([timed] if timed is not None else []) + ([resets] if resets is not None else [])
    count = sum(p["resets"] for p in pools)
    reset_cpu = sum(p["reset_cpu_total_s"] for p in pools) / count if count else 0.0
    reset_wall = sum(p["reset_wall_total_s"] for p in pools) / count if count else 0.0
    return env_cost(calibration["windows"], statistics.mean(_lengths(cfg, n)), reset_cpu, reset_wall, timed=timed)


# -- one row ---------------------------------------------------------------------------------------
class Trajectories:
    """Each env's trajectory: the fingerprints of the observations the policy read, and per chunk a
    digest of its reward, terminated, truncated and (where an episode ended) final observation.

    Calls record whole arrays (no per-env Python on the policy's path); the per-env sequences are
    made when they are read (``prints``, ``events``), after the timed window.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self._observed: list[tuple[np.ndarray, np.ndarray]] = []
        self._stepped: list[tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, bytes]]] = []
        self.episodes_ended = 0

    def observed(self, ids: np.ndarray, prints: np.ndarray) -> None:
        self._observed.append((np.array(ids), np.array(prints)))

    def stepped(self, ids: np.ndarray, rewards: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, infos: dict[str, Any]) -> None:
        ids = np.array(ids)
        finals: dict[int, bytes] = {}
        ended = infos.get("_final_obs")
        if ended is not None and np.any(ended):
            for j in np.flatnonzero(ended).tolist():  # episodes that ended: rare
                final = infos["final_obs"][j]
                finals[int(ids[j])] = hashlib.blake2b(b"".join(np.ascontiguousarray(final[k]).tobytes() for k in SERVER_MODALITIES)).digest()
            self.episodes_ended += len(finals)
        flags = np.stack([np.asarray(terminated, bool), np.asarray(truncated, bool)], 1).astype(np.uint8)
        self._stepped.append((ids, np.array(rewards, np.float64), flags, finals))

    @property
    def prints(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for ids, prints in self._observed:
            for i, p in zip(ids.tolist(), prints.tolist()):
                out[i].append(p)
        return out

    @property
    def events(self) -> list[list[str]]:
        out: list[list[str]] = [[] for _ in range(self.n)]
        for ids, rewards, flags, finals in self._stepped:
            for j, i in enumerate(ids.tolist()):
                h = hashlib.blake2b(rewards[j].tobytes() + flags[j].tobytes())
                if i in finals:
                    h.update(finals[i])
                out[i].append(h.hexdigest())
        return out


def compare(ours: Trajectories, ref: Trajectories) -> dict[str, Any]:
    """Env by env: do the observations and chunks both runs have agree?"""
    compared = None
    prints, ref_prints, events, ref_events = ours.prints, ref.prints, ours.events, ref.events
    for i in range(len(ref_prints)):
        for name, a, b in (("observation", prints[i], ref_prints[i]), ("chunk", events[i], ref_events[i])):
            common = min(len(a), len(b))
            for t in range(common):
                if a[t] != b[t]:
                    return {"equal": False, "chunks_compared": t, "first_difference": f"env {i}, {name} {t}"}
        common = min(len(events[i]), len(ref_events[i]))
        compared = common if compared is None else min(compared, common)
    return {"equal": True, "chunks_compared": compared or 0, "first_difference": None}


class _Loop:
    """Drives a vector env with ``ServerPolicy``: the calls, their sizes and times, the trajectories."""

    def __init__(self, envs: Any, policy: ServerPolicy, n: int, chunk: int) -> None:
        self.envs, self.policy, self.n, self.chunk = envs, policy, n, chunk
        self.counts = np.zeros(n, dtype=np.int64)  # chunks sent to each env
        self.trajectories = Trajectories(n)
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


def run_loop(loop: _Loop, mode: str, cand: Any, cfg: ServerConfig, obs: dict[str, np.ndarray]) -> dict[str, Any]:
    """Time ``loop`` in ``mode`` ("step", "pipeline", "dynamic") for ``cfg.seconds`` and at least
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


def _cpu_seconds(pids: Sequence[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except (psutil.Error, OSError):
            pass
    return total


def _rss_mb(pids: Sequence[int]) -> float:
    return round(sum(process_memory(pid) or 0 for pid in pids) / 2**20, 1)


class GpuMemory:
    """The GPU's used memory and each process's, through NVML (None without an NVIDIA GPU)."""

    def __init__(self) -> None:
        self.handle = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:
            self.handle = None

    def read(self, env_pids: Sequence[int]) -> dict[str, float | None] | None:
        if self.handle is None:
            return None
        nv = self.nvml
        mine: dict[int, int] = {}
        for getter in (nv.nvmlDeviceGetGraphicsRunningProcesses, nv.nvmlDeviceGetComputeRunningProcesses):
            try:
                for p in getter(self.handle):
                    if p.usedGpuMemory is not None:
                        mine[p.pid] = max(mine.get(p.pid, 0), p.usedGpuMemory)
            except Exception:
                pass
        envs = [mine[pid] for pid in env_pids if pid in mine]
        return {"device_used_mb": round(nv.nvmlDeviceGetMemoryInfo(self.handle).used / 2**20, 1),
                "policy_process_mb": round(mine[os.getpid()] / 2**20, 1) if os.getpid() in mine else None,
                "env_processes_mb": round(sum(envs) / 2**20, 1) if envs else None,
                "env_processes_seen": len(envs)}


def _row(name: str, n: int, timed: dict[str, Any], loop: _Loop, points: Sequence[dict[str, float]], extra: dict[str, Any]) -> dict[str, Any]:
    rate = timed["env_steps"] / timed["seconds"]
    batches = [b for b, _ in loop.calls]
    seconds = [s for _, s in loop.calls]
    mean_batch = statistics.mean(batches) if batches else 0.0
    alone = statistics.mean(policy_seconds_at(points, b) for b in batches) if batches else None
    in_loop = statistics.mean(seconds) if seconds else None
    return {
        "row": name, "num_envs": n, "env_steps": timed["env_steps"], "seconds": timed["seconds"], "env_steps_per_s": rate,
        "policy": {"calls": len(batches), "mean_batch": mean_batch, "busy_share": loop.policy_s / timed["seconds"],
                   "seconds_per_call_in_loop": in_loop, "seconds_per_call_alone": alone,
                   "in_loop_over_alone": in_loop / alone if in_loop and alone else None,
                   # of a call: the host copies and starting the device copies (fastenv's), and the rest (the
                   # policy's own work up to its result on the host); of that, handing the device its work
                   # (launch) and the device's own time from the work's first kernel to its last (CUDA events)
                   **{f"{key}_ms_per_call": 1000.0 * value / max(len(batches), 1) for key, value in timed["policy_counters"].items()},
                   "device_ms_per_call_alone": (statistics.mean(policy_value_at(points, b, "device_s") for b in batches)
                                                 if batches and all("device_s" in p for p in points) else None)},
        "around_policy_ms_per_call": 1000.0 * (timed["seconds"] - loop.policy_s) / max(len(batches), 1),
        "episodes_ended": loop.trajectories.episodes_ended,
        **extra,
    }


def judge(row: dict[str, Any], costs: Any, n: int, spread: float, points: Sequence[dict[str, float]]) -> None:
    """``row`` against its bound: x bound, x closed loop, and a calibration fault where it is above
    the bound by more than ``spread`` (the bound's relative spread)."""
    from fastenv.tuning.server import calibration_fault

    bound = costs.describe(n)
    rate = row["env_steps_per_s"]
    row.update(x_bound=rate / bound["bound"], x_closed_loop=rate / bound["closed_loop"], bound=bound)
    policy_s = policy_seconds_at(points, n) * row["policy"]["in_loop_over_alone"] if row["policy"]["in_loop_over_alone"] else None
    row["calibration_fault"] = calibration_fault(rate, costs, n, spread, env_cpu_s=row.get("env_cpu_s_per_step"), policy_s=policy_s)


def run_default(cfg: ServerConfig, n: int, policy: ServerPolicy, env_cores: list[int], costs: Any, points: Sequence[dict[str, float]],
                gpu: GpuMemory) -> tuple[dict[str, Any], Trajectories]:
    """Default's row of N envs (without its bound's fields: ``judge``) and its trajectories."""
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    built = time.perf_counter()
    envs = AsyncVectorEnv(_default_fns(cfg, n, env_cores), autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    failed = False
    try:
        pids = [p.pid for p in envs.processes]
        loop = _Loop(envs, policy, n, cfg.chunk)
        obs, _ = envs.reset(seed=cfg.seed)
        for _ in range(2):  # warm-up: first renders, first calls
            obs = loop.step_all(obs)
        build_s = time.perf_counter() - built
        cpu0 = _cpu_seconds(pids)
        before = policy_counters(policy)
        timed = run_loop(loop, "step", None, cfg, obs)
        timed["policy_counters"] = policy_counters(policy, before)
        env_cpu = (_cpu_seconds(pids) - cpu0) / timed["env_steps"]
        extra = {"layout": {"label": f"AsyncVectorEnv, {n} processes", "mode": "step"}, "build_and_warmup_s": build_s,
                 "env_cpu_s_per_step": env_cpu, "host_memory_mb": {"envs": _rss_mb(pids), "policy_process": _rss_mb([os.getpid()])},
                 "gpu_memory_mb": gpu.read(pids),
                 "model_estimate_env_steps_per_s": costs.default_rate(n, env_cpu)}
        return _row("Default", n, timed, loop, points, extra), loop.trajectories
    except Exception as exc:
        failed = True
        ended = process_endings(envs.processes)
        if not ended:
            raise
        raise RuntimeError(f"{type(exc).__name__}: {exc}; {ended}") from exc
    finally:
        envs.close(terminate=failed)  # a dead env process's pipe answers no close


def process_endings(processes: Sequence[Any]) -> str:
    """How the processes that ended did (an exit code, or the signal that ended them: SIGKILL is
    often the kernel's out-of-memory killer, SIGSEGV a crash in native code such as a GL driver),
    with the memory left on the host; "" when none has ended."""
    import signal

    ended = []
    for i, process in enumerate(processes):
        process.join(timeout=0.5)  # an ending process's code is set once it is reaped
        code = process.exitcode
        if code is None:
            continue
        if code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit code {code}"
        ended.append(f"env process {i} ended ({how})")
    if not ended:
        return ""
    free = available_memory()
    return ", ".join(ended) + ("" if free is None else f"; host memory available {free / 2**30:.1f} GiB")


def run_fastenv(cfg: ServerConfig, n: int, cand: Any, prediction: Any, policy: ServerPolicy, env_cores: list[int],
                points: Sequence[dict[str, float]], gpu: GpuMemory, resets: dict[str, Any] | None = None) -> tuple[dict[str, Any], Trajectories]:
    """fastenv's row of N envs at layout ``cand`` and its trajectories. After the warm-up its envs run
    as the row runs them for the calibration windows (``env_windows``), then for the timed window:
    the row's ``env_calibration`` holds both, ``c`` for its bound the timed window's, its spread the
    windows' (resets pooled with ``resets``', the choice's calibration's)."""
    from fastenv.tuning.server import describe_layout
    from fastenv.vector import PipelineVectorEnv

    built = time.perf_counter()
    envs = PipelineVectorEnv(_fastenv_fns(cfg, n, env_cores), num_workers=cand.num_workers, pipeline_stages=cand.pipeline_stages,
                             threads_per_worker=cand.threads_per_worker, profile=True)
    try:
        pids = list(envs.worker_pids)
        loop = _Loop(envs, policy, n, cfg.chunk)
        obs, _ = envs.reset(seed=cfg.seed)
        for _ in range(2):
            obs = loop.step_all(obs)
        build_s = time.perf_counter() - built
        windows, obs = env_windows(loop, cfg, cand.mode, cand, obs)
        envs.reset_profile()
        before = policy_counters(policy)
        start_counts = loop.counts.copy()
        timed = run_loop(loop, cand.mode, cand, cfg, obs)
        timed["policy_counters"] = policy_counters(policy, before)
        report = envs.profile_report()
        # the envs' CPU over every chunk they stepped, the ones collected after the clock stopped included
        stepped = int((loop.counts - start_counts).sum()) * cfg.chunk
        env_cpu = sum(report["cpu_seconds"].values()) / stepped
        # the bound's c is this window's own: windows run before it, however alike, met another load
        # on a shared machine; they give c's spread
        calibration = {"workers": cand.num_workers, "mode": cand.mode, **pooled(windows), "timed": profiled(report, stepped)}
        calibration.update(amortized(calibration, cfg, n, resets))
        served = [dict(p) for p in envs.call("fast_paths")]
        missing = sorted({k for p in served for k, v in p.items() if not v})
        renderers = list({r["pid"]: r for r in envs.call("renderer")}.values())
        extra = {"layout": describe_layout(cand, prediction, n, cfg.chunk), "build_and_warmup_s": build_s, "env_cpu_s_per_step": env_cpu,
                 "transport_wait_ms_per_call": 1000.0 * report.get("transport_wait", 0.0) / max(len(loop.calls), 1),
                 "host_memory_mb": {"envs": _rss_mb(pids), "policy_process": _rss_mb([os.getpid()])}, "gpu_memory_mb": gpu.read(pids),
                 "fast_paths_not_served": missing, "renderers": renderers, "env_calibration": calibration}
        return _row("fastenv", n, timed, loop, points, extra), loop.trajectories
    finally:
        envs.close()


# -- the run ---------------------------------------------------------------------------------------
def _device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


def _fits(per_process_mb: float | None, processes: int, fraction: float) -> tuple[bool, str]:
    left = available_memory()
    if per_process_mb is None or left is None:
        return True, ""
    need = per_process_mb * processes * 2**20
    if need <= fraction * left:
        return True, ""
    return False, (f"{processes} processes of about {per_process_mb:.0f} MB each need {need / 2**30:.1f} GB, over "
                   f"{fraction:.0%} of the {left / 2**30:.1f} GB available")


def run(cfg: ServerConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Calibrate, choose, measure; writes ``fastenv_bench_server.json`` in ``cfg.out`` (or the ``.json``
    file ``cfg.out`` names) after each row."""
    import torch

    from fastenv.bench import cores
    from fastenv.policy_cost import inference_cost
    from fastenv.tuning.server import ServerCosts, bound_spread, choose_layout

    cfg.check()
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    policy_cores, env_cores = cores(cfg.policy_cores)
    envs_list = tuple(cfg.envs) if cfg.envs is not None else default_envs(len(policy_cores) + len(env_cores))
    previous = os.sched_getaffinity(0)
    target = output_file(cfg.out, "fastenv_bench_server.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {"benchmark": "fastenv bench --regime server", "config": {**dataclasses.asdict(cfg), "envs": list(envs_list)},
                               "date": time.strftime("%Y-%m-%d"), "machine": {**measured_on(), "cores_available": len(previous)},
                               "policy_cores": policy_cores, "env_cores": env_cores,
                               "policy_core_smt_siblings": thread_siblings(policy_cores[0]), "rows": []}
    gpu = GpuMemory()

    def write() -> None:
        target.write_text(json.dumps(payload, indent=1, default=str))

    try:
        os.sched_setaffinity(0, policy_cores)
        device = _device(cfg.device)
        torch.set_num_threads(len(policy_cores))
        compute = cfg.policy_compute if cfg.policy_compute != "auto" else ("transformer" if device.type == "cuda" and cfg.policy_cost else "wait")
        cost = inference_cost(cfg.policy_cost)
        shapes = [(cfg.camera_size, cfg.camera_size, 3)] * len(IMAGE_KEYS)
        say(f"fastenv bench --regime server: policy on {device} ({compute}), envs {list(envs_list)} on {len(env_cores)} cores")
        start = time.perf_counter()
        pool = calibration_pool(cfg, env_cores, workers=max(1, min(len(env_cores), min(envs_list))))
        try:
            state_dim = pool.single_observation_space[STATE_KEY].shape[0]
            policy = ServerPolicy(shapes, state_dim, cfg.chunk, max(envs_list), device, cost, compute, seed=cfg.seed)
            payload["policy"] = policy.describe()
            payload["gpu_memory_policy_loaded_mb"] = gpu.read([])
            started = time.perf_counter()
            points = calibrate_policy(policy, shapes, state_dim, calibration_batches(envs_list))
            payload["policy_calibration"] = {"points": points, "seconds": time.perf_counter() - started}
            say("policy alone: " + ", ".join(f"B={p['batch']}: {1000 * p['seconds']:.1f} ms" for p in points))
            env_cal = calibrate_envs(pool, policy, cfg)
        finally:
            pool.close()
        env_cal["seconds"] = time.perf_counter() - start
        env_cal.update(amortized(env_cal, cfg, min(envs_list)))
        payload["env_calibration"] = env_cal
        c, c_wall = env_cal["c_s"], env_cal["c_wall_s"]
        say(f"envs alone (for the choice): c = {1000 * c:.2f} ms CPU per env step (spread {env_cal['spread']:.0%}, {1000 * c_wall:.2f} ms "
            f"wall), resets {1000 * env_cal['reset_cpu_s']:.0f} ms CPU")
        write()
        default_rss: float | None = None  # MB per Default process, once measured
        default_cpu: float | None = None  # Default's env CPU seconds per env step, once measured
        for n in envs_list:
            a, b = local_fit(points, n)
            costs = ServerCosts(max(a, 1e-6), b, c, len(env_cores), cfg.chunk, env_wall_s=c_wall)
            cand, prediction = (cfg.layouts[n], None) if n in cfg.layouts else choose_layout(
                costs, n, reset_rate=cfg.chunk / cfg.episode_steps, reset_s=env_cal["reset_wall_s"])
            if prediction is None:
                from fastenv.tuning.model import CostModel
                from fastenv.tuning.server import model_costs

                prediction = CostModel(model_costs(costs)).predict(cand, n)
            entry: dict[str, Any] = {"num_envs": n, "policy_fit": {"a_s": a, "b_s": b}, "chosen": cand.label}
            say(f"N={n}: P(B) = {1000 * a:.1f} + {1000 * b:.2f} x B ms; chosen layout {cand.label}")
            trajectories = {}
            for name in cfg.rows:
                if name == "Default" and cfg.default_envs is not None and n not in cfg.default_envs:
                    continue
                if name == "Default":
                    ok, why = _fits(default_rss, n, cfg.memory_fraction)
                    if not ok:
                        entry["Default"] = {"row": "Default", "num_envs": n, "not_run": why,
                                            "model_estimate_env_steps_per_s": costs.default_rate(n, default_cpu) if default_cpu else None}
                        say(f"N={n}: Default not run: {why}")
                        continue
                try:
                    if name == "Default":
                        row, trajectories[name] = run_default(cfg, n, policy, env_cores, costs, points, gpu)
                        default_rss = row["host_memory_mb"]["envs"] / n
                        default_cpu = row["env_cpu_s_per_step"]
                    else:
                        row, trajectories[name] = run_fastenv(cfg, n, cand, prediction, policy, env_cores, points, gpu, resets=env_cal)
                except Exception as exc:  # the other rows still run; the JSON says what failed
                    entry[name] = {"row": name, "num_envs": n, "error": f"{type(exc).__name__}: {exc}"}
                    say(f"N={n} {name}: failed: {type(exc).__name__}: {exc}")
                    write()
                    continue
                entry[name] = row
                say(f"N={n} {name}: {row['env_steps_per_s']:.1f} env-steps/s, policy busy {row['policy']['busy_share']:.0%}, "
                    f"mean batch {row['policy']['mean_batch']:.1f}")
            # the bound's c: fastenv's envs as its row ran them, where it ran; else the choice's calibration
            own = entry.get("fastenv", {}).get("env_calibration")
            cal = own if own is not None else env_cal
            costs = dataclasses.replace(costs, env_cpu_s=cal["c_s"], env_wall_s=cal["c_wall_s"])
            spread = bound_spread(costs, n, cal["spread"], policy_spread(points, n))
            entry["bound"] = {**costs.describe(n), "c_from": "the fastenv row's envs over its timed window" if own is not None else
                              "the choice's calibration (envs alone, one per worker)", "c_spread": cal["spread"], "spread": spread}
            say(f"N={n}: bound {costs.bound(n):.0f} env-steps/s ({costs.limit(n)}; c = {1000 * costs.env_cpu_s:.2f} ms, spread "
                f"{cal['spread']:.0%}), closed loop {costs.closed_loop(n)[0]:.0f}")
            for name in ("Default", "fastenv"):
                row = entry.get(name)
                if row is not None and "env_steps_per_s" in row:
                    judge(row, costs, n, spread, points)
                    say(f"N={n} {name}: x bound {row['x_bound']:.2f}" + (f"; {row['calibration_fault']}" if row["calibration_fault"] else ""))
            if "Default" in trajectories and "fastenv" in trajectories:
                entry["fastenv"]["same_data_as_default"] = compare(trajectories["fastenv"], trajectories["Default"])
            if "env_steps_per_s" in entry.get("Default", {}) and "env_steps_per_s" in entry.get("fastenv", {}):
                entry["fastenv"]["x_default"] = entry["fastenv"]["env_steps_per_s"] / entry["Default"]["env_steps_per_s"]
            payload["rows"].append(entry)
            write()
    finally:
        os.sched_setaffinity(0, previous)
    payload["files"] = [str(target)]
    write()
    return payload



def format_table(payload: dict[str, Any]) -> str:
    headers = ["N", "row", "layout", "env-steps/s", "x Default", "x bound", "x closed loop", "busy", "batch", "P loop/alone",
               "GPU loop/alone", "around ms/call", "GPU MB", "host MB", "same data"]
    cells = []
    for entry in payload["rows"]:
        for name in ("Default", "fastenv"):
            r = entry.get(name)
            if r is None:
                continue
            if "error" in r:
                cells.append([str(entry["num_envs"]), name, "failed", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", r["error"][:60]])
                continue
            if "not_run" in r:
                model = r["model_estimate_env_steps_per_s"]
                cells.append([str(entry["num_envs"]), name, "not run", f"(model {model:.0f})" if model else "-", "-", "-", "-",
                              "-", "-", "-", "-", "-", "-", "-", r["not_run"]])
                continue
            p = r["policy"]
            gpu = r.get("gpu_memory_mb") or {}
            gpu_cell = f"{gpu.get('device_used_mb'):.0f}" if gpu.get("device_used_mb") is not None else "-"
            same = r.get("same_data_as_default")
            same_cell = "reference" if name == "Default" else ("-" if same is None else
                                                             f"yes ({same['chunks_compared']} chunks)" if same["equal"] else f"NO: {same['first_difference']}")
            ratio = p["in_loop_over_alone"]
            device = p.get("device_ms_per_call") / p["device_ms_per_call_alone"] if p.get("device_ms_per_call_alone") else None
            cells.append([str(entry["num_envs"]), name, r["layout"]["label"], f"{r['env_steps_per_s']:.1f}",
                          f"{r['x_default']:.2f}" if "x_default" in r else ("1.00" if name == "Default" else "-"),
                          f"{r['x_bound']:.2f}" + (" FAULT" if r.get("calibration_fault") else ""), f"{r['x_closed_loop']:.2f}",
                          f"{p['busy_share']:.0%}", f"{p['mean_batch']:.1f}",
                          f"{ratio:.2f}" if ratio else "-", f"{device:.2f}" if device else "-", f"{r['around_policy_ms_per_call']:.1f}", gpu_cell,
                          f"{r['host_memory_mb']['envs'] + r['host_memory_mb']['policy_process']:.0f}", same_cell])
    widths = [max(len(h), *(len(c[i]) for c in cells)) if cells else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    for entry in payload["rows"]:
        bd = entry["bound"]
        i = bd["inputs"]
        spread = f" from {bd['c_from']} (spread {bd['c_spread']:.0%})" if "c_spread" in bd else ""
        lines.append(f"N={entry['num_envs']}: bound = min(N K / P(N), C / c) = min({bd['policy_term']:.0f}, {bd['env_term']:.0f}) = "
                     f"{bd['bound']:.0f} env-steps/s ({bd['limit']}); a = {1000 * i['a_s']:.1f} ms, b = {1000 * i['b_s']:.2f} ms, "
                     f"c = {1000 * i['c_s']:.2f} ms{spread}, C = {i['C']}, K = {i['K']}; the closed loop's best: {bd['closed_loop']:.0f} "
                     f"({bd['closed_loop_stages']} group(s), {bd['closed_loop_share_of_bound']:.0%} of the bound)")
        for name in ("Default", "fastenv"):
            fault = (entry.get(name) or {}).get("calibration_fault")
            if fault:
                lines.append(f"N={entry['num_envs']} {name}: FAULT, not a result: {fault}")
    lines.append("(x bound: of min(N K / P(N), C / c), FAULT where a row is above it by more than its calibration's spread; "
                 "x closed loop: of the best a layout can do when each env waits for its own actions; busy: the policy's share of the wall time; P loop/alone: its seconds per call in the loop over alone at the "
                 "same batch; GPU loop/alone: the same for the device's time from the call's first kernel to its last (CUDA events: "
                 "other processes' GPU work, renders, stalls it); around: wall time per call outside the policy's calls)")
    return "\n".join(lines)
