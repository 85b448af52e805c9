"""The same PPO run over stock and fastenv rollouts: bit for bit, update by update (real simulators)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need

ROOT = Path(__file__).resolve().parent.parent


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / script), *args], capture_output=True, text=True, timeout=900)


# Two end-to-end runs of one claim (the same PPO run, bit for bit): CI runs one per commit.
@pytest.mark.libero
@pytest.mark.maniskill
@pytest.mark.big_memory
@pytest.mark.ci_sample("the same PPO run")
def test_training_benchmark_finds_both_runs_identical_at_every_update(tmp_path):
    need("torch")
    out = run(
        "benchmarks/bench_training.py", "--updates", "1", "--layout", "dynamic", "--camera-size", "64", "--num-steps", "4",
        "--max-episode-steps", "20", "--num-envs", "2", "--maniskill-envs", "4", "--maniskill-updates", "2", "--out", str(tmp_path / "t.json"),
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    payload = json.loads((tmp_path / "t.json").read_text())
    libero, maniskill = payload["results"]
    # LIBERO: chunks of 8 from LIBERO's own env stepped one action at a time vs fastenv's stack in a
    # dynamic-batching layout (one env per policy call), so the policy runs row by row in both
    assert libero["rowwise_policy"] and libero["layout_plan"]["max_batch"] == 1
    assert libero["updates"][0]["stock"]["episodes"] > 0  # 8 chunks of 8 per env, 20-step episodes: resets inside
    for result in (libero, maniskill):
        assert result["identical_every_update"], result["updates"]
        for update in result["updates"]:
            assert update["stock"]["digest"] == update["fastenv"]["digest"]
            assert update["stock"]["losses"] == update["fastenv"]["losses"]
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.maniskill
@pytest.mark.big_memory
@pytest.mark.ci_sample("the same PPO run")
def test_the_learning_curve_example_runs_both_stacks_identically(tmp_path):
    need("torch")
    out = run("examples/same_run.py", "--total-steps", "400", "--num-envs", "4", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    payload = json.loads((tmp_path / "same_run_pushcube.json").read_text())
    assert len(payload["updates"]) == 2 and payload["identical_every_update"]
    assert payload["updates"][-1]["env_steps"] == 400
    assert (tmp_path / "same_run_pushcube.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
