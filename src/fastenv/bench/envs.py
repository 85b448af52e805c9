"""The benchmark's LIBERO envs: the keys each regime keeps, the episode lengths, a stock-like env.

Both regimes end each env's episodes at its own length, drawn around ``episode_steps`` (the long
tail that dynamic batching is for), so resets fall inside every timed window, as in training.
"""

from __future__ import annotations

from typing import Any

import numpy as np

IMAGE_KEY, STATE_KEY = "agentview_image", "robot0_proprio-state"
SLIM_MODALITIES = (IMAGE_KEY, STATE_KEY)  # the ablation's: one camera and the robot's state
IMAGE_KEYS = ("agentview_image", "robot0_eye_in_hand_image")
SERVER_MODALITIES = (*IMAGE_KEYS, STATE_KEY)  # what pi0 reads on LIBERO: two views and the robot's state


def episode_lengths(num_envs: int, episode_steps: int, seed: int) -> list[int]:
    """Each env's episode length: uniform in [episode_steps / 2, 3 * episode_steps / 2] (seeded).

    Example:
        >>> episode_lengths(4, 160, 0)
        [216, 182, 162, 123]
    """
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(episode_steps // 2, 3 * episode_steps // 2 + 1, num_envs)]


def stepwise_env(chunk: int, *args: Any, **kwargs: Any) -> Any:
    """``make_env(*args, **kwargs)`` executing chunks of ``chunk`` one step at a time, an observation after each."""
    from fastenv.envs.libero import make_env
    from fastenv.wrappers import ActionChunk

    return ActionChunk(make_env(*args, chunk=None, **kwargs), chunk, skip_observations=False)
