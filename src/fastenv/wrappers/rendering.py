"""HeadlessRender: no on-screen viewer, no viewport; frames only as arrays."""

from __future__ import annotations

import gymnasium as gym

from fastenv.core.protocol import KEEP, make_gym_env_headless


class HeadlessRender(gym.Wrapper):
    """Close any on-screen viewer; render only to arrays, or not at all.

    Headless means no window, not no frames: by default (``render_mode="keep"``) an env built
    with ``"rgb_array"`` keeps it, and one built with ``"human"`` renders to arrays instead where
    it can. The simulator's own headless switch is used when there is one (a fastenv ``SimEnv``
    anywhere below); any other Gymnasium env has its window closed.

    Args:
        env: the env to strip.
        render_mode: "keep", None (no rendering at all) or "rgb_array" (frames from ``render()``).

    Examples:
        >>> env = HeadlessRender(gym.make("CartPole-v1", render_mode="human"))   # render_mode "rgb_array"
    """

    def __init__(self, env: gym.Env, render_mode: str | None = KEEP) -> None:
        if render_mode not in (None, "rgb_array", KEEP):
            raise ValueError(f"HeadlessRender's render_mode must be None, 'rgb_array' or {KEEP!r}, got {render_mode!r}")
        super().__init__(env)
        try:
            make_headless = env.get_wrapper_attr("make_headless")
        except AttributeError:
            make_gym_env_headless(env, render_mode)
        else:
            make_headless(render_mode)
