"""PPO on LIBERO with PufferLib's vectorization API and policy, on fastenv's vector env.

PufferLib's trainer (``pufferlib.pufferl.PuffeRL``) runs its advantage on the compiled extension
``pufferlib._C``, which pufferlib-core installed without its torch pin cannot load; this example
keeps the rest of PufferLib: the vector env interface its trainer drives (``async_reset``,
``send``, ``recv`` and their buffers), its ``models.Default`` policy (an MLP with a Gaussian head
for Box actions) and ``pytorch.sample_logits``, with a short PPO update written out below. The one
change from ``pufferlib.vector.make(...)`` is the env: ``fastenv.integrations.pufferlib.make``.

PufferLib resets an ended env on the step after (NEXT_STEP): the step that ends an episode returns
its final observation (a truncated episode bootstraps from it), and the next step runs no action
on that env. That step is no transition: its row is left out of the loss. One step is one chunk
of K simulator steps, so ``gamma`` is the per-step discount to the power K.

    python examples/pufferlib_libero.py --iterations 100
"""

from __future__ import annotations

import argparse

import numpy as np
import pufferlib.models
import pufferlib.pytorch
import torch

from fastenv.integrations.pufferlib import make_vec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--horizon", type=int, default=64, help="chunks per env per iteration")
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--max-episode-steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    gamma, lam, clip = 0.99**args.chunk, 0.95, 0.2

    envs = make_vec("fastenv/Libero-v0", args.num_envs, num_workers=args.num_workers, chunk=args.chunk,
                camera_size=args.camera_size, max_episode_steps=args.max_episode_steps, flatten=True)
    policy = pufferlib.models.Default(envs.driver_env, hidden_size=64)
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-4)
    low, high = envs.single_action_space.low, envs.single_action_space.high
    T, N = args.horizon + 1, args.num_envs
    obs = torch.zeros((T, N, *envs.single_observation_space.shape))
    actions = torch.zeros((T, N, *envs.single_action_space.shape))
    logprobs, values, rewards, terminals, dones = (torch.zeros((T, N)) for _ in range(5))

    envs.async_reset(args.seed)
    for iteration in range(1, args.iterations + 1):
        episodes = 0
        for t in range(T):  # row t: what recv gave, and the action sent on it
            o, r, d, tr, _, infos, _, _ = envs.recv()
            obs[t], rewards[t] = torch.as_tensor(o), torch.as_tensor(r)  # copied: recv's buffers are reused
            terminals[t], dones[t] = torch.as_tensor(d), torch.as_tensor(d | tr)
            episodes += int((d | tr).sum())
            with torch.no_grad():
                logits, value = policy(obs[t])
                action, logprobs[t], _ = pufferlib.pytorch.sample_logits(logits)
            actions[t], values[t] = action, value.flatten()
            if t < T - 1:
                envs.send(np.clip(action.numpy(), low, high))
        # GAE over rows 0..T-2; a row that ended an episode is its reset step's row: no transition.
        advantages, last = torch.zeros((T - 1, N)), torch.zeros(N)
        for t in reversed(range(T - 1)):
            delta = rewards[t + 1] + gamma * values[t + 1] * (1 - terminals[t + 1]) - values[t]
            last = delta + gamma * lam * (1 - dones[t + 1]) * last
            advantages[t] = last
        returns, valid = advantages + values[:-1], dones[:-1] == 0
        b_obs, b_act, b_logp, b_adv, b_ret = (x[valid] for x in (obs[:-1], actions[:-1], logprobs[:-1], advantages, returns))
        b_adv = (b_adv - b_adv.mean()) / (b_adv.std() + 1e-8)
        for _ in range(4):
            logits, value = policy(b_obs)
            _, logp, entropy = pufferlib.pytorch.sample_logits(logits, b_act)
            ratio = (logp - b_logp).exp()
            loss = (-torch.min(ratio * b_adv, ratio.clamp(1 - clip, 1 + clip) * b_adv).mean()
                    + 0.5 * ((value.flatten() - b_ret) ** 2).mean() - 0.01 * entropy.mean())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        # the last row's action opens the next iteration's first step
        envs.send(np.clip(actions[-1].numpy(), low, high))
        print(f"iteration {iteration}: {T * N} chunks ({T * N * args.chunk} simulator steps), {episodes} episodes ended, "
              f"loss {loss.item():.3f}", flush=True)
    envs.close()


if __name__ == "__main__":
    main()
