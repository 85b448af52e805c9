"""SB3 never learns from a transition a worker restart invented: fastenv's buffers leave it out.

A worker restart makes each of its envs report a transition whose action never ran (reward 0,
truncated, ``worker_restarted``). The tests kill a worker at a chosen step of an SB3 rollout, on
tiny fake envs, and check what PPO's rollout buffer and SAC's replay buffer hand to training.
"""

import os
import pickle
import signal
import warnings
from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("stable_baselines3", "Stable-Baselines3 is not installed")

import torch as th  # noqa: E402
from fakes import CountdownEnv, DictCountdownEnv, RandomLengthEnv  # noqa: E402
from stable_baselines3 import PPO, SAC  # noqa: E402
from stable_baselines3.common import buffers as _sb3_buffers  # noqa: E402
from stable_baselines3.common.callbacks import BaseCallback, EvalCallback  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper, VecMonitor  # noqa: E402

from fastenv.integrations import sb3 as fsb3  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

N_STEPS = 8
KILL_AFTER = 3  # worker 1 dies after the 3rd step of the rollout: step index 3 of env 1 is invented
ENV_ID = "fastenv-test/Countdown-v0"


def small() -> dict:
    """Tiny networks (these tests are about the data); a new dict each time, as SB3 writes into it."""
    return {"net_arch": [16]}


def _countdown_pipeline(num_envs: int, dict_obs: bool = False, **_):
    # Episodes of 1000 steps: the only episode end in these rollouts is the restart's.
    env = DictCountdownEnv if dict_obs else CountdownEnv
    return PipelineVectorEnv([partial(env, 1000)] * num_envs, num_workers=2)


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, vector_entry_point=_countdown_pipeline)


class KillWorker(BaseCallback):
    """SIGKILLs worker 1 (which holds env 1) after the given callback steps."""

    def __init__(self, *after: int) -> None:
        super().__init__()
        self.after = set(after)

    def _on_step(self) -> bool:
        if self.n_calls in self.after:
            os.kill(self.training_env.unwrapped.vector_env.worker_pids[1], signal.SIGKILL)
        return True


class Record(BaseCallback):
    """Each step's infos, and copies of the rollout buffer's arrays once GAE has run."""

    def __init__(self) -> None:
        super().__init__()
        self.infos: list = []
        self.rollouts: list = []

    def _on_step(self) -> bool:
        self.infos.append(self.locals["infos"])
        return True

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        names = ("rewards", "values", "advantages", "returns", "episode_starts", "actions")
        self.rollouts.append({name: np.array(getattr(buffer, name)) for name in names})


def record_minibatches(model) -> list:
    """Keep every minibatch the rollout buffer yields to ``train()``."""
    batches = []
    get = model.rollout_buffer.get

    def spy(batch_size=None):
        for batch in get(batch_size):
            batches.append(batch)
            yield batch

    model.rollout_buffer.get = spy
    return batches


def restart_warnings(caught) -> list:
    return [w for w in caught if "worker restart" in str(w.message)]


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_ppo_leaves_out_the_transition_a_worker_restart_invented(dict_obs):
    venv = fsb3.make_vec(ENV_ID, 2, dict_obs=dict_obs)
    try:
        model = PPO(
            "MultiInputPolicy" if dict_obs else "MlpPolicy", venv, n_steps=N_STEPS, batch_size=4, n_epochs=1,
            gamma=0.5, gae_lambda=0.9, seed=0, device="cpu", policy_kwargs=small(), rollout_buffer_class=fsb3.RolloutBuffer,
        )
        batches = record_minibatches(model)
        record = Record()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(2 * N_STEPS, callback=[KillWorker(KILL_AFTER), record, fsb3.RestartMarksCallback()])
    finally:
        venv.close()
    t = KILL_AFTER
    rollout = record.rollouts[0]
    adv, ret, values, rewards = (rollout[k][:, 1] for k in ("advantages", "returns", "values", "rewards"))
    assert rewards[:t].tolist() == [1.0, 2.0, 3.0]  # env 1's real steps before the restart
    # The invented transition has no advantage, so the one before it is a truncation at s_t,
    # bootstrapped with V(s_t): nothing of the invented reward or its bootstrap reaches it.
    assert adv[t] == 0.0 and ret[t] == values[t]
    np.testing.assert_allclose(adv[t - 1], rewards[t - 1] + 0.5 * values[t] - values[t - 1], rtol=1e-6)
    # train() gets every transition but the invented one.
    actions = np.concatenate([batch.actions.numpy() for batch in batches])
    assert len(actions) == 2 * N_STEPS - 1
    assert not any(np.array_equal(a, rollout["actions"][t, 1]) for a in actions)
    # The episode the restart cut is not logged, and the invented step is not counted in a length.
    assert len(model.ep_info_buffer) == 0 and venv.episode_count == 0
    assert venv.episode_lengths.tolist() == [N_STEPS, N_STEPS - t - 1]
    info = record.infos[t][1]  # what SB3VecEnv reported: an episode end, marked
    assert info["worker_restarted"] is True and info["TimeLimit.truncated"] is True
    assert restart_warnings(caught) == []


class KillDuringEvaluations(VecEnvWrapper):
    """Kills worker 1 of the fastenv vector env underneath at the 2nd step of the chosen evaluations
    (each of EvalCallback's evaluations starts with a reset), and counts the restarts it reports."""

    def __init__(self, venv, evaluations: set[int]) -> None:
        super().__init__(venv)
        self.evaluations, self.evaluation, self.steps, self.restarts = evaluations, 0, 0, 0

    def reset(self):
        self.evaluation, self.steps = self.evaluation + 1, 0
        return self.venv.reset()

    def step_async(self, actions) -> None:
        self.steps += 1
        if self.evaluation in self.evaluations and self.steps == 2:
            os.kill(self.venv.unwrapped.vector_env.worker_pids[1], signal.SIGKILL)
        self.venv.step_async(actions)

    def step_wait(self):
        obs, rewards, dones, infos = self.venv.step_wait()
        self.restarts += int(fsb3.restarted_mask(infos, dones).sum())
        return obs, rewards, dones, infos


def test_an_eval_callback_stepping_another_fastenv_env_between_step_and_add_leaves_the_marks_alone():
    # EvalCallback evaluates after every training step, before PPO adds it to the buffer, on
    # another fastenv VecEnv whose worker restarts during the evaluations of training steps 0 and
    # KILL_AFTER; the training env restarts at step KILL_AFTER. Only that one is marked.
    venv = fsb3.make_vec(ENV_ID, 2)
    evaluated = KillDuringEvaluations(fsb3.SB3VecEnv(PipelineVectorEnv([partial(CountdownEnv, 3)] * 2, num_workers=2)), {1, KILL_AFTER + 1})
    eval_env = fsb3.VecMonitor(evaluated)
    try:
        model = PPO("MlpPolicy", venv, n_steps=N_STEPS, batch_size=4, n_epochs=1, seed=0, device="cpu", policy_kwargs=small(),
                    rollout_buffer_class=fsb3.RolloutBuffer)
        evaluation = EvalCallback(eval_env, n_eval_episodes=2, eval_freq=1, verbose=0)
        batches = record_minibatches(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(2 * N_STEPS, callback=[KillWorker(KILL_AFTER), evaluation, fsb3.RestartMarksCallback()])
        assert evaluated.evaluation == N_STEPS and evaluated.restarts == 2  # the eval env did restart, twice
        assert model.rollout_buffer.restarted.tolist() == [[False, i == KILL_AFTER] for i in range(N_STEPS)]
        assert len(np.concatenate([batch.actions.numpy() for batch in batches])) == 2 * N_STEPS - 1
        # The eval env, which no buffer reads, warns about its own restart; the training env does not.
        [warning] = restart_warnings(caught)
        assert "callback=fastenv.integrations.sb3.RestartMarksCallback()" in str(warning.message)
        # Once learn() has returned, the training env warns again about a restart in a loop of one's own.
        os.kill(venv.unwrapped.vector_env.worker_pids[1], signal.SIGKILL)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            *_, dones, infos = venv.step(np.zeros((2, 1), np.float32))
        assert fsb3.restarted_mask(infos, dones).tolist() == [False, True]
        [warning] = restart_warnings(caught)
    finally:
        venv.close()
        eval_env.close()


def test_without_the_callback_the_rollout_buffer_warns_and_keeps_the_invented_transition():
    venv = fsb3.make_vec(ENV_ID, 2)
    try:
        model = PPO("MlpPolicy", venv, n_steps=N_STEPS, batch_size=4, n_epochs=1, seed=0, device="cpu", policy_kwargs=small(),
                    rollout_buffer_class=fsb3.RolloutBuffer)
        batches = record_minibatches(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(2 * N_STEPS, callback=KillWorker(KILL_AFTER))
    finally:
        venv.close()
    assert not model.rollout_buffer.restarted.any()
    assert len(np.concatenate([batch.actions.numpy() for batch in batches])) == 2 * N_STEPS  # as SB3's own buffer
    [blind] = [w for w in caught if "got no restart marks" in str(w.message)]  # once, at the first add
    assert "callback=fastenv.integrations.sb3.RestartMarksCallback() to learn()" in str(blind.message)
    [warning] = [w for w in restart_warnings(caught) if w is not blind]  # and SB3VecEnv's, at the restart
    assert "a worker restart invented a transition for envs [1]" in str(warning.message)


@pytest.mark.parametrize("algorithm", ["ppo", "sac"])
def test_the_callback_refuses_sb3s_own_buffers_before_training(algorithm):
    env = DummyVecEnv([partial(CountdownEnv, 5)])
    if algorithm == "ppo":
        model = PPO("MlpPolicy", env, n_steps=N_STEPS, batch_size=4, device="cpu", policy_kwargs=small())
        buffer = "stable_baselines3.common.buffers.RolloutBuffer"
    else:
        model = SAC("MlpPolicy", env, learning_starts=4, batch_size=4, buffer_size=16, device="cpu", policy_kwargs=small())
        buffer = "stable_baselines3.common.buffers.ReplayBuffer"
    with pytest.raises(TypeError, match=rf"RestartMarksCallback hands restart marks to fastenv's buffers, but this "
                                        rf"{type(model).__name__} fills {buffer}: pass rollout_buffer_class="):
        model.learn(N_STEPS, callback=fsb3.RestartMarksCallback())
    assert model.num_timesteps == 0


def test_sb3s_own_buffer_gets_one_warning_that_names_the_fix():
    venv = fsb3.make_vec(ENV_ID, 2)
    try:
        model = PPO("MlpPolicy", venv, n_steps=N_STEPS, batch_size=8, n_epochs=1, seed=0, device="cpu", policy_kwargs=small())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(2 * N_STEPS, callback=KillWorker(2, 5))  # two restarts, one warning
    finally:
        venv.close()
    [warning] = restart_warnings(caught)
    assert "rollout_buffer_class=fastenv.integrations.sb3.RolloutBuffer" in str(warning.message)
    assert "replay_buffer_class=fastenv.integrations.sb3.ReplayBuffer" in str(warning.message)
    assert "callback=fastenv.integrations.sb3.RestartMarksCallback() to learn()" in str(warning.message)


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_sac_never_samples_the_transition_a_worker_restart_invented(dict_obs):
    venv = fsb3.make_vec(ENV_ID, 2, dict_obs=dict_obs)
    try:
        model = SAC(
            "MultiInputPolicy" if dict_obs else "MlpPolicy", venv, learning_starts=4, batch_size=16, buffer_size=64,
            seed=0, device="cpu", policy_kwargs=small(), replay_buffer_class=fsb3.ReplayBuffer,
        )
        buffer = model.replay_buffer
        assert type(buffer) is (fsb3.DictReplayBuffer if dict_obs else fsb3.ReplayBuffer)
        trained_on = record_samples(buffer)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.learn(2 * N_STEPS, callback=[KillWorker(KILL_AFTER), fsb3.RestartMarksCallback()])
    finally:
        venv.close()
    t = KILL_AFTER
    # Every real transition of these envs goes from t to t+1; the invented one, from the last
    # observation seen to itself. Training never drew it...
    assert len(trained_on) > 0
    for samples in trained_on:
        assert (t_of(samples.next_observations) == t_of(samples.observations) + 1).all()
        assert not samples.dones.any()
    # ...nor do many draws, which give every other transition (env 1 restarted at t: 0..t-1, then 0..).
    np.random.seed(0)
    drawn = buffer.sample(4000)
    pairs = set(zip(t_of(drawn.observations).tolist(), t_of(drawn.next_observations).tolist()))
    assert pairs == {(float(i), float(i + 1)) for i in range(N_STEPS)}
    # It is stored (a row holds every env), marked, and SB3's own sampler would draw it.
    stored_obs, stored_next = t_of(buffer.observations)[:N_STEPS], t_of(buffer.next_observations)[:N_STEPS]
    assert stored_obs[t, 1] == stored_next[t, 1] == t
    assert buffer.dones[t].tolist() == [0.0, 1.0] and buffer.timeouts[t].tolist() == [0.0, 1.0]
    assert buffer.restarted[:N_STEPS].tolist() == [[False, i == t] for i in range(N_STEPS)]
    sb3_class = _sb3_buffers.DictReplayBuffer if dict_obs else _sb3_buffers.ReplayBuffer
    theirs = sb3_class._get_samples(buffer, np.random.randint(0, buffer.pos, size=4000))
    assert (t_of(theirs.observations) == t_of(theirs.next_observations)).any()
    assert len(model.ep_info_buffer) == 0
    assert restart_warnings(caught) == []


def t_of(observations):
    """The CountdownEnv step count out of (dict or box) observations, as floats."""
    value = observations["t"] if isinstance(observations, dict) else observations
    value = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
    return value[..., 0]


def record_samples(buffer) -> list:
    """Keep every batch the replay buffer samples for training."""
    samples = []
    sample = buffer.sample

    def spy(batch_size, env=None):
        out = sample(batch_size, env=env)
        samples.append(out)
        return out

    buffer.sample = spy
    return samples


# -- without a restart, fastenv's buffers are SB3's own ------------------------------------------
def _same(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return np.array_equal(np.asarray(a), np.asarray(b))


def _parameters(model) -> list:
    return [p.detach().numpy().copy() for p in model.policy.parameters()]


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_rollout_buffers_without_restarts_are_sb3s_own(dict_obs):
    env = RandomLengthEnv if dict_obs else partial(CountdownEnv, 5)  # episodes end within a rollout
    runs = []
    for buffer_class in (None, fsb3.RolloutBuffer):
        venv = DummyVecEnv([env] * 2)
        model = PPO(
            "MultiInputPolicy" if dict_obs else "MlpPolicy", venv, n_steps=N_STEPS, batch_size=4, n_epochs=2,
            seed=0, device="cpu", policy_kwargs=small(), rollout_buffer_class=buffer_class,
        )
        batches = record_minibatches(model)
        record = Record()
        model.learn(2 * 2 * N_STEPS, callback=[record] + ([fsb3.RestartMarksCallback()] if buffer_class else []))
        runs.append((type(model.rollout_buffer), record.rollouts, [tuple(b) for b in batches], _parameters(model)))
    (sb3_type, sb3_rollouts, sb3_batches, sb3_weights), (our_type, our_rollouts, our_batches, our_weights) = runs
    assert sb3_type is (_sb3_buffers.DictRolloutBuffer if dict_obs else _sb3_buffers.RolloutBuffer)
    assert our_type is (fsb3.DictRolloutBuffer if dict_obs else fsb3.RolloutBuffer) and issubclass(our_type, sb3_type)
    assert len(sb3_rollouts) == 2 and any(r["episode_starts"][1:].any() for r in sb3_rollouts)
    assert all(_same(ours, theirs) for ours, theirs in zip(our_rollouts, sb3_rollouts))  # advantages, returns...
    assert len(sb3_batches) == 2 * 2 * (2 * N_STEPS // 4)  # rollouts * epochs * minibatches
    assert _same(tuple(our_batches), tuple(sb3_batches))  # every minibatch, in order
    assert all(np.array_equal(a, b) for a, b in zip(our_weights, sb3_weights))  # and so the trained weights


@pytest.mark.parametrize("dict_obs", [False, True], ids=["box", "dict"])
def test_replay_buffers_without_restarts_are_sb3s_own(dict_obs):
    env = partial(DictCountdownEnv if dict_obs else CountdownEnv, 5)
    runs = []
    for buffer_class in (None, fsb3.ReplayBuffer):
        model = SAC(
            "MultiInputPolicy" if dict_obs else "MlpPolicy", DummyVecEnv([env] * 2), learning_starts=6, batch_size=8,
            buffer_size=16, seed=0, device="cpu", policy_kwargs=small(), replay_buffer_class=buffer_class,
        )
        samples = record_samples(model.replay_buffer)
        model.learn(40, callback=[fsb3.RestartMarksCallback()] if buffer_class else [])  # 20 steps of 2 envs: the buffer of 8 rows wraps around
        runs.append((type(model.replay_buffer), [tuple(s) for s in samples], _parameters(model)))
    (sb3_type, sb3_samples, sb3_weights), (our_type, our_samples, our_weights) = runs
    assert our_type is (fsb3.DictReplayBuffer if dict_obs else fsb3.ReplayBuffer) and issubclass(our_type, sb3_type)
    assert len(sb3_samples) > 10 and _same(tuple(our_samples), tuple(sb3_samples))
    assert all(np.array_equal(a, b) for a, b in zip(our_weights, sb3_weights))


# -- the buffers on their own ------------------------------------------------------------------
@pytest.mark.parametrize("optimize_memory_usage", [False, True])
def test_replay_buffer_redraws_marked_transitions_uniformly(optimize_memory_usage):
    box = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    options = dict(n_envs=2, device="cpu", optimize_memory_usage=optimize_memory_usage,
                   handle_timeout_termination=not optimize_memory_usage)
    ours, theirs = fsb3.ReplayBuffer(16, box, box, **options), _sb3_buffers.ReplayBuffer(16, box, box, **options)  # 8 rows of 2 envs
    for row in range(11):  # wraps around: rows 0-2 are overwritten
        obs = np.array([[10.0 * row], [10.0 * row + 1]], np.float32)  # row and env, readable from obs
        marked = row in (4, 9)
        infos = [{}, {"worker_restarted": True, "TimeLimit.truncated": True} if marked else {}]
        for buffer in (ours, theirs):
            buffer.add(obs, obs + 0.5, obs, np.zeros(2, np.float32), np.array([False, marked]), infos)
    assert ours.restarted.sum() == 2
    np.random.seed(1)
    drawn = ours.sample(6000)
    seen = drawn.observations.numpy()[:, 0]
    assert not np.isin(seen, [41.0, 91.0]).any()  # env 1 at rows 4 and 9
    stored = ours.observations[:, :, 0].ravel()
    if optimize_memory_usage:  # the oldest row's next observation is overwritten: SB3 never draws it
        stored = np.delete(ours.observations[:, :, 0], ours.pos, axis=0).ravel()
    expected = set(stored.tolist()) - {41.0, 91.0}
    counts = {value: int((seen == value).sum()) for value in expected}
    assert set(counts) == expected and min(counts.values()) > 0.6 * 6000 / len(expected)
    # What is drawn is exactly what SB3 stores for that (row, env).
    for obs, action in zip(seen[:50], drawn.actions.numpy()[:50, 0]):
        assert action == obs
    # Overwriting the marked rows with real transitions unmarks them: SB3's samples again.
    for row in range(11, 19):
        obs = np.array([[10.0 * row], [10.0 * row + 1]], np.float32)
        for buffer in (ours, theirs):
            buffer.add(obs, obs + 0.5, obs, np.zeros(2, np.float32), np.array([False, False]), [{}, {}])
    assert not ours.restarted.any()
    np.random.seed(2)
    a = ours.sample(64)
    np.random.seed(2)
    b = theirs.sample(64)
    assert _same(tuple(a), tuple(b))
    assert pickle.loads(pickle.dumps(ours)).restarted.shape == (8, 2)


def test_a_replay_buffer_of_marked_transitions_only_refuses_to_sample():
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    buffer = fsb3.ReplayBuffer(4, box, box, n_envs=1, device="cpu")
    one = np.zeros((1, 1), np.float32)
    buffer.add(one, one, one, np.zeros(1, np.float32), np.array([True]), [{"worker_restarted": True}])
    with pytest.raises(RuntimeError, match="every transition in the replay buffer was invented"):
        buffer.sample(2)


def test_a_rollout_buffer_filled_outside_collect_rollouts_warns_once():
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    buffer = fsb3.RolloutBuffer(2, box, box, n_envs=1, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            buffer.add(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros(1), np.zeros(1), th.zeros(1), th.zeros(1))
    [warning] = [w for w in caught if "collect_rollouts" in str(w.message)]
    assert "got no restart marks for this step" in str(warning.message)
    assert "callback=fastenv.integrations.sb3.RestartMarksCallback() to learn()" in str(warning.message)
    assert "transitions a worker restart invented are kept" in str(warning.message)
    assert not buffer.restarted.any()


def test_rollout_buffer_takes_one_steps_marks_per_add_and_checks_them():
    box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    buffer = fsb3.RolloutBuffer(3, box, box, n_envs=2, device="cpu")
    step = (np.zeros((2, 1)), np.zeros((2, 1)), np.zeros(2), np.zeros(2), th.zeros(2), th.zeros(2))
    buffer.mark_restarts(np.array([False, True]))
    buffer.add(*step)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        buffer.add(*step)  # no marks for this one: not the last step's again
    assert buffer.restarted[:2].tolist() == [[False, True], [False, False]]
    assert [w for w in caught if "got no restart marks" in str(w.message)]
    for bad in (np.array([True]), np.array([0, 1]), [[False, True]]):
        with pytest.raises(ValueError, match=r"marks must be 2 booleans \(one per env\), got"):
            buffer.mark_restarts(bad)
    buffer.mark_restarts(np.array([True, False]))
    buffer.reset()  # a new rollout starts without the marks of a step that was never added
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        buffer.add(*step)
    assert not buffer.restarted.any()


def test_vec_monitor_without_restarts_is_sb3s():
    ours, theirs = fsb3.VecMonitor(DummyVecEnv([RandomLengthEnv] * 3)), VecMonitor(DummyVecEnv([RandomLengthEnv] * 3))
    for venv in (ours, theirs):
        venv.seed(3)
        venv.reset()
    rng = np.random.default_rng(0)
    for _ in range(40):
        actions = rng.uniform(-1, 1, (3, 3)).astype(np.float32)
        (*_, our_infos), (*_, their_infos) = ours.step(actions), theirs.step(actions)
        for a, b in zip(our_infos, their_infos):
            assert ("episode" in a) == ("episode" in b)
            if "episode" in a:
                assert (a["episode"]["r"], a["episode"]["l"]) == (b["episode"]["r"], b["episode"]["l"])
    assert ours.episode_count == theirs.episode_count > 5
