"""SBX (Stable-Baselines3 in JAX) on fastenv's SB3VecEnv: PPO's rollout buffer holds the same data as
on SB3's own vectorization, on small test envs and on LIBERO's own env.

On the small test envs the reference is what SBX builds from an env id or constructor, as SB3 does:
``make_vec_env``'s ``DummyVecEnv`` over single envs, each in a ``Monitor``. On LIBERO it is SB3's
``SubprocVecEnv`` (spawn) over LIBERO's own env (``tests/stock_libero.py``), each stock env in a
process of its own, at chunk 1 and through a reference chunk loop at chunk 8 (the LIBERO test says
why not ``DummyVecEnv``), with a negative control. fastenv reaches SBX unchanged, through
``fastenv.integrations.sb3`` (``SB3VecEnv`` over a ``SAME_STEP`` vector env, its ``VecMonitor``). The
same seed (``PPO(seed=...)``: SB3's seeds, SBX's JAX key, ``env.seed``) gives the same sampled actions
where the observations are the same, so the data is compared exactly: what each step returns
(observations, rewards, dones, terminal observations), what PPO adds to its buffer (rewards after
its time-limit bootstrap from V(terminal observation), episode starts, values, log-probabilities),
the returns and advantages of each rollout, and the episodes it logs; on LIBERO also the
parameters after learning.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need
need("sbx")

from fakes import RandomLengthEnv, ShiftedFinalObservation  # noqa: E402
from helpers import assert_same  # noqa: E402
from sbx import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env  # noqa: E402

import fastenv  # noqa: E402
from fastenv.integrations.sb3 import RestartMarksCallback, RolloutBuffer, SB3VecEnv, VecMonitor  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402
from fastenv.wrappers import FlattenActionChunk  # noqa: E402

CHUNK, SEED, N, N_STEPS = 3, 5, 4, 16
BUFFER = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs")


def chunked_random_env() -> gym.Env:
    """Episodes of 1 to 12 steps, terminated or truncated at random, in chunks of 3: most end mid-chunk.
    Flat (SBX's PPO takes no Dict observation, and flat actions): the step count ``t`` one-hot, then
    ``x``; a chunk's actions as one vector."""
    return FlattenActionChunk(gym.wrappers.FlattenObservation(fastenv.wrap(RandomLengthEnv(), chunk=CHUNK)))


class Recorder(BaseCallback):
    """What each step returned to PPO's collect_rollouts (copied before PPO adds its bootstrap)."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict[str, np.ndarray]] = []

    def _on_step(self) -> bool:
        new_obs, dones, infos = self.locals["new_obs"], self.locals["dones"], self.locals["infos"]
        terminal = np.stack([info["terminal_observation"] if done else np.full_like(new_obs[i], np.nan) for i, (info, done) in enumerate(zip(infos, dones))])
        self.steps.append({"step.new_obs": new_obs.copy(), "step.rewards": self.locals["rewards"].copy(), "step.dones": dones.copy(),
                           "step.terminal_observation": terminal,
                           "step.truncated": np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos])})
        return True


def train(venv, *, rollouts: int = 2, n_steps: int = N_STEPS, parameters: bool = False, **kwargs) -> dict[str, np.ndarray]:
    """SBX's PPO trained on ``venv`` (a VecEnv, closed after) for ``rollouts`` rollouts; what it collected, stacked over steps
    (and with ``parameters``, the actor's and critic's after learning)."""
    model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=n_steps * venv.num_envs // 2, n_epochs=1, seed=SEED, **kwargs)
    buffer = model.rollout_buffer
    added: list[dict[str, np.ndarray]] = []
    finished: list[dict[str, np.ndarray]] = []
    add, compute = buffer.add, buffer.compute_returns_and_advantage

    def record_add(obs, action, reward, episode_start, value, log_prob):
        added.append(dict(zip(BUFFER, (np.array(obs), np.array(action), np.array(reward), np.array(episode_start),
                                       value.numpy().copy(), log_prob.numpy().copy()))))
        add(obs, action, reward, episode_start, value, log_prob)

    def record_compute(last_values, dones):
        compute(last_values=last_values, dones=dones)
        finished.append({"rollout.returns": buffer.returns.copy(), "rollout.advantages": buffer.advantages.copy()})

    buffer.add, buffer.compute_returns_and_advantage = record_add, record_compute
    recorder = Recorder()
    callbacks = [recorder] + ([RestartMarksCallback()] if kwargs.get("rollout_buffer_class") is RolloutBuffer else [])
    try:
        model.learn(total_timesteps=rollouts * n_steps * venv.num_envs, callback=callbacks)
    finally:
        venv.close()
    data = {k: np.stack([a[k] for a in added]) for k in BUFFER}
    data.update({k: np.stack([s[k] for s in recorder.steps]) for k in recorder.steps[0]})
    data.update({k: np.stack([f[k] for f in finished]) for k in finished[0]})
    data["episodes"] = np.array([(info["r"], info["l"]) for info in model.ep_info_buffer])  # what it logs
    if parameters:
        import jax

        data["parameters"] = tuple(np.asarray(leaf) for state in (model.policy.actor_state, model.policy.vf_state)
                                   for leaf in jax.tree_util.tree_leaves(state.params))
    return data


def assert_same_data(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for key in set(want) - {"episodes"}:
        assert got[key].dtype == want[key].dtype, key
        assert np.array_equal(got[key], want[key], equal_nan=got[key].dtype.kind == "f"), f"{key}: first difference at {np.argwhere(got[key] != want[key])[:1].tolist()}"
    # The episodes logged: SB3's Monitor (per env, the reference) rounds a return to 6 decimals,
    # a VecMonitor (SB3's, fastenv's) does not.
    assert np.array_equal(got["episodes"][:, 1], want["episodes"][:, 1]), "episode lengths"
    assert np.allclose(got["episodes"][:, 0], want["episodes"][:, 0], rtol=1e-6, atol=1e-6), "episode returns"


def ours(shift: bool = False) -> VecMonitor:
    venv = PipelineVectorEnv([chunked_random_env] * N, num_workers=2)
    return VecMonitor(SB3VecEnv(ShiftedFinalObservation(venv) if shift else venv))


@pytest.fixture(scope="module")
def sb3_default_data():
    return train(sb3_make_vec_env(chunked_random_env, n_envs=N))


def test_ppo_rollout_buffer_on_fastenv_is_the_data_on_sb3s_dummy_vec_env(sb3_default_data):
    assert_same_data(train(ours()), sb3_default_data)
    # What the data covers: episodes that end mid-chunk, terminated and truncated, several per env,
    # truncated ones bootstrapping from V(terminal observation).
    data = sb3_default_data
    dones, truncated = data["step.dones"], data["step.truncated"]
    assert truncated.any() and (dones & ~truncated).any() and dones.sum() >= 2 * N
    t = data["step.terminal_observation"][..., :100].argmax(-1)
    assert (t[dones] % CHUNK != 0).any() and (t[dones] % CHUNK == 0).any()
    assert (data["rewards"] != data["step.rewards"])[truncated].all()
    assert np.array_equal(data["rewards"][~truncated], data["step.rewards"][~truncated])
    assert len(data["episodes"]) == dones.sum()


def test_a_shifted_final_observation_is_caught(sb3_default_data):
    got = train(ours(shift=True))
    with pytest.raises(AssertionError, match="first difference"):
        assert_same_data(got, sb3_default_data)


# -- the same data as SBX on LIBERO's own env ------------------------------------------------------
# The reference is SBX's PPO on SB3's vectorization of LIBERO's own env with each env in a process of its
# own (SubprocVecEnv, spawn, each env in a Monitor), stepped one action at a time (chunk 1) or K at a time
# by the reference chunk loop (tests/stock_libero.py); fastenv's side is the same PPO on fastenv's vector
# env through SB3VecEnv and fastenv's VecMonitor, with fastenv's RolloutBuffer, as the docs train.

LIBERO_N_STEPS = {1: 32, 8: 6}  # two rollouts: 64 or 96 simulator steps per env, 3 to 5 episodes each


def _stock_sbx(chunk: int) -> dict[str, np.ndarray]:
    from stable_baselines3.common.vec_env import SubprocVecEnv
    from stock_libero import make_stock

    venv = sb3_make_vec_env(functools.partial(make_stock, chunk=chunk), n_envs=2, vec_env_cls=SubprocVecEnv,
                            vec_env_kwargs={"start_method": "spawn"})
    return train(venv, n_steps=LIBERO_N_STEPS[chunk], parameters=True)


def _fastenv_sbx(chunk: int, alter=None) -> dict[str, np.ndarray]:
    from stock_libero import fastenv_options

    vector = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, **fastenv_options(chunk))
    venv = VecMonitor(SB3VecEnv(vector if alter is None else alter(vector)))
    return train(venv, n_steps=LIBERO_N_STEPS[chunk], parameters=True, rollout_buffer_class=RolloutBuffer)


def _assert_same_libero_data(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    # SB3's SubprocVecEnv returns its envs' rewards stacked as they came (Python floats: float64); its
    # DummyVecEnv, and SB3VecEnv as it, return float32. PPO adds either to its float32 rollout buffer
    # (after the time-out bootstrap): they are compared as the buffer holds them.
    rewards = ("step.rewards", "rewards")
    assert [(want[k].dtype, got[k].dtype) for k in rewards] == [(np.float64, np.float32)] * 2
    want = {**want, **{k: want[k].astype(np.float32) for k in rewards}}
    assert_same_data({k: v for k, v in got.items() if k != "parameters"}, {k: v for k, v in want.items() if k != "parameters"})
    # LIBERO's rewards are 0 or 1: the Monitor's rounding leaves its returns exact
    assert want["episodes"].dtype == got["episodes"].dtype and np.array_equal(got["episodes"], want["episodes"]), "episodes logged"
    assert [p.dtype for p in got["parameters"]] == [p.dtype for p in want["parameters"]]
    assert_same(got["parameters"], want["parameters"], "parameters after learning")


@same_data_on_stock_libero
def test_ppo_collects_on_fastenv_what_it_collects_on_subproc_vec_env_over_stock_libero(chunk, monkeypatch):
    """SBX's default vectorization (SB3's ``make_vec_env``: ``DummyVecEnv``) steps its envs in one process, where stock LIBERO envs are not independent (tests/stock_libero.py says why). So the reference is
    SB3's multi-process vectorization, ``SubprocVecEnv``, which SBX trains on as it does on ``DummyVecEnv``.
    """
    from fakes import AlteredReward
    from stock_libero import schedule_success

    schedule_success(monkeypatch, after=18)  # success at step 19 or 20, if at all: about half the episodes truncate
    want = _stock_sbx(chunk)
    _assert_same_libero_data(_fastenv_sbx(chunk), want)
    # What the window covers: several episodes per env, ended by success and by the time limit, the
    # truncated ones bootstrapping from V(terminal observation).
    dones, truncated = want["step.dones"], want["step.truncated"]
    assert (dones.sum(axis=0) >= 2).all() and (dones & ~truncated).any() and truncated.any(), (dones.sum(axis=0), truncated.sum())
    assert (want["rewards"] != want["step.rewards"])[truncated].all()
    # Negative control: one reward of one env altered by 1e-6, below SB3VecEnv, is caught.
    with pytest.raises(AssertionError, match="first difference"):
        _assert_same_libero_data(_fastenv_sbx(chunk, alter=lambda v: AlteredReward(v, call=5, index=1, by=1e-6)), want)
