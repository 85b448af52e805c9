"""RLlib's contract for an env runner's vector env (its rllib/env/tests: ``test_single_agent_env_runner.py``,
``test_env_runner.py``), checked on fastenv's vector env as RLlib 2.60's ``SingleAgentEnvRunner`` builds it.

The env runner under test takes fastenv's vector env through ``fastenv.integrations.rllib.env_creator``
(``gym_env_vectorize_mode="vector_entry_point"``) over small envs in fastenv's workers. Each test
names the RLlib test whose contract it checks.

Differences from RLlib's tests:

* RLlib runs CartPole (and Atari, ``SimpleCorridor``) in Gymnasium's ``SyncVectorEnv`` and its own
  ``CartPoleVectorEnv``; here the envs are small test envs (random-length episodes in flat chunks
  of 3, a fixed-length countdown) in fastenv's workers, so that episode ends fall inside chunks.
* RLlib checks a tune-registered id, a class and a Gymnasium id as ways to name the env; fastenv's
  vector env comes through a creator (``env_creator`` over a callable), the way RLlib takes an env of
  one's own; ``env_creator`` over a Gymnasium id, and the id with NEXT_STEP in ``env_config``, are
  tests/test_rllib.py's.
* RLlib's tests sample with ``random_actions=True``; so do these (the action space's batch sample).
* ``test_step_failed_reset_required`` (``restart_failed_sub_environments``) is left out: a worker
  fastenv restarts reports an invented transition in the step (docs/vector.md), not an exception.
* ``check_env``: RLlib 2.60 ships no single-agent env check on its new API stack
  (``ray.rllib.utils.pre_checks.env`` checks multi-agent envs only); Gymnasium's ``check_env``
  on fastenv's envs is tests/peer/test_gymnasium_vector.py's.
"""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("ray")
need("tree", "one of RLlib's dependencies")

from fakes import CountdownEnv, RandomLengthEnv  # noqa: E402
from helpers import assert_same  # noqa: E402
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig  # noqa: E402
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # noqa: E402

import fastenv  # noqa: E402
from fastenv.integrations.rllib import env_creator  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402
from fastenv.wrappers.flatten import FlattenActionChunk  # noqa: E402

N, FRAGMENT = 4, 10


def chunked_random_env(env_config: dict) -> gym.Env:
    return FlattenActionChunk(fastenv.wrap(RandomLengthEnv(**env_config), chunk=3))


def countdown(env_config: dict) -> gym.Env:
    return CountdownEnv(env_config.get("length", 4))  # truncated after 4 steps


def make_config(make_env=chunked_random_env, env_config=None, num_workers=1, **env_runners) -> AlgorithmConfig:
    options = {"num_envs_per_env_runner": N, "rollout_fragment_length": FRAGMENT, "gym_env_vectorize_mode": "vector_entry_point", **env_runners}
    vector = {} if num_workers is None else {"num_workers": num_workers}  # None: RLlib's own vectorization, which takes none
    config = AlgorithmConfig().environment(env_creator(make_env, **vector), env_config=env_config or {})
    return config.env_runners(**options).debugging(seed=0)  # seeded resets: the same episode lengths each run


@pytest.fixture(scope="module")
def runner():
    runner = SingleAgentEnvRunner(config=make_config(env_config={"max_len": 30}, num_workers=2))  # episodes of 1 to 10 chunks
    yield runner
    runner.stop()


def total(episodes) -> int:
    return sum(len(e) for e in episodes)


def test_self_vectorized_env_is_fastenvs_and_samples_a_fragment_per_env(runner):
    # test_self_vectorized_env: the env's own vector env, not SyncVectorEnv; N fragments (+ at most one step per env)
    # test_env_context: env_config reaches every env, in the workers
    assert isinstance(runner.env.env, PipelineVectorEnv)
    assert runner.env.env.get_attr("max_len") == (30,) * N
    assert runner.env.env.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
    for _ in range(3):
        assert N * FRAGMENT <= total(runner.sample(random_actions=True)) < N * (FRAGMENT + 1)


def test_sample_num_episodes_gives_that_many_whole_episodes(runner):
    # test_sample / test_sample_num_episodes
    for _ in range(3):
        episodes = runner.sample(num_episodes=6, random_actions=True)
        assert len(episodes) == 6
        assert all(e.is_done and e.t_started == 0 for e in episodes)
        for e in episodes:
            e.validate()
            assert len(e.get_observations()["t"]) == len(e) + 1  # the last observation is the episode's own
            assert e.get_observations()["t"][-1] == e.get_infos()[-1]["t"]  # its last step's


def test_sample_num_timesteps_gives_that_many_steps_give_or_take_one_per_env(runner):
    # test_sample / test_sample_num_timesteps (an uneven count too)
    runner.sample(num_timesteps=8, random_actions=True)
    for steps in (20, 22):
        for _ in range(3):
            episodes = runner.sample(num_timesteps=steps, random_actions=True)
            assert steps <= total(episodes) <= steps + N
            assert any(e.t_started > 0 for e in episodes)


def test_an_episode_cut_between_samples_continues_where_it_was_cut(runner):
    # test_episode_continuation_between_samples: same id, next chunk starts where the last ended
    first = runner.sample(num_timesteps=6, random_actions=True)
    ongoing = {e.id_: e for e in first if not e.is_done}
    assert ongoing
    second = runner.sample(num_timesteps=6, random_actions=True)
    continued = [e for e in second if e.id_ in ongoing]
    assert continued and all(e.t_started > 0 for e in continued)
    for e in continued:
        before = ongoing[e.id_]
        assert e.t_started == before.t_started + len(before)
        assert_same(e.get_observations(0), before.get_observations(-1))  # the cut's last observation


def test_force_reset_starts_fresh_episodes(runner):
    # test_sample_force_reset_with_timesteps / test_force_reset_breaks_continuation
    before = runner.sample(num_timesteps=5, random_actions=True)
    after = runner.sample(num_timesteps=10, random_actions=True, force_reset=True)
    assert all(e.t_started == 0 for e in after)
    assert not {e.id_ for e in before} & {e.id_ for e in after}


def test_zero_counts_give_no_steps_and_both_counts_are_refused(runner):
    # test_sample_zero_timesteps / test_sample_zero_episodes / test_sample_both_args_error
    assert total(runner.sample(num_timesteps=0, random_actions=True)) == 0  # 2.60: the ongoing episodes, empty
    assert runner.sample(num_episodes=0, random_actions=True) == []
    with pytest.raises(AssertionError):
        runner.sample(num_timesteps=10, num_episodes=10, random_actions=True)


def callback_counts(mode: str, make_env=countdown) -> tuple[dict[str, int], list]:
    calls = {"created": 0, "started": 0, "ended": 0}

    def count(name):
        def callback(**kwargs):
            calls[name] += 1
        return callback

    config = make_config(make_env, num_workers=None if mode == "sync" else 1, gym_env_vectorize_mode=mode).callbacks(
        on_episode_created=count("created"), on_episode_start=count("started"), on_episode_end=count("ended"),
    )
    runner = SingleAgentEnvRunner(config=config)
    try:
        return calls, runner.sample(num_timesteps=32, random_actions=True)
    finally:
        runner.stop()


def test_episode_callbacks_come_as_on_rllibs_sync_vector_env():
    # test_callbacks_on_sample_timesteps: one end per episode done; created and started as RLlib's own
    # vectorization makes them (RLlib 2.60 makes no on_episode_start at an autoreset)
    calls, episodes = callback_counts("vector_entry_point")
    done = sum(e.is_done for e in episodes)
    assert done == 8 and all(len(e) == 4 and e.is_truncated for e in episodes if e.is_done)  # 8 steps per env: 2 episodes each
    assert calls["ended"] == done and calls["created"] == done + N
    assert calls == callback_counts("sync")[0]


@pytest.mark.xdist_group("ray")  # one local Ray cluster at a time (tests/test_ray.py)
def test_a_remote_env_runner_samples_on_fastenvs_workers():
    # test_distributed_env_runner: the env runner as a Ray actor, fastenv's workers inside it
    import sys

    import fakes
    import ray
    from ray import cloudpickle

    for module in (fakes, sys.modules[__name__]):  # Ray's workers do not see the tests folder
        cloudpickle.register_pickle_by_value(module)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False)
    try:
        runner = ray.remote(num_cpus=1)(SingleAgentEnvRunner).remote(config=make_config())
        episodes = ray.get(runner.sample.remote(random_actions=True))
        assert N * FRAGMENT <= total(episodes) < N * (FRAGMENT + 1)
        kind = ray.get(runner.__ray_call__.remote(lambda self: type(self.env.env).__name__))
        assert kind == "PipelineVectorEnv"
        ray.get(runner.stop.remote())
    finally:
        ray.shutdown()
