"""The policy-server regime (``fastenv bench --regime server``): the bound, the layout chooser's
decisions on recorded costs, the exact batched policy, and one real run on LIBERO."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastenv.tuning.model import CostModel, effective_max_batch
from fastenv.tuning.bound import ServerCosts, choose_layout, fit_policy_cost, model_costs
from fastenv.vector.plan import Candidate

# Costs recorded on the machines (docs/gpu-servers.md, results/bench_gpu_server_h100.json and the
# 2-core machine's fastenv bench --regime server): pi0-eager's a and b; c, fastenv's env side per env step.
H100 = dict(policy_fixed_s=0.096, policy_per_env_s=0.004, env_cpu_s=0.0085, cores=15, chunk=8, env_wall_s=0.0095)
TWO_CORE = dict(policy_fixed_s=0.096, policy_per_env_s=0.004, env_cpu_s=0.0155, cores=1, chunk=8, env_wall_s=0.016)


def test_the_bound_is_the_smaller_of_the_policys_and_the_envs_rates():
    costs = ServerCosts(**H100)
    assert costs.policy_bound(16) == pytest.approx(16 * 8 / (0.096 + 16 * 0.004))
    assert costs.env_bound() == pytest.approx(15 / 0.0085)
    assert costs.bound(16) == costs.policy_bound(16) and costs.limit(16) == "policy"
    assert costs.bound(256) == costs.env_bound() and costs.limit(256) == "envs"
    # Default: nothing overlapped, its own env cost
    assert costs.default_rate(64, 0.037) == pytest.approx(1 / ((0.096 + 64 * 0.004) / (64 * 8) + 0.037 / 15))
    described = costs.describe(64)
    assert described["bound"] == pytest.approx(costs.bound(64)) and described["inputs"]["N"] == 64


@settings(max_examples=300, deadline=None)
@given(a=st.floats(1e-4, 1.0), b=st.floats(0, 0.05), c=st.floats(1e-4, 0.1), cores=st.integers(1, 64), chunk=st.integers(1, 64),
       n=st.integers(1, 256), slow=st.floats(1.0, 3.0))
def test_the_closed_loop_never_exceeds_the_bound_and_one_group_is_its_floor(a, b, c, cores, chunk, n, slow):
    costs = ServerCosts(a, b, c, cores, chunk, env_wall_s=c * slow)
    closed, stages = costs.closed_loop(n)
    assert closed <= costs.bound(n) * (1 + 1e-9)
    assert n % stages == 0
    assert closed >= n * chunk / costs.cycle(n, 1) * (1 - 1e-12)  # one group is always possible
    # Default overlaps nothing: never above the closed loop with the same env cost
    assert costs.default_rate(n) <= closed * (1 + 1e-9)


def test_the_closed_loop_reaches_the_bound_only_where_one_term_dominates():
    # A GPU server with pi0-eager's cost: the fixed cost paid twice per cycle keeps two groups
    # short of the bound; whole batches leave the cores idle during the call.
    costs = ServerCosts(**H100)
    shares = {n: costs.closed_loop(n)[0] / costs.bound(n) for n in (16, 64, 128)}
    assert shares[16] < shares[64] < shares[128] < 0.95
    # The 2-core machine: the env side dominates, two groups reach it
    cpu = ServerCosts(**TWO_CORE)
    assert cpu.limit(4) == "envs" and cpu.closed_loop(4) == (pytest.approx(cpu.bound(4)), 2)


@pytest.mark.parametrize("a,b", [(0.1, 0.004), (0.02, 0.0), (0.0, 0.01)])
def test_the_policys_cost_is_fitted_as_a_line(a, b):
    batches = [1, 4, 16, 64]
    assert fit_policy_cost(batches, [a + b * x for x in batches]) == (pytest.approx(a, abs=1e-9), pytest.approx(b, abs=1e-9))
    assert fit_policy_cost([8, 8], [0.1, 0.12]) == (pytest.approx(0.11), 0.0)
    with pytest.raises(ValueError, match="as many batch sizes"):
        fit_policy_cost([1, 2], [0.1])


def test_bad_costs_are_refused_with_what_was_expected():
    with pytest.raises(ValueError, match="env_cpu_s must be a finite number of seconds > 0"):
        ServerCosts(0.1, 0.0, 0.0, 4, 8)
    with pytest.raises(ValueError, match="costs nothing"):
        ServerCosts(0.0, 0.0, 0.01, 4, 8)
    with pytest.raises(ValueError, match="cores"):
        ServerCosts(0.1, 0.0, 0.01, 0, 8)


# -- the layout chooser's decisions on recorded costs ----------------------------------------------------
def test_a_dominant_fixed_cost_gets_one_stage_and_whole_batches():
    # a VLA's fixed cost against envs that step a chunk in milliseconds: every call serves all N envs
    costs = ServerCosts(policy_fixed_s=0.45, policy_per_env_s=0.002, env_cpu_s=0.0004, cores=15, chunk=8)
    for n in (16, 32):
        cand, _ = choose_layout(costs, n)
        assert cand.mode == "step" and cand.pipeline_stages == 1, cand.label


def test_a_dominant_env_side_gets_groups_that_keep_the_policy_fed():
    # the 2-core machine (one env core) with pi0-eager's wait: two groups, each call half the envs
    cpu = ServerCosts(**TWO_CORE)
    for n in (4, 8):
        cand, prediction = choose_layout(cpu, n)
        assert n / effective_max_batch(cand.max_batch, n) == 2 if cand.mode == "dynamic" else cand.pipeline_stages == 2, cand.label
        assert prediction.steps_per_s * 8 == pytest.approx(cpu.closed_loop(n)[0], rel=0.05)


def test_on_the_recorded_gpu_server_the_chooser_follows_the_closed_loop():
    costs = ServerCosts(**H100)
    for n, groups in ((16, 1), (64, 2), (128, 2)):
        cand, prediction = choose_layout(costs, n)
        calls = cand.pipeline_stages if cand.max_batch is None else n / effective_max_batch(cand.max_batch, n)
        assert calls == groups, (n, cand.label)
        assert costs.closed_loop(n)[1] == groups
        # the model's prediction and the closed loop agree within the transport's costs
        assert prediction.steps_per_s * 8 == pytest.approx(costs.closed_loop(n)[0], rel=0.06)
        assert cand.num_workers <= 2 * costs.cores


def test_dynamic_batching_above_half_the_envs_is_modelled_as_two_calls_per_cycle():
    model = CostModel(model_costs(ServerCosts(**H100)))
    big = model.predict(Candidate(16, 1, 96, 0.05), 128)
    half = model.predict(Candidate(16, 1, 64, 0.05), 128)
    assert big.steps_per_s == pytest.approx(half.steps_per_s)
    assert effective_max_batch(96, 128) == 64 and effective_max_batch(128, 128) == 128


# -- the bound's calibration and its faults, on recorded and synthetic numbers ------------------------------
# fastenv bench --regime server on the 2-core machine (pi0-eager as a wait, 64 px, chunks of 8): c calibrated
# at 39.8 ms a step on one env alone, while the rows' envs spent 34.3 ms (N=2) and 30.3 ms (N=4)
RECORDED = {"a": 0.0968, "b": 0.00394, "c_alone": 0.03983, "rows": {2: (29.2, 0.03430), 4: (33.2, 0.03029)}}


def _window(steps, cpu_per_step, resets=0, reset_s=0.35):
    return {"env_steps": steps, "step_cpu_total_s": steps * cpu_per_step, "step_wall_total_s": steps * cpu_per_step,
            "reset_cpu_total_s": resets * reset_s, "reset_wall_total_s": resets * reset_s, "resets": resets}


def test_c_is_the_timed_windows_or_the_median_windows_with_resets_spread_over_the_rows_episodes_and_its_spread_is_the_windows():
    from fastenv.tuning.bound import env_cost

    # the same stepping, with and without a reset in the window: the same c (resets amortized, not as they fell)
    windows = [_window(64, 0.030), _window(64, 0.031, resets=1), _window(64, 0.032)]
    cost = env_cost(windows, episode_steps=160, reset_cpu_s=0.35, reset_wall_s=0.35)
    assert cost["c_windows_s"] == pytest.approx([0.030 + 0.35 / 160, 0.031 + 0.35 / 160, 0.032 + 0.35 / 160])
    assert cost["c_s"] == pytest.approx(0.031 + 0.35 / 160) and cost["c_wall_s"] == pytest.approx(cost["c_s"])
    assert cost["c_from"] == "the median window" and cost["c_median_s"] == cost["c_s"]
    assert cost["spread"] == pytest.approx((0.032 + 0.35 / 160) / (0.030 + 0.35 / 160) - 1)  # the windows differ by up to this
    assert env_cost([_window(64, 0.030)] * 3, 160, 0.35)["spread"] == 0.0
    # a row's own timed window, resets in it taken out and amortized as in the windows: its c, the windows' spread
    timed = env_cost(windows, 160, 0.35, 0.35, timed=_window(1024, 0.027, resets=5))
    assert timed["c_s"] == pytest.approx(0.027 + 0.35 / 160) and timed["c_from"] == "the timed window"
    assert timed["spread"] == cost["spread"] and timed["c_median_s"] == cost["c_s"]
    with pytest.raises(ValueError, match="stepped no env step"):
        env_cost(windows, 160, 0.35, timed=_window(0, 0.03))
    with pytest.raises(ValueError, match="one calibration window or more"):
        env_cost([], 160, 0.35)
    with pytest.raises(ValueError, match="stepped no env step"):
        env_cost([_window(0, 0.03)], 160, 0.35)


def test_resets_are_pooled_with_the_choices_calibration_and_spread_over_the_rows_mean_episode():
    from fastenv.bench.server import ServerConfig, _lengths, amortized

    cfg = ServerConfig(episode_steps=160)
    row = {"windows": [_window(64, 0.030)] * 3, "resets": 0, "reset_cpu_total_s": 0.0, "reset_wall_total_s": 0.0}
    choice = {"resets": 2, "reset_cpu_total_s": 0.7, "reset_wall_total_s": 0.7}  # a window that met no reset still pays for them
    mean = sum(_lengths(cfg, 4)) / 4
    assert amortized(row, cfg, 4, choice)["c_s"] == pytest.approx(0.030 + 0.35 / mean)
    assert amortized(row, cfg, 4)["c_s"] == pytest.approx(0.030)  # no reset seen anywhere: none to add
    # a row's timed window: its c, and its resets pooled with the others (4 resets of 0.35 s, 2 of 0.2 s)
    timed = {**row, "timed": _window(1024, 0.027, resets=2, reset_s=0.2)}
    assert amortized(timed, cfg, 4, choice)["c_s"] == pytest.approx(0.027 + (0.7 + 0.4) / 4 / mean)


def test_a_row_above_its_bound_by_more_than_the_calibrations_spread_is_a_calibration_fault_naming_what_was_off():
    from fastenv.tuning.bound import calibration_fault

    a, b = RECORDED["a"], RECORDED["b"]
    for n, (rate, row_cpu) in RECORDED["rows"].items():
        alone = ServerCosts(a, b, RECORDED["c_alone"], cores=1, chunk=8)
        assert rate / alone.bound(n) > 1.1
        fault = calibration_fault(rate, alone, n, spread=0.03, env_cpu_s=row_cpu)
        assert fault.startswith(f"calibration fault: {rate / alone.bound(n):.2f}x the bound, above the 1.03x its calibration's spread allows")
        assert f"c = 39.8 ms of CPU per env step, the row's envs spent {1000 * row_cpu:.1f} ms" in fault
        # c read from the row's own envs as the row runs them: the row is a result, at its bound
        own = ServerCosts(a, b, row_cpu, cores=1, chunk=8)
        assert calibration_fault(rate, own, n, spread=0.03, env_cpu_s=row_cpu) is None
        assert rate / own.bound(n) == pytest.approx(1.0, abs=0.01)
    # within the spread is no fault; just past it is
    costs = ServerCosts(a, b, 0.030, cores=1, chunk=8)
    assert calibration_fault(costs.bound(4) * 1.049, costs, 4, spread=0.05) is None
    assert calibration_fault(costs.bound(4) * 1.051, costs, 4, spread=0.05) is not None
    # a bound set by the policy names the policy's cost
    policy = ServerCosts(0.432, 0.018, 0.010, cores=1, chunk=8)
    assert policy.limit(2) == "policy"
    fault = calibration_fault(policy.bound(2) * 1.5, policy, 2, spread=0.01, policy_s=0.31)
    assert "(P(N) = 468.0 ms a call of all N envs, the row's calls 310.0 ms)" in fault


def test_the_bounds_spread_is_its_limiting_terms():
    from fastenv.tuning.bound import bound_spread

    assert bound_spread(ServerCosts(**TWO_CORE), 4, c_spread=0.04, policy_spread=0.01) == 0.04  # the env core sets it
    assert bound_spread(ServerCosts(0.432, 0.018, 0.010, cores=1, chunk=8), 2, c_spread=0.04, policy_spread=0.01) == 0.01


POINTS = [{"batch": 1, "seconds": 0.1007, "spread": 0.0005}, {"batch": 2, "seconds": 0.1046, "spread": 0.0004},
          {"batch": 4, "seconds": 0.1127, "spread": 0.0006}]


def _judged(c_s):
    """The recorded fastenv rows judged against a bound with ``c_s``, as the run's JSON holds them."""
    from fastenv.bench.server import judge

    costs = ServerCosts(RECORDED["a"], RECORDED["b"], c_s, cores=1, chunk=8)
    rows = []
    for n, (rate, row_cpu) in RECORDED["rows"].items():
        row = {"row": "fastenv", "num_envs": n, "env_steps_per_s": rate, "env_cpu_s_per_step": row_cpu, "layout": {"label": "W=1 2 stages"},
               "policy": {"busy_share": 0.3, "mean_batch": n / 2, "in_loop_over_alone": 1.0}, "around_policy_ms_per_call": 170.0,
               "host_memory_mb": {"envs": 3000.0, "policy_process": 500.0}}
        judge(row, costs, n, 0.03, POINTS)
        assert row["x_bound"] == pytest.approx(rate / costs.bound(n))
        rows.append({"num_envs": n, "bound": {**costs.describe(n), "c_spread": 0.03, "c_from": "the choice's calibration"}, "fastenv": row})
    return rows


def test_the_table_and_the_json_name_a_calibration_fault_not_a_result():
    from fastenv.bench.report import server_table as format_table
    from fastenv.bench.server import judge

    points = POINTS
    rows = _judged(RECORDED["c_alone"])
    assert all(entry["fastenv"]["calibration_fault"].startswith("calibration fault: ") for entry in rows)
    text = format_table({"rows": rows})
    assert "1.32 FAULT" in text and "1.16 FAULT" in text
    assert "N=4 fastenv: FAULT, not a result: calibration fault: 1.32x the bound" in text
    assert "c = 39.83 ms from the choice's calibration (spread 3%)" in text
    within = dict(rows[0]["fastenv"])
    judge(within, ServerCosts(RECORDED["a"], RECORDED["b"], 0.0343, cores=1, chunk=8), 2, 0.03, points)
    text = format_table({"rows": [{**rows[0], "fastenv": within}]})
    assert within["calibration_fault"] is None and f"{within['x_bound']:.2f} FAULT" not in text and "not a result" not in text


@pytest.mark.parametrize(("c_s", "code"), [(RECORDED["c_alone"], 1), (0.0303, 0)])  # 0.0303: the N=4 row's own
def test_the_command_says_a_calibration_fault_is_not_a_result_and_exits_with_an_error(c_s, code, monkeypatch, capsys, tmp_path):
    import fastenv.bench.server
    from fastenv.cli import main

    payload = {"rows": _judged(c_s), "files": [str(tmp_path / "server.json")]}
    monkeypatch.setattr(fastenv.bench.server, "run", lambda cfg: payload)  # the recorded rows, not a run
    assert main(["bench", "--regime", "server", "--out", str(tmp_path / "server.json")]) == code
    out, err = capsys.readouterr()
    faulted = [f"N={e['num_envs']} fastenv" for e in payload["rows"] if e["fastenv"]["calibration_fault"]]
    assert bool(faulted) == bool(code)
    if faulted:
        assert f"fastenv bench: {', '.join(faulted)} ran above the bound by more than its calibration's spread: a calibration fault" in err
        assert all(f"{name}: FAULT, not a result" in out for name in faulted)
    else:
        assert "calibration fault" not in err + out


# -- the exact batched policy ----------------------------------------------------------------------------
from helpers import need
torch = need("torch")


def _obs(rng, b, shapes, state_dim):
    images = [torch.as_tensor(rng.integers(0, 256, (b, *s), dtype=np.uint8)) for s in shapes]
    return images, torch.as_tensor(rng.standard_normal((b, state_dim)).astype(np.float32))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), b=st.integers(1, 12), data=st.data())
def test_an_envs_actions_do_not_depend_on_its_batch(seed, b, data):
    from fastenv.bench.policies import ExactChunkPolicy

    shapes = [(16, 16, 3), (8, 12, 3)]
    policy = ExactChunkPolicy(shapes, 9, chunk=4, action_dim=7, seed=3)
    rng = np.random.default_rng(seed)
    images, state = _obs(rng, b, shapes, 9)
    ids = rng.permutation(1000)[:b]
    counts = rng.integers(0, 500, b)
    together = policy.act(images, state, ids, counts)
    prints = policy.fingerprint(images, state)
    assert together.dtype == torch.float32 and together.shape == (b, 4, 7)
    assert bool((together >= -1).all() and (together < 1).all())
    rows = data.draw(st.lists(st.integers(0, b - 1), min_size=1, max_size=b, unique=True))
    sub = torch.as_tensor(rows)
    alone = policy.act([im[sub] for im in images], state[sub], ids[rows], counts[rows])
    assert torch.equal(alone, together[sub])  # bit for bit, in any batch and order
    assert torch.equal(policy.fingerprint([im[sub] for im in images], state[sub]), prints[sub])


def test_the_policy_reads_the_observation_and_its_fingerprint_sees_one_pixel():
    from fastenv.bench.policies import ExactChunkPolicy

    shapes = [(8, 8, 3)]
    policy = ExactChunkPolicy(shapes, 4, chunk=2, action_dim=7)
    images, state = _obs(np.random.default_rng(0), 2, shapes, 4)
    ids, counts = np.array([5, 5]), np.array([0, 0])
    changed = [images[0].clone()]
    changed[0][1, 3, 3, 1] ^= 1  # one bit of one pixel of row 1
    assert not torch.equal(policy.fingerprint(images, state)[1], policy.fingerprint(changed, state)[1])
    assert torch.equal(policy.fingerprint(images, state)[0], policy.fingerprint(changed, state)[0])
    # the next chunk of the same env draws other noise; another env id too
    a = policy.act(images, state, ids, counts)
    assert not torch.equal(a, policy.act(images, state, ids, counts + 1))
    assert not torch.equal(a, policy.act(images, state, ids + 1, counts))


def test_the_server_policy_copies_once_and_spends_the_cost():
    from fastenv.bench.server_policy import ServerPolicy, calibrate_policy, local_fit, policy_seconds_at
    from fastenv.policy_cost import InferenceCost

    shapes = [(8, 8, 3), (8, 8, 3)]
    policy = ServerPolicy(shapes, 5, chunk=3, max_batch=6, device="cpu", cost=InferenceCost(0.02, 0.005), compute="wait")
    points = calibrate_policy(policy, shapes, 5, [1, 2, 4], repeats=2)
    a, b = local_fit(points, 4)
    assert a == pytest.approx(0.02, abs=0.01) and b == pytest.approx(0.005, abs=0.004)  # sleeps: at least, little more
    assert policy_seconds_at(points, 3) == pytest.approx((points[1]["seconds"] + points[2]["seconds"]) / 2)
    with pytest.raises(ValueError, match="at most 6"):
        policy([np.zeros((7, 8, 8, 3), np.uint8)] * 2, np.zeros((7, 5), np.float32), np.arange(7), np.zeros(7, np.int64))


def test_the_trajectory_comparison_catches_a_shifted_observation():
    from fastenv.bench.same_data import Trajectories, compare

    ref, ours = Trajectories(2, ()), Trajectories(2, ())
    for t in (ref, ours):
        t.observed(np.array([0, 1]), np.array([10, 20]))
        t.stepped(np.array([0, 1]), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool), {})
    assert compare(ours, ref) == {"equal": True, "chunks_compared": 1, "first_difference": None}
    ours.observed(np.array([1]), np.array([21]))
    ref.observed(np.array([1]), np.array([20]))
    assert compare(ours, ref)["first_difference"] == "env 1, observation 1"


# -- one real run on LIBERO ------------------------------------------------------------------------------
@pytest.mark.libero
@pytest.mark.big_memory
def test_the_server_regime_runs_default_and_fastenv_on_libero_with_the_same_data(tmp_path):
    from fastenv.bench.report import server_table as format_table
    from fastenv.bench.server import ServerConfig, run

    cfg = ServerConfig(envs=(2,), camera_size=32, seconds=1.0, min_chunks=2, calibration_chunks=1, device="cpu",
                       policy_cost="0.05,0.002", policy_compute="wait", episode_steps=24, out=str(tmp_path / "server.json"))
    payload = run(cfg, progress=lambda line: None)
    assert [p.name for p in tmp_path.iterdir()] == ["server.json"]  # a file where a file is named
    written = json.loads((tmp_path / "server.json").read_text())
    (entry,) = written["rows"]
    # the bound's c: fastenv's envs over the row's timed window, resets amortized; its spread: windows run the same way before it
    calibration = entry["fastenv"]["env_calibration"]
    assert len(calibration["windows"]) == cfg.calibration_windows and calibration["mode"] == entry["fastenv"]["layout"]["mode"]
    assert all(w["env_steps"] >= 2 * cfg.chunk for w in calibration["windows"])  # every env's chunk, two envs
    assert entry["bound"]["inputs"]["c_s"] == calibration["c_s"] and entry["bound"]["c_from"] == "the fastenv row's envs over its timed window"
    timed = calibration["timed"]
    assert timed["env_steps"] >= entry["fastenv"]["env_steps"] and calibration["c_from"] == "the timed window"
    assert calibration["c_s"] == pytest.approx(timed["step_cpu_total_s"] / timed["env_steps"] + calibration["reset_cpu_s"] / calibration["episode_steps"])
    assert calibration["c_min_s"] <= calibration["c_median_s"] <= calibration["c_max_s"] and calibration["spread"] >= 0
    assert written["env_calibration"]["c_s"] > 0 and len(written["env_calibration"]["windows"]) == cfg.calibration_windows
    # the keys earlier runs' JSON holds stay, per env step and per reset as before
    assert {"workers", "env_steps", "step_cpu_s", "step_wall_s", "reset_cpu_s", "reset_wall_s", "resets", "seconds"} <= set(written["env_calibration"])
    assert written["env_calibration"]["env_steps"] == sum(w["env_steps"] for w in written["env_calibration"]["windows"])
    for name in ("Default", "fastenv"):  # a row is a result or a named fault, never silently above its bound
        row = entry[name]
        assert (row["calibration_fault"] is None) == (row["x_bound"] <= 1 + entry["bound"]["spread"])
    assert entry["fastenv"]["same_data_as_default"]["equal"], entry["fastenv"]["same_data_as_default"]
    assert entry["fastenv"]["same_data_as_default"]["chunks_compared"] >= 2
    assert entry["Default"]["episodes_ended"] + entry["fastenv"]["episodes_ended"] > 0  # episodes of 12-36 steps ended
    assert not entry["fastenv"]["fast_paths_not_served"]
    for name in ("Default", "fastenv"):
        row = entry[name]
        assert row["env_steps_per_s"] > 0 and 0 < row["x_bound"] and 0 < row["policy"]["busy_share"] <= 1
        assert row["policy"]["mean_batch"] >= 1 and row["host_memory_mb"]["envs"] > 0
    assert entry["Default"]["policy"]["mean_batch"] == 2  # the whole batch each call
    inputs = entry["bound"]["inputs"]
    assert inputs["C"] == len(written["env_cores"]) and inputs["K"] == 8 and inputs["c_s"] > 0
    assert entry["fastenv"]["layout"]["label"] == entry["chosen"]
    assert "bound = min(N K / P(N), C / c)" in format_table(payload)


# -- the policy's cores ----------------------------------------------------------------------------------
def _topology(tmp_path, siblings):
    for cpu, text in siblings.items():
        folder = tmp_path / f"cpu{cpu}" / "topology"
        folder.mkdir(parents=True)
        (folder / "thread_siblings_list").write_text(text + "\n")
    return tmp_path


def test_the_policy_gets_a_whole_physical_core(tmp_path):
    from fastenv.machine import parse_cpu_list, split_cores, thread_siblings

    assert parse_cpu_list("0-2,8") == [0, 1, 2, 8]
    smt = _topology(tmp_path / "smt", {c: f"{c % 8},{c % 8 + 8}" for c in range(16)})  # 8 cores x 2 threads
    assert thread_siblings(0, smt) == [0, 8]
    assert split_cores(1, list(range(16)), smt) == ([0, 8], [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15])
    plain = _topology(tmp_path / "plain", {0: "0", 1: "1"})
    assert split_cores(1, [0, 1], plain) == ([0], [1])
    # a sibling outside the affinity is not taken; whole cores that would leave nothing: the plain split
    assert split_cores(1, [0, 1, 2], smt) == ([0], [1, 2])
    assert split_cores(1, [0, 8], smt) == ([0], [8])
    assert split_cores(2, [0, 1], plain) == ([0, 1], [0, 1])
    assert thread_siblings(3, tmp_path / "missing") == [3]


def _affinity_in_child(factory):
    return factory()


def _affinity():
    import os

    return sorted(os.sched_getaffinity(0))


def test_an_env_factory_pins_only_other_processes():
    # AsyncVectorEnv calls its first factory in the caller (a dummy env for the spaces): the policy's
    # process keeps its cores
    import multiprocessing
    import os

    from fastenv.bench.placement import Pinned

    mine = sorted(os.sched_getaffinity(0))
    factory = Pinned(_affinity, mine[:1])
    assert factory() == mine and sorted(os.sched_getaffinity(0)) == mine
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_affinity_in_child, (factory,)) == mine[:1]


def test_an_env_process_that_dies_is_named_with_how_it_ended():
    import multiprocessing
    import signal

    from fastenv.bench.placement import process_endings

    ctx = multiprocessing.get_context("spawn")
    alive, crashed, failed = ctx.Process(target=signal.pause), ctx.Process(target=os.abort), ctx.Process(target=sys.exit, args=(3,))
    for p in (alive, crashed, failed):
        p.start()
    crashed.join(30), failed.join(30)
    try:
        text = process_endings([alive, crashed, failed])
        assert text.startswith("env process 1 ended (SIGABRT), env process 2 ended (exit code 3)")
        assert "env process 0" not in text and "GiB" in text
        assert process_endings([alive]) == ""
    finally:
        alive.kill()
        alive.join()
