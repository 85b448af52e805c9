"""RLlib on fastenv: its env runner collects the same episodes as on RLlib's own vectorization.

On small test envs the reference is RLlib's default: ``gym_env_vectorize_mode="sync"``, Gymnasium's
``SyncVectorEnv`` of single envs in the env runner's process (NEXT_STEP autoreset). fastenv's vector
env reaches it with ``gym_env_vectorize_mode="vector_entry_point"`` in NEXT_STEP, the mode RLlib
reads, in either way fastenv documents: ``fastenv.integrations.rllib.env_creator`` (over a callable
or a Gymnasium id), or the id itself with ``autoreset_mode`` NEXT_STEP in ``env_config``. The module
is PPO's default one, seeded, acting deterministically (``explore=False``), so equal episodes need
equal observations all along. Compared: every episode (or episode chunk) ``sample`` returns, in
order: observations (including each episode's last), actions, rewards, infos, terminated/truncated,
where it started, and the module's outputs.

On LIBERO the reference is LIBERO's own env (``tests/stock_libero.py``) in RLlib's multi-process
vectorization, ``"async"``, each stock env in a process of its own; fastenv runs through
``env_creator("fastenv/Libero-v0")`` (``test_the_env_runner_collects_on_fastenv_what_it_collects_on_stock_libero``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

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
ID = "fastenv_tests/RandomLength-v0"  # a Gymnasium id whose vector entry point is fastenv's vector env


def chunked_random_env(env_config: dict | None = None) -> gym.Env:
    """Episodes of 1 to 12 steps, terminated or truncated at random, in flat chunks of 3: most end mid-chunk."""
    return FlattenActionChunk(fastenv.wrap(RandomLengthEnv(), chunk=CHUNK))


def random_length_env() -> gym.Env:
    return chunked_random_env()


def random_length_vector_env(num_envs: int, **vector_options) -> PipelineVectorEnv:
    """``ID``'s vector entry point, as fastenv's ids have theirs: fastenv's vector env, SAME_STEP unless told."""
    return PipelineVectorEnv([chunked_random_env] * num_envs, **vector_options)


gym.register(ID, entry_point=random_length_env, vector_entry_point=random_length_vector_env, disable_env_checker=True)


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


@pytest.mark.parametrize("way", ["env_creator", "register_env", "env_config"])
def test_an_id_runs_next_step_through_env_creator_or_env_config_and_collects_the_sync_episodes(way, stock_episodes):
    # env_creator(ID) asks ID's vector entry point for NEXT_STEP, as an object or registered by name (as
    # RLlib's algorithms take it); so does the plain id with the mode in env_config.
    from ray.tune.registry import register_env

    register_env("fastenv-tests-random-length", env_creator(ID, num_workers=2))
    env, env_config = {
        "env_creator": (env_creator(ID, num_workers=2), {}),
        "register_env": ("fastenv-tests-random-length", {}),
        "env_config": (ID, {"num_workers": 2, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}),
    }[way]
    runner = SingleAgentEnvRunner(config=config(env, "vector_entry_point").environment(env, env_config=env_config))
    assert isinstance(runner.env.unwrapped, PipelineVectorEnv)
    assert runner.env.unwrapped.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
    assert_same_episodes(collect(runner), stock_episodes)


def test_the_plain_id_without_next_step_runs_same_step_which_rllib_misreads(stock_episodes):
    runner = SingleAgentEnvRunner(config=config(ID, "vector_entry_point").environment(ID, env_config={"num_workers": 2}))
    assert runner.env.unwrapped.metadata["autoreset_mode"] is gym.vector.AutoresetMode.SAME_STEP
    with pytest.raises(AssertionError):
        assert_same_episodes(collect(runner), stock_episodes)


def test_env_creator_over_an_id_builds_single_envs_where_rllib_vectorizes_them(stock_episodes):
    # gym_env_vectorize_mode="sync": RLlib calls the creator without num_envs, for one gym.make(ID) each.
    runner = SingleAgentEnvRunner(config=config(env_creator(ID), "sync"))
    assert isinstance(runner.env.unwrapped, gym.vector.SyncVectorEnv)
    assert_same_episodes(collect(runner), stock_episodes)


def test_another_autoreset_mode_is_refused():
    with pytest.raises(ValueError, match="NEXT_STEP autoreset mode, which env_creator sets; got autoreset_mode=AutoresetMode.SAME_STEP "
                                         "to env_creator: leave it out"):
        env_creator(chunked_random_env, autoreset_mode="SameStep")
    cfg = config(env_creator(ID), "vector_entry_point").environment(env_creator(ID), env_config={"autoreset_mode": "SameStep"})
    with pytest.raises(ValueError, match="got autoreset_mode=AutoresetMode.SAME_STEP in env_config: leave it out"):
        SingleAgentEnvRunner(config=cfg)


@pytest.mark.parametrize("env, env_config", [
    (env_creator(ID), {"num_workers": 2}),
    (env_creator(ID, num_workers=2), {}),
    (env_creator(chunked_random_env, num_workers=2), {}),
], ids=["id, env_config", "id, env_creator", "callable, env_creator"])
def test_vector_options_where_rllib_builds_single_envs_are_refused_saying_what_to_set(env, env_config):
    cfg = config(env, "sync").environment(env, env_config=env_config)
    with pytest.raises(ValueError, match=r"building single envs .* vector options \['num_workers'\] were given: "
                                         r"pass .env_runners\(gym_env_vectorize_mode='vector_entry_point'\)"):
        SingleAgentEnvRunner(config=cfg)


def test_env_creator_refuses_what_it_cannot_run():
    with pytest.raises(TypeError, match="env must be a Gymnasium id or a callable"):
        env_creator(3)
    with pytest.raises(ValueError, match="'fastenv/Behavior-v0' has no vector entry point"):
        env_creator("fastenv/Behavior-v0")
    with pytest.raises(TypeError, match=r"env_creator takes the vector env's options .*; got \['chunk'\] \(the env's go in env_config\)"):
        env_creator("fastenv/Libero-v0", chunk=8)
    with pytest.raises(TypeError, match=r"\['num_workers'\] given both to env_creator and in env_config"):
        env_creator(ID, num_workers=2)({"num_envs": 2, "num_workers": 1})


# -- the same episodes as RLlib on LIBERO's own env ------------------------------------------------
# The reference is RLlib's env runner on RLlib's "async" vectorization of LIBERO's own env (Gymnasium's
# AsyncVectorEnv: each stock env in a process of its own), stepped one action at a time (chunk 1) or K at
# a time by the reference chunk loop (tests/stock_libero.py); fastenv's side is the same env runner on
# env_creator("fastenv/Libero-v0"), registered by name, in "vector_entry_point" mode. Each side runs in a
# fresh process.

STOCK_ID = "fastenv_tests/StockLibero-v0"
LIBERO_STEPS = {1: 32, 8: 5}  # env steps per env and sample call (two calls): 64 or 80 simulator steps per env


def _libero_episode(episode) -> dict:
    from stock_libero import stock_info

    data = episode_data(episode)
    data["infos"] = tuple(stock_info(info) for info in data["infos"])  # less what only fastenv's infos hold
    data["return"] = episode.get_return()
    return data


def _sample_libero(side: str, chunk: int) -> dict:
    """RLlib's env runner on one ``side`` of the LIBERO comparison: what two ``sample`` calls return,
    the episode ends its callback sees, its episode statistics, and a PPO learner's parameters before
    and after one update on the episodes. Runs in a fresh process (``_in_fresh_process``): Gymnasium's
    AsyncVectorEnv builds a stock env in the calling process to read its spaces.
    """
    from fakes import ShiftedFinalObservation
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from stock_libero import fastenv_options, make_stock

    if side == "stock":
        # "async" passes env_config to gym.make_vec, whose vector_kwargs start the workers with spawn:
        # Gymnasium's default, fork, would copy the OpenGL context of the env it builds here for the spaces,
        # and the workers would hang
        gym.register(STOCK_ID, entry_point=make_stock, disable_env_checker=True)
        env, env_config, mode = STOCK_ID, {"chunk": chunk, "vector_kwargs": {"context": "spawn"}}, "async"
    else:  # as the docs train: the creator registered by name
        from ray.tune.registry import register_env

        creator = env_creator("fastenv/Libero-v0", num_workers=2)
        register_env("fastenv-libero", creator if side == "fastenv" else (lambda cfg: ShiftedFinalObservation(creator(cfg))))
        env, env_config, mode = "fastenv-libero", fastenv_options(chunk), "vector_entry_point"
    ends = []
    cfg = (
        PPOConfig()
        .environment(env, env_config=env_config)
        .env_runners(num_env_runners=0, num_envs_per_env_runner=2, gym_env_vectorize_mode=mode)
        .callbacks(on_episode_end=lambda episode, env_index, **_: ends.append((env_index, len(episode), episode.is_terminated)))
        .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[16]))
        .debugging(seed=SEED)
    )
    runner = SingleAgentEnvRunner(config=cfg)
    try:
        assert runner.env.unwrapped.metadata["autoreset_mode"] is gym.vector.AutoresetMode.NEXT_STEP
        samples = [runner.sample(num_timesteps=2 * LIBERO_STEPS[chunk]) for _ in range(2)]  # explore: seeded Gaussian actions
        metrics = runner.get_metrics()
        learner = cfg.build_learner(env=runner.env)
        before = learner.get_state(components="rl_module")["rl_module"]
        learner.update(episodes=[e for call in samples for e in call], timesteps={"num_env_steps_sampled_lifetime": 4 * LIBERO_STEPS[chunk]})
        after = learner.get_state(components="rl_module")["rl_module"]
    finally:
        runner.stop()
    statistics = ("episode_len_mean", "episode_len_min", "episode_len_max", "episode_return_mean", "episode_return_min",
                  "episode_return_max", "num_episodes", "num_env_steps_sampled", "num_env_steps_sampled_lifetime")
    return {
        "episodes": [[_libero_episode(e) for e in call] for call in samples], "ends": ends,
        "statistics": {key: metrics[key] for key in statistics},
        "parameters": {key: np.asarray(value) for key, value in after["default_policy"].items()},
        "initial parameters": {key: np.asarray(value) for key, value in before["default_policy"].items()},
    }


def _in_fresh_process(side: str, chunk: int) -> dict:
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_sample_libero, side, chunk).result()


def _assert_same_collection(got: dict, want: dict) -> None:
    def dtypes(value):
        if isinstance(value, dict):
            return {key: dtypes(v) for key, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [dtypes(v) for v in value]
        return str(np.asarray(value).dtype)

    assert [len(call) for call in got["episodes"]] == [len(call) for call in want["episodes"]], "episodes per sample call"
    for i, (got_call, want_call) in enumerate(zip(got["episodes"], want["episodes"])):
        for j, (a, b) in enumerate(zip(got_call, want_call)):
            assert dtypes(a) == dtypes(b), f"sample {i}, episode {j}: dtypes"
            assert_same(a, b, f"sample {i}, episode {j}")
    assert got["ends"] == want["ends"], "episode ends (env, length, terminated)"
    assert_same(got["statistics"], want["statistics"], "episode statistics")
    assert_same(got["parameters"], want["parameters"], "parameters after one update")


@same_data_on_stock_libero
def test_the_env_runner_collects_on_fastenv_what_it_collects_on_stock_libero(chunk, monkeypatch):
    """RLlib's default vectorization, "sync", steps its envs in the env runner's process, where stock LIBERO envs are not independent (tests/stock_libero.py says why). So the reference is
    RLlib's multi-process vectorization, "async" (Gymnasium's AsyncVectorEnv, started with spawn), which
    gives each stock env a process of its own and leaves the env runner as it is: the same module, seed
    and ``sample`` calls as on fastenv's side. RLlib's remote env runners (one env each) would give each
    env a process too, but each runner is seeded apart (its worker index added to the seed) and samples
    on its own: not the one collection that fastenv's env runner makes.
    """
    from stock_libero import schedule_success

    schedule_success(monkeypatch, after=18)  # success at step 19 or 20, if at all: about half the episodes truncate
    want = _in_fresh_process("stock", chunk)
    _assert_same_collection(_in_fresh_process("fastenv", chunk), want)
    # What the window covers: several episodes per env, ended by success and by the time limit, one
    # cut between the sample calls, and a learner update that moved the parameters.
    ends = want["ends"]
    assert all(sum(env == i for env, _, _ in ends) >= 2 for i in (0, 1)), ends
    assert any(terminated for _, _, terminated in ends) and not all(terminated for _, _, terminated in ends), ends
    assert any(e["t_started"] > 0 for e in want["episodes"][1])
    assert not all(np.array_equal(want["parameters"][k], want["initial parameters"][k]) for k in want["parameters"])
    # Negative control: each final observation shifted by one step, below RLlib's vector wrapper, is caught.
    with pytest.raises(AssertionError, match="observations"):
        _assert_same_collection(_in_fresh_process("fastenv-shifted", chunk), want)
