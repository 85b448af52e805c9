"""SBX's PPO (Stable-Baselines3 in JAX) on LIBERO through fastenv's vector env.

SBX trains on an SB3 ``VecEnv``: fastenv's ``make_vec`` gives one, as for SB3
(examples/sb3_ppo_libero.py); only the import of ``PPO`` changes. SBX's PPO takes flat
observations and actions (no ``MultiInputPolicy``), so the env is flat: state keys concatenated
(``flatten=True``), a chunk of 8 actions as one vector of 56. Truncated episodes bootstrap from
``terminal_observation``, which fastenv fills from the final observations. One PPO timestep is
one chunk: ``gamma`` discounts once per chunk.

    python examples/sbx_ppo_libero.py --timesteps 4096
"""

from __future__ import annotations

import argparse

from sbx import PPO

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
        flatten=True,
        modalities=["robot0_proprio-state", "object-state"],
    )
    try:
        model = PPO(
            "MlpPolicy", venv, n_steps=args.n_steps, batch_size=64, n_epochs=2, gamma=0.99**args.chunk, verbose=1,
            rollout_buffer_class=RolloutBuffer,
        )
        model.learn(total_timesteps=args.timesteps, callback=RestartMarksCallback())
        print(f"trained {model.num_timesteps} chunks ({model.num_timesteps * args.chunk} simulator steps)")
    finally:
        venv.close()


if __name__ == "__main__":
    main()
