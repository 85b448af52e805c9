"""Gymnasium's vector-env contract (its tests/vector/ and tests/wrappers/vector/), checked on fastenv.

Each test names the Gymnasium test whose contract it checks. The env under test is
``fastenv.vector.PipelineVectorEnv`` over CartPole, FrozenLake and the small envs below (written in
the style of Gymnasium's own test envs), and fastenv's LIBERO vector env
(``gym.make_vec("fastenv/Libero-v0", ...)``). Every data comparison is against
``gymnasium.vector.SyncVectorEnv(..., autoreset_mode=SAME_STEP)`` over the same env constructors
and seeds, bit for bit: same types, dtypes, shapes and bytes; the tests of the other autoreset
modes (``test_autoreset_next_step``, ``test_autoreset_disabled``, ``test_autoreset_metadata``,
``test_make_vec_autoreset``, the DISABLED mode of ``test_partial_reset*`` and
``test_action_count_compatibility``, the NEXT_STEP case of ``test_vector_wrapper_equivalence``)
compare against ``SyncVectorEnv`` in that mode.

fastenv adds one documented key to Gymnasium's infos: ``final_observation`` (with its mask), an
alias of ``final_obs`` for older training loops. The comparisons check that it is the very same
object as ``final_obs`` and then leave it out (``helpers.without_legacy_keys``).

Contracts of Gymnasium's vector tests that do not apply to fastenv, so have no test here:

* ``SyncVectorEnv(autoreset_mode=DISABLED)`` stepping an env whose episode ended fails with a
  bare ``assert`` after it has stepped the envs before it (and not at all under ``python -O``;
  ``AsyncVectorEnv`` steps it): fastenv raises ``EpisodeEndedError``, an ``AssertionError``,
  before any env steps, checked below.
* ``test_reset_timeout_async_vector_env`` / ``test_step_timeout_async_vector_env``
  (``reset_wait(timeout=...)`` / ``step_wait(timeout=...)`` raising ``multiprocessing.TimeoutError``):
  fastenv's asynchronous API has no such call. ``recv(stage=k)`` takes no timeout, and
  ``recv(max_batch=B, timeout=T)`` is a batching deadline that returns the envs ready by then
  (at least one) by design; a hung worker is handled by ``step_timeout`` (killed and restarted).
* ``test_copy_async_vector_env`` / ``test_no_copy_async_vector_env``: they assert nothing (Gymnasium's
  own TODO says so), and fastenv has no ``copy`` option.
* ``test_custom_space_sync_vector_env`` / ``test_custom_space_async_vector_env`` (string observations
  of a custom space, which only work without shared memory): fastenv always moves observations
  through shared memory, like ``AsyncVectorEnv(shared_memory=True)``; the shared-memory contract
  (refused at construction) is checked instead.
* ``test_vector_add_info`` and ``test_update_info`` of ``DictInfoToList``: they test Gymnasium's
  ``VectorEnv._add_info`` and the wrapper's helpers on hand-made dicts, not a vector env.
* ``test_observation_mode.py`` (``observation_mode="different"``): fastenv requires every env to
  have the same spaces (checked below).
* The exact warning texts of ``test_async_vector_subenv_error`` (AsyncVectorEnv's log format); the
  exception type and message, which are the contract to the caller, are checked.
* ``RecordVideo`` (needs moviepy, not installed in this project's environments) and
  ``HumanRendering`` (needs pygame and a display): not written.
* Gymnasium's ``test_render_*`` and ``test_call_*`` render CartPole, which needs pygame (not a
  dependency here): the same contracts are checked on a small env that renders with numpy.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
from fakes import SpaceEnv
from gymnasium import spaces
from gymnasium.error import (
    AlreadyPendingCallError,
    ClosedEnvironmentError,
    NoAsyncCallError,
)
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorWrapper
from gymnasium.vector.utils import batch_space
from helpers import Contracts, assert_identical, without_legacy_keys

from fastenv.vector import PipelineVectorEnv
from fastenv.vector.errors import EpisodeEndedError

SAME_STEP, NEXT_STEP, DISABLED = AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED


# -- comparisons ---------------------------------------------------------------------------------
def assert_same_transition(ours, ref, where):
    """One ``step``'s five results, ours (legacy alias left out) against the reference's."""
    for name, a, b in zip(("obs", "reward", "terminated", "truncated"), ours[:4], ref[:4]):
        assert_identical(a, b, f"{where} {name}")
    assert_identical(without_legacy_keys(ours[4]), ref[4], f"{where} infos")


def assert_same_discrete_transition(ours, ref, where, space):
    """``assert_same_transition`` for an env whose Discrete observations are Python ints: each
    final_obs has SyncVectorEnv's value, as a numpy integer of the space's dtype."""
    # fastenv's shared memory cannot keep the env's Python int: the documented difference listed in docs/vector.md, "Gymnasium's and SB3's own tests".
    for name, a, b in zip(("obs", "reward", "terminated", "truncated"), ours[:4], ref[:4]):
        assert_identical(a, b, f"{where} {name}")
    infos, ref_infos = without_legacy_keys(ours[4]), dict(ref[4])
    if "final_obs" in ref_infos:
        finals, ref_finals = infos.pop("final_obs"), ref_infos.pop("final_obs")
        assert finals.dtype == ref_finals.dtype == object and finals.shape == ref_finals.shape, f"{where} infos/final_obs"
        for i, (a, b) in enumerate(zip(finals, ref_finals)):
            if b is None:
                assert a is None, f"{where} infos/final_obs[{i}]: {a!r} != None"
            else:
                assert type(a) is space.dtype.type and a == b, f"{where} infos/final_obs[{i}]: {a!r} != {space.dtype.type.__name__}({b!r})"
    assert_identical(infos, ref_infos, f"{where} infos")


def with_step_keys_on_top(ref_infos):
    """SyncVectorEnv's infos as fastenv lays them out for chunked envs: when an episode ends,
    Gymnasium moves the whole step info into ``final_info``; fastenv keeps the keys a training loop
    reads on every step (``fastenv.core.infos.STEP_KEYS``: chunk_steps, chunk_rewards, ...) at the
    top level too, for the ended envs (their values in ``final_info``), the rest unchanged."""
    from fastenv.core.infos import STEP_KEYS

    if "final_info" not in ref_infos:
        return ref_infos
    out = dict(ref_infos)
    final, ended = ref_infos["final_info"], ref_infos["_final_info"]
    for key in STEP_KEYS:
        if key not in final:
            continue
        rows = ended & final[f"_{key}"]
        if key in out:
            values, mask = out[key].copy(), out[f"_{key}"].copy()
        else:
            values, mask = np.zeros_like(final[key]), np.zeros_like(rows)
        values[rows] = final[key][rows]
        mask[rows] = True
        out[key], out[f"_{key}"] = values, mask
    return out


def sync(fns, autoreset_mode=SAME_STEP):
    """The reference: Gymnasium's SyncVectorEnv over the same constructors, same-step autoreset (or ``autoreset_mode``)."""
    return SyncVectorEnv(list(fns), autoreset_mode=autoreset_mode)


@contextlib.contextmanager
def opened(*envs):
    try:
        yield envs if len(envs) > 1 else envs[0]
    finally:
        for env in envs:
            env.close()


# -- envs (picklable: the workers import this module to build them) ------------------------------
def seeded(env_id, seed, **kwargs):
    """``gym.make(env_id)`` with its action space and first reset seeded by ``seed`` (Gymnasium's ``make_env``)."""
    env = gym.make(env_id, disable_env_checker=True, **kwargs)
    env.action_space.seed(seed)
    env.reset(seed=seed)
    return env


def seeded_fns(env_id, n, **kwargs):
    return [functools.partial(seeded, env_id, i, **kwargs) for i in range(n)]


class CountEnv(gym.Env):
    """Gymnasium's counting test env: observes how many steps since reset (or the reset seed),
    rewards the action, terminates when the count reaches ``max_count`` (set with ``set_attr``)."""

    def __init__(self):
        self.observation_space = spaces.Discrete(5)
        self.action_space = spaces.Discrete(5)
        self.max_count = 100
        self.count = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0 if seed is None else seed
        return self.count, {}

    def step(self, action):
        self.count += 1
        return self.count, action, self.count == self.max_count, False, {}


class FinalInfoEnv(gym.Env):
    """Reset observes 0 with ``{"reset": True}``; a step observes its action (0 from action 3 on),
    reports ``{"action": action}`` and terminates on actions >= 3."""

    def __init__(self):
        self.observation_space = spaces.Discrete(4)
        self.action_space = spaces.Discrete(4)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {"reset": True}

    def step(self, action):
        return (action if action < 3 else 0), 0, action >= 3, False, {"action": action}


class InfoEnv(gym.Env):
    """Reset reports ``infos[0]``, each step ``infos[1]`` and terminates (Gymnasium's ReturnInfoEnv)."""

    def __init__(self, infos):
        self.observation_space = spaces.Box(0, 1, (1,), np.float32)
        self.action_space = spaces.Box(0, 1, (1,), np.float32)
        self.infos = infos

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.np_random.random(1).astype(np.float32), dict(self.infos[0])

    def step(self, action):
        return self.np_random.random(1).astype(np.float32), 0.0, True, False, dict(self.infos[1])


class RenderEnv(SpaceEnv):
    """A Box env that renders an RGB frame of its step count (no pygame needed)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode=None):
        super().__init__(spaces.Box(-1.0, 1.0, (2,), np.float32))
        self.render_mode = render_mode

    def render(self):
        if self.render_mode == "rgb_array":
            return np.full((6, 8, 3), self.t % 256, np.uint8)
        return None


class RaisingEnv(gym.Env):
    """Raises ValueError in reset for seed 1 and in step for actions >= 1 (Gymnasium's raise_error_*)."""

    def __init__(self):
        self.observation_space = spaces.Box(0, 1, (1,), np.float32)
        self.action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed == 1:
            raise ValueError("Error in reset")
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if action >= 1:
            raise ValueError(f"Error in step with {action}")
        return np.zeros(1, np.float32), 0.0, False, False, {}


class CustomSpace(gym.Space):
    """A space none of Gymnasium's batching functions know."""

    def sample(self, mask=None, probability=None):
        return int(self.np_random.integers(0, 10))

    def contains(self, x):
        return isinstance(x, int) and 0 <= x <= 10

    def __eq__(self, other):
        return isinstance(other, CustomSpace)


class CustomSpaceEnv(gym.Env):
    def __init__(self):
        self.observation_space = CustomSpace()
        self.action_space = CustomSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        return action, 0.0, False, False, {}


# The spaces of Gymnasium's testing_utils (each as an env's observation and action space).
SPACES = {
    "box-scalar": spaces.Box(low=np.array(-1.0), high=np.array(1.0), dtype=np.float64),
    "box-1": spaces.Box(low=np.array([0.0]), high=np.array([10.0]), dtype=np.float64),
    "box-3": spaces.Box(low=np.array([-1.0, 0.0, 0.0]), high=np.ones(3), dtype=np.float64),
    "box-2x2": spaces.Box(low=np.array([[-1.0, 0.0], [0.0, -1.0]]), high=np.ones((2, 2)), dtype=np.float64),
    "box-uint8-scalar": spaces.Box(low=0, high=255, shape=(), dtype=np.uint8),
    "box-image": spaces.Box(low=0, high=255, shape=(32, 32, 3), dtype=np.uint8),
    "discrete": spaces.Discrete(2),
    "discrete-start": spaces.Discrete(5, start=-2),
    "tuple-discrete": spaces.Tuple((spaces.Discrete(3), spaces.Discrete(5))),
    "tuple-mixed": spaces.Tuple((spaces.Discrete(7), spaces.Box(low=np.array([0.0, -1.0]), high=np.ones(2), dtype=np.float64))),
    "multidiscrete": spaces.MultiDiscrete([11, 13, 17]),
    "multibinary": spaces.MultiBinary(19),
    "dict": spaces.Dict({"position": spaces.Discrete(23), "velocity": spaces.Box(low=np.array([0.0]), high=np.array([1.0]), dtype=np.float64)}),
    "dict-nested": spaces.Dict(
        {
            "position": spaces.Dict({"x": spaces.Discrete(29), "y": spaces.Discrete(31)}),
            "velocity": spaces.Tuple((spaces.Discrete(37), spaces.Box(low=0, high=255, shape=(), dtype=np.uint8))),
        }
    ),
}


# -- construction and spaces ---------------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [1, 2])
def test_create_and_batched_spaces(num_workers):
    # test_create_sync_vector_env / test_create_async_vector_env, and the space checks of
    # test_vector_env_equal: N envs, batched spaces equal to SyncVectorEnv's.
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=num_workers), sync(fns)) as (ours, ref):
        assert ours.num_envs == ref.num_envs == 4
        assert ours.single_observation_space == ref.single_observation_space
        assert ours.single_action_space == ref.single_action_space
        assert ours.observation_space == ref.observation_space == batch_space(ref.single_observation_space, 4)
        assert ours.action_space == ref.action_space == batch_space(ref.single_action_space, 4)


def test_metadata_says_same_step_by_default_and_leaves_the_sub_envs_metadata_alone():
    # test_metadata_sync_vector_env / test_metadata_async_vector_env
    with opened(PipelineVectorEnv(seeded_fns("CartPole-v1", 2), num_workers=1)) as ours:
        assert ours.metadata["autoreset_mode"] == SAME_STEP
        assert all("autoreset_mode" not in metadata for metadata in ours.get_attr("metadata"))
    assert "autoreset_mode" not in gym.make("CartPole-v1").metadata


def test_reset_returns_a_batch_of_the_observation_space():
    # test_reset_sync_vector_env / test_reset_async_vector_env
    with opened(PipelineVectorEnv(seeded_fns("CartPole-v1", 8), num_workers=2)) as ours:
        observations, infos = ours.reset()
        assert isinstance(ours.observation_space, spaces.Box)
        assert isinstance(observations, np.ndarray)
        assert observations.dtype == ours.observation_space.dtype
        assert observations.shape == (8, *ours.single_observation_space.shape) == ours.observation_space.shape
        assert isinstance(infos, dict)


@pytest.mark.parametrize("use_single_action_space", [True, False])
def test_step_returns_batches_of_the_right_dtypes(use_single_action_space):
    # test_step_sync_vector_env / test_step_async_vector_env (FrozenLake: Discrete -> MultiDiscrete)
    fns = seeded_fns("FrozenLake-v1", 8)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        assert_identical(ours.reset(seed=5), ref.reset(seed=5), "reset")
        assert isinstance(ours.single_action_space, spaces.Discrete)
        assert isinstance(ours.action_space, spaces.MultiDiscrete)
        ours.action_space.seed(3)
        if use_single_action_space:
            actions = [ours.single_action_space.sample() for _ in range(8)]
        else:
            actions = ours.action_space.sample()
        out = ours.step(actions)
        assert_same_transition(out, ref.step(actions), "step")
        observations, rewards, terminations, truncations, _ = out
        assert isinstance(ours.observation_space, spaces.MultiDiscrete)
        assert isinstance(observations, np.ndarray)
        assert observations.dtype == ours.observation_space.dtype
        assert observations.shape == (8, *ours.single_observation_space.shape) == ours.observation_space.shape
        assert isinstance(rewards, np.ndarray) and isinstance(rewards[0], (float, np.floating))
        assert rewards.ndim == 1 and rewards.size == 8
        for flags in (terminations, truncations):
            assert isinstance(flags, np.ndarray) and flags.dtype == np.bool_
            assert flags.ndim == 1 and flags.size == 8


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_every_space_is_batched_reset_and_stepped(space):
    # test_vector_obs_action_spaces (each env asserts that its action is in its action space),
    # with every result compared with SyncVectorEnv's.
    fns = [functools.partial(SpaceEnv, space)] * 3
    with opened(PipelineVectorEnv(fns, num_workers=1), sync(fns)) as (ours, ref):
        assert ours.observation_space == ours.action_space == ref.observation_space
        obs, infos = ours.reset(seed=7)
        assert obs in ours.observation_space
        assert_identical((obs, infos), ref.reset(seed=7), "reset")
        ours.action_space.seed(11)
        for t in range(3):
            actions = ours.action_space.sample()
            out = ours.step(actions)
            assert out[0] in ours.observation_space
            assert_same_transition(out, ref.step(actions), f"step {t}")


@pytest.mark.parametrize("space", SPACES.values(), ids=SPACES.keys())
def test_same_step_final_obs_is_in_the_single_observation_space(space):
    # test_same_step_final_obs: episodes of 2, 3 and 3 steps; each final_obs is a single observation.
    fns = [functools.partial(SpaceEnv, space, spaces.Discrete(5), length) for length in (2, 3, 3)]
    with opened(PipelineVectorEnv(fns, num_workers=1), sync(fns)) as (ours, ref):
        assert ours.metadata["autoreset_mode"] == SAME_STEP
        assert_identical(ours.reset(seed=1), ref.reset(seed=1), "reset")
        for t, ended in enumerate(([], [0], [1, 2])):
            out = ours.step([1, 2, 3])
            assert_same_transition(out, ref.step([1, 2, 3]), f"step {t}")
            infos = out[4]
            for i in ended:
                assert infos["_final_obs"][i] and infos["final_obs"][i] in ours.single_observation_space


def test_float16_observations_keep_their_dtype():
    # test_float16_async_vector_env_shared_memory
    fns = [functools.partial(SpaceEnv, spaces.Box(-1.0, 1.0, (3,), np.float16), spaces.Discrete(2))] * 2
    with opened(PipelineVectorEnv(fns, num_workers=1), sync(fns)) as (ours, ref):
        obs, _ = ours.reset(seed=0)
        assert obs.dtype == np.float16 and obs.shape == (2, 3)
        assert_identical(obs, ref.reset(seed=0)[0], "reset")
        out = ours.step(np.array([0, 1]))
        assert out[0].dtype == np.float16 and out[0].shape == (2, 3)
        assert_same_transition(out, ref.step(np.array([0, 1])), "step")


def test_envs_with_different_spaces_are_refused():
    # test_check_spaces_sync_vector_env / test_check_spaces_async_vector_env: RuntimeError.
    fns = seeded_fns("CartPole-v1", 4)
    fns[1] = functools.partial(seeded, "FrozenLake-v1", 1)
    with pytest.raises(RuntimeError):
        PipelineVectorEnv(fns, num_workers=2).close()


def test_a_custom_space_is_refused_at_construction():
    # test_custom_space_async_vector_env_shared_memory: a space shared memory cannot hold is
    # refused when the vector env is built, with ValueError.
    with pytest.raises(ValueError):
        PipelineVectorEnv([CustomSpaceEnv] * 2, num_workers=1).close()


def test_batched_action_space_draws_as_the_sub_envs_seeded_action_space():
    # test_sync_vector_env_seed / test_sync_vector_determinism (a Box action space, as Gymnasium's
    # BipedalWalker): the batched action space starts from the first env's seeded generator, so it
    # samples as the env alone, as SyncVectorEnv's, and as another vector env built alike.
    make = functools.partial(seeded, "MountainCarContinuous-v0", 123)
    alone = make()
    with opened(
        PipelineVectorEnv([make], num_workers=1),
        sync([make]),
        PipelineVectorEnv([make] * 3, num_workers=1),
        PipelineVectorEnv([make] * 3, num_workers=1),
    ) as (one, ref, first, second):
        assert one.action_space.np_random.bit_generator.state == alone.action_space.np_random.bit_generator.state
        assert first.action_space.np_random.bit_generator.state == second.action_space.np_random.bit_generator.state
        for _ in range(100):
            sample = one.action_space.sample()
            assert np.all(sample == alone.action_space.sample())
            assert_identical(sample, ref.action_space.sample(), "sample")
            assert np.all(first.action_space.sample() == second.action_space.sample())


# -- data: the same as SyncVectorEnv ------------------------------------------------------------
@pytest.mark.parametrize("num_workers,pipeline_stages", [(1, 1), (2, 1), (2, 2)])
def test_rollout_equals_sync_vector_env(num_workers, pipeline_stages):
    # test_vector_env_equal (SAME_STEP): 100 steps of CartPole, every result equal.
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=num_workers, pipeline_stages=pipeline_stages), sync(fns)) as (ours, ref):
        assert_identical(ours.reset(seed=0), ref.reset(seed=0), "reset")
        ours.action_space.seed(0)
        finals = 0
        for t in range(100):
            actions = ours.action_space.sample()
            assert actions in ref.action_space
            out = ours.step(actions)
            assert_same_transition(out, ref.step(actions), f"step {t}")
            finals += int(out[4].get("_final_obs", np.zeros(4, bool)).sum())
        assert finals > 0  # episodes ended and were reset in the step


def test_reset_with_an_int_seeds_env_i_with_seed_plus_i():
    # test_random_seeding_basics: reset(seed=42) seeds env i with 42 + i, np_random_seed says so,
    # and reset(seed=None) keeps it.
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        assert_identical(ours.reset(seed=42), ref.reset(seed=42), "reset(seed=42)")
        for i in range(4):
            assert_identical(ours.call("np_random_seed")[i], 42 + i, f"env {i}'s seed")
        assert ours.np_random_seed == tuple(42 + i for i in range(4)) == ref.np_random_seed
        assert_identical(ours.reset(seed=None), ref.reset(seed=None), "reset(seed=None)")
        assert ours.np_random_seed == tuple(42 + i for i in range(4))


def test_np_random_seed_before_any_reset_is_the_sub_envs_seeds():
    # test_random_seeds_set_at_retrieval: the envs were seeded 0..3 when built.
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        assert ref.np_random_seed == (0, 1, 2, 3)
        assert ours.np_random_seed == ref.np_random_seed


def test_reset_with_a_list_of_seeds():
    # reset(seed=[...]): env i gets seed[i]; None continues its generator.
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        assert_identical(ours.reset(seed=[3, None, 7, 11]), ref.reset(seed=[3, None, 7, 11]), "reset(seed=list)")
        actions = np.array([0, 1, 1, 0])
        assert_same_transition(ours.step(actions), ref.step(actions), "step")
        assert_identical(ours.reset(seed=[None, 5, None, 5]), ref.reset(seed=[None, 5, None, 5]), "second reset")


def test_same_step_autoreset_of_the_counting_env():
    # test_autoreset_within_step: episodes of 2, 3 and 3 steps; the ended envs' observation is the
    # reset's, the final one is in info["final_obs"] under the "_final_obs" mask.
    fns = [CountEnv] * 3
    with opened(PipelineVectorEnv(fns, num_workers=3), sync(fns)) as (ours, ref):
        assert ours.metadata["autoreset_mode"] == SAME_STEP
        ours.set_attr("max_count", [2, 3, 3])
        ref.set_attr("max_count", [2, 3, 3])
        obs, info = ours.reset()
        assert_identical((obs, info), ref.reset(), "reset")
        assert np.all(obs == [0, 0, 0]) and info == {}
        expected = [  # obs, terminated, envs whose episode ended with final_obs
            ([1, 1, 1], [False, False, False], {}),
            ([0, 2, 2], [True, False, False], {0: 2}),
            ([1, 0, 0], [False, True, True], {1: 3, 2: 3}),
            ([0, 1, 1], [True, False, False], {0: 2}),
        ]
        for t, (want_obs, want_terminated, finals) in enumerate(expected):
            out = ours.step([1, 2, 3])
            assert_same_discrete_transition(out, ref.step([1, 2, 3]), f"step {t}", ours.single_observation_space)
            obs, rewards, terminated, truncated, info = out
            assert np.all(obs == want_obs) and np.all(rewards == [1, 2, 3])
            assert np.all(terminated == want_terminated) and not truncated.any()
            info = without_legacy_keys(info)
            if not finals:
                assert info == {}
                continue
            mask = np.array([i in finals for i in range(3)])
            assert set(info) == {"final_obs", "_final_obs", "final_info", "_final_info"}
            assert np.array_equal(info["_final_obs"], mask) and np.array_equal(info["_final_info"], mask)
            assert info["final_obs"].dtype == object and info["final_info"] == {}
            assert [info["final_obs"][i] for i in range(3)] == [finals.get(i) for i in range(3)]


def test_next_step_autoreset_of_the_counting_env():
    # test_autoreset_next_step: episodes of 2, 3 and 3 steps; the step after an episode's end
    # resets the env instead of running its action: the reset's observation, reward 0, no flags.
    fns = [CountEnv] * 3
    with opened(PipelineVectorEnv(fns, num_workers=3, autoreset_mode=NEXT_STEP), sync(fns, NEXT_STEP)) as (ours, ref):
        assert ours.metadata["autoreset_mode"] == NEXT_STEP
        ours.set_attr("max_count", [2, 3, 3])
        ref.set_attr("max_count", [2, 3, 3])
        obs, info = ours.reset()
        assert_identical((obs, info), ref.reset(), "reset")
        assert np.all(obs == [0, 0, 0]) and info == {}
        expected = [  # obs, rewards, terminated
            ([1, 1, 1], [1, 2, 3], [False, False, False]),
            ([2, 2, 2], [1, 2, 3], [True, False, False]),
            ([0, 3, 3], [0, 2, 3], [False, True, True]),
            ([1, 0, 0], [1, 0, 0], [False, False, False]),
        ]
        for t, (want_obs, want_rewards, want_terminated) in enumerate(expected):
            out = ours.step([1, 2, 3])
            assert_same_transition(out, ref.step([1, 2, 3]), f"step {t}")
            obs, rewards, terminated, truncated, info = out
            assert np.all(obs == want_obs) and np.all(rewards == want_rewards)
            assert np.all(terminated == want_terminated) and not truncated.any()
            assert info == {}  # no final_obs / final_info in this mode


def test_disabled_autoreset_of_the_counting_env():
    # test_autoreset_disabled: an ended env keeps its last observation until the caller resets it
    # with a reset_mask. Stepping it before is refused (SyncVectorEnv asserts; fastenv raises
    # EpisodeEndedError, an AssertionError, before any env steps).
    fns = [CountEnv] * 3
    with opened(PipelineVectorEnv(fns, num_workers=3, autoreset_mode=DISABLED), sync(fns, DISABLED)) as (ours, ref):
        assert ours.metadata["autoreset_mode"] == DISABLED
        ours.set_attr("max_count", [2, 3, 3])
        ref.set_attr("max_count", [2, 3, 3])
        assert_identical(ours.reset(), ref.reset(), "reset")
        expected = [  # obs before the step's reset_mask, terminated, obs after it
            ([1, 1, 1], [False, False, False], None),
            ([2, 2, 2], [True, False, False], [0, 2, 2]),
            ([1, 3, 3], [False, True, True], [1, 0, 0]),
            ([2, 1, 1], [True, False, False], None),
        ]
        for t, (want_obs, want_terminated, after_reset) in enumerate(expected):
            out = ours.step([1, 2, 3])
            assert_same_transition(out, ref.step([1, 2, 3]), f"step {t}")
            obs, rewards, terminations, truncations, info = out
            assert np.all(obs == want_obs) and np.all(rewards == [1, 2, 3]) and info == {}
            assert np.all(terminations == want_terminated) and not truncations.any()
            if after_reset is None:
                continue
            ended = np.flatnonzero(terminations).tolist()
            with pytest.raises(AssertionError):
                ours.step([1, 2, 3])
            if terminations[0]:  # (SyncVectorEnv asserts at the first ended env, once it stepped those before it)
                with pytest.raises(AssertionError):
                    ref.step([1, 2, 3])
            with pytest.raises(EpisodeEndedError, match=re.escape(f"envs {ended} ended their episodes")):
                ours.step([1, 2, 3])
            assert ours.call("count") == tuple(want_obs)  # no env stepped
            obs, info = ours.reset(options={"reset_mask": terminations})
            assert_identical((obs, info), ref.reset(options={"reset_mask": terminations.copy()}), f"reset {t}")
            assert np.all(obs == after_reset) and info == {}


@pytest.mark.parametrize("given", [mode for mode in AutoresetMode] + [mode.value for mode in AutoresetMode])
def test_autoreset_mode_is_the_enum_or_its_value_and_the_metadata_says_it(given):
    # test_autoreset_metadata
    with opened(PipelineVectorEnv([CountEnv] * 2, num_workers=1, autoreset_mode=given)) as ours:
        assert ours.metadata["autoreset_mode"] is AutoresetMode(given)
        assert ours.autoreset_mode is AutoresetMode(given)
        assert all("autoreset_mode" not in metadata for metadata in ours.get_attr("metadata"))


@pytest.mark.parametrize("given", ["same_step", "NEXT_STEP", 1, None])
def test_an_unknown_autoreset_mode_is_refused_before_any_worker_starts(given, tmp_path):
    # test_make_vec_autoreset's argument, through gym.make_vec (a fastenv id) and PipelineVectorEnv;
    # refused as Gymnasium's AutoresetMode(value) refuses it (a ValueError), naming the modes.
    built = tmp_path / "built"
    with pytest.raises(ValueError, match=r"autoreset_mode must be one of AutoresetMode.NEXT_STEP \('NextStep'\), .*got"):
        PipelineVectorEnv([functools.partial(built.write_text, "an env")], autoreset_mode=given)
    with pytest.raises(ValueError, match="autoreset_mode must be one of"):
        gym.make_vec("fastenv/Libero-v0", num_envs=2, autoreset_mode=given)
    assert not built.exists()


def test_final_obs_and_final_info():
    # test_final_obs_info, with same-step autoreset: the step that ends the episode observes the
    # reset (its info at the top level), the final observation and step info go to final_obs /
    # final_info.
    with opened(PipelineVectorEnv([FinalInfoEnv], num_workers=1), sync([FinalInfoEnv])) as (ours, ref):
        obs, info = ours.reset()
        assert_identical((obs, info), ref.reset(), "reset")
        assert obs == np.array([0]) and info == {"reset": np.array([True]), "_reset": np.array([True])}
        for action in (1, 2):
            out = ours.step([action])
            assert_same_transition(out, ref.step([action]), f"step {action}")
            obs, _, terminated, _, info = out
            assert obs == np.array([action]) and terminated == np.array([False])
            assert info == {"action": np.array([action]), "_action": np.array([True])}
        out = ours.step([3])
        assert_same_discrete_transition(out, ref.step([3]), "step 3", ours.single_observation_space)
        obs, _, terminated, _, info = out
        info = without_legacy_keys(info)
        assert obs == np.array([0]) and terminated == np.array([True])
        assert info["reset"] == np.array([True]) and info["_reset"] == np.array([True])
        assert info["final_obs"][0] == 0 and info["_final_obs"][0]
        assert info["final_info"]["action"] == np.array([3]) and info["final_info"]["_action"][0]


def test_infos_with_keys_missing_in_some_envs():
    # test_vector_return_info: a key some envs lack is filled with zeros and masked; every step
    # terminates, so (same step) the step infos are in final_info and the reset's at the top.
    fns = [
        functools.partial(InfoEnv, [{"a": 1}, {"c": np.array([1, 2])}]),
        functools.partial(InfoEnv, [{"a": 2, "b": 3}, {"c": np.array([3, 4])}]),
    ]
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        obs, info = ours.reset(seed=0)
        assert_identical((obs, info), ref.reset(seed=0), "reset")
        assert_identical(info, {"a": np.array([1, 2]), "b": np.array([0, 3]), "_a": np.array([True, True]), "_b": np.array([False, True])}, "reset info")
        action = np.full((2, 1), 0.5, np.float32)
        out = ours.step(action)
        assert_same_transition(out, ref.step(action), "step")
        final = out[4]["final_info"]
        assert_identical(final["c"], np.array([[1, 2], [3, 4]]), "final_info/c")
        assert_identical(final["_c"], np.array([True, True]), "final_info/_c")


def test_partial_reset_with_a_reset_mask():
    # test_partial_reset: the masked envs are reset (with their seeds), the others keep their
    # observation.
    fns = [functools.partial(gym.make, "CartPole-v1")] * 3
    with opened(PipelineVectorEnv(fns, num_workers=3, autoreset_mode=DISABLED), sync(fns, DISABLED)) as (ours, ref):
        reset_obs, info = ours.reset(seed=[0, 1, 2])
        assert_identical((reset_obs, info), ref.reset(seed=[0, 1, 2]), "reset")
        ours.action_space.seed(123)
        for t in range(3):
            actions = ours.action_space.sample()
            step_obs, *_ = out = ours.step(actions)
            assert_same_transition(out, ref.step(actions), f"step {t}")
        mask = np.array([True, True, False])
        mask_obs, info = ours.reset(seed=[0, 1, 0], options={"reset_mask": mask})
        assert_identical((mask_obs, info), ref.reset(seed=[0, 1, 0], options={"reset_mask": mask}), "partial reset")
        assert np.all(mask_obs[:2] == reset_obs[:2])
        assert np.all(mask_obs[2] == step_obs[2])


@pytest.mark.parametrize(
    "mask,error",
    [
        (np.array([True]), ValueError),
        (np.array([True, True, False, False]), ValueError),
        (np.array([[True, True, True]]), ValueError),
        (np.array([False, False, False]), ValueError),
        (np.array([1, 1, 0]), TypeError),
        (np.array([1.0, 1.0, 0.0]), TypeError),
    ],
    ids=["shape-1", "shape-4", "shape-1x3", "all-false", "int64", "float64"],
)
def test_a_bad_reset_mask_is_refused(mask, error):
    # test_partial_reset_failure: a wrong shape or no True value -> ValueError, a non-bool dtype -> TypeError.
    fns = [functools.partial(gym.make, "CartPole-v1")] * 3
    with opened(PipelineVectorEnv(fns, num_workers=1, autoreset_mode=DISABLED)) as ours:
        ours.reset(options={"reset_mask": np.array([True, True, True])})
        with pytest.raises(error):
            ours.reset(options={"reset_mask": mask})


def test_the_number_of_actions_must_match_the_number_of_envs():
    # test_action_count_compatibility: too few or too many actions -> ValueError, a scalar -> TypeError.
    with opened(PipelineVectorEnv([functools.partial(gym.make, "CartPole-v1")] * 4, num_workers=2, autoreset_mode=DISABLED)) as ours:
        ours.reset(seed=0)
        actions = ours.action_space.sample()
        obs, rewards, terminations, truncations, _ = ours.step(actions)
        assert len(obs) == len(rewards) == len(terminations) == len(truncations) == 4
        with pytest.raises(ValueError):
            ours.step(actions[:3])
        with pytest.raises(ValueError):
            ours.step(np.concatenate([actions, actions[:1]]))
        with pytest.raises(TypeError):
            ours.step(0)


# -- attributes, methods, render -----------------------------------------------------------------
def test_call_reads_attributes_and_calls_methods():
    # test_call_sync_vector_env / test_call_async_vector_env: call() returns a tuple, one result per
    # env, of a method's return (render) or an attribute's value (gravity).
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        gravity = ours.call("gravity")
        assert isinstance(gravity, tuple) and len(gravity) == 4
        assert all(isinstance(g, float) and g == 9.8 for g in gravity)
        assert_identical(gravity, ref.call("gravity"), "call('gravity')")
    fns = [functools.partial(RenderEnv, "rgb_array")] * 4
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        ours.reset(seed=0)
        ref.reset(seed=0)
        images = ours.call("render")
        assert isinstance(images, tuple) and len(images) == 4
        assert all(isinstance(image, np.ndarray) for image in images)
        assert_identical(images, ref.call("render"), "call('render')")


def test_set_attr_then_get_attr():
    # test_set_attr_sync_vector_env / test_set_attr_async_vector_env
    fns = seeded_fns("CartPole-v1", 4)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        ours.set_attr("gravity", [9.81, 3.72, 8.87, 1.62])
        ref.set_attr("gravity", [9.81, 3.72, 8.87, 1.62])
        assert ours.get_attr("gravity") == (9.81, 3.72, 8.87, 1.62) == ref.get_attr("gravity")


@pytest.mark.parametrize("how", ["get_attr", "call"])
def test_a_missing_attribute_raises_attribute_error(how):
    # SyncVectorEnv / AsyncVectorEnv raise the sub-env's AttributeError for an attribute no env has.
    fns = seeded_fns("CartPole-v1", 2)
    with opened(PipelineVectorEnv(fns, num_workers=2), sync(fns)) as (ours, ref):
        with pytest.raises(AttributeError):
            getattr(ref, how)("no_such_attribute")
        with pytest.raises(AttributeError):
            getattr(ours, how)("no_such_attribute")


def test_render_returns_one_frame_per_env():
    # test_render_sync_vector / test_render_async_vector
    fns = [functools.partial(RenderEnv, "rgb_array")] * 3
    with opened(PipelineVectorEnv(fns, num_workers=3), sync(fns)) as (ours, ref):
        assert ours.render_mode == "rgb_array"
        ours.reset(seed=0)
        ref.reset(seed=0)
        ours.step(np.zeros((3, 2), np.float32))
        ref.step(np.zeros((3, 2), np.float32))
        frames = ours.render()
        assert isinstance(frames, tuple) and len(frames) == ours.num_envs
        assert all(isinstance(frame, np.ndarray) for frame in frames)
        assert_identical(frames, ref.render(), "render")
    with opened(PipelineVectorEnv([RenderEnv] * 3, num_workers=1)) as ours:
        assert ours.render_mode is None


class CountingResets(VectorWrapper):
    """A vector wrapper that counts its resets (Gymnasium's DummyVectorWrapper)."""

    def __init__(self, env):
        super().__init__(env)
        self.counter = 0

    def reset(self, *, seed=None, options=None):
        self.counter += 1
        return super().reset(seed=seed, options=options)


def test_a_vector_wrapper_forwards_reset_attributes_and_metadata():
    # test_vector_env_wrapper_inheritance / _attributes / test_vector_env_metadata
    fns = seeded_fns("CartPole-v1", 3)
    with opened(PipelineVectorEnv(fns, num_workers=1), PipelineVectorEnv(fns, num_workers=1)) as (plain, inner):
        wrapped = CountingResets(inner)
        wrapped.reset()
        assert wrapped.counter == 1
        assert np.allclose(wrapped.env.call("gravity"), plain.call("gravity"))
        plain.set_attr("gravity", [20.0, 20.0, 20.0])
        wrapped.env.set_attr("gravity", [20.0, 20.0, 20.0])
        assert np.allclose(wrapped.env.get_attr("gravity"), plain.get_attr("gravity"))
        assert wrapped.metadata == inner.metadata
        assert wrapped.num_envs == 3 and wrapped.observation_space == inner.observation_space


# -- life cycle and errors ------------------------------------------------------------------------
def test_closing_twice_is_harmless():
    # every vector env's close() may be called again (AsyncVectorEnv checks self.closed)
    ours = PipelineVectorEnv(seeded_fns("CartPole-v1", 2), num_workers=1)
    ours.close()
    ours.close()
    assert ours.closed


USES = {
    "reset": lambda env: env.reset(),
    "step": lambda env: env.step(np.zeros(2, np.int64)),
    "send-stage": lambda env: env.send(np.zeros(2, np.int64), stage=0),
    "send-env_ids": lambda env: env.send(np.zeros(1, np.int64), env_ids=[0]),
    "recv-stage": lambda env: env.recv(stage=0),
    "recv": lambda env: env.recv(max_batch=1),
    "call": lambda env: env.call("gravity"),
    "get_attr": lambda env: env.get_attr("gravity"),
    "set_attr": lambda env: env.set_attr("gravity", 1.0),
    "render": lambda env: env.render(),
}


@pytest.mark.parametrize("use", USES.values(), ids=USES.keys())
def test_use_after_close_raises_closed_environment_error(use):
    # test_already_closed_async_vector_env
    ours = PipelineVectorEnv(seeded_fns("CartPole-v1", 2), num_workers=1)
    ours.close()
    with pytest.raises(ClosedEnvironmentError):
        use(ours)


def test_recv_without_send_raises_no_async_call_error():
    # test_step_out_of_order_async_vector_env / test_reset_out_of_order_async_vector_env:
    # step_wait() without step_async() -> NoAsyncCallError; here recv() without send().
    with opened(PipelineVectorEnv(seeded_fns("CartPole-v1", 4), num_workers=2, pipeline_stages=2)) as ours:
        ours.reset(seed=0)
        with pytest.raises(NoAsyncCallError):
            ours.recv(stage=0)
        with pytest.raises(NoAsyncCallError):
            ours.recv(max_batch=2)
        ours.send(np.zeros(2, np.int64), stage=1)  # one stage in flight: the other still has no call
        with pytest.raises(NoAsyncCallError):
            ours.recv(stage=0)
        ours.recv(stage=1)


PENDING = {
    "send-stage-again": lambda env: env.send(np.zeros(2, np.int64), stage=0),
    "send-env_ids-again": lambda env: env.send(np.zeros(1, np.int64), env_ids=[1]),
    "step": lambda env: env.step(np.zeros(4, np.int64)),
    "reset": lambda env: env.reset(),
}


@pytest.mark.parametrize("how", ["stage", "env_ids"])
@pytest.mark.parametrize("again", PENDING.values(), ids=PENDING.keys())
def test_a_call_while_envs_are_pending_raises_already_pending_call_error(how, again):
    # test_step_out_of_order_async_vector_env / test_reset_out_of_order_async_vector_env:
    # step_async() or reset_async() while a call is pending -> AlreadyPendingCallError.
    with opened(PipelineVectorEnv(seeded_fns("CartPole-v1", 4), num_workers=2, pipeline_stages=2)) as ours:
        ours.reset(seed=0)
        if how == "stage":
            ours.send(np.zeros(2, np.int64), stage=0)  # envs 0 and 1
        else:
            ours.send(np.zeros(2, np.int64), env_ids=[0, 1])
        with pytest.raises(AlreadyPendingCallError):
            again(ours)


def test_close_while_a_call_is_pending_warns():
    # test_*_out_of_order_async_vector_env: close() with a pending call warns (UserWarning) and closes.
    ours = PipelineVectorEnv(seeded_fns("CartPole-v1", 2), num_workers=1)
    ours.reset(seed=0)
    ours.send(np.zeros(2, np.int64), stage=0)
    with pytest.warns(UserWarning):
        ours.close()
    assert ours.closed


def test_a_sub_env_error_is_raised_as_its_own_type():
    # test_async_vector_subenv_error: the sub-env's ValueError reaches the caller as a ValueError,
    # from reset and from step; a clean reset first raises nothing and warns nothing.
    with opened(PipelineVectorEnv([RaisingEnv] * 2, num_workers=2)) as ours:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ours.reset(seed=[0, 0])
        with pytest.raises(ValueError, match="Error in reset"):
            ours.reset(seed=[1, 0])
    with opened(PipelineVectorEnv([RaisingEnv] * 3, num_workers=3)) as ours:
        ours.reset(seed=[0, 0, 0])
        with pytest.raises(ValueError, match="Error in step"):
            ours.step(np.array([0, 1, 2]))


# -- Gymnasium's vector wrappers over fastenv -----------------------------------------------------
def dict_env():
    return SpaceEnv(spaces.Dict({"a": spaces.Box(0, 1, (2,), np.float32), "b": spaces.Discrete(5)}), spaces.Box(0, 1, (1,), np.float32), length=6)


def image_env():
    return SpaceEnv(spaces.Box(0, 255, (16, 16, 3), np.uint8), spaces.Box(0, 1, (1,), np.float32), length=6)


def double(obs):
    return obs * 2


def halve_less_one(reward):
    return 0.5 * reward - 1


def wrapped_env(make, name, kwargs):
    """``make()`` inside the env wrapper ``gym.wrappers.<name>`` (built in the workers)."""
    return getattr(gym.wrappers, name)(make(), **kwargs)


CARTPOLE = functools.partial(seeded, "CartPole-v1", 0)
MOUNTAIN_CAR = functools.partial(seeded, "MountainCarContinuous-v0", 0)
WRAPPERS = {  # name: (env, wrapper kwargs)
    # test_vector_wrapper_equivalence's list, on envs without Box2D
    "FilterObservation": (dict_env, {"filter_keys": ["a"]}),
    "FlattenObservation": (dict_env, {}),
    "GrayscaleObservation": (image_env, {}),
    "ResizeObservation": (image_env, {"shape": (7, 9)}),
    "ReshapeObservation": (image_env, {"shape": (16, 8, 6)}),
    "RescaleObservation": (CARTPOLE, {"min_obs": np.array([0.0, -np.inf, 0.0, -np.inf]), "max_obs": np.array([1.0, np.inf, 1.0, np.inf])}),
    "DtypeObservation": (image_env, {"dtype": np.int32}),
    "TransformObservation": (CARTPOLE, {"func": double, "observation_space": None}),
    "ClipAction": (MOUNTAIN_CAR, {}),
    "RescaleAction": (MOUNTAIN_CAR, {"min_action": 1, "max_action": 2}),
    "ClipReward": (CARTPOLE, {"min_reward": -0.25, "max_reward": 0.75}),
    "TransformReward": (CARTPOLE, {"func": halve_less_one}),
    # test_normalize_observation / test_normalize_reward / test_record_episode_statistics /
    # test_dict_info_to_list, over fastenv instead of SyncVectorEnv
    "NormalizeObservation": (CARTPOLE, {}),
    "NormalizeReward": (CARTPOLE, {}),
    "RecordEpisodeStatistics": (CARTPOLE, {}),
    "DictInfoToList": (CARTPOLE, {}),
}


def comparable(infos, ours):
    """Infos of a wrapped vector env, less fastenv's ``final_observation`` alias (``ours``) and the
    episode wall time (which differs between any two runs)."""
    if isinstance(infos, list):  # DictInfoToList: one dict per env
        out = []
        for info in infos:
            info = dict(info)
            if ours and "final_observation" in info:
                assert info.pop("final_observation") is info["final_obs"]
            out.append(info)
        return out
    infos = without_legacy_keys(infos) if ours else infos
    if "episode" in infos:
        infos = {**infos, "episode": {k: v for k, v in infos["episode"].items() if k not in ("t", "_t")}}
    return infos


def assert_same_rollouts(ours, ref, steps=60):
    """Reset both with one seed, then step both with the same actions; every result identical."""
    assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
    assert ours.single_observation_space == ref.single_observation_space
    assert ours.single_action_space == ref.single_action_space
    obs, infos = ours.reset(seed=123)
    ref_obs, ref_infos = ref.reset(seed=123)
    assert_identical(obs, ref_obs, "reset obs")
    assert_identical(comparable(infos, True), comparable(ref_infos, False), "reset infos")
    ours.action_space.seed(123)
    for t in range(steps):
        actions = ours.action_space.sample()
        out, ref_out = ours.step(actions), ref.step(actions)
        for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
            assert_identical(a, b, f"step {t} {name}")
        assert_identical(comparable(out[4], True), comparable(ref_out[4], False), f"step {t} infos")


@pytest.mark.parametrize("autoreset_mode", [SAME_STEP, NEXT_STEP], ids=["SameStep", "NextStep"])
@pytest.mark.parametrize("num_envs", [1, 3])
@pytest.mark.parametrize("name", WRAPPERS)
def test_gymnasium_vector_wrappers_treat_fastenv_as_sync_vector_env(name, num_envs, autoreset_mode):
    # test_vector_wrapper_equivalence (in both its autoreset modes) and the vector wrappers' own
    # tests. A Gymnasium vector wrapper over fastenv returns what it returns over SyncVectorEnv in
    # the same mode, step for step. Gymnasium's observation wrappers refuse same-step autoreset
    # (final_obs would escape the transformation): they must refuse fastenv's vector env alike (from
    # its metadata); then the same wrapper on each env (the other side of
    # test_vector_wrapper_equivalence) is compared instead.
    make, kwargs = WRAPPERS[name]
    fns = [make] * num_envs
    with opened(PipelineVectorEnv(fns, num_workers=1, autoreset_mode=autoreset_mode), sync(fns, autoreset_mode)) as (ours, ref):
        vector_wrapper = getattr(gym.wrappers.vector, name)
        try:
            wrapped_ref = vector_wrapper(ref, **kwargs)
        except ValueError as refused:
            with pytest.raises(type(refused), match=re.escape(str(refused))):
                vector_wrapper(ours, **kwargs)
        else:
            assert_same_rollouts(vector_wrapper(ours, **kwargs), wrapped_ref)
            return
    if not hasattr(gym.wrappers, name):
        return
    fns = [functools.partial(wrapped_env, make, name, kwargs)] * num_envs
    with opened(PipelineVectorEnv(fns, num_workers=1, autoreset_mode=autoreset_mode), sync(fns, autoreset_mode)) as (ours, ref):
        assert_same_rollouts(ours, ref)


class FixedLengthEnv(SpaceEnv):
    """Episodes of ``length`` steps, reward 1 per step."""

    def __init__(self, length=3):
        super().__init__(spaces.Box(0, 1, (1,), np.float32), spaces.Box(0, 1, (1,), np.float32), length)

    def step(self, action):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 1.0, terminated, truncated, info


def test_record_episode_statistics_counts_same_step_episodes():
    # test_episode_statistics_with_autoreset_mode (SAME_STEP): every recorded episode has the
    # return and length of the fixed 3-step episodes.
    envs = gym.wrappers.vector.RecordEpisodeStatistics(PipelineVectorEnv([FixedLengthEnv] * 2, num_workers=2))
    with opened(envs):
        envs.reset(seed=123)
        envs.action_space.seed(123)
        for _ in range(25):
            _, _, terminations, truncations, infos = envs.step(envs.action_space.sample())
            dones = terminations | truncations
            if dones.any():
                assert "episode" in infos
                assert np.all(infos["episode"]["r"][dones] == 3) and np.all(infos["episode"]["l"][dones] == 3)
        assert envs.episode_count > 2
        assert np.all(np.array(envs.return_queue) == 3) and np.all(np.array(envs.length_queue) == 3)


# -- fastenv's LIBERO vector env ------------------------------------------------------------------
# Small and cheap: 32-pixel camera, two envs in two workers, chunks of 2 simulator steps, episodes
# of 6 steps (3 chunks), so that autoresets come within a few steps.
LIBERO = dict(suite="libero_10", task_id=0, chunk=2, camera_size=32, modalities=["agentview_image", "robot0_proprio-state"], max_episode_steps=6)


def libero_vec():
    return gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, **LIBERO)


def libero_fns():
    from fastenv.envs.libero import make_env

    return [functools.partial(make_env, **LIBERO)] * 2


@pytest.mark.libero
@pytest.mark.big_memory
def test_libero_vector_env_equals_sync_vector_env():
    # test_vector_env_equal / test_autoreset_within_step / test_partial_reset on LIBERO: reset with an
    # int and a list of seeds, same-step autoresets (final_obs / final_info), a partial reset. Each
    # part is checked even where an earlier one broke (one build serves them all).
    ours = libero_vec()
    ref = sync(libero_fns())
    contracts = Contracts()
    with opened(ours, ref):
        with contracts.check("spaces and metadata"):
            assert isinstance(ours, PipelineVectorEnv)
            assert ours.observation_space == ref.observation_space and ours.action_space == ref.action_space
            assert ours.metadata["autoreset_mode"] == SAME_STEP
        with contracts.check("reset(seed=3)"):
            assert_identical(ours.reset(seed=3), ref.reset(seed=3), "reset(seed=3)")
        rng = np.random.default_rng(0)
        finals = 0
        for t in range(5):  # episodes of 3 chunks: both envs end at step 2, then run on
            actions = rng.uniform(-1, 1, (2, 2, 7)).astype(np.float32)
            out, ref_out = ours.step(actions), ref.step(actions)
            with contracts.check(f"step {t} obs, rewards, terminated, truncated"):
                for name, a, b in zip(("obs", "reward", "terminated", "truncated"), out[:4], ref_out[:4]):
                    assert_identical(a, b, f"step {t} {name}")
            with contracts.check(f"step {t} infos"):
                # fastenv keeps the chunk's per-step keys at the top level too when an episode ends
                assert_identical(without_legacy_keys(out[4]), with_step_keys_on_top(ref_out[4]), f"step {t} infos")
            finals += int(out[4]["_final_obs"].sum()) if "final_obs" in out[4] else 0
        with contracts.check("both episodes ended once, with final_obs"):
            assert finals == 2
        with contracts.check("reset(seed=[9, None])"):
            assert_identical(ours.reset(seed=[9, None]), ref.reset(seed=[9, None]), "reset(seed=list)")
        with contracts.check("partial reset"):
            mask = np.array([False, True])
            assert_identical(
                ours.reset(seed=[None, 4], options={"reset_mask": mask}), ref.reset(seed=[None, 4], options={"reset_mask": mask}), "partial reset"
            )
    contracts.assert_all_held()


@pytest.mark.libero
@pytest.mark.big_memory
def test_libero_vector_env_api_contracts():
    # On one LIBERO vector env: test_step_*'s shapes and dtypes, test_random_seeding_basics,
    # test_call_* / test_set_attr_*, a missing attribute, test_partial_reset_failure,
    # test_action_count_compatibility, the out-of-order and closed-env errors, closing twice.
    ours = libero_vec()
    contracts = Contracts()
    try:
        with contracts.check("spaces are batched"):
            assert ours.observation_space == batch_space(ours.single_observation_space, 2)
            assert ours.action_space == batch_space(ours.single_action_space, 2)
            assert ours.single_action_space.shape == (2, 7)
        with contracts.check("reset(seed=5) and np_random_seed"):
            obs, _ = ours.reset(seed=5)
            assert obs in ours.observation_space
            assert ours.np_random_seed == (5, 6)
        with contracts.check("step shapes and dtypes"):
            obs, rewards, terminations, truncations, _ = ours.step(np.zeros((2, 2, 7), np.float32))
            assert obs in ours.observation_space
            assert obs["agentview_image"].shape == (2, 32, 32, 3) and obs["agentview_image"].dtype == np.uint8
            assert isinstance(rewards, np.ndarray) and rewards.shape == (2,) and np.issubdtype(rewards.dtype, np.floating)
            assert terminations.dtype == truncations.dtype == np.bool_ and terminations.shape == truncations.shape == (2,)
        with contracts.check("get_attr / call / set_attr"):
            assert ours.get_attr("chunk") == (2, 2)
            assert ours.call("chunk") == (2, 2)
            ours.set_attr("peer_marker", [1, 2])
            assert ours.get_attr("peer_marker") == (1, 2)
        with contracts.check("render with render_mode None"):
            assert ours.render_mode is None
            assert ours.render() == (None, None)
        with contracts.check("a missing attribute raises AttributeError"):
            with pytest.raises(AttributeError):
                ours.get_attr("no_such_attribute")
        with contracts.check("a reset mask of the wrong shape raises ValueError"):
            with pytest.raises(ValueError):
                ours.reset(options={"reset_mask": np.array([True])})
        with contracts.check("a reset mask of the wrong dtype raises TypeError"):
            with pytest.raises(TypeError):
                ours.reset(options={"reset_mask": np.array([1, 0])})
        with contracts.check("a wrong number of actions raises ValueError"):
            with pytest.raises(ValueError):
                ours.step(np.zeros((1, 2, 7), np.float32))
        with contracts.check("a scalar action raises TypeError"):
            with pytest.raises(TypeError):
                ours.step(0)
        with contracts.check("recv without send raises NoAsyncCallError"):
            with pytest.raises(NoAsyncCallError):
                ours.recv(stage=0)
        with contracts.check("a second send while pending raises AlreadyPendingCallError"):
            ours.reset(seed=0)
            ours.send(np.zeros((2, 2, 7), np.float32), stage=0)
            try:
                with pytest.raises(AlreadyPendingCallError):
                    ours.send(np.zeros((2, 2, 7), np.float32), stage=0)
            finally:
                ours.recv(stage=0)
        ours.close()
        with contracts.check("closing twice is harmless"):
            ours.close()
        with contracts.check("reset after close raises ClosedEnvironmentError"):
            with pytest.raises(ClosedEnvironmentError):
                ours.reset()
    finally:
        ours.close()
    contracts.assert_all_held()
