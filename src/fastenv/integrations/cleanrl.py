"""CleanRL: what its single-file scripts expect from ``envs``, as one fastenv call.

CleanRL's ``ppo_continuous_action.py`` reads a flat Box observation, sends flat Box actions
``(N, act_dim)``, and logs episodes from ``infos["final_info"]`` as a list of per-env dicts with
``"episode"`` (the Gymnasium 0.29 convention). Replace its env construction statement with:

    envs = gym.make_vec("fastenv:fastenv/Libero-v0", num_envs=args.num_envs, chunk=8,
                        modalities=["robot0_proprio-state", "object-state"], flatten=True,
                        episode_statistics=True, info_format="per_env")

(the ``fastenv:`` prefix makes Gymnasium import fastenv), or call ``make_vec(args.num_envs)``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

# flatten: one float32 Box in, flat (N, K*7) actions out; episode statistics in final_info,
# which arrives as one dict per env.
OPTIONS: dict[str, Any] = {
    "flatten": True,
    "episode_statistics": True,
    "info_format": "per_env",
    "modalities": ["robot0_proprio-state", "object-state"],
    "chunk": 8,
}


def make_vec(num_envs: int, env_id: str = "fastenv/Libero-v0", **kwargs: Any) -> gym.vector.VectorEnv:
    """A vector env shaped for CleanRL's continuous-action scripts (``OPTIONS``, overridable).

    Example:
        >>> envs = make_vec(4, num_workers=2, chunk=8)
    """
    return gym.make_vec(env_id, num_envs=num_envs, **{**OPTIONS, **kwargs})
