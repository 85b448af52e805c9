"""``fastenv eval``: the episode list, the protocol's pieces, and whole runs on the real LIBERO.

The runs are short (a 64 px camera, 12 policy steps an episode) and LIBERO's success check fires
on ``success_schedule``'s schedule, so episodes end by success at steps their states set. The
reference for every run is the same episodes run one at a time on one env slot, a call per request;
the equality with openpi's own ``examples/libero/main.py`` is ``fastenv.conformance.eval``'s
(``tests/test_eval_conformance.py``, where openpi's checkout is given).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastenv.eval import (
    BatchPolicy,
    Episode,
    EvalError,
    OpenpiPolicy,
    PolicyUnavailable,
    ProjectionPolicy,
    Protocol,
    Request,
    episode_list,
    parse_tasks,
    resize_with_pad,
    run,
    summarize,
)
from fastenv.eval.protocol import check_chunk

ROOT = Path(__file__).resolve().parent.parent
SHORT = {"protocol": Protocol(camera_size=64, max_steps=12), "episodes": 4, "tasks": [0], "progress": False}
KEYS = ("success", "length", "return", "actions_sha256")


@pytest.fixture
def scheduled(monkeypatch):
    """LIBERO's success check on its schedule in the workers (they inherit the environment)."""
    from fastenv.conformance import success_schedule

    monkeypatch.setenv(success_schedule.VARIABLE, "1")
    monkeypatch.setenv("FASTENV_SUCCESS_AFTER", "14")
    monkeypatch.setenv("PYTHONPATH", success_schedule.HOOK)


def _by_id(payload):
    return {r["id"]: tuple(r[k] for k in KEYS) for r in payload["episodes"]}


# -- the list and the protocol: no simulator ----------------------------------------------------------

def test_the_episode_list_is_fixed_and_refuses_what_libero_does_not_have():
    eps = episode_list(["libero_spatial", "libero_object"], tasks=[0, 9], episodes=3, seed=5)
    assert [e.id for e in eps[:4]] == ["libero_spatial/0/0", "libero_spatial/0/1", "libero_spatial/0/2", "libero_spatial/9/0"]
    assert len(eps) == 12 and {e.seed for e in eps} == {5}
    assert Episode.from_id("libero_10/3/17", 7) == Episode("libero_10", 3, 17, 7)
    with pytest.raises(ValueError, match="did you mean 'libero_spatial'"):
        episode_list(["libero_spatal"])
    with pytest.raises(ValueError, match=r"libero_goal has tasks 0\.\.9; got \[10\]"):
        episode_list(["libero_goal"], tasks=[10])
    with pytest.raises(ValueError, match="50 init states"):
        episode_list(["libero_goal"], episodes=51)
    with pytest.raises(ValueError, match="SUITE/TASK/INIT_STATE"):
        Episode.from_id("libero_10/3", 7)
    assert parse_tasks("0,3,5-7") == [0, 3, 5, 6, 7]
    with pytest.raises(ValueError, match="ids and ranges"):
        parse_tasks("a-b")


@pytest.mark.parametrize(("chunk", "match"), [
    (np.zeros((10, 6)), r"shape \(10, 6\)"),
    (np.zeros(7), r"shape \(7,\)"),
    (np.zeros((3, 7)), "chunk of 3 actions; the protocol replans every 5"),
    (np.full((5, 7), np.nan), r"non-finite actions \(NaN or inf\) in rows \[0, 1, 2, 3, 4\]"),
    ("left", "not an array of numbers"),
])
def test_a_bad_chunk_is_refused_naming_the_episode_and_what_came(chunk, match):
    with pytest.raises(ValueError, match=match) as info:
        check_chunk(chunk, "libero_10/3/17", 5)
    assert "episode libero_10/3/17" in str(info.value)
    rows = check_chunk(np.concatenate([np.zeros((5, 7)), np.full((5, 7), np.nan)]), "e", 5)  # rows it never uses may be anything
    assert rows.shape == (10, 7)


@settings(max_examples=25, deadline=None)
@given(h=st.integers(8, 300), w=st.integers(8, 300), size=st.sampled_from([224, 128, 96]), seed=st.integers(0, 2**16))
def test_resize_with_pad_is_openpi_clients(h, w, size, seed):
    image_tools = pytest.importorskip("openpi_client.image_tools")
    image = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    ours, theirs = resize_with_pad(image, size, size), image_tools.resize_with_pad(image, size, size)
    assert ours.dtype == theirs.dtype and ours.tobytes() == theirs.tobytes()


def test_protocol_numbers_are_checked_and_named():
    assert Protocol().replan_steps == 5 and Protocol.named("oft").replan_steps == 8
    assert Protocol().steps_for("libero_10") == 520 and Protocol(max_steps=7).steps_for("libero_10") == 7
    with pytest.raises(ValueError, match="replan_steps must be an int >= 1"):
        Protocol(replan_steps=0)
    with pytest.raises(ValueError, match="unknown protocol 'octo'"):
        Protocol.named("octo")


def test_summaries_count_per_task_and_suite():
    eps = [Episode("libero_spatial", t, i, 7) for t in (0, 1) for i in (0, 1)]
    results = [{"id": "libero_spatial/0/0", "success": True}, {"id": "libero_spatial/0/1", "success": False},
               {"id": "libero_spatial/1/0", "success": True}]
    s = summarize(results, eps)
    assert s["tasks"]["libero_spatial/0"] == {"episodes": 2, "successes": 1, "planned": 2, "success_rate": 0.5}
    assert s["suites"]["libero_spatial"]["success_rate"] == pytest.approx(2 / 3)
    assert s["total"] == {"episodes": 3, "successes": 2, "planned": 4, "success_rate": pytest.approx(2 / 3)}


def test_bad_options_are_refused_before_anything_is_built(tmp_path):
    with pytest.raises(ValueError, match="unknown LIBERO suite"):
        run(ProjectionPolicy(), "libero_nope")
    with pytest.raises(ValueError, match="workers must be an int >= 1"):
        run(ProjectionPolicy(), "libero_spatial", workers=0)
    with pytest.raises(ValueError, match="not in the list"):
        run(ProjectionPolicy(), "libero_spatial", tasks=[0], episodes=2, only="libero_spatial/0/5")
    with pytest.raises(TypeError, match="callable on a batch"):
        run(42, "libero_spatial")
    (tmp_path / "r.json").write_text("{}")
    with pytest.raises(ValueError, match="exists: resume=True"):
        run(ProjectionPolicy(), "libero_spatial", out=tmp_path / "r.json")


# -- whole runs on LIBERO -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    """The episodes one at a time: one worker, one env slot, a policy call per request."""
    from fastenv.conformance import success_schedule

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(success_schedule.VARIABLE, "1")
        mp.setenv("FASTENV_SUCCESS_AFTER", "14")
        mp.setenv("PYTHONPATH", success_schedule.HOOK)
        return run(ProjectionPolicy(), "libero_spatial", workers=1, envs_per_worker=1, max_batch=1, **SHORT)


@pytest.mark.libero
def test_an_episodes_result_is_the_same_over_workers_batches_and_alone(reference, scheduled):
    ref = _by_id(reference)
    assert len(ref) == 4 and reference["complete"]
    assert {r[0] for r in ref.values()} == {True} and len({r[1] for r in ref.values()}) > 1  # ended by success, at different steps
    assert reference["run"]["policy"]["mean_batch"] == 1
    sharded = run(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=2, batch_timeout=5, **SHORT)
    assert _by_id(sharded) == ref
    assert sharded["run"]["policy"]["mean_batch"] > 1  # it did batch
    alone = run(ProjectionPolicy(), "libero_spatial", workers=1, only="libero_spatial/0/3", **SHORT)
    assert _by_id(alone) == {"libero_spatial/0/3": ref["libero_spatial/0/3"]}
    # the renders: two cameras at each chunk's start, nothing at the settling steps
    chunks = sum(-(-r["length"] // 5) for r in reference["episodes"])
    assert reference["run"]["camera_renders"] == 2 * chunks


@pytest.mark.libero
def test_a_worker_that_dies_or_hangs_is_replaced_and_its_episodes_come_out_the_same(reference, scheduled, monkeypatch):
    from fastenv.eval.worker import FAULTS_VARIABLE

    monkeypatch.setenv(FAULTS_VARIABLE, "die@libero_spatial/0/1,hang@libero_spatial/0/2")
    payload = run(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=1, hang_timeout=20, **SHORT)
    assert payload["run"]["restarts"] == 2
    assert _by_id(payload) == _by_id(reference)
    attempts = {r["id"]: r["attempts"] for r in payload["episodes"]}
    assert attempts["libero_spatial/0/1"] == 2 and attempts["libero_spatial/0/2"] == 2


class _BreaksAfter(BatchPolicy):
    """The projection stand-in, until its ``calls``-th call: then it answers ``bad``."""

    def __init__(self, calls: int, bad) -> None:
        self.inner, self.calls, self.bad = ProjectionPolicy(), calls, bad

    def infer(self, requests):
        self.calls -= 1
        if self.calls < 0:
            return [self.bad] * len(requests)
        return self.inner.infer(requests)


@pytest.mark.libero
def test_a_bad_answer_stops_the_run_naming_the_episode_and_resume_finishes_it_the_same(reference, scheduled, tmp_path):
    out = tmp_path / "results.json"
    with pytest.raises(EvalError, match=r"episode libero_spatial/0/\d: the policy returned non-finite actions"):
        run(_BreaksAfter(4, np.full((10, 7), np.nan)), "libero_spatial", workers=1, envs_per_worker=1, out=out, **SHORT)
    stopped = json.loads(out.read_text())
    kept = _by_id(stopped)
    assert not stopped["complete"] and "non-finite" in stopped["stopped"] and 1 <= len(kept) < 4
    assert all(kept[k] == _by_id(reference)[k] for k in kept)  # nothing written is lost or wrong
    with pytest.raises(ValueError, match="holds another episode list"):
        run(ProjectionPolicy(), "libero_spatial", workers=1, out=out, resume=True, **{**SHORT, "episodes": 3})
    resumed = run(ProjectionPolicy(), "libero_spatial", workers=2, out=out, resume=True, **SHORT)
    assert resumed["complete"] and resumed["run"]["resumed_from"] == len(kept) and resumed["run"]["episodes_run"] == 4 - len(kept)
    assert _by_id(resumed) == _by_id(reference) == _by_id(json.loads(out.read_text()))
    assert not out.with_name(out.name + ".episodes.jsonl").exists()


@pytest.mark.libero
def test_openpis_policy_server_serves_the_episodes_one_connection_per_worker(reference, scheduled):
    pytest.importorskip("openpi_client")
    sys.path.insert(0, str(Path(__file__).parent))
    from standins.openpi_server import PolicyServer

    stand_in = ProjectionPolicy()
    server = PolicyServer(lambda obs: {"actions": stand_in.chunk(obs)}, metadata={"name": "projection"}).start()
    try:
        policy = OpenpiPolicy("127.0.0.1", server.port, timeout=30)
        payload = run(policy, "libero_spatial", workers=2, envs_per_worker=2, **SHORT)
        assert _by_id(payload) == _by_id(reference)
        assert server.connections == 2 and policy.metadata == {"name": "projection"}
        assert server.requests == payload["run"]["policy"]["served"]
        # a server that stops answering: a bounded wait, the episodes again, then a stop with the reason
        server.stall = True
        with pytest.raises(EvalError, match=r"the policy did not answer \(openpi's policy server at ws://127.0.0.1:\d+: no answer within 2 s"):
            run(OpenpiPolicy("127.0.0.1", server.port, timeout=2), "libero_spatial", workers=1, retries=1, **SHORT)
    finally:
        server.stop()
    with pytest.raises(EvalError, match="did not answer.*(ConnectionRefused|OSError|refused)"):
        run(OpenpiPolicy("127.0.0.1", server.port, timeout=5), "libero_spatial", workers=1, retries=0, **SHORT)


def test_a_remote_policy_that_cannot_answer_some_requests_serves_the_others():
    class Half(BatchPolicy):
        def infer(self, requests):
            answers = [np.zeros((5, 7)) if i % 2 else None for i in range(len(requests))]
            raise PolicyUnavailable("half the connections dropped", [r.episode for r, a in zip(requests, answers) if a is None], answers)

    requests = [Request(f"libero_spatial/0/{i}", {}, 0, i) for i in range(4)]
    with pytest.raises(PolicyUnavailable) as info:
        Half().infer(requests)
    assert info.value.episodes == ["libero_spatial/0/0", "libero_spatial/0/2"] and info.value.answers[1].shape == (5, 7)


@pytest.mark.libero
def test_the_command_writes_the_results_the_table_and_the_videos_asked_for(tmp_path, scheduled):
    out = tmp_path / "eval.json"
    cmd = [sys.executable, "-m", "fastenv.cli", "eval", "--policy", "projection", "--suite", "libero_spatial", "--tasks", "0",
           "--episodes", "2", "--max-steps", "8", "--camera-size", "64", "--workers", "2", "--video", "1", "--out", str(out), "--no-progress"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "libero_spatial" in done.stdout and "episodes/hour" in done.stdout and "worker memory" in done.stdout
    payload = json.loads(out.read_text())
    assert payload["complete"] and [e["id"] for e in payload["episode_list"]] == ["libero_spatial/0/0", "libero_spatial/0/1"]
    films = [r for r in payload["episodes"] if "video" in r]
    assert len(films) == 1 and films[0]["id"] == "libero_spatial/0/0" and Path(films[0]["video"]).stat().st_size > 0
    # the filmed episode renders its third-person camera at every step, the other only at chunk starts
    filmed, plain = (next(r for r in payload["episodes"] if r["id"] == f"libero_spatial/0/{i}") for i in (0, 1))
    assert filmed["camera_renders"] > plain["camera_renders"]
    replay = tmp_path / "replay.json"
    again = subprocess.run([*cmd[:cmd.index("--video")], "--episode", "libero_spatial/0/1", "--out", str(replay), "--no-progress"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    (replayed,) = json.loads(replay.read_text())["episodes"]
    assert [replayed[k] for k in KEYS] == [plain[k] for k in KEYS]
    bad = subprocess.run([*cmd[:6], "--suite", "libero_spatal"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert bad.returncode == 2 and "did you mean 'libero_spatial'" in bad.stderr


@pytest.mark.libero
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time on this machine
def test_ray_actors_run_the_episodes_with_the_same_results_and_replace_a_lost_one(reference, scheduled, monkeypatch):
    ray = pytest.importorskip("ray", reason='Ray is not installed (pip install -e ".[ray]")')
    import os

    from fastenv.conformance import success_schedule
    from fastenv.eval.worker import FAULTS_VARIABLE

    env_vars = {success_schedule.VARIABLE: "1", "FASTENV_SUCCESS_AFTER": "14", "PYTHONPATH": success_schedule.HOOK,
                FAULTS_VARIABLE: "die@libero_spatial/0/2"}
    monkeypatch.setenv("RAY_AUTH_MODE", os.environ.get("RAY_AUTH_MODE", "disabled"))
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    try:
        payload = run(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=1, backend="ray",
                      ray_options={"num_cpus": 0.5, "runtime_env": {"env_vars": env_vars}}, **SHORT)
    finally:
        if started:
            ray.shutdown()
    assert payload["run"]["backend"] == "ray" and payload["run"]["restarts"] == 1
    assert _by_id(payload) == _by_id(reference)



def test_b_max_and_t_max_are_chosen_by_the_tuning_model_from_what_the_first_calls_measured():
    from fastenv.eval.runner import TUNE_AFTER_CALLS, _Run

    def state(per_call, chunk):
        s = _Run(ProjectionPolicy(), Protocol(), [], workers=2, envs_per_worker=4, max_envs=8, max_batch=8, batch_timeout=0.01,
                 hang_timeout=60, retries=0, film=set(), video_dir=None, record_actions=False, context="spawn",
                 on_result=lambda r: None, tune=True)
        s.batch_sizes = [1, 2, 4, 8] * (TUNE_AFTER_CALLS // 4)
        s.call_seconds = [per_call[0] + per_call[1] * b for b in s.batch_sizes]
        s.chunk_seconds = [chunk] * TUNE_AFTER_CALLS
        s._tune()
        return s

    costly = state((0.5, 0.001), 0.05)  # a VLA's call: batch everything
    assert costly.tuned["by"] == "fastenv.tuning.CostModel" and costly.tuned["policy_seconds"] == pytest.approx([0.5, 0.001])
    assert costly.max_batch >= 4 and costly.tuned["chunk_seconds"] == 0.05
    free = state((0.0, 0.0), 0.05)  # a free policy: no reason to wait for a batch
    assert free.max_batch <= costly.max_batch and free.batch_timeout <= costly.batch_timeout
    assert (costly.tuned["max_batch"], costly.tuned["batch_timeout"]) == (costly.max_batch, costly.batch_timeout)
