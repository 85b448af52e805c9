"""PipelineVectorEnv on fake envs: Gymnasium equivalence, stage API, dynamic batching, failures."""

import ast
import functools
import inspect
import os
import signal
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from fakes import (
    CountdownEnv,
    GateEnv,
    NoisyEnv,
    RandomLengthEnv,
    SpaceEnv,
    make_chunked_fake,
    make_shared_world_env,
)
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space
from helpers import Alone, assert_same, step_every_env, without_legacy_keys

import fastenv.vector
from fastenv.core.arrays import get_row
from fastenv.vector import VECTOR_OPTIONS, PipelineVectorEnv, WorkerError
from fastenv.vector.pool import EnvStatus, WorkerPool

SAME_STEP = AutoresetMode.SAME_STEP


def child_pids():
    pid = os.getpid()
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_text()
            except OSError:
                continue
            # multiprocessing's own resource tracker and forkserver (a test of context="forkserver"
            # started it) live as long as this process: not ours
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid and "resource_tracker" not in cmdline and "forkserver" not in cmdline:
                out.append(int(entry.name))
    return out


def fastenv_segments():
    return [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(f"fastenv_{os.getpid()}_")]


@pytest.fixture
def random_envs():
    envs = PipelineVectorEnv([RandomLengthEnv] * 8, num_workers=2, pipeline_stages=2)
    yield envs
    envs.close()


def test_same_results_as_gymnasium_sync_vector_env(random_envs):
    ref = SyncVectorEnv([RandomLengthEnv] * 8, autoreset_mode=SAME_STEP)
    assert random_envs.metadata["autoreset_mode"] == SAME_STEP
    assert random_envs.observation_space == ref.observation_space
    assert random_envs.action_space == ref.action_space
    obs, info = random_envs.reset(seed=42)
    ref_obs, ref_info = ref.reset(seed=42)
    assert_same(obs, ref_obs)
    assert_same(info, ref_info)
    rng = np.random.default_rng(0)
    finals = 0
    for t in range(60):
        actions = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
        out = random_envs.step(actions)
        ref_out = ref.step(actions)
        for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
            assert_same(a, b, f"step {t} {name}")
        infos, ref_infos = without_legacy_keys(out[4]), ref_out[4]
        finals += int(infos["_final_obs"].sum()) if "final_obs" in infos else 0
        assert_same(infos, ref_infos, f"step {t} infos")
    assert finals > 10  # many episodes ended, each with its final observation


def test_stage_api_matches_whole_steps(random_envs):
    ref = SyncVectorEnv([RandomLengthEnv] * 8, autoreset_mode=SAME_STEP)
    random_envs.reset(seed=1)
    ref.reset(seed=1)
    rng = np.random.default_rng(1)
    for _ in range(20):
        actions = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
        ref_obs, ref_rew, ref_term, ref_trunc, _ = ref.step(actions)
        # stage 1 first, then stage 0: results are per stage whatever the order
        random_envs.send(actions[4:], stage=1)
        random_envs.send(actions[:4], stage=0)
        obs0, rew0, term0, trunc0, _ = random_envs.recv(stage=0)
        obs1, rew1, term1, trunc1, _ = random_envs.recv(stage=1)
        assert_same(np.concatenate([rew0, rew1]), ref_rew)
        assert_same(np.concatenate([term0, term1]), ref_term)
        assert_same(np.concatenate([trunc0, trunc1]), ref_trunc)
        assert_same(np.concatenate([obs0["x"], obs1["x"]]), ref_obs["x"])


def test_env_ids_api_matches_whole_steps(random_envs):
    ref = SyncVectorEnv([RandomLengthEnv] * 8, autoreset_mode=SAME_STEP)
    random_envs.reset(seed=2)
    ref.reset(seed=2)
    rng = np.random.default_rng(2)
    for _ in range(10):
        actions = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
        _, ref_rew, _, _, _ = ref.step(actions)
        order = rng.permutation(8)
        random_envs.send(actions[order], env_ids=order)
        got = {}
        while len(got) < 8:
            _, rew, _, _, infos = random_envs.recv(max_batch=3)
            assert 1 <= len(rew) <= 3
            got.update(zip(infos["env_ids"].tolist(), rew))
        assert_same(np.array([got[i] for i in range(8)]), ref_rew)


def test_reset_seeds_each_env_with_seed_plus_index(random_envs):
    obs, _ = random_envs.reset(seed=100)
    for i in range(8):
        single, _ = RandomLengthEnv().reset(seed=100 + i)
        np.testing.assert_array_equal(obs["x"][i], single["x"])


def test_partial_reset_leaves_others_and_the_callers_options_alone(random_envs):
    obs, _ = random_envs.reset(seed=5)
    actions = np.full((8, 3), 0.1, np.float32)
    stepped, *_ = random_envs.step(actions)
    mask = np.zeros(8, dtype=bool)
    mask[[1, 6]] = True
    options = {"reset_mask": mask}
    new, info = random_envs.reset(seed=5, options=options)
    assert options == {"reset_mask": mask}  # not popped
    np.testing.assert_array_equal(new["x"][[1, 6]], obs["x"][[1, 6]])  # seeds 5+1, 5+6 again
    keep = ~mask
    np.testing.assert_array_equal(new["x"][keep], stepped["x"][keep])
    assert info["_length"].tolist() == mask.tolist()


def test_spaces_of_every_kind_round_trip():
    space = gym.spaces.Dict(
        {
            "box": gym.spaces.Box(-1, 1, (2, 2), np.float32),
            "disc": gym.spaces.Discrete(5, start=2),
            "multi": gym.spaces.MultiDiscrete([3, 4]),
            "bin": gym.spaces.MultiBinary(3),
            "tup": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (1,), np.float64))),
        }
    )
    envs = PipelineVectorEnv([lambda: _SpaceEnv(space)] * 2, num_workers=2)
    try:
        assert envs.single_observation_space == space
        assert envs.observation_space == batch_space(space, 2)
        obs, _ = envs.reset(seed=0)
        assert envs.observation_space.contains(obs)
        for _ in range(3):
            obs, *_ = envs.step(np.array([0, 1]))
            assert envs.observation_space.contains(obs)
            expected = [_SpaceEnv(space).reset(seed=i)[0] for i in range(2)]
            assert obs["disc"].tolist() == [e["disc"] for e in expected]
    finally:
        envs.close()


class _SpaceEnv(gym.Env):
    def __init__(self, space):
        self.observation_space = space
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.observation_space.seed(seed)
        self.obs = self.observation_space.sample()
        return self.obs, {}

    def step(self, action):
        return self.obs, 0.0, False, False, {}


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda e: e.step(np.zeros((7, 3))), ValueError, r"actions must have shape \(8, 3\), got shape \(7, 3\)"),
        (lambda e: e.step(np.full((8, 3), np.nan)), ValueError, "must be finite"),
        (lambda e: e.step(np.full((8, 3), "x")), ValueError, "real-valued array"),
        (lambda e: e.send(np.zeros((4, 3)), stage=2), ValueError, r"stage must be in \[0, 2\), got 2"),
        (lambda e: e.send(np.zeros((3, 3)), stage=0), ValueError, r"shape \(4, 3\), got shape \(3, 3\)"),
        (lambda e: e.send(np.zeros((1, 3)), env_ids=[9]), ValueError, r"env_ids must be in \[0, 8\), got \[9\]"),
        (lambda e: e.send(np.zeros((2, 3)), env_ids=[1, 1]), ValueError, "distinct"),
        (lambda e: e.send(np.zeros((4, 3))), ValueError, "exactly one of stage= or env_ids="),
        (lambda e: e.recv(stage=0), RuntimeError, r"recv\(stage=0\) without send\(stage=0\)"),
        (lambda e: e.recv(max_batch=2), RuntimeError, r"recv\(\) without send"),
        (lambda e: e.reset(options={"reset_mask": np.zeros(8, bool)}), ValueError, "at least one env"),
        (lambda e: e.reset(options={"reset_mask": [True] * 8}), ValueError, "bool numpy array of shape"),
        (lambda e: e.reset(seed=[1, 2]), ValueError, "8 seeds, got 2"),
    ],
)
def test_bad_input_is_refused_before_dispatch_and_the_env_stays_usable(random_envs, call, error, match):
    random_envs.reset(seed=0)
    with pytest.raises(error, match=match):
        call(random_envs)
    assert len(random_envs.in_flight()) == 0  # nothing was dispatched
    obs, reward, *_ = random_envs.step(np.zeros((8, 3), np.float32))
    assert reward.shape == (8,)


def test_sending_a_stage_twice_is_refused(random_envs):
    random_envs.reset(seed=0)
    random_envs.send(np.zeros((4, 3)), stage=0)
    with pytest.raises(RuntimeError, match=r"envs \[0, 1, 2, 3\] still have actions in flight"):
        random_envs.send(np.zeros((4, 3)), stage=0)
    random_envs.recv(stage=0)


def test_call_get_attr_set_attr(random_envs):
    assert random_envs.get_attr("max_len") == (12,) * 8
    random_envs.set_attr("max_len", list(range(1, 9)))
    assert random_envs.get_attr("max_len") == tuple(range(1, 9))
    spaces = random_envs.call("observation_space")
    assert spaces[0] == random_envs.single_observation_space


def test_construction_errors():
    with pytest.raises(ValueError, match="num_envs must be a multiple"):
        PipelineVectorEnv([RandomLengthEnv] * 6, num_workers=4)
    with pytest.raises(ValueError, match="empty"):
        PipelineVectorEnv([])
    with pytest.raises(ValueError, match="fork"):
        PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1, context="fork")
    with pytest.raises(WorkerError, match=r"failed to build its envs: ZeroDivisionError"):
        PipelineVectorEnv([lambda: 1 / 0] * 2, num_workers=2)
    assert child_pids() == []
    assert fastenv_segments() == []


def test_close_is_idempotent_and_leaves_nothing_behind():
    envs = PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2)
    pids = envs.worker_pids
    assert set(pids) <= set(child_pids())
    assert len(fastenv_segments()) == 1
    envs.reset(seed=0)
    envs.close()
    envs.close()
    assert not set(pids) & set(child_pids())
    assert fastenv_segments() == []
    with pytest.raises(RuntimeError, match="closed"):
        envs.step(np.zeros((4, 3)))


def test_exception_inside_a_worker_is_raised_with_its_traceback_and_nothing_leaks():
    # Env 0 raises on its third step; worker 0 steps envs 0 and 2 as one batch, worker 1 envs 1 and 3.
    fns = [lambda: GateEnv(raise_at=3), GateEnv, GateEnv, GateEnv]
    with PipelineVectorEnv(fns, num_workers=2) as envs:
        pids = envs.worker_pids
        envs.reset(seed=0)
        envs.step(np.zeros((4, 1)))
        envs.step(np.zeros((4, 1)))
        with pytest.raises(WorkerError, match=r"(?s)env 0 raised in worker 0: RuntimeError: GateEnv failed on purpose at step 3.*worker traceback.*Traceback") as caught:
            envs.step(np.zeros((4, 1)))
        # Only the failed envs are reset: envs 1 and 3 stay where that step took them.
        obs, _ = envs.reset(options={"reset_mask": np.array([True, False, True, False])})
        assert obs[:, 0].tolist() == [0.0, 3.0, 0.0, 3.0]
        err = caught.value
        obs, reward, term, trunc, infos = err.results
        assert err.failed_env_ids.tolist() == [0, 2] and err.valid.tolist() == [False, True, False, True]
        assert obs[:, 0].tolist() == [2.0, 3.0, 2.0, 3.0]  # envs 1 and 3 stepped; 0 and 2: what the caller last saw
        assert reward.tolist() == [0.0, 1.0, 0.0, 1.0] and not term.any() and not trunc.any() and infos == {}
        obs, reward, *_ = envs.step(np.zeros((4, 1)))
        assert obs[:, 0].tolist() == [1.0, 4.0, 1.0, 4.0] and reward.tolist() == [1.0] * 4
    assert not set(pids) & set(child_pids())
    assert fastenv_segments() == []


def test_killed_worker_is_restarted_and_its_envs_reported_truncated(tmp_path):
    gate = tmp_path / "gate"
    envs = PipelineVectorEnv([lambda g=str(gate): GateEnv(gate=g)] * 4, num_workers=2, step_timeout=60)
    try:
        envs.reset(seed=0)
        obs, *_ = envs.step(np.zeros((4, 1)))
        gate.touch()  # the next steps wait inside the workers
        envs.send(np.zeros((4, 1)), env_ids=[0, 1, 2, 3])
        old = envs.worker_pids
        os.kill(old[1], signal.SIGKILL)  # worker 1 (envs 1 and 3) dies mid-step
        gate.unlink()
        got = {}
        while len(got) < 4:
            o, r, term, trunc, infos = envs.recv(max_batch=4, timeout=30)
            for pos, gid in enumerate(infos["env_ids"].tolist()):
                got[gid] = (o[pos], r[pos], term[pos], trunc[pos], infos.get("_worker_restarted", np.zeros(len(r), bool))[pos], infos)
        assert envs.worker_pids[0] == old[0] and envs.worker_pids[1] != old[1]
        for gid in (1, 3):
            o, r, term, trunc, restarted, infos = got[gid]
            assert restarted and trunc and not term and r == 0.0
            pos = infos["env_ids"].tolist().index(gid)
            np.testing.assert_array_equal(infos["final_obs"][pos], obs[gid])  # last observation seen
            np.testing.assert_array_equal(o, [0.0])  # a fresh episode
        for gid in (0, 2):
            assert got[gid][3] == False and got[gid][1] == 1.0  # noqa: E712
        # the rollout goes on
        obs, reward, term, trunc, _ = envs.step(np.zeros((4, 1)))
        assert not trunc.any() and reward.tolist() == [1.0] * 4
    finally:
        envs.close()
    assert fastenv_segments() == []


def test_stuck_worker_is_killed_after_step_timeout(tmp_path):
    gate = tmp_path / "gate"
    envs = PipelineVectorEnv([lambda g=str(gate): GateEnv(gate=g)] * 2, num_workers=2, step_timeout=1.0)
    try:
        envs.reset(seed=0)
        old = envs.worker_pids
        gate.touch()  # every step now waits on the gate: both workers go silent
        envs.send(np.zeros((2, 1)), env_ids=[0, 1])
        seen = {}
        while len(seen) < 2:
            _, reward, term, trunc, infos = envs.recv(max_batch=2, timeout=30)
            for pos, gid in enumerate(infos["env_ids"].tolist()):
                seen[gid] = (bool(trunc[pos]), bool(term[pos]), bool(infos["_worker_restarted"][pos]), reward[pos])
        assert seen == {0: (True, False, True, 0.0), 1: (True, False, True, 0.0)}
        assert not set(old) & set(envs.worker_pids)  # both were replaced
        gate.unlink()
        _, reward, _, trunc, _ = envs.step(np.zeros((2, 1)))
        assert reward.tolist() == [1.0, 1.0] and not trunc.any()
    finally:
        envs.close()


def test_dynamic_batching_serves_ready_envs_first(tmp_path):
    gate = tmp_path / "gate"
    fns = [lambda g=str(gate): GateEnv(gate=g), GateEnv, lambda g=str(gate): GateEnv(gate=g), GateEnv]
    envs = PipelineVectorEnv(fns, num_workers=2)
    try:
        envs.reset(seed=0)
        gate.touch()  # envs 0 and 2 (both on worker 0) wait; envs 1 and 3 do not
        envs.send(np.zeros((4, 1)), env_ids=[0, 1, 2, 3])
        _, _, _, _, infos = envs.recv(max_batch=2)
        assert sorted(infos["env_ids"].tolist()) == [1, 3]
        envs.send(np.zeros((2, 1)), env_ids=[1, 3])
        _, _, _, _, infos = envs.recv(max_batch=4, timeout=0.2)  # 0 and 2 still held: partial batch
        assert sorted(infos["env_ids"].tolist()) == [1, 3]
        gate.unlink()
        _, _, _, _, infos = envs.recv(max_batch=4)
        assert sorted(infos["env_ids"].tolist()) == [0, 2]
    finally:
        envs.close()


@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("envs_per_worker", [1, 2])
def test_shared_physics_keeps_simulated_time_per_action(stages, envs_per_worker):
    # Several envs per worker share its world: each stage's sub-step advances it once for all of
    # them, and the step is divided by S, so an env's simulated time per action is what it was.
    envs = PipelineVectorEnv([make_shared_world_env] * (2 * stages * envs_per_worker), num_workers=2, pipeline_stages=stages)
    try:
        assert envs.shared_physics and envs.physics_scaled == (stages > 1)
        envs.reset(seed=0)
        m = envs.layout.stage_size
        times = {k: [] for k in range(stages)}
        for k in range(stages):
            envs.send(np.zeros((m, 3)), stage=k)
        for _ in range(6):
            for k in range(stages):
                obs, *_ = envs.recv(stage=k)
                times[k].append(obs["sim_time"][:, 0].copy())
                envs.send(np.zeros((m, 3)), stage=k)
        for k in range(stages):
            deltas = np.diff(np.array(times[k]), axis=0)
            # one action of an env = one base physics step of simulated time, whatever S is
            np.testing.assert_allclose(deltas, 0.01, rtol=1e-9)
    finally:
        envs.close()


def test_a_shared_world_advances_once_per_sub_step_and_envs_not_stepped_hold_their_targets():
    from fakes import make_chunked_shared_world_env

    # 4 envs in one worker's world, 2 stages, chunks of 3.
    with PipelineVectorEnv([make_chunked_shared_world_env] * 4, num_workers=1, pipeline_stages=2) as envs:
        envs.reset(seed=0)
        envs.send(np.full((2, 3, 3), 1.0), stage=0)
        obs, *_ = envs.recv(stage=0)
        assert obs["world_steps"][:, 0].tolist() == [3, 3]  # 3 sub-steps, not 3 per env
        envs.send(np.full((2, 3, 3), 2.0), stage=1)
        obs, *_ = envs.recv(stage=1)
        assert obs["world_steps"][:, 0].tolist() == [6, 6]
        logs = envs.apply(lambda env: np.array(env.unwrapped.adapter.target_log))
        for gid, log in enumerate(logs):
            assert log.shape == (6, 3)
            mine = 1.0 if gid < 2 else 2.0
            # stage 0's envs act during the first 3 world steps and hold 1.0 during stage 1's
            expected = [mine] * 6 if gid < 2 else [0.0] * 3 + [mine] * 3
            np.testing.assert_array_equal(log[:, 0], expected)


def test_per_env_final_info_for_cleanrl_style_loops():
    envs = PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2, info_format="per_env")
    try:
        envs.reset(seed=3)
        ended = 0
        for _ in range(30):
            _, _, term, trunc, infos = envs.step(np.zeros((4, 3), np.float32))
            if "final_info" in infos:
                assert infos["final_info"].dtype == object and infos["final_info"].shape == (4,)
                for i, info in enumerate(infos["final_info"]):
                    if term[i] or trunc[i]:
                        assert isinstance(info, dict) and info["t"] >= 1
                        ended += 1
                    else:
                        assert info is None
        assert ended > 4
    finally:
        envs.close()
    with pytest.raises(ValueError, match="info_format must be"):
        PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1, info_format="list")


def _wait_until_workers_idle(envs, files, timeout=60.0):
    """Block (no assertion on time) until every step has written its file and every worker sleeps."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(f.exists() for f in files):
            states = [Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] for pid in envs.worker_pids]
            if all(state == "S" for state in states):
                return
        time.sleep(0.01)
    raise AssertionError("the workers did not finish their steps")


class _FlagEnv(CountdownEnv):
    """CountdownEnv that writes a file when it steps (so a test can wait for the step to finish)."""

    def __init__(self, folder: str, index: int) -> None:
        super().__init__(length=100)
        self.folder, self.index = folder, index

    def step(self, action):
        out = super().step(action)
        Path(self.folder, f"{self.index}-{self.t}").touch()
        return out


def test_recv_returns_every_ready_env_up_to_max_batch(tmp_path):
    fns = [lambda i=i, d=str(tmp_path): _FlagEnv(d, i) for i in range(8)]
    with PipelineVectorEnv(fns, num_workers=2) as envs:
        envs.reset(seed=0)
        envs.send(np.zeros((8, 1)), env_ids=np.arange(8))
        _wait_until_workers_idle(envs, [tmp_path / f"{i}-1" for i in range(8)])
        _, reward, _, _, infos = envs.recv(max_batch=8, timeout=0)
        assert sorted(infos["env_ids"].tolist()) == list(range(8))  # all 8 were ready: all 8 come
        assert reward.tolist() == [1.0] * 8
        envs.send(np.zeros((8, 1)), env_ids=np.arange(8))
        _wait_until_workers_idle(envs, [tmp_path / f"{i}-2" for i in range(8)])
        _, _, _, _, infos = envs.recv(max_batch=5, timeout=0)
        assert len(infos["env_ids"]) == 5  # up to max_batch ...
        _, _, _, _, rest = envs.recv(max_batch=8, timeout=0)
        assert sorted(infos["env_ids"].tolist() + rest["env_ids"].tolist()) == list(range(8))  # ... and the rest next


def test_partial_reset_delivers_the_in_flight_results_of_other_envs():
    # Env 0 and 1 truncate on the step in flight; resetting envs 2 and 3 meanwhile must not drop
    # their transitions (truncation, final observation).
    with PipelineVectorEnv([lambda: CountdownEnv(length=1)] * 4, num_workers=2) as envs:
        envs.reset(seed=0)
        envs.send(np.zeros((2, 1)), env_ids=[0, 1])
        obs, infos = envs.reset(seed=5, options={"reset_mask": np.array([False, False, True, True])})
        assert infos["_start"].tolist() == [False, False, True, True]
        got = {}
        while len(got) < 2:
            _, reward, term, trunc, infos = envs.recv(max_batch=2)
            for pos, gid in enumerate(infos["env_ids"].tolist()):
                got[gid] = (float(reward[pos]), bool(trunc[pos]), infos["final_obs"][pos].tolist(), infos["final_info"]["t"][pos])
        assert got == {0: (1.0, True, [1.0], 1), 1: (1.0, True, [1.0], 1)}


@pytest.mark.parametrize("how", ["env_ids", "stage"])
def test_reset_of_an_env_in_flight_is_refused(how):
    with PipelineVectorEnv([lambda: CountdownEnv(length=5)] * 4, num_workers=2, pipeline_stages=2) as envs:
        envs.reset(seed=0)
        if how == "env_ids":
            envs.send(np.zeros((1, 1)), env_ids=[1])
        else:
            envs.send(np.zeros((2, 1)), stage=0)
        with pytest.raises(RuntimeError, match=r"reset\(\): envs \[(0, )?1\] still have actions in flight; recv\(\) them first"):
            envs.reset(seed=0)
        with pytest.raises(RuntimeError, match="still have actions in flight"):
            envs.reset(options={"reset_mask": np.array([False, True, False, False])})
        # nothing was lost: the result is still there
        out = envs.recv(max_batch=4) if how == "env_ids" else envs.recv(stage=0)
        assert out[1].tolist() == ([1.0] if how == "env_ids" else [1.0, 1.0])


def test_chunk_keys_are_at_the_top_level_for_every_env_on_every_step():
    # The README's recipe reads infos["chunk_discount"] on every step, ended episodes included.
    from fastenv.returns import gae

    with PipelineVectorEnv([lambda: make_chunked_fake(chunk=3, gamma=0.5, truncate_at=7)] * 4, num_workers=2) as envs:
        envs.reset(seed=0)
        ended = 0
        for _ in range(6):
            obs, reward, term, trunc, infos = envs.step(np.zeros((4, 3, 3), np.float32))
            assert infos["_chunk_discount"].all() and infos["_chunk_steps"].all() and infos["_chunk_rewards"].all()
            np.testing.assert_array_equal(infos["chunk_discount"], 0.5 ** infos["chunk_steps"])
            if trunc.any():
                ended += int(trunc.sum())
                # the same as the step's own info, which Gymnasium moves to final_info
                np.testing.assert_array_equal(infos["chunk_steps"][trunc], infos["final_info"]["chunk_steps"][trunc])
                assert infos["chunk_steps"][trunc].tolist() == [1] * int(trunc.sum())  # 7 = 3 + 3 + 1
        assert ended == 8
        rewards = np.ones((2, 4))
        gae(rewards, np.zeros((2, 4)), np.zeros((2, 4), bool), np.zeros((2, 4), bool), np.zeros(4),
            discounts=np.stack([infos["chunk_discount"]] * 2))


def test_a_restart_reports_an_invented_transition_that_returns_can_leave_out(tmp_path):
    # The action of an env whose worker died never ran: the transition is marked
    # worker_restarted, carries the chunk keys of a step in which nothing ran, and gae(valid=...)
    # leaves it out.
    from fastenv.returns import gae

    with PipelineVectorEnv([lambda: make_chunked_fake(chunk=2, gamma=0.9, truncate_at=50)] * 2, num_workers=2) as envs:
        before, _ = envs.reset(seed=0)
        obs, *_ = envs.step(np.zeros((2, 2, 3), np.float32))
        os.kill(envs.worker_pids[1], signal.SIGKILL)
        after, reward, term, trunc, infos = envs.step(np.zeros((2, 2, 3), np.float32))
        assert infos["worker_restarted"].tolist() == [False, True] and infos["_worker_restarted"].tolist() == [False, True]
        assert reward.tolist() == [3 + 0.9 * 4, 0.0] and trunc.tolist() == [False, True] and not term.any()
        assert infos["chunk_steps"].tolist() == [2, 0] and infos["chunk_discount"].tolist() == [0.9**2, 1.0]
        assert infos["_final_obs"].tolist() == [False, True]
        assert_same(infos["final_obs"][1], {k: v[1] for k, v in obs.items()})  # where the caller last saw it
        assert infos["final_info"]["worker_restarted"][1] and infos["final_info"]["chunk_steps"][1] == 0
        assert after["state"][1] == 0  # a fresh episode
        valid = ~infos["worker_restarted"][None]
        adv, ret = gae(reward[None], np.array([[1.0, 2.0]]), term[None], trunc[None], np.array([3.0, 4.0]),
                       final_values=np.array([[0.0, 2.0]]), discounts=infos["chunk_discount"][None], valid=valid)
        assert adv[0, 1] == 0.0 and ret[0, 1] == 2.0


def test_the_env_that_raised_is_named_and_the_others_of_its_batch_have_no_result():
    fns = [GateEnv, GateEnv, lambda: GateEnv(raise_at=2), GateEnv]
    with PipelineVectorEnv(fns, num_workers=2) as envs:  # worker 0 steps envs 0 and 2 as one batch
        envs.reset(seed=0)
        envs.step(np.zeros((4, 1)))
        with pytest.raises(WorkerError, match=r"(?s)env 2 raised in worker 0: RuntimeError: GateEnv failed on purpose at step 2\n\(envs \[0, 2\] have no result") as caught:
            envs.step(np.zeros((4, 1)))
        message = str(caught.value).split("--- worker traceback ---")[0]
        assert "env 1" not in message and "env 3" not in message and "[0, 2]" in message
        assert "reset_mask" in message  # how to continue
        err = caught.value
        assert err.failed_env_ids.tolist() == [0, 2] and err.env_ids.tolist() == [0, 1, 2, 3]
        obs, reward, *_ = err.results
        assert obs[:, 0].tolist() == [1.0, 2.0, 1.0, 2.0] and reward.tolist() == [0.0, 1.0, 0.0, 1.0]
        with pytest.raises(RuntimeError, match=r"step\(\): envs \[0, 2\] have no result of their last step .*reset them first"):
            envs.step(np.zeros((4, 1)))
        assert len(envs.in_flight()) == 0  # refused before anything was sent
        obs, _ = envs.reset(seed=0, options={"reset_mask": np.array([True, False, True, False])})
        assert obs[:, 0].tolist() == [0.0, 2.0, 0.0, 2.0]
        obs, reward, *_ = envs.step(np.zeros((4, 1)))
        assert obs[:, 0].tolist() == [1.0, 3.0, 1.0, 3.0] and reward.tolist() == [1.0] * 4


@pytest.mark.parametrize("how", ["step", "stage", "env_ids"])
def test_a_worker_error_delivers_the_other_envs_transitions_and_skips_none(how):
    # Env 2 raises on its third step. Envs draw from their generators on every step, so a
    # transition the caller did not get, or a step repeated, changes everything after it.
    fns = [NoisyEnv, NoisyEnv, lambda: NoisyEnv(raise_at=3), NoisyEnv]
    # Worker 0 steps envs 0 and 2 as one batch in step(); a stage (2, 3) or an env_ids send steps env 2 alone.
    failed = [0, 2] if how == "step" else [2]
    with PipelineVectorEnv(fns, num_workers=2, pipeline_stages=2 if how == "stage" else 1) as envs:
        envs.reset(seed=7)
        alone = {i: Alone(NoisyEnv, 7 + i) for i in range(4)}
        seen = {i: [] for i in range(4)}  # what the caller got of each env, in order
        want = {i: [] for i in range(4)}  # the same env stepped by itself with the same actions
        rng = np.random.default_rng(0)
        for t in range(7):
            actions = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
            # max_batch=4: the recv that raises holds every env, the healthy ones too
            got, errors = step_every_env(envs, actions, how, max_batch=4)
            for i in range(4):
                if i in got:
                    seen[i].append(got[i])
                if i not in failed or t != 2:
                    want[i].append(alone[i].step(actions[i]))
            if t != 2:
                assert errors == []
                continue
            assert len(errors) == 1 and f"(envs {failed} have no result" in str(errors[0])
            error = errors[0]
            # Only the failed envs are reset (seeded anew); the others go on from the step that raised.
            after_reset, _ = envs.reset(seed=100, options={"reset_mask": np.isin(np.arange(4), failed)})
            for i in failed:
                alone[i] = Alone(NoisyEnv, 100 + i)
                seen[i], want[i] = [], []
            newest = {i: alone[i].obs for i in range(4)}
        for i in range(4):
            for k, (a, b) in enumerate(zip(seen[i], want[i])):
                assert_same(a, b, f"env {i} transition {k}")
            assert len(seen[i]) == len(want[i]), f"env {i}: {len(seen[i])} transitions, {len(want[i])} stepped"
        for i in range(4):  # the reset returned the healthy envs' newest observation
            assert_same(get_row(after_reset, i), newest[i], f"env {i}'s observation after the reset")
        assert error.failed_env_ids.tolist() == failed
        assert error.valid.tolist() == [i not in failed for i in error.env_ids.tolist()]

_BOX = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
ACTION_SPACES = {
    "box": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "discrete": gym.spaces.Discrete(5),
    "dict": gym.spaces.Dict({"arm": _BOX, "grip": gym.spaces.Discrete(2), "gear": gym.spaces.Box(0, 9, (2,), np.int64)}),
    "tuple": gym.spaces.Tuple((_BOX, gym.spaces.MultiDiscrete([3, 4]))),
    "chunk": None,  # ActionChunk(chunk=2) over the Box env: actions (2, 3)
}
# Per round, the dtype a caller gives float leaves / integer leaves in. float64 values are drawn
# so that float32 cannot hold them; int64 for a float Box and float64 for an integer Box are
# dtypes the shared buffers cannot hold exactly (they travel with the step command).
FLAVOURS = [(np.float64, np.int64), (np.float32, np.int32), (np.float16, np.uint8), (np.int64, np.int16), (np.float64, np.float64)]


def _recorder(name):
    from fakes import ActionRecorderEnv

    from fastenv import ActionChunk

    if name == "chunk":
        return ActionChunk(ActionRecorderEnv(), chunk=2)
    return ActionRecorderEnv(ACTION_SPACES[name])


def _leaf_actions(space, n, flavour, rng):
    if isinstance(space, gym.spaces.Dict):
        return {key: _leaf_actions(sub, n, flavour, rng) for key, sub in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_leaf_actions(sub, n, flavour, rng) for sub in space.spaces)
    floats, ints = flavour
    shape = (n, *space.shape)
    if isinstance(space, gym.spaces.Box) and space.dtype.kind == "f":
        if np.dtype(floats).kind != "f":
            return rng.integers(-1, 2, shape).astype(floats)
        return (rng.uniform(-1, 1, shape) + 1e-9).astype(floats)  # float64: not a float32 value
    if isinstance(space, gym.spaces.Box):  # an integer Box; floats given for it stay floats
        return (rng.integers(0, 9, shape) + (0.5 if np.dtype(ints).kind == "f" else 0)).astype(ints)
    if np.dtype(ints).kind == "f":
        ints = np.int64  # Discrete actions must be integers (refused otherwise)
    high = space.n if isinstance(space, gym.spaces.Discrete) else space.nvec
    return (rng.integers(0, 2**31, shape) % high).astype(ints)


@pytest.mark.parametrize("name", list(ACTION_SPACES))
def test_each_env_receives_its_action_row_unchanged_as_in_sync_vector_env(name):
    """An env gets the caller's dtype and exact values, whichever way it is stepped.

    Numpy arrays only: a list of Python ints for a Discrete reaches the env as np.int64, where
    SyncVectorEnv passes the ints themselves.
    """
    make = functools.partial(_recorder, name)
    sync = SyncVectorEnv([make] * 4, autoreset_mode=SAME_STEP)
    with PipelineVectorEnv([make] * 4, num_workers=2, pipeline_stages=2) as envs:
        envs.reset(seed=0)
        sync.reset(seed=0)
        rng = np.random.default_rng(0)
        for r in range(2 * len(FLAVOURS)):
            actions = _leaf_actions(envs.single_action_space, 4, FLAVOURS[r % len(FLAVOURS)], rng)
            sync.step(actions)
            how = ("step", "stage", "env_ids")[r % 3]
            _, errors = step_every_env(envs, actions, how)
            assert errors == []
        received = envs.apply(lambda env: env.unwrapped.received)
        for i, (got, ref) in enumerate(zip(received, (env.unwrapped.received for env in sync.envs))):
            assert len(got) == len(ref) > 0
            for k, (a, b) in enumerate(zip(got, ref)):
                assert_same(a, b, f"env {i} action {k}")


# -- one object, Gymnasium's contracts (issue 49) --------------------------------------------------
def test_the_vector_env_holds_its_worker_pool_rather_than_mixing_it_in(random_envs):
    assert PipelineVectorEnv.__bases__ == (VectorEnv,)
    pool = random_envs._pool
    assert isinstance(pool, WorkerPool) and random_envs.layout is pool.layout
    assert (random_envs.num_workers, random_envs.pipeline_stages, random_envs.spin_wait) == (2, 2, pool.spin_wait)
    random_envs.reset(seed=0)
    random_envs.send(np.zeros((4, 3)), stage=1)
    assert [pool.envs[i].status for i in (0, 4)] == [EnvStatus.IDLE, EnvStatus.PENDING]
    random_envs.recv(stage=1)
    assert pool.envs[4].status is EnvStatus.IDLE


def test_misuse_raises_gymnasiums_vector_env_errors(random_envs):
    random_envs.reset(seed=0)
    random_envs.send(np.zeros((4, 3)), stage=0)
    with pytest.raises(gym.error.AlreadyPendingCallError, match=r"send\(stage=0\): envs \[0, 1, 2, 3\] still have actions in flight"):
        random_envs.send(np.zeros((4, 3)), stage=0)
    with pytest.raises(gym.error.AlreadyPendingCallError, match=r"step\(\): envs \[0, 1, 2, 3\] still have actions in flight"):
        random_envs.step(np.zeros((8, 3)))
    with pytest.raises(gym.error.AlreadyPendingCallError, match=r"reset\(\): envs \[0, 1, 2, 3\]"):
        random_envs.reset()
    random_envs.recv(stage=0)
    with pytest.raises(gym.error.NoAsyncCallError, match=r"recv\(stage=1\) without send\(stage=1\)"):
        random_envs.recv(stage=1)
    with pytest.raises(gym.error.NoAsyncCallError, match=r"recv\(\) without send\(env_ids=\.\.\.\)"):
        random_envs.recv()
    with pytest.raises(RuntimeError, match="without send"):  # what fastenv raised before: caught as ever
        random_envs.recv()


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda e: e.step(np.zeros((7, 3), np.float32)), r"actions must have shape \(8, 3\), got shape \(7, 3\)"),
        (lambda e: e.step(np.full((8, 3), "x")), "real-valued array"),
        (lambda e: e.send(np.zeros((3, 3)), stage=0), r"shape \(4, 3\), got shape \(3, 3\)"),
        (lambda e: e.send(np.zeros((1, 3)), env_ids=[0, 1]), r"shape \(2, 3\), got shape \(1, 3\)"),
        (lambda e: e.reset(options={"reset_mask": np.ones(8, np.int64)}), r"reset_mask'\] must be a bool numpy array"),
    ],
)
def test_a_batch_of_the_wrong_count_or_dtype_is_a_type_error(random_envs, call, match):
    random_envs.reset(seed=0)
    with pytest.raises(TypeError, match=match) as caught:
        call(random_envs)
    assert isinstance(caught.value, ValueError)  # what fastenv raised before
    assert len(random_envs.in_flight()) == 0


def test_any_use_after_close_raises_closed_environment_error():
    envs = PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1)
    envs.reset(seed=0)
    envs.close()
    calls = [
        lambda e: e.step(np.zeros((2, 3), np.float32)),
        lambda e: e.reset(seed=0),
        lambda e: e.send(np.zeros((1, 3)), env_ids=[0]),
        lambda e: e.recv(),
        lambda e: e.get_attr("max_len"),
        lambda e: e.set_attr("max_len", 3),
        lambda e: e.call("render"),
        lambda e: e.apply(len),
        lambda e: e.set_pipeline_stages(2),
        lambda e: e.start_profile(),
    ]
    for call in calls:
        with pytest.raises(gym.error.ClosedEnvironmentError, match="this vector env is closed"):
            call(envs)
    with pytest.raises(RuntimeError, match="closed"):
        envs.step(np.zeros((2, 3), np.float32))
    assert envs.in_flight().tolist() == []  # nothing is in flight in a closed env (as before)
    envs.close()
    assert envs.closed


class _PickyEnv(GateEnv):
    """A GateEnv whose reset raises ValueError when told to, and whose ``raise_at``-th step raises KeyError."""

    def reset(self, *, seed=None, options=None):
        if options and options.get("refuse"):
            raise ValueError("this env refuses the reset")
        return super().reset(seed=seed)

    def step(self, action):
        if self.raise_at is not None and self.t + 1 == self.raise_at:
            raise KeyError("a missing key")
        return super().step(action)


def test_an_envs_builtin_error_arrives_as_that_error_and_a_worker_error():
    # Worker 0 holds envs 0 and 2, worker 1 envs 1 and 3; only env 0 raises.
    fns = [functools.partial(_PickyEnv, raise_at=2), GateEnv, GateEnv, GateEnv]
    with PipelineVectorEnv(fns, num_workers=2) as envs:
        with pytest.raises(ValueError, match=r"reset failed for envs \[0\]: ValueError: this env refuses the reset") as caught:
            envs.reset(seed=0, options={"refuse": True})
        assert isinstance(caught.value, WorkerError)
        envs.reset(seed=0)
        envs.step(np.zeros((4, 1)))
        with pytest.raises(KeyError) as caught:
            envs.step(np.zeros((4, 1)))
        err = caught.value
        assert isinstance(err, WorkerError) and str(err).startswith("env 0 raised in worker 0: KeyError: 'a missing key'\n")
        assert err.failed_env_ids.tolist() == [0, 2] and err.valid.tolist() == [False, True, False, True]
        assert err.results[0][:, 0].tolist() == [1.0, 2.0, 1.0, 2.0]  # envs 1 and 3 stepped


def test_a_missing_attribute_is_an_attribute_error(random_envs):
    with pytest.raises(AttributeError, match="no_such_attribute") as caught:
        random_envs.get_attr("no_such_attribute")
    assert isinstance(caught.value, WorkerError)
    with pytest.raises(AttributeError, match="no_such_method"):
        random_envs.call("no_such_method", 1)
    assert random_envs.get_attr("max_len") == (12,) * 8  # the workers carry on


def test_np_random_seed_is_each_envs_as_in_sync_vector_env(random_envs):
    ref = SyncVectorEnv([RandomLengthEnv] * 8, autoreset_mode=SAME_STEP)
    unseeded = random_envs.np_random_seed  # as Gymnasium's: each env draws one at first use
    assert len(unseeded) == 8 and all(isinstance(s, int) and s >= 0 for s in unseeded)
    random_envs.reset(seed=42)
    ref.reset(seed=42)
    assert random_envs.np_random_seed == ref.np_random_seed == tuple(range(42, 50))
    assert [g.bit_generator.state for g in random_envs.np_random] == [g.bit_generator.state for g in ref.np_random]
    random_envs.reset()  # an unseeded reset keeps the seeds
    assert random_envs.np_random_seed == tuple(range(42, 50))


def test_vector_options_are_the_vector_envs_keywords():
    from fastenv.vector.factory import VECTOR_OPTIONS as from_factory

    assert VECTOR_OPTIONS is from_factory
    assert VECTOR_OPTIONS == tuple(inspect.signature(PipelineVectorEnv.__init__).parameters)[2:]
    assert {"num_workers", "layout", "layout_resolver", "render_devices"} <= set(VECTOR_OPTIONS)


def test_the_vector_layer_imports_only_the_layers_below_it():
    allowed = ("fastenv.vector", "fastenv.core", "fastenv._validation", "fastenv._deps", "fastenv.machine", "fastenv.gpus")
    for path in sorted(Path(fastenv.vector.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fastenv"):
                names = [f"fastenv.{a.name}" for a in node.names] if node.module == "fastenv" else [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("fastenv")]
            else:
                continue
            outside = [name for name in names if not name.startswith(allowed)]
            assert not outside, f"vector/{path.name} imports {outside}"


def test_a_worker_runs_action_chunks_in_one_executor_through_their_batch_spec():
    from fakes import FakeAdapter

    from fastenv import SimEnv
    from fastenv.vector.worker import batch_executor
    from fastenv.wrappers.action import ActionChunk

    chunked = [ActionChunk(SimEnv(FakeAdapter()), chunk=3, gamma=0.5) for _ in range(2)]
    batch, executor = batch_executor(chunked)
    assert batch.envs == [env.env for env in chunked] and (executor.chunk, executor.gamma) == (3, 0.5)

    class Logged(ActionChunk):  # a subclass may do more in its step than the executor does
        pass

    class Forwarding:  # a user's wrapper that forwards every attribute: its own step must still run
        def __init__(self, env):
            self.env = env

        def __getattr__(self, name):
            return getattr(self.env, name)

    others = [
        [ActionChunk(SimEnv(FakeAdapter()), chunk=3), ActionChunk(SimEnv(FakeAdapter()), chunk=2)],
        [Logged(SimEnv(FakeAdapter()), chunk=3) for _ in range(2)],
        [gym.wrappers.RecordEpisodeStatistics(ActionChunk(SimEnv(FakeAdapter()), chunk=3)) for _ in range(2)],
        [Forwarding(ActionChunk(SimEnv(FakeAdapter()), chunk=3)) for _ in range(2)],
    ]
    for envs in others:  # each env stepped as it is
        batch, executor = batch_executor(envs)
        assert batch.envs == envs and executor.chunk is None


class _ScalarsEnv(SpaceEnv):
    """Observes samples of a space with Box leaves of shape () (float and integer) and a Discrete;
    episodes of ``length`` steps."""

    SPACE = gym.spaces.Dict(
        {
            "x": gym.spaces.Box(-1.0, 1.0, (), np.float32),
            "k": gym.spaces.Box(0, 255, (), np.uint8),
            "n": gym.spaces.Discrete(4),
            "v": gym.spaces.Box(-1.0, 1.0, (2,), np.float64),
        }
    )

    def __init__(self, space=None, length=2):
        super().__init__(self.SPACE if space is None else space, gym.spaces.Discrete(2), length)


@pytest.mark.parametrize("how", ["step", "stage"])
@pytest.mark.parametrize("space", [None, gym.spaces.Box(-1.0, 1.0, (), np.float64)], ids=["dict", "box"])
def test_a_scalar_box_final_obs_is_a_0d_array_as_in_sync_vector_env(space, how):
    # A float Box of shape () is observed as a 0-d array (Box.sample's): final_obs keeps it so, as
    # SyncVectorEnv does; an integer Box's or a Discrete's numpy scalar and a row stay as they were.
    fns = [functools.partial(_ScalarsEnv, space)] * 2
    with PipelineVectorEnv(fns, num_workers=1) as envs:
        ref = SyncVectorEnv(fns, autoreset_mode=SAME_STEP)
        envs.reset(seed=3)
        ref.reset(seed=3)
        for _ in range(2):
            if how == "step":
                infos = envs.step(np.zeros(2, np.int64))[4]
            else:
                envs.send(np.zeros(2, np.int64), stage=0)
                infos = envs.recv(stage=0)[4]
            ref_infos = ref.step(np.zeros(2, np.int64))[4]
        assert infos["_final_obs"].tolist() == [True, True]
        for i in range(2):
            ours, want = infos["final_obs"][i], ref_infos["final_obs"][i]
            assert_same(ours, want, f"final_obs[{i}]")
            pairs = [(ours, want)] if space is not None else [(ours[k], want[k]) for k in want]
            for a, b in pairs:
                assert type(a) is type(b) and np.shape(a) == np.shape(b) and a.dtype == b.dtype, (a, b)
            leaf = ours if space is not None else ours["x"]
            assert isinstance(leaf, np.ndarray) and leaf.shape == () and leaf.base is None  # a copy, not a view
        ref.close()


class _CustomSpace(gym.Space):
    """A space none of fastenv's arrays can hold."""

    def sample(self, mask=None, probability=None):
        return 0

    def contains(self, x):
        return x == 0

    def __eq__(self, other):
        return isinstance(other, _CustomSpace)


class _CustomSpaceEnv(SpaceEnv):
    def __init__(self, where):
        custom = gym.spaces.Dict({"ok": gym.spaces.Discrete(2), "odd": _CustomSpace()})
        observation = custom if where == "observation" else _ScalarsEnv.SPACE
        action = custom if where == "action" else gym.spaces.Discrete(2)
        super().__init__(observation, action, length=2)


@pytest.mark.parametrize("where", ["observation", "action"])
def test_a_space_shared_memory_cannot_hold_is_a_value_error_at_construction(where):
    # As AsyncVectorEnv(shared_memory=True) refuses a custom space: a ValueError naming the space,
    # the workers closed, no shared memory left.
    with pytest.raises(ValueError, match=rf"(?s)the envs' {where}_space holds .*_CustomSpace.*shared memory holds only Box") as caught:
        PipelineVectorEnv([functools.partial(_CustomSpaceEnv, where)] * 2, num_workers=2)
    assert not isinstance(caught.value, WorkerError)
    assert child_pids() == []
    assert fastenv_segments() == []


def test_close_with_actions_in_flight_warns_and_closes():
    # As AsyncVectorEnv.close with a pending call: a UserWarning that names the envs, then a clean close.
    envs = PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2, pipeline_stages=2)
    pids = envs.worker_pids
    envs.reset(seed=0)
    envs.send(np.zeros((2, 3), np.float32), stage=1)
    with pytest.warns(UserWarning, match=r"Calling `close` while envs \[2, 3\] have actions in flight"):
        envs.close()
    assert envs.closed
    assert not set(pids) & set(child_pids())
    assert fastenv_segments() == []
    quiet = PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1)
    quiet.reset(seed=0)
    quiet.send(np.zeros((2, 3), np.float32), stage=0)
    quiet.recv(stage=0)  # received: nothing in flight, no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.close()
        quiet.close()


def test_the_pools_settings_are_set_on_the_vector_env_and_checked_as_the_constructor_checks_them():
    with PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1, step_timeout=30.0) as envs:
        assert (envs.step_timeout, envs.max_restarts, envs.info_format) == (30.0, 3, "gymnasium")
        envs.step_timeout, envs.startup_timeout, envs.max_restarts, envs.spin_wait = 45, 90, 1, 0
        assert (envs.step_timeout, envs.startup_timeout, envs.max_restarts, envs.spin_wait) == (45.0, 90.0, 1, 0.0)
        assert (envs._pool.step_timeout, envs._pool.max_restarts) == (45.0, 1)  # what the pool reads
        with pytest.raises(ValueError, match="step_timeout must be > 0 seconds, got 0"):
            envs.step_timeout = 0
        with pytest.raises(ValueError, match="spin_wait must be >= 0 seconds, got -1"):
            envs.spin_wait = -1
        with pytest.raises(ValueError, match="info_format must be 'gymnasium' or 'per_env', got 'dicts'"):
            envs.info_format = "dicts"
        envs.info_format = "per_env"
        envs.reset(seed=0)
        for _ in range(30):  # episodes of at most 12 steps
            infos = envs.step(np.zeros((2, 3), np.float32))[4]
            if "final_info" in infos:
                assert isinstance(infos["final_info"], np.ndarray) and infos["final_info"].dtype == object
                break
        else:
            pytest.fail("no episode ended")
    with pytest.raises(ValueError, match="startup_timeout must be > 0 seconds, got -2"):
        PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1, startup_timeout=-2)
