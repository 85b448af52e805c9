"""SB3's buffers, less what a worker restart invented: drop-in subclasses that leave marked
transitions out, and ``RestartMarksCallback``, which hands them each step's marks."""

from __future__ import annotations

import warnings
from collections.abc import Generator
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common import buffers as _sb3_buffers
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import (
    DictReplayBufferSamples,
    DictRolloutBufferSamples,
    ReplayBufferSamples,
    RolloutBufferSamples,
)
from stable_baselines3.common.vec_env import VecNormalize

from fastenv.integrations.sb3.vec_env import SB3VecEnv, restarted_mask


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

