"""LIBERO throughput over a node's cores: 1 to N workers of one vector env built once.

One ``PipelineVectorEnv`` of N workers, one LIBERO env each (libero_10 task 0, chunk 8, 128-px
camera; on a machine with GPUs each worker renders on one, ``render_devices="auto"``), is built
once. A configuration of k workers steps the envs of the first k workers (``send(env_ids=...)`` /
``recv()``) while the others wait, so no configuration rebuilds anything. Rounds interleave the
configurations. Per k: env-steps/s, speed-up over one worker, scaling efficiency (speed-up / k),
and where the time goes: each stepping worker's CPU time over the wall time (1.0: its core is
saturated), its CPU milliseconds per env step (growing with k: the cores slow each other down,
e.g. shared caches, memory bandwidth, clocks), the main process's CPU share, and, where
``nvidia-smi`` answers, the GPU's utilisation and its memory per env.

    python benchmarks/bench_node_scaling.py --workers 1 2 4 8 15 --out results/bench_node_scaling.json

Default ``--workers``: 1, powers of two, and every core but one (the main process's).
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import threading
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import gpu_memory_mb, gpu_query, machine, print_table, write_json  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def default_workers(cores: int) -> list[int]:
    """1, the powers of two below the env cores, and the env cores (every core but the main process's)."""
    top = max(1, cores - 1)
    out = [1]
    while out[-1] * 2 < top:
        out.append(out[-1] * 2)
    return sorted(set(out + [top]))


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14 and 15 of stat)


class GpuSampler:
    """Samples the GPUs' utilisation every ``interval`` seconds in a thread while running."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval, self.samples = interval, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            sample = gpu_query()
            if sample:
                self.samples.append(statistics.mean(g["util"] for g in sample))

    def __enter__(self) -> GpuSampler:
        if gpu_query() is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def libero_env(suite: str, task_id: int, chunk: int, camera_size: int) -> Any:
    from fastenv.envs.libero import make_env

    return make_env(suite, task_id, chunk=chunk, camera_size=camera_size)


def time_block(envs: Any, ids: np.ndarray, actions: np.ndarray, chunks: int, pids: list[int]) -> dict[str, float]:
    """Step the envs ``ids`` ``chunks`` times; env-steps/s and each stepping worker's CPU time."""
    main = os.getpid()
    cpu0 = [cpu_seconds(p) for p in pids]
    main0, start = cpu_seconds(main), time.perf_counter()
    for _ in range(chunks):
        envs.send(actions, env_ids=ids)
        done = 0
        while done < len(ids):
            done += len(envs.recv()[1])
    wall = time.perf_counter() - start
    worker_cpu = [cpu_seconds(p) - c for p, c in zip(pids, cpu0)]
    env_steps = len(ids) * chunks * actions.shape[1]
    return {
        "env_steps_per_s": env_steps / wall,
        "worker_busy": statistics.mean(c / wall for c in worker_cpu),
        "worker_cpu_ms_per_env_step": 1000.0 * sum(worker_cpu) / env_steps,
        "main_busy": (cpu_seconds(main) - main0) / wall,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", help="worker counts to measure (default: 1, powers of two, all env cores)")
    parser.add_argument("--suite", default="libero_10")
    parser.add_argument("--task", type=int, default=0)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of all configurations, interleaved")
    parser.add_argument("--chunks", type=int, default=20, help="chunks per env per configuration and round")
    parser.add_argument("--pin", action="store_true", help="pin the main process to core 0 and worker w to core w+1")
    parser.add_argument("--render-devices", default="auto", help="'auto' (every visible GPU, none without GPUs) or 'none'")
    parser.add_argument("--out", default="results/bench_node_scaling.json")
    args = parser.parse_args(argv)
    from fastenv.machine import process_memory
    from fastenv.vector import PipelineVectorEnv
    from fastenv.vector.devices import visible_gpus

    cores = os.cpu_count() or 1
    counts = sorted(set(args.workers or default_workers(cores)))
    if counts[0] < 1:
        parser.error(f"--workers takes positive worker counts, got {counts}")
    n = counts[-1]
    gpus = visible_gpus() if args.render_devices == "auto" else []
    memory_before = gpu_memory_mb()
    print(f"building {n} workers, one {args.suite} task {args.task} env each (GPUs for rendering: {gpus or 'none'})", flush=True)
    build_start = time.perf_counter()
    fn = functools.partial(libero_env, args.suite, args.task, args.chunk, args.camera_size)
    envs = PipelineVectorEnv([fn] * n, num_workers=n, render_devices="auto" if gpus else None, progress=False)
    rows: list[dict[str, Any]] = []
    try:
        build_s = time.perf_counter() - build_start
        pids = envs.worker_pids
        if args.pin:
            os.sched_setaffinity(0, {0})
            for w, pid in enumerate(pids):
                os.sched_setaffinity(pid, {(w + 1) % cores})
        envs.reset(seed=0)
        memory_after = gpu_memory_mb()
        rng = np.random.default_rng(0)
        samples: dict[int, list[dict[str, float]]] = {k: [] for k in counts}
        gpu_util: dict[int, list[float]] = {k: [] for k in counts}
        for r in range(args.rounds):
            for k in counts:
                ids = np.concatenate([envs.layout.worker_envs(w) for w in range(k)])
                actions = rng.uniform(-1, 1, (len(ids), args.chunk, 7)).astype(np.float32)
                time_block(envs, ids, actions, 1, pids[:k])  # warm-up: this configuration's first chunk
                with GpuSampler() as sampler:
                    samples[k].append(time_block(envs, ids, actions, args.chunks, pids[:k]))
                gpu_util[k] += sampler.samples
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} workers {samples[k][-1]['env_steps_per_s']:.0f}" for k in counts),
                  flush=True)
        worker_rss = [(process_memory(p) or 0) / 2**30 for p in pids]
    finally:
        envs.close()
    one = [s["env_steps_per_s"] for s in samples[counts[0]]]
    for k in counts:
        rates = [s["env_steps_per_s"] for s in samples[k]]
        speedup = statistics.median(a / b for a, b in zip(rates, one)) * counts[0]  # per round, as if from one worker
        rows.append({
            "workers": k, "env_steps_per_s": statistics.median(rates), "spread": max(rates) - min(rates),
            "speedup": speedup, "efficiency": speedup / k,
            "worker_busy": statistics.median(s["worker_busy"] for s in samples[k]),
            "worker_cpu_ms_per_env_step": statistics.median(s["worker_cpu_ms_per_env_step"] for s in samples[k]),
            "main_busy": statistics.median(s["main_busy"] for s in samples[k]),
            "gpu_util": statistics.median(gpu_util[k]) if gpu_util[k] else None,
            "samples": samples[k],
        })
    print_table(rows, [("workers", "workers", "d"), ("env_steps_per_s", "env-steps/s", ".1f"), ("speedup", "x one worker", ".2f"),
                       ("efficiency", "efficiency", ".2f"), ("worker_busy", "worker CPU/wall", ".2f"),
                       ("worker_cpu_ms_per_env_step", "worker CPU ms/env step", ".2f"), ("main_busy", "main CPU/wall", ".2f"),
                       ("gpu_util", "GPU util %", ".0f")])
    gpu_memory = None
    if memory_before is not None and memory_after is not None:
        gpu_memory = {"before_mb": memory_before, "after_mb": memory_after, "per_env_mb": (memory_after - memory_before) / n}
        print(f"GPU memory per env: {gpu_memory['per_env_mb']:.0f} MB")
    payload = {
        "benchmark": "node_scaling", "suite": args.suite, "task_id": args.task, "chunk": args.chunk, "camera_size": args.camera_size,
        "rounds": args.rounds, "chunks": args.chunks, "pinned": args.pin, "render_gpus": gpus, "build_s": build_s,
        "worker_rss_gb": worker_rss, "gpu_memory": gpu_memory, "rows": rows, "machine": machine(),
    }
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
