"""RLlib on fastenv: its env runner collects the same episodes as on RLlib's own vectorization.

The reference is RLlib's default: ``gym_env_vectorize_mode="sync"``, Gymnasium's ``SyncVectorEnv``
of single envs in the env runner's process (NEXT_STEP autoreset). fastenv's vector env reaches it
with ``gym_env_vectorize_mode="vector_entry_point"``: through ``fastenv.integrations.rllib.env_creator``
for the small test envs, and by id for ``fastenv/Libero-v0``. The module is PPO's default one,
seeded, acting deterministically (``explore=False``), so equal episodes need equal observations all
along. Compared: every episode (or episode chunk) ``sample`` returns, in order: observations
(including each episode's last), actions, rewards, infos, terminated/truncated, where it started,
and the module's outputs.
"""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("ray")
need("tree", "one of RLlib's dependencies")

from fakes import RandomLengthEnv  # noqa: E402
from helpers import assert_same  # noqa: E402
from ray.rllib.algorithms.ppo import PPOConfig  # noqa: E402
from ray.rllib.connectors.env_to_module import FlattenObservations  # noqa: E402
from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner  # noqa: E402

import fastenv  # noqa: E402
from fastenv.core.arrays import get_row, put_rows, take_rows  # noqa: E402
from fastenv.integrations.rllib import env_creator  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402
from fastenv.wrappers.flatten import FlattenActionChunk  # noqa: E402

CHUNK, SEED, N = 3, 5, 4


def chunked_random_env(env_config: dict | None = None) -> gym.Env:
    """Episodes of 1 to 12 steps, terminated or truncated at random, in flat chunks of 3: most end mid-chunk."""
    return FlattenActionChunk(fastenv.wrap(RandomLengthEnv(), chunk=CHUNK))


def flatten_observations(env, spaces, device):
    """RLlib's connector for a Dict observation (the default module takes one vector)."""
    return FlattenObservations()


def config(env, mode: str, **env_runners) -> PPOConfig:
    return (
        PPOConfig()
        .environment(env)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=N, gym_env_vectorize_mode=mode,
                     env_to_module_connector=flatten_observations, **env_runners)
        .debugging(seed=SEED)
    )


def episode_data(episode) -> dict:
    return {
        "observations": episode.get_observations(), "actions": episode.get_actions(), "rewards": episode.get_rewards(),
        "infos": tuple(episode.get_infos()), "terminated": episode.is_terminated, "truncated": episode.is_truncated,
        "t_started": episode.t_started, "length": len(episode),
        "module": {key: episode.get_extra_model_outputs(key) for key in sorted(episode.extra_model_outputs)},
    }


def collect(runner, calls: int = 3, steps: int = 40) -> list[list[dict]]:
    """Each ``sample`` call's episodes; an ongoing episode is cut at the call's end and continued in the next."""
    try:
        return [[episode_data(e) for e in runner.sample(num_timesteps=steps, explore=False)] for _ in range(calls)]
    finally:
        runner.stop()


def assert_same_episodes(got: list[list[dict]], want: list[list[dict]]) -> None:
    assert [len(call) for call in got] == [len(call) for call in want]
    for i, (got_call, want_call) in enumerate(zip(got, want)):
        for j, (a, b) in enumerate(zip(got_call, want_call)):
            assert_same(a, b, f"sample {i}, episode {j}")


class ShiftedFinalObservation(gym.vector.VectorWrapper):
    """A deliberately wrong NEXT_STEP vector env: each episode's last observation is the one before it."""

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        self.last = take_rows(obs, slice(None))
        return obs, infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        current = take_rows(obs, slice(None))
        for i in np.flatnonzero(np.asarray(terminations) | np.asarray(truncations)):
            put_rows(obs, int(i), get_row(self.last, int(i)))
        self.last = current
        return obs, rewards, terminations, truncations, infos


def shifted(env_config):
    envs = env_creator(chunked_random_env, num_workers=2)(env_config)
    return ShiftedFinalObservation(envs) if isinstance(envs, gym.vector.VectorEnv) else envs


@pytest.fixture(scope="module")
def stock_episodes():
    return collect(SingleAgentEnvRunner(config=config(chunked_random_env, "sync")))


def test_the_env_runner_collects_on_fastenv_the_episodes_it_collects_on_rllibs_sync_vector_env(stock_episodes):
    runner = SingleAgentEnvRunner(config=config(env_creator(chunked_random_env, num_workers=2), "vector_entry_point"))
    assert isinstance(runner.env.unwrapped, PipelineVectorEnv)
    assert runner.env.unwrapped.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
    assert_same_episodes(collect(runner), stock_episodes)
    # What the episodes cover: ends inside a chunk and on its last sub-step, truncations and
    # terminations, episodes cut between sample calls and continued.
    done = [e for call in stock_episodes for e in call if e["terminated"] or e["truncated"]]
    steps = [info["t"] for e in done for info in e["infos"][-1:]]  # sub-steps run in the episode
    assert any(t % CHUNK for t in steps) and any(t % CHUNK == 0 for t in steps)
    assert any(e["truncated"] for e in done) and any(e["terminated"] for e in done)
    assert any(e["t_started"] > 0 for call in stock_episodes[1:] for e in call)


def test_a_shifted_final_observation_is_caught(stock_episodes):
    runner = SingleAgentEnvRunner(config=config(shifted, "vector_entry_point"))
    with pytest.raises(AssertionError, match="observations"):
        assert_same_episodes(collect(runner), stock_episodes)


def test_a_same_step_vector_env_would_mix_episodes(stock_episodes):
    """Why NEXT_STEP: RLlib reads a SAME_STEP env's reset observation as the last one of the episode that ended."""

    def same_step(env_config):
        return PipelineVectorEnv([chunked_random_env] * env_config["num_envs"], num_workers=2)

    runner = SingleAgentEnvRunner(config=config(same_step, "vector_entry_point"))
    with pytest.raises(AssertionError):
        assert_same_episodes(collect(runner), stock_episodes)


def test_env_creator_refuses_an_autoreset_mode_and_what_is_not_callable():
    with pytest.raises(ValueError, match="NEXT_STEP autoreset mode, which env_creator sets; got autoreset_mode='SameStep'"):
        env_creator(chunked_random_env, autoreset_mode="SameStep")
    with pytest.raises(TypeError, match="make_env must be callable"):
        env_creator("fastenv/Libero-v0")


def test_built_by_rllib_fastenvs_vector_env_runs_next_step_and_refuses_another_mode():
    libero = {"camera_size": 32, "autoreset_mode": "SameStep"}
    cfg = PPOConfig().environment("fastenv/Libero-v0", env_config=libero).env_runners(
        num_env_runners=0, num_envs_per_env_runner=2, gym_env_vectorize_mode="vector_entry_point")
    with pytest.raises(ValueError, match="RLlib's env runners read episode ends in Gymnasium's NEXT_STEP autoreset mode, got "
                                         "autoreset_mode=AutoresetMode.SAME_STEP"):
        SingleAgentEnvRunner(config=cfg)


def test_vector_options_with_rllibs_sync_vectorization_are_refused_saying_what_to_set():
    cfg = PPOConfig().environment("fastenv/Libero-v0", env_config={"num_workers": 2}).env_runners(num_env_runners=0, num_envs_per_env_runner=2)
    with pytest.raises(ValueError, match=r"vector options \['num_workers'\]: pass .env_runners\(gym_env_vectorize_mode='vector_entry_point'\)"):
        SingleAgentEnvRunner(config=cfg)


@pytest.mark.libero
@pytest.mark.big_memory
@pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization", keep=2)
def test_the_env_runner_collects_the_same_libero_episodes_as_on_rllibs_sync_vector_env():
    # Chunks of 8, 20-step episodes: each ends (truncated) 4 sub-steps into its third chunk.
    options = {"chunk": 8, "camera_size": 32, "max_episode_steps": 20, "flatten": True, "modalities": ["robot0_proprio-state", "object-state"]}

    def libero_config(mode, **vector):
        return (
            PPOConfig()
            .environment("fastenv/Libero-v0", env_config={**options, **vector})
            .env_runners(num_env_runners=0, num_envs_per_env_runner=2, gym_env_vectorize_mode=mode)
            .debugging(seed=SEED)
        )

    want = collect(SingleAgentEnvRunner(config=libero_config("sync")), calls=2, steps=8)
    runner = SingleAgentEnvRunner(config=libero_config("vector_entry_point", num_workers=2))
    assert isinstance(runner.env.unwrapped, PipelineVectorEnv)
    assert_same_episodes(collect(runner, calls=2, steps=8), want)
    done = [e for call in want for e in call if e["truncated"]]
    assert len(done) == 4 and all(e["t_started"] + e["length"] == 3 and e["infos"][-1]["chunk_steps"] == 4 for e in done)
