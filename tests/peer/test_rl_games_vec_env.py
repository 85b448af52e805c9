"""rl_games' vector-env contract, checked on ``fastenv.integrations.rl_games.RlGamesVecEnv``.

rl_games 1.6.5 (the release on PyPI) ships no test of it (its ``tests/`` holds ``assert True``).
Its main branch, after 1.6.5, tests what PPO and SAC read from a vector env; each test below names
the one whose contract it checks, adapted to 1.6.5's PPO (``A2CBase.play_steps``) and to what
1.6.5's own ``RayVecEnv`` gives: an ended env already reset in the step, ``dones`` =
terminated or truncated, ``infos["time_outs"]`` where the episode was truncated. The env under test
is ``RlGamesVecEnv(PipelineVectorEnv(...))`` over small envs; the comparison with ``RayVecEnv``
itself (bit for bit) is ``tests/test_rl_games.py``.

Contracts of those tests that do not apply, so have no test here: NEXT_STEP autoreset and the
masking of its reset rows (``test_ppo_masking.py``, ``FakeNextStepVecEnv``), SAC's final
observations and replay buffer, ``autoreset_mode`` in ``get_env_info()`` and ``_merge_ray_infos``
(all added after 1.6.5, which reads neither); multi-agent envs (``get_number_of_agents() > 1``).
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("rl_games")

from fakes import FlatRandomLengthEnv, ScoredEnv  # noqa: E402  (the workers import them)
from helpers import assert_identical  # noqa: E402
from rl_games.common import env_configurations  # noqa: E402
from rl_games.common.tr_helpers import dicts_to_dict_with_arrays  # noqa: E402
from rl_games_runs import ppo_params, train  # noqa: E402

from fastenv.core.infos import row_info  # noqa: E402
from fastenv.integrations.rl_games import RlGamesVecEnv, register  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

GAMMA = 0.9  # ppo_params'


def vec_env(env=FlatRandomLengthEnv, n=4, **kwargs):
    return RlGamesVecEnv(PipelineVectorEnv([env] * n, num_workers=2), seed=3, **kwargs)


def steps(log):
    return [call[2] for call in log if call[0] == "step"]


def episodes(log):
    """(return, length) of every episode that ended in ``log``, in the order they ended."""
    ended, running = [], None
    for obs, rewards, dones, _ in steps(log):
        running = np.zeros((2, len(rewards))) if running is None else running
        running += [np.asarray(rewards, np.float32), np.ones(len(rewards))]
        for i in np.flatnonzero(dones):
            ended.append(tuple(running[:, i]))
            running[:, i] = 0
    return ended


@pytest.mark.parametrize("concat_infos", [True, False])
def test_steps_follow_ray_vec_env_time_outs_included(concat_infos):
    """test_ray_merge_infos_without_concat_infos: ``time_outs`` one bool per env, True where the
    episode was truncated (not terminated); an ended env's observation is its reset's."""
    venv = vec_env(concat_infos=concat_infos)
    ref = SyncVectorEnv([FlatRandomLengthEnv] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        obs, (ref_obs, _) = venv.reset(), ref.reset(seed=3)
        assert_identical(obs, ref_obs.astype(np.float32), "reset")
        rng, ends = np.random.default_rng(0), 0
        for t in range(30):
            actions = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
            obs, rewards, dones, infos = venv.step(actions)
            ref_obs, ref_rewards, terminated, truncated, ref_infos = ref.step(actions)
            per_env = [dict(row_info(ref_infos, i)["final_info"]) if d else row_info(ref_infos, i) for i, d in enumerate(terminated | truncated)]
            for info, term, trunc in zip(per_env, terminated, truncated):
                info["time_outs"] = bool(trunc and not term)
            assert_identical((obs, rewards, dones), (ref_obs.astype(np.float32), ref_rewards, terminated | truncated), f"step {t}")
            assert_identical(infos, dicts_to_dict_with_arrays(per_env, False) if concat_infos else per_env, f"step {t} infos", loose_scalars=True)
            ends += int(dones.sum())
        assert ends >= 6
    finally:
        venv.close()
        ref.close()


def test_termination_rows_do_not_bootstrap(tmp_path):
    """test_termination_rows_do_not_bootstrap (SAC there, PPO here): a truncated step's reward gets
    ``gamma * value``, a terminated one's and every other step's are the env's."""
    rollouts, log, _ = train(ppo_params("unused", 4, 16, tmp_path), vec_env=vec_env())
    for epoch, rollout in enumerate(rollouts):
        epoch_steps = steps(log)[16 * epoch : 16 * (epoch + 1)]
        raw = np.stack([out[1] for out in epoch_steps]).astype(np.float32)
        time_outs = np.stack([out[3]["time_outs"] for out in epoch_steps])
        terminated = np.stack([out[2] for out in epoch_steps]) & ~time_outs
        rewards, values = rollout["rewards"][..., 0].numpy(), rollout["values"][..., 0].numpy()
        np.testing.assert_array_equal(rewards[~time_outs], raw[~time_outs])
        np.testing.assert_allclose(rewards[time_outs], raw[time_outs] + GAMMA * values[time_outs], rtol=1e-6)
        assert time_outs.sum() >= 2 and terminated.sum() >= 2


def test_reward_and_length_accounting_counts_every_episode(tmp_path):
    """test_reward_and_length_accounting_skips_reset_rows: the episode returns and lengths rl_games
    logs are those of the episodes the envs ran (no row is a reset's)."""
    _, log, stats = train(ppo_params("unused", 4, 16, tmp_path), vec_env=vec_env())
    ended = np.array(episodes(log), np.float32)
    assert len(ended) >= 8
    np.testing.assert_allclose(stats["rewards"], [ended[:, 0].mean()], rtol=1e-5)
    np.testing.assert_allclose(stats["lengths"], ended[:, 1].mean(), rtol=1e-6)


def test_scores_in_infos_reach_the_default_observer(tmp_path):
    """test_ray_merge_preserves_scores_for_observer: an env's ``info["scores"]`` at its episode's
    end is what rl_games' default observer logs (per-env infos: rl_games 1.6.5 concatenates a key
    that only some envs give without keeping which env gave it)."""
    _, log, stats = train(ppo_params("unused", 4, 16, tmp_path), vec_env=vec_env(ScoredEnv, concat_infos=False))
    ended = np.array(episodes(log), np.float32)
    np.testing.assert_allclose(stats["scores"], [ended[:, 0].mean()], rtol=1e-5)


def test_vec_env_injection_via_env_info(tmp_path):
    """test_vec_env_injection_via_env_info: a vector env handed over in the config (``env_info``,
    ``vec_env``, as Isaac Lab does) trains as the one rl_games makes from a registered name."""
    env_configurations.register("peer-fake", {"vecenv_type": "FASTENV", "env_creator": lambda num_envs, **kwargs: PipelineVectorEnv([FlatRandomLengthEnv] * num_envs, num_workers=2)})
    register("unused", "CartPole-v1")  # registers the FASTENV vecenv type
    injected = train(ppo_params("unused", 4, 16, tmp_path / "a"), vec_env=vec_env())
    made = train(ppo_params("peer-fake", 4, 16, tmp_path / "b", {"seed": 3}))
    assert_identical(injected[1], made[1], "vector-env calls")
    for rollout, other in zip(injected[0], made[0], strict=True):
        assert all((rollout[key] == other[key]).all() for key in rollout)
