"""benchmarks/bench_eval_gpu.py: its figures on recorded times, and its CPU smoke run end to end (1 task x 1 episode)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_eval_gpu", ROOT / "benchmarks" / "bench_eval_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[:] = saved
    return module


def test_the_steady_rate_runs_from_the_first_end_to_the_last_start(bench):
    starts = [0.0, 0.0, 10.0, 20.0, 30.0]  # seconds since the run's start
    ends = [10.0, 20.0, 30.0, 40.0, 45.0]  # the last two end in the drain, after the last start
    steady = bench.steady_rate(0.0, starts, ends)
    assert steady["window_seconds"] == 20.0 and steady["episodes_in_window"] == 2 and steady["seconds_to_first_end"] == 10.0
    assert steady["episodes_per_hour"] == pytest.approx(360.0)
    assert bench.minutes_for(2000, 12000.0) == pytest.approx(1999 / 200)  # 12,000 an hour: 200 a minute
    assert bench.minutes_for(2000, 12000.0, lead_seconds=60) == pytest.approx(1 + 1999 / 200)
    assert bench.minutes_for(2000, None) is None and bench.steady_rate(0.0, [], [])["episodes_per_hour"] is None


@pytest.mark.libero
def test_the_cpu_smoke_run_writes_every_figure(tmp_path):
    need("torch")
    out = tmp_path / "bench_eval_gpu.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_eval_gpu.py"), "--device", "cpu", "--workers", "1",
                           "--envs-per-worker", "1", "--no-progress", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["complete"] and payload["episodes"] == 1 and payload["device"] == "cpu" and payload["gpu"] is None
    assert payload["episodes_per_hour"] > 0 and payload["minutes_for_2000_at_the_whole_runs_rate"] > 0
    assert payload["vla_eval_published"]["minutes"] == 18 and payload["aim_minutes_for_2000"] == 10
    (policy,) = payload["policies"]
    assert policy["calls"] >= 16 and policy["mean_batch"] == 1 and 0 < policy["busy_share"] < 1 and policy["device"] == "cpu"
    # one env: every call had batch 1, so the fit cannot part a from b, and says so; B_max stays 1
    assert policy["chosen_by"] == "fastenv.tuning.CostModel" and policy["fit"]["how"] == "one batch size" and policy["max_batch"] == 1
    assert set(payload["worker_max_rss_mb"]) == {"0"} and payload["protocol"]["camera_size"] == 64
    assert "2,000 episodes:" in done.stdout and "vla-eval published 18 min" in done.stdout
