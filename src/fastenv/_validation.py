"""Argument and action checks that raise ValueError/TypeError saying what was expected and what came."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from gymnasium import spaces


def check_positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int if it is an integer >= 1, else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= 1, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value}")
    return int(value)


def check_discount(name: str, value: Any) -> float:
    """Return ``value`` as a float in (0, 1], else raise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a float in (0, 1], got {value!r} ({type(value).__name__})")
    if not 0.0 < float(value) <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return float(value)


def check_box_action(action: Any, space: spaces.Box, what: str = "action") -> np.ndarray:
    """Return ``action`` as an array of ``space``'s shape; raise ValueError on wrong shape, dtype or NaN."""
    return check_real_array(action, space.shape, what)


def check_real_array(action: Any, shape: tuple[int, ...], what: str, wrong_form: type[Exception] = ValueError) -> np.ndarray:
    """Return ``action`` as a finite real array of ``shape``; a wrong dtype or shape raises
    ``wrong_form``, a non-finite value ValueError."""
    array = np.asarray(action)
    if array.dtype.kind not in "fiu":
        raise wrong_form(f"{what} must be a real-valued array (float or int), got dtype {array.dtype}")
    if array.shape != shape:
        raise wrong_form(f"{what} must have shape {shape}, got shape {array.shape}")
    if array.dtype.kind == "f" and np.count_nonzero(np.isfinite(array)) != array.size:  # (.all() costs more)
        bad = np.argwhere(~np.isfinite(array))[0].tolist()
        raise ValueError(f"{what} must be finite, got {array[tuple(bad)]} at index {tuple(bad)}")
    return array


def check_action(action: Any, space: spaces.Space, what: str = "action") -> Any:
    """Check ``action`` against ``space``; Box actions are returned as arrays."""
    if isinstance(space, spaces.Box):
        return check_box_action(action, space, what)
    if isinstance(space, spaces.Discrete):
        array = np.asarray(action)
        if array.shape != () or array.dtype.kind not in "iu":
            raise ValueError(f"{what} must be a scalar integer for {space}, got {action!r}")
        if not space.contains(array.astype(space.dtype)):
            raise ValueError(f"{what} must be in [{space.start}, {space.start + space.n}), got {action!r}")
        return action
    if isinstance(space, spaces.MultiDiscrete):
        array = np.asarray(action)
        if array.shape != space.shape or array.dtype.kind not in "iu":
            raise ValueError(
                f"{what} must be an integer array of shape {space.shape}, got {array.dtype} {array.shape}"
            )
        if not space.contains(array.astype(space.dtype)):
            raise ValueError(f"{what} {array.tolist()} is outside {space}")
        return array
    if not space.contains(action):
        raise ValueError(f"{what} {action!r} is not an element of {space}")
    return action


_SMALL = 64  # batches up to this many actions are checked element by element in Python


class BatchTypeError(TypeError, ValueError):
    """A vector env's batch (of actions, or a reset mask) of the wrong count, shape, dtype or structure.

    A ``TypeError``, as Gymnasium's vector envs raise, and a ``ValueError``, as fastenv raised before.
    """


def check_real_batch(actions: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    """``check_real_array`` for a batch: its wrong dtype or shape raise ``BatchTypeError``."""
    return check_real_array(actions, shape, what, BatchTypeError)


def batch_action_checker(space: spaces.Space) -> Callable[..., Any]:
    """``check_batch_actions`` for one space, with the space's type tests done once.

    Returns ``check(actions, count, what="actions")``. A batch that passes the quick test of a
    Discrete or Box space is returned as ``check_batch_actions`` would; any other goes through
    ``check_batch_actions`` itself (so its errors are that function's).
    """
    if type(space) is spaces.Discrete:
        low, high = space.start, space.start + space.n

        def check_discrete(actions: Any, count: int, what: str = "actions") -> Any:
            array = np.asarray(actions)
            if array.shape == (count,) and array.dtype.kind in "iub" and count <= _SMALL:
                values = array.tolist()  # a few numbers: Python's min and max cost less than numpy's calls
                if low <= min(values) and max(values) < high:
                    return array
            return check_batch_actions(actions, space, count, what)

        return check_discrete
    if type(space) is spaces.Box:
        shape = space.shape

        def check_box(actions: Any, count: int, what: str = "actions") -> Any:
            return check_real_batch(actions, (count, *shape), what)

        return check_box

    def check_any(actions: Any, count: int, what: str = "actions") -> Any:
        return check_batch_actions(actions, space, count, what)

    return check_any


def check_batch_actions(actions: Any, space: spaces.Space, count: int, what: str = "actions") -> Any:
    """Check a batch of ``count`` actions of ``space``; returned as arrays (dicts / tuples of them).

    Arrays keep the caller's dtype: SyncVectorEnv hands each env its row unchanged.
    """
    if isinstance(space, spaces.Dict):
        # Leaf by leaf, as at the top level: Space.contains would refuse a float64 batch for a
        # float32 Box, which SyncVectorEnv passes on as it is.
        if not isinstance(actions, Mapping):
            raise BatchTypeError(f"{what} must be a dict with the keys {list(space.spaces)}, got {type(actions).__name__}")
        missing = [key for key in space.spaces if key not in actions]
        if missing:
            raise BatchTypeError(f"{what} must have the keys {list(space.spaces)}, got {list(actions)} (missing {missing})")
        return {key: check_batch_actions(actions[key], sub, count, f"{what}[{key!r}]") for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not isinstance(actions, (tuple, list)) or len(actions) != len(space.spaces):
            got = f"{type(actions).__name__} of {len(actions)}" if isinstance(actions, (tuple, list)) else type(actions).__name__
            raise BatchTypeError(f"{what} must be a tuple of {len(space.spaces)} batches, got {got}")
        return tuple(check_batch_actions(a, sub, count, f"{what}[{i}]") for i, (a, sub) in enumerate(zip(actions, space.spaces)))
    if isinstance(space, spaces.Box):
        return check_real_batch(actions, (count, *space.shape), what)
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        array = np.asarray(actions)
        shape = (count, *space.shape)
        if array.shape != shape or array.dtype.kind not in "iub":
            raise BatchTypeError(f"{what} must be an integer array of shape {shape}, got {array.dtype} {array.shape}")
        # Space.contains on the batched space would do, but builds that space on every step: the
        # bounds check below is the same test, and says which action is out of range.
        if isinstance(space, spaces.Discrete):
            low, high = space.start, space.start + space.n
        elif isinstance(space, spaces.MultiDiscrete):
            low, high = space.start, space.start + space.nvec
        else:
            low, high = 0, 2
        bad = (array < low) | (array >= high)
        if np.count_nonzero(bad):
            index = tuple(np.argwhere(bad)[0].tolist())
            raise ValueError(f"{what}{list(index)} = {array[index]} is outside {space}")
        return array
    from gymnasium.vector.utils import batch_space, iterate

    batched = batch_space(space, count)
    try:
        items = list(iterate(batched, actions))
    except Exception as exc:
        raise BatchTypeError(f"{what} must be a batch of {count} actions of {space}: {exc}") from exc
    if len(items) != count:
        raise BatchTypeError(f"{what} must hold {count} actions, got {len(items)}")
    for i, item in enumerate(items):
        if not space.contains(item):
            raise ValueError(f"{what}[{i}] = {item!r} is not an element of {space}")
    return actions
