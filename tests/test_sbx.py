"""SBX (Stable-Baselines3 in JAX) on fastenv's SB3VecEnv: PPO's rollout buffer holds the same data as
on SB3's default vectorization, PPO on LIBERO.

The reference is what SBX builds from an env id or constructor, as SB3 does: ``make_vec_env``'s
``DummyVecEnv`` over single envs, each in a ``Monitor``. fastenv reaches SBX unchanged, through
``fastenv.integrations.sb3`` (``SB3VecEnv`` over a ``SAME_STEP`` vector env, its ``VecMonitor``). The
same seed (``PPO(seed=...)``: SB3's seeds, SBX's JAX key, ``env.seed``) gives the same sampled actions
where the observations are the same, so the data is compared exactly: what each step returns
(observations, rewards, dones, terminal observations), what PPO adds to its buffer (rewards after
its time-limit bootstrap from V(terminal observation), episode starts, values, log-probabilities),
the returns and advantages of each rollout, and the episodes it logs.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

from helpers import need
need("sbx")

from fakes import RandomLengthEnv, ShiftedFinalObservation  # noqa: E402
from sbx import PPO  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env  # noqa: E402

import fastenv  # noqa: E402
from fastenv.integrations.sb3 import RolloutBuffer, SB3VecEnv, VecMonitor, make_vec_env  # noqa: E402
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


def train(venv, *, rollouts: int = 2, n_steps: int = N_STEPS, **kwargs) -> dict[str, np.ndarray]:
    """SBX's PPO trained on ``venv`` (a VecEnv, closed after) for ``rollouts`` rollouts; what it collected, stacked over steps."""
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
    try:
        model.learn(total_timesteps=rollouts * n_steps * venv.num_envs, callback=recorder)
    finally:
        venv.close()
    data = {k: np.stack([a[k] for a in added]) for k in BUFFER}
    data.update({k: np.stack([s[k] for s in recorder.steps]) for k in recorder.steps[0]})
    data.update({k: np.stack([f[k] for f in finished]) for k in finished[0]})
    data["episodes"] = np.array([(info["r"], info["l"]) for info in model.ep_info_buffer])  # what it logs
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


@pytest.mark.libero
@pytest.mark.big_memory
@pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization", keep=2)
def test_ppo_rollout_buffer_on_fastenvs_libero_is_the_data_on_dummy_vec_env():
    # LIBERO in chunks of 8, 20-step episodes: each ends (truncated) 4 steps into its third chunk.
    options = {"chunk": 8, "camera_size": 32, "max_episode_steps": 20, "flatten": True, "modalities": ["robot0_proprio-state", "object-state"]}
    want = train(sb3_make_vec_env(functools.partial(gym.make, "fastenv/Libero-v0", **options), n_envs=2), rollouts=1, n_steps=8)
    # fastenv's RolloutBuffer, as the example trains with: SB3's but for worker restarts (none here)
    got = train(make_vec_env("fastenv/Libero-v0", 2, num_workers=2, **options), rollouts=1, n_steps=8, rollout_buffer_class=RolloutBuffer)
    assert want["step.truncated"].sum() == 2 * 2  # two episodes per env, each bootstrapping from its final observation
    assert_same_data(got, want)
