"""Same data, only faster: the vector env against the stock reference, on random configurations.

The reference is written here, independently of fastenv's executor: each env run alone, the
plain env (Gymnasium's ``TimeLimit`` over it) stepped one sub-action at a time, a chunk stopping
where its episode ends, finished episodes reset in the same step as Gymnasium's SyncVectorEnv
does. Hypothesis draws the layout (N, W, S), the chunk size and discount, the episode lengths and
time limits, the schedule (whole steps, pipeline stages in any order, dynamic batching with random
``max_batch``/``timeout``), partial resets (also while other envs are in flight) and worker kills.
Every observation, reward, flag, final observation and info is compared exactly; whole-step
programs are also compared with Gymnasium's ``SyncVectorEnv(SAME_STEP)`` itself, layout included.

The same suites run in Gymnasium's two other autoreset modes: NEXT_STEP (the step after an
episode's end resets the env, its action not run) and DISABLED (the caller resets ended envs
through ``reset_mask``; stepping one first is refused), against the reference in that mode and
``SyncVectorEnv(autoreset_mode=...)``. A deliberately wrong vector env (same-step results passed off
as NEXT_STEP's) is caught by the same comparisons (the negative control).

The layout-independence test runs envs that draw from their generators on every step, in every
layout and schedule, against each env alone. ``FASTENV_EXAMPLES`` sets the number of examples of
the suites, ``FASTENV_LAYOUT_EXAMPLES`` that of the layout test (CI runs the defaults).
"""

from __future__ import annotations

import functools
import os
import re
import signal
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from fakes import NoisyEnv, RandomLengthEnv
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from helpers import assert_same, commit_seed, lift_step_keys
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import fastenv
from fastenv import GymAdapter, SimEnv
from fastenv.core.infos import STEP_KEYS, row_info
from fastenv.vector import PipelineVectorEnv
from fastenv.vector.errors import EpisodeEndedError
from fastenv.vector.pool import EnvStatus

SAME_STEP, NEXT_STEP, DISABLED = AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED

# Examples per property: 60 by default; in CI 30, drawn from a seed that changes with the commit
# (the sample moves from commit to commit and is reproducible from it).
EXAMPLES = int(os.environ.get("FASTENV_EXAMPLES", "30" if os.environ.get("CI") else "60"))
COMMIT_SEED = commit_seed() if os.environ.get("CI") else None


def SUITE(test):  # noqa: N802  (a settings-like decorator)
    test = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))(test)
    return test if COMMIT_SEED is None else seed(COMMIT_SEED)(test)


# -- the envs ------------------------------------------------------------------------------------
def plain_env(max_len: int, limit: int | None) -> gym.Env:
    """The stock env: random-length episodes (seeded), ending by termination or truncation."""
    env = RandomLengthEnv(max_len=max_len)
    return env if limit is None else gym.wrappers.TimeLimit(env, limit)


def fast_env(max_len: int, limit: int | None, chunk: int | None, gamma: float | None, sim: bool) -> gym.Env:
    """The env under test: fastenv's SimEnv (sub-step path) or a plain Gymnasium stack, chunked."""
    if sim:
        env = SimEnv(GymAdapter(RandomLengthEnv(max_len=max_len)), max_episode_steps=limit)
    else:
        env = plain_env(max_len, limit)
    return env if chunk is None else fastenv.wrap(env, chunk=chunk, gamma=gamma)


# -- the reference -------------------------------------------------------------------------------
class Reference:
    """Each env alone, stepped one simulator step at a time; autoreset in ``mode``; restarts.

    SAME_STEP resets an ended env in the step that ended it (final_obs / final_info in its info);
    NEXT_STEP resets it at its next step instead of running that step's action (reward 0, no
    flags, the reset's observation and info); DISABLED never resets it (``ended`` says which
    envs the caller must reset). A worker restart cuts the episode where the caller last saw it
    (reward 0, truncated); with NEXT_STEP / DISABLED the fresh env is reset afterwards, by the
    next step or the caller, seeded as the restart was.
    """

    def __init__(self, make_plain, num_envs: int, num_workers: int, chunk: int | None, gamma: float | None, mode: AutoresetMode = SAME_STEP) -> None:
        self.make_plain, self.n, self.w = make_plain, num_envs, num_workers
        self.chunk, self.gamma, self.mode = chunk, gamma, mode
        self.envs = [make_plain() for _ in range(num_envs)]
        self.last_obs: list = [None] * num_envs  # what the caller last saw of each env
        self.ended = [False] * num_envs  # its last step ended its episode (NEXT_STEP: reset next; DISABLED: by the caller)
        self.cut_seed: list = [None] * num_envs  # a restart's seed, kept for the reset that follows it
        self.pending_restart = [False] * num_envs
        self.restarts = [0] * num_workers
        self.seed_base: int | None = None
        self.compared = 0  # results of the vector env compared with this reference

    def _null_keys(self) -> dict:
        if self.chunk is None:
            return {}
        keys = {"chunk_steps": 0, "chunk_rewards": np.zeros(self.chunk)}
        if self.gamma is not None:
            keys["chunk_discount"] = 1.0
        return keys

    def restart_seed(self, i: int) -> int | None:
        return None if self.seed_base is None else self.seed_base + i + self.n * self.restarts[i % self.w]

    def reset(self, i: int, seed: int | None) -> tuple:
        if self.pending_restart[i]:  # its worker was replaced: a fresh env, seeded as a restart is
            self.envs[i] = self.make_plain()
            self.pending_restart[i] = False
            cut, self.cut_seed[i] = self.cut_seed[i], None
            if seed is None:
                seed = cut if cut is not None else self.restart_seed(i)
        obs, info = self.envs[i].reset(seed=seed)
        self.last_obs[i] = obs
        self.ended[i] = False
        return obs, info

    def kill(self, worker: int) -> None:
        self.restarts[worker] += 1
        for i in range(worker, self.n, self.w):
            self.pending_restart[i] = True
            self.cut_seed[i] = None  # (killed again before its reset: cut again, seeded by this restart)

    def step(self, i: int, action) -> tuple:
        """(obs, reward, terminated, truncated, info); with SAME_STEP, final_obs/final_info in info when ended."""
        if self.mode is not SAME_STEP and self.pending_restart[i] and self.cut_seed[i] is None:
            # The action never ran: the episode is cut at the observation the caller last saw; the
            # fresh env is reset later (its next step or the caller's reset), with this restart's seed.
            self.cut_seed[i] = self.restart_seed(i)
            self.ended[i] = True
            return self.last_obs[i], 0.0, False, True, {**self._null_keys(), "worker_restarted": True}
        assert not (self.mode is DISABLED and self.ended[i]), f"env {i} stepped after its episode ended, not reset"
        if self.mode is NEXT_STEP and self.ended[i]:  # this step resets it; its action is not run
            obs, info = self.reset(i, None)
            return obs, 0.0, False, False, info
        if self.pending_restart[i]:
            final_obs = self.last_obs[i]
            obs, info = self.reset(i, None)
            null = self._null_keys()
            info = {**info, **null, "worker_restarted": True}
            info["final_obs"], info["final_info"] = final_obs, {**null, "worker_restarted": True}
            return obs, 0.0, False, True, info
        env = self.envs[i]
        subs = [action] if self.chunk is None else list(action)
        rewards = np.zeros(len(subs))
        for k, sub in enumerate(subs):
            obs, reward, terminated, truncated, info = env.step(sub)
            rewards[k] = reward
            if terminated or truncated:
                break
        if self.chunk is None:
            total = reward
        else:
            discounts = np.ones(self.chunk) if self.gamma is None else self.gamma ** np.arange(self.chunk, dtype=np.float64)
            total = float(np.sum(rewards if self.gamma is None else rewards * discounts))
            info = {**info, "chunk_steps": k + 1, "chunk_rewards": rewards}
            if self.gamma is not None:
                info["chunk_discount"] = self.gamma ** (k + 1)
        if (terminated or truncated) and self.mode is not SAME_STEP:
            self.ended[i] = True
        elif terminated or truncated:
            final_obs, final_info = obs, info
            obs, reset_info = env.reset()
            info = {**reset_info, **{key: final_info[key] for key in STEP_KEYS if key in final_info}}
            info["final_obs"], info["final_info"] = final_obs, final_info
        self.last_obs[i] = obs
        return obs, total, bool(terminated), bool(truncated), info


def check_rows(out, gids, ref: Reference, actions: dict[int, np.ndarray], where: str) -> None:
    """The vector env's results for ``gids`` against each env run alone."""
    obs, reward, terminated, truncated, infos = out
    for pos, gid in enumerate(gids):
        ref_obs, ref_reward, ref_term, ref_trunc, ref_info = ref.step(gid, actions[gid])
        at = f"{where} env {gid}"
        assert_same({k: v[pos] for k, v in obs.items()}, ref_obs, f"{at} obs")
        assert reward[pos] == ref_reward, f"{at} reward {reward[pos]} != {ref_reward}"
        assert (terminated[pos], truncated[pos]) == (ref_term, ref_trunc), f"{at} flags"
        info = row_info(infos, pos)
        info.pop("env_ids", None)
        assert_same(info, ref_info, f"{at} info")
        ref.compared += 1


# -- the programs --------------------------------------------------------------------------------
def reset_masked(data, envs: PipelineVectorEnv, ref: Reference, sync: SyncVectorEnv | None, mask: np.ndarray, where: str) -> None:
    """Reset the envs of ``mask`` (with a drawn seed, or none) in ``envs``, ``ref`` and ``sync``, comparing them."""
    reseed = data.draw(st.one_of(st.none(), st.integers(0, 2**16)), label="reseed")
    obs, infos = envs.reset(seed=reseed, options={"reset_mask": mask})
    if sync is not None:
        assert_same((obs, infos), sync.reset(seed=reseed, options={"reset_mask": mask.copy()}), f"{where} reset vs SyncVectorEnv")
    if reseed is not None:
        ref.seed_base = reseed
    for i in np.flatnonzero(mask).tolist():
        ref_obs, ref_info = ref.reset(i, None if reseed is None else reseed + i)
        assert_same({k: v[i] for k, v in obs.items()}, ref_obs, f"{where} reset env {i}")
        assert_same(row_info(infos, i), ref_info, f"{where} reset info {i}")


def wait_dead(pid: int) -> None:
    """Until the killed process is gone (so the vector env sees it dead when it next looks)."""
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return
        except OSError:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not die")


def drain(envs: PipelineVectorEnv) -> None:
    """Receive whatever is still in flight, so the next example starts with nothing in flight."""
    for stage in range(envs.pipeline_stages):
        first = envs._pool.envs[envs.layout.stage_envs(stage)[0]]
        if first.status is not EnvStatus.IDLE and not first.by_ids:
            envs.recv(stage=stage)
    while len(envs.in_flight()):
        envs.recv()


def run_program(data, envs: PipelineVectorEnv, ref: Reference, *, rounds: int, kills: bool, sync: SyncVectorEnv | None) -> int:
    """Run a drawn program on ``envs`` and ``ref`` side by side, comparing every result.

    Returns how many env results (resets and steps) were compared.
    """
    try:
        _run_program(data, envs, ref, rounds=rounds, kills=kills, sync=sync)
        return ref.compared
    finally:  # a vector env shared by several examples starts each one with nothing in flight
        drain(envs)


def _run_program(data, envs: PipelineVectorEnv, ref: Reference, *, rounds: int, kills: bool, sync: SyncVectorEnv | None) -> None:
    n, rng = envs.num_envs, np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="action seed"))
    space = envs.single_action_space
    seed = data.draw(st.integers(0, 2**16), label="reset seed")
    obs, infos = envs.reset(seed=seed)
    ref.seed_base = seed
    for i in range(n):
        ref_obs, ref_info = ref.reset(i, seed + i)
        assert_same({k: v[i] for k, v in obs.items()}, ref_obs, f"reset env {i}")
        assert_same(row_info(infos, i), ref_info, f"reset info {i}")
        ref.compared += 1
    if sync is not None:
        assert_same((obs, infos), sync.reset(seed=seed), "reset vs SyncVectorEnv")
    modes = ["step", "step", "reset"] + ([] if sync is not None else ["stages", "dynamic", "dynamic"]) + (["kill"] if kills else [])
    for r in range(rounds):
        mode = data.draw(st.sampled_from(modes), label=f"round {r}")
        actions = rng.uniform(space.low, space.high, (n, *space.shape)).astype(space.dtype)
        per_env = dict(enumerate(actions))
        if ref.mode is DISABLED and mode in ("step", "stages", "dynamic") and any(ref.ended):
            # The caller resets ended envs; stepping them first is refused before any env steps.
            ended = np.array(ref.ended)
            if data.draw(st.booleans(), label="step an ended env first"):
                with pytest.raises(EpisodeEndedError, match=re.escape(f"envs {np.flatnonzero(ended).tolist()} ended their episodes")):
                    envs.step(actions)
                assert len(envs.in_flight()) == 0
            reset_masked(data, envs, ref, sync, ended, f"round {r} (ended envs)")
        if mode == "step":
            out = envs.step(actions)
            if sync is not None:
                sync_out = sync.step(actions)
                assert_same(out[:4], sync_out[:4], f"round {r} vs SyncVectorEnv")
                ours = {k: v for k, v in out[4].items() if k not in ("final_observation", "_final_observation")}
                assert_same(ours, lift_step_keys(sync_out[4], n), f"round {r} infos vs SyncVectorEnv")
            check_rows(out, range(n), ref, per_env, f"round {r} step")
        elif mode == "reset":
            mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="reset mask"))
            mask[data.draw(st.integers(0, n - 1))] = True
            reset_masked(data, envs, ref, sync, mask, f"round {r}")
        elif mode == "stages":
            S = envs.pipeline_stages
            for k in data.draw(st.permutations(range(S)), label="send order"):
                ids = envs.layout.stage_envs(k)
                envs.send(actions[ids], stage=k)
            for k in data.draw(st.permutations(range(S)), label="recv order"):
                ids = envs.layout.stage_envs(k)
                check_rows(envs.recv(stage=k), ids.tolist(), ref, per_env, f"round {r} stage {k}")
        elif mode == "dynamic":
            ids = data.draw(st.permutations(range(n)), label="send order")[: data.draw(st.integers(1, n))]
            envs.send(actions[ids], env_ids=np.array(ids))
            # Which envs arrive in which recv depends on timing: draw the schedule up front so the
            # draws do not depend on it (Hypothesis replays a failing example draw for draw).
            schedule = data.draw(st.lists(st.tuples(st.integers(1, n), st.sampled_from([None, 0.0, 0.002]), st.booleans(), st.integers(0, 2**16)), min_size=n, max_size=n), label="recv schedule")
            waiting, calls = set(ids), 0
            while waiting:
                batch, timeout, reset_idle, pick_seed = schedule[calls % n]
                calls += 1
                idle = sorted(set(range(n)) - waiting)
                if idle and reset_idle:
                    pick = np.random.default_rng(pick_seed).choice(idle, size=1 + pick_seed % len(idle), replace=False).tolist()
                    obs, _ = envs.reset(options={"reset_mask": np.isin(np.arange(n), pick)})
                    for i in pick:
                        assert_same({k: v[i] for k, v in obs.items()}, ref.reset(i, None)[0], f"round {r} reset {i}")
                out = envs.recv(max_batch=batch, timeout=timeout)
                got = out[4]["env_ids"].tolist()
                assert 1 <= len(got) <= batch and set(got) <= waiting
                check_rows(out, got, ref, per_env, f"round {r} dynamic")
                waiting -= set(got)
        elif mode == "kill":
            worker = data.draw(st.integers(0, envs.num_workers - 1), label="killed worker")
            pid = envs.worker_pids[worker]
            os.kill(pid, signal.SIGKILL)
            wait_dead(pid)
            ref.kill(worker)
            envs.get_attr("spec")  # the next command finds it dead and replaces it; the call itself is answered


# -- the suites ----------------------------------------------------------------------------------
@st.composite
def layouts(draw):
    w, s, per = draw(st.integers(1, 3)), draw(st.integers(1, 2)), draw(st.integers(1, 2))
    chunk = draw(st.sampled_from([None, 1, 2, 3, 5]))
    gamma = draw(st.sampled_from([None, 0.9])) if chunk is not None else None
    return dict(
        num_envs=w * s * per, num_workers=w, stages=s, chunk=chunk, gamma=gamma,
        max_len=draw(st.integers(1, 12)), limit=draw(st.sampled_from([None, 2, 5, 9])), sim=draw(st.booleans()),
    )


@SUITE
@given(layout=layouts(), data=st.data())
def test_vector_env_equals_each_env_run_alone(layout, data):
    make = functools.partial(fast_env, layout["max_len"], layout["limit"], layout["chunk"], layout["gamma"], layout["sim"])
    envs = PipelineVectorEnv([make] * layout["num_envs"], num_workers=layout["num_workers"], pipeline_stages=layout["stages"], max_restarts=100)
    try:
        ref = Reference(functools.partial(plain_env, layout["max_len"], layout["limit"]), layout["num_envs"], layout["num_workers"], layout["chunk"], layout["gamma"])
        rounds = data.draw(st.integers(1, 10), label="rounds")
        compared = run_program(data, envs, ref, rounds=rounds, kills=True, sync=None)
        assert compared >= layout["num_envs"]  # every env's first reset at least, then each result
    finally:
        envs.close()


@SUITE
@given(layout=layouts(), data=st.data())
def test_whole_steps_equal_gymnasiums_sync_vector_env(layout, data):
    make = functools.partial(fast_env, layout["max_len"], layout["limit"], layout["chunk"], layout["gamma"], layout["sim"])
    n = layout["num_envs"]
    envs = PipelineVectorEnv([make] * n, num_workers=layout["num_workers"], pipeline_stages=layout["stages"])
    sync = SyncVectorEnv([make] * n, autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        ref = Reference(functools.partial(plain_env, layout["max_len"], layout["limit"]), n, layout["num_workers"], layout["chunk"], layout["gamma"])
        rounds = data.draw(st.integers(1, 10), label="rounds")
        compared = run_program(data, envs, ref, rounds=rounds, kills=False, sync=sync)
        assert compared >= n  # every env's first reset at least, then each result
    finally:
        envs.close()
        sync.close()


# -- the other autoreset modes -------------------------------------------------------------------
# The same programs in NEXT_STEP and DISABLED (a third of the examples each suite runs above: the
# comparisons are the same; what differs is the reference's autoreset and the resets DISABLED asks).
MODE_EXAMPLES = max(EXAMPLES // 3, 1)


def MODE_SUITE(test):  # noqa: N802  (a settings-like decorator)
    test = settings(max_examples=MODE_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))(test)
    return test if COMMIT_SEED is None else seed(COMMIT_SEED)(test)


@MODE_SUITE
@given(layout=layouts(), mode=st.sampled_from([NEXT_STEP, DISABLED]), data=st.data())
def test_next_step_and_disabled_vector_envs_equal_each_env_run_alone(layout, mode, data):
    make = functools.partial(fast_env, layout["max_len"], layout["limit"], layout["chunk"], layout["gamma"], layout["sim"])
    n = layout["num_envs"]
    envs = PipelineVectorEnv([make] * n, num_workers=layout["num_workers"], pipeline_stages=layout["stages"], max_restarts=100, autoreset_mode=mode)
    try:
        assert envs.metadata["autoreset_mode"] is mode
        ref = Reference(functools.partial(plain_env, layout["max_len"], layout["limit"]), n, layout["num_workers"], layout["chunk"], layout["gamma"], mode)
        rounds = data.draw(st.integers(1, 10), label="rounds")
        assert run_program(data, envs, ref, rounds=rounds, kills=True, sync=None) >= n
    finally:
        envs.close()


@MODE_SUITE
@given(layout=layouts(), mode=st.sampled_from([NEXT_STEP, DISABLED]), data=st.data())
def test_next_step_and_disabled_whole_steps_equal_gymnasiums_sync_vector_env(layout, mode, data):
    make = functools.partial(fast_env, layout["max_len"], layout["limit"], layout["chunk"], layout["gamma"], layout["sim"])
    n = layout["num_envs"]
    envs = PipelineVectorEnv([make] * n, num_workers=layout["num_workers"], pipeline_stages=layout["stages"], autoreset_mode=mode)
    sync = SyncVectorEnv([make] * n, autoreset_mode=mode)
    try:
        ref = Reference(functools.partial(plain_env, layout["max_len"], layout["limit"]), n, layout["num_workers"], layout["chunk"], layout["gamma"], mode)
        rounds = data.draw(st.integers(1, 10), label="rounds")
        assert run_program(data, envs, ref, rounds=rounds, kills=False, sync=sync) >= n
    finally:
        envs.close()
        sync.close()


class PassesSameStepOffAsNextStep(PipelineVectorEnv):
    """A deliberately wrong NEXT_STEP vector env: same-step results without their final keys, so the
    transition that ends an episode carries the reset observation as its next observation."""

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = super().step(actions)
        return obs, rewards, terminations, truncations, {k: v for k, v in infos.items() if "final" not in k}


def test_the_comparisons_catch_a_reset_observation_passed_off_as_a_transitions_next_one():
    make = functools.partial(fast_env, 3, None, 2, None, False)
    n, seed_ = 2, 5
    with PassesSameStepOffAsNextStep([make] * n, num_workers=1) as envs:
        ref = Reference(functools.partial(plain_env, 3, None), n, 1, 2, None, NEXT_STEP)
        envs.reset(seed=seed_)
        for i in range(n):
            ref.reset(i, seed_ + i)
        actions = np.zeros((n, *envs.single_action_space.shape), envs.single_action_space.dtype)
        with pytest.raises(AssertionError, match=r"step \d+ env \d+ obs"):
            for t in range(10):  # episodes of at most 3 steps in chunks of 2: one ends within 2 steps
                check_rows(envs.step(actions), range(n), ref, dict(enumerate(actions)), f"step {t}")
        assert any(ref.ended) or ref.compared >= 2


# -- LIBERO --------------------------------------------------------------------------------------
LIBERO = dict(suite="libero_10", task_id=0, camera_size=32, max_episode_steps=6)


@pytest.fixture(scope="module")
def libero_pair():
    """Two chunked LIBERO envs in the vector env (2 workers, 2 stages), and two plain ones alone."""
    from fastenv.envs.libero import make_env

    envs = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=1, pipeline_stages=2, chunk=4, **LIBERO)
    plain = functools.partial(make_env, chunk=None, **LIBERO)
    ref = Reference(plain, 2, 1, 4, None)
    yield envs, ref
    envs.close()
    for env in ref.envs:
        env.close()


@pytest.mark.libero
@settings(max_examples=int(os.environ.get("FASTENV_LIBERO_EXAMPLES", "3")), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(data=st.data())
def test_libero_vector_env_equals_each_env_run_alone(libero_pair, data):
    envs, ref = libero_pair
    run_program(data, envs, ref, rounds=data.draw(st.integers(2, 4), label="rounds"), kills=False, sync=None)


# -- layout independence ---------------------------------------------------------------------------
LAYOUT_ENVS = 4


@pytest.fixture(scope="module")
def noisy_vector_envs():
    """A vector env of 4 ``NoisyEnv`` per worker count, built on first use (stages are set per example)."""
    built: dict[int, PipelineVectorEnv] = {}

    def get(workers: int) -> PipelineVectorEnv:
        if workers not in built:
            built[workers] = PipelineVectorEnv([NoisyEnv] * LAYOUT_ENVS, num_workers=workers)
        return built[workers]

    yield get
    for envs in built.values():
        envs.close()


@settings(
    max_examples=int(os.environ.get("FASTENV_LAYOUT_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=bool(os.environ.get("CI")),
)
@given(data=st.data())
def test_an_envs_trajectory_is_the_same_in_every_layout(noisy_vector_envs, data):
    """Any W, any S, whole steps, stages received in any order while others step, envs sent and
    received one by one in whatever order they finish: each env's trajectory (observations,
    rewards, flags, infos, final observations) is that of the env alone. The envs draw from their
    own generators on every reset and step, seeded by reset(seed=...), unseeded on autoreset."""
    n = LAYOUT_ENVS
    workers = data.draw(st.sampled_from([1, 2, 4]), label="workers")
    stages = data.draw(st.sampled_from([s for s in (1, 2, 4) if n % (workers * s) == 0]), label="stages")
    envs = noisy_vector_envs(workers)
    envs.set_pipeline_stages(stages)
    ref = Reference(NoisyEnv, n, workers, None, None)
    segments = data.draw(
        st.lists(st.tuples(st.sampled_from(["step", "stages", "dynamic", "reset"]), st.integers(1, 4)), min_size=1, max_size=4),
        label="segments",
    )
    # Env i's k-th action is table[k, i] whichever schedule sends it (so timing changes no draw).
    table = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="action seed")).uniform(-1, 1, (17, n, 3)).astype(np.float32)
    count = [0] * n
    sent: dict[int, np.ndarray] = {}

    def send(ids, **where):
        for i in ids:
            sent[i], count[i] = table[count[i], i], count[i] + 1
        envs.send(np.stack([sent[i] for i in ids]), **where)

    seed = data.draw(st.integers(0, 2**16), label="seed")
    try:
        obs, infos = envs.reset(seed=seed)
        for i in range(n):
            ref_obs, ref_info = ref.reset(i, seed + i)
            assert_same({k: v[i] for k, v in obs.items()}, ref_obs, f"reset env {i}")
            assert_same(row_info(infos, i), ref_info, f"reset info {i}")
        for s, (mode, rounds) in enumerate(segments):
            if mode == "step":
                for r in range(rounds):
                    actions = np.stack([table[count[i], i] for i in range(n)])
                    for i in range(n):
                        count[i] += 1
                    check_rows(envs.step(actions), range(n), ref, dict(enumerate(actions)), f"segment {s} step {r}")
            elif mode == "stages":  # each stage is sent again as soon as it is received
                for k in data.draw(st.permutations(range(stages)), label="send order"):
                    send(envs.layout.stage_envs(k).tolist(), stage=k)
                for r in range(rounds):
                    for k in data.draw(st.permutations(range(stages)), label="recv order"):
                        ids = envs.layout.stage_envs(k).tolist()
                        check_rows(envs.recv(stage=k), ids, ref, sent, f"segment {s} round {r} stage {k}")
                        if r < rounds - 1:
                            send(ids, stage=k)
            elif mode == "dynamic":  # each env is sent again as soon as it is received, `rounds` steps each
                order = data.draw(st.permutations(range(n)), label="send order")
                split = data.draw(st.integers(1, n), label="first send")
                send(order[:split], env_ids=order[:split])
                if split < n:
                    send(order[split:], env_ids=order[split:])
                schedule = data.draw(st.lists(st.tuples(st.integers(1, n), st.sampled_from([None, 0.0, 0.002])), min_size=4, max_size=4), label="recv schedule")
                left, calls = dict.fromkeys(range(n), rounds), 0
                while len(envs.in_flight()):
                    max_batch, timeout = schedule[calls % len(schedule)]
                    calls += 1
                    out = envs.recv(max_batch=max_batch, timeout=timeout)
                    got = out[4]["env_ids"].tolist()
                    check_rows(out, got, ref, sent, f"segment {s} recv {calls}")
                    again = [i for i in got if left[i] > 1]
                    for i in got:
                        left[i] -= 1
                    if again:
                        send(again, env_ids=again)
                assert not any(left.values())
            else:  # unseeded: each reset env goes on with its own generator
                mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n), label="reset mask"))
                mask[data.draw(st.integers(0, n - 1), label="surely reset")] = True
                obs, infos = envs.reset(options={"reset_mask": mask})
                for i in np.flatnonzero(mask).tolist():
                    ref_obs, ref_info = ref.reset(i, None)
                    assert_same({k: v[i] for k, v in obs.items()}, ref_obs, f"segment {s} reset env {i}")
                    assert_same(row_info(infos, i), ref_info, f"segment {s} reset info {i}")
        assert ref.compared == sum(count)  # every step of every env was compared
    finally:
        drain(envs)
