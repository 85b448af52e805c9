"""wrap(): the canonical fastenv stack, in one fixed order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from fastenv.core import as_sim_env
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
    render_mode: str | None = None,
    gamma: float | None = None,
    flatten: bool = False,
) -> gym.Env:
    """Apply fastenv's stack to an env you already have.

    The order is fixed: simulator adapter -> HeadlessRender -> PruneModalities -> ActionChunk
    [-> FlattenModalities -> FlattenActionChunk]. Headless comes first so no viewer is ever drawn;
    pruning comes before chunking so the chunked env's observation space is the pruned one;
    flattening comes last, for libraries that want one Box in and one vector out.

    Args:
        env: a Gymnasium env, a LIBERO env (``OffScreenRenderEnv``), or a ManiSkill env (then
            the result is a batched ``ManiSkillVectorEnv``, since ManiSkill envs are batched).
        chunk: sub-actions per action; None leaves the action space as it is.
        modalities: observation keys to keep; None keeps them all.
        headless: close viewers and render only to arrays.
        render_mode: with ``headless``, None or "rgb_array".
        gamma: discount inside a chunk (None sums rewards).
        flatten: one float32 Box observation (the kept keys concatenated) and flat actions.

    Example:
        >>> env = fastenv.wrap(gym.make("CartPole-v1"), chunk=4)
    """
    if isinstance(env, gym.Env) and type(env.unwrapped).__module__.startswith("mani_skill."):
        # ManiSkill envs are batched on one device: they become a batched vector env in place.
        from fastenv.backends.maniskill import ManiSkillVectorEnv

        if flatten or not headless:
            raise ValueError("for ManiSkill envs wrap() takes chunk, modalities, gamma and render_mode")
        return ManiSkillVectorEnv(env, modalities=modalities, chunk=chunk, gamma=gamma, render_mode=render_mode)
    env = as_sim_env(env)
    if headless:
        env = HeadlessRender(env, render_mode=render_mode)
    elif render_mode is not None:
        raise ValueError("render_mode is only set by wrap() with headless=True")
    if modalities is not None:
        env = PruneModalities(env, modalities)
    if chunk is not None:
        env = ActionChunk(env, chunk=chunk, gamma=gamma)
    elif gamma is not None:
        raise ValueError("gamma discounts rewards inside a chunk; pass chunk= as well")
    if flatten:
        env = FlattenActionChunk(FlattenModalities(env))
    return env
