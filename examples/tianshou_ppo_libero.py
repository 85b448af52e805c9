"""Tianshou's PPO on LIBERO through fastenv's vector env.

The shape of Tianshou's own ``examples/mujoco/mujoco_ppo.py`` (MLP actor and critic, ``PPO``, a
``Collector`` per env set, ``OnPolicyTrainerParams`` run by ``algorithm.run_training``), with one
change: the env sets come from ``fastenv.integrations.tianshou.make_vec`` instead of
``make_mujoco_env``. ``flatten=True`` makes LIBERO's observation one float vector (camera and
proprioception) and its action one flat chunk (K*7), which that example's networks take. One
Tianshou env step is one chunk of K simulator steps.

    python examples/tianshou_ppo_libero.py --epochs 10 --epoch-num-steps 2048
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from tianshou.algorithm import PPO
from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, CollectStats, VectorReplayBuffer
from tianshou.trainer import OnPolicyTrainerParams
from tianshou.utils.net.common import ActorCritic, Net
from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic
from torch import nn
from torch.distributions import Distribution, Independent, Normal

from fastenv.integrations.tianshou import make_vec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--epoch-num-steps", type=int, default=2048, help="Tianshou env steps (chunks) per epoch")
    parser.add_argument("--collection-step-num-env-steps", type=int, default=512)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-test-envs", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--max-episode-steps", type=int, default=200, help="simulator steps")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    libero = dict(num_workers=args.num_workers, chunk=args.chunk, camera_size=args.camera_size,
                  max_episode_steps=args.max_episode_steps, flatten=True)
    training_envs = make_vec("fastenv/Libero-v0", args.num_envs, **libero)
    test_envs = make_vec("fastenv/Libero-v0", args.num_test_envs, **libero) if args.num_test_envs else None
    try:
        space = training_envs.observation_space[0], training_envs.action_space[0]
        training_envs.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)

        net_a = Net(state_shape=space[0].shape, hidden_sizes=[64, 64], activation=nn.Tanh)
        actor = ContinuousActorProbabilistic(preprocess_net=net_a, action_shape=space[1].shape, unbounded=True)
        critic = ContinuousCritic(preprocess_net=Net(state_shape=space[0].shape, hidden_sizes=[64, 64], activation=nn.Tanh))
        actor_critic = ActorCritic(actor, critic)
        for m in actor_critic.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, gain=np.sqrt(2))
                nn.init.zeros_(m.bias)

        def dist(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> Distribution:
            loc, scale = loc_scale
            return Independent(Normal(loc, scale), 1)

        policy = ProbabilisticActorPolicy(actor=actor, dist_fn=dist, action_scaling=True, action_bound_method="clip", action_space=space[1])
        algorithm = PPO(policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=3e-4), gamma=0.99, gae_lambda=0.95)

        buffer = VectorReplayBuffer(args.collection_step_num_env_steps, len(training_envs))
        training_collector = Collector[CollectStats](algorithm, training_envs, buffer, exploration_noise=True)
        test_collector = Collector[CollectStats](algorithm, test_envs) if test_envs is not None else None
        result = algorithm.run_training(
            OnPolicyTrainerParams(
                training_collector=training_collector,
                test_collector=test_collector,
                max_epochs=args.epochs,
                epoch_num_steps=args.epoch_num_steps,
                update_step_num_repetitions=2,
                test_step_num_episodes=args.num_test_envs,
                batch_size=args.batch_size,
                collection_step_num_env_steps=args.collection_step_num_env_steps,
                test_in_training=False,
            )
        )
        steps = result.train_step
        print(f"trained {steps} chunks ({steps * args.chunk} simulator steps), {result.train_episode} episodes")
    finally:
        training_envs.close()
        if test_envs is not None:
            test_envs.close()


if __name__ == "__main__":
    main()
