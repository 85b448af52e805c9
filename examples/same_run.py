"""The same PPO run over two rollout stacks, bit for bit: stock and fastenv side by side.

A CleanRL-style PPO (``ppo_continuous_action.py``'s update; ManiSkill's PPO hyper-parameters for
PushCube) whose data cannot depend on how the envs are batched:

- each env has its own noise stream (a ``torch.Generator`` seeded from the run's seed and the env's
  index), so an env's actions do not depend on which other envs the policy served with it;
- in a layout that batches dynamically or by pipeline stage, the policy is evaluated row by row
  (one env at a time), so float rounding does not depend on the batch either; with plain ``step``
  the whole batch goes through at once, in both stacks;
- each env's transitions are stored at its own step index, whatever order they arrive in.

So a stack that gives every env the same transitions gives the same rollout buffer, the same
losses and the same parameters after every update. ``Runner.record`` hashes them per update;
``benchmarks/bench_training.py`` compares the two stacks update by update.

Run as a script, this trains ManiSkill's PushCube-v1 (state, dense reward, CPU simulation) with
two identical agents, one on ManiSkill's own CPU vector path (Gymnasium's AsyncVectorEnv over
``CPUGymWrapper``, as ManiSkill documents) and one on fastenv's vector env, interleaving their
updates, checks after every update that both runs are still identical, evaluates the
deterministic policy every 10 updates (32 episodes, not timed), and plots the success rates
against env steps and against each stack's own wall-clock time:

    python examples/same_run.py                  # 250k env steps per stack (about 15 min on 2 cores)
    python examples/same_run.py --total-steps 8000 --out smoke   # a short smoke run
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn


@dataclass
class PPOConfig:
    """PPO's hyper-parameters (ManiSkill's ``ppo.py`` defaults for PushCube, sized for a CPU)."""

    num_envs: int = 16
    num_steps: int = 50  # transitions (chunks) per env per update
    gamma: float = 0.8
    gae_lambda: float = 0.9
    learning_rate: float = 3e-4
    update_epochs: int = 4
    num_minibatches: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.1
    anneal_updates: int | None = None  # CleanRL's anneal_lr: the learning rate falls linearly to 0 over this many updates
    seed: int = 1


# -- the policy ----------------------------------------------------------------------------------
def _layer(i: int, o: int, std: float = float(np.sqrt(2))) -> nn.Linear:
    layer = nn.Linear(i, o)
    nn.init.orthogonal_(layer.weight, std)
    nn.init.constant_(layer.bias, 0.0)
    return layer


class StateAgent(nn.Module):
    """ManiSkill's PPO agent for state observations: actor and critic MLPs (256 x 3, tanh)."""

    def __init__(self, obs_dim: int, act_dim: int) -> None:
        super().__init__()
        self.critic = nn.Sequential(_layer(obs_dim, 256), nn.Tanh(), _layer(256, 256), nn.Tanh(), _layer(256, 256), nn.Tanh(), _layer(256, 1, 1.0))
        self.actor = nn.Sequential(
            _layer(obs_dim, 256), nn.Tanh(), _layer(256, 256), nn.Tanh(), _layer(256, 256), nn.Tanh(), _layer(256, act_dim, 0.01 * np.sqrt(2))
        )
        self.log_std = nn.Parameter(torch.full((act_dim,), -0.5))

    def heads(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(action mean (B, A), value (B,))."""
        x = obs["state"]
        return self.actor(x), self.critic(x).squeeze(-1)


class ImageAgent(nn.Module):
    """fastenv's ``ChunkPolicy`` (a CNN over the camera, an MLP over proprioception) as a flat-action agent."""

    def __init__(self, image_key: str, image_shape: tuple[int, int, int], state_key: str, state_dim: int, chunk: int, action_dim: int) -> None:
        super().__init__()
        from fastenv.bench.policies import ChunkPolicy

        self.image_key, self.state_key = image_key, state_key
        self.net = ChunkPolicy(image_shape, state_dim, chunk, action_dim)
        self.log_std = self.net.log_std

    def heads(self, obs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        mean, value = self.net(obs[self.image_key], obs[self.state_key])
        return mean.flatten(1), value


# -- a rollout stack -----------------------------------------------------------------------------
@dataclass
class Stack:
    """A vector env and how to read it.

    Args:
        name: for tables ("stock", "fastenv").
        envs: a Gymnasium vector env with same-step autoreset.
        keys: the observation keys the policy reads (``obs_fn`` returns exactly these).
        obs_fn: the vector env's observations (or the rows of a batch) as ``{key: array}``.
        action_shape: one env's action as the env takes it (the agent's flat action is reshaped).
        low, high: the action space's bounds (actions are clipped to them, as CleanRL's ClipAction).
        mode: "step" (``envs.step``), "pipeline" (``send``/``recv`` per stage) or "dynamic"
            (``send(env_ids=)``/``recv()`` with the layout's batching).
    """

    name: str
    envs: Any
    keys: list[str]
    obs_fn: Callable[[Any], dict[str, np.ndarray]]
    action_shape: tuple[int, ...]
    low: np.ndarray
    high: np.ndarray
    mode: str = "step"
    reset_seed: int = 0

    def close(self) -> None:
        self.envs.close()


def _tree_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    return b"".join(k.encode() + np.ascontiguousarray(v).tobytes() for k, v in sorted(arrays.items()))


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return h.hexdigest()[:16]


class Runner:
    """One PPO run on one stack: collect a rollout, update, record what the update saw and did.

    Two runners built with the same agent constructor and config on stacks that give each env the
    same transitions produce identical records (``record``), update after update.
    """

    def __init__(self, stack: Stack, make_agent: Callable[[], nn.Module], cfg: PPOConfig, rowwise: bool) -> None:
        self.stack, self.cfg, self.rowwise = stack, cfg, rowwise
        torch.manual_seed(cfg.seed)
        self.agent = make_agent()
        self.optimizer = torch.optim.Adam(self.agent.parameters(), lr=cfg.learning_rate, eps=1e-5)
        n = cfg.num_envs
        self.noise = [torch.Generator().manual_seed(cfg.seed * 100_003 + i) for i in range(n)]
        self.shuffle = torch.Generator().manual_seed(cfg.seed)
        self.act_dim = int(np.prod(stack.action_shape))
        obs, _ = stack.envs.reset(seed=stack.reset_seed)
        self.next_obs = {k: np.array(v) for k, v in stack.obs_fn(obs).items()}
        self.next_done = np.zeros(n, dtype=bool)
        self.env_steps = 0  # transitions (chunks) collected
        self.episodes: list[tuple[int, bool]] = []  # (env steps at its end, terminated) per episode
        self.seconds = 0.0
        self.updates = 0

    # -- acting ---------------------------------------------------------------------------------
    @torch.no_grad()
    def _policy(self, obs: dict[str, np.ndarray], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(actions, log-probs, values) for the rows ``obs`` of envs ``ids``."""
        tensors = {k: torch.as_tensor(v) for k, v in obs.items()}
        if self.rowwise:
            outs = [self.agent.heads({k: v[j : j + 1] for k, v in tensors.items()}) for j in range(len(ids))]
            mean = torch.cat([m for m, _ in outs])
            value = torch.cat([v for _, v in outs])
        else:
            mean, value = self.agent.heads(tensors)
        std = self.agent.log_std.exp().expand_as(mean)
        noise = torch.stack([torch.randn(self.act_dim, generator=self.noise[i]) for i in ids])
        action = mean + std * noise
        logprob = torch.distributions.Normal(mean, std).log_prob(action).sum(1)
        return action.numpy(), logprob.numpy(), value.numpy()

    def _act(self, ids: np.ndarray, obs: dict[str, np.ndarray], t: np.ndarray, buf: dict[str, Any]) -> np.ndarray:
        action, logprob, value = self._policy(obs, ids)
        for k in self.stack.keys:
            buf["obs"][k][t[ids], ids] = obs[k]
        buf["dones"][t[ids], ids] = self.next_done[ids]
        buf["actions"][t[ids], ids] = action
        buf["logprobs"][t[ids], ids] = logprob
        buf["values"][t[ids], ids] = value
        env_action = np.clip(action.reshape(len(ids), *self.stack.action_shape), self.stack.low, self.stack.high)
        return env_action.astype(np.float32)

    def _receive(self, ids: np.ndarray, obs: Any, reward: Any, terminated: Any, truncated: Any, t: np.ndarray, buf: dict[str, Any]) -> None:
        rows = self.stack.obs_fn(obs)
        reward, terminated, truncated = (np.asarray(x) for x in (reward, terminated, truncated))
        buf["rewards"][t[ids], ids] = reward
        buf["terminated"][t[ids], ids] = terminated
        for k in self.stack.keys:
            self.next_obs[k][ids] = rows[k]
        self.next_done[ids] = terminated | truncated
        t[ids] += 1
        self.env_steps += len(ids)
        for j in np.flatnonzero(terminated | truncated):
            self.episodes.append((self.env_steps, bool(terminated[j])))

    def collect(self) -> dict[str, Any]:
        """One rollout of ``num_steps`` transitions per env with the current policy."""
        cfg, stack = self.cfg, self.stack
        T, n = cfg.num_steps, cfg.num_envs
        buf: dict[str, Any] = {
            "obs": {k: np.zeros((T, n, *v.shape[1:]), v.dtype) for k, v in self.next_obs.items()},
            "actions": np.zeros((T, n, self.act_dim), np.float32),
            **{name: np.zeros((T, n), np.float32) for name in ("logprobs", "values", "rewards")},
            "dones": np.zeros((T, n), bool),
            "terminated": np.zeros((T, n), bool),
        }
        t = np.zeros(n, dtype=np.int64)
        envs, every = stack.envs, np.arange(n)
        if stack.mode == "step":
            for _ in range(T):
                actions = self._act(every, self.next_obs, t, buf)
                obs, reward, terminated, truncated, _ = envs.step(actions)
                self._receive(every, obs, reward, terminated, truncated, t, buf)
        elif stack.mode == "pipeline":
            stages = [np.asarray(envs.layout.stage_envs(k)) for k in range(envs.layout.stages)]
            for k, ids in enumerate(stages):
                envs.send(self._act(ids, self._rows(ids), t, buf), stage=k)
            for step in range(T):
                for k, ids in enumerate(stages):
                    obs, reward, terminated, truncated, _ = envs.recv(stage=k)
                    self._receive(ids, obs, reward, terminated, truncated, t, buf)
                    if step + 1 < T:
                        envs.send(self._act(ids, self._rows(ids), t, buf), stage=k)
        elif stack.mode == "dynamic":
            envs.send(self._act(every, self.next_obs, t, buf), env_ids=every)
            while len(envs.in_flight()):
                obs, reward, terminated, truncated, infos = envs.recv()
                ids = np.asarray(infos["env_ids"])
                self._receive(ids, obs, reward, terminated, truncated, t, buf)
                more = ids[t[ids] < T]
                if len(more):
                    envs.send(self._act(more, self._rows(more), t, buf), env_ids=more)
        else:
            raise ValueError(f"mode must be 'step', 'pipeline' or 'dynamic', got {stack.mode!r}")
        buf["next_obs"] = {k: v.copy() for k, v in self.next_obs.items()}
        buf["next_done"] = self.next_done.copy()
        return buf

    def _rows(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[ids] for k, v in self.next_obs.items()}

    # -- learning -------------------------------------------------------------------------------
    def update(self, buf: dict[str, Any]) -> dict[str, float]:
        """CleanRL's PPO update on the rollout: GAE, then clipped-surrogate epochs over minibatches."""
        cfg = self.cfg
        T, n = cfg.num_steps, cfg.num_envs
        if cfg.anneal_updates:
            self.optimizer.param_groups[0]["lr"] = cfg.learning_rate * (1.0 - self.updates / cfg.anneal_updates)
        with torch.no_grad():
            _, next_value = self.agent.heads({k: torch.as_tensor(v) for k, v in buf["next_obs"].items()})
            rewards, values = torch.as_tensor(buf["rewards"]), torch.as_tensor(buf["values"])
            dones = torch.as_tensor(buf["dones"]).float()
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(n)
            for s in reversed(range(T)):
                if s == T - 1:
                    nonterminal, nextvalues = 1.0 - torch.as_tensor(buf["next_done"]).float(), next_value
                else:
                    nonterminal, nextvalues = 1.0 - dones[s + 1], values[s + 1]
                delta = rewards[s] + cfg.gamma * nextvalues * nonterminal - values[s]
                last = delta + cfg.gamma * cfg.gae_lambda * nonterminal * last
                advantages[s] = last
            returns = advantages + values
        size = T * n
        b_obs = {k: torch.as_tensor(v).reshape(size, *v.shape[2:]) for k, v in buf["obs"].items()}
        b_actions = torch.as_tensor(buf["actions"]).reshape(size, -1)
        b_logprobs = torch.as_tensor(buf["logprobs"]).reshape(size)
        b_adv, b_returns = advantages.reshape(size), returns.reshape(size)
        mb = size // cfg.num_minibatches
        losses: dict[str, list[float]] = {"policy": [], "value": [], "entropy": [], "approx_kl": []}
        for _ in range(cfg.update_epochs):
            order = torch.randperm(size, generator=self.shuffle)
            for start in range(0, size, mb):
                idx = order[start : start + mb]
                mean, value = self.agent.heads({k: v[idx] for k, v in b_obs.items()})
                dist = torch.distributions.Normal(mean, self.agent.log_std.exp().expand_as(mean))
                newlogprob = dist.log_prob(b_actions[idx]).sum(1)
                entropy = dist.entropy().sum(1).mean()
                logratio = newlogprob - b_logprobs[idx]
                ratio = logratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1) - logratio).mean()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                v_loss = 0.5 * ((value - b_returns[idx]) ** 2).mean()
                loss = pg_loss - cfg.ent_coef * entropy + cfg.vf_coef * v_loss
                self.optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.agent.parameters(), cfg.max_grad_norm)
                self.optimizer.step()
                for name, x in (("policy", pg_loss), ("value", v_loss), ("entropy", entropy), ("approx_kl", approx_kl)):
                    losses[name].append(float(x.detach()))
            if cfg.target_kl is not None and float(approx_kl) > cfg.target_kl:
                break
        return {k: float(np.mean(v)) for k, v in losses.items()} | {"_all": losses}  # type: ignore[dict-item]

    def iterate(self) -> dict[str, Any]:
        """Collect and update once; returns this update's record (timings, digests, metrics)."""
        t0 = time.perf_counter()
        buf = self.collect()
        t1 = time.perf_counter()
        losses = self.update(buf)
        t2 = time.perf_counter()
        self.seconds += t2 - t0
        self.updates += 1
        return self.record(buf, losses, rollout_s=t1 - t0, update_s=t2 - t1)

    def record(self, buf: dict[str, Any], losses: dict[str, Any], **timing: float) -> dict[str, Any]:
        params = b"".join(p.detach().numpy().tobytes() for p in self.agent.parameters())
        all_losses = np.array([v for name in sorted(losses["_all"]) for v in losses["_all"][name]], dtype=np.float64)
        return {
            "update": self.updates,
            "env_steps": self.env_steps,
            "seconds": self.seconds,
            **timing,
            "digest": {
                "rewards": digest(buf["rewards"].tobytes()),
                "dones": digest(buf["dones"].tobytes(), buf["terminated"].tobytes(), buf["next_done"].tobytes()),
                "observations": digest(_tree_bytes(buf["obs"]), _tree_bytes(buf["next_obs"])),
                "actions": digest(buf["actions"].tobytes(), buf["logprobs"].tobytes(), buf["values"].tobytes()),
                "losses": digest(all_losses.tobytes()),
                "parameters": digest(params),
            },
            "losses": {k: v for k, v in losses.items() if not k.startswith("_")},
            "mean_reward": float(buf["rewards"].mean()),
            "episodes": len(self.episodes),
        }

    @torch.no_grad()
    def evaluate(self, stack: Stack, seed: int, episodes_per_env: int = 2) -> float:
        """Success rate of the deterministic policy (its mean action) on ``stack``'s envs, from a fixed seed.

        Each env counts its first ``episodes_per_env`` episodes; an episode succeeds if it
        terminated (PushCube ends an episode on success) before its time limit.
        """
        obs, _ = stack.envs.reset(seed=seed)
        rows = stack.obs_fn(obs)
        n = len(next(iter(rows.values())))
        counted, successes = np.zeros(n, np.int64), 0
        while (counted < episodes_per_env).any():
            mean, _ = self.agent.heads({k: torch.as_tensor(v) for k, v in rows.items()})
            action = np.clip(mean.numpy().reshape(n, *stack.action_shape), stack.low, stack.high).astype(np.float32)
            obs, _, terminated, truncated, _ = stack.envs.step(action)
            ended = (np.asarray(terminated) | np.asarray(truncated)) & (counted < episodes_per_env)
            successes += int((ended & np.asarray(terminated)).sum())
            counted += ended
            rows = stack.obs_fn(obs)
        return successes / (n * episodes_per_env)

    def success_rate(self, since_steps: int) -> tuple[float | None, int]:
        """Share of the episodes that ended after ``since_steps`` env steps which ended in success."""
        recent = [ok for steps, ok in self.episodes if steps > since_steps]
        return (float(np.mean(recent)) if recent else None), len(recent)


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, bool]:
    """Per part of an update record: are the two runs' bits equal?"""
    return {k: a["digest"][k] == b["digest"][k] for k in a["digest"]}


# -- PushCube: the two stacks --------------------------------------------------------------------
ENV_ID = "PushCube-v1"
# enhanced_determinism: ManiSkill draws unseeded resets from its seeded main RNG (by default from torch's
# global generator, which each process seeds at random: no two stock runs would be the same).
MANISKILL_KWARGS = {"obs_mode": "state", "reward_mode": "normalized_dense", "control_mode": "pd_ee_delta_pose", "enhanced_determinism": True}


def stock_pushcube_env() -> Any:
    """ManiSkill's own CPU env as ManiSkill documents it for CPU vectorization (runs in its process)."""
    import gymnasium as gym

    from fastenv.backends.maniskill import configure_vulkan

    configure_vulkan()
    import mani_skill.envs  # noqa: F401
    from mani_skill.utils.wrappers.gymnasium import CPUGymWrapper

    return CPUGymWrapper(gym.make(ENV_ID, sim_backend="physx_cpu", **MANISKILL_KWARGS))


def pushcube_stacks(num_envs: int, num_workers: int = 2) -> tuple[Stack, Stack]:
    """(ManiSkill's CPU vector path, fastenv's vector env) over PushCube-v1, state, chunk 1."""
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    from fastenv.envs.maniskill import make_vec

    stock_envs = AsyncVectorEnv([stock_pushcube_env] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    fast_envs = make_vec(num_envs, env_id=ENV_ID, modalities=("state",), chunk=None, num_workers=num_workers, **MANISKILL_KWARGS)
    space = stock_envs.single_action_space
    stock = Stack("stock", stock_envs, ["state"], lambda obs: {"state": np.asarray(obs, np.float32)}, space.shape, space.low, space.high)
    fast = Stack("fastenv", fast_envs, ["state"], lambda obs: {"state": np.asarray(obs["state"], np.float32)}, space.shape, space.low, space.high)
    return stock, fast


# -- the learning curve --------------------------------------------------------------------------
def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="PushCube-v1 with stock ManiSkill and fastenv side by side: the same run, and how soon.")
    p.add_argument("--total-steps", type=int, default=250_000, help="env steps per stack")
    p.add_argument("--anneal-lr", action="store_true", help="let the learning rate fall linearly to 0 over the run (CleanRL's option)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--eval-every", type=int, default=10, help="updates between evaluations of the deterministic policy")
    p.add_argument("--eval-envs", type=int, default=8, help="evaluation envs")
    p.add_argument("--eval-episodes", type=int, default=4, help="episodes per evaluation env")
    p.add_argument("--target", type=float, default=0.8, help="evaluation success rate at which the task counts as learned")
    p.add_argument("--window", type=int, default=4, help="updates the training episodes' success rate is averaged over")
    p.add_argument("--out", default="results")
    return p.parse_args()


def main() -> None:
    args = _args()
    torch.set_num_threads(1)  # the envs have the cores; one thread also keeps float sums in one order
    per_update = args.num_envs * PPOConfig.num_steps
    updates = max(1, args.total_steps // per_update)
    cfg = PPOConfig(num_envs=args.num_envs, seed=args.seed, anneal_updates=updates if args.anneal_lr else None)
    stock, fast = pushcube_stacks(cfg.num_envs, args.num_workers)
    evals = pushcube_stacks(args.eval_envs, args.num_workers)
    obs_dim, act_dim = stock.envs.single_observation_space.shape[0], int(np.prod(stock.action_shape))
    runners = [Runner(s, lambda: StateAgent(obs_dim, act_dim), cfg, rowwise=False) for s in (stock, fast)]
    rows: list[dict[str, Any]] = []
    learned: dict[str, Any] = {}
    last = updates
    try:
        u = 0
        while u < last:
            u += 1
            records = [r.iterate() for r in runners]  # interleaved: the machine's drift hits both alike
            same = compare(*records)
            window_start = max(0, (u - args.window)) * per_update
            rates = [r.success_rate(window_start) for r in runners]
            row = {
                "update": u,
                "env_steps": records[0]["env_steps"],
                "identical": all(same.values()),
                "differs": [k for k, ok in same.items() if not ok],
                **{f"{r.stack.name}_seconds": rec["seconds"] for r, rec in zip(runners, records)},
                **{f"{r.stack.name}_success_rate": rate for r, (rate, _) in zip(runners, rates)},
                "episodes_in_window": rates[0][1],
                "losses": records[0]["losses"],
            }
            if u % args.eval_every == 0 or u == last:
                scores = [r.evaluate(e, seed=10_000 + args.seed, episodes_per_env=args.eval_episodes) for r, e in zip(runners, evals)]  # not timed
                row.update({f"{r.stack.name}_eval_success": score for r, score in zip(runners, scores)})
                row["identical"] = row["identical"] and scores[0] == scores[1]
            rows.append(row)
            score = row.get("fastenv_eval_success")
            print(
                f"update {u}: {row['env_steps']} steps, training success {rates[1][0] if rates[1][0] is None else round(rates[1][0], 3)}"
                + ("" if score is None else f", evaluation success {score:.3f}")
                + f", stock {row['stock_seconds']:.0f} s, fastenv {row['fastenv_seconds']:.0f} s, identical: {row['identical']}",
                flush=True,
            )
            if not row["identical"]:
                print(f"the runs differ at update {u} in {row['differs'] or ['evaluation']}")
                break
            if score is not None and score >= args.target and not learned:
                learned = {"update": u, "env_steps": row["env_steps"], "stock_seconds": row["stock_seconds"], "fastenv_seconds": row["fastenv_seconds"],
                           "eval_success": score}
    finally:
        for s in (stock, fast, *evals):
            s.close()
    scores = [r["fastenv_eval_success"] for r in rows if "fastenv_eval_success" in r]
    payload = {
        "example": "examples/same_run.py",
        "env": ENV_ID,
        "maniskill_kwargs": MANISKILL_KWARGS,
        "config": dataclasses.asdict(cfg),
        "args": vars(args),
        "stacks": {
            "stock": "gymnasium AsyncVectorEnv(SAME_STEP) over mani_skill CPUGymWrapper(gym.make(..., sim_backend='physx_cpu'))",
            "fastenv": f"fastenv.envs.maniskill.make_vec(chunk=None, num_workers={args.num_workers})",
        },
        "identical_every_update": all(r["identical"] for r in rows),
        "learned": learned or None,
        "evaluations": {
            "best": max(scores, default=None),
            "mean_last_quarter": float(np.mean(scores[-max(1, len(scores) // 4) :])) if scores else None,
            "count": len(scores),
            "episodes_each": args.eval_envs * args.eval_episodes,
        },
        "final": rows[-1] if rows else None,
        "wall_clock_ratio": rows[-1]["stock_seconds"] / rows[-1]["fastenv_seconds"] if rows else None,
        "machine": {"cpu_count": os.cpu_count(), "processor": platform.processor() or platform.machine(), "platform": platform.platform()},
        "updates": rows,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "same_run_pushcube.json").write_text(json.dumps(payload, indent=2))
    plot(payload, out / "same_run_pushcube.png")
    print(f"wrote {out / 'same_run_pushcube.json'} and {out / 'same_run_pushcube.png'}")
    if learned:
        print(
            f"learned (evaluation success >= {args.target}) at {learned['env_steps']} env steps: stock {learned['stock_seconds'] / 60:.1f} min, "
            f"fastenv {learned['fastenv_seconds'] / 60:.1f} min"
        )


def plot(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in payload["updates"] if r["fastenv_success_rate"] is not None]
    evals = [r for r in payload["updates"] if "fastenv_eval_success" in r]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    colors = {"stock": "#7f7f7f", "fastenv": "#1f77b4"}
    for name, color in colors.items():
        wide = name == "stock"  # drawn first and wider: where the curves coincide, both show
        for ax, x_of in ((left, lambda r: r["env_steps"]), (right, lambda r: r[f"{name}_seconds"] / 60)):
            ax.plot([x_of(r) for r in rows], [r[f"{name}_success_rate"] for r in rows], color=color, lw=3 if wide else 1, alpha=0.35,
                    label=f"{name}: training episodes")
            ax.plot([x_of(r) for r in evals], [r[f"{name}_eval_success"] for r in evals], color=color, marker="o", ms=7 if wide else 4,
                    lw=3 if wide else 1.5, alpha=0.6 if wide else 1.0, label=f"{name}: evaluation (deterministic)")
    left.set_xlabel("env steps")
    right.set_xlabel("wall-clock minutes (each stack's rollouts and updates)")
    left.set_ylabel("success rate")
    same = "bit-identical at every update" if payload["identical_every_update"] else "RUNS DIFFER"
    left.set_title(f"{payload['env']}: the same PPO run, {same}", fontsize=10)
    ratio = payload["wall_clock_ratio"]
    right.set_title(f"fastenv's run takes {1 / ratio:.2f}x the time ({ratio:.2f}x sooner)" if ratio else "", fontsize=10)
    learned = payload.get("learned")
    if learned:
        for ax, xs in ((left, [learned["env_steps"]]), (right, [learned["stock_seconds"] / 60, learned["fastenv_seconds"] / 60])):
            for x in xs:
                ax.axvline(x, color="#2ca02c", ls=":", lw=1)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    right.legend(fontsize=8, loc="lower right")
    machine = payload["machine"]
    target = payload["args"]["target"]
    fig.suptitle(
        f"{machine['cpu_count']} CPU cores, no GPU; {payload['config']['num_envs']} envs per stack; evaluation: "
        f"{payload['evaluations']['episodes_each']} episodes; dotted: evaluation success first >= {target:g}",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
