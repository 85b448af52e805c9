"""What the compiled LIBERO control loop assumes of the machine, read from this process and checked once.

``mujoco_facts`` says what the loop assumes of MuJoCo; this module says what it assumes of numpy's
BLAS, of numpy's own arithmetic and of numba, the parts that change from one CPU to another. Each
fact is read from what this process loaded, never from a version number or a CPU name, and a fact
that does not hold makes the compiled loop step aside (robosuite's arithmetic then runs, in Python)
with one warning line saying why. Every way the fast paths depend on the machine:

- **numpy's BLAS kernel.** robosuite's controller computes ``np.dot(matrix, vector)``, which numpy
  hands to its BLAS (``cblas_dgemv``), and OpenBLAS picks its kernels for the CPU it runs on
  (``OPENBLAS_CORETYPE`` forces a core type): the products' last bits differ from one kernel to
  another. The compiled loop calls the same function of the same library numpy calls, found in
  this process (``blas()``), with the arguments numpy passes, so it runs the kernel numpy runs,
  whichever that is; before it is used, ``np.dot`` and that function are compared bit for bit on
  the shapes and layouts the controller multiplies, at several memory alignments. A numpy whose
  BLAS is another library (MKL, BLIS, a system OpenBLAS, Accelerate) is found the same way by its
  CBLAS symbols; where none is found, or the comparison fails, the compiled loop steps aside.
- **Where the operands lie.** A kernel may sum in another order for another address: OpenBLAS
  0.3.23's Prescott ``dgemv`` (numpy 1.26's wheels, on a CPU that OpenBLAS does not know) for a
  row-major matrix that is not 16-byte aligned, its ``ddot`` for such a vector. The address is
  then an argument too. robosuite's operands are fresh numpy arrays, at multiples of numpy's
  allocator's alignment (``allocation_alignment()``, malloc's 16 bytes on 64-bit Linux), or views
  at fixed offsets into them (``set_goal``'s rotation vector); the compiled loop places its own at
  such addresses (numba's arrays at multiples of 32 bytes, the controller's attributes at multiples
  of 64 bytes into a numpy buffer: ``_kernels.state_layout``). ``blas()`` and ``goal_arithmetic()``
  check that the results are the same at every address of that kind; where they are not,
  robosuite's own results depend on where numpy's allocator puts an array, and the compiled loop
  (or its ``set_goal``) steps aside, saying so.
- **numpy's arithmetic outside BLAS.** robosuite's acceleration estimate is
  ``np.convolve(column, np.ones(10) / 10.0, mode="valid")``. numpy computes a correlation with a
  kernel of at most 11 values in its own C loop (``small_correlate``), not with BLAS: a sum from
  0 in order, one rounding per multiplication and addition, whatever the CPU; a numpy compiled
  with floating-point contraction (GCC's default where the baseline has FMA, e.g. aarch64) fuses
  each step into one FMA; a numpy without that loop calls BLAS ``ddot``. ``convolve_form()`` finds
  which of the three this numpy computes, value for value on random columns, and the compiled
  loop computes that one; none of them and it steps aside.
- **scipy's LAPACK, as numba calls it.** robosuite's ``opspace_matrices`` is a numba function:
  its inverse, products and pseudo-inverses are numba's calls into scipy's LAPACK and BLAS
  (another OpenBLAS than numpy's, with its own kernels). The compiled loop calls the same
  functions with the same arguments, allocating and querying workspaces once instead of at every
  call, and for ``dgesdd`` of the small square matrices the steps ``dgesdd`` itself takes there
  (a LAPACK whose ``dgesdd`` takes another path gives other bits). Which of these equals
  robosuite's function here is found on random matrices, bit for bit, once per process
  (``compiled.Kernel.choose_level``); none of them and robosuite's own function runs.
- **numpy's arithmetic in robosuite's ``set_goal``.** The controller's goal (at each env step, from
  the action) is numpy's: ``np.clip``, elementwise arithmetic, ``np.linalg.norm`` (BLAS ``ddot``),
  ``np.cos`` and ``np.sin``, and ``np.dot`` of two 3 x 3 matrices (BLAS ``cblas_dgemm``). The
  compiled step computes it with the same BLAS functions, and with the C library's ``cos`` and
  ``sin``, which numpy's float64 loops equal here; ``goal_arithmetic()`` checks each on random
  values, and where one differs robosuite's ``set_goal`` runs, in Python, between two compiled calls.
- **What numba compiles for.** numba compiles for this CPU's name and features (AVX-512 where
  there is AVX-512). Its arithmetic is IEEE's, one rounding per operation, with no fused or
  reordered operations (no ``fastmath``), so the instructions it picks do not change a bit. Its
  on-disk cache keys each entry by the CPU name and features it was compiled for: a cache made
  on another machine (a shared file system, a container image) holds nothing this CPU loads, so
  it is compiled again here, never run on a CPU that lacks its instructions. ``cached_here``
  asks the cache for this CPU's entries, so a foreign cache does not pass for a filled one.
- **Threads.** numpy's BLAS and numba's LAPACK run the controller's small products (at most
  7 x 7) on one thread, whatever ``OPENBLAS_NUM_THREADS`` says: OpenBLAS splits an operation
  over threads only past sizes far beyond these. fastenv's workers set the thread variables to 1
  for speed, not for equality.
- **The renderer.** Images come from the GL implementation the process loaded (Mesa's llvmpipe,
  NVIDIA's EGL): the stock env and fastenv's render through the same one in the same process,
  and equal images are compared there. Across machines, images differ as the stock env's do.

``describe()`` gathers these facts for ``fastenv doctor``.
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import math
import os
import random
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from fastenv.backends.libero.mujoco_facts import mapped_libraries

# The acceleration estimate's window (robosuite's SingleArm.control: np.convolve(col, np.ones(10) / 10.0, mode="valid")[0])
ACC_WINDOW = 10

# How numpy computes that window's sum (``convolve_form``); the compiled loop takes the index.
CONVOLVE_FORMS = ("sequential", "fused", "blas")

# CBLAS symbol names numpy's BLAS may export, with whether their integers are 64-bit: the wheels'
# scipy-openblas (ILP64, prefixed), an ILP64 OpenBLAS, MKL's ILP64 names, then the plain LP64 names.
_SYMBOLS = (("scipy_", "64_", True), ("", "64_", True), ("", "_64", True), ("", "", False))
_BLAS_NAMES = ("blas", "mkl", "blis", "accelerate", "flexiblas")

# np.dot(matrix, vector) shapes the controller computes (k = 7 joints): the Jacobians times qvel,
# the operational-space matrices times the desired force, torque or wrench, J_full.T times the wrench.
_DOT_SHAPES = ((3, 7), (3, 9), (3, 3), (6, 6), (7, 6), (6, 7), (7, 7))

# numba allocates arrays at multiples of 32 bytes (its preferred array alignment, for AVX); the
# addresses compared are the multiples, within 64 bytes, of what numpy's and numba's arrays share.
_NUMBA_ALIGNMENT = 32
_SPAN = 64
# The sizes (float64 values) of the arrays robosuite's controller and set_goal allocate (k = 7).
_ALLOCATED = (3, 6, 7, 9, 18, 21, 42, 49, 63)


@dataclass(frozen=True)
class Blas:
    """numpy's BLAS as this process loaded it."""

    library: str | None  # the shared library's path
    symbol: str  # its dgemv's name, e.g. scipy_cblas_dgemv64_
    int64: bool  # whether its integers are 64-bit
    gemv: int = 0  # the functions' addresses (0: not found)
    ddot: int = 0
    vendor: str = "unknown"  # threadpoolctl's internal_api: openblas, mkl, blis, flexiblas...
    core_type: str | None = None  # the kernel set OpenBLAS dispatched to (its "architecture"), e.g. SkylakeX
    version: str | None = None
    why: str = ""  # why the compiled loop cannot use it ("" where it can)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def usable(self) -> bool:
        return not self.why


@lru_cache(maxsize=None)
def blas() -> Blas:
    """numpy's own BLAS: the library and CBLAS functions ``np.dot`` calls, checked against ``np.dot``
    bit for bit (read once per process)."""
    found = _find_blas()
    if found is None:
        libraries = _candidate_libraries()
        return Blas(None, "", False, why="no CBLAS dgemv/ddot of numpy's BLAS was found in "
                    f"{', '.join(os.path.basename(p) for p in libraries) or 'the loaded libraries'}")
    path, prefix, suffix, int64 = found
    lib = ctypes.CDLL(path)
    gemv, ddot = (getattr(lib, f"{prefix}cblas_{n}{suffix}") for n in ("dgemv", "ddot"))
    info = _threadpool_info(path)
    out = Blas(
        path, f"{prefix}cblas_dgemv{suffix}", int64, _address(gemv), _address(ddot), vendor=info.get("internal_api", "unknown"),
        core_type=info.get("architecture"), version=info.get("version"),
    )
    mismatch = _dot_mismatch(gemv, int64)
    why = f"np.dot differs from {out.symbol} of {os.path.basename(path)} ({mismatch})" if mismatch else ""
    moved = "" if mismatch else _placement_mismatch(gemv, int64)
    if moved:
        kernels = f", {out.core_type} kernels" if out.core_type else ""
        why = (f"{out.symbol} of {os.path.basename(path)}{kernels} gives other bits for {moved} at another address aligned as "
               f"numpy's arrays are ({_placement_step()} bytes): robosuite's np.dot then depends on where numpy's allocator puts an array")
    if why:
        return Blas(out.library, out.symbol, int64, out.gemv, out.ddot, out.vendor, out.core_type, out.version, why=why)
    return out


def _candidate_libraries() -> list[str]:
    """Libraries that may be numpy's BLAS: a wheel's own (numpy.libs, first), then the loaded ones."""
    here = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs")
    own = sorted(glob.glob(os.path.join(here, "*.so*")))
    loaded = [p for name in _BLAS_NAMES for p in mapped_libraries(name)]
    return list(dict.fromkeys(own + loaded))


def _find_blas() -> tuple[str, str, str, bool] | None:
    for path in _candidate_libraries():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix, int64 in _SYMBOLS:
            if hasattr(lib, f"{prefix}cblas_dgemv{suffix}") and hasattr(lib, f"{prefix}cblas_ddot{suffix}"):
                return path, prefix, suffix, int64
    return None


def _address(function: Any) -> int:
    return int(ctypes.cast(function, ctypes.c_void_p).value or 0)


def _threadpool_info(path: str) -> dict[str, Any]:
    """threadpoolctl's record of the library at ``path`` (its vendor, core type and version), if
    threadpoolctl is installed."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    real = os.path.realpath(path)
    for info in threadpool_info():
        if os.path.realpath(info.get("filepath", "")) == real:
            return info
    return {}


def _dot_mismatch(gemv: Any, int64: bool) -> str:
    """"" where ``gemv``, called as numpy's ``cblas_matrixproduct`` calls it, equals ``np.dot`` bit for
    bit on the controller's shapes, both layouts and several alignments; else the first difference."""
    _declare_gemv(gemv, int64)
    rng = np.random.default_rng(0)

    def placed(shape: tuple[int, ...], offset: int, order: str) -> np.ndarray:
        size = int(np.prod(shape))
        return np.empty(size + 8)[offset:offset + size].reshape(shape, order=order)

    for case in range(4 * len(_DOT_SHAPES)):
        m, n = _DOT_SHAPES[case % len(_DOT_SHAPES)]
        a = placed((m, n), case % 3, "C" if case % 2 else "F")
        a[:] = rng.standard_normal((m, n)) * 10.0 ** rng.uniform(-4, 4, (m, n))
        x = placed((n,), case % 4, "C")
        x[:] = rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)
        out = placed((m,), (case + 1) % 4, "C")
        order, lda = (101, max(n, 1)) if a.flags.c_contiguous else (102, max(m, 1))  # CblasRowMajor / CblasColMajor
        gemv(order, 111, m, n, 1.0, a.ctypes.data, lda, x.ctypes.data, 1, 0.0, out.ctypes.data, 1)
        if out.tobytes() != np.dot(a, x).tobytes():
            return f"a {m}x{n} {'C' if a.flags.c_contiguous else 'Fortran'}-ordered matrix"
    return ""


@lru_cache(maxsize=None)
def allocation_alignment() -> int:
    """The alignment in bytes (at most 64) every fresh numpy array of the controller's sizes has here:
    where numpy's allocator (malloc: 16 on 64-bit Linux) puts robosuite's operands of numpy's BLAS."""
    arrays = [np.empty(n) for n in _ALLOCATED for _ in range(8)]  # all alive at once: distinct addresses
    alignment = _SPAN
    for array in arrays:
        while array.ctypes.data % alignment:
            alignment //= 2
    return alignment


def _placement_step() -> int:
    """The alignment robosuite's operands and the compiled loop's share (numpy's and numba's arrays)."""
    return min(allocation_alignment(), _NUMBA_ALIGNMENT)


def _placed(values: np.ndarray, offset: int, order: str = "C") -> np.ndarray:
    """A copy of ``values`` (in ``order``) starting ``offset`` bytes past a multiple of 64 bytes."""
    raw = np.empty(values.size + (_SPAN + offset) // 8)
    start = (-raw.ctypes.data % _SPAN + offset) // 8
    out = raw[start:start + values.size].reshape(values.shape, order=order)
    out[:] = values
    return out


def _declare_gemv(gemv: Any, int64: bool) -> None:
    """``cblas_dgemv``'s signature, for a ctypes function (its integers 64-bit or C ints)."""
    integer = ctypes.c_int64 if int64 else ctypes.c_int32
    gemv.restype = None
    gemv.argtypes = [ctypes.c_int, ctypes.c_int, integer, integer, ctypes.c_double, ctypes.c_void_p, integer, ctypes.c_void_p,
                     integer, ctypes.c_double, ctypes.c_void_p, integer]


def _placement_mismatch(gemv: Any, int64: bool) -> str:
    """"" where ``gemv`` gives the same bits for the same operands at every address the compiled loop
    and robosuite's arrays may have (multiples of ``_placement_step()``, matrix, vector and result
    each), on the controller's shapes in both layouts; else the first matrix it differs for."""
    _declare_gemv(gemv, int64)
    rng = np.random.default_rng(1)
    places = range(0, _SPAN, _placement_step())
    for m, n in _DOT_SHAPES:
        for order in "CF":
            for _ in range(2):
                values = rng.standard_normal((m, n)) * 10.0 ** rng.uniform(-4, 4, (m, n))
                vector = rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)
                expected = np.dot(np.array(values, order=order), vector.copy()).tobytes()  # fresh arrays, as robosuite's
                row_major = order == "C"
                for a_at, x_at, y_at in itertools.product(places, repeat=3):
                    a, x, y = _placed(values, a_at, order), _placed(vector, x_at), _placed(np.zeros(m), y_at)
                    gemv(101 if row_major else 102, 111, m, n, 1.0, a.ctypes.data, n if row_major else m, x.ctypes.data, 1, 0.0,
                         y.ctypes.data, 1)
                    if y.tobytes() != expected:
                        return f"a {m}x{n} {'C' if row_major else 'Fortran'}-ordered matrix"
    return ""


@lru_cache(maxsize=None)
def convolve_form() -> str | None:
    """How numpy computes ``np.convolve(column, np.ones(10) / 10.0, mode="valid")`` (one of
    ``CONVOLVE_FORMS``), found value for value on random columns; None: none of them."""
    weights = np.ones(ACC_WINDOW) / 10.0
    reversed_weights = [float(w) for w in weights[::-1]]  # np.convolve correlates with the reversed kernel
    found = blas()
    ddot = None
    if found.ddot:
        integer = ctypes.c_int64 if found.int64 else ctypes.c_int32
        ddot = ctypes.CFUNCTYPE(ctypes.c_double, integer, ctypes.c_void_p, integer, ctypes.c_void_p, integer)(found.ddot)
    kernel = np.ascontiguousarray(weights[::-1])
    rng = random.Random(0)
    candidates = {"sequential": True, "fused": True, "blas": ddot is not None}
    for _ in range(48):
        column = np.array([rng.gauss(0.0, 1.0) * 10.0 ** rng.uniform(-6, 6) for _ in range(ACC_WINDOW)])
        expected = float(np.convolve(column, weights, mode="valid")[0])
        values = [float(v) for v in column]
        if candidates["sequential"]:
            total = 0.0
            for v, w in zip(values, reversed_weights):
                total += v * w
            candidates["sequential"] = _same(total, expected)
        if candidates["fused"]:
            total = 0.0
            for v, w in zip(values, reversed_weights):
                total = _fma(v, w, total)
            candidates["fused"] = _same(total, expected)
        if candidates["blas"]:
            candidates["blas"] = _same(0.0 + ddot(ACC_WINDOW, column.ctypes.data, 1, kernel.ctypes.data, 1), expected)
    for form in CONVOLVE_FORMS:  # more than one can match only by chance; the first is numpy's usual
        if candidates[form]:
            return form
    return None


def _fma(a: float, b: float, c: float) -> float:
    """a * b + c rounded once (``Fraction`` is exact; its conversion to float rounds to nearest, ties to even)."""
    if not all(np.isfinite((a, b, c))):
        return a * b + c
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def _same(a: float, b: float) -> bool:
    return np.float64(a).tobytes() == np.float64(b).tobytes()


# robosuite's set_goal (OperationalSpaceController.set_goal with deltas): numpy arithmetic beside BLAS


@dataclass(frozen=True)
class GoalArithmetic:
    """What the compiled policy step needs to compute robosuite's ``set_goal`` as numpy does."""

    gemm: int = 0  # numpy's cblas_dgemm (its 3 x 3 product of the rotation and the orientation)
    why: str = ""  # why it cannot ("" where it can)

    @property
    def usable(self) -> bool:
        return not self.why


@lru_cache(maxsize=None)
def goal_arithmetic() -> GoalArithmetic:
    """Whether robosuite's ``set_goal`` can be computed compiled, bit for bit, here (read once per
    process): numpy's ``np.dot`` of two 3 x 3 matrices is its BLAS ``cblas_dgemm`` as numpy calls it;
    ``np.linalg.norm`` of a 3-vector is the square root of 0 + its BLAS ``ddot``; numpy's float64
    ``np.cos`` and ``np.sin`` are the C library's (``math.cos``, ``math.sin``; numba's call them),
    each compared value for value on random inputs."""
    found = blas()
    if not found.usable:
        return GoalArithmetic(why=found.why)
    lib = ctypes.CDLL(found.library)
    prefix, _, suffix = found.symbol.partition("cblas_dgemv")
    gemm = getattr(lib, f"{prefix}cblas_dgemm{suffix}", None)
    if gemm is None:
        return GoalArithmetic(why=f"no {prefix}cblas_dgemm{suffix} in {os.path.basename(found.library)}")
    integer = ctypes.c_int64 if found.int64 else ctypes.c_int32
    gemm.restype = None
    gemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, ctypes.c_double, ctypes.c_void_p, integer,
                     ctypes.c_void_p, integer, ctypes.c_double, ctypes.c_void_p, integer]
    ddot = ctypes.CFUNCTYPE(ctypes.c_double, integer, ctypes.c_void_p, integer, ctypes.c_void_p, integer)(found.ddot)
    rng = np.random.default_rng(0)
    for case in range(64):
        a, b = (np.empty(12)[case % 3:case % 3 + 9].reshape(3, 3) for _ in range(2))
        a[:] = rng.standard_normal((3, 3))
        b[:] = rng.standard_normal((3, 3)) * 10.0 ** rng.uniform(-3, 3)
        out = np.empty(10)[(case + 1) % 2:(case + 1) % 2 + 9].reshape(3, 3)
        gemm(101, 111, 111, 3, 3, 3, 1.0, a.ctypes.data, 3, b.ctypes.data, 3, 0.0, out.ctypes.data, 3)  # CblasRowMajor, CblasNoTrans
        if out.tobytes() != np.dot(a, b).tobytes():
            return GoalArithmetic(why=f"np.dot of 3 x 3 matrices differs from {prefix}cblas_dgemm{suffix}")
        vector = np.empty(9)[case % 4:case % 4 + 6][3:]  # a view, as set_goal's scaled_delta[3:]
        vector[:] = rng.standard_normal(3) * 10.0 ** rng.uniform(-4, 1, 3)
        if not _same(math.sqrt(0.0 + ddot(3, vector.ctypes.data, 1, vector.ctypes.data, 1)), np.linalg.norm(vector)):
            return GoalArithmetic(why="np.linalg.norm of a 3-vector is not the square root of its BLAS ddot")
    moved = _goal_placement_mismatch(gemm, ddot, rng)
    if moved:
        return GoalArithmetic(why=f"{moved} gives other bits for the same values at another address aligned as numpy's arrays are "
                                  f"({_placement_step()} bytes): robosuite's set_goal then depends on where numpy's allocator puts an array")
    angles = np.concatenate([rng.uniform(-4.0, 4.0, 4096), rng.standard_normal(1024) * 1e-4])
    for angle in angles:
        if not (_same(np.cos(angle), math.cos(angle)) and _same(np.sin(angle), math.sin(angle))):
            return GoalArithmetic(why=f"numpy's float64 cos or sin differs from the C library's at {float(angle)!r}")
    return GoalArithmetic(gemm=_address(gemm))


def _goal_placement_mismatch(gemm: Any, ddot: Any, rng: np.random.Generator) -> str:
    """"" where set_goal's BLAS calls give the same bits at every address robosuite's operands and the
    compiled ``set_goal``'s may have: the 3 x 3 product's matrices and result at multiples of
    ``_placement_step()``, the norm's vector 24 bytes into such an array (``scaled_delta[3:]``, the
    compiled step's ``scaled[3:6]``); else which call differs."""
    places = range(0, _SPAN, _placement_step())
    for _ in range(4):
        rotation = rng.standard_normal((3, 3))
        orientation = rng.standard_normal((3, 3)) * 10.0 ** rng.uniform(-3, 3)
        expected = np.dot(rotation.copy(), orientation.copy()).tobytes()  # fresh arrays, as robosuite's
        for a_at, b_at, c_at in itertools.product(places, repeat=3):
            a, b, c = _placed(rotation, a_at), _placed(orientation, b_at), _placed(np.zeros((3, 3)), c_at)
            gemm(101, 111, 111, 3, 3, 3, 1.0, a.ctypes.data, 3, b.ctypes.data, 3, 0.0, c.ctypes.data, 3)
            if c.tobytes() != expected:
                return "numpy's 3 x 3 np.dot (its BLAS dgemm)"
        delta = rng.standard_normal(6) * 10.0 ** rng.uniform(-4, 1, 6)
        norm = np.linalg.norm(delta.copy()[3:])
        for at in places:
            vector = _placed(delta, at)[3:]
            if not _same(math.sqrt(0.0 + ddot(3, vector.ctypes.data, 1, vector.ctypes.data, 1)), norm):
                return "numpy's np.linalg.norm of a 3-vector (its BLAS ddot)"
    return ""


# numba


def numba_target() -> dict[str, Any]:
    """What numba compiles for here: its version, the CPU name and features (``NUMBA_CPU_NAME`` /
    ``NUMBA_CPU_FEATURES`` where set), and the key its cache files entries under."""
    try:
        import numba
        from numba.core import config
        from numba.core.registry import cpu_target
    except ImportError:
        return {"numba": None}
    codegen = cpu_target.target_context.codegen()
    magic = codegen.magic_tuple()
    features = str(magic[2])
    return {
        "numba": numba.__version__,
        "triple": magic[0],
        "cpu_name": magic[1],
        "avx512": "+avx512f" in features,
        "avx2": "+avx2" in features,
        "fma": "+fma" in features,
        "cpu_name_set": config.CPU_NAME,
        "cpu_features_set": config.CPU_FEATURES,
        "magic": magic,
    }


def cached_here(function: Any) -> bool | None:
    """Whether numba's cache holds ``function`` (a ``numba.njit(cache=True)`` dispatcher) compiled
    for this CPU: an entry under this machine's key, not only under another's. None: unknown (numba's
    cache internals are not the ones read here)."""
    try:
        from numba.core.registry import cpu_target

        magic = cpu_target.target_context.codegen().magic_tuple()
        index = function._cache._cache_file._load_index()
        return any(isinstance(key, tuple) and len(key) > 1 and key[1] == magic for key in index)
    except Exception:
        return None


def describe() -> dict[str, Any]:
    """The machine facts the compiled loop reads (``fastenv doctor``)."""
    found = blas()
    return {
        "blas": {
            "library": found.library and os.path.basename(found.library), "vendor": found.vendor, "core_type": found.core_type,
            "version": found.version, "symbol": found.symbol or None, "int64": found.int64, "np.dot equal": found.usable,
            "why": found.why or None, "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
            "numpy's arrays aligned to": allocation_alignment(),
        },
        "convolve_form": convolve_form(),
        "set_goal": {"reproduced": goal_arithmetic().usable, "why": goal_arithmetic().why or None},
        "numba": {k: v for k, v in numba_target().items() if k != "magic"},
    }
