"""The ManiSkill backend on the real simulator (ManiSkill's CPU simulation), against the stock env.

The stock env is ManiSkill's own ``gym.make(task, obs_mode=..., sim_backend="physx_cpu")`` stepped
one action at a time. Needs a Vulkan device (scripts/vulkan.sh gives one to a machine without).
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import maniskill_patches as mp
import numpy as np
import pytest
from helpers import skip_unless_script_imports

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
torch = need("torch", "the ManiSkill backend needs it")
need("mani_skill")

import fastenv  # noqa: E402
from fastenv.backends import maniskill as ms  # noqa: E402
from fastenv.backends.maniskill.adapter import one_row  # noqa: E402
from fastenv.envs.maniskill import make_cpu_env  # noqa: E402

pytestmark = pytest.mark.maniskill

SIZE = 32  # camera side: small, but every capture still goes through SAPIEN's renderer


def stock_env(env_id: str, obs_mode: str, **kwargs):
    ms.configure_vulkan()
    import mani_skill.envs  # noqa: F401

    return gym.make(env_id, obs_mode=obs_mode, sim_backend="physx_cpu", sensor_configs=dict(width=SIZE, height=SIZE), **kwargs)


def ours(env_id: str, modalities, chunk, **kwargs):
    return make_cpu_env(env_id, modalities=modalities, chunk=chunk, camera_size=SIZE, **kwargs)


def stock_obs(raw, keys):
    """The stock observation under fastenv's keys, as numpy (row 0 of ManiSkill's batch of one)."""
    out = {}
    for key in keys:
        if key == "state":
            value = raw["state"] if isinstance(raw, dict) else raw
        else:
            cam, texture = key.rsplit("_", 1)
            value = raw["sensor_data"][cam][texture]
        out[key] = value[0].numpy()
    return out


def assert_obs(ours_obs, stock, keys, where=""):
    assert set(ours_obs) == set(keys), where
    for key in keys:
        assert np.array_equal(ours_obs[key], stock[key]), f"{where} {key}"


def assert_info(ours_info, stock_info, where=""):
    for key, value in stock_info.items():
        assert np.array_equal(np.asarray(ours_info[key]), value[0].numpy()), f"{where} info {key}"


CASES = [
    ("PickCube-v1", "state", ["state"]),
    ("PushCube-v1", "state", ["state"]),
    ("PickCube-v1", "rgb+state", ["state", "base_camera_rgb"]),
]


@pytest.mark.parametrize("env_id, obs_mode, keys", CASES)
def test_chunk_one_equals_the_stock_env_step_for_step(env_id, obs_mode, keys):
    # Unseeded resets: ManiSkill draws them from torch's global generator, seeded at random in
    # each process, unless enhanced_determinism derives them from the last seed (both get it).
    env = ours(env_id, keys, chunk=1, enhanced_determinism=True)
    stock = stock_env(env_id, obs_mode, enhanced_determinism=True)
    try:
        obs, _ = env.reset(seed=3)
        raw, stock_info = stock.reset(seed=3)
        assert_obs(obs, stock_obs(raw, keys), keys, "reset")
        actions = np.random.default_rng(0).uniform(-1, 1, (55, *stock.action_space.shape)).astype(np.float32)
        ended = 0
        for t, action in enumerate(actions):  # 50-step episodes: through a truncation and a reset
            obs, reward, terminated, truncated, info = env.step(action[None])
            raw, stock_reward, stock_term, stock_trunc, stock_info = stock.step(action)
            assert_obs(obs, stock_obs(raw, keys), keys, f"step {t}")
            assert reward == float(stock_reward[0]), f"step {t}"
            assert (terminated, truncated) == (bool(stock_term[0]), bool(stock_trunc[0])), f"step {t}"
            assert_info(info, stock_info, f"step {t}")
            if terminated or truncated:
                ended += 1
                obs, _ = env.reset()
                raw, _ = stock.reset()
                assert_obs(obs, stock_obs(raw, keys), keys, f"reset after {t}")
        assert ended >= 1
    finally:
        env.close()
        stock.close()


def test_a_chunk_observes_what_the_stock_env_returns_after_the_same_actions():
    keys = ["state", "base_camera_rgb"]
    env, stock = ours("PickCube-v1", keys, chunk=8), stock_env("PickCube-v1", "rgb+state")
    try:
        env.reset(seed=5)
        stock.reset(seed=5)
        actions = np.random.default_rng(1).uniform(-1, 1, (4, 8, 8)).astype(np.float32)
        for c, chunk in enumerate(actions):
            rewards = []
            for action in chunk:
                raw, r, *_ = stock.step(action)
                rewards.append(float(r[0]))
            obs, reward, terminated, truncated, info = env.step(chunk)
            assert_obs(obs, stock_obs(raw, keys), keys, f"chunk {c}")
            np.testing.assert_array_equal(info["chunk_rewards"], rewards)
            assert reward == np.sum(np.array(rewards)) and info["chunk_steps"] == 8
            assert not terminated and not truncated
    finally:
        env.close()
        stock.close()


def test_truncation_inside_a_chunk_gives_the_stock_final_observation():
    keys = ["state", "base_camera_rgb"]
    env, stock = ours("PickCube-v1", keys, chunk=8), stock_env("PickCube-v1", "rgb+state")  # 50 steps
    try:
        env.reset(seed=7)
        stock.reset(seed=7)
        actions = np.random.default_rng(2).uniform(-1, 1, (7, 8, 8)).astype(np.float32)
        for c, chunk in enumerate(actions):
            obs, reward, terminated, truncated, info = env.step(chunk)
            if truncated:
                break
        for action in actions.reshape(-1, 8)[:50]:
            raw, _, _, stock_truncated, _ = stock.step(action)
        assert c == 6 and truncated and info["chunk_steps"] == 2 and bool(stock_truncated[0])  # 48 + 2
        assert_obs(obs, stock_obs(raw, keys), keys, "final")
    finally:
        env.close()
        stock.close()


def test_success_inside_a_chunk_gives_the_stock_final_observation():
    keys = ["state", "base_camera_rgb"]
    env, stock = ours("PickCube-v1", keys, chunk=8), stock_env("PickCube-v1", "rgb+state")
    try:
        env.reset(seed=9)
        stock.reset(seed=9)
        for base in (env.unwrapped.adapter.base, stock.unwrapped):
            # Success is rare with random actions: make it come at the 3rd step, in both the same way.
            evaluate = base.evaluate
            base.evaluate = lambda evaluate=evaluate, base=base: {**evaluate(), "success": base.elapsed_steps >= 3}
        chunk = np.random.default_rng(3).uniform(-1, 1, (8, 8)).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(chunk)
        for action in chunk[:3]:
            raw, *_ = stock.step(action)
        assert terminated and not truncated and info["chunk_steps"] == 3 and info["success"] is True
        assert_obs(obs, stock_obs(raw, keys), keys, "final")
    finally:
        env.close()
        stock.close()


def counted(capture, name, calls):
    def wrapper(*args, **kwargs):
        calls.append(name)
        return capture(*args, **kwargs)

    return wrapper


def test_only_kept_cameras_are_captured_and_no_human_render_camera_is_built(monkeypatch):
    env = make_cpu_env("PickCube-v1", modalities=["base_camera_rgb"], chunk=8, camera_size=SIZE, robot_uids="panda_wristcam")
    stock = stock_env("PickCube-v1", "rgb", robot_uids="panda_wristcam")
    try:
        base = env.unwrapped.adapter.base
        assert set(stock.unwrapped._sensors) == {"base_camera", "hand_camera"}  # what stock captures
        assert list(base._sensors) == ["base_camera"]  # the wrist camera is never captured
        assert base._human_render_cameras == {} and base._viewer is None
        captures = []
        for name, sensor in base._sensors.items():
            monkeypatch.setattr(sensor, "capture", counted(sensor.capture, name, captures))
        env.reset(seed=0)
        captures.clear()
        obs, *_ = env.step(np.zeros((8, 8), np.float32))
        assert captures == ["base_camera"]  # one capture for 8 simulator steps
        assert obs["base_camera_rgb"].shape == (SIZE, SIZE, 3) and obs["base_camera_rgb"].std() > 0
    finally:
        env.close()
        stock.close()


def test_a_digital_twins_green_screen_is_kept_when_only_rgb_is_read(tmp_path):
    # ManiSkill's digital twins compose their rgb from the segmentation (a green screen over a real
    # image): fastenv keeps capturing segmentation for that when only rgb is kept, or its rgb
    # would be the raw render, not the stock env's.
    cv2 = need("cv2", "ManiSkill's digital twins read their overlay with OpenCV")
    overlay = tmp_path / "overlay.png"
    cv2.imwrite(str(overlay), np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    # no domain randomization: it draws camera poses from torch's global generator on every step
    kwargs = dict(obs_mode="rgb+segmentation", domain_randomization=False)
    env = ours("SO100GraspCube-v1", ["base_camera_rgb"], chunk=2, greenscreen_overlay_path=str(overlay), **kwargs)
    stock = stock_env("SO100GraspCube-v1", greenscreen_overlay_path=str(overlay), **kwargs)
    plain = stock_env("SO100GraspCube-v1", **kwargs)
    try:
        obs, _ = env.reset(seed=1)
        raw, _ = stock.reset(seed=1)
        assert_obs(obs, stock_obs(raw, ["base_camera_rgb"]), ["base_camera_rgb"], "reset")
        assert not np.array_equal(obs["base_camera_rgb"], stock_obs(plain.reset(seed=1)[0], ["base_camera_rgb"])["base_camera_rgb"])
        actions = np.random.default_rng(5).uniform(-1, 1, (3, 2, *stock.action_space.shape)).astype(np.float32)
        for c, chunk in enumerate(actions):
            obs, *_ = env.step(chunk)
            for action in chunk:
                raw, *_ = stock.step(action)
            assert_obs(obs, stock_obs(raw, ["base_camera_rgb"]), ["base_camera_rgb"], f"chunk {c}")
    finally:
        for e in (env, stock, plain):
            e.close()


def test_state_only_builds_no_camera():
    env = make_cpu_env("PickCube-v1", modalities=["state"], chunk=4)
    try:
        base = env.unwrapped.adapter.base
        assert base._sensors == {} and base._human_render_cameras == {} and base.obs_mode == "state"
    finally:
        env.close()


def test_headless_and_frames_on_request():
    env = make_cpu_env("PickCube-v1", modalities=["state"], chunk=4)
    framed = make_cpu_env("PickCube-v1", modalities=["state"], chunk=4, render_mode="rgb_array", camera_size=SIZE)
    try:
        env.reset(seed=0)
        assert env.render_mode is None and env.render() is None
        assert env.unwrapped.adapter.base._viewer is None
        framed.reset(seed=0)
        frame = framed.render()
        assert framed.render_mode == "rgb_array" and frame.ndim == 3 and frame.shape[-1] == 3 and frame.std() > 0
    finally:
        env.close()
        framed.close()


def test_bad_inputs_are_refused_clearly_and_the_env_stays_usable():
    env = ours("PickCube-v1", ["state"], chunk=4)
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match=r"action chunk must have shape \(4, 8\), got shape \(4, 7\)"):
            env.step(np.zeros((4, 7), np.float32))
        bad = np.zeros((4, 8), np.float32)
        bad[1, 2] = np.nan
        with pytest.raises(ValueError, match=r"must be finite, got nan at index \(1, 2\)"):
            env.step(bad)
        obs, *_ = env.step(np.zeros((4, 8), np.float32))
        assert env.observation_space.contains(obs)
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"unknown observation key\(s\) \['wrist_rgb'\]"):
        ours("PickCube-v1", ["wrist_rgb"], chunk=4)
    with pytest.raises(ValueError, match=r"unknown ManiSkill env_id 'PickCub-v1'; known: \[.*'PickCube-v1'"):
        ours("PickCub-v1", ["state"], chunk=4)


def test_a_task_whose_assets_are_not_downloaded_is_refused_without_a_prompt():
    with pytest.raises(ValueError, match=r"ManiSkill task 'PickSingleYCB-v1' needs assets that are not downloaded \(ycb\).*download_asset PickSingleYCB-v1"):
        ours("PickSingleYCB-v1", ["state"], chunk=4)


def test_wrap_an_existing_cpu_env():
    stock = stock_env("PickCube-v1", "rgb+state")
    env = fastenv.wrap(stock, chunk=2, modalities=["base_camera_rgb"])
    try:
        base = stock.unwrapped
        assert isinstance(env.unwrapped, fastenv.SimEnv)
        assert env.unwrapped.max_episode_steps == 50  # the registered limit
        obs, _ = env.reset(seed=0)
        assert list(obs) == ["base_camera_rgb"]
        obs, reward, *_ = env.step(np.zeros((2, 8), np.float32))
        assert obs["base_camera_rgb"].shape == (SIZE, SIZE, 3) and isinstance(reward, float)
        assert base.obs_mode_struct.visual.rgb and not base.obs_mode_struct.state
    finally:
        env.close()
    raw, _ = stock.reset(seed=0)
    assert "state" in raw and "base_camera" in raw["sensor_data"]  # given back as it came
    stock.close()


@pytest.mark.parametrize("control_mode", ["pd_joint_delta_pos", "pd_joint_pos"])
def test_envs_not_stepped_hold_their_targets_as_maniskills_own_step_without_action(control_mode):
    # The world-step fastenv uses for envs of a shared world whose turn it is not, on the real
    # simulator: it must leave them exactly as ManiSkill's own step(None) does (targets held), which
    # a substituted zero action does not (an absolute controller drives to 0).
    import mani_skill.envs  # noqa: F401

    def build():
        env = gym.make("PickCube-v1", obs_mode="state", control_mode=control_mode, sim_backend="physx_cpu")
        env.reset(seed=0)
        env.unwrapped._step_action(np.full(env.action_space.shape, 0.3, np.float32))  # some targets to hold
        return env

    held, stock, zero = build(), build(), build()
    try:
        batch = ms.ManiSkillBatch(held.unwrapped, ["state"], [], None)
        none = torch.zeros(0, dtype=torch.int64)
        for _ in range(5):
            batch._step_world(none, torch.zeros((0, *held.action_space.shape)))
            stock.unwrapped._step_action(None)
            zero.unwrapped._step_action(np.zeros(zero.action_space.shape, np.float32))
        q_held, q_stock, q_zero = (e.unwrapped.agent.robot.get_qpos() for e in (held, stock, zero))
        assert torch.equal(q_held, q_stock)
        if control_mode == "pd_joint_pos":
            assert not torch.equal(q_zero, q_stock)  # what the former zero-action substitution did
    finally:
        for env in (held, stock, zero):
            env.close()


# -- many CPU envs in fastenv's workers --------------------------------------------------------------
class StockAsNumpy(gym.Wrapper):
    """The stock env with fastenv's key names and numpy values (row 0 of its batch of one)."""

    def __init__(self, env, keys):
        super().__init__(env)
        self.keys = keys

    def reset(self, *, seed=None, options=None):
        raw, info = self.env.reset(seed=seed, options=options)
        return stock_obs(raw, self.keys), one_row(info)

    def step(self, action):
        raw, reward, terminated, truncated, info = self.env.step(action)
        return stock_obs(raw, self.keys), float(reward[0]), bool(terminated[0]), bool(truncated[0]), one_row(info)


def test_the_vector_env_on_cpu_workers_equals_each_stock_env_run_alone():
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from test_properties import Reference, run_program

    keys = ["state", "base_camera_rgb"]
    # enhanced_determinism: autoresets are unseeded, and ManiSkill draws them from torch's global
    # generator (seeded at random per process) unless it derives them from the last seed.
    envs = gym.make_vec("fastenv/ManiSkill-v0", num_envs=4, num_workers=2, pipeline_stages=2, env_id="PickCube-v1", chunk=4,
                        modalities=keys, camera_size=SIZE, max_episode_steps=10, enhanced_determinism=True)
    plain = functools.partial(
        lambda: StockAsNumpy(stock_env("PickCube-v1", "rgb+state", max_episode_steps=10, enhanced_determinism=True), keys)
    )
    ref = Reference(plain, 4, 2, 4, None)
    try:
        assert isinstance(envs, fastenv.vector.PipelineVectorEnv)  # no CUDA here: CPU envs in workers

        @settings(max_examples=int(__import__("os").environ.get("FASTENV_MANISKILL_EXAMPLES", "3")), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
        @given(data=st.data())
        def program(data):
            run_program(data, envs, ref, rounds=data.draw(st.integers(2, 5)), kills=False, sync=None)

        program()
    finally:
        envs.close()
        for env in ref.envs:
            env.close()


# -- scripts written for ManiSkill's own vector env -------------------------------------------------
@pytest.mark.parametrize("ignore_terminations", [False, True])
def test_maniskill_conventions_equal_maniskills_own_vector_env(ignore_terminations):
    # One CPU env: ManiSkill's own ManiSkillVectorEnv runs it too, so the two compare step for step.
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv as Stock

    from fastenv.integrations.maniskill import make_vec

    kwargs = dict(obs_mode="state", max_episode_steps=12, enhanced_determinism=True)
    stock = Stock(gym.make("PickCube-v1", sim_backend="physx_cpu", **kwargs), 1,
                  ignore_terminations=ignore_terminations, record_metrics=True)
    ours_envs = make_vec("PickCube-v1", 1, ignore_terminations=ignore_terminations, record_metrics=True, num_workers=1, **kwargs)
    try:
        from mani_skill.utils import gym_utils

        assert gym_utils.find_max_episode_steps_value(ours_envs._env) == 12
        assert ours_envs.single_observation_space.shape == stock.single_observation_space.shape
        obs, _ = ours_envs.reset(seed=1)
        ref, _ = stock.reset(seed=1)
        assert torch.equal(obs, ref)
        rng = np.random.default_rng(4)
        ended = 0
        for t in range(30):
            action = torch.as_tensor(rng.uniform(-1, 1, (1, 8)), dtype=torch.float32)
            obs, reward, term, trunc, infos = ours_envs.step(action)
            ref, ref_reward, ref_term, ref_trunc, ref_infos = stock.step(action)
            assert torch.equal(obs, ref) and torch.equal(reward, ref_reward), t
            assert torch.equal(term, ref_term) and torch.equal(trunc, ref_trunc), t
            assert ("final_info" in infos) == ("final_info" in ref_infos), t
            if "final_info" in ref_infos:
                ended += 1
                assert torch.equal(infos["_final_info"], ref_infos["_final_info"])
                assert torch.equal(infos["final_observation"], ref_infos["final_observation"])
                for key, value in ref_infos["final_info"]["episode"].items():
                    assert torch.equal(infos["final_info"]["episode"][key], value), (t, key)
                for key, value in ref_infos["final_info"].items():
                    if key != "episode":
                        assert torch.equal(infos["final_info"][key], value), (t, key)
            else:
                for key, value in ref_infos["episode"].items():
                    assert torch.equal(infos["episode"][key], value), (t, key)
        assert ended == 2  # 12-step episodes
    finally:
        ours_envs.close()
        stock.close()


def stock_vector(env_id: str, wrap=None, **kwargs):
    """ManiSkill's own stack on its one CPU env: gym.make, a ManiSkill wrapper or none, its ManiSkillVectorEnv."""
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv as Stock

    env = gym.make(env_id, num_envs=1, sim_backend="physx_cpu", **kwargs)
    return Stock(env if wrap is None else wrap(env), 1, record_metrics=True)


def assert_same_tree(ours, ref, where):
    """Same keys in the same order, dtypes, shapes and values (tensors, or dicts of them). A camera's
    textures may come in any order: ManiSkill's ``Camera.get_obs`` lists them from a set of texture
    names, so two processes (the script's and a worker) order them by their own string hashes."""
    from mani_skill.utils.common import flatten_dict_keys

    ours, ref = (flatten_dict_keys(x) if isinstance(x, dict) else {"": x} for x in (ours, ref))
    cams = lambda keys: [k.rsplit("/", 1)[0] for k in keys if k.startswith("sensor_data/")]  # noqa: E731
    other = lambda keys: [k for k in keys if not k.startswith("sensor_data/")]  # noqa: E731
    assert other(ours) == other(ref) and sorted(ours) == sorted(ref), f"{where}: keys {list(ours)} != stock {list(ref)}"
    assert list(dict.fromkeys(cams(ours))) == list(dict.fromkeys(cams(ref))), f"{where}: cameras in another order"
    for key, value in ref.items():
        got = ours[key]
        assert (got.dtype, tuple(got.shape)) == (value.dtype, tuple(value.shape)), f"{where} {key}: {got.dtype} {tuple(got.shape)}"
        assert torch.equal(got.cpu(), value.cpu()), f"{where} {key}"


def run_side_by_side(ours_envs, stock, action_dim: int, steps: int) -> int:
    """Step both with the same actions, comparing observations (final ones too) and rewards; the episodes ended."""
    assert_same_tree(ours_envs.reset(seed=3)[0], stock.reset(seed=3)[0], "reset")
    rng = np.random.default_rng(0)
    ended = 0
    for t in range(steps):
        action = torch.as_tensor(rng.uniform(-1, 1, (1, action_dim)), dtype=torch.float32)
        obs, reward, term, trunc, infos = ours_envs.step(action)
        ref, ref_reward, ref_term, ref_trunc, ref_infos = stock.step(action)
        assert_same_tree(obs, ref, f"step {t}")
        assert torch.equal(reward, ref_reward) and torch.equal(term | trunc, ref_term | ref_trunc), t
        assert ("final_observation" in infos) == ("final_observation" in ref_infos), t
        if "final_observation" in ref_infos:
            ended += 1
            assert_same_tree(infos["final_observation"], ref_infos["final_observation"], f"step {t} final")
    return ended


def test_the_drop_ins_visual_observation_is_maniskills_nested_one():
    # A visual obs mode's raw observation: agent and extra groups (PickCube's extra in its own, unsorted
    # order, with a bool), sensor_param and sensor_data, as ManiSkill's vector env gives them, step
    # for step, final observations included.
    from fastenv.integrations.maniskill import ManiSkillVectorEnv, make

    kwargs = dict(obs_mode="rgbd", sensor_configs=dict(width=SIZE, height=SIZE), max_episode_steps=5, enhanced_determinism=True)
    stock = stock_vector("PickCube-v1", **kwargs)
    ours_envs = ManiSkillVectorEnv(make("PickCube-v1", num_envs=1, num_workers=1, **kwargs), 1, record_metrics=True)
    try:
        assert ours_envs.single_observation_space == stock.single_observation_space
        assert list(ours_envs.single_observation_space["extra"]) == ["is_grasped", "tcp_pose", "goal_pos"]
        assert run_side_by_side(ours_envs, stock, 8, 7) == 1
    finally:
        ours_envs.close()
        stock.close()


@pytest.mark.ci_sample("FlattenRGBDObservationWrapper flags")
@pytest.mark.parametrize("flags", [
    dict(rgb=True, depth=False, state=True),  # ppo_rgb.py's
    dict(rgb=True, depth=True, state=True, sep_depth=False),  # one "rgbd" array
    dict(rgb=False, depth=True, state=False),
])
def test_flatten_rgbd_observation_wrapper_equals_maniskills(flags):
    # ManiSkill's gym.make + FlattenRGBDObservationWrapper + ManiSkillVectorEnv against fastenv's make +
    # FlattenRGBDObservationWrapper + ManiSkillVectorEnv: the keys, dtypes, shapes and values the
    # script sees, every step and every final observation.
    from mani_skill.utils.wrappers.flatten import (
        FlattenRGBDObservationWrapper as StockFlatten,
    )

    from fastenv.integrations.maniskill import (
        FlattenRGBDObservationWrapper,
        ManiSkillVectorEnv,
        make,
    )

    kwargs = dict(obs_mode="rgbd", sensor_configs=dict(width=SIZE, height=SIZE), max_episode_steps=5, enhanced_determinism=True)
    stock = stock_vector("PickCube-v1", lambda env: StockFlatten(env, **flags), **kwargs)
    ours_envs = ManiSkillVectorEnv(FlattenRGBDObservationWrapper(make("PickCube-v1", num_envs=1, num_workers=1, **kwargs), **flags), 1,
                                   record_metrics=True)
    try:
        assert ours_envs.single_observation_space == stock.single_observation_space
        assert list(ours_envs.single_observation_space) == list(stock.single_observation_space)
        assert run_side_by_side(ours_envs, stock, 8, 7) == 1
    finally:
        ours_envs.close()
        stock.close()


def test_flatten_action_space_wrapper_equals_maniskills_on_a_two_robot_task():
    # TwoRobotStackCube-v1: a Dict action of two 8-dim agents, one flat 16-dim action in the script.
    from mani_skill.utils.wrappers.flatten import (
        FlattenActionSpaceWrapper as StockFlatten,
    )

    from fastenv.integrations.maniskill import (
        FlattenActionSpaceWrapper,
        ManiSkillVectorEnv,
        make,
    )

    kwargs = dict(obs_mode="state", max_episode_steps=4, enhanced_determinism=True)
    stock = stock_vector("TwoRobotStackCube-v1", StockFlatten, **kwargs)
    envs = make("TwoRobotStackCube-v1", num_envs=1, num_workers=1, **kwargs)
    assert isinstance(envs.single_action_space, gym.spaces.Dict)
    ours_envs = ManiSkillVectorEnv(FlattenActionSpaceWrapper(envs), 1, record_metrics=True)
    try:
        assert ours_envs.single_action_space == stock.single_action_space == gym.spaces.Box(-1, 1, (16,), np.float32)
        assert run_side_by_side(ours_envs, stock, 16, 6) == 1
        with pytest.raises(ValueError, match=r"actions must have shape \(1, 16\)"):
            ours_envs.step(torch.zeros(1, 8))
    finally:
        ours_envs.close()
        stock.close()


def test_the_flatten_wrappers_refuse_what_they_cannot_flatten():
    from fastenv.integrations.maniskill import (
        FlattenActionSpaceWrapper,
        FlattenRGBDObservationWrapper,
    )

    cartpole = gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync")
    with pytest.raises(TypeError, match=r"replace gym.make\(env_id, num_envs=N, ...\) with make"):
        FlattenRGBDObservationWrapper(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="needs camera observations: make the envs with a visual obs_mode"):
        FlattenRGBDObservationWrapper(cartpole)
    with pytest.raises(TypeError, match="flattens a Dict action space"):
        FlattenActionSpaceWrapper(cartpole)
    cartpole.close()


MANISKILL_PPO = os.environ.get("MANISKILL_PPO_SCRIPT")
MANISKILL_PPO_RGB = os.environ.get("MANISKILL_PPO_RGB_SCRIPT")
README, DOCS = mp.README, mp.DOCS
patch_block, readme_patch, patched_ppo = mp.patch_block, mp.readme_patch, mp.patched_ppo


def test_the_documented_patch_changes_only_the_imports_and_gym_make():
    hunks = readme_patch()
    assert len(hunks) == 2
    for old, new in hunks:
        assert old.replace("gym.make(", "make(") == new or "from fastenv.integrations.maniskill import" in new
    source = "import x\n" + hunks[0][0] + "y = 1\n" + hunks[1][0] + "go()\n"
    assert patched_ppo(source) == "import x\n" + hunks[0][1] + "y = 1\n" + hunks[1][1] + "go()\n"
    with pytest.raises(AssertionError, match="once in ppo.py"):
        patched_ppo(source + hunks[1][0])


def run_ppo_script_and_evaluate(source, name, tmp_path, timeout):
    """A patched ManiSkill PPO script with tiny budgets and its default flags (evaluation videos,
    checkpoints, tensorboard), then --evaluate from its final checkpoint: (run folder, recorded folder)."""
    skip_unless_script_imports(source, "maniskill")  # tyro, tensorboard, ...: what the script imports
    script = tmp_path / name
    script.write_text(source)
    args = ["--env-id", "PushCube-v1", "--num-envs", "4", "--num-eval-envs", "2", "--num-steps", "8", "--total-timesteps", "64",
            "--num-minibatches", "2", "--update-epochs", "1", "--eval-freq", "2", "--num-eval-steps", "50"]
    out = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("SPS:") == 2  # two PPO iterations of 4 envs x 8 steps
    assert "resulting in 2 episodes" in out.stdout  # the 50-step eval episodes ended, with their metrics
    assert "eval_success_once_mean=" in out.stdout and "eval_return_mean=" in out.stdout
    if not torch.cuda.is_available():
        assert out.stderr.count("asks for CUDA") == 1  # the script's physx_cuda, replaced and said once
    (run,) = (tmp_path / "runs").iterdir()
    assert sorted(p.name for p in run.glob("*.pt")) == ["ckpt_1.pt", "final_ckpt.pt"]
    assert [p.name for p in (run / "videos").iterdir()] == ["0.mp4"]  # 2 envs x 50 steps, tiled, one video
    assert next(run.glob("events.out.tfevents.*")).stat().st_size > 0
    out = subprocess.run([sys.executable, str(script), "--env-id", "PushCube-v1", "--num-eval-envs", "2", "--num-eval-steps", "50",
                          "--evaluate", "--checkpoint", str(run / "final_ckpt.pt")], cwd=tmp_path, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "eval_success_once_mean=" in out.stdout
    recorded = run / "test_videos"
    assert sorted(p.name for p in recorded.iterdir()) == ["0.mp4", "trajectory.h5", "trajectory.json"]
    return run, recorded


@pytest.mark.skipif(MANISKILL_PPO is None, reason="set MANISKILL_PPO_SCRIPT to ManiSkill's examples/baselines/ppo/ppo.py (not redistributed)")
def test_maniskills_ppo_script_runs_with_its_default_flags(tmp_path):
    # The documented patch and nothing else: evaluation videos, checkpoints and metrics as the script's
    # defaults have them (capture_video, save_model), then --evaluate from the saved checkpoint,
    # which records ManiSkill's trajectory files.
    _, recorded = run_ppo_script_and_evaluate(patched_ppo(Path(MANISKILL_PPO).read_text()), "ppo.py", tmp_path, 900)
    import json

    import h5py

    episodes = json.loads((recorded / "trajectory.json").read_text())["episodes"]
    assert [e["elapsed_steps"] for e in episodes] == [50, 50]
    with h5py.File(recorded / "trajectory.h5") as f:
        assert sorted(f) == ["traj_0", "traj_1"] and f["traj_0/actions"].shape[0] == 50 and f["traj_0/obs"].shape[0] == 51


def test_the_docs_ppo_rgb_patch_changes_only_the_imports_and_gym_make():
    hunks = readme_patch(DOCS, "ppo_rgb.py")
    assert len(hunks) == 2
    (imports_old, imports_new), (make_old, make_new) = hunks
    _, _, (imports, _) = mp.parse_unified_diff(patch_block(DOCS, "ppo_rgb.py"))
    assert [line.split(" import")[0] for line in imports.removed] == [
        "from mani_skill.utils.wrappers.flatten", "from mani_skill.utils.wrappers.record", "from mani_skill.vector.wrappers.gymnasium"]
    assert len(imports.added) == 1
    for name in ("FlattenActionSpaceWrapper", "FlattenRGBDObservationWrapper", "ManiSkillVectorEnv", "RecordEpisode", "make"):
        assert name in imports_new and imports.added[0].startswith("from fastenv.integrations.maniskill import")
    assert make_old.count("gym.make(") == 2 and make_old.replace("gym.make(", "make(") == make_new
    source = "import x\n" + imports_old + "y = 1\n" + make_old + "go()\n"
    assert patched_ppo(source, DOCS, "ppo_rgb.py") == "import x\n" + imports_new + "y = 1\n" + make_new + "go()\n"
    assert "ppo_rgb.py" in README.read_text()  # the README points to it beside ppo.py


@pytest.mark.skipif(MANISKILL_PPO_RGB is None, reason="set MANISKILL_PPO_RGB_SCRIPT to ManiSkill's examples/baselines/ppo/ppo_rgb.py (not redistributed)")
def test_maniskills_ppo_rgb_script_runs_with_its_default_flags(tmp_path):
    # The docs' patch and nothing else, the script's defaults otherwise: the task's 128-px camera,
    # rgb and state through FlattenRGBDObservationWrapper, render_mode="all" for the evaluation
    # videos, checkpoints, tensorboard; then --evaluate from the saved checkpoint, which records
    # ManiSkill's trajectory files of the flattened observations.
    source = patched_ppo(Path(MANISKILL_PPO_RGB).read_text(), DOCS, "ppo_rgb.py")
    _, recorded = run_ppo_script_and_evaluate(source, "ppo_rgb.py", tmp_path, 1200)
    import h5py

    with h5py.File(recorded / "trajectory.h5") as f:
        assert sorted(f) == ["traj_0", "traj_1"]
        obs = f["traj_0/obs"]
        assert list(obs) == ["state", "rgb"] and obs["rgb"].shape == (51, 128, 128, 3) and obs["rgb"].dtype == np.uint8
        assert obs["state"].dtype == np.float32 and f["traj_0/actions"].shape == (50, 8)


@pytest.mark.big_memory
@pytest.mark.ci_sample("the PPO-shaped benchmark")
@pytest.mark.parametrize("obs", ["state", "rgb"])
def test_the_ppo_shaped_benchmark_runs_every_stack(tmp_path, obs):
    # bench_maniskill.py --parts ppo, small: every stack runs whole PPO iterations and is reported.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_maniskill

    out = tmp_path / "ppo.json"
    payload = bench_maniskill.main(["--parts", "ppo", "--rounds", "1", "--ppo-envs", "2", "--ppo-steps", "8", "--ppo-obs", obs,
                                    "--ppo-camera", "64", "--out", str(out)])
    rows = payload["ppo"]
    drop_ins = {
        "state": ["fastenv drop-in make_vec, 2 envs"],
        "rgb": ["fastenv drop-in + FlattenRGBDObservationWrapper, 2 envs, chunk 1",
                "fastenv drop-in + FlattenRGBDObservationWrapper, 2 envs, chunk 8 (1 obs / 8 steps)"],
    }[obs]
    assert [row["config"] for row in rows] == [
        "stock ManiSkillVectorEnv, 1 CPU env", "stock AsyncVectorEnv, 2 CPUGymWrapper envs", *drop_ins,
        "fastenv, 2 envs, chunk 1", "fastenv, 2 envs, chunk 8 (1 obs / 8 steps)",
    ]
    assert {row["obs"] for row in rows} == {"state" if obs == "state" else "rgb 64 px + state"}
    assert all(row["env_steps_per_s"] > 0 and row["rollout_env_steps_per_s"] >= row["env_steps_per_s"] for row in rows)
    assert rows[0]["x_stock"] == 1.0 and payload["settings"]["ppo_steps"] == 8
    assert out.exists()
    with pytest.raises(SystemExit):
        bench_maniskill.main(["--parts", "ppo", "--ppo-steps", "12", "--out", str(out)])
    with pytest.raises(SystemExit):  # the policy's CNN needs 64 px
        bench_maniskill.main(["--parts", "ppo", "--ppo-camera", "32", "--out", str(out)])


def test_the_gpu_benchmark_compares_the_three_vector_envs_over_one_env(tmp_path):
    # bench_maniskill_gpu.py, on ManiSkill's CPU simulation (one env): ManiSkill's own vector env,
    # fastenv chunk 1 and chunk 8 timed over the same env in a child process, ratios to ManiSkill's.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_maniskill_gpu as bench

    ms.configure_vulkan()
    payload = bench.main(["--sim-backend", "physx_cpu", "--num-envs", "1", "--obs", "state", "rgb", "--camera-size", str(SIZE),
                          "--steps", "8", "--rounds", "1", "--out", str(tmp_path / "g.json")])
    rows = payload["rows"]
    assert [(row["obs"], row["config"]) for row in rows] == [(obs, name) for obs in ("state", "rgb")
                                                              for name in (bench.STOCK, bench.CHUNK1, bench.CHUNK8)]
    assert all(row["env_steps_per_s"] > 0 and row["device"] == "cpu" for row in rows)
    assert [row["x_maniskill"] for row in rows if row["config"] == bench.STOCK] == [1.0, 1.0]
    with pytest.raises(SystemExit):  # the CPU simulation holds one env per process
        bench.main(["--sim-backend", "physx_cpu", "--num-envs", "4", "--out", str(tmp_path / "g.json")])
    with pytest.raises(SystemExit):
        bench.main(["--steps", "12", "--out", str(tmp_path / "g.json")])
