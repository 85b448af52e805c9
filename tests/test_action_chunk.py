"""ActionChunk logic on a fake adapter and a fake Gymnasium env."""

import gymnasium as gym
import numpy as np
import pytest
from fakes import CountingEnv, FakeAdapter
from gymnasium import spaces

import fastenv
from fastenv import ActionChunk, SimEnv


def chunked(chunk, gamma=None, **fake):
    adapter = FakeAdapter(**fake)
    env = ActionChunk(SimEnv(adapter), chunk=chunk, gamma=gamma)
    env.reset(seed=0)
    adapter.calls.clear()
    return env, adapter


def test_action_space_is_chunk_by_action_dim():
    env, _ = chunked(5)
    assert env.action_space == spaces.Box(-1.0, 1.0, (5, 3), np.float32)


def test_observes_once_per_chunk_and_sums_rewards():
    env, adapter = chunked(4)
    obs, reward, terminated, truncated, info = env.step(np.zeros((4, 3)))
    assert adapter.calls == ["substep", "substep", "substep", "step"]
    assert reward == 1 + 2 + 3 + 4
    assert info["chunk_steps"] == 4
    np.testing.assert_array_equal(info["chunk_rewards"], [1, 2, 3, 4])
    assert obs["state"][0] == 4
    assert not terminated and not truncated
    assert "chunk_discount" not in info


def test_gamma_discounts_inside_the_chunk():
    env, _ = chunked(3, gamma=0.5)
    _, reward, _, _, info = env.step(np.zeros((3, 3)))
    assert reward == pytest.approx(1 + 0.5 * 2 + 0.25 * 3)
    assert info["chunk_discount"] == pytest.approx(0.125)


def test_termination_stops_the_chunk():
    env, adapter = chunked(8, gamma=0.9, terminate_at=3)
    obs, reward, terminated, truncated, info = env.step(np.zeros((8, 3)))
    assert adapter.calls == ["substep", "substep", "substep", "observe"]
    assert terminated and not truncated
    assert info["chunk_steps"] == 3
    np.testing.assert_array_equal(info["chunk_rewards"], [1, 2, 3, 0, 0, 0, 0, 0])
    assert info["chunk_discount"] == pytest.approx(0.9**3)
    assert obs["state"][0] == 3


def test_max_episode_steps_truncation_inside_chunk_uses_the_simulators_step():
    adapter = FakeAdapter()
    env = ActionChunk(SimEnv(adapter, max_episode_steps=6), chunk=4)
    env.reset()
    env.step(np.zeros((4, 3)))
    adapter.calls.clear()
    obs, reward, terminated, truncated, info = env.step(np.zeros((4, 3)))
    # The 6th step ends the episode, so it is the simulator's own step (stock final observation).
    assert adapter.calls == ["substep", "step"]
    assert truncated and not terminated
    assert info["chunk_steps"] == 2
    assert obs["state"][0] == 6


def test_chunk_one_reproduces_the_raw_env():
    raw = CountingEnv(terminate_at=7)
    ref = CountingEnv(terminate_at=7)
    env = ActionChunk(raw, chunk=1)
    obs, _ = env.reset(seed=3)
    ref_obs, _ = ref.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(7):
        action = rng.uniform(-1, 1, 2).astype(np.float32)
        obs, reward, terminated, truncated, _ = env.step(action[None])
        ref_obs, ref_reward, ref_terminated, ref_truncated, _ = ref.step(action)
        for key in ref_obs:
            np.testing.assert_array_equal(obs[key], ref_obs[key])
        assert (reward, terminated, truncated) == (ref_reward, ref_terminated, ref_truncated)
    assert terminated


def test_generic_env_runs_every_step_and_keeps_the_last_observation():
    raw = CountingEnv()
    env = fastenv.wrap(raw, chunk=5)
    env.reset(seed=0)
    actions = np.arange(10, dtype=np.float32).reshape(5, 2) / 10
    obs, reward, *_ = env.step(actions)
    assert len(raw.actions) == 5
    np.testing.assert_allclose(np.stack(raw.actions), actions)
    assert obs["vel"][0] == 5 and reward == 15


def test_discrete_actions_chunk_to_multidiscrete():
    env = ActionChunk(gym.make("CartPole-v1"), chunk=3)
    assert env.action_space == spaces.MultiDiscrete([2, 2, 2])
    env.reset(seed=0)
    _, reward, *_ = env.step(np.array([0, 1, 0]))
    assert reward == 3.0


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros((4, 2)), r"shape \(8, 3\), got shape \(4, 2\)"),
        (np.zeros(3), r"shape \(8, 3\), got shape \(3,\)"),
        (np.full((8, 3), np.nan), "must be finite"),
        (np.full((8, 3), "a"), "real-valued array"),
        (np.zeros((8, 3), complex), "real-valued array"),
    ],
)
def test_bad_chunks_raise_before_anything_runs(bad, match):
    env, adapter = chunked(8)
    with pytest.raises(ValueError, match=match):
        env.step(bad)
    assert adapter.calls == []
    env.step(np.zeros((8, 3)))  # still usable
    assert adapter.calls[-1] == "step"


def test_nan_in_one_sub_action_is_reported_with_its_index():
    env, adapter = chunked(4)
    bad = np.zeros((4, 3))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"index \(2, 1\)"):
        env.step(bad)
    assert adapter.calls == []


@pytest.mark.parametrize("chunk", [0, -1, 2.5, True, "8"])
def test_bad_chunk_sizes(chunk):
    with pytest.raises((ValueError, TypeError), match="chunk must be an integer >= 1"):
        ActionChunk(SimEnv(FakeAdapter()), chunk=chunk)


@pytest.mark.parametrize("gamma", [0.0, 1.5, -0.1])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match=r"gamma must be in \(0, 1\]"):
        ActionChunk(SimEnv(FakeAdapter()), chunk=2, gamma=gamma)


def test_wrap_refuses_gamma_without_chunk():
    with pytest.raises(ValueError, match="pass chunk="):
        fastenv.wrap(CountingEnv(), gamma=0.9)


def test_gymnasium_hook_wrappers_keep_observation_skipping_and_their_effect():
    # Observation, reward and action wrappers between ActionChunk and the simulator are applied
    # on every sub-step, and the simulator still observes once per chunk.
    def stack(adapter):
        env = gym.wrappers.TransformReward(SimEnv(adapter), lambda r: 2 * r)
        env = gym.wrappers.TransformAction(env, lambda a: a * 0.5, env.action_space)
        return gym.wrappers.TransformObservation(env, lambda o: {"state": o["state"] + 100}, None)

    adapter, ref_adapter = FakeAdapter(terminate_at=6), FakeAdapter(terminate_at=6)
    env, ref = ActionChunk(stack(adapter), chunk=4), stack(ref_adapter)
    env.reset(), ref.reset()
    adapter.calls.clear()
    obs, reward, terminated, truncated, info = env.step(np.ones((4, 3), np.float32))
    assert adapter.calls == ["substep", "substep", "substep", "step"]
    assert reward == 2 * (1 + 2 + 3 + 4)
    assert obs["state"][0] == 104
    obs, reward, terminated, *_ = env.step(np.ones((4, 3), np.float32))
    assert adapter.calls[4:] == ["substep", "substep", "observe"]  # terminated at the 6th step
    assert terminated and reward == 2 * (5 + 6) and obs["state"][0] == 106
    for _ in range(6):
        ref_obs, *_ = ref.step(np.ones(3, np.float32))
    assert ref_obs["state"][0] == obs["state"][0]


def test_a_wrapper_that_must_see_every_step_is_stepped_every_sub_step_and_says_so():
    adapter = FakeAdapter(truncate_at=6)
    stats = gym.wrappers.RecordEpisodeStatistics(SimEnv(adapter))
    with pytest.warns(fastenv.SubstepDisabledWarning, match="RecordEpisodeStatistics sits between ActionChunk and the simulator"):
        env = ActionChunk(stats, chunk=4)
    env.reset()
    adapter.calls.clear()
    env.step(np.zeros((4, 3)))
    assert adapter.calls == ["step"] * 4  # every sub-step is a full step, seen by the wrapper
    _, _, _, truncated, info = env.step(np.zeros((4, 3)))
    assert truncated and info["episode"]["l"] == 6 and info["episode"]["r"] == sum(range(1, 7))


@pytest.mark.parametrize("gamma", [None, 0.5])
def test_episode_statistics_count_simulator_steps_and_undiscounted_rewards(gamma):
    # The same statistics Gymnasium's RecordEpisodeStatistics gives on the plain env, whatever the chunk.
    env = fastenv.wrap(CountingEnv(truncate_at=10), chunk=4, gamma=gamma, episode_statistics=True)
    ref = gym.wrappers.RecordEpisodeStatistics(CountingEnv(truncate_at=10))
    env.reset(seed=0)
    ref.reset(seed=0)
    for _ in range(3):
        *_, truncated, info = env.step(np.zeros((4, 2), np.float32))
    for _ in range(10):
        *_, ref_info = ref.step(np.zeros(2, np.float32))
    assert truncated and info["chunk_steps"] == 2
    assert info["episode"]["r"] == ref_info["episode"]["r"] == 55.0
    assert info["episode"]["l"] == ref_info["episode"]["l"] == 10
    assert type(info["episode"]["r"]) is float and type(info["episode"]["l"]) is int
    env.reset(seed=1)  # a new episode starts from zero
    for _ in range(3):
        *_, info = env.step(np.zeros((4, 2), np.float32))
    assert info["episode"]["l"] == 10


def test_foreign_wrapper_is_never_bypassed():
    # TimeLimit must see every sub-step: fastenv steps through it, never around it.
    env = fastenv.wrap(gym.wrappers.TimeLimit(CountingEnv(), max_episode_steps=3), chunk=5)
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(np.zeros((5, 2)))
    assert truncated and not terminated and info["chunk_steps"] == 3


@pytest.mark.parametrize("terminate_at", [None, 3])
def test_stepwise_chunks_step_the_simulator_whole_with_the_same_transitions(terminate_at):
    fast, fast_adapter = chunked(4, terminate_at=terminate_at)
    adapter = FakeAdapter(terminate_at=terminate_at)
    stepwise = ActionChunk(SimEnv(adapter), chunk=4, skip_observations=False)
    stepwise.reset(seed=0)
    adapter.calls.clear()
    a = fast.step(np.zeros((4, 3)))
    b = stepwise.step(np.zeros((4, 3)))
    steps = 3 if terminate_at else 4
    assert adapter.calls == ["step"] * steps  # every sub-step observes, as the stock env does
    assert fast_adapter.calls[:steps - 1] == ["substep"] * (steps - 1)
    assert a[1:4] == b[1:4] and a[0]["state"][0] == b[0]["state"][0] == steps
    np.testing.assert_array_equal(a[4]["chunk_rewards"], b[4]["chunk_rewards"])


def test_vector_env_workers_keep_stepwise_chunks_stepwise():
    from fastenv.vector.worker import batch_executor

    envs = [ActionChunk(SimEnv(FakeAdapter()), chunk=2, skip_observations=False) for _ in range(2)]
    batch, _ = batch_executor(envs)
    assert not any(row.skips for row in batch.rows)
    mixed = [ActionChunk(SimEnv(FakeAdapter()), chunk=2), envs[0]]
    batch, _ = batch_executor(mixed)  # not one kind: each env runs its own ActionChunk
    assert batch.envs == mixed
