"""Tianshou's vector-env contract (its ``test/base/test_env.py`` and the vector-env parts of
``test/base/test_collector.py``), checked on ``fastenv.integrations.tianshou.TianshouVecEnv``.

Each test names the Tianshou test whose contract it checks. The env under test is
``TianshouVecEnv(PipelineVectorEnv(..., autoreset_mode=DISABLED))`` over the small envs below (written for these tests,
in the spirit of Tianshou's test envs) and CartPole; the reference for every data comparison is
Tianshou's ``DummyVectorEnv`` over the same constructors and seeds: observations, rewards and
flags bit for bit, infos by value (a Python scalar may come back as a numpy scalar).

Contracts of Tianshou's tests that do not apply, so have no test here:

* ``test_async_env``, ``test_async_check_id`` and the ``wait_num``/``timeout`` of
  ``test_env_reset_optional_kwargs`` and ``test_async_collector_with_vector_env``: asynchronous
  stepping is fastenv's own ``recv(max_batch=, timeout=)``; ``TianshouVecEnv`` is synchronous
  (``is_async`` False), which Tianshou's ``Collector`` requires anyway.
* ``test_env_obs_dtype``'s envs whose observations differ in length from env to env: fastenv's
  vector env moves observations through shared memory laid out from one observation space.
* ``test_gym_wrappers``, ``test_venv_wrapper_envpool*``, ``test_collector_with_multi_agent`` and
  ``test_collector_with_atari_setting``: single-env wrappers, EnvPool, multi-agent policies and
  frame-stacking buffers, which do not touch the vector env.
* ``test_attr_unwrapped``'s ``workers[0].env``: there are no Tianshou workers; the attribute is
  read back inside fastenv's worker instead.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("tianshou")

from fakes import WalkEnv  # noqa: E402  (in a module of its own: the workers import it, not Tianshou)
from helpers import assert_identical  # noqa: E402
from tianshou.algorithm.algorithm_base import RandomActionPolicy  # noqa: E402
from tianshou.data import Batch, Collector, VectorReplayBuffer  # noqa: E402
from tianshou.env import DummyVectorEnv, VectorEnvNormObs  # noqa: E402

from fastenv.integrations.tianshou import TianshouVecEnv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

DISABLED = gym.vector.AutoresetMode.DISABLED


def fns(sizes, nested=False):
    return [functools.partial(WalkEnv, size, nested) for size in sizes]


def pair(env_fns, num_workers=2):
    return TianshouVecEnv(PipelineVectorEnv(env_fns, num_workers=num_workers, autoreset_mode=DISABLED)), DummyVectorEnv(env_fns)


@pytest.mark.parametrize("nested", [False, True], ids=["array", "dict-with-tuple"])
def test_vecenv_steps_and_resets_of_ended_envs_match_dummy_vector_env(nested):
    # test_vecenv: step all envs, reset the ended ones by id, the same results as DummyVectorEnv;
    # then get_env_attr / set_env_attr with id None, an int and a list.
    sizes = list(range(2, 6))
    ours, ref = pair(fns(sizes, nested))
    try:
        for v in (ours, ref):
            v.seed(0)
        actions = [1] * 3 + [0] * 5 + [1] * 8
        ends = 0
        for t, a in enumerate(actions):
            out, ref_out = ours.step(np.array([a] * 4)), ref.step(np.array([a] * 4))
            assert_identical(out, ref_out, f"step {t}", loose_scalars=True)
            done = np.flatnonzero(ref_out[2] | ref_out[3])
            if len(done):
                ends += len(done)
                assert_identical(ours.reset(done), ref.reset(done), f"reset {t}", loose_scalars=True)
        assert ends >= 8
        for v in (ours, ref):
            assert v.env_num == 4 and v.action_space == [spaces.Discrete(2)] * 4
            assert v.get_env_attr("size") == sizes and v.get_env_attr("size", id=0) == [2]
            assert v.get_env_attr("size", id=[0, 1, 2]) == sizes[:3]
            v.set_env_attr("size", 0)
            v.set_env_attr("size", 1, 0)
            v.set_env_attr("size", 2, [1, 2])
            assert v.get_env_attr("size") == [1, 2, 2, 0]
    finally:
        ours.close()
        ref.close()


def test_attr_unwrapped_set_on_the_unwrapped_env():
    # test_attr_unwrapped: set_env_attr reaches env.unwrapped, under the env's wrappers.
    ours = TianshouVecEnv(PipelineVectorEnv([lambda: gym.make("CartPole-v1")], num_workers=1, autoreset_mode=DISABLED))
    try:
        ours.set_env_attr("test_attribute", 1337)
        assert ours.get_env_attr("test_attribute") == [1337]
        assert ours.vector_env.apply(lambda env: hasattr(env.unwrapped, "test_attribute")) == (True,)
    finally:
        ours.close()


def test_env_reset_optional_kwargs_give_one_info_dict_per_env():
    # test_env_reset_optional_kwargs: reset(seed=1) returns an info per env, each a dict; and the
    # same seed reaches every env, as in Tianshou's own vector envs.
    ours, ref = pair(fns([3] * 4, nested=True))
    try:
        obs, info = ours.reset(seed=1)
        assert isinstance(info, np.ndarray) and len(info) == 4 and isinstance(info[0], dict)
        assert_identical((obs, info), ref.reset(seed=1), "reset(seed=1)", loose_scalars=True)
    finally:
        ours.close()
        ref.close()


def test_venv_norm_obs_over_fastenv_equals_it_over_dummy_vector_env():
    # test_venv_wrapper_gym and test_venv_norm_obs: Tianshou's VectorEnvNormObs over the adapter:
    # reset gives (array, array of dicts), and the normalized observations and running statistics
    # are those over DummyVectorEnv.
    sizes = [5, 10, 15, 20]
    ours = VectorEnvNormObs(TianshouVecEnv(PipelineVectorEnv(fns(sizes), num_workers=2, autoreset_mode=DISABLED)))
    ref = VectorEnvNormObs(DummyVectorEnv(fns(sizes)))
    try:
        obs, info = ours.reset()
        assert isinstance(obs, np.ndarray) and isinstance(info, np.ndarray) and isinstance(info[0], dict)
        assert obs.shape[0] == len(info) == 4
        assert_identical(obs, ref.reset()[0], "reset")
        for t in range(30):
            out, ref_out = ours.step(np.ones(4, np.int64)), ref.step(np.ones(4, np.int64))
            assert_identical(out[:4], ref_out[:4], f"step {t}")
            done = np.flatnonzero(ref_out[2] | ref_out[3])
            if len(done):
                assert_identical(ours.reset(done)[0], ref.reset(done)[0], f"reset {t}")
        assert_identical(ours.get_obs_rms().mean, ref.get_obs_rms().mean, "running mean")
        assert_identical(ours.get_obs_rms().var, ref.get_obs_rms().var, "running variance")
    finally:
        ours.close()
        ref.close()


def _collected(venv, **kwargs):
    venv.seed(0)
    collector = Collector(RandomActionPolicy(venv.action_space[0]), venv, VectorReplayBuffer(100, len(venv)))
    collector.reset()
    stats = [collector.collect(random=True, n_step=20), collector.collect(random=True, n_episode=7)]
    buffer = collector.buffer[collector.buffer.sample_indices(0)]

    def plain(value):
        return {key: plain(item) for key, item in value.items()} if isinstance(value, Batch) else value

    return plain(buffer), [(s.n_collected_steps, s.n_collected_episodes, s.returns, s.lens) for s in stats]


@pytest.mark.parametrize("nested", [False, True], ids=["array", "dict-with-tuple"])
def test_collector_with_vector_env_and_dict_state_fills_the_buffer_dummy_vector_env_does(nested):
    # test_collector, test_collector_with_dict_state, test_collector_with_vector_env: n_step and
    # n_episode collection (envs of different episode lengths, some envs dropped near the end of
    # n_episode) give the buffer, episode returns and lengths of DummyVectorEnv.
    ours, ref = pair(fns([2, 3, 4, 5], nested))
    try:
        got, want = _collected(ours), _collected(ref)
        assert_identical(got, want, "collected", loose_scalars=True)
        assert want[0]["terminated"].any() and want[0]["truncated"].any()
    finally:
        ours.close()
        ref.close()
