"""RLlib: its new API stack's env runners on fastenv's vector env, in the autoreset mode they read.

RLlib's ``SingleAgentEnvRunner`` builds its envs with ``gym.make_vec`` in the mode
``config.gym_env_vectorize_mode`` names: ``"sync"`` (its default) puts single envs in Gymnasium's
``SyncVectorEnv`` in its own process; ``"vector_entry_point"`` takes the env's own vector env.
It reads episode ends in Gymnasium's ``NEXT_STEP`` autoreset mode (the step after an episode's last
one is the next episode's reset). For fastenv's ids nothing else is needed: built by RLlib's env
runner, ``fastenv/Libero-v0``'s vector env runs ``NEXT_STEP``::

    config = PPOConfig().environment("fastenv/Libero-v0", env_config={"num_workers": 2, "flatten": True})
    config = config.env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")

For an env of your own, ``env_creator`` runs it in fastenv's workers::

    config = PPOConfig().environment(env_creator(lambda cfg: fastenv.wrap(MyEnv(cfg), chunk=8), num_workers=2))
    config = config.env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")

Nothing here imports Ray: RLlib calls what ``env_creator`` returns.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv.vector import PipelineVectorEnv

__all__ = ["env_creator"]


class _Creator:
    """``env_creator``'s result: a plain class, so RLlib pickles it by value to remote env runners."""

    def __init__(self, make_env: Callable[[dict[str, Any]], gym.Env], vector_options: dict[str, Any]) -> None:
        self.make_env, self.vector_options = make_env, vector_options

    def __call__(self, env_config: Mapping[str, Any]) -> gym.Env | VectorEnv:
        config = dict(env_config)  # RLlib's EnvContext, as a dict a worker process can take
        num_envs = config.pop("num_envs", None)
        if num_envs is None:  # gym_env_vectorize_mode "sync"/"async": RLlib vectorizes single envs
            return self.make_env(config)
        return PipelineVectorEnv(
            [functools.partial(self.make_env, config)] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP, **self.vector_options
        )


def env_creator(make_env: Callable[[dict[str, Any]], gym.Env], **vector_options: Any) -> Callable[[Mapping[str, Any]], gym.Env | VectorEnv]:
    """An RLlib env creator (``config.environment(env=...)``) whose vector env is ``make_env``'s in fastenv's workers.

    Args:
        make_env: RLlib's creator of one env: takes the ``env_config`` dict, returns a gymnasium.Env.
            Each worker process calls it (picklable, or defined in an importable module).
        vector_options: ``PipelineVectorEnv``'s (``num_workers``, ``pipeline_stages``, ...);
            the autoreset mode is RLlib's, NEXT_STEP.

    With ``gym_env_vectorize_mode="vector_entry_point"`` RLlib calls the creator with
    ``num_envs`` in the config and gets a ``PipelineVectorEnv`` of that many envs; in RLlib's other
    modes it gets one ``make_env(env_config)``.

    Examples:
        >>> config = PPOConfig().environment(env_creator(make_my_env, num_workers=2))
        >>> config = config.env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")
    """
    if not callable(make_env):
        raise TypeError(f"make_env must be callable (env_config -> gymnasium.Env), got {type(make_env).__name__}")
    if "autoreset_mode" in vector_options:
        raise ValueError(
            f"RLlib's env runners read episode ends in NEXT_STEP autoreset mode, which env_creator sets; "
            f"got autoreset_mode={vector_options['autoreset_mode']!r}: leave it out"
        )
    return _Creator(make_env, dict(vector_options))
