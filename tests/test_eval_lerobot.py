"""``fastenv eval`` with LeRobot's LIBERO loop (``fastenv.eval.lerobot_eval``).

LeRobot 0.6.1's init-state schedule and the protocol are pure logic; the loop runs on the real
LIBERO (no LeRobot needed). The equality with LeRobot's own ``eval_policy_all`` is
``fastenv.conformance.eval_lerobot``'s, run in LeRobot's stack (``.stacks/lerobot-0.6``) where it
is built.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import need

from fastenv.eval import Episode, Protocol, Request
from fastenv.eval.lerobot_eval import (
    LEROBOT_MAX_STEPS,
    LeRobotEpisode,
    LeRobotLoop,
    LeRobotPolicy,
    LeRobotProtocol,
    fastenv_episodes,
    lerobot_episode_list,
)

ROOT = Path(__file__).resolve().parent.parent
LEROBOT_06 = ROOT / ".stacks" / "lerobot-0.6"


# -- LeRobot 0.6.1's schedule ------------------------------------------------------------------------


def test_async_envs_run_episode_e_on_init_state_e_with_seed_start_plus_e_after_e_over_batch_resets():
    listed = lerobot_episode_list("libero_spatial", [4, 0], n_episodes=5, batch_size=2, start_seed=1000, n_init_states=50)
    assert [(e.task, e.index) for e in listed] == [(0, i) for i in range(5)] + [(4, i) for i in range(5)]  # tasks sorted, as LeRobot does
    task0 = listed[:5]
    assert [e.init_state for e in task0] == [0, 1, 2, 3, 4]
    assert [e.seed for e in task0] == [1000, 1001, 1002, 1003, 1004]  # the same seeds for every task
    assert [e.seed for e in listed[5:]] == [1000, 1001, 1002, 1003, 1004]
    assert [(e.rollout, e.env) for e in task0] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0)]
    assert [e.resets_before for e in task0] == [0, 0, 1, 1, 2]
    assert all(e.kept for e in listed)


def test_the_last_rollouts_extra_episodes_run_and_are_dropped():
    listed = lerobot_episode_list("libero_goal", [3], n_episodes=5, batch_size=2, n_init_states=50, include_dropped=True)
    assert [(e.index, e.kept) for e in listed][-2:] == [(4, True), (5, False)]
    assert listed[-1].init_state == 5 and listed[-1].seed == 1005


def test_the_batch_size_is_clamped_to_the_episodes_and_the_init_states_wrap():
    assert {e.resets_before for e in lerobot_episode_list("libero_10", [0], 3, 8, n_init_states=50)} == {0}  # EvalConfig clamps it to 3
    long = lerobot_episode_list("libero_10", [0], 60, 10, n_init_states=50)
    assert long[55].init_state == 5 and long[55].seed == 1055
    with pytest.raises(ValueError, match="one episode per init state"):
        fastenv_episodes(long)


def test_several_suites_are_listed_as_lerobot_evaluates_them():
    listed = lerobot_episode_list("libero_goal,libero_10", {"libero_goal": [1], "libero_10": [2]}, 2, 2, n_init_states=50)
    assert [(e.suite, e.task, e.index) for e in listed] == [("libero_goal", 1, 0), ("libero_goal", 1, 1), ("libero_10", 2, 0), ("libero_10", 2, 1)]


def test_a_sync_vector_env_of_several_envs_is_refused_and_one_env_follows_the_same_schedule():
    with pytest.raises(ValueError, match="4152"):
        lerobot_episode_list("libero_goal", [0], 4, 2, use_async_envs=False, n_init_states=50)
    one = lerobot_episode_list("libero_goal", [0], 4, 1, use_async_envs=False, n_init_states=50)
    assert [(e.init_state, e.seed, e.resets_before) for e in one] == [(i, 1000 + i, i) for i in range(4)]


@pytest.mark.parametrize("kwargs,match", [({"batch_size": 0}, "auto"), ({"start_seed": None}, "does not seed"), ({"n_episodes": 0}, "n_episodes")])
def test_the_schedules_arguments_are_checked(kwargs, match):
    args = {"n_episodes": 4, "batch_size": 2, "start_seed": 1000, **kwargs}
    with pytest.raises(ValueError, match=match):
        lerobot_episode_list("libero_goal", [0], args["n_episodes"], args["batch_size"], args["start_seed"], n_init_states=50)


def test_fastenvs_episodes_carry_the_index_as_init_state_and_the_start_seed():
    listed = lerobot_episode_list("libero_goal", [0, 1], 3, 2, 1000, n_init_states=50, include_dropped=True)
    assert fastenv_episodes(listed, 1000) == [Episode("libero_goal", t, i, 1000) for t in (0, 1) for i in range(3)]
    assert LeRobotEpisode("libero_goal", 0, 2, 2, 1002, 1, 0, 1, True).episode(1000).id == "libero_goal/0/2"


@pytest.mark.libero
def test_fastenvs_own_episode_list_is_lerobots_kept_episodes():
    from fastenv.eval import episode_list

    listed = lerobot_episode_list("libero_spatial", [0, 4], 5, 2, 1000)
    assert episode_list(["libero_spatial"], tasks=[0, 4], episodes=5, seed=1000) == fastenv_episodes(listed, 1000)


# -- the protocol ------------------------------------------------------------------------------------


def test_the_protocol_has_lerobots_numbers_and_budgets():
    p = LeRobotProtocol(replan_steps=10)
    assert (p.loop, p.num_steps_wait, p.camera_size, p.video_fps, p.batch_size) == ("lerobot", 10, 360, 80, 1)
    assert p.steps_for("libero_spatial") == 280 != Protocol().steps_for("libero_spatial")  # openpi's loop: 220
    assert [p.steps_for(s) for s in LEROBOT_MAX_STEPS] == list(LEROBOT_MAX_STEPS.values())
    assert p.steps_for("libero_90_new") == 500  # LiberoEnv's default for another suite
    assert LeRobotProtocol(max_steps=26).steps_for("libero_10") == 26  # the env config's episode_length
    assert LeRobotProtocol(batch_size=4).as_dict()["batch_size"] == 4  # in the results and the episode list's digest
    assert pickle.loads(pickle.dumps(LeRobotProtocol(batch_size=3))) == LeRobotProtocol(batch_size=3)  # to the workers


@pytest.mark.parametrize("kwargs,match", [({"batch_size": 0}, "batch_size"), ({"loop": "openpi"}, "loop"), ({"num_steps_wait": 5}, "10 steps")])
def test_the_protocol_refuses_what_lerobot_does_not_do(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LeRobotProtocol(**kwargs)


# -- the policy's checks (no LeRobot needed) ------------------------------------------------------------


def _fake_policy(name: str = "act", module: str | None = None, **config):
    cls = type("FakePolicy", (), {"name": name, "__module__": module or f"lerobot.policies.{name}.modeling_{name}"})
    policy = cls()
    defaults = {"n_action_steps": 10, "temporal_ensemble_coeff": None, "rtc_config": None, "use_relative_actions": False}
    policy.config = SimpleNamespace(**{**defaults, **config})
    return policy


@pytest.mark.parametrize("policy,match", [
    (_fake_policy("diffusion"), "not one of"),
    (_fake_policy("act", module="my.policies"), "not one of"),
    (_fake_policy(temporal_ensemble_coeff=0.01), "temporal ensembling"),
    (_fake_policy("pi0", use_relative_actions=True), "relative"),
    (_fake_policy("pi0", rtc_config=SimpleNamespace(enabled=True)), "RTC"),
])
def test_policies_that_read_more_than_a_chunks_start_are_refused(policy, match):
    with pytest.raises(ValueError, match=match):
        LeRobotPolicy(policy, None, None)


def test_a_request_off_the_queues_schedule_or_of_another_loop_is_refused():
    policy = LeRobotPolicy(_fake_policy("pi0"), None, None)
    assert policy.n_action_steps == 10 and policy.protocol().replan_steps == 10
    element = {"pixels": {}, "robot_state": {}, "task": "x"}
    with pytest.raises(ValueError, match="replan_steps=10"):
        policy.infer([Request("libero_goal/0/0", element, 5, 0)])
    with pytest.raises(ValueError, match="LeRobot's observations"):
        policy.infer([Request("libero_goal/0/0", {"observation/image": np.zeros((2, 2, 3))}, 0, 0)])


def test_a_pretrained_policy_without_lerobot_installed_names_what_to_install():
    try:
        import lerobot  # noqa: F401

        pytest.skip("LeRobot is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="lerobot-0.6"):
        LeRobotPolicy.from_pretrained("lerobot/some_policy")


def test_per_sample_runs_the_network_on_one_observation_at_a_time():
    torch = need("torch")
    from fastenv.eval.lerobot_eval import per_sample

    seen = []

    class Net:
        def predict_action_chunk(self, batch, **kwargs):
            seen.append((batch["observation.state"].shape[0], list(batch["task"])))
            return batch["observation.state"][:, None, :].repeat(1, 3, 1)

    net = per_sample(Net())
    out = net.predict_action_chunk({"observation.state": torch.arange(6.0).view(3, 2), "task": ["a", "b", "c"], "flag": True})
    assert seen == [(1, ["a"]), (1, ["b"]), (1, ["c"])]
    assert out.shape == (3, 3, 2) and torch.equal(out[:, 0], torch.arange(6.0).view(3, 2))


# -- the loop on the real LIBERO ---------------------------------------------------------------------------


@pytest.mark.libero
def test_the_loop_gives_lerobots_observation_and_renders_only_what_is_read():
    loop = LeRobotLoop(LeRobotProtocol(replan_steps=10, camera_size=32, max_steps=20))
    held = loop.build("libero_spatial", 0)
    try:
        obs = loop.begin(held, {"id": "libero_spatial/0/1", "suite": "libero_spatial", "task": 0, "init_state": 1, "seed": 1000})
        assert loop.renders(held) == 0  # the reset and the settling steps render nothing
        element = loop.element(held, obs)
        assert loop.renders(held) == 2  # both cameras, once
        assert set(element) == {"pixels", "robot_state", "task"} and element["task"] == held["language"]
        assert {k: v.shape for k, v in element["pixels"].items()} == {"image": (32, 32, 3), "image2": (32, 32, 3)}
        assert element["pixels"]["image"].dtype == np.uint8
        state = element["robot_state"]
        assert {k: v.shape for k, v in state["eef"].items()} == {"pos": (3,), "quat": (4,), "mat": (3, 3)}
        assert state["gripper"]["qpos"].shape == state["gripper"]["qvel"].shape == (2,)
        assert state["joints"]["pos"].shape == state["joints"]["vel"].shape == (7,)
        pickle.dumps(element)  # it travels to the policy's process
        for _ in range(3):
            obs, _reward, done = loop.step(held, [0.0, 0.0, 0.1, 0.0, 0.0, 0.0, -1.0])
        assert loop.renders(held) == 2 and not done  # steps nobody reads render nothing
        frame = loop.frame(obs)
        assert frame.shape == (32, 32, 3) and loop.renders(held) == 3  # a film reads the third-person camera
    finally:
        loop.close(held)


@pytest.mark.libero
def test_a_fixtures_scene_follows_the_resets_lerobots_env_had_before_the_episode():
    """libero_spatial task 4 opens a drawer at random at each reset: LeRobot's episode 1 on a batch
    of 2 envs (its env's first reset) is not the one on a batch of 1 (its env's second)."""
    episode = {"id": "libero_spatial/4/1", "suite": "libero_spatial", "task": 4, "init_state": 1, "seed": 1000}
    images = []
    for batch_size in (2, 1, 2):
        loop = LeRobotLoop(LeRobotProtocol(replan_steps=10, camera_size=32, batch_size=batch_size))
        held = loop.build("libero_spatial", 4)
        try:
            images.append(loop.element(held, loop.begin(held, episode))["pixels"]["image"])
        finally:
            loop.close(held)
    assert np.array_equal(images[0], images[2]) and not np.array_equal(images[0], images[1])


@pytest.mark.libero
def test_a_plain_protocol_with_openpis_budget_is_refused_where_lerobots_differs():
    with pytest.raises(ValueError, match="280"):
        LeRobotLoop(Protocol(loop="lerobot")).build("libero_spatial", 0)


# -- against LeRobot's own eval_policy_all, in its stack -----------------------------------------------------


def test_the_committed_comparison_with_lerobots_eval_policy_all_is_equal_and_its_negative_controls_differ():
    """``results/eval_lerobot_conformance.json`` (``python -m fastenv.conformance.eval_lerobot --batched``)."""
    result = json.loads((ROOT / "results" / "eval_lerobot_conformance.json").read_text())
    rows = result["rows"]
    required = [r for r in rows if r.get("required") and not r.get("negative control")]
    controls = [r for r in rows if r.get("negative control")]
    assert result["passed"] and result["stack"]["lerobot"] == "0.6.1"
    assert all(r["equal"] and r["schedule equal"] for r in required) and not any(r["equal"] for r in controls)
    assert {r["policy"] for r in required} == {"act", "pi0"} and len(required) == 8
    assert {r["run"] for r in required} == {f"fastenv eval, {w} workers, max_batch {b}" for w in (1, 2) for b in (1, "all slots")}
    assert all(r["lerobot n_envs"] == 2 and r["tasks"] == [0, 4] for r in rows)
    assert all(c["episodes that differ"] and all(e.startswith("libero_spatial/4/") for e in c["episodes that differ"]) for c in controls)
    assert sum(r["successes"] for r in required) < sum(len(r["lengths"]) for r in required)  # some episodes ran to the time limit
    assert not command_has_a_local_path(result["command"])


def command_has_a_local_path(command: str) -> bool:
    return any(part.startswith("/") for part in command.split())


def _lerobot_06_python() -> Path:
    python = LEROBOT_06 / "bin" / "python"
    if not python.exists():
        pytest.skip(f"LeRobot 0.6.1's stack is not built in {LEROBOT_06.relative_to(ROOT)}: bash scripts/libero_stack.sh lerobot-0.6")
    check = subprocess.run([str(python), "-c", "import lerobot.envs.libero, lerobot.scripts.lerobot_eval"], capture_output=True, text=True,
                           env={**os.environ, "LIBERO_CONFIG_PATH": str(LEROBOT_06 / "libero-config")}, check=False)
    if check.returncode:
        pytest.skip(f"LeRobot does not import in {LEROBOT_06.relative_to(ROOT)}: {check.stderr.strip().splitlines()[-1:]}")
    return python


@pytest.mark.libero
@pytest.mark.timeout(900)
def test_fastenv_eval_equals_lerobots_eval_policy_all_episode_for_episode(tmp_path):
    """ACT (random init, one observation at a time) on libero_spatial task 4, 2 episodes on 2 async
    envs: LeRobot's eval_policy_all and fastenv eval (2 workers, batches of every waiting env) give
    the same success, length, return and actions; the init states and seeds are the schedule's;
    counting the resets as for a batch of one (the negative control) changes episode 1's scene."""
    python = _lerobot_06_python()
    out = tmp_path / "eval_lerobot.json"
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(LEROBOT_06 / "libero-config")}
    args = ["--policies", "act", "--tasks", "4", "--episodes", "2", "--settings", "2:all", "--out", str(out)]
    run = subprocess.run([str(python), "-m", "fastenv.conformance.eval_lerobot", *args], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=850, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    result = json.loads(out.read_text())
    assert result["passed"] and result["stack"]["lerobot"].startswith("0.6")
    rows = [r for r in result["rows"] if not r.get("negative control")]
    assert len(rows) == 1 and rows[0]["equal"] and rows[0]["schedule equal"], rows
    control = [r for r in result["rows"] if r.get("negative control")]
    assert len(control) == 1 and control[0]["episodes that differ"] == ["libero_spatial/4/1"]


PRETRAINED = """
import sys, tempfile, numpy as np, torch
from lerobot.envs.configs import LiberoEnv as LiberoEnvConfig
from lerobot.envs.factory import make_env_pre_post_processors
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.factory import make_policy, make_pre_post_processors
from fastenv.eval import Request
from fastenv.eval.lerobot_eval import LeRobotPolicy

env_cfg = LiberoEnvConfig(task="libero_spatial", task_ids=[0], observation_height=32, observation_width=32, episode_length=40)
torch.manual_seed(0)
cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, n_action_steps=5, chunk_size=5, dim_model=32, dim_feedforward=64,
                n_encoder_layers=1, n_decoder_layers=1)
policy = make_policy(cfg, env_cfg=env_cfg)
pre, post = make_pre_post_processors(policy_cfg=cfg, pretrained_path=None)
rng = np.random.default_rng(0)
element = {"pixels": {k: rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for k in ("image", "image2")}, "task": "pick",
           "robot_state": {"eef": {"pos": rng.normal(size=3), "quat": rng.normal(size=4), "mat": np.eye(3)},
                           "gripper": {"qpos": rng.normal(size=2), "qvel": rng.normal(size=2)},
                           "joints": {"pos": rng.normal(size=7), "vel": rng.normal(size=7)}}}
request = Request("libero_spatial/0/0", element, 0, 0)
with tempfile.TemporaryDirectory() as d:
    policy.save_pretrained(d); pre.save_pretrained(d); post.save_pretrained(d)
    loaded = LeRobotPolicy.from_pretrained(d, env=env_cfg)
    a = loaded.infer([request])[0]
b = LeRobotPolicy(policy, pre, post, *make_env_pre_post_processors(env_cfg, cfg)).infer([request])[0]
p = loaded.protocol(batch_size=2)
assert (p.replan_steps, p.camera_size, p.max_steps, p.batch_size, p.loop) == (5, 32, 40, 2, "lerobot"), p
assert a.shape == (5, 7) and a.dtype == np.float32 and np.array_equal(a, b)
print("ok")
"""


@pytest.mark.libero
@pytest.mark.timeout(300)
def test_a_saved_policy_loads_as_lerobot_eval_loads_it_and_answers_as_the_one_saved(tmp_path):
    """``LeRobotPolicy.from_pretrained`` (``fastenv eval --policy lerobot:PATH``): a random ACT saved
    with its processors gives the chunk the policy it was saved from gives, and its protocol."""
    python = _lerobot_06_python()
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(LEROBOT_06 / "libero-config")}
    run = subprocess.run([str(python), "-c", PRETRAINED], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=280, check=False)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), (run.stdout + run.stderr)[-3000:]
