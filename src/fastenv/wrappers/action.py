"""ActionChunk: one action is a chunk of K sub-actions; observe only at the chunk's end."""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from fastenv._validation import check_action, check_discount, check_positive_int
from fastenv.core.batch import EnvBatch
from fastenv.core.executor import Executor, null_chunk_info
from fastenv.core.protocol import Info, ObsType
from fastenv.core.spaces import chunk_space


class ActionChunk(gym.Wrapper):
    """Execute an action chunk of K sub-actions per step and observe once, at its end.

    Each sub-action runs a full simulator sub-step (controller, physics, reward, termination);
    only the last one produces an observation. Rewards are summed, or discounted with ``gamma``
    (then ``info["chunk_discount"] = gamma**k`` for the k executed sub-steps). A termination or
    truncation stops the chunk: the remaining sub-actions are not executed.
    ``info["chunk_steps"]`` is k and ``info["chunk_rewards"]`` the K sub-step rewards (0 after k).

    Observations are skipped when the env below can sub-step (a fastenv ``SimEnv``) and every
    wrapper in between only maps values (Gymnasium's observation, reward and action wrappers);
    a wrapper that must see every step makes every sub-step a full one, with a
    ``SubstepDisabledWarning``. Any other Gymnasium env is stepped normally, keeping the last
    observation: the same semantics, without the speed-up.

    Args:
        env: the env to chunk.
        chunk: K, the number of sub-actions per action (>= 1).
        gamma: discount applied inside the chunk, or None to sum the rewards.
        episode_statistics: add ``info["episode"]`` when an episode ends, counted over sub-steps:
            the undiscounted return ``r``, the length ``l`` in simulator steps, the time ``t``.
        skip_observations: False steps the env below whole for every sub-action, an observation
            after each, as the stock env executes a chunk (the same transitions at the stock
            cost: the reference ``fastenv bench`` and the equality tests compare with).

    Examples:
        >>> env = ActionChunk(env, chunk=8)   # action_space: Box(8, act_dim)
    """

    def __init__(
        self, env: gym.Env, chunk: int, gamma: float | None = None, episode_statistics: bool = False, skip_observations: bool = True
    ) -> None:
        self.chunk = check_positive_int("chunk", chunk)
        self.gamma = None if gamma is None else check_discount("gamma", gamma)
        self.episode_statistics = bool(episode_statistics)
        self.skip_observations = bool(skip_observations)
        super().__init__(env)
        self.action_space = chunk_space(env.action_space, self.chunk)
        self._batch = EnvBatch([env], owner="ActionChunk", skip_observations=self.skip_observations)
        self._executor = Executor(self._batch, chunk=self.chunk, gamma=self.gamma, episode_statistics=episode_statistics)
        self._row = np.zeros(1, dtype=np.int64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[ObsType, Info]:
        obs, infos = self._executor.reset(self._row, [seed], options)
        return obs[0], infos[0]

    def step(self, action: Any) -> tuple[ObsType, SupportsFloat, bool, bool, Info]:
        actions = check_action(action, self.action_space, "action chunk")
        out = self._executor.step(self._row, actions[None])
        return out.obs[0], float(out.rewards[0]), bool(out.terminated[0]), bool(out.truncated[0]), out.infos[0]

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        """Execute a whole chunk without producing an observation."""
        actions = check_action(action, self.action_space, "action chunk")
        out = self._executor.step(self._row, actions[None], observe=False)
        return float(out.rewards[0]), bool(out.terminated[0]), bool(out.truncated[0]), out.infos[0]

    def observe(self) -> ObsType:
        """The observation of the current state."""
        return self._batch.rows[0].observe()

    def null_step_info(self) -> Info:
        """The chunk keys of a transition in which no sub-step ran (what a worker restart reports)."""
        return null_chunk_info(self.chunk, self.gamma)

    def batch_spec(self) -> tuple[gym.Env, str, dict[str, Any]] | None:
        """How a vector env's worker runs these chunks with its other envs' in one executor:
        (the env below, the owner of its sub-steps, the executor's options); None for a subclass,
        whose step may do more than the executor does."""
        if type(self) is not ActionChunk:
            return None
        options = {"chunk": self.chunk, "gamma": self.gamma, "episode_statistics": self.episode_statistics, "skip_observations": self.skip_observations}
        return self.env, "ActionChunk", options
