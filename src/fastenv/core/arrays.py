"""Array helpers shared by numpy and torch batches: creation ops and row access on nested structures.

A batch is an array (or tensor) with one row per env, or a dict / tuple of such batches (the
shape of a Dict / Tuple space). Row indices are 1-D integer arrays of the batch's own kind.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class NumpyOps:
    """Array creation for batches held in numpy arrays."""

    def zeros(self, shape: Any, dtype: str) -> np.ndarray:
        return np.zeros(shape, dtype=dtype)

    def arange(self, n: int) -> np.ndarray:
        return np.arange(n)

    def index(self, rows: Any) -> np.ndarray:
        return np.asarray(rows, dtype=np.int64)

    def nonzero(self, mask: np.ndarray) -> np.ndarray:
        return mask.ravel().nonzero()[0]  # np.flatnonzero, without its Python-level calls

    def full_like_rows(self, value: np.ndarray, rows: int) -> np.ndarray:
        return np.zeros((rows, *np.shape(value)[1:]), dtype=np.asarray(value).dtype)

    def powers(self, base: float, exponents: np.ndarray) -> np.ndarray:
        return base ** exponents.astype(np.float64)

    def numpy(self, value: Any) -> np.ndarray:
        return np.asarray(value)

    def asarray(self, value: Any) -> np.ndarray:
        return np.asarray(value)


class TorchOps:
    """Array creation for batches held in torch tensors on ``device`` (ManiSkill on GPU)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = device

    def zeros(self, shape: Any, dtype: str) -> Any:
        return self.torch.zeros(shape, dtype=getattr(self.torch, dtype), device=self.device)

    def arange(self, n: int) -> Any:
        return self.torch.arange(n, device=self.device)

    def index(self, rows: Any) -> Any:
        return self.torch.as_tensor(rows, dtype=self.torch.int64, device=self.device)

    def nonzero(self, mask: Any) -> Any:
        return self.torch.nonzero(mask).flatten()

    def full_like_rows(self, value: Any, rows: int) -> Any:
        return value.new_zeros((rows, *value.shape[1:]))

    def powers(self, base: float, exponents: Any) -> Any:
        return base ** exponents.double()

    def numpy(self, value: Any) -> np.ndarray:
        return value.detach().cpu().numpy()

    def asarray(self, value: Any) -> Any:
        return self.torch.as_tensor(value, device=self.device)


NUMPY = NumpyOps()


def tree_map(fn: Any, tree: Any, *others: Any) -> Any:
    """``fn`` on every leaf of a batched structure (dicts and tuples of leaves), with the matching
    leaves of ``others``; the result has the same structure."""
    if isinstance(tree, dict):
        return {key: tree_map(fn, sub, *(o[key] for o in others)) for key, sub in tree.items()}
    if isinstance(tree, tuple):
        return tuple(tree_map(fn, sub, *(o[i] for o in others)) for i, sub in enumerate(tree))
    return fn(tree, *others)


def tree_leaves(tree: Any) -> list[Any]:
    """The leaves of a structure of dicts and tuples, in order."""
    if isinstance(tree, dict):
        return [leaf for sub in tree.values() for leaf in tree_leaves(sub)]
    if isinstance(tree, tuple):
        return [leaf for sub in tree for leaf in tree_leaves(sub)]
    return [tree]


def _copy(value: Any) -> Any:
    return value.copy() if isinstance(value, np.ndarray) else value


def take_rows(batch: Any, rows: Any) -> Any:
    """A copy of ``rows`` (a slice or an index array) of a batched structure (tensors: a view for a slice)."""
    if isinstance(batch, (dict, tuple)):
        return tree_map(lambda x: take_rows(x, rows), batch)
    return _copy(batch[rows]) if isinstance(rows, slice) else batch[rows]


def put_rows(batch: Any, rows: Any, value: Any) -> None:
    """Write ``value`` into ``rows`` (a slice, an index array, or one row) of a batched structure."""
    if isinstance(batch, (dict, tuple)):
        tree_map(lambda x, v: put_rows(x, rows, v), batch, value)
    else:  # the hot path (a worker writes every env's observation): no function per leaf
        batch[rows] = value


def get_row(batch: Any, row: int) -> Any:
    """A copy of one env's value (numpy arrays are copied, tensors are views)."""
    if isinstance(batch, (dict, tuple)):
        return tree_map(lambda x: get_row(x, row), batch)
    return _copy(batch[row])


def stack_rows(rows: list[Any]) -> Any:
    """One batch of per-env values (arrays, or dicts / tuples of them): each leaf stacked."""
    first = rows[0]
    if isinstance(first, dict):
        return {key: stack_rows([row[key] for row in rows]) for key in first}
    if isinstance(first, tuple):
        return tuple(stack_rows([row[i] for row in rows]) for i in range(len(first)))
    return np.stack([np.asarray(row) for row in rows])


def to_numpy(value: Any) -> Any:
    """``value`` with every tensor in it (dicts, tuples, object arrays) as a numpy array."""
    if isinstance(value, dict):
        return {key: to_numpy(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(to_numpy(item) for item in value)
    if isinstance(value, np.ndarray) and value.dtype == object:
        out = np.empty(value.shape, dtype=object)
        for index, item in np.ndenumerate(value):
            out[index] = to_numpy(item)
        return out
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor, on any device
        return value.detach().cpu().numpy()
    return value


def view_row(batch: Any, row: int) -> Any:
    """One env's value without copying (to hand an action row to an env)."""
    if isinstance(batch, (dict, tuple)):
        return tree_map(lambda x: x[row], batch)
    return batch[row]


def leading_dim(batch: Any) -> int:
    """Rows of a batched structure (the first leaf's first dimension)."""
    while isinstance(batch, (dict, tuple)):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return len(batch)


def alloc_rows(like: Any, rows: int, ops: Any) -> Any:
    """Zeros shaped as the batched structure ``like`` but with ``rows`` rows."""
    return tree_map(lambda x: ops.full_like_rows(x, rows), like)
