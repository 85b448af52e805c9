"""render_devices: each worker is told its GPU, spread over the visible GPUs, CUDA_VISIBLE_DEVICES respected."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

from fastenv.vector import PipelineVectorEnv
from fastenv.vector.devices import visible_gpus, worker_environments

FOUR = lambda: ["0", "1", "2", "3"]  # noqa: E731  (a machine with four NVIDIA GPUs)


def gpu_of(plan):
    return [env.get("CUDA_VISIBLE_DEVICES") for env in plan]


def test_visible_gpus_follow_cuda_visible_devices():
    assert visible_gpus({}, FOUR) == ["0", "1", "2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}, FOUR) == ["2", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": " 1 , 3 "}, FOUR) == ["1", "3"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, FOUR) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "-1"}, FOUR) == []
    assert visible_gpus({}, lambda: []) == []


def test_workers_are_spread_round_robin_over_the_chosen_gpus():
    assert worker_environments(None, 3, {}, FOUR) == [{}, {}, {}]
    plan = worker_environments("auto", 6, {}, FOUR)
    assert gpu_of(plan) == ["0", "1", "2", "3", "0", "1"]
    # the EGL device is the worker's to match (fastenv.gpus): an inherited one is dropped
    assert all(env["MUJOCO_EGL_DEVICE_ID"] is None for env in plan)
    assert gpu_of(worker_environments("auto", 3, {"CUDA_VISIBLE_DEVICES": "2,3"}, FOUR)) == ["2", "3", "2"]
    assert gpu_of(worker_environments([3, 1], 3, {}, FOUR)) == ["3", "1", "3"]
    assert gpu_of(worker_environments(["3"], 2, {"CUDA_VISIBLE_DEVICES": "3"}, FOUR)) == ["3", "3"]
    assert worker_environments("auto", 2, {}, lambda: []) == [{}, {}]  # no GPU: nothing to spread


@pytest.mark.parametrize(
    ("devices", "environ", "message"),
    [
        ([1], {"CUDA_VISIBLE_DEVICES": "2,3"}, r"GPU 1 is not visible here; visible GPUs: \['2', '3'\] \(from CUDA_VISIBLE_DEVICES='2,3'\)"),
        ([7], {}, r"GPU 7 is not visible here; visible GPUs: \['0', '1', '2', '3'\] \(from the machine's NVIDIA devices\)"),
        ([0], {"CUDA_VISIBLE_DEVICES": ""}, r"GPU 0 is not visible here; visible GPUs: \[\]"),
        ([], {}, "non-empty list"),
        ("gpu", {}, "None, 'auto' or a list"),
        ([-1], {}, "non-negative integers"),
        ([True], {}, "non-negative integers"),
    ],
)
def test_a_wrong_device_is_a_clear_error(devices, environ, message):
    with pytest.raises(ValueError, match=message):
        worker_environments(devices, 2, environ, FOUR)


def test_gpus_named_by_uuid_are_spread_as_named():
    # CUDA_VISIBLE_DEVICES may name GPUs by UUID: each worker gets one, its EGL device matched by UUID
    environ = {"CUDA_VISIBLE_DEVICES": "GPU-1a2b,MIG-3c4d"}
    assert gpu_of(worker_environments("auto", 3, environ, FOUR)) == ["GPU-1a2b", "MIG-3c4d", "GPU-1a2b"]


def _told(env):
    return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("MUJOCO_EGL_DEVICE_ID")


def test_each_worker_starts_with_its_gpu(monkeypatch):
    # Six envs on three workers over the two GPUs CUDA_VISIBLE_DEVICES shows: what each worker's
    # envs see. The parent's environment is left as it was.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setenv("MUJOCO_EGL_DEVICE_ID", "1")  # the parent's own: not its workers'

    envs = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 6, num_workers=3, render_devices="auto")
    try:
        seen = envs.apply(_told)
        by_worker = {w: envs.layout.worker_envs(w).tolist() for w in range(3)}
        for w, gpu in zip(range(3), ["4", "6", "4"]):
            assert all(seen[i] == (gpu, None) for i in by_worker[w]), (w, seen)
        assert envs.worker_environments[1] == {"CUDA_VISIBLE_DEVICES": "6", "MUJOCO_EGL_DEVICE_ID": None}
    finally:
        envs.close()
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,6" and os.environ["MUJOCO_EGL_DEVICE_ID"] == "1"
    plain = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2)  # default: inherited
    try:
        assert plain.apply(_told) == (("4,6", "1"), ("4,6", "1"))
    finally:
        plain.close()


def test_a_wrong_device_fails_before_any_worker_starts(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    built = []
    with pytest.raises(ValueError, match="GPU 1 is not visible"):
        PipelineVectorEnv([lambda: built.append(1) or gym.make("CartPole-v1")] * 2, num_workers=2, render_devices=[1])
    with pytest.raises(ValueError, match="num_gpus"):
        PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, backend="ray", render_devices="auto")
    assert built == []
