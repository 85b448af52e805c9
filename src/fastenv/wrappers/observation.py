"""PruneModalities: keep only some observation keys, and have the simulator produce only those."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym

from fastenv.wrappers.base import FastenvWrapper


class PruneModalities(FastenvWrapper):
    """Keep only ``modalities``; the simulator stops producing (rendering) the rest where it can.

    Args:
        env: the env to prune.
        modalities: observation keys to keep, as the simulator names them.

    Raises:
        ValueError: an unknown key (the message lists the available ones).

    Example:
        >>> env = PruneModalities(env, ["agentview_image", "robot0_proprio-state"])
    """

    def __init__(self, env: gym.Env, modalities: Sequence[str]) -> None:
        if isinstance(modalities, str):
            raise TypeError(f"modalities must be a sequence of keys, got the string {modalities!r}")
        super().__init__(env)
        self.modalities = tuple(dict.fromkeys(modalities))
        self.env.select_modalities(self.modalities)
