"""RLlib: its new API stack's env runners on fastenv's vector env, in the autoreset mode they read.

RLlib's ``SingleAgentEnvRunner`` builds its envs with ``gym.make_vec`` in the mode
``config.gym_env_vectorize_mode`` names: ``"sync"`` (its default) puts single envs in Gymnasium's
``SyncVectorEnv`` in its own process; ``"vector_entry_point"`` takes the env's own vector env.
It reads episode ends in Gymnasium's ``NEXT_STEP`` autoreset mode (the step after an episode's last
one is the next episode's reset). fastenv's vector env runs ``SAME_STEP`` unless told otherwise,
which RLlib misreads: it would end each episode on the next one's first observation. Two ways tell
it; ``env_creator`` over fastenv's id, registered as an RLlib env (``ray.tune.registry.register_env``:
RLlib's algorithms take a creator by name)::

    register_env("fastenv-libero", env_creator("fastenv/Libero-v0", num_workers=2))
    config = PPOConfig().environment("fastenv-libero", env_config={"flatten": True})
    config = config.env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")

or the id itself, with the mode in ``env_config`` (``gym.make_vec`` hands it to the vector entry point)::

    config = PPOConfig().environment(
        "fastenv:fastenv/Libero-v0", env_config={"autoreset_mode": "NextStep", "num_workers": 2, "flatten": True})
    config = config.env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")

For an env of your own, ``env_creator`` runs it in fastenv's workers::

    register_env("my-env", env_creator(lambda cfg: fastenv.wrap(MyEnv(cfg), chunk=8), num_workers=2))

Nothing here imports Ray: RLlib calls what ``env_creator`` returns.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv.envs import gym_make_kwargs
from fastenv.integrations._vector import make_vector_env
from fastenv.vector import VECTOR_OPTIONS, PipelineVectorEnv
from fastenv.vector.pipeline import autoreset_mode_of

__all__ = ["env_creator", "make_vec"]

_VECTOR_KEYS = (*VECTOR_OPTIONS, "vector_kwargs")


class _Creator:
    """``env_creator``'s result: a plain class, so RLlib pickles it by value to remote env runners."""

    def __init__(self, env: str | Callable[[dict[str, Any]], gym.Env], vector_options: dict[str, Any], env_id: str | None) -> None:
        self.env, self.vector_options, self.env_id = env, vector_options, env_id  # env_id: the id less a "module:" prefix

    def __call__(self, env_config: Mapping[str, Any]) -> gym.Env | VectorEnv:
        config = dict(env_config)  # RLlib's EnvContext, as a dict a worker process can take
        num_envs = config.pop("num_envs", None)
        if num_envs is None:  # gym_env_vectorize_mode "sync"/"async": RLlib vectorizes single envs
            self._check_single(config)
            return self.env(config) if self.env_id is None else gym.make(self.env, **gym_make_kwargs(self.env_id, config))
        if self.env_id is not None:
            twice = sorted(set(config) & set(self.vector_options))
            if twice:
                raise TypeError(f"{twice} given both to env_creator and in env_config: give each once")
            _check_next_step(config.pop("autoreset_mode", AutoresetMode.NEXT_STEP), "in env_config")
            return gym.make_vec(
                self.env, num_envs=num_envs, vectorization_mode="vector_entry_point",
                autoreset_mode=AutoresetMode.NEXT_STEP, **config, **self.vector_options,
            )
        return PipelineVectorEnv(
            [functools.partial(self.env, config)] * num_envs, autoreset_mode=AutoresetMode.NEXT_STEP, **self.vector_options
        )

    def _check_single(self, config: dict[str, Any]) -> None:
        """Vector options are refused where RLlib builds single envs: nothing would run them."""
        vector = set(self.vector_options)
        if self.env_id is not None:  # a callable's env_config is its own
            vector |= {key for key in config if key in _VECTOR_KEYS}
        if vector:
            raise ValueError(
                f"RLlib's env runner is building single envs (gym_env_vectorize_mode 'sync', its default, or 'async'), "
                f"and vector options {sorted(vector)} were given: pass .env_runners(gym_env_vectorize_mode='vector_entry_point') "
                "to the config for fastenv's vector env"
            )


def _check_next_step(mode: Any, where: str) -> None:
    mode = autoreset_mode_of(mode)
    if mode is not AutoresetMode.NEXT_STEP:
        raise ValueError(
            f"RLlib's env runners read episode ends in Gymnasium's NEXT_STEP autoreset mode, which env_creator sets; "
            f"got autoreset_mode={mode} {where}: leave it out"
        )


def env_creator(
    env: str | Callable[[dict[str, Any]], gym.Env], **vector_options: Any
) -> Callable[[Mapping[str, Any]], gym.Env | VectorEnv]:
    """An RLlib env creator (``register_env(name, creator)``, then ``config.environment(name)``) whose vector env is
    fastenv's, in NEXT_STEP.

    Args:
        env: a Gymnasium id with a vector entry point (``"fastenv/Libero-v0"``,
            ``"fastenv:fastenv/Libero-v0"`` to import fastenv first), or RLlib's creator of one env
            (takes the ``env_config`` dict, returns a gymnasium.Env; each worker process calls it:
            picklable, or defined in an importable module).
        vector_options: ``PipelineVectorEnv``'s (``num_workers``, ``pipeline_stages``, ...);
            the autoreset mode is RLlib's, NEXT_STEP.

    With ``gym_env_vectorize_mode="vector_entry_point"`` RLlib calls the creator with ``num_envs``
    in the config: an id gives ``gym.make_vec(env, num_envs=n, autoreset_mode=NEXT_STEP,
    **env_config, **vector_options)``, a callable a ``PipelineVectorEnv`` of ``n`` of its envs. In
    RLlib's other modes (``"sync"``, its default, and ``"async"``) it builds single envs: an id
    gives ``gym.make(env, **env_config)`` (``max_episode_steps`` the env's own limit, as in its vector
    env), a callable ``env(env_config)``; vector options, which nothing would run there, are refused.

    Examples:
        >>> register_env("fastenv-libero", env_creator("fastenv/Libero-v0", num_workers=2))  # ray.tune.registry's
        >>> config = PPOConfig().environment("fastenv-libero", env_config={"chunk": 8})
        >>> config = config.env_runners(num_envs_per_env_runner=4, gym_env_vectorize_mode="vector_entry_point")
    """
    env_id = None
    if isinstance(env, str):
        module, _, name = env.rpartition(":")  # Gymnasium's "module:id" imports the module first
        if module:
            importlib.import_module(module)
        spec = gym.spec(name)
        if spec.vector_entry_point is None:
            raise ValueError(
                f"{env!r} has no vector entry point, so no vector env of its own to run in fastenv's workers; "
                "pass a callable (env_config -> gymnasium.Env) to run its envs in them"
            )
        env_id = spec.id
    elif not callable(env):
        raise TypeError(f"env must be a Gymnasium id or a callable (env_config -> gymnasium.Env), got {type(env).__name__}")
    unknown = sorted(set(vector_options) - set(VECTOR_OPTIONS))
    if unknown:
        raise TypeError(f"env_creator takes the vector env's options {list(VECTOR_OPTIONS)}; got {unknown} (the env's go in env_config)")
    if "autoreset_mode" in vector_options:
        _check_next_step(vector_options.pop("autoreset_mode"), "to env_creator")
    return _Creator(env, dict(vector_options), env_id)


def make_vec(env_id: str, num_envs: int, **kwargs: Any) -> VectorEnv:
    """``gym.make_vec(env_id, num_envs, autoreset_mode=NEXT_STEP, **kwargs)``: the vector env RLlib's
    env runner reads, what ``env_creator(env_id)`` gives it in ``"vector_entry_point"`` mode (for
    an env runner built by hand, or to look at what it will step).

    Examples:
        >>> envs = make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True, camera_size=64)
    """
    return make_vector_env(env_id, num_envs, AutoresetMode.NEXT_STEP, "RLlib's env runner",
                           "it reads an episode's end in Gymnasium's NEXT_STEP autoreset mode", **kwargs)
