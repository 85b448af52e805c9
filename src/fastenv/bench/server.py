"""``fastenv bench --regime server``: many envs per policy, as on a GPU server, against the bound.

One policy process (this one, on a core of its own) serves N LIBERO envs. Each policy call over
B observations costs ``P(B) = a + b x B``: a VLA-sized transformer on CUDA
(``fastenv.bench.policies.VLASizedTransformer``, pi0's shape, run on the batch's camera views) or, on a
machine without a GPU, a VLA's published cost as a wait that leaves the CPU free
(``fastenv.policy_cost``). The run has three parts:

1. **Calibrate.** Time the policy alone on batches of synthetic observations and fit ``a`` and
   ``b``; step fastenv's envs alone (one per env core) and read the env side's CPU seconds per
   env step ``c`` from the profiler, for the choice.
2. **Choose.** For each N, ``fastenv.tuning.bound.choose_layout`` picks workers, stages or
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

Each row gives env steps per second, x Default, **x bound** (``fastenv.tuning.bound``:
``min(N K / P(N), C / c)``, and the closed loop's best beside it), the policy's busy share and
time per call (in the loop and alone at the same batch), the time spent around its calls, GPU
memory (render contexts and policy) and host memory.

The policy is ``fastenv.bench.policies.ExactChunkPolicy``: integer arithmetic, so each env's actions are
the same bits in any batch and on any device, and every fastenv row's data is checked against
Default's (each env's rewards, dones, kept observations and final observations, chunk by chunk).
The observations of a call are copied into one pinned host buffer and to the GPU once; the
actions and the observations' fingerprints come back in one copy.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.bench.envs import (
    IMAGE_KEYS,
    SERVER_MODALITIES,
    STATE_KEY,
    episode_lengths,
    stepwise_env,
)
from fastenv.bench.placement import (
    GpuMemory,
    Pinned,
    cores,
    cpu_seconds,
    memory_fits,
    policy_device,
    process_endings,
    rss_mb,
)
from fastenv.bench.report import output_file
from fastenv.bench.same_data import Trajectories, compare
from fastenv.bench.server_policy import (
    PolicyLoop,
    ServerPolicy,
    calibrate_policy,
    calibration_batches,
    local_fit,
    policy_counters,
    policy_seconds_at,
    policy_spread,
    policy_value_at,
    run_loop,
)
from fastenv.machine import measured_on, thread_siblings


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
    return episode_lengths(n, cfg.episode_steps, cfg.seed)


def calibration_pool(cfg: ServerConfig, env_cores: list[int], workers: int) -> Any:
    """fastenv's envs alone for the choice's calibration: ``workers`` workers of one env each, on the
    rows' episode lengths."""
    from fastenv.vector import PipelineVectorEnv

    return PipelineVectorEnv(_fastenv_fns(cfg, workers, env_cores), num_workers=workers, profile=True)


def env_windows(loop: PolicyLoop, cfg: ServerConfig, mode: str, cand: Any,
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
    loop = PolicyLoop(envs, policy, envs.num_envs, cfg.chunk)
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
    from fastenv.tuning.bound import env_cost

    timed = calibration.get("timed")
    pools = [calibration] + ([timed] if timed is not None else []) + ([resets] if resets is not None else [])
    count = sum(p["resets"] for p in pools)
    reset_cpu = sum(p["reset_cpu_total_s"] for p in pools) / count if count else 0.0
    reset_wall = sum(p["reset_wall_total_s"] for p in pools) / count if count else 0.0
    return env_cost(calibration["windows"], statistics.mean(_lengths(cfg, n)), reset_cpu, reset_wall, timed=timed)


def _row(name: str, n: int, timed: dict[str, Any], loop: PolicyLoop, points: Sequence[dict[str, float]], extra: dict[str, Any]) -> dict[str, Any]:
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
    from fastenv.tuning.bound import calibration_fault

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
        loop = PolicyLoop(envs, policy, n, cfg.chunk)
        obs, _ = envs.reset(seed=cfg.seed)
        for _ in range(2):  # warm-up: first renders, first calls
            obs = loop.step_all(obs)
        build_s = time.perf_counter() - built
        cpu0 = cpu_seconds(pids)
        before = policy_counters(policy)
        timed = run_loop(loop, "step", None, cfg, obs)
        timed["policy_counters"] = policy_counters(policy, before)
        env_cpu = (cpu_seconds(pids) - cpu0) / timed["env_steps"]
        extra = {"layout": {"label": f"AsyncVectorEnv, {n} processes", "mode": "step"}, "build_and_warmup_s": build_s,
                 "env_cpu_s_per_step": env_cpu, "host_memory_mb": {"envs": rss_mb(pids), "policy_process": rss_mb([os.getpid()])},
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


def run_fastenv(cfg: ServerConfig, n: int, cand: Any, prediction: Any, policy: ServerPolicy, env_cores: list[int],
                points: Sequence[dict[str, float]], gpu: GpuMemory, resets: dict[str, Any] | None = None) -> tuple[dict[str, Any], Trajectories]:
    """fastenv's row of N envs at layout ``cand`` and its trajectories. After the warm-up its envs run
    as the row runs them for the calibration windows (``env_windows``), then for the timed window:
    the row's ``env_calibration`` holds both, ``c`` for its bound the timed window's, its spread the
    windows' (resets pooled with ``resets``', the choice's calibration's)."""
    from fastenv.tuning.bound import describe_layout
    from fastenv.vector import PipelineVectorEnv

    built = time.perf_counter()
    envs = PipelineVectorEnv(_fastenv_fns(cfg, n, env_cores), num_workers=cand.num_workers, pipeline_stages=cand.pipeline_stages,
                             threads_per_worker=cand.threads_per_worker, profile=True)
    try:
        pids = list(envs.worker_pids)
        loop = PolicyLoop(envs, policy, n, cfg.chunk)
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
                 "host_memory_mb": {"envs": rss_mb(pids), "policy_process": rss_mb([os.getpid()])}, "gpu_memory_mb": gpu.read(pids),
                 "fast_paths_not_served": missing, "renderers": renderers, "env_calibration": calibration}
        return _row("fastenv", n, timed, loop, points, extra), loop.trajectories
    finally:
        envs.close()


@dataclass
class _Run:
    """What the three phases share: the config, the cores, the policy and its calibration, the JSON."""

    cfg: ServerConfig
    say: Callable[[str], None]
    policy_cores: list[int]
    env_cores: list[int]
    envs: tuple[int, ...]
    payload: dict[str, Any]
    target: Any
    gpu: GpuMemory
    policy: ServerPolicy | None = None
    points: list[dict[str, float]] = field(default_factory=list)  # the policy alone: seconds per call at each batch
    env_cal: dict[str, Any] = field(default_factory=dict)  # fastenv's envs alone: c for the choice

    def write(self) -> None:
        self.target.write_text(json.dumps(self.payload, indent=1, default=str))


def calibrate(run: _Run, device: Any, compute: str) -> None:
    """1. The policy alone on synthetic batches of every size the rows make (``run.points``), and
    fastenv's envs alone, one per worker, for the choice's ``c`` (``run.env_cal``)."""
    from fastenv.policy_cost import inference_cost

    cfg = run.cfg
    shapes = [(cfg.camera_size, cfg.camera_size, 3)] * len(IMAGE_KEYS)
    start = time.perf_counter()
    pool = calibration_pool(cfg, run.env_cores, workers=max(1, min(len(run.env_cores), min(run.envs))))
    try:
        state_dim = pool.single_observation_space[STATE_KEY].shape[0]
        run.policy = ServerPolicy(shapes, state_dim, cfg.chunk, max(run.envs), device, inference_cost(cfg.policy_cost), compute, seed=cfg.seed)
        run.payload["policy"] = run.policy.describe()
        run.payload["gpu_memory_policy_loaded_mb"] = run.gpu.read([])
        started = time.perf_counter()
        run.points = calibrate_policy(run.policy, shapes, state_dim, calibration_batches(run.envs))
        run.payload["policy_calibration"] = {"points": run.points, "seconds": time.perf_counter() - started}
        run.say("policy alone: " + ", ".join(f"B={p['batch']}: {1000 * p['seconds']:.1f} ms" for p in run.points))
        env_cal = calibrate_envs(pool, run.policy, cfg)
    finally:
        pool.close()
    env_cal["seconds"] = time.perf_counter() - start
    env_cal.update(amortized(env_cal, cfg, min(run.envs)))
    run.env_cal = run.payload["env_calibration"] = env_cal
    run.say(f"envs alone (for the choice): c = {1000 * env_cal['c_s']:.2f} ms CPU per env step (spread {env_cal['spread']:.0%}, "
            f"{1000 * env_cal['c_wall_s']:.2f} ms wall), resets {1000 * env_cal['reset_cpu_s']:.0f} ms CPU")
    run.write()


def choose(run: _Run, n: int) -> tuple[Any, Any, Any, dict[str, Any]]:
    """2. The layout for ``n`` envs: ``fastenv.tuning.bound.choose_layout`` over the costs measured
    (``P(B)`` fitted near the batches ``n`` envs make, ``c`` from the calibration), or the one
    ``cfg.layouts`` gives. Returns the costs, the layout, the model's prediction for it and the
    entry of the JSON that ``measure`` fills."""
    from fastenv.tuning.bound import ServerCosts, choose_layout

    cfg = run.cfg
    a, b = local_fit(run.points, n)
    costs = ServerCosts(max(a, 1e-6), b, run.env_cal["c_s"], len(run.env_cores), cfg.chunk, env_wall_s=run.env_cal["c_wall_s"])
    cand, prediction = (cfg.layouts[n], None) if n in cfg.layouts else choose_layout(
        costs, n, reset_rate=cfg.chunk / cfg.episode_steps, reset_s=run.env_cal["reset_wall_s"])
    if prediction is None:
        from fastenv.tuning.model import CostModel
        from fastenv.tuning.bound import model_costs

        prediction = CostModel(model_costs(costs)).predict(cand, n)
    run.say(f"N={n}: P(B) = {1000 * a:.1f} + {1000 * b:.2f} x B ms; chosen layout {cand.label}")
    return costs, cand, prediction, {"num_envs": n, "policy_fit": {"a_s": a, "b_s": b}, "chosen": cand.label}


def measure(run: _Run, n: int, costs: Any, cand: Any, prediction: Any, entry: dict[str, Any], memory: dict[str, float]) -> None:
    """3. ``cfg.rows`` at ``n`` envs into ``entry`` (a row that fails or would not fit in memory says
    why and the others still run), then the bound from the fastenv row's own ``c``, each row
    against it (``judge``), and fastenv's data against Default's. ``memory`` carries what one
    Default process held and its env CPU per step, once a Default row has run."""
    from fastenv.tuning.bound import bound_spread

    cfg, policy, points = run.cfg, run.policy, run.points
    assert policy is not None, "calibrate first"
    trajectories = {}
    for name in cfg.rows:
        if name == "Default" and cfg.default_envs is not None and n not in cfg.default_envs:
            continue
        if name == "Default":
            ok, why = memory_fits(memory.get("rss_mb"), n, cfg.memory_fraction)
            if not ok:
                cpu = memory.get("env_cpu_s")
                entry["Default"] = {"row": "Default", "num_envs": n, "not_run": why,
                                    "model_estimate_env_steps_per_s": costs.default_rate(n, cpu) if cpu else None}
                run.say(f"N={n}: Default not run: {why}")
                continue
        try:
            if name == "Default":
                row, trajectories[name] = run_default(cfg, n, policy, run.env_cores, costs, points, run.gpu)
                memory.update(rss_mb=row["host_memory_mb"]["envs"] / n, env_cpu_s=row["env_cpu_s_per_step"])
            else:
                row, trajectories[name] = run_fastenv(cfg, n, cand, prediction, policy, run.env_cores, points, run.gpu, resets=run.env_cal)
        except Exception as exc:  # the other rows still run; the JSON says what failed
            entry[name] = {"row": name, "num_envs": n, "error": f"{type(exc).__name__}: {exc}"}
            run.say(f"N={n} {name}: failed: {type(exc).__name__}: {exc}")
            run.write()
            continue
        entry[name] = row
        run.say(f"N={n} {name}: {row['env_steps_per_s']:.1f} env-steps/s, policy busy {row['policy']['busy_share']:.0%}, "
                f"mean batch {row['policy']['mean_batch']:.1f}")
    # the bound's c: fastenv's envs as its row ran them, where it ran; else the choice's calibration
    own = entry.get("fastenv", {}).get("env_calibration")
    cal = own if own is not None else run.env_cal
    costs = dataclasses.replace(costs, env_cpu_s=cal["c_s"], env_wall_s=cal["c_wall_s"])
    spread = bound_spread(costs, n, cal["spread"], policy_spread(points, n))
    entry["bound"] = {**costs.describe(n), "c_from": "the fastenv row's envs over its timed window" if own is not None else
                      "the choice's calibration (envs alone, one per worker)", "c_spread": cal["spread"], "spread": spread}
    run.say(f"N={n}: bound {costs.bound(n):.0f} env-steps/s ({costs.limit(n)}; c = {1000 * costs.env_cpu_s:.2f} ms, spread "
            f"{cal['spread']:.0%}), closed loop {costs.closed_loop(n)[0]:.0f}")
    for name in ("Default", "fastenv"):
        row = entry.get(name)
        if row is not None and "env_steps_per_s" in row:
            judge(row, costs, n, spread, points)
            run.say(f"N={n} {name}: x bound {row['x_bound']:.2f}" + (f"; {row['calibration_fault']}" if row["calibration_fault"] else ""))
    if "Default" in trajectories and "fastenv" in trajectories:
        entry["fastenv"]["same_data_as_default"] = compare(trajectories["fastenv"], trajectories["Default"])
    if "env_steps_per_s" in entry.get("Default", {}) and "env_steps_per_s" in entry.get("fastenv", {}):
        entry["fastenv"]["x_default"] = entry["fastenv"]["env_steps_per_s"] / entry["Default"]["env_steps_per_s"]


def run(cfg: ServerConfig, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Calibrate, choose, measure (for each N); writes ``fastenv_bench_server.json`` in ``cfg.out`` (or
    the ``.json`` file ``cfg.out`` names) after each row."""
    import torch

    cfg.check()
    policy_cores, env_cores = cores(cfg.policy_cores)
    envs = tuple(cfg.envs) if cfg.envs is not None else default_envs(len(policy_cores) + len(env_cores))
    previous = os.sched_getaffinity(0)
    target = output_file(cfg.out, "fastenv_bench_server.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, Any] = {"benchmark": "fastenv bench --regime server", "config": {**dataclasses.asdict(cfg), "envs": list(envs)},
                               "date": time.strftime("%Y-%m-%d"), "machine": {**measured_on(), "cores_available": len(previous)},
                               "policy_cores": policy_cores, "env_cores": env_cores,
                               "policy_core_smt_siblings": thread_siblings(policy_cores[0]), "rows": []}
    state = _Run(cfg, progress or (lambda line: print(line, file=sys.stderr, flush=True)), policy_cores, env_cores, envs, payload, target,
                 GpuMemory())
    try:
        os.sched_setaffinity(0, policy_cores)
        device = policy_device(cfg.device)
        torch.set_num_threads(len(policy_cores))
        compute = cfg.policy_compute if cfg.policy_compute != "auto" else ("transformer" if device.type == "cuda" and cfg.policy_cost else "wait")
        state.say(f"fastenv bench --regime server: policy on {device} ({compute}), envs {list(envs)} on {len(env_cores)} cores")
        calibrate(state, device, compute)
        memory: dict[str, float] = {}  # one Default process's MB and env CPU per step, once measured
        for n in envs:
            costs, cand, prediction, entry = choose(state, n)
            measure(state, n, costs, cand, prediction, entry, memory)
            payload["rows"].append(entry)
            state.write()
    finally:
        os.sched_setaffinity(0, previous)
    payload["files"] = [str(target)]
    state.write()
    return payload
