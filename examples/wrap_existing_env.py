"""Wrap an env you already have: a stock LIBERO env, and any Gymnasium env.

``fastenv.wrap`` strips the viewer, keeps only the observation keys you name (LIBERO stops
rendering the rest), and turns actions into chunks observed once at their end.

    python examples/wrap_existing_env.py --chunks 5
"""

from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym
import numpy as np

import fastenv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=128)
    args = parser.parse_args()

    # 1. LIBERO's own env, built the way LIBERO's examples build it (OffScreenRenderEnv).
    from fastenv.backends.libero import LiberoTask

    task = LiberoTask.load("libero_10", 0)
    stock = task.stock_env(camera_size=args.camera_size)
    try:
        stock.reset()
        stock.set_init_state(task.init_states[0])
        actions = np.random.default_rng(0).uniform(-1, 1, (args.chunks, args.chunk, 7)).astype(np.float32)

        start = time.perf_counter()
        for chunk in actions:
            for action in chunk:
                stock.step(action)
        stock_ms = (time.perf_counter() - start) * 1000 / actions[:, :, 0].size

        env = fastenv.wrap(stock, chunk=args.chunk, modalities=["agentview_image", "robot0_proprio-state"])
        stock.reset()
        stock.set_init_state(task.init_states[0])
        start = time.perf_counter()
        for chunk in actions:
            obs, reward, terminated, truncated, info = env.step(chunk)
        fast_ms = (time.perf_counter() - start) * 1000 / actions[:, :, 0].size
        print(f"LIBERO stock: {stock_ms:.1f} ms/step; wrapped (1 camera, chunk {args.chunk}): {fast_ms:.1f} ms/step "
              f"({stock_ms / fast_ms:.1f}x); observation keys {sorted(obs)}")
        env.close()  # gives the stock env back as it came
    finally:
        stock.close()

    # 2. Any Gymnasium env: same semantics, via the generic adapter (no speed-up there).
    with fastenv.wrap(gym.make("CartPole-v1"), chunk=4) as cartpole:
        cartpole.reset(seed=0)
        obs, reward, terminated, truncated, info = cartpole.step(np.zeros(4, dtype=np.int64))
        print(f"CartPole, chunks of 4: reward {reward}, sub-steps run {info['chunk_steps']}")
    print(f"pid {os.getpid()} done")


if __name__ == "__main__":
    main()
