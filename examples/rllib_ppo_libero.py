"""RLlib PPO (new API stack) on LIBERO through fastenv's vector env.

RLlib's own PPO quickstart (``PPOConfig().environment(...).env_runners(...).training(...)``,
``build_algo()``, ``train()``) with the env changed: ``register_env("fastenv-libero",
env_creator("fastenv/Libero-v0", num_workers=...))``, ``.environment("fastenv-libero",
env_config=...)`` and ``gym_env_vectorize_mode="vector_entry_point"``, so RLlib's env runner gets
fastenv's vector env (worker processes, chunks of 8) in the autoreset mode it reads (NEXT_STEP), in
this process or in a remote env runner.
Observations are flat (``flatten=True``: proprioception and object state), actions a flat chunk
``Box(8 * 7)``. One RLlib env step is one chunk: ``train_batch_size_per_learner`` counts chunks,
and ``gamma`` discounts once per chunk (``0.99 ** 8`` keeps the horizon of 0.99 per simulator step).

    python examples/rllib_ppo_libero.py --iterations 10
"""

from __future__ import annotations

import argparse

from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, EPISODE_RETURN_MEAN, NUM_ENV_STEPS_SAMPLED_LIFETIME, NUM_EPISODES_LIFETIME
from ray.tune.registry import register_env

from fastenv.integrations.rllib import env_creator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10, help="algo.train() calls")
    parser.add_argument("--batch", type=int, default=256, help="train_batch_size_per_learner: RLlib env steps (chunks)")
    parser.add_argument("--minibatch", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--max-episode-steps", type=int, default=200, help="simulator steps")
    args = parser.parse_args()

    register_env("fastenv-libero", env_creator("fastenv/Libero-v0", num_workers=args.num_workers))  # NEXT_STEP, as RLlib reads
    config = (
        PPOConfig()
        .environment(
            "fastenv-libero",  # was: "CartPole-v1"
            env_config={
                "chunk": args.chunk, "max_episode_steps": args.max_episode_steps,
                "flatten": True, "modalities": ["robot0_proprio-state", "object-state"],
            },
        )
        .env_runners(
            num_env_runners=0,  # sample in this process: fastenv's workers are the parallelism
            num_envs_per_env_runner=args.num_envs,
            gym_env_vectorize_mode="vector_entry_point",  # fastenv's vector env, not SyncVectorEnv of single envs
        )
        .training(
            gamma=0.99**args.chunk,  # per RLlib step, i.e. per chunk
            lr=3e-4,
            train_batch_size_per_learner=args.batch,
            minibatch_size=args.minibatch,
            num_epochs=args.epochs,
        )
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64]))
        .debugging(seed=0)
    )
    algo = config.build_algo()
    try:
        for i in range(1, args.iterations + 1):
            runners = algo.train()[ENV_RUNNER_RESULTS]
            chunks = int(runners[NUM_ENV_STEPS_SAMPLED_LIFETIME])
            episodes = int(runners.get(NUM_EPISODES_LIFETIME, 0))
            returns = runners.get(EPISODE_RETURN_MEAN, float("nan"))
            print(f"iteration {i}: {chunks} chunks sampled, {episodes} episodes ended, return mean {returns:.3f}", flush=True)
    finally:
        algo.stop()


if __name__ == "__main__":
    main()
