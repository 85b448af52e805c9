"""benchmarks/bench_rl_libraries.py: a quick run writes both rows of a library, each having collected
the steps asked, and a library that does not import is a row that says so (no timed assertions)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "bench_rl_libraries.py"


@pytest.fixture(scope="module")
def bench():
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_rl_libraries", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_rl_libraries"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    sys.path[:] = saved
    yield module
    del sys.modules["bench_rl_libraries"]


def quick_run(library, tmp_path):
    """The script's ``--quick`` run of one library (2 envs, 32 simulator steps timed per row); its JSON."""
    out = tmp_path / "rl.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--libraries", library, "--num-envs", "2", "--steps", "32", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.skipif(importlib.util.find_spec("stable_baselines3") is None, reason='pip install -e ".[sb3]"')
def test_a_quick_run_writes_both_rows_of_a_library_each_with_the_steps_asked(bench, tmp_path):
    payload = quick_run("sb3", tmp_path)
    assert payload["config"]["steps"] == 32 and payload["config"]["camera_size"] == 32 and payload["config"]["rounds"] == 1
    assert payload["command"].startswith("python benchmarks/bench_rl_libraries.py --quick")
    assert payload["versions"]["stable_baselines3"] and payload["machine"]["cpu_count"] >= 1
    rows = {(r["library"], r["side"]): r for r in payload["rows"]}
    assert set(rows) == {("sb3", "stock"), ("sb3", "fastenv")}
    for (_, side), row in rows.items():
        assert row["status"] == "ran", row
        assert row["env_steps"] == 32 and len(row["rounds"]) == 1
        assert row["rounds"][0]["collector_steps"] == (16 if side == "stock" else 2)  # one action against a chunk of 8, per env
        assert row["env_steps_per_s"] > 0 and row["spread"][0] <= row["env_steps_per_s"] <= row["spread"][1]
    assert rows["sb3", "stock"]["vectorization"] == "DummyVecEnv" and rows["sb3", "fastenv"]["vectorization"] == "SB3VecEnv"
    assert "x_stock" in rows["sb3", "fastenv"] and "x_stock" not in rows["sb3", "stock"]
    assert "| Stable-Baselines3 | fastenv |" in bench.docs_table(payload)


# Each library's rows: what must import, its stock and fastenv vectorization, and the stock row's collector
# steps per env, in simulator steps. skrl's stock SyncVectorEnv autoresets in NEXT_STEP mode: the step
# after the episode's end (16 steps, the timed collection's 9th) only resets, and is not counted.
NEW_LIBRARIES = {
    "skrl": (("skrl",), "SyncVectorEnv", "PipelineVectorEnv", 15),
    "sbx": (("sbx",), "DummyVecEnv", "SB3VecEnv", 16),
    "rllib": (("ray", "tree"), "SyncVectorEnv", "PipelineVectorEnv", 16),
    "rl_games": (("rl_games", "ray"), "RayVecEnv", "RlGamesVecEnv", 16),
}


@pytest.mark.ci_sample("a quick run of skrl, SBX, RLlib or rl_games")
@pytest.mark.parametrize("library", [
    pytest.param(name, marks=[pytest.mark.xdist_group("ray")] if name == "rl_games" else [])  # RayVecEnv starts a local Ray cluster
    for name in NEW_LIBRARIES
])
def test_a_quick_run_of_each_library_collects_on_its_own_default_and_on_fastenv(bench, tmp_path, library):
    modules, stock, fast, stock_steps = NEW_LIBRARIES[library]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{library} needs {missing}")
    payload = quick_run(library, tmp_path)
    rows = {r["side"]: r for r in payload["rows"]}
    assert set(rows) == {"stock", "fastenv"} and all(r["status"] == "ran" for r in rows.values()), payload["rows"]
    assert (rows["stock"]["vectorization"], rows["fastenv"]["vectorization"]) == (stock, fast)
    assert rows["stock"]["rounds"][0]["collector_steps"] == stock_steps and rows["stock"]["env_steps"] == 2 * stock_steps
    assert rows["fastenv"]["rounds"][0]["collector_steps"] == 2 and rows["fastenv"]["env_steps"] == 32  # a chunk of 8 counts 8
    assert rows["fastenv"]["x_stock"] > 0 and f"| {bench.LIBRARIES[library].name} | fastenv |" in bench.docs_table(payload)


def test_a_library_that_does_not_import_is_a_row_saying_why(bench, monkeypatch):
    missing = bench.Library("Nowhere", "fastenv_no_such_library", bench.run_sb3, {"stock": "its vector env", "fastenv": "fastenv's"})
    monkeypatch.setitem(bench.LIBRARIES, "nowhere", missing)
    out = bench.run_row("nowhere", "stock", bench.Config())
    assert out == {"status": "not installed", "reason": "import fastenv_no_such_library: ModuleNotFoundError: No module named 'fastenv_no_such_library'"}
    rows = bench.summarize("nowhere", {"stock": [out], "fastenv": []}, bench.Config())  # main() runs no side after that
    assert [(r["side"], r["status"]) for r in rows] == [("stock", "not installed"), ("fastenv", "not installed")]
    assert all("fastenv_no_such_library" in r["reason"] for r in rows)
    assert "not installed: import fastenv_no_such_library" in bench.docs_table({"rows": rows})


def test_the_ratio_is_the_median_of_each_round_s_ratio_to_the_library_s_own_default(bench):
    def ran(rate):
        return {"status": "ran", "env_steps_per_s": rate, "env_steps": 64, "vectorization": "V", "seconds": 64 / rate, "collector_steps": 1}

    rows = bench.summarize("sb3", {"stock": [ran(10.0), ran(20.0), ran(10.0)], "fastenv": [ran(50.0), ran(80.0), ran(70.0)]}, bench.Config())
    fast = rows[1]
    assert fast["x_stock"] == 5.0 and fast["env_steps_per_s"] == 70.0 and fast["spread"] == [50.0, 80.0]  # ratios 5, 4, 7


def test_steps_that_do_not_fill_whole_chunks_of_every_env_are_refused(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--steps", "36", "--num-envs", "4", "--libraries", "sb3"])
    assert "multiple of num_envs * chunk (32)" in capsys.readouterr().err
