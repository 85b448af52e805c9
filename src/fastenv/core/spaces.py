"""The action space of a chunk of actions."""

from __future__ import annotations

import numpy as np
from gymnasium import spaces


def chunk_space(space: spaces.Space, chunk: int) -> spaces.Space:
    """The action space of ``chunk`` consecutive actions of ``space``."""
    if isinstance(space, spaces.Box):
        low = np.broadcast_to(space.low, (chunk, *space.shape))
        high = np.broadcast_to(space.high, (chunk, *space.shape))
        return spaces.Box(low=low, high=high, dtype=space.dtype)
    if isinstance(space, spaces.Discrete):
        return spaces.MultiDiscrete(
            np.full(chunk, space.n), dtype=space.dtype, start=np.full(chunk, space.start)
        )
    if isinstance(space, spaces.MultiDiscrete):
        return spaces.MultiDiscrete(
            np.broadcast_to(space.nvec, (chunk, *space.shape)),
            dtype=space.dtype,
            start=np.broadcast_to(space.start, (chunk, *space.shape)),
        )
    raise TypeError(f"ActionChunk supports Box, Discrete and MultiDiscrete action spaces, got {space}")
