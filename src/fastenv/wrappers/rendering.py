"""HeadlessRender: no on-screen viewer, no viewport; render only to an array when asked."""

from __future__ import annotations

import gymnasium as gym

from fastenv.wrappers.base import FastenvWrapper


class HeadlessRender(FastenvWrapper):
    """Close any on-screen viewer and report ``render_mode`` None unless "rgb_array" is asked for.

    Args:
        env: the env to strip.
        render_mode: None (no rendering at all) or "rgb_array" (frames from ``render()``).

    Example:
        >>> env = HeadlessRender(gym.make("CartPole-v1", render_mode="human"))
    """

    def __init__(self, env: gym.Env, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"HeadlessRender's render_mode must be None or 'rgb_array', got {render_mode!r}")
        super().__init__(env)
        self.env.make_headless(render_mode)

    @property
    def render_mode(self) -> str | None:
        return self.env.render_mode
