"""PufferLib through PufferVecEnv: what PufferLib's vectorization (``Serial``, ``Multiprocessing``)
returns over ``GymnasiumPufferEnv`` copies of the stock env, PufferVecEnv returns on fastenv's
vector env, step by step and bit for bit: observations (emulated), rewards, terminals, truncations,
the infos list, teacher actions, agent ids and masks, episodes ending mid-chunk included."""

import copy
import functools

import gymnasium as gym
import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("pufferlib")

import pufferlib.emulation  # noqa: E402
import pufferlib.vector  # noqa: E402
from fakes import QuietEnv, RandomLengthEnv  # noqa: E402
from helpers import assert_identical  # noqa: E402

import fastenv  # noqa: E402
from fastenv.integrations.pufferlib import PufferVecEnv, make  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402
from fastenv.wrappers.flatten import FlattenActionChunk  # noqa: E402

N = 4
CHUNK = 3


def chunked_random_env() -> gym.Env:
    """Dict observations (packed by PufferLib's emulation), episodes of 1 to 12 steps in chunks of 3
    (most end mid-chunk), the chunk taken as one flat action (GymnasiumPufferEnv flattens actions)."""
    return FlattenActionChunk(fastenv.wrap(RandomLengthEnv(), chunk=CHUNK))


def puffer_creator(make_env):
    """A ``pufferlib.vector`` env creator: the stock env in PufferLib's Gymnasium emulation."""
    return functools.partial(pufferlib.emulation.GymnasiumPufferEnv, env_creator=make_env)


def collect(venv, steps, seed=3):
    """What pufferl reads: ``async_reset(seed)`` then ``send``/``recv`` with seeded random actions,
    each ``recv`` copied (the backends hand on their buffers, written over by the next)."""
    rng = np.random.default_rng(0)
    venv.async_reset(seed)
    out = [copy.deepcopy(venv.recv())]
    for _ in range(steps):
        space = venv.single_action_space
        venv.send(rng.uniform(space.low, space.high, (venv.num_envs, *space.shape)).astype(space.dtype))
        out.append(copy.deepcopy(venv.recv()))
    return out


def assert_same_data(ours, ref):
    assert len(ours) == len(ref)
    for t, (got, want) in enumerate(zip(ours, ref)):
        # infos: fastenv batches them (Gymnasium's layout), so a Python scalar comes back as numpy's
        assert_identical(got, want, f"recv {t}", loose_scalars=True)


def ended(data):
    return sum(int(np.sum(out[2] | out[3])) for out in data)


@pytest.mark.parametrize("make_env", [chunked_random_env, QuietEnv], ids=["chunked-dict", "empty-infos"])
def test_pufferlib_collects_on_fastenv_what_its_serial_backend_collects(make_env):
    ref = pufferlib.vector.make(puffer_creator(make_env), num_envs=N, backend=pufferlib.vector.Serial)
    try:
        reference = collect(ref, 30)
    finally:
        ref.close()
    with PufferVecEnv(PipelineVectorEnv([make_env] * N, num_workers=2, autoreset_mode="NextStep")) as venv:
        ours = collect(venv, 30)
    assert_same_data(ours, reference)
    assert ended(reference) >= 8


def test_pufferlib_collects_on_fastenv_what_its_multiprocessing_backend_collects():
    ref = pufferlib.vector.make(puffer_creator(chunked_random_env), num_envs=N, num_workers=N, overwork=True,
                                backend=pufferlib.vector.Multiprocessing)
    try:
        reference = collect(ref, 30)
    finally:
        ref.close()
    with PufferVecEnv(PipelineVectorEnv([chunked_random_env] * N, num_workers=2, autoreset_mode="NextStep")) as venv:
        ours = collect(venv, 30)
    assert_same_data(ours, reference)
    finals = [t for t, out in enumerate(reference[1:], 1) if (out[2] | out[3]).any()]
    assert finals and any(out[5] for out in reference)


def test_the_comparison_catches_same_step_data_passed_off_as_pufferlibs():
    """The negative control: a SAME_STEP vector env (an ended env's step shows the next episode's
    first observation, the final one only in its infos) under a NEXT_STEP label."""
    ref = pufferlib.vector.make(puffer_creator(chunked_random_env), num_envs=N, backend=pufferlib.vector.Serial)
    try:
        reference = collect(ref, 30)
    finally:
        ref.close()
    vector_env = PipelineVectorEnv([chunked_random_env] * N, num_workers=2)
    vector_env.metadata = {**vector_env.metadata, "autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}
    with PufferVecEnv(vector_env) as venv:
        wrong = collect(venv, 30)
    with pytest.raises(AssertionError, match=r"recv \d+\[0\]"):  # the observations of the ending step
        assert_same_data(wrong, reference)


def test_a_vector_env_that_resets_in_the_same_step_is_refused():
    with PipelineVectorEnv([QuietEnv] * 2, num_workers=1) as vector_env:
        with pytest.raises(ValueError, match="NEXT_STEP autoreset.*got autoreset_mode=AutoresetMode.SAME_STEP"):
            PufferVecEnv(vector_env)
    with pytest.raises(ValueError, match="PufferLib resets an ended env on its next step"):
        make("CartPole-v1", 2, autoreset_mode="SameStep")


# -- LIBERO -----------------------------------------------------------------------------------
# Chunks of 2 in 5-step episodes: each episode ends inside its third chunk, truncated.
LIBERO = dict(suite="libero_10", task_id=0, chunk=2, camera_size=32, modalities=["agentview_image", "robot0_proprio-state"],
              max_episode_steps=5, flatten=True)


@pytest.mark.libero
@pytest.mark.big_memory
@pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization", keep=2)
def test_pufferlib_on_libero_collects_what_its_serial_backend_collects():
    from fastenv.envs.libero import make_env

    ref = pufferlib.vector.make(puffer_creator(functools.partial(make_env, **LIBERO)), num_envs=2,
                                backend=pufferlib.vector.Serial)
    try:
        reference = collect(ref, 8)
    finally:
        ref.close()
    venv = make("fastenv/Libero-v0", 2, num_workers=2, **LIBERO)
    try:
        ours = collect(venv, 8)
    finally:
        venv.close()
    assert_same_data(ours, reference)
    ends = [info for out in reference for info in out[5] if out[3].any() and "chunk_steps" in info]
    assert sum(int(out[3].sum()) for out in reference) >= 4 and not any(out[2].any() for out in reference)
    assert ends and all(info["chunk_steps"] == 1 for info in ends)  # the episodes ended mid-chunk
