"""BatchedEnv: a vector env presented as one gymnasium.Env with batched spaces."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv


class BatchedEnv(gym.Env):
    """One ``gymnasium.Env`` whose observations, actions, rewards and flags are batched over N envs.

    What ``gym.make(..., num_envs=N)`` returns, as ManiSkill does; the vector env underneath is
    ``vector_env`` (its stage API: ``send``/``recv``).

    Examples:
        >>> env = gym.make("fastenv/Libero-v0", num_envs=4, pipeline_stages=2)
    """

    def __init__(self, vector_env: VectorEnv) -> None:
        self.vector_env = vector_env
        self.num_envs = vector_env.num_envs
        self.observation_space = vector_env.observation_space
        self.action_space = vector_env.action_space
        self.single_observation_space = vector_env.single_observation_space
        self.single_action_space = vector_env.single_action_space
        self.metadata = dict(vector_env.metadata)
        self.render_mode = vector_env.render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self.vector_env.reset(seed=seed, options=options)

    def step(self, action: Any):
        return self.vector_env.step(action)

    def send(self, actions: Any, **kwargs: Any) -> None:
        """Start stepping a stage or some envs (see ``PipelineVectorEnv.send``)."""
        self.vector_env.send(actions, **kwargs)

    def recv(self, **kwargs: Any):
        """Collect a stage's or the ready envs' results (see ``PipelineVectorEnv.recv``)."""
        return self.vector_env.recv(**kwargs)

    def render(self):
        return self.vector_env.render()

    def close(self) -> None:
        self.vector_env.close()
