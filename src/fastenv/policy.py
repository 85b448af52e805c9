"""Moved to ``fastenv.bench.policies``; this module warns and hands its names on for one release."""

from __future__ import annotations

import warnings

from fastenv.bench.policies import ChunkPolicy, ExactChunkPolicy, VLASizedTransformer

__all__ = ["ChunkPolicy", "ExactChunkPolicy", "VLASizedTransformer"]

warnings.warn("fastenv.policy moved to fastenv.bench.policies; the old module goes in the next release", DeprecationWarning, stacklevel=2)
