"""The main job, `fastenv bench`, end to end (quick) and its argument errors."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need

from fastenv.cli import main
from fastenv.core.fast_paths import FastPath


def test_impossible_layout_is_refused_before_building_anything(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--num-envs", "3", "--workers", "2"])
    assert exit_info.value.code == 2
    assert "num_envs must be a multiple of num_workers * pipeline_stages" in capsys.readouterr().err


def test_the_default_run_is_about_ten_minutes_on_the_reference_machine_and_full_is_the_long_one(capsys):
    from fastenv.bench import BenchConfig, estimate_seconds

    assert 7 * 60 <= estimate_seconds(BenchConfig()) <= 11 * 60
    full = BenchConfig.full()
    assert (full.steps, full.rounds) == (192, 3) and estimate_seconds(full) > 2 * estimate_seconds(BenchConfig()) * 0.9
    with pytest.raises(SystemExit):
        main(["bench", "--quick", "--full"])
    assert "--quick and --full are exclusive" in capsys.readouterr().err


def test_out_takes_a_json_file_where_one_is_named_and_a_folder_otherwise(tmp_path, capsys):
    from fastenv.bench import output_file

    assert output_file(tmp_path / "run.json", "fastenv_bench.json") == tmp_path / "run.json"
    assert output_file(tmp_path / "RUN.JSON", "fastenv_bench.json") == tmp_path / "RUN.JSON"
    assert output_file(tmp_path / "runs", "fastenv_bench_server.json") == tmp_path / "runs" / "fastenv_bench_server.json"
    (tmp_path / "old.json").mkdir()  # a folder that is there stays a folder, whatever its name
    assert output_file(tmp_path / "old.json", "fastenv_bench.json") == tmp_path / "old.json" / "fastenv_bench.json"
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(ValueError, match="out must be a folder or a .json file; .*notes.txt' is a file of another kind"):
        output_file(tmp_path / "notes.txt", "fastenv_bench.json")
    for regime in ([], ["--regime", "server"]):  # refused before anything is built
        with pytest.raises(SystemExit) as exit_info:
            main(["bench", *regime, "--out", str(tmp_path / "notes.txt")])
        assert exit_info.value.code == 2 and "is a file of another kind" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "old.json"]


@pytest.mark.libero
def test_bench_quick_writes_table_json_and_chart(tmp_path):
    need("torch", "fastenv bench")
    out = subprocess.run(
        [sys.executable, "-m", "fastenv.cli", "bench", "--quick", "--out", str(tmp_path / "quick.json")],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quick.json", "quick.png"]  # a file where a file is named
    # the vector env's build lines (a build past 2 s prints them) come above the bar, never on its line
    segments = [s for s in re.split(r"[\r\n]", out.stderr) if "envs in 1 workers" in s]
    assert segments and all(s.startswith("fastenv: ") for s in segments), out.stderr[-3000:]
    # says what it runs, then how long it takes here once its first configuration has run here
    assert out.stdout.startswith("fastenv bench: 7 configurations x 1 rounds x 2 envs x 16 steps; how long it takes here is said once")
    assert "fastenv bench: about " in out.stdout and " in all on this machine (Default's first round took " in out.stdout
    names = ["Default", "+Slim", "+SkipObs", "+Pipeline", "+Async", "+FastReset", "+FastSubstep"]
    for name in names:
        assert name in out.stdout
    payload = json.loads((tmp_path / "quick.json").read_text())
    rows = payload["results"]
    assert [r["config"].split(" ")[0] for r in rows] == names
    assert all(run["env_steps"] >= 32 for r in rows for run in r["rounds"]) and all(r["ms_per_env_step"] > 0 for r in rows)
    assert rows[0]["speedup_vs_default"] == 1.0
    # stock, slim and chunked: the five chunked configurations of a round share one vector env
    assert payload["vector_env_builds"] == 3 * payload["config"]["rounds"]
    # where the time goes: fastenv's profiler for fastenv's configurations
    for row in rows[1:]:
        b = row["breakdown_ms_per_env_step"]
        assert b["step"] > 0 and b["policy"] > 0 and b["reset"] >= 0 and row["x_floor"] > 0
    assert all(rows[k]["breakdown_ms_per_env_step"]["physics"] > 0 for k in range(2, len(rows)))  # chunks
    assert set(payload["policy_cores"]).isdisjoint(payload["env_cores"]) or len(payload["env_cores"]) == 1
    assert (tmp_path / "quick.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the run's own time: announced after Default's first part, measured per configuration, the bar's estimates kept
    timing = payload["timing"]
    assert 0 < timing["announced"]["at_s"] < timing["seconds"] and timing["announced"]["total_s"] > timing["announced"]["at_s"]
    assert set(timing["measured_s"]) == {r["config"] for r in rows} and set(timing["builds_s"]) == {"stock", "slim", "chunked"}
    assert timing["estimates"][-1][1] == pytest.approx(timing["estimates"][-1][0], abs=1.0)  # at the end: what it took
    # the same data: every configuration's trajectories equal Default's, episode ends included
    assert all(run["episodes_ended"] > 0 for run in rows[0]["rounds"])
    for row in rows[1:]:
        same = row["same_data_as_default"]
        assert same["equal"], (row["config"], same)
        assert same["chunks_compared"] >= 4
    assert "same data" in out.stdout and "NO:" not in out.stdout
    # what served, in every worker: each row's own fast paths, in every env of every round
    for row in rows:
        served = row["fast_paths_served"]
        assert served["envs"] == payload["config"]["num_envs"] * payload["config"]["rounds"]
        assert row["own_fast_paths_not_served"] == [], (row["config"], served)
        assert all(served[path] == served["envs"] for path in row["own_fast_paths"])
    assert FastPath.COMPILED_POLICY_STEP in rows[-1]["own_fast_paths"]
    assert "[NOT SERVED" not in out.stdout and "steps aside" not in out.stderr and "differs from robosuite" not in out.stderr


@pytest.mark.libero
@pytest.mark.ci_sample("the VLA regime end to end")
def test_bench_in_the_vla_regime_waits_out_the_cost_and_sets_overlap_against_its_bound(tmp_path):
    need("torch", "fastenv bench")
    from fastenv.policy_cost import inference_cost

    out = subprocess.run(
        [sys.executable, "-m", "fastenv.cli", "bench", "--quick", "--policy-cost", "0.02,0.01", "--only", "+SkipObs", "+Pipeline",
         "+Async", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads((tmp_path / "fastenv_bench.json").read_text())
    assert payload["policy_cost"]["per_call_s"] == 0.02 and payload["policy_cost"]["compute"] == "wait"
    rows = {r["config"].split(" ")[0]: r for r in payload["results"]}
    cost, n, chunk = inference_cost("0.02,0.01"), payload["config"]["num_envs"], payload["config"]["chunk"]
    # each call took at least the modelled latency: all envs at once, one stage's, or a dynamic batch
    assert rows["+SkipObs"]["breakdown_ms_per_env_step"]["policy"] >= 0.99 * cost.per_env_step_ms(n, chunk)
    assert rows["+Pipeline"]["breakdown_ms_per_env_step"]["policy"] >= 0.99 * cost.per_env_step_ms(n // 2, chunk)
    for name in ("+Pipeline", "+Async"):
        overlap = rows[name]["overlap"]
        assert overlap["reference"].startswith("+SkipObs") and overlap["bound_x"] >= 1.0 and overlap["gain_x"] > 0
        assert rows[name]["same_data_as_default"]["equal"]  # the wait changes what it costs, not the data
        assert f"{name}" in out.stdout and "where perfect overlap gives" in out.stdout
    assert "VLA regime: 0.02s+0.01s*batch, 20 ms + 10 ms x batch per call, spent as wait" in out.stdout


@pytest.mark.libero
@pytest.mark.ci_sample("the VLA regime end to end")
def test_the_batching_benchmark_measures_its_grid_tune_and_verdict_on_libero_10s_tasks(tmp_path):
    need("torch", "the benchmarks need it")
    out_path = tmp_path / "batching.json"
    out = subprocess.run(
        [sys.executable, "bench_batching.py", "--quick", "--out", str(out_path)],
        capture_output=True, text=True, timeout=900, cwd=str(Path(__file__).resolve().parent.parent / "benchmarks"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads(out_path.read_text())
    row, = payload["results"]
    assert row["layouts"] == 3 and {t["layout"] for t in row["grid"]} >= {row["grid_best"], row["best_dynamic"]}
    assert row["plan_steps_per_s_tune"] > 0 and row["best_dynamic_over_sync_grid"] > 0
    assert row["policy_cost"].startswith("pi05-behavior") and row["chunk"] == 32
    assert "best B/T" in out.stdout and "tuned plan" in out.stdout


@pytest.mark.parametrize("name", ["fastenv_bench_2core_avx512", "fastenv_bench_2core_vla"])
def test_the_bench_chart_keeps_its_titles_and_legend_inside_the_figure_and_off_the_bars(name, tmp_path):
    """Drawn from a committed run's JSON: every title, tick label and the legend lie within the
    figure, and the legend lies outside both axes (so it covers no bar)."""
    need("matplotlib", "fastenv bench's chart")
    from fastenv.bench.report import _figure, plot

    payload = json.loads((Path(__file__).resolve().parent.parent / "results" / f"{name}.json").read_text())
    fig = _figure(payload)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    page = fig.get_window_extent(renderer)
    left, right = fig.axes
    legend = right.get_legend()
    texts = [ax.title for ax in fig.axes] + [t for ax in fig.axes for t in ax.get_yticklabels() + ax.get_xticklabels()] + [legend]
    for artist in texts:
        box = artist.get_window_extent(renderer)
        assert page.x0 - 0.5 <= box.x0 and box.x1 <= page.x1 + 0.5 and page.y0 - 0.5 <= box.y0 and box.y1 <= page.y1 + 0.5, \
            (getattr(artist, "get_text", lambda: "legend")(), box, page)
    for ax in fig.axes:
        assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))
    # the ratio over each bar sits within its axes
    for label in left.texts:
        assert left.get_window_extent(renderer).contains(*label.get_window_extent(renderer).max), label.get_text()
    assert plot(payload, tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_row_whose_own_fast_path_did_not_serve_is_marked_so():
    from fastenv.bench import Variant, format_table, summarize
    from fastenv.bench.same_data import Trajectories

    def run(paths):
        return {"env_steps": 64, "seconds": 1.0, "breakdown_s": {"policy": 0.1}, "env_cpu_s": None, "trajectories": Trajectories(2, ()),
                "fast_paths": paths}

    base, fast = Variant("Default", "stock"), Variant("+FastSubstep", "chunked", paths=(FastPath.COMPILED_POLICY_STEP,))
    one_aside = [{FastPath.COMPILED_POLICY_STEP: True}, {FastPath.COMPILED_POLICY_STEP: False}]
    rows = summarize([base, fast], {"Default": [run([{}, {}])], "+FastSubstep": [run(one_aside)]}, env_cores=1)
    assert rows[1]["own_fast_paths_not_served"] == [FastPath.COMPILED_POLICY_STEP]
    assert rows[1]["fast_paths_served"] == {"envs": 2, FastPath.COMPILED_POLICY_STEP: 1}
    table = format_table(rows)
    assert "+FastSubstep [NOT SERVED: compiled policy step]" in table and "Default [NOT" not in table
