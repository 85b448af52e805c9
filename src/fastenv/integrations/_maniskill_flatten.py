"""ManiSkill's ``FlattenRGBDObservationWrapper`` and ``FlattenActionSpaceWrapper`` over a fastenv ManiSkill vector env.

ManiSkill's two wrappers are ``gymnasium.Env`` wrappers of its batched ``BaseEnv``; a script puts
them right after ``gym.make``, under ``RecordEpisode`` and ``ManiSkillVectorEnv``. These take the
same arguments and go in the same place over an env from ``fastenv.integrations.maniskill.make``:
the observation (and every final observation) becomes ManiSkill's flattened one, computed by
ManiSkill's own ``flatten_state_dict`` from ManiSkill's nested observation, and a flat action is
split into the agents' actions in the order ManiSkill's wrapper splits it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import VectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space

from fastenv.backends.maniskill.observations import (
    flatten_rgbd,
    maniskill_layout,
    space_for,
)
from fastenv.core.arrays import tree_map


def _check_vector_env(env: Any, wrapper: str) -> None:
    if not isinstance(env, VectorEnv):
        raise TypeError(
            f"{wrapper} here wraps an env from fastenv.integrations.maniskill.make(...), got {type(env).__name__}: "
            "replace gym.make(env_id, num_envs=N, ...) with make(env_id, num_envs=N, ...)"
        )


def _zeros(space: spaces.Space) -> Any:
    """A batch of one of zeros shaped as ``space`` (dicts in the space's order)."""
    if isinstance(space, spaces.Dict):
        return {key: _zeros(sub) for key, sub in space.spaces.items()}
    return np.zeros((1, *space.shape), dtype=space.dtype)


def _leaves(tree: Any) -> list[Any]:
    if isinstance(tree, Mapping):
        return [leaf for value in tree.values() for leaf in _leaves(value)]
    return [tree]


def _finals(infos: dict[str, Any], fn: Any) -> dict[str, Any]:
    """``infos`` with ``fn`` applied to each ended env's final observation (one env's, unbatched)."""
    if "final_obs" not in infos:
        return infos
    finals = infos["final_obs"]
    out = np.full(len(finals), None, dtype=object)
    for i, final in enumerate(finals):
        if final is not None:
            out[i] = tree_map(lambda x: x[0], fn(tree_map(lambda x: x[None], final)))
    infos = dict(infos)
    infos["final_obs"] = out
    if "final_observation" in infos:  # the batched env's alias of final_obs
        infos["final_observation"] = out
    return infos


def flattened(env: VectorEnv) -> bool:
    """Whether ``FlattenRGBDObservationWrapper`` is among the wrappers of ``env``."""
    while isinstance(env, VectorWrapper):
        if isinstance(env, FlattenRGBDObservationWrapper):
            return True
        env = env.env
    return False


class FlattenRGBDObservationWrapper(VectorWrapper):
    """ManiSkill's ``FlattenRGBDObservationWrapper(env, rgb, depth, state, sep_depth)`` for an env from ``make``.

    The observation becomes ManiSkill's flattened one: "rgb" (the cameras' images on the channel
    axis), "depth" (or one "rgbd" with ``sep_depth=False``) and "state" (the agent and extra
    groups, or a "+state" mode's state, flattened by ManiSkill's ``flatten_state_dict``); the
    same for each final observation in the infos. As ManiSkill's, rgb and depth are dropped when
    the cameras do not capture them.

    Examples:
        >>> envs = FlattenRGBDObservationWrapper(make("PickCube-v1", num_envs=4, obs_mode="rgb"), rgb=True, depth=False, state=True)
    """

    def __init__(self, env: VectorEnv, rgb: bool = True, depth: bool = True, state: bool = True, sep_depth: bool = True) -> None:
        _check_vector_env(env, "FlattenRGBDObservationWrapper")
        super().__init__(env)
        space = env.single_observation_space
        layout = maniskill_layout(space.spaces) if isinstance(space, spaces.Dict) else {}
        if not layout.get("sensor_data"):
            raise ValueError(
                "FlattenRGBDObservationWrapper needs camera observations: make the envs with a visual obs_mode "
                f"('rgb', 'rgbd', 'rgb+state', ...), got the observation space {space}"
            )
        self._cameras = list(layout["sensor_data"])
        first = layout["sensor_data"][self._cameras[0]]
        self.include_rgb, self.include_depth = bool(rgb) and "rgb" in first, bool(depth) and "depth" in first
        self.include_state, self.sep_depth = bool(state), bool(sep_depth)
        sample = self._flatten(_zeros(space))
        self.single_observation_space = spaces.Dict([(key, space_for(value)) for key, value in sample.items()])
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

    def _flatten(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        import torch

        as_numpy = not any(hasattr(x, "detach") for x in _leaves(obs))
        # np.array: the workers' observation buffers are read-only, which torch does not take
        batch = tree_map(lambda x: x if hasattr(x, "detach") else torch.from_numpy(np.array(x)), dict(obs))
        out = flatten_rgbd(
            maniskill_layout(batch, self._cameras), rgb=self.include_rgb, depth=self.include_depth,
            state=self.include_state, sep_depth=self.sep_depth, device=_leaves(batch)[0].device,
        )
        return {key: value.numpy() for key, value in out.items()} if as_numpy else out

    def observations(self, observations: Any) -> Any:
        """ManiSkill's flattened observation of a batch under fastenv's keys."""
        return self._flatten(observations)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._flatten(obs), infos

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        return self._flatten(obs), rewards, terminations, truncations, _finals(infos, self._flatten)


class FlattenActionSpaceWrapper(VectorWrapper):
    """ManiSkill's ``FlattenActionSpaceWrapper(env)`` for an env from ``make``: one flat Box action for a
    task with several agents (a ``Dict`` action space of 1-D Boxes).

    A flat action (N, sum of the agents' sizes) is split into the agents' actions in the Dict
    space's order, as ManiSkill's wrapper splits it.

    Examples:
        >>> envs = FlattenActionSpaceWrapper(make("TwoRobotStackCube-v1", num_envs=2, obs_mode="state"))
    """

    def __init__(self, env: VectorEnv) -> None:
        _check_vector_env(env, "FlattenActionSpaceWrapper")
        space = env.single_action_space
        if not isinstance(space, spaces.Dict):
            raise TypeError(f"FlattenActionSpaceWrapper flattens a Dict action space (several agents), got {space}")
        flat = [key for key, sub in space.spaces.items() if not (isinstance(sub, spaces.Box) and len(sub.shape) == 1)]
        if flat:
            raise ValueError(f"FlattenActionSpaceWrapper splits a Dict of 1-D Box actions (as ManiSkill's), got {space}")
        super().__init__(env)
        self._orig_single_action_space = space
        self._sizes = [(key, sub.shape[0]) for key, sub in space.spaces.items()]
        self.single_action_space = spaces.flatten_space(space)
        self.action_space = batch_space(self.single_action_space, self.num_envs)

    def actions(self, actions: Any) -> dict[str, Any]:
        """The agents' actions of a flat batch (one flat action: a batch of one, with one env)."""
        if self.num_envs == 1 and tuple(actions.shape) == self.single_action_space.shape:
            actions = actions[None]
        if tuple(actions.shape) != self.action_space.shape:
            raise ValueError(f"actions must have shape {self.action_space.shape}, got {tuple(actions.shape)}")
        out, start = {}, 0
        for key, size in self._sizes:
            out[key] = actions[:, start : start + size]
            start += size
        return out

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        return self.env.step(self.actions(actions))


__all__ = ["FlattenActionSpaceWrapper", "FlattenRGBDObservationWrapper"]
