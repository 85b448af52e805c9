"""Stable-Baselines3 PPO on LIBERO through fastenv's vector env.

Observations are a dict (camera image + proprioception), so SB3 picks ``MultiInputPolicy`` and
transposes the image itself; actions are chunks ``Box(K, 7)``. Truncated episodes bootstrap from
``terminal_observation``, which fastenv fills from the final observations. fastenv's
``RolloutBuffer``, with ``RestartMarksCallback``, keeps the transitions a worker restart invents
out of PPO's updates.

    python examples/sb3_ppo_libero.py --timesteps 2048
"""

from __future__ import annotations

import argparse

from stable_baselines3 import PPO

from fastenv.integrations.sb3 import RestartMarksCallback, RolloutBuffer, make_vec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=4096, help="PPO steps (action chunks)")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--n-steps", type=int, default=64)
    args = parser.parse_args()
    venv = make_vec(
        "fastenv/Libero-v0",
        args.num_envs,
        num_workers=args.num_workers,
        chunk=args.chunk,
        camera_size=args.camera_size,
        max_episode_steps=200,
    )
    try:
        model = PPO(
            "MultiInputPolicy", venv, n_steps=args.n_steps, batch_size=64, n_epochs=2, verbose=1, device="auto",
            rollout_buffer_class=RolloutBuffer,
        )
        model.learn(total_timesteps=args.timesteps, callback=RestartMarksCallback())
        print(f"trained {model.num_timesteps} chunks ({model.num_timesteps * args.chunk} simulator steps)")
    finally:
        venv.close()


if __name__ == "__main__":
    main()
