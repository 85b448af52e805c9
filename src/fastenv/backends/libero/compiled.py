"""The physics steps of one LIBERO env step, the controller and the policy step's robot control,
compiled with numba, bit for bit.

``_ControlLoop`` runs robosuite's arithmetic with less Python around it; what is left is still
Python: per physics step about thirty numpy calls, three calls into robosuite's numba-compiled
controller functions and several into MuJoCo, and at the policy step about a hundred numpy calls
for the robot's buffers. Here an env step runs in two compiled functions (``begin_step``, then
``env_step`` after robosuite's own ``set_goal``), calling exactly what the Python loop calls:

- MuJoCo's own C functions (``mj_step1``, ``mj_jacSite``, ``mj_fullM``, ``mj_step2``,
  ``mj_getState``) on the env's ``mjModel`` and ``mjData``, from the library the ``mujoco``
  package loaded, ``mj_fullM`` in the form the loaded bindings take (``mujoco_facts``);
- robosuite's own numba-compiled ``opspace_matrices``, ``nullspace_torques``,
  ``orientation_error`` and ``mat2quat`` (robosuite compiles them with numba by default; where it
  does not, this path is not used);
- the matrix-vector products numpy computes in robosuite's controller (``np.dot``), and the dot
  product of ``np.convolve`` in the robot's acceleration estimate, through the same BLAS functions
  of numpy's own library with the same arguments numpy passes (row- or column-major by the
  operand's layout, as numpy decides);
- elementwise arithmetic, one IEEE operation per numpy operation (numba fuses none).

The controller's LAPACK calls (an inverse and three pseudo-inverses by SVD per physics step,
robosuite's ``opspace_matrices``) are most of what a compiled step costs beyond MuJoCo's own.

The compiled functions (``_kernels.py``) take the C functions' addresses as arguments, so numba
caches them on disk: the first process on a machine compiles them (15-25 s, said on stderr), later ones load
them.

Before an env uses them, ``_ControlLoop`` evaluates the controller, and ``PolicyStep`` the policy
step, both ways at the env's live state and compares the torques and everything they leave, bit
for bit; a difference (another numpy, BLAS or robosuite build) and the env keeps the Python loop.
The tests compare whole trajectories with the Python loop and with robosuite's own.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from fastenv.backends.libero.mujoco_facts import (
    FULLM_WITH_DATA,
    FULLM_WITH_INERTIA,
    facts,
    mapped_libraries,
    mujoco_library,
    step_aside,
)

_KERNEL: Any = None  # None: not built yet; False: unavailable in this process


# A first call that takes longer than this is compiling (numba's cache was empty): say so once.
NOTICE_AFTER_S = 2.0
_noticed = False


@contextlib.contextmanager
def compiling_notice() -> Iterator[None]:
    """Inside: a first call of a compiled function; one stderr line if it is still compiling after
    ``NOTICE_AFTER_S`` (once per process), so a first step that waits is not taken for a hang."""

    def notice() -> None:
        global _noticed
        if not _noticed:
            _noticed = True
            print(
                "fastenv: compiling LIBERO's control loop with numba (once per machine, typically 15-25 s; "
                "later processes load it from numba's cache)...",
                file=sys.stderr, flush=True,
            )

    timer = threading.Timer(NOTICE_AFTER_S, notice)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


class Kernel:
    """The compiled functions with this process's MuJoCo and BLAS functions bound."""

    def __init__(self, kernels: Any, mj: tuple[Any, ...], blas: tuple[Any, ...]) -> None:
        self._kernels, self._functions = kernels, (mj, blas)
        self._called: set[str] = set()  # functions called once already (compiled or loaded)

    def _call(self, name: str, *args: Any) -> Any:
        function = getattr(self._kernels, name)
        if name in self._called:
            return function(*self._functions, *args)
        with compiling_notice():
            out = function(*self._functions, *args)
        self._called.add(name)
        return out

    def control(self, *args: Any) -> np.ndarray:
        return self._call("control", *args)

    def update(self, *args: Any) -> None:
        self._call("update", *args)

    def physics_steps(self, *args: Any) -> None:
        self._call("physics_steps", *args)

    def policy_step(self, *args: Any) -> None:
        self._call("policy_step", *args)

    def begin_step(self, *args: Any) -> bool:
        return self._call("begin_step", *args)

    def env_step(self, *args: Any) -> None:
        self._call("env_step", *args)


def kernel() -> Kernel | None:
    """The compiled physics step (built once per process), or None where it cannot be built."""
    global _KERNEL
    if _KERNEL is None:
        try:
            built = _build()
        except Exception as error:  # numba missing or too old, a symbol not found: the Python loop serves
            built = f"it could not be built ({type(error).__name__}: {error})"
        if isinstance(built, str):
            step_aside("the compiled control loop", f"{built}; the Python control loop (the same arithmetic) runs")
            built = False
        _KERNEL = built
    return _KERNEL or None


def _numpy_blas() -> tuple[str, str] | None:
    """The library of numpy's own CBLAS (64-bit integers) and its names' prefix, or None."""
    here = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    candidates = sorted(glob.glob(os.path.join(here, "*blas*.so*"))) + mapped_libraries("blas")  # wheels; a system BLAS
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_", ""):
            if hasattr(lib, f"{prefix}cblas_dgemv64_") and hasattr(lib, f"{prefix}cblas_ddot64_"):
                return path, prefix
    return None


def _build() -> Kernel | str:
    """The kernel, or why it cannot serve here."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed"
    import robosuite.utils.control_utils as cu
    import robosuite.utils.transform_utils as tu

    if not all(hasattr(f, "py_func") for f in (cu.opspace_matrices, cu.nullspace_torques, cu.orientation_error, tu.mat2quat)):
        return "robosuite's controller functions are not compiled with numba here (its arithmetic is numpy's)"
    found = facts()
    if found.fullm is None:
        return f"MuJoCo {found.version}'s mj_fullM takes neither {FULLM_WITH_INERTIA} nor {FULLM_WITH_DATA}"
    library = mujoco_library()
    if library is None:
        return "the MuJoCo library the bindings use was not found"
    blas = _numpy_blas()
    if blas is None:
        return "numpy's own 64-bit CBLAS library was not found"
    from fastenv.backends.libero import _kernels

    # Opened with ctypes (local symbols): numpy's BLAS shares symbol names with scipy's, which
    # numba's own linear algebra calls, with other integer sizes.
    libmujoco, libblas = ctypes.CDLL(library), ctypes.CDLL(blas[0])

    def address(function: Any) -> np.uintp:
        return np.uintp(ctypes.cast(function, ctypes.c_void_p).value)

    names = ("mj_step1", "mj_step2", "mj_jacSite", "mj_fullM", "mj_getState")
    # the last: which form of mj_fullM the library takes (1: (m, d, dst), 0: (m, dst, M); mujoco_facts)
    mj = (*(address(getattr(libmujoco, n)) for n in names), np.uintp(found.fullm == FULLM_WITH_DATA))
    numpy_blas = tuple(address(getattr(libblas, f"{blas[1]}cblas_{n}64_")) for n in ("dgemv", "ddot"))
    return Kernel(_kernels, mj, numpy_blas)
