"""Tianshou: a fastenv vector env as a Tianshou ``BaseVectorEnv``.

Tianshou's ``Collector`` steps the envs it is collecting from (``step(action, id)``), sees which
episodes ended, stores the step's observation as ``obs_next`` (the final observation, from which
a truncated episode bootstraps) and then resets the ended envs itself (``reset(env_id)``). That is
Gymnasium's ``DISABLED`` autoreset mode, which fastenv's vector env has of its own: an ended env
returns its final observation as the step's and waits for the caller's reset (a step sent to it
before is refused). ``TianshouVecEnv`` takes a vector env in that mode and speaks Tianshou's
vector-env API over it (env ids, one seed per env, attributes, numpy batches). What the Collector
gathers is then what it gathers on ``DummyVectorEnv`` over the same envs and seeds, and on LIBERO
what it gathers (PPO's updates included) on ``SubprocVectorEnv`` over LIBERO's own env, chunk 1 and
chunk 8 (``tests/test_tianshou.py``; not ``DummyVectorEnv`` there: stock LIBERO envs in one process
draw each other's scenes)::

    envs = fastenv.integrations.tianshou.make_vec("fastenv/Libero-v0", 8, flatten=True)
    collector = Collector(algorithm, envs, VectorReplayBuffer(4096, len(envs)))

Importing this module needs ``pip install -e ".[tianshou]"``.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np

from fastenv._deps import require
from fastenv.core.arrays import get_row, stack_rows, to_numpy
from fastenv.core.infos import add_info, row_info
from fastenv.integrations._vector import (
    make_vector_env,
    per_env_seeds,
    renamed,
    require_autoreset,
)

require("tianshou", "tianshou", "Tianshou")

WHY = "Tianshou's Collector resets the envs that ended itself, through reset(env_id)"

from tianshou.env import BaseVectorEnv  # noqa: E402


def _unwrapped_attr(env: gym.Env, key: str) -> Any:
    """``getattr(env.unwrapped, key)``, run inside a worker (as Tianshou's workers read attributes)."""
    return getattr(env.unwrapped, key)


def _set_unwrapped_attr(env: gym.Env, key: str, value: Any) -> None:
    setattr(env.unwrapped, key, value)


def _stack(items: list[Any]) -> np.ndarray:
    """Per-env items batched as Tianshou's vector envs batch them (``np.stack``; an object array
    where they differ in length)."""
    try:
        return np.stack(items)
    except ValueError:
        return np.array(items, dtype=object)


class TianshouVecEnv(BaseVectorEnv):
    """A Gymnasium vector env with DISABLED autoreset (fastenv's ``PipelineVectorEnv`` made with
    ``autoreset_mode=DISABLED``) as a Tianshou ``BaseVectorEnv``.

    ``step(action, id)`` steps the envs ``id`` (a subset through ``send(env_ids=...)``/``recv``);
    an env whose episode ended returns its final observation and the step's info, and waits for
    the ``reset(env_id)`` Tianshou's Collector sends next. ``seed(s)`` seeds env i and its action
    space with ``s + i``, as Tianshou's ``DummyVectorEnv`` does. Tensors (ManiSkill on GPU) come out
    as numpy.

    Args:
        vector_env: the vector env; it is closed with this one.

    Examples:
        >>> envs = TianshouVecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=4, flatten=True, autoreset_mode="Disabled"))
    """

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        require_autoreset(vector_env, gym.vector.AutoresetMode.DISABLED, "TianshouVecEnv", WHY)
        # BaseVectorEnv.__init__ builds one worker per env; here the vector env holds the envs.
        self.vector_env = vector_env
        self.env_num = vector_env.num_envs
        self.wait_num = self.env_num
        self.timeout = None
        self.is_async = False
        self.waiting_conn, self.waiting_id = [], []
        self.ready_id = list(range(self.env_num))
        self.is_closed = False
        self._action_spaces = [copy.deepcopy(vector_env.single_action_space) for _ in range(self.env_num)]
        self._observation_spaces = [copy.deepcopy(vector_env.single_observation_space) for _ in range(self.env_num)]

    # -- attributes -----------------------------------------------------------------------------
    def get_env_attr(self, key: str, id: int | list[int] | np.ndarray | None = None) -> list[Any]:
        self._assert_is_not_closed()
        ids = [int(i) for i in self._wrap_id(id)]
        if key == "action_space":  # kept here, so that seed() seeds what the Collector samples
            return [self._action_spaces[i] for i in ids]
        if key == "observation_space":
            return [self._observation_spaces[i] for i in ids]
        return self._apply(ids, _unwrapped_attr, key)

    def set_env_attr(self, key: str, value: Any, id: int | list[int] | np.ndarray | None = None) -> None:
        self._assert_is_not_closed()
        self._apply([int(i) for i in self._wrap_id(id)], _set_unwrapped_attr, key, value)

    def _apply(self, ids: list[int], fn: Any, *args: Any) -> list[Any]:
        apply = getattr(self.vector_env, "apply", None)
        if apply is not None:
            return list(apply(fn, *args, env_ids=ids))
        envs = getattr(self.vector_env, "envs", None)  # Gymnasium's SyncVectorEnv
        if envs is None:
            raise AttributeError(f"{type(self.vector_env).__name__} cannot reach its envs' attributes")
        return [fn(envs[i], *args) for i in ids]

    # -- stepping -------------------------------------------------------------------------------
    def seed(self, seed: int | list[int] | None = None) -> list[list[int] | None]:
        """Seed env i's action space and reset env i with ``seed + i`` (or ``seed[i]``)."""
        self._assert_is_not_closed()
        seeds = per_env_seeds(seed, self.env_num)
        for space, s in zip(self._action_spaces, seeds):
            space.seed(s)
        self.vector_env.reset(seed=seeds)
        return [[s] for s in seeds]  # type: ignore[misc]

    def reset(self, env_id: int | list[int] | np.ndarray | None = None, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
        """Reset the envs ``env_id`` (all: None); ``kwargs`` (``seed``, ``options``) go to each, as
        Tianshou's vector envs pass them (one seed for every env reset)."""
        self._assert_is_not_closed()
        ids = [int(i) for i in self._wrap_id(env_id)]
        unknown = set(kwargs) - {"seed", "options"}
        if unknown:
            raise TypeError(f"reset() takes env_id, seed and options, got {sorted(unknown)}")
        seed, options = kwargs.get("seed"), kwargs.get("options")
        mask = np.zeros(self.env_num, dtype=bool)
        mask[ids] = True
        obs, infos = self.vector_env.reset(seed=[seed if m else None for m in mask], options={**(options or {}), "reset_mask": mask})
        obs, infos = to_numpy(obs), to_numpy(infos)
        obs_list = [get_row(obs, i) for i in ids]
        if isinstance(obs_list[0], tuple):
            raise TypeError("Tianshou's vector envs take no Tuple observation space: use an array or a Dict space")
        return _stack(obs_list), np.array([row_info(infos, i) for i in ids])

    def step(self, action: Any, id: int | list[int] | np.ndarray | None = None) -> tuple[np.ndarray, ...]:
        """Step the envs ``id`` (all: None) with one action each, in that order."""
        self._assert_is_not_closed()
        ids = [int(i) for i in self._wrap_id(id)]
        if action is None:
            raise ValueError("action must be not-None for non-async")
        if len(action) != len(ids):
            raise ValueError(f"step() needs one action per env of id ({len(ids)}), got {len(action)}")
        results = to_numpy(self._step(action, ids))
        obs, rewards, terminations, truncations, infos = results
        obs_list, info_list = [], []
        for pos, i in enumerate(ids):
            info = row_info(infos, pos)
            info.pop("env_ids", None)
            obs_list.append(get_row(obs, pos))
            info["env_id"] = i
            info_list.append(info)
        return (
            _stack(obs_list),
            np.stack([rewards[pos] for pos in range(len(ids))]),
            np.stack([terminations[pos] for pos in range(len(ids))]),
            np.stack([truncations[pos] for pos in range(len(ids))]),
            np.stack(info_list),
        )

    def _step(self, action: Any, ids: list[int]) -> tuple[Any, ...]:
        """The vector env's step of the envs ``ids``, rows in the order of ``ids``."""
        if ids == list(range(self.env_num)):
            return self.vector_env.step(action)
        send = getattr(self.vector_env, "send", None)
        if send is None:
            raise ValueError(f"{type(self.vector_env).__name__} steps all its envs at once; got id={ids}")
        send(np.asarray(action), env_ids=ids)
        rows: dict[int, tuple[Any, ...]] = {}
        while len(rows) < len(ids):
            obs, rewards, terminations, truncations, infos = self.vector_env.recv()
            for pos, i in enumerate(np.asarray(infos["env_ids"]).tolist()):
                rows[i] = (get_row(obs, pos), rewards[pos], terminations[pos], truncations[pos], row_info(infos, pos))
        ordered = [rows[i] for i in ids]
        infos_out: dict[str, Any] = {}
        for pos, row in enumerate(ordered):
            add_info(infos_out, row[4], pos, len(ids))
        obs_rows, rewards, terminations, truncations = ([row[k] for row in ordered] for k in range(4))
        return stack_rows(obs_rows), np.array(rewards), np.array(terminations), np.array(truncations), infos_out

    def render(self, **kwargs: Any) -> list[Any]:
        self._assert_is_not_closed()
        return list(self.vector_env.call("render", **kwargs))

    def close(self) -> None:
        self._assert_is_not_closed()
        self.vector_env.close()
        self.is_closed = True


def make_vec(env_id: str, num_envs: int, **kwargs: Any) -> TianshouVecEnv:
    """``gym.make_vec(env_id, num_envs, autoreset_mode=DISABLED, **kwargs)`` as a Tianshou vector env.

    Examples:
        >>> envs = make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True, camera_size=64)
    """
    return TianshouVecEnv(make_vector_env(env_id, num_envs, gym.vector.AutoresetMode.DISABLED, "fastenv.integrations.tianshou", WHY, **kwargs))


__all__ = ["TianshouVecEnv", "make_vec"]
__getattr__ = renamed(__name__, {"TianshouVectorEnv": ("TianshouVecEnv", TianshouVecEnv), "make_vec_env": ("make_vec", make_vec)})
