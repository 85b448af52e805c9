"""The ManiSkill backend's batched (GPU) logic on a stand-in for ManiSkill's batched BaseEnv.

The GPU simulation cannot run on these machines; the real simulator (CPU) is tested in
tests/test_maniskill_cpu.py.
"""

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
torch = need("torch", "the ManiSkill backend needs it")

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
    # enhanced_determinism: the autoresets are unseeded, and ManiSkill draws them from torch's
    # global generator (shared by both envs here) unless it derives them from the last seed.
    ours_env, ref_env = FakeManiSkillEnv(enhanced_determinism=True), FakeManiSkillEnv(enhanced_determinism=True)
    envs = ManiSkillVectorEnv(ours_env, modalities=["state", "base_camera_rgb"], max_episode_steps=100)
    obs, _ = envs.reset(seed=0)
    ref_obs, _ = ref_env.reset(seed=[0, 1, 2, 3])  # fastenv's int seed: env i gets seed + i
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
    # Every row and sub-step carries its own action, so a mix-up of rows would show.
    env = FakeManiSkillEnv(max_goal=10**6)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=2, pipeline_stages=2, max_episode_steps=10**6)
    envs.reset(seed=0)
    env.goal[:] = 10**6
    first = torch.arange(12, dtype=torch.float32).reshape(2, 2, 3) / 20 + 0.05  # stage 0: envs 0, 1
    second = -torch.arange(12, dtype=torch.float32).reshape(2, 2, 3) / 20 - 0.1  # stage 1: envs 2, 3
    start = env.pos.clone()
    envs.send(first, stage=0)
    envs.recv(stage=0)
    env.physics_targets.clear()
    envs.send(second, stage=1)
    envs.recv(stage=1)
    assert len(env.physics_targets) == 2  # one world step per sub-step of the stage, for everyone
    for k, targets in enumerate(env.physics_targets):
        assert torch.equal(targets[:2], first[:, -1])  # stage 0 held its own last targets, row by row
        assert torch.equal(targets[2:], second[:, k])
    assert torch.equal(env.agent.controller._target_qpos[:2], first[:, -1])
    assert torch.equal(env.agent.robot.get_drive_targets()[:2], first[:, -1])
    # stage 0's envs moved with their own actions, then their held targets, through both stages' sub-steps
    dt = 0.005
    torch.testing.assert_close(env.pos[:2] - start[:2], (first[:, 0] + 3 * first[:, 1]) * dt)
    torch.testing.assert_close(env.pos[2:] - start[2:], 2 * first[:, 1].new_zeros(2, 3) + (second[:, 0] + second[:, 1]) * dt)


def test_an_env_whose_episode_ended_holds_its_targets_for_the_rest_of_the_chunk():
    env = FakeManiSkillEnv(max_goal=3)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=6, max_episode_steps=100)
    envs.reset(seed=4)
    ends = torch.tensor([2, 3, 6, 6])  # envs 0 and 1 end after 2 and 3 sub-steps, the others run on
    env.goal_steps[:] = ends
    env.goal[:] = env.goal_after(env.goal_steps)
    env.physics_targets.clear()
    actions = torch.full((4, 6, 3), env.STEP)
    actions[..., 1:] = torch.arange(48, dtype=torch.float32).reshape(4, 6, 2) / 50  # each row and sub-step its own
    envs.step(actions)
    assert len(env.physics_targets) == 6
    for k, targets in enumerate(env.physics_targets):  # an ended env held its last target through the chunk, never 0
        for i in range(4):
            assert torch.equal(targets[i], actions[i, min(k, int(ends[i]) - 1)]), (k, i)


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


# -- against ManiSkill's own wrappers (they run over the stand-in) ----------------------------------
def stock_vector_env():
    """ManiSkill's ManiSkillVectorEnv and TimeLimitWrapper (gym.make's), to run over the stand-in."""
    stock = need("mani_skill.vector.wrappers.gymnasium", "ManiSkill's own vector env is the reference")
    from mani_skill.utils.registration import TimeLimitWrapper

    return stock.ManiSkillVectorEnv, TimeLimitWrapper


def assert_same(ours, ref, where):
    """Equal keys, dtypes, shapes and values (tensors, bools, dicts of them)."""
    if isinstance(ref, dict):
        assert isinstance(ours, dict) and set(ours) == set(ref), f"{where}: {sorted(ours)} != stock {sorted(ref)}"
        for key in ref:
            assert_same(ours[key], ref[key], f"{where}[{key}]")
        return
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, torch.Tensor), f"{where}: {type(ours)}"
        assert ours.dtype == ref.dtype and ours.shape == ref.shape, f"{where}: {ours.dtype}{list(ours.shape)} != stock {ref.dtype}{list(ref.shape)}"
        assert torch.equal(ours, ref), f"{where}: {ours} != stock {ref}"
        return
    assert type(ours) is type(ref) and ours == ref, f"{where}: {ours!r} != stock {ref!r}"


@pytest.mark.parametrize("ignore_terminations", [False, True])
def test_maniskill_conventions_on_the_batched_path_equal_maniskills_own_vector_env(ignore_terminations):
    # ManiSkill's PPO settings (record_metrics=True) over the batched env, against ManiSkill's own
    # ManiSkillVectorEnv over the same stand-in: every returned value, episode metrics included.
    from fastenv.integrations.maniskill import ManiSkillConventions

    Stock, TimeLimitWrapper = stock_vector_env()
    limit, n = 6, 4
    make = lambda: FakeManiSkillEnv(num_envs=n, obs_mode="state", max_goal=8, enhanced_determinism=True)  # noqa: E731
    stock = Stock(TimeLimitWrapper(make(), limit), ignore_terminations=ignore_terminations, record_metrics=True)
    ours = ManiSkillConventions(
        ManiSkillVectorEnv(make(), max_episode_steps=limit, ignore_terminations=ignore_terminations),
        record_metrics=True, ignore_terminations=ignore_terminations, device="cpu", max_episode_steps=limit,
    )
    obs, info = ours.reset(seed=[5, 6, 7, 8])
    ref, ref_info = stock.reset(seed=[5, 6, 7, 8])
    assert_same(obs, ref, "reset obs")
    assert_same(info, ref_info, "reset info")
    rng = np.random.default_rng(6)
    ended = both = 0
    for t in range(40):
        action = torch.as_tensor(rng.uniform(-1, 1, (n, 3)), dtype=torch.float32)
        action[:, 0] = torch.as_tensor(rng.uniform(0.2, 1.0, n), dtype=torch.float32)  # toward the goals: some succeed
        out = ours.step(action)
        want = stock.step(action)
        for name, got, expected in zip(("obs", "reward", "terminated", "truncated", "infos"), out, want):
            assert_same(got, expected, f"step {t} {name}")
        if "final_info" in want[4]:
            ended += int(want[4]["_final_info"].sum())
            both += int((want[4]["final_info"]["success"] & want[3]).sum())
    assert ended > 10 and both > 0  # some succeeded on the time limit's step


def test_elapsed_steps_are_each_envs_own():
    # The shared world steps for every env on every stage's turn (ManiSkill's counter counts those);
    # an env's elapsed_steps counts its own sub-steps, as its episode length and time limit do.
    env = FakeManiSkillEnv(max_goal=10**6)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=2, pipeline_stages=2, max_episode_steps=5)
    _, info = envs.reset(seed=0)
    assert info["elapsed_steps"].dtype == torch.int32 and info["elapsed_steps"].tolist() == [0, 0, 0, 0]
    seen = {0: [], 1: []}
    for r in range(3):
        for stage in (0, 1):
            envs.send(torch.full((2, 2, 3), 0.1), stage=stage)
            _, _, _, trunc, infos = envs.recv(stage=stage)
            final = infos.get("final_info", {}).get("elapsed_steps")
            seen[stage].append((infos["elapsed_steps"].tolist(), None if final is None else final.tolist(), trunc.tolist()))
        if r == 0:
            assert env.elapsed_steps.tolist() == [4, 4, 4, 4]  # ManiSkill's own counter: every world step
    assert seen[0] == seen[1] == [([2, 2], None, [False, False]), ([4, 4], None, [False, False]), ([0, 0], [5, 5], [True, True])]


def test_maniskill_conventions_seed_the_batched_envs_as_maniskill_does():
    # ManiSkill's scripts reset(seed=int): on the batched path every env then gets the seed (and
    # generators) ManiSkill's own reset(seed=int) gives it.
    from fastenv.integrations.maniskill import ManiSkillConventions

    Stock, TimeLimitWrapper = stock_vector_env()
    stock_env, ours_env = FakeManiSkillEnv(obs_mode="state"), FakeManiSkillEnv(obs_mode="state")
    stock = Stock(TimeLimitWrapper(stock_env, 10))
    ours = ManiSkillConventions(ManiSkillVectorEnv(ours_env, max_episode_steps=10), device="cpu")
    obs, _ = ours.reset(seed=7)
    ref, _ = stock.reset(seed=7)
    assert torch.equal(obs, ref)
    assert np.array_equal(ours_env._episode_seed, stock_env._episode_seed)
    assert list(ours_env._main_seed) == list(stock_env._main_seed)


def test_success_on_the_time_limit_step_is_also_a_truncation():
    # ManiSkill's TimeLimitWrapper (as Gymnasium's TimeLimit and fastenv's CPU path) truncates at the
    # limit whatever ``terminated`` says.
    Stock, TimeLimitWrapper = stock_vector_env()
    goals = torch.tensor([3, 3, 9, 2])  # envs 0, 1 succeed on the limit's step, 2 runs out, 3 succeeds before
    ours_env, stock_env = FakeManiSkillEnv(max_goal=9), FakeManiSkillEnv(max_goal=9)
    envs = ManiSkillVectorEnv(ours_env, modalities=["state"], max_episode_steps=3)
    stock = Stock(TimeLimitWrapper(stock_env, 3))
    envs.reset(seed=0)
    stock.reset(seed=0)
    for env in (ours_env, stock_env):
        env.goal_steps[:] = goals
        env.goal[:] = env.goal_after(goals)
    action = torch.zeros(4, 3)
    action[:, 0] = FakeManiSkillEnv.STEP
    for t in range(3):
        _, _, term, trunc, _ = envs.step(action)
        _, _, ref_term, ref_trunc, _ = stock.step(action)
        assert torch.equal(term, ref_term) and torch.equal(trunc, ref_trunc), t
    assert term.tolist() == [True, True, False, False] and trunc.tolist() == [True, True, True, False]


def test_success_on_the_time_limit_step_inside_a_chunk_is_also_a_truncation():
    env = FakeManiSkillEnv(max_goal=9)
    envs = ManiSkillVectorEnv(env, modalities=["state"], chunk=4, max_episode_steps=3)
    envs.reset(seed=0)
    env.goal_steps[:] = torch.tensor([3, 9, 2, 4])
    env.goal[:] = env.goal_after(env.goal_steps)
    _, _, term, trunc, infos = envs.step(torch.full((4, 4, 3), FakeManiSkillEnv.STEP))
    assert term.tolist() == [True, False, True, False] and trunc.tolist() == [True, True, False, True]
    assert infos["chunk_steps"].tolist() == [3, 3, 2, 3]


def initial_state(env, i):
    return env.pos[i].clone(), env.goal_steps[i].clone()


def test_a_seeded_partial_reset_gives_each_env_its_own_seed():
    # Env i's new episode is a function of its own seed only, as a CPU env (num_envs=1) reset with
    # that seed: not of the other reset envs' seeds, nor of which envs reset with it.
    a, b = 11, 12
    together = FakeManiSkillEnv(max_goal=10**6)
    envs = ManiSkillVectorEnv(together, modalities=["state"], max_episode_steps=100)
    envs.reset(seed=0)
    untouched = [initial_state(together, i) for i in (0, 2)]
    together.renders.clear()
    obs, info = envs.reset(seed=[0, a, 0, b], options={"reset_mask": np.array([False, True, False, True])})
    assert len(together.renders) == 1  # one observation for the seeded partial reset, not one per env
    alone = FakeManiSkillEnv(max_goal=10**6)
    alone_envs = ManiSkillVectorEnv(alone, modalities=["state"], max_episode_steps=100)
    alone_envs.reset(seed=0)
    alone_envs.reset(seed=[0, 0, 0, b], options={"reset_mask": np.array([False, False, False, True])})
    cpu = {seed: FakeManiSkillEnv(num_envs=1, max_goal=10**6) for seed in (a, b)}
    for seed, env in cpu.items():
        env.reset(seed=seed)
    for got, want in zip(initial_state(together, 3), initial_state(alone, 3)):
        assert torch.equal(got, want)
    for i, seed in ((1, a), (3, b)):
        for got, want in zip(initial_state(together, i), initial_state(cpu[seed], 0)):
            assert torch.equal(got, want), (i, seed)
        assert torch.equal(obs["state"][i], together.get_obs()["state"][i])
    for i, before in zip((0, 2), untouched):
        for got, want in zip(initial_state(together, i), before):
            assert torch.equal(got, want)
    assert not torch.equal(together.pos[1], together.pos[3])


def test_a_seeded_partial_reset_leaves_the_other_envs_random_streams_alone():
    # The other envs' next (unseeded) episodes are what they would have been without it.
    runs = []
    for partial in (True, False):
        env = FakeManiSkillEnv(max_goal=10**6, enhanced_determinism=True)
        envs = ManiSkillVectorEnv(env, modalities=["state"], max_episode_steps=100)
        envs.reset(seed=0)
        if partial:
            envs.reset(seed=[0, 11, 0, 12], options={"reset_mask": np.array([False, True, False, True])})
        envs.reset(options={"reset_mask": np.array([True, False, True, False])})
        runs.append([initial_state(env, i) for i in (0, 2)])
    for (got_pos, got_goal), (want_pos, want_goal) in zip(*runs):
        assert torch.equal(got_pos, want_pos) and torch.equal(got_goal, want_goal)


def test_a_seeded_reset_of_every_env_is_one_maniskill_reset():
    # All envs at once: ManiSkill's own reset with the seed list (env i: seed + i for an int).
    for seed, stock_seed in ((3, [3, 4, 5, 6]), ([3, 9, 5, 1], [3, 9, 5, 1])):
        ours_env, stock_env = FakeManiSkillEnv(), FakeManiSkillEnv()
        envs = ManiSkillVectorEnv(ours_env, modalities=["state"], max_episode_steps=100)
        ours_env.renders.clear()
        obs, _ = envs.reset(seed=seed)
        ref, _ = stock_env.reset(seed=stock_seed)
        assert len(ours_env.renders) == 1
        assert torch.equal(obs["state"], ref["state"]) and torch.equal(ours_env.goal_steps, stock_env.goal_steps)
        assert np.array_equal(ours_env._episode_seed, stock_env._episode_seed)


@pytest.mark.parametrize(
    "seed, match",
    [([1, 2], r"a list of 4 seeds \(ints or None\), got \[1, 2\]"), ([1, 2, "3", 4], "ints or None"), ("1234", "got '1234'"), (1.5, "got 1.5")],
)
def test_bad_seeds_are_refused(seed, match):
    envs = ManiSkillVectorEnv(FakeManiSkillEnv(), modalities=["state"])
    with pytest.raises(ValueError, match=match):
        envs.reset(seed=seed)
    envs.reset(seed=[1, None, 3, None])  # None: that env unseeded


def test_the_batched_env_refuses_several_agents_clearly():
    from gymnasium import spaces

    env = FakeManiSkillEnv()
    env.single_action_space = spaces.Dict({"panda-0": spaces.Box(-1, 1, (3,)), "panda-1": spaces.Box(-1, 1, (3,))})
    with pytest.raises(ValueError, match=r"several agents \(a Dict action space\) runs on ManiSkill's CPU simulation"):
        ManiSkillVectorEnv(env)


def test_flatten_rgbd_on_the_batched_path_is_maniskills_flattening():
    # fastenv's FlattenRGBDObservationWrapper over the batched env (torch in, torch out) against
    # ManiSkill's own FlattenRGBDObservationWrapper.observation on the stand-in's raw observations,
    # final observations included.
    from types import SimpleNamespace

    need("mani_skill")
    from mani_skill.utils.wrappers.flatten import FlattenRGBDObservationWrapper as Stock

    from fastenv.integrations.maniskill import FlattenRGBDObservationWrapper

    flags = dict(include_rgb=True, include_depth=True, include_state=True, sep_depth=True)
    stock = SimpleNamespace(**flags, base_env=SimpleNamespace(device=torch.device("cpu")))
    ref_env = FakeManiSkillEnv(enhanced_determinism=True)
    envs = FlattenRGBDObservationWrapper(ManiSkillVectorEnv(FakeManiSkillEnv(enhanced_determinism=True), max_episode_steps=3))
    assert list(envs.single_observation_space) == ["state", "rgb", "depth"]
    assert envs.single_observation_space["rgb"].shape == (4, 4, 6)  # two cameras on the channel axis
    obs, _ = envs.reset(seed=0)
    ref, _ = ref_env.reset(seed=[0, 1, 2, 3])
    for t in range(3):
        want = Stock.observation(stock, dict(ref))
        assert list(obs) == list(want) and all(torch.equal(obs[k], want[k]) for k in want), t
        action = torch.full((4, 3), 0.1)
        obs, _, _, truncated, infos = envs.step(action)
        ref, *_ = ref_env.step(action)
    assert bool(truncated.all())
    want = Stock.observation(stock, dict(ref))
    for i, final in enumerate(infos["final_obs"]):
        assert list(final) == list(want) and all(torch.equal(final[k], want[k][i]) for k in want)
