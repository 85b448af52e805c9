"""BEHAVIOR backend over OmniGibson (Isaac Sim), the only module that imports OmniGibson.

Written against OmniGibson's released API as of v3.8.0 (BEHAVIOR-1K tag v3.8.0, Isaac Sim 5.1,
Python 3.11; v3.7.x runs on Isaac Sim 4.5 with the same calls): ``og.Environment(configs)``
with one scene per env, ``Environment._pre_step`` / ``task.step`` / ``get_obs``, and the
simulator's ``render_on_step`` switch. The translation from fastenv's options to OmniGibson's
macros and config (``omnigibson_settings``) is pure and tested without OmniGibson; the rest
needs OmniGibson installed (see ``INSTALL_HINT``).

How a headless rollout is built:

- macros: ``HEADLESS``, ``ENABLE_FLATCACHE``, no viewer camera (``RENDER_VIEWER_CAMERA=False``),
  no transition rules unless asked, no GPU dynamics, no HQ rendering, quiet Kit logs;
- only the kept modalities are configured on the robot (default ``rgb`` + ``proprio``): a
  vision sensor whose modalities are all pruned is not created at all; no sensor gets a
  viewport (none is created headless without a ``viewport_name``);
- sub-steps run the robot's action, physics and the task's reward/termination inside
  ``og.sim.render_on_step(False)`` and skip ``get_obs``; the chunk's end renders and observes;
- Isaac/carb thread pools are capped through ``SimulationApp``'s ``limit_cpu_threads`` (Kit
  reads them at start-up; OmniGibson discards command-line flags).

Without OmniGibson here, the adapter is tested against ``tests/standins/omnigibson``, a stand-in
written from the same source (its stock loop is the reference).

Resets: this OmniGibson line holds one scene per ``Environment`` and resets whole envs, so a
fastenv vector env resets exactly the envs that ended (a partial reset across envs); one env
has no finer reset. Several envs in one worker process share OmniGibson's simulator, built the
way its ``VectorEnvironment`` builds them.
"""

from __future__ import annotations

import copy
import importlib.util
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.error import DependencyNotInstalled

from fastenv._validation import check_positive_int
from fastenv.core import SimEnv
from fastenv.core.protocol import Info, ObsType, check_known_keys

INSTALL_HINT = (
    "OmniGibson is not installed. BEHAVIOR needs OmniGibson >= 3.7 from the BEHAVIOR-1K repository "
    "(not PyPI: the 'omnigibson' package there is years stale): git clone -b v3.8.0 "
    "https://github.com/StanfordVL/BEHAVIOR-1K && cd BEHAVIOR-1K && ./setup.sh --new-env --omnigibson "
    "--bddl --dataset --accept-conda-tos --accept-nvidia-eula --accept-dataset-tos. It installs "
    "Isaac Sim 5.1 (Python 3.11; Isaac Sim 4.5 and Python 3.10 for v3.7.x) and 30+ GB of assets, and "
    "needs an NVIDIA RTX GPU (RTX 2070 or newer, 8 GB+ VRAM; data-centre GPUs without RT cores "
    "render with artifacts) and 32 GB of RAM."
)
SENSOR_MODALITIES = ("rgb", "depth", "depth_linear", "normal", "seg_semantic", "seg_instance", "seg_instance_id")
DEFAULT_MODALITIES = ("rgb", "proprio")
RESET_OPTIONS = ()


@dataclass(frozen=True)
class BehaviorSettings:
    """fastenv's options for a BEHAVIOR env (what ``gym.make("fastenv/Behavior-v0", ...)`` takes)."""

    task: str = "turning_on_radio"
    scene: str = "house_single_floor"
    robot: str = "R1Pro"
    activity_definition_id: int = 0
    activity_instance_id: int = 0
    modalities: tuple[str, ...] = DEFAULT_MODALITIES
    camera_size: tuple[int, int] = (128, 128)
    max_episode_steps: int = 500
    action_frequency: int = 30
    physics_frequency: int = 120
    transition_rules: bool = False
    threads: int | None = None
    device: str | None = None
    load_task_relevant_only: bool = False
    extra_config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("max_episode_steps", "action_frequency", "physics_frequency"):
            check_positive_int(name, getattr(self, name))
        if self.physics_frequency % self.action_frequency:
            raise ValueError(
                f"physics_frequency must be a multiple of action_frequency (OmniGibson runs whole physics "
                f"steps per action); got {self.physics_frequency} and {self.action_frequency}"
            )
        if self.threads is not None:
            check_positive_int("threads", self.threads)
        check_known_keys(self.modalities, (*SENSOR_MODALITIES, "proprio"))


def omnigibson_settings(settings: BehaviorSettings) -> dict[str, Any]:
    """OmniGibson macros, ``og.Environment`` config and Kit launch settings for ``settings``.

    Pure: it imports nothing from OmniGibson.

    Examples:
        >>> omnigibson_settings(BehaviorSettings(task="turning_on_radio"))["macros"]["HEADLESS"]
        True
    """
    height, width = settings.camera_size
    sensor_modalities = [m for m in settings.modalities if m != "proprio"]
    robot: dict[str, Any] = {
        "type": settings.robot,
        "name": "robot_r1" if settings.robot == "R1Pro" else "robot0",
        "obs_modalities": list(settings.modalities),
        "action_normalize": True,
    }
    if sensor_modalities:
        robot["sensor_config"] = {
            "VisionSensor": {
                "modalities": sensor_modalities,
                "sensor_kwargs": {"image_height": height, "image_width": width},
            }
        }
    config: dict[str, Any] = {
        "env": {
            # Headless OmniGibson requires one render per action step.
            "action_frequency": settings.action_frequency,
            "rendering_frequency": settings.action_frequency,
            "physics_frequency": settings.physics_frequency,
            "device": settings.device,
            "automatic_reset": False,  # fastenv's vector layer resets, in the same step
            "flatten_action_space": True,
            "flatten_obs_space": True,
        },
        "render": {"viewer_width": width, "viewer_height": height},
        "scene": {
            "type": "InteractiveTraversableScene",
            "scene_model": settings.scene,
            "load_task_relevant_only": settings.load_task_relevant_only,
            "include_robots": False,
        },
        "robots": [robot],
        "task": {
            "type": "BehaviorTask",
            "activity_name": settings.task,
            "activity_definition_id": settings.activity_definition_id,
            "activity_instance_id": settings.activity_instance_id,
            "online_object_sampling": False,
            # OmniGibson's Timeout is done once episode_steps >= max_steps, and episode_steps counts
            # the steps before the current one: max_steps = M - 1 ends episodes after M actions.
            "termination_config": {"max_steps": settings.max_episode_steps - 1},
            "include_obs": False,
        },
    }
    _merge(config, copy.deepcopy(dict(settings.extra_config)))
    macros = {
        "HEADLESS": True,
        "ENABLE_FLATCACHE": True,
        "RENDER_VIEWER_CAMERA": False,
        "ENABLE_OBJECT_STATES": True,  # BehaviorTask asserts it
        "ENABLE_TRANSITION_RULES": settings.transition_rules,
        "USE_GPU_DYNAMICS": False,
        "ENABLE_HQ_RENDERING": False,
        "NO_OMNI_LOGS": True,
    }
    launch: dict[str, Any] = {}
    if settings.threads is not None:
        launch["limit_cpu_threads"] = settings.threads
        launch["extra_args"] = [
            f"--/plugins/carb.tasking.plugin/threadCount={settings.threads}",
            f"--/plugins/omni.tbb.globalcontrol/maxThreadCount={settings.threads}",
        ]
    return {"macros": macros, "config": config, "launch": launch}


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _omnigibson(settings: dict[str, Any]) -> Any:
    """Import OmniGibson with the macros and launch settings applied (they must precede import/launch)."""
    try:
        from omnigibson.macros import gm
    except ImportError as exc:
        raise DependencyNotInstalled(INSTALL_HINT) from exc
    with gm.unlocked():
        for name, value in settings["macros"].items():
            setattr(gm, name, value)
    import omnigibson as og
    from omnigibson import lazy

    if settings["launch"] and og.sim is None:
        # Kit sizes its thread pools at start-up from SimulationApp's config; OmniGibson passes
        # only its own keys, so add ours to the config it builds.
        app_class = lazy.isaacsim.SimulationApp
        extra = settings["launch"]

        def app_with_limits(config: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            config = dict(config)
            config["limit_cpu_threads"] = extra["limit_cpu_threads"]
            config["extra_args"] = [*config.get("extra_args", []), *extra["extra_args"]]
            return app_class(config, *args, **kwargs)

        lazy.isaacsim.SimulationApp = app_with_limits
    return og


class BehaviorAdapter:
    """One BEHAVIOR task in OmniGibson as a fastenv simulator adapter.

    Envs built in one process share OmniGibson's single physics world (``shared_physics``): a
    worker steps them together (``set_action`` each, ``advance_world`` once, ``evaluate`` each),
    envs not being stepped keep their robots' last commands, and a vector env with pipeline
    stages divides the physics step by the stages.
    """

    shared_physics = True
    render_fps = 30

    def __init__(self, settings: BehaviorSettings, *, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"BEHAVIOR renders headless: render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.settings = settings
        self.render_mode = render_mode
        self._og_settings = omnigibson_settings(settings)
        self._og = _omnigibson(self._og_settings)
        self.env = _create_environment(self._og, copy.deepcopy(self._og_settings["config"]))
        self.action_space = self.env.action_space
        self._full_space = spaces.Dict({k: _numpy_space(s) for k, s in self.env.observation_space.spaces.items()})
        self.keys: tuple[str, ...] = tuple(self._full_space.spaces)
        self.observation_space = self._full_space
        self.base_physics_dt = float(self._og.sim.get_physics_dt())
        # physics steps per render (= per action: headless renders once per action step)
        self._physics_per_action = settings.physics_frequency // settings.action_frequency
        sim = self._og.sim
        if not (sim.get_rendering_dt() / sim.get_physics_dt()).is_integer():
            # OmniGibson steps without rendering only where this ratio is an exact integer
            # (e.g. 20 Hz actions over 140 Hz physics is not, in floating point)
            self.set_physics_dt(self.base_physics_dt)

    # -- keys ------------------------------------------------------------------------------------
    def available_keys(self) -> tuple[str, ...]:
        return tuple(self._full_space.spaces)

    def select_keys(self, keys: Sequence[str] | None) -> None:
        # The robot's sensors were configured with the kept modalities at construction;
        # narrowing further filters the (flat) observation dict.
        if keys is None:
            self.keys, self.observation_space = tuple(self._full_space.spaces), self._full_space
            return
        self.keys = tuple(check_known_keys(keys, self.available_keys()))
        self.observation_space = spaces.Dict({k: self._full_space[k] for k in self.keys})

    def make_headless(self, render_mode: str | None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"a headless env renders to None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode  # gm.HEADLESS and no viewer camera were set before launch

    # -- physics time ----------------------------------------------------------------------------
    def set_physics_dt(self, dt: float) -> None:
        """Scale the whole step (physics, rendering, action) so physics steps are ``dt`` long.

        The rendering and action steps are the same whole number of physics steps, and the
        physics step is the float nearest ``dt`` for which OmniGibson's ratio
        ``rendering_dt / physics_dt`` is exactly that number (it asserts so when it steps
        without rendering; ``dt * n / dt`` is not always ``n`` in floating point).
        """
        physics_dt, step_dt = exact_steps(dt, self._physics_per_action)
        self._og.sim.set_simulation_dt(physics_dt=physics_dt, rendering_dt=step_dt, sim_step_dt=step_dt)

    # -- episode ---------------------------------------------------------------------------------
    def _obs(self) -> dict[str, Any]:
        obs, _ = self.env.get_obs()
        return {key: _to_numpy(obs[key]) for key in self.keys}

    def reset(self, *, seed: int | None, options: Mapping[str, Any] | None, rng: np.random.Generator) -> tuple[ObsType, Info]:
        """OmniGibson's ``Environment.reset()``: reset the task, step the world once, observe.

        The world step is OmniGibson's own (its reset steps the simulator so that observations
        show the reset state); it advances every env of the process's world, as OmniGibson's
        ``VectorEnvironment.reset`` does.
        """
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; BEHAVIOR takes none")
        self.env.reset(get_obs=False)
        self.advance_world()
        return self.observe(), {"task": self.settings.task}

    # A sub-step is Environment.step without get_obs, split in three so that the envs of one
    # process, which share og.sim's world, advance it once per sub-step together.
    def set_action(self, action: Any) -> None:
        """This env's action: split over its robots and applied (their controllers keep it)."""
        self._action = self.env._convert_action_to_tensor(action)  # what OmniGibson's step hands the task
        self.env._pre_step(self._action)

    def advance_world(self) -> None:
        """One physics step of the process's world, for every env in it, without rendering."""
        with self._og.sim.render_on_step(False):
            self._og.sim.step()

    def evaluate(self) -> tuple[float, bool, bool, Info]:
        """This env's reward and termination after the world step."""
        reward, done, info = self.env.task.step(self.env, self._action)
        self.env._current_step += 1  # what _post_step counts; the timeout condition reads it
        return float(reward), *split_done(bool(done), info)

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        self.set_action(action)
        self.advance_world()
        return self.evaluate()

    def observe(self) -> ObsType:
        self._og.sim.render()
        return self._obs()

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        reward, terminated, truncated, info = self.substep(action)
        return self.observe(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        for key in self.keys:
            if key.endswith("::rgb"):
                return np.asarray(self._obs()[key])[..., :3]
        return None

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            if self.env in _PROCESS_ENVS:
                _PROCESS_ENVS.remove(self.env)
            self.env = None


_PROCESS_ENVS: list[Any] = []  # OmniGibson envs built in this process: they share og.sim's stage


def _create_environment(og: Any, config: dict[str, Any]) -> Any:
    """A new ``og.Environment`` beside the ones this process already holds.

    The first one is built as OmniGibson builds a lone env. Scenes can only be imported into a
    stopped simulator, so a further one is built as OmniGibson's VectorEnvironment builds its
    envs (``in_vec_env=True``), after which the simulator plays again and every env of the
    process completes its post-play loading.
    """
    if not _PROCESS_ENVS:
        env = og.Environment(configs=config)
    else:
        og.sim.stop()
        env = og.Environment(configs=config, in_vec_env=True)
        og.sim.play()
        for existing in [*_PROCESS_ENVS, env]:
            existing.post_play_load()
    _PROCESS_ENVS.append(env)
    return env


def split_done(done: bool, info: Mapping[str, Any]) -> tuple[bool, bool, Info]:
    """(terminated, truncated, info) from a BEHAVIOR task's ``done``, as OmniGibson's step splits it.

    The ``timeout`` termination condition that fired is a truncation, any other (the BDDL goal,
    a failure) a termination; both can fire on one step. A ``done`` without conditions terminates.
    """
    status = info.get("done", {})
    conditions = status.get("termination_conditions", {})
    truncated = bool(conditions.get("timeout", {}).get("done", False))
    terminated = any(bool(c.get("done", False)) for name, c in conditions.items() if name != "timeout")
    if done and not conditions:
        terminated = True
    if (terminated or truncated) != done:
        raise RuntimeError(f"BEHAVIOR's task reported done={done} but its termination conditions say {conditions}")
    return terminated, truncated, {"success": bool(status.get("success", False))}


def exact_steps(dt: float, n: int) -> tuple[float, float]:
    """(physics_dt, step_dt): a physics step nearest ``dt`` and ``step_dt = n * physics_dt``
    such that ``step_dt / physics_dt`` is exactly ``n`` in floating point.

    Examples:
        >>> physics_dt, step_dt = exact_steps(1 / 60 / 7, 4)
        >>> step_dt / physics_dt
        4.0
    """
    below = above = dt
    for _ in range(256):
        for candidate in (below, above):
            step_dt = candidate * n
            if step_dt / candidate == n:
                return candidate, step_dt
        below, above = math.nextafter(below, 0.0), math.nextafter(above, math.inf)
    raise ValueError(f"no float physics step near {dt!r} makes {n} of them an exact step")


def _numpy_space(space: spaces.Space) -> spaces.Space:
    """A space as fastenv returns its values: RGB without Replicator's alpha channel."""
    if isinstance(space, spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3 and space.shape[-1] == 4:
        return spaces.Box(0, 255, (*space.shape[:2], 3), np.uint8)
    return space


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "cpu"):
        value = value.cpu().numpy()
    array = np.asarray(value)
    if array.ndim == 3 and array.shape[-1] == 4 and array.dtype == np.uint8:  # RGBA from Replicator
        array = array[..., :3]
    return array


def check_installed() -> None:
    """Raise ``DependencyNotInstalled`` with what to install when OmniGibson is missing (before any worker starts)."""
    if importlib.util.find_spec("omnigibson") is None:
        raise DependencyNotInstalled(INSTALL_HINT)


def make_sim(settings: BehaviorSettings, *, render_mode: str | None = None) -> SimEnv:
    """One headless BEHAVIOR env as a ``SimEnv``; the task's own Timeout truncates (see ``omnigibson_settings``)."""
    return SimEnv(BehaviorAdapter(settings, render_mode=render_mode))


def __getattr__(name: str) -> Any:
    # The entry point lived here before the assembly layer: an old script is told its home, which
    # is named, not imported (fastenv.envs is the layer above).
    if name == "make_env":
        raise AttributeError(f"{__name__}.{name} moved to fastenv.envs.behavior.{name} (from fastenv.envs.behavior import {name})")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
