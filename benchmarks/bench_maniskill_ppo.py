"""The PPO-shaped part of bench_maniskill.py: ManiSkill's PPO baseline's loop on the CPU, stock vs fastenv.

Each PPO iteration: a rollout of ``--ppo-steps`` steps per env (the policy and value on every
observation, actions sampled, transitions stored in torch buffers), GAE, and one update epoch of 4
minibatches, as ManiSkill's ``ppo.py`` (state: its MLP) and ``ppo_rgb.py`` (rgb: a small CNN
beside the state) do, with partial resets (its training default). Stacks:

- ManiSkill's vector env over its one CPU env (``ManiSkillVectorEnv(gym.make(..., num_envs=1,
  sim_backend="physx_cpu"))``, what ``ppo.py`` runs on a CPU machine): one env;
- Gymnasium's ``AsyncVectorEnv`` over ManiSkill's ``CPUGymWrapper`` envs (ManiSkill's CPU
  vectorization), one process per env;
- fastenv's drop-in for ``ppo.py`` (``fastenv.integrations.maniskill.make_vec``, one action per
  step; state);
- fastenv's drop-in for ``ppo_rgb.py`` (rgb: ``make`` with ManiSkill's obs mode, fastenv's
  ``FlattenRGBDObservationWrapper`` and ``ManiSkillVectorEnv``, what the patched script runs: the
  observation ManiSkill's stock path gives), one action per step and chunks of 8 actions per
  observation through the same wrappers;
- fastenv's vector env, one action per step, and chunks of 8 actions per observation (the policy
  outputs 8 actions; physics, reward and termination still every step, the camera once per chunk).

All stacks run the same number of env steps per iteration (the one-env stack its steps in a row).
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

TASK = "PushCube-v1"
CHUNK = 8


def _torch():
    import torch

    return torch


def _policy(state_dim: int, act_dim: int, chunk: int, image: bool) -> Any:
    """ManiSkill's PPO agent's shape: 3x256 tanh MLPs on the state; with an image, a small CNN first."""
    torch = _torch()
    nn = torch.nn

    class Policy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = (
                nn.Sequential(
                    nn.Conv2d(3, 16, 8, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(),
                    nn.Conv2d(32, 32, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(512, 256), nn.ReLU(),
                )
                if image
                else None
            )
            width = state_dim + (256 if image else 0)

            def mlp(out: int) -> Any:
                return nn.Sequential(nn.Linear(width, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, out))

            self.actor, self.critic = mlp(act_dim * chunk), mlp(1)
            self.logstd = nn.Parameter(torch.full((act_dim * chunk,), -0.5))

        def features(self, obs: dict[str, Any]) -> Any:
            x = obs["state"].float()
            if self.encoder is not None:
                x = torch.cat([self.encoder(obs["rgb"].permute(0, 3, 1, 2).float() / 255.0), x], dim=1)
            return x

        def act(self, obs: dict[str, Any]) -> tuple[Any, Any, Any]:
            x = self.features(obs)
            dist = torch.distributions.Normal(self.actor(x), self.logstd.exp())
            action = dist.sample()
            return action, dist.log_prob(action).sum(1), self.critic(x).flatten()

        def evaluate(self, obs: dict[str, Any], action: Any) -> tuple[Any, Any, Any]:
            x = self.features(obs)
            dist = torch.distributions.Normal(self.actor(x), self.logstd.exp())
            return dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x).flatten()

    return Policy()


# -- the stacks: reset() -> obs {"state"[, "rgb"]} as torch; step(actions (N, chunk, A)) -> obs, reward, done ----
def _camera(image: bool, size: int) -> dict[str, Any]:
    """ManiSkill's env arguments for the camera side (none without an image)."""
    return {"sensor_configs": dict(width=size, height=size)} if image else {}


class ManiSkillOneEnv:
    """ManiSkill's vector env over its one CPU env (rgb: its FlattenRGBDObservationWrapper, as ppo_rgb.py)."""

    chunk = 1

    def __init__(self, image: bool, size: int) -> None:
        from fastenv.backends.maniskill import configure_vulkan

        configure_vulkan()
        import mani_skill.envs  # noqa: F401
        from mani_skill.utils.wrappers.flatten import FlattenRGBDObservationWrapper
        from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

        env = gym.make(TASK, num_envs=1, obs_mode="rgb" if image else "state", sim_backend="physx_cpu", **_camera(image, size))
        if image:
            env = FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=True)
        self.env = ManiSkillVectorEnv(env, 1, ignore_terminations=False, record_metrics=True)
        self.num_envs, self.image = 1, image

    def _obs(self, obs: Any) -> dict[str, Any]:
        return {"state": obs["state"], "rgb": obs["rgb"]} if self.image else {"state": obs}

    def reset(self, seed: int) -> dict[str, Any]:
        return self._obs(self.env.reset(seed=seed)[0])

    def step(self, actions: Any) -> tuple[dict[str, Any], Any, Any]:
        obs, reward, term, trunc, _ = self.env.step(actions[:, 0])
        return self._obs(obs), reward.float(), (term | trunc).float()

    def close(self) -> None:
        self.env.close()


def _cpu_gym_env(image: bool, size: int) -> gym.Env:
    from fastenv.backends.maniskill import configure_vulkan

    configure_vulkan()
    import mani_skill.envs  # noqa: F401
    from mani_skill.utils.wrappers import CPUGymWrapper
    from mani_skill.utils.wrappers.flatten import FlattenRGBDObservationWrapper

    env = gym.make(TASK, num_envs=1, obs_mode="rgb" if image else "state", sim_backend="physx_cpu", **_camera(image, size))
    if image:
        env = FlattenRGBDObservationWrapper(env, rgb=True, depth=False, state=True)
    return CPUGymWrapper(env, record_metrics=True)


class NumpyVector:
    """A vector env with numpy observations ({"state"[, "rgb"]} or a state array), as torch."""

    def __init__(self, envs: Any, chunk: int, keys: dict[str, str]) -> None:
        self.env, self.chunk, self.keys, self.num_envs = envs, chunk, keys, envs.num_envs

    def _obs(self, obs: Any) -> dict[str, Any]:
        torch = _torch()
        if not isinstance(obs, dict):
            return {"state": torch.from_numpy(np.asarray(obs))}
        return {ours: torch.from_numpy(np.asarray(obs[theirs])) for ours, theirs in self.keys.items()}

    def reset(self, seed: int) -> dict[str, Any]:
        return self._obs(self.env.reset(seed=seed)[0])

    def step(self, actions: Any) -> tuple[dict[str, Any], Any, Any]:
        torch = _torch()
        a = actions if len(self.env.single_action_space.shape) == 2 else actions[:, 0]  # fastenv's chunk-1 actions are (N, 1, A)
        obs, reward, term, trunc, _ = self.env.step(a.numpy())
        return self._obs(obs), torch.as_tensor(np.asarray(reward), dtype=torch.float32), torch.as_tensor(np.asarray(term) | np.asarray(trunc), dtype=torch.float32)

    def close(self) -> None:
        self.env.close()


class DropIn:
    """fastenv's drop-in for ppo.py (ManiSkill's conventions, torch in and out)."""

    chunk = 1

    def __init__(self, num_envs: int, workers: int) -> None:
        from fastenv.integrations.maniskill import make_vec

        self.env = make_vec(TASK, num_envs, ignore_terminations=False, record_metrics=True, num_workers=workers, device="cpu")
        self.num_envs = num_envs

    def reset(self, seed: int) -> dict[str, Any]:
        return {"state": self.env.reset(seed=seed)[0]}

    def step(self, actions: Any) -> tuple[dict[str, Any], Any, Any]:
        obs, reward, term, trunc, _ = self.env.step(actions[:, 0])
        return {"state": obs}, reward.float(), (term | trunc).float()

    def close(self) -> None:
        self.env.close()


class DropInRGB:
    """fastenv's drop-in for ppo_rgb.py: ManiSkill's rgb obs mode, FlattenRGBDObservationWrapper and
    ManiSkillVectorEnv from fastenv (torch in and out), one action per step or chunks."""

    def __init__(self, num_envs: int, workers: int, chunk: int, size: int) -> None:
        from fastenv.integrations.maniskill import FlattenRGBDObservationWrapper, ManiSkillVectorEnv, make

        options = dict(obs_mode="rgb", num_workers=workers, camera_size=size)
        # make() sends one action per step, as the script; chunks come from the vector env it builds on
        envs = make(TASK, num_envs, **options) if chunk == 1 else gym.make_vec(
            "fastenv/ManiSkill-v0", num_envs=num_envs, env_id=TASK, chunk=chunk, modalities=None, **options
        )
        envs = FlattenRGBDObservationWrapper(envs, rgb=True, depth=False, state=True)  # ppo_rgb.py's flags
        self.env = ManiSkillVectorEnv(envs, num_envs, ignore_terminations=False, record_metrics=True, device="cpu")
        self.num_envs, self.chunk = num_envs, chunk

    def reset(self, seed: int) -> dict[str, Any]:
        obs = self.env.reset(seed=seed)[0]
        return {"state": obs["state"], "rgb": obs["rgb"]}

    def step(self, actions: Any) -> tuple[dict[str, Any], Any, Any]:
        obs, reward, term, trunc, _ = self.env.step(actions[:, 0] if self.chunk == 1 else actions)
        return {"state": obs["state"], "rgb": obs["rgb"]}, reward.float(), (term | trunc).float()

    def close(self) -> None:
        self.env.close()


def build_stacks(image: bool, num_envs: int, workers: int, size: int = 128) -> dict[str, Any]:
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    import fastenv  # noqa: F401  (registers fastenv/ManiSkill-v0)

    stacks: dict[str, Any] = {"stock ManiSkillVectorEnv, 1 CPU env": ManiSkillOneEnv(image, size)}
    stock_keys = {"state": "state", "rgb": "rgb"} if image else {"state": "state"}
    stacks[f"stock AsyncVectorEnv, {num_envs} CPUGymWrapper envs"] = NumpyVector(
        AsyncVectorEnv([functools.partial(_cpu_gym_env, image, size)] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn"),
        1, stock_keys,
    )
    if not image:
        stacks[f"fastenv drop-in make_vec, {num_envs} envs"] = DropIn(num_envs, workers)
    else:
        for chunk in (1, CHUNK):
            name = f"fastenv drop-in + FlattenRGBDObservationWrapper, {num_envs} envs, chunk {chunk}" + (" (1 obs / 8 steps)" if chunk > 1 else "")
            stacks[name] = DropInRGB(num_envs, workers, chunk, size)
    keys = ["state", "base_camera_rgb"] if image else ["state"]
    ours_keys = {"state": "state", "rgb": "base_camera_rgb"} if image else {"state": "state"}
    for chunk in (1, CHUNK):
        envs = gym.make_vec(
            "fastenv/ManiSkill-v0", num_envs=num_envs, num_workers=workers, env_id=TASK, chunk=chunk, modalities=keys,
            camera_size=size if image else None,
        )
        stacks[f"fastenv, {num_envs} envs, chunk {chunk}" + (" (1 obs / 8 steps)" if chunk > 1 else "")] = NumpyVector(envs, chunk, ours_keys)
    return stacks


def ppo_iteration(stack: Any, policy: Any, optimizer: Any, obs: dict[str, Any], env_steps: int) -> tuple[dict[str, Any], float, float]:
    """One PPO iteration of ``env_steps`` env steps: (next obs, rollout seconds, total seconds)."""
    torch = _torch()
    n, chunk = stack.num_envs, stack.chunk
    calls = env_steps // (n * chunk)
    start = time.perf_counter()
    stored: dict[str, list[Any]] = {k: [] for k in ("obs", "actions", "logprobs", "values", "rewards", "dones")}
    with torch.no_grad():
        for _ in range(calls):
            action, logprob, value = policy.act(obs)
            stored["obs"].append(obs)
            stored["actions"].append(action)
            stored["logprobs"].append(logprob)
            stored["values"].append(value)
            obs, reward, done = stack.step(action.clamp(-1, 1).reshape(n, chunk, -1))
            stored["rewards"].append(reward)
            stored["dones"].append(done)
        next_value = policy.act(obs)[2]
    rollout = time.perf_counter() - start
    with torch.no_grad():  # GAE (gamma 0.8, lambda 0.9: ppo.py's)
        advantages, last = [], torch.zeros(n)
        for t in reversed(range(calls)):
            nxt = next_value if t == calls - 1 else stored["values"][t + 1]
            alive = 1.0 - stored["dones"][t]
            delta = stored["rewards"][t] + 0.8 * nxt * alive - stored["values"][t]
            last = delta + 0.8 * 0.9 * alive * last
            advantages.insert(0, last)
        adv = torch.cat(advantages)
        returns = adv + torch.cat(stored["values"])
        adv = (adv - adv.mean()) / (adv.std(correction=0) + 1e-8)
    b_obs = {k: torch.cat([o[k] for o in stored["obs"]]) for k in obs}
    b_actions, b_logprobs = torch.cat(stored["actions"]), torch.cat(stored["logprobs"])
    order = torch.randperm(len(adv))
    for mb in order.chunk(4):  # one epoch, 4 minibatches
        logprob, entropy, value = policy.evaluate({k: v[mb] for k, v in b_obs.items()}, b_actions[mb])
        ratio = (logprob - b_logprobs[mb]).exp()
        a = adv[mb]
        loss = torch.max(-a * ratio, -a * ratio.clamp(0.8, 1.2)).mean() + 0.5 * ((value - returns[mb]) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
        optimizer.step()
    return obs, rollout, time.perf_counter() - start


def bench_ppo(args: Any) -> list[dict[str, Any]]:
    """Every stack, interleaved over rounds: env-steps/s of the rollout and of whole iterations."""
    torch = _torch()
    torch.set_num_threads(1)  # the policy on one thread for every stack: the envs get the other core(s)
    env_steps = args.ppo_envs * args.ppo_steps
    rows: list[dict[str, Any]] = []
    for obs_kind in args.ppo_obs:
        image = obs_kind == "rgb"
        label = f"rgb {args.ppo_camera} px + state" if image else "state"
        print(f"\n== PPO-shaped, PushCube-v1, {label}: {env_steps} env steps per iteration ==", flush=True)
        stacks = build_stacks(image, args.ppo_envs, args.workers, args.ppo_camera)
        runs: dict[str, dict[str, Any]] = {}
        for i, (name, stack) in enumerate(stacks.items()):
            obs = stack.reset(seed=i)
            torch.manual_seed(0)
            state_dim = obs["state"].shape[-1]
            policy = _policy(state_dim, _action_dim(stack), stack.chunk, image)
            runs[name] = {"stack": stack, "policy": policy, "opt": torch.optim.Adam(policy.parameters(), lr=3e-4), "obs": obs, "rollout": [], "total": []}
            runs[name]["obs"] = ppo_iteration(stack, policy, runs[name]["opt"], obs, env_steps)[0]  # warm-up
        for r in range(args.rounds):
            for name, run in runs.items():
                run["obs"], rollout, total = ppo_iteration(run["stack"], run["policy"], run["opt"], run["obs"], env_steps)
                run["rollout"].append(env_steps / rollout)
                run["total"].append(env_steps / total)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {v['total'][-1]:.0f}" for n, v in runs.items()), flush=True)
        base = next(iter(runs))
        for name, run in runs.items():
            rows.append({
                "obs": label, "config": name,
                "rollout_env_steps_per_s": statistics.median(run["rollout"]), "env_steps_per_s": statistics.median(run["total"]),
                "x_stock_rollout": statistics.median([a / b for a, b in zip(run["rollout"], runs[base]["rollout"])]),
                "x_stock": statistics.median([a / b for a, b in zip(run["total"], runs[base]["total"])]),
                "samples_rollout": run["rollout"], "samples_total": run["total"],
            })
        for run in runs.values():
            run["stack"].close()
    from _common import print_table

    print()
    print_table(rows, [("obs", "PushCube-v1 (CPU)", "s"), ("config", "stack", "s"), ("rollout_env_steps_per_s", "rollout env-steps/s", ".0f"),
                       ("x_stock_rollout", "x stock", ".2f"), ("env_steps_per_s", "with update", ".0f"), ("x_stock", "x stock", ".2f")])
    return rows


def _action_dim(stack: Any) -> int:
    space = stack.env.single_action_space
    return int(space.shape[-1])
