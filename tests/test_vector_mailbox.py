"""The workers' mailbox: steps and their replies in shared memory, a wait that spins then sleeps.

The same data as Gymnasium's SyncVectorEnv whichever way a message travels (its slot or the
pipe) and whichever way a wait ends (a reply while spinning, a wake from sleep, a dead worker);
the codec and the order of messages on their own; a worker that sleeps between steps, a step
slower than the spin, a worker killed while ``step()`` waits, a worker whose vector env died.
"""

import contextlib
import functools
import multiprocessing as mp
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from fakes import GateEnv, QuietEnv, RandomLengthEnv
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers import assert_same, without_legacy_keys
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastenv._validation import batch_action_checker, check_batch_actions
from fastenv.core.infos import row_info
from fastenv.vector import PipelineVectorEnv, WorkerError
from fastenv.vector import mailbox as mb
from fastenv.vector import worker as w
from fastenv.vector.shared import SharedArrays

SAME_STEP = AutoresetMode.SAME_STEP


def cartpole():
    return gym.make("CartPole-v1")


def quiet(max_len=6):
    return QuietEnv(max_len=max_len)


class SlowQuietEnv(QuietEnv):
    """QuietEnv whose steps take longer than the spin of the tests that use it."""

    def step(self, action):
        time.sleep(0.003)
        return super().step(action)


@contextlib.contextmanager
def killed_inside_its_step(pid, gate, entered):
    """Open ``gate`` for the block; once a GateEnv has entered its gated step, kill ``pid``."""
    gate.touch()

    def kill_inside():
        while not entered.exists():
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_inside)
    killer.start()
    try:
        yield
    finally:
        killer.join()
        gate.unlink()


def random_actions(space, n, rng):
    if isinstance(space, spaces.Discrete):
        return rng.integers(0, space.n, n)
    return rng.uniform(-1, 1, (n, *space.shape)).astype(space.dtype)


def per_env_infos(infos, n):
    """Gymnasium's infos in fastenv's ``info_format="per_env"``: final_info an array of per-env dicts."""
    if "final_info" not in infos:
        return infos
    out = dict(infos)
    mask = infos["_final_info"]
    out["final_info"] = np.array([row_info(infos["final_info"], i) if mask[i] else None for i in range(n)], dtype=object)
    return out


def assert_steps_like_sync(envs, make, n, steps, seed, *, sleep_every=0, rng_seed=0):
    """Step ``envs`` and SyncVectorEnv(SAME_STEP) over the same envs side by side; returns the episodes that ended."""
    ref = SyncVectorEnv([make] * n, autoreset_mode=SAME_STEP)
    try:
        obs, info = envs.reset(seed=seed)
        ref_obs, ref_info = ref.reset(seed=seed)
        assert_same(obs, ref_obs)
        assert_same(info, ref_info)
        rng = np.random.default_rng(rng_seed)
        ended = 0
        for t in range(steps):
            if sleep_every and t % sleep_every == sleep_every - 1:
                time.sleep(3 * mb.CHECK_PEER_EVERY)  # long enough for every process to fall asleep
            actions = random_actions(envs.single_action_space, n, rng)
            out, ref_out = envs.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
                assert_same(a, b, f"step {t} {name}")
            expected = ref_out[4] if envs.info_format == "gymnasium" else per_env_infos(ref_out[4], n)
            assert_same(without_legacy_keys(out[4]), expected, f"step {t} infos")
            ended += int(np.sum(ref_out[2] | ref_out[3]))
        return ended
    finally:
        ref.close()


# -- the vector env ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [cartpole, quiet], ids=["cartpole", "dict-obs"])
@pytest.mark.parametrize("num_workers", [1, 2, 4])
@pytest.mark.parametrize("info_format", ["gymnasium", "per_env"])
def test_steps_without_infos_equal_gymnasiums_sync_vector_env(make, num_workers, info_format):
    # Empty infos: every step and reply travels in the slots, and step() keeps no per-env record.
    with PipelineVectorEnv([make] * 8, num_workers=num_workers, info_format=info_format) as envs:
        ended = assert_steps_like_sync(envs, make, 8, 80, seed=3)
    assert ended > 10  # many episodes ended on the way, each with its final observation


@pytest.mark.parametrize("spin_wait", [0.0, 1e-4])
def test_every_wait_asleep_gives_the_same_steps(spin_wait):
    # spin_wait=0: every wait sleeps on its semaphore; 1e-4 with sleeps between steps: the
    # workers fall asleep and wake for the next command.
    with PipelineVectorEnv([quiet] * 4, num_workers=2, spin_wait=spin_wait) as envs:
        assert assert_steps_like_sync(envs, quiet, 4, 24, seed=5, sleep_every=4) > 3


def test_a_step_slower_than_the_spin_gives_the_same_steps():
    # The vector env stops spinning before the replies come: it sleeps, as it does for slow simulators.
    with PipelineVectorEnv([SlowQuietEnv] * 4, num_workers=2, spin_wait=1e-4) as envs:
        assert assert_steps_like_sync(envs, SlowQuietEnv, 4, 20, seed=6) > 2


def test_steps_with_infos_and_without_mix_in_one_run():
    # Worker 0's envs (the even ones) report no infos (the slots), worker 1's do (pickled
    # replies): a whole step takes worker 0's reply on its own and hands worker 1's to the
    # records; stages, env_ids and whole steps each still give SyncVectorEnv's data.
    fns = [quiet, RandomLengthEnv] * 4
    with PipelineVectorEnv(fns, num_workers=2, pipeline_stages=2) as envs:
        ref = SyncVectorEnv(fns, autoreset_mode=SAME_STEP)
        envs.reset(seed=7)
        ref.reset(seed=7)
        rng = np.random.default_rng(7)
        for t in range(30):
            actions = rng.uniform(-1, 1, (8, 3)).astype(np.float32)
            ref_out = ref.step(actions)
            if t % 3 == 0:
                out = envs.step(actions)
                assert_same(without_legacy_keys(out[4]), ref_out[4], f"step {t} infos")
            elif t % 3 == 1:
                envs.send(actions[4:], stage=1)
                envs.send(actions[:4], stage=0)
                parts = [envs.recv(stage=0), envs.recv(stage=1)]
                out = tuple(np.concatenate([p[i] for p in parts]) for i in (1, 2, 3))
                out = ({"x": np.concatenate([p[0]["x"] for p in parts]), "t": np.concatenate([p[0]["t"] for p in parts])}, *out)
            else:
                envs.send(actions, env_ids=np.arange(8))
                got = {}
                while len(got) < 8:
                    o, r, term, trunc, infos = envs.recv(max_batch=8)
                    for pos, gid in enumerate(infos["env_ids"].tolist()):
                        got[gid] = ({"x": o["x"][pos], "t": o["t"][pos]}, r[pos], term[pos], trunc[pos])
                out = (
                    {"x": np.stack([got[i][0]["x"] for i in range(8)]), "t": np.array([got[i][0]["t"] for i in range(8)])},
                    *(np.array([got[i][k] for i in range(8)]) for k in (1, 2, 3)),
                )
            for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
                assert_same(a, b, f"step {t} {name}")
        ref.close()


@pytest.mark.parametrize("spin_wait", [2e-4, 5.0], ids=["asleep", "spinning"])
def test_a_worker_killed_while_step_waits_is_replaced_and_its_envs_reported_truncated(tmp_path, spin_wait):
    # With a long spin_wait the vector env is still spinning when the worker dies: the spin
    # watches for dead workers too, and step() returns as it does after a sleep.
    gate, entered = tmp_path / "gate", tmp_path / "entered"
    fns = [functools.partial(GateEnv, gate=str(gate), entered=str(entered)) if i == 1 else GateEnv for i in range(4)]
    with PipelineVectorEnv(fns, num_workers=2, spin_wait=spin_wait, step_timeout=120) as envs:
        envs.reset(seed=0)
        zeros = np.zeros((4, 1), np.float32)
        obs, *_ = envs.step(zeros)
        victim = envs.worker_pids[1]  # envs 1 and 3; env 1 waits at the gate inside its step
        with killed_inside_its_step(victim, gate, entered):
            new_obs, reward, term, trunc, infos = envs.step(zeros)
        assert victim not in envs.worker_pids
        assert reward.tolist() == [1.0, 0.0, 1.0, 0.0] and not term.any() and trunc.tolist() == [False, True, False, True]
        assert infos["_worker_restarted"].tolist() == [False, True, False, True]
        np.testing.assert_array_equal(infos["final_obs"][1], obs[1])  # the episode cut where the caller saw it
        assert new_obs[:, 0].tolist() == [2.0, 0.0, 2.0, 0.0]  # envs 1 and 3 start again
        _, reward, _, trunc, _ = envs.step(zeros)  # the rollout goes on
        assert reward.tolist() == [1.0] * 4 and not trunc.any()


def test_a_worker_dead_once_too_often_is_reported_with_its_exit_code(tmp_path):
    gate, entered = tmp_path / "gate", tmp_path / "entered"
    envs = PipelineVectorEnv([functools.partial(GateEnv, gate=str(gate), entered=str(entered))] * 2, num_workers=1, max_restarts=0)
    try:
        envs.reset(seed=0)
        with killed_inside_its_step(envs.worker_pids[0], gate, entered):
            with pytest.raises(WorkerError, match=r"worker 0 died \(exit code -9\); worker 0 failed 1 times \(max_restarts=0\)"):
                envs.step(np.zeros((2, 1), np.float32))
        assert envs.closed
    finally:
        envs.close()


def test_a_worker_whose_vector_env_process_died_exits(tmp_path):
    # No close(): the process that held the vector env is gone, its pipes hang up, and each
    # worker (asleep on its semaphore, or spinning) sees it and exits.
    script = tmp_path / "dies.py"
    script.write_text(textwrap.dedent("""
        import os
        import gymnasium as gym
        from fastenv.vector import PipelineVectorEnv, WorkerError

        if __name__ == "__main__":
            envs = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, spin_wait=1.0)
            envs.reset(seed=0)
            envs.step([0, 1])
            print(*envs.worker_pids, flush=True)
            os._exit(0)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2

    def running(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    deadline = time.monotonic() + 120  # a bound on waiting, not a timing claim
    while any(running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in pids)


def test_discrete_actions_out_of_range_are_refused_and_the_env_stays_usable():
    with PipelineVectorEnv([cartpole] * 4, num_workers=1) as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match=r"actions\[2\] = 2 is outside Discrete\(2\)"):
            envs.step(np.array([0, 1, 2, 0]))
        with pytest.raises(ValueError, match="integer array of shape"):
            envs.step(np.array([0.0, 1.0, 1.0, 0.0]))
        with pytest.raises(ValueError, match="integer array of shape"):
            envs.step(np.array([0, 1, 1]))
        assert len(envs.in_flight()) == 0
        _, reward, *_ = envs.step(np.array([0, 1, 1, 0]))
        assert reward.tolist() == [1.0] * 4


# -- hypothesis: random layouts, spins and schedules against SyncVectorEnv -----------------------------
@settings(max_examples=int(os.environ.get("FASTENV_EXAMPLES", "60")) // 3, deadline=None, suppress_health_check=list(HealthCheck), derandomize=bool(os.environ.get("CI")))
@given(
    num_workers=st.integers(1, 3),
    per_worker=st.integers(1, 3),
    max_len=st.integers(1, 8),
    spin_wait=st.sampled_from([0.0, 2e-4]),
    info_format=st.sampled_from(["gymnasium", "per_env"]),
    seed=st.integers(0, 1000),
    steps=st.integers(1, 25),
)
def test_random_layouts_of_quiet_envs_equal_sync_vector_env(num_workers, per_worker, max_len, spin_wait, info_format, seed, steps):
    make = functools.partial(quiet, max_len)
    n = num_workers * per_worker
    with PipelineVectorEnv([make] * n, num_workers=num_workers, spin_wait=spin_wait, info_format=info_format) as envs:
        assert_steps_like_sync(envs, make, n, steps, seed=seed, rng_seed=seed)


# -- the codec and the order of messages ------------------------------------------------------------
def test_a_step_command_travels_in_its_slot_when_it_needs_no_pickling():
    slot = np.full(mb.slot_length(4), mb.NO_TAG, np.int64)
    message = (w.STEP, 7, (1, 3, 5), {}, False, None)
    assert mb.encode_step(slot, 2, message)
    assert slot[0] == 2 and mb.decode_step(slot, w.STEP) == message
    per_env = (w.STEP, 8, (5,), {}, True, None)
    assert mb.encode_step(slot, 3, per_env) and mb.decode_step(slot, w.STEP) == per_env
    # An env to restart, actions to carry in another dtype, more envs than the slot holds: pickled.
    assert not mb.encode_step(slot, 4, (w.STEP, 9, (1,), {1: 0}, False, None))
    assert not mb.encode_step(slot, 4, (w.STEP, 9, (1,), {}, False, {"actions": np.dtype(np.float32)}))
    assert not mb.encode_step(slot, 4, (w.STEP, 9, (1, 2, 3, 4, 5), {}, False, None))
    assert slot[0] == 3  # still the last command it took


def test_a_reply_travels_in_its_slot_only_without_infos():
    slot = np.full(mb.slot_length(4), mb.NO_TAG, np.int64)
    for tag, message in enumerate([
        (w.STEP, 7, []),  # no env to report
        (w.STEP, 7, [(3, {}, {}), (5, {}, {})]),  # two episodes ended, empty final infos
        (w.ENV, 8, (5, {}, None)),
        (w.ENV, 9, (5, {}, {})),
    ]):
        assert mb.encode_reply(slot, tag, message, w.STEP, w.ENV)
        assert slot[0] == tag and mb.decode_reply(slot, w.STEP, w.ENV) == message
    for message in [
        (w.STEP, 10, [(3, {"t": 1}, None)]),
        (w.STEP, 10, [(3, {}, {"t": 1})]),
        (w.ENV, 10, (5, {"t": 1}, None)),
        (w.ERROR, 10, [3], "RuntimeError: boom", "traceback", 3),
        (w.RESULT, 10, [None]),
    ]:
        assert not mb.encode_reply(slot, 9, message, w.STEP, w.ENV)


def test_messages_arrive_in_order_whichever_way_each_travels():
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    inbox, outbox, wake = ctx.Semaphore(0), ctx.Semaphore(0), ctx.Semaphore(0)
    vector = mb.Mailbox(parent, inbox, outbox, w.STEP, w.ENV)
    worker = mb.WorkerMailbox(child, inbox, outbox, wake, 0.0, w.STEP, w.ENV)
    slots = np.zeros((2, mb.slot_length(2)), np.int64)
    vector.attach(slots[0], slots[1])
    worker.attach(slots[0], slots[1])
    sent = [
        (w.STEP, 0, (0, 1), {}, False, None),  # the slot
        (w.STEP, 1, (0, 1), {}, False, None),  # the slot holds command 0, not yet answered: the pipe
        (w.RESET, 2, [0], [None], None),  # never the slot
    ]
    for message in sent:
        vector.send(message)
    assert slots[0][0] == 0  # only the first went in the slot
    replies = [(w.STEP, 0, [(1, {}, {})]), (w.STEP, 1, []), (w.RESET, 2, [(0, {}, None)])]
    for message, reply in zip(sent, replies):
        assert worker.receive() == message
        worker.send(reply)
    # Only the reply to the command that came in the slot used the reply slot.
    assert slots[1][0] == 0
    assert vector.take() == replies
    assert vector.take() == []
    drained = 0
    while wake.acquire(False):
        drained += 1
    assert drained == 3  # a wake token per reply
    # Command 0 answered: the next step may use the slot again.
    vector.send((w.STEP, 3, (1,), {}, False, None))
    assert slots[0][0] == 3 and worker.receive() == (w.STEP, 3, (1,), {}, False, None)
    parent.close()
    child.close()


def test_a_worker_mailbox_gives_none_once_the_vector_env_has_gone():
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    worker = mb.WorkerMailbox(child, ctx.Semaphore(0), ctx.Semaphore(0), ctx.Semaphore(0), 1e-3, w.STEP, w.ENV)
    parent.close()  # as when the vector env's process dies
    assert worker.receive() is None
    child.close()


# -- the pieces under the hot path ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "space, actions, count",
    [
        (spaces.Discrete(3), np.array([0, 2, 1]), 3),
        (spaces.Discrete(3, start=-1), np.array([-1, 1, 0]), 3),
        (spaces.Discrete(3), np.array([0, 3, 1]), 3),  # out of range
        (spaces.Discrete(3), np.array([0, -1, 1]), 3),
        (spaces.Discrete(3), np.array([0.0, 1.0, 1.0]), 3),  # not integers
        (spaces.Discrete(3), np.array([0, 1]), 3),  # a row missing
        (spaces.Discrete(3), [0, 1, 2], 3),
        (spaces.Discrete(3), np.array([True, False, True]), 3),
        (spaces.Discrete(2), np.arange(200) % 2, 200),  # more than the small-batch path takes
        (spaces.Discrete(2), np.arange(200) % 3, 200),
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((3, 2)), 3),
        (spaces.Box(-1, 1, (2,), np.float32), np.full((3, 2), np.nan), 3),
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((3, 3)), 3),
        (spaces.MultiDiscrete([2, 3]), np.array([[0, 2], [1, 0], [1, 1]]), 3),
        (spaces.MultiDiscrete([2, 3]), np.array([[0, 3], [1, 0], [1, 1]]), 3),
    ],
)
def test_a_spaces_action_checker_answers_as_check_batch_actions(space, actions, count):
    try:
        expected = check_batch_actions(actions, space, count)
    except ValueError as exc:
        with pytest.raises(ValueError, match=f"^{re.escape(str(exc))}$"):
            batch_action_checker(space)(actions, count)
    else:
        got = batch_action_checker(space)(actions, count)
        assert type(got) is type(expected) and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "space, actions",
    [
        (spaces.Discrete(3), np.array([0.0, 1.0, 1.0])),  # not integers
        (spaces.Discrete(3), np.array([0, 1])),  # a row missing
        (spaces.Box(-1, 1, (2,), np.float32), np.zeros((2, 2))),
        (spaces.Box(-1, 1, (2,), np.float32), np.full((3, 2), "x")),
        (spaces.MultiBinary(2), np.zeros((3, 2), np.float32)),
        (spaces.Dict({"a": spaces.Discrete(2)}), {"b": np.zeros(3, np.int64)}),
        (spaces.Tuple((spaces.Discrete(2),)), np.zeros(3, np.int64)),
    ],
)
def test_a_batch_of_the_wrong_count_dtype_or_structure_is_a_type_error(space, actions):
    for check in (batch_action_checker(space), lambda a, n: check_batch_actions(a, space, n)):
        with pytest.raises(TypeError) as caught:
            check(actions, 3)
        assert isinstance(caught.value, ValueError)  # what fastenv raised before


def test_an_action_out_of_its_space_stays_a_value_error():
    with pytest.raises(ValueError, match="is outside Discrete") as caught:
        batch_action_checker(spaces.Discrete(3))(np.array([0, 3, 1]), 3)
    assert not isinstance(caught.value, TypeError)


def test_shared_arrays_of_other_row_counts_attach_alike():
    block = SharedArrays([("obs", (3,), np.float32), ("slots", (5,), np.int64, 2)], num_rows=4)
    try:
        assert block.arrays["obs"].shape == (4, 3) and block.arrays["slots"].shape == (2, 5)
        block.arrays["slots"][1] = np.arange(5)
        other = SharedArrays.attach(block.handle())
        assert other.arrays["slots"].shape == (2, 5) and other.arrays["slots"][1].tolist() == [0, 1, 2, 3, 4]
        other.close()
    finally:
        block.close()


class BigRenderEnv(QuietEnv):
    """QuietEnv whose frames and infos are larger than a pipe's buffer (64 KiB)."""

    def render(self):
        return np.full((256, 256, 3), 7, dtype=np.uint8)

    def step(self, action):
        obs, reward, terminated, truncated, _ = super().step(action)
        return obs, reward, terminated, truncated, {"frame": np.zeros(40_000)}


@pytest.mark.parametrize("num_workers", [1, 2])
def test_messages_larger_than_a_pipes_buffer_arrive(num_workers):
    # A pipe message's token comes before the message, so the receiver reads it while it is
    # written; the other way round a worker's large reply and the vector env's wait for its
    # token would hold each other forever.
    envs = PipelineVectorEnv([functools.partial(BigRenderEnv, max_len=4)] * 2, num_workers=num_workers, step_timeout=30)
    try:
        envs.reset(seed=0)
        for _ in range(3):
            _, _, _, _, infos = envs.step(np.zeros(envs.action_space.shape, dtype=envs.single_action_space.dtype))
            assert infos["frame"].shape == (2, 40_000)
            frames = envs.call("render")
            assert len(frames) == 2 and all(f.shape == (256, 256, 3) and f[0, 0, 0] == 7 for f in frames)
    finally:
        envs.close()


def test_a_worker_dead_between_its_token_and_its_message_is_reported_dead():
    # Taking a pipe message's token, the vector env reads the message; a worker gone before it
    # wrote the message is reported as dead (None), not raised as an EOFError.
    parent, child = mp.Pipe()
    outbox = mp.Semaphore(0)
    mailbox = mb.Mailbox(parent, mp.Semaphore(0), outbox, w.STEP, w.ENV)
    outbox.release()
    child.close()
    assert mailbox.take() == [None]


def test_the_overhead_benchmark_times_an_earlier_commit_beside_the_current_code(tmp_path, monkeypatch):
    # bench_vector_overhead.py --before REF: fastenv as committed at REF (git archive of its
    # src/fastenv) timed in the same rounds by a child process that imports that copy, not this one.
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if shutil.which("git") is None or subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    sys.path.insert(0, str(root / "benchmarks"))
    import bench_vector_overhead as bench

    monkeypatch.setattr(bench, "CANDIDATES", {name: build for name, build in bench.CANDIDATES.items()
                                              if name in (bench.BASELINE, bench.FASTENV)})
    payload = bench.main(["--rounds", "1", "--steps", "300", "--before", "HEAD", "--out", str(tmp_path / "v.json")])
    names = [row["vector env"] for row in payload["results"]]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    assert payload["before_commit"] == commit and names[-1] == f"{bench.FASTENV}, before ({commit[:7]})"
    assert all(row["env_steps_per_s"] > 0 for row in payload["results"]) and payload["fastenv_vs_before_per_round"] > 0
    with pytest.raises(RuntimeError, match="not from"):  # a child that imported another fastenv is refused
        bench.child_rate(str(tmp_path / "nowhere"), 1, 250)
