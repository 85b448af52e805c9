"""skrl on fastenv: PPO's memory holds the same data as on skrl's default vectorization and on stock LIBERO.

The reference is what skrl's examples build for more than one env, ``gym.make_vec(...,
vectorization_mode="sync")``: Gymnasium's ``SyncVectorEnv`` in its default ``NEXT_STEP``
autoreset mode, wrapped by ``skrl.envs.wrappers.torch.wrap_env`` and trained by skrl's PPO with its
``SequentialTrainer``. On LIBERO it is Gymnasium's ``AsyncVectorEnv`` over LIBERO's own env
(``tests/stock_libero.py``; each stock env in a process of its own), in the same mode, at chunk 1
and chunk 8 (the reference chunk loop), with a negative control (one reward altered). The same
seeds (skrl's ``set_seed``, which also seeds the envs' first reset) give the same models and the
same sampled actions where the observations are the same, so the
data is compared exactly: what the trainer hands ``record_transition`` (observations, actions,
rewards, next observations, terminated, truncated), what PPO puts in its memory (rewards after its
time-limit bootstrap, values, log-probabilities) and the returns and advantages of each update.
"""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("skrl")

import torch  # noqa: E402
from fakes import RandomLengthEnv, ShiftedFinalObservation  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from skrl.agents.torch.ppo import PPO, PPO_CFG  # noqa: E402
from skrl.envs.wrappers.torch import wrap_env  # noqa: E402
from skrl.memories.torch import RandomMemory  # noqa: E402
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model  # noqa: E402
from skrl.trainers.torch import SequentialTrainer  # noqa: E402
from skrl.utils import set_seed  # noqa: E402
from torch import nn  # noqa: E402

import fastenv  # noqa: E402
from fastenv.integrations import skrl as fastenv_skrl  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

CHUNK, SEED, N, ROLLOUTS = 3, 7, 4, 16
RECORDED = ("observations", "actions", "rewards", "next_observations", "terminated", "truncated")


def chunked_random_env() -> gym.Env:
    """Episodes of 1 to 12 steps, terminated or truncated at random, in chunks of 3: most end mid-chunk.
    Observations flat (skrl's models size a ``Discrete`` as one-hot): the step count ``t`` one-hot, then ``x``."""
    return gym.wrappers.FlattenObservation(fastenv.wrap(RandomLengthEnv(), chunk=CHUNK))


def steps_since_reset(observations: np.ndarray) -> np.ndarray:
    return observations[..., :100].argmax(-1)


class Policy(GaussianMixin, Model):
    def __init__(self, observation_space, state_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device)
        GaussianMixin.__init__(self, clip_actions=False, clip_log_std=True, min_log_std=-20, max_log_std=2)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 32), nn.Tanh(), nn.Linear(32, self.num_actions), nn.Tanh())
        self.log_std_parameter = nn.Parameter(torch.full((self.num_actions,), -1.0))

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {"log_std": self.log_std_parameter}


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, state_space, action_space, device):
        Model.__init__(self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device)
        DeterministicMixin.__init__(self)
        self.net = nn.Sequential(nn.Linear(self.num_observations, 32), nn.Tanh(), nn.Linear(32, 1))

    def compute(self, inputs, role):
        return self.net(inputs["observations"]), {}


def train(venv: gym.vector.VectorEnv, *, agent_class=PPO, time_limit_bootstrap: bool = False, rollouts: int = ROLLOUTS, updates: int = 2,
          track_in: str | None = None) -> dict[str, np.ndarray]:
    """skrl's PPO trained with its SequentialTrainer on ``venv``; what it recorded, stacked over steps.
    skrl's wrapper resets ``venv`` with the seed first: a vector env serves several runs. With ``track_in``
    (an experiment directory), also what the agent tracks for TensorBoard (its episode statistics and
    losses; never written: the write interval is past the run), less the wall times."""
    set_seed(SEED)
    env = wrap_env(venv)
    memory = RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=env.device)
    models = {name: cls(env.observation_space, env.state_space, env.action_space, env.device) for name, cls in (("policy", Policy), ("value", Value))}
    cfg = PPO_CFG(rollouts=rollouts, learning_epochs=1, mini_batches=2, discount_factor=0.9, time_limit_bootstrap=time_limit_bootstrap)
    cfg.experiment.write_interval = 0 if track_in is None else 10 * rollouts * updates
    cfg.experiment.directory = track_in or ""
    cfg.experiment.checkpoint_interval = 0
    agent = agent_class(models=models, memory=memory, cfg=cfg, observation_space=env.observation_space,
                        state_space=env.state_space, action_space=env.action_space, device=env.device)
    steps: list[dict[str, torch.Tensor]] = []
    done_updates: list[dict[str, torch.Tensor]] = []

    def record_transition(**kwargs):
        steps.append({k: kwargs[k].clone() for k in RECORDED})
        record(**kwargs)

    def add_samples(**kwargs):
        steps[-1].update({f"memory.{k}": v.clone() for k, v in kwargs.items() if v is not None})
        # What PPO bootstraps truncations from (time_limit_bootstrap) and its last values from: the
        # next observations that reached skrl's record_transition (a mixin's, where one runs).
        steps[-1]["agent.next_observations"] = agent._current_next_observations.clone()
        add(**kwargs)

    def update(**kwargs):
        update_(**kwargs)
        done_updates.append({k: memory.get_tensor_by_name(k).clone() for k in ("returns", "advantages")})

    # Recorders around the agent's and memory's own methods (the class's, so a mixin's override runs first).
    record, add, update_ = agent.record_transition, memory.add_samples, agent.update
    agent.record_transition, memory.add_samples, agent.update = record_transition, add_samples, update
    trainer = SequentialTrainer(env=env, agents=agent, cfg={"timesteps": rollouts * updates, "headless": True, "disable_progressbar": True,
                                                            "close_environment_at_exit": False})
    trainer.train()
    data = {k: torch.stack([s[k] for s in steps]).numpy() for k in steps[0]}
    data.update({f"update.{k}": torch.stack([u[k] for u in done_updates]).numpy() for k in done_updates[0]})
    if track_in is not None:
        data.update({f"tracked.{k}": np.asarray(v) for k, v in agent.tracking_data.items() if not k.startswith("Stats / ")})
    return data


def assert_same_data(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
        assert np.array_equal(got[key], want[key]), f"{key}: first difference at {np.argwhere(got[key] != want[key])[:1].tolist()}"


def stock(mode: AutoresetMode = AutoresetMode.NEXT_STEP) -> gym.vector.VectorEnv:
    return gym.vector.SyncVectorEnv([chunked_random_env] * N, autoreset_mode=mode)


@pytest.fixture(scope="module")
def ours():
    """fastenv's vector env in each autoreset mode (built once: worker processes take a while to start)."""
    venvs: dict[AutoresetMode, PipelineVectorEnv] = {}

    def get(mode: AutoresetMode) -> PipelineVectorEnv:
        if mode not in venvs:
            venvs[mode] = PipelineVectorEnv([chunked_random_env] * N, num_workers=2, autoreset_mode=mode)
        return venvs[mode]

    yield get
    for venv in venvs.values():
        venv.close()


@pytest.fixture(scope="module")
def skrl_default_data():
    return train(stock())


def test_ppo_memory_on_fastenv_next_step_is_skrls_default_data(skrl_default_data, ours):
    assert_same_data(train(ours(AutoresetMode.NEXT_STEP)), skrl_default_data)
    # What the data covers: episodes that end mid-chunk, terminated and truncated, several per env.
    data = skrl_default_data
    ended = (data["terminated"] | data["truncated"])[..., 0]
    assert data["terminated"].any() and data["truncated"].any() and ended.sum() >= 2 * N
    t = steps_since_reset(data["next_observations"])
    assert (t[ended] % CHUNK != 0).any() and (t[ended] % CHUNK == 0).any()


def test_skrls_default_data_has_a_transition_that_never_happened_after_each_episode_end(skrl_default_data):
    # NEXT_STEP: the step after an episode's end starts from its final observation, the env resets
    # instead of running the action: reward 0, not done, the reset observation next.
    data = skrl_default_data
    ended = (data["terminated"] | data["truncated"])[:-1, :, 0]
    after = {k: v[1:][ended] for k, v in data.items() if not k.startswith("update.")}
    assert ended.sum() >= 2 * N
    assert np.array_equal(after["observations"], data["next_observations"][:-1][ended])
    assert (after["rewards"] == 0).all() and not after["terminated"].any() and not after["truncated"].any()
    assert (steps_since_reset(after["next_observations"]) == 0).all()  # t == 0: the new episode's first observation


@pytest.mark.parametrize("agent_class,bootstrap", [(PPO, False), (PPO, True), (fastenv_skrl.PPO, True)], ids=["skrl", "skrl-time-limit-bootstrap", "fastenv-final-obs"])
def test_ppo_memory_on_fastenv_same_step_is_skrls_data_on_gymnasiums_same_step(agent_class, bootstrap, ours):
    want = train(stock(AutoresetMode.SAME_STEP), agent_class=agent_class, time_limit_bootstrap=bootstrap)
    assert_same_data(train(ours(AutoresetMode.SAME_STEP), agent_class=agent_class, time_limit_bootstrap=bootstrap), want)
    ended = (want["terminated"] | want["truncated"])[..., 0]
    t = steps_since_reset(want["agent.next_observations"])
    if agent_class is PPO:  # skrl's: the next observation of an ended episode is the new episode's first
        assert (t[ended] == 0).all()
    else:  # fastenv's: its final observation, what truncations bootstrap from
        assert (t[ended] > 0).all()
        assert (want["memory.rewards"] != want["rewards"])[want["truncated"]].all()


def test_fastenvs_ppo_records_final_observations_where_skrls_records_reset_ones():
    skrl_data = train(stock(AutoresetMode.SAME_STEP), time_limit_bootstrap=True)
    final_data = train(stock(AutoresetMode.SAME_STEP), agent_class=fastenv_skrl.PPO, time_limit_bootstrap=True)
    # Before the first episode end, the two are the same run; at it, only the next observation differs.
    ended = (skrl_data["terminated"] | skrl_data["truncated"])[..., 0]
    first = int(np.flatnonzero(ended.any(1))[0])
    for key in ("observations", "actions", "rewards", "terminated", "truncated"):
        assert np.array_equal(final_data[key][: first + 1], skrl_data[key][: first + 1]), key
    rows = ended[first]
    assert np.array_equal(final_data["next_observations"][first], skrl_data["next_observations"][first])  # the trainer's
    theirs, ours_ = skrl_data["agent.next_observations"][first], final_data["agent.next_observations"][first]
    assert (steps_since_reset(theirs[rows]) == 0).all() and (steps_since_reset(ours_[rows]) > 0).all()
    assert np.array_equal(ours_[~rows], theirs[~rows])


@pytest.mark.parametrize("mode,agent_class", [(AutoresetMode.NEXT_STEP, PPO), (AutoresetMode.SAME_STEP, fastenv_skrl.PPO)], ids=["next-step", "same-step-final-obs"])
def test_a_shifted_final_observation_is_caught(skrl_default_data, ours, mode, agent_class):
    bootstrap = agent_class is not PPO
    want = skrl_default_data if mode == AutoresetMode.NEXT_STEP else train(stock(mode), agent_class=agent_class, time_limit_bootstrap=bootstrap)
    got = train(ShiftedFinalObservation(ours(mode)), agent_class=agent_class, time_limit_bootstrap=bootstrap)
    with pytest.raises(AssertionError, match="first difference"):
        assert_same_data(got, want)


def test_fastenvs_ppo_refuses_a_config_whose_truncations_do_not_bootstrap():
    with pytest.raises(ValueError, match="needs cfg.time_limit_bootstrap=True; got time_limit_bootstrap=False"):
        train(stock(AutoresetMode.SAME_STEP), agent_class=fastenv_skrl.PPO, time_limit_bootstrap=False)


# -- the same data as skrl on LIBERO's own env ---------------------------------------------------
# The reference is skrl's PPO with its SequentialTrainer on skrl's wrap_env over Gymnasium's
# multi-process vector env of LIBERO's own env (AsyncVectorEnv started with spawn, each stock env in a
# process of its own) in the autoreset mode skrl's examples run in, NEXT_STEP (Gymnasium's default),
# stepped one action at a time (chunk 1) or K at a time by the reference chunk loop (tests/stock_libero.py);
# fastenv's side is the same on gym.make_vec("fastenv/Libero-v0", ..., autoreset_mode="NextStep"). Each
# side runs in a fresh process: AsyncVectorEnv builds a stock env in the calling process to read its spaces.

LIBERO_ROLLOUTS = {1: 32, 8: 6}  # steps per env and update, two updates: 64 or 96 simulator steps per env at most


def _train_on_libero(side: str, chunk: int, directory: str) -> dict[str, np.ndarray]:
    import functools

    from fakes import AlteredReward
    from stock_libero import fastenv_options, make_stock

    if side == "stock":
        venv = gym.vector.AsyncVectorEnv([functools.partial(make_stock, chunk=chunk)] * 2, context="spawn")
        assert venv.autoreset_mode == AutoresetMode.NEXT_STEP
    else:
        venv = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, autoreset_mode="NextStep", **fastenv_options(chunk))
        if side == "fastenv-altered":  # below skrl's wrapper: one reward of one env off by 1e-6
            venv = AlteredReward(venv, call=5, index=1, by=1e-6)
    try:
        return train(venv, rollouts=LIBERO_ROLLOUTS[chunk], track_in=directory)
    finally:
        venv.close()


def _in_fresh_process(side: str, chunk: int, directory: str) -> dict[str, np.ndarray]:
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_train_on_libero, side, chunk, directory).result()


@same_data_on_stock_libero
def test_ppo_memory_on_fastenv_is_its_memory_on_async_vector_env_over_stock_libero(chunk, monkeypatch, tmp_path):
    """skrl's examples vectorize with ``gym.make_vec(..., vectorization_mode="sync")``, Gymnasium's
    SyncVectorEnv, which steps its envs in one process, where stock LIBERO envs are not independent: they
    render into whichever OpenGL context is current and draw their scenes from numpy's global generator
    (tests/test_sb3.py::test_stock_envs_in_one_process_draw_each_others_scenes_and_fastenvs_envs_do_not).
    So the reference is Gymnasium's multi-process vector env, AsyncVectorEnv, in the same autoreset mode
    (NEXT_STEP), under the same skrl wrapper, trainer and agent. Compared bit for bit, dtypes too: what
    the trainer hands the agent at every step (observations, actions, rewards, next observations,
    terminated, truncated; the step after each episode's end is the one NEXT_STEP invents), what PPO
    stores (values, log-probabilities, rewards after its time-limit bootstrap), the returns and
    advantages of each update, and what the agent tracks for TensorBoard (episode returns and lengths,
    its losses and the policy's standard deviation after each update).
    """
    from stock_libero import schedule_success

    schedule_success(monkeypatch)
    want = _in_fresh_process("stock", chunk, str(tmp_path / "stock"))
    assert_same_data(_in_fresh_process("fastenv", chunk, str(tmp_path / "fastenv")), want)
    # What the window covers: several episodes per env, ended by success and by the time limit, and
    # the episode statistics and losses skrl tracks.
    ended = (want["terminated"] | want["truncated"])[..., 0]
    assert (ended.sum(0) >= 2).all() and want["terminated"].any() and want["truncated"].any(), ended.sum(0)
    assert len(want["tracked.Reward / Total reward (mean)"]) and len(want["tracked.Loss / Value loss"]) == 2
    # Negative control: one reward of one env altered by 1e-6, below skrl's wrapper, is caught.
    with pytest.raises(AssertionError, match="first difference"):
        assert_same_data(_in_fresh_process("fastenv-altered", chunk, str(tmp_path / "altered")), want)
