"""``tune``: calibrate on the default layout, model every layout, measure the best few; ``grid``: measure all."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastenv import machine
from fastenv._validation import check_positive_int
from fastenv.tuning.model import BOUNDS, CostModel, Costs
from fastenv.tuning.space import Candidate, default_candidate, search_space
from fastenv.tuning.trials import Trial, TrialRunner, spin_wait_for
from fastenv.vector.plan import Plan, read_plan


# -- the calibration -------------------------------------------------------------------------------
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
        policy_cost: the policy's measured cost in seconds, ``fixed`` or ``(fixed, per_obs)``, or a
            VLA's published cost (``fastenv.policy_cost``: a preset's name such as ``"pi05-behavior"``,
            or an ``InferenceCost``); the trials sleep that long and act randomly (a policy on a GPU
            costs the CPU little).
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

    Examples:
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
        if costs.memory_available is not None and memory is not None:
            # what a layout may use: what is free, and what the calibration's workers hold (a layout
            # with other workers replaces them; one with the same workers keeps them)
            costs.memory_available += memory
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


# -- the plan a vector env runs ---------------------------------------------------------------------
def plan_for(
    env_fns: Sequence[Callable[[], Any]], layout: Any, tune_options: Mapping[str, Any] | None = None, *, context: str = "spawn"
) -> Plan:
    """The plan a ``PipelineVectorEnv`` of ``env_fns`` runs for its ``layout`` argument.

    ``"auto"`` tunes one now (``tune`` with ``tune_options``, its trials' workers started with
    ``context``); a ``Plan``, its dict or the path of its JSON is loaded (``read_plan``).
    Either way the plan must be for ``len(env_fns)`` envs. A vector env built with
    ``layout_resolver=plan_for`` calls this for any ``layout`` it is given; without a resolver, for
    ``layout="auto"``.

    Examples:
        >>> envs = PipelineVectorEnv([make_env] * 8, layout="auto", layout_resolver=plan_for)
    """
    env_fns = list(env_fns)
    if isinstance(layout, str) and layout == "auto":
        options = {"vector_options": {"context": context}, **dict(tune_options or {})}
        plan = tune(env_fns, **options)
        if plan.num_envs != len(env_fns):
            raise ValueError(f"the layout plan is for num_envs={plan.num_envs}, got {len(env_fns)} env constructors")
        return plan
    if tune_options is not None:
        raise ValueError("tune_options are for layout='auto'")
    return read_plan(layout, len(env_fns))


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
