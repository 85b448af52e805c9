"""The vector layer on the real LIBERO simulator, compared with Gymnasium's SyncVectorEnv."""

import functools

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers import assert_same, lift_step_keys, without_legacy_keys

from fastenv.vector import BatchedEnv, PipelineVectorEnv

pytestmark = pytest.mark.libero

ENV_KWARGS = dict(suite="libero_10", task_id=0, chunk=4, camera_size=32, max_episode_steps=10)


@pytest.mark.big_memory
def test_libero_vector_env_matches_sync_vector_env_with_final_observations():
    from fastenv.envs.libero import make_env

    ours = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, **ENV_KWARGS)
    ref = SyncVectorEnv([functools.partial(make_env, **ENV_KWARGS)] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        assert isinstance(ours, PipelineVectorEnv)
        assert ours.single_observation_space == ref.single_observation_space
        assert_same(ours.reset(seed=3), ref.reset(seed=3), "reset")
        rng = np.random.default_rng(0)
        finals = 0
        for t in range(7):  # 10-step episodes in chunks of 4: ends at the 3rd chunk, then again
            actions = rng.uniform(-1, 1, (2, 4, 7)).astype(np.float32)
            out = ours.step(actions)
            ref_out = ref.step(actions)
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
                assert_same(a, b, f"step {t} {name}")
            infos = without_legacy_keys(out[4])
            # final_obs, final_info, chunk infos; the chunk keys also at the top level when an episode ends
            assert_same(infos, lift_step_keys(ref_out[4], 2), f"step {t} infos")
            finals += int(infos["_final_obs"].sum()) if "final_obs" in infos else 0
        assert finals == 4
    finally:
        ours.close()
        ref.close()


def test_make_with_num_envs_returns_the_batched_env_with_stages():
    # gym.make keeps max_episode_steps for Gymnasium's TimeLimit; each env's own is max_sim_steps there
    kwargs = {("max_sim_steps" if k == "max_episode_steps" else k): v for k, v in ENV_KWARGS.items()}
    env = gym.make("fastenv/Libero-v0", num_envs=2, num_workers=1, pipeline_stages=2, **kwargs)
    try:
        batched = env.unwrapped
        assert isinstance(batched, BatchedEnv)
        assert env.observation_space["agentview_image"].shape == (2, 32, 32, 3)
        assert env.action_space.shape == (2, 4, 7)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        batched.send(np.zeros((1, 4, 7), np.float32), stage=1)
        batched.send(np.zeros((1, 4, 7), np.float32), stage=0)
        obs1, reward1, *_ = batched.recv(stage=1)
        obs0, reward0, *_ = batched.recv(stage=0)
        assert obs0["agentview_image"].shape == (1, 32, 32, 3) and reward0.shape == (1,)
        obs, reward, term, trunc, _ = env.step(np.zeros((2, 4, 7), np.float32))
        assert reward.shape == (2,) and term.dtype == np.bool_
    finally:
        env.close()


def test_unknown_vector_option_is_named():
    from fastenv.envs.libero import make_vec

    with pytest.raises(TypeError, match=r"unknown option\(s\) \['num_worker'\]"):
        make_vec(2, num_worker=2)


@pytest.mark.big_memory
def test_an_envs_episodes_are_the_same_in_any_layout_on_a_task_with_random_fixtures():
    # libero_90 task 35 places its microwave at random at every reset: each env's episodes (seeded,
    # then unseeded autoresets) are the same alone in its worker process, sharing one worker
    # served by dynamic batching (env 1 sent first), and in SyncVectorEnv, where both share the
    # main process.
    from fastenv.envs.libero import make_env

    kwargs = dict(suite="libero_90", task_id=35, chunk=4, camera_size=32, max_episode_steps=6,
                  modalities=["agentview_image", "object-state"])
    alone = PipelineVectorEnv([functools.partial(make_env, **kwargs)] * 2, num_workers=2)
    shared = PipelineVectorEnv([functools.partial(make_env, **kwargs)] * 2, num_workers=1, pipeline_stages=2)
    ref = SyncVectorEnv([functools.partial(make_env, **kwargs)] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        first = ref.reset(seed=11)
        assert_same(alone.reset(seed=11), first, "reset")
        assert_same(shared.reset(seed=11)[0], first[0], "reset (one worker)")
        rng = np.random.default_rng(4)
        for t in range(5):  # episodes of 6 steps in chunks of 4: two autoresets per env
            actions = rng.uniform(-1, 1, (2, 4, 7)).astype(np.float32)
            out, ref_out = alone.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
                assert_same(a, b, f"step {t} {name}")
            assert_same(without_legacy_keys(out[4]), lift_step_keys(ref_out[4], 2), f"step {t} infos")
            for i in (1, 0):
                shared.send(actions[[i]], env_ids=[i])
            obs, reward, terminated, truncated, infos = shared.recv(max_batch=2)
            for row, i in enumerate(infos["env_ids"].tolist()):
                for key in obs:
                    assert np.array_equal(obs[key][row], ref_out[0][key][i]), f"step {t} env {i} {key} (one worker)"
                assert (reward[row], terminated[row], truncated[row]) == (ref_out[1][i], ref_out[2][i], ref_out[3][i])
    finally:
        for envs in (alone, shared, ref):
            envs.close()


def test_the_node_scaling_benchmark_steps_k_workers_of_one_built_vector_env(tmp_path, monkeypatch):
    # bench_node_scaling.py: one vector env built once; configuration k steps the envs of its first
    # k workers only (their CPU time grows, the others' does not); speed-up and efficiency per k.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_node_scaling as bench

    assert bench.default_workers(2) == [1] and bench.default_workers(16) == [1, 2, 4, 8, 15]
    assert bench.default_workers(64) == [1, 2, 4, 8, 16, 32, 63]
    built = []
    real = bench.time_block

    def spy(envs, ids, actions, chunks, pids):
        built.append(id(envs))
        before = {p: bench.cpu_seconds(p) for p in envs.worker_pids}
        out = real(envs, ids, actions, chunks, pids)
        busy = [p for p in envs.worker_pids if bench.cpu_seconds(p) - before[p] > 0.05]
        assert set(busy) <= set(pids)  # only the stepping workers worked
        return out

    monkeypatch.setattr(bench, "time_block", spy)
    payload = bench.main(["--workers", "1", "2", "--rounds", "1", "--chunks", "2", "--chunk", "2", "--camera-size", "32",
                          "--out", str(tmp_path / "n.json")])
    assert len(set(built)) == 1  # every configuration ran on the one vector env
    rows = {row["workers"]: row for row in payload["rows"]}
    assert sorted(rows) == [1, 2] and rows[1]["speedup"] == 1.0 and rows[1]["efficiency"] == 1.0
    assert rows[2]["efficiency"] == pytest.approx(rows[2]["speedup"] / 2)
    assert all(row["env_steps_per_s"] > 0 and 0 < row["worker_busy"] <= 1.5 and row["worker_cpu_ms_per_env_step"] > 0 for row in rows.values())
    assert len(payload["worker_rss_gb"]) == 2 and (tmp_path / "n.json").exists()


@pytest.mark.big_memory
def test_a_next_step_run_is_the_same_step_run_rearranged():
    """LIBERO episodes ending inside a chunk (10 steps in chunks of 4): with NEXT_STEP (stages sent
    and received) each env gives the transitions and resets it gives with SAME_STEP (whole steps),
    in the same order; a reset comes one step later, with reward 0 and no flags, and the action
    of that step is not run (a different one is sent)."""
    from fastenv.core.infos import STEP_KEYS, row_info

    def row(obs, i):
        return {key: value[i] for key, value in obs.items()}

    same = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=1, **ENV_KWARGS)
    nxt = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=1, pipeline_stages=2, autoreset_mode="NextStep", **ENV_KWARGS)
    try:
        assert nxt.metadata["autoreset_mode"] is AutoresetMode.NEXT_STEP
        assert_same(nxt.reset(seed=3), same.reset(seed=3), "reset")
        rng = np.random.default_rng(0)
        runs = rng.uniform(-1, 1, (7, 2, 4, 7)).astype(np.float32)  # [k, i]: env i's k-th action that runs
        same_events: list[list] = [[], []]
        for k in range(7):
            obs, rewards, terminated, truncated, infos = same.step(runs[k])
            infos = without_legacy_keys(infos)
            assert "worker_restarted" not in infos  # (a restart's invented transition would be no data to compare)
            for i in range(2):
                info = row_info(infos, i)
                if terminated[i] or truncated[i]:
                    final_obs, final_info = info.pop("final_obs"), info.pop("final_info")
                    same_events[i].append(("step", final_obs, rewards[i], terminated[i], truncated[i], final_info))
                    same_events[i].append(("reset", row(obs, i), {key: v for key, v in info.items() if key not in STEP_KEYS}))
                else:
                    same_events[i].append(("step", row(obs, i), rewards[i], terminated[i], truncated[i], info))
        next_events: list[list] = [[], []]
        ran, resets_next = [0, 0], [False, False]
        for _ in range(9):  # 7 actions that run and 2 resets per env
            sent = {}
            for i in range(2):  # stage i is env i
                sent[i] = rng.uniform(-1, 1, (1, 4, 7)).astype(np.float32) if resets_next[i] else runs[ran[i], i][None]
                nxt.send(sent[i], stage=i)
            for i in (1, 0):
                obs, rewards, terminated, truncated, infos = nxt.recv(stage=i)
                assert "final_obs" not in infos and "final_info" not in infos and "worker_restarted" not in infos
                if resets_next[i]:
                    assert rewards[0] == 0.0 and not terminated[0] and not truncated[0]
                    next_events[i].append(("reset", row(obs, 0), row_info(infos, 0)))
                else:
                    next_events[i].append(("step", row(obs, 0), rewards[0], terminated[0], truncated[0], row_info(infos, 0)))
                    ran[i] += 1
                resets_next[i] = bool(terminated[0] or truncated[0])
        assert ran == [7, 7] and sum(event[0] == "reset" for event in next_events[0]) == 2
        for i in range(2):
            assert [e[0] for e in next_events[i]] == [e[0] for e in same_events[i]], f"env {i}: steps and resets"
            for k, (event, same_event) in enumerate(zip(next_events[i], same_events[i])):
                assert_same(event, same_event, f"env {i} event {k}")
    finally:
        same.close()
        nxt.close()
