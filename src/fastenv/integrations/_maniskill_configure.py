"""What ManiSkill's wrappers decide after ``gym.make``, set on every env of a fastenv ManiSkill vector env.

Its own module so that ``RecordEpisode`` (``_maniskill_record``) and the entry points
(``maniskill``) both use it and neither imports the other.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import VectorEnv


def _set_in_worker(env: gym.Env, name: str, value: Any) -> None:
    adapter = env.get_wrapper_attr("adapter")
    if name == "capture":
        adapter.set_capture(value)
    else:
        adapter.ignore_terminations = bool(value)


def configure(env: VectorEnv, **settings: Any) -> None:
    """Set what ManiSkill's wrappers decide after ``gym.make`` on every env of a fastenv ManiSkill vector env.

    ``ignore_terminations`` (``ManiSkillVectorEnv``'s option) and ``capture`` (what
    ``RecordEpisode`` needs in the infos: "render", "state"); before the first reset.
    """
    raw = env.unwrapped
    for name, value in settings.items():
        if name not in ("ignore_terminations", "capture"):
            raise TypeError(f"configure() takes ignore_terminations and capture, got {name!r}")
        if hasattr(raw, "sim"):  # the batched env, in this process
            if name == "capture":
                raw.sim.set_capture(value)
            else:
                raw.sim.ignore_terminations = bool(value)
        elif hasattr(raw, "apply"):  # CPU envs in fastenv's workers
            raw.apply(_set_in_worker, name, value)
        else:
            raise TypeError(f"expected a fastenv ManiSkill vector env (from fastenv.integrations.maniskill.make), got {type(raw).__name__}")
