"""rl_games through RlGamesVecEnv: its PPO collects on fastenv what it collects on its own RayVecEnv
(rl_games' default vectorization for Gym envs) over the same envs and seeds, bit for bit, episode
ends (terminated, truncated, mid-chunk) and time-out bootstrapping included."""

import os
import sys

import gymnasium as gym
import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("rl_games")
ray = need("ray")

# One local Ray cluster at a time on this machine: the Ray tests run in one test process.
pytestmark = pytest.mark.xdist_group("ray")

import fakes  # noqa: E402
import torch  # noqa: E402
from helpers import assert_identical  # noqa: E402
from rl_games.common import env_configurations  # noqa: E402
from rl_games.common.gym_compat import wrap_gymnasium_env  # noqa: E402
from rl_games_runs import ppo_params, train  # noqa: E402

from fastenv.integrations.rl_games import RlGamesVecEnv, register  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

# Chunks of 2 in 5-step episodes: each episode ends inside its third chunk, truncated.
LIBERO = dict(suite="libero_10", task_id=0, chunk=2, camera_size=32, modalities=["agentview_image", "robot0_proprio-state"],
              max_episode_steps=5, flatten=True)


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
    from fastenv.envs.libero import make_env

    for name, creator in {
        "stock-fake": stock(fakes.FlatRandomLengthEnv),
        "stock-fake-list": stock(fakes.FlatRandomLengthEnv, SeedOnReset),
        "stock-libero": stock(lambda: make_env(**LIBERO)),
    }.items():
        env_configurations.register(name, {"vecenv_type": "RAY", "env_creator": creator})


@pytest.fixture(scope="module")
def ray_session():
    ray.cloudpickle.register_pickle_by_value(fakes)  # Ray's workers do not see this folder
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    register_stock_envs()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": register_stock_envs})
    yield
    ray.shutdown()


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
        with pytest.raises(ValueError, match=r"needs a vector env with SAME_STEP autoreset .* got AutoresetMode.NEXT_STEP"):
            RlGamesVecEnv(envs)
    finally:
        envs.close()


@pytest.mark.libero
@pytest.mark.big_memory
@pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization", keep=2)
def test_ppo_on_libero_collects_what_it_collects_on_rl_games_ray_vec_env(ray_session, tmp_path):
    ref = train(ppo_params("stock-libero", 2, 8, tmp_path / "ref"), close_ray_vec_env)
    register("fastenv-libero", "fastenv/Libero-v0", num_workers=2, **LIBERO)
    ours = train(ppo_params("fastenv-libero", 2, 8, tmp_path / "ours"))
    assert_same_training(ours, ref)
    log = ref[1]
    assert ended(log, "time_outs") >= 4 and ended(log, "dones") == ended(log, "time_outs")
    chunk_steps = [out[3]["chunk_steps"][out[2]] for _, _, out in (call for call in log if call[0] == "step")]
    assert (np.concatenate(chunk_steps) == 1).all()  # the episodes ended mid-chunk
