"""``fastenv.tune``: find the layout with the highest throughput for an env, a policy and a machine.

A layout is how a ``PipelineVectorEnv`` runs N envs: worker processes W (so N/W envs per worker),
pipeline stages S, dynamic batching (``max_batch`` B, ``timeout`` T) or none, native threads per
worker. Which one is best shifts with the env's cost, the policy's cost, the chunk length, N and
the cores, so it is measured, not guessed, but not over an exhaustive grid:

1. **Calibrate.** Build the default layout with the profiler on, run it briefly, and read the
   env's cost per call (stepping and resets apart, wall and CPU seconds) and the transport's cost
   per command; time the policy alone on batches of 1 and N observations.
2. **Model.** Predict every layout's throughput from those costs (``CostModel``): a cycle (every
   env one call) takes at least the policy's serial time, each worker's serial env time, one
   stage's chain of policy then step, and the CPU work over the cores; synchronous stages also wait
   for their slowest worker's resets, which dynamic batching does not.
3. **Measure.** Run the best predicted layout of each family (synchronous, pipelined, dynamically
   batched), then the next best overall, grouped so the workers are rebuilt as rarely as possible.
   The plan is the best *measured* layout, so the model only has to rank, not to be exact.

The result is a ``Plan``: the layout, its measured throughput and the default layout's, what
bounds it (``bound``) and why, and every trial; it saves to JSON, and
``PipelineVectorEnv(..., layout=plan)`` or ``gym.make_vec(..., layout="plan.json")`` runs it.

Example:
    >>> plan = fastenv.tune(lambda: gym.make("CartPole-v1"), num_envs=8)
    >>> plan.save("plan.json")
    >>> envs = gym.make_vec("fastenv/Libero-v0", num_envs=8, layout="plan.json", chunk=8)
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fastenv import machine
from fastenv._validation import check_positive_int

PLAN_FORMAT = 1
DEFAULT_SPIN_WAIT = 2e-4


# -- layouts ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One layout of N envs: W workers, S stages or dynamic batching (B, T), threads per worker."""

    num_workers: int
    pipeline_stages: int = 1
    max_batch: int | None = None  # dynamic batching when set (then pipeline_stages is 1)
    timeout: float | None = None
    threads_per_worker: int = 1

    @property
    def mode(self) -> str:
        """"step" (all envs at once), "pipeline" (S stages) or "dynamic" (batching as envs get ready)."""
        if self.max_batch is not None:
            return "dynamic"
        return "pipeline" if self.pipeline_stages > 1 else "step"

    @property
    def label(self) -> str:
        if self.mode == "dynamic":
            how = f"dynamic B={self.max_batch} T={self.timeout * 1000:g}ms"
        elif self.mode == "pipeline":
            how = f"{self.pipeline_stages} stages"
        else:
            how = "step"
        return f"W={self.num_workers} {how} threads={self.threads_per_worker}"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_space(
    num_envs: int,
    cpus: int,
    *,
    max_workers: int | None = None,
    max_stages: int = 4,
    timeouts: Sequence[float] = (0.002, 0.01, 0.05),
) -> list[Candidate]:
    """Every layout ``tune`` considers (and a grid would measure) for ``num_envs`` on ``cpus`` CPUs.

    Workers: the divisors of N up to ``max_workers`` (default min(N, 4 * cpus)); stages: the
    divisors of N/W up to ``max_stages``; dynamic batching: B in {N/4, N/2, 3N/4} (rounded, 1 to
    N-1) with each of ``timeouts``; threads per worker: 1, and (with 2 CPUs or more) max(2, cpus // W).

    Example:
        >>> len(search_space(4, 2))
        66
    """
    n = check_positive_int("num_envs", num_envs)
    cpus = check_positive_int("cpus", cpus)
    max_workers = min(n, 4 * cpus) if max_workers is None else check_positive_int("max_workers", max_workers)
    batches = sorted({max(1, round(n * f)) for f in (0.25, 0.5, 0.75)} - {n})
    out = []
    for w in (d for d in divisors(n) if d <= max_workers):
        for t in sorted({1} | ({max(2, cpus // w)} if cpus >= 2 else set())):
            for s in (d for d in divisors(n // w) if d <= max_stages):
                out.append(Candidate(w, s, threads_per_worker=t))
            for b in batches:
                for timeout in timeouts:
                    out.append(Candidate(w, 1, b, float(timeout), t))
    return out


def default_candidate(num_envs: int, cpus: int) -> Candidate:
    """The layout ``PipelineVectorEnv`` picks with no options: the most workers up to the CPUs, stepped whole."""
    return Candidate(max(d for d in divisors(num_envs) if d <= cpus), 1, threads_per_worker=1)


# -- the model -------------------------------------------------------------------------------------
@dataclass
class Costs:
    """What a layout's throughput is predicted from, measured by the calibration.

    Env seconds are per env call (one ``step``: a whole chunk for chunked envs), as one worker
    runs it alone on a core; resets apart (their rate per env call). Policy seconds are
    ``fixed + per_obs * batch``. ``command`` is the transport's cost per command message
    (sending, waking the worker, replying, handling the reply).
    """

    step_wall: float
    step_cpu: float
    reset_wall: float = 0.0
    reset_cpu: float = 0.0
    reset_rate: float = 0.0
    policy_wall: tuple[float, float] = (0.0, 0.0)
    policy_cpu: tuple[float, float] = (0.0, 0.0)
    command: float = 0.0
    cpus: int = 1
    worker_memory: dict[int, float] = field(default_factory=dict)  # workers -> bytes of all workers, measured
    memory_available: float | None = None


@dataclass
class Prediction:
    steps_per_s: float
    cycle_s: float
    bound: str
    terms: dict[str, float]


def expected_max_binomial(k: int, p: float, copies: int) -> float:
    """E[max of ``copies`` independent Binomial(k, p)]: resets of the unluckiest worker in a stage."""
    if k <= 0 or p <= 0.0 or copies <= 0:
        return 0.0
    p = min(p, 1.0)
    cdf, total = 0.0, 0.0
    for j in range(k):
        cdf += math.comb(k, j) * p**j * (1 - p) ** (k - j)
        total += 1.0 - min(cdf, 1.0) ** copies
    return total


BOUNDS = {
    "policy": "the policy: its calls, one after another, take longest",
    "workers": "the env workers: each steps its envs one after another",
    "chain": "the chain of policy then step: nothing else is left to overlap with either",
    "cpu": "the CPU cores: env and policy work exceed what the cores give",
}


class CostModel:
    """Predicts the throughput of a layout from ``Costs`` (see the module's docstring).

    Example:
        >>> model = CostModel(Costs(step_wall=0.01, step_cpu=0.01, policy_wall=(0.005, 0.0), cpus=2))
        >>> model.predict(Candidate(2), num_envs=4).bound   # policy, then 2 envs per worker: no overlap
        'chain'
    """

    def __init__(self, costs: Costs) -> None:
        self.costs = costs

    def predict(self, cand: Candidate, num_envs: int) -> Prediction:
        c, n, w = self.costs, num_envs, cand.num_workers
        pw0, pw1 = c.policy_wall
        pc0, pc1 = c.policy_cpu
        env_mean = c.step_wall + c.reset_rate * c.reset_wall  # per env call, resets amortized
        env_cpu = c.step_cpu + c.reset_rate * c.reset_cpu
        if cand.mode == "dynamic":
            b = cand.max_batch
            per_batch = pw0 + pw1 * b + (min(b, w) + b) * c.command  # policy, sends, one reply per env
            calls = math.ceil(b / w)  # of one worker, for one batch
            terms = {
                "policy": (n / b) * per_batch,
                "workers": (n / w) * (env_mean + c.command),
                # a batch's steps cannot go faster than the cores do their work
                "chain": per_batch + max(calls * (env_mean + c.command), b * env_cpu / c.cpus),
                "cpu": (n * (env_cpu + 2 * c.command) + (n / b) * (pc0 + pc1 * b)) / c.cpus,
            }
        else:
            s = cand.pipeline_stages
            m = n // s
            k = m // w  # env calls of one worker in one stage
            policy = pw0 + pw1 * m + w * c.command
            # A stage is done when its slowest worker is: the one with the most resets.
            stage = k * c.step_wall + expected_max_binomial(k, c.reset_rate, w) * c.reset_wall + c.command
            terms = {
                "policy": s * policy,
                "workers": s * (k * env_mean + c.command),
                # the stage's steps cannot go faster than the cores do their work (for S=1, the
                # cores idle while the policy runs: nothing overlaps it)
                "chain": policy + max(stage, m * env_cpu / c.cpus),
                "cpu": (n * env_cpu + s * (pc0 + pc1 * m) + 2 * s * w * c.command) / c.cpus,
            }
        bound = max(terms, key=terms.get)
        cycle = terms[bound]
        return Prediction(n / cycle if cycle > 0 else float("inf"), cycle, bound, terms)

    def memory(self, cand: Candidate, num_envs: int) -> float | None:
        """Predicted bytes of the workers of ``cand``: a line through the measured (workers, bytes)."""
        seen = self.costs.worker_memory
        if not seen:
            return None
        if len(seen) == 1:
            (w0, total), = seen.items()
            # Only one point: at least the measured total, and W' processes each at least the
            # smallest measured process's base share.
            return max(total, total * cand.num_workers / w0 if cand.num_workers > w0 else total)
        xs, ys = zip(*sorted(seen.items()))
        slope, intercept = np.polyfit(xs, ys, 1)
        return float(intercept + slope * cand.num_workers)

    def fits(self, cand: Candidate, num_envs: int) -> bool:
        """False when the layout's workers are predicted to need more than 90% of the memory left."""
        need, left = self.memory(cand, num_envs), self.costs.memory_available
        return need is None or left is None or need <= 0.9 * left


# -- plans -----------------------------------------------------------------------------------------
@dataclass
class Plan:
    """A chosen layout and the evidence for it; ``PipelineVectorEnv(..., layout=plan)`` runs it."""

    num_envs: int
    num_workers: int
    pipeline_stages: int = 1
    max_batch: int | None = None
    timeout: float | None = None
    threads_per_worker: int = 1
    spin_wait: float = DEFAULT_SPIN_WAIT
    steps_per_s: float | None = None  # measured, env calls (vector-env transitions) per second
    default_steps_per_s: float | None = None
    default_layout: str | None = None
    bound: str | None = None
    reason: str | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)
    tune_seconds: float | None = None

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.num_workers, self.pipeline_stages, self.max_batch, self.timeout, self.threads_per_worker)

    @property
    def mode(self) -> str:
        return self.candidate.mode

    def vector_options(self) -> dict[str, Any]:
        """The ``PipelineVectorEnv`` options this plan sets."""
        return {
            "num_workers": self.num_workers,
            "pipeline_stages": self.pipeline_stages,
            "threads_per_worker": self.threads_per_worker,
            "spin_wait": self.spin_wait,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"fastenv_plan": PLAN_FORMAT, **dataclasses.asdict(self)}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if data.get("fastenv_plan") != PLAN_FORMAT:
            raise ValueError(f"not a fastenv layout plan (format {PLAN_FORMAT}): {str(data)[:200]}")
        names = {f.name for f in dataclasses.fields(cls)}
        plan = cls(**{k: v for k, v in data.items() if k in names})
        Candidate(plan.num_workers, plan.pipeline_stages, plan.max_batch, plan.timeout, plan.threads_per_worker)
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no layout plan at {path}: write one with `fastenv tune ... --out {path}`") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a JSON layout plan: {exc}") from None
        return cls.from_dict(data)

    def summary(self) -> str:
        lines = [f"plan: {self.candidate.label} (spin_wait={self.spin_wait:g}s)"]
        if self.steps_per_s is not None:
            lines.append(f"measured: {self.steps_per_s:.1f} steps/s")
        if self.default_steps_per_s:
            ratio = self.steps_per_s / self.default_steps_per_s if self.steps_per_s else float("nan")
            lines.append(f"default layout ({self.default_layout}): {self.default_steps_per_s:.1f} steps/s -> {ratio:.2f}x")
        if self.reason:
            lines.append(f"why: {self.reason}")
        return "\n".join(lines)


def resolve_layout(layout: Any) -> Plan:
    """A ``Plan`` from a plan, a dict of one, or a path to its JSON ("auto" is resolved by the caller)."""
    if isinstance(layout, Plan):
        return layout
    if isinstance(layout, dict):
        return Plan.from_dict(layout)
    if isinstance(layout, (str, Path)):
        return Plan.load(layout)
    raise TypeError(f"layout must be 'auto', a fastenv.tuning.Plan, a dict or a path to a plan's JSON; got {layout!r}")


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
        from fastenv.core.arrays import leading_dim

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
        from fastenv.vector.pipeline import PipelineVectorEnv

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
    from fastenv.core.arrays import put_rows, take_rows

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
    from fastenv.core.arrays import take_rows

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


def costs_from_calibration(trial: Trial, policy_wall: tuple[float, float], policy_cpu: tuple[float, float], cpus: int, num_envs: int) -> Costs:
    """The env's and the transport's costs from a profiled trial of the default (synchronous) layout."""
    rep, calls = trial.profile, max(trial.calls, 1)
    stepping = sum(rep.get(k, 0.0) for k in ("physics", "step", "observe"))
    stepping_cpu = sum(rep["cpu_seconds"].get(k, 0.0) for k in ("physics", "step", "observe"))
    resets = rep["counts"].get("reset", 0)
    costs = Costs(
        step_wall=stepping / calls,
        step_cpu=stepping_cpu / calls,
        reset_wall=rep.get("reset", 0.0) / resets if resets else 0.0,
        reset_cpu=rep["cpu_seconds"].get("reset", 0.0) / resets if resets else 0.0,
        reset_rate=resets / calls,
        policy_wall=policy_wall,
        policy_cpu=policy_cpu,
        cpus=cpus,
    )
    # What the measured cycle has beyond the model without transport: the command cost.
    cand = trial.candidate
    cycle = num_envs / trial.steps_per_s
    bare = CostModel(costs).predict(cand, num_envs).cycle_s
    costs.command = max(0.0, (cycle - bare) / (cand.num_workers + 1))
    return costs


# -- the search ------------------------------------------------------------------------------------
def refinement(best: Candidate, space: Sequence[Candidate], measured: Iterable[Candidate]) -> Candidate | None:
    """The best measured layout with more native threads per worker (the most the space has), if not yet measured."""
    done = set(measured)
    more = [c for c in space if dataclasses.replace(c, threads_per_worker=1) == dataclasses.replace(best, threads_per_worker=1) and c not in done]
    return max(more, key=lambda c: c.threads_per_worker) if more else None


TIE = 0.03  # predictions this close are a tie: the layout on the workers already running wins


def choose_trials(
    model: CostModel, space: Sequence[Candidate], num_envs: int, measured: Iterable[Candidate], budget: int, live: Candidate | None = None
) -> list[Candidate]:
    """Which layouts to measure next: the best predicted of each family, then the best overall.

    Only one native thread per worker (the model cannot tell what more threads give: the
    refinement measures that). Among predictions within ``TIE`` of each other, layouts that run
    on the ``live`` workers come first (no rebuild). Ordered so that layouts sharing workers run
    one after another, the live ones first.
    """
    done = set(measured)
    pred = {c: model.predict(c, num_envs).steps_per_s for c in space if c not in done and c.threads_per_worker == 1 and model.fits(c, num_envs)}
    if not pred:
        return []
    top = max(pred.values())

    def workers(c: Candidate) -> tuple[int, int]:
        return (c.num_workers, c.threads_per_worker)

    def on_live(c: Candidate) -> bool:
        return live is not None and workers(c) == workers(live)

    def key(c: Candidate) -> tuple:
        # Ties: predictions in the same TIE-wide band of the best one.
        band = math.floor(math.log(top / pred[c]) / math.log1p(TIE)) if pred[c] > 0 else math.inf
        return (band, not on_live(c), -pred[c], c.num_workers, c.pipeline_stages, c.max_batch or 0, c.timeout or 0)

    ranked = sorted(pred, key=key)
    picks: list[Candidate] = []
    for family in ("step", "pipeline", "dynamic"):
        best = next((c for c in ranked if c.mode == family), None)
        if best is not None:
            picks.append(best)
    picks = sorted(picks, key=key)[:budget]
    for cand in ranked:
        if len(picks) >= budget:
            break
        if cand not in picks:
            picks.append(cand)
    return sorted(picks, key=lambda c: (not on_live(c), workers(c)))


def _env_fns(env_fn: Callable[[], Any] | Sequence[Callable[[], Any]], num_envs: int | None) -> list[Callable[[], Any]]:
    """N env constructors from one (with ``num_envs``) or from N; else a clear error."""
    if callable(env_fn):
        if num_envs is None:
            raise ValueError("num_envs is needed with one env constructor")
        return [env_fn] * check_positive_int("num_envs", num_envs)
    env_fns = list(env_fn)
    if num_envs is not None and num_envs != len(env_fns):
        raise ValueError(f"num_envs={num_envs} but {len(env_fns)} env constructors were given")
    if not env_fns or not all(callable(fn) for fn in env_fns):
        raise TypeError("env_fn must be an env constructor or a non-empty sequence of them")
    return env_fns


def tune(
    env_fn: Callable[[], Any] | Sequence[Callable[[], Any]],
    policy: Callable[[Any], Any] | None = None,
    *,
    num_envs: int | None = None,
    policy_cost: float | tuple[float, float] | None = None,
    max_trials: int = 4,
    trial_seconds: float = 2.0,
    min_cycles: int = 3,
    space: Sequence[Candidate] | None = None,
    cpus: int | None = None,
    seed: int = 0,
    progress: bool = True,
    out: str | Path | None = None,
    vector_options: dict[str, Any] | None = None,
    runner: Any = None,
) -> Plan:
    """Find the layout with the highest throughput for these envs and this policy on this machine.

    Args:
        env_fn: an env constructor (called N times, in the workers), or N constructors.
        policy: a callable from a batch of observations (the rows of the envs it serves) to a batch
            of actions, on its own device. Or give ``policy_cost`` instead.
        num_envs: N (needed with one constructor).
        policy_cost: the policy's measured cost in seconds, ``fixed`` or ``(fixed, per_obs)``;
            the trials sleep that long and act randomly (a policy on a GPU costs the CPU little).
            Neither given: a policy that costs nothing.
        max_trials: layouts measured after the calibration, the threads refinement included
            (more: closer to the grid's best, at more cost).
        trial_seconds: seconds each layout is timed (at least ``min_cycles`` cycles: every env
            that many calls).
        space: the layouts to choose from (default ``search_space(N, cpus)``).
        cpus: CPUs to plan for (default: what this process may use, cgroup limits included).
        progress: show a progress bar (tqdm) and what each trial measured.
        out: write the plan's JSON there.
        vector_options: other ``PipelineVectorEnv`` options for the trials (step_timeout, context...).
        runner: what runs the trials (default: a ``TrialRunner`` on real worker processes).

    Returns:
        The ``Plan``: the best measured layout, its throughput, the default layout's, and why.

    Example:
        >>> plan = fastenv.tune(lambda: gym.make("CartPole-v1"), num_envs=8)
        >>> print(plan.summary())
    """
    started = time.perf_counter()
    env_fns = _env_fns(env_fn, num_envs)
    n = len(env_fns)
    check_positive_int("max_trials", max_trials)
    cpus = machine.available_cpus() if cpus is None else check_positive_int("cpus", cpus)
    space = list(space) if space is not None else search_space(n, cpus)
    default = default_candidate(n, cpus)
    if runner is None:
        runner = TrialRunner(
            env_fns, policy, policy_cost, cpus=cpus, trial_seconds=trial_seconds, seed=seed,
            vector_options=dict(vector_options or {}), min_cycles=min_cycles,
        )
    bar = _progress(progress, max_trials + 1)
    trials: list[Trial] = []
    try:
        bar.set_description(f"tune: calibrating on the default layout ({default.label})")
        calibration = runner.run(default, profile=True)
        memory = runner.memory()
        policy_wall, policy_cpu = runner.measure_policy()
        costs = costs_from_calibration(calibration, policy_wall, policy_cpu, cpus, n)
        costs.memory_available = machine.available_memory()
        if memory is not None:
            costs.worker_memory[default.num_workers] = memory
        model = CostModel(costs)
        calibration.predicted_steps_per_s = model.predict(default, n).steps_per_s
        calibration.bound = model.predict(default, n).bound
        trials.append(calibration)
        bar.update(1)
        bar.write(f"  {default.label}: {calibration.steps_per_s:.1f} steps/s (calibration)")
        threaded = any(c.threads_per_worker > 1 for c in space)
        picks = choose_trials(model, space, n, [default], max_trials - 1 if threaded and max_trials > 1 else max_trials, live=default)
        for cand in picks:
            trials.append(_measure(runner, model, costs, cand, n, bar))
        if threaded and len(trials) <= max_trials:
            best = max(trials, key=lambda t: t.steps_per_s).candidate
            extra = refinement(best, space, [t.candidate for t in trials])
            if extra is not None and model.fits(extra, n):
                trials.append(_measure(runner, model, costs, extra, n, bar))
    finally:
        bar.close()
        runner.close()
    best = max(trials, key=lambda t: t.steps_per_s)
    plan = _plan(best, calibration, model, costs, trials, n, time.perf_counter() - started)
    if out is not None:
        plan.save(out)
    return plan


def _measure(runner: Any, model: CostModel, costs: Costs, cand: Candidate, n: int, bar: Any) -> Trial:
    pred = model.predict(cand, n)
    bar.set_description(f"tune: {cand.label}")
    trial = runner.run(cand)
    trial.predicted_steps_per_s, trial.bound = pred.steps_per_s, pred.bound
    memory = runner.memory()
    if memory is not None:
        costs.worker_memory[cand.num_workers] = memory
    bar.update(1)
    bar.write(f"  {cand.label}: {trial.steps_per_s:.1f} steps/s (predicted {pred.steps_per_s:.1f}, bound: {pred.bound})")
    return trial


def _plan(best: Trial, calibration: Trial, model: CostModel, costs: Costs, trials: list[Trial], n: int, seconds: float) -> Plan:
    cand = best.candidate
    pred = model.predict(cand, n)
    terms = ", ".join(f"{k} {1000 * v:.1f}" for k, v in sorted(pred.terms.items(), key=lambda kv: -kv[1]))
    reason = (
        f"bound by {BOUNDS[pred.bound]} (model, ms per cycle of all {n} envs: {terms}); "
        f"env call {1000 * costs.step_wall:.1f} ms ({1000 * costs.step_cpu:.1f} ms CPU) + resets "
        f"{1000 * costs.reset_wall:.0f} ms x {costs.reset_rate:.2f}/call, policy {1000 * costs.policy_wall[0]:.1f} ms + "
        f"{1000 * costs.policy_wall[1]:.2f} ms/obs, {costs.cpus} CPUs; best of {len(trials)} measured layouts"
    )
    return Plan(
        num_envs=n,
        num_workers=cand.num_workers,
        pipeline_stages=cand.pipeline_stages,
        max_batch=cand.max_batch,
        timeout=cand.timeout,
        threads_per_worker=cand.threads_per_worker,
        spin_wait=spin_wait_for(cand, costs.cpus),
        steps_per_s=best.steps_per_s,
        default_steps_per_s=calibration.steps_per_s,
        default_layout=calibration.candidate.label,
        bound=pred.bound,
        reason=reason,
        machine=machine.describe() | {"cpus_planned": costs.cpus},
        # as JSON has them (tuples become lists), so a loaded plan equals this one
        costs=json.loads(json.dumps(dataclasses.asdict(costs) | {"worker_memory": {str(k): v for k, v in costs.worker_memory.items()}})),
        trials=[t.to_dict() for t in trials],
        tune_seconds=seconds,
    )


def grid(
    env_fn: Callable[[], Any] | Sequence[Callable[[], Any]],
    policy: Callable[[Any], Any] | None = None,
    *,
    num_envs: int | None = None,
    policy_cost: Any = None,
    trial_seconds: float = 2.0,
    min_cycles: int = 3,
    space: Sequence[Candidate] | None = None,
    cpus: int | None = None,
    seed: int = 0,
    progress: bool = True,
    vector_options: dict[str, Any] | None = None,
) -> list[Trial]:
    """Measure every layout of ``space`` (the exhaustive baseline ``tune`` is compared with)."""
    env_fns = _env_fns(env_fn, num_envs)
    n = len(env_fns)
    cpus = machine.available_cpus() if cpus is None else check_positive_int("cpus", cpus)
    # grouped by workers, so each (W, threads) is built once
    space = sorted(space if space is not None else search_space(n, cpus), key=lambda c: (c.num_workers, c.threads_per_worker))
    runner = TrialRunner(
        env_fns, policy, policy_cost, cpus=cpus, trial_seconds=trial_seconds, seed=seed,
        vector_options=dict(vector_options or {}), min_cycles=min_cycles,
    )
    bar = _progress(progress, len(space))
    out = []
    try:
        for cand in space:
            bar.set_description(f"grid: {cand.label}")
            out.append(runner.run(cand))
            bar.update(1)
    finally:
        bar.close()
        runner.close()
    return out


class _Quiet:
    def set_description(self, *_: Any) -> None: ...
    def update(self, *_: Any) -> None: ...
    def write(self, *_: Any) -> None: ...
    def close(self) -> None: ...


def _progress(enabled: bool, total: int) -> Any:
    if not enabled:
        return _Quiet()
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional: print the trials only
        quiet = _Quiet()
        quiet.write = print  # type: ignore[method-assign]
        return quiet
    return tqdm(total=total, unit="trial", leave=False)
