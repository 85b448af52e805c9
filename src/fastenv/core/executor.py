"""The executor: fastenv's step semantics, written once for every backend and front-end.

Over a ``BatchSimulator`` it runs action chunks (K sub-actions per action: every sub-step runs
the controller, physics, reward and termination; the observation is produced once, at the
chunk's end, or where an episode ends inside it), sums or discounts the rewards, records the
transition's ``chunk_*`` keys and episode statistics, and optionally resets finished envs in the
same step, keeping their final observations and infos. ``ActionChunk`` (one env, a batch of
one), the vector env's workers (process or Ray), and the natively batched backends all step
through it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastenv._validation import check_discount, check_positive_int
from fastenv.core.arrays import alloc_rows, put_rows, take_rows
from fastenv.core.infos import (
    STEP_KEYS,
    clear_rows,
    merge_rows,
    step_keys,
    take_info_rows,
)


@dataclass
class StepResult:
    """What one executor step gives for its m rows.

    ``obs``, ``infos``, ``final_obs`` and ``final_infos`` are lists (one entry per row, None
    where absent) for simulators stepped env by env, batched structures for natively batched
    ones. ``ended`` marks rows whose episode ended (and, with autoreset, started again: ``obs``
    and ``infos`` are then the new episode's, with the transition's ``STEP_KEYS`` kept).
    """

    obs: Any
    rewards: Any
    terminated: Any
    truncated: Any
    infos: Any
    ended: Any
    final_obs: Any = None
    final_infos: Any = None


class _RowStore:
    """Per-row Python objects: what an env returned, untouched unless fastenv adds a key."""

    def __init__(self, m: int, ops: Any) -> None:
        self.obs: list[Any] = [None] * m
        self.infos: list[Any] = [None] * m

    def put_obs(self, pos: np.ndarray, obs: list[Any]) -> None:
        for p, o in zip(pos.tolist(), obs):
            self.obs[p] = o

    def put_infos(self, pos: np.ndarray, infos: list[dict]) -> None:
        for p, info in zip(pos.tolist(), infos):
            self.infos[p] = info

    def add_chunk_keys(self, steps: np.ndarray, rewards: np.ndarray, discounts: np.ndarray | None) -> None:
        for p, info in enumerate(self.infos):
            info = dict(info)  # never change the dict the env returned
            info["chunk_steps"] = int(steps[p])
            info["chunk_rewards"] = rewards[p].copy()
            if discounts is not None:
                info["chunk_discount"] = float(discounts[p])
            self.infos[p] = info

    def add_episode(self, pos: np.ndarray, returns: np.ndarray, lengths: np.ndarray, times: np.ndarray) -> None:
        for i, p in enumerate(pos.tolist()):
            self.infos[p] = {**self.infos[p], "episode": {"r": float(returns[i]), "l": int(lengths[i]), "t": float(times[i])}}

    def restart_episodes(self, pos: np.ndarray, obs: list[Any], infos: list[dict]) -> tuple[list, list]:
        m = len(self.obs)
        final_obs: list[Any] = [None] * m
        final_infos: list[Any] = [None] * m
        for i, p in enumerate(pos.tolist()):
            final_obs[p], final_infos[p] = self.obs[p], self.infos[p]
            self.obs[p] = obs[i]
            self.infos[p] = {**infos[i], **step_keys(final_infos[p])}
        return final_obs, final_infos


class _BatchStore:
    """Batched structures over the m rows (natively batched simulators; tensors stay on their device)."""

    def __init__(self, m: int, ops: Any) -> None:
        self.m, self.ops = m, ops
        self.obs: Any = None
        self.infos: dict[str, Any] = {}

    def put_obs(self, pos: Any, obs: Any) -> None:
        if self.obs is None:
            if len(pos) == self.m:  # the common case: every row observed at the chunk's end
                self.obs = obs
                return
            self.obs = alloc_rows(obs, self.m, self.ops)
        put_rows(self.obs, pos, obs)

    def put_infos(self, pos: Any, infos: dict[str, Any]) -> None:
        clear_rows(self.infos, pos)
        merge_rows(self.infos, pos, infos, self.m, self.ops)

    def add_chunk_keys(self, steps: Any, rewards: Any, discounts: Any) -> None:
        keys = {"chunk_steps": steps, "chunk_rewards": rewards}
        if discounts is not None:
            keys["chunk_discount"] = discounts
        merge_rows(self.infos, self.ops.arange(self.m), keys, self.m, self.ops)

    def add_episode(self, pos: Any, returns: Any, lengths: Any, times: Any) -> None:
        episode = {"r": returns, "l": lengths, "t": self.ops.asarray(times)}
        merge_rows(self.infos, pos, {"episode": episode}, self.m, self.ops)

    def restart_episodes(self, pos: Any, obs: Any, infos: dict[str, Any]) -> tuple[Any, dict]:
        final_obs = alloc_rows(self.obs, self.m, self.ops)
        put_rows(final_obs, pos, take_rows(self.obs, pos))
        final_infos = take_info_rows(self.infos, pos, self.m, self.ops)
        kept = {key: final_infos[key][pos] for key in STEP_KEYS if key in final_infos}
        put_rows(self.obs, pos, obs)
        clear_rows(self.infos, pos)
        merge_rows(self.infos, pos, infos, self.m, self.ops)
        merge_rows(self.infos, pos, kept, self.m, self.ops)
        return final_obs, final_infos


def null_chunk_info(chunk: int, gamma: float | None) -> dict[str, Any]:
    """The chunk keys of a transition in which no sub-step ran (what a worker restart reports)."""
    info: dict[str, Any] = {"chunk_steps": 0, "chunk_rewards": np.zeros(chunk)}
    if gamma is not None:
        info["chunk_discount"] = 1.0  # nothing ran: the bootstrap value is that of the same state
    return info


class Executor:
    """Steps rows of a ``BatchSimulator`` with fastenv's chunk and autoreset semantics.

    Args:
        sim: the simulator batch.
        chunk: K sub-actions per action (actions gain a leading K axis), or None for plain actions.
        gamma: discount inside a chunk (None sums the rewards); the transition then carries
            ``chunk_discount = gamma**k`` for the k sub-steps that ran.
        autoreset: reset a finished env in the same step (Gymnasium's SAME_STEP), keeping its
            final observation and info.
        episode_statistics: add ``info["episode"] = {"r", "l", "t"}`` when an episode ends: the
            undiscounted return, the length in simulator steps and the wall time, counted over
            sub-steps.

    Examples:
        >>> result = Executor(EnvBatch(envs), chunk=8, autoreset=True).step(np.arange(4), actions)
    """

    def __init__(
        self,
        sim: Any,
        *,
        chunk: int | None = None,
        gamma: float | None = None,
        autoreset: bool = False,
        episode_statistics: bool = False,
    ) -> None:
        self.chunk = None if chunk is None else check_positive_int("chunk", chunk)
        self.gamma = None if gamma is None else check_discount("gamma", gamma)
        if self.gamma is not None and self.chunk is None:
            raise ValueError("gamma discounts rewards inside a chunk; pass chunk= as well")
        self.sim = sim
        self.ops = ops = sim.ops
        self.autoreset = bool(autoreset)
        self.episode_statistics = bool(episode_statistics)
        self._store = _BatchStore if sim.batched else _RowStore
        n, k = sim.num_envs, self.chunk or 1
        self._discounts = None if self.gamma is None else ops.powers(self.gamma, ops.arange(k))
        if self.episode_statistics:
            self._returns = ops.zeros(n, "float64")
            self._lengths = ops.zeros(n, "int64")
            self._starts = np.full(n, time.perf_counter())

    # -- episodes -------------------------------------------------------------------------------
    def reset(self, rows: Any, seeds: Any = None, options: Any = None) -> tuple[Any, Any]:
        """Start new episodes in ``rows``: (observations, infos), as the simulator gives them."""
        rows = self.ops.index(rows)
        out = self.sim.reset(rows, seeds, options)
        self._restart_statistics(rows)
        return out

    def _restart_statistics(self, rows: Any) -> None:
        if self.episode_statistics:
            self._returns[rows] = 0.0
            self._lengths[rows] = 0
            self._starts[self.ops.numpy(rows)] = time.perf_counter()

    def null_step_infos(self, rows: Any) -> Any:
        """The step keys of a transition in which nothing ran (a worker restart), one dict per row."""
        if self.chunk is None:
            return self.sim.null_step_infos(self.ops.index(rows))
        return [null_chunk_info(self.chunk, self.gamma) for _ in range(len(rows))]

    # -- stepping -------------------------------------------------------------------------------
    def step(self, rows: Any, actions: Any, *, observe: bool = True) -> StepResult:
        """Step ``rows`` with one action (or chunk) each; ``observe=False`` skips the final observation.

        ``actions`` is batched over the rows: (m, *action) or, with chunks, (m, K, *action).
        """
        rows = self.ops.index(rows)
        if self.chunk is None and observe and not self.sim.batched:  # the plain step, kept short
            obs, rewards, terminated, truncated, infos = self.sim.step(rows, actions)
            if self.episode_statistics:
                self._returns[rows] += rewards
                self._lengths[rows] += 1
            result = StepResult(obs, rewards, terminated, truncated, infos, terminated | truncated)
            if np.count_nonzero(result.ended):  # an unbatched simulator's flags are numpy arrays; .any() costs more
                store = self._store(len(rows), self.ops)
                store.obs, store.infos = obs, infos
                self._end_episodes(rows, store, result)
            return result
        return self._step_chunk(rows, actions, observe)

    def _step_chunk(self, rows: Any, actions: Any, observe: bool) -> StepResult:
        ops, sim = self.ops, self.sim
        m, k_max = len(rows), self.chunk or 1
        store = self._store(m, ops)
        rewards = ops.zeros((m, k_max), "float64")
        steps = ops.zeros(m, "int64")
        terminated = ops.zeros(m, "bool")
        truncated = ops.zeros(m, "bool")
        alive = ops.arange(m)
        for k in range(k_max):
            sub = actions if self.chunk is None else actions[:, k]
            if len(alive) < m:
                sub = take_rows(sub, alive)
            live_rows = rows[alive]
            if k == k_max - 1 and observe:
                obs, reward, term, trunc, info = sim.step(live_rows, sub)
                store.put_obs(alive, obs)
            else:
                reward, term, trunc, info = sim.substep(live_rows, sub)
            rewards[alive, k] = reward
            steps[alive] += 1
            terminated[alive] = term
            truncated[alive] = trunc
            store.put_infos(alive, info)
            if self.episode_statistics:
                self._returns[live_rows] += reward
                self._lengths[live_rows] += 1
            done = term | trunc
            if k < k_max - 1 and bool(done.any()):
                ended = alive[done]
                if observe:  # the episode ends here: its final observation is taken now
                    store.put_obs(ended, sim.observe(rows[ended]))
                alive = alive[~done]
                if len(alive) == 0:
                    break
        if self.chunk is None:
            total = rewards[:, 0]
        else:
            total = rewards.sum(1) if self._discounts is None else (rewards * self._discounts).sum(1)
            discounts = None if self.gamma is None else ops.powers(self.gamma, steps)
            store.add_chunk_keys(steps, rewards, discounts)
        result = StepResult(store.obs, total, terminated, truncated, store.infos, terminated | truncated)
        if bool(result.ended.any()):
            self._end_episodes(rows, store, result)
        return result

    def _end_episodes(self, rows: Any, store: Any, result: StepResult) -> None:
        """Episode statistics and same-step autoreset for the rows whose episode ended."""
        ops = self.ops
        ended = ops.nonzero(result.ended)
        if self.episode_statistics:
            ended_rows = rows[ended]
            elapsed = time.perf_counter() - self._starts[ops.numpy(ended_rows)]
            store.add_episode(ended, self._returns[ended_rows], self._lengths[ended_rows], np.round(elapsed, 6))
            result.infos = store.infos
        if self.autoreset:
            obs, infos = self.reset(rows[ended])
            result.final_obs, result.final_infos = store.restart_episodes(ended, obs, infos)
            result.obs, result.infos = store.obs, store.infos
