"""Stable-Baselines3 through SB3VecEnv: same infos as SB3's own DummyVecEnv, bootstrap, PPO on LIBERO."""

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("stable_baselines3", reason='Stable-Baselines3 is not installed (pip install -e ".[sb3]")')

from fakes import RandomLengthEnv  # noqa: E402
from helpers import assert_same  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from fastenv.integrations.sb3 import SB3VecEnv, make_vec_env  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402


@pytest.fixture
def pair():
    ours = SB3VecEnv(PipelineVectorEnv([RandomLengthEnv] * 4, num_workers=2))
    ref = DummyVecEnv([RandomLengthEnv] * 4)
    ours.seed(7)
    ref.seed(7)
    yield ours, ref
    ours.close()
    ref.close()


def test_steps_and_infos_match_sb3s_dummy_vec_env(pair):
    ours, ref = pair
    assert_same(ours.reset(), ref.reset())
    assert_same(ours.reset_infos, ref.reset_infos)
    rng = np.random.default_rng(0)
    truncated_seen = 0
    for t in range(40):
        actions = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
        obs, rew, done, infos = ours.step(actions)
        ref_obs, ref_rew, ref_done, ref_infos = ref.step(actions)
        assert_same(obs, ref_obs, f"obs {t}")
        np.testing.assert_array_equal(rew, ref_rew)
        np.testing.assert_array_equal(done, ref_done)
        assert rew.dtype == ref_rew.dtype == np.float32
        for i in range(4):
            assert set(infos[i]) == set(ref_infos[i]), (t, i)
            for key in ref_infos[i]:
                assert_same(infos[i][key], ref_infos[i][key], f"step {t} env {i} {key}")
            truncated_seen += int(infos[i]["TimeLimit.truncated"])
        assert_same(ours.reset_infos, ref.reset_infos)
    assert truncated_seen > 3


def test_attributes_methods_and_wrappers(pair):
    ours, _ = pair
    assert ours.get_attr("max_len") == [12] * 4
    ours.set_attr("max_len", 5, indices=[1, 2])
    assert ours.get_attr("max_len") == [12, 5, 5, 12]
    assert ours.get_attr("max_len", indices=2) == [5]
    assert ours.env_method("reset", seed=3, indices=[0])[0][1] == {"length": RandomLengthEnv().reset(seed=3)[1]["length"]}
    assert ours.env_is_wrapped(Monitor) == [False] * 4
    assert ours.env_is_wrapped(gym.Wrapper, indices=[0]) == [False]
    assert ours.render_mode is None


def test_attributes_answer_as_sb3s_own_vec_env_does(pair):
    # has_attr, a new attribute set on some envs, negative indices: the same answers as DummyVecEnv's.
    for venv in pair:
        venv.reset()
        assert venv.has_attr("max_len") and not venv.has_attr("no_such_attribute")
        venv.set_attr("brand_new", 7, indices=1)
        assert venv.get_attr("brand_new", indices=[1]) == [7]
        assert not venv.has_attr("brand_new")  # only env 1 has it
        assert venv.get_attr("max_len", indices=-1) == [12]
        venv.set_attr("max_len", 3, indices=[-1])
        assert venv.get_attr("max_len") == [12, 12, 12, 3]
        assert venv.env_method("reset", seed=3, indices=-1)[0][1] == RandomLengthEnv(max_len=3).reset(seed=3)[1]
        assert venv.env_is_wrapped(Monitor, indices=[-1, -2]) == [False, False]
        with pytest.raises(IndexError):
            venv.get_attr("max_len", indices=[4])


def test_ppo_bootstraps_truncated_episodes_from_the_final_observations(pair):
    ours, _ = pair
    model = PPO("MultiInputPolicy", ours, n_steps=24, batch_size=48, n_epochs=1, seed=0, device="cpu")
    seen = []
    original = model.policy.obs_to_tensor

    def spy(observation):
        # In collect_rollouts, obs_to_tensor is only called on infos["terminal_observation"].
        seen.append({k: np.array(v) for k, v in observation.items()})
        return original(observation)

    model.policy.obs_to_tensor = spy
    finals = []
    step = ours.step_wait

    def recording_step_wait():
        out = step()
        finals.extend(info["terminal_observation"] for info in out[3] if info.get("TimeLimit.truncated"))
        return out

    ours.step_wait = recording_step_wait
    model.learn(total_timesteps=48)
    assert len(finals) > 0 and len(seen) == len(finals)
    for got, want in zip(seen, finals):
        assert_same(got, {k: np.asarray(v) for k, v in want.items()})


def test_tensors_of_a_torch_backend_come_out_as_numpy():
    # ManiSkill keeps its tensors on the device; SB3 needs numpy everywhere.
    torch = pytest.importorskip("torch")
    from fake_maniskill import FakeManiSkillEnv

    from fastenv.backends.maniskill import ManiSkillVectorEnv

    venv = SB3VecEnv(ManiSkillVectorEnv(FakeManiSkillEnv(max_goal=3), modalities=["state"], chunk=2, max_episode_steps=100))
    obs = venv.reset()
    assert isinstance(obs["state"], np.ndarray) and obs["state"].shape == (4, 4)
    done_seen = 0
    for _ in range(4):
        obs, rewards, dones, infos = venv.step(np.full((4, 2, 3), 0.5, np.float32))
        assert isinstance(obs["state"], np.ndarray) and rewards.dtype == np.float32 and dones.dtype == np.bool_
        for i in np.flatnonzero(dones):
            assert isinstance(infos[i]["terminal_observation"]["state"], np.ndarray)
            done_seen += 1
        for info in infos:
            assert not any(isinstance(v, torch.Tensor) for v in info.values())
    assert done_seen >= 4
    venv.close()


@pytest.mark.parametrize("kind", ["dict", "tuple"])
def test_per_env_dict_and_tuple_actions_are_batched_as_sb3s_vec_envs_take_them(kind):
    # SB3's DummyVecEnv and SubprocVecEnv index the actions by env: a list of one dict (tuple) per
    # env goes, as does Gymnasium's batch (a dict / tuple of batches); a wrong count is refused.
    # Two envs and a Tuple of two spaces: a list of two per-env tuples is not taken for a batch.
    leaves = {"a": gym.spaces.Discrete(3), "b": gym.spaces.Box(-1, 1, (2,), np.float32)}
    space = gym.spaces.Dict(leaves) if kind == "dict" else gym.spaces.Tuple(tuple(leaves.values()))
    first = space.sample()

    class EchoEnv(gym.Env):  # observes its action (local: the workers get it by value)
        observation_space = action_space = space

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return first, {}

        def step(self, action):
            return action, 0.0, False, False, {}

    ours = SB3VecEnv(PipelineVectorEnv([EchoEnv] * 2, num_workers=1))
    ref = DummyVecEnv([EchoEnv] * 2)
    try:
        assert_same(ours.reset(), ref.reset())
        space.seed(0)
        for _ in range(3):
            actions = [space.sample() for _ in range(2)]
            obs = ours.step(actions)[0]
            assert_same(obs, ref.step(actions)[0])
            assert_same(ours.step(obs)[0], obs)  # the batched form, as before
        with pytest.raises(ValueError, match=r"actions must hold one action per env \(2\), got 1"):
            ours.step(actions[:1])
        assert_same(ours.step(actions)[0], obs)  # still usable
    finally:
        ours.close()
        ref.close()


@pytest.mark.libero
@pytest.mark.big_memory
def test_ppo_trains_on_libero_through_the_adapter():
    venv = make_vec_env("fastenv/Libero-v0", 2, num_workers=2, chunk=4, camera_size=64, max_episode_steps=40)
    try:
        model = PPO("MultiInputPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=128)  # 128 chunks = 512 simulator steps
        assert model.num_timesteps >= 128
        changed = any(not np.array_equal(a.numpy(), b.detach().numpy()) for a, b in zip(before, model.policy.parameters()))
        assert changed
        assert len(model.ep_info_buffer) >= 2  # 40-step episodes in chunks of 4 ended, and were logged
    finally:
        venv.close()
