"""The ManiSkill backend's batched (GPU) logic on a stand-in for ManiSkill's batched BaseEnv.

The GPU simulation cannot run on these machines; the real simulator (CPU) is tested in
tests/test_maniskill_cpu.py.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason='the ManiSkill backend needs torch (pip install "fastenv[maniskill]")')

from fake_maniskill import FakeManiSkillEnv  # noqa: E402

from fastenv.backends.maniskill import ManiSkillVectorEnv, obs_mode_for, split_key  # noqa: E402

CAMS = ["base_camera", "hand_camera"]


def test_obs_mode_asks_only_for_kept_textures():
    assert obs_mode_for(["state"], CAMS) == "state"
    assert obs_mode_for(["base_camera_rgb"], CAMS) == "rgb"
    assert obs_mode_for(["state", "hand_camera_depth", "base_camera_rgb"], CAMS) == "rgb+depth+state"
    assert split_key("hand_camera_segmentation", CAMS) == ("hand_camera", "segmentation")
    assert split_key("state", CAMS) is None


def reference_step(env, actions):
    """Stock BaseEnv.step plus ManiSkill-style same-step partial autoreset."""
    obs, reward, term, trunc, info = env.step(actions)
    done = term | trunc
    final = {k: v.clone() for k, v in [("state", obs["state"])]}
    if done.any():
        obs, _ = env.reset(options={"env_idx": torch.nonzero(done).flatten()})
    return obs, reward, term, trunc, done, final


def test_plain_actions_reproduce_the_stock_step_with_autoreset():
    ours_env, ref_env = FakeManiSkillEnv(), FakeManiSkillEnv()
    envs = ManiSkillVectorEnv(ours_env, modalities=["state", "base_camera_rgb"], max_episode_steps=100)
    obs, _ = envs.reset(seed=0)
    ref_obs, _ = ref_env.reset(seed=0)
    torch.testing.assert_close(obs["state"], ref_obs["state"])
    rng = np.random.default_rng(0)
    ended = 0
    for _ in range(30):
        a = torch.as_tensor(rng.uniform(0.1, 1, (4, 3)), dtype=torch.float32)
        a[:, 0] = env_step_x = ours_env.STEP  # noqa: F841  (so episodes end on their seeded goal)
        obs, reward, term, trunc, infos = envs.step(a)
        ref_obs, ref_reward, ref_term, ref_trunc, ref_done, ref_final = reference_step(ref_env, a)
        torch.testing.assert_close(obs["state"], ref_obs["state"])
        torch.testing.assert_close(obs["base_camera_rgb"], ref_obs["sensor_data"]["base_camera"]["rgb"])
        assert reward.dtype == torch.float64  # rewards are float64 in every backend, as in Gymnasium
        assert torch.equal(reward, ref_reward.double())
        assert torch.equal(term, ref_term) and torch.equal(trunc, ref_trunc)
        if ref_done.any():
            # One layout for every backend: final_obs holds one observation per env (None elsewhere).
            assert torch.equal(infos["_final_obs"], ref_done)
            ids = torch.nonzero(ref_done).flatten().tolist()
            assert [i for i, f in enumerate(infos["final_obs"]) if f is not None] == ids
            for i in ids:
                assert torch.equal(infos["final_obs"][i]["state"], ref_final["state"][i])
            assert torch.equal(infos["final_info"]["_success"], ref_done)
            ended += int(ref_done.sum())
    assert ended > 5


def test_chunks_render_once_and_stop_ended_envs():
    env = FakeManiSkillEnv(max_goal=3)
    envs = ManiSkillVectorEnv(env, modalities=["state", "base_camera_rgb"], chunk=6, gamma=0.5, max_episode_steps=100)
    envs.reset(seed=1)
    goal = env.goal_steps.clone()
    env.renders.clear()
    actions = torch.full((4, 6, 3), env.STEP)
    obs, reward, term, trunc, infos = envs.step(actions)
    assert term.all()  # every goal (<= 3 steps) is reached inside the chunk of 6
    assert torch.equal(infos["chunk_steps"], goal)  # each env stopped at its own success
    assert torch.equal(infos["_final_obs"], term)
    for i in range(4):
        k = int(goal[i])
        np.testing.assert_allclose(infos["chunk_rewards"][i, k:].numpy(), 0.0)
        discounts = 0.5 ** torch.arange(6)
        torch.testing.assert_close(reward[i], (infos["chunk_rewards"][i] * discounts).sum())
        assert infos["chunk_discount"][i] == pytest.approx(0.5**k)
    # renders: one per distinct ending step inside the chunk (final obs), one in the reset
    assert len(env.renders) == len(set(goal.tolist())) + 1


def test_chunk_without_episode_end_renders_exactly_once():
    env = FakeManiSkillEnv(max_goal=50)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=8, max_episode_steps=1000)
    envs.reset(seed=2)
    env.goal[:] = 1000
    env.renders.clear()
    obs, reward, term, trunc, infos = envs.step(torch.full((4, 8, 3), 0.1))
    assert len(env.renders) == 1 and not (term | trunc).any()
    assert torch.equal(infos["chunk_steps"], torch.full((4,), 8))
    assert "final_obs" not in infos


def test_pruning_drops_unread_sensors_and_textures():
    env = FakeManiSkillEnv(obs_mode="rgb+depth+state")
    envs = ManiSkillVectorEnv(env, modalities=["state", "base_camera_rgb"])
    assert list(env._sensors) == ["base_camera"]
    assert env.obs_mode_struct.visual.rgb and not env.obs_mode_struct.visual.depth
    assert set(envs.single_observation_space.spaces) == {"state", "base_camera_rgb"}
    env.renders.clear()
    envs.step(torch.zeros(4, 3))
    assert env.renders == [("base_camera",)]


def test_pruning_errors():
    with pytest.raises(ValueError, match=r"unknown observation key\(s\) \['wrist_rgb'\]"):
        ManiSkillVectorEnv(FakeManiSkillEnv(), modalities=["wrist_rgb"])
    with pytest.raises(ValueError, match="not produced by this env"):
        ManiSkillVectorEnv(FakeManiSkillEnv(obs_mode="rgb+state"), modalities=["base_camera_depth"])


def test_stages_share_the_world_and_keep_simulated_time_per_action():
    env = FakeManiSkillEnv(max_goal=10**6)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=2, pipeline_stages=2, max_episode_steps=10**6)
    assert env.scene.timestep == pytest.approx(0.005)  # the world step is halved for two stages
    envs.reset(seed=3)
    env.goal[:] = 10**6
    times = {0: [], 1: []}
    for k in range(2):
        envs.send(torch.full((2, 2, 3), 0.1), stage=k)
    for _ in range(4):
        for k in range(2):
            obs, reward, term, trunc, infos = envs.recv(stage=k)
            assert obs["state"].shape == (2, 4) and reward.shape == (2,)
            times[k].append(obs["state"][:, 3].clone())
            envs.send(torch.full((2, 2, 3), 0.1), stage=k)
    for k in range(2):
        deltas = torch.diff(torch.stack(times[k]), dim=0)
        # 2 sub-steps per chunk, each 0.01 s of an env's time: 0.02 s per chunk, as with one stage
        torch.testing.assert_close(deltas, torch.full_like(deltas, 0.02))
    for k in range(2):
        envs.recv(stage=k)
    envs.close()


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda e: e.step(torch.zeros(4, 5, 3)), ValueError, r"shape \(4, 2, 3\), got \(4, 5, 3\)"),
        (lambda e: e.step(torch.full((4, 2, 3), float("nan"))), ValueError, "finite"),
        (lambda e: e.send(torch.zeros(2, 2, 3), stage=2), ValueError, r"stage must be in \[0, 2\)"),
        (lambda e: e.recv(stage=1), RuntimeError, r"recv\(stage=1\) without send"),
    ],
)
def test_bad_input(call, error, match):
    envs = ManiSkillVectorEnv(FakeManiSkillEnv(), modalities=["state"], chunk=2, pipeline_stages=2)
    envs.reset(seed=0)
    with pytest.raises(error, match=match):
        call(envs)
    envs.step(torch.zeros(4, 2, 3))  # still usable


def test_layout_error():
    with pytest.raises(ValueError, match="num_envs must be a multiple of pipeline_stages"):
        ManiSkillVectorEnv(FakeManiSkillEnv(num_envs=3), pipeline_stages=2)


def test_envs_not_stepped_hold_their_last_targets():
    # With stages, a stage's step advances the shared world: the other stage's envs keep the
    # targets of their own last action (never a substituted zero action), so they keep moving.
    env = FakeManiSkillEnv(max_goal=10**6)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=2, pipeline_stages=2, max_episode_steps=10**6)
    envs.reset(seed=0)
    env.goal[:] = 10**6
    envs.send(torch.full((2, 2, 3), 0.4), stage=0)
    envs.recv(stage=0)
    env.physics_targets.clear()
    envs.send(torch.full((2, 2, 3), 0.8), stage=1)
    envs.recv(stage=1)
    assert len(env.physics_targets) == 2  # one world step per sub-step of the stage, for everyone
    for targets in env.physics_targets:
        torch.testing.assert_close(targets[:2], torch.full((2, 3), 0.4))  # stage 0 held its own targets
        torch.testing.assert_close(targets[2:], torch.full((2, 3), 0.8))
    torch.testing.assert_close(env.agent.controller._target_qpos[:2], torch.full((2, 3), 0.4))
    # stage 0's envs moved with their held target through both stages' sub-steps (4 x 0.005 s)
    torch.testing.assert_close(env.pos[:2, 0], torch.full((2,), 0.4 * 0.005 * 4))


def test_an_env_whose_episode_ended_holds_its_targets_for_the_rest_of_the_chunk():
    env = FakeManiSkillEnv(max_goal=3)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=6, max_episode_steps=100)
    envs.reset(seed=4)
    env.goal_steps[:] = torch.tensor([2, 6, 6, 6])  # env 0 ends after 2 sub-steps, the others run on
    env.goal[:] = env.goal_after(env.goal_steps)
    env.physics_targets.clear()
    envs.step(torch.full((4, 6, 3), env.STEP))
    assert len(env.physics_targets) == 6
    for targets in env.physics_targets:  # env 0 held its last target through the chunk, never 0
        torch.testing.assert_close(targets, torch.full((4, 3), env.STEP))


def test_a_batched_env_someone_built_is_driven_in_place():
    from fastenv.backends.maniskill import adopt

    env = FakeManiSkillEnv(num_envs=4)
    envs = adopt(env, chunk=2, modalities=["state"], gamma=None, render_mode="keep")
    assert isinstance(envs, ManiSkillVectorEnv) and envs.num_envs == 4
    envs.reset(seed=0)
    obs, reward, *_ = envs.step(torch.zeros(4, 2, 3))
    assert obs["state"].shape == (4, 4) and reward.shape == (4,)
    with pytest.raises(ValueError, match="for batched ManiSkill envs wrap\\(\\) takes chunk, modalities, gamma and render_mode"):
        adopt(FakeManiSkillEnv(num_envs=4), flatten=True)
