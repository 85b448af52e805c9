"""The BEHAVIOR adapter on a stand-in of OmniGibson (``tests/standins/omnigibson``).

OmniGibson cannot be installed here; the stand-in mirrors the API the adapter calls and
OmniGibson's own ``Environment.step``/``reset`` (see its docstring for the source it follows), so
these tests compare fastenv with the stock OmniGibson loop exactly as the LIBERO and ManiSkill
tests do with their real simulators: every runtime path of the adapter (sub-steps without
rendering, observe, reset, partial autoreset, pipeline stages with several envs per process in
one world, the thread cap at launch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import fastenv  # noqa: F401  (registers fastenv/Behavior-v0)
from fastenv.backends import behavior
from fastenv.backends.behavior import BehaviorAdapter, BehaviorSettings, omnigibson_settings
from fastenv.envs.behavior import make_env

STANDINS = Path(__file__).parent / "standins"


def _forget_omnigibson() -> None:
    for name in [m for m in sys.modules if m == "omnigibson" or m.startswith("omnigibson.")]:
        del sys.modules[name]
    behavior._PROCESS_ENVS.clear()


@pytest.fixture
def og(monkeypatch):
    """A fresh stand-in OmniGibson (no simulator launched) importable here and in spawned workers."""
    monkeypatch.syspath_prepend(str(STANDINS))
    _forget_omnigibson()
    import omnigibson

    yield omnigibson
    _forget_omnigibson()


def fresh(og_module):
    _forget_omnigibson()
    import omnigibson

    return omnigibson


SMALL = {"camera_size": 8, "max_episode_steps": 12}


def settings(**kwargs) -> BehaviorSettings:
    options = {**SMALL, **kwargs}
    size = options.pop("camera_size")
    return BehaviorSettings(camera_size=(size, size), **options)


def stock_env(og_module, s: BehaviorSettings):
    """OmniGibson's own env for the same settings, built as a user of OmniGibson would."""
    translated = omnigibson_settings(s)
    from omnigibson.macros import gm

    with gm.unlocked():
        for name, value in translated["macros"].items():
            setattr(gm, name, value)
    return og_module.Environment(configs=translated["config"])


def as_fastenv_obs(obs) -> dict[str, np.ndarray]:
    out = {}
    for key, value in obs.items():
        array = value.numpy()
        out[key] = array[..., :3] if key.endswith("::rgb") else array
    return out


def assert_obs_equal(a, b):
    assert sorted(a) == sorted(b)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        assert a[key].dtype == b[key].dtype, key


def action_plan(n: int, seed: int) -> np.ndarray:
    """Pushes towards the goal for a while (successes), then wanders (timeouts)."""
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (n, 4)).astype(np.float32)
    actions[: n // 3, 0] = 1.0
    return actions


def stock_rollout(og_module, s: BehaviorSettings, actions: np.ndarray):
    """The stock loop, one action at a time, resetting whenever an episode ends."""
    env = stock_env(og_module, s)
    obs, _ = env.reset()
    trace = [("reset", as_fastenv_obs(obs))]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append(("step", as_fastenv_obs(obs), reward, terminated, truncated, info["done"]["success"]))
        if terminated or truncated:
            obs, _ = env.reset()
            trace.append(("reset", as_fastenv_obs(obs)))
    return trace, og_module.sim


def test_chunk_of_one_equals_the_stock_env_step_for_step(og):
    s = settings()
    actions = action_plan(40, seed=0)
    expected, _ = stock_rollout(og, s, actions)
    og = fresh(og)
    env = make_env(chunk=1, camera_size=8, max_episode_steps=12)
    assert env.observation_space == gym.spaces.Dict(
        {
            "robot_r1::robot_r1:zed_link:Camera:0::rgb": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
            "robot_r1::proprio": gym.spaces.Box(-np.inf, np.inf, (8,), np.float32),
        }
    )
    obs, _ = env.reset()
    got = [("reset", obs)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action[None])  # a chunk of one action
        assert env.observation_space.contains(obs)
        got.append(("step", obs, reward, terminated, truncated, info["success"]))
        if terminated or truncated:
            obs, _ = env.reset()
            got.append(("reset", obs))
    assert [g[0] for g in got] == [e[0] for e in expected]
    kinds = {(e[3], e[4]) for e in expected if e[0] == "step"}
    assert (True, False) in kinds and (False, True) in kinds  # successes and timeouts both happened
    for g, e in zip(got, expected):
        assert_obs_equal(g[1], e[1])
        assert g[2:] == e[2:]
    env.close()


def test_a_chunk_observes_what_stock_returns_after_its_actions_rendering_once(og):
    chunk = 4
    s = settings(max_episode_steps=100)
    actions = action_plan(3 * chunk, seed=1)
    actions[:, 0] = np.minimum(actions[:, 0], 0.2)  # no success: whole chunks
    expected, stock_sim = stock_rollout(og, s, actions)
    stock_renders, stock_physics = stock_sim.renders, stock_sim.physics_steps
    og = fresh(og)
    env = make_env(chunk=chunk, camera_size=8, max_episode_steps=100)
    obs, _ = env.reset()
    assert_obs_equal(obs, expected[0][1])
    renders, physics = og.sim.renders, og.sim.physics_steps
    for c in range(3):
        obs, reward, terminated, truncated, info = env.step(actions[c * chunk : (c + 1) * chunk])
        after = expected[(c + 1) * chunk]
        assert_obs_equal(obs, after[1])
        stock_rewards = [e[2] for e in expected[c * chunk + 1 : (c + 1) * chunk + 1]]
        np.testing.assert_array_equal(info["chunk_rewards"], stock_rewards)
        assert reward == pytest.approx(sum(stock_rewards), abs=1e-15)
        assert (terminated, truncated) == (False, False) and info["chunk_steps"] == chunk
        # K sub-steps of 4 physics steps each, and one render: the chunk's observation
        assert og.sim.physics_steps - physics == chunk * 4
        assert og.sim.renders - renders == 1
        renders, physics = og.sim.renders, og.sim.physics_steps
    # the stock loop rendered on every one of its steps
    assert stock_renders >= 3 * chunk and stock_physics == og.sim.physics_steps
    env.close()


@pytest.mark.parametrize("end", ["success", "timeout"])
def test_an_episode_ending_inside_a_chunk_gives_the_stock_final_observation(og, end):
    chunk = 5
    s = settings(max_episode_steps=7 if end == "timeout" else 100)
    actions = np.zeros((2 * chunk, 4), np.float32)
    actions[:, 0] = 1.0 if end == "success" else 0.1
    expected, _ = stock_rollout(og, s, actions)
    ended = next(i for i, e in enumerate(expected) if e[0] == "step" and (e[3] or e[4]))
    assert 1 < ended % chunk  # inside a chunk, not at its end
    og = fresh(og)
    env = make_env(chunk=chunk, camera_size=8, max_episode_steps=s.max_episode_steps)
    env.reset()
    for c in range(2):
        obs, reward, terminated, truncated, info = env.step(actions[c * chunk : (c + 1) * chunk])
        if terminated or truncated:
            break
    assert c * chunk + info["chunk_steps"] == ended
    assert_obs_equal(obs, expected[ended][1])
    assert (terminated, truncated) == expected[ended][3:5] == ((True, False) if end == "success" else (False, True))
    assert info["success"] == expected[ended][5]
    env.close()


def test_a_camera_with_no_kept_modality_is_never_built_or_rendered(og):
    env = make_env(chunk=3, modalities=["proprio"], camera_size=8)
    obs, _ = env.reset()
    assert list(obs) == ["robot_r1::proprio"]
    robot = og.sim.scenes[0].robots[0]
    assert robot.sensors == {}
    env.step(np.zeros((3, 4), np.float32))
    env.close()


def test_the_thread_cap_reaches_kit_when_it_launches(og):
    env = make_env(chunk=2, threads=2, camera_size=8)
    from omnigibson import lazy

    (config,) = lazy.launches
    assert config["limit_cpu_threads"] == 2
    assert "--/plugins/carb.tasking.plugin/threadCount=2" in config["extra_args"]
    assert config["headless"] is True  # the macros were set before OmniGibson launched
    env.close()


@pytest.mark.parametrize("frequencies", [(30, 120), (30, 90), (10, 60), (20, 140)])
@pytest.mark.parametrize("stages", [1, 2, 3, 5, 7])
def test_a_divided_physics_step_keeps_omnigibsons_ratios_and_the_time_per_action(og, frequencies, stages):
    action_hz, physics_hz = frequencies
    adapter = BehaviorAdapter(settings(action_frequency=action_hz, physics_frequency=physics_hz))
    adapter.set_physics_dt(adapter.base_physics_dt / stages)
    start, steps = og.sim.current_time, og.sim.physics_steps
    for _ in range(stages):
        adapter.substep(np.zeros(4, np.float32))  # steps without rendering: OmniGibson's strict ratio
    assert og.sim.physics_steps - steps == stages * (physics_hz // action_hz)
    assert og.sim.current_time - start == pytest.approx(1.0 / action_hz, rel=1e-12)
    adapter.close()


def test_frequencies_whose_ratio_is_inexact_in_floating_point_still_step_without_rendering(og):
    # 1/20 / (1/140) is 7.000000000000001: OmniGibson's render-free step would assert
    adapter = BehaviorAdapter(settings(action_frequency=20, physics_frequency=140))
    start = og.sim.current_time
    adapter.substep(np.zeros(4, np.float32))
    assert og.sim.current_time - start == pytest.approx(1 / 20, rel=1e-12)
    adapter.close()


def test_max_episode_steps_is_the_number_of_actions_of_an_episode(og):
    env = make_env(chunk=1, camera_size=8, max_episode_steps=3)
    env.reset()
    flags = [env.step(np.zeros((1, 4), np.float32))[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]  # OmniGibson's own Timeout
    env.close()


def test_bad_input_is_refused_with_what_was_expected(og):
    env = make_env(chunk=2, camera_size=8)
    env.reset()
    with pytest.raises(ValueError, match=r"shape"):
        env.step(np.zeros((2, 5), np.float32))
    with pytest.raises(ValueError, match=r"NaN|finite"):
        env.step(np.full((2, 4), np.nan, np.float32))
    with pytest.raises(ValueError, match="unknown"):
        env.reset(options={"instance": 3})
    env.close()
    with pytest.raises(ValueError, match="depht"):
        gym.make("fastenv/Behavior-v0", modalities=["depht"])


def _world(env):
    sim = sys.modules["omnigibson"].sim
    adapter = env.unwrapped.adapter
    return {
        "time": sim.current_time,
        "physics_steps": sim.physics_steps,
        "scene": adapter.env.scene.idx,
        # every robot's goal at every physics step since the world held all of them
        "goals": np.array([[g.numpy() for g in step] for step in sim.goal_log if len(step) == len(sim.scenes)]),
        "episode_steps": adapter.env.episode_steps,
    }


def test_stages_with_several_envs_per_process_share_one_world(og):
    # 4 envs in one worker process: one OmniGibson world, 2 stages of 2 envs, chunks of 3.
    envs = make_env(
        num_envs=4, pipeline_stages=2, num_workers=1, chunk=3, camera_size=8,
        modalities=["proprio"], max_episode_steps=100,
    )
    vec = envs.vector_env
    try:
        assert vec.shared_physics and vec.physics_scaled
        vec.reset(seed=0)
        before = vec.apply(_world)
        assert sorted(w["scene"] for w in before) == [0, 1, 2, 3]
        actions = {0: np.full((2, 3, 4), 0.3, np.float32), 1: np.full((2, 3, 4), -0.2, np.float32)}
        actions[0][1] += 0.1
        actions[1][1] -= 0.1
        vec.send(actions[0], stage=0)
        vec.recv(stage=0)
        vec.send(actions[1], stage=1)
        vec.recv(stage=1)
        after = vec.apply(_world)
        # each stage's sub-step advanced the world once for all 4 envs: 2 stages x 3 sub-steps of
        # 4 physics steps each, every physics step half as long (S = 2)
        assert after[0]["physics_steps"] - before[0]["physics_steps"] == 2 * 3 * 4
        # so every env's 3 actions took 3 action periods of simulated time
        assert after[0]["time"] - before[0]["time"] == pytest.approx(3 / 30, rel=1e-12)
        goals = after[0]["goals"][len(before[0]["goals"]) :]  # (physics steps, env, dim)
        stage_of = {w["scene"]: (0 if gid < 2 else 1) for gid, w in enumerate(after)}
        row_of = {w["scene"]: gid % 2 for gid, w in enumerate(after)}
        for scene in range(4):
            mine = actions[stage_of[scene]][row_of[scene], 0]
            if stage_of[scene] == 0:
                # set by its own first sub-step and held (never replaced) while stage 1 stepped
                np.testing.assert_array_equal(goals[:, scene], np.broadcast_to(mine, goals[:, scene].shape))
            else:
                # held its reset target while stage 0 stepped, then its own action
                held = goals[0, scene]
                np.testing.assert_array_equal(goals[:12, scene], np.broadcast_to(held, (12, 4)))
                np.testing.assert_array_equal(goals[12:, scene], np.broadcast_to(mine, (12, 4)))
        assert all(w["episode_steps"] == 3 for w in after)
    finally:
        envs.close()


def test_partial_autoreset_resets_only_the_env_that_ended(og):
    # Two envs in one world: env 0 reaches the goal inside a chunk, env 1 goes on.
    envs = make_env(
        num_envs=2, num_workers=1, chunk=4, camera_size=8, modalities=["proprio"],
        max_episode_steps=100,
    )
    vec = envs.vector_env
    try:
        vec.reset(seed=0)
        actions = np.zeros((2, 4, 4), np.float32)
        actions[0, :, 0] = 1.0
        for _ in range(6):
            obs, rewards, terminated, truncated, infos = vec.step(actions)
            if terminated[0]:
                break
        assert terminated.tolist() == [True, False] and not truncated.any()
        assert infos["final_info"]["success"][0] and infos["final_obs"][0]["robot_r1::proprio"][0] >= 0.6
        steps = {w["scene"]: w["episode_steps"] for w in vec.apply(_world)}
        # env 0 starts a new episode (its reset stepped the shared world once); env 1's goes on
        assert steps[0] == 0 and steps[1] > 4
        assert obs["robot_r1::proprio"][0, 0] < 0.6
    finally:
        envs.close()
