"""TorchRL: a fastenv (or any same-step autoreset Gymnasium) vector env as a TorchRL env.

TorchRL's ``GymWrapper`` takes a Gymnasium vector env in one of two autoreset modes. With
``SAME_STEP`` it reads ``info["final_obs"]`` into the step's ``("next", ...)`` data and keeps
the reset observation for the ``reset()`` its collector calls next; it fails on infos whose
keys differ between reset and step (``KeyError`` in ``VecGymEnvTransform``) and does not read
the final observation of a ``Dict`` observation space (TorchRL 0.14). With ``DISABLED`` (the
mode TorchRL prefers) it resets the envs that ended through ``reset(options={"reset_mask": ...})``,
the way its ``SerialEnv``/``ParallelEnv`` reset each env, so nothing is read from infos.

``TorchRLVecEnv`` presents a ``SAME_STEP`` vector env in the ``DISABLED`` mode: a step returns
the final observation (and the step's own info) of an env whose episode ended, and the reset the
vector env already ran is handed over when TorchRL asks for it. The data a TorchRL collector
gathers is then the data it gathers on TorchRL's ``SerialEnv`` over the single envs (same seeds,
same actions), and on LIBERO the data it gathers on ``ParallelEnv`` over LIBERO's own env, each
in a process of its own (both tested bit for bit)::

    env = fastenv.integrations.torchrl.make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True)

Importing this module needs ``pip install -e ".[torchrl]"``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from fastenv._deps import require
from fastenv._validation import BatchTypeError
from fastenv.backends._gl import configure_mujoco_gl
from fastenv.core.arrays import get_row, put_rows, tree_map
from fastenv.core.infos import add_info, row_info
from fastenv.integrations._vector import (
    per_env_seeds,
    renamed,
    require_autoreset,
    split_same_step,
)

configure_mujoco_gl()  # TorchRL's import loads MuJoCo: LIBERO's headless GL platform is chosen first
require("torchrl", "torchrl", "TorchRL")


def _copy(value: Any) -> Any:
    """A batch the caller may keep: numpy arrays and tensors copied (the env may reuse its buffers)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    clone = getattr(value, "clone", None)  # a torch tensor
    return clone() if clone is not None else value


class TorchRLVecEnv(gym.vector.VectorWrapper):
    """A ``SAME_STEP`` vector env seen as ``AutoresetMode.DISABLED``: episode ends wait for ``reset``.

    ``step`` returns, for an env whose episode ended, its final observation and its step's info
    (as Gymnasium's ``DISABLED`` mode does); the reset the vector env already ran is kept and
    returned by the next ``reset(options={"reset_mask": mask})`` that selects the env. A reset
    with a seed or options for such an env resets it again, as asked. Stepping before the envs
    that ended are reset raises, as the ``DISABLED`` contract requires.

    Examples:
        >>> envs = TorchRLVecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2))
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        require_autoreset(env, AutoresetMode.SAME_STEP, "TorchRLVecEnv", "it holds an ended env's reset until TorchRL asks for it")
        super().__init__(env)
        self.metadata = {**env.metadata, "autoreset_mode": AutoresetMode.DISABLED}
        self.autoreset_mode = AutoresetMode.DISABLED  # what TorchRL's GymWrapper reads
        n = env.num_envs
        self._waiting = np.zeros(n, dtype=bool)  # ended, reset by the env, not yet by the caller
        self._reset_obs: list[Any] = [None] * n
        self._reset_info: list[dict[str, Any]] = [{} for _ in range(n)]
        self._obs: Any = None

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        options = dict(options) if options else {}  # the caller's dict stays as it was
        mask = options.pop("reset_mask", None)
        n = self.num_envs
        if mask is None:
            obs, infos = self.env.reset(seed=seed, options=options or None)
            self._waiting[:] = False
            self._obs = tree_map(_copy, obs)
            return obs, infos
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
            raise BatchTypeError(f"options['reset_mask'] must be a bool numpy array of shape ({n},), got {mask!r}")
        if not mask.any():
            raise ValueError("options['reset_mask'] must select at least one env")
        seeds = per_env_seeds(seed, n)
        # An env that ended was reset by the vector env (no seed, no options): that reset is its own.
        kept = mask & self._waiting & np.array([s is None for s in seeds]) & (not options)
        fresh = mask & ~kept
        infos: dict[str, Any] = {}
        if fresh.any():
            obs, fresh_infos = self.env.reset(seed=[s if f else None for s, f in zip(seeds, fresh)], options={**options, "reset_mask": fresh})
            for i in np.flatnonzero(fresh).tolist():
                put_rows(self._obs, i, get_row(obs, i))
                add_info(infos, row_info(fresh_infos, i), i, n)
        for i in np.flatnonzero(kept).tolist():
            put_rows(self._obs, i, self._reset_obs[i])
            add_info(infos, self._reset_info[i], i, n)
            self._reset_obs[i] = None
        self._waiting[mask] = False
        return tree_map(_copy, self._obs), infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self._waiting.any():
            raise RuntimeError(
                f"envs {np.flatnonzero(self._waiting).tolist()} ended in the last step: reset them "
                "(reset(options={'reset_mask': mask})) before stepping again, as AutoresetMode.DISABLED requires"
            )
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        ended = np.flatnonzero(np.asarray(terminations) | np.asarray(truncations)).tolist()
        if not ended:
            self._obs = tree_map(_copy, obs)
            return obs, rewards, terminations, truncations, infos
        obs = tree_map(_copy, obs)
        step_infos: dict[str, Any] = {}
        for i in range(self.num_envs):
            info = row_info(infos, i)
            if i in ended:
                self._reset_obs[i] = get_row(obs, i)
                self._reset_info[i], final_obs, info = split_same_step(info)
                put_rows(obs, i, final_obs)
                self._waiting[i] = True
            add_info(step_infos, info, i, self.num_envs)
        self._obs = tree_map(_copy, obs)
        return obs, rewards, terminations, truncations, step_infos


def wrap(vector_env: gym.vector.VectorEnv, **kwargs: Any) -> Any:
    """TorchRL's ``GymWrapper`` over ``TorchRLVecEnv(vector_env)``; ``kwargs`` go to ``GymWrapper``
    (``device``, ``categorical_action_encoding``, ...).

    Examples:
        >>> env = wrap(gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2), device="cpu")
    """
    from torchrl.envs import GymWrapper

    return GymWrapper(TorchRLVecEnv(vector_env), **kwargs)


def make_vec(env_id: str, num_envs: int, *, device: Any = None, **kwargs: Any) -> Any:
    """``gym.make_vec(env_id, num_envs, **kwargs)`` as a TorchRL env (batch size ``[num_envs]``).

    ``kwargs`` takes the env's options and the vector env's (``num_workers``, ...). With
    ``chunk=K`` one TorchRL step is K simulator steps: ``frames_per_batch`` and
    ``total_frames`` count chunks, and the discount applies once per chunk.

    Examples:
        >>> env = make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True, camera_size=64)
        >>> collector = SyncDataCollector(env, policy, frames_per_batch=64, total_frames=1024)
    """
    return wrap(gym.make_vec(env_id, num_envs=num_envs, **kwargs), device=device)


__all__ = ["TorchRLVecEnv", "make_vec", "wrap"]
__getattr__ = renamed(__name__, {"ResetOnRequest": ("TorchRLVecEnv", TorchRLVecEnv), "make_env": ("make_vec", make_vec)})
