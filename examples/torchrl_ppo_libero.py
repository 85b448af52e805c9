"""TorchRL's PPO (its PPO tutorial's pieces: Collector, GAE, ClipPPOLoss) on LIBERO through fastenv.

The one fastenv line is the env: ``fastenv.integrations.torchrl.make_vec`` in place of
``GymEnv(...)``. The env is flat (state keys concatenated into one Box, ``flatten=True``) so the
tutorial's MLPs take it as they take a MuJoCo env; actions are chunks of 8, flattened to 56.
One TorchRL frame is one chunk: ``frames_per_batch`` and ``total_frames`` count chunks, and
``gamma`` discounts once per chunk.

    python examples/torchrl_ppo_libero.py --total-frames 4096
"""

from __future__ import annotations

import argparse

import fastenv.integrations.torchrl  # first: fastenv sets MUJOCO_GL before TorchRL's imports load MuJoCo  # isort: skip
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.collectors import Collector
from torchrl.data import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
from torchrl.envs import Compose, DoubleToFloat, StepCounter, TransformedEnv
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-frames", type=int, default=4096, help="PPO steps (action chunks) over all envs")
    parser.add_argument("--frames-per-batch", type=int, default=256)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--max-episode-steps", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--minibatch", type=int, default=64)
    parser.add_argument("--gamma", type=float, default=0.99**8, help="per chunk: 0.99 per simulator step over chunks of 8")
    args = parser.parse_args()

    base = fastenv.integrations.torchrl.make_vec(
        "fastenv/Libero-v0", args.num_envs, num_workers=args.num_workers, chunk=args.chunk, camera_size=args.camera_size,
        max_episode_steps=args.max_episode_steps, flatten=True, modalities=["robot0_proprio-state", "object-state"],
    )
    env = TransformedEnv(base, Compose(DoubleToFloat(), StepCounter()))
    obs_dim = env.observation_spec["observation"].shape[-1]
    act_dim = env.action_spec.shape[-1]

    actor_net = nn.Sequential(MLP(in_features=obs_dim, out_features=2 * act_dim, num_cells=[256, 256], activation_class=nn.Tanh), NormalParamExtractor())
    policy = ProbabilisticActor(
        TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
        spec=env.action_spec, in_keys=["loc", "scale"], distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high}, return_log_prob=True,
    )
    value = ValueOperator(MLP(in_features=obs_dim, out_features=1, num_cells=[256, 256], activation_class=nn.Tanh), in_keys=["observation"])

    collector = Collector(env, policy, frames_per_batch=args.frames_per_batch, total_frames=args.total_frames)
    buffer = ReplayBuffer(storage=LazyTensorStorage(args.frames_per_batch), sampler=SamplerWithoutReplacement())
    advantage = GAE(gamma=args.gamma, lmbda=0.95, value_network=value, average_gae=True)
    loss_module = ClipPPOLoss(actor_network=policy, critic_network=value, clip_epsilon=0.2, entropy_coeff=1e-4)
    optim = torch.optim.Adam(loss_module.parameters(), lr=3e-4)

    frames = 0
    try:
        for i, batch in enumerate(collector):
            frames += batch.numel()
            for _ in range(args.epochs):
                advantage(batch)  # truncated episodes bootstrap from V(("next", "observation")): the final observation
                buffer.extend(batch.reshape(-1))
                for _ in range(max(1, batch.numel() // args.minibatch)):
                    losses = loss_module(buffer.sample(args.minibatch))
                    loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(loss_module.parameters(), 1.0)
                    optim.step()
                    optim.zero_grad()
            ended = batch["next", "done"]
            print(f"batch {i + 1}: {frames} chunks ({frames * args.chunk} simulator steps), {int(ended.sum())} episodes ended, "
                  f"mean reward {batch['next', 'reward'].mean().item():.4f}", flush=True)
    finally:
        collector.shutdown()
        env.close()


if __name__ == "__main__":
    main()
