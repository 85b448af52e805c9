"""Infos: Gymnasium's vector layout (arrays plus ``_key`` masks), and the keys every step carries.

``STEP_KEYS`` describe the transition itself (how many sub-steps ran, their rewards, the discount
to bootstrap with). Under same-step autoreset Gymnasium moves a finished env's step info into
``final_info`` and puts the reset's info at the top level; fastenv keeps those keys at the top
level too, so a training loop reads them from the same place on every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv

STEP_KEYS = ("chunk_steps", "chunk_rewards", "chunk_discount")


class _InfoBatch:
    """The part of a VectorEnv that Gymnasium's ``_add_info`` uses: its batch size."""

    _add_info = VectorEnv._add_info

    def __init__(self, size: int) -> None:
        self.num_envs = size


def add_info(infos: dict[str, Any], info: Mapping[str, Any], index: int, size: int) -> dict[str, Any]:
    """Add one env's ``info`` at ``index`` of a batch of ``size`` envs (Gymnasium's ``_add_info``)."""
    return _InfoBatch(size)._add_info(infos, dict(info), index)


def row_info(infos: Mapping[str, Any], index: int) -> dict[str, Any]:
    """The info of env ``index`` out of a batched info dict (keys whose mask is set for it)."""
    out: dict[str, Any] = {}
    for key, value in infos.items():
        if key.startswith("_") or key == "final_observation":
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[index]:
            continue
        out[key] = row_info(value, index) if isinstance(value, Mapping) else value[index]
    return out


def step_keys(info: Mapping[str, Any]) -> dict[str, Any]:
    """The ``STEP_KEYS`` entries of a step's info."""
    return {key: info[key] for key in STEP_KEYS if key in info}


def with_legacy_final_keys(infos: dict[str, Any]) -> dict[str, Any]:
    """Also expose ``final_obs`` as ``final_observation`` (ManiSkill, Gymnasium < 1.0)."""
    if "final_obs" in infos:
        infos["final_observation"] = infos["final_obs"]
        infos["_final_observation"] = infos["_final_obs"]
    return infos


def final_observations(infos: Mapping[str, Any]) -> tuple[np.ndarray, list[Any]]:
    """(env indices, final observations) of the envs whose episode ended in this step.

    Examples:
        >>> ids, finals = final_observations(infos)   # bootstrap V(final_obs) for these envs
    """
    if "final_obs" not in infos:
        return np.zeros(0, dtype=np.int64), []
    ids = np.flatnonzero(np.asarray(infos["_final_obs"]))
    return ids, [infos["final_obs"][i] for i in ids]


# -- batched infos (dicts of arrays over rows, masks in the ops' kind) ------------------------------
def clear_rows(target: dict[str, Any], pos: Any) -> None:
    """Drop every key of ``target`` for the rows ``pos`` (their masks become False)."""
    for key in list(target):
        if key.startswith("_"):
            continue
        if isinstance(target[key], dict):
            clear_rows(target[key], pos)
        target[f"_{key}"][pos] = False


def merge_rows(target: dict[str, Any], pos: Any, info: Mapping[str, Any], size: int, ops: Any) -> dict[str, Any]:
    """Write a batched ``info`` (one row per entry of ``pos``) into rows ``pos`` of ``target``.

    Values missing a ``_key`` mask count as present for every row of ``info``.
    """
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info.get(f"_{key}")
        if isinstance(value, Mapping):
            target[key] = merge_rows(target.get(key, {}), pos, value, size, ops)
        else:
            array = target.get(key)
            if array is None:
                array = ops.full_like_rows(value, size)
                target[key] = array
            array[pos] = value
        present = target.get(f"_{key}")
        if present is None:
            present = ops.zeros(size, "bool")
            target[f"_{key}"] = present
        present[pos] = True if mask is None else mask
    return target


def take_info_rows(info: Mapping[str, Any], pos: Any, size: int, ops: Any) -> dict[str, Any]:
    """Rows ``pos`` of a batched info, as a batched info of ``size`` rows where only ``pos`` is set."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key.startswith("_"):
            continue
        mask = info[f"_{key}"][pos]
        if isinstance(value, Mapping):
            out[key] = take_info_rows(value, pos, size, ops)
        else:
            array = ops.full_like_rows(value, size)
            array[pos] = value[pos]
            out[key] = array
        present = ops.zeros(size, "bool")
        present[pos] = mask
        out[f"_{key}"] = present
    return out
