"""The vector env's profiler: where a rollout's wall time goes, attributed to the right category.

The envs take known time per call (``fakes.SleepyAdapter``: sub-step 2 ms, observation 5 ms,
reset 20 ms), so each category holds at least the time slept in it; counts are exact.
"""

import time

import numpy as np
import pytest
from fakes import SleepyAdapter, make_sleepy_env

from fastenv.vector import PipelineVectorEnv

CHUNK, LENGTH, N = 3, 6, 4


def chunk_actions(n):
    return np.zeros((n, CHUNK, 3), np.float32)


@pytest.fixture
def envs():
    with PipelineVectorEnv([make_sleepy_env] * N, num_workers=2, pipeline_stages=2, profile=True) as vec:
        vec.reset(seed=0)
        vec.reset_profile()
        yield vec


def test_each_category_holds_the_time_spent_in_it(envs):
    for _ in range(4):  # 4 chunks of 3 sub-steps: episodes of 6 end every 2nd chunk, reset in the step
        envs.step(chunk_actions(N))
        time.sleep(0.03)  # the caller's own work between steps
    rep = envs.profile_report()
    counts = rep["counts"]
    # per env: 4 chunks = 8 sub-steps without observation + 4 last sub-steps with it; 2 resets
    assert counts["physics"] == N * 8 and counts["step"] == N * 4 and counts["reset"] == N * 2
    assert counts["observe"] == 0  # episodes end at a chunk's end: no extra observation
    assert rep["physics"] >= 0.9 * N * 8 * SleepyAdapter.SUBSTEP
    assert rep["step"] >= 0.9 * N * 4 * (SleepyAdapter.SUBSTEP + SleepyAdapter.OBSERVE)
    assert rep["reset"] >= 0.9 * N * 2 * SleepyAdapter.RESET
    assert rep["policy"] >= 0.9 * 3 * 0.03  # the gaps between the 4 calls
    # the caller waited at least for the slowest worker's share (2 envs each) of every chunk
    per_worker_chunk = 2 * (2 * SleepyAdapter.SUBSTEP + SleepyAdapter.SUBSTEP + SleepyAdapter.OBSERVE)
    assert rep["transport_wait"] >= 0.9 * 4 * per_worker_chunk
    assert rep["wall"] >= rep["policy"] + rep["transport_wait"] - 1e-6
    assert rep["workers"] == 2
    # CPU seconds are the work; sleeping is none (wall seconds include waiting for a core)
    assert set(rep["cpu_seconds"]) == {"physics", "step", "observe", "reset"}
    assert rep["cpu_seconds"]["reset"] < 0.5 * rep["reset"]


def test_an_episode_ending_inside_a_chunk_is_an_observation_of_its_own():
    with PipelineVectorEnv([lambda: make_sleepy_env(length=2)] * 2, num_workers=1, profile=True) as envs:
        envs.reset(seed=0)
        envs.reset_profile()
        envs.step(chunk_actions(2))  # ends after 2 of 3 sub-steps: final observation, then reset
        counts = envs.profile_report()["counts"]
        assert counts == {"physics": 4, "step": 0, "observe": 2, "reset": 2, "transport_wait": 1}


def test_stages_and_dynamic_batching_are_profiled(envs):
    m = envs.layout.stage_size
    for k in range(2):
        envs.send(chunk_actions(m), stage=k)
    for k in range(2):
        envs.recv(stage=k)
    envs.send(chunk_actions(N), env_ids=np.arange(N))
    served = 0
    while served < N:
        *_, infos = envs.recv(max_batch=2, timeout=0.01)
        served += len(infos["env_ids"])
    rep = envs.profile_report()
    assert rep["counts"]["step"] == 2 * N and rep["counts"]["physics"] == 2 * N * (CHUNK - 1)
    assert rep["transport_wait"] > 0 and rep["policy"] >= 0


def test_reset_profile_starts_over_and_stop_turns_it_off(envs):
    envs.step(chunk_actions(N))
    assert envs.profile_report()["counts"]["step"] == N
    envs.reset_profile()
    assert envs.profile_report()["counts"]["step"] == 0
    envs.stop_profile()
    with pytest.raises(RuntimeError, match="profiler is off"):
        envs.profile_report()
    envs.step(chunk_actions(N))  # untimed code again
    envs.start_profile()
    envs.step(chunk_actions(N))
    assert envs.profile_report()["counts"]["step"] == N


def test_off_by_default():
    with PipelineVectorEnv([make_sleepy_env] * 2, num_workers=1) as envs:
        assert envs._clock is None
        assert envs.apply(lambda env: 0) == (0, 0)
        with pytest.raises(RuntimeError, match="profiler is off"):
            envs.reset_profile()
