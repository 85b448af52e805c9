"""Single-env wrappers: headless rendering, modality pruning, action chunks, flat spaces."""

from fastenv.core.spaces import chunk_space
from fastenv.wrappers.action import ActionChunk
from fastenv.wrappers.flatten import FlattenActionChunk, FlattenModalities
from fastenv.wrappers.observation import PruneModalities
from fastenv.wrappers.rendering import HeadlessRender
from fastenv.wrappers.stack import wrap

__all__ = [
    "ActionChunk",
    "FlattenActionChunk",
    "FlattenModalities",
    "HeadlessRender",
    "PruneModalities",
    "chunk_space",
    "wrap",
]
