"""The controller's linear algebra in the compiled LIBERO loop (``_kernels._opspace``): at every level
of ``_kernels.LA_LEVELS`` robosuite's ``opspace_matrices`` bit for bit, and the level a process picks
one whose results equal robosuite's.
"""

import numpy as np
import pytest

pytest.importorskip("numba", reason='the compiled loop needs numba: pip install -e ".[numba]"')
pytest.importorskip("robosuite", reason='pip install -e ".[libero]"')


@pytest.fixture(scope="module")
def kernel():
    from fastenv.backends.libero.compiled import kernel as compiled_kernel

    built = compiled_kernel()
    if built is None:
        pytest.skip("the compiled loop does not build here")
    return built


def _matrices(rng, k, scale=1.0, j_full_order="F", rank_deficient=False):
    a = rng.standard_normal((k, k)) * 10.0 ** rng.uniform(-2, 1)
    mass = np.asfortranarray((a @ a.T + np.diag(rng.uniform(0.01, 2.0, k))) * scale)
    jacobian = rng.standard_normal((6, k)) * 10.0 ** rng.uniform(-1.5, 0.5, (6, k))
    if rank_deficient:
        jacobian[3:] = 0.0  # the orientation rows vanish: pseudo-inverses cut singular values
    j_full = np.asfortranarray(jacobian) if j_full_order == "F" else np.ascontiguousarray(jacobian)
    return mass, j_full, np.asfortranarray(jacobian[:3]), np.asfortranarray(jacobian[3:])


def _same(a, b):
    return all(x.shape == y.shape and x.strides == y.strides and x.tobytes(order="A") == y.tobytes(order="A") for x, y in zip(a, b))


@pytest.mark.parametrize("level", [1, 2])
@pytest.mark.parametrize("j_full_order", ["F", "C"])
def test_each_level_is_robosuites_opspace_matrices_bit_for_bit(kernel, level, j_full_order):
    # The same LAPACK and BLAS calls on buffers made once (1), and dgesdd's own steps called
    # directly (2), give robosuite's results in every bit, on well-conditioned, rank-deficient
    # and badly scaled matrices (where dgesdd would scale one, level 2 runs dgesdd itself).
    from robosuite.utils.control_utils import opspace_matrices

    rng = np.random.default_rng(level)
    work, iwork = kernel.workspace(7)
    for case in range(60):
        scale = (1e-160, 1e160, 1.0)[case % 3] if case >= 50 else 1.0  # beyond dgesdd's SMLNUM and BIGNUM
        matrices = _matrices(rng, 7, scale, j_full_order, rank_deficient=case % 5 == 4)
        expected = opspace_matrices(*matrices)
        got = kernel.opspace(level, work, iwork, *matrices)
        assert _same(got, expected), f"level {level}, case {case}"
        assert got[0].flags.f_contiguous and got[3].flags.c_contiguous  # the layouts robosuite's function returns


def test_other_joint_counts_and_non_finite_matrices_behave_as_robosuites(kernel):
    from robosuite.utils.control_utils import opspace_matrices

    rng = np.random.default_rng(3)
    for k in (2, 6, 9):
        work, iwork = kernel.workspace(k)
        matrices = _matrices(rng, k)
        assert _same(kernel.opspace(2, work, iwork, *matrices), opspace_matrices(*matrices)), k
    work, iwork = kernel.workspace(7)
    mass, *jacobians = _matrices(rng, 7)
    mass[2, 3] = np.nan
    with pytest.raises(np.linalg.LinAlgError, match="infs or NaNs"):
        opspace_matrices(mass, *jacobians)
    with pytest.raises(np.linalg.LinAlgError, match="infs or NaNs"):
        kernel.opspace(2, work, iwork, mass, *jacobians)


def test_the_level_picked_is_the_highest_that_equals_robosuites(kernel, monkeypatch):
    # Trials on random matrices: a level whose results differ in one bit is not picked.
    from fastenv.backends.libero import compiled

    kept = kernel.level, kernel._functions
    try:
        kernel.level = None
        assert kernel.choose_level(7) == 2  # scipy's LAPACK: dgesdd's path for small square matrices, called step by step
        assert kernel._functions[2][0] == 2  # what the compiled functions get

        real = compiled.Kernel.opspace

        def off_by_one_bit_at_level_2(self, level, *args):
            out = real(self, level, *args)
            if level == 2:
                out[1].view(np.int64)[0, 0] ^= 1
            return out

        monkeypatch.setattr(compiled.Kernel, "opspace", off_by_one_bit_at_level_2)
        kernel.level = None
        assert kernel.choose_level(7) == 1 and kernel._functions[2][0] == 1
    finally:
        kernel.level, kernel._functions = kept
