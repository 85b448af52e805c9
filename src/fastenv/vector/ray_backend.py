"""The vector env's workers as Ray actors across a Ray cluster (``backend="ray"``).

Same commands, same vector-env logic as local processes; only the transport differs. Actions go
to an actor with its command; the actor returns its envs' batched results (observations, final
observations, rewards, flags) as numpy arrays, which Ray moves through its object store
(zero-copy reads), not pickled per env. A dead actor (its process or node lost) surfaces as
``RayActorError`` on the result, and the vector env restarts it as it does a local worker.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import CloudpickleWrapper

from fastenv._deps import require
from fastenv.core.arrays import put_rows, take_rows
from fastenv.vector import worker as w
from fastenv.vector.transport import Worker, WorkerError

STRATEGIES = ("SPREAD", "PACK", "STRICT_SPREAD", "STRICT_PACK")


@dataclass(frozen=True)
class RayOptions:
    """Where and how the actors run (``PipelineVectorEnv(..., backend="ray", ray_options={...})``)."""

    address: str | None = None
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    resources: Mapping[str, float] = field(default_factory=dict)
    placement_strategy: str = "SPREAD"
    runtime_env: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.placement_strategy not in STRATEGIES:
            raise ValueError(f"placement_strategy must be one of {list(STRATEGIES)}, got {self.placement_strategy!r}")
        if self.num_cpus < 0 or self.num_gpus < 0:
            raise ValueError(f"num_cpus and num_gpus must be >= 0, got {self.num_cpus} and {self.num_gpus}")


class RayWorker:
    """The actor: a worker's envs, with local buffers instead of shared memory."""

    def __init__(
        self, env_fns: CloudpickleWrapper, env_ids: list[int], pipeline_stages: int, threads: int | None, autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP
    ) -> None:
        self.env_ids = list(env_ids)
        self.core, self.description = w.start_core(env_fns, env_ids, range(len(env_ids)), pipeline_stages, threads, autoreset_mode)
        self.local = {gid: j for j, gid in enumerate(self.env_ids)}

    def describe(self) -> dict[str, Any]:
        return self.description

    def attach(self, obs_space: Any, act_space: Any) -> None:
        arrays = {path: np.zeros((len(self.env_ids), *shape), dtype) for path, shape, dtype in w.array_specs(obs_space, act_space)}
        self.buffers = w.buffers(arrays, obs_space, act_space)
        self.core.attach(*self.buffers)

    def handle(self, message: tuple, actions: Any = None) -> tuple[list[tuple], dict[str, Any] | None]:
        """Carry out a command; return its replies and, for steps and resets, the envs' results."""
        kind = message[0]
        gids = list(message[2]) if kind in (w.STEP, w.RESET) else []
        rows = [self.local[g] for g in gids]
        if actions is not None:
            put_rows(self.buffers[2], rows, actions)
        replies: list[tuple] = []
        w.serve(self.core, message, replies.append)
        if not gids:
            return replies, None
        obs, final_obs, _, rewards, terminations, truncations = self.buffers
        return replies, {
            "gids": np.asarray(gids),
            "obs": take_rows(obs, rows),
            "final_obs": take_rows(final_obs, rows),
            "rewards": rewards[rows],
            "terminations": terminations[rows],
            "truncations": truncations[rows],
        }

    def close(self) -> None:
        self.core.close()


@dataclass
class _Actor:
    actor: Any
    ready_ref: Any
    pending: deque = field(default_factory=deque)
    dead: bool = False


class RayTransport:
    """Workers as Ray actors, one placement-group bundle each (so the strategy spreads or packs them)."""

    def __init__(
        self,
        options: Mapping[str, Any],
        num_workers: int,
        pipeline_stages: int,
        threads: int | None,
        autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    ) -> None:
        self.ray = require("ray", "ray", "Ray")
        unknown = sorted(set(options) - set(RayOptions.__dataclass_fields__))
        if unknown:
            raise ValueError(f"unknown ray_options {unknown}; allowed: {sorted(RayOptions.__dataclass_fields__)}")
        self.options = RayOptions(**options)
        self._stages, self._threads, self._autoreset_mode = pipeline_stages, threads, autoreset_mode
        if not self.ray.is_initialized():
            # Started here but never shut down here: other code in this process may use Ray too
            # (another vector env, the user's own tasks). Ray stops with the process.
            self.ray.init(address=self.options.address, include_dashboard=False, logging_level="warning", log_to_driver=False)
        from ray.util.placement_group import placement_group

        bundle: dict[str, float] = {"CPU": self.options.num_cpus, **dict(self.options.resources)}
        if self.options.num_gpus:
            bundle["GPU"] = self.options.num_gpus
        self._pg = placement_group([dict(bundle) for _ in range(num_workers)], strategy=self.options.placement_strategy)
        self._actor_class = self.ray.remote(RayWorker)
        self._arrays: dict[str, np.ndarray] | None = None

    def _actor_options(self, index: int) -> dict[str, Any]:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        runtime_env = dict(self.options.runtime_env or {})
        env_vars = {**w.limit_threads(self._threads), **dict(runtime_env.get("env_vars", {}))}
        if env_vars:
            runtime_env["env_vars"] = env_vars
        return dict(
            num_cpus=self.options.num_cpus,
            num_gpus=self.options.num_gpus,
            resources=dict(self.options.resources) or None,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=index),
            runtime_env=runtime_env or None,
            max_restarts=0,  # the vector env restarts workers itself, resetting their envs
            max_concurrency=1,
        )

    def start(self, worker: Worker, env_fns: Sequence[Callable[[], gym.Env]]) -> None:
        actor = self._actor_class.options(**self._actor_options(worker.index)).remote(
            CloudpickleWrapper(list(env_fns)), worker.env_ids.tolist(), self._stages, self._threads, self._autoreset_mode
        )
        worker.handle = _Actor(actor, actor.describe.remote())

    def ready(self, worker: Worker, timeout: float) -> dict[str, Any]:
        ray = self.ray
        try:
            return ray.get(worker.handle.ready_ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise WorkerError(f"worker {worker.index} built no env within startup_timeout={timeout}s") from exc
        except ray.exceptions.RayError as exc:
            raise WorkerError(f"worker {worker.index} failed to build its envs: {exc}") from exc

    def arrays(self, specs: list, num_envs: int) -> dict[str, np.ndarray]:
        self._arrays = {path: np.zeros((num_envs, *shape), dtype) for path, shape, dtype in specs}
        return self._arrays

    def attach(self, worker: Worker, obs_space: Any, act_space: Any) -> None:
        self._buffers = w.buffers(self._arrays, obs_space, act_space)
        worker.handle.actor.attach.remote(obs_space, act_space)  # runs before any later call

    def send(self, worker: Worker, message: tuple) -> bool:
        handle: _Actor = worker.handle
        if handle.dead:
            return False
        actions = take_rows(self._buffers[2], list(message[2])) if message[0] == w.STEP else None
        handle.pending.append(handle.actor.handle.remote(message, actions))
        return True

    def poll(self, busy: list[Worker], timeout: float) -> list[tuple[Worker, tuple | None]]:
        ray = self.ray
        heads = {wk.handle.pending[0]: wk for wk in busy if wk.handle.pending}
        if not heads:
            return []
        ray.wait(list(heads), num_returns=1, timeout=timeout)
        out: list[tuple[Worker, tuple | None]] = []
        for worker in busy:
            handle: _Actor = worker.handle
            while handle.pending:  # an actor runs its calls in order: take the ready ones in order
                ready, _ = ray.wait([handle.pending[0]], num_returns=1, timeout=0)
                if not ready:
                    break
                ref = handle.pending.popleft()
                try:
                    replies, data = ray.get(ref)
                except ray.exceptions.RayActorError:
                    handle.dead = True
                    handle.pending.clear()
                    out.append((worker, None))
                    break
                if data is not None:
                    self._store(data)
                out += [(worker, reply) for reply in replies]
        return out

    def _store(self, data: dict[str, Any]) -> None:
        gids = data["gids"]
        obs, final_obs, _, rewards, terminations, truncations = self._buffers
        put_rows(obs, gids, data["obs"])
        put_rows(final_obs, gids, data["final_obs"])
        rewards[gids] = data["rewards"]
        terminations[gids] = data["terminations"]
        truncations[gids] = data["truncations"]

    def alive(self, worker: Worker) -> bool:
        return not worker.handle.dead

    def describe_exit(self, worker: Worker) -> str:
        return "its Ray actor died"

    def kill(self, worker: Worker) -> None:
        handle: _Actor = worker.handle
        handle.pending.clear()
        handle.dead = True
        try:
            self.ray.kill(handle.actor, no_restart=True)
        except Exception:  # already gone with its node
            pass

    def stop(self, workers: list[Worker]) -> None:
        ray = self.ray
        closing = [(wk, wk.handle.actor.close.remote()) for wk in workers if wk.handle is not None and not wk.handle.dead]
        for worker, ref in closing:
            try:
                ray.get(ref, timeout=10)
            except Exception:  # a stuck or dead actor is killed below anyway
                pass
        for worker in workers:
            if worker.handle is not None:
                self.kill(worker)
        from ray.util.placement_group import remove_placement_group

        try:
            remove_placement_group(self._pg)
        except Exception:
            pass
