import numpy as np
import pytest
from conftest import SMALL
from fakes import CountingEnv, FakeAdapter
from gymnasium import spaces

import fastenv
from fastenv import PruneModalities, SimEnv


def test_generic_dict_env_keeps_only_the_named_keys():
    env = PruneModalities(CountingEnv(), ["pos", "image"])
    assert list(env.observation_space.keys()) == ["image", "pos"] or set(env.observation_space.keys()) == {"pos", "image"}
    obs, _ = env.reset(seed=0)
    assert set(obs) == {"pos", "image"}
    assert env.observation_space.contains(obs)
    obs, *_ = env.step(np.zeros(2, np.float32))
    assert set(obs) == {"pos", "image"} and env.observation_space.contains(obs)


def test_unknown_key_lists_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown observation key\(s\) \['rgb'\]; available keys: \['image', 'pos', 'vel'\]"):
        PruneModalities(CountingEnv(), ["pos", "rgb"])


def test_string_instead_of_list():
    with pytest.raises(TypeError, match="sequence of keys"):
        PruneModalities(CountingEnv(), "pos")


def test_non_dict_space_is_refused():
    import gymnasium as gym

    with pytest.raises(ValueError, match="needs a Dict observation space, got Box"):
        PruneModalities(gym.make("CartPole-v1"), ["x"])


def test_selection_reaches_the_adapter():
    adapter = FakeAdapter()
    env = PruneModalities(SimEnv(adapter), ["state"])
    assert adapter.keys == ("state",)
    assert env.observation_space == spaces.Dict({"state": spaces.Box(-np.inf, np.inf, (1,), np.float64)})


def test_two_wrappers_over_one_env_each_get_their_own_keys():
    adapter = FakeAdapter()
    core = SimEnv(adapter)
    first = PruneModalities(core, ["state"])
    second = PruneModalities(core, ["rgb"])
    assert set(adapter.keys) == {"state", "rgb"}  # the simulator produces what both need
    assert set(first.reset()[0]) == {"state"} and set(first.step(np.zeros(3))[0]) == {"state"}
    assert set(second.reset()[0]) == {"rgb"} and set(second.step(np.zeros(3))[0]) == {"rgb"}
    assert set(first.observation_space.spaces) == {"state"} and set(second.observation_space.spaces) == {"rgb"}
    second.close()  # releases "rgb": the simulator stops producing it
    assert adapter.keys == ("state",)


def test_pruning_below_a_flattened_space_is_refused_at_construction():
    flat = fastenv.wrappers.FlattenModalities(fastenv.wrap(CountingEnv(), modalities=["pos", "vel"]))
    with pytest.raises(ValueError, match=r"needs a Dict observation space, got Box.*PruneModalities goes below FlattenModalities"):
        PruneModalities(flat, ["pos"])


def test_pruning_reaches_the_simulator_through_wrappers_that_keep_observations():
    import gymnasium as gym

    adapter = FakeAdapter()
    env = PruneModalities(gym.wrappers.TimeLimit(fastenv.HeadlessRender(SimEnv(adapter)), 10), ["rgb"])
    assert adapter.keys == ("rgb",)
    assert set(env.reset()[0]) == {"rgb"}


def test_pruning_above_a_wrapper_that_may_change_observations_warns_and_filters():
    import gymnasium as gym

    adapter = FakeAdapter()
    inner = gym.wrappers.TransformObservation(SimEnv(adapter), lambda obs: obs, SimEnv(FakeAdapter()).observation_space)
    with pytest.warns(UserWarning, match="only filtered and the simulator still produces all of them"):
        env = PruneModalities(inner, ["rgb"])
    assert set(adapter.keys) == {"state", "rgb"}
    assert set(env.reset()[0]) == {"rgb"}


def count_renders(monkeypatch, env):
    sim = env.unwrapped.adapter._raw.sim
    calls = []
    original = sim.render

    def counting(*args, **kwargs):
        calls.append(kwargs.get("camera_name"))
        return original(*args, **kwargs)

    monkeypatch.setattr(sim, "render", counting)
    return calls


@pytest.mark.libero
def test_libero_renders_only_the_kept_camera_once_per_chunk(monkeypatch, libero_slim_env):
    env = libero_slim_env
    assert set(env.observation_space.keys()) == {"agentview_image", "robot0_proprio-state"}
    env.reset(seed=0)
    calls = count_renders(monkeypatch, env)
    obs, *_ = env.step(np.zeros((8, 7), np.float32))
    assert calls == ["agentview"]  # one render for 8 simulator steps, of the one kept camera
    assert env.observation_space.contains(obs)
    raw = env.unwrapped.adapter._raw
    enabled = {name for name, o in raw._observables.items() if o.is_enabled()}
    assert "robot0_eye_in_hand_image" not in enabled
    assert not any(name.endswith("_pos") and not name.startswith("robot0") for name in enabled)


@pytest.mark.libero
def test_libero_stock_set_renders_both_cameras_every_step(monkeypatch, libero_stock_keys_env):
    env = libero_stock_keys_env
    env.reset(seed=0)
    calls = count_renders(monkeypatch, env)
    env.step(np.zeros((1, 7), np.float32))
    assert sorted(calls) == ["agentview", "robot0_eye_in_hand"]


@pytest.mark.libero
@pytest.mark.parametrize("keys", [["robot0_proprio-state", "object-state"], ["object-state"]])
def test_libero_state_only_builds_no_renderer_and_keeps_the_stock_values(keys, stock_env, libero_task):
    # object-state alone still reads the robot's pose (its relative poses need it): the values
    # are the stock env's whatever else is pruned.
    from conftest import stock_reset

    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=4, modalities=keys)
    try:
        raw = env.unwrapped.adapter._raw
        assert raw.has_offscreen_renderer is False and raw.camera_names == []
        obs, _ = env.reset(options={"init_state_id": 1})
        ref = stock_reset(stock_env, libero_task, 1)
        assert obs["object-state"].shape == (112,)
        actions = np.random.default_rng(0).uniform(-1, 1, (4, 7)).astype(np.float32)
        for step in range(2):
            for key in keys:
                assert np.array_equal(obs[key], ref[key]), f"{key} after {4 * step} steps"
            obs, *_ = env.step(actions)
            for action in actions:
                ref, *_ = stock_env.step(action)
        assert env.observation_space.contains(obs)
    finally:
        env.close()


@pytest.mark.libero
def test_libero_unknown_key(libero_slim_env):
    with pytest.raises(ValueError, match=r"unknown observation key\(s\) \['agentview_rgb'\] \('agentview_rgb': did you mean 'agentview_image'\?\); available keys: .*'agentview_image'"):
        libero_slim_env.unwrapped.select_modalities(["agentview_rgb"])
    # still usable, still the same keys
    assert set(libero_slim_env.observation_space.keys()) == {"agentview_image", "robot0_proprio-state"}


@pytest.mark.libero
def test_libero_depth_and_segmentation_are_built_only_when_kept():
    from fastenv.envs.libero import make_env

    keys = ["agentview_depth", "robot0_eye_in_hand_segmentation_instance", "robot0_eef_pos"]
    env = make_env("libero_10", 0, chunk=2, modalities=keys, camera_size=SMALL)
    try:
        raw = env.unwrapped.adapter._raw
        assert raw.camera_names == ["agentview", "robot0_eye_in_hand"]
        assert list(raw.camera_depths) == [True, False]
        obs, _ = env.reset(seed=0)
        assert set(obs) == set(keys)
        assert obs["agentview_depth"].shape == (SMALL, SMALL, 1) and obs["agentview_depth"].dtype == np.float32
        assert obs["robot0_eye_in_hand_segmentation_instance"].dtype == np.int32
        assert len(np.unique(obs["robot0_eye_in_hand_segmentation_instance"])) > 1
        obs, *_ = env.step(np.zeros((2, 7), np.float32))
        assert env.observation_space.contains(obs)
        # The env's own selection adds to what the wrappers above it asked for: a key the build
        # already covers needs no rebuild ...
        core = env.unwrapped
        before = raw
        core.select_modalities(["robot0_eef_pos"])
        assert core.adapter._raw is before
        # ... a camera that was not built rebuilds the simulator with it, and the wrappers above
        # still get exactly their own keys.
        core.select_modalities(["frontview_image"])
        assert core.adapter._raw.camera_names == ["agentview", "robot0_eye_in_hand", "frontview"]
        obs, _ = core.reset(seed=0)
        assert obs["frontview_image"].shape == (SMALL, SMALL, 3)
        assert set(env.reset(seed=0)[0]) == set(keys)
    finally:
        env.close()
