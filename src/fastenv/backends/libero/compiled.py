"""The physics steps of one LIBERO env step, the controller and the policy step's robot control,
compiled with numba, bit for bit.

``ControlLoop`` runs robosuite's arithmetic with less Python around it; what is left is still
Python: per physics step about thirty numpy calls, three calls into robosuite's numba-compiled
controller functions and several into MuJoCo, and at the policy step about a hundred numpy calls
for the robot's buffers. Here an env step runs in one compiled function (``step``), robosuite's
``set_goal`` in it, or where that one does not serve in two (``begin_step``, then ``env_step``
after robosuite's own ``set_goal``), calling exactly what the Python loop calls:

- MuJoCo's own C functions (``mj_step1``, ``mj_jacSite``, ``mj_fullM``, ``mj_step2``,
  ``mj_getState``) on the env's ``mjModel`` and ``mjData``, from the library the ``mujoco``
  package loaded, ``mj_fullM`` in the form the loaded bindings take (``mujoco_facts``), or its
  copies of ``d.M`` alone where it only copies (``mujoco_facts.fullm_sources``);
- robosuite's own numba-compiled ``opspace_matrices``, ``nullspace_torques``,
  ``orientation_error`` and ``mat2quat`` (robosuite compiles them with numba by default; where it
  does not, this path is not used);
- the matrix-vector products numpy computes in robosuite's controller (``np.dot``) through the
  same BLAS function of numpy's own library with the same arguments numpy passes (row- or
  column-major by the operand's layout, as numpy decides), so whichever kernel numpy's BLAS runs
  on this CPU runs here too; the sum of ``np.convolve`` in the robot's acceleration estimate as
  numpy computes it (its own loop, not BLAS; ``machine_facts``, which finds and checks both);
- robosuite's ``set_goal`` (deltas, a fixed impedance, no limits: LIBERO's controller) with
  numpy's BLAS ``ddot`` and ``dgemm`` as numpy calls them, and the C library's ``cos`` and ``sin``,
  which numpy's float64 loops equal (``machine_facts.goal_arithmetic``); compared once per env
  with robosuite's own, which runs between two compiled calls where it differs;
- elementwise arithmetic, one IEEE operation per numpy operation (numba fuses none).

The controller's LAPACK calls (an inverse and three pseudo-inverses by SVD per physics step,
robosuite's ``opspace_matrices``) are most of what a compiled step costs beyond MuJoCo's own. The
compiled loop makes the calls numba's ``np.linalg`` and ``np.dot`` make there, to the same scipy
LAPACK and BLAS functions with the same arguments, on buffers made once per env instead of at every
call, and for ``dgesdd`` of these small square matrices the steps ``dgesdd`` itself takes
(``_kernels.LA_LEVELS``); once per process ``Kernel.choose_level`` compares them with robosuite's
own function on random matrices, bit for bit, and keeps the fastest that equals it.

The compiled functions (``_kernels.py``) take the C functions' addresses as arguments, so numba
caches them on disk: they are compiled once per machine (30-60 s), later processes load them.
Where numba's cache does not hold them yet, a child process compiles them into it
(``python -m fastenv.backends.libero._warm``; ``fastenv compile`` does the same in the
foreground), and the Python loop, the same arithmetic bit for bit, serves until it is done, so a
first step does not wait (``FASTENV_COMPILE``: ``background``, the default, or ``inline``: the
first step compiles them and waits, saying so on stderr past 2 s).

Before an env uses them, ``ControlLoop`` evaluates the controller, and ``PolicyStep`` the policy
step, both ways at the env's live state and compares the torques and everything they leave, bit
for bit; a difference (a numpy, BLAS or robosuite build whose arithmetic ``machine_facts`` does not
recognize) and the env keeps the Python loop.
The tests compare whole trajectories with the Python loop and with robosuite's own.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from fastenv.backends.libero import machine_facts
from fastenv.backends.libero.mujoco_facts import (
    FULLM_WITH_DATA,
    FULLM_WITH_INERTIA,
    facts,
    mujoco_library,
    step_aside,
)
from fastenv.core.fast_paths import FastPath

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
                "fastenv: compiling LIBERO's control loop with numba (once per machine, typically 30-60 s; "
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


# How the compiled functions get built where numba's cache does not hold them (FASTENV_COMPILE).
COMPILE_MODES = ("background", "inline")
KERNELS = ("control", "update", "physics_steps", "policy_step", "begin_step", "env_step", "opspace", "goal", "step")
POLL_S = 0.25  # how often a process whose envs wait for the background compile looks again
LOCK_NAME = "fastenv-compile.lock"  # in numba's cache folder: held by the compiling child
_ready = False  # the compiled functions may be called (loaded from the cache, or compiled inline)
_lock_path: str | None = None  # set while a background compile runs: its lock
_next_poll = 0.0


def compile_mode() -> str:
    """``FASTENV_COMPILE``: ``background`` (default) or ``inline``; anything else is refused."""
    mode = os.environ.get("FASTENV_COMPILE", "background")
    if mode not in COMPILE_MODES:
        raise ValueError(f"FASTENV_COMPILE must be one of {COMPILE_MODES}, got {mode!r}")
    return mode


def cached(kernels: Any) -> bool | None:
    """Whether numba's cache holds, compiled for this CPU, every compiled function this machine's
    envs run (a cache made on another CPU holds nothing this one loads: ``machine_facts.cached_here``;
    the functions the compile found unused here are not waited for). None: unknown, where numba's
    cache internals are not the ones read here."""
    try:
        skip = unused(kernels)
        found = [machine_facts.cached_here(getattr(kernels, name)) for name in KERNELS if name not in skip]
    except Exception:
        return None
    return None if None in found else all(found)


UNUSED_NAME = "fastenv-compile-unused.json"  # in numba's cache folder: per machine, the functions its envs do not run


def _unused_path(kernels: Any) -> str:
    return os.path.join(kernels.control._cache._cache_path, UNUSED_NAME)


_SOURCE = " source "  # in a record's key: what comes after it stamps the compiled functions' source


def _machine_key() -> str:
    """This machine's key in the record: the CPU numba compiles for, numpy, its BLAS library and kernel
    set, then the compiled functions' source as numba's cache stamps it (modification time and size):
    an edited or upgraded fastenv, whose functions numba compiles again, records afresh."""
    from numba.core.registry import cpu_target

    blas = machine_facts.blas()
    source = os.stat(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernels.py"))
    return (f"{cpu_target.target_context.codegen().magic_tuple()!r} numpy {np.__version__} {blas.library} {blas.core_type}"
            f"{_SOURCE}{source.st_mtime} {source.st_size}")


def unused(kernels: Any) -> dict[str, str]:
    """The compiled functions the last compile on this machine found its envs do not run, and why
    (``record_unused``): a process does not compile them again."""
    import json

    try:
        with open(_unused_path(kernels)) as f:
            return dict(json.load(f).get(_machine_key(), {}))
    except (OSError, ValueError, AttributeError):
        return {}


def record_unused(kernels: Any, names: dict[str, str]) -> None:
    """Record, for this machine, which compiled functions its envs do not run (name -> why)."""
    import json

    path = _unused_path(kernels)
    try:
        with open(path) as f:
            table = json.load(f)
    except (OSError, ValueError):
        table = {}
    key = _machine_key()
    machine = key.rsplit(_SOURCE, 1)[0]
    table = {k: v for k, v in table.items() if k.rsplit(_SOURCE, 1)[0] != machine}  # this machine's records of other sources
    table[key] = names
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(table, f, indent=1)
    os.replace(tmp, path)


def ready() -> bool:
    """Whether the compiled functions can be called now without compiling them in this process:
    True where numba's cache holds them, where the mode is ``inline``, where they cannot be built
    (``kernel()`` is then None), or once the background compile is done; False while it runs (the
    caller steps with the Python loop). The first call where the cache is empty starts the
    background compile, unless another process of this machine already runs it."""
    global _ready, _lock_path, _next_poll
    if _ready:
        return True
    built = kernel()
    now = time.monotonic()
    if _lock_path is None:
        if built is None or compile_mode() == "inline" or cached(built._kernels) is not False:
            _ready = True
            return True
        _lock_path = _start_background(built._kernels)
        if _lock_path is None:  # could not start it: compile inline
            _ready = True
            return True
        _next_poll = now + POLL_S
        return False
    if now < _next_poll:
        return False
    _next_poll = now + POLL_S
    if _compiling(_lock_path):
        return False
    _ready = True
    return True


def wait_ready(timeout: float | None = None) -> bool:
    """Wait for the background compile (if one runs); whether the compiled functions are ready."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not ready():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def _compiling(lock_path: str) -> bool:
    """Whether a process holds the compile lock."""
    import fcntl

    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def lowest_priority() -> None:
    """This process at the CPU's lowest priority: Linux's SCHED_IDLE (it runs only on a core nothing
    else wants), else nice 19. The background compile so never takes a core the envs step on."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    try:
        os.nice(19 - os.nice(0))
    except OSError:
        pass


def _start_background(kernels: Any) -> str | None:
    """Start the child that compiles into numba's cache, holding the lock in numba's cache folder
    (or find one running); the lock's path, or None where neither can be done."""
    import fcntl

    try:
        folder = kernels.control._cache._cache_path
        os.makedirs(folder, exist_ok=True)
        lock_path = os.path.join(folder, LOCK_NAME)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except Exception:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return lock_path  # another process of this machine compiles them: wait for it
        if cached(kernels):  # it finished just now
            return None
        with open(os.path.join(folder, "fastenv-compile.log"), "w") as log:
            # the child inherits the locked descriptor: the lock is held until it exits
            subprocess.Popen(
                [sys.executable, "-m", "fastenv.backends.libero._warm"], pass_fds=(fd,), stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "FASTENV_COMPILE": "inline"}, close_fds=True,
                preexec_fn=lowest_priority,
            )
    except Exception:
        return None
    finally:
        os.close(fd)
    print(
        "fastenv: compiling LIBERO's control loop with numba in a background process (once per machine, typically "
        "30-60 s); until it is done the Python control loop, the same arithmetic bit for bit, steps the envs",
        file=sys.stderr, flush=True,
    )
    return lock_path


class Kernel:
    """The compiled functions with this process's MuJoCo, BLAS and LAPACK functions bound."""

    def __init__(self, kernels: Any, mj: tuple[Any, ...], blas: tuple[Any, ...], lapack: tuple[int, ...]) -> None:
        self._kernels, self._lapack = kernels, lapack
        self.level: int | None = None  # the controller's linear algebra (_kernels.LA_LEVELS); None: not chosen yet
        self._functions = (mj, blas, self._la(0))
        self._called: set[str] = set()  # functions called once already (compiled or loaded)
        self._workspace: tuple[int, int, float, float] | None = None  # dgesdd's sizes and scaling thresholds

    def _la(self, level: int) -> tuple[np.uintp, ...]:
        return (np.uintp(level), *(np.uintp(address) for address in self._lapack))

    def _call(self, name: str, *args: Any, functions: tuple[Any, ...] | None = None) -> Any:
        function = getattr(self._kernels, name)
        functions = self._functions if functions is None else functions
        if name in self._called:
            return function(*functions, *args)
        with compiling_notice():
            out = function(*functions, *args)
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

    def goal(self, *args: Any) -> bool:
        return self._call("goal", *args)

    def step(self, *args: Any) -> int:
        return self._call("step", *args)

    def state_layout(self, k: int) -> tuple[int, ...]:
        """Where each controller attribute starts in the compiled functions' ``state`` for ``k``
        joints, in ``_kernels.STATE_ATTRIBUTES``' order, then the buffer's size (``_kernels.state_layout``)."""
        return tuple(int(at) for at in self._kernels.state_layout.py_func(k))

    @property
    def compiles_goal(self) -> bool:
        """Whether robosuite's ``set_goal`` can run compiled here (``machine_facts.goal_arithmetic``)."""
        return bool(self._functions[1][4])

    def workspace(self, k: int, mass_sources: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Fresh buffers of the compiled controller for ``k`` joints (``work``, ``iwork``: see
        ``_kernels``), with the workspace sizes LAPACK asks for here and, where given, where the
        mass matrix's values are in ``d.M`` (``mujoco_facts.fullm_sources``)."""
        kernels = self._kernels
        queried = all(self._lapack[:kernels.LA_NEEDS[1]])  # (else level 0 runs: numba's own calls)
        if self._workspace is None:
            self._workspace = _lapack_workspace(self._lapack, kernels) if queried else (1, 1, 0.0, np.inf)
        gesdd6, gesdd3, smlnum, bignum = self._workspace
        getri = _query_getri(self._lapack, kernels, k) if queried else 1
        work = _aligned(kernels.work_size(k, max(getri, gesdd6, gesdd3)))
        work[kernels.ONE], work[kernels.ZERO], work[kernels.SMLNUM], work[kernels.BIGNUM] = 1.0, 0.0, smlnum, bignum
        iwork = np.zeros(kernels.iwork_size(k), dtype=np.int32)
        iwork[kernels.LW_GETRI] = getri
        iwork[kernels.LW_GESDD + 6], iwork[kernels.LW_GESDD + 3] = gesdd6, gesdd3
        if mass_sources is not None:
            iwork[kernels.MASS_FROM] = 1
            iwork[kernels.MASS_AT:kernels.MASS_AT + k * k] = mass_sources
        return work, iwork

    def opspace(self, level: int, work: np.ndarray, iwork: np.ndarray, *matrices: np.ndarray) -> tuple[np.ndarray, ...]:
        """robosuite's ``opspace_matrices(*matrices)`` as the compiled loop computes it at ``level``."""
        return self._call("opspace", work, iwork, *matrices, functions=(self._la(level),))

    def choose_level(self, k: int, trials: int = 48) -> int:
        """The controller's linear algebra here (once per process): the highest level of
        ``_kernels.LA_LEVELS`` whose results equal robosuite's ``opspace_matrices`` bit for bit on
        random matrices of ``k`` joints, in the layouts robosuite's update leaves and the compiled
        loop passes (the mass matrix and the Jacobians in Fortran order; in another, robosuite's
        own function runs)."""
        if self.level is None:
            self.level = self._choose_level(k, trials)
            self._functions = (*self._functions[:2], self._la(self.level))
        return self.level

    def _choose_level(self, k: int, trials: int) -> int:
        kernels = self._kernels
        if not 2 <= k <= kernels.MAX_DOFS or not all(self._lapack[:kernels.LA_NEEDS[1]]):
            return 0
        rng = np.random.default_rng(0)
        cases = []
        for case in range(trials):
            a = rng.standard_normal((k, k)) * 10.0 ** rng.uniform(-2, 1)
            mass = np.asfortranarray(a @ a.T + np.diag(rng.uniform(0.01, 2.0, k)))
            jacobian = rng.standard_normal((6, k)) * 10.0 ** rng.uniform(-1.5, 0.5, (6, k))
            if case % 4 == 3:
                jacobian[3:] = 0.0  # rank-deficient: pseudo-inverses that cut singular values
            cases.append((mass, np.asfortranarray(jacobian), np.asfortranarray(jacobian[:3]), np.asfortranarray(jacobian[3:])))
        work, iwork = self.workspace(k)
        try:
            expected = [self.opspace(0, work, iwork, *case) for case in cases]
        except Exception:
            return 0
        for level in range(len(kernels.LA_LEVELS) - 1, 0, -1):
            if not all(self._lapack[:kernels.LA_NEEDS[level]]):
                continue
            try:
                if all(_same_arrays(self.opspace(level, work, iwork, *case), want) for case, want in zip(cases, expected)):
                    return level
            except Exception:
                continue
        return 0


def _same_arrays(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return all(x.shape == y.shape and x.strides == y.strides and x.tobytes(order="A") == y.tobytes(order="A") for x, y in zip(a, b))


def _aligned(size: int) -> np.ndarray:
    """``size`` float64 values starting at a multiple of 64 bytes."""
    raw = np.zeros(size + 8)
    skip = (-raw.ctypes.data % 64) // 8
    return raw[skip:skip + size]


_CAPSULE_NAME = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_CAPSULE_POINTER = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))


def _capsule_address(module: Any, name: str) -> int:
    """The C function a Cython module exports as ``name`` (what numba's helpers import from it); 0 if none."""
    capsule = getattr(module, "__pyx_capi__", {}).get(name)
    return 0 if capsule is None else int(_CAPSULE_POINTER(capsule, _CAPSULE_NAME(capsule)) or 0)


def _lapack_functions(kernels: Any) -> tuple[int, ...]:
    """The addresses of ``_kernels.LA_FUNCTIONS``: scipy's, which numba's ``np.linalg`` and ``np.dot`` call (0: not there)."""
    import importlib

    return tuple(_capsule_address(importlib.import_module(f"scipy.linalg.{module}"), name) for module, name in kernels.LA_FUNCTIONS)


def _fortran(lapack: tuple[int, ...], kernels: Any, name: str, restype: Any, count: int) -> Any:
    index = [n for _, n in kernels.LA_FUNCTIONS].index(name)
    return ctypes.CFUNCTYPE(restype, *([ctypes.c_void_p] * count))(lapack[index])


def _query_getri(lapack: tuple[int, ...], kernels: Any, n: int) -> int:
    """The workspace dgetri asks for an ``n`` x ``n`` matrix (numba queries it before each inverse)."""
    ints = np.array([n, n, -1, 0], dtype=np.int32)  # n, lda, lwork, info
    size, dummy = np.zeros(1), np.zeros(1)
    p = ints.ctypes.data
    _fortran(lapack, kernels, "dgetri", None, 7)(p, dummy.ctypes.data, p + 4, dummy.ctypes.data, size.ctypes.data, p + 8, p + 12)
    return max(int(size[0]), 1)


def _lapack_workspace(lapack: tuple[int, ...], kernels: Any) -> tuple[int, int, float, float]:
    """The workspace dgesdd ('S') asks for 6 x 6 and 3 x 3 matrices (numba queries it before each
    pseudo-inverse), and dgesdd's SMLNUM and BIGNUM (it scales a matrix whose largest value lies
    outside them: SQRT(DLAMCH('S')) / DLAMCH('P') and its inverse)."""
    gesdd = _fortran(lapack, kernels, "dgesdd", None, 14)
    sizes = []
    for n in (6, 3):
        ints = np.array([n, -1, 0], dtype=np.int32)  # m = n = lda = ldu = ldvt, lwork, info
        jobz = np.array([ord("S")], dtype=np.uint8)
        size, dummy = np.zeros(1), np.zeros(1)
        iwork = np.zeros(8 * n, dtype=np.int32)
        p, d = ints.ctypes.data, dummy.ctypes.data
        gesdd(jobz.ctypes.data, p, p, d, p, d, d, p, d, p, size.ctypes.data, p + 4, iwork.ctypes.data, p + 8)
        sizes.append(max(int(size[0]), 1))
    if not all(lapack[:kernels.LA_NEEDS[2]]):
        return sizes[0], sizes[1], 0.0, np.inf  # (level 2, which reads them, does not run)
    dlamch = _fortran(lapack, kernels, "dlamch", ctypes.c_double, 1)
    which = np.array([ord("P"), ord("S")], dtype=np.uint8)
    smlnum = math.sqrt(dlamch(which[1:].ctypes.data)) / dlamch(which.ctypes.data)
    return sizes[0], sizes[1], smlnum, 1.0 / smlnum


def kernel() -> Kernel | None:
    """The compiled physics step (built once per process), or None where it cannot be built."""
    global _KERNEL
    if _KERNEL is None:
        try:
            built = _build()
        except Exception as error:  # numba missing or too old, a symbol not found: the Python loop serves
            built = f"it could not be built ({type(error).__name__}: {error})"
        if isinstance(built, str):
            step_aside(f"the {FastPath.COMPILED_CONTROL_LOOP}", f"{built}; the Python control loop (the same arithmetic) runs")
            built = False
        _KERNEL = built
    return _KERNEL or None


def _build() -> Kernel | str:
    """The kernel, or why it cannot serve here."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numba is not installed"
    from fastenv.backends.libero.task import quiet_robosuite_import

    quiet_robosuite_import()
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
    found_blas = machine_facts.blas()
    if not found_blas.usable:
        return found_blas.why
    form = machine_facts.convolve_form()
    if form is None:
        return (f"numpy {np.__version__} computes np.convolve (robosuite's acceleration estimate) in none of the forms the "
                f"compiled loop reproduces ({', '.join(machine_facts.CONVOLVE_FORMS)})")
    from fastenv.backends.libero import _kernels

    # Opened with ctypes (local symbols): numpy's BLAS shares symbol names with scipy's, which
    # numba's own linear algebra calls, with other integer sizes.
    libmujoco = ctypes.CDLL(library)

    def address(function: Any) -> np.uintp:
        return np.uintp(ctypes.cast(function, ctypes.c_void_p).value)

    names = ("mj_step1", "mj_step2", "mj_jacSite", "mj_fullM", "mj_getState")
    # the last: which form of mj_fullM the library takes (1: (m, d, dst), 0: (m, dst, M); mujoco_facts)
    mj = (*(address(getattr(libmujoco, n)) for n in names), np.uintp(found.fullm == FULLM_WITH_DATA))
    # numpy's dgemv and ddot, how its np.convolve sums, whether the BLAS takes 64-bit integers, numpy's
    # dgemm where robosuite's set_goal can run compiled (else 0) (_kernels)
    numpy_blas = (np.uintp(found_blas.gemv), np.uintp(found_blas.ddot), np.uintp(machine_facts.CONVOLVE_FORMS.index(form)),
                  np.uintp(found_blas.int64), np.uintp(machine_facts.goal_arithmetic().gemm))
    return Kernel(_kernels, mj, numpy_blas, _lapack_functions(_kernels))
