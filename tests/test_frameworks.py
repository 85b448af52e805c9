"""fastenv inside RLinf and LeRobot: their env layers against fastenv's drop-ins.

Each framework runs in its own virtual environment (its pins conflict with fastenv's): RLinf's in
``.stacks/rlinf`` (``bash scripts/libero_stack.sh rlinf``; CI builds it in the background from
the session's start), LeRobot 0.6's in ``.stacks/lerobot-0.6`` (``bash scripts/libero_stack.sh lerobot-0.6``)
and 0.4.4's in ``.stacks/lerobot`` (docs/frameworks/lerobot.md). A test whose framework is not there
is skipped and says how to make it, the way ManiSkill's scripts are gated; CI runs the RLinf equality.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import need

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from fastenv.conformance import rlinf as rlinf_conformance
from fastenv.integrations import rlinf as rlinf_integration

LEROBOT = ROOT / ".stacks" / "lerobot"  # LeRobot 0.4.4
LEROBOT_06 = ROOT / ".stacks" / "lerobot-0.6"  # LeRobot 0.6.1, Python 3.12


def _commit_sample(options: list[str]) -> str:
    """One of ``options`` per commit (the sweep is run whole by its command; CI samples it)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, check=False, capture_output=True, text=True).stdout.strip() or "none"
    return options[int(hashlib.sha256(head.encode()).hexdigest(), 16) % len(options)]


def _run(python: Path, module: str, args: list[str], tmp_path: Path, venv: Path) -> dict:
    out = tmp_path / "out.json"
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(venv / "libero-config"), "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([str(python), "-m", module, *args, "--out", str(out)], cwd=tmp_path, env=env, check=False, capture_output=True, text=True, timeout=1700)
    assert out.exists(), run.stderr[-4000:]
    return json.loads(out.read_text()) | {"stderr": run.stderr, "returncode": run.returncode}


# -- pure logic, no framework -----------------------------------------------------------------------

def test_init_params_beyond_what_the_drop_in_reproduces_are_refused_naming_them():
    with pytest.raises(ValueError, match=r"camera_depths"):
        rlinf_integration.check_init_params({"camera_heights": 64, "camera_depths": True})
    with pytest.raises(ValueError, match="one size for every camera"):
        rlinf_integration.check_init_params({"camera_heights": [64, 32]})
    with pytest.raises(ValueError, match="positive int"):
        rlinf_integration.check_init_params({"camera_widths": 0})
    args = rlinf_integration.check_init_params({"camera_heights": [64, 64], "camera_widths": 48})
    assert (args["camera_heights"], args["camera_widths"], args["camera_names"]) == (64, 48, ("agentview", "robot0_eye_in_hand"))


def test_the_leaves_compared_cover_nested_values_and_the_comparison_sees_dtype_and_bits():
    leaves = dict(rlinf_conformance.leaves({"a": [np.zeros(2)], "b": {"c": 1}}, "x"))
    assert set(leaves) == {"x.a#len", "x.a[0]", "x.b.c"}
    assert rlinf_conformance.same(np.zeros(2), np.zeros(2))
    assert not rlinf_conformance.same(np.zeros(2), np.zeros(2, np.float32))
    assert not rlinf_conformance.same(np.array([0.0]), np.array([-0.0]))  # bits, not values
    assert not rlinf_conformance.same(1, 1.0)


def test_the_config_keys_of_fastenv_are_checked_naming_what_is_wrong():
    assert rlinf_integration.check_options(None) == {"num_workers": None, "pool": "shared"}
    assert rlinf_integration.check_options({"pool": "per_stage", "num_workers": 3}) == {"num_workers": 3, "pool": "per_stage"}
    with pytest.raises(ValueError, match=r"\['workers'\]"):
        rlinf_integration.check_options({"workers": 2})
    with pytest.raises(ValueError, match="fastenv.pool must be one of"):
        rlinf_integration.check_options({"pool": "per-stage"})
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="positive int"):
            rlinf_integration.check_options({"num_workers": bad})


def test_a_shared_pool_spreads_every_stage_over_all_its_workers_and_stops_with_the_last_stage():
    """The pool an env worker's stages share, without a simulator: its rows start empty (each
    stage's LiberoEnv builds its envs in them), stage k is rows [k*n, (k+1)*n), and each stage's
    envs live on every one of the pool's worker processes."""
    need("gymnasium")
    with pytest.raises(ValueError, match="must divide the shared pool's 4 envs"):
        rlinf_integration._Pool(2, 2, num_workers=3)
    pool = rlinf_integration._Pool(2, 2, num_workers=2)
    try:
        stages = [pool.stage(0), pool.stage(1)]
        with pytest.raises(RuntimeError, match="asked for again"):
            pool.stage(1)
        assert [s._rows for s in stages] == [[0, 1], [2, 3]]
        assert pool.envs.call("index") == (0, 1, 2, 3)
        pids = [set(pool.envs.apply(lambda env: os.getpid(), env_ids=s._rows)) for s in stages]
        assert pids[0] == pids[1] == set(pool.envs.worker_pids) and len(pids[0]) == 2  # 2 processes, not 2 per stage
        assert stages[0].worker_pids == stages[1].worker_pids
        stages[0].close()
        assert not pool.envs.closed  # stage 1 still uses it
        stages[1].close()
        assert pool.envs.closed
    finally:
        pool.close()


def test_without_rlinf_the_classes_say_what_to_install():
    need("gymnasium")
    try:
        import rlinf  # noqa: F401
    except ImportError:
        from gymnasium.error import DependencyNotInstalled

        with pytest.raises(DependencyNotInstalled, match="rlinf"):
            rlinf_integration.LiberoEnv  # noqa: B018
    else:
        pytest.skip("RLinf is installed here")


# -- RLinf, in its stack ------------------------------------------------------------------------------

def _rlinf_python() -> Path:
    from test_libero_stacks import RLINF
    from test_libero_stacks import _rlinf_python as build_or_skip

    python = build_or_skip()
    check = subprocess.run([str(python), "-c", "import rlinf.envs.libero.libero_env"], check=False, capture_output=True, text=True,
                           env={**os.environ, "LIBERO_CONFIG_PATH": str(RLINF / "libero-config")})
    if check.returncode != 0:
        pytest.skip(f"RLinf's env layer is not in {RLINF.relative_to(ROOT)}: bash scripts/libero_stack.sh rlinf ({check.stderr.strip()[-200:]})")
    return python


@pytest.mark.libero
@pytest.mark.timeout(1800)
@pytest.mark.ci_sample("RLinf's stack")
def test_the_rlinf_drop_in_equals_rlinfs_own_liberoenv_and_env_worker(tmp_path):
    """One sample per commit of the sweep ``python -m fastenv.conformance.rlinf`` runs whole: one of
    RLinf's modes (train, groups, ignore_terminations, eval, step penalty, libero_10) through reset,
    chunk_step, a new epoch, a partial reset and step; or RLinf's EnvWorker code (env class from its
    config, RecordVideo, two pipeline stages' chunk steps, rollout end) with one import changed, its
    stages on one shared pool of workers ("worker") or on a pool each ("worker_per_stage"). Every
    value equal."""
    from test_libero_stacks import RLINF

    workers = rlinf_conformance.WORKER_CASES
    case = os.environ.get("FASTENV_RLINF_CASE") or _commit_sample([*rlinf_conformance.CASES, *workers])
    result = _run(_rlinf_python(), "fastenv.conformance.rlinf", ["--cases", case, "--chunks", "3" if case in workers else "4"], tmp_path, RLINF)
    (only,) = result["cases"]
    named = {"worker": "env worker", "worker_per_stage": "env worker, pool per_stage"}
    assert only["case"] == named.get(case, case) and only["values"] > 200
    assert only["equal"], only["differences"]
    assert result["returncode"] == 0
    assert result["stack"]["libero distribution"].startswith("rlinf-libero ")
    if case in workers:  # fastenv's EnvWorker says that fastenv serves
        assert "fastenv: RLinf's EnvWorker (fastenv.integrations.rlinf): its LIBERO envs are fastenv's" in result["stderr"]
    # and what its LiberoEnvs did not render: RLinf's renders every camera at every sub-step, fastenv's once a chunk
    done = re.search(r"fastenv: RLinf's LiberoEnv \((\d+) envs[^)]*\) done: (\d+) of the stock env's (\d+) camera images not rendered",
                     result["stderr"])
    assert done is not None and 0 < int(done.group(2)) < int(done.group(3)), result["stderr"][-3000:]
    if case in workers:
        facts = only["facts"]
        assert set(facts["rlinf"]["env classes"]) == {"rlinf.envs.libero.libero_env.LiberoEnv"}
        assert set(facts["fastenv"]["env classes"]) == {"fastenv.integrations.rlinf.LiberoEnv"}
        assert facts["rlinf"]["env processes"] == 2 * 2  # RLinf's: a process per env, two stages of 2
        fast = facts["fastenv"]
        if case == "worker":  # both stages on one pool: its workers are all the env processes, not 2x them
            assert fast["pools"] == 1 and fast["env processes"] == fast["workers per pool"][0]
        else:
            assert fast["pools"] == 2 and fast["env processes"] == sum(fast["workers per pool"])
        # RLinf's video holds every sub-step's frame; the drop-in's, one per chunk (its last) and each reset's
        stock, fast = facts["rlinf"]["video frames"], facts["fastenv"]["video frames"]
        assert all(f < s for f, s in zip(fast, stock)) and all(f >= 1 + 3 for f in fast)
        for run in ("rlinf", "fastenv"):  # one video per stage, each written
            assert len(facts[run]["videos written"]) == 2 and all(v.endswith(".mp4") for v in facts[run]["videos written"])


def _policy(name: str, module: str | None = None, **config):
    """An object shaped as LeRobot's policy ``name`` (its class name, module and queues)."""
    from collections import deque
    from types import SimpleNamespace

    cls = type("Policy", (), {"name": name, "select_action": lambda self, batch: None, "predict_action_chunk": lambda self, batch: None})
    cls.__module__ = module or f"lerobot.policies.{name}.modeling_{name}"
    policy = cls()
    policy.config = SimpleNamespace(**config)
    policy._action_queue, policy._queues = deque(), {"action": deque()}
    return policy


def test_which_observations_a_lerobot_policy_reads_follows_its_queue():
    from fastenv.integrations.lerobot import OBSERVATION_READS, observation_reader

    assert {"pi0", "pi05", "smolvla", "act", "diffusion"} <= set(OBSERVATION_READS)
    for name, queue in (("pi0", "_action_queue"), ("pi05", "_action_queue"), ("act", "_action_queue"), ("smolvla", "action")):
        policy = _policy(name, n_obs_steps=1)
        reads = observation_reader(policy)
        target = policy._action_queue if queue == "_action_queue" else policy._queues["action"]
        assert reads()  # an empty queue: the next call computes a chunk from its observation
        target.extend([1, 2])
        assert not reads()
    diffusion = _policy("diffusion", n_obs_steps=2)
    reads = observation_reader(diffusion)
    diffusion._queues["action"].extend([1, 2])
    assert not reads()
    diffusion._queues["action"].pop()
    assert reads()  # one action left: the next observation is in the history the next chunk reads
    # Where the policy may read every observation, nothing is skipped:
    assert observation_reader(_policy("act", temporal_ensemble_coeff=0.01)) is None
    assert observation_reader(_policy("pi0", rtc_config=type("RTC", (), {"enabled": True})())) is None
    assert observation_reader(_policy("groot")) is None  # not tested here: every observation rendered
    assert observation_reader(_policy("pi0", module="my_lab.policies")) is None  # a class of another package
    patched = _policy("pi0")
    patched.select_action = lambda batch: None
    assert observation_reader(patched) is None  # an instance with its own select_action


# -- LeRobot, in its stack ----------------------------------------------------------------------------

def _lerobot_python(stack: Path = LEROBOT) -> Path:
    python = stack / "bin" / "python"
    if python.exists():
        check = subprocess.run([str(python), "-c", "import lerobot.envs.libero, lerobot.policies.act.modeling_act"], check=False, capture_output=True, text=True,
                               env={**os.environ, "LIBERO_CONFIG_PATH": str(stack / "libero-config")})
        if check.returncode == 0:
            return python
    pytest.skip(f"LeRobot's stack is not in {stack.relative_to(ROOT)}: docs/frameworks/lerobot.md says how to make it")


@pytest.mark.libero
@pytest.mark.timeout(1800)
def test_the_lerobot_drop_in_equals_lerobots_own_env_in_its_eval_loop(tmp_path):
    result = _run(_lerobot_python(), "fastenv.conformance.lerobot", ["--tasks", "libero_goal/3", "--batches", "2", "--policies", "scripted", "act"],
                  tmp_path, LEROBOT)
    assert len(result["cases"]) == 3
    for case in result["cases"]:
        assert case["equal"], case["differences"]
        if "time limits only" in case["case"]:
            assert not any(case["successes"])  # every episode ran to the time limit
        else:
            assert all(case["successes"])  # episodes ended by success, and the next ones started from the next init states
    assert result["returncode"] == 0


@pytest.mark.libero
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("async_envs", [False, True], ids=["sync", "async"])
def test_lerobot_06_on_fastenv_renders_only_what_each_policy_reads_with_lerobots_results(tmp_path, async_envs):
    """LeRobot 0.6.1's eval loop, fastenv's env through the skipping rollout against LeRobot's own:
    chunked policies of LeRobot's classes (and scripted actions) equal value for value, with most
    steps' cameras not rendered; a negative control (the skip told pi0 never reads) differs."""
    python = _lerobot_python(LEROBOT_06)
    args = ["--tasks", "libero_10/2", "--batches", "1", "--policies", "pi0", "diffusion", *([] if async_envs else ["scripted", "--control"])]
    result = _run(python, "fastenv.conformance.lerobot", [*args, *(["--async-envs"] if async_envs else [])], tmp_path, LEROBOT_06)
    assert len(result["cases"]) == (2 if async_envs else 5)
    for case in result["cases"]:
        name, counts = case["case"].split(" ", 1)[1].split(",")[0], case["counts"]["fastenv"]
        if case["negative control"]:
            assert not case["equal"]  # reading blank images changes the actions: the comparison sees it
            continue
        assert case["equal"], case["differences"]
        if name in ("pi0", "diffusion"):
            assert counts["policy reads"] >= 2 and 0 < counts["steps without camera renders"] < counts["env steps"]
        else:
            assert counts["steps without camera renders"] == 0  # a policy that may read every step: nothing skipped
    assert result["stack"]["lerobot"].startswith("0.6")
    assert result["returncode"] == 0


@pytest.mark.libero
@pytest.mark.timeout(900)
@pytest.mark.parametrize("stack", [LEROBOT_06, LEROBOT], ids=["lerobot-0.6", "lerobot-0.4"])
def test_lerobot_eval_runs_through_fastenv_with_its_own_arguments(tmp_path, stack):
    python = _lerobot_python(stack)
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(stack / "libero-config"), "HF_HUB_OFFLINE": "1"}
    args = ["--env.type=libero", "--env.task=libero_goal", "--env.task_ids=[3]", "--env.episode_length=5", "--policy.type=act",
            "--policy.pretrained_backbone_weights=null", "--policy.device=cpu", "--policy.push_to_hub=false",
            "--eval.n_episodes=1", "--eval.batch_size=1", f"--output_dir={tmp_path / 'out'}"]
    if stack == LEROBOT_06:
        args += ["--env.observation_height=64", "--env.observation_width=64"]
    run = subprocess.run([str(python), "-m", "fastenv.integrations.lerobot", *args], cwd=tmp_path, env=env, check=False, capture_output=True, text=True, timeout=800)
    assert run.returncode == 0, run.stderr[-3000:]
    info = json.loads((tmp_path / "out" / "eval_info.json").read_text())
    assert info["overall"]["n_episodes"] == 1
    assert list((tmp_path / "out" / "videos").rglob("*.mp4"))  # rendered through the drop-in's render()
    # it says that fastenv serves, and at the end the camera images it did not render (all filmed here:
    # LeRobot films the first episodes of each task, and its video frames are renders of their own)
    assert "fastenv: python -m fastenv.integrations.lerobot: LeRobot's lerobot-eval on fastenv's LIBERO env" in run.stderr
    done = re.search(r"fastenv: python -m fastenv.integrations.lerobot done: (-?\d+) of the stock env's (\d+) camera images not rendered", run.stderr)
    assert done is not None and int(done.group(2)) >= 2 * 5, run.stderr[-3000:]  # two cameras, five steps at least
    assert "fast paths serving: " in run.stderr
    helped = subprocess.run([str(python), "-m", "fastenv.integrations.lerobot", "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "usage: python -m fastenv.integrations.lerobot" in helped.stdout + helped.stderr
    assert "fastenv: python -m fastenv.integrations.lerobot: LeRobot's lerobot-eval on fastenv's LIBERO env" in helped.stderr


@pytest.mark.libero
@pytest.mark.timeout(900)
def test_lerobot_eval_through_fastenv_films_as_many_episodes_as_asked(tmp_path):
    # --fastenv.videos_per_task=0: no video, and fewer camera images rendered than the filmed run's
    python = _lerobot_python(LEROBOT_06)
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(LEROBOT_06 / "libero-config"), "HF_HUB_OFFLINE": "1"}
    args = ["--env.type=libero", "--env.task=libero_goal", "--env.task_ids=[3]", "--env.episode_length=20", "--policy.type=act",
            "--policy.pretrained_backbone_weights=null", "--policy.device=cpu", "--policy.push_to_hub=false",
            "--env.observation_height=64", "--env.observation_width=64", "--eval.n_episodes=1", "--eval.batch_size=1"]
    rendered = {}
    for videos in ("10", "0"):
        out = tmp_path / videos
        run = subprocess.run([str(python), "-m", "fastenv.integrations.lerobot", f"--fastenv.videos_per_task={videos}", *args,
                              f"--output_dir={out}"], cwd=tmp_path, env=env, check=False, capture_output=True, text=True, timeout=800)
        assert run.returncode == 0, run.stderr[-3000:]
        assert json.loads((out / "eval_info.json").read_text())["overall"]["n_episodes"] == 1
        assert bool(list(out.rglob("*.mp4"))) == (videos != "0")
        done = re.search(r"done: \d+ of the stock env's \d+ camera images not rendered[^,]*, (\d+) rendered", run.stderr)
        rendered[videos] = int(done.group(1))
    assert rendered["0"] < rendered["10"]
    wrong = subprocess.run([str(python), "-m", "fastenv.integrations.lerobot", "--fastenv.videos=0", *args], cwd=tmp_path, env=env,
                           check=False, capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0 and "the one option of fastenv's is --fastenv.videos_per_task=N" in wrong.stderr


# -- RLinf's main branch, in its own stack (never built by CI) -----------------------------------------

RLINF_MAIN = ROOT / ".stacks" / "rlinf-main"


@pytest.mark.libero
@pytest.mark.timeout(1800)
def test_rlinf_mains_skip_intermediate_renders_gives_rlinf_030s_values(tmp_path):
    """RLinf main's LiberoEnv (with its PR #1484) against 0.3.0's, skip_intermediate_renders off and
    on: same case, seeds and actions, every value equal, and with the skip on no intermediate
    observation is made. Runs where both stacks are built; CI builds neither this one nor, for it,
    0.3.0's: bash scripts/libero_stack.sh rlinf-main (RLINF_SOURCE=<an RLinf checkout> where GitHub
    cannot be reached), then pytest tests/test_frameworks.py -k rlinf_main."""
    main_python = RLINF_MAIN / "bin" / "python"
    if not main_python.exists():
        pytest.skip(f"RLinf main's stack is not in {RLINF_MAIN.relative_to(ROOT)}: bash scripts/libero_stack.sh rlinf-main")
    from test_libero_stacks import RLINF

    if not (RLINF / "bin" / "python").exists():
        pytest.skip(f"RLinf 0.3.0's stack is not in {RLINF.relative_to(ROOT)}: bash scripts/libero_stack.sh rlinf")
    case = os.environ.get("FASTENV_RLINF_CASE") or _commit_sample(list(rlinf_conformance.CASES))
    result = _run(_rlinf_python(), "fastenv.conformance.rlinf", ["--peer", str(main_python), "--cases", case, "--chunks", "4"], tmp_path, RLINF)
    assert result["returncode"] == 0 and len(result["cases"]) == 3, result["stderr"][-3000:]
    for compared in result["cases"]:
        assert compared["equal"] and compared["values"] > 200, (compared["case"], compared["differences"])
    off_vs_030, on_vs_030, on_vs_off = result["cases"]
    assert "skip off vs rlinf 0.3.0" in off_vs_030["case"] and "skip on vs rlinf 0.3.0" in on_vs_030["case"]
    assert "skip on vs" in on_vs_off["case"] and "skip off" in on_vs_off["case"]
    on = next(facts for name, facts in on_vs_off["facts"].items() if name.endswith("skip on"))
    off = next(facts for name, facts in on_vs_off["facts"].items() if name.endswith("skip off"))
    assert on["intermediate observations"] == 0 and on["intermediate None"] == off["intermediate observations"] > 0


@pytest.mark.libero
@pytest.mark.timeout(1800)
def test_the_rlinf_drop_in_equals_rlinf_mains_own_env_with_the_skip_on(tmp_path):
    """fastenv's LiberoEnv on RLinf main (its chunk_step switches the cameras, a no-op for fastenv's
    workers) against main's own, skip_intermediate_renders on in both: every value equal. Runs where
    RLinf main's stack is built (never in CI): bash scripts/libero_stack.sh rlinf-main."""
    main_python = RLINF_MAIN / "bin" / "python"
    if not main_python.exists():
        pytest.skip(f"RLinf main's stack is not in {RLINF_MAIN.relative_to(ROOT)}: bash scripts/libero_stack.sh rlinf-main")
    case = os.environ.get("FASTENV_RLINF_CASE") or _commit_sample(list(rlinf_conformance.CASES))
    args = ["--cases", case, "--chunks", "4", "--overrides", json.dumps({"skip_intermediate_renders": True})]
    result = _run(main_python, "fastenv.conformance.rlinf", args, tmp_path, RLINF_MAIN)
    (only,) = result["cases"]
    assert only["case"] == case and only["values"] > 200
    assert only["equal"], only["differences"]
    assert result["returncode"] == 0


# -- the benchmark's docs table -----------------------------------------------------------------------

def test_the_frameworks_docs_table_is_the_committed_json():
    import bench_frameworks

    payload = json.loads((ROOT / "results" / "bench_frameworks.json").read_text())
    page = (ROOT / "docs" / "frameworks" / "index.md").read_text()
    assert bench_frameworks.docs_table(payload) in page
    assert bench_frameworks.docs_ratios(payload) in page
    assert "/work" not in json.dumps(payload) and "/home" not in json.dumps(payload)
    assert {row["row"] for row in payload["rows"]} == set(bench_frameworks.ROWS)


@pytest.mark.parametrize("name", ["bench_rlinf_stages.json", "bench_rlinf_stages_64px.json"])
def test_the_pipeline_stage_docs_tables_are_the_committed_json(name):
    import bench_rlinf_stages

    payload = json.loads((ROOT / "results" / name).read_text())
    page = (ROOT / "docs" / "frameworks" / "index.md").read_text()
    assert bench_rlinf_stages.docs_table(payload) in page
    assert bench_rlinf_stages.docs_ratios(payload) in page
    assert payload["command"] in page
    assert "/work" not in json.dumps(payload) and "/home" not in json.dumps(payload)
    assert payload["config"]["pipeline_stage_num"] == 2 and {row["row"] for row in payload["rows"]} <= set(bench_rlinf_stages.ROWS)
    shared = next(row for row in payload["rows"] if row["row"] == "fastenv-shared")
    assert shared["facts"]["pools"] == 1 and shared["facts"]["env processes"] == shared["facts"]["workers per pool"][0]


# -- what the drop-ins use of fastenv's LIBERO env, in fastenv's own stack ------------------------------

@pytest.mark.libero
def test_a_reset_to_a_whole_mujoco_state_equals_the_reset_to_that_init_state_id():
    need("libero")
    import gymnasium as gym

    import fastenv  # noqa: F401

    env = gym.make("fastenv/Libero-v0", suite="libero_goal", task_id=3, chunk=2, camera_size=32)
    try:
        by_id, info_id = env.reset(seed=0, options={"init_state_id": 3})
        after_id = env.step(np.full((2, 7), 0.3, np.float32))[0]
        state = env.unwrapped.adapter.task.init_states[3]
        by_state, info_state = env.reset(seed=0, options={"init_state": state})
        after_state = env.step(np.full((2, 7), 0.3, np.float32))[0]
        for key in by_id:
            assert np.array_equal(by_id[key], by_state[key]) and np.array_equal(after_id[key], after_state[key]), key
        assert (info_id["init_state_id"], info_state["init_state_id"]) == (3, -1)
        with pytest.raises(ValueError, match="flat numeric MuJoCo state"):
            env.reset(options={"init_state": state[:-1]})
        with pytest.raises(ValueError, match="exclude each other"):
            env.reset(options={"init_state": state, "init_state_id": 3})
    finally:
        env.close()




def test_the_stack_first_run_table_is_the_committed_json():
    payload = json.loads((ROOT / "results" / "bench_stack_first_run.json").read_text())
    page = (ROOT / "docs" / "frameworks" / "lerobot.md").read_text()
    built, unbuilt = payload["rows"]
    assert built["way"] == "compiled at build" and unbuilt["way"] == "not compiled at build"
    assert (f"| {built['compile']['seconds']:.1f} s | {built['first']['seconds']:.2f} s | {built['second']['seconds']:.2f} s "
            f"| {built['first_over_second']:.2f} |") in page
    assert f"| - | {unbuilt['first']['seconds']:.2f} s | {unbuilt['second']['seconds']:.2f} s | {unbuilt['first_over_second']:.2f} |" in page
    assert built["first_over_second"] < 1.1  # compiled at build: the first evaluation as fast as the second
