"""benchmarks/bench_rl_libraries.py: a quick run writes a library's three rows (stock, fastenv-1,
fastenv-8), each having counted the simulator steps it took by one rule (a call that only resets an
env counts none), with both ratios, the versions and the machine; a library that does not import is
a row that says so (no timed assertions)."""

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from fakes import RandomLengthEnv, make_chunked_fake
from helpers import need

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
    """The script's ``--quick`` run of one library (2 envs, 16-step episodes, 32 simulator steps timed per row); its JSON."""
    out = tmp_path / "rl.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--libraries", library, "--num-envs", "2", "--steps", "32", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=900, check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return json.loads(out.read_text())


# Each library's modules to import, its stock and fastenv vectorization, its distribution, and the simulator
# steps each row counts in the quick run (stock, fastenv-1, fastenv-8). Every row warms up with 8 simulator
# steps per env, so the 16-step episodes end at the timed collection's 8th: on a NEXT_STEP vector env the
# call after it only resets the env and counts nothing (skrl's and PufferLib's stock rows: 15 of 16 calls
# per env; PufferLib's fastenv-8: 1 of 2 chunks). RLlib samples until it has the steps asked, resets aside.
LIBRARIES = {
    "sb3": (("stable_baselines3",), "DummyVecEnv", "SB3VecEnv", "stable_baselines3", (32, 32, 32)),
    "torchrl": (("torchrl",), "SerialEnv", "GymWrapper", "torchrl", (32, 32, 32)),
    "tianshou": (("tianshou",), "SubprocVectorEnv", "TianshouVecEnv", "tianshou", (32, 32, 32)),
    "pufferlib": (("pufferlib",), "pufferlib.vector.Multiprocessing", "fastenv.integrations.pufferlib.PufferLibVecEnv", "pufferlib-core",
                  (30, 30, 16)),
    "skrl": (("skrl",), "SyncVectorEnv", "PipelineVectorEnv", "skrl", (30, 32, 32)),
    "sbx": (("sbx",), "DummyVecEnv", "SB3VecEnv", "sbx-rl", (32, 32, 32)),
    "rllib": (("ray", "tree"), "SyncVectorEnv", "PipelineVectorEnv", "ray", (32, 32, 32)),  # tree: one of RLlib's dependencies
    "rl_games": (("rl_games", "ray"), "RayVecEnv", "RlGamesVecEnv", "rl-games", (32, 32, 32)),
}


@pytest.mark.libero
@pytest.mark.ci_sample("a quick run of an RL library")
@pytest.mark.parametrize("library", [
    pytest.param(name, marks=[pytest.mark.xdist_group("ray")] if name == "rl_games" else [])  # RayVecEnv starts a local Ray cluster
    for name in LIBRARIES
])
def test_a_quick_run_writes_a_library_s_three_rows_with_the_steps_each_took(bench, tmp_path, library):
    modules, stock, fast, distribution, env_steps = LIBRARIES[library]
    for module in modules:
        need(module)
    payload = quick_run(library, tmp_path)
    config = payload["config"]
    assert (config["steps"], config["camera_size"], config["max_episode_steps"], config["rounds"]) == (32, 32, 16, 1)
    assert config["rows"] == ["stock", "fastenv-1", "fastenv-8"]
    assert payload["command"].startswith("python benchmarks/bench_rl_libraries.py --quick")
    rows = {r["row"]: r for r in payload["rows"]}
    assert list(rows) == ["stock", "fastenv-1", "fastenv-8"] and all(r["status"] == "ran" for r in rows.values()), payload["rows"]
    assert [rows[name]["chunk"] for name in rows] == [1, 1, 8]
    assert [rows[name]["vectorization"] for name in rows] == [stock, fast, fast]
    assert tuple(rows[name]["env_steps"] for name in rows) == env_steps
    for row in rows.values():
        assert len(row["rounds"]) == 1 and row["rounds"][0]["env_steps"] == row["env_steps"]
        assert row["env_steps_per_s"] > 0 and row["spread"][0] <= row["env_steps_per_s"] <= row["spread"][1]
    # each fastenv row carries its own ratio, and only that one
    assert not {"x_stock_same_data", "x_stock_chunks", "x_fastenv_1"} & set(rows["stock"])
    assert rows["fastenv-1"]["x_stock_same_data"] > 0 and "x_stock_chunks" not in rows["fastenv-1"]
    assert rows["fastenv-8"]["x_stock_chunks"] > 0 and rows["fastenv-8"]["x_fastenv_1"] > 0 and "x_stock_same_data" not in rows["fastenv-8"]
    assert set(payload["ratios"]) == {"x_stock_same_data", "x_stock_chunks", "x_fastenv_1"} and "chunks of 8" in payload["ratios"]["x_stock_chunks"]
    # the versions of the library, fastenv and the simulator, by the distributions that provide them
    versions = payload["versions"]
    assert versions[modules[0]]["distribution"] == distribution and versions[modules[0]]["version"]
    assert versions["fastenv"]["distribution"] == "fastenv-rl" and versions["fastenv"]["version"]
    assert all(versions[m] and versions[m]["version"] for m in ("torch", "gymnasium", "numpy", "mujoco", "robosuite"))
    # the machine: the CPU's model name and identity, its cores, numpy's BLAS kernels
    machine = payload["machine"]
    assert machine["cpu_count"] >= 1 and machine["cpus_available"] >= 1
    if Path("/proc/cpuinfo").exists():
        assert machine["cpu_model"] and machine["cpu_id"]["vendor"] and isinstance(machine["cpu_id"]["family"], int)
    if importlib.util.find_spec("threadpoolctl") is not None:
        assert machine["numpy_blas"]["vendor"] and "core_type" in machine["numpy_blas"]
    table = bench.docs_table(payload)
    name = bench.LIBRARIES[library].name
    assert f"| {name} | stock |" in table and f"| {name} | fastenv-1 |" in table and f"| {name} | fastenv-8 |" in table
    assert "| x stock at the same data | x stock with chunks of 8 |" in table.splitlines()[0]


class CountedSteps(RandomLengthEnv):
    """RandomLengthEnv (episodes of random length, ended by termination or truncation) counting its steps."""

    def __init__(self) -> None:
        super().__init__(max_len=4)
        self.steps = 0

    def step(self, action):
        self.steps += 1
        return super().step(action)


@pytest.mark.parametrize("mode", [gym.vector.AutoresetMode.NEXT_STEP, gym.vector.AutoresetMode.SAME_STEP])
def test_the_count_is_the_steps_the_envs_took_and_a_call_that_only_resets_counts_none(bench, mode):
    envs = gym.vector.SyncVectorEnv([CountedSteps] * 3, autoreset_mode=mode)
    envs.reset(seed=0)
    count = bench.StepCount(3, 1, next_step=mode == gym.vector.AutoresetMode.NEXT_STEP)
    everything = bench.StepCount(3, 1, next_step=False)  # every call as every env's step: the rule broken
    reset_only = 0
    for _ in range(40):
        reset_only += int(count.ended.sum()) if mode == gym.vector.AutoresetMode.NEXT_STEP else 0
        _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
        count.add(terminated, truncated)
        everything.add(terminated, truncated)
    taken = sum(env.steps for env in envs.envs)
    assert count.steps == taken
    assert everything.steps == 3 * 40 == taken + reset_only
    if mode == gym.vector.AutoresetMode.NEXT_STEP:
        assert reset_only > 0  # episodes of at most 4 steps: 40 calls hold reset-only ones


def test_a_chunk_counts_its_actions_and_a_reset_only_call_none(bench):
    # fastenv's chunked stack over a fake simulator; 6-step episodes, a multiple of the chunk (3) as the script requires
    envs = gym.vector.SyncVectorEnv([lambda: make_chunked_fake(chunk=3, gamma=None, truncate_at=6)] * 2,
                                    autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    envs.reset(seed=0)
    count = bench.StepCount(2, 3, next_step=True)
    for _ in range(7):  # per env: 2 chunks, a reset-only call, 2 chunks, a reset-only call, a chunk
        _, _, terminated, truncated, _ = envs.step(envs.action_space.sample())
        count.add(terminated, truncated)
    simulated = sum(env.unwrapped.adapter.calls.count("substep") + env.unwrapped.adapter.calls.count("step") for env in envs.envs)
    assert simulated == 2 * 5 * 3 and count.steps == simulated
    count.restart()
    assert count.steps == 0 and count.ended.tolist() == [False, False]
    with pytest.raises(ValueError, match=r"one episode end per env \(2\), got 3"):
        count.add(np.zeros(3, bool), np.zeros(3, bool))


def test_pufferlib_s_stock_envs_write_into_the_buffers_its_vectorization_reads(bench, monkeypatch):
    vector = need("pufferlib.vector")
    monkeypatch.setattr(bench, "stock_env", lambda cfg: gym.wrappers.TimeLimit(CountedSteps(), cfg.max_episode_steps))
    cfg = bench.Config(max_episode_steps=2)
    envs = vector.make(functools.partial(bench._puffer_env, cfg), num_envs=2, backend=vector.Serial)
    count = bench.StepCount(2, 1, next_step=True)
    first, _ = envs.reset(seed=0)
    first = first.copy()
    seen = []
    for _ in range(3):
        obs, _, terminals, truncations, _ = envs.step(np.zeros((2, 3), np.float32))
        seen.append(obs.copy())
        count.add(terminals, truncations)
    envs.close()
    assert not np.array_equal(seen[0], first)  # the step's observations reach the vector env's buffers
    # every episode ends within 2 steps, so each env had a call that only reset it, seen in the buffers' flags
    assert count.steps == sum(env.env.unwrapped.steps for env in envs.envs) <= 2 * 2


def test_a_library_that_does_not_import_is_a_row_saying_why(bench, monkeypatch):
    missing = bench.Library("Nowhere", "fastenv_no_such_library", bench.run_sb3, {"stock": "its vector env", "fastenv": "fastenv's"})
    monkeypatch.setitem(bench.LIBRARIES, "nowhere", missing)
    out = bench.run_row("nowhere", "stock", bench.Config())
    assert out == {"status": "not installed", "reason": "import fastenv_no_such_library: ModuleNotFoundError: No module named 'fastenv_no_such_library'"}
    rows = bench.summarize("nowhere", {"stock": [out], "fastenv-1": [], "fastenv-8": []}, bench.Config())  # main() runs no row after that
    assert [(r["row"], r["status"]) for r in rows] == [("stock", "not installed"), ("fastenv-1", "not installed"), ("fastenv-8", "not installed")]
    assert all("fastenv_no_such_library" in r["reason"] for r in rows)
    assert "not installed: import fastenv_no_such_library" in bench.docs_table({"rows": rows})
    assert bench.versions(["fastenv_no_such_library"]) == {"fastenv_no_such_library": None}


def test_each_ratio_is_the_median_of_each_round_s_ratio(bench):
    def ran(rate):
        return {"status": "ran", "env_steps_per_s": rate, "env_steps": 64, "vectorization": "V", "seconds": 64 / rate}

    samples = {"stock": [ran(10.0), ran(20.0), ran(10.0)], "fastenv-1": [ran(30.0), ran(40.0), ran(20.0)],
               "fastenv-8": [ran(50.0), ran(80.0), ran(70.0)]}
    stock, same, chunked = bench.summarize("sb3", samples, bench.Config())
    assert "x_stock_same_data" not in stock and "x_stock_chunks" not in stock
    assert same["x_stock_same_data"] == 2.0 and same["env_steps_per_s"] == 30.0 and same["spread"] == [20.0, 40.0]  # ratios 3, 2, 2
    assert chunked["x_stock_chunks"] == 5.0 and chunked["spread"] == [50.0, 80.0]  # ratios 5, 4, 7
    assert chunked["x_fastenv_1"] == 2.0  # ratios 5/3, 2, 3.5
    failed = {**samples, "stock": [ran(10.0), {"status": "failed", "reason": "boom"}, ran(10.0)]}
    stock, same, chunked = bench.summarize("sb3", failed, bench.Config())
    assert stock["status"] == "failed" and "x_stock_same_data" not in same and "x_stock_chunks" not in chunked and "x_fastenv_1" in chunked
    lines = bench.docs_table({"rows": bench.summarize("sb3", samples, bench.Config())}).splitlines()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0][-2:] == ["x stock at the same data", "x stock with chunks of 8"]
    assert [c[1] for c in cells[2:]] == ["stock", "fastenv-1", "fastenv-8"]
    assert [c[-2:] for c in cells[2:]] == [["", ""], ["**2.0x**", ""], ["", "**5.0x**"]]
    with pytest.raises(ValueError, match="two rows of an earlier version"):  # a JSON of the stock/fastenv rows
        bench.docs_table({"rows": [{"library": "sb3", "side": "stock"}, {"library": "sb3", "side": "fastenv", "x_stock": 9.0}]})


@pytest.mark.parametrize(("args", "said"), [
    (["--steps", "36", "--num-envs", "4"], "--steps must be a positive multiple of num_envs * chunk (32), got 36"),
    (["--chunk", "1"], "--chunk must be at least 2"),
    (["--max-episode-steps", "100"], "--max-episode-steps must be a multiple of the chunk (8), got 100"),
    (["--rounds", "0"], "--rounds must be at least 1, got 0"),
    (["--libraries", "sb3,nope"], "unknown libraries ['nope']"),
])
def test_sizes_that_do_not_fit_the_rows_are_refused_before_any_row_runs(bench, capsys, args, said):
    with pytest.raises(SystemExit):
        bench.main([*args, "--libraries", "sb3"] if "--libraries" not in args else args)
    assert said in capsys.readouterr().err


def test_the_machine_block_names_the_cpu_by_its_family_and_model_numbers(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "_common.py")
    _common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_common)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nstepping\t: 1\n\n"
                       "processor\t: 1\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert _common.cpu_id(cpuinfo) == {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1}
    assert _common.cpu_id(tmp_path / "absent") is None
