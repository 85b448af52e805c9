import numpy as np
import pytest
from fakes import CountingEnv, FakeAdapter

from fastenv import HeadlessRender, SimEnv


def test_existing_viewer_is_closed_and_render_mode_dropped():
    raw = CountingEnv(render_mode="human")
    viewer = raw.viewer
    env = HeadlessRender(raw)
    assert viewer.closed
    assert env.render_mode is None
    assert raw.render_mode is None  # the env no longer draws at every step


def test_rgb_array_is_kept_when_asked_for():
    env = HeadlessRender(CountingEnv(render_mode="human"), render_mode="rgb_array")
    env.reset(seed=0)
    assert env.render_mode == "rgb_array"
    assert env.render().shape == (8, 8, 3)


def test_headless_is_forwarded_to_the_adapter():
    adapter = FakeAdapter()
    env = HeadlessRender(SimEnv(adapter), render_mode="rgb_array")
    assert adapter.headless_calls == ["rgb_array"]
    assert env.render_mode == "rgb_array"


@pytest.mark.parametrize("mode", ["human", "ansi", "rgb"])
def test_only_none_or_rgb_array(mode):
    with pytest.raises(ValueError, match="None or 'rgb_array'"):
        HeadlessRender(CountingEnv(), render_mode=mode)


@pytest.mark.libero
def test_libero_is_headless_by_default(libero_slim_env):
    raw = libero_slim_env.unwrapped.adapter._raw
    assert libero_slim_env.render_mode is None
    assert raw.has_renderer is False and raw.viewer is None
    assert libero_slim_env.render() is None


@pytest.mark.libero
def test_libero_rgb_array_render():
    from fastenv.backends.libero import make_env

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
