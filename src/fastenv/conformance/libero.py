"""LIBERO conformance: fastenv's LIBERO env against LIBERO's own env, stepped one action at a time.

Every task of every suite, with three kinds of case:

- ``keys=<one key>``: each observation key the task has (every state sensor, each modality's
  ``-state`` vector, and RGB, depth and the three segmentation levels of both cameras), kept
  alone, so nothing else is computed: pruning must never change a kept value;
- ``keys=default`` and ``keys=stock``: fastenv's default set and LIBERO's stock set, each in an
  env built for it as a user builds it;
- for the stock set, every mode: ``hard_reset`` True/False x ``fast_substep`` True/False x
  ``chunk`` 1/4 (with chunk 1 no sub-step runs, so ``fast_substep`` is checked with chunk 4 only).

Each case plays one scenario (``SCENARIO``): a seeded first episode truncated by the time limit
inside a chunk, a second (unseeded, same-step autoreset) ended by success inside a chunk (the
task's success check is made to fire at that step, in both envs alike), and a third. fastenv
runs it through the executor its vector env's workers use; LIBERO's ``OffScreenRenderEnv``
replays the same actions one ``env.step`` at a time, with LIBERO's ``env.seed(seed)`` then
``reset()`` and ``set_init_state``. Compared exactly: the init states chosen, every observation
fastenv returns (first, at each chunk's end, final observations, the next episode's first),
each sub-step's reward, terminated, truncated and ``success``.

Each case's reference is LIBERO's env built in the same world as fastenv's: robosuite shrinks
every site of the model when any camera has a segmentation sensor, which changes RGB images
(``_TaskRunner``), so segmentation keys are compared in envs built with segmentation and every
other key in envs built without, as a user who keeps them gets them.

The reference's seeded reset is a freshly built stock env's first reset: LIBERO grows its list
of object-property samplers at every model load, so a stock env's own later resets draw more
random numbers and place fixtures elsewhere for the same seed (``scene.py``); the reference env,
which replays several cases, gets that list as a fresh env has it before its seeded reset, and the
tests check that this equals a truly fresh env. Its unseeded resets are LIBERO's own, the list
growing at each: the episodes an RL library's autoreset plays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.conformance import Case, Comparer, Mismatch, Resident, Skip

BACKEND = "libero"
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
CAMERA = 32  # image side: small, but every image still goes through MuJoCo's renderer
SEG_LEVELS = ("instance", "class", "element")


@dataclass(frozen=True)
class Scenario:
    """What every case plays: episodes of these lengths, ended as said, actions from ``seed``."""

    time_limit: int = 6  # episode 1 is truncated at its 6th step (inside the 2nd chunk of 4)
    success_step: int = 3  # episode 2 succeeds at its 3rd step (inside its chunk)
    last_steps: int = 4  # episode 3 runs this many steps, then the case ends
    seed_base: int = 1000


SCENARIO = Scenario()
# With chunk 1 every action is the simulator's own step (no sub-step runs): fast_substep has
# nothing to change there, so chunk 1 is checked once per reset mode.
MODES = tuple(
    (("hard_reset", hard), ("fast_substep", fast), ("chunk", chunk))
    for hard in (False, True)
    for chunk in (4, 1)
    for fast in ((True, False) if chunk > 1 else (True,))
)
DEFAULT_MODE = (("hard_reset", False), ("fast_substep", True), ("chunk", 4))


def tasks(suites: Sequence[str] | None = None) -> list[str]:
    """Every task of ``suites`` (default: all five) as "suite/id"."""
    from fastenv.backends.libero.task import import_libero, without_task_order_line

    suites_by_name = import_libero().benchmark.get_benchmark_dict()
    out = []
    for suite in suites or SUITES:
        if suite not in suites_by_name:
            raise ValueError(f"unknown LIBERO suite {suite!r}; available: {sorted(suites_by_name)}")
        with without_task_order_line():
            out += [f"{suite}/{i}" for i in range(suites_by_name[suite]().n_tasks)]
    return out


def cases(task_list: Sequence[str] | None = None) -> list[Case]:
    """Every case of every task in ``task_list`` (default: every task of every suite).

    Listing a task's single keys builds nothing: they come from the task's BDDL file.
    """
    out = []
    for task in task_list or tasks():
        out += [Case("libero", task, "stock", mode) for mode in MODES]
        out.append(Case("libero", task, "default", DEFAULT_MODE))
        out += [Case("libero", task, key, DEFAULT_MODE) for key in task_keys(task)]
    return out


def task_keys(task: str) -> list[str]:
    """Every observation key of a task, read from an env built without cameras (cached per task)."""
    return _runner(task).keys()


# -- the runner of one task (its envs are built once, for all its cases) -----------------------------
_RESIDENT = Resident()
close = _RESIDENT.close  # closes the envs of the task last checked


def _runner(task: str) -> _TaskRunner:
    return _RESIDENT.get(task, lambda: _TaskRunner(task))


FAST_PATHS_SERVED: dict[str, int] = {}  # fast path -> cases of this process it served in


def stack() -> dict[str, Any]:
    """The LIBERO stack the sweep ran on: the distribution that provides ``libero``, robosuite,
    MuJoCo, numpy and numba, and how many cases each fast path served in."""
    from fastenv.backends.libero.mujoco_facts import installed_stack

    return {**installed_stack(), "fast_paths_served": dict(FAST_PATHS_SERVED)}


def check(case: Case, cmp: Comparer) -> None:
    """Play the scenario in fastenv and in LIBERO's own env for ``case``; raise ``Mismatch`` at a difference."""
    _runner(case.task).check(case, cmp)


@dataclass
class _Recording:
    """The stock env's scenario: per episode its init state, first observation and steps."""

    init_ids: list[int] = field(default_factory=list)
    first: list[dict] = field(default_factory=list)
    steps: list[list[tuple[dict, float, bool]]] = field(default_factory=list)


class _SuccessAt:
    """Makes an env's success check fire from step ``at`` of the episode while ``on`` (both envs alike)."""

    def __init__(self, raw: Any, at: int) -> None:
        self.raw, self.at, self.on = raw, at, False
        self.original = raw._check_success
        raw._check_success = self

    def __call__(self) -> bool:
        return bool(self.original()) or (self.on and self.raw.timestep >= self.at)


class _TaskRunner:
    """The envs of one task, built once for all its cases, one at a time.

    robosuite shrinks every site of the model to nothing when any camera has a segmentation
    sensor (so that sites stay out of the masks): an env built with segmentation renders its RGB
    images without the sites others show. Each case is therefore compared with a stock env built
    in the same world: segmentation keys with one that has segmentation (``"every_seg"``), every
    other key with one that has none (``"every"``: all cameras, RGB and depth; ``"default"``:
    LIBERO's own default, the reference of the stock set at chunk 1).
    """

    def __init__(self, task: str) -> None:
        from fastenv.backends.libero import LiberoTask

        suite, _, task_id = task.partition("/")
        self.task_name = task
        self.task = LiberoTask.load(suite, int(task_id))
        self.seed = SCENARIO.seed_base + int(task_id)
        self._keys: list[str] | None = None
        self._cameras: tuple[str, ...] | None = None
        self._stock: Any = None
        self._stock_world = ""
        self._recordings: dict[tuple[int, str], _Recording] = {}
        self._env: Any = None
        self._env_kind = ""

    # -- envs ---------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        """Every key of the task, segmentation keys last (their world is built last)."""
        if self._keys is None:
            self._probe()
        return self._keys

    def cameras(self) -> tuple[str, ...]:
        """Every camera of the task's model."""
        if self._cameras is None:
            self._probe()
        return self._cameras

    def _probe(self) -> None:
        from fastenv.backends.libero import LiberoAdapter

        probe = LiberoAdapter(self.task, keys=["robot0_proprio-state"], camera_size=CAMERA)  # no camera: cheap
        try:
            self._cameras = probe._model_cameras
            keys = list(probe.available_keys())
        finally:
            probe.close()
        self._keys = [k for k in keys if "_segmentation_" not in k] + [k for k in keys if "_segmentation_" in k]

    def _fastenv(self, kind: str) -> Any:
        """fastenv's env below its ``ActionChunk`` (the one alive; another kind closes it):
        "shared" (a ``SimEnv`` with every camera's RGB and depth built, on which single keys are
        selected), "shared_seg" (every camera's segmentation), or "default"/"stock" (``make_env``
        for that key set, as a user builds it)."""
        from fastenv.backends.libero import DEFAULT_MODALITIES, LiberoAdapter
        from fastenv.core import SimEnv
        from fastenv.envs.libero import make_env

        if self._env_kind != kind:
            self._close_env()
            if kind.startswith("shared"):
                kinds = [f"segmentation_{level}" for level in SEG_LEVELS] if kind == "shared_seg" else ["image", "depth"]
                adapter = LiberoAdapter(self.task, keys=[f"{cam}_{k}" for cam in self.cameras() for k in kinds], camera_size=CAMERA)
                env = SimEnv(adapter, max_episode_steps=SCENARIO.time_limit)
            else:
                env = make_env(
                    self.task.suite, self.task.task_id, chunk=None, modalities=DEFAULT_MODALITIES if kind == "default" else None,
                    camera_size=CAMERA, max_episode_steps=SCENARIO.time_limit,
                )
            raw = env.unwrapped.adapter._raw
            raw._check_success = _SuccessAt(raw, SCENARIO.success_step)
            self._env, self._env_kind = env, kind
        return self._env

    def _built(self, kind: str, world: str) -> Any:
        """fastenv's env of ``kind``; where it cannot be built, a ``Skip`` if LIBERO's own env of
        the same ``world`` fails the same way (a distribution whose robosuite cannot render
        segmentation with this numpy, say), else the error."""
        try:
            return self._fastenv(kind)
        except Exception as exc:
            try:
                self._stock_env(world)
            except type(exc) as stock_exc:
                raise Skip(f"LIBERO's own env fails here as fastenv's does: {type(stock_exc).__name__}: {stock_exc}") from exc
            raise

    def _stock_env(self, world: str) -> Any:
        """LIBERO's own env in ``world`` (the one alive; another world closes it)."""
        if self._stock_world != world:
            self._close_stock()
            from fastenv.backends.libero.task import import_libero

            OffScreenRenderEnv = import_libero().OffScreenRenderEnv

            kwargs: dict[str, Any] = {}
            cameras = list(self.cameras())
            if world == "every":
                kwargs = dict(camera_names=cameras, camera_depths=True)
            elif world == "every_seg":
                kwargs = dict(camera_names=cameras, camera_segmentations=[list(SEG_LEVELS)] * len(cameras))
            self._stock = OffScreenRenderEnv(bddl_file_name=self.task.bddl_file, camera_heights=CAMERA, camera_widths=CAMERA, **kwargs)
            self._stock_world = world
            self._stock_success = _SuccessAt(self._stock.env, SCENARIO.success_step)
            self._stock.env._check_success = self._stock_success
        return self._stock

    def _close_env(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env, self._env_kind = None, ""

    def _close_stock(self) -> None:
        from fastenv.backends.libero.adapter import make_gl_current

        if self._stock is not None:
            make_gl_current(self._stock.env)
            self._stock.close()
            self._stock, self._stock_world = None, ""

    def close(self) -> None:
        self._close_env()
        self._close_stock()

    # -- the scenario ---------------------------------------------------------------------------
    def _episodes(self, chunk: int) -> list[int]:
        """Steps of each episode: a time limit, a success, and the last episode's steps."""
        return [SCENARIO.time_limit, SCENARIO.success_step, SCENARIO.last_steps]

    def _actions(self, chunk: int) -> np.ndarray:
        """One chunk of actions per chunk the scenario takes (the rest of a chunk an episode ends in is unused)."""
        n_chunks = sum(-(-steps // chunk) for steps in self._episodes(chunk))
        rng = np.random.default_rng(self.seed)
        actions = rng.uniform(-1, 1, (n_chunks, chunk, 7))
        actions[..., 2] -= 0.3  # towards the table: contacts
        return actions

    def _init_ids(self) -> list[int]:
        """The init states fastenv's seeded env draws for its three episodes (its generator's rule)."""
        from gymnasium.utils import seeding

        rng, _ = seeding.np_random(self.seed)
        return [int(rng.integers(len(self.task.init_states))) for _ in range(3)]

    def _record(self, chunk: int, world: str) -> _Recording:
        """The stock env of ``world`` through the scenario, every step's observation kept."""
        from fastenv.backends.libero.adapter import make_gl_current
        from fastenv.backends.libero.scene import PropertySamplers

        if (chunk, world) in self._recordings:
            return self._recordings[chunk, world]
        env = self._stock_env(world)
        raw = env.env
        samplers = PropertySamplers(raw)
        rec = _Recording(init_ids=self._init_ids())
        actions = self._actions(chunk)
        c = 0
        for e, steps in enumerate(self._episodes(chunk)):
            make_gl_current(raw)
            if e == 0:
                env.seed(self.seed)  # numpy's global generator: LIBERO's own seeding
                # the env replays several cases: its property samplers as a freshly built env has
                # them; the unseeded resets after it grow the list as LIBERO's own resets do
                samplers.before_reset(raw)
            env.reset()
            rec.first.append(_copy(env.set_init_state(self.task.init_states[rec.init_ids[e]])))
            self._stock_success.on = e == 1
            taken: list[tuple[dict, float, bool]] = []
            while len(taken) < steps:
                for action in actions[c][: steps - len(taken)]:
                    make_gl_current(raw)
                    obs, reward, done, _ = env.step(action)
                    taken.append((_copy(obs), float(reward), bool(done)))
                c += 1
            rec.steps.append(taken)
        self._stock_success.on = False
        self._recordings[chunk, world] = rec
        return rec

    # -- one case -------------------------------------------------------------------------------
    def check(self, case: Case, cmp: Comparer) -> None:
        from fastenv.vector.worker import batch_executor
        from fastenv.wrappers import ActionChunk

        hard, fast, chunk = case.option("hard_reset"), case.option("fast_substep"), case.option("chunk")
        if case.keys in ("default", "stock"):
            world = "every" if chunk > 1 else "default"
            env = self._built(case.keys, world)
            keys = list(env.observation_space.spaces)
        else:
            seg = "_segmentation_" in case.keys
            world = "every_seg" if seg else "every"
            env = self._built("shared_seg" if seg else "shared", world)
            keys = [case.keys]
            env.select_modalities(keys)
        sim = env.unwrapped
        adapter = sim.adapter
        adapter.fast_substep = fast
        adapter.hard_reset = adapter._raw.hard_reset = hard
        rec = self._record(chunk, world)
        # The executor the vector env's workers run, with same-step autoreset.
        _, executor = batch_executor([ActionChunk(env, chunk)])
        success = adapter._raw._check_success
        rows = np.array([0])
        obs, infos = executor.reset(rows, [self.seed], None)
        cmp.equal("episode 1: init state", infos[0]["init_state_id"], rec.init_ids[0])
        self._compare_obs(cmp, "episode 1: first observation", obs[0], rec.first[0], keys)
        actions = self._actions(chunk)
        episode, step, c = 0, 0, 0
        while episode < 3:
            success.on = episode == 1
            out = executor.step(rows, actions[c][None])
            success.on = False
            info = out.infos[0]
            n = int(info["chunk_steps"])
            ref = rec.steps[episode][step : step + n]
            where = f"episode {episode + 1}, steps {step + 1}-{step + n}"
            if len(ref) != n:
                raise Mismatch(f"{where}: fastenv ran {n} steps where the episode has {len(rec.steps[episode]) - step} left")
            cmp.equal(f"{where}: rewards", np.asarray(info["chunk_rewards"][:n]), np.array([r for _, r, _ in ref]))
            step += n
            ended = step == len(rec.steps[episode])
            truncated = episode == 0 and ended
            terminated = bool(ref[-1][2])
            cmp.equal(f"{where}: terminated", bool(out.terminated[0]), terminated)
            cmp.equal(f"{where}: truncated", bool(out.truncated[0]), truncated)
            step_info = out.final_infos[0] if out.ended[0] else info
            cmp.equal(f"{where}: success", bool(step_info["success"]), terminated)
            if out.ended[0] != (ended and episode < 2):
                raise Mismatch(f"{where}: the episode {'ended' if out.ended[0] else 'went on'} where the stock one did not")
            if out.ended[0]:
                self._compare_obs(cmp, f"{where}: final observation", out.final_obs[0], ref[-1][0], keys)
                episode, step = episode + 1, 0
                cmp.equal(f"episode {episode + 1}: init state", info["init_state_id"], rec.init_ids[episode])
                self._compare_obs(cmp, f"episode {episode + 1}: first observation", out.obs[0], rec.first[episode], keys)
            else:
                self._compare_obs(cmp, f"{where}: observation", out.obs[0], ref[-1][0], keys)
                if ended:
                    episode += 1
            c += 1
        for path, on in adapter.fast_paths().items():  # what served the case (modes turn some off)
            FAST_PATHS_SERVED[path] = FAST_PATHS_SERVED.get(path, 0) + int(on)

    @staticmethod
    def _compare_obs(cmp: Comparer, label: str, ours: dict, stock: dict, keys: Sequence[str]) -> None:
        missing = [k for k in keys if k not in stock]
        if missing:
            raise Mismatch(f"{label}: the stock env has no {missing}")
        cmp.equal(label, ours, {k: stock[k] for k in keys})


def _copy(obs: dict) -> dict:
    return {k: np.array(v, copy=True) for k, v in obs.items()}
