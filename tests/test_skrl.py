"""skrl on fastenv: PPO's memory holds the same data as on skrl's default vectorization, PPO on LIBERO.

The reference is what skrl's examples build for more than one env, ``gym.make_vec(...,
vectorization_mode="sync")``: Gymnasium's ``SyncVectorEnv`` in its default ``NEXT_STEP``
autoreset mode, wrapped by ``skrl.envs.wrappers.torch.wrap_env`` and trained by skrl's PPO with its
``SequentialTrainer``. The same seeds (skrl's ``set_seed``, which also seeds the envs' first reset)
give the same models and the same sampled actions where the observations are the same, so the
data is compared exactly: what the trainer hands ``record_transition`` (observations, actions,
rewards, next observations, terminated, truncated), what PPO puts in its memory (rewards after its
time-limit bootstrap, values, log-probabilities) and the returns and advantages of each update.
"""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest

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


def train(venv: gym.vector.VectorEnv, *, agent_class=PPO, time_limit_bootstrap: bool = False, rollouts: int = ROLLOUTS, updates: int = 2) -> dict[str, np.ndarray]:
    """skrl's PPO trained with its SequentialTrainer on ``venv``; what it recorded, stacked over steps.
    skrl's wrapper resets ``venv`` with the seed first: a vector env serves several runs."""
    set_seed(SEED)
    env = wrap_env(venv)
    memory = RandomMemory(memory_size=rollouts, num_envs=env.num_envs, device=env.device)
    models = {name: cls(env.observation_space, env.state_space, env.action_space, env.device) for name, cls in (("policy", Policy), ("value", Value))}
    cfg = PPO_CFG(rollouts=rollouts, learning_epochs=1, mini_batches=2, discount_factor=0.9, time_limit_bootstrap=time_limit_bootstrap)
    cfg.experiment.write_interval = 0
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
    return data


def assert_same_data(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].dtype == want[key].dtype, key
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


@pytest.mark.libero
@pytest.mark.big_memory
@pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization", keep=2)
def test_ppo_memory_on_fastenvs_libero_is_skrls_default_data():
    # LIBERO in chunks of 8, 20-step episodes: each ends (truncated) 4 steps into its third chunk,
    # and skrl's default data adds the step that resets it.
    options = {"chunk": 8, "camera_size": 32, "max_episode_steps": 20, "flatten": True, "modalities": ["robot0_proprio-state", "object-state"]}
    want = train(gym.make_vec("fastenv/Libero-v0", num_envs=2, vectorization_mode="sync", **options), rollouts=6)
    venv = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, autoreset_mode="NextStep", **options)
    try:
        got = train(venv, rollouts=6)
    finally:
        venv.close()
    assert want["truncated"].sum() == 3 * 2  # three episodes per env, at steps 3, 7 and 11
    assert_same_data(got, want)
