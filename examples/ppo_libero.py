"""PPO on LIBERO with fastenv, in one file: pipelined rollouts, action chunks, correct bootstrapping.

- The envs run in fastenv's vector env with two pipeline stages: while one stage steps, the
  policy acts on the other (``send``/``recv`` per stage).
- Each action is a chunk of K simulator actions with one observation at its end; rewards inside a
  chunk are discounted by gamma, and each step's discount is the env's ``chunk_discount``
  (gamma**k for the k sub-steps run), so returns are those of the simulator's own time steps.
- Truncated episodes bootstrap from V(final observation); terminated ones from 0
  (``fastenv.returns.gae`` with ``final_values``). A transition invented by a worker restart
  (``infos["worker_restarted"]``: the action never ran) is left out (``valid``).

    python examples/ppo_libero.py --total-steps 20000
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

import fastenv  # noqa: F401  (registers fastenv/Libero-v0)
from fastenv.vector import final_observations
from fastenv.bench.policies import ChunkPolicy
from fastenv.returns import gae


@dataclass
class Config:
    suite: str = "libero_10"
    task_id: int = 0
    seed: int = 1
    total_steps: int = 50_000  # simulator steps
    num_envs: int = 4
    num_workers: int = 2
    pipeline_stages: int = 2
    chunk: int = 8
    num_steps: int = 32  # chunks per env per rollout
    max_episode_steps: int = 200
    gamma: float = 0.99
    gae_lambda: float = 0.95
    learning_rate: float = 3e-4
    num_minibatches: int = 4
    update_epochs: int = 4
    clip_coef: float = 0.2
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


def parse_args() -> Config:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Config):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=f.default)
    return Config(**vars(parser.parse_args()))


def main(cfg: Config) -> dict:
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(1)
    envs = gym.make_vec(
        "fastenv/Libero-v0",
        num_envs=cfg.num_envs,
        num_workers=cfg.num_workers,
        pipeline_stages=cfg.pipeline_stages,
        suite=cfg.suite,
        task_id=cfg.task_id,
        chunk=cfg.chunk,
        gamma=cfg.gamma,
        modalities=["robot0_proprio-state", "object-state"],
        flatten=True,
        max_episode_steps=cfg.max_episode_steps,
    )
    try:
        obs_dim = envs.single_observation_space.shape[0]
        agent = ChunkPolicy(None, obs_dim, cfg.chunk, 7)
        optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.learning_rate, eps=1e-5)
        T, N, S, K = cfg.num_steps, cfg.num_envs, cfg.pipeline_stages, cfg.chunk
        m = N // S
        stages = [slice(k * m, (k + 1) * m) for k in range(S)]

        obs_buf = np.zeros((T, N, obs_dim), np.float32)
        act_buf = np.zeros((T, N, K * 7), np.float32)
        logp_buf, val_buf = np.zeros((T, N), np.float32), np.zeros((T, N), np.float32)
        rew_buf, disc_buf, final_v = np.zeros((T, N)), np.zeros((T, N)), np.zeros((T, N))
        term_buf, trunc_buf = np.zeros((T, N), bool), np.zeros((T, N), bool)
        valid_buf = np.ones((T, N), bool)
        next_values = np.zeros(N)

        def act(t: int, sl: slice, obs: np.ndarray) -> None:
            with torch.no_grad():
                dist, value = agent.distribution(None, torch.as_tensor(obs))
                action = dist.sample()
            obs_buf[t, sl], act_buf[t, sl] = obs, action.numpy()
            logp_buf[t, sl], val_buf[t, sl] = dist.log_prob(action).sum(1).numpy(), value.numpy()
            envs.send(action.clamp(-1, 1).numpy(), stage=sl.start // m)

        next_obs, _ = envs.reset(seed=cfg.seed)
        steps, iteration, start = 0, 0, time.time()
        while steps < cfg.total_steps:
            iteration += 1
            for sl in stages:
                act(0, sl, next_obs[sl])
            for t in range(T):
                for k, sl in enumerate(stages):
                    obs, reward, term, trunc, infos = envs.recv(stage=k)
                    rew_buf[t, sl], term_buf[t, sl], trunc_buf[t, sl] = reward, term, trunc
                    disc_buf[t, sl] = infos["chunk_discount"]  # gamma**k, on every step, for every env
                    valid_buf[t, sl] = ~infos.get("worker_restarted", np.zeros(m, bool))
                    ids, finals = final_observations(infos)
                    if len(ids):  # bootstrap truncated episodes from V(final observation)
                        with torch.no_grad():
                            final_v[t, sl.start + ids] = agent(None, torch.as_tensor(np.stack(finals)))[1].numpy()
                    if t + 1 < T:
                        act(t + 1, sl, obs)  # the other stages are stepping meanwhile
                    else:
                        next_obs[sl] = obs
                        with torch.no_grad():
                            next_values[sl] = agent(None, torch.as_tensor(obs))[1].numpy()
                    steps += m * K
            advantages, returns = gae(
                rew_buf, val_buf, term_buf, trunc_buf, next_values,
                final_values=final_v, discounts=disc_buf, valid=valid_buf, lam=cfg.gae_lambda,
            )

            b_obs, b_act = torch.as_tensor(obs_buf.reshape(T * N, -1)), torch.as_tensor(act_buf.reshape(T * N, -1))
            b_logp, b_val = torch.as_tensor(logp_buf.ravel()), torch.as_tensor(val_buf.ravel())
            b_adv = torch.as_tensor(advantages.ravel(), dtype=torch.float32)
            b_ret = torch.as_tensor(returns.ravel(), dtype=torch.float32)
            kept = np.flatnonzero(valid_buf.ravel())  # transitions that happened
            batch, minibatch = len(kept), max(2, len(kept) // cfg.num_minibatches)
            for _ in range(cfg.update_epochs):
                for idx in np.array_split(np.random.permutation(kept), max(1, batch // minibatch)):
                    dist, value = agent.distribution(None, b_obs[idx])
                    ratio = (dist.log_prob(b_act[idx]).sum(1) - b_logp[idx]).exp()
                    adv = b_adv[idx]
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                    pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                    v_loss = 0.5 * ((value - b_ret[idx]) ** 2).mean()
                    loss = pg_loss - cfg.ent_coef * dist.entropy().sum(1).mean() + cfg.vf_coef * v_loss
                    optimizer.zero_grad()
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
                    optimizer.step()
            sps = steps / (time.time() - start)
            print(f"iteration {iteration}: {steps} simulator steps, {sps:.0f} steps/s, value loss {v_loss.item():.4f}", flush=True)
    finally:
        envs.close()
    return {"steps": steps, "iterations": iteration}


if __name__ == "__main__":
    main(parse_args())
