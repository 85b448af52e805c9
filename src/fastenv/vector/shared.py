"""Observations, actions, rewards and flags in one shared-memory block, laid out from the spaces."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from multiprocessing import shared_memory
from typing import Any

import numpy as np
from gymnasium import spaces

_ALIGN = 64
_LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)  # one array each


def leaf_specs(space: spaces.Space, prefix: str) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """(path, per-env shape, dtype) of every array leaf of ``space``."""
    if isinstance(space, spaces.Dict):
        return [spec for key, sub in space.spaces.items() for spec in leaf_specs(sub, f"{prefix}/{key}")]
    if isinstance(space, spaces.Tuple):
        return [spec for i, sub in enumerate(space.spaces) for spec in leaf_specs(sub, f"{prefix}/{i}")]
    if isinstance(space, _LEAF_SPACES):
        return [(prefix, tuple(space.shape), np.dtype(space.dtype))]
    raise TypeError(
        f"fastenv vector envs support Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple spaces, got {space}"
    )


def unsupported_leaf(space: spaces.Space) -> spaces.Space | None:
    """The first leaf of ``space`` that ``leaf_specs`` cannot lay out (a custom space), or None."""
    if isinstance(space, spaces.Dict):
        return next((leaf for sub in space.spaces.values() if (leaf := unsupported_leaf(sub)) is not None), None)
    if isinstance(space, spaces.Tuple):
        return next((leaf for sub in space.spaces if (leaf := unsupported_leaf(sub)) is not None), None)
    return None if isinstance(space, _LEAF_SPACES) else space


def leaf_items(space: spaces.Space, value: Any, prefix: str) -> list[tuple[str, Any]]:
    """(path, leaf) of a value structured as ``space``, in ``leaf_specs`` order."""
    if isinstance(space, spaces.Dict):
        return [item for key, sub in space.spaces.items() for item in leaf_items(sub, value[key], f"{prefix}/{key}")]
    if isinstance(space, spaces.Tuple):
        return [item for i, sub in enumerate(space.spaces) for item in leaf_items(sub, value[i], f"{prefix}/{i}")]
    return [(prefix, value)]


def wide_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype an action leaf of ``dtype`` is moved in: float64 for floats, int64 for integers.

    Wide enough to hold the actions callers give (float32 or float64 for a float32 Box, int32 or
    int64 for a Discrete) exactly, so the env gets them in the caller's dtype (``holds_exactly``).
    """
    return np.dtype(np.float64) if np.dtype(dtype).kind == "f" else np.dtype(np.int64)


def holds_exactly(wide: np.dtype, dtype: np.dtype) -> bool:
    """True when every value of ``dtype`` survives a round trip through ``wide`` (a ``wide_dtype``)."""
    if wide.kind == "f":  # float64 has 53 bits of mantissa: no 64-bit integer, no longdouble
        return (dtype.kind == "f" and dtype.itemsize <= 8) or (dtype.kind in "biu" and dtype.itemsize <= 4)
    return dtype.kind in "bi" or (dtype.kind == "u" and dtype.itemsize <= 4)


def structure(space: spaces.Space, arrays: Mapping[str, np.ndarray], prefix: str) -> Any:
    """Arrange leaf arrays back into the space's structure (dict / tuple / array)."""
    if isinstance(space, spaces.Dict):
        return {key: structure(sub, arrays, f"{prefix}/{key}") for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(structure(sub, arrays, f"{prefix}/{i}") for i, sub in enumerate(space.spaces))
    return arrays[prefix]


class SharedArrays:
    """Named arrays of ``num_rows`` rows in a single shared-memory block.

    A spec is (path, per-row shape, dtype), or (path, per-row shape, dtype, rows) for an array of
    another number of rows. The creator owns the block and unlinks it in ``close()``; other
    processes ``attach`` by name.
    """

    def __init__(self, specs: list[tuple], num_rows: int, name: str | None = None):
        self.specs = [(path, tuple(shape), np.dtype(dtype), *rows) for path, shape, dtype, *rows in specs]
        self.num_rows = num_rows
        offsets, total, row_counts = {}, 0, {}
        for path, shape, dtype, *rows in self.specs:
            row_counts[path] = rows[0] if rows else num_rows
            total = -(-total // _ALIGN) * _ALIGN
            offsets[path] = total
            total += int(np.prod((row_counts[path], *shape), dtype=np.int64)) * dtype.itemsize
        self.owner = name is None
        if self.owner:
            name = f"fastenv_{os.getpid()}_{secrets.token_hex(6)}"
            self._shm = shared_memory.SharedMemory(name=name, create=True, size=max(total, 1))
        else:
            # Spawned workers share the creator's resource tracker, which only unlinks what is
            # still registered when every process has gone: the creator's unlink() is what counts.
            self._shm = shared_memory.SharedMemory(name=name, create=False)
        self.name = self._shm.name
        self.arrays = {
            path: np.ndarray((row_counts[path], *shape), dtype=dtype, buffer=self._shm.buf, offset=offsets[path])
            for path, shape, dtype, *_ in self.specs
        }

    def handle(self) -> tuple[str, list, int]:
        """What another process needs to attach: (name, specs, rows)."""
        return self.name, self.specs, self.num_rows

    @classmethod
    def attach(cls, handle: tuple[str, list, int]) -> SharedArrays:
        name, specs, rows = handle
        return cls(specs, rows, name=name)

    def close(self) -> None:
        if self._shm is None:
            return
        self.arrays = {}
        try:
            self._shm.close()
        except BufferError:  # a caller still holds a view; the OS frees it with the process
            pass
        if self.owner:
            try:
                self._shm.unlink()
            except FileNotFoundError:
                pass
        self._shm = None
