"""Ray actors vs local worker processes, same vector env, same run.

    python benchmarks/bench_ray.py            # CartPole overhead and LIBERO (4 envs, chunk 8)

Ray runs a local cluster here (one machine); on a real cluster pass --address. Writes JSON.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json  # noqa: E402


def cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def libero(chunk: int, camera_size: int) -> gym.Env:
    from fastenv.envs.libero import make_env

    return make_env("libero_10", 0, chunk=chunk, camera_size=camera_size)


def measure(envs, actions, n_envs: int, steps_per_action: int) -> float:
    start = time.perf_counter()
    for a in actions:
        envs.step(a)
    return n_envs * len(actions) * steps_per_action / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cartpole-steps", type=int, default=300)
    parser.add_argument("--libero-chunks", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--address", default=None, help="an existing Ray cluster (default: a local one)")
    parser.add_argument("--out", default="results/bench_ray.json")
    args = parser.parse_args(argv)

    import ray

    from fastenv.vector import PipelineVectorEnv

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address=args.address, include_dashboard=False, logging_level="warning", log_to_driver=False)
    ray_options = {"num_cpus": 1}
    rng = np.random.default_rng(0)
    payload = {"benchmark": "ray_vs_local", "rounds": args.rounds, "machine": machine()}
    try:
        # CartPole: the transport's overhead (8 envs, 2 workers).
        samples: dict[str, list[float]] = {"local processes": [], "Ray actors": []}
        actions = rng.integers(0, 2, (args.cartpole_steps, 8))
        for _ in range(args.rounds):
            for name, backend in (("local processes", "local"), ("Ray actors", "ray")):
                extra = {"ray_options": ray_options} if backend == "ray" else {}
                envs = PipelineVectorEnv([cartpole] * 8, num_workers=2, backend=backend, **extra)
                envs.reset(seed=0)
                measure(envs, actions[:30], 8, 1)
                samples[name].append(measure(envs, actions, 8, 1))
                envs.close()
        rows = [{"config": k, "env_steps_per_s": statistics.median(v), "samples": v} for k, v in samples.items()]
        print_table(rows, [("config", "8 CartPole envs, 2 workers", "s"), ("env_steps_per_s", "env-steps/s", ",.0f")])
        payload["cartpole"] = {"results": rows, "local_over_ray": rows[0]["env_steps_per_s"] / rows[1]["env_steps_per_s"]}

        # LIBERO: 4 envs on 2 workers, chunk 8, slim. One config alive at a time (memory).
        fn = functools.partial(libero, args.chunk, args.camera_size)
        samples = {"local processes": [], "Ray actors": []}
        for name, backend in (("local processes", "local"), ("Ray actors", "ray")):
            extra = {"ray_options": ray_options} if backend == "ray" else {}
            print(f"building 4 LIBERO envs on {name} ...", flush=True)
            envs = PipelineVectorEnv([fn] * 4, num_workers=2, backend=backend, **extra)
            try:
                for r in range(args.rounds + 1):
                    envs.reset(seed=r)
                    actions = rng.uniform(-1, 1, (args.libero_chunks, 4, args.chunk, 7)).astype(np.float32)
                    rate = measure(envs, actions, 4, args.chunk)
                    if r:  # round 0 warms up
                        samples[name].append(rate)
            finally:
                envs.close()
        rows = [{"config": k, "env_steps_per_s": statistics.median(v), "samples": v} for k, v in samples.items()]
        print_table(rows, [("config", "4 LIBERO envs, 2 workers, chunk 8", "s"), ("env_steps_per_s", "env-steps/s", ".1f")])
        ratio = rows[0]["env_steps_per_s"] / rows[1]["env_steps_per_s"]
        payload["libero"] = {"results": rows, "local_over_ray": ratio}
        print(f"\nLIBERO: local / Ray = {ratio:.2f}x (target: Ray within 1.5x); "
              f"CartPole: local / Ray = {payload['cartpole']['local_over_ray']:.1f}x")
    finally:
        ray.shutdown()
    print(f"wrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
