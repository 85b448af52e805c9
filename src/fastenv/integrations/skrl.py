"""skrl: what its trainers collect from a Gymnasium vector env, and an opt-in fix for truncations.

skrl's ``wrap_env`` takes a fastenv vector env as it takes Gymnasium's (``GymnasiumWrapper``), and
its ``SequentialTrainer`` with more than one env never resets: the observation it acts on next is
the ``next_observations`` of the step before. What a transition bootstraps from therefore depends
on the vector env's autoreset mode, on fastenv's as on Gymnasium's:

* ``NEXT_STEP`` (Gymnasium's default, what skrl's examples build with ``gym.make_vec(...,
  vectorization_mode="sync")``): an episode's last step is recorded with its final observation,
  and the step after it with one that never happened: the final observation, an action the env
  ignored, reward 0, not done. That is skrl's default data; fastenv in ``NEXT_STEP`` gives the same.
* ``SAME_STEP`` (fastenv's default): no transition is invented, but ``next_observations`` of an
  env whose episode ended is the new episode's first observation, so a truncated episode
  bootstraps from V(reset observation), with ``time_limit_bootstrap`` as without it.

``PPO`` here (and ``FinalObservationBootstrap`` for other skrl agents) reads ``infos["final_obs"]``
of a ``SAME_STEP`` vector env: the agent records each ended env's final observation as its
``next_observations``, so truncations bootstrap from V(final observation) and no transition is
invented. It is opt-in; without it, the agent gets what skrl gives::

    agent = fastenv.integrations.skrl.PPO(models=models, memory=memory, cfg=cfg, ...)  # cfg.time_limit_bootstrap = True

Importing this module needs ``pip install -e ".[skrl]"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector.utils import concatenate, create_empty_array

from fastenv._deps import require
from fastenv.core.infos import final_observations

require("skrl", "skrl", "skrl")

from skrl.agents.torch.ppo import PPO as _SkrlPPO  # noqa: E402
from skrl.utils.spaces.torch import flatten_tensorized_space, tensorize_space  # noqa: E402


class FinalObservationBootstrap:
    """A mixin for a skrl agent: an env whose episode ended gets its final observation as
    ``next_observations`` (from ``infos["final_obs"]`` of a ``SAME_STEP`` vector env).

    Put it before the agent class: ``class SAC(FinalObservationBootstrap, skrl.agents.torch.sac.SAC)``.
    The observation the trainer acts on next stays the reset one; only what the agent records
    (and bootstraps from) changes. A step without ``final_obs`` (no episode ended, or another
    autoreset mode) is recorded as it comes.
    """

    observation_space: Any
    device: Any

    def record_transition(self, *, next_observations: Any, infos: Any, **kwargs: Any) -> None:
        if isinstance(infos, Mapping):
            ids, finals = final_observations(infos)
            if len(ids):
                batch = concatenate(self.observation_space, finals, create_empty_array(self.observation_space, len(ids)))
                rows = flatten_tensorized_space(tensorize_space(self.observation_space, batch, device=self.device))
                next_observations = next_observations.clone()  # the trainer's own tensor is its next input
                next_observations[np.asarray(ids)] = rows.to(next_observations.dtype)
        super().record_transition(next_observations=next_observations, infos=infos, **kwargs)  # type: ignore[misc]


class PPO(FinalObservationBootstrap, _SkrlPPO):
    """skrl's PPO whose truncated episodes bootstrap from V(final observation) on a ``SAME_STEP``
    vector env (fastenv's default). Needs ``cfg.time_limit_bootstrap = True``: without it skrl's
    GAE goes on through a truncation into the next row, the new episode's first value.

    Examples:
        >>> cfg = PPO_CFG(time_limit_bootstrap=True)
        >>> agent = PPO(models=models, memory=memory, cfg=cfg, observation_space=env.observation_space,
        ...             action_space=env.action_space, device=env.device)
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not self.cfg.time_limit_bootstrap:
            raise ValueError(
                "fastenv.integrations.skrl.PPO bootstraps truncations from the final observation, which needs "
                "cfg.time_limit_bootstrap=True; got time_limit_bootstrap=False (skrl's default)"
            )


def make_vec(env_id: str, num_envs: int, **kwargs: Any) -> Any:
    """``gym.make_vec(env_id, num_envs, **kwargs)`` through skrl's ``wrap_env`` (its Gymnasium
    wrapper, torch tensors). fastenv's default autoreset mode, ``SAME_STEP``, is the one ``PPO``
    here reads final observations from; ``autoreset_mode="NextStep"`` gives skrl's default data.

    Examples:
        >>> env = make_vec("fastenv/Libero-v0", 4, num_workers=2, flatten=True, camera_size=64)
    """
    from skrl.envs.wrappers.torch import wrap_env

    if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    return wrap_env(gym.make_vec(env_id, num_envs=int(num_envs), **kwargs), wrapper="gymnasium")


__all__ = ["PPO", "FinalObservationBootstrap", "make_vec"]
