"""The compiled LIBERO controller's arithmetic, robosuite's bit for bit: its linear algebra
(``_kernels._opspace``: every level of ``_kernels.LA_LEVELS`` is ``opspace_matrices``, and a process
picks one whose results equal robosuite's) and its goal (``_kernels._set_goal``: ``set_goal``; an
env step in one compiled call where it serves, robosuite's ``set_goal`` between two where it differs).
"""

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("numba", "the compiled loop needs it")
need("robosuite")


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
    # and badly scaled matrices (where dgesdd would scale one, level 2 runs dgesdd itself). In the
    # layouts robosuite's update leaves (Fortran order); in another, robosuite's own function runs.
    from robosuite.utils.control_utils import opspace_matrices

    from fastenv.backends.libero import _kernels

    rng = np.random.default_rng(level)
    work, iwork = kernel.workspace(7)
    for case in range(60):
        scale = (1e-160, 1e160, 1.0)[case % 3] if case >= 50 else 1.0  # beyond dgesdd's SMLNUM and BIGNUM
        matrices = _matrices(rng, 7, scale, j_full_order, rank_deficient=case % 5 == 4)
        expected = opspace_matrices(*matrices)
        work[_kernels.HEADER:] = np.nan
        got = kernel.opspace(level, work, iwork, *matrices)
        assert _same(got, expected), f"level {level}, case {case}"
        assert got[0].flags.f_contiguous and got[3].flags.c_contiguous  # the layouts robosuite's function returns
        assert np.isnan(work[_kernels.HEADER]) == (j_full_order == "C"), case  # the buffers used: this level's own calls


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


def test_the_compiled_set_goal_is_robosuites(kernel):
    # scale_action, axisangle2quat, quat2mat and numpy's 3 x 3 product: the goal robosuite's
    # set_goal sets, for actions that rotate, that do not (the orientation goal kept), that clip,
    # in float32 and float64, from the controller's live attributes.
    from fastenv.backends.libero import LiberoAdapter, LiberoTask
    from fastenv.backends.libero.control import _SCALE

    from fastenv.backends.libero import machine_facts

    assert machine_facts.goal_arithmetic().usable and kernel.compiles_goal
    adapter = LiberoAdapter(LiberoTask.load("libero_goal", 7), keys=["robot0_proprio-state"], camera_size=32)
    try:
        adapter.reset(seed=0, options={"init_state_id": 0}, rng=np.random.default_rng(0))
        rng = np.random.default_rng(5)
        adapter.substep(np.zeros(7))
        controller = adapter._raw.robots[0].controller
        scale = np.array([getattr(controller, name) for name in _SCALE])
        for case in range(200):
            action = rng.uniform(-1.5, 1.5, 7).astype(np.float32 if case % 2 else np.float64)
            if case % 5 == 0:
                action[3:6] = 0.0  # no rotation: robosuite keeps the orientation goal
            if case % 7 == 0:
                action[rng.integers(3, 6)] = 0.0
            if case % 20 == 0:
                adapter.substep(rng.uniform(-1, 1, 7))  # another live state
            controller.new_update = False  # as at a policy step: set_goal's update() does nothing
            before = controller.goal_ori
            goal_pos, goal_ori = np.empty(3), np.empty((3, 3))
            rotates = kernel.goal(np.asarray(action[:6], dtype=np.float64), controller.ee_pos, controller.ee_ori_mat, scale, goal_pos,
                                  goal_ori)
            controller.set_goal(action[:6])
            assert controller.goal_pos.tobytes() == goal_pos.tobytes(), case
            if rotates:
                assert controller.goal_ori.tobytes() == goal_ori.tobytes() and controller.goal_ori is not before, case
            else:
                assert controller.goal_ori is before and not action[3:6].any(), case
    finally:
        adapter.close()


def _rollout(adapter, actions, seed=0):
    adapter.reset(seed=seed, options={"init_state_id": seed % 10}, rng=np.random.default_rng(seed))
    return [adapter.substep(action) for action in actions]


def test_an_env_step_runs_in_one_call_and_a_set_goal_that_differs_runs_robosuites(monkeypatch, kernel):
    # With robosuite's set_goal compiled (checked once per env against robosuite's), an env step
    # is one compiled call; where the compiled goal differs in a bit, the env says so once and runs
    # robosuite's set_goal between two compiled calls: either way the trajectory is robosuite's.
    import warnings

    from fastenv.backends.libero import LiberoAdapter, LiberoTask, compiled

    calls = []
    for name in ("step", "env_step"):
        real = getattr(compiled.Kernel, name)
        monkeypatch.setattr(compiled.Kernel, name, (lambda real, name: lambda self, *a: (calls.append(name), real(self, *a))[1])(real, name))
    actions = np.random.default_rng(3).uniform(-1, 1, (12, 7)).astype(np.float32)
    task = LiberoTask.load("libero_goal", 7)
    adapters = [LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=32) for _ in range(3)]
    fast, bad, stock = adapters
    stock.fast_substep = False
    try:
        expected = _rollout(stock, actions)
        assert _rollout(fast, actions) == expected
        assert fast._control_loop()._goal_checked is True and calls.count("step") >= 9 and calls.count("env_step") <= 2
        assert np.array_equal(fast._raw.sim.data.qpos, stock._raw.sim.data.qpos)

        real_goal = compiled.Kernel.goal

        def off_by_one_bit(self, action, ee_pos, ee_ori_mat, scale, goal_pos, goal_ori):
            out = real_goal(self, action, ee_pos, ee_ori_mat, scale, goal_pos, goal_ori)
            goal_pos.view(np.int64)[0] ^= 1
            return out

        monkeypatch.setattr(compiled.Kernel, "goal", off_by_one_bit)
        calls.clear()
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", RuntimeWarning)
            assert _rollout(bad, actions) == expected
        assert any("compiled set_goal differs" in str(w.message) for w in said)
        assert bad._control_loop()._goal_checked is False and "step" not in calls and calls.count("env_step") >= 10
        assert np.array_equal(bad._raw.sim.data.qpos, stock._raw.sim.data.qpos)
    finally:
        for adapter in adapters:
            adapter.close()


def test_the_controllers_attributes_lie_where_numpys_arrays_lie(kernel):
    # Each attribute in the compiled functions' state from a multiple of 64 bytes of a numpy buffer,
    # none overlapping, the torques last: a matrix the loop hands numpy's BLAS (J_full.T) starts at a
    # multiple of numpy's allocation alignment, as robosuite's fresh arrays do.
    from fastenv.backends.libero import _kernels
    from fastenv.backends.libero.control import _state_views

    for k in range(2, _kernels.MAX_DOFS + 1):
        layout = kernel.state_layout(k)
        views = _state_views(k)
        assert tuple(name for name, *_ in views) == _kernels.STATE_ATTRIBUTES
        assert [offset for _, _, offset, _ in views] == [8 * at for at in layout[:-1]]
        ends = [8 * at + 8 * int(np.prod(shape)) for (_, shape, _, _), at in zip(views, layout)]
        assert all(start % 64 == 0 for start in (8 * at for at in layout[:-1])), k
        assert all(end <= 8 * start for end, start in zip(ends, layout[1:-1])), k  # no overlap
        assert ends[-1] == 8 * layout[-1]  # the torques end the buffer


def test_the_compiled_loop_serves_where_numpys_dgemv_sums_otherwise_off_its_alignment(kernel):
    # OpenBLAS 0.3.23's Prescott dgemv (numpy 1.26's wheels on a CPU that OpenBLAS does not know)
    # gives other bits for a row-major matrix that is not 16-byte aligned; robosuite's matrices are
    # fresh numpy arrays, 16-byte aligned. A stand-in for numpy's dgemv, one bit off for a matrix off
    # that alignment: the compiled loop (its products through the stand-in) still equals robosuite's
    # loop (numpy's own) in every env step and serves. The same stand-in one bit off for an aligned
    # matrix instead (a negative control): the once-per-env check finds it, and the env steps aside.
    import ctypes
    import warnings

    from fastenv.backends.libero import LiberoAdapter, LiberoTask, machine_facts
    from fastenv.core.fast_paths import FastPath

    found = machine_facts.blas()
    integer = ctypes.c_int64 if found.int64 else ctypes.c_int32
    prototype = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, integer, integer, ctypes.c_double, ctypes.c_void_p, integer,
                                 ctypes.c_void_p, integer, ctypes.c_double, ctypes.c_void_p, integer)
    real = prototype(found.gemv)
    matrices = []

    def stand_in(off):
        def gemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy):
            real(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy)
            matrices.append(a)
            if off(a):
                ctypes.c_int64.from_address(y).value ^= 1

        return prototype(gemv)

    actions = np.random.default_rng(4).uniform(-1, 1, (8, 7))
    task = LiberoTask.load("libero_goal", 7)
    stock = LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=32)
    stock.fast_substep = False
    kept = kernel._functions
    try:
        expected = _rollout(stock, actions)
        expected_qpos = np.array(stock._raw.sim.data.qpos)
        for off, serves in ((lambda a: a % 16 != 0, True), (lambda a: a % 16 == 0, False)):
            gemv = stand_in(off)
            mj, blas, la = kept
            kernel._functions = (mj, (np.uintp(ctypes.cast(gemv, ctypes.c_void_p).value), *blas[1:]), la)
            matrices.clear()
            fast = LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=32)
            try:
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always", RuntimeWarning)
                    assert _rollout(fast, actions) == expected
                assert np.array_equal(fast._raw.sim.data.qpos, expected_qpos)
                assert fast.fast_paths()[FastPath.COMPILED_CONTROL_LOOP] is serves, [str(w.message) for w in said]
                assert any("compiled control loop's torques differ" in str(w.message) for w in said) is not serves
                assert matrices  # the compiled products went through the stand-in
                if serves:
                    assert len(matrices) > 4 * len(actions) and all(a % 16 == 0 for a in matrices)
            finally:
                fast.close()
    finally:
        kernel._functions = kept
        stock.close()
