"""Tianshou through TianshouVectorEnv: its Collector gathers on fastenv what it gathers on Tianshou's
own DummyVectorEnv over the same envs and seeds, episode ends (mid-chunk, truncated) included."""

import functools

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("tianshou")

from fakes import RandomLengthEnv  # noqa: E402
from helpers import assert_identical  # noqa: E402
from tianshou.algorithm.algorithm_base import Policy, RandomActionPolicy  # noqa: E402
from tianshou.data import Batch, Collector, VectorReplayBuffer  # noqa: E402
from tianshou.env import DummyVectorEnv  # noqa: E402

from fastenv.integrations.tianshou import TianshouVectorEnv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402


def plain(value):
    """A Tianshou ``Batch`` (nested) as plain dicts, for ``assert_identical``."""
    if isinstance(value, Batch):
        return {key: plain(item) for key, item in value.items()}
    return value


def recorded(venv):
    """``venv`` with every reset and step result (what the Collector sees) kept in ``venv.log``."""
    venv.log = []
    reset, step = venv.reset, venv.step

    def logged_reset(*args, **kwargs):
        out = reset(*args, **kwargs)
        venv.log.append(("reset", args, kwargs, out))
        return out

    def logged_step(action, id=None):
        out = step(action, id)
        venv.log.append(("step", np.asarray(id if id is not None else []).tolist(), out))
        return out

    venv.reset, venv.step = logged_reset, logged_step
    return venv


class SeededPolicy(Policy):
    """Uniform actions in [-1, 1] of ``shape`` from one seeded generator: the same actions on every
    vector env that is stepped the same way."""

    def __init__(self, space, seed=0):
        super().__init__(action_space=space)
        self.rng = np.random.default_rng(seed)

    def forward(self, batch, state=None, **kwargs):
        return Batch(act=self.rng.uniform(-1, 1, (len(batch.obs), *self.action_space.shape)).astype(np.float32), state=state)


def collect(venv, plan, seed=3, policy=None):
    """Run Tianshou's Collector over ``plan`` (``collect`` keyword dicts) with ``policy``, or random
    actions (each env's action space seeded by ``venv.seed``); returns (the buffer's contents, the
    stats, the log)."""
    venv = recorded(venv)
    venv.seed(seed)
    collector = Collector(policy or RandomActionPolicy(venv.action_space[0]), venv, VectorReplayBuffer(400, len(venv)))
    collector.reset()
    stats = []
    for kwargs in plan:
        s = collector.collect(random=policy is None, **kwargs)
        stats.append({"returns": s.returns, "lens": s.lens, "n_collected_steps": s.n_collected_steps, "n_collected_episodes": s.n_collected_episodes})
    buffer = collector.buffer
    return plain(buffer[buffer.sample_indices(0)]), stats, venv.log


def assert_same_collection(ours, ref):
    """Buffer, episode statistics and every reset/step result equal (scalars in infos by value:
    fastenv's infos travel batched, so a Python ``int`` comes back as a numpy integer)."""
    (buffer, stats, log), (ref_buffer, ref_stats, ref_log) = ours, ref
    assert_identical(stats, ref_stats, "stats")
    assert len(log) == len(ref_log), f"{len(log)} calls != {len(ref_log)}"
    for t, (call, ref_call) in enumerate(zip(log, ref_log)):
        assert_identical(call, ref_call, f"call {t} ({ref_call[0]})", loose_scalars=True)
    assert_identical(buffer, ref_buffer, "buffer", loose_scalars=True)


PLAN = [{"n_step": 40}, {"n_episode": 6}, {"n_step": 12}]  # n_episode steps fewer envs near its end


@pytest.fixture(scope="module")
def reference():
    return collect(DummyVectorEnv([RandomLengthEnv] * 4), PLAN)


def test_the_collector_gathers_what_it_gathers_on_tianshous_dummy_vector_env(reference):
    venv = TianshouVectorEnv(PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2))
    try:
        ours = collect(venv, PLAN)
    finally:
        venv.close()
    assert_same_collection(ours, reference)
    buffer = reference[0]
    assert buffer["truncated"].sum() >= 3 and buffer["terminated"].sum() >= 3  # both kinds of end were compared
    assert any(len(call[1]) not in (0, 4) for call in reference[2] if call[0] == "step")  # and steps of some envs only


class ShiftedFinal(TianshouVectorEnv):
    """The negative control: an ended env's step returns its next episode's first observation."""

    def step(self, action, id=None):
        obs, *rest = super().step(action, id)
        ids = list(range(self.env_num)) if id is None else list(id)
        for pos, i in enumerate(ids):
            if i in self._autoreset:
                obs[pos] = self._autoreset[i][0]
        return (obs, *rest)


def test_a_shifted_final_observation_is_caught(reference):
    venv = ShiftedFinal(PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2))
    try:
        ours = collect(venv, PLAN)
    finally:
        venv.close()
    with pytest.raises(AssertionError, match=r"call \d+ \(step\)\[2\]\[0\]"):  # the step's observations
        assert_same_collection(ours, reference)


def test_an_ended_env_is_reset_before_it_steps_again_and_seeded_resets_match():
    venv = TianshouVectorEnv(PipelineVectorEnv([functools.partial(RandomLengthEnv, max_len=1)] * 2, num_workers=1))
    ref = DummyVectorEnv([functools.partial(RandomLengthEnv, max_len=1)] * 2)
    try:
        for v in (venv, ref):
            v.reset(seed=5)
        actions = np.zeros((2, 3), np.float32)
        out, ref_out = venv.step(actions), ref.step(actions)  # every episode is 1 step long
        assert_identical(out, ref_out, "step", loose_scalars=True)
        with pytest.raises(RuntimeError, match=r"envs \[0, 1\] ended their episodes and were not reset"):
            venv.step(actions)
        with pytest.raises(ValueError, match=r"envs \[1\] were already reset .* pass a seed with the options"):
            venv.reset(env_id=[1], options={"x": 1})
        # A seeded reset of an ended env starts the episode the seed gives, as Tianshou's own does
        # (the same seed for every env reset); the unseeded one gets the autoreset.
        assert_identical(venv.reset(env_id=[1], seed=9), ref.reset(env_id=[1], seed=9), "seeded reset", loose_scalars=True)
        assert_identical(venv.reset(env_id=0), ref.reset(env_id=0), "reset", loose_scalars=True)
        assert_identical(venv.step(actions[:1], id=[1]), ref.step(actions[:1], id=[1]), "one env's step", loose_scalars=True)
    finally:
        venv.close()
        ref.close()


def test_attributes_reach_the_envs_as_tianshous_workers_read_them():
    venv = TianshouVectorEnv(PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1))
    try:
        assert venv.get_env_attr("max_len") == [12, 12]
        venv.set_env_attr("max_len", 4, id=[1])
        assert venv.get_env_attr("max_len") == [12, 4]
        assert venv.observation_space == [RandomLengthEnv().observation_space] * 2
        assert venv.action_space[0] is not venv.action_space[1]  # seeded one by one
        assert len(venv) == 2 and not venv.is_async
    finally:
        venv.close()


# -- LIBERO -----------------------------------------------------------------------------------
# Chunks of 2 in 5-step episodes: each episode ends inside its third chunk, truncated.
LIBERO = dict(suite="libero_10", task_id=0, chunk=2, camera_size=32, modalities=["agentview_image", "robot0_proprio-state"], max_episode_steps=5)


@pytest.mark.libero
@pytest.mark.big_memory
@pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization", keep=2)
def test_the_collector_on_libero_gathers_what_it_gathers_on_tianshous_dummy_vector_env():
    import gymnasium as gym

    from fastenv.envs.libero import make_env

    # Actions from a seeded policy: Tianshou's own vector envs report the action space of
    # env.unwrapped, the simulator's 7-D one, not the chunk space the env takes.
    plan = [{"n_step": 8}, {"n_episode": 2}]
    ref = DummyVectorEnv([functools.partial(make_env, **LIBERO)] * 2)
    space = gym.spaces.Box(-1, 1, (2, 7), np.float32)
    try:
        reference = collect(ref, plan, policy=SeededPolicy(space))
    finally:
        ref.close()
    venv = TianshouVectorEnv(gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, **LIBERO))
    try:
        assert venv.action_space[0] == space
        ours = collect(venv, plan, policy=SeededPolicy(space))
    finally:
        venv.close()
    assert_same_collection(ours, reference)
    buffer = reference[0]
    ends = buffer["truncated"]
    assert ends.sum() >= 4 and not buffer["terminated"].any()
    assert (buffer["info"]["chunk_steps"][ends] == 1).all()  # the episodes ended mid-chunk
