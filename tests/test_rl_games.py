"""rl_games through RlGamesVecEnv: its PPO collects on fastenv what it collects on its own RayVecEnv
(rl_games' default vectorization for Gym envs: one Ray actor per env) over the same envs and seeds,
bit for bit, episode ends (terminated, truncated) and time-out bootstrapping included: on small
envs, and on LIBERO against RayVecEnv over LIBERO's own env (chunk 1 and chunk 8), with negative
controls."""

import functools
import os
import sys

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("rl_games")
ray = need("ray")

# One local Ray cluster at a time on this machine: the Ray tests run in one test process.
pytestmark = pytest.mark.xdist_group("ray")

import fakes  # noqa: E402
import stock_libero  # noqa: E402  (imported before Ray starts: its workers get the rendering variables it sets)
import torch  # noqa: E402
from helpers import assert_identical  # noqa: E402
from rl_games.common import env_configurations  # noqa: E402
from rl_games.common.gym_compat import wrap_gymnasium_env  # noqa: E402
from rl_games_runs import ppo_params, train  # noqa: E402

from fastenv.integrations.rl_games import RlGamesVecEnv, register  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

class SeedOnReset(gym.Wrapper):
    """Gymnasium envs have no ``seed()``, which rl_games' ``RayWorker`` calls (``env.seed(seed + i)``)
    and skips where it is missing, leaving the env unseeded: this one seeds the next reset."""

    def seed(self, seed):
        self.next_seed = seed

    def reset(self, **kwargs):
        seed, self.next_seed = getattr(self, "next_seed", None), None
        return self.env.reset(seed=seed, **kwargs)


class ConcatInfos(SeedOnReset):
    """An env that asks ``RayVecEnv`` to batch its infos into one dict (``concat_infos``)."""

    concat_infos = True


def stock(make, wrapper=ConcatInfos):
    """An rl_games env creator: ``make()`` seeded by ``seed()``, with the old Gym API rl_games' own
    ``make`` gives a Gymnasium env."""
    return lambda **kwargs: wrap_gymnasium_env(wrapper(make()))


def register_stock_envs():
    """The reference envs under rl_games' default vectorization; also run in each Ray worker, where
    ``RayWorker`` looks its env up by name."""
    for name, creator in {
        "stock-fake": stock(fakes.FlatRandomLengthEnv),
        "stock-fake-list": stock(fakes.FlatRandomLengthEnv, SeedOnReset),
        "stock-libero-1": stock(functools.partial(stock_libero.make_stock, chunk=1)),  # LIBERO's own env
        "stock-libero-8": stock(functools.partial(stock_libero.make_stock, chunk=8)),
    }.items():
        env_configurations.register(name, {"vecenv_type": "RAY", "env_creator": creator})


def start_ray():
    ray.cloudpickle.register_pickle_by_value(fakes)  # Ray's workers do not see this folder
    ray.cloudpickle.register_pickle_by_value(stock_libero)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    register_stock_envs()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": register_stock_envs})


@pytest.fixture(scope="module")
def ray_session():
    start_ray()
    yield
    ray.shutdown()


@pytest.fixture
def ray_on_success_schedule(monkeypatch):
    """A Ray cluster started after LIBERO's success schedule is set, so that its workers (processes
    of the cluster, started with its environment) have it; the module's session comes back after."""
    from stock_libero import schedule_success

    was_up = ray.is_initialized()
    ray.shutdown()
    schedule_success(monkeypatch)
    start_ray()
    yield
    ray.shutdown()
    monkeypatch.undo()
    if was_up:
        start_ray()


def close_ray_vec_env(venv):
    """RayVecEnv.close() shuts Ray down: its workers go, the session stays."""
    for worker in venv.workers:
        ray.kill(worker)


def assert_same_training(ours, ref):
    (rollouts, log, stats), (ref_rollouts, ref_log, ref_stats) = ours, ref
    assert len(log) == len(ref_log), f"{len(log)} vector-env calls != {len(ref_log)}"
    for t, (call, ref_call) in enumerate(zip(log, ref_log)):
        assert_identical(call, ref_call, f"call {t} ({ref_call[0]})", loose_scalars=True)
    for epoch, (rollout, ref_rollout) in enumerate(zip(rollouts, ref_rollouts, strict=True)):
        assert rollout.keys() == ref_rollout.keys()
        for key, value in ref_rollout.items():
            assert rollout[key].dtype == value.dtype and torch.equal(rollout[key], value), f"epoch {epoch}: {key} differs"
    assert_identical(stats, ref_stats, "episode stats")


def ended(log, key):
    """How many env steps in ``log`` ended an episode by time-out (``time_outs``) or at all (``dones``)."""
    steps = [call[2] for call in log if call[0] == "step"]
    return int(sum(np.sum(out[3]["time_outs"]) if key == "time_outs" else np.sum(out[2]) for out in steps))


@pytest.fixture(scope="module")
def reference(ray_session, tmp_path_factory):
    return train(ppo_params("stock-fake", 4, 16, tmp_path_factory.mktemp("ref")), close_ray_vec_env)


def fake_vector_env(num_envs, **kwargs):
    return PipelineVectorEnv([fakes.FlatRandomLengthEnv] * num_envs, num_workers=2)


def test_ppo_collects_on_fastenv_what_it_collects_on_rl_games_ray_vec_env(reference, tmp_path):
    env_configurations.register("fastenv-fake", {"vecenv_type": "FASTENV", "env_creator": fake_vector_env})
    register("unused", "CartPole-v1")  # registers the FASTENV vecenv type
    ours = train(ppo_params("fastenv-fake", 4, 16, tmp_path))
    assert_same_training(ours, reference)
    log = reference[1]
    assert ended(log, "time_outs") >= 3 and ended(log, "dones") - ended(log, "time_outs") >= 3  # both kinds of end were compared
    rollout, steps = reference[0][0], [call[2] for call in log[1:17]]  # the first epoch's
    assert rollout["obses"].dtype == torch.float32  # the env's float64, cast as RayWorker casts it
    raw, time_outs = np.stack([out[1] for out in steps]).astype(np.float32), np.stack([out[3]["time_outs"] for out in steps])
    rewards = rollout["rewards"][..., 0].numpy()
    assert (rewards[~time_outs] == raw[~time_outs]).all() and (rewards[time_outs] != raw[time_outs]).all()  # bootstrapped


def test_list_infos_match_ray_vec_env_without_concat_infos(ray_session, tmp_path):
    """rl_games' default for an env without ``concat_infos``: per-env infos, no time-out bootstrap."""
    ref = train(ppo_params("stock-fake-list", 4, 16, tmp_path / "ref"), close_ray_vec_env)
    env_configurations.register("fastenv-fake", {"vecenv_type": "FASTENV", "env_creator": fake_vector_env})
    register("unused", "CartPole-v1")
    ours = train(ppo_params("fastenv-fake", 4, 16, tmp_path / "ours", {"concat_infos": False}))
    assert_same_training(ours, ref)
    assert isinstance(ref[1][1][2][3], list)


class FinalObsInPlace(gym.vector.VectorWrapper):
    """The negative control: an ended env's step shows its final observation, not the next
    episode's first (what a library that resets ended envs itself would want)."""

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        obs = obs.copy()
        for i in np.flatnonzero(terminations | truncations):
            obs[i] = infos["final_obs"][i]
        return obs, rewards, terminations, truncations, infos


def test_a_final_observation_in_place_of_the_reset_one_is_caught(reference, tmp_path):
    make = lambda num_envs, **kwargs: FinalObsInPlace(fake_vector_env(num_envs))  # noqa: E731
    env_configurations.register("fastenv-fake-final", {"vecenv_type": "FASTENV", "env_creator": make})
    register("unused", "CartPole-v1")
    ours = train(ppo_params("fastenv-fake-final", 4, 16, tmp_path))
    with pytest.raises(AssertionError, match=r"call \d+ \(step\)\[2\]\[0\]"):  # a step's observations
        assert_same_training(ours, reference)


def test_a_vector_env_in_another_autoreset_mode_is_refused():
    envs = PipelineVectorEnv([fakes.FlatRandomLengthEnv] * 2, num_workers=1, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    try:
        with pytest.raises(ValueError, match=r"needs a vector env with SAME_STEP autoreset .* got autoreset_mode=AutoresetMode.NEXT_STEP"):
            RlGamesVecEnv(envs)
    finally:
        envs.close()


# -- the same data as rl_games on LIBERO's own env -------------------------------------------------
# The reference is rl_games' PPO (play_steps' experience buffer, its episode statistics, the model
# after two epochs) on RayVecEnv over LIBERO's own env (tests/stock_libero.py), each env in a Ray actor
# of its own, stepped one action at a time (chunk 1) or K at a time by the reference chunk loop.
# RayVecEnv is rl_games' default for Gym envs: nothing here runs two stock envs in one process.
HORIZON = {1: 32, 8: 6}  # two epochs: 64 simulator steps per env, or 12 chunks of 8


def _fastenv_libero(chunk, train_dir, alter=None):
    """PPO on fastenv's vector env through ``register``; ``alter`` wraps the vector env (below the adapter)."""
    if alter is None:
        register("fastenv-libero", "fastenv/Libero-v0", num_workers=2, **stock_libero.fastenv_options(chunk))
        return train(ppo_params("fastenv-libero", 2, HORIZON[chunk], train_dir))

    def make(num_envs, **kwargs):
        return alter(gym.make_vec("fastenv/Libero-v0", num_envs=num_envs, num_workers=2, **stock_libero.fastenv_options(chunk), **kwargs))

    env_configurations.register("fastenv-libero-altered", {"vecenv_type": "FASTENV", "env_creator": make})
    register("unused", "CartPole-v1")  # registers the FASTENV vecenv type
    return train(ppo_params("fastenv-libero-altered", 2, HORIZON[chunk], train_dir))


def _stock_view(run):
    """A run on fastenv with the info keys LIBERO's own env does not give set aside
    (``stock_libero.FASTENV_INFO_KEYS``; rl_games' PPO reads ``time_outs`` and ``scores`` of them)."""
    rollouts, log, stats = run
    log = [(call[0], call[1], (*call[2][:3], stock_libero.stock_info(call[2][3]))) if call[0] == "step" else call for call in log]
    return rollouts, log, stats


@same_data_on_stock_libero
def test_ppo_on_libero_collects_what_it_collects_on_ray_vec_env_over_stock_libero(chunk, ray_on_success_schedule, tmp_path):
    """What PPO's ``play_steps`` puts in its experience buffer over two epochs (observations, actions,
    rewards with the time-out bootstrap, dones, values, log-probabilities, means, sigmas) and its
    returns, every reset and step result it sees (infos: ``time_outs``; fastenv's own keys set aside),
    its episode statistics and the model after training: on fastenv what they are on RayVecEnv over
    LIBERO's own env, chunk 1 and chunk 8, bit for bit."""
    want = train(ppo_params(f"stock-libero-{chunk}", 2, HORIZON[chunk], tmp_path / "ref"), close_ray_vec_env)
    assert_same_training(_stock_view(_fastenv_libero(chunk, tmp_path / "ours")), want)
    # What the window covers: episodes ended by success and by the time limit, at least 2 per env.
    steps = [call[2] for call in want[1] if call[0] == "step"]
    dones = np.stack([out[2] for out in steps])
    time_outs = np.stack([out[3]["time_outs"] for out in steps])
    assert (dones & ~time_outs).sum() >= 1 and time_outs.sum() >= 1, ((dones & ~time_outs).sum(), time_outs.sum())
    assert (dones.sum(axis=0) >= 2).all() and want[2]["games"] == dones.sum(), (dones.sum(axis=0), want[2]["games"])
    # Negative control: one reward of one env altered by 1e-6, below the adapter, is caught.
    altered = _fastenv_libero(chunk, tmp_path / "altered", alter=lambda v: fakes.AlteredReward(v, call=5, index=1, by=1e-6))
    with pytest.raises(AssertionError, match=r"call \d+ \(step\)\[2\]\[1\]"):  # the step's rewards
        assert_same_training(_stock_view(altered), want)
