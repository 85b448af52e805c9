"""``LiberoAdapter``: a LIBERO task as a fastenv simulator adapter (keys, episodes, sub-steps)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from fastenv import gpus
from fastenv._validation import check_positive_int
from fastenv.backends._gl import check_not_forked_after_gl, gl_renderer, note_gl_context
from fastenv.backends.libero import contacts
from fastenv.backends.libero.control import ControlLoop
from fastenv.backends.libero.mujoco_facts import facts, step_aside
from fastenv.backends.libero.observables import (
    IrregularSampling,
    SampleClock,
    SamplePoint,
    closure,
    probing,
    sample_observables,
    sensor_dependencies,
)
from fastenv.backends.libero.render_sharing import enabled as render_sharing_enabled
from fastenv.backends.libero.render_sharing import share_render_context, sharing
from fastenv.backends.libero.scene import OwnRandomness, PropertySamplers
from fastenv.backends.libero.task import (
    DEFAULT_MAX_EPISODE_STEPS,
    DEFAULT_MODALITIES,
    RESET_OPTIONS,
    SEGMENTATION_LEVELS,
    STOCK_CAMERAS,
    SUITE_MAX_EPISODE_STEPS,
    LiberoTask,
    import_libero,
)
from fastenv.core.fast_paths import FastPath
from fastenv.core.protocol import Info, ObsType, check_known_keys
from fastenv.machine import release_free_memory


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
            (``ControlLoop``, bit for bit robosuite's); False runs robosuite's own loop, for
            measuring what the fast one saves.
        control_freq: robosuite's control rate in Hz (None: LIBERO's default, 20).

    A kept key's sensor gets every sensor it reads (``observables.sensor_dependencies``); a
    sub-step records where the stock step would sample the observables, so ``observe()`` after it
    is the stock step's observation; each env draws its scenes from its own generator, and
    every seeded reset is a freshly built stock env's first (``scene``).

    Examples:
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
        control_freq: float | None = None,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"LIBERO renders headless: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.task = task
        self.camera_size = camera_shape(camera_size)
        self.render_mode = render_mode
        self.render_camera = render_camera
        self.hard_reset = bool(hard_reset)
        self.fast_substep = bool(fast_substep)
        self.control_freq = control_freq
        self.init_state_id = self._check_init_state_id(init_state_id)
        self._env: Any = None
        self._owned = True
        self._randomness = OwnRandomness()
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
        It resets with robosuite's own reset, as it was built to (robosuite's default reloads the
        model): no init state is attached to it, and without one robosuite's in-place reset
        places objects other than a rebuilt env does (it starts from the last scene).
        """
        self = cls.__new__(cls)
        raw = env.env
        self.task = LiberoTask("", -1, getattr(raw, "bddl_file_name", ""), None, env.language_instruction)
        self.camera_size = (int(raw.camera_heights[0]), int(raw.camera_widths[0])) if raw.camera_names else (128, 128)
        self.render_mode = None
        self.render_camera = raw.camera_names[0] if raw.camera_names else "agentview"
        self.fast_substep = True
        self.control_freq = None  # the adopted env keeps its own
        self._user_hard_reset = bool(raw.hard_reset)
        self.hard_reset = bool(raw.hard_reset)
        self.init_state_id = None
        self._env = env
        self._owned = False
        self._randomness = OwnRandomness()
        self._model_cameras = tuple(raw.sim.model.camera_names)
        self._adopt_built_env()
        self.select_keys(None)
        return self

    # -- building -------------------------------------------------------------------------------
    def _build(self, config: RenderConfig) -> None:
        check_not_forked_after_gl("a LIBERO env")
        lib = import_libero()
        if self._env is not None:
            make_gl_current(self._raw)
            self._env.close()
        cams = list(config.cameras)
        height, width = self.camera_size
        with sharing():  # one render context per worker for envs with the same assets
            self._env = self._control_env(lib, cams, height, width, config)
        self._built = config
        self._model_cameras = tuple(self._raw.sim.model.camera_names)
        self._adopt_built_env()
        release_free_memory()  # what building freed goes back to the system, not into the worker's resident memory

    def _control_env(self, lib: Any, cams: list[str], height: int, width: int, config: RenderConfig) -> Any:
        return lib.ControlEnv(
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
            **({} if self.control_freq is None else {"control_freq": self.control_freq}),
        )

    def _adopt_built_env(self) -> None:
        note_gl_context()
        raw = self._raw
        if gpus.renderer_in_use() is None and getattr(raw.sim, "_render_context_offscreen", None) is not None:
            make_gl_current(raw)
            gpus.note_renderer("EGL" if os.environ.get("MUJOCO_GL", "egl") == "egl" else os.environ["MUJOCO_GL"], gl_renderer())
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
        # robosuite's own count of physics steps per env step (truncated, not rounded).
        self._n_substeps = int(raw.control_timestep / raw.model_timestep)
        share_render_context(raw)  # an adopted env's own render context: shared as fastenv's are
        contacts.install(raw)  # the success check's contact tests by geom id (the same answers)
        make_gl_current(raw)
        with _renders_skipped(raw.sim):
            self._deps = sensor_dependencies(raw)
        self._samplers = PropertySamplers(raw)
        self._point: SamplePoint | None = None
        self._clock: SampleClock | None = None
        low, high = raw.action_spec
        self.action_space = spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        with probing(raw):  # a user's filter or noise corrupter sees only the samples the stock env takes
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
        """Enable the observables ``keys`` need, and what their sensors read, and no others."""
        raw = self._raw
        modality, initial = self._modality, self._initial_flags
        state_modalities = {key[: -len("-state")] for key in keys if key.endswith("-state")}
        needed = {name for name in modality if name in keys}
        needed |= {name for name, m in modality.items() if m in state_modalities and initial[name][1]}
        # Cameras render in their RGB sensor, which leaves depth in the cache for the depth sensor.
        needed |= {f"{cam}_image" for cam in wanted.cameras}
        # A state sensor's whole modality too, beyond the reads a first run of it showed: a
        # sensor may read other values in states that run did not visit.
        groups = {modality[name] for name in needed if modality[name] != "image"}
        needed |= {name for name, m in modality.items() if m in groups}
        enabled = closure(needed, self._deps)
        for name, m in modality.items():
            on = name in enabled
            raw.modify_observable(name, "enabled", on)
            raw.modify_observable(name, "active", on and (name in keys or (m in state_modalities and initial[name][1])))
        self._enabled = [o for name, o in raw._observables.items() if name in enabled]
        self._observe_plans: dict[tuple[str, ...], Any] = {}  # observe(keys)'s, for these observables
        try:
            self._clock = SampleClock(self._enabled)
        except IrregularSampling:
            self._clock = None  # sub-steps update the observables as robosuite's own loop does
        if self._clock is not None and facts().copy_data is None:  # a sample after the step needs the state put back
            step_aside(f"the {FastPath.OBSERVATION_AT_CHUNK_END}", f"{facts().copy_data_missing()}: every sub-step samples as robosuite's does")
            self._clock = None
        missing = [key for key in keys if key not in self._spaces]
        if missing:
            with probing(raw):
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

    def _check_init_state(self, state: Any) -> np.ndarray | None:
        """A whole MuJoCo state (``init_state``: what LIBERO's ``set_init_state`` takes)."""
        if state is None:
            return None
        array = np.asarray(state)
        size = self._raw.sim.get_state().flatten().size
        if array.ndim != 1 or array.size != size or not np.issubdtype(array.dtype, np.number):
            raise ValueError(
                f"reset option 'init_state' must be a flat numeric MuJoCo state of {size} values "
                f"(as LIBERO's init-state files hold), got shape {array.shape} of {array.dtype}"
            )
        return array

    def _reset_sim(self, *, observed: bool) -> Any:
        """robosuite's reset; in place (not hard) with a rebuilt env's starting state put back.

        robosuite's in-place reset recreates controllers and robot buffers but leaves each
        gripper's command state (``current_action``, which integrates the gripper actions) and
        the robot's last torques as the last episode left them; a rebuilt env starts them at
        zero and None. When the caller overwrites the state at once (an init state follows,
        ``observed=False``), the observation robosuite takes at the end of its reset is thrown
        away, so its camera renders are skipped (every observable still runs its bookkeeping).
        """
        from robosuite.utils.errors import RandomizationError

        raw = self._raw
        self._samplers.before_reset(raw)
        while True:  # LIBERO's reset: try again while a placement fails
            try:
                if raw.hard_reset:
                    with sharing():  # a new MuJoCo model and render context
                        raw_obs = raw.reset()
                elif observed:
                    raw_obs = raw.reset()
                else:
                    with _renders_skipped(raw.sim):
                        raw_obs = raw.reset()
                break
            except RandomizationError:
                self._samplers.after_failed_attempt(raw)
        self._samplers.after_reset()
        if raw.hard_reset:
            return raw_obs
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
        state = self._check_init_state(options.get("init_state"))
        if state is not None and options.get("init_state_id") is not None:
            raise ValueError("reset options 'init_state' and 'init_state_id' exclude each other: give one")
        state_id = None if state is not None else self._check_init_state_id(options.get("init_state_id", self.init_state_id))
        if state is None and state_id is None and self.task.init_states is not None:
            state_id = int(rng.integers(len(self.task.init_states)))
        if state_id is not None:
            state = self.task.init_states[state_id]
        # Placements (objects without an init state, fixtures in every scene that places them at
        # random) come from this env's own generator, seeded as LIBERO's env.seed(seed) seeds
        # numpy's global one (see scene.py).
        if seed is not None:
            self._randomness.seed(seed)
            self._samplers.restart()
        self._randomness.ensure(rng)
        make_gl_current(self._raw)
        with self._randomness.active():
            raw_obs = self._reset_sim(observed=state is None)
        if state is not None:
            raw_obs = self._env.set_init_state(state)
        if self._point is not None:
            self._point.pending = False  # the reset's observation is the current one
        info = {"language_instruction": self.task.language, "init_state_id": -1 if state_id is None else state_id}
        return self._observation(raw_obs), info

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        # robosuite's step loop without rendering or reading sensors: controller, physics, reward
        # and success run exactly as in env.step, the observables' timers advance as there, and
        # the state where they would sample is recorded for observe().
        raw = self._raw
        action = self._convert_action(action)
        raw.timestep += 1
        n = self._n_substeps
        try:
            sample_at = -1 if self._clock is None else self._clock.advance(n, raw.model_timestep)
        except IrregularSampling:  # (nothing advanced) e.g. an observable enabled mid-episode
            sample_at = -1
        if sample_at < 0:  # sampling robosuite's loop alone reproduces: run it, observables and all
            make_gl_current(raw)
            self._settle_pending(None)
            self._stock_loop(raw, action, n, update_observables=True)
        else:
            point = self._sample_point()
            loop = self._control_loop()
            if loop is not None:
                loop.run(raw, action, n, sample_at, point)
            else:
                self._stock_loop(raw, action, n, sample_at=sample_at, capture=point.capture)
        raw.cur_time += raw.control_timestep
        reward, success = _reward_and_success(raw, action)
        return float(reward), success, False, {"success": success, "language_instruction": self.task.language}

    @staticmethod
    def _stock_loop(raw: Any, action: np.ndarray, n: int, *, update_observables: bool = False, sample_at: int = 0, capture: Any = None) -> None:
        """robosuite's own physics loop of ``env.step``."""
        policy_step = True
        for j in range(1, n + 1):
            raw.sim.forward()
            raw._pre_action(action, policy_step)
            if j == sample_at:
                capture()
            raw.sim.step()
            if update_observables:
                raw._update_observables()
            policy_step = False

    def _sample_point(self) -> SamplePoint:
        raw = self._raw
        point = self._point
        if point is None or point.data is not raw.sim.data._data:  # one per sim (a hard reset makes a new one)
            point = self._point = SamplePoint(raw.sim.model._model, raw.sim.data._data)
        return point

    def _control_loop(self) -> ControlLoop | None:
        """The fast control loop for this env's sim, or None where it does not apply."""
        if not self.fast_substep:
            return None
        raw = self._raw
        loop = getattr(self, "_loop", None)
        if loop is None or loop.sim is not raw.sim:  # built once per sim (a hard reset makes a new one)
            loop = self._loop = ControlLoop.build(raw)
        return loop if loop is not None and loop.usable() else None

    def fast_paths(self) -> dict[FastPath, bool]:
        """Which of fastenv's fast paths serve this env now. Each steps aside for robosuite's own
        code where what it relies on does not hold here (another robosuite, MuJoCo or setting),
        and says why once per process (``mujoco_facts.step_aside``)."""
        raw = self._raw
        loop = self._control_loop()
        context = getattr(raw.sim, "_render_context_offscreen", None)
        return {
            FastPath.COMPILED_CONTROL_LOOP: bool(loop is not None and loop.compiled and loop._checked),
            FastPath.COMPILED_POLICY_STEP: bool(loop is not None and loop.compiled and loop._checked and loop._policy is not None
                                                and loop._policy.checked),
            FastPath.FAST_CONTROL_LOOP: loop is not None,
            FastPath.OBSERVATION_AT_CHUNK_END: self._clock is not None,
            FastPath.IN_PLACE_RESET: not raw.hard_reset,
            FastPath.SHARED_RENDER_CONTEXT: context is not None and render_sharing_enabled(),
            FastPath.CONTACT_CHECK_BY_GEOM_ID: contacts.installed(raw),
        }

    def _convert_action(self, action: Any) -> np.ndarray:
        # Same conversion as LIBERO's step for OSC_POSITION controllers (4-D actions).
        action = np.asarray(action)
        if self._raw.action_dim == 4 and len(action) > 4:
            action = np.concatenate((action[:3], action[-1:]), axis=-1)
        return action

    def observe(self, keys: Sequence[str] | None = None) -> ObsType:
        """The observation the stock ``env.step`` would have returned after the last sub-step
        (after a reset: the reset's). Observable timers are left alone: the next step samples
        where the stock env's would.

        ``keys`` (among this env's keys) computes only those and what their sensors read: no
        camera renders unless a camera's image is asked for. The rest stays pending: a later
        ``observe()`` of the same step computes it, as the stock step had.
        """
        raw = self._raw
        point = self._point
        if keys is not None:
            direct, grouped, part, renders = self._observe_plan(tuple(keys))
            if point is not None and point.pending:
                if renders:
                    make_gl_current(raw)
                with point.at():
                    sample_observables(raw, part)
            concatenated = raw._get_observations() if grouped else {}
            return {key: np.asarray(raw._observables[key].obs if key in direct else concatenated[key]) for key in keys}
        if point is not None and point.pending:
            make_gl_current(raw)
            self._sample_at_point(point)
        return self._observation(raw._get_observations())

    def _observe_plan(self, keys: tuple[str, ...]) -> tuple[set[str], set[str], list[Any], bool]:
        """For ``observe(keys)``: the observables named, the modalities concatenated, the enabled
        observables to sample (with what their sensors read), whether a camera renders. Made once
        per key set and the observables enabled (``_enable_only`` forgets them)."""
        plans = self._observe_plans
        plan = plans.get(keys)
        if plan is None:
            names = set(keys)
            unknown = sorted(names - set(self.keys))
            if unknown:
                raise ValueError(f"observe(keys=...) takes this env's keys {list(self.keys)}; got {unknown}")
            raw = self._raw
            direct = {key for key in names if key in self._modality}
            grouped = {key[: -len("-state")] for key in names - direct}  # a modality's concatenation
            members = {name for name, m in self._modality.items() if m in grouped and raw._observables[name].is_active()}
            needed = closure(direct | members, self._deps)
            part = [o for o in self._enabled if o.name in needed]
            plan = plans[keys] = (direct, grouped, part, any(self._modality[o.name] == "image" for o in part))
        return plan

    def _sample_at_point(self, point: SamplePoint) -> None:
        """Compute the sample a sub-step recorded, as the stock step computed it there."""
        with point.at():
            sample_observables(self._raw, self._enabled)
        point.pending = False

    def _settle_pending(self, n: int | None) -> None:
        """Before robosuite's own loop runs the observables: the sample a sub-step recorded and
        nothing computed yet is computed now, unless every observable samples again within the
        next ``n`` physics steps (None: not known). An observable that does not sample in a stock
        step returns its last sample, and that sample is the recorded one (control rates other
        than the observables' own, observables set to other rates)."""
        point = self._point
        if point is None or not point.pending:
            return
        if n is not None and self._clock is not None:
            try:
                if self._clock.peek(n, self._raw.model_timestep) > 0:
                    point.pending = False  # overwritten before anything reads it: skip its renders
                    return
            except IrregularSampling:
                pass
        self._sample_at_point(point)

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        make_gl_current(self._raw)
        self._settle_pending(self._n_substeps)  # this step samples the observables itself
        raw_obs, reward, done, _ = self._env.step(np.asarray(action))
        success = bool(done)
        info = {"success": success, "language_instruction": self.task.language}
        return self._observation(raw_obs), float(reward), success, False, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        height, width = self.camera_size
        make_gl_current(self._raw)
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
                make_gl_current(self._raw)
                self._env.close()
            else:  # the user's env goes back as it came: every observable as it was
                raw = self._raw
                raw.hard_reset = self._user_hard_reset
                contacts.uninstall(raw)
                for name, (enabled, active) in self._initial_flags.items():
                    raw.modify_observable(name, "enabled", enabled)
                    raw.modify_observable(name, "active", active)
        self._env = None

def _reward_and_success(raw: Any, action: np.ndarray) -> tuple[float, bool]:
    """robosuite's ``_post_action`` (LIBERO's reward checks success) and LIBERO's success check
    after it, as its ``step`` makes them. LIBERO's ``_post_action`` then updates the object states
    it tracks (switches, lights); where it tracks none the state is the one the reward checked,
    and the second check's answer is the first's (LIBERO's predicates only read the simulation)."""
    if getattr(raw, "tracking_object_states_change", True) or "_check_success" in vars(raw):
        reward, _, _ = raw._post_action(action)  # tracked states, or a check wrapped by someone: both checks run
        return float(reward), bool(raw._check_success())
    answers = []
    check = raw._check_success

    def checked() -> Any:
        answers.append(check())
        return answers[-1]

    raw._check_success = checked
    try:
        reward, _, _ = raw._post_action(action)
    finally:
        del raw._check_success
    return float(reward), bool(answers[0] if len(answers) == 1 else raw._check_success())


def make_gl_current(raw: Any) -> None:
    """Make this env's GL context the current one before it renders.

    robosuite renders into whatever context is current and makes its own current only when
    it creates it; closing another env in the process (or its hard reset) leaves no context
    current, and this env would read back garbage. Cheap when it is already current.
    """
    context = getattr(raw.sim, "_render_context_offscreen", None)
    gl = getattr(context, "gl_ctx", None)
    if gl is not None:
        gl.make_current()


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


def camera_shape(size: int | tuple[int, int]) -> tuple[int, int]:
    if isinstance(size, (tuple, list)) and len(size) == 2:
        return check_positive_int("camera height", size[0]), check_positive_int("camera width", size[1])
    side = check_positive_int("camera_size", size)
    return side, side


