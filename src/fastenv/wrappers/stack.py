"""wrap(): the canonical fastenv stack, in one fixed order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv

from fastenv.core.protocol import KEEP
from fastenv.core.registry import find_backend
from fastenv.wrappers.action import ActionChunk
from fastenv.wrappers.flatten import FlattenActionChunk, FlattenModalities
from fastenv.wrappers.observation import PruneModalities
from fastenv.wrappers.rendering import HeadlessRender


def wrap(
    env: Any,
    *,
    chunk: int | None = None,
    modalities: Sequence[str] | None = None,
    headless: bool = True,
    render_mode: str | None = KEEP,
    gamma: float | None = None,
    flatten: bool = False,
    episode_statistics: bool = False,
) -> gym.Env | VectorEnv:
    """Apply fastenv's stack to an env you already have.

    The order is fixed: simulator adapter -> HeadlessRender -> PruneModalities -> ActionChunk
    [-> FlattenModalities -> FlattenActionChunk]. Headless comes first so no viewer is ever drawn;
    pruning comes before chunking so the chunked env's observation space is the pruned one;
    flattening comes last, for libraries that want one Box in and one vector out.

    Args:
        env: a Gymnasium env (any wrapper stack), or an env of a registered simulator: a LIBERO
            ``OffScreenRenderEnv`` or a ManiSkill CPU env (adopted by their adapters), a batched
            ManiSkill env (then the result is a vector env, driven in place).
        chunk: sub-actions per action; None leaves the action space as it is.
        modalities: observation keys to keep; None keeps them all.
        headless: close viewers and render only to arrays.
        render_mode: with ``headless``: "keep" (the env's frames, a window's turned into arrays),
            None or "rgb_array".
        gamma: discount inside a chunk (None sums rewards).
        flatten: one float32 Box observation (the kept keys concatenated) and flat actions.
        episode_statistics: ``info["episode"]`` at each episode's end: undiscounted return and
            length in simulator steps.

    Examples:
        >>> env = fastenv.wrap(gym.make("CartPole-v1"), chunk=4)
    """
    backend = find_backend(env)
    if backend is not None:
        env = backend.load()(
            env, chunk=chunk, modalities=modalities, headless=headless, render_mode=render_mode, gamma=gamma,
            flatten=flatten, episode_statistics=episode_statistics,
        )
        if isinstance(env, VectorEnv):  # batched in place: the backend built it with these options
            return env
    elif not isinstance(env, gym.Env):
        raise TypeError(
            f"fastenv wraps a gymnasium.Env or an env of a registered simulator, got {type(env).__module__}.{type(env).__name__}"
        )
    if headless:
        env = HeadlessRender(env, render_mode=render_mode)
    elif render_mode != KEEP:
        raise ValueError("render_mode is only set by wrap() with headless=True")
    if modalities is not None:
        env = PruneModalities(env, modalities)
    if chunk is not None:
        env = ActionChunk(env, chunk=chunk, gamma=gamma, episode_statistics=episode_statistics)
    elif gamma is not None:
        raise ValueError("gamma discounts rewards inside a chunk; pass chunk= as well")
    elif episode_statistics:
        env = gym.wrappers.RecordEpisodeStatistics(env)
    if flatten:
        env = FlattenActionChunk(FlattenModalities(env))
    return env
