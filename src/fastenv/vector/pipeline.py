"""PipelineVectorEnv: envs across worker processes, stepped whole, by pipeline stage, or as they get ready.

The vector env's API and set-up are here; its talk with the workers (commands, replies, restarts)
is ``dispatch``'s and the results it hands back ``results``', both mixed into the class.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import CloudpickleWrapper, batch_space

from fastenv import machine
from fastenv._validation import batch_action_checker, check_positive_int
from fastenv.core.arrays import put_rows, take_rows
from fastenv.core.infos import add_info
from fastenv.vector import profiling, shutdown
from fastenv.vector import worker as w
from fastenv.vector.devices import worker_environments
from fastenv.vector.dispatch import (
    _EMPTY,
    IDLE,
    PENDING,  # noqa: F401  (re-exported: its home before)
    READY,  # noqa: F401  (re-exported: its home before)
    Restart,
    _Command,
    _EnvState,
    _WorkerDispatch,
)
from fastenv.vector.layout import Layout
from fastenv.vector.progress import BuildProgress
from fastenv.vector.results import _Results
from fastenv.vector.shared import holds_exactly, leaf_items, leaf_specs
from fastenv.vector.transport import ProcessTransport, Transport, Worker, WorkerError

# What turns a vector env's ``layout`` argument ("auto", a plan, its dict or its JSON's path) into
# the plan it runs: ``resolver(env_fns, layout, tune_options, context=...)``. The tuner, which
# builds vector envs to measure layouts, installs its own when imported (``import fastenv``
# does): the vector env runs plans without depending on what makes them.
_layout_resolver: Callable[..., Any] | None = None


def set_layout_resolver(resolver: Callable[..., Any]) -> None:
    """Install what resolves ``PipelineVectorEnv(..., layout=...)`` into a plan (see ``_layout_resolver``)."""
    global _layout_resolver
    _layout_resolver = resolver


def default_num_workers(num_envs: int, pipeline_stages: int) -> int:
    """The most workers, up to the CPU count, that split every stage evenly."""
    per_stage = max(num_envs // max(pipeline_stages, 1), 1)
    cpus = machine.available_cpus()  # affinity and cgroup quota, not the host's core count
    return max(d for d in range(1, per_stage + 1) if per_stage % d == 0 and d <= cpus)


class PipelineVectorEnv(_WorkerDispatch, _Results, VectorEnv):
    """A vector env over worker processes, with pipeline stages and dynamic batching.

    Each worker holds several envs; stage k is the slice ``[k*N/S, (k+1)*N/S)`` and env i lives on
    worker ``i % W``, so every stage is spread over all workers. ``step`` has plain Gymnasium
    semantics for all N envs. ``send(actions, stage=k)`` returns at once and ``recv(stage=k)``
    collects that stage, so the policy can run on one stage while the others step.
    ``send(actions, env_ids=ids)`` with ``recv(max_batch=B, timeout=T)`` serves whichever envs are
    ready first. Autoreset is SAME_STEP with ``infos["final_obs"]``/``["final_info"]``.

    Each env receives its action row as SyncVectorEnv hands it on: a numpy array's dtype and
    values unchanged (float64 rows for a float32 Box stay float64). Other inputs (lists, Python
    scalars, tensors) are converted with ``np.asarray`` first, so an env gets e.g. ``np.int64``
    where SyncVectorEnv would pass a Python int. When an env raises, ``step``/``recv`` raise
    ``WorkerError`` carrying the results of the envs that did step (``.results``, rows where
    ``.valid``); the envs without one (``.failed_env_ids``) must be reset before they step again.

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
            ``fastenv tune --out``), or "auto" to tune one now (``fastenv.tune`` with
            ``tune_options``: ``policy`` or ``policy_cost``, ``max_trials``...). The plan sets
            num_workers, pipeline_stages, threads_per_worker and spin_wait, and ``recv``'s
            default ``max_batch``/``timeout`` when it batches dynamically; ``self.plan`` keeps it.
            Whatever is given is resolved by the layout resolver (``set_layout_resolver``).
        tune_options: keyword arguments of ``fastenv.tune`` for ``layout="auto"``.
        render_devices: the GPUs the workers render on: None (each inherits this process's
            environment), "auto" (the visible GPUs: ``CUDA_VISIBLE_DEVICES``'s, else the machine's)
            or a list of GPU ids; worker w gets ``devices[w % len(devices)]`` as its
            ``CUDA_VISIBLE_DEVICES`` and ``MUJOCO_EGL_DEVICE_ID`` (local workers; with Ray, its
            ``num_gpus`` assigns GPUs).

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
        info_format: str = "gymnasium",
        context: str = "spawn",
        backend: str = "local",
        ray_options: Mapping[str, Any] | None = None,
        profile: bool = False,
        layout: Any = None,
        tune_options: Mapping[str, Any] | None = None,
        progress: bool | None = None,
        render_devices: Any = None,
    ) -> None:
        w.check_not_bootstrapping()  # a worker re-running the user's script must not build workers
        self.closed = True  # until the workers are up, close() has nothing to do
        self._clock: profiling.MainClock | None = None
        env_fns = list(env_fns)
        if not env_fns:
            raise ValueError("env_fns must hold at least one env constructor, got an empty sequence")
        if not all(callable(fn) for fn in env_fns):
            raise TypeError("env_fns must be callables that build an env")
        if render_devices is not None and backend == "ray":
            raise ValueError("render_devices is for local workers; with backend='ray' give ray_options={'num_gpus': ...}")
        worker_environments(render_devices, 1)  # a GPU id that is not visible fails here, before tuning or any worker
        self.plan = self._resolve_plan(layout, tune_options, env_fns, num_workers, pipeline_stages, context)
        if self.plan is not None:
            num_workers, pipeline_stages = self.plan.num_workers, self.plan.pipeline_stages
            threads_per_worker, spin_wait = self.plan.threads_per_worker, self.plan.spin_wait
        pipeline_stages = 1 if pipeline_stages is None else pipeline_stages
        if context == "fork":
            raise ValueError("context='fork' is refused: EGL/OpenGL contexts do not survive fork; use 'spawn' or 'forkserver'")
        if num_workers is None:
            num_workers = default_num_workers(len(env_fns), pipeline_stages)
        self.layout = Layout(len(env_fns), num_workers, pipeline_stages)
        if not step_timeout > 0 or not startup_timeout > 0:
            raise ValueError(f"timeouts must be > 0, got step_timeout={step_timeout}, startup_timeout={startup_timeout}")
        if threads_per_worker is not None:
            check_positive_int("threads_per_worker", threads_per_worker)
        self.step_timeout = float(step_timeout)
        self.startup_timeout = float(startup_timeout)
        self.threads_per_worker = threads_per_worker
        self.max_restarts = int(max_restarts)
        if spin_wait < 0:
            raise ValueError(f"spin_wait must be >= 0 seconds, got {spin_wait}")
        self.spin_wait = float(spin_wait)
        if info_format not in ("gymnasium", "per_env"):
            raise ValueError(f"info_format must be 'gymnasium' or 'per_env', got {info_format!r}")
        self.info_format = info_format
        self.worker_environments = worker_environments(render_devices, self.layout.num_workers)
        if backend == "local":
            if ray_options is not None:
                raise ValueError("ray_options are for backend='ray'")
            self._transport: Transport = ProcessTransport(
                mp.get_context(context), pipeline_stages, threads_per_worker, self.spin_wait, self.worker_environments
            )
        elif backend == "ray":
            from fastenv.vector.ray_backend import RayTransport

            self._transport = RayTransport(dict(ray_options or {}), self.layout.num_workers, pipeline_stages, threads_per_worker)
        else:
            raise ValueError(f"backend must be 'local' or 'ray', got {backend!r}")
        self.backend = backend
        self._env_fns = env_fns
        self.num_envs = self.layout.num_envs
        self.num_workers = self.layout.num_workers
        self.pipeline_stages = self.layout.num_stages

        self._envs = [_EnvState() for _ in range(self.num_envs)]
        self._busy_envs = 0  # envs not idle (sent, or arrived and not yet received): the hot path checks this
        self._fresh: set[int] = set()  # envs of a replaced worker, to be reset by their next step or reset()
        self._ready_queue: deque[int] = deque()  # envs sent with env_ids whose results arrived, in order
        self._failed: set[int] = set()  # envs that lost their state in a worker error: reset before stepping
        self._commands: dict[int, _Command] = {}
        self._next_cmd = 0
        self._seed_base: int | None = None
        self._workers = [Worker(i, self.layout.worker_envs(i)) for i in range(self.num_workers)]
        self._all_ids = np.arange(self.num_envs)
        self._cache_groups()
        self.closed = False
        shutdown.watch(self)  # SIGTERM and exit close the workers as Ctrl-C does
        try:
            descriptions = []
            with BuildProgress(self.num_envs, self.num_workers, enabled=progress) as building:
                for worker in self._workers:
                    self._spawn(worker)
                for worker in self._workers:
                    descriptions.append(self._await_ready(worker))
                    building.ready()
            self._setup_spaces(descriptions)
            for worker in self._workers:
                self._attach(worker)
            if profile:
                self.start_profile()
        except BaseException:
            self.close()
            raise

    # -- set-up ---------------------------------------------------------------------------------
    @staticmethod
    def _resolve_plan(layout: Any, tune_options: Mapping[str, Any] | None, env_fns: list, num_workers: Any, stages: Any, context: str) -> Any:
        if layout is None:
            if tune_options is not None:
                raise ValueError("tune_options are for layout='auto'")
            return None
        if num_workers is not None or stages is not None:
            raise ValueError(
                f"layout sets num_workers and pipeline_stages; give a layout or those, not both "
                f"(got num_workers={num_workers}, pipeline_stages={stages})"
            )
        if _layout_resolver is None:
            raise RuntimeError("no layout resolver is installed: `import fastenv` installs the tuner's (fastenv.tune)")
        return _layout_resolver(env_fns, layout, tune_options, context=context)

    def _spawn(self, worker: Worker) -> None:
        self._transport.start(worker, [self._env_fns[i] for i in worker.env_ids])
        worker.deadline = time.monotonic() + self.startup_timeout

    def _await_ready(self, worker: Worker) -> dict[str, Any]:
        description = self._transport.ready(worker, self.startup_timeout)
        worker.pid = description.get("pid")
        worker.deadline = float("inf")
        return description

    def _setup_spaces(self, descriptions: list[dict[str, Any]]) -> None:
        first = descriptions[0]
        for i, d in enumerate(descriptions[1:], 1):
            if d["observation_space"] != first["observation_space"] or d["action_space"] != first["action_space"]:
                raise ValueError(
                    f"worker {i}'s envs have spaces {d['observation_space']} / {d['action_space']}, "
                    f"worker 0's {first['observation_space']} / {first['action_space']}: all envs must match"
                )
        self.single_observation_space = first["observation_space"]
        self.single_action_space = first["action_space"]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**first["metadata"], "autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = first["render_mode"]
        self.spec = first["spec"]
        self.shared_physics = first["shared_physics"]
        self.physics_scaled = first["physics_scaled"]
        arrays = self._transport.arrays(w.array_specs(self.single_observation_space, self.single_action_space), self.num_envs)
        (self._obs, self._final_obs, self._actions, self._rewards, self._terminations, self._truncations) = w.buffers(
            arrays, self.single_observation_space, self.single_action_space
        )
        self._last_obs = take_rows(self._obs, slice(None))  # what the caller last saw, per env
        specs = leaf_specs(self.single_action_space, "actions")
        self._action_leaves = {path: arrays[path] for path, _, _ in specs}  # in their wide dtypes
        self._action_dtypes = {path: dtype for path, _, dtype in specs}
        self._action_dtype = specs[0][2] if specs[0][0] == "actions" else None  # a space of one leaf
        self._check_actions = batch_action_checker(self.single_action_space)

    def _attach(self, worker: Worker) -> None:
        self._transport.attach(worker, self.single_observation_space, self.single_action_space)

    # -- public API -----------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this vector env is closed")

    def _check_idle(self, gids: np.ndarray, what: str, stepping: bool = True) -> None:
        if not self._busy_envs and not (stepping and self._failed):
            return
        busy = [gid for gid in gids.tolist() if self._envs[gid].status != IDLE]
        if busy:
            raise RuntimeError(f"{what}: envs {busy} still have actions in flight; recv() them first")
        if stepping and self._failed:
            lost = sorted(self._failed.intersection(gids.tolist()))
            if lost:
                raise RuntimeError(
                    f"{what}: envs {lost} have no result of their last step (a worker error): "
                    "reset them first, reset(options={'reset_mask': mask})"
                )

    def _write_actions(self, actions: Any, gids: np.ndarray, rows: Any) -> dict[str, Any] | None:
        """Put the actions in shared memory; returns how the workers hand them on (``action_rows``).

        None when every leaf has the space's dtype; else, for each leaf that has not, the caller's
        dtype, or its rows (by env id) where the leaf's wide dtype cannot hold them exactly.
        """
        actions = self._check_actions(actions, len(gids))
        if self._action_dtype is not None and actions.dtype == self._action_dtype:  # the hot path
            self._actions[rows] = actions
            return None
        dtypes: dict[str, Any] = {}
        for path, leaf in leaf_items(self.single_action_space, actions, "actions"):
            buffer = self._action_leaves[path]
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

    @profiling.timed
    def send(self, actions: Any, *, stage: int | None = None, env_ids: Sequence[int] | None = None) -> None:
        """Start stepping one stage (``stage=k``) or some envs (``env_ids=ids``); returns at once.

        ``actions`` holds one action per env of the stage / per id, in that order.
        """
        self._check_open()
        if (stage is None) == (env_ids is None):
            raise ValueError("send() needs exactly one of stage= or env_ids=")
        if stage is not None:
            gids = self.layout.stage_envs(stage)
            self._check_idle(gids, f"send(stage={stage})")
            dtypes = self._write_actions(actions, gids, slice(gids[0], gids[-1] + 1))
            self._dispatch_steps(gids, False, dtypes)
        else:
            gids = self.layout.check_env_ids(env_ids)
            self._check_idle(gids, "send(env_ids=...)")
            dtypes = self._write_actions(actions, gids, gids)
            self._dispatch_steps(gids, True, dtypes)

    @profiling.timed
    def recv(
        self, *, stage: int | None = None, max_batch: int | None = None, timeout: float | None = None
    ) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Collect results: of a whole stage (``stage=k``), or of the envs sent with ``env_ids``.

        With ``env_ids``: every env whose result has arrived, up to ``max_batch``, as soon as
        ``max_batch`` have or ``timeout`` seconds have passed (at least one; ``infos["env_ids"]``
        says which, in the order they finished).
        """
        self._check_open()
        if stage is not None:
            if max_batch is not None or timeout is not None:
                raise ValueError("recv(stage=k) takes no max_batch or timeout")
            gids = self.layout.stage_envs(stage)
            records = [self._envs[gid] for gid in gids.tolist()]
            if any(env.status == IDLE or env.by_ids for env in records):
                raise RuntimeError(f"recv(stage={stage}) without send(stage={stage})")
            self._wait(self._all_ready(gids.tolist()))
            return self._gather(gids, slice(gids[0], gids[-1] + 1))
        outstanding = sum(1 for env in self._envs if env.status != IDLE and env.by_ids)
        if outstanding == 0:
            raise RuntimeError("recv() without send(env_ids=...): no env has actions in flight")
        if max_batch is None and timeout is None and self.plan is not None and self.plan.max_batch is not None:
            max_batch, timeout = self.plan.max_batch, self.plan.timeout  # the layout plan's batching
        batch = outstanding if max_batch is None else check_positive_int("max_batch", max_batch)
        want = min(batch, outstanding)
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout must be >= 0 seconds, got {timeout}")
        deadline = None if timeout is None else time.monotonic() + timeout
        self._pump_arrived()
        if not self._wait(lambda: len(self._ready_queue) >= want, deadline):
            self._wait(lambda: len(self._ready_queue) >= 1)
        self._pump_arrived()  # whatever else finished meanwhile goes in this batch too
        gids = np.array([self._ready_queue.popleft() for _ in range(min(batch, len(self._ready_queue)))], dtype=np.int64)
        return self._gather(gids, gids, with_ids=True)

    def set_pipeline_stages(self, stages: int) -> None:
        """Regroup the envs into ``stages`` pipeline stages (workers and episodes stay as they are).

        No action may be in flight. Refused for envs sharing one physics world, whose physics step
        was divided by the stage count when the workers started.
        """
        self._check_open()
        layout = Layout(self.num_envs, self.num_workers, stages)
        if layout.num_stages == self.pipeline_stages:
            return
        if len(self.in_flight()):
            raise RuntimeError(f"set_pipeline_stages: envs {self.in_flight().tolist()} still have actions in flight; recv() them first")
        if self.shared_physics:
            raise RuntimeError("set_pipeline_stages: these envs share one physics world whose step was divided by the stage count at start; build a new vector env")
        self.layout, self.pipeline_stages = layout, layout.num_stages
        self._cache_groups()

    @profiling.timed
    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step all N envs (plain Gymnasium semantics, SAME_STEP autoreset)."""
        self._check_open()
        gids = self._all_ids
        if self._busy_envs or self._failed:
            self._check_idle(gids, "step()")
        dtypes = self._write_actions(actions, gids, slice(None))
        if not self._fresh:  # (an env of a replaced worker is reset by its next step: the records' path)
            ended = self._step_whole(dtypes)
            if ended is not None:
                return self._gather_whole(ended)
        else:
            self._dispatch_steps(gids, False, dtypes)
        # Every env was idle, so the commands in flight are this step's (and the resends of a
        # restart): it is done when none is left, which is cheaper to see than every env's status.
        self._wait(self._no_commands)
        return self._gather(gids, slice(None))

    @profiling.timed
    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Reset all envs, or those in ``options["reset_mask"]``; env i gets seed ``seed + i``.

        The envs reset must have no action in flight (their transitions would be lost); other
        envs may, and their results are delivered by ``recv`` as usual.
        """
        self._check_open()
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
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
                raise ValueError(f"options['reset_mask'] must be a bool numpy array of shape ({n},), got {mask!r}")
            if not mask.any():
                raise ValueError("options['reset_mask'] must select at least one env")
        gids = np.flatnonzero(mask)
        self._check_idle(gids, "reset()", stepping=False)
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            self._seed_base = int(seed)
        for worker, mine in self._split(gids):
            self._ensure_alive(worker)
            for gid in mine:
                if seeds[gid] is None and self._envs[gid].restart == Restart.NEXT:
                    # A fresh env (its worker was replaced) has no generator state to go on from:
                    # seed it as a restart does, so its episodes stay reproducible.
                    seeds[gid] = self._restart_seed(gid, worker.restarts)
        commands = self._request(gids, w.RESET, lambda cmd, mine: (w.RESET, cmd, mine, [seeds[g] for g in mine], options))
        infos: dict[str, Any] = {}
        failures = []
        for command in commands:
            if isinstance(command.result, Exception):
                failures.append(str(command.result))
                continue
            for gid, info, _ in command.result:
                add_info(infos, info, gid, n)
        errors = {}
        for gid in gids.tolist():
            env = self._envs[gid]
            if env.error is not None:
                errors[gid] = env.error
            env.status, env.error, env.restart, env.info, env.final = IDLE, None, Restart.NONE, _EMPTY, None
        self._fresh.difference_update(gids.tolist())
        self._failed.difference_update(gids.tolist())
        self._failed.update(errors)  # an env whose reset raised has no state to step from either
        if errors or failures:
            text, tb, _ = next(iter(errors.values())) if errors else (failures[0], "", None)
            raise WorkerError(f"reset failed for envs {sorted(errors) or '?'}: {text}\n{tb}")
        # Envs not reset keep the observation the caller last saw (one in flight has no newer one).
        put_rows(self._last_obs, gids, take_rows(self._obs, gids))
        return take_rows(self._last_obs, slice(None)), infos

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
        gids = np.array([worker.env_ids[0] for worker in self._workers])  # one env per worker
        return list(self._call(gids, profiling.ProfileRequest(action), (), {}))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` (or read it, if not callable) on every env; results in env order."""
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
        self._check_open()
        gids = np.arange(self.num_envs) if env_ids is None else self.layout.check_env_ids(env_ids)
        results: dict[int, Any] = {}
        for command in self._request(gids, w.CALL, lambda cmd, mine: (w.CALL, cmd, mine, target, args, kwargs)):
            if isinstance(command.result, Exception):
                raise command.result
            results.update(zip(command.gids, command.result))
        return tuple(results[i] for i in gids.tolist())

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every env."""
        return self.call(name)

    def set_attr(self, name: str, values: Any) -> None:
        """Set ``name`` on every env: one value for all, or a list/tuple of N values."""
        self._check_open()
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise ValueError(f"set_attr needs one value or {self.num_envs} values, got {len(values)}")
        gids = np.arange(self.num_envs)
        for command in self._request(gids, w.SET_ATTR, lambda cmd, mine: (w.SET_ATTR, cmd, mine, name, [values[g] for g in mine])):
            if isinstance(command.result, Exception):
                raise command.result

    def render(self) -> tuple[Any, ...] | None:
        return self.call("render")

    def in_flight(self) -> np.ndarray:
        """Ids of the envs whose actions were sent and whose results were not yet received."""
        return np.array([gid for gid, env in enumerate(self._envs) if env.status != IDLE], dtype=np.int64)

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the workers (they change when a worker is restarted)."""
        return [worker.pid for worker in self._workers if worker.pid is not None]

    def close_extras(self, **kwargs: Any) -> None:
        """Stop the workers (asking first, then killing) and free the arrays."""
        self._obs = self._final_obs = self._actions = None
        self._rewards = self._terminations = self._truncations = None
        self._transport.stop(self._workers)

    def close(self, **kwargs: Any) -> None:
        if getattr(self, "closed", True):
            return
        self.closed = True
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
