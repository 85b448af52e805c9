"""Stable-Baselines3 through SB3VecEnv: same infos as SB3's own DummyVecEnv, bootstrap, PPO on LIBERO."""

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("stable_baselines3", "Stable-Baselines3 is not installed")

from fakes import RandomLengthEnv  # noqa: E402
from helpers import assert_same  # noqa: E402
from stable_baselines3 import PPO  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from fastenv.integrations.sb3 import SB3VecEnv, make_vec  # noqa: E402
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
    torch = need("torch")
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
    venv = make_vec("fastenv/Libero-v0", 2, num_workers=2, chunk=4, camera_size=64, max_episode_steps=40)
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


# -- the same data as SB3 on LIBERO's own env ------------------------------------------------------
# The reference is SB3's collector (PPO's collect_rollouts, its Monitor and its rollout buffer) on
# SB3's vectorization of LIBERO's own env with each env in a process of its own (SubprocVecEnv),
# stepped one action at a time (chunk 1) or K at a time by the reference chunk loop
# (tests/stock_libero.py); fastenv's side is the same PPO on fastenv.integrations.sb3.make_vec.


class _Recorder:
    """What PPO collected: every step's rewards, dones and final observations (before the time-out
    bootstrap), each rollout buffer, the episode statistics and the parameters after learning."""

    def __new__(cls):
        from stable_baselines3.common.callbacks import BaseCallback

        class Recorder(BaseCallback):
            def __init__(self):
                super().__init__()
                self.data = {"rewards": [], "dones": [], "final_obs": [], "truncated": [], "buffers": []}

            def _on_step(self):
                d = self.data
                d["rewards"].append(self.locals["rewards"].copy())
                d["dones"].append(self.locals["dones"].copy())
                for i, info in enumerate(self.locals["infos"]):
                    if self.locals["dones"][i]:
                        d["final_obs"].append((len(d["dones"]), i, np.asarray(info["terminal_observation"]).copy()))
                        d["truncated"].append(bool(info["TimeLimit.truncated"]))
                return True

            def _on_rollout_end(self):
                b = self.model.rollout_buffer
                self.data["buffers"].append({k: getattr(b, k).copy() for k in (
                    "observations", "actions", "rewards", "returns", "episode_starts", "values", "log_probs", "advantages")})

        return Recorder()


def _learn(venv, chunk):
    n_steps = 32 if chunk == 1 else 6  # two rollouts: 64 or 96 simulator steps per env, 3 to 5 episodes each
    recorder = _Recorder()
    try:
        model = PPO("MlpPolicy", venv, n_steps=n_steps, batch_size=n_steps, n_epochs=1, seed=0, device="cpu",
                    policy_kwargs={"net_arch": [16]})
        model.learn(total_timesteps=2 * n_steps * venv.num_envs, callback=recorder)
        data = recorder.data
        data["episodes"] = [(e["r"], e["l"]) for e in model.ep_info_buffer]  # Monitor's statistics, less the wall time
        data["parameters"] = [p.detach().numpy().copy() for p in model.policy.parameters()]
        return data
    finally:
        venv.close()


def _stock_sb3(chunk):
    import functools

    from stable_baselines3.common.env_util import make_vec_env as sb3_make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv
    from stock_libero import make_stock

    venv = sb3_make_vec_env(functools.partial(make_stock, chunk=chunk), n_envs=2, vec_env_cls=SubprocVecEnv,
                            vec_env_kwargs={"start_method": "spawn"})
    return _learn(venv, chunk)


def _fastenv_sb3(chunk, alter=None):
    from stock_libero import fastenv_options

    from fastenv.integrations.sb3 import VecMonitor

    vector = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, **fastenv_options(chunk))
    return _learn(VecMonitor(SB3VecEnv(vector if alter is None else alter(vector))), chunk)


def _assert_same_collection(got, want):
    assert len(got["buffers"]) == len(want["buffers"]) == 2
    for r, (g, w) in enumerate(zip(got["buffers"], want["buffers"])):
        for key in w:
            assert g[key].dtype == w[key].dtype, key
            assert_same(g[key], w[key], f"rollout {r}: {key}")
    for key in ("rewards", "dones", "truncated", "episodes"):
        assert_same(np.asarray(got[key]), np.asarray(want[key]), key)
    assert [(t, i) for t, i, _ in got["final_obs"]] == [(t, i) for t, i, _ in want["final_obs"]]
    for (t, i, g), (_, _, w) in zip(got["final_obs"], want["final_obs"]):
        assert_same(g, w, f"final observation of env {i} at step {t}")
    assert_same(tuple(got["parameters"]), tuple(want["parameters"]), "parameters after learning")


@same_data_on_stock_libero
def test_ppo_collects_on_fastenv_what_it_collects_on_subproc_vec_env_over_stock_libero(chunk, monkeypatch):
    from fakes import AlteredReward
    from stock_libero import schedule_success

    schedule_success(monkeypatch)
    want = _stock_sb3(chunk)
    _assert_same_collection(_fastenv_sb3(chunk), want)
    # What the window covers: several episodes per env, ended by success and by the time limit.
    terminated, truncated = sum(not t for t in want["truncated"]), sum(want["truncated"])
    assert terminated >= 2 and truncated >= 1 and len(want["episodes"]) >= 6, (terminated, truncated)
    # Negative control: one reward of one env altered by 1e-6, below SB3's monitor, is caught.
    with pytest.raises(AssertionError):
        _assert_same_collection(_fastenv_sb3(chunk, alter=lambda v: AlteredReward(v, call=5, index=1, by=1e-6)), want)


def _observations(venv, steps=45):
    """Every observation of ``steps`` steps of fixed random actions (SB3 autoresets at each episode's end)."""
    try:
        venv.seed(3)
        out = [venv.reset()]
        rng = np.random.default_rng(0)
        ends = []
        for t in range(steps):
            obs, _, dones, _ = venv.step(rng.uniform(-1, 1, (venv.num_envs, 7)).astype(np.float32))
            out.append(obs)
            ends += [t + 1] if dones.any() else []
        return np.stack(out), ends
    finally:
        venv.close()


@pytest.mark.libero
@pytest.mark.big_memory
def test_stock_envs_in_one_process_draw_each_others_scenes_and_fastenvs_envs_do_not():
    # LIBERO places its scenes (here a microwave and its door) with numpy's global generator, which
    # env.seed seeds: stock envs that share a process take each other's numbers at every reset. So SB3's
    # default, DummyVecEnv, over two stock envs equals each env stepped alone (SubprocVecEnv: a process
    # each) only until the first autoreset. fastenv's two envs in one worker process equal them alone.
    import functools

    from stable_baselines3.common.vec_env import SubprocVecEnv
    from stock_libero import make_stock, fastenv_options

    alone, ends = _observations(SubprocVecEnv([make_stock] * 2, start_method="spawn"))
    shared, _ = _observations(DummyVecEnv([functools.partial(make_stock, own_context=True)] * 2))
    ours, _ = _observations(SB3VecEnv(gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=1, **fastenv_options(1))))
    first_reset = ends[0]
    assert ends and first_reset < len(alone) - 1
    assert_same(shared[: first_reset], alone[: first_reset])
    assert not np.array_equal(shared[first_reset:], alone[first_reset:])  # the next scenes differ
    assert_same(ours, alone)
