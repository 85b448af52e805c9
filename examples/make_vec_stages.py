"""Many LIBERO envs with ``gym.make_vec``: whole steps, pipeline stages, and dynamic batching.

    python examples/make_vec_stages.py --num-envs 4 --num-workers 2 --iterations 10
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np

import fastenv  # noqa: F401  (registers fastenv/Libero-v0)


def policy(obs: dict[str, np.ndarray], chunk: int, rng: np.random.Generator) -> np.ndarray:
    """Stands in for your policy: one action chunk per env in ``obs``."""
    n = len(obs["robot0_proprio-state"])
    return rng.uniform(-1, 1, (n, chunk, 7)).astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    envs = gym.make_vec(
        "fastenv/Libero-v0",
        num_envs=args.num_envs,
        num_workers=args.num_workers,
        pipeline_stages=2,
        chunk=args.chunk,
        camera_size=args.camera_size,
    )
    try:
        steps_per_chunk = args.num_envs * args.chunk
        obs, _ = envs.reset(seed=0)

        # 1. Whole steps: plain Gymnasium semantics.
        start = time.perf_counter()
        for _ in range(args.iterations):
            obs, reward, terminated, truncated, infos = envs.step(policy(obs, args.chunk, rng))
        print(f"step():           {args.iterations * steps_per_chunk / (time.perf_counter() - start):7.1f} env-steps/s")

        # 2. Pipeline stages: the policy acts on one stage while the other steps.
        m = envs.layout.stage_size
        start = time.perf_counter()
        for k in range(2):
            envs.send(policy({key: v[k * m : (k + 1) * m] for key, v in obs.items()}, args.chunk, rng), stage=k)
        for _ in range(args.iterations - 1):
            for k in range(2):
                stage_obs, *_ = envs.recv(stage=k)
                envs.send(policy(stage_obs, args.chunk, rng), stage=k)
        for k in range(2):
            stage_obs, *_ = envs.recv(stage=k)
        print(f"stages:           {args.iterations * steps_per_chunk / (time.perf_counter() - start):7.1f} env-steps/s")

        # 3. Dynamic batching: serve whichever envs are ready, up to half of them at a time.
        obs, _ = envs.reset(seed=1)
        start = time.perf_counter()
        envs.send(policy(obs, args.chunk, rng), env_ids=np.arange(args.num_envs))
        served = 0
        while served < args.iterations * args.num_envs:
            ready_obs, reward, terminated, truncated, infos = envs.recv(max_batch=args.num_envs // 2, timeout=0.05)
            served += len(infos["env_ids"])
            envs.send(policy(ready_obs, args.chunk, rng), env_ids=infos["env_ids"])
        print(f"dynamic batching: {served * args.chunk / (time.perf_counter() - start):7.1f} env-steps/s")
        while len(envs.in_flight()):
            envs.recv(max_batch=args.num_envs)
    finally:
        envs.close()


if __name__ == "__main__":
    main()
