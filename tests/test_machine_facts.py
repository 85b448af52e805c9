"""What the compiled LIBERO loop assumes of the machine (``machine_facts``), each fact able to fail,
and the compiled loop equal to robosuite's under every BLAS kernel set numpy's OpenBLAS offers here.

The kernel-set sweep runs each core type in a child process (``OPENBLAS_CORETYPE``); in CI the
machine's own and two sampled by the commit (``fastenv.conformance.sample_seed``), all of them
elsewhere: ``python -m fastenv.conformance.core_types`` runs the whole sweep.
"""

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fastenv import conformance
from fastenv.backends.libero import machine_facts
from fastenv.conformance.core_types import CORE_TYPES
from fastenv.core.fast_paths import FastPath

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
numba = need("numba", "the compiled loop needs it")


def test_numpys_blas_is_found_and_its_dgemv_is_np_dot_bit_for_bit():
    found = machine_facts.blas()
    assert found.usable, found.why
    assert found.gemv and found.ddot and found.symbol.endswith(("dgemv64_", "dgemv_64", "dgemv"))
    assert found.vendor == "openblas" and found.core_type  # numpy's wheel; threadpoolctl names the kernel set
    assert machine_facts._dot_mismatch(ctypes.CFUNCTYPE(None)(found.gemv), found.int64) == ""


def test_a_dgemv_that_is_not_np_dots_is_found_out():
    # The check compares bits: a gemv that computes the product otherwise (here, summed from the
    # other end) does not pass for numpy's.
    def reversed_gemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy):
        row_major = order == 101
        A = np.ctypeslib.as_array(ctypes.cast(a, ctypes.POINTER(ctypes.c_double)), (m * n,))
        A = A.reshape((m, n)) if row_major else A.reshape((n, m)).T
        v = np.ctypeslib.as_array(ctypes.cast(x, ctypes.POINTER(ctypes.c_double)), (n,))
        out = np.ctypeslib.as_array(ctypes.cast(y, ctypes.POINTER(ctypes.c_double)), (m,))
        for i in range(m):
            total = 0.0
            for j in reversed(range(n)):
                total += A[i, j] * v[j]
            out[i] = total

    assert "matrix" in machine_facts._dot_mismatch(reversed_gemv, True)


def _gemv_off_by_one_bit_where(misplaced, int64):
    # numpy's own dgemv, its first result one bit off where ``misplaced(address of the matrix)``: a
    # kernel that sums in another order from another alignment, as OpenBLAS 0.3.23's Prescott dgemv
    # does for a row-major matrix that is not 16-byte aligned
    integer = ctypes.c_int64 if int64 else ctypes.c_int32
    real = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, integer, integer, ctypes.c_double, ctypes.c_void_p, integer,
                            ctypes.c_void_p, integer, ctypes.c_double, ctypes.c_void_p, integer)(machine_facts.blas().gemv)

    def gemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy):
        real(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy)
        if misplaced(a):
            ctypes.c_int64.from_address(y).value ^= 1

    return gemv


def test_a_dgemv_whose_bits_depend_on_where_numpys_arrays_lie_is_found_out(monkeypatch):
    # robosuite's operands are fresh numpy arrays, at multiples of its allocator's alignment (16 bytes
    # here); a kernel that gives other bits at one such address than at another makes robosuite's
    # own np.dot depend on where malloc puts an array: found out. One that differs only off that
    # alignment (OpenBLAS 0.3.23's Prescott kernels) is not: numpy's arrays, and the compiled loop's
    # operands, never lie there.
    found = machine_facts.blas()
    assert machine_facts.allocation_alignment() >= 16 and machine_facts._placement_step() == 16  # malloc's, on 64-bit Linux
    assert machine_facts._placement_mismatch(_gemv_off_by_one_bit_where(lambda a: a % 32 == 16, found.int64), found.int64) == (
        "a 3x7 C-ordered matrix")
    prescott_like = _gemv_off_by_one_bit_where(lambda a: a % 16 != 0, found.int64)
    assert machine_facts._placement_mismatch(prescott_like, found.int64) == ""
    assert machine_facts._dot_mismatch(prescott_like, found.int64) != ""  # the same arrays off alignment: not np.dot's function
    assert machine_facts._placement_mismatch(ctypes.CFUNCTYPE(None)(found.gemv), found.int64) == ""  # numpy's own: one result per address kind
    # where found, the compiled loop steps aside, its line naming the matrix and why
    monkeypatch.setattr(machine_facts, "_placement_mismatch", lambda gemv, int64: "a 7x6 C-ordered matrix")
    why = machine_facts.blas.__wrapped__().why
    assert f"{found.symbol} of {os.path.basename(found.library)}, {found.core_type} kernels gives other bits for a 7x6 C-ordered matrix at " \
           "another address aligned as numpy's arrays are (16 bytes): robosuite's np.dot then depends on where numpy's allocator" in why


def test_a_placement_that_changes_set_goals_bits_is_found_out():
    # set_goal's norm of scaled_delta[3:], a view 24 bytes into a fresh array: a ddot whose bits
    # depend on where such a vector lies (8 or 24 bytes past a multiple of 32) makes robosuite's
    # set_goal depend on malloc's placement: found out, as is such a dgemm; numpy's own are not.
    found = machine_facts.blas()
    integer = ctypes.c_int64 if found.int64 else ctypes.c_int32
    ddot = ctypes.CFUNCTYPE(ctypes.c_double, integer, ctypes.c_void_p, integer, ctypes.c_void_p, integer)(found.ddot)
    gemm_address = machine_facts.goal_arithmetic().gemm
    assert gemm_address
    gemm = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer, ctypes.c_double, ctypes.c_void_p,
                            integer, ctypes.c_void_p, integer, ctypes.c_double, ctypes.c_void_p, integer)(gemm_address)

    def ddot_off_at_8_past_32(n, x, incx, y, incy):
        value = ddot(n, x, incx, y, incy)
        return float(np.nextafter(value, np.inf)) if x % 32 == 8 else value

    def gemm_off_at_16_past_32(*args):
        gemm(*args)
        if args[7] % 32 == 16:  # the first matrix
            ctypes.c_int64.from_address(args[12]).value ^= 1

    rng = np.random.default_rng(0)
    assert machine_facts._goal_placement_mismatch(gemm, ddot, rng) == ""
    assert machine_facts._goal_placement_mismatch(gemm, ddot_off_at_8_past_32, rng) == "numpy's np.linalg.norm of a 3-vector (its BLAS ddot)"
    assert machine_facts._goal_placement_mismatch(gemm_off_at_16_past_32, ddot, rng) == "numpy's 3 x 3 np.dot (its BLAS dgemm)"


def test_np_convolve_of_the_acceleration_window_is_summed_as_the_compiled_loop_sums_it():
    # numpy sums a correlation with a kernel of up to 11 values in its own loop, not with BLAS
    # (whose AVX-512 ddot sums in another order): the compiled loop computes the form found here,
    # equal to robosuite's np.convolve on columns of every scale.
    need("robosuite")
    from fastenv.backends.libero import _kernels

    form = machine_facts.convolve_form()
    assert form == "sequential"  # numpy's wheels on x86-64: no FMA contraction in its baseline build
    found = machine_facts.blas()
    blas = (np.uintp(found.gemv), np.uintp(found.ddot), np.uintp(machine_facts.CONVOLVE_FORMS.index(form)), np.uintp(found.int64))
    weights = np.ascontiguousarray((np.ones(10) / 10.0)[::-1])
    rng = np.random.default_rng(7)
    for _ in range(500):
        column = rng.standard_normal(10) * 10.0 ** rng.uniform(-8, 8, 10)
        assert _kernels._convolved(blas, column, weights) == np.convolve(column, np.ones(10) / 10.0, mode="valid")[0]


def test_each_convolve_form_is_a_different_sum():
    # The three forms the compiled loop can take differ on some column, so the one found is numpy's.
    column = [1e16, 1.0, -1e16, 3.0, 1e-3, 7.0, -2.5, 1e8, -1e8, 0.3]
    w = 0.1
    seq = 0.0
    fused = 0.0
    for v in column:
        seq += v * w
        fused = machine_facts._fma(v, w, fused)
    assert seq != fused
    assert machine_facts._fma(0.1, 10.0, -1.0) == 2.0 ** -54  # one rounding: 0.1 * 10 is not 1 exactly


def test_a_numba_cache_made_for_another_cpu_is_compiled_again_not_run(tmp_path):
    # numba keys its cache entries by the CPU name and features they were compiled for: a cache
    # made for AVX-512 (a shared file system, a container image) holds nothing an AVX2-only CPU
    # loads. cached_here says so (so fastenv does not take it for a filled cache), the function is
    # compiled again there, and it computes the same.
    (tmp_path / "tiny.py").write_text(textwrap.dedent("""
        import numba
        @numba.njit(cache=True)
        def f(x):
            total = 0.0
            for v in x:
                total += v * 0.1
            return total
    """))
    code = textwrap.dedent("""
        import json, sys, numpy as np
        sys.path.insert(0, sys.argv[1])
        import tiny
        from fastenv.backends.libero.machine_facts import cached_here
        before = cached_here(tiny.f)
        value = tiny.f(np.linspace(-3.0, 7.0, 11))
        print(json.dumps({"before": before, "after": cached_here(tiny.f), "value": value.hex(),
                          "compiled": len(tiny.f.stats.cache_misses), "loaded": len(tiny.f.stats.cache_hits)}))
    """)
    avx512 = {"NUMBA_CPU_NAME": "skylake-avx512", "NUMBA_CPU_FEATURES": ""}
    avx2 = {"NUMBA_CPU_NAME": "haswell",
            "NUMBA_CPU_FEATURES": "+64bit,+avx,+avx2,+bmi,+bmi2,+cmov,+cx16,+f16c,+fma,+lzcnt,+mmx,+movbe,+pclmul,+popcnt,+sse,+sse2,"
                                  "+sse3,+sse4.1,+sse4.2,+ssse3,+xsave,-avx512f,-avx512bw,-avx512dq,-avx512vl,-avx512cd"}

    def run(target):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), **target}
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        import json

        return json.loads(out.stdout.strip().splitlines()[-1])

    made = run(avx512)
    assert made["before"] is False and made["after"] is True and made["compiled"] == 1
    other = run(avx2)
    assert other["before"] is False  # the AVX-512 entry is not this CPU's
    assert other["compiled"] == 1 and other["loaded"] == 0 and other["after"] is True
    assert other["value"] == made["value"]
    again = run(avx512)
    assert again["before"] is True and again["loaded"] == 1 and again["compiled"] == 0


def test_set_goals_numpy_arithmetic_is_found_and_a_difference_is_found_out(monkeypatch):
    # numpy's 3 x 3 np.dot is its cblas_dgemm, np.linalg.norm its ddot's square root, its float64
    # cos and sin the C library's: robosuite's set_goal then runs compiled. A cos that differs in
    # one bit (here, the C library's as seen by the check) and it does not.
    import math

    machine_facts.goal_arithmetic.cache_clear()
    found = machine_facts.goal_arithmetic()
    assert found.usable and found.gemm, found.why
    real = math.cos
    monkeypatch.setattr(math, "cos", lambda x: np.nextafter(real(x), 2.0))
    machine_facts.goal_arithmetic.cache_clear()
    try:
        assert "cos or sin differs" in machine_facts.goal_arithmetic().why
    finally:
        monkeypatch.undo()
        machine_facts.goal_arithmetic.cache_clear()


def test_a_fast_path_machine_fact_that_does_not_hold_steps_aside_with_one_line(monkeypatch):
    # numpy's BLAS not found: the compiled loop steps aside (the Python loop, the same arithmetic,
    # serves) and says why once.
    from fastenv.backends.libero import compiled

    monkeypatch.setattr(compiled, "_KERNEL", None)
    monkeypatch.setattr(machine_facts, "blas", lambda: machine_facts.Blas(None, "", False, why="no CBLAS dgemv/ddot of numpy's BLAS"))
    monkeypatch.setattr("fastenv.backends.libero.mujoco_facts._SAID", set())
    need("robosuite")
    with pytest.warns(RuntimeWarning, match="the compiled control loop steps aside .*no CBLAS dgemv/ddot of numpy's BLAS"):
        assert compiled.kernel() is None
    monkeypatch.setattr(compiled, "_KERNEL", None)


# The whole sweep outside CI; in CI the machine's own kernel set and two sampled by the commit.
SWEPT = ("", *conformance.sample(list(CORE_TYPES[1:]), 2, f"{conformance.sample_seed()}:core-types")) if os.environ.get("CI") else CORE_TYPES


@pytest.mark.libero
@pytest.mark.parametrize("core_type", SWEPT, ids=[c or "own" for c in SWEPT])
def test_the_compiled_loop_is_robosuites_under_each_blas_kernel_set(core_type):
    from fastenv.conformance.core_types import run_child

    row = run_child(core_type)
    assert row["passed"], f"OPENBLAS_CORETYPE={core_type or '(unset)'}: {row}"
    assert row["env steps compared"] > 0 and row["served"]


@pytest.mark.libero
def test_the_sweep_fails_where_the_compiled_policy_step_computes_otherwise(monkeypatch):
    # With the acceleration estimate summed with fused multiply-adds (not numpy's form), the once
    # per env check finds the compiled policy step differs: it steps aside, and the sweep fails it.
    from fastenv.backends.libero import compiled
    from fastenv.conformance.core_types import check

    monkeypatch.setattr(compiled, "_KERNEL", None)
    monkeypatch.setattr(machine_facts, "convolve_form", lambda: "fused")
    try:
        row = check("libero_goal/5", steps=4)
    finally:
        compiled._KERNEL = None
    assert not row["passed"] and not row[FastPath.COMPILED_POLICY_STEP]
    assert any("compiled policy step differs" in line for line in row["said"])
