"""skrl's PPO (its Gymnasium PPO example's pieces: models, RandomMemory, PPO, SequentialTrainer) on LIBERO through fastenv.

What changes from skrl's example: the env (``gym.make_vec("fastenv/Libero-v0", ...)`` in place of
``gym.make_vec("Pendulum-v1", ..., vectorization_mode="sync")``), and the agent: fastenv's ``PPO``
with ``time_limit_bootstrap``, so that truncated episodes bootstrap from their final observation
(skrl's own PPO would bootstrap from the next episode's first one on fastenv's SAME_STEP vector
env, and from a transition that never happened on Gymnasium's NEXT_STEP one; docs/training.md).
The env is flat (state keys concatenated, ``flatten=True``) so the example's MLPs take it as they
take Pendulum; actions are chunks of 8, flattened to 56. One skrl timestep is one chunk in every
env: ``timesteps`` and ``rollouts`` count chunks, and ``discount_factor`` applies once per chunk.

    python examples/skrl_ppo_libero.py --timesteps 2048
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import torch
from skrl.agents.torch.ppo import PPO_CFG
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer
from skrl.utils import set_seed
from torch import nn

from fastenv.integrations.skrl import PPO


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, state_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=False, clip_log_std=True, min_log_std=-20, max_log_std=2)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                                 nn.Linear(256, self.num_actions), nn.Tanh())  # LIBERO's actions are in [-1, 1]
        self.log_std_parameter = nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {"log_std": self.log_std_parameter}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, state_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=int, default=2048, help="skrl timesteps: one chunk in every env")
    parser.add_argument("--rollouts", type=int, default=64, help="timesteps per PPO update")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--max-episode-steps", type=int, default=200)
    parser.add_argument("--learning-epochs", type=int, default=5)
    parser.add_argument("--mini-batches", type=int, default=4)
    parser.add_argument("--write-interval", default="auto", help="TensorBoard and checkpoints (timesteps); 0: none")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    set_seed(args.seed)

    env = gym.make_vec(
        "fastenv/Libero-v0", num_envs=args.num_envs, num_workers=args.num_workers, chunk=args.chunk, camera_size=args.camera_size,
        max_episode_steps=args.max_episode_steps, flatten=True, modalities=["robot0_proprio-state", "object-state"],
    )
    env = wrap_env(env)
    device = env.device

    memory = RandomMemory(memory_size=args.rollouts, num_envs=env.num_envs, device=device)
    models = {
        "policy": Policy(env.observation_space, env.state_space, env.action_space, device),
        "value": Value(env.observation_space, env.state_space, env.action_space, device),
    }

    cfg = PPO_CFG()
    cfg.rollouts = args.rollouts
    cfg.learning_epochs = args.learning_epochs
    cfg.mini_batches = args.mini_batches
    cfg.discount_factor = 0.99**args.chunk  # per chunk: 0.99 per simulator step
    cfg.gae_lambda = 0.95
    cfg.time_limit_bootstrap = True  # truncated episodes bootstrap from V(final observation)
    cfg.learning_rate = 3e-4
    cfg.learning_rate_scheduler = KLAdaptiveLR
    cfg.learning_rate_scheduler_kwargs = {"kl_threshold": 0.008}
    cfg.grad_norm_clip = 0.5
    cfg.ratio_clip = 0.2
    cfg.value_clip = 0.2
    cfg.entropy_loss_scale = 0.0
    cfg.value_loss_scale = 0.5
    cfg.observation_preprocessor = RunningStandardScaler
    cfg.observation_preprocessor_kwargs = {"size": env.observation_space, "device": device}
    cfg.value_preprocessor = RunningStandardScaler
    cfg.value_preprocessor_kwargs = {"size": 1, "device": device}
    write_interval = args.write_interval if args.write_interval == "auto" else int(args.write_interval)
    cfg.experiment.write_interval = write_interval
    cfg.experiment.checkpoint_interval = write_interval
    cfg.experiment.directory = "runs/torch/Libero"

    agent = PPO(models=models, memory=memory, cfg=cfg, observation_space=env.observation_space,
                state_space=env.state_space, action_space=env.action_space, device=device)

    trainer = SequentialTrainer(cfg={"timesteps": args.timesteps, "headless": True}, env=env, agents=agent)
    trainer.train()  # the trainer closes the env at exit (close_environment_at_exit)
    chunks = args.timesteps * env.num_envs
    print(f"trained {args.timesteps} timesteps: {chunks} chunks ({chunks * args.chunk} simulator steps)", flush=True)


if __name__ == "__main__":
    main()
