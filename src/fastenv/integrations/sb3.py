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
new episode's first observation). This module's ``VecMonitor`` (``make_vec_env``'s) neither
counts the invented step nor logs the episode it cut; SB3's own logs it, one step longer.

Importing this module needs ``pip install -e ".[sb3]"``.
"""

from __future__ import annotations

import operator
import time
import warnings
from collections.abc import Generator, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv._deps import require
from fastenv._validation import BatchTypeError
from fastenv.core.arrays import to_numpy
from fastenv.core.infos import STEP_KEYS, row_info

require("stable_baselines3", "sb3", "Stable-Baselines3")

from stable_baselines3.common import buffers as _sb3_buffers  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import is_wrapped  # noqa: E402
from stable_baselines3.common.type_aliases import (  # noqa: E402
    DictReplayBufferSamples,
    DictRolloutBufferSamples,
    ReplayBufferSamples,
    RolloutBufferSamples,
)
from stable_baselines3.common.vec_env import VecEnv, VecNormalize  # noqa: E402
from stable_baselines3.common.vec_env import VecMonitor as _SB3VecMonitor  # noqa: E402
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
    statistics (``make_vec_env`` does).

    A transition a worker restart invented is reported as an episode end (done, truncated,
    ``terminal_observation`` the last observation seen) with ``info["worker_restarted"] = True``;
    train with this module's ``RolloutBuffer``/``ReplayBuffer`` and ``RestartMarksCallback`` to leave
    it out. It warns once about such a transition unless a ``RestartMarksCallback`` is training on it.

    Examples:
        >>> venv = SB3VecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2))
    """

    def __init__(self, vector_env: gym.vector.VectorEnv) -> None:
        mode = vector_env.metadata.get("autoreset_mode")
        if mode is not None and mode != gym.vector.AutoresetMode.SAME_STEP:
            raise ValueError(f"SB3VecEnv needs a vector env with SAME_STEP autoreset, got {mode}")
        self.vector_env = vector_env
        self._actions: np.ndarray | None = None
        space = vector_env.single_action_space
        self._structured = space if isinstance(space, (spaces.Dict, spaces.Tuple)) else None  # per-env actions get batched
        self._warned_restart = False
        self._left_out_by: RestartMarksCallback | None = None  # set while one trains fastenv's buffers on it
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
                self.reset_infos[i] = {k: v for k, v in info.items() if k not in ("final_obs", "final_info", *STEP_KEYS)}
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


# -- buffers that leave out what a worker restart invented -------------------------------------
def _is_dict_space(args: tuple, kwargs: dict) -> bool:
    space = args[1] if len(args) > 1 else kwargs.get("observation_space")
    return isinstance(space, spaces.Dict)


class _RolloutRestarts:
    """What fastenv adds to SB3's rollout buffers: marked transitions are left out.

    A marked transition gets a TD error of 0, so its advantage is 0 and GAE carries nothing of it
    into the transition before, whose advantage is then the one of an episode truncated at the
    state the lost action was chosen in, bootstrapped with that state's value. ``get()`` leaves it
    out of the minibatches. Without marks every method is SB3's own.

    SB3's ``add`` gets no infos: the marks of the step being added come from ``mark_restarts``,
    which ``RestartMarksCallback`` calls with the step's infos between the env step and the add.
    """

    restarted: np.ndarray  # (buffer_size, n_envs): transitions a worker restart invented
    _kept: np.ndarray | None = None
    _next_marks: np.ndarray | None = None  # the marks of the step the next add() stores
    _warned_blind = False

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self.restarted = np.zeros((self.buffer_size, self.n_envs), dtype=bool)  # type: ignore[attr-defined]
        self._kept = None
        self._next_marks = None

    def mark_restarts(self, marks: np.ndarray) -> None:
        """Which envs' transitions in the step the next ``add()`` stores a worker restart invented.

        Args:
            marks: ``(n_envs,)`` booleans, e.g. ``restarted_mask(infos, dones)`` of the step.
        """
        marks = np.asarray(marks)
        n_envs = self.n_envs  # type: ignore[attr-defined]
        if marks.dtype != bool or marks.shape != (n_envs,):
            raise ValueError(f"marks must be {n_envs} booleans (one per env), got {marks.dtype} of shape {marks.shape}")
        self._next_marks = marks

    def add(self, *args: Any, **kwargs: Any) -> None:
        self.restarted[self.pos] = self._take_marks()  # type: ignore[attr-defined]
        super().add(*args, **kwargs)  # type: ignore[misc]

    def _take_marks(self) -> np.ndarray | bool:
        marks, self._next_marks = self._next_marks, None  # one step's marks serve one add
        if marks is None:
            if not self._warned_blind:
                self._warned_blind = True
                warnings.warn(
                    f"{type(self).__name__}.add() got no restart marks for this step: pass "
                    "callback=fastenv.integrations.sb3.RestartMarksCallback() to learn() (SB3's collect_rollouts "
                    "hands it the step's infos); transitions a worker restart invented are kept, as in SB3's buffer",
                    UserWarning,
                    stacklevel=3,
                )
            return False
        return marks

    def compute_returns_and_advantage(self, last_values: Any, dones: np.ndarray) -> None:
        marked = self.restarted
        if not marked.any():
            super().compute_returns_and_advantage(last_values, dones)  # type: ignore[misc]
            return
        # A marked transition is done, so SB3's TD error for it is reward - value: with the reward
        # set to the value it is exactly 0. The reward goes back afterwards; nothing trains on it.
        rewards = self.rewards[marked]  # type: ignore[attr-defined]
        self.rewards[marked] = self.values[marked]  # type: ignore[attr-defined]
        super().compute_returns_and_advantage(last_values, dones)  # type: ignore[misc]
        self.rewards[marked] = rewards  # type: ignore[attr-defined]

    def get(self, batch_size: int | None = None) -> Generator[RolloutBufferSamples | DictRolloutBufferSamples, None, None]:
        if not self.restarted.any():
            self._kept = None
            yield from super().get(batch_size)  # type: ignore[misc]
            return
        # SB3's own minibatches, less the marked entries (flattened as SB3 flattens: env-major).
        self._kept = ~self.restarted.swapaxes(0, 1).reshape(-1)
        for samples in super().get(batch_size):  # type: ignore[misc]
            if samples is not None:
                yield samples

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> Any:
        # Returns None for a minibatch of marked entries only, which get() skips.
        if self._kept is not None:
            batch_inds = batch_inds[self._kept[batch_inds]]
            if len(batch_inds) == 0:
                return None
        return super()._get_samples(batch_inds, env)  # type: ignore[misc]


class RolloutBuffer(_RolloutRestarts, _sb3_buffers.RolloutBuffer):
    """SB3's ``RolloutBuffer`` that leaves out transitions a worker restart invented.

    For a ``Dict`` observation space it builds this module's ``DictRolloutBuffer``, so one class
    serves every policy. Train with ``RestartMarksCallback``, which hands it each step's marks.

    Examples:
        >>> model = PPO("MultiInputPolicy", venv, rollout_buffer_class=RolloutBuffer)
        >>> model.learn(2048, callback=RestartMarksCallback())
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is RolloutBuffer and _is_dict_space(args, kwargs):
            return DictRolloutBuffer(*args, **kwargs)
        return super().__new__(cls)


class DictRolloutBuffer(_RolloutRestarts, _sb3_buffers.DictRolloutBuffer):
    """SB3's ``DictRolloutBuffer`` that leaves out transitions a worker restart invented."""


class _ReplayRestarts:
    """What fastenv adds to SB3's replay buffers: marked transitions are never sampled.

    A marked (row, env) is stored like any other (a row holds every env), and a sample that
    draws it is drawn again, so samples stay uniform over the rest. While no marked transition is
    stored, sampling is SB3's own: the same samples from the same RNG.
    """

    restarted: np.ndarray  # (buffer_size, n_envs): transitions a worker restart invented

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[call-arg]
        self.restarted = np.zeros((self.buffer_size, self.n_envs), dtype=bool)  # type: ignore[attr-defined]
        self._num_restarted = 0

    def add(self, obs: Any, next_obs: Any, action: np.ndarray, reward: np.ndarray, done: np.ndarray, infos: list[dict[str, Any]]) -> None:
        marks = restarted_mask(infos, done)
        row = self.pos  # type: ignore[attr-defined]
        self._num_restarted += int(marks.sum()) - int(self.restarted[row].sum())
        self.restarted[row] = marks
        super().add(obs, next_obs, action, reward, done, infos)  # type: ignore[misc]

    def reset(self) -> None:
        super().reset()  # type: ignore[misc]
        self.restarted[:] = False
        self._num_restarted = 0

    def _get_samples(self, batch_inds: np.ndarray, env: VecNormalize | None = None) -> Any:
        if self._num_restarted == 0:
            return super()._get_samples(batch_inds, env)  # type: ignore[misc]
        n_envs = self.n_envs  # type: ignore[attr-defined]
        batch_inds = np.array(batch_inds)
        env_indices = np.random.randint(0, high=n_envs, size=(len(batch_inds),))
        marked = self.restarted[batch_inds, env_indices]
        if marked.any() and self.restarted[self._sampled_rows()].all():
            raise RuntimeError("every transition in the replay buffer was invented by a worker restart: nothing to sample")
        while marked.any():
            count = int(marked.sum())
            batch_inds[marked] = self._draw_rows(count)
            env_indices[marked] = np.random.randint(0, high=n_envs, size=count)
            marked = self.restarted[batch_inds, env_indices]
        return self._gather(batch_inds, env_indices, env)

    def _draw_rows(self, count: int) -> np.ndarray:
        """``count`` rows drawn as SB3's ``sample()`` draws them."""
        size, pos, full = self.buffer_size, self.pos, self.full  # type: ignore[attr-defined]
        if self.optimize_memory_usage and full:  # type: ignore[attr-defined]
            return (np.random.randint(1, size, size=count) + pos) % size
        return np.random.randint(0, size if full else pos, size=count)

    def _sampled_rows(self) -> np.ndarray:
        size, pos, full = self.buffer_size, self.pos, self.full  # type: ignore[attr-defined]
        if not full:
            return np.arange(pos)
        rows = np.arange(size)
        return rows[rows != pos] if self.optimize_memory_usage else rows  # type: ignore[attr-defined]

    def _gather(self, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> Any:
        raise NotImplementedError


class ReplayBuffer(_ReplayRestarts, _sb3_buffers.ReplayBuffer):
    """SB3's ``ReplayBuffer`` that never samples a transition a worker restart invented.

    For a ``Dict`` observation space it builds this module's ``DictReplayBuffer``, so one class
    serves every policy. (It is a 1-step buffer: SB3 ignores an algorithm's ``n_steps`` with a
    custom buffer class.) It reads the marks from the infos SB3 adds with each step; train with
    ``RestartMarksCallback`` all the same, which tells ``SB3VecEnv`` that its marks are left out.

    Examples:
        >>> model = SAC("MultiInputPolicy", venv, replay_buffer_class=ReplayBuffer)
        >>> model.learn(10_000, callback=RestartMarksCallback())
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is ReplayBuffer and _is_dict_space(args, kwargs):
            return DictReplayBuffer(*args, **kwargs)
        return super().__new__(cls)

    def _gather(self, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> ReplayBufferSamples:
        # SB3's ReplayBuffer._get_samples draws the env indices itself; this is its body with them given.
        if self.optimize_memory_usage:
            next_obs = self._normalize_obs(self.observations[(batch_inds + 1) % self.buffer_size, env_indices, :], env)
        else:
            next_obs = self._normalize_obs(self.next_observations[batch_inds, env_indices, :], env)
        data = (
            self._normalize_obs(self.observations[batch_inds, env_indices, :], env),
            self.actions[batch_inds, env_indices, :],
            next_obs,
            (self.dones[batch_inds, env_indices] * (1 - self.timeouts[batch_inds, env_indices])).reshape(-1, 1),
            self._normalize_reward(self.rewards[batch_inds, env_indices].reshape(-1, 1), env),
        )
        return ReplayBufferSamples(*tuple(map(self.to_torch, data)))


class DictReplayBuffer(_ReplayRestarts, _sb3_buffers.DictReplayBuffer):
    """SB3's ``DictReplayBuffer`` that never samples a transition a worker restart invented."""

    def _gather(self, batch_inds: np.ndarray, env_indices: np.ndarray, env: VecNormalize | None) -> DictReplayBufferSamples:
        # SB3's DictReplayBuffer._get_samples draws the env indices itself; this is its body with them given.
        obs = self._normalize_obs({key: o[batch_inds, env_indices, :] for key, o in self.observations.items()}, env)
        next_obs = self._normalize_obs({key: o[batch_inds, env_indices, :] for key, o in self.next_observations.items()}, env)
        assert isinstance(obs, dict) and isinstance(next_obs, dict)
        return DictReplayBufferSamples(
            observations={key: self.to_torch(o) for key, o in obs.items()},
            actions=self.to_torch(self.actions[batch_inds, env_indices]),
            next_observations={key: self.to_torch(o) for key, o in next_obs.items()},
            dones=self.to_torch(self.dones[batch_inds, env_indices] * (1 - self.timeouts[batch_inds, env_indices])).reshape(-1, 1),
            rewards=self.to_torch(self._normalize_reward(self.rewards[batch_inds, env_indices].reshape(-1, 1), env)),
        )


class RestartMarksCallback(BaseCallback):
    """Hands each step's restart marks to this module's buffers, through SB3's callback ``locals``.

    SB3's collect_rollouts gives its callbacks the step's ``infos`` and ``dones`` after the env
    step and before it adds the step to ``rollout_buffer``: there this callback tells PPO's
    ``RolloutBuffer`` which of the step's transitions a worker restart invented. The locals are the
    training loop's, so an ``EvalCallback`` that steps another env in between changes nothing. While
    it trains, the ``SB3VecEnv`` underneath does not warn about restarts. A model whose buffer is
    SB3's own is refused when ``learn()`` starts.

    Examples:
        >>> model = PPO("MultiInputPolicy", venv, rollout_buffer_class=RolloutBuffer)
        >>> model.learn(2048, callback=RestartMarksCallback())
    """

    def __init__(self, verbose: int = 0) -> None:
        super().__init__(verbose)
        self._venv: SB3VecEnv | None = None

    def _init_callback(self) -> None:
        buffer = getattr(self.model, "rollout_buffer", None)
        if buffer is None:
            buffer = getattr(self.model, "replay_buffer", None)
        if not isinstance(buffer, (_RolloutRestarts, _ReplayRestarts)):
            raise TypeError(
                f"RestartMarksCallback hands restart marks to fastenv's buffers, but this {type(self.model).__name__} "
                f"fills {type(buffer).__module__}.{type(buffer).__name__}: pass "
                "rollout_buffer_class=fastenv.integrations.sb3.RolloutBuffer (PPO, A2C) or "
                "replay_buffer_class=fastenv.integrations.sb3.ReplayBuffer (SAC, TD3, DDPG, DQN) to the model"
            )

    def _on_training_start(self) -> None:
        venv = self.training_env.unwrapped if self.training_env is not None else None
        self._venv = venv if isinstance(venv, SB3VecEnv) else None
        if self._venv is not None:
            self._venv._left_out_by = self

    def _on_training_end(self) -> None:
        if self._venv is not None and self._venv._left_out_by is self:
            self._venv._left_out_by = None

    def _on_step(self) -> bool:
        buffer = self.locals.get("rollout_buffer")
        if isinstance(buffer, _RolloutRestarts):
            buffer.mark_restarts(restarted_mask(self.locals["infos"], self.locals["dones"]))
        elif not isinstance(self.locals.get("replay_buffer"), _ReplayRestarts):  # it reads the infos SB3 adds
            raise RuntimeError(
                "RestartMarksCallback found neither fastenv's rollout_buffer nor its replay_buffer in the locals of "
                f"{type(self.model).__name__}'s collect_rollouts: it serves SB3's (and SBX's) collect_rollouts"
            )
        return True


class VecMonitor(_SB3VecMonitor):
    """SB3's ``VecMonitor``, for which a worker restart does not end an episode of the env.

    The invented transition adds nothing to the episode's return or length, and the episode the
    restart cut is not logged (no ``info["episode"]``, no CSV row, not counted): its return would
    be a partial one. Otherwise it is SB3's ``VecMonitor``.
    """

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        restarted = restarted_mask(infos, dones)
        real = ~restarted
        self.episode_returns[real] += rewards[real]
        self.episode_lengths[real] += 1
        new_infos = list(infos[:])
        for i in np.flatnonzero(dones).tolist():
            if restarted[i]:
                self.episode_returns[i] = 0
                self.episode_lengths[i] = 0
                continue
            info = infos[i].copy()
            episode_info = {"r": self.episode_returns[i], "l": self.episode_lengths[i], "t": round(time.time() - self.t_start, 6)}
            for key in self.info_keywords:
                episode_info[key] = info[key]
            info["episode"] = episode_info
            self.episode_count += 1
            self.episode_returns[i] = 0
            self.episode_lengths[i] = 0
            if self.results_writer:
                self.results_writer.write_row(episode_info)
            new_infos[i] = info
        return obs, rewards, dones, new_infos


def make_vec_env(env_id: str, num_envs: int, *, monitor: bool = True, **kwargs: Any) -> VecEnv:
    """``gym.make_vec(env_id, num_envs, **kwargs)`` as an SB3 VecEnv, with this module's ``VecMonitor`` by default.

    Train on it with ``rollout_buffer_class=RolloutBuffer`` (PPO, A2C) or
    ``replay_buffer_class=ReplayBuffer`` (off-policy), and ``callback=RestartMarksCallback()`` in
    ``learn()``, so that transitions a worker restart invented stay out of the training data. The
    ``VecMonitor`` counts an episode's length in steps of this VecEnv, as SB3 does: with
    ``chunk=K`` its ``ep_len_mean`` counts chunks (multiply by K for simulator steps).

    Examples:
        >>> venv = make_vec_env("fastenv/Libero-v0", 4, num_workers=2, chunk=8, camera_size=64)
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
    "make_vec_env",
    "restarted_mask",
    "to_numpy",
    "unbatch_infos",
]
