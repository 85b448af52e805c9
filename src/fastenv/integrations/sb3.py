"""Stable-Baselines3: a fastenv (or any Gymnasium) vector env as an SB3 ``VecEnv``.

Importing this module needs ``pip install "fastenv[sb3]"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from fastenv._deps import require
from fastenv.core.infos import STEP_KEYS, row_info

require("stable_baselines3", "sb3", "Stable-Baselines3")

from stable_baselines3.common.env_util import is_wrapped  # noqa: E402
from stable_baselines3.common.vec_env import VecEnv, VecMonitor  # noqa: E402
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn  # noqa: E402


def to_numpy(value: Any) -> Any:
    """``value`` with every tensor in it (dicts, tuples, object arrays) as a numpy array."""
    if isinstance(value, dict):
        return {key: to_numpy(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(to_numpy(item) for item in value)
    if isinstance(value, np.ndarray) and value.dtype == object:
        out = np.empty(value.shape, dtype=object)
        for index, item in np.ndenumerate(value):
            out[index] = to_numpy(item)
        return out
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, on any device
        return value.detach().cpu().numpy()
    return value


def unbatch_infos(infos: dict[str, Any], num_envs: int) -> list[dict[str, Any]]:
    """Gymnasium's batched infos (arrays plus ``_key`` masks) as one dict per env."""
    return [row_info(infos, i) for i in range(num_envs)]


class SB3VecEnv(VecEnv):
    """A Gymnasium vector env (SAME_STEP autoreset, e.g. ``PipelineVectorEnv``) as an SB3 ``VecEnv``.

    Tensors (ManiSkill on GPU) come out as numpy arrays. Each done env's info gets
    ``terminal_observation`` (its final observation) and
    ``TimeLimit.truncated`` (truncated and not terminated), which SB3 uses to bootstrap truncated
    episodes; the reset info goes to ``reset_infos``. ``get_attr``, ``set_attr``, ``env_method``
    and ``env_is_wrapped`` reach the envs in their workers. Wrap it in ``VecMonitor`` for episode
    statistics (``make_vec_env`` does).

    Example:
        >>> venv = SB3VecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2))
    """

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        mode = vector_env.metadata.get("autoreset_mode")
        if mode is not None and mode != gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError(f"SB3VecEnv needs a vector env with SAME_STEP autoreset, got {mode}")
        self.vector_env = vector_env
        self._actions: np.ndarray | None = None
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
                self.reset_infos[i] = {k: v for k, v in info.items() if k not in ("final_obs", "final_info", *STEP_KEYS)}
                step_info = dict(info.get("final_info", {}))
                step_info["terminal_observation"] = info.get("final_obs")
                step_info["TimeLimit.truncated"] = bool(truncations[i] and not terminations[i])
                out.append(step_info)
            else:
                info["TimeLimit.truncated"] = False
                out.append(info)
        return obs, np.asarray(rewards, dtype=np.float32), np.asarray(dones), out

    def close(self) -> None:
        self.vector_env.close()

    # -- attributes and methods -----------------------------------------------------------------
    def _ids(self, indices: VecEnvIndices) -> list[int]:
        return list(self._get_indices(indices))

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
        current = list(self.vector_env.get_attr(attr_name)) if ids != list(range(self.num_envs)) else [None] * self.num_envs
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


def make_vec_env(env_id: str, num_envs: int, *, monitor: bool = True, **kwargs: Any) -> VecEnv:
    """``gym.make_vec(env_id, num_envs, **kwargs)`` as an SB3 VecEnv, with ``VecMonitor`` by default.

    Example:
        >>> venv = make_vec_env("fastenv/Libero-v0", 4, num_workers=2, chunk=8, camera_size=64)
    """
    venv: VecEnv = SB3VecEnv(gym.make_vec(env_id, num_envs=num_envs, **kwargs))
    return VecMonitor(venv) if monitor else venv


__all__ = ["SB3VecEnv", "make_vec_env", "to_numpy", "unbatch_infos"]
