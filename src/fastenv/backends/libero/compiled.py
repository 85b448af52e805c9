"""The physics steps of one LIBERO env step after the first, and the controller of its first,
compiled with numba, bit for bit.

``_ControlLoop`` runs robosuite's arithmetic with less Python around it; what is left is still
Python: per physics step about thirty numpy calls, three calls into robosuite's numba-compiled
controller functions and several into MuJoCo. Here the whole physics step runs in one compiled
function, calling exactly what the Python loop calls:

- MuJoCo's own C functions (``mj_step1``, ``mj_jacSite``, ``mj_fullM``, ``mj_step2``) on the
  env's ``mjModel`` and ``mjData``, from the library the ``mujoco`` package loaded;
- robosuite's own numba-compiled ``opspace_matrices``, ``nullspace_torques`` and
  ``orientation_error`` (robosuite compiles them with numba by default; where it does not, this
  path is not used);
- the matrix-vector products numpy computes in robosuite's controller (``np.dot``), through the
  same BLAS function of numpy's own library with the same arguments numpy passes (row- or
  column-major by the operand's layout, as numpy decides);
- elementwise arithmetic, one IEEE operation per numpy operation (numba fuses none).

The compiled functions (``_kernels.py``) take the C functions' addresses as arguments, so numba
caches them on disk: the first process on a machine compiles them (a few seconds), later ones load
them.

Before an env uses it, ``_ControlLoop`` evaluates the controller both ways at the env's live
state and compares the torques and every attribute the controller keeps, bit for bit; a difference
(another numpy, BLAS or robosuite build) and the env keeps the Python loop. The tests compare whole
trajectories with the Python loop and with robosuite's own.
"""

from __future__ import annotations

import ctypes
import glob
import os
from typing import Any

import numpy as np

_KERNEL: Any = None  # None: not built yet; False: unavailable in this process


class Kernel:
    """The compiled functions with this process's MuJoCo and BLAS functions bound."""

    def __init__(self, kernels: Any, mj: tuple[Any, ...], gemv: Any) -> None:
        self._kernels, self._mj, self._gemv = kernels, mj, gemv

    def control(self, *args: Any) -> np.ndarray:
        return self._kernels.control(self._mj, self._gemv, *args)

    def update(self, *args: Any) -> None:
        self._kernels.update(self._mj, self._gemv, *args)

    def physics_steps(self, *args: Any) -> None:
        self._kernels.physics_steps(self._mj, self._gemv, *args)


def kernel() -> Kernel | None:
    """The compiled physics step (built once per process), or None where it cannot be built."""
    global _KERNEL
    if _KERNEL is None:
        try:
            _KERNEL = _build() or False
        except Exception:  # numba missing or too old, a library not found: the Python loop serves
            _KERNEL = False
    return _KERNEL or None


def _numpy_gemv() -> tuple[str, str] | None:
    """The library and name of numpy's own ``cblas_dgemv`` (64-bit integers), or None."""
    here = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    candidates = sorted(glob.glob(os.path.join(here, "*blas*.so*"))) + _mapped("blas")  # wheels; a system BLAS
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_cblas_dgemv64_", "cblas_dgemv64_"):
            if hasattr(lib, name):
                return path, name
    return None


def _mapped(fragment: str) -> list[str]:
    """Paths of the shared libraries loaded in this process whose name contains ``fragment``."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if line.rstrip().split()[-1].startswith("/")}
    except OSError:  # not Linux
        return []
    return sorted(p for p in paths if fragment in os.path.basename(p).lower() and ".so" in os.path.basename(p))


def _build() -> Kernel | None:
    import robosuite.utils.control_utils as cu

    if not all(hasattr(f, "py_func") for f in (cu.opspace_matrices, cu.nullspace_torques, cu.orientation_error)):
        return None  # robosuite without numba: its controller's arithmetic is numpy's
    import mujoco

    # the MuJoCo library the bindings use (the one loaded), else the package's own
    found = _mapped("libmujoco") or sorted(glob.glob(os.path.join(os.path.dirname(mujoco.__file__), "libmujoco.so*")))
    blas = _numpy_gemv()
    if not found or blas is None:
        return None
    from fastenv.backends.libero import _kernels

    # Opened with ctypes (local symbols): numpy's BLAS shares symbol names with scipy's, which
    # numba's own linear algebra calls, with other integer sizes.
    libmujoco, libblas = ctypes.CDLL(found[0]), ctypes.CDLL(blas[0])

    def address(function: Any) -> np.uintp:
        return np.uintp(ctypes.cast(function, ctypes.c_void_p).value)

    names = ("mj_step1", "mj_step2", "mj_jacSite", "mj_fullM")
    mj = tuple(address(getattr(libmujoco, n)) for n in names)
    gemv = address(getattr(libblas, blas[1]))
    return Kernel(_kernels, mj, gemv)
