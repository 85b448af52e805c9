"""PipelineVectorEnv: envs across worker processes, stepped whole, by pipeline stage, or as they get ready.

The vector env checks the caller's arguments and hands the work to the parts it holds: its
``WorkerPool`` (``pool``: the workers, their commands and replies, and the arrays they write) and
its ``ResultReader`` (``results``: what a step or a recv returns).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing as mp
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import CloudpickleWrapper, batch_space

from fastenv import machine
from fastenv._validation import BatchTypeError, batch_action_checker, check_positive_int
from fastenv.core.infos import add_info
from fastenv.vector import profiling, shutdown
from fastenv.vector import worker as w
from fastenv.vector.devices import worker_environments
from fastenv.vector.errors import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    EpisodeEndedError,
    NoAsyncCallError,
)
from fastenv.vector.layout import Layout
from fastenv.vector.plan import Plan, read_plan
from fastenv.vector.pool import EnvStatus, WorkerPool
from fastenv.vector.results import ResultReader
from fastenv.vector.shared import (
    holds_exactly,
    leaf_items,
    leaf_specs,
    unsupported_leaf,
)
from fastenv.vector.transport import ProcessTransport, Transport

# Turns a vector env's ``layout`` argument ("auto", a plan, its dict or its JSON's path) and its
# ``tune_options`` into the plan it runs: ``resolver(env_fns, layout, tune_options, context=...)``
# (``fastenv.tuning.plan_for``, which tunes for "auto").
LayoutResolver = Callable[..., Plan]

_CLOSED = "this vector env is closed"


def _positive_seconds(name: str, seconds: Any) -> float:
    if not seconds > 0:
        raise ValueError(f"{name} must be > 0 seconds, got {seconds}")
    return float(seconds)


def _seconds(name: str, seconds: Any) -> float:
    if seconds < 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {seconds}")
    return float(seconds)


def autoreset_mode_of(value: Any) -> AutoresetMode:
    """Gymnasium's ``AutoresetMode`` named by ``value`` (the enum or its value, as Gymnasium's vector envs take it)."""
    if isinstance(value, AutoresetMode):
        return value
    try:
        return AutoresetMode(value)
    except (ValueError, TypeError):
        names = ", ".join(f"AutoresetMode.{mode.name} ({mode.value!r})" for mode in AutoresetMode)
        raise ValueError(f"autoreset_mode must be one of {names}, got {value!r}") from None


def _info_format(name: str, value: Any) -> str:
    if value not in ("gymnasium", "per_env"):
        raise ValueError(f"{name} must be 'gymnasium' or 'per_env', got {value!r}")
    return value


class _PoolSetting:
    """An attribute of the vector env that is its pool's setting, checked when set."""

    def __init__(self, check: Callable[[str, Any], Any]) -> None:
        self.check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, env: Any, owner: type | None = None) -> Any:
        return self if env is None else getattr(env._pool, self.name)

    def __set__(self, env: Any, value: Any) -> None:
        setattr(env._pool, self.name, self.check(self.name, value))


def default_num_workers(num_envs: int, pipeline_stages: int) -> int:
    """The most workers, up to the CPU count, that split every stage evenly."""
    per_stage = max(num_envs // max(pipeline_stages, 1), 1)
    cpus = machine.available_cpus()  # affinity and cgroup quota, not the host's core count
    return max(d for d in range(1, per_stage + 1) if per_stage % d == 0 and d <= cpus)


class PipelineVectorEnv(VectorEnv):
    """A vector env over worker processes, with pipeline stages and dynamic batching.

    Each worker holds several envs; stage k is the slice ``[k*N/S, (k+1)*N/S)`` and env i lives on
    worker ``i % W``, so every stage is spread over all workers. ``step`` has plain Gymnasium
    semantics for all N envs. ``send(actions, stage=k)`` returns at once and ``recv(stage=k)``
    collects that stage, so the policy can run on one stage while the others step.
    ``send(actions, env_ids=ids)`` with ``recv(max_batch=B, timeout=T)`` serves whichever envs are
    ready first. Autoreset is Gymnasium's, in any of its modes (``autoreset_mode``): SAME_STEP
    (the default) resets a finished env in the step that ends its episode, with
    ``infos["final_obs"]``/``["final_info"]``; NEXT_STEP resets it at its next step, whose action
    is not run (reward 0, no flags, the reset's observation and info); DISABLED leaves the reset
    to the caller (``reset(options={"reset_mask": mask})``), and refuses to step the env before.

    Each env receives its action row as SyncVectorEnv hands it on: a numpy array's dtype and
    values unchanged (float64 rows for a float32 Box stay float64). Other inputs (lists, Python
    scalars, tensors) are converted with ``np.asarray`` first, so an env gets e.g. ``np.int64``
    where SyncVectorEnv would pass a Python int. When an env raises, ``step``/``recv`` raise
    ``WorkerError`` carrying the results of the envs that did step (``.results``, rows where
    ``.valid``); the envs without one (``.failed_env_ids``) must be reset before they step again.
    Misuse raises Gymnasium's errors (each also a ``RuntimeError``): ``AlreadyPendingCallError``
    for a send or reset to envs with actions in flight, ``NoAsyncCallError`` for a recv of envs
    sent nothing, ``ClosedEnvironmentError`` for any use after ``close()``, and
    ``EpisodeEndedError`` (an ``AssertionError``, as SyncVectorEnv's) for a step or send, with
    DISABLED, to envs whose episode ended and that were not reset.

    Args:
        env_fns: constructors of the N envs (run inside the workers, never forked).
        num_workers: worker processes W (default: the most, up to the CPU count, that divide a stage).
        pipeline_stages: S; N must be a multiple of W * S.
        step_timeout: seconds a worker with work may stay silent before it is killed and restarted.
        startup_timeout: seconds a worker may take to build its envs.
        threads_per_worker: cap on each worker's native threads (OMP, MKL, OpenBLAS, llvmpipe,
            torch); None leaves them alone.
        max_restarts: restarts allowed per worker before the failure is raised.
        spin_wait: seconds a process tries for the next message (yielding its core between
            tries) before it sleeps on its semaphore; a worker on a core of its own then answers
            in microseconds, and one that shares its core lets the other process run. 0 disables.
        autoreset_mode: what happens to an env whose episode ended: Gymnasium's ``AutoresetMode``
            or its value ("SameStep", "NextStep", "Disabled"); SAME_STEP by default (Gymnasium's
            own vector envs default to NEXT_STEP).
        info_format: "gymnasium" (``infos["final_info"]`` is a dict of arrays with ``_key`` masks)
            or "per_env" (an array of N per-env dicts, None where no episode ended: the
            convention of Gymnasium < 1.0 and of CleanRL's scripts).
        context: multiprocessing start method ("spawn" or "forkserver"; never "fork").
        backend: "local" (worker processes on this machine) or "ray" (workers as Ray actors
            across a cluster; pip install -e ".[ray]").
        ray_options: with backend="ray": ``address`` (None starts or joins a local cluster),
            ``num_cpus``, ``num_gpus`` and ``resources`` per worker, ``placement_strategy``
            ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK"), ``runtime_env``.
        profile: start the profiler (``profile_report``).
        progress: a line on stderr while the workers build their envs: None shows it once the
            build has taken 2 s, True at once, False never.
        layout: a layout plan (``fastenv.Plan``, its dict, or the path of its JSON from
            ``fastenv tune --out``), or "auto" to tune one now (``fastenv.tune``). The
            plan sets num_workers, pipeline_stages, threads_per_worker and spin_wait, and
            ``recv``'s default ``max_batch``/``timeout`` when it batches dynamically;
            ``self.plan`` keeps it.
        tune_options: keyword arguments of ``fastenv.tune`` for ``layout="auto"`` (``policy``
            or ``policy_cost``, ``max_trials``...).
        render_devices: the GPUs the workers render on: None (each inherits this process's
            environment), "auto" (the visible GPUs: ``CUDA_VISIBLE_DEVICES``'s, else the machine's)
            or a list of GPU ids; worker w gets ``devices[w % len(devices)]`` as its
            ``CUDA_VISIBLE_DEVICES``, and renders on the EGL device that is that GPU, matched by
            identity (``fastenv.gpus``) (local workers; with Ray, its ``num_gpus`` assigns GPUs).
        layout_resolver: what turns ``layout`` and ``tune_options`` into the plan run,
            ``resolver(env_fns, layout, tune_options, context=...)``. None reads a plan, its dict
            or its JSON here, and has ``fastenv.tuning.plan_for`` tune for ``layout="auto"``.

    Examples:
        >>> envs = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 8, num_workers=2, pipeline_stages=2)
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        num_workers: int | None = None,
        pipeline_stages: int | None = None,
        *,
        step_timeout: float = 120.0,
        startup_timeout: float = 600.0,
        threads_per_worker: int | None = 1,
        max_restarts: int = 3,
        spin_wait: float = 2e-4,
        autoreset_mode: str | AutoresetMode = AutoresetMode.SAME_STEP,
        info_format: str = "gymnasium",
        context: str = "spawn",
        backend: str = "local",
        ray_options: Mapping[str, Any] | None = None,
        profile: bool = False,
        layout: Any = None,
        tune_options: Mapping[str, Any] | None = None,
        progress: bool | None = None,
        render_devices: Any = None,
        layout_resolver: LayoutResolver | None = None,
    ) -> None:
        self._pool: WorkerPool | None = None  # closed until the workers are up: close() has nothing to do
        self._clock: profiling.MainClock | None = None
        w.check_not_bootstrapping()  # a worker re-running the user's script must not build workers
        self.autoreset_mode = autoreset_mode_of(autoreset_mode)  # (before any tuning or worker)
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns must hold at least one env constructor, got an empty sequence")
        if not all(callable(fn) for fn in env_fns):
            raise TypeError("env_fns must be callables that build an env")
        if render_devices is not None and backend == "ray":
            raise ValueError("render_devices is for local workers; with backend='ray' give ray_options={'num_gpus': ...}")
        worker_environments(render_devices, 1)  # a GPU id that is not visible fails here, before tuning or any worker
        self.plan = _resolve_plan(layout, tune_options, layout_resolver, env_fns, num_workers, pipeline_stages, context)
        if self.plan is not None:
            num_workers, pipeline_stages = self.plan.num_workers, self.plan.pipeline_stages
            threads_per_worker, spin_wait = self.plan.threads_per_worker, self.plan.spin_wait
        pipeline_stages = 1 if pipeline_stages is None else pipeline_stages
        if context == "fork":
            raise ValueError("context='fork' is refused: EGL/OpenGL contexts do not survive fork; use 'spawn' or 'forkserver'")
        if num_workers is None:
            num_workers = default_num_workers(len(env_fns), pipeline_stages)
        layout_ = Layout(len(env_fns), num_workers, pipeline_stages)
        step_timeout = _positive_seconds("step_timeout", step_timeout)
        startup_timeout = _positive_seconds("startup_timeout", startup_timeout)
        if threads_per_worker is not None:
            check_positive_int("threads_per_worker", threads_per_worker)
        spin_wait = _seconds("spin_wait", spin_wait)
        info_format = _info_format("info_format", info_format)
        self.threads_per_worker = threads_per_worker
        self.worker_environments = worker_environments(render_devices, layout_.num_workers)
        if backend == "local":
            if ray_options is not None:
                raise ValueError("ray_options are for backend='ray'")
            transport: Transport = ProcessTransport(
                mp.get_context(context), layout_.num_stages, threads_per_worker, spin_wait, self.worker_environments, self.autoreset_mode
            )
        elif backend == "ray":
            from fastenv.vector.ray_backend import RayTransport

            transport = RayTransport(dict(ray_options or {}), layout_.num_workers, layout_.num_stages, threads_per_worker, self.autoreset_mode)
        else:
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        self.backend = backend
        self.num_envs = layout_.num_envs
        self._info_format = info_format
        self._pool = WorkerPool(
            env_fns,
            layout_,
            transport,
            step_timeout=step_timeout,
            startup_timeout=startup_timeout,
            max_restarts=int(max_restarts),
            spin_wait=spin_wait,
        )
        shutdown.watch(self)  # SIGTERM and exit close the workers as Ctrl-C does
        try:
            self._setup_spaces(self._pool.start(progress))
            if profile:
                self.start_profile()
        except BaseException:
            self.close()
            raise

    # -- set-up ---------------------------------------------------------------------------------
    def _setup_spaces(self, descriptions: list[dict[str, Any]]) -> None:
        first = descriptions[0]
        for i, d in enumerate(descriptions[1:], 1):
            if d["observation_space"] != first["observation_space"] or d["action_space"] != first["action_space"]:
                raise ValueError(
                    f"worker {i}'s envs have spaces {d['observation_space']} / {d['action_space']}, "
                    f"worker 0's {first['observation_space']} / {first['action_space']}: all envs must match"
                )
        for what in ("observation_space", "action_space"):
            # Refused here, before any array is laid out (as AsyncVectorEnv(shared_memory=True)
            # refuses a custom space); the caller's except closes the workers.
            leaf = unsupported_leaf(first[what])
            if leaf is not None:
                inside = "" if leaf is first[what] else f" (in {first[what]})"
                raise ValueError(
                    f"the envs' {what} holds {leaf!r}{inside}, a {type(leaf).__name__}: fastenv's shared memory "
                    "holds only Box, Discrete, MultiDiscrete, MultiBinary, Dict and Tuple spaces (one fixed-shape "
                    "array per leaf); give the envs such a space (e.g. encode the values in a Box)"
                )
        self.single_observation_space = first["observation_space"]
        self.single_action_space = first["action_space"]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**first["metadata"], "autoreset_mode": self.autoreset_mode}
        self.render_mode = first["render_mode"]
        self.spec = first["spec"]
        self.shared_physics = first["shared_physics"]
        self.physics_scaled = first["physics_scaled"]
        self._pool.open_arrays(self.single_observation_space, self.single_action_space)
        self._results = ResultReader(self._pool, self._info_format, self.single_observation_space, self.autoreset_mode)
        specs = leaf_specs(self.single_action_space, "actions")
        self._action_dtypes = {path: dtype for path, _, dtype in specs}
        self._action_dtype = specs[0][2] if specs[0][0] == "actions" else None  # a space of one leaf
        self._check_actions = batch_action_checker(self.single_action_space)

    # -- what the pool owns ---------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True once ``close()`` ran (or the workers failed more than ``max_restarts`` times)."""
        return self._pool is None or self._pool.closed

    @closed.setter
    def closed(self, value: bool) -> None:  # (Gymnasium's VectorEnv.close and VectorWrapper set it)
        if value:
            self.close()
        elif self.closed:
            raise ValueError("a closed vector env cannot be opened again: build a new one")

    @property
    def layout(self) -> Layout:
        """Which worker holds which env, and the pipeline stages."""
        return self._pool.layout

    @property
    def num_workers(self) -> int:
        return self._pool.layout.num_workers

    @property
    def pipeline_stages(self) -> int:
        return self._pool.layout.num_stages

    # The pool's settings, which a user may change between steps as before, checked as the constructor checks them.
    step_timeout = _PoolSetting(_positive_seconds)
    startup_timeout = _PoolSetting(_positive_seconds)
    max_restarts = _PoolSetting(lambda name, count: int(count))
    spin_wait = _PoolSetting(_seconds)

    @property
    def info_format(self) -> str:
        return self._info_format

    @info_format.setter
    def info_format(self, value: str) -> None:
        self._info_format = self._results.info_format = _info_format("info_format", value)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (they change when a worker is restarted)."""
        return [worker.pid for worker in self._pool.workers if worker.pid is not None]

    @property
    def np_random_seed(self) -> tuple[int, ...]:
        """Each env's generator seed (Gymnasium's ``SyncVectorEnv`` gives the same)."""
        return self.get_attr("np_random_seed")

    @property
    def np_random(self) -> tuple[np.random.Generator, ...]:
        """Each env's random generator, copied from its worker."""
        return self.get_attr("np_random")

    # -- public API -----------------------------------------------------------------------------
    def _open_pool(self) -> WorkerPool:
        pool = self._pool
        if pool is None or pool.closed:
            raise ClosedEnvironmentError(_CLOSED)
        return pool

    def _write_actions(self, actions: Any, gids: np.ndarray, rows: Any) -> dict[str, Any] | None:
        """Put the actions in the pool's arrays; returns how the workers hand them on (``action_rows``).

        None when every leaf has the space's dtype; else, for each leaf that has not, the caller's
        dtype, or its rows (by env id) where the leaf's wide dtype cannot hold them exactly.
        """
        actions = self._check_actions(actions, len(gids))
        if self._action_dtype is not None and actions.dtype == self._action_dtype:  # the hot path
            self._pool.actions[rows] = actions
            return None
        dtypes: dict[str, Any] = {}
        leaves = self._pool.action_leaves  # in their wide dtypes
        for path, leaf in leaf_items(self.single_action_space, actions, "actions"):
            buffer = leaves[path]
            if leaf.dtype == self._action_dtypes[path]:
                buffer[rows] = leaf
            elif holds_exactly(buffer.dtype, leaf.dtype):
                buffer[rows] = leaf
                dtypes[path] = leaf.dtype
            else:  # e.g. int64 for a float Box: the rows go with the step command instead
                carried = np.empty((self.num_envs, *leaf.shape[1:]), leaf.dtype)
                carried[rows] = leaf
                dtypes[path] = carried
        return dtypes or None

    def _check_not_ended(self, gids: np.ndarray, what: str) -> None:
        """With autoreset DISABLED, refuse to step envs whose episode ended (they must be reset first)."""
        ended = self._results.ended
        if ended is not None and ended[gids].any():
            raise EpisodeEndedError(
                f"{what}: envs {gids[ended[gids]].tolist()} ended their episodes (terminated or truncated) and, "
                "with autoreset_mode=AutoresetMode.DISABLED, must be reset before they step again: "
                "reset(options={'reset_mask': mask})"
            )

    @profiling.timed
    def send(self, actions: Any, *, stage: int | None = None, env_ids: Sequence[int] | None = None) -> None:
        """Start stepping one stage (``stage=k``) or some envs (``env_ids=ids``); returns at once.

        ``actions`` holds one action per env of the stage / per id, in that order.
        """
        pool = self._open_pool()
        if (stage is None) == (env_ids is None):
            raise ValueError("send() needs exactly one of stage= or env_ids=")
        if stage is not None:
            gids = pool.layout.stage_envs(stage)
            pool.check_idle(gids, f"send(stage={stage})")
            self._check_not_ended(gids, f"send(stage={stage})")
            dtypes = self._write_actions(actions, gids, slice(gids[0], gids[-1] + 1))
            pool.send_steps(gids, False, dtypes)
        else:
            gids = pool.layout.check_env_ids(env_ids)
            pool.check_idle(gids, "send(env_ids=...)")
            self._check_not_ended(gids, "send(env_ids=...)")
            dtypes = self._write_actions(actions, gids, gids)
            pool.send_steps(gids, True, dtypes)

    @profiling.timed
    def recv(
        self, *, stage: int | None = None, max_batch: int | None = None, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Collect results: of a whole stage (``stage=k``), or of the envs sent with ``env_ids``.

        With ``env_ids``: every env whose result has arrived, up to ``max_batch``, as soon as
        ``max_batch`` have or ``timeout`` seconds have passed (at least one; ``infos["env_ids"]``
        says which, in the order they finished).
        """
        pool = self._open_pool()
        idle = EnvStatus.IDLE
        if stage is not None:
            if max_batch is not None or timeout is not None:
                raise ValueError("recv(stage=k) takes no max_batch or timeout")
            gids = pool.layout.stage_envs(stage)
            records = [pool.envs[gid] for gid in gids.tolist()]
            if any(env.status is idle or env.by_ids for env in records):
                raise NoAsyncCallError(f"recv(stage={stage}) without send(stage={stage})")
            pool.wait(pool.all_ready(gids.tolist()))
            return self._results.gather(gids, slice(gids[0], gids[-1] + 1))
        outstanding = sum(1 for env in pool.envs if env.status is not idle and env.by_ids)
        if outstanding == 0:
            raise NoAsyncCallError("recv() without send(env_ids=...): no env has actions in flight")
        if max_batch is None and timeout is None and self.plan is not None and self.plan.max_batch is not None:
            max_batch, timeout = self.plan.max_batch, self.plan.timeout  # the layout plan's batching
        batch = outstanding if max_batch is None else check_positive_int("max_batch", max_batch)
        want = min(batch, outstanding)
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        deadline = None if timeout is None else time.monotonic() + timeout
        ready = pool.ready_queue
        pool.pump_arrived()
        if not pool.wait(lambda: len(ready) >= want, deadline):
            pool.wait(lambda: len(ready) >= 1)
        pool.pump_arrived()  # whatever else finished meanwhile goes in this batch too
        gids = np.array([ready.popleft() for _ in range(min(batch, len(ready)))], dtype=np.int64)
        return self._results.gather(gids, gids, with_ids=True)

    def set_pipeline_stages(self, stages: int) -> None:
        """Regroup the envs into ``stages`` pipeline stages (workers and episodes stay as they are).

        No action may be in flight. Refused for envs sharing one physics world, whose physics step
        was divided by the stage count when the workers started.
        """
        pool = self._open_pool()
        layout = Layout(self.num_envs, self.num_workers, stages)
        if layout.num_stages == self.pipeline_stages:
            return
        in_flight = pool.in_flight()
        if len(in_flight):
            raise AlreadyPendingCallError(f"set_pipeline_stages: envs {in_flight.tolist()} still have actions in flight; recv() them first")
        if self.shared_physics:
            raise RuntimeError("set_pipeline_stages: these envs share one physics world whose step was divided by the stage count at start; build a new vector env")
        pool.regroup(layout)

    @profiling.timed
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step all N envs (plain Gymnasium semantics, in the vector env's ``autoreset_mode``)."""
        pool = self._pool
        if pool.closed:  # (``_open_pool``'s test, without its call: the hot path)
            raise ClosedEnvironmentError(_CLOSED)
        gids = pool.all_ids
        if pool.busy_envs or pool.failed:
            pool.check_idle(gids, "step()")
        if self._results.ended is not None:
            self._check_not_ended(gids, "step()")
        dtypes = self._write_actions(actions, gids, slice(None))
        if not pool.fresh:  # (an env of a replaced worker is reset by its next step: the records' path)
            ended = pool.step_whole(dtypes)
            if ended is not None:
                return self._results.gather_whole(ended)
        else:
            pool.send_steps(gids, False, dtypes)
        # Every env was idle, so the commands in flight are this step's (and the resends of a
        # restart): it is done when none is left, which is cheaper to see than every env's status.
        pool.wait(pool.no_commands)
        return self._results.gather(gids, slice(None))

    @profiling.timed
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs, or those in ``options["reset_mask"]``; env i gets seed ``seed + i``.

        The envs reset must have no action in flight (their transitions would be lost); other
        envs may, and their results are delivered by ``recv`` as usual.
        """
        pool = self._open_pool()
        n = self.num_envs
        int_seed = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif int_seed:
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed must be None, an int or {n} seeds, got {len(seeds)} seeds")
        options = dict(options) if options is not None else None  # the caller's dict stays as it was
        mask = np.ones(n, dtype=bool)
        if options is not None and "reset_mask" in options:
            mask = options.pop("reset_mask")
            if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (n,):
                came = f"an array of dtype {mask.dtype} and shape {mask.shape}" if isinstance(mask, np.ndarray) else f"a {type(mask).__name__}"
                raise BatchTypeError(f"options['reset_mask'] must be a bool numpy array of shape ({n},), got {came}: {mask!r}")
            if not mask.any():
                raise ValueError("options['reset_mask'] must select at least one env")
        gids = np.flatnonzero(mask)
        pool.check_idle(gids, "reset()", stepping=False)
        if int_seed:
            pool.seed_base = int(seed)
        infos: dict[str, Any] = {}
        for gid, info in pool.reset(gids, seeds, options):
            add_info(infos, info, gid, n)
        # Envs not reset keep the observation the caller last saw (one in flight has no newer one).
        return self._results.keep_reset(gids), infos

    # -- profiler ---------------------------------------------------------------------------------
    def start_profile(self) -> None:
        """Time where the rollout's wall time goes from now on (see ``profile_report``).

        Examples:
            >>> envs = PipelineVectorEnv(fns, profile=True)   # or envs.start_profile()
            >>> ...                                           # the rollout
            >>> envs.profile_report()["physics"]
        """
        self._profile("start")
        self._clock = profiling.MainClock()

    def stop_profile(self) -> None:
        """Stop timing (the envs run their untimed code again)."""
        self._profile("stop")
        self._clock = None

    def reset_profile(self) -> None:
        """Start the breakdown over (profiling stays on)."""
        if self._clock is None:
            raise RuntimeError("the profiler is off: PipelineVectorEnv(..., profile=True) or start_profile() first")
        self._profile("reset")
        self._clock.reset()

    def profile_report(self) -> dict[str, Any]:
        """Seconds per category since profiling started or was reset (``fastenv.vector.profiling``).

        Worker categories (``physics``, ``step``, ``observe``, ``reset``) are summed over the
        workers; ``transport_wait`` (the caller's time inside fastenv's calls) and ``policy`` (the
        caller's time between them) are wall time; ``wall`` is the time since the start; ``counts``
        the env calls of each category.
        """
        if self._clock is None:
            raise RuntimeError("the profiler is off: PipelineVectorEnv(..., profile=True) or start_profile() first")
        workers = [rep for rep in self._profile("report") if rep is not None]
        return profiling.report(workers, self._clock)

    def _profile(self, action: str) -> list[Any]:
        gids = np.array([worker.env_ids[0] for worker in self._open_pool().workers])  # one env per worker
        return list(self._call(gids, profiling.ProfileRequest(action), (), {}))

    # -- the envs' attributes and methods -------------------------------------------------------
    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` (or read it, if not callable) on every env; results in env order.

        A name no env has raises ``AttributeError`` (a ``WorkerError`` too).
        """
        return self.call_at(None, name, *args, **kwargs)

    def call_at(self, env_ids: Sequence[int] | None, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """``call`` on some envs only (None: all); results in the order of ``env_ids``."""
        return self._call(env_ids, name, args, kwargs)

    def apply(self, fn: Callable[..., Any], *args: Any, env_ids: Sequence[int] | None = None, **kwargs: Any) -> tuple[Any, ...]:
        """Run ``fn(env, *args, **kwargs)`` inside the workers on each env (or ``env_ids``).

        Examples:
            >>> envs.apply(lambda env: type(env.unwrapped).__name__)
        """
        return self._call(env_ids, CloudpickleWrapper(fn), args, kwargs)

    def _call(self, env_ids: Sequence[int] | None, target: Any, args: tuple, kwargs: dict) -> tuple[Any, ...]:
        pool = self._open_pool()
        gids = pool.all_ids if env_ids is None else pool.layout.check_env_ids(env_ids)
        return pool.call(gids, target, args, kwargs)

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every env (``AttributeError`` where it has none)."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every env: one value for all, or a list/tuple of N values."""
        pool = self._open_pool()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs one value or {self.num_envs} values, got {len(values)}")
        pool.set_attr(pool.all_ids, name, values)

    def render(self) -> tuple[Any, ...] | None:
        return self.call("render")

    def in_flight(self) -> np.ndarray:
        """Ids of the envs whose actions were sent and whose results were not yet received (none once closed)."""
        return np.zeros(0, dtype=np.int64) if self.closed else self._pool.in_flight()

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers (asking first, then killing) and free the arrays.

        Warns (as AsyncVectorEnv's does) when envs still have actions in flight: their results are dropped.
        """
        if self._pool is not None:
            dropped = self._pool.in_flight().tolist() if self._pool.busy_envs and not self._pool.closed else []
            self._pool.close()  # first: a warning turned into an error must not leave the workers running
            if dropped:
                gym.logger.warn(
                    f"Calling `close` while envs {dropped} have actions in flight "
                    "(sent, their results not received): those results are dropped."
                )

    def close(self, **kwargs: Any) -> None:
        if self.closed:
            return
        self.close_extras(**kwargs)

    def __enter__(self) -> PipelineVectorEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        return f"PipelineVectorEnv(num_envs={self.num_envs}, num_workers={self.num_workers}, pipeline_stages={self.pipeline_stages})"


# What tunes ``layout="auto"`` when no resolver is given: the tuner, which builds vector envs to measure
# layouts and so sits above this layer. Named here, imported only when a layout is to be tuned.
DEFAULT_TUNER = "fastenv.tuning:plan_for"


def _resolve_plan(
    layout: Any,
    tune_options: Mapping[str, Any] | None,
    resolver: LayoutResolver | None,
    env_fns: list,
    num_workers: Any,
    stages: Any,
    context: str,
) -> Plan | None:
    """The plan a vector env runs for its ``layout`` argument (None: none), by ``resolver`` if given."""
    auto = isinstance(layout, str) and layout == "auto"
    if tune_options is not None and (layout is None or (resolver is None and not auto)):
        raise ValueError("tune_options are for layout='auto'")
    if layout is None:
        return None
    if num_workers is not None or stages is not None:
        raise ValueError(
            f"layout sets num_workers and pipeline_stages; give a layout or those, not both "
            f"(got num_workers={num_workers}, pipeline_stages={stages})"
        )
    if resolver is None and not auto:
        return read_plan(layout, len(env_fns))
    if resolver is None:
        module, _, name = DEFAULT_TUNER.partition(":")
        resolver = getattr(importlib.import_module(module), name)
    return resolver(env_fns, layout, tune_options, context=context)
