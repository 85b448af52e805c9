"""PufferLib: a fastenv (or any NEXT_STEP Gymnasium) vector env as a ``pufferlib.vector`` backend.

PufferLib 3 vectorizes a Gymnasium env by wrapping each copy in ``pufferlib.emulation.GymnasiumPufferEnv``
and running the copies in its ``Serial`` or ``Multiprocessing`` backend (``pufferlib.vector.make``).
Its training loop (``pufferl``) talks to the backend through ``async_reset(seed)``, ``send(actions)``
and ``recv()``, which returns ``(observations, rewards, terminals, truncations, teacher_actions,
infos, agent_ids, masks)``; ``reset``/``step`` are PufferLib's module functions over those. What a
backend hands on is PufferLib's own convention:

- An env resets itself on the step after its episode ended (Gymnasium's NEXT_STEP autoreset): the
  step that ends an episode returns its final observation with its reward and ``terminals`` or
  ``truncations`` set; the next step runs no action on that env and returns the reset's
  observation, reward 0, neither flag set. The final observation is kept, and one step per episode
  is no transition (pufferl learns from it as from any other step).
- Observations are ``GymnasiumPufferEnv``'s emulation: a Box as it is, any other space packed into
  one flat array (``pufferlib.emulation.emulate_observation_space``); rewards are float32.
- ``infos`` is a flat list: at a reset, every env's reset info; at a step, only the non-empty infos,
  in env order, with nothing saying which env each came from.
- The arrays returned are the backend's own buffers, written over by the next ``recv``: copy
  what you keep.
- Env i is seeded with ``seed + i`` at ``async_reset(seed)`` (later resets continue the envs'
  generators), as ``Serial`` does and ``Multiprocessing`` with one env per worker (its default);
  with several envs per worker, ``Multiprocessing`` seeds worker w's env j with ``seed + w + j``.

``PufferLibVecEnv`` gives a fastenv vector env in NEXT_STEP mode exactly that interface, so what
PufferLib collects on it equals what it collects with ``pufferlib.vector.make(GymnasiumPufferEnv
creators, backend=Serial or Multiprocessing)`` over the same envs, seeds and actions; on LIBERO,
``Multiprocessing`` over LIBERO's own env, chunk 1 and chunk 8 (``tests/test_pufferlib.py``)::

    envs = make_vec("fastenv/Libero-v0", 8, num_workers=2, chunk=8, camera_size=64, flatten=True)
    envs.async_reset(seed=0)
    obs, rewards, terminals, truncations, _, infos, agent_ids, masks = envs.recv()

Every ``recv`` returns the whole batch (``Multiprocessing``'s ``batch_size`` equal to ``num_envs``,
its default); actions are Box, Discrete or MultiDiscrete. PufferLib's trainer (``pufferl.PuffeRL``)
needs its compiled extension ``pufferlib._C``; the vectorization does not.

pufferlib-core 3.0.23 pins ``torch==2.9.0`` for that extension: install it without its pins,
``pip install --no-deps pufferlib-core==3.0.23`` (``scripts/setup.sh`` does, with the
``pufferlib`` extra).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np

from fastenv._deps import require
from fastenv.core.arrays import to_numpy
from fastenv.core.infos import row_info
from fastenv.integrations._vector import make_vector_env, renamed, require_autoreset

require("pufferlib", "pufferlib", "PufferLib (pufferlib-core)")

import pufferlib  # noqa: E402
import pufferlib.emulation  # noqa: E402
import pufferlib.spaces  # noqa: E402
import pufferlib.vector  # noqa: E402

_WHY = "PufferLib resets an ended env on its next step"


class _DriverEnv:
    """What PufferLib's policies read of ``vecenv.driver_env`` (one env: its spaces, its emulation,
    and ``env``, the unemulated spaces, where ``GymnasiumPufferEnv`` keeps the Gymnasium env)."""

    num_agents = 1

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, native: SimpleNamespace, emulated: dict) -> None:
        self.single_observation_space = self.observation_space = observation_space
        self.single_action_space = self.action_space = action_space
        self.env = native
        self.emulated = emulated


class PufferLibVecEnv:
    """A Gymnasium vector env with NEXT_STEP autoreset (e.g. ``PipelineVectorEnv``) as a
    ``pufferlib.vector`` backend: ``async_reset``/``send``/``recv``, ``reset``/``step``, the
    buffers, spaces and ``driver_env`` of ``Serial`` and ``Multiprocessing``.

    Args:
        vector_env: the vector env, in NEXT_STEP autoreset mode; it is closed with this one.

    Examples:
        >>> envs = PufferLibVecEnv(gym.make_vec("fastenv/Libero-v0", 4, flatten=True, autoreset_mode="NextStep"))
        >>> obs, infos = envs.reset(seed=0)
    """

    reset = pufferlib.vector.reset
    step = pufferlib.vector.step

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        require_autoreset(vector_env, gym.vector.AutoresetMode.NEXT_STEP, "PufferLibVecEnv", _WHY)
        obs_space, atn_space = vector_env.single_observation_space, vector_env.single_action_space
        if not isinstance(atn_space, (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            raise ValueError(f"PufferLibVecEnv takes Box, Discrete or MultiDiscrete actions, got {atn_space}")
        self.vector_env = vector_env
        self.single_observation_space, self.obs_dtype = pufferlib.emulation.emulate_observation_space(obs_space)
        self.single_action_space, _ = pufferlib.emulation.emulate_action_space(atn_space)
        self.emulated = dict(observation_dtype=self.single_observation_space.dtype, emulated_observation_dtype=self.obs_dtype)
        self.driver_env = _DriverEnv(self.single_observation_space, self.single_action_space,
                                     SimpleNamespace(observation_space=obs_space, action_space=atn_space), self.emulated)
        self.agents_per_batch = self.num_agents = vector_env.num_envs
        self.action_space = pufferlib.spaces.joint_space(self.single_action_space, self.num_agents)
        self.observation_space = pufferlib.spaces.joint_space(self.single_observation_space, self.num_agents)
        pufferlib.set_buffers(self)  # observations, rewards, terminals, truncations, masks, actions, teacher_actions
        # GymnasiumPufferEnv writes a Box observation as it is and packs any other into the flat buffer.
        self._obs_struct = None if self.single_observation_space is obs_space else self.observations.view(self.obs_dtype)[:, 0]
        self.agent_ids = np.arange(self.num_agents)
        self.infos: list[dict[str, Any]] = []
        self.initialized = False
        self.flag = pufferlib.vector.RESET

    @property
    def num_envs(self) -> int:
        return self.agents_per_batch

    def _write(self, obs: Any, rewards: Any, terminals: Any, truncations: Any) -> None:
        if self._obs_struct is None:
            self.observations[:] = obs
        else:
            pufferlib.emulation.emulate(self._obs_struct, obs)
        self.rewards[:] = rewards
        self.terminals[:] = terminals
        self.truncations[:] = truncations
        self.masks[:] = True

    def _row_infos(self, infos: dict[str, Any]) -> list[dict[str, Any]]:
        return [row_info(infos, i) for i in range(self.num_agents)]

    def async_reset(self, seed: int | None = 0) -> None:
        """Reset every env (env i with ``seed + i``; None: unseeded); ``recv()`` returns the result."""
        self.flag = pufferlib.vector.RECV
        obs, infos = to_numpy(self.vector_env.reset(seed=seed))
        self._write(obs, 0.0, False, False)
        self.infos = self._row_infos(infos)  # every env's, empty ones too, as Serial.async_reset lists them

    def send(self, actions: Any) -> None:
        """Step every env with ``actions`` (an env whose episode ended last step resets instead)."""
        actions = pufferlib.vector.send_precheck(self, actions)
        self.actions[:] = actions.reshape(self.actions.shape)  # cast to the action buffer, as Multiprocessing's
        obs, rewards, terminals, truncations, infos = to_numpy(self.vector_env.step(self.actions.copy()))
        self._write(obs, rewards, terminals, truncations)
        self.infos = [info for info in self._row_infos(infos) if info]  # Serial.send keeps the non-empty ones

    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], np.ndarray, np.ndarray]:
        """``(observations, rewards, terminals, truncations, teacher_actions, infos, agent_ids, masks)``
        of the last ``async_reset`` or ``send``: the buffers themselves, written over by the next."""
        pufferlib.vector.recv_precheck(self)
        return (self.observations, self.rewards, self.terminals, self.truncations, self.teacher_actions,
                self.infos, self.agent_ids, self.masks)

    def close(self) -> None:
        self.vector_env.close()

    def __enter__(self) -> PufferLibVecEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def make_vec(env_id: str, num_envs: int = 1, **make_kwargs: Any) -> PufferLibVecEnv:
    """``gym.make_vec(env_id, num_envs, autoreset_mode=NEXT_STEP, **make_kwargs)`` as a PufferLib
    backend, where PufferLib's users call ``pufferlib.vector.make(...)``.

    Examples:
        >>> envs = make_vec("fastenv/Libero-v0", 8, num_workers=2, chunk=8, camera_size=64, flatten=True)
    """
    return PufferLibVecEnv(make_vector_env(env_id, num_envs, gym.vector.AutoresetMode.NEXT_STEP, "PufferLibVecEnv", _WHY, **make_kwargs))


__all__ = ["PufferLibVecEnv", "make_vec"]
__getattr__ = renamed(__name__, {"PufferVecEnv": ("PufferLibVecEnv", PufferLibVecEnv), "make": ("make_vec", make_vec)})
