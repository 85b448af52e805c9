"""The policy step of a LIBERO env step compiled: robosuite's ``robot.control(action,
policy_step=True)`` after the controller's ``set_goal``, bit for bit.

At the first physics step of an env step robosuite sets the controller's goal, runs the controller,
clips the torques, commands the gripper, writes the actuators, and pushes eight values into the
robot's buffers of recent values (joint positions, action, torques, end-effector force and torque,
pose, velocity and an acceleration estimate: a moving average of velocity differences). In Python
that is about a hundred numpy calls of a few microseconds each. Here everything after ``set_goal``
(robosuite's own, or compiled with the rest of the env step: ``control.ControlLoop._goal``) runs
in one numba function (``_kernels.policy_step``) that calls what robosuite calls: the compiled
controller and robosuite's numba ``mat2quat``, and sums the acceleration estimate's
``np.convolve`` as numpy does (``machine_facts.convolve_form``), and can finish the physics step
in the same call. Python then sets the attributes robosuite sets.

Once per env, at its first policy step, the compiled step and robosuite's ``robot.control`` run
from the same state and everything either leaves (actuators, torques, gripper, goal, every buffer)
is compared bit for bit; a difference and the env keeps robosuite's ``robot.control``.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

_DELTA_BUFFERS = ("recent_qpos", "recent_actions", "recent_torques", "recent_ee_forcetorques", "recent_ee_pose", "recent_ee_vel",
                  "recent_ee_acc")
_RING = "recent_ee_vel_buffer"
_DELTAS = operator.attrgetter(*_DELTA_BUFFERS)
_BUFFERS = operator.attrgetter(*_DELTA_BUFFERS, _RING)
_ACC_WINDOW = 10  # machine_facts.ACC_WINDOW: robosuite's SingleArm.control: np.convolve(col, np.ones(10) / 10.0, mode="valid")[0]


class PolicyStep:
    """The compiled policy step for one robot of one sim (see the module's docstring)."""

    def __init__(self, robot: Any, data: Any) -> None:
        sim_model = robot.sim.model
        self.robot = robot
        self.joint_pos_index = np.asarray(robot._ref_joint_pos_indexes, dtype=np.int64)
        sensors = robot.gripper.important_sensors
        self.force_at, force_dim = _sensor_slice(sim_model, sensors["force_ee"])
        self.torque_at, torque_dim = _sensor_slice(sim_model, sensors["torque_ee"])
        self.usable = force_dim == 3 and torque_dim == 3
        # np.convolve correlates with its second argument reversed (_kernels._convolved)
        self.weights = np.ascontiguousarray((np.ones(_ACC_WINDOW) / 10.0)[::-1])
        self.sensordata = data.sensordata
        self.checked: bool | None = None  # compared with robosuite's robot.control once
        self._buffers: tuple[Any, ...] = ()  # the buffers last found to apply (robosuite makes new ones at each reset)
        self._pending: Any = None  # (out, vel_at, k, nj) of the last arguments()
        self._forces: _ForcesAt | None = None

    def applies(self) -> bool:
        """Whether the robot's buffers are the ones this step fills (robosuite's own kinds)."""
        if not self.usable or self.checked is False:
            return False
        robot = self.robot
        try:
            buffers = _BUFFERS(robot)
        except AttributeError:
            return False
        if self._buffers and all(map(operator.is_, buffers, self._buffers)):
            return True
        if not self._buffers_apply():
            return False
        self._buffers = buffers
        return True

    def lazy_forces(self) -> Any:
        """The robot's force and torque buffer as a ``LazyForceTorques`` (in place of the plain one
        robosuite makes at each reset, with its values)."""
        robot = self.robot
        buffer = robot.recent_ee_forcetorques
        lazy = _lazy_class()
        if type(buffer) is not lazy:
            if self._forces is None:
                self._forces = _ForcesAt(robot.sim.model._model, self.force_at, self.torque_at)
            buffer = robot.recent_ee_forcetorques = lazy(buffer, self._forces)
            self._buffers = ()
        return buffer

    def _buffers_apply(self) -> bool:
        from robosuite.utils.buffers import DeltaBuffer, RingBuffer

        robot = self.robot
        ring = getattr(robot, _RING, None)
        return (
            all(type(getattr(robot, name, None)) in (DeltaBuffer, _lazy_class()) for name in _DELTA_BUFFERS)
            and type(ring) is RingBuffer
            and ring.length == _ACC_WINDOW
            and ring.buf.shape == (_ACC_WINDOW, 6)
            and ring.buf.dtype == np.float64
            and ring.buf.flags.c_contiguous
            and np.asarray(robot.recent_ee_acc.current).shape == (6,)
        )

    def arguments(self) -> tuple[Any, ...]:
        """``policy_step``'s arguments after the actuators': where the robot's buffers read and what
        they receive (``out``); ``push`` then hands the values to the buffers."""
        robot = self.robot
        k, nj = len(robot.controller.qvel_index), len(self.joint_pos_index)
        out = np.empty(3 * k + nj + 25)
        ring = robot.recent_ee_vel_buffer
        vel_at = (ring.ptr + 1) % ring.length
        acc = np.ascontiguousarray(robot.recent_ee_acc.current, dtype=np.float64)
        self._pending = (out, vel_at, k, nj)
        return (self.joint_pos_index, self.sensordata, self.force_at, self.torque_at, ring.buf, vel_at, acc, float(robot.control_freq),
                self.weights, out)

    def push(self, action: np.ndarray, forces_at: np.ndarray | None = None) -> None:
        """What the buffers' ``push`` leaves, from the last compiled policy step's values (the
        ring buffer's row is written in place). With ``forces_at`` (the state the policy step
        started from, ``mj_getState``'s ``mjSTATE_INTEGRATION``), the force and torque buffer
        receives them from a forward pass at that state when read (``LazyForceTorques``)."""
        out, vel_at, k, nj = self._pending
        robot = self.robot
        o = 3 * k
        if forces_at is not None:
            self.lazy_forces().push_state(forces_at)
        qpos, actions, torques, forces, pose, vel, acc = _DELTAS(robot)
        pushed = [(qpos, out[o:o + nj]), (actions, np.array(action)), (torques, out[2 * k:o]), (pose, out[o + nj + 6:o + nj + 13]),
                  (vel, out[o + nj + 13:o + nj + 19]), (acc, out[o + nj + 19:o + nj + 25])]
        if forces_at is None:
            pushed.append((forces, out[o + nj:o + nj + 6]))
        for buffer, value in pushed:
            buffer.last = buffer.current
            buffer.current = value
        ring = robot.recent_ee_vel_buffer
        ring.ptr = vel_at
        if ring._size < ring.length:
            ring._size += 1

    def run(self, kernel: Any, args: tuple[Any, ...], rest: tuple[Any, ...], action: np.ndarray) -> None:
        """After ``set_goal``: the rest of ``robot.control(action, policy_step=True)``, compiled.
        ``args`` are ``ControlLoop._control_args``, ``rest`` its ``_actuator_args``."""
        robot = self.robot
        kernel.policy_step(*args, *rest[:9], *self.arguments(), False)
        out, k = self._pending[0], self._pending[2]
        # what run_controller, robot.control and grip_action leave
        robot.controller.torques = out[0:k]
        robot.controller.new_update = True
        robot.torques = out[k:2 * k]
        robot.gripper.current_action = rest[4]
        self.push(action)

    def check(self, step: Any, reference: Any) -> bool:
        """Run ``step()`` (the compiled path, the physics step left unfinished), record what it
        leaves, restore the state, run ``reference()`` (robosuite's ``robot.control``) and compare
        bit for bit; robosuite's result is what stays."""
        kept = self._snapshot()
        step()
        compiled = self._record()
        self._restore(kept)
        reference()
        self.checked = _same(compiled, self._record())
        return self.checked

    def _snapshot(self) -> dict[str, Any]:
        robot = self.robot
        return {
            "controller": dict(robot.controller.__dict__), "robot": dict(robot.__dict__), "gripper": dict(robot.gripper.__dict__),
            "buffers": {name: dict(getattr(robot, name).__dict__) for name in (*_DELTA_BUFFERS, _RING)},
            "ring": robot.recent_ee_vel_buffer.buf.copy(), "ctrl": robot.sim.data.ctrl.copy(),
        }

    def _restore(self, kept: dict[str, Any]) -> None:
        robot = self.robot
        for obj, saved in ((robot.controller, kept["controller"]), (robot, kept["robot"]), (robot.gripper, kept["gripper"])):
            obj.__dict__.clear()
            obj.__dict__.update(saved)
        for name, saved in kept["buffers"].items():
            getattr(robot, name).__dict__.update(saved)
        robot.recent_ee_vel_buffer.buf[:] = kept["ring"]
        robot.sim.data.ctrl[:] = kept["ctrl"]

    def _record(self) -> dict[str, Any]:
        robot = self.robot
        controller = robot.controller
        out: dict[str, Any] = {
            "ctrl": robot.sim.data.ctrl.copy(), "robot.torques": robot.torques, "gripper.current_action": robot.gripper.current_action,
            "controller.new_update": controller.new_update,
        }
        for name in ("torques", "goal_pos", "goal_ori", "ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel"):
            out[f"controller.{name}"] = getattr(controller, name)
        for name in _DELTA_BUFFERS:
            out[f"{name}.last"], out[f"{name}.current"] = getattr(robot, name).last, getattr(robot, name).current
        ring = robot.recent_ee_vel_buffer
        out[_RING] = (ring.buf.copy(), ring.ptr, ring._size)
        return out


def _sensor_slice(sim_model: Any, name: str) -> tuple[int, int]:
    """Where a sensor's values start in ``sensordata`` and how many (robosuite's
    ``get_sensor_measurement``)."""
    sensor_id = sim_model.sensor_name2id(name)
    return int(np.sum(sim_model.sensor_dim[:sensor_id])), int(sim_model.sensor_dim[sensor_id])


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Every value equal bit for bit, with its dtype and shape."""

    def equal(x: Any, y: Any) -> bool:
        if isinstance(x, tuple):
            return isinstance(y, tuple) and len(x) == len(y) and all(equal(p, q) for p, q in zip(x, y))
        x, y = np.asarray(x), np.asarray(y)
        return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()

    return a.keys() == b.keys() and all(equal(a[key], b[key]) for key in a)


class _ForcesAt:
    """The end-effector force and torque sensors' values after a forward pass at a recorded state
    (robosuite's ``np.concatenate((robot.ee_force, robot.ee_torque))``), computed on a scratch
    ``MjData`` made at the first use: MuJoCo's forward pass depends on nothing but the state
    ``mjSTATE_INTEGRATION`` records."""

    def __init__(self, model: Any, force_at: int, torque_at: int) -> None:
        self.model, self.force_at, self.torque_at = model, force_at, torque_at
        self._scratch: Any = None

    def __call__(self, state: np.ndarray) -> np.ndarray:
        import mujoco

        if self._scratch is None:
            self._scratch = mujoco.MjData(self.model)
        mujoco.mj_setState(self.model, self._scratch, state, mujoco.mjtState.mjSTATE_INTEGRATION)
        mujoco.mj_forward(self.model, self._scratch)
        sensors = self._scratch.sensordata
        f, t = self.force_at, self.torque_at
        return np.concatenate((np.array(sensors[f:f + 3]), np.array(sensors[t:t + 3])))


_LAZY_CLASS: Any = None


def _lazy_class() -> Any:
    """``LazyForceTorques``, a subclass of robosuite's ``DeltaBuffer`` (made once robosuite is
    imported: this module is imported without it)."""
    global _LAZY_CLASS
    if _LAZY_CLASS is None:
        from robosuite.utils.buffers import DeltaBuffer

        class LazyForceTorques(DeltaBuffer):
            """robosuite's ``DeltaBuffer`` of the end-effector's force and torque whose values
            come from a forward pass at the state of the policy step that pushed them, computed
            when ``current`` or ``last`` is read.

            robosuite reads these sensors after a whole forward pass at each policy step (its
            acceleration stage: the constraint solver), which its step then computes again with
            the new torques; a compiled LIBERO step runs the forward pass once (``mj_step1``,
            the controller, ``mj_step2``, as at every other physics step) and records the state
            (``push_state``) instead. Reading gives the same values, bit for bit.
            """

            def __init__(self, source: Any, forces_at: _ForcesAt) -> None:
                self.dim, self._forces_at = source.dim, forces_at
                self._values = [source.last, source.current]  # a value, or the state it comes from (_pending)
                self._pending = [False, False]

            def push_state(self, state: np.ndarray) -> None:
                self._values, self._pending = [self._values[1], state], [self._pending[1], True]

            def _value(self, i: int) -> Any:
                if self._pending[i]:
                    self._set(i, self._forces_at(self._values[i]))
                return self._values[i]

            def _set(self, i: int, value: Any) -> None:
                # new lists, never changed in place: a copy of __dict__ keeps what it saw
                self._values, self._pending = [*self._values], [*self._pending]
                self._values[i], self._pending[i] = value, False

            @property
            def last(self) -> Any:
                return self._value(0)

            @last.setter
            def last(self, value: Any) -> None:
                self._set(0, value)

            @property
            def current(self) -> Any:
                return self._value(1)

            @current.setter
            def current(self, value: Any) -> None:
                self._set(1, value)

        _LAZY_CLASS = LazyForceTorques
    return _LAZY_CLASS
