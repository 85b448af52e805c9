"""LeRobot's LIBERO env on fastenv: LeRobot's own class, eval loop and data, with the waste cut.

LeRobot (``lerobot``, with ``hf-libero``) evaluates on LIBERO through
``lerobot.envs.libero.LiberoEnv``, one action per step (a policy keeps its chunk in a queue).
``LiberoEnv`` here is LeRobot's class, its ``reset``, ``step``, observation format, success flags
and init-state schedule running as LeRobot wrote them, over a simulator that wastes less:

- a reset puts the init state into the built model in place, bit for bit a rebuilt one (LIBERO's
  default rebuilds the MuJoCo model and its renderer at every reset: seconds each), without
  rendering the observations nobody reads (robosuite's reset's, and the settling steps' but the
  last);
- each step runs fastenv's control loop (compiled where numba is installed) and renders only the
  observation LeRobot reads: the cameras it asked for, the robot's proprioception, none of the
  object-state sensors LeRobot drops;
- one render context per process for all envs of a task;
- under ``lerobot-eval`` (``main``), a policy that reads an observation only when its action queue
  is empty (``OBSERVATION_READS``: pi0, pi0.5, SmolVLA, ACT without temporal ensembling, diffusion's
  last ``n_obs_steps``) gets its cameras rendered only at the steps where it will read them, and at
  the steps a video keeps (one camera); the other steps' images are blank (zeros), their robot state
  real. Every action, reward, success and episode result is LeRobot's own
  (``fastenv.conformance.lerobot``).

Tested with LeRobot 0.6.1 (Python >= 3.12; ``lerobot-eval`` with its async envs: fastenv's env in
LeRobot's worker processes). 0.4.4 (its ``SyncVectorEnv`` only, no skip) keeps its path.

Switch with one import, ``from fastenv.integrations.lerobot import make_env`` in place of
``lerobot.envs.factory``'s, or run ``lerobot-eval`` through fastenv:
``python -m fastenv.integrations.lerobot <lerobot-eval arguments>``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fastenv._deps import require
from fastenv.backends.libero.offscreen_env import Simulator as _Simulator
from fastenv.integrations._tally import Tally, announce

__all__ = ["OBSERVATION_READS", "main", "make_env", "observation_reader"]  # and LiberoEnv, built at first use where LeRobot is installed

# What LeRobot's LiberoEnv reads of a raw LIBERO observation (``_format_raw_obs``), besides images.
STATE_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "robot0_gripper_qvel", "robot0_joint_pos", "robot0_joint_vel")


def lerobot_version() -> tuple[int, ...]:
    """LeRobot's installed version, as numbers (0.4.4 -> (0, 4, 4))."""
    text = importlib.metadata.version("lerobot")
    return tuple(int("".join(c for c in part if c.isdigit()) or 0) for part in text.split(".")[:3])


def _adapter_for(task_suite: Any, task_id: int, camera_name: list[str], height: int, width: int, control_freq: float | None = None) -> Any:
    from fastenv.backends.libero import LiberoAdapter, LiberoTask
    from fastenv.backends.libero.task import import_libero

    task = task_suite.get_task(task_id)
    bddl = f"{import_libero().get_libero_path('bddl_files')}/{task.problem_folder}/{task.bddl_file}"
    cameras = [key[: -len("_image")] for key in camera_name]
    keys = [f"{cam}_image" for cam in cameras] + list(STATE_KEYS)
    return LiberoAdapter(
        LiberoTask(str(getattr(task_suite, "name", "")), -1, bddl, None, task.language),
        keys=keys, camera_size=(height, width), control_freq=control_freq,
    )


@functools.cache
def _env_class() -> type:
    libero = require("lerobot.envs.libero", "lerobot", "LeRobot (lerobot) with hf-libero")
    stock_init = libero.LiberoEnv.__init__

    class LiberoEnv(libero.LiberoEnv):  # type: ignore[misc, name-defined]
        """LeRobot's ``LiberoEnv`` (same arguments, observations, infos and init-state schedule) on fastenv.

        Examples:
            >>> env = LiberoEnv(task_suite=suite, task_id=3, task_suite_name="libero_goal", obs_type="pixels_agent_pos")
        """

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._task_suite = kwargs.get("task_suite", args[0] if args else None)
            stock_init(self, *args, **kwargs)
            if getattr(self, "hard_reset", True) is False:
                raise ValueError(
                    "hard_reset=False: fastenv's reset is in place already and equals LIBERO's hard reset bit for bit; "
                    "LIBERO's soft reset (which may differ from it) is not reproduced. Use hard_reset=True (the default)"
                )

        # LeRobot 0.4: the simulator is built with the env
        def _make_envs_task(self, task_suite: Any, task_id: int = 0) -> _Simulator:
            task = task_suite.get_task(task_id)
            self.task, self.task_description = task.name, task.language
            return _Simulator(_adapter_for(task_suite, task_id, list(self.camera_name), self.observation_height, self.observation_width))

        # LeRobot 0.5+: at the first reset, inside the worker process
        def _ensure_env(self) -> None:
            if self._env is None:
                sim = _Simulator(_adapter_for(self._task_suite, self.task_id, list(self.camera_name), self.observation_height,
                                              self.observation_width, self.control_freq))
                # LeRobot resets a new env at once, drawing its scene from numpy's global generator
                # as it stands (what a render before the next reset shows): so does this one, when read.
                # (its build draws a scene, then its reset another: the second is the one shown)
                sim.reset(draws=2, from_global=True)
                # and its model was loaded twice before the user's first reset (the build, LeRobot's
                # reset): that reset draws with three loads' property samplers, as LIBERO's own does
                sim._adapter._samplers.loads = 2
                self._env = sim

        def render(self) -> np.ndarray:
            # LeRobot's frame: its first camera's image of the last observation, turned 180 degrees
            # (LeRobot 0.5+ reads it from robosuite's cached observation). Only that camera renders.
            self._ensure_env()
            camera = self.camera_name[0]
            self._env.camera_renders += 1  # a render of its own (LeRobot's env reads the last observation's)
            return self._env.observe([camera])[camera][::-1, ::-1]

        def fastenv_counts(self) -> dict[str, Any]:
            """Camera images LeRobot's own env would have rendered for this env's observations, those
            rendered (video frames included), and its fast paths."""
            sim = self._env
            if sim is None:
                return {"stock": 0, "rendered": 0, "fast_paths": None}
            sim.note_fast_paths()
            return {"stock": sim.stock_images, "rendered": sim.camera_renders, "fast_paths": _sim_paths(sim)}

        def fastenv_observe_next(self, observe: bool) -> None:
            """Whether the next step renders its cameras (False: blank images, the robot state real).

            It holds for the steps of an autoreset too: the reset's observation, returned at a step
            the policy does not read, is blank then.
            """
            self._ensure_env()
            self._env.observe_next = bool(observe)

        def step(self, action: np.ndarray) -> tuple:
            out = super().step(action)
            if not self._env.observe_next:
                self._fastenv_skipped = getattr(self, "_fastenv_skipped", 0) + 1
            return out

        @property
        def fastenv_renders_skipped(self) -> int:
            """Steps of this env returned with blank images."""
            return getattr(self, "_fastenv_skipped", 0)

    LiberoEnv.__module__ = __name__
    return LiberoEnv


@contextlib.contextmanager
def _fastenv_libero() -> Iterator[None]:
    """LeRobot's LIBERO module builds fastenv's env while inside (its env factories look it up by name)."""
    libero = require("lerobot.envs.libero", "lerobot", "LeRobot (lerobot) with hf-libero")
    stock = libero.LiberoEnv
    libero.LiberoEnv = _env_class()
    try:
        yield
    finally:
        libero.LiberoEnv = stock


def _build_in_worker(env_fn: Callable[[], Any]) -> Any:
    """An env factory of LeRobot's, run (in its worker process) with fastenv's env class in place.

    The factory reached the worker pickled by value (a closure), with its own copy of the globals
    it names: the class is put in there too.
    """
    func = getattr(env_fn, "func", env_fn)
    names = getattr(func, "__globals__", {})
    with _fastenv_libero():
        if "LiberoEnv" not in names:
            return env_fn()
        stock, names["LiberoEnv"] = names["LiberoEnv"], _env_class()
        try:
            return env_fn()
        finally:
            names["LiberoEnv"] = stock


def make_env(cfg: Any, n_envs: int = 1, use_async_envs: bool = False, **kwargs: Any) -> Any:
    """LeRobot's ``make_env`` with fastenv's LIBERO env: ``{suite: {task_id: vector env}}``.

    Any other env type is LeRobot's own. With LeRobot 0.5+, ``use_async_envs=True`` builds LeRobot's
    own lazily started ``AsyncVectorEnv`` with fastenv's env in each of its worker processes.
    LeRobot 0.4 refuses async envs for LIBERO: its eval loop reads ``env.envs[0]``, which only
    ``SyncVectorEnv`` has (it fails the same way with LeRobot's env).
    """
    factory = require("lerobot.envs.factory", "lerobot", "LeRobot (lerobot)")
    if "libero" not in str(getattr(cfg, "type", "")):
        return factory.make_env(cfg, n_envs=n_envs, use_async_envs=use_async_envs, **kwargs)
    if use_async_envs and lerobot_version() < (0, 5):
        raise ValueError(
            "use_async_envs=True with LIBERO: LeRobot 0.4's eval loop reads env.envs[0], which only SyncVectorEnv has "
            "(lerobot 0.4.4 fails with AttributeError on its own env too); use use_async_envs=False"
        )
    with _fastenv_libero():  # SyncVectorEnv builds its envs here
        envs = factory.make_env(cfg, n_envs=n_envs, use_async_envs=use_async_envs, **kwargs)
    for suite in envs.values():
        for vec in suite.values():
            fns = getattr(vec, "_env_fns", None)  # LeRobot's lazy AsyncVectorEnv: its workers build the envs later
            if fns is not None and getattr(vec, "_env", None) is None:
                vec._env_fns = [functools.partial(_build_in_worker, fn) for fn in fns]
            vec._fastenv = True
    return envs


# -- observations only where the policy reads them ---------------------------------------------------

#: For each policy LeRobot evaluates on LIBERO: which observations its ``select_action`` reads
#: (LeRobot 0.6.1's code; docs/frameworks/lerobot.md has the table with the lines). A policy whose
#: rule is None reads every observation: nothing is skipped for it.
OBSERVATION_READS: dict[str, str | None] = {
    "pi0": "the observation of a call whose action queue (`_action_queue`) is empty: one per `n_action_steps`",
    "pi05": "the observation of a call whose action queue (`_action_queue`) is empty: one per `n_action_steps`",
    "smolvla": "the observation of a call whose action queue (`_queues['action']`) is empty: one per `n_action_steps`",
    "act": "the observation of a call whose action queue (`_action_queue`) is empty; every one with temporal ensembling",
    "diffusion": "the last `n_obs_steps` observations before a call whose action queue (`_queues['action']`) is empty",
}
_QUEUES = {"pi0": ("_action_queue", None), "pi05": ("_action_queue", None), "act": ("_action_queue", None),
           "smolvla": ("_queues", "action"), "diffusion": ("_queues", "action")}


def observation_reader(policy: Any) -> Callable[[], bool] | None:
    """A function saying, after a ``select_action`` call, whether ``policy`` reads the next
    call's observation; None where it may read every one (a policy not in ``OBSERVATION_READS``,
    a subclass, an instance with its own ``select_action``, ACT's temporal ensembling, RTC)."""
    name = getattr(type(policy), "name", None)
    if name not in _QUEUES or not type(policy).__module__.startswith(f"lerobot.policies.{name}."):
        return None
    if "select_action" in vars(policy) or "predict_action_chunk" in vars(policy):
        return None
    config = policy.config
    if getattr(config, "temporal_ensemble_coeff", None) is not None:
        return None
    rtc = getattr(config, "rtc_config", None)
    if rtc is not None and getattr(rtc, "enabled", False):
        return None
    history = int(getattr(config, "n_obs_steps", 1)) if name == "diffusion" else 1
    attr, key = _QUEUES[name]

    def reads_next() -> bool:
        queue = getattr(policy, attr)
        return len(queue if key is None else queue[key]) < history

    return reads_next


def _observe_next(env: Any, observe: bool) -> None:
    envs = getattr(env, "envs", None)
    if envs is not None:  # SyncVectorEnv: in this process
        for sub in envs:
            sub.get_wrapper_attr("fastenv_observe_next")(observe)
    else:  # LeRobot's (lazy) AsyncVectorEnv: once to every worker, only when it changes
        env.call("fastenv_observe_next", observe)


def skipping_rollout(stock_rollout: Callable[..., dict]) -> Callable[..., dict]:
    """LeRobot's ``rollout`` that renders a fastenv env's cameras only at the steps its policy reads.

    Unchanged (every step rendered) where the env is not fastenv's, the policy may read every
    observation (``observation_reader``), or the rollout keeps them all (``return_observations``,
    a dataset recording).
    """

    @functools.wraps(stock_rollout)
    def rollout(*args: Any, **kwargs: Any) -> dict:
        env = kwargs["env"] if "env" in kwargs else args[0]
        policy = kwargs["policy"] if "policy" in kwargs else args[1]
        reads_next = observation_reader(policy)
        keeps_all = bool(kwargs.get("return_observations")) or kwargs.get("recording_dir") is not None
        if reads_next is None or keeps_all or not getattr(env, "_fastenv", False):
            return stock_rollout(*args, **kwargs)
        select = policy.select_action
        observing = [True]

        def select_action(*a: Any, **k: Any) -> Any:
            action = select(*a, **k)
            observe = reads_next()
            if observe != observing[0]:
                _observe_next(env, observe)
                observing[0] = observe
            return action

        policy.select_action = select_action
        try:
            return stock_rollout(*args, **kwargs)
        finally:
            del policy.select_action
            if not observing[0]:
                _observe_next(env, True)

    return rollout


PROG = "python -m fastenv.integrations.lerobot"
VIDEOS_OPTION = "--fastenv.videos_per_task"


def filming(eval_policy_all: Callable[..., Any], episodes: int) -> Callable[..., Any]:
    """LeRobot's ``eval_policy_all`` filming ``episodes`` episodes of each task (its ``eval_main``
    passes 10; 0 under ``--eval.recording`` stays 0). ``videos_dir`` is kept: LeRobot makes the
    output folder through it."""

    @functools.wraps(eval_policy_all)
    def films(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("max_episodes_rendered", 0) > 0:
            kwargs["max_episodes_rendered"] = episodes
        return eval_policy_all(*args, **kwargs)

    return films


def _videos_option(argv: list[str]) -> tuple[list[str], int | None]:
    """``--fastenv.videos_per_task=N`` taken out of ``argv`` (LeRobot's parser refuses fields it
    does not know); any other ``--fastenv.`` option is refused."""
    rest, videos = [], None
    for arg in argv:
        if not arg.startswith("--fastenv."):
            rest.append(arg)
            continue
        name, _, value = arg.partition("=")
        if name != VIDEOS_OPTION or not value.strip().isdigit():
            raise SystemExit(f"{PROG}: {arg!r}: the one option of fastenv's is {VIDEOS_OPTION}=N "
                             f"(N >= 0: episodes filmed per task; lerobot-eval films 10)")
        videos = int(value)
    return rest, videos


def _sim_paths(sim: Any) -> dict[str, bool] | None:
    from fastenv.backends.libero.offscreen_env import PATHS

    return PATHS.get(id(sim))


def counting(make: Callable[..., Any], tally: Tally) -> Callable[..., Any]:
    """``make_env`` whose vector envs add their envs' counts (``fastenv_counts``) to ``tally`` when closed."""

    @functools.wraps(make)
    def make_counted(*args: Any, **kwargs: Any) -> Any:
        envs = make(*args, **kwargs)
        for tasks in envs.values():
            for vec in tasks.values():
                if not getattr(vec, "_fastenv", False):
                    continue  # another env type: LeRobot's own
                close = vec.close

                def counted_close(*a: Any, _vec: Any = vec, _close: Any = close, **k: Any) -> Any:
                    lazy_unstarted = getattr(_vec, "_env_fns", None) is not None and getattr(_vec, "_env", 1) is None
                    if not getattr(_vec, "_fastenv_counted", False) and not lazy_unstarted:
                        _vec._fastenv_counted = True
                        try:
                            counts = _vec.call("fastenv_counts")
                        except Exception:  # a worker already gone: its counts with it
                            counts = ()
                        for c in counts:
                            tally.add_images(c["stock"], c["rendered"])
                            tally.add_paths([c["fast_paths"]] if c["fast_paths"] else [])
                    return _close(*a, **k)

                vec.close = counted_close
        return envs

    return make_counted


def main(argv: list[str] | None = None) -> None:
    """``lerobot-eval`` with fastenv's LIBERO env: ``python -m fastenv.integrations.lerobot <its arguments>``.

    With LeRobot 0.5+, a policy that reads an observation only when its action queue is empty
    gets its cameras rendered only then (``skipping_rollout``). Says on stderr that fastenv serves
    the run, and at its end the camera images not rendered and the fast paths that served.
    ``--fastenv.videos_per_task=N`` films N episodes of each task instead of LeRobot's 10 (0: no
    videos; a filmed episode renders its video's camera at every step).
    """
    lerobot_eval = require("lerobot.scripts.lerobot_eval", "lerobot", "LeRobot's lerobot-eval")
    rest, videos = _videos_option(list(sys.argv[1:] if argv is None else argv))
    sys.argv = [PROG, *rest]  # its usage line names this command
    skips = lerobot_version() >= (0, 5)
    if videos is not None:
        if not skips:
            raise SystemExit(f"{PROG}: {VIDEOS_OPTION} needs LeRobot 0.5+ (0.4's eval_main films in another way)")
        lerobot_eval.eval_policy_all = filming(lerobot_eval.eval_policy_all, videos)  # the name its eval_main calls
    announce(PROG, "LeRobot's lerobot-eval on fastenv's LIBERO env (LeRobot's LiberoEnv: the same observations and results); "
             + ("the cameras render only at the steps the policy reads, and for the episodes LeRobot films"
                if skips else "every step's cameras render (LeRobot < 0.5)"))
    tally = Tally()
    lerobot_eval.make_env = counting(make_env, tally)  # the name its eval_main calls
    if skips:
        lerobot_eval.rollout = skipping_rollout(lerobot_eval.rollout)  # the name its eval_policy calls
    try:
        lerobot_eval.main()
    finally:
        if tally.stock_images or tally.paths:
            tally.say(PROG)


def __getattr__(name: str) -> Any:
    # The env class subclasses LeRobot's, so it exists only where LeRobot is installed.
    if name == "LiberoEnv":
        return _env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
