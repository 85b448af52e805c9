"""Each RL library's own collector on LIBERO: its default vectorization of the stock env against fastenv.

    python benchmarks/bench_rl_libraries.py                       # every library below; 3 rounds
    python benchmarks/bench_rl_libraries.py --libraries sb3 --quick
    python benchmarks/bench_rl_libraries.py --table results/bench_rl_libraries.json

Per library, three rows, the same number of envs, the same policy network, the same task:

- ``stock``: the library's default vectorization, as its docs and examples use it, over LIBERO's own
  ``OffScreenRenderEnv`` stepping one action at a time (robosuite's control loop, hard resets, a
  render at every step): SB3 ``make_vec_env`` (``DummyVecEnv``); TorchRL ``SerialEnv`` over
  ``GymWrapper`` (its PPO tutorial steps one ``GymEnv`` in the collector's process: ``SerialEnv`` is
  that for N envs); Tianshou ``SubprocVectorEnv(share_memory=True)`` (what its MuJoCo examples build,
  ``VectorEnvType.SUBPROC_SHARED_MEM``), started with ``spawn`` (a fork deadlocks after the env it
  builds in the parent for its shared memory has rendered); skrl ``wrap_env`` over
  ``gym.make_vec(..., vectorization_mode="sync")`` (its PPO examples' synchronous vector env) and its
  ``SequentialTrainer``; SBX (SB3's PPO in JAX) on SB3's ``make_vec_env`` (``DummyVecEnv``); RLlib's
  ``SingleAgentEnvRunner`` (what an algorithm with 0 remote env runners samples with) in its default
  ``gym_env_vectorize_mode="sync"`` (``SyncVectorEnv``), timing ``sample(num_timesteps=...)``;
  rl_games ``RayVecEnv`` (``vecenv_type: RAY``, its default for Gym envs: one Ray actor per env) and
  its PPO's ``play_steps``;
- ``fastenv-1``: the same collector on fastenv's vector env through the library's integration
  (``fastenv.integrations.<library>``; SBX through SB3's, RLlib through
  ``gym_env_vectorize_mode="vector_entry_point"``), in the layout fastenv picks (``--num-workers``
  to set it), one action per step: the data the same collector gathers on the stock env, so its
  ratio to the stock row ("x stock at the same data") is fastenv's vectorization and fast paths
  alone (the same-data tests compare with each stock env in a process of its own; where the
  library's default steps its envs in one process, the stock row's envs draw each other's scenes
  after the first autoreset: docs/training.md);
- ``fastenv-8``: the same at chunks of 8 actions (``--chunk``): the policy's head emits 8x7 actions
  and runs 8 times less often, so its ratio ("x stock with chunks of 8") adds the chunk's saving
  (a different action interface: other data than the stock row's).

Every row observes one camera (``agentview``, ``--camera-size`` px) and the proprio state, flattened
into one float32 vector (image then proprio, the keys' order), so each library's default PPO policy
for a vector observation, an MLP of 64-64 tanh units (SB3's and SBX's ``MlpPolicy``, TorchRL's and
Tianshou's MuJoCo PPO examples; skrl's, RLlib's and rl_games' set to that shape), reads the same
input on every row; its head emits 7 actions (stock, fastenv-1) or a chunk of 8x7 (fastenv-8).
Only the collection is timed (the library's collector filling its rollout, the policy included),
after a warm-up collection of one chunk's simulator steps; not the PPO update. Env-steps are
simulator steps, one rule for every row (``StepCount``): each env a call steps counts the call's
actions (a fastenv chunk 8; episodes end at ``--max-episode-steps``, a multiple of the chunk, so
no chunk is cut by a time limit), and an env whose episode ended on the call before counts none
when the vector env autoresets on the next step (Gymnasium's ``NEXT_STEP``: skrl's and RLlib's
stock rows, both of PufferLib's rows, RLlib's fastenv rows), as that call only resets it. Resets
fall inside the timed collection. One torch thread (one XLA thread for SBX). Each row runs in a
fresh process, rows interleaved over rounds; a library that does not import is a row
"not installed" with the reason. With ``FASTENV_BENCH_LOCK=FILE`` each row holds an exclusive lock
on FILE while it runs (``flock``), so other heavy jobs on a shared machine wait between rows.

PufferLib has no collector apart from its trainer (which needs its compiled extension): its rows
step its vectorization with the same policy, ``pufferlib.vector``'s ``Multiprocessing`` backend
over the stock env against ``fastenv.integrations.pufferlib.PufferLibVecEnv``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import machine, no_paths, print_docs_table, print_table, write_json  # noqa: E402

MODALITIES = ("agentview_image", "robot0_proprio-state")
ENV_ID = "fastenv/Libero-v0"
STOCK_ID = "bench/StockLibero-v0"  # the stock env, for the libraries that make their envs by name
HIDDEN = (64, 64)


@dataclasses.dataclass(frozen=True)
class Config:
    """What every row runs: the task, the envs, the steps timed."""

    suite: str = "libero_10"
    task_id: int = 0
    num_envs: int = 4
    chunk: int = 8  # the chunked row's actions per step
    camera_size: int = 128
    steps: int = 1024  # simulator steps timed per row, all envs together
    max_episode_steps: int = 128
    num_workers: int | None = None
    seed: int = 0

    def rows(self) -> tuple[str, ...]:
        """A library's rows: its default on the stock env, fastenv at the same data, fastenv chunked."""
        return ("stock", "fastenv-1", f"fastenv-{self.chunk}")

    def per_step(self, row: str) -> int:
        """Simulator steps in one step of the library's collector (the actions the policy emits at once)."""
        return 1 if row == "stock" else int(row.removeprefix("fastenv-"))

    def collector_steps(self, row: str) -> int:
        """Timed collector steps per env: ``steps`` simulator steps over all envs."""
        return self.steps // (self.num_envs * self.per_step(row))

    def warmup_steps(self, row: str) -> int:
        """Collector steps per env before the timing: one chunk of simulator steps on every row."""
        return self.chunk // self.per_step(row)

    def fastenv_options(self, row: str) -> dict[str, Any]:
        options: dict[str, Any] = dict(
            suite=self.suite, task_id=self.task_id, chunk=self.per_step(row), camera_size=self.camera_size, modalities=list(MODALITIES),
            max_episode_steps=self.max_episode_steps, flatten=True,
        )
        if self.num_workers is not None:
            options["num_workers"] = self.num_workers
        return options

    def problems(self) -> list[str]:
        """What makes these sizes unfit for the rows (empty when fit)."""
        out = []
        if self.chunk < 2:
            out.append(f"--chunk must be at least 2 (the chunked row beside fastenv-1), got {self.chunk}")
        elif self.steps < self.num_envs * self.chunk or self.steps % (self.num_envs * self.chunk):
            out.append(f"--steps must be a positive multiple of num_envs * chunk ({self.num_envs * self.chunk}), got {self.steps}")
        if self.chunk >= 1 and self.max_episode_steps % self.chunk:
            # a time limit inside a chunk would cut it short, and a chunk counts all its actions
            out.append(f"--max-episode-steps must be a multiple of the chunk ({self.chunk}), got {self.max_episode_steps}")
        return out


def side(row: str) -> str:
    """``stock`` or ``fastenv``: which vector env a row builds."""
    return "stock" if row == "stock" else "fastenv"


class StepCount:
    """Simulator steps a vector env's calls took, by the rule of every row: each env a call steps
    counts the call's actions (``per_step``); on a vector env that autoresets on the next step
    (Gymnasium's NEXT_STEP, PufferLib's convention), an env whose episode ended on the call before
    is only reset by the call, and counts none."""

    def __init__(self, num_envs: int, per_step: int, next_step: bool) -> None:
        self.per_step, self.next_step = per_step, next_step
        self.ended = np.zeros(num_envs, dtype=bool)  # the envs whose episode ended on the last call
        self.steps = 0

    def add(self, terminated: Any, truncated: Any) -> None:
        """Count one call, given the episode ends it returned (one flag per env)."""
        stepped = int(np.count_nonzero(~self.ended)) if self.next_step else self.ended.size
        self.steps += self.per_step * stepped
        ended = np.logical_or(np.asarray(terminated, dtype=bool).reshape(-1), np.asarray(truncated, dtype=bool).reshape(-1))
        if ended.shape != self.ended.shape:
            raise ValueError(f"expected one episode end per env ({self.ended.size}), got {ended.size}")
        self.ended = ended

    def restart(self) -> None:
        """Count from zero from here on (the last call's episode ends kept): the timing starts."""
        self.steps = 0


def stock_env(cfg: Config) -> Any:
    """LIBERO's own env, one camera and the proprio state, flattened as fastenv's ``flatten=True``
    flattens (a concatenation above the env; nothing of fastenv steps or renders it)."""
    from bench_training import StockLibero
    from gymnasium.wrappers import TimeLimit

    from fastenv.wrappers.flatten import FlattenModalities

    return FlattenModalities(TimeLimit(StockLibero(cfg.suite, cfg.task_id, cfg.camera_size, MODALITIES), cfg.max_episode_steps))


def _timed(collect: Callable[[], int]) -> tuple[float, int]:
    """Seconds ``collect`` took and the simulator steps it reports."""
    start = time.perf_counter()
    steps = collect()
    return time.perf_counter() - start, steps


# -- the libraries ----------------------------------------------------------------------------------
# Each runs one row: builds the row's vector env, the policy and the collector, collects a warm-up,
# times a collection of cfg.steps simulator steps, and returns the seconds and the simulator steps
# it took by StepCount's rule. SB3's and rl_games' vector envs autoreset in the step that ends an
# episode, and TorchRL's and Tianshou's collectors reset an ended env by a call of its own, which
# they do not count as a step: every step they count stepped every env it names.


def _collect_sb3_ppo(ppo: type, row: str, cfg: Config, **ppo_kwargs: Any) -> dict[str, Any]:
    """An SB3-style PPO's ``collect_rollouts`` (SB3's or SBX's) on SB3's ``make_vec_env`` or fastenv's."""
    if row == "stock":
        from stable_baselines3.common.env_util import make_vec_env

        venv = make_vec_env(functools.partial(stock_env, cfg), n_envs=cfg.num_envs, seed=cfg.seed)  # DummyVecEnv
        buffer_class, buffer_callback = None, None
    else:
        from fastenv.integrations.sb3 import RestartMarksCallback, RolloutBuffer, make_vec

        venv = make_vec(ENV_ID, cfg.num_envs, **cfg.fastenv_options(row))
        venv.seed(cfg.seed)
        buffer_class, buffer_callback = RolloutBuffer, RestartMarksCallback()
    try:
        n = cfg.collector_steps(row)
        model = ppo("MlpPolicy", venv, n_steps=n, batch_size=n * cfg.num_envs, seed=cfg.seed, rollout_buffer_class=buffer_class,
                    policy_kwargs={"net_arch": list(HIDDEN)}, **ppo_kwargs)
        _, callback = model._setup_learn(total_timesteps=10**9, callback=buffer_callback)  # what learn() does before collecting
        model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=cfg.warmup_steps(row))

        def collect() -> int:
            before = model.num_timesteps  # one per env per step
            model.collect_rollouts(model.env, callback, model.rollout_buffer, n_rollout_steps=n)
            return (model.num_timesteps - before) * cfg.per_step(row)

        seconds, steps = _timed(collect)
        return {"seconds": seconds, "env_steps": steps, "vectorization": type(venv.unwrapped).__name__}
    finally:
        venv.close()


def run_sb3(row: str, cfg: Config) -> dict[str, Any]:
    from stable_baselines3 import PPO

    return _collect_sb3_ppo(PPO, row, cfg, device="cpu")


def run_sbx(row: str, cfg: Config) -> dict[str, Any]:
    from sbx import PPO  # SB3's PPO in JAX: SB3's VecEnv, SB3's collect_rollouts loop, a JAX policy (64-64 tanh)

    return _collect_sb3_ppo(PPO, row, cfg)


def run_torchrl(row: str, cfg: Config) -> dict[str, Any]:
    import fastenv.integrations.torchrl  # first: fastenv sets MuJoCo's GL platform before TorchRL's imports load MuJoCo  # isort: skip
    import torch
    from tensordict.nn import NormalParamExtractor, TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.envs import Compose, DoubleToFloat, GymWrapper, SerialEnv, StepCounter, TransformedEnv
    from torchrl.modules import MLP, ProbabilisticActor, TanhNormal

    if row == "stock":
        base = SerialEnv(cfg.num_envs, lambda: GymWrapper(stock_env(cfg)))
    else:
        base = fastenv.integrations.torchrl.make_vec(ENV_ID, cfg.num_envs, **cfg.fastenv_options(row))
    base.set_seed(cfg.seed)
    env = TransformedEnv(base, Compose(DoubleToFloat(), StepCounter()))  # as TorchRL's PPO tutorial
    collector = None
    try:
        obs_dim, spec = env.observation_spec["observation"].shape[-1], env.action_spec_unbatched
        net = torch.nn.Sequential(
            MLP(in_features=obs_dim, out_features=2 * spec.shape[-1], num_cells=list(HIDDEN), activation_class=torch.nn.Tanh),
            NormalParamExtractor(),
        )
        policy = ProbabilisticActor(
            TensorDictModule(net, in_keys=["observation"], out_keys=["loc", "scale"]), spec=spec, in_keys=["loc", "scale"],
            distribution_class=TanhNormal, distribution_kwargs={"low": spec.space.low, "high": spec.space.high}, return_log_prob=True,
        )
        batch = cfg.warmup_steps(row)  # collector steps per env in a batch: the first batch is the warm-up
        batches = cfg.collector_steps(row) // batch
        frames = batch * cfg.num_envs
        collector = Collector(env, policy, frames_per_batch=frames, total_frames=frames * (1 + batches))
        batches_iter = iter(collector)
        next(batches_iter)

        def collect() -> int:  # a batch's frames: one per env per step
            return sum(next(batches_iter).numel() for _ in range(batches)) * cfg.per_step(row)

        seconds, steps = _timed(collect)
        return {"seconds": seconds, "env_steps": steps, "vectorization": type(base).__name__}
    finally:
        if collector is not None:
            collector.shutdown()
        else:
            env.close()


def run_tianshou(row: str, cfg: Config) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from tianshou.algorithm import PPO
    from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.utils.net.common import Net
    from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic
    from torch.distributions import Distribution, Independent, Normal

    if row == "stock":
        from tianshou.env import SubprocVectorEnv

        # spawn, not Linux's default fork: share_memory builds an env here first, and a process forked
        # after a LIBERO env rendered here deadlocks (a lock of the renderer's threads, held at the fork)
        envs = SubprocVectorEnv([functools.partial(stock_env, cfg)] * cfg.num_envs, share_memory=True, context="spawn")
    else:
        from fastenv.integrations.tianshou import make_vec

        envs = make_vec(ENV_ID, cfg.num_envs, **cfg.fastenv_options(row))
    try:
        envs.seed(cfg.seed)
        obs_dim = int(envs.reset()[0].shape[-1])
        act_dim = 7 * cfg.per_step(row)
        action_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)
        actor = ContinuousActorProbabilistic(
            preprocess_net=Net(state_shape=(obs_dim,), hidden_sizes=list(HIDDEN), activation=torch.nn.Tanh), action_shape=(act_dim,), unbounded=True
        )
        critic = ContinuousCritic(preprocess_net=Net(state_shape=(obs_dim,), hidden_sizes=list(HIDDEN), activation=torch.nn.Tanh))

        def dist(loc_scale: tuple[torch.Tensor, torch.Tensor]) -> Distribution:
            loc, scale = loc_scale
            return Independent(Normal(loc, scale), 1)

        policy = ProbabilisticActorPolicy(actor=actor, dist_fn=dist, action_scaling=True, action_bound_method="clip", action_space=action_space)
        algorithm = PPO(policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=3e-4))
        n = cfg.collector_steps(row)
        collector = Collector[CollectStats](algorithm, envs, VectorReplayBuffer(n * cfg.num_envs, cfg.num_envs), exploration_noise=True)
        collector.reset()
        collector.collect(n_step=cfg.warmup_steps(row) * cfg.num_envs)

        def collect() -> int:  # one per env per step
            return collector.collect(n_step=n * cfg.num_envs).n_collected_steps * cfg.per_step(row)

        seconds, steps = _timed(collect)
        return {"seconds": seconds, "env_steps": steps, "vectorization": type(envs).__name__}
    finally:
        envs.close()


def _puffer_env(cfg: Config, *, buf: Any = None, seed: int = 0) -> Any:
    """The stock env in PufferLib's emulation, writing its results into the buffers ``pufferlib.vector``
    hands it (an env built without them steps into buffers of its own, which the vector env never reads)."""
    import pufferlib.emulation

    return pufferlib.emulation.GymnasiumPufferEnv(env_creator=functools.partial(stock_env, cfg), buf=buf, seed=seed)


def run_pufferlib(row: str, cfg: Config) -> dict[str, Any]:
    import multiprocessing

    import pufferlib.vector
    import torch

    if row == "stock":
        # spawn: PufferLib builds a driver env here before it starts its workers, and a fork after a
        # LIBERO env rendered here deadlocks (as Tianshou's does). overwork: PufferLib refuses more
        # workers than physical cores unless told (one env per worker, its default).
        multiprocessing.set_start_method("spawn", force=True)
        envs = pufferlib.vector.make(functools.partial(_puffer_env, cfg), num_envs=cfg.num_envs,
                                     backend=pufferlib.vector.Multiprocessing, overwork=True)
        vectorization = "pufferlib.vector.Multiprocessing"
    else:
        from fastenv.integrations.pufferlib import make_vec

        envs = make_vec(ENV_ID, cfg.num_envs, **cfg.fastenv_options(row))
        vectorization = "fastenv.integrations.pufferlib.PufferLibVecEnv"
    try:
        obs, _ = envs.reset(seed=cfg.seed)
        layers: list[torch.nn.Module] = []
        width = obs.shape[-1]
        for h in HIDDEN:
            layers += [torch.nn.Linear(width, h), torch.nn.Tanh()]
            width = h
        policy = torch.nn.Sequential(*layers, torch.nn.Linear(width, 7 * cfg.per_step(row)))
        # Both backends reset an ended env on its next step (PufferLib's convention), running no action there
        count = StepCount(cfg.num_envs, cfg.per_step(row), next_step=True)

        def collect_steps(n: int) -> int:
            nonlocal obs
            for _ in range(n):
                with torch.no_grad():
                    mean = policy(torch.as_tensor(obs, dtype=torch.float32))
                action = torch.clamp(mean + torch.randn_like(mean), -1.0, 1.0).numpy()
                obs, _, terminals, truncations, _ = envs.step(action)
                count.add(terminals, truncations)
            return count.steps

        collect_steps(cfg.warmup_steps(row))
        count.restart()
        seconds, steps = _timed(lambda: collect_steps(cfg.collector_steps(row)))
        return {"seconds": seconds, "env_steps": steps, "vectorization": vectorization}
    finally:
        envs.close()


def run_skrl(row: str, cfg: Config) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from skrl.agents.torch.ppo import PPO_CFG
    from skrl.envs.wrappers.torch import wrap_env
    from skrl.memories.torch import RandomMemory
    from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
    from skrl.trainers.torch import SequentialTrainer

    if row == "stock":
        from skrl.agents.torch.ppo import PPO

        # skrl's PPO examples vectorize Gymnasium envs synchronously (gym.make_vec(..., vectorization_mode="sync"))
        gym.register(STOCK_ID, entry_point=stock_env, kwargs={"cfg": cfg})
        venv = gym.make_vec(STOCK_ID, num_envs=cfg.num_envs, vectorization_mode="sync")
    else:
        from fastenv.integrations.skrl import PPO  # (importing fastenv registers fastenv/Libero-v0)

        venv = gym.make_vec(ENV_ID, num_envs=cfg.num_envs, **cfg.fastenv_options(row))
    try:
        env = wrap_env(venv, verbose=False)
        spaces = dict(observation_space=env.observation_space, state_space=env.state_space, action_space=env.action_space, device=env.device)

        def mlp(width: int, out: int) -> torch.nn.Sequential:
            layers: list[torch.nn.Module] = []
            for h in HIDDEN:
                layers += [torch.nn.Linear(width, h), torch.nn.Tanh()]
                width = h
            return torch.nn.Sequential(*layers, torch.nn.Linear(width, out))

        class Policy(GaussianMixin, Model):  # skrl's PPO examples' models, 64-64 tanh
            def __init__(self) -> None:
                Model.__init__(self, **spaces)
                GaussianMixin.__init__(self, clip_actions=True)
                self.net = mlp(self.num_observations, self.num_actions)
                self.log_std_parameter = torch.nn.Parameter(torch.zeros(self.num_actions))

            def compute(self, inputs: dict[str, Any], role: str) -> tuple[Any, dict[str, Any]]:
                return self.net(inputs["observations"]), {"log_std": self.log_std_parameter}

        class Value(DeterministicMixin, Model):
            def __init__(self) -> None:
                Model.__init__(self, **spaces)
                DeterministicMixin.__init__(self)
                self.net = mlp(self.num_observations, 1)

            def compute(self, inputs: dict[str, Any], role: str) -> tuple[Any, dict[str, Any]]:
                return self.net(inputs["observations"]), {}

        warmup, n = cfg.warmup_steps(row), cfg.collector_steps(row)
        rollouts = warmup + n + 1  # no PPO update inside the collection
        ppo_cfg = PPO_CFG(rollouts=rollouts, time_limit_bootstrap=True)  # fastenv's PPO needs it; the same on both rows
        ppo_cfg.experiment.write_interval = 0
        ppo_cfg.experiment.checkpoint_interval = 0
        memory = RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=env.device)
        agent = PPO(models={"policy": Policy(), "value": Value()}, memory=memory, cfg=ppo_cfg, **spaces)
        trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": warmup + n, "headless": True, "disable_progressbar": True,
                                                                "close_environment_at_exit": False})
        # The trainer's loop resets the envs, then steps: the clock starts at its first step after the
        # warm-up. On a NEXT_STEP vector env (the stock row's SyncVectorEnv) the step after an
        # episode's end only resets that env: a trainer step, not a simulator step.
        next_step = venv.metadata.get("autoreset_mode") == gym.vector.AutoresetMode.NEXT_STEP
        count = StepCount(cfg.num_envs, cfg.per_step(row), next_step)
        started: list[float] = []
        pre_interaction, record_transition = agent.pre_interaction, agent.record_transition

        def timed_pre_interaction(*, timestep: int, timesteps: int) -> None:
            if timestep == warmup:
                count.restart()
                started.append(time.perf_counter())
            pre_interaction(timestep=timestep, timesteps=timesteps)

        def counted_record_transition(**kwargs: Any) -> None:
            count.add(kwargs["terminated"].cpu(), kwargs["truncated"].cpu())
            record_transition(**kwargs)

        agent.pre_interaction, agent.record_transition = timed_pre_interaction, counted_record_transition
        trainer.train()
        seconds = time.perf_counter() - started[0]
        return {"seconds": seconds, "env_steps": count.steps, "vectorization": type(venv.unwrapped).__name__}
    finally:
        venv.close()


def run_rllib(row: str, cfg: Config) -> dict[str, Any]:
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner

    if row == "stock":
        env, env_config, mode = (lambda _: stock_env(cfg)), {}, "sync"  # RLlib's default: SyncVectorEnv of single envs
    else:
        from fastenv.integrations.rllib import env_creator

        env, env_config, mode = env_creator(ENV_ID), cfg.fastenv_options(row), "vector_entry_point"  # NEXT_STEP, as RLlib reads
    config = (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=cfg.num_envs, gym_env_vectorize_mode=mode)
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=list(HIDDEN), fcnet_activation="tanh"))
        .debugging(seed=cfg.seed)
    )
    runner = SingleAgentEnvRunner(config=config)  # the local env runner an algorithm with 0 remote ones samples with
    try:
        runner.sample(num_timesteps=cfg.warmup_steps(row) * cfg.num_envs)

        def collect() -> int:
            # Both rows' vector envs autoreset on the next step (NEXT_STEP); the runner counts a timestep
            # only where an env stepped, not where a call only reset it, and samples until it has enough
            episodes = runner.sample(num_timesteps=cfg.collector_steps(row) * cfg.num_envs)
            return sum(e.env_steps() for e in episodes) * cfg.per_step(row)

        seconds, steps = _timed(collect)
        return {"seconds": seconds, "env_steps": steps, "vectorization": type(runner.env.unwrapped).__name__}
    finally:
        runner.stop()


def _register_rl_games_stock(cfg: Config) -> None:
    """The stock env as an rl_games env on its ``RayVecEnv``, in the old Gym API rl_games' own gym
    envs get; also run in each Ray worker, where ``RayWorker`` looks its env up by name."""
    sys.path.insert(0, str(HERE))  # the worker finds bench_training where this process does
    from rl_games.common import env_configurations
    from rl_games.common.gym_compat import wrap_gymnasium_env

    env_configurations.register(STOCK_ID, {"vecenv_type": "RAY", "env_creator": lambda **_: wrap_gymnasium_env(stock_env(cfg))})


def run_rl_games(row: str, cfg: Config) -> dict[str, Any]:
    from rl_games.torch_runner import Runner

    if row == "stock":
        import ray

        def register_stock() -> None:  # a function, not a partial: Ray names the hook by its __name__
            _register_rl_games_stock(cfg)

        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        register_stock()
        # what RayVecEnv's own ray.init gives (1 GB object store), and the stock env registered in its workers
        ray.init(object_store_memory=1000 * 1024 * 1024, include_dashboard=False, log_to_driver=False,
                 runtime_env={"worker_process_setup_hook": register_stock})
        name = STOCK_ID
    else:
        from fastenv.integrations.rl_games import register

        name = "fastenv-libero"
        register(name, ENV_ID, **cfg.fastenv_options(row))
    n = cfg.collector_steps(row)
    params = {  # rl_games' continuous PPO in the shape of its yaml examples, the network 64-64 tanh
        "seed": cfg.seed, "torch_threads": 1,
        "algo": {"name": "a2c_continuous"},
        "model": {"name": "continuous_a2c_logstd"},
        "network": {
            "name": "actor_critic", "separate": False,
            "space": {"continuous": {"mu_activation": "None", "sigma_activation": "None", "mu_init": {"name": "default"},
                                     "sigma_init": {"name": "const_initializer", "val": 0.0}, "fixed_sigma": True}},
            "mlp": {"units": list(HIDDEN), "activation": "tanh", "initializer": {"name": "default"}},
        },
        "config": {
            "name": "bench", "env_name": name, "device": "cpu", "ppo_device": "cpu", "torch_compile": False,
            "num_actors": cfg.num_envs, "horizon_length": n, "minibatch_size": n * cfg.num_envs, "mini_epochs": 1,
            "reward_shaper": {"scale_value": 1.0}, "normalize_input": False, "normalize_value": False, "normalize_advantage": True,
            "value_bootstrap": True, "gamma": 0.99, "tau": 0.95, "learning_rate": 3e-4, "lr_schedule": None, "kl_threshold": 0.008,
            "e_clip": 0.2, "clip_value": False, "critic_coef": 1.0, "entropy_coef": 0.0, "bounds_loss_coef": 0.0, "truncate_grads": False,
            "grad_norm": 1.0, "max_epochs": 1, "save_frequency": 0, "save_best_after": 10**9, "print_stats": False,
        },
    }
    train_dir = tempfile.TemporaryDirectory()  # where rl_games' agent writes its TensorBoard summaries
    params["config"]["train_dir"] = train_dir.name
    runner = Runner()
    runner.load({"params": params})
    agent = runner.algo_factory.create(runner.algo_name, base_name="bench", params=runner.params)
    try:
        agent.init_tensors()  # what its train() does before its first epoch
        agent.obs = agent.env_reset()
        agent.horizon_length = cfg.warmup_steps(row)  # a short warm-up into the start of the buffer
        agent.play_steps()
        agent.horizon_length = n

        def collect() -> int:  # its played frames: horizon_length steps of every env (the batch size it was built with)
            return agent.play_steps()["played_frames"] * cfg.per_step(row)

        seconds, steps = _timed(collect)
        return {"seconds": seconds, "env_steps": steps, "vectorization": type(agent.vec_env).__name__}
    finally:
        agent.vec_env.close()
        agent.writer.close()
        train_dir.cleanup()


@dataclasses.dataclass(frozen=True)
class Library:
    """One library's rows: how to run them, the module that must import, and each side's vector env
    (``stock``: the library's default over the stock env; ``fastenv``: fastenv's, on both fastenv rows)."""

    name: str
    module: str
    run: Callable[[str, Config], dict[str, Any]]
    sides: dict[str, str]


LIBRARIES = {
    "sb3": Library("Stable-Baselines3", "stable_baselines3", run_sb3, {
        "stock": "stable_baselines3 make_vec_env -> DummyVecEnv, PPO.collect_rollouts",
        "fastenv": "fastenv.integrations.sb3.make_vec (SB3VecEnv), PPO.collect_rollouts",
    }),
    "torchrl": Library("TorchRL", "torchrl", run_torchrl, {
        "stock": "SerialEnv over GymWrapper (the PPO tutorial's GymEnv, N of them), Collector",
        "fastenv": "fastenv.integrations.torchrl.make_vec (TorchRL's GymWrapper), Collector",
    }),
    "tianshou": Library("Tianshou", "tianshou", run_tianshou, {
        "stock": "SubprocVectorEnv(share_memory=True, context='spawn') (its MuJoCo examples' SUBPROC_SHARED_MEM), Collector",
        "fastenv": "fastenv.integrations.tianshou.make_vec, Collector",
    }),
    "pufferlib": Library("PufferLib", "pufferlib", run_pufferlib, {
        "stock": "pufferlib.vector.make(backend=Multiprocessing) over GymnasiumPufferEnv, a step loop",
        "fastenv": "fastenv.integrations.pufferlib.make_vec (PufferLibVecEnv), the same step loop",
    }),
    "skrl": Library("skrl", "skrl", run_skrl, {
        "stock": "wrap_env over gym.make_vec(vectorization_mode='sync') -> SyncVectorEnv (its PPO examples'), SequentialTrainer",
        "fastenv": "wrap_env over gym.make_vec('fastenv/Libero-v0'), fastenv.integrations.skrl.PPO, SequentialTrainer",
    }),
    "sbx": Library("SBX", "sbx", run_sbx, {
        "stock": "stable_baselines3 make_vec_env -> DummyVecEnv, sbx PPO.collect_rollouts",
        "fastenv": "fastenv.integrations.sb3.make_vec (SB3VecEnv), sbx PPO.collect_rollouts",
    }),
    "rllib": Library("RLlib", "ray.rllib", run_rllib, {
        "stock": "SingleAgentEnvRunner, gym_env_vectorize_mode='sync' (its default) -> SyncVectorEnv, sample()",
        "fastenv": "SingleAgentEnvRunner, gym_env_vectorize_mode='vector_entry_point' -> fastenv's vector env, sample()",
    }),
    "rl_games": Library("rl_games", "rl_games", run_rl_games, {
        "stock": "RayVecEnv (vecenv_type RAY, its default for Gym envs: one Ray actor per env), play_steps",
        "fastenv": "fastenv.integrations.rl_games.register (RlGamesVecEnv), play_steps",
    }),
}


# What each fastenv row's ratio compares, by its JSON key (the median over rounds of each round's ratio)
RATIOS = {
    "x_stock_same_data": "fastenv-1 / stock: the same data (one action per policy call on both), so fastenv's vectorization "
                         "and fast paths alone",
    "x_stock_chunks": "fastenv-{k} / stock: chunks of {k} actions per policy call against one, so also {k} times fewer policy calls "
                      "(other data than the stock row's)",
    "x_fastenv_1": "fastenv-{k} / fastenv-1: what the chunk adds on fastenv",
}

# Versions recorded beside the libraries', by import name (the distribution may be named otherwise)
OTHER_MODULES = ("fastenv", "tensordict", "jax", "jaxlib", "torch", "gymnasium", "numpy", "mujoco", "robosuite", "libero")


def versions(modules: list[str]) -> dict[str, dict[str, str] | None]:
    """The distribution that provides each import name, and its version (None: none is installed)."""
    from importlib.metadata import packages_distributions, version

    provided = packages_distributions()
    out: dict[str, dict[str, str] | None] = {}
    for module in dict.fromkeys(modules):
        names = list(dict.fromkeys(provided.get(module, [])))  # an editable install lists its distribution twice
        out[module] = {"distribution": names[0], "version": version(names[0])} if names else None
    return out


def run_row(library: str, row: str, cfg: Config) -> dict[str, Any]:
    """One row in this process: its seconds and simulator steps, or why it did not run."""
    from fastenv.backends._gl import configure_mujoco_gl

    configure_mujoco_gl()  # before any library's import loads MuJoCo (TorchRL's does)
    lib = LIBRARIES[library]
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")  # one thread for SBX's JAX too
    try:
        __import__(lib.module)
    except Exception as error:  # not installed, or broken on import: either way the row cannot run
        return {"status": "not installed", "reason": no_paths(f"import {lib.module}: {type(error).__name__}: {error}")}
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    try:
        out = lib.run(row, cfg)
    except Exception as error:
        lines = traceback.format_exception(error)
        return {"status": "failed", "reason": no_paths(f"{type(error).__name__}: {error}"), "traceback": [no_paths(x) for x in lines[-6:]]}
    return {"status": "ran", **out, "env_steps_per_s": out["env_steps"] / out["seconds"]}


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """``FASTENV_BENCH_LOCK``'s exclusive lock while a row runs (nothing when unset)."""
    path = os.environ.get("FASTENV_BENCH_LOCK")
    if not path:
        yield
        return
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _row_in_child(library: str, row: str, cfg: Config) -> dict[str, Any]:
    """``run_row`` in a fresh Python process (each row starts from nothing: no GL context, no warm caches)."""
    command = [sys.executable, __file__, "--row", f"{library}:{row}", "--config", json.dumps(dataclasses.asdict(cfg))]
    with _machine_lock():
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    line = next((x for x in done.stdout.splitlines() if x.startswith("ROW ")), None)
    if line is None:
        return {"status": "failed", "reason": f"the row's process exited with {done.returncode}", "stderr": no_paths(done.stderr[-3000:])}
    return json.loads(line[4:])


def _round_ratio(rates: list[float], base: list[float]) -> float | None:
    """The median over rounds of each round's ratio; None unless both rows ran in every round."""
    if not rates or len(rates) != len(base):
        return None
    return statistics.median(a / b for a, b in zip(rates, base))


def summarize(library: str, samples: dict[str, list[dict[str, Any]]], cfg: Config) -> list[dict[str, Any]]:
    """A library's rows: medians and spreads over rounds, and each fastenv row's ratios (``RATIOS``)."""
    lib = LIBRARIES[library]
    stock_row, same_row, chunk_row = cfg.rows()
    rates: dict[str, list[float]] = {}
    for name in cfg.rows():
        runs = samples.get(name, [])
        rates[name] = [s["env_steps_per_s"] for s in runs] if runs and all(s["status"] == "ran" for s in runs) else []
    absent = [s for runs in samples.values() for s in runs if s["status"] == "not installed"][:1]
    rows = []
    for name in cfg.rows():
        runs = samples.get(name) or absent  # a library that does not import: every row says why
        row: dict[str, Any] = {"library": library, "name": lib.name, "row": name, "side": side(name), "chunk": cfg.per_step(name),
                               "what": lib.sides[side(name)], "rounds": runs}
        if not rates[name]:
            bad = next((s for s in runs if s["status"] != "ran"), {"status": "not run", "reason": "no round ran"})
            row.update(status=bad["status"], reason=bad["reason"])
        else:
            ran = rates[name]
            row.update(status="ran", env_steps_per_s=statistics.median(ran), spread=[min(ran), max(ran)],
                       env_steps=runs[0]["env_steps"], vectorization=runs[0]["vectorization"])
            ratios = {
                same_row: {"x_stock_same_data": _round_ratio(ran, rates[stock_row])},
                chunk_row: {"x_stock_chunks": _round_ratio(ran, rates[stock_row]), "x_fastenv_1": _round_ratio(ran, rates[same_row])},
            }.get(name, {})
            row.update({key: value for key, value in ratios.items() if value is not None})
        rows.append(row)
    return rows


def docs_table(payload: dict[str, Any]) -> str:
    """The docs' table of a run: a line per row, each fastenv row's ratio to the stock row in its column."""
    if any("row" not in r for r in payload["rows"]):
        raise ValueError("expected a run with a library's stock, fastenv-1 and fastenv-K rows (each with its 'row'); "
                         "this JSON has the two rows of an earlier version (stock, fastenv): run the benchmark again")
    chunk = next((r["chunk"] for r in payload["rows"] if r["row"] not in ("stock", "fastenv-1")), Config.chunk)
    header = ("| library | row | vectorization | actions per policy call | env-steps/s (median) | spread | x stock at the same data "
              f"| x stock with chunks of {chunk} |")
    lines = [header, "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in payload["rows"]:
        head = f"| {r['name']} | {r['row']} | {r['what']} | {r['chunk']} |"
        if r["status"] != "ran":
            lines.append(f"{head} {r['status']}: {r['reason']} | | | |")
            continue
        same, chunked = (f"**{r[key]:.1f}x**" if key in r else "" for key in ("x_stock_same_data", "x_stock_chunks"))
        lines.append(f"{head} {r['env_steps_per_s']:.1f} | {r['spread'][0]:.1f}-{r['spread'][1]:.1f} | {same} | {chunked} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--libraries", default=",".join(LIBRARIES), help=f"comma-separated, of {list(LIBRARIES)}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num-envs", type=int, default=Config.num_envs)
    p.add_argument("--steps", type=int, default=Config.steps, help="simulator steps timed per row, all envs together")
    p.add_argument("--camera-size", type=int, default=Config.camera_size)
    p.add_argument("--chunk", type=int, default=Config.chunk, help="the chunked fastenv row's actions per policy call")
    p.add_argument("--max-episode-steps", type=int, default=Config.max_episode_steps, help="simulator steps; a multiple of --chunk")
    p.add_argument("--num-workers", type=int, default=None, help="fastenv's workers (default: the layout fastenv picks)")
    p.add_argument("--suite", default=Config.suite)
    p.add_argument("--task-id", type=int, default=Config.task_id)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--quick", action="store_true", help="tiny sizes where not given: camera 32, 64 steps, 1 round, 16-step episodes")
    p.add_argument("--out", default="results/bench_rl_libraries.json")
    p.add_argument("--table", default=None, help="print the docs table of this JSON, and exit")
    p.add_argument("--row", help=argparse.SUPPRESS)  # LIBRARY:ROW, run in this process
    p.add_argument("--config", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:  # the tiny sizes, where not given
        p.set_defaults(camera_size=32, steps=64, rounds=1, max_episode_steps=16)
        args = p.parse_args(argv)
    if args.table:
        return print_docs_table(args.table, docs_table)
    if args.row:
        library, row = args.row.split(":")
        print("ROW " + json.dumps(run_row(library, row, Config(**json.loads(args.config)))), flush=True)
        return {}
    libraries = [x.strip() for x in args.libraries.split(",") if x.strip()]
    unknown = sorted(set(libraries) - set(LIBRARIES))
    if unknown or not libraries:
        p.error(f"unknown libraries {unknown or args.libraries!r}; expected some of {list(LIBRARIES)}")
    for name in ("rounds", "num_envs", "steps", "camera_size", "max_episode_steps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    cfg = Config(args.suite, args.task_id, args.num_envs, args.chunk, args.camera_size, args.steps, args.max_episode_steps, args.num_workers, args.seed)
    problems = cfg.problems()
    if problems:
        p.error("; ".join(problems))
    os.environ.setdefault("FASTENV_COMPILE", "inline")  # the compiled control loop from the first step: building it is not timed
    started = time.perf_counter()
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {lib: {row: [] for row in cfg.rows()} for lib in libraries}
    missing: set[str] = set()
    for r in range(args.rounds):
        for lib in libraries:  # interleaved: every row once per round
            for row in cfg.rows():
                if lib in missing:
                    continue
                out = _row_in_child(lib, row, cfg)
                samples[lib][row].append(out)
                if out["status"] == "not installed":
                    missing.add(lib)
                said = f"{out['env_steps_per_s']:.1f} env-steps/s" if out["status"] == "ran" else f"{out['status']}: {out['reason']}"
                print(f"round {r + 1}/{args.rounds} {lib} {row}: {said}", flush=True)
    rows = [row for lib in libraries for row in summarize(lib, samples[lib], cfg)]
    print_table(
        [{**r, "rate": r.get("env_steps_per_s"), "lo": (r.get("spread") or [None])[0], "hi": (r.get("spread") or [None, None])[1]} for r in rows],
        [("name", "library", ""), ("row", "row", ""), ("status", "status", ""), ("rate", "env-steps/s", ".1f"), ("lo", "min", ".1f"),
         ("hi", "max", ".1f"), ("x_stock_same_data", "x stock at the same data", ".2f"),
         ("x_stock_chunks", f"x stock with chunks of {cfg.chunk}", ".2f")],
    )
    payload = {
        "benchmark": "bench_rl_libraries",
        "command": "python benchmarks/bench_rl_libraries.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": {**dataclasses.asdict(cfg), "rounds": args.rounds, "rows": list(cfg.rows()), "modalities": list(MODALITIES),
                   "policy_hidden": list(HIDDEN), "torch_threads": 1, "libraries": libraries},
        "ratios": {key: text.format(k=cfg.chunk) for key, text in RATIOS.items()},
        "machine": machine(),
        "versions": versions([LIBRARIES[lib].module.split(".")[0] for lib in libraries] + list(OTHER_MODULES)),
        "seconds": time.perf_counter() - started,
        "rows": rows,
    }
    print(f"wrote {write_json(args.out, payload)}")
    if any(r["status"] == "failed" for r in rows):
        sys.exit(1)
    return payload


if __name__ == "__main__":
    main()
