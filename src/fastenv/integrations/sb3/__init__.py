"""Stable-Baselines3: a fastenv (or any Gymnasium) vector env as an SB3 ``VecEnv``, and buffers
that keep the transitions a worker restart invented out of SB3's training data.

When a worker process dies, its envs come back reset and each reports a transition whose action
never ran (reward 0, truncated, ``info["worker_restarted"]``). A VecEnv must return every env on
every step, so ``SB3VecEnv`` reports it as an episode end and marks it; the buffers below (drop-in
subclasses of SB3's) leave marked transitions out, and behave exactly like SB3's otherwise.
``RestartMarksCallback`` goes with them: SB3 hands its callbacks each step's infos (``locals``)
before it adds the step to the buffer, and PPO's ``RolloutBuffer.add`` gets no infos of its own::

    PPO("MultiInputPolicy", venv, rollout_buffer_class=RolloutBuffer).learn(n, callback=RestartMarksCallback())
    SAC("MultiInputPolicy", venv, replay_buffer_class=ReplayBuffer).learn(n, callback=RestartMarksCallback())

What still sees a restart, and why: the step counts in ``num_timesteps`` and holds a slot of the
rollout or replay buffer (the VecEnv answers for every env); callbacks see its marked info;
off-policy algorithms count it as an episode end (``_episode_num``, action noise reset); PPO's
logged ``explained_variance`` includes it (its return equals its value). A ``VecNormalize`` above
adds the invented reward 0 to its running return once (its observation statistics only see the
new episode's first observation). This package's ``VecMonitor`` (``make_vec``'s) neither
counts the invented step nor logs the episode it cut; SB3's own logs it, one step longer.

One concern a module: ``vec_env`` (``SB3VecEnv``), ``buffers`` (the buffers and
``RestartMarksCallback``), ``monitor`` (``VecMonitor``); their names are all here.

Importing this package needs ``pip install -e ".[sb3]"``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from fastenv._deps import require

require("stable_baselines3", "sb3", "Stable-Baselines3")

from stable_baselines3.common.vec_env import VecEnv  # noqa: E402

from fastenv.core.arrays import to_numpy  # noqa: E402
from fastenv.integrations._vector import renamed  # noqa: E402
from fastenv.integrations.sb3.buffers import (  # noqa: E402
    DictReplayBuffer,
    DictRolloutBuffer,
    ReplayBuffer,
    RestartMarksCallback,
    RolloutBuffer,
)
from fastenv.integrations.sb3.monitor import VecMonitor  # noqa: E402
from fastenv.integrations.sb3.vec_env import (  # noqa: E402
    RESTART_KEY,
    SB3VecEnv,
    restarted_mask,
    unbatch_infos,
)


def make_vec(env_id: str, num_envs: int, *, monitor: bool = True, **kwargs: Any) -> VecEnv:
    """``gym.make_vec(env_id, num_envs, **kwargs)`` as an SB3 VecEnv, with this package's ``VecMonitor`` by default.

    Train on it with ``rollout_buffer_class=RolloutBuffer`` (PPO, A2C) or
    ``replay_buffer_class=ReplayBuffer`` (off-policy), and ``callback=RestartMarksCallback()`` in
    ``learn()``, so that transitions a worker restart invented stay out of the training data. The
    ``VecMonitor`` counts an episode's length in steps of this VecEnv, as SB3 does: with
    ``chunk=K`` its ``ep_len_mean`` counts chunks (multiply by K for simulator steps).

    Examples:
        >>> venv = make_vec("fastenv/Libero-v0", 4, num_workers=2, chunk=8, camera_size=64)
        >>> model = PPO("MultiInputPolicy", venv, rollout_buffer_class=RolloutBuffer)
        >>> model.learn(2048, callback=RestartMarksCallback())
    """
    venv: VecEnv = SB3VecEnv(gym.make_vec(env_id, num_envs=num_envs, **kwargs))
    return VecMonitor(venv) if monitor else venv


__all__ = [
    "DictReplayBuffer",
    "DictRolloutBuffer",
    "RESTART_KEY",
    "ReplayBuffer",
    "RestartMarksCallback",
    "RolloutBuffer",
    "SB3VecEnv",
    "VecMonitor",
    "make_vec",
    "restarted_mask",
    "to_numpy",
    "unbatch_infos",
]
__getattr__ = renamed(__name__, {"make_vec_env": ("make_vec", make_vec)})
