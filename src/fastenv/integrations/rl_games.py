"""rl_games: a fastenv (or any SAME_STEP Gymnasium) vector env as an rl_games ``IVecEnv``.

rl_games' PPO (``A2CBase.play_steps``) steps one vector env with the old Gym API: ``step(actions)``
returns ``(obs, rewards, dones, infos)`` with ``dones`` = terminated or truncated, an ended env is
already reset (its observation in ``obs`` is the next episode's first; no final observation is
read), and a time-out is bootstrapped from the value of the step's own observation where
``infos["time_outs"]`` says the episode was truncated and ``value_bootstrap`` is set (its
default). That is fastenv's SAME_STEP autoreset, so ``RlGamesVecEnv`` hands the step on as it
comes and only reshapes it: the per-env infos are the step's own (``final_info`` for an ended
env), marked ``time_outs``, and batched as rl_games' ``RayVecEnv`` batches its workers' infos
for an env that opts in (``concat_infos``). What PPO collects is then what it collects on
``RayVecEnv`` over the same envs and seeds, on LIBERO over LIBERO's own env too, chunk 1 and chunk 8
(``tests/test_rl_games.py``)::

    register("libero", "fastenv/Libero-v0", num_workers=2, chunk=8, camera_size=64, flatten=True)
    # rl_games config: env_name: libero, num_actors: 8 (the vector env's num_envs)

rl_games 1.6.5's ``RayVecEnv`` hands on a list of per-env infos unless the env has a
``concat_infos`` attribute, and ``"time_outs" in infos`` is then False: no time-out is
bootstrapped. ``concat_infos=False`` gives that list (and that behaviour) here too.

rl_games pins ``psutil<6``, which it does not import: install it without its pins,
``pip install --no-deps rl_games==1.6.5`` after ``pip install -e ".[rl-games]"`` (its other
dependencies); ``scripts/setup.sh`` does both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from fastenv._deps import require
from fastenv.core.arrays import to_numpy
from fastenv.core.infos import row_info
from fastenv.integrations._vector import make_vector_env, require_autoreset

require("rl_games", "rl-games", "rl_games")

from rl_games.common import env_configurations, vecenv  # noqa: E402
from rl_games.common.ivecenv import IVecEnv  # noqa: E402
from rl_games.common.tr_helpers import dicts_to_dict_with_arrays  # noqa: E402

VECENV_TYPE = "FASTENV"
_WHY = "rl_games 1.6.5 reads an ended env's step as its next episode's start"


def _fp32(obs: Any) -> Any:
    """float64 observations as float32, as rl_games' ``RayWorker`` casts them (a dict's too)."""
    if isinstance(obs, dict):
        return {key: _fp32(value) for key, value in obs.items()}
    if isinstance(obs, np.ndarray) and obs.dtype == np.float64:
        return obs.astype(np.float32)
    return obs


def _batched_infos(infos: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-env infos as one dict, as ``RayVecEnv`` batches them for an env with ``concat_infos``
    (``dicts_to_dict_with_arrays(infos, False)``). With one env rl_games keeps the list, which
    hides ``time_outs``; here it becomes the dict that function gives for more envs."""
    if len(infos) > 1:
        return dicts_to_dict_with_arrays(infos, False)
    return {key: np.array([value]) if np.ndim(value) == 0 else np.concatenate([value]) for key, value in infos[0].items()}


class RlGamesVecEnv(IVecEnv):
    """A Gymnasium vector env with SAME_STEP autoreset (e.g. ``PipelineVectorEnv``) as an rl_games
    ``IVecEnv``.

    ``reset()`` returns the observations only; the first one is seeded with ``seed`` (env i gets
    ``seed + i``, as ``RayVecEnv`` seeds its workers), later ones continue the envs' generators.
    ``step(actions)`` returns ``(obs, rewards, dones, infos)``: ``obs`` of an ended env is its next
    episode's first, ``infos`` the step's own with ``time_outs`` (truncated and not terminated).
    Observations are numpy arrays, float64 cast to float32 (tensors of ManiSkill on GPU come out as
    numpy too).

    Args:
        vector_env: the vector env; it is closed with this one.
        seed: the seed of the first reset (None: unseeded).
        concat_infos: infos batched into one dict (True), or a list of per-env dicts, as
            ``RayVecEnv`` gives them by default, without which rl_games bootstraps no time-out.

    Examples:
        >>> envs = RlGamesVecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=4, flatten=True), seed=0)
    """

    def __init__(self, vector_env: gym.vector.VectorEnv, *, seed: int | None = None, concat_infos: bool = True) -> None:
        require_autoreset(vector_env, gym.vector.AutoresetMode.SAME_STEP, "RlGamesVecEnv", _WHY)
        self.vector_env = vector_env
        self.num_envs = vector_env.num_envs
        self.concat_infos = concat_infos
        self.observation_space = vector_env.single_observation_space
        self.action_space = vector_env.single_action_space
        self._seed = seed

    def seed(self, seed: int | None) -> None:
        """Seed the next ``reset()`` (env i with ``seed + i``)."""
        self._seed = seed

    def reset(self) -> Any:
        obs, _ = self.vector_env.reset(seed=self._seed)
        self._seed = None
        return _fp32(to_numpy(obs))

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, Any]:
        obs, rewards, terminations, truncations, infos = to_numpy(self.vector_env.step(actions))
        terminations, truncations = np.asarray(terminations, bool), np.asarray(truncations, bool)
        dones = terminations | truncations
        per_env = []
        for i in range(self.num_envs):
            info = row_info(infos, i)
            info = dict(info["final_info"]) if dones[i] and "final_info" in info else info
            info.pop("env_ids", None)
            info["time_outs"] = bool(truncations[i] and not terminations[i])
            per_env.append(info)
        return _fp32(obs), np.asarray(rewards), dones, _batched_infos(per_env) if self.concat_infos else per_env

    def get_number_of_agents(self) -> int:
        return 1

    def get_env_info(self) -> dict[str, Any]:
        """The spaces of one env, as rl_games' ``RayVecEnv`` reports them."""
        return {
            "action_space": self.action_space,
            "observation_space": self.observation_space,
            "state_space": None,
            "use_global_observations": False,
            "agents": 1,
            "value_size": 1,
        }

    def close(self) -> None:
        self.vector_env.close()


def _create(config_name: str, num_actors: int, **kwargs: Any) -> RlGamesVecEnv:
    """rl_games' vecenv creator: the config's vector env of ``num_actors`` envs; ``kwargs`` are its
    ``env_config`` (``seed`` seeds the first reset, ``concat_infos`` goes to ``RlGamesVecEnv``, the
    rest to ``gym.make_vec`` over what ``register`` was given)."""
    seed, concat_infos = kwargs.pop("seed", None), kwargs.pop("concat_infos", True)
    make = env_configurations.configurations[config_name]["env_creator"]
    return RlGamesVecEnv(make(num_envs=num_actors, **kwargs), seed=seed, concat_infos=concat_infos)


def _maker(env_id: str, make_kwargs: dict[str, Any]) -> Callable[..., gym.vector.VectorEnv]:
    def make(num_envs: int, **kwargs: Any) -> gym.vector.VectorEnv:
        return make_vector_env(env_id, num_envs, gym.vector.AutoresetMode.SAME_STEP, "RlGamesVecEnv", _WHY, **{**make_kwargs, **kwargs})

    return make


def register(config_name: str, env_id: str, **make_kwargs: Any) -> None:
    """Make ``config_name`` an rl_games env (``config["env_name"]``): ``gym.make_vec(env_id,
    num_envs=config["num_actors"], **make_kwargs, **env_config)`` as an ``RlGamesVecEnv``.

    The config's ``env_config`` may hold ``seed`` (the Runner puts its own there) and
    ``concat_infos``; the rest overrides ``make_kwargs``. A player (``run_play``) needs
    ``player: {use_vecenv: True}``: there is no single env to make.

    Examples:
        >>> register("libero", "fastenv/Libero-v0", num_workers=2, chunk=8, camera_size=64, flatten=True)
    """
    vecenv.register(VECENV_TYPE, _create)
    env_configurations.register(config_name, {"vecenv_type": VECENV_TYPE, "env_creator": _maker(env_id, make_kwargs)})


def make_vec(env_id: str, num_envs: int, *, seed: int | None = None, concat_infos: bool = True, **kwargs: Any) -> RlGamesVecEnv:
    """``gym.make_vec(env_id, num_envs, **kwargs)`` as an ``RlGamesVecEnv`` (``seed`` seeds its first
    reset). rl_games' Runner builds its env by name: ``register`` makes one of these for it.

    Examples:
        >>> envs = make_vec("fastenv/Libero-v0", 4, num_workers=2, chunk=8, camera_size=64, flatten=True, seed=0)
    """
    return RlGamesVecEnv(make_vector_env(env_id, num_envs, gym.vector.AutoresetMode.SAME_STEP, "RlGamesVecEnv", _WHY, **kwargs),
                         seed=seed, concat_infos=concat_infos)


__all__ = ["VECENV_TYPE", "RlGamesVecEnv", "make_vec", "register"]
