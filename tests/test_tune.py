"""fastenv.tune: the machine's CPUs, the cost model, the search, plans, and layouts a vector env runs.

The search is checked on a stand-in with known costs (``KnownCosts``: every layout's throughput
is what those costs give, so the optimum is known) and end to end on real worker processes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
import os

import gymnasium as gym
import numpy as np
import pytest
from fakes import make_sleepy_env

from fastenv import machine, tuning
from fastenv.cli import main as cli_main
from fastenv.tuning import Candidate, CostModel, Costs, Plan, Trial
from fastenv.tuning.trials import _as_policy
from fastenv.vector import Layout, PipelineVectorEnv, make_pipeline

N, CPUS = 8, 2


# -- the machine ---------------------------------------------------------------------------------
def test_cpus_follow_the_cgroup_quota(tmp_path):
    affinity = len(os.sched_getaffinity(0))
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert machine.available_cpus(tmp_path) == affinity
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs: 2 processes can use it
    assert machine.available_cpus(tmp_path) == min(affinity, 2)
    (tmp_path / "cpu.max").write_text("50000 100000\n")
    assert machine.available_cpus(tmp_path) == 1
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")  # cgroup v1
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert machine.available_cpus(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert machine.available_cpus(tmp_path) == affinity


def test_memory_and_processes_are_read():
    assert machine.process_memory(os.getpid()) > 0
    assert machine.available_memory() is None or machine.available_memory() > 0
    assert machine.describe()["cpus"] == machine.available_cpus()


# -- the space and the model ---------------------------------------------------------------------
def test_every_layout_of_the_space_is_valid_and_the_default_is_in_it():
    for n, cpus in [(1, 1), (4, 2), (8, 2), (12, 4)]:
        space = tuning.search_space(n, cpus)
        assert len(space) == len(set(space))
        for cand in space:
            Layout(n, cand.num_workers, cand.pipeline_stages)  # raises if not
            assert cand.max_batch is None or 1 <= cand.max_batch < n
        assert tuning.default_candidate(n, cpus) in space


@pytest.mark.parametrize("k,p,copies", [(1, 0.3, 2), (3, 0.2, 2), (4, 0.5, 3), (2, 0.05, 4)])
def test_expected_max_of_binomials_matches_enumeration(k, p, copies):
    exact = 0.0
    for draws in itertools.product(range(k + 1), repeat=copies):
        prob = np.prod([math.comb(k, j) * p**j * (1 - p) ** (k - j) for j in draws])
        exact += prob * max(draws)
    assert tuning.expected_max_binomial(k, p, copies) == pytest.approx(exact, rel=1e-9)


def test_the_model_names_what_bounds_each_layout():
    gpu_policy = Costs(step_wall=0.02, step_cpu=0.001, policy_wall=(0.05, 0.0), cpus=CPUS)
    model = CostModel(gpu_policy)
    sync = model.predict(Candidate(8), N)
    assert sync.bound == "chain" and sync.cycle_s == pytest.approx(0.05 + 0.02)
    piped = model.predict(Candidate(4, 2), N)  # the policy on one stage while the other steps
    assert piped.cycle_s == pytest.approx(max(2 * 0.05, 2 * 0.02, 0.05 + 0.02))
    assert piped.bound == "policy"
    cpu_env = CostModel(Costs(step_wall=0.03, step_cpu=0.03, policy_wall=(0.01, 0.0), cpus=CPUS))
    # 8 workers on 2 cores: the step takes the cores' time, after the policy (nothing overlaps it)
    assert cpu_env.predict(Candidate(8), N).cycle_s == pytest.approx(0.01 + 8 * 0.03 / 2)
    assert cpu_env.predict(Candidate(4, 2), N).bound == "cpu"  # stages overlap the policy: the cores bound it
    assert cpu_env.predict(Candidate(4, 2), N).cycle_s == pytest.approx(8 * 0.03 / 2)
    # Rare long resets: a stage waits for its unluckiest worker; dynamic batching does not.
    tail = CostModel(Costs(step_wall=0.01, step_cpu=0.0, reset_wall=0.4, reset_rate=0.1, policy_wall=(0.01, 0.0), cpus=CPUS))
    stage = tail.predict(Candidate(4, 2), N)
    dyn = tail.predict(Candidate(4, 1, 4, 0.01), N)
    assert stage.terms["chain"] == pytest.approx(0.01 + 0.01 + (1 - 0.9**4) * 0.4)  # 1 env per worker: P(any reset)
    assert stage.terms["chain"] > 0.01 + 0.01 + 0.1 * 0.4  # more than the mean
    assert dyn.steps_per_s > stage.steps_per_s


def test_memory_limits_drop_layouts():
    costs = Costs(step_wall=0.01, step_cpu=0.01, cpus=CPUS, worker_memory={1: 2e9, 2: 3e9}, memory_available=4e9)
    model = CostModel(costs)
    assert model.memory(Candidate(4), N) == pytest.approx(5e9)  # the line through the two measurements
    assert model.fits(Candidate(1), N) and model.fits(Candidate(2), N) and not model.fits(Candidate(4), N)


# -- the search, on a stand-in with known costs --------------------------------------------------
class KnownCosts:
    """A trial runner whose layouts run at the throughput ``truth`` gives (the known optimum).

    Its calibration report and policy costs are what real ones of an env with ``costs`` would be.
    """

    def __init__(self, costs: Costs, truth):
        self.costs, self.truth = costs, truth
        self.policy, self.obs = None, None
        self.runs: list[Candidate] = []
        self.closed = False

    def run(self, cand: Candidate, profile: bool = False) -> Trial:
        self.runs.append(cand)
        rate = self.truth(cand)
        calls = 1000
        c = self.costs
        report = None
        if profile:
            resets = round(c.reset_rate * calls)
            report = {
                "physics": 0.0, "observe": 0.0, "step": c.step_wall * calls, "reset": c.reset_wall * resets,
                "cpu_seconds": {"physics": 0.0, "observe": 0.0, "step": c.step_cpu * calls, "reset": c.reset_cpu * resets},
                "counts": {"step": calls, "reset": resets}, "calls": calls,
            }
        return Trial(cand, rate, 1.0, calls, profile=report)

    def measure_policy(self):
        return self.costs.policy_wall, self.costs.policy_cpu

    def memory(self):
        return None

    def close(self):
        self.closed = True


SCENARIOS = {
    # a large policy on a GPU, a CPU simulator: pipelining hides the policy behind the stepping
    "gpu policy": Costs(step_wall=0.04, step_cpu=0.04, policy_wall=(0.05, 0.0005), policy_cpu=(0.001, 0.0), command=0.0005, cpus=CPUS),
    # envs that wait on a device (little CPU) and a cheap policy: one env per worker, stepped whole
    "waiting env": Costs(step_wall=0.02, step_cpu=0.0005, policy_wall=(0.01, 0.0001), policy_cpu=(0.001, 0.0001), command=0.0003, cpus=CPUS),
    # rare, long resets (a long tail): dynamic batching serves the envs that are ready
    "long tail": Costs(step_wall=0.01, step_cpu=0.001, reset_wall=0.4, reset_cpu=0.01, reset_rate=0.08, policy_wall=(0.01, 0.0), command=0.0002, cpus=CPUS),
}


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("threads_gain", [1.0, 1.15])
def test_tune_finds_the_known_optimum_in_a_fifth_of_the_grid(name, threads_gain):
    costs = SCENARIOS[name]
    model = CostModel(costs)
    space = tuning.search_space(N, CPUS)

    def truth(cand):  # what a layout really gives: the costs, and (maybe) more from native threads
        gain = threads_gain if cand.threads_per_worker > 1 else 1.0
        return model.predict(cand, N).steps_per_s * gain

    runner = KnownCosts(costs, truth)
    plan = tuning.tune([make_sleepy_env] * N, runner=runner, space=space, cpus=CPUS, progress=False)
    best = max(truth(c) for c in space)
    assert truth(plan.candidate) == pytest.approx(best, rel=1e-9)
    assert plan.steps_per_s == pytest.approx(best, rel=1e-9)
    assert len(runner.runs) <= len(space) / 5 and runner.closed
    assert runner.runs[0] == tuning.default_candidate(N, CPUS)  # the calibration
    assert plan.default_steps_per_s == pytest.approx(truth(runner.runs[0]))
    # the calibration recovered the costs the stand-in was built from
    assert plan.costs["step_wall"] == pytest.approx(costs.step_wall)
    assert plan.costs["command"] == pytest.approx(costs.command, rel=1e-6, abs=1e-12)
    assert plan.bound in tuning.BOUNDS and plan.bound in plan.reason


def test_the_calibrations_own_workers_do_not_count_against_the_memory_left(monkeypatch):
    # workers that hold most of the memory (robosuite's hard resets grow them): the layouts on the
    # same workers still run, and the search measures more than the calibration
    costs = SCENARIOS["gpu policy"]
    model = CostModel(costs)
    space = tuning.search_space(N, CPUS)
    runner = KnownCosts(costs, lambda cand: model.predict(cand, N).steps_per_s)
    runner.memory = lambda: 10e9
    monkeypatch.setattr(machine, "available_memory", lambda: 4e9)
    plan = tuning.tune([make_sleepy_env] * N, runner=runner, space=space, cpus=CPUS, progress=False)
    default = tuning.default_candidate(N, CPUS)
    assert len(runner.runs) > 1 and any(c.num_workers == default.num_workers for c in runner.runs[1:])
    assert all(c.num_workers <= default.num_workers for c in runner.runs)  # more workers: predicted not to fit
    assert plan.costs["memory_available"] == pytest.approx(14e9)


def test_the_known_optima_differ_by_scenario():
    space = tuning.search_space(N, CPUS)
    modes = {name: max(space, key=lambda c: CostModel(costs).predict(c, N).steps_per_s).mode for name, costs in SCENARIOS.items()}
    assert modes["gpu policy"] == "pipeline" and modes["long tail"] == "dynamic"


def test_tune_refuses_bad_arguments():
    with pytest.raises(ValueError, match="num_envs is needed"):
        tuning.tune(make_sleepy_env)
    with pytest.raises(ValueError, match="not both"):
        _as_policy(lambda obs: obs, 0.1, None)
    with pytest.raises(ValueError, match=">= 0 seconds"):
        tuning.CostPolicy(-1.0)
    with pytest.raises(ValueError, match="2 env constructors"):
        tuning.tune([make_sleepy_env] * 2, num_envs=3)


# -- plans and the vector env ----------------------------------------------------------------------
def test_a_plan_round_trips_through_json(tmp_path):
    plan = Plan(num_envs=4, num_workers=2, max_batch=2, timeout=0.01, threads_per_worker=2, spin_wait=0.0, steps_per_s=12.5, bound="cpu")
    path = plan.save(tmp_path / "plan.json")
    assert Plan.load(path) == plan
    assert tuning.resolve_layout(str(path)) == plan and tuning.resolve_layout(plan.to_dict()) == plan
    path.write_text(json.dumps({"num_workers": 2}))
    with pytest.raises(ValueError, match="not a fastenv layout plan"):
        Plan.load(path)
    with pytest.raises(FileNotFoundError, match="fastenv tune"):
        Plan.load(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="layout must be"):
        tuning.resolve_layout(3)


def cartpole():
    return gym.make("CartPole-v1")


def test_the_vector_env_runs_a_plan_and_its_batching(tmp_path):
    plan = Plan(num_envs=4, num_workers=2, max_batch=2, timeout=5.0, threads_per_worker=1, spin_wait=0.0)
    path = plan.save(tmp_path / "plan.json")
    with make_pipeline(cartpole, 4, layout=str(path)) as envs:
        assert (envs.num_workers, envs.pipeline_stages, envs.spin_wait, envs.plan) == (2, 1, 0.0, plan)
        envs.reset(seed=0)
        envs.send(np.zeros(4, np.int64), env_ids=np.arange(4))
        *_, infos = envs.recv()  # the plan's max_batch: 2 of the 4 (all arrive within the timeout)
        assert len(infos["env_ids"]) == 2
        *_, infos = envs.recv(max_batch=4)  # explicit arguments win
        assert len(infos["env_ids"]) == 2 and not len(envs.in_flight())
    with pytest.raises(ValueError, match="give a layout or those"):
        PipelineVectorEnv([cartpole] * 4, num_workers=2, layout=plan)
    with pytest.raises(ValueError, match="num_envs=4"):
        PipelineVectorEnv([cartpole] * 2, layout=plan)
    with pytest.raises(ValueError, match="tune_options are for"):
        PipelineVectorEnv([cartpole] * 4, layout=plan, tune_options={})


def test_the_vector_env_is_given_its_layout_resolver(tmp_path):
    import fastenv.vector.pipeline
    import fastenv.vector.plan

    assert not hasattr(fastenv.vector.pipeline, "set_layout_resolver")  # importing the tuner installs nothing
    assert Plan is fastenv.vector.plan.Plan and Candidate is fastenv.vector.plan.Candidate
    assert fastenv.vector.pipeline.DEFAULT_TUNER == "fastenv.tuning:plan_for"  # named, imported only to tune
    calls = []

    def resolver(env_fns, layout, tune_options, *, context):
        calls.append((len(env_fns), layout, tune_options, context))
        return Plan(num_envs=2, num_workers=1, spin_wait=0.0)

    with make_pipeline(cartpole, 2, layout="mine", tune_options={"x": 1}, layout_resolver=resolver) as envs:
        assert (envs.num_workers, envs.spin_wait, envs.plan) == (1, 0.0, Plan(num_envs=2, num_workers=1, spin_wait=0.0))
    assert calls == [(2, "mine", {"x": 1}, "spawn")]
    with PipelineVectorEnv([cartpole] * 2, layout=Plan(num_envs=2, num_workers=2).to_dict()) as envs:  # no resolver
        assert envs.num_workers == 2 and envs.plan == Plan(num_envs=2, num_workers=2) and envs.plan.mode == "step"


def rollout(envs, stages, steps, seed):
    """Every env's observations, rewards and flags over ``steps`` rounds of stage-wise stepping."""
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    out = [obs]
    m = envs.num_envs // stages
    for _ in range(steps):
        actions = rng.integers(0, 2, envs.num_envs)
        for k in range(stages):
            envs.send(actions[k * m:(k + 1) * m], stage=k)
        for k in range(stages):
            out.append(envs.recv(stage=k)[:4])
    return out


@pytest.mark.parametrize("stages", [1, 2, 4])
def test_regrouped_stages_step_as_a_vector_env_built_with_them(stages):
    with PipelineVectorEnv([cartpole] * 4, num_workers=1, pipeline_stages=2) as regrouped, \
            PipelineVectorEnv([cartpole] * 4, num_workers=1, pipeline_stages=stages) as built:
        regrouped.set_pipeline_stages(stages)
        assert regrouped.layout == built.layout
        for a, b in zip(rollout(regrouped, stages, 30, 3), rollout(built, stages, 30, 3)):
            for x, y in zip(a, b):
                assert np.array_equal(x, y)
        regrouped.send(np.zeros(4 // stages, np.int64), stage=0)
        with pytest.raises(RuntimeError, match="in flight"):
            regrouped.set_pipeline_stages(1 if stages != 1 else 2)
        regrouped.recv(stage=0)
        with pytest.raises(ValueError, match="multiple of"):
            regrouped.set_pipeline_stages(3)


# -- end to end on real workers ------------------------------------------------------------------
def test_tune_on_real_workers_writes_a_plan_a_vector_env_runs(tmp_path):
    env_fn = functools.partial(make_sleepy_env, length=4)
    plan = tuning.tune(env_fn, num_envs=4, policy_cost=(0.01, 0.0), max_trials=2, trial_seconds=0.1, progress=False, out=tmp_path / "p.json", cpus=2)
    assert Plan.load(tmp_path / "p.json") == plan
    assert len(plan.trials) in (2, 3) and plan.steps_per_s == max(t["steps_per_s"] for t in plan.trials)
    assert plan.trials[0]["layout"] == plan.default_layout == tuning.default_candidate(4, 2).label
    # Episodes of 4 in chunks of 3: calls run 3 and 1 sub-steps (2 ms each) in turn, each with one
    # observation (5 ms); whichever calls a trial catches, each sleeps at least 7 ms.
    assert plan.costs["reset_rate"] > 0 and plan.costs["step_wall"] >= 0.9 * (0.002 + 0.005)
    assert plan.costs["policy_wall"][0] >= 0.009
    assert plan.machine["cpus_planned"] == 2
    with PipelineVectorEnv([env_fn] * 4, layout=plan) as envs:
        assert (envs.num_workers, envs.pipeline_stages, envs.threads_per_worker) == (plan.num_workers, plan.pipeline_stages, plan.threads_per_worker)
        obs, _ = envs.reset(seed=0)
        envs.step(np.zeros((4, 3, 3), np.float32))


def test_auto_layout_tunes_then_builds():
    options = {"policy_cost": 0.0, "max_trials": 1, "trial_seconds": 0.05, "progress": False, "cpus": 2}
    with PipelineVectorEnv([cartpole] * 2, layout="auto", tune_options=options) as envs:  # the default tuner
        assert envs.plan is not None and envs.num_workers == envs.plan.num_workers
        assert len(envs.plan.trials) >= 2
        envs.reset(seed=0)
        envs.step(np.zeros(2, np.int64))


def test_cli_tune_writes_a_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    cli_main(["tune", "CartPole-v1", "--num-envs", "2", "--max-trials", "1", "--trial-seconds", "0.05", "--quiet", "--out", str(out), "--cpus", "2"])
    plan = Plan.load(out)
    assert plan.num_envs == 2
    text = capsys.readouterr().out
    assert "plan:" in text and "default layout" in text and plan.candidate.label in text
    with pytest.raises(SystemExit):
        cli_main(["tune", "CartPole-v1", "--num-envs", "2", "--env-arg", "novalue"])
    with pytest.raises(SystemExit):
        cli_main(["tune", "NoSuchEnv-v9", "--num-envs", "2"])
    with pytest.raises(SystemExit):
        cli_main(["tune", "CartPole-v1", "--num-envs", "2", "--policy-cost", "fast"])


def test_plans_keep_their_fields():
    names = {f.name for f in dataclasses.fields(Plan)}
    assert {"num_workers", "pipeline_stages", "max_batch", "timeout", "threads_per_worker", "spin_wait"} <= names
    assert set(Plan(num_envs=2, num_workers=1).vector_options()) == {"num_workers", "pipeline_stages", "threads_per_worker", "spin_wait"}
