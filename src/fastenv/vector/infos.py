"""Batch per-env info dicts the way Gymnasium's vector envs do: arrays plus ``_key`` masks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def add_info(infos: dict[str, Any], info: Mapping[str, Any], index: int, size: int) -> dict[str, Any]:
    """Add one env's ``info`` at ``index`` of a batch of ``size`` envs.

    Every key gets an array of ``size`` (numbers and arrays keep their dtype, other objects go in an
    object array) and a boolean mask ``_key`` saying which envs have it; nested dicts recurse.
    ``final_obs`` is kept as an object array of single observations, as Gymnasium does.
    """
    for key, value in info.items():
        if key == "final_obs":
            array = infos.get(key)
            if array is None:
                array = np.full(size, None, dtype=object)
            array[index] = value
        elif isinstance(value, dict):
            array = add_info(infos.get(key, {}), value, index, size)
        else:
            array = infos.get(key)
            if array is None:
                if type(value) in (int, float, bool) or isinstance(value, np.number):
                    array = np.zeros(size, dtype=type(value))
                elif isinstance(value, np.ndarray):
                    array = np.zeros((size, *value.shape), dtype=value.dtype)
                else:
                    array = np.full(size, None, dtype=object)
            array[index] = value
        mask = infos.get(f"_{key}")
        if mask is None:
            mask = np.zeros(size, dtype=np.bool_)
        mask[index] = True
        infos[key], infos[f"_{key}"] = array, mask
    return infos


def with_legacy_final_keys(infos: dict[str, Any]) -> dict[str, Any]:
    """Also expose ``final_obs`` as ``final_observation`` (ManiSkill, Gymnasium < 1.0)."""
    if "final_obs" in infos:
        infos["final_observation"] = infos["final_obs"]
        infos["_final_observation"] = infos["_final_obs"]
    return infos
