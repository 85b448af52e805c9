"""Tianshou through TianshouVecEnv: its Collector gathers on fastenv what it gathers on Tianshou's
own DummyVectorEnv over the same small envs and seeds, episode ends (mid-chunk, truncated) included;
on LIBERO, with PPO's updates, what it gathers on SubprocVectorEnv over LIBERO's own env, chunk 1
and chunk 8, with a negative control."""

import functools

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("tianshou")

import torch  # noqa: E402
from fakes import RandomLengthEnv  # noqa: E402
from helpers import assert_identical  # noqa: E402
from tianshou.algorithm import PPO  # noqa: E402
from tianshou.algorithm.algorithm_base import RandomActionPolicy  # noqa: E402
from tianshou.algorithm.modelfree.reinforce import ProbabilisticActorPolicy  # noqa: E402
from tianshou.algorithm.optim import AdamOptimizerFactory  # noqa: E402
from tianshou.data import Batch, Collector, VectorReplayBuffer  # noqa: E402
from tianshou.env import DummyVectorEnv  # noqa: E402
from tianshou.utils.net.common import Net  # noqa: E402
from tianshou.utils.net.continuous import ContinuousActorProbabilistic, ContinuousCritic  # noqa: E402
from tianshou.utils.torch_utils import policy_within_training_step  # noqa: E402
from torch.distributions import Independent, Normal  # noqa: E402

from fastenv.integrations.tianshou import TianshouVecEnv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

DISABLED = gym.vector.AutoresetMode.DISABLED


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


@pytest.mark.parametrize("workers", [1, 2, 4])  # the layout must not change the data
def test_the_collector_gathers_what_it_gathers_on_tianshous_dummy_vector_env(reference, workers):
    venv = TianshouVecEnv(PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=workers, autoreset_mode=DISABLED))
    try:
        ours = collect(venv, PLAN)
    finally:
        venv.close()
    assert_same_collection(ours, reference)
    buffer = reference[0]
    assert buffer["truncated"].sum() >= 3 and buffer["terminated"].sum() >= 3  # both kinds of end were compared
    assert any(len(call[1]) not in (0, 4) for call in reference[2] if call[0] == "step")  # and steps of some envs only


class ShiftedFinal(TianshouVecEnv):
    """The negative control: an ended env's step returns the observation before its final one."""

    def reset(self, env_id=None, **kwargs):
        obs, info = super().reset(env_id, **kwargs)
        self.last = getattr(self, "last", {})
        for pos, i in enumerate(self._wrap_id(env_id)):
            self.last[int(i)] = obs[pos]
        return obs, info

    def step(self, action, id=None):
        obs, rewards, terminations, truncations, info = super().step(action, id)
        obs = obs.copy()
        for pos, i in enumerate(list(range(self.env_num)) if id is None else [int(i) for i in id]):
            current = obs[pos].copy()
            if terminations[pos] or truncations[pos]:
                obs[pos] = self.last[i]
            self.last[i] = current
        return obs, rewards, terminations, truncations, info


def test_a_shifted_final_observation_is_caught(reference):
    venv = ShiftedFinal(PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2, autoreset_mode=DISABLED))
    try:
        ours = collect(venv, PLAN)
    finally:
        venv.close()
    with pytest.raises(AssertionError, match=r"call \d+ \(step\)\[2\]\[0\]"):  # the step's observations
        assert_same_collection(ours, reference)


def test_an_ended_env_is_reset_before_it_steps_again_and_seeded_resets_match():
    venv = TianshouVecEnv(PipelineVectorEnv([functools.partial(RandomLengthEnv, max_len=1)] * 2, num_workers=1, autoreset_mode=DISABLED))
    ref = DummyVectorEnv([functools.partial(RandomLengthEnv, max_len=1)] * 2)
    try:
        for v in (venv, ref):
            v.reset(seed=5)
        actions = np.zeros((2, 3), np.float32)
        out, ref_out = venv.step(actions), ref.step(actions)  # every episode is 1 step long
        assert_identical(out, ref_out, "step", loose_scalars=True)
        with pytest.raises(RuntimeError, match=r"envs \[0, 1\] ended their episodes .* must be reset before they step again"):
            venv.step(actions)
        # A reset of an ended env, with options, with a seed (the same seed for every env reset) or
        # with neither, starts the episode Tianshou's own vector env starts.
        assert_identical(venv.reset(env_id=[1], options={"x": 1}), ref.reset(env_id=[1], options={"x": 1}), "reset with options",
                         loose_scalars=True)
        assert_identical(venv.step(actions[1:], id=[1]), ref.step(actions[1:], id=[1]), "its step", loose_scalars=True)
        assert_identical(venv.reset(env_id=[1], seed=9), ref.reset(env_id=[1], seed=9), "seeded reset", loose_scalars=True)
        assert_identical(venv.reset(env_id=0), ref.reset(env_id=0), "reset", loose_scalars=True)
        assert_identical(venv.step(actions[:1], id=[1]), ref.step(actions[:1], id=[1]), "one env's step", loose_scalars=True)
    finally:
        venv.close()
        ref.close()


def test_attributes_reach_the_envs_as_tianshous_workers_read_them():
    venv = TianshouVecEnv(PipelineVectorEnv([RandomLengthEnv] * 2, num_workers=1, autoreset_mode=DISABLED))
    try:
        assert venv.get_env_attr("max_len") == [12, 12]
        venv.set_env_attr("max_len", 4, id=[1])
        assert venv.get_env_attr("max_len") == [12, 4]
        assert venv.observation_space == [RandomLengthEnv().observation_space] * 2
        assert venv.action_space[0] is not venv.action_space[1]  # seeded one by one
        assert len(venv) == 2 and not venv.is_async
    finally:
        venv.close()


# -- the same data as Tianshou on LIBERO's own env ------------------------------------------------
# The reference is Tianshou's collector (Collector.collect(n_step=...), its collect statistics, PPO's
# update between collections, as its on-policy trainer runs them) on Tianshou's SubprocVectorEnv over
# LIBERO's own env (tests/stock_libero.py), each env in a process of its own, started with spawn (a
# fork after the pytest process built an env that rendered deadlocks), stepped one action at a time
# (chunk 1) or K at a time by the reference chunk loop. Not DummyVectorEnv, Tianshou's default: it
# steps its envs in one process, where stock LIBERO envs are not independent (they render into
# whichever OpenGL context is current and place their scenes with numpy's global generator:
# tests/test_sb3.py::test_stock_envs_in_one_process_draw_each_others_scenes_and_fastenvs_envs_do_not).
# fastenv's side is the same collector and PPO on TianshouVecEnv over fastenv's vector env.


def _normal(loc_scale):
    loc, scale = loc_scale
    return Independent(Normal(loc, scale), 1)


def _ppo(obs_dim, act_dim):
    """Tianshou's PPO (its MuJoCo examples' Gaussian actor and critic, 16 units), seeded: its
    parameters and action samples from torch's generator, its minibatches from numpy's."""
    torch.manual_seed(0)
    np.random.seed(0)
    actor = ContinuousActorProbabilistic(preprocess_net=Net(state_shape=(obs_dim,), hidden_sizes=[16], activation=torch.nn.Tanh),
                                         action_shape=(act_dim,), unbounded=True)
    critic = ContinuousCritic(preprocess_net=Net(state_shape=(obs_dim,), hidden_sizes=[16], activation=torch.nn.Tanh))
    policy = ProbabilisticActorPolicy(actor=actor, dist_fn=_normal, action_scaling=True, action_bound_method="clip",
                                      action_space=gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32))
    return PPO(policy=policy, critic=critic, optim=AdamOptimizerFactory(lr=1e-3))


def _train(venv, chunk):
    """Two rounds of Tianshou's on-policy training step (``OnPolicyTrainer``'s): collect n steps,
    update PPO on the buffer, clear it. Returns each round's buffer and collect statistics, every reset and step result the
    collector saw, and PPO's parameters after the second update."""
    n_step = 64 if chunk == 1 else 12  # a round: 32 simulator steps per env, or 6 chunks of 8
    venv = recorded(venv)
    try:
        venv.seed(3)
        algorithm = _ppo(int(venv.observation_space[0].shape[0]), 7 * chunk)
        collector = Collector(algorithm, venv, VectorReplayBuffer(2 * n_step, len(venv)))
        collector.reset()
        rounds = []
        for _ in range(2):
            with policy_within_training_step(algorithm.policy):  # as the trainer's training step
                s = collector.collect(n_step=n_step)
                buffer = collector.buffer
                rounds.append({"buffer": plain(buffer[buffer.sample_indices(0)]),
                               "stats": {"returns": s.returns, "lens": s.lens, "n_collected_steps": s.n_collected_steps,
                                         "n_collected_episodes": s.n_collected_episodes}})
                algorithm.update(buffer=buffer, batch_size=n_step // 2, repeat=1)
                collector.reset_buffer(keep_statistics=True)
        return rounds, venv.log, tuple(p.detach().numpy().copy() for p in algorithm.parameters())
    finally:
        venv.close()


def _stock_tianshou(chunk):
    from stock_libero import make_stock
    from tianshou.env import SubprocVectorEnv

    return _train(SubprocVectorEnv([functools.partial(make_stock, chunk=chunk)] * 2, context="spawn"), chunk)


def _fastenv_tianshou(chunk, alter=None):
    from stock_libero import fastenv_options

    vector = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, autoreset_mode=DISABLED, **fastenv_options(chunk))
    return _train(TianshouVecEnv(vector if alter is None else alter(vector)), chunk)


def _stock_view(value):
    """fastenv's infos (in reset and step results, object arrays of dicts) less the keys LIBERO's own
    env does not give (``stock_libero.FASTENV_INFO_KEYS``)."""
    from stock_libero import stock_info

    if isinstance(value, tuple):
        return tuple(_stock_view(item) for item in value)
    if isinstance(value, np.ndarray) and value.dtype == object and value.size and isinstance(value.flat[0], dict):
        return np.array([stock_info(info) for info in value])
    return value


def _assert_same_training(ours, ref):
    from stock_libero import stock_info

    (rounds, log, parameters), (ref_rounds, ref_log, ref_parameters) = ours, ref
    assert len(log) == len(ref_log), f"{len(log)} calls != {len(ref_log)}"
    for t, (call, ref_call) in enumerate(zip(log, ref_log)):
        assert_identical(_stock_view(call), ref_call, f"call {t} ({ref_call[0]})", loose_scalars=True)
    assert len(rounds) == len(ref_rounds) == 2
    for r, (got, want) in enumerate(zip(rounds, ref_rounds)):
        assert_identical(got["stats"], want["stats"], f"round {r}: stats")
        buffer = {**got["buffer"], "info": stock_info(got["buffer"]["info"])}
        assert_identical(buffer, want["buffer"], f"round {r}: buffer", loose_scalars=True)
    assert_identical(parameters, ref_parameters, "parameters after the updates")


@same_data_on_stock_libero
def test_the_collector_on_libero_gathers_what_it_gathers_on_subproc_vector_env_over_stock_libero(chunk, monkeypatch):
    """Every reset and step result Tianshou's collector sees, its replay buffer (observations,
    actions, rewards, terminated, truncated, obs_next: an ended episode's final observation, infos,
    the policy's log-probabilities), its collect statistics (episode returns and lengths) and PPO's
    parameters after two updates: on fastenv what they are on SubprocVectorEnv over LIBERO's own env,
    chunk 1 and chunk 8, bit for bit; fastenv's own info keys (``stock_libero.FASTENV_INFO_KEYS``)
    set aside. Not against DummyVectorEnv, Tianshou's default: stock LIBERO envs in one process draw
    each other's scenes (see the comment above)."""
    from fakes import ShiftedFinalObservation
    from stock_libero import schedule_success

    schedule_success(monkeypatch)
    want = _stock_tianshou(chunk)
    _assert_same_training(_fastenv_tianshou(chunk), want)
    # What the window covers: episodes ended by success and by the time limit, at least 2 per env.
    buffers = [r["buffer"] for r in want[0]]
    terminated = np.concatenate([b["terminated"] for b in buffers])
    truncated = np.concatenate([b["truncated"] for b in buffers])
    env_ids = np.concatenate([b["info"]["env_id"] for b in buffers])
    assert terminated.sum() >= 1 and truncated.sum() >= 1, (terminated.sum(), truncated.sum())
    assert all(((terminated | truncated) & (env_ids == i)).sum() >= 2 for i in range(2)), env_ids[terminated | truncated]
    # Negative control: each final observation shifted to the one before it, below the adapter, is caught.
    with pytest.raises(AssertionError, match=r"call \d+ \(step\)\[2\]\[0\]"):  # a step's observations
        _assert_same_training(_fastenv_tianshou(chunk, alter=ShiftedFinalObservation), want)
