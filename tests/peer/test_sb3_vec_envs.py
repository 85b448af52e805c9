"""Stable-Baselines3's VecEnv contract (its tests/test_vec_envs.py and the VecEnv wrappers' tests),
checked on fastenv's SB3 adapter, ``fastenv.integrations.sb3.SB3VecEnv``.

Each test names the SB3 test whose contract it checks. The VecEnv under test is
``SB3VecEnv(PipelineVectorEnv(...))`` over the small envs below (in the style of SB3's own test
envs) and CartPole, and ``fastenv.integrations.sb3.make_vec("fastenv/Libero-v0", ...)`` for
LIBERO. The reference for every data comparison is SB3's ``DummyVecEnv`` over the same env
constructors and seeds, compared bit for bit (types, dtypes, shapes and bytes).

Contracts of SB3's tests that do not apply to fastenv, so have no test here:

* ``test_vecenv_func_checker`` (DummyVecEnv refuses constructors that return one env instance
  twice): fastenv builds every env inside its worker processes from the pickled constructors, so
  the caller's instances are never the envs stepped.
* The ``"fork"`` start method of ``test_subproc_start_method`` and ``test_vec_seeding``: fastenv
  refuses ``context="fork"`` by design (EGL/OpenGL contexts do not survive a fork); "spawn" and
  "forkserver" are checked.
* ``test_render``'s human mode: it needs an X server (SB3 skips it without ``DISPLAY``); its
  rgb_array part, which runs headless, is checked on an env that renders with numpy (SB3 renders
  Pendulum, which needs pygame, not a dependency here).
* ``test_video_recorder`` / ``VecVideoRecorder``: it needs moviepy (SB3 skips the test without it),
  which is not installed in this project's environments: VecVideoRecorder's constructor raises
  DependencyNotInstalled.
* ``test_vec_deterministic``'s ``make_vec_env("Pendulum-v1", ...)`` part: for an id that is not
  fastenv's, ``fastenv.integrations.sb3.make_vec`` builds Gymnasium's own vector env, not
  fastenv's; its determinism (same seed, same observations) is checked on SB3VecEnv directly.
* ``test_check_nan``'s last step, ``env.step(np.array([[0, 1], [0, 1]]))`` on one env: it passes
  only because DummyVecEnv hands on whatever rows it gets; fastenv checks that there is one action
  per env.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import csv
import functools
import json
import re
import sys
import warnings

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("stable_baselines3")

import helpers  # noqa: E402
from helpers import Contracts  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import (  # noqa: E402
    DummyVecEnv,
    VecCheckNan,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
)

import fastenv.integrations.sb3 as fastenv_sb3  # noqa: E402
from fastenv.integrations.sb3 import SB3VecEnv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

N_ENVS = 3

# The workers rebuild the envs of this module from their pickles: by value, so that a worker need
# not import this module, and with it Stable-Baselines3 and torch (a second more per worker).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- comparisons ---------------------------------------------------------------------------------
# SB3's contract is on values: a scalar info may come back as a numpy scalar of the same kind and value.
assert_identical = functools.partial(helpers.assert_identical, loose_scalars=True)


def without_time(infos):
    """SB3 infos less the episode's wall time (``info["episode"]["t"]``), which differs between runs."""
    out = []
    for info in infos:
        if "episode" in info:
            info = {**info, "episode": {k: v for k, v in info["episode"].items() if k != "t"}}
        out.append(info)
    return out


# -- envs (picklable: the workers import this module to build them) ------------------------------
class SB3StyleEnv(gym.Env):
    """SB3's CustomGymEnv in fastenv's terms: observation and action space ``space``, observations
    drawn from the seeded space, random rewards from the env's generator, truncation after
    ``ep_length`` steps, an rgb_array render, a static ``custom_method`` and the last reset's options."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, space, render_mode="rgb_array", ep_length=4):
        # its own copy: envs built from one constructor must not share the space's generator (a
        # vector env that steps its envs in another order would see other samples)
        self.observation_space = copy.deepcopy(space)
        self.action_space = copy.deepcopy(space)
        self.render_mode = render_mode
        self.ep_length = ep_length
        self.current_step = 0
        self.current_options = None
        self.state = None

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.observation_space.seed(seed)
        self.current_step = 0
        self.current_options = options
        self.state = self.observation_space.sample()
        return self.state, {}

    def step(self, action):
        reward = float(self.np_random.random())
        self.state = self.observation_space.sample()
        self.current_step += 1
        return self.state, reward, False, self.current_step >= self.ep_length, {}

    def render(self):
        if self.render_mode == "rgb_array":
            return np.zeros((4, 4, 3))
        return None

    @staticmethod
    def custom_method(dim_0=1, dim_1=1):
        return np.ones((dim_0, dim_1))


BOX = spaces.Box(low=np.zeros(2, np.float32), high=np.ones(2, np.float32))


def box_env():
    return SB3StyleEnv(BOX)


def monitored_box_env():
    return Monitor(SB3StyleEnv(BOX))


class PassThrough(gym.Wrapper):
    """A wrapper that changes nothing: SB3's test wraps its envs (in Monitor) so that get_attr and
    set_attr go through a wrapper; this one does not import SB3 (and torch) in the workers."""


def wrapped_box_env():
    return PassThrough(SB3StyleEnv(BOX))


class StepEnv(gym.Env):
    """Observes its previous step count; truncates after ``max_steps`` (SB3's StepEnv)."""

    def __init__(self, max_steps):
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(np.array([0]), np.array([999]), dtype="int")
        self.max_steps = max_steps
        self.current_step = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.current_step = 0
        return np.array([self.current_step], dtype="int"), {"reset_at": 0}

    def step(self, action):
        prev_step = self.current_step
        self.current_step += 1
        return np.array([prev_step], dtype="int"), 0.0, False, self.current_step >= self.max_steps, {"step": prev_step}


class NanAndInfEnv(gym.Env):
    """Observes NaN after positive actions and inf after negative ones (SB3's NanAndInfEnv)."""

    def __init__(self):
        self.action_space = spaces.Box(low=-np.inf, high=np.inf, shape=(1,), dtype=np.float64)
        self.observation_space = spaces.Box(low=-np.inf, high=np.inf, shape=(1,), dtype=np.float64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1), {}

    def step(self, action):
        if np.all(np.asarray(action) > 0):
            obs = float("nan")
        elif np.all(np.asarray(action) < 0):
            obs = float("inf")
        else:
            obs = 0.0
        return np.array([obs]), 0.0, False, False, {}


def ours(fns, num_workers=1, **options):
    """fastenv's VecEnv over ``fns``."""
    return SB3VecEnv(PipelineVectorEnv(list(fns), num_workers=num_workers, **options))


def wrap(venv, wrapper):
    if wrapper is None:
        return venv
    if wrapper is VecFrameStack:
        return VecFrameStack(venv, n_stack=2)
    return wrapper(venv)


@contextlib.contextmanager
def opened(*venvs):
    try:
        yield venvs if len(venvs) > 1 else venvs[0]
    finally:
        for venv in venvs:
            venv.close()


WRAPPERS = [None, VecNormalize, VecFrameStack]
WRAPPER_IDS = ["plain", "VecNormalize", "VecFrameStack"]


@pytest.fixture(params=WRAPPERS, ids=WRAPPER_IDS)
def pair(request):
    """fastenv's VecEnv and DummyVecEnv over three wrapped SB3StyleEnvs, under the same VecEnv wrapper."""
    with opened(wrap(ours([wrapped_box_env] * N_ENVS), request.param), wrap(DummyVecEnv([wrapped_box_env] * N_ENVS), request.param)) as both:
        yield both


# -- test_vecenv_custom_calls, contract by contract -----------------------------------------------
def test_seed_and_render_through_vec_env_wrappers(pair):
    # test_vecenv_custom_calls: seed(); render(mode="rgb_array") is render(); another mode warns.
    venv, ref = pair
    assert venv.seed(0) == ref.seed(0) == [0, 1, 2]
    explicit = venv.render(mode="rgb_array")
    implicit = venv.render()
    assert np.array_equal(implicit, explicit)
    assert_identical(implicit, ref.render(), "render")
    with pytest.warns(UserWarning):
        venv.render(mode="something_else")


def test_has_attr_is_false_for_a_missing_attribute(pair):
    # test_vecenv_custom_calls: has_attr() of an attribute no env has is False (get_attr raises
    # AttributeError); after set_attr it is there, with the value set.
    venv, ref = pair
    assert not ref.has_attr("dummy")
    assert not venv.has_attr("dummy")
    assert not venv.has_attr("dummy2")
    venv.set_attr("dummy", 12)
    ref.set_attr("dummy", 12)
    assert venv.has_attr("dummy")
    assert venv.get_attr("dummy") == [12] * N_ENVS == ref.get_attr("dummy")


def test_get_attr_of_a_missing_attribute_raises_attribute_error(pair):
    # What has_attr relies on (VecEnv.has_attr catches AttributeError).
    venv, ref = pair
    with pytest.raises(AttributeError):
        ref.get_attr("no_such_attribute")
    with pytest.raises(AttributeError):
        venv.get_attr("no_such_attribute")


def test_set_wrapper_attr_through_env_method(pair):
    # test_vecenv_custom_calls: env_method("set_wrapper_attr", ...) then get_attr.
    venv, ref = pair
    assert venv.env_method("set_wrapper_attr", "dummy2", 2) == ref.env_method("set_wrapper_attr", "dummy2", 2) == [True] * N_ENVS
    assert venv.get_attr("dummy2") == [2] * N_ENVS


def test_env_method_with_indices(pair):
    # test_vecenv_custom_calls: env_method on all envs (indices=None), on a list, on one int index.
    venv, ref = pair
    results = venv.env_method("custom_method", 1, indices=None, dim_1=2)
    assert len(results) == N_ENVS and all(np.array_equal(r, np.ones((1, 2))) for r in results)
    assert_identical(results, ref.env_method("custom_method", 1, indices=None, dim_1=2), "indices=None")
    subset = venv.env_method("custom_method", 1, indices=[0, 2], dim_1=3)
    assert len(subset) == 2 and all(np.array_equal(r, np.ones((1, 3))) for r in subset)
    assert_identical(subset, ref.env_method("custom_method", 1, indices=[0, 2], dim_1=3), "indices=[0, 2]")
    one = venv.env_method("custom_method", 2, indices=1)
    assert_identical(one, ref.env_method("custom_method", 2, indices=1), "indices=1")
    assert len(one) == 1 and np.array_equal(one[0], np.ones((2, 1)))


def test_set_attr_of_a_new_attribute_one_env_at_a_time(pair):
    # test_vecenv_custom_calls: set_attr("dummy1", i, indices=i) for each env sets a new attribute
    # on that env only; then set_attr(..., indices=None) sets it on all.
    venv, ref = pair
    results = [venv.set_attr("dummy1", i, indices=i) for i in range(N_ENVS)]
    for i in range(N_ENVS):
        ref.set_attr("dummy1", i, indices=i)
    assert results == [None] * N_ENVS
    assert venv.has_attr("dummy1")
    assert venv.get_attr("dummy1") == list(range(N_ENVS)) == ref.get_attr("dummy1")
    assert venv.set_attr("dummy1", 42, indices=None) is None
    assert venv.get_attr("dummy1") == [42] * N_ENVS
    venv.set_attr("dummy1", 7, indices=[0, 2])
    assert venv.get_attr("dummy1") == [7, 42, 7]


def test_env_method_set_attr_and_get_attr_with_negative_indices(pair):
    # test_vecenv_custom_calls: indices=[0, 1], [0, 2], then [0, -1] and [-1] (the last env), and an
    # int -1.
    venv, ref = pair
    for env in (venv, ref):
        env.reset()
        assert env.env_method("set_wrapper_attr", "current_step", 12, indices=[0, 1]) == [True, True]
        assert env.get_attr("current_step") == [12, 12, 0]
        assert env.get_attr("current_step", indices=[0, 1]) == [12, 12]
        assert env.get_attr("current_step", indices=[0, 2]) == [12, 0]
    for env in (ref, venv):
        env.reset()
        assert env.env_method("set_wrapper_attr", "current_step", 12, indices=[0, -1]) == [True, True]
        assert env.get_attr("current_step") == [12, 0, 12]
        assert env.get_attr("current_step", indices=[-1]) == [12]
        assert env.get_attr("current_step", indices=-1) == [12]
        env.set_attr("dummy3", 5, indices=-1)
        assert env.get_attr("dummy3", indices=[2]) == [5]


def test_options_reach_the_envs_at_the_next_reset_only(pair):
    # test_vecenv_custom_calls: set_options() (one dict, or one per env) applies at the next reset
    # only, and is forgotten after it.
    venv, ref = pair
    for env in (ref, venv):
        env.reset()
        assert env.get_attr("current_options")[0] is None
        options = {"hello": 1}
        env.set_options(options)
        assert env.get_attr("current_options")[0] is None
        env.reset()
        assert env.get_attr("current_options") == [options] * N_ENVS
        env.reset()
        assert env.get_attr("current_options")[0] is None
        options = [{"hello": 1}] * N_ENVS
        options[0] = {"other_option": 2}
        env.set_options(options)
        env.reset()
        assert env.get_attr("current_options") == options


# -- stepping -------------------------------------------------------------------------------------
@pytest.mark.parametrize("wrapper", WRAPPERS, ids=WRAPPER_IDS)
def test_terminal_observation_equals_dummy_vec_env(wrapper):
    # test_vecenv_terminal_obs: episodes of 5, 6 and 7 steps; a done env's info holds
    # terminal_observation, equal to DummyVecEnv's, and its observation is the reset's.
    fns = [functools.partial(StepEnv, n) for n in (5, 6, 7)]
    with opened(wrap(ours(fns, num_workers=3), wrapper), wrap(DummyVecEnv(fns), wrapper)) as (venv, ref):
        zero_acts = np.zeros((N_ENVS,), dtype="int")
        prev_obs_b = venv.reset()
        assert_identical(prev_obs_b, ref.reset(), "reset")
        assert_identical(venv.reset_infos, ref.reset_infos, "reset_infos")
        for step_num in range(1, 8):
            out = venv.step(zero_acts)
            ref_out = ref.step(zero_acts)
            for name, a, b in zip(("obs", "rewards", "dones", "infos"), out, ref_out):
                assert_identical(a, b, f"step {step_num} {name}")
            assert_identical(venv.reset_infos, ref.reset_infos, f"step {step_num} reset_infos")
            obs_b, _, done_b, info_b = out
            assert len(obs_b) == len(done_b) == len(info_b) == N_ENVS
            for prev_obs, obs, done, info, final_step_num in zip(prev_obs_b, obs_b, done_b, info_b, (5, 6, 7)):
                assert done == (step_num == final_step_num)
                if not done:
                    assert "terminal_observation" not in info
                    continue
                terminal_obs = info["terminal_observation"]
                assert np.all(prev_obs < terminal_obs) and np.all(obs < prev_obs)
                if wrapper is not VecNormalize:
                    assert np.all(prev_obs + 1 == terminal_obs) and np.all(obs == 0)
            prev_obs_b = obs_b


SPACES = collections.OrderedDict(
    [
        ("discrete", spaces.Discrete(2)),
        ("multidiscrete", spaces.MultiDiscrete([2, 3])),
        ("multibinary", spaces.MultiBinary(3)),
        ("continuous", spaces.Box(low=np.zeros(2, dtype=np.float32), high=np.ones(2, dtype=np.float32))),
    ]
)


class UnorderedDict(spaces.Dict):
    """A Dict space whose samples are plain dicts in reverse key order."""

    def sample(self, mask=None, probability=None):
        return dict(reversed(list(super().sample().items())))


def check_spaces(space, obs_assert):
    """Step fastenv's VecEnv and DummyVecEnv over SB3StyleEnv(space) until an episode ends, with
    per-env lists of actions (as SB3's test does); every observation checked and compared."""
    fns = [functools.partial(SB3StyleEnv, space)] * N_ENVS
    with opened(ours(fns), DummyVecEnv(fns)) as (venv, ref):
        venv.seed(0)
        ref.seed(0)
        obs = venv.reset()
        obs_assert(obs)
        assert_identical(obs, ref.reset(), "reset")
        venv.action_space.seed(0)
        dones = [False] * N_ENVS
        t = 0
        while not any(dones):
            actions = [venv.action_space.sample() for _ in range(N_ENVS)]
            obs, rewards, dones, infos = venv.step(actions)
            obs_assert(obs)
            for name, a, b in zip(("obs", "rewards", "dones", "infos"), (obs, rewards, dones, infos), ref.step(actions)):
                assert_identical(a, b, f"step {t} {name}")
            t += 1


def check_vecenv_obs(obs, space):
    assert obs.shape[0] == N_ENVS
    for value in obs:
        assert space.contains(value)


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_single_spaces(space):
    # test_vecenv_single_space
    check_spaces(space, lambda obs: check_vecenv_obs(obs, space))


def test_dict_spaces():
    # test_vecenv_dict_spaces, with a space whose samples come in another key order too
    space = spaces.Dict(SPACES)

    def obs_assert(obs):
        assert isinstance(obs, dict) and obs.keys() == space.spaces.keys()
        for key, values in obs.items():
            check_vecenv_obs(values, space.spaces[key])

    check_spaces(space, obs_assert)
    check_spaces(UnorderedDict(SPACES), obs_assert)


def test_tuple_spaces():
    # test_vecenv_tuple_spaces
    space = spaces.Tuple(tuple(SPACES.values()))

    def obs_assert(obs):
        assert isinstance(obs, tuple) and len(obs) == len(space.spaces)
        for values, inner_space in zip(obs, space.spaces):
            check_vecenv_obs(values, inner_space)

    check_spaces(space, obs_assert)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_start_methods(context):
    # test_subproc_start_method: the worker processes start with either safe method...
    space = spaces.Discrete(2)
    fns = [functools.partial(SB3StyleEnv, space)] * N_ENVS
    with opened(ours(fns, num_workers=N_ENVS, context=context)) as venv:
        obs = venv.reset()
        check_vecenv_obs(obs, space)
        dones = [False] * N_ENVS
        while not any(dones):
            obs, _, dones, _ = venv.step([venv.action_space.sample() for _ in range(N_ENVS)])
            check_vecenv_obs(obs, space)


def test_an_unknown_start_method_is_refused():
    # ... and an unknown one is refused with multiprocessing's ValueError.
    with pytest.raises(ValueError, match=re.escape("cannot find context for 'illegal_method'")):
        ours([functools.partial(SB3StyleEnv, spaces.Discrete(2))] * N_ENVS, context="illegal_method").close()


class CustomWrapperA(VecNormalize):
    def __init__(self, venv):
        VecNormalize.__init__(self, venv)
        self.var_a = "a"


class CustomWrapperB(VecNormalize):
    def __init__(self, venv):
        VecNormalize.__init__(self, venv)
        self.var_b = "b"

    def func_b(self):
        return self.var_b

    def name_test(self):
        return self.__class__


class CustomWrapperBB(CustomWrapperB):
    def __init__(self, venv):
        CustomWrapperB.__init__(self, venv)
        self.var_bb = "bb"


def test_vec_env_wrappers_resolve_attributes_over_sb3vecenv():
    # test_vecenv_wrapper_getattr, with fastenv's VecEnv at the bottom
    with opened(ours([box_env] * N_ENVS)) as venv:
        wrapped = CustomWrapperA(CustomWrapperBB(venv))
        assert wrapped.var_a == "a" and wrapped.var_b == "b" and wrapped.var_bb == "bb"
        assert wrapped.func_b() == "b"
        assert wrapped.name_test() == CustomWrapperBB
        double_wrapped = CustomWrapperA(CustomWrapperB(wrapped))
        _ = double_wrapped.var_a
        with pytest.raises(AttributeError):  # ambiguous
            _ = double_wrapped.var_b
        with pytest.raises(AttributeError):  # missing
            _ = double_wrapped.nonexistent_attribute


IMAGE = [12, 8, 3]


def image_env(shape=tuple(IMAGE)):
    return SB3StyleEnv(spaces.Box(low=np.zeros(shape), high=np.ones(shape) * 255, dtype=np.uint8))


@pytest.mark.parametrize(
    "shape,channels_order,channel_axis",
    [(IMAGE, None, -1), (IMAGE[::-1], None, 0), (IMAGE, "last", -1), (IMAGE, "first", 0)],
    ids=["channels-last", "channels-first", "forced-last", "forced-first"],
)
def test_frame_stack_stacks_on_the_channel_axis(shape, channels_order, channel_axis):
    # test_framestack_vecenv: images stack on the channel axis (found or forced), as over DummyVecEnv
    fns = [functools.partial(image_env, tuple(shape))] * N_ENVS
    zero_acts = np.zeros([N_ENVS, *shape], dtype=np.uint8)
    with opened(
        VecFrameStack(ours(fns), n_stack=2, channels_order=channels_order),
        VecFrameStack(DummyVecEnv(fns), n_stack=2, channels_order=channels_order),
    ) as (venv, ref):
        venv.seed(0)
        ref.seed(0)
        assert_identical(venv.reset(), ref.reset(), "reset")
        obs, *_ = out = venv.step(zero_acts)
        for name, a, b in zip(("obs", "rewards", "dones", "infos"), out, ref.step(zero_acts)):
            assert_identical(a, b, name)
        stacked_axis = -1 if channel_axis == -1 else channel_axis + 1  # the batch axis comes first
        assert obs.shape[stacked_axis] == shape[channel_axis] * 2


def test_frame_stack_refuses_an_unknown_channels_order_and_takes_non_images():
    # test_framestack_vecenv: an invalid channels_order is refused; non-image envs stack too.
    with opened(ours([image_env] * N_ENVS), ours([box_env] * N_ENVS)) as (images, boxes):
        with pytest.raises(AssertionError):
            VecFrameStack(images, n_stack=2, channels_order="not_valid")
        stacked = VecFrameStack(boxes, n_stack=2)
        assert stacked.reset().shape == (N_ENVS, 4)


def test_env_is_wrapped():
    # test_vec_env_is_wrapped: asked in the workers, per env, through a VecEnv wrapper too.
    fns = [box_env, monitored_box_env]
    with opened(ours(fns, num_workers=2), DummyVecEnv(fns)) as (venv, ref):
        assert venv.env_is_wrapped(Monitor) == [False, True] == ref.env_is_wrapped(Monitor)
        assert venv.env_is_wrapped(Monitor, indices=1) == [True]
        assert VecFrameStack(venv, n_stack=2).env_is_wrapped(Monitor) == [False, True]


def test_seed_then_reset_is_deterministic():
    # test_vec_deterministic: seed(3) then reset gives the same observations every time, through
    # VecNormalize too, and DummyVecEnv's.
    with opened(ours([box_env] * N_ENVS), DummyVecEnv([box_env] * N_ENVS)) as (venv, ref):
        venv.seed(3)
        obs = venv.reset()
        venv.seed(3)
        assert_identical(venv.reset(), obs, "second seeded reset")
        ref.seed(3)
        assert_identical(ref.reset(), obs, "DummyVecEnv's seeded reset")
        normalized = VecNormalize(venv)
        normalized.seed(3)
        obs = venv.reset()
        normalized.seed(3)
        assert np.allclose(venv.reset(), obs)
        random_actions = [venv.action_space.sample() for _ in range(N_ENVS)]
        ref.seed(3)
        ref.reset()
        assert_identical(venv.step(random_actions)[0], ref.step(random_actions)[0], "step after seeded reset")


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_seed_without_argument_gives_each_env_its_own_seed(context):
    # test_vec_seeding: seed() draws a base seed; env i gets base + i, so the envs differ.
    with opened(ours([box_env] * N_ENVS, num_workers=N_ENVS, context=context)) as venv:
        seeds = venv.seed()
        assert seeds == [seeds[0] + i for i in range(N_ENVS)]
        obs = venv.reset()
        _, rewards, _, _ = venv.step(np.array([venv.action_space.sample() for _ in range(N_ENVS)]))
        assert not np.allclose(obs[0], obs[1]) and not np.allclose(obs[1], obs[2])
        assert not np.allclose(rewards[0], rewards[1]) and not np.allclose(rewards[1], rewards[2])


def test_render_rgb_array_headless():
    # test_render's rgb_array part (headless): render() tiles the envs' frames, render("rgb_array")
    # is the same, another mode warns; VecFrameStack and VecNormalize keep render_mode and render.
    fns = [box_env] * N_ENVS
    with opened(ours(fns), DummyVecEnv(fns)) as (venv, ref):
        assert venv.render_mode == "rgb_array" == ref.render_mode
        venv.reset()
        ref.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            image = venv.render()
            assert np.array_equal(venv.render("rgb_array"), image)
        assert_identical(image, ref.render(), "render")
        with pytest.warns(UserWarning):
            venv.render(mode="blah")
        for _ in range(3):
            venv.step([venv.action_space.sample() for _ in range(N_ENVS)])
            assert venv.render() is not None
        stacked = VecFrameStack(venv, 2)
        assert stacked.render_mode == "rgb_array" and stacked.render() is not None
        normalized = VecNormalize(stacked)
        assert normalized.render_mode == "rgb_array" and normalized.render() is not None


class ResetInfoEnv(StepEnv):
    """StepEnv whose reset info names its seed and options."""

    def reset(self, *, seed=None, options=None):
        obs, _ = super().reset(seed=seed, options=options)
        return obs, {"seed": -1 if seed is None else seed, "options": dict(options or {})}


def test_reset_infos_equal_dummy_vec_env():
    # reset_infos after reset() (with seeds and options) and after each autoreset, as DummyVecEnv's.
    fns = [functools.partial(ResetInfoEnv, n) for n in (2, 3, 3)]
    with opened(ours(fns, num_workers=3), DummyVecEnv(fns)) as (venv, ref):
        for env in (venv, ref):
            env.seed(10)
            env.set_options({"level": 2})
        assert_identical(venv.reset(), ref.reset(), "reset")
        assert_identical(venv.reset_infos, ref.reset_infos, "reset_infos after reset")
        assert venv.reset_infos[1] == {"seed": 11, "options": {"level": 2}}
        for t in range(4):
            out = venv.step(np.zeros(N_ENVS, dtype=int))
            for name, a, b in zip(("obs", "rewards", "dones", "infos"), out, ref.step(np.zeros(N_ENVS, dtype=int))):
                assert_identical(a, b, f"step {t} {name}")
            assert_identical(venv.reset_infos, ref.reset_infos, f"reset_infos after step {t}")


# -- VecEnv wrappers -----------------------------------------------------------------------------
def cartpole():
    return gym.make("CartPole-v1")


def test_vec_normalize_sees_the_same_data_as_over_dummy_vec_env():
    # VecNormalize over fastenv's VecEnv: the same normalized observations and rewards, terminal
    # observations, original observations and running statistics as over DummyVecEnv.
    with opened(VecNormalize(ours([cartpole] * N_ENVS, num_workers=3)), VecNormalize(DummyVecEnv([cartpole] * N_ENVS))) as (venv, ref):
        venv.seed(0)
        ref.seed(0)
        assert_identical(venv.reset(), ref.reset(), "reset")
        rng = np.random.default_rng(0)
        ended = 0
        for t in range(200):
            actions = rng.integers(0, 2, N_ENVS)
            out, ref_out = venv.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "rewards", "dones", "infos"), out, ref_out):
                assert_identical(a, b, f"step {t} {name}")
            ended += int(out[2].sum())
        assert ended > 0
        assert_identical(venv.get_original_obs(), ref.get_original_obs(), "original obs")
        assert_identical(venv.get_original_reward(), ref.get_original_reward(), "original reward")
        for stat in ("mean", "var", "count"):
            assert_identical(getattr(venv.obs_rms, stat), getattr(ref.obs_rms, stat), f"obs_rms.{stat}")
            assert_identical(getattr(venv.ret_rms, stat), getattr(ref.ret_rms, stat), f"ret_rms.{stat}")


def read_monitor_file(path):
    with open(path) as f:
        first_line = f.readline()
        assert first_line.startswith("#")
        metadata = json.loads(first_line[1:])
        rows = list(csv.DictReader(f))
    return metadata, rows


@pytest.mark.parametrize("monitor", [VecMonitor, fastenv_sb3.VecMonitor], ids=["sb3-VecMonitor", "fastenv-VecMonitor"])
def test_vec_monitor_records_episodes(tmp_path, monitor):
    # test_vec_monitor: each episode's info["episode"] has the return and length summed by hand,
    # the same as over DummyVecEnv, and the monitor file has SB3's header and columns.
    with opened(
        monitor(ours([cartpole], num_workers=1), str(tmp_path / "ours.monitor.csv")),
        monitor(DummyVecEnv([cartpole]), str(tmp_path / "ref.monitor.csv")),
    ) as (venv, ref):
        venv.seed(0)
        ref.seed(0)
        venv.reset()
        ref.reset()
        venv.action_space.seed(0)
        ep_len, ep_reward, episodes = 0, 0.0, 0
        for t in range(300):
            actions = [venv.action_space.sample()]
            out, ref_out = venv.step(actions), ref.step(actions)
            for name, a, b in zip(("obs", "rewards", "dones"), out[:3], ref_out[:3]):
                assert_identical(a, b, f"step {t} {name}")
            assert_identical(without_time(out[3]), without_time(ref_out[3]), f"step {t} infos")
            _, rewards, dones, infos = out
            ep_len += 1
            ep_reward += rewards[0]
            if dones[0]:
                assert ep_reward == infos[0]["episode"]["r"] and ep_len == infos[0]["episode"]["l"]
                ep_len, ep_reward, episodes = 0, 0.0, episodes + 1
    assert episodes > 2
    metadata, rows = read_monitor_file(tmp_path / "ours.monitor.csv")
    assert set(metadata) == {"t_start", "env_id"}
    assert len(rows) == episodes and set(rows[0]) == {"r", "l", "t"}
    _, ref_rows = read_monitor_file(tmp_path / "ref.monitor.csv")
    assert [(row["r"], row["l"]) for row in rows] == [(row["r"], row["l"]) for row in ref_rows]


def test_vec_check_nan_raises_on_nan_and_inf():
    # test_check_nan: VecCheckNan(raise_exception=True) refuses NaN / inf actions before stepping and
    # NaN / inf observations after.
    with opened(VecCheckNan(ours([NanAndInfEnv], num_workers=1), raise_exception=True)) as venv:
        venv.reset()
        venv.step([[0]])
        with pytest.raises(ValueError):
            venv.step([[float("NaN")]])
        with pytest.raises(ValueError):
            venv.step([[float("inf")]])
        with pytest.raises(ValueError):
            venv.step([[-1]])
        with pytest.raises(ValueError):
            venv.step([[1]])
        venv.reset()


# -- LIBERO through make_vec ----------------------------------------------------------------
# Small and cheap: 32-pixel camera, two envs in two workers, chunks of 2 simulator steps, episodes
# of 6 steps (3 chunks).
LIBERO = dict(suite="libero_10", task_id=0, chunk=2, camera_size=32, modalities=["agentview_image", "robot0_proprio-state"], max_episode_steps=6)


@pytest.mark.libero
@pytest.mark.big_memory
def test_make_vec_on_libero_follows_the_vec_env_contract():
    # On LIBERO through make_vec (fastenv's VecMonitor on top), against VecMonitor(DummyVecEnv)
    # over the same envs: test_vec_deterministic (seed then reset), reset_infos,
    # test_vecenv_terminal_obs (terminal_observation of the dict observations, episode records),
    # then test_vecenv_custom_calls' get_attr / set_attr / env_method with indices (-1 included),
    # has_attr and test_vec_env_is_wrapped. Each part is checked even where an earlier one broke.
    from fastenv.envs.libero import make_env

    venv = fastenv_sb3.make_vec("fastenv/Libero-v0", 2, num_workers=2, **LIBERO)
    ref = VecMonitor(DummyVecEnv([functools.partial(make_env, **LIBERO)] * 2))
    contracts = Contracts()
    with opened(venv, ref):
        with contracts.check("seed(3) then reset, twice, as DummyVecEnv"):
            venv.seed(3)
            obs = venv.reset()
            venv.seed(3)
            assert_identical(venv.reset(), obs, "second seeded reset")
            ref.seed(3)
            assert_identical(obs, ref.reset(), "DummyVecEnv's seeded reset")
        with contracts.check("reset_infos"):
            assert_identical(venv.reset_infos, ref.reset_infos, "reset_infos")
        rng = np.random.default_rng(0)
        dones_seen = 0
        for t in range(4):  # both episodes end at step 2 (3 chunks of 2 of 6 steps)
            actions = rng.uniform(-1, 1, (2, 2, 7)).astype(np.float32)
            out, ref_out = venv.step(actions), ref.step(actions)
            with contracts.check(f"step {t} obs, rewards, dones"):
                for name, a, b in zip(("obs", "rewards", "dones"), out[:3], ref_out[:3]):
                    assert_identical(a, b, f"step {t} {name}")
            with contracts.check(f"step {t} infos (terminal_observation, episode)"):
                assert_identical(without_time(out[3]), without_time(ref_out[3]), f"step {t} infos")
            with contracts.check(f"step {t} reset_infos"):
                assert_identical(venv.reset_infos, ref.reset_infos, f"step {t} reset_infos")
            dones_seen += int(out[2].sum())
        with contracts.check("both episodes ended"):
            assert dones_seen == 2
        with contracts.check("get_attr with indices None, int, list"):
            assert venv.get_attr("chunk") == [2, 2] == ref.get_attr("chunk")
            assert venv.get_attr("chunk", indices=1) == [2]
            assert venv.get_attr("chunk", indices=[1, 0]) == [2, 2]
        with contracts.check("get_attr with indices -1 and [-1]"):
            assert venv.get_attr("chunk", indices=-1) == [2] == ref.get_attr("chunk", indices=-1)
            assert venv.get_attr("chunk", indices=[-1]) == [2]
        with contracts.check("has_attr of a missing attribute is False"):
            assert not ref.has_attr("no_such_attribute")
            assert not venv.has_attr("no_such_attribute")
        with contracts.check("set_attr of a new attribute on one index"):
            venv.set_attr("peer_marker", 7, indices=1)
            assert venv.get_attr("peer_marker", indices=[1]) == [7]
        with contracts.check("env_method with indices"):
            assert venv.env_method("get_wrapper_attr", "chunk", indices=[0]) == [2]
        with contracts.check("env_is_wrapped"):
            assert venv.env_is_wrapped(Monitor) == [False, False] == ref.env_is_wrapped(Monitor)
    contracts.assert_all_held()
