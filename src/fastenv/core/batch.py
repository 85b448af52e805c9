"""Gymnasium envs as a batch the executor can step: one row per env, each driven through its stack.

A row resets and takes its simulator's own step through the whole wrapper stack. A sub-step
(no observation) and an on-demand observation go down the stack to the first env or wrapper that
can sub-step (a ``SimEnv``, an ``ActionChunk``, anything with ``substep`` and ``observe``),
applying on the way the hooks of Gymnasium's single-purpose wrappers (``ActionWrapper.action``,
``RewardWrapper.reward``, ``ObservationWrapper.observation``). A wrapper that overrides ``step``
(``TimeLimit``, ``RecordEpisodeStatistics``, ...) must see every step, so below it nothing is
skipped: every sub-step is a full step through the stack, and a ``SubstepDisabledWarning`` says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

from fastenv.core.arrays import NUMPY, view_row


class SubstepDisabledWarning(UserWarning):
    """A wrapper stack hides a simulator's sub-step: observations are produced at every sub-step."""


# Wrappers that override step() but only check call order or the env's API: safe to step around.
PASS_THROUGH: tuple[type, ...] = (OrderEnforcing, PassiveEnvChecker)
_HOOKS = ((gym.ObservationWrapper, "observation"), (gym.RewardWrapper, "reward"), (gym.ActionWrapper, "action"))


def can_substep(env: Any) -> bool:
    """True for an env or wrapper that implements fastenv's sub-step API itself."""
    cls = type(env)
    return callable(getattr(cls, "substep", None)) and callable(getattr(cls, "observe", None))


def _steps_like_its_base(wrapper: gym.Wrapper) -> bool:
    """True when a wrapper's step is its hook class's own (or gym.Wrapper's): it only maps values."""
    step = type(wrapper).step
    if isinstance(wrapper, PASS_THROUGH) or step is gym.Wrapper.step:
        return True
    return any(isinstance(wrapper, base) and step is base.step for base, _ in _HOOKS)


def substep_path(env: gym.Env) -> tuple[list[gym.Wrapper], Any, gym.Wrapper | None]:
    """(wrappers to map through, the env that sub-steps, the wrapper that blocks it).

    The first env of the stack (from the top) that can sub-step is returned with the wrappers
    above it; if a wrapper that must see every step sits above it, that wrapper is returned as
    the blocker and no sub-stepping env is returned.
    """
    path: list[gym.Wrapper] = []
    current: Any = env
    while True:
        if can_substep(current):
            return path, current, None
        if not isinstance(current, gym.Wrapper):
            return path, None, None
        if not _steps_like_its_base(current):
            below = current.env
            while isinstance(below, gym.Wrapper) and not can_substep(below):
                below = below.env
            return path, None, current if can_substep(below) else None
        path.append(current)
        current = current.env


class EnvRow:
    """One Gymnasium env (any wrapper stack) as a row of the executor.

    Args:
        env: the env.
        owner: who sub-steps it (named in the warning when the stack cannot skip observations);
            None when it is only ever stepped whole.
        skip_observations: False makes every sub-step a full step through the stack, with its
            observation (what the stock env does; the reference the fast path equals).
    """

    def __init__(self, env: gym.Env, owner: str | None = None, skip_observations: bool = True) -> None:
        self.env = env
        self.path, self.core, blocker = substep_path(env)
        if not skip_observations:
            self.path, self.core, blocker = [], None, None
        self._last_obs: Any = None
        if blocker is not None and owner is not None:
            warnings.warn(
                f"{owner}: {type(blocker).__name__} sits between {owner} and the simulator and must see every "
                f"step, so every sub-step is a full step through it and produces an observation (no "
                f"observation skipping). Put {type(blocker).__name__} above {owner}, or use fastenv's own "
                "option for it (episode_statistics=True for episode statistics, max_episode_steps for time limits).",
                SubstepDisabledWarning,
                stacklevel=3,
            )

    @property
    def skips(self) -> bool:
        """True when sub-steps skip the observation."""
        return self.core is not None

    def reset(self, seed: int | None, options: Mapping[str, Any] | None) -> tuple[Any, dict]:
        obs, info = self.env.reset(seed=seed, options=None if options is None else dict(options))
        self._last_obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict]:
        return self.env.step(action)  # its observation is returned: nothing to keep for observe()

    def substep(self, action: Any) -> tuple[Any, Any, Any, dict]:
        if self.core is None:
            obs, reward, terminated, truncated, info = self.env.step(action)
            self._last_obs = obs
            return reward, terminated, truncated, info
        for wrapper in self.path:
            if isinstance(wrapper, gym.ActionWrapper):
                action = wrapper.action(action)
        reward, terminated, truncated, info = self.core.substep(action)
        for wrapper in reversed(self.path):
            if isinstance(wrapper, gym.RewardWrapper):
                reward = wrapper.reward(reward)
        return reward, terminated, truncated, info

    def prepare(self, action: Any) -> None:
        """Apply the action, for a world step taken with the other envs (see ``SimEnv.prepare``)."""
        for wrapper in self.path:
            if isinstance(wrapper, gym.ActionWrapper):
                action = wrapper.action(action)
        self.core.prepare(action)

    def conclude(self) -> tuple[Any, Any, Any, dict]:
        reward, terminated, truncated, info = self.core.conclude()
        for wrapper in reversed(self.path):
            if isinstance(wrapper, gym.RewardWrapper):
                reward = wrapper.reward(reward)
        return reward, terminated, truncated, info

    def observe(self) -> Any:
        if self.core is None:
            return self._last_obs
        obs = self.core.observe()
        for wrapper in reversed(self.path):
            if isinstance(wrapper, gym.ObservationWrapper):
                obs = wrapper.observation(obs)
        return obs

    def null_step_info(self) -> dict:
        """The step keys of a transition in which no sub-step ran (a worker restart)."""
        try:
            fn = self.env.get_wrapper_attr("null_step_info")
        except AttributeError:
            return {}
        return fn() if callable(fn) else {}


class EnvBatch:
    """Gymnasium envs stepped one by one, as a ``BatchSimulator`` (observations and infos as lists).

    Examples:
        >>> batch = EnvBatch([gym.make("CartPole-v1") for _ in range(4)])
    """

    batched = False
    ops = NUMPY

    def __init__(self, envs: Sequence[gym.Env], owner: str | None = None, skip_observations: bool = True) -> None:
        self.envs = list(envs)
        self.rows = [EnvRow(env, owner, skip_observations) for env in self.envs]
        self.num_envs = len(self.rows)
        first = self.envs[0]
        self.single_observation_space = first.observation_space
        self.single_action_space = first.action_space
        self.failed_row = -1  # the row whose env raised last
        # Envs sharing one physics world (OmniGibson's in one process) advance it together: once per
        # sub-step for every env stepped, never once per env.
        self.shared_world = all(getattr(row.core, "steps_world_together", False) for row in self.rows)

    def reset(self, rows: np.ndarray, seeds: Sequence[int | None] | None, options: Mapping[str, Any] | None) -> tuple[list, list]:
        obs, infos = [], []
        row = -1
        try:
            for i, row in enumerate(rows.tolist()):
                o, info = self.rows[row].reset(None if seeds is None else seeds[i], options)
                obs.append(o)
                infos.append(info)
        except Exception:
            self.failed_row = row  # the exception goes on unchanged; a worker reports which env raised
            raise
        return obs, infos

    def substep(self, rows: np.ndarray, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        m = len(rows)
        rewards, terminated, truncated = np.empty(m), np.empty(m, dtype=bool), np.empty(m, dtype=bool)
        infos = []
        row = -1
        try:
            if self.shared_world:
                for i, row in enumerate(rows.tolist()):
                    self.rows[row].prepare(view_row(actions, i))
                row = int(rows[0])
                self.rows[row].core.advance_world()
                for i, row in enumerate(rows.tolist()):
                    rewards[i], terminated[i], truncated[i], info = self.rows[row].conclude()
                    infos.append(info)
                return rewards, terminated, truncated, infos
            for i, row in enumerate(rows.tolist()):
                rewards[i], terminated[i], truncated[i], info = self.rows[row].substep(view_row(actions, i))
                infos.append(info)
        except Exception:
            self.failed_row = row  # the exception goes on unchanged; a worker reports which env raised
            raise
        return rewards, terminated, truncated, infos

    def step(self, rows: np.ndarray, actions: Any) -> tuple[list, np.ndarray, np.ndarray, np.ndarray, list]:
        if self.shared_world:  # a world step for all, then each env's observation
            rewards, terminated, truncated, infos = self.substep(rows, actions)
            return self.observe(rows), rewards, terminated, truncated, infos
        m = len(rows)
        obs, rewards, terminated, truncated, infos = [], [], [], [], []
        envs = self.envs
        # A plain array's rows are what view_row gives; iterating it is cheaper than indexing it.
        per_row = actions if isinstance(actions, np.ndarray) else [view_row(actions, i) for i in range(m)]
        row = -1
        try:
            for row, action in zip(rows.tolist(), per_row):
                o, r, term, trunc, info = envs[row].step(action)
                obs.append(o)
                rewards.append(r)
                terminated.append(term)
                truncated.append(trunc)
                infos.append(info)
        except Exception:
            self.failed_row = row  # the exception goes on unchanged; a worker reports which env raised
            raise
        # One conversion per field (the values an element-wise write into float64 / bool arrays gives).
        try:
            return obs, np.fromiter(rewards, np.float64, m), np.fromiter(terminated, np.bool_, m), np.fromiter(truncated, np.bool_, m), infos
        except (TypeError, ValueError):  # name the env that returned what does not convert
            for row, r, term, trunc in zip(rows.tolist(), rewards, terminated, truncated):
                try:
                    float(r), bool(term), bool(trunc)
                except (TypeError, ValueError):
                    self.failed_row = row
                    raise
            raise

    def observe(self, rows: np.ndarray) -> list:
        row = -1
        try:
            return [self.rows[row].observe() for row in rows.tolist()]
        except Exception:
            self.failed_row = row  # the exception goes on unchanged; a worker reports which env raised
            raise

    def null_step_infos(self, rows: np.ndarray) -> list[dict]:
        return [self.rows[row].null_step_info() for row in rows.tolist()]

    def close(self) -> None:
        for env in self.envs:
            env.close()
