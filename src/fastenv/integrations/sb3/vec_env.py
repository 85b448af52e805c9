"""``SB3VecEnv``: a fastenv (or any Gymnasium SAME_STEP) vector env as an SB3 ``VecEnv``, and the
restart marks it sets on a transition a worker restart invented (``RESTART_KEY``)."""


from __future__ import annotations

import operator
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv._validation import BatchTypeError
from fastenv.core.arrays import to_numpy
from fastenv.core.infos import row_info
from fastenv.integrations._vector import FINAL_KEYS, require_autoreset

# stable_baselines3 is checked by the package (fastenv.integrations.sb3), which runs first

from stable_baselines3.common.env_util import is_wrapped  # noqa: E402
from stable_baselines3.common.vec_env import VecEnv  # noqa: E402
from stable_baselines3.common.vec_env.base_vec_env import (  # noqa: E402
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

RESTART_KEY = "worker_restarted"
_FIX = (
    "pass rollout_buffer_class=fastenv.integrations.sb3.RolloutBuffer (PPO, A2C) or "
    "replay_buffer_class=fastenv.integrations.sb3.ReplayBuffer (SAC, TD3, DDPG, DQN) to the model, and "
    "callback=fastenv.integrations.sb3.RestartMarksCallback() to learn(), to leave it out"
)


def unbatch_infos(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Gymnasium's batched infos (arrays plus ``_key`` masks) as one dict per env."""
    return [row_info(infos, i) for i in range(num_envs)]


def restarted_mask(infos: Sequence[Mapping[str, Any]], dones: Any) -> np.ndarray:
    """Which envs' transitions in SB3 ``infos`` a worker restart invented (done and marked)."""
    return np.array([bool(done) and bool(info.get(RESTART_KEY, False)) for info, done in zip(infos, dones)], dtype=bool)


def _is_batch(value: Any, space: spaces.Space, count: int) -> bool:
    """Whether ``value`` is shaped as a batch of ``count`` actions of ``space`` (not checked further)."""
    if isinstance(space, spaces.Dict):
        return isinstance(value, Mapping)
    if isinstance(space, spaces.Tuple):
        return (
            isinstance(value, (tuple, list))
            and len(value) == len(space.spaces)
            and all(_is_batch(v, sub, count) for v, sub in zip(value, space.spaces))
        )
    shape = getattr(value, "shape", None)  # (a tensor too)
    if shape is None:
        try:
            shape = np.shape(value)
        except (ValueError, TypeError):  # ragged: one env's tuple of actions, say
            return False
    return tuple(shape) == (count, *space.shape)


def _per_env_actions(actions: Any, space: spaces.Dict | spaces.Tuple, count: int) -> bool:
    """Whether ``actions`` for a Dict / Tuple ``space`` are one action per env (SB3's VecEnvs index
    them by env) rather than Gymnasium's batch (a dict / tuple of batches, which wins where both fit)."""
    if isinstance(actions, np.ndarray) and actions.dtype == object and actions.ndim == 1:
        return True
    if not isinstance(actions, (list, tuple)) or _is_batch(actions, space, count):
        return False
    single = Mapping if isinstance(space, spaces.Dict) else (tuple, list)
    return len(actions) > 0 and all(isinstance(action, single) for action in actions)


def _stack_actions(actions: Sequence[Any], space: spaces.Space, where: str = "actions") -> Any:
    """One action per env, as the batch a Gymnasium vector env takes (each leaf stacked, in the
    caller's dtype: the envs get their actions as SB3's DummyVecEnv hands them on)."""
    if isinstance(space, spaces.Dict):
        for i, action in enumerate(actions):
            if not isinstance(action, Mapping) or any(key not in action for key in space.spaces):
                raise BatchTypeError(f"{where}[{i}] must be a dict with the keys {list(space.spaces)}, got {action!r}")
        return {key: _stack_actions([a[key] for a in actions], sub, f"{where}[...][{key!r}]") for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        for i, action in enumerate(actions):
            if not isinstance(action, (tuple, list)) or len(action) != len(space.spaces):
                raise BatchTypeError(f"{where}[{i}] must be a tuple of {len(space.spaces)} actions, got {action!r}")
        return tuple(_stack_actions([a[j] for a in actions], sub, f"{where}[...][{j}]") for j, sub in enumerate(space.spaces))
    return np.stack([np.asarray(action) for action in actions])


class SB3VecEnv(VecEnv):
    """A Gymnasium vector env (SAME_STEP autoreset, e.g. ``PipelineVectorEnv``) as an SB3 ``VecEnv``.

    Tensors (ManiSkill on GPU) come out as numpy arrays. Each done env's info gets
    ``terminal_observation`` (its final observation) and
    ``TimeLimit.truncated`` (truncated and not terminated), which SB3 uses to bootstrap truncated
    episodes; the reset info goes to ``reset_infos``. ``get_attr``, ``set_attr``, ``env_method``
    and ``env_is_wrapped`` reach the envs in their workers. Wrap it in ``VecMonitor`` for episode
    statistics (``make_vec`` does).

    A transition a worker restart invented is reported as an episode end (done, truncated,
    ``terminal_observation`` the last observation seen) with ``info["worker_restarted"] = True``;
    train with this module's ``RolloutBuffer``/``ReplayBuffer`` and ``RestartMarksCallback`` to leave
    it out. It warns once about such a transition unless a ``RestartMarksCallback`` is training on it.

    Examples:
        >>> venv = SB3VecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2))
    """

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        require_autoreset(vector_env, gym.vector.AutoresetMode.SAME_STEP, "SB3VecEnv",
                          "SB3 reads an ended env's final observation from its step's info")
        self.vector_env = vector_env
        self._actions: np.ndarray | None = None
        space = vector_env.single_action_space
        self._structured = space if isinstance(space, (spaces.Dict, spaces.Tuple)) else None  # per-env actions get batched
        self._warned_restart = False
        self._left_out_by: Any = None  # the RestartMarksCallback training fastenv's buffers on it, while one does
        super().__init__(vector_env.num_envs, vector_env.single_observation_space, vector_env.single_action_space)

    # -- stepping -------------------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        seeds = list(self._seeds)
        options = self._options
        if all(option == options[0] for option in options):
            obs, infos = to_numpy(self.vector_env.reset(seed=seeds, options=dict(options[0]) or None))
        else:  # different options per env: one partial reset per distinct options dict
            obs, infos = None, {}
            for option in {repr(o): o for o in options}.values():
                mask = np.array([o == option for o in options])
                obs, part = to_numpy(self.vector_env.reset(
                    seed=[s if m else None for s, m in zip(seeds, mask)], options={**option, "reset_mask": mask}
                ))
                for i, info in enumerate(unbatch_infos(part, self.num_envs)):
                    if mask[i]:
                        self.reset_infos[i] = info
            self._reset_seeds()
            self._reset_options()
            return obs
        self.reset_infos = unbatch_infos(infos, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Actions: a batch (an array; a dict / tuple of batches for a Dict / Tuple space), or, as
        SB3's DummyVecEnv and SubprocVecEnv take them, a list of ``num_envs`` per-env actions."""
        if self._structured is not None and _per_env_actions(actions, self._structured, self.num_envs):
            if len(actions) != self.num_envs:
                raise BatchTypeError(f"actions must hold one action per env ({self.num_envs}), got {len(actions)}")
            actions = _stack_actions(actions, self._structured)
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminations, truncations, infos = to_numpy(self.vector_env.step(self._actions))
        dones = terminations | truncations
        per_env = unbatch_infos(infos, self.num_envs)
        out: list[dict[str, Any]] = []
        for i, info in enumerate(per_env):
            if dones[i]:
                # SAME_STEP: the top-level info is the reset's (plus the transition's STEP_KEYS);
                # the step's own is final_info.
                self.reset_infos[i] = {k: v for k, v in info.items() if k not in FINAL_KEYS}
                step_info = dict(info.get("final_info", {}))
                step_info["terminal_observation"] = info.get("final_obs")
                step_info["TimeLimit.truncated"] = bool(truncations[i] and not terminations[i])
                if info.get(RESTART_KEY, False):
                    step_info[RESTART_KEY] = True  # a plain bool, for `info.get(...) is True` checks
                out.append(step_info)
            else:
                info["TimeLimit.truncated"] = False
                out.append(info)
        if not self._warned_restart and any(info.get(RESTART_KEY) is True for info in out):
            self._warn_restart(out)
        return obs, np.asarray(rewards, dtype=np.float32), np.asarray(dones), out

    def _warn_restart(self, infos: list[dict[str, Any]]) -> None:
        if self._left_out_by is not None:
            return
        self._warned_restart = True
        envs = [i for i, info in enumerate(infos) if info.get(RESTART_KEY) is True]
        warnings.warn(
            f"a worker restart invented a transition for envs {envs} (an action that never ran, reported "
            f"done with reward 0 and info['{RESTART_KEY}'] = True); SB3 trains on it unless its buffer leaves "
            f"it out: {_FIX}. A loop of your own should leave out the transitions so marked.",
            UserWarning,
            stacklevel=3,
        )

    def close(self) -> None:
        self.vector_env.close()

    # -- attributes and methods -----------------------------------------------------------------
    def _ids(self, indices: VecEnvIndices) -> list[int]:
        """``indices`` as env ids; negative ones count from the end, as SB3's own VecEnvs index their envs."""
        ids = []
        for index in self._get_indices(indices):
            index = operator.index(index)
            if not -self.num_envs <= index < self.num_envs:
                raise IndexError(f"env index {index} is out of range for {self.num_envs} envs")
            ids.append(index % self.num_envs)
        return ids

    def _call(self, indices: VecEnvIndices, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        ids = self._ids(indices)
        call_at = getattr(self.vector_env, "call_at", None)
        if call_at is not None:
            return list(call_at(ids, name, *args, **kwargs))
        if ids != list(range(self.num_envs)):
            raise ValueError(f"{type(self.vector_env).__name__} can only call all its envs, got indices {ids}")
        return list(self.vector_env.call(name, *args, **kwargs))

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call(indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        ids = self._ids(indices)
        if sorted(ids) == list(range(self.num_envs)):
            self.vector_env.set_attr(attr_name, [value] * self.num_envs)
            return
        if getattr(self.vector_env, "call_at", None) is not None:  # fastenv's: only the envs asked for
            self.vector_env.call_at(ids, "set_wrapper_attr", attr_name, value)
            return
        # Gymnasium's vector envs set every env: the others get their own values back (so the
        # attribute must exist on them already).
        current = list(self.vector_env.get_attr(attr_name))
        for i in ids:
            current[i] = value
        self.vector_env.set_attr(attr_name, current)

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        return self._call(indices, method_name, *method_args, **method_kwargs)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        ids = self._ids(indices)
        apply = getattr(self.vector_env, "apply", None)
        if apply is not None:
            return list(apply(is_wrapped, wrapper_class, env_ids=ids))
        return [False] * len(ids)

    def get_images(self) -> Sequence[np.ndarray | None]:
        return list(self.vector_env.call("render"))


