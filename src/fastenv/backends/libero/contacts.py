"""robosuite's ``check_contact`` by geom ids: the same answer without a name lookup per contact.

LIBERO's success check asks robosuite, every env step and several times per predicate, whether
two objects touch; robosuite answers by looking up both geoms' names of every active contact and
searching the objects' name lists for them (on libero_spatial ~0.7 ms per env step, a third of
the physics). Here each geom list becomes, once per model, a mask over the model's geom ids
(``name in geoms`` for every geom's robosuite name, exactly robosuite's test), and the contacts are
tested by id.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fastenv.backends.libero.mujoco_facts import step_aside
from fastenv.core.fast_paths import FastPath


class ContactCheck:
    """``env.check_contact(geoms_1, geoms_2=None)`` for one robosuite env (installed on it)."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self._sim: Any = None
        self._names: list[Any] = []
        self._masks: dict[tuple[Any, ...], np.ndarray] = {}

    def __call__(self, geoms_1: Any, geoms_2: Any = None) -> bool:
        from robosuite.models.base import MujocoModel

        if type(geoms_1) is str:  # robosuite's normalisation, as it does it
            geoms_1 = [geoms_1]
        elif isinstance(geoms_1, MujocoModel):
            geoms_1 = geoms_1.contact_geoms
        if type(geoms_2) is str:
            geoms_2 = [geoms_2]
        elif isinstance(geoms_2, MujocoModel):
            geoms_2 = geoms_2.contact_geoms
        sim = self._raw.sim
        if sim is not self._sim:  # a hard reset builds a new model
            self._sim = sim
            self._names = [sim.model.geom_id2name(i) for i in range(sim.model.ngeom)]
            self._masks = {}
        data = sim.data._data
        ncon = int(data.ncon)
        if ncon == 0:
            return False
        contact = data.contact
        first, second = np.asarray(contact.geom1[:ncon]), np.asarray(contact.geom2[:ncon])
        if first.min() < 0 or second.min() < 0:  # a contact without a geom (a flex): robosuite's own loop
            return type(self._raw).check_contact(self._raw, geoms_1, geoms_2)
        mask_1 = self._mask(geoms_1)
        c1_in_g1, c2_in_g1 = mask_1[first], mask_1[second]
        if geoms_2 is None:
            return bool(np.any(c1_in_g1 | c2_in_g1))
        mask_2 = self._mask(geoms_2)
        return bool(np.any((c1_in_g1 & mask_2[second]) | (mask_2[first] & c2_in_g1)))

    def _mask(self, geoms: Any) -> np.ndarray:
        try:
            key = tuple(geoms)
            hash(key)
        except TypeError:  # unhashable entries: no cache
            return np.fromiter((name in geoms for name in self._names), bool, count=len(self._names))
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = np.fromiter((name in geoms for name in self._names), bool, count=len(self._names))
        return mask


def install(raw: Any) -> None:
    """Answer ``raw.check_contact`` by geom ids (``uninstall`` gives robosuite's method back)."""
    if installed(raw):
        return
    method = type(raw).check_contact
    if method.__qualname__ != "MujocoEnv.check_contact" or not method.__module__.startswith("robosuite."):
        step_aside(f"the {FastPath.CONTACT_CHECK_BY_GEOM_ID}", f"it reproduces robosuite's MujocoEnv.check_contact, this env's is {method.__qualname__}")
        return
    raw.check_contact = ContactCheck(raw)


def installed(raw: Any) -> bool:
    return isinstance(raw.__dict__.get("check_contact"), ContactCheck)


def uninstall(raw: Any) -> None:
    if isinstance(raw.__dict__.get("check_contact"), ContactCheck):
        del raw.check_contact
