"""The vector env on Ray: a real local cluster (a head and a second node, on loopback)."""

import os
import re
import signal

import gymnasium as gym
import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
ray = need("ray")

# One local Ray cluster at a time on this machine: the Ray tests (and the docs' Ray snippets) run in one test process.
pytestmark = pytest.mark.xdist_group("ray")

from fakes import ActionRecorderEnv, GateEnv, NoisyEnv, RandomLengthEnv  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402
from helpers import Alone, assert_same, step_every_env, without_legacy_keys  # noqa: E402

from fastenv.core.arrays import get_row  # noqa: E402
from fastenv.vector import PipelineVectorEnv, WorkerError  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    import cloudpickle
    import fakes
    from ray.cluster_utils import Cluster

    # Ray's workers do not see this folder: ship the fake envs by value.
    cloudpickle.register_pickle_by_value(fakes)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    c.add_node(num_cpus=2)
    c.wait_for_nodes()
    ray.init(address=c.address, logging_level="warning", log_to_driver=False)
    yield c
    ray.shutdown()
    c.shutdown()


def ray_envs(fns, **kwargs):
    options = {"num_cpus": 0.5, "placement_strategy": "SPREAD", **kwargs.pop("ray_options", {})}
    return PipelineVectorEnv(fns, backend="ray", ray_options=options, **kwargs)


def test_workers_spread_over_both_nodes_and_match_sync_vector_env(cluster):
    envs = ray_envs([RandomLengthEnv] * 4, num_workers=2, pipeline_stages=2)
    ref = SyncVectorEnv([RandomLengthEnv] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        nodes = envs.apply(lambda env: __import__("ray").get_runtime_context().get_node_id())
        assert len(set(nodes)) == 2  # SPREAD put the two workers on the two nodes
        assert_same(envs.reset(seed=9), ref.reset(seed=9))
        rng = np.random.default_rng(0)
        finals = 0
        for t in range(40):
            actions = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
            if t % 2:
                out = envs.step(actions)
            else:  # the stage API gives the same results
                for k in (1, 0):
                    envs.send(actions[2 * k : 2 * k + 2], stage=k)
                parts = [envs.recv(stage=k) for k in (0, 1)]
                out = (
                    {key: np.concatenate([p[0][key] for p in parts]) for key in parts[0][0]},
                    np.concatenate([p[1] for p in parts]),
                    np.concatenate([p[2] for p in parts]),
                    np.concatenate([p[3] for p in parts]),
                    None,
                )
            ref_out = ref.step(actions)
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
                assert_same(a, b, f"step {t} {name}")
            if out[4] is not None:
                infos = without_legacy_keys(out[4])
                assert_same(infos, ref_out[4], f"step {t} infos")
                finals += int(infos["_final_obs"].sum()) if "final_obs" in infos else 0
        assert finals > 3
    finally:
        envs.close()


def test_dynamic_batching_on_ray(cluster, tmp_path):
    gate = tmp_path / "gate"
    fns = [lambda g=str(gate): GateEnv(gate=g), GateEnv]
    envs = ray_envs(fns, num_workers=2)
    try:
        envs.reset(seed=0)
        gate.touch()  # env 0 waits inside its actor
        envs.send(np.zeros((2, 1)), env_ids=[0, 1])
        _, _, _, _, infos = envs.recv(max_batch=2, timeout=0.5)
        assert infos["env_ids"].tolist() == [1]
        gate.unlink()
        _, reward, _, _, infos = envs.recv(max_batch=2)
        assert infos["env_ids"].tolist() == [0] and reward.tolist() == [1.0]
    finally:
        envs.close()


def test_killed_actor_is_restarted_and_its_envs_reported_truncated(cluster, tmp_path):
    gate = tmp_path / "gate"
    envs = ray_envs([lambda g=str(gate): GateEnv(gate=g)] * 2, num_workers=2, step_timeout=60)
    try:
        envs.reset(seed=0)
        obs, *_ = envs.step(np.zeros((2, 1)))
        gate.touch()
        envs.send(np.zeros((2, 1)), env_ids=[0, 1])
        old = envs.worker_pids
        os.kill(old[1], signal.SIGKILL)  # the actor of env 1 dies mid-step
        gate.unlink()
        seen = {}
        while len(seen) < 2:
            o, r, term, trunc, infos = envs.recv(max_batch=2, timeout=60)
            for pos, gid in enumerate(infos["env_ids"].tolist()):
                restarted = bool(infos.get("_worker_restarted", np.zeros(len(r), bool))[pos])
                seen[gid] = (bool(trunc[pos]), restarted, float(r[pos]))
                if restarted:
                    np.testing.assert_array_equal(infos["final_obs"][pos], obs[gid])
        assert seen == {0: (False, False, 1.0), 1: (True, True, 0.0)}
        assert envs.worker_pids[0] == old[0] and envs.worker_pids[1] != old[1]
        _, reward, _, trunc, _ = envs.step(np.zeros((2, 1)))
        assert reward.tolist() == [1.0, 1.0] and not trunc.any()
    finally:
        envs.close()


def test_stuck_actor_is_replaced_after_step_timeout(cluster, tmp_path):
    gate = tmp_path / "gate"
    envs = ray_envs([lambda g=str(gate): GateEnv(gate=g)] * 2, num_workers=2, step_timeout=1.0)
    try:
        envs.reset(seed=0)
        old = envs.worker_pids
        gate.touch()
        envs.send(np.zeros((2, 1)), env_ids=[0, 1])
        seen = set()
        while len(seen) < 2:
            _, _, _, trunc, infos = envs.recv(max_batch=2, timeout=60)
            assert trunc.all() and infos["_worker_restarted"].all()
            seen |= set(infos["env_ids"].tolist())
        assert not set(old) & set(envs.worker_pids)
        gate.unlink()
        _, reward, _, _, _ = envs.step(np.zeros((2, 1)))
        assert reward.tolist() == [1.0, 1.0]
    finally:
        envs.close()


def test_exception_in_an_actor_is_raised_with_its_traceback_and_the_other_envs_results(cluster):
    # Env 0 raises on its second step; env 1 (the other actor) goes on without a reset, and its
    # transitions are those of the env stepped alone: none skipped.
    envs = ray_envs([lambda: NoisyEnv(raise_at=2), NoisyEnv], num_workers=2)
    try:
        envs.reset(seed=3)
        alone = Alone(NoisyEnv, 4)
        seen, want = [], []
        rng = np.random.default_rng(0)
        for t, how in enumerate(["step", "step", "env_ids", "step", "env_ids"]):
            actions = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
            got, errors = step_every_env(envs, actions, how)
            want.append(alone.step(actions[1]))
            if 1 in got:
                seen.append(got[1])
            if t == 1:
                assert len(errors) == 1
                assert re.search(r"(?s)env 0 raised in worker 0: RuntimeError: NoisyEnv failed on purpose at step 2\n\(envs \[0\] have no result.*Traceback", str(errors[0]))
                obs, _ = envs.reset(options={"reset_mask": np.array([True, False])})
                assert_same(get_row(obs, 1), alone.obs, "env 1 after the reset")  # its newest observation
            else:
                assert errors == []
        for k, (a, b) in enumerate(zip(seen, want)):
            assert_same(a, b, f"env 1 transition {k}")
        assert len(seen) == len(want)
    finally:
        envs.close()


def test_each_env_receives_its_action_row_unchanged_on_ray(cluster):
    sync = SyncVectorEnv([ActionRecorderEnv] * 2, autoreset_mode=AutoresetMode.SAME_STEP)
    envs = ray_envs([ActionRecorderEnv] * 2, num_workers=2)
    try:
        envs.reset(seed=0)
        sync.reset(seed=0)
        rng = np.random.default_rng(0)
        # float64 that float32 cannot hold, float32, and int64 (sent along with the command)
        for t, dtype in enumerate([np.float64, np.float32, np.int64, np.float64]):
            actions = (rng.uniform(-1, 1, (2, 3)) + 1e-9).astype(dtype)
            sync.step(actions)
            assert step_every_env(envs, actions, ("step", "env_ids")[t % 2])[1] == []
        received = envs.apply(lambda env: env.unwrapped.received)
        for i, (got, ref) in enumerate(zip(received, (env.unwrapped.received for env in sync.envs))):
            assert len(got) == len(ref) == 4
            for k, (a, b) in enumerate(zip(got, ref)):
                assert_same(a, b, f"env {i} action {k}")
    finally:
        envs.close()


def test_bad_options_and_startup_failure(cluster):
    with pytest.raises(ValueError, match="placement_strategy must be one of"):
        ray_envs([RandomLengthEnv] * 2, num_workers=1, ray_options={"placement_strategy": "RANDOM"})
    with pytest.raises(ValueError, match=r"unknown ray_options \['cpus'\]"):
        ray_envs([RandomLengthEnv] * 2, num_workers=1, ray_options={"cpus": 1})
    with pytest.raises(WorkerError, match="failed to build its envs"):
        ray_envs([lambda: 1 / 0] * 2, num_workers=1)


@pytest.mark.libero
@pytest.mark.big_memory
def test_libero_on_ray_matches_local_processes(cluster):
    kwargs = dict(suite="libero_10", task_id=0, chunk=4, camera_size=32, max_episode_steps=12)
    on_ray = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, backend="ray", ray_options={"num_cpus": 0.5}, **kwargs)
    local = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, **kwargs)
    try:
        assert_same(on_ray.reset(seed=4), local.reset(seed=4))
        actions = np.random.default_rng(0).uniform(-1, 1, (4, 2, 4, 7)).astype(np.float32)
        for a in actions:  # 12-step episodes: the third chunk ends them (final obs + autoreset)
            out, ref = on_ray.step(a), local.step(a)
            for x, y in zip(out[:4], ref[:4]):
                assert_same(x, y)
            assert_same(without_legacy_keys(out[4]), without_legacy_keys(ref[4]))
    finally:
        on_ray.close()
        local.close()


RAY_USER_SCRIPT = """
import cloudpickle, numpy as np, ray, sys
sys.path.insert(0, {tests!r})
import fakes
from fakes import RandomLengthEnv
cloudpickle.register_pickle_by_value(fakes)  # Ray's workers do not see the tests folder
from fastenv.vector import PipelineVectorEnv

def make(n=2):
    return PipelineVectorEnv([RandomLengthEnv] * n, num_workers=1, backend="ray", ray_options={{"num_cpus": 0.5}})

first = make()              # fastenv starts Ray: nothing else in this process had
assert ray.is_initialized()
@ray.remote
def square(x):
    return x * x
second = make()
first.close()               # other code (a task, a second vector env) still uses Ray
assert ray.is_initialized() and ray.get(square.remote(7)) == 49
second.reset(seed=0)
second.step(np.zeros((2, 3), np.float32))
second.close()
assert ray.get(square.remote(3)) == 9
print("ray still up")
"""


def test_closing_never_shuts_down_a_ray_runtime_others_use(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "user.py"
    script.write_text(RAY_USER_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ray still up" in out.stdout
