"""Moved to ``fastenv.eval.lerobot_eval``; this module warns and hands its names on for one release."""

from __future__ import annotations

import warnings

from fastenv.eval.lerobot_eval import (
    CAMERAS,
    CONTROL_FREQ,
    DEFAULT_START_SEED,
    DUMMY_ACTION,
    LEROBOT_DEFAULT_MAX_STEPS,
    LEROBOT_MAX_STEPS,
    NUM_STEPS_WAIT,
    RENDER_FPS,
    STATE_KEYS,
    LeRobotEpisode,
    LeRobotLoop,
    LeRobotPolicy,
    LeRobotProtocol,
    fastenv_episodes,
    lerobot_element,
    lerobot_episode_list,
    per_sample,
)

__all__ = [
    "CAMERAS", "CONTROL_FREQ", "DEFAULT_START_SEED", "DUMMY_ACTION", "LEROBOT_DEFAULT_MAX_STEPS", "LEROBOT_MAX_STEPS", "NUM_STEPS_WAIT",
    "RENDER_FPS", "STATE_KEYS", "LeRobotEpisode", "LeRobotLoop", "LeRobotPolicy", "LeRobotProtocol", "fastenv_episodes", "lerobot_element",
    "lerobot_episode_list", "per_sample",
]

warnings.warn("fastenv.eval.lerobot moved to fastenv.eval.lerobot_eval; the old module goes in the next release", DeprecationWarning,
              stacklevel=2)
