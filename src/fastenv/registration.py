"""Gymnasium ids of the fastenv envs; entry points are strings so nothing heavy is imported."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = {
    "fastenv/Libero-v0": "fastenv.backends.libero:make_env",
}


def register_envs() -> None:
    """Register the fastenv ids with Gymnasium (idempotent)."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, disable_env_checker=False)
