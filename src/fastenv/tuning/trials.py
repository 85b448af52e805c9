"""Measuring layouts: a policy (or a stand-in with its cost) driving live vector envs, each layout timed."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastenv import machine
from fastenv._validation import check_positive_int
from fastenv.core.arrays import leading_dim, put_rows, take_rows
from fastenv.policy_cost import InferenceCost, inference_cost
from fastenv.tuning.space import Candidate
from fastenv.vector.pipeline import PipelineVectorEnv
from fastenv.vector.plan import DEFAULT_SPIN_WAIT


# -- policies --------------------------------------------------------------------------------------
class CostPolicy:
    """A stand-in for a policy that only costs time on its own device: sleeps ``fixed + per_obs * batch``.

    Returns random actions from the action space (seeded). For a policy on a GPU, whose CPU
    cost is small, this is its measured cost without the GPU.
    """

    def __init__(self, fixed: float, per_obs: float = 0.0, seed: int = 0) -> None:
        if fixed < 0 or per_obs < 0:
            raise ValueError(f"policy cost must be >= 0 seconds, got fixed={fixed}, per_obs={per_obs}")
        self.fixed, self.per_obs = float(fixed), float(per_obs)
        self.seed = seed
        self._spaces: dict[int, Any] = {}
        self.single_action_space: Any = None

    def __call__(self, obs: Any) -> Any:
        b = leading_dim(obs)
        time.sleep(self.fixed + self.per_obs * b)
        return self._batch_space(b).sample()

    def _batch_space(self, b: int) -> Any:
        if b not in self._spaces:
            from gymnasium.vector.utils import batch_space

            space = batch_space(self.single_action_space, b)
            space.seed(self.seed + b)
            self._spaces[b] = space
        return self._spaces[b]


def _as_policy(policy: Any, policy_cost: Any, action_space: Any) -> Callable[[Any], Any]:
    if policy is not None and policy_cost is not None:
        raise ValueError("give the policy or its measured cost (policy_cost), not both")
    if policy is None:
        if isinstance(policy_cost, (str, InferenceCost)):  # a preset's name (a VLA's published cost), "A,B"
            cost = inference_cost(policy_cost)
            fixed, per_obs = cost.per_call_s, cost.per_sample_s
        else:
            fixed, per_obs = (policy_cost, 0.0) if isinstance(policy_cost, (int, float)) else (policy_cost or (0.0, 0.0))
        policy = CostPolicy(fixed, per_obs)
    if isinstance(policy, CostPolicy) and policy.single_action_space is None:
        policy.single_action_space = action_space
    if not callable(policy):
        raise TypeError(f"policy must be a callable from a batch of observations to a batch of actions, got {policy!r}")
    return policy


# -- trials ----------------------------------------------------------------------------------------
@dataclass
class Trial:
    candidate: Candidate
    steps_per_s: float
    seconds: float  # wall time the trial took, building included
    calls: int
    predicted_steps_per_s: float | None = None
    bound: str | None = None
    profile: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.candidate.label,
            **dataclasses.asdict(self.candidate),
            "steps_per_s": self.steps_per_s,
            "predicted_steps_per_s": self.predicted_steps_per_s,
            "bound": self.bound,
            "seconds": self.seconds,
        }


def spin_wait_for(cand: Candidate, cpus: int) -> float:
    """Poll briefly for messages only when every process (workers and the caller) has a core of its own."""
    return DEFAULT_SPIN_WAIT if cand.num_workers * cand.threads_per_worker + 1 <= cpus else 0.0


class TrialRunner:
    """Runs layouts on live vector envs, rebuilding the workers only when W or threads change.

    Stages and batching are how the caller drives the envs, so layouts that differ only in those
    share one vector env (``set_pipeline_stages``). Envs continue their episodes across trials.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], Any]],
        policy: Callable[[Any], Any] | None,
        policy_cost: Any,
        *,
        cpus: int,
        trial_seconds: float,
        seed: int,
        vector_options: dict[str, Any],
        min_cycles: int = 3,
    ) -> None:
        self.env_fns = list(env_fns)
        self.n = len(self.env_fns)
        self._policy, self._policy_cost = policy, policy_cost
        self.policy: Callable[[Any], Any] | None = None
        self.cpus = cpus
        self.trial_seconds = trial_seconds
        self.min_cycles = check_positive_int("min_cycles", min_cycles)
        self.seed = seed
        self.vector_options = vector_options
        self.envs: Any = None
        self._key: tuple[int, int] | None = None
        self.obs: Any = None
        self.builds = 0

    def _open(self, cand: Candidate) -> tuple[Any, float]:
        key = (cand.num_workers, cand.threads_per_worker)
        start = time.perf_counter()
        # Envs sharing one physics world divided its step by the stage count at start: rebuild.
        rebuild = self.envs is not None and self.envs.shared_physics and self.envs.pipeline_stages != cand.pipeline_stages
        if self.envs is None or key != self._key or rebuild:
            self.close()
            self.envs = PipelineVectorEnv(
                self.env_fns,
                num_workers=cand.num_workers,
                pipeline_stages=cand.pipeline_stages,
                threads_per_worker=cand.threads_per_worker,
                spin_wait=spin_wait_for(cand, self.cpus),
                **self.vector_options,
            )
            self._key = key
            self.builds += 1
            if self.policy is None:
                self.policy = _as_policy(self._policy, self._policy_cost, self.envs.single_action_space)
            self.obs, _ = self.envs.reset(seed=self.seed)
        elif self.envs.pipeline_stages != cand.pipeline_stages:
            self.envs.set_pipeline_stages(cand.pipeline_stages)
        return self.envs, time.perf_counter() - start

    def run(self, cand: Candidate, profile: bool = False) -> Trial:
        envs, build_s = self._open(cand)
        start = time.perf_counter()
        drive(envs, self.policy, cand, self, seconds=0.0, min_cycles=1)  # warm-up: first renders, a new mode
        if profile:
            envs.start_profile()
        calls, elapsed = drive(envs, self.policy, cand, self, seconds=self.trial_seconds, min_cycles=self.min_cycles)
        report = None
        if profile:
            report = envs.profile_report()
            report["calls"] = calls
            envs.stop_profile()  # later trials on these workers run unprofiled, as every other
        return Trial(cand, calls / elapsed, build_s + time.perf_counter() - start, calls, profile=report)

    def measure_policy(self) -> tuple[tuple[float, float], tuple[float, float]]:
        """The policy's (wall, cpu) cost on the envs' current observations (``measure_policy``)."""
        return measure_policy(self.policy, self.obs, self.n)

    def close(self) -> None:
        if self.envs is not None:
            self.envs.close()
            self.envs = None
            self._key = None

    def memory(self) -> float | None:
        """Bytes resident in the current workers."""
        sizes = [machine.process_memory(pid) for pid in self.envs.worker_pids]
        return None if any(s is None for s in sizes) else float(sum(sizes))


def drive(envs: Any, policy: Callable[[Any], Any], cand: Candidate, state: Any, *, seconds: float, min_cycles: int) -> tuple[int, float]:
    """Roll ``envs`` out with ``policy`` as ``cand`` says, for at least ``seconds`` and ``min_cycles``
    cycles (every env one call). Returns (env calls collected, seconds). Nothing is left in flight.

    ``state.obs`` holds the last observation of every env (read and updated).
    """
    n = envs.num_envs
    want = max(1, min_cycles) * n
    calls = 0
    start = time.perf_counter()
    if cand.mode == "step":
        while calls < want or time.perf_counter() - start < seconds:
            state.obs, *_ = envs.step(policy(state.obs))
            calls += n
        return calls, time.perf_counter() - start
    if cand.mode == "pipeline":
        m = envs.layout.stage_size
        for k in range(envs.pipeline_stages):
            envs.send(policy(take_rows(state.obs, slice(k * m, (k + 1) * m))), stage=k)
        start = time.perf_counter()
        while calls < want or time.perf_counter() - start < seconds:
            for k in range(envs.pipeline_stages):
                obs, *_ = envs.recv(stage=k)
                put_rows(state.obs, slice(k * m, (k + 1) * m), obs)
                calls += m
                envs.send(policy(obs), stage=k)
        elapsed = time.perf_counter() - start
        for k in range(envs.pipeline_stages):
            obs, *_ = envs.recv(stage=k)
            put_rows(state.obs, slice(k * m, (k + 1) * m), obs)
        return calls, elapsed
    envs.send(policy(state.obs), env_ids=np.arange(n))
    start = time.perf_counter()
    while calls < want or time.perf_counter() - start < seconds:
        obs, _, _, _, infos = envs.recv(max_batch=cand.max_batch, timeout=cand.timeout)
        ids = infos["env_ids"]
        put_rows(state.obs, ids, obs)
        calls += len(ids)
        envs.send(policy(obs), env_ids=ids)
    elapsed = time.perf_counter() - start
    while len(envs.in_flight()):
        obs, _, _, _, infos = envs.recv(max_batch=n)
        put_rows(state.obs, infos["env_ids"], obs)
    return calls, elapsed


def measure_policy(policy: Callable[[Any], Any], obs: Any, num_envs: int, repeats: int = 3) -> tuple[tuple[float, float], tuple[float, float]]:
    """(wall, cpu) seconds of ``policy`` as (fixed, per observation), from batches of 1 and N."""

    def cost(b: int) -> tuple[float, float]:
        batch = take_rows(obs, slice(0, b))
        policy(batch)  # warm-up
        walls, cpus = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            policy(batch)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        return statistics.median(walls), statistics.median(cpus)

    (w1, c1), (wn, cn) = cost(1), cost(num_envs)
    if num_envs == 1:
        return (w1, 0.0), (c1, 0.0)
    slope_w, slope_c = max(0.0, (wn - w1) / (num_envs - 1)), max(0.0, (cn - c1) / (num_envs - 1))
    return (max(0.0, w1 - slope_w), slope_w), (max(0.0, c1 - slope_c), slope_c)
