import numpy as np
import pytest
from fakes import CountingEnv

import fastenv
from fastenv import HeadlessRender


def test_existing_viewer_is_closed_and_frames_kept_as_arrays():
    raw = CountingEnv(render_mode="human")
    viewer = raw.viewer
    env = HeadlessRender(raw)
    assert viewer.closed
    assert env.render_mode == raw.render_mode == "rgb_array"  # no window, but still frames
    env.reset(seed=0)
    assert env.render().shape == (8, 8, 3)


def test_none_drops_rendering():
    raw = CountingEnv(render_mode="human")
    env = HeadlessRender(raw, render_mode=None)
    assert raw.viewer.closed and env.render_mode is None and raw.render_mode is None


@pytest.mark.parametrize("built_with", [None, "rgb_array"])
def test_wrap_keeps_the_render_mode_the_env_was_built_with(built_with):
    # Headless means no window, not no frames: an rgb_array env keeps giving frames.
    env = fastenv.wrap(CountingEnv(render_mode=built_with), chunk=2)
    assert env.render_mode == built_with
    env.reset(seed=0)
    env.step(np.zeros((2, 2), np.float32))
    assert (env.render() is not None) == (built_with == "rgb_array")


@pytest.mark.parametrize("mode", ["human", "ansi", "rgb"])
def test_only_none_rgb_array_or_keep(mode):
    with pytest.raises(ValueError, match="must be None, 'rgb_array' or 'keep', got"):
        HeadlessRender(CountingEnv(), render_mode=mode)


def test_rgb_array_on_an_env_that_cannot_is_refused():
    with pytest.raises(ValueError, match=r"cannot render 'rgb_array'; its render modes are \[\]"):
        HeadlessRender(_NoRender(), render_mode="rgb_array")


class _NoRender(CountingEnv):
    metadata = {"render_modes": []}


@pytest.mark.libero
def test_libero_is_headless_by_default(libero_slim_env):
    raw = libero_slim_env.unwrapped.adapter._raw
    assert libero_slim_env.render_mode is None
    assert raw.has_renderer is False and raw.viewer is None
    assert libero_slim_env.render() is None


@pytest.mark.libero
def test_libero_rgb_array_render():
    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=None, modalities=["robot0_proprio-state"], camera_size=32, render_mode="rgb_array")
    try:
        raw = env.unwrapped.adapter._raw
        assert raw.has_renderer is False and raw.viewer is None
        env.reset(seed=0)
        frame = env.render()
        assert frame.shape == (32, 32, 3) and frame.dtype == np.uint8
        assert frame.std() > 0  # a real picture, not a blank buffer
    finally:
        env.close()
