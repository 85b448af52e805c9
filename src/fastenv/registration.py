"""Gymnasium ids of the fastenv envs; entry points are strings so nothing heavy is imported."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS = {
    "fastenv/Libero-v0": ("fastenv.backends.libero:make_env", "fastenv.backends.libero:make_vec"),
    "fastenv/Behavior-v0": ("fastenv.backends.behavior:make_env", None),
    "fastenv/ManiSkill-v0": ("fastenv.backends.maniskill:make_env", "fastenv.backends.maniskill:make_vec"),
}


def register_envs() -> None:
    """Register the fastenv ids with Gymnasium (idempotent)."""
    for env_id, (entry_point, vector_entry_point) in ENV_IDS.items():
        if env_id not in gym.registry:
            # No passive checker: with num_envs the env is batched (array rewards), which it would
            # warn about; check_env still passes on the single env.
            gym.register(
                id=env_id,
                entry_point=entry_point,
                vector_entry_point=vector_entry_point,
                disable_env_checker=True,
            )
