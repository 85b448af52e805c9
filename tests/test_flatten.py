import gymnasium as gym
import numpy as np
import pytest
from fakes import CountingEnv, FakeAdapter
from gymnasium import spaces

import fastenv
from fastenv import SimEnv
from fastenv.wrappers import ActionChunk, FlattenActionChunk, FlattenModalities


def test_flatten_modalities_concatenates_in_space_order():
    env = FlattenModalities(fastenv.wrap(CountingEnv(), modalities=["vel", "pos"]))
    assert env.observation_space == spaces.Box(-np.inf, np.inf, (4,), np.float32)
    obs, _ = env.reset(seed=0)
    raw = CountingEnv()
    raw_obs, _ = raw.reset(seed=0)
    np.testing.assert_array_equal(obs, np.concatenate([raw_obs["pos"], raw_obs["vel"]]).astype(np.float32))
    assert env.observation_space.contains(obs)


def test_flatten_action_chunk_reshapes_row_major():
    adapter = FakeAdapter()
    env = FlattenActionChunk(ActionChunk(SimEnv(adapter), chunk=4))
    assert env.action_space == spaces.Box(-1.0, 1.0, (12,), np.float32)
    env.reset()
    adapter.calls.clear()
    env.step(np.arange(12, dtype=np.float32) / 12)
    assert adapter.calls == ["substep", "substep", "substep", "step"]
    with pytest.raises(ValueError, match=r"action must have shape \(12,\), got shape \(4, 3\)"):
        env.step(np.zeros((4, 3)))


def test_wrap_flatten_gives_one_box_in_one_vector_out():
    env = fastenv.wrap(CountingEnv(), chunk=3, modalities=["pos", "vel"], flatten=True)
    assert env.observation_space.shape == (4,) and env.action_space.shape == (6,)
    env.reset(seed=1)
    obs, reward, *_ = env.step(np.zeros(6, np.float32))
    assert obs.dtype == np.float32 and reward == 1 + 2 + 3


def test_flatten_refuses_what_it_cannot_flatten():
    with pytest.raises(ValueError, match="needs a Dict of Box spaces"):
        FlattenModalities(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="needs a Box action space"):
        FlattenActionChunk(gym.make("CartPole-v1"))
