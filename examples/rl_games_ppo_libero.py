"""rl_games' PPO on LIBERO through fastenv's vector env.

rl_games' ``Runner`` with a config in the shape of its own yaml examples (``ppo_pendulum_torch.yaml``:
``a2c_continuous``, ``continuous_a2c_logstd``, an MLP ``actor_critic``), with one change: the env,
registered by ``fastenv.integrations.rl_games.register`` under ``env_name``. ``flatten=True`` makes
LIBERO's observation one float vector (camera and proprioception) and its action one flat chunk
(K*7), which rl_games' MLP networks take. One rl_games step is one chunk of K simulator steps, so
``gamma`` is the per-step discount to the power K and ``horizon_length`` counts chunks.

    python examples/rl_games_ppo_libero.py --epochs 100
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from rl_games.common.algo_observer import DefaultAlgoObserver
from rl_games.torch_runner import Runner

from fastenv.integrations.rl_games import register


class Progress(DefaultAlgoObserver):
    """rl_games' default observer, plus a line per epoch and the agent kept (to close its env)."""

    def __init__(self, chunk: int) -> None:
        super().__init__()
        self.chunk = chunk

    def after_init(self, algo: Any) -> None:
        super().after_init(algo)
        self.episodes = 0

    def process_infos(self, infos: Any, done_indices: torch.Tensor) -> None:
        super().process_infos(infos, done_indices)
        self.episodes += len(done_indices)

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        super().after_print_stats(frame, epoch_num, total_time)
        chunks = self.algo.frame  # (``frame`` is the count before this epoch's)
        print(f"epoch {epoch_num}: {chunks} chunks ({chunks * self.chunk} simulator steps), {self.episodes} episodes ended", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=8, help="rl_games' num_actors")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=32, help="chunks per env per epoch")
    parser.add_argument("--minibatch", type=int, default=128)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--max-episode-steps", type=int, default=200, help="simulator steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-dir", default="runs")
    args = parser.parse_args()

    register("libero", "fastenv/Libero-v0", num_workers=args.num_workers, chunk=args.chunk, camera_size=args.camera_size,
             max_episode_steps=args.max_episode_steps, flatten=True)
    config = {
        "params": {
            "seed": args.seed,
            "algo": {"name": "a2c_continuous"},
            "model": {"name": "continuous_a2c_logstd"},
            "network": {
                "name": "actor_critic",
                "separate": False,
                "space": {"continuous": {"mu_activation": "None", "sigma_activation": "None", "mu_init": {"name": "default"},
                                         "sigma_init": {"name": "const_initializer", "val": 0}, "fixed_sigma": True}},
                "mlp": {"units": [256, 128], "activation": "elu", "initializer": {"name": "default"}},
            },
            "config": {
                "name": "libero_ppo",
                "env_name": "libero",
                "device": "cuda:0" if torch.cuda.is_available() else "cpu",
                "torch_compile": False,  # rl_games compiles the model by default: minutes on a CPU
                "num_actors": args.num_envs,
                "horizon_length": args.horizon,
                "minibatch_size": args.minibatch,
                "mini_epochs": 4,
                "max_epochs": args.epochs,
                "gamma": 0.99**args.chunk,  # one rl_games step is a chunk of K simulator steps
                "tau": 0.95,
                "learning_rate": 3e-4,
                "lr_schedule": "adaptive",
                "kl_threshold": 0.008,
                "e_clip": 0.2,
                "clip_value": True,
                "critic_coef": 2,
                "entropy_coef": 0.0,
                "bounds_loss_coef": 0.0001,
                "grad_norm": 1.0,
                "truncate_grads": True,
                "normalize_input": True,
                "normalize_value": True,
                "normalize_advantage": True,
                "value_bootstrap": True,  # time-outs bootstrap from infos["time_outs"]
                "reward_shaper": {"scale_value": 1.0},
                "save_frequency": 0,
                "save_best_after": args.epochs + 1,
                "train_dir": args.train_dir,
            },
        }
    }
    observer = Progress(args.chunk)
    runner = Runner(algo_observer=observer)
    runner.load(config)
    try:
        runner.run({"train": True})
    finally:
        if getattr(observer, "algo", None) is not None:
            observer.algo.vec_env.close()


if __name__ == "__main__":
    main()
