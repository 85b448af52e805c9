"""The vector layer on LIBERO: workers, pipeline stages and dynamic batching, each measured side by side.

    python benchmarks/bench_vector_libero.py workers    # 4 envs: 2 workers vs 1 worker vs gymnasium AsyncVectorEnv
    python benchmarks/bench_vector_libero.py pipeline   # policy ~ one env chunk: pipeline_stages=2 vs 1
    python benchmarks/bench_vector_libero.py longtail   # random episode ends: dynamic batching vs step()

Writes JSON (medians, ratios) to --out.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json  # noqa: E402


class RandomEpisodeEnd(gym.Wrapper):
    """Ends each episode (truncation) after a chunk with probability ``p``: episodes of random length."""

    def __init__(self, env: gym.Env, p: float) -> None:
        super().__init__(env)
        self.p = p

    def reset(self, *, seed=None, options=None):
        obs, info = self.env.reset(seed=seed, options=options)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        elif not hasattr(self, "_rng"):
            self._rng = np.random.default_rng()
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated or bool(self._rng.random() < self.p), info


def libero_env(chunk: int, camera_size: int, end_probability: float = 0.0) -> gym.Env:
    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=chunk, camera_size=camera_size)
    return RandomEpisodeEnd(env, end_probability) if end_probability > 0 else env


def chunk_actions(num: int, chunk: int, rng: np.random.Generator) -> np.ndarray:
    return rng.uniform(-1, 1, (num, chunk, 7)).astype(np.float32)


# -- 1. workers ------------------------------------------------------------------------------------
def bench_workers(args: argparse.Namespace) -> dict[str, Any]:
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    from fastenv.vector import PipelineVectorEnv

    fn = functools.partial(libero_env, args.chunk, args.camera_size)
    n = 4
    # One config alive at a time: a LIBERO env holds over a GB, and 12 of them would not fit.
    configs = {
        "fastenv, 2 workers": lambda: PipelineVectorEnv([fn] * n, num_workers=2),
        "fastenv, 1 worker": lambda: PipelineVectorEnv([fn] * n, num_workers=1),
        # spawn: EGL contexts do not survive fork (Gymnasium's default start method here)
        "gymnasium AsyncVectorEnv (4 processes)": lambda: AsyncVectorEnv(
            [fn] * n, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn"
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in configs}
    rng = np.random.default_rng(0)
    # Rounds interleave the configurations (each built, timed and closed in turn), so slow
    # drifts of the machine hit all of them alike.
    for r in range(args.rounds):
        for name, build in configs.items():
            envs = build()
            try:
                envs.reset(seed=r)
                envs.step(chunk_actions(n, args.chunk, rng))  # warm-up: first renders
                actions = chunk_actions(n, args.chunk, rng)
                start = time.perf_counter()
                for _ in range(args.chunks):
                    envs.step(actions)
                samples[name].append(n * args.chunks * args.chunk / (time.perf_counter() - start))
            finally:
                envs.close()
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in samples.items()), flush=True)
    names = list(configs)
    two, one, asy = (samples[k] for k in names)
    per_round = lambda a, b: statistics.median(x / y for x, y in zip(a, b))  # noqa: E731
    rows = [{"config": k, "env_steps_per_s": statistics.median(v), "samples": v} for k, v in samples.items()]
    print_table(rows, [("config", "4 LIBERO envs, chunk %d" % args.chunk, "s"), ("env_steps_per_s", "env-steps/s", ".1f")])
    result = {
        "results": rows,
        "two_vs_one_worker": per_round(two, one),
        "fastenv_vs_async": per_round(two, asy),
        "two_vs_one_worker_of_medians": statistics.median(two) / statistics.median(one),
        "fastenv_vs_async_of_medians": statistics.median(two) / statistics.median(asy),
    }
    print(
        f"2 workers / 1 worker: {result['two_vs_one_worker']:.2f}x; fastenv 2 workers / AsyncVectorEnv: "
        f"{result['fastenv_vs_async']:.2f}x (medians of per-round ratios)"
    )
    return result


# -- 2. pipeline -----------------------------------------------------------------------------------
class CalibratedPolicy:
    """A torch MLP on the proprio state whose forward pass costs ``seconds_per_sample`` per env.

    Stands in for a policy as expensive as one env chunk per env; one thread, on the CPU.
    """

    def __init__(self, seconds_per_sample: float, chunk: int) -> None:
        import torch

        torch.set_num_threads(1)
        self.torch = torch
        self.chunk = chunk
        self.net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
        self.repeats = 1
        x = torch.zeros(1, 512)
        with torch.no_grad():
            for _ in range(3):
                self.net(x)
            start = time.perf_counter()
            for _ in range(20):
                self.net(x)
            per_pass = (time.perf_counter() - start) / 20
        self.repeats = max(1, round(seconds_per_sample / per_pass))
        # A batch-of-one forward costs more than one pass of the probe: measure, then correct.
        one = {"robot0_proprio-state": np.zeros((1, 39))}
        for _ in range(2):
            start = time.perf_counter()
            for _ in range(3):
                self(one)
            actual = (time.perf_counter() - start) / 3
            self.repeats = max(1, round(self.repeats * seconds_per_sample / actual))

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        state = obs["robot0_proprio-state"]
        x = self.torch.zeros(len(state), 512)
        x[:, : state.shape[1]] = self.torch.as_tensor(state, dtype=self.torch.float32)
        out = []
        with self.torch.no_grad():
            # Sample by sample, so the cost grows with the batch like a compute-bound model's
            # (a small MLP on a batch of 2 costs what it costs on 1).
            for row in x.split(1):
                for _ in range(self.repeats):
                    y = self.net(row)
                out.append(y)
        y = self.torch.cat(out)
        return np.tanh(y[:, : self.chunk * 7].numpy()).reshape(len(state), self.chunk, 7)


def bench_pipeline(args: argparse.Namespace) -> dict[str, Any]:
    from fastenv.vector import PipelineVectorEnv

    fn = functools.partial(libero_env, args.chunk, args.camera_size)
    n = 2
    # The env side gets one worker (one core) and the policy one thread (the other core).
    print("building 2 x 2 LIBERO envs ...", flush=True)
    one = PipelineVectorEnv([fn] * n, num_workers=1, pipeline_stages=1)
    two = PipelineVectorEnv([fn] * n, num_workers=1, pipeline_stages=2)
    try:
        one.reset(seed=0)
        rng = np.random.default_rng(0)
        start = time.perf_counter()
        for _ in range(5):
            one.step(chunk_actions(n, args.chunk, rng))
        chunk_time = (time.perf_counter() - start) / 5 / n  # seconds per env chunk
        policy = CalibratedPolicy(chunk_time, args.chunk)
        x = {"robot0_proprio-state": np.zeros((1, 39))}
        start = time.perf_counter()
        for _ in range(5):
            policy(x)
        policy_time = (time.perf_counter() - start) / 5
        print(f"env chunk {chunk_time * 1000:.1f} ms/env, policy forward {policy_time * 1000:.1f} ms/env", flush=True)

        def run_sync() -> float:
            obs, _ = one.reset(seed=1)
            start = time.perf_counter()
            for _ in range(args.chunks):
                obs, *_ = one.step(policy(obs))
            return n * args.chunks * args.chunk / (time.perf_counter() - start)

        def run_pipelined() -> float:
            obs, _ = two.reset(seed=1)
            m = two.layout.stage_size
            start = time.perf_counter()
            for k in range(2):
                two.send(policy({key: v[k * m : (k + 1) * m] for key, v in obs.items()}), stage=k)
            for _ in range(args.chunks - 1):
                for k in range(2):
                    obs_k, *_ = two.recv(stage=k)
                    two.send(policy(obs_k), stage=k)  # the other stage steps meanwhile
            for k in range(2):
                two.recv(stage=k)
            return n * args.chunks * args.chunk / (time.perf_counter() - start)

        samples: dict[str, list[float]] = {"pipeline_stages=1": [], "pipeline_stages=2": []}
        run_sync(), run_pipelined()  # warm-up
        for r in range(args.rounds):
            samples["pipeline_stages=1"].append(run_sync())
            samples["pipeline_stages=2"].append(run_pipelined())
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in samples.items()), flush=True)
    finally:
        one.close()
        two.close()
    s1, s2 = statistics.median(samples["pipeline_stages=1"]), statistics.median(samples["pipeline_stages=2"])
    # Each round times both back to back: the median of the per-round ratios pairs like with like.
    ratio = statistics.median(b / a for a, b in zip(samples["pipeline_stages=1"], samples["pipeline_stages=2"]))
    rows = [{"config": k, "env_steps_per_s": statistics.median(v), "samples": v} for k, v in samples.items()]
    print_table(rows, [("config", "2 envs, 1 worker, policy 1 thread", "s"), ("env_steps_per_s", "env-steps/s", ".1f")])
    print(f"pipeline_stages=2 / 1: {ratio:.2f}x median of per-round ratios ({s2 / s1:.2f}x of medians; 2x is perfect overlap)")
    return {
        "results": rows,
        "speedup": ratio,
        "speedup_of_medians": s2 / s1,
        "env_chunk_ms": chunk_time * 1000,
        "policy_ms_per_env": policy_time * 1000,
    }


# -- 3. long tail ----------------------------------------------------------------------------------
def bench_longtail(args: argparse.Namespace) -> dict[str, Any]:
    from fastenv.vector import PipelineVectorEnv

    fn = functools.partial(libero_env, args.chunk, args.camera_size, args.end_probability)
    n = 4
    print("building 2 x 4 LIBERO envs ...", flush=True)
    sync_envs = PipelineVectorEnv([fn] * n, num_workers=2)
    dyn_envs = PipelineVectorEnv([fn] * n, num_workers=2)
    rng = np.random.default_rng(0)
    total = args.longtail_chunks

    def run_sync() -> tuple[float, int]:
        sync_envs.reset(seed=int(rng.integers(1 << 30)))
        done, episodes = 0, 0
        start = time.perf_counter()
        while done < total:
            _, _, term, trunc, _ = sync_envs.step(chunk_actions(n, args.chunk, rng))
            done += n
            episodes += int((term | trunc).sum())
        return done * args.chunk / (time.perf_counter() - start), episodes

    def run_dynamic() -> tuple[float, int]:
        dyn_envs.reset(seed=int(rng.integers(1 << 30)))
        ids = np.arange(n)
        dyn_envs.send(chunk_actions(n, args.chunk, rng), env_ids=ids)
        done, episodes, sent = 0, 0, n
        start = time.perf_counter()
        while done < total:
            _, _, term, trunc, infos = dyn_envs.recv(max_batch=args.max_batch, timeout=args.batch_timeout)
            ids = infos["env_ids"]
            done += len(ids)
            episodes += int((term | trunc).sum())
            if sent < total:
                dyn_envs.send(chunk_actions(len(ids), args.chunk, rng), env_ids=ids)
                sent += len(ids)
        elapsed = time.perf_counter() - start
        while len(dyn_envs.in_flight()):  # collect what is still in flight (not timed)
            dyn_envs.recv(max_batch=n)
        return done * args.chunk / elapsed, episodes

    samples: dict[str, list[float]] = {"step() (synchronous)": [], "dynamic batching": []}
    episodes: dict[str, list[int]] = {k: [] for k in samples}
    try:
        for r in range(args.rounds):
            for name, run in (("step() (synchronous)", run_sync), ("dynamic batching", run_dynamic)):
                rate, eps = run()
                samples[name].append(rate)
                episodes[name].append(eps)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in samples.items()), flush=True)
    finally:
        sync_envs.close()
        dyn_envs.close()
    s, d = (statistics.median(v) for v in samples.values())
    rows = [
        {"config": k, "env_steps_per_s": statistics.median(v), "episodes_ended": sum(episodes[k]), "samples": v}
        for k, v in samples.items()
    ]
    print_table(rows, [("config", "4 envs, 2 workers, random episode ends", "s"), ("env_steps_per_s", "env-steps/s", ".1f"), ("episodes_ended", "episodes", "d")])
    print(f"dynamic batching / step(): {d / s:.2f}x")
    return {
        "results": rows,
        "speedup": d / s,
        "end_probability_per_chunk": args.end_probability,
        "max_batch": args.max_batch,
        "batch_timeout_s": args.batch_timeout,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # No argparse choices: with nargs="*" Python 3.11 checks the empty default against them.
    parser.add_argument("which", nargs="*", help="workers, pipeline and/or longtail (default: all three)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=12, help="chunks per env per timed block")
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--end-probability", type=float, default=0.15, help="long tail: chance an episode ends after a chunk")
    parser.add_argument("--longtail-chunks", type=int, default=80, help="long tail: env chunks per timed run")
    parser.add_argument("--max-batch", type=int, default=2)
    parser.add_argument("--batch-timeout", type=float, default=0.05)
    parser.add_argument("--out", default="results/bench_vector_libero.json")
    args = parser.parse_args(argv)
    runs = {"workers": bench_workers, "pipeline": bench_pipeline, "longtail": bench_longtail}
    unknown = sorted(set(args.which) - set(runs))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {list(runs)}")
    payload: dict[str, Any] = {"benchmark": "vector_libero", "chunk": args.chunk, "camera_size": args.camera_size, "rounds": args.rounds}
    for which in args.which or ["workers", "pipeline", "longtail"]:
        print(f"\n== {which} ==", flush=True)
        payload[which] = runs[which](args)
    payload["machine"] = machine()
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
