"""CleanRL: what its single-file scripts expect from ``envs``, as one fastenv call.

CleanRL's ``ppo_continuous_action.py`` reads a flat Box observation, sends flat Box actions
``(N, act_dim)``, and logs episodes from ``infos["final_info"]`` as a list of per-env dicts with
``"episode"`` (the Gymnasium 0.29 convention). Its ``make_env`` wraps each env in
``ClipAction``, ``NormalizeObservation``, an observation clip to [-10, 10], ``NormalizeReward``
and a reward clip. Replace its env construction statement with:

    envs = fastenv.integrations.cleanrl.make_vec(args.env_id, args.num_envs, gamma=args.gamma)

which is ``gym.make_vec("fastenv/Libero-v0", ...)`` with ``OPTIONS``, each env wrapped as the
script's ``make_env`` wraps it (``ppo_continuous_wrappers``). What a chunk changes for the script:
one of its steps is K simulator steps, so its ``global_step``, SPS and ``--total-timesteps``
count chunks, and its ``gamma`` discounts once per chunk (``gamma_per_step ** K`` keeps the
horizon of an unchunked run); the logged episode return and length are over simulator steps.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import gymnasium as gym
import numpy as np

from fastenv.envs import gym_make_kwargs

# flatten: one float32 Box in, flat (N, K*7) actions out; episode statistics in final_info,
# which arrives as one dict per env.
OPTIONS: dict[str, Any] = {
    "flatten": True,
    "episode_statistics": True,
    "info_format": "per_env",
    "modalities": ["robot0_proprio-state", "object-state"],
    "chunk": 8,
}


def ppo_continuous_wrappers(env: gym.Env, gamma: float) -> gym.Env:
    """CleanRL's ``ppo_continuous_action.py`` wrappers around one env, as its ``make_env`` puts them.

    Action clipping, observation normalization and its clip to [-10, 10], reward normalization
    (``gamma``: the script's, applied once per step of ``env``, i.e. per chunk) and its clip, in
    Gymnasium 1.x's signatures. Applied to each env where it runs (in fastenv's workers), so the
    running statistics are per env, as in the script's ``SyncVectorEnv``. (Gymnasium's vector
    observation wrappers refuse a same-step autoreset vector env: they would leave the final
    observations untransformed.)

    Examples:
        >>> env = ppo_continuous_wrappers(gym.make("fastenv/Libero-v0", **OPTIONS), gamma=0.99)
    """
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, _clip10, env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=gamma)
    return gym.wrappers.TransformReward(env, _clip10)


def _clip10(x: Any) -> Any:
    return np.clip(x, -10, 10)


def _wrapped_env(env_id: str, gamma: float, kwargs: dict[str, Any]) -> gym.Env:
    # max_episode_steps is the env's own limit here, as in the vector entry point without gamma
    return ppo_continuous_wrappers(gym.make(env_id, **gym_make_kwargs(env_id, kwargs)), gamma)


def make_vec(env_id: Any = "fastenv/Libero-v0", num_envs: Any = None, *, gamma: float | None = None, **kwargs: Any) -> gym.vector.VectorEnv:
    """``num_envs`` envs of ``env_id``, a vector env shaped for CleanRL's continuous-action scripts
    (``OPTIONS``, overridable).

    With ``gamma`` (the script's ``args.gamma``), each env is wrapped as the script wraps it
    (``ppo_continuous_wrappers``, inside fastenv's workers); without, bare. ``kwargs`` takes the
    env's options and the vector env's (``num_workers``, ``pipeline_stages``, ...). The old order,
    ``make_vec(num_envs, env_id)``, still works for one release, with a DeprecationWarning.

    Examples:
        >>> envs = make_vec("fastenv/Libero-v0", 4, gamma=0.99, num_workers=2, chunk=8)
    """
    if isinstance(env_id, (int, np.integer)) and not isinstance(env_id, bool):  # the old order: (num_envs, env_id)
        warnings.warn("fastenv.integrations.cleanrl.make_vec(num_envs, env_id) is now make_vec(env_id, num_envs), as every "
                      "adapter's; the old order goes in the next release", DeprecationWarning, stacklevel=2)
        env_id, num_envs = ("fastenv/Libero-v0" if num_envs is None else num_envs), env_id
    if num_envs is None:
        raise TypeError("make_vec(env_id, num_envs): num_envs is required")
    if not isinstance(env_id, str):
        raise TypeError(f"make_vec(env_id, num_envs): env_id must be an env id (str), got {env_id!r}")
    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    options = {**OPTIONS, **kwargs}
    if gamma is None:
        return gym.make_vec(env_id, num_envs=num_envs, **options)
    from fastenv.vector import VECTOR_OPTIONS, PipelineVectorEnv

    vector = {key: options.pop(key) for key in list(options) if key in VECTOR_OPTIONS}
    env_fn = functools.partial(_wrapped_env, env_id, gamma, options)
    return PipelineVectorEnv([env_fn] * num_envs, **vector)


__all__ = ["OPTIONS", "make_vec", "ppo_continuous_wrappers"]
