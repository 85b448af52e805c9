"""The BEHAVIOR backend: the pure translation to OmniGibson, and the missing-dependency error."""

import importlib.util

import gymnasium as gym
import pytest
from gymnasium.error import DependencyNotInstalled

from fastenv.backends.behavior import BehaviorSettings, omnigibson_settings, split_done


def test_defaults_build_a_headless_rgb_and_proprio_rollout():
    out = omnigibson_settings(BehaviorSettings(task="turning_on_radio"))
    macros, config = out["macros"], out["config"]
    assert macros["HEADLESS"] and macros["ENABLE_FLATCACHE"] and not macros["RENDER_VIEWER_CAMERA"]
    assert macros["ENABLE_OBJECT_STATES"] and not macros["ENABLE_TRANSITION_RULES"]
    assert not macros["USE_GPU_DYNAMICS"] and not macros["ENABLE_HQ_RENDERING"]
    env = config["env"]
    assert env["action_frequency"] == env["rendering_frequency"] == 30  # headless needs them equal
    assert env["physics_frequency"] == 120 and env["automatic_reset"] is False
    robot = config["robots"][0]
    assert robot["type"] == "R1Pro" and robot["obs_modalities"] == ["rgb", "proprio"]
    assert robot["sensor_config"]["VisionSensor"]["modalities"] == ["rgb"]
    assert robot["sensor_config"]["VisionSensor"]["sensor_kwargs"] == {"image_height": 128, "image_width": 128}
    task = config["task"]
    assert task == {
        "type": "BehaviorTask",
        "activity_name": "turning_on_radio",
        "activity_definition_id": 0,
        "activity_instance_id": 0,
        "online_object_sampling": False,
        "termination_config": {"max_steps": 499},  # OmniGibson ends at episode_steps >= max_steps
        "include_obs": False,
    }
    assert config["scene"]["scene_model"] == "house_single_floor" and config["scene"]["include_robots"] is False
    assert out["launch"] == {}


def test_proprio_only_creates_no_camera():
    config = omnigibson_settings(BehaviorSettings(modalities=("proprio",)))["config"]
    assert "sensor_config" not in config["robots"][0]


def test_thread_limits_reach_kit_at_launch():
    launch = omnigibson_settings(BehaviorSettings(threads=4))["launch"]
    assert launch["limit_cpu_threads"] == 4
    assert "--/plugins/carb.tasking.plugin/threadCount=4" in launch["extra_args"]
    assert "--/plugins/omni.tbb.globalcontrol/maxThreadCount=4" in launch["extra_args"]


def test_options_and_extra_config_merge():
    settings = BehaviorSettings(
        task="picking_up_trash", scene="Rs_int", robot="Fetch", camera_size=(96, 64), max_episode_steps=900,
        action_frequency=20, physics_frequency=60, transition_rules=True,
        extra_config={"scene": {"load_room_instances": ["kitchen_0"]}, "env": {"device": "cuda:0"}},
    )
    out = omnigibson_settings(settings)
    config = out["config"]
    assert config["scene"]["load_room_instances"] == ["kitchen_0"] and config["scene"]["scene_model"] == "Rs_int"
    assert config["env"]["device"] == "cuda:0" and config["env"]["rendering_frequency"] == 20
    assert config["robots"][0]["type"] == "Fetch"
    assert config["robots"][0]["sensor_config"]["VisionSensor"]["sensor_kwargs"] == {"image_height": 96, "image_width": 64}
    assert config["task"]["termination_config"] == {"max_steps": 899}  # 900 actions
    assert out["macros"]["ENABLE_TRANSITION_RULES"] is True


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"modalities": ("rgb", "lidar")}, r"unknown observation key\(s\) \['lidar'\]"),
        ({"physics_frequency": 100, "action_frequency": 30}, "multiple of action_frequency"),
        ({"max_episode_steps": 0}, "max_episode_steps must be an integer >= 1"),
        ({"threads": 0}, "threads must be an integer >= 1"),
    ],
)
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BehaviorSettings(**kwargs)


def test_timeout_is_truncation_and_the_goal_terminates():
    timeout = {"done": {"termination_conditions": {"timeout": {"done": True}, "predicate": {"done": False}}, "success": False}}
    goal = {"done": {"termination_conditions": {"timeout": {"done": False}, "predicate": {"done": True}}, "success": True}}
    assert split_done(True, timeout) == (False, True, {"success": False})
    assert split_done(True, goal) == (True, False, {"success": True})
    assert split_done(False, {"done": {"termination_conditions": {}}}) == (False, False, {"success": False})


@pytest.mark.skipif(importlib.util.find_spec("omnigibson") is not None, reason="OmniGibson is installed here")
def test_make_without_omnigibson_says_what_to_install():
    import fastenv  # noqa: F401

    with pytest.raises(DependencyNotInstalled, match=r"(?s)BEHAVIOR-1K.*setup.sh.*Isaac Sim.*RTX"):
        gym.make("fastenv/Behavior-v0", task="turning_on_radio", chunk=32, pipeline_stages=2)
