"""TorchRL: a fastenv vector env as a TorchRL env.

TorchRL's ``GymWrapper`` takes a Gymnasium vector env in one of two autoreset modes. With
``SAME_STEP`` it reads ``info["final_obs"]`` into the step's ``("next", ...)`` data and keeps
the reset observation for the ``reset()`` its collector calls next; it fails on infos whose
keys differ between reset and step (``KeyError`` in ``VecGymEnvTransform``) and does not read
the final observation of a ``Dict`` observation space (TorchRL 0.14). With ``DISABLED`` (the
mode TorchRL prefers) a step returns an ended env's final observation as its own, and TorchRL
resets the envs that ended through ``reset(options={"reset_mask": ...})``, the way its
``SerialEnv``/``ParallelEnv`` reset each env, so nothing is read from infos.

fastenv's vector env has that mode of its own (``autoreset_mode=DISABLED``: an ended env waits
for the caller's reset, and a step sent to it before is refused). ``make_vec`` builds the vector
env in it and hands it to ``GymWrapper``. The data a TorchRL collector gathers is then the data it
gathers on TorchRL's ``SerialEnv`` over the single envs (same seeds, same actions), and on LIBERO
the data it gathers on ``ParallelEnv`` over LIBERO's own env, each in a process of its own (both
tested bit for bit, ``tests/test_torchrl.py``)::

    env = fastenv.integrations.torchrl.make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True)

Importing this module needs ``pip install -e ".[torchrl]"``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode

from fastenv._deps import require
from fastenv.backends._gl import configure_mujoco_gl
from fastenv.integrations._vector import make_vector_env, renamed, require_autoreset

configure_mujoco_gl()  # TorchRL's import loads MuJoCo: LIBERO's headless GL platform is chosen first
require("torchrl", "torchrl", "TorchRL")

WHY = "TorchRL resets the envs that ended itself, through reset(options={'reset_mask': ...})"


def wrap(vector_env: gym.vector.VectorEnv, **kwargs: Any) -> Any:
    """TorchRL's ``GymWrapper`` over ``vector_env``, which must autoreset in the ``DISABLED`` mode
    (``metadata["autoreset_mode"]``; a Gymnasium vector wrapper over it is given the
    ``autoreset_mode`` attribute TorchRL reads); ``kwargs`` go to ``GymWrapper`` (``device``,
    ``categorical_action_encoding``, ...).

    Examples:
        >>> venv = gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2, autoreset_mode="Disabled")
        >>> env = wrap(venv, device="cpu")
    """
    require_autoreset(vector_env, AutoresetMode.DISABLED, "fastenv.integrations.torchrl.wrap", WHY)
    from torchrl.envs import GymWrapper

    if getattr(vector_env, "autoreset_mode", None) is None:
        # TorchRL reads the mode from this attribute, which Gymnasium's vector wrappers do not pass on
        vector_env.autoreset_mode = AutoresetMode.DISABLED

    return GymWrapper(vector_env, **kwargs)


def make_vec(env_id: str, num_envs: int, *, device: Any = None, **kwargs: Any) -> Any:
    """``gym.make_vec(env_id, num_envs, autoreset_mode=DISABLED, **kwargs)`` as a TorchRL env
    (batch size ``[num_envs]``).

    ``kwargs`` takes the env's options and the vector env's (``num_workers``, ...). With
    ``chunk=K`` one TorchRL step is K simulator steps: ``frames_per_batch`` and
    ``total_frames`` count chunks, and the discount applies once per chunk.

    Examples:
        >>> env = make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True, camera_size=64)
        >>> collector = SyncDataCollector(env, policy, frames_per_batch=64, total_frames=1024)
    """
    return wrap(make_vector_env(env_id, num_envs, AutoresetMode.DISABLED, "fastenv.integrations.torchrl", WHY, **kwargs), device=device)


__all__ = ["make_vec", "wrap"]

_renamed = renamed(__name__, {"make_env": ("make_vec", make_vec)})


def __getattr__(name: str) -> Any:
    if name in ("TorchRLVecEnv", "ResetOnRequest"):  # a wrapper that held each autoreset until asked
        raise AttributeError(
            f"{__name__}.{name} is gone: fastenv's vector env waits for TorchRL's reset itself. Build it with "
            "gym.make_vec(..., autoreset_mode='Disabled') and pass it to wrap(), or call make_vec(), which does both"
        )
    return _renamed(name)
