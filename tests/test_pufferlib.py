"""PufferLib through PufferLibVecEnv: what PufferLib's vectorization (``Serial``, ``Multiprocessing``)
returns over ``GymnasiumPufferEnv`` copies of the stock env, PufferLibVecEnv returns on fastenv's
vector env, step by step and bit for bit: observations (emulated), rewards, terminals, truncations,
the infos list, teacher actions, agent ids and masks, episodes ending mid-chunk included, on small
envs; on LIBERO, against ``Multiprocessing`` over LIBERO's own env (chunk 1 and chunk 8), with the
infos' episode statistics, and a negative control."""

import copy
import functools

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("pufferlib")

import pufferlib.emulation  # noqa: E402
import pufferlib.vector  # noqa: E402
from fakes import QuietEnv, RandomLengthEnv  # noqa: E402
from helpers import assert_identical  # noqa: E402

import fastenv  # noqa: E402
from fastenv.integrations.pufferlib import PufferLibVecEnv, make_vec  # noqa: E402
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
    with PufferLibVecEnv(PipelineVectorEnv([make_env] * N, num_workers=2, autoreset_mode="NextStep")) as venv:
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
    with PufferLibVecEnv(PipelineVectorEnv([chunked_random_env] * N, num_workers=2, autoreset_mode="NextStep")) as venv:
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
    with PufferLibVecEnv(vector_env) as venv:
        wrong = collect(venv, 30)
    with pytest.raises(AssertionError, match=r"recv \d+\[0\]"):  # the observations of the ending step
        assert_same_data(wrong, reference)


def test_a_vector_env_that_resets_in_the_same_step_is_refused():
    with PipelineVectorEnv([QuietEnv] * 2, num_workers=1) as vector_env:
        with pytest.raises(ValueError, match="NEXT_STEP autoreset.*got autoreset_mode=AutoresetMode.SAME_STEP"):
            PufferLibVecEnv(vector_env)
    with pytest.raises(ValueError, match="PufferLib resets an ended env on its next step"):
        make_vec("CartPole-v1", 2, autoreset_mode="SameStep")


# -- the same data as PufferLib's vectorization of LIBERO's own env ----------------------------------
# PufferLib has no collector apart from its trainer (pufferl, which needs its compiled extension):
# what is compared is its vectorization, pufferlib.vector.make(..., backend=Multiprocessing) over
# LIBERO's own env (tests/stock_libero.py) in GymnasiumPufferEnv, each env in a worker process of its
# own, stepped one action at a time (chunk 1) or K at a time by the reference chunk loop, against
# PufferLibVecEnv over fastenv's vector env, both driven by the send/recv loop of PufferLib's trainer
# with one seeded policy. Not Serial: it steps its envs in one process, where stock LIBERO envs are
# not independent (they render into whichever OpenGL context is current and place their scenes with
# numpy's global generator:
# tests/test_sb3.py::test_stock_envs_in_one_process_draw_each_others_scenes_and_fastenvs_envs_do_not).
# Each side runs in a process of its own: Multiprocessing builds a driver env in the process that
# makes it (a LIBERO env the pytest process must not hold) and starts its workers with that process's
# default start method (spawn there: a fork after a LIBERO env rendered hangs).
STEPS = {1: 64, 8: 12}  # recv calls after the reset: 64 simulator steps per env at most, or 12 chunks of 8


def _stock_env(chunk):
    """LIBERO's own env with Gymnasium's episode statistics below the chunk loop: ``info["episode"]``
    counts simulator steps, as fastenv's ``episode_statistics=True`` does."""
    from gymnasium.wrappers import RecordEpisodeStatistics
    from stock_libero import ChunkLoop, make_stock

    env = RecordEpisodeStatistics(make_stock())
    return env if chunk == 1 else ChunkLoop(env, chunk)


def _run_libero(side, chunk, shift=False):
    """``STEPS[chunk]`` recv calls of PufferLib's trainer loop (``async_reset(3)``, then ``send`` of a
    seeded Gaussian MLP policy's clipped actions and ``recv``), each recv copied. ``side``: "stock"
    (Multiprocessing over the stock env) or "fastenv" (``shift``: ShiftedFinalObservation below the
    adapter, the negative control)."""
    import multiprocessing

    import torch
    from fakes import ShiftedFinalObservation
    from stock_libero import fastenv_options

    multiprocessing.set_start_method("spawn", force=True)  # this process's default, which Multiprocessing uses
    torch.manual_seed(0)
    if side == "stock":
        venv = pufferlib.vector.make(puffer_creator(functools.partial(_stock_env, chunk)), num_envs=2,
                                     backend=pufferlib.vector.Multiprocessing, overwork=True)
    elif not shift:
        venv = make_vec("fastenv/Libero-v0", 2, num_workers=2, episode_statistics=True, **fastenv_options(chunk))
    else:
        vector = gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP,
                              episode_statistics=True, **fastenv_options(chunk))
        venv = PufferLibVecEnv(ShiftedFinalObservation(vector))
    try:
        width = venv.single_observation_space.shape[0]
        policy = torch.nn.Sequential(torch.nn.Linear(width, 16), torch.nn.Tanh(), torch.nn.Linear(16, 7 * chunk))
        venv.async_reset(3)
        out = [copy.deepcopy(venv.recv())]
        for _ in range(STEPS[chunk]):
            with torch.no_grad():
                mean = policy(torch.as_tensor(out[-1][0]))
            venv.send(torch.clamp(mean + torch.randn_like(mean), -1.0, 1.0).numpy())
            out.append(copy.deepcopy(venv.recv()))
        return out
    finally:
        venv.close()


def _in_own_process(fn, *args):
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def _episode_infos(infos, fastenv):
    """The infos' non-empty entries, fastenv's own keys set aside (``stock_libero.FASTENV_INFO_KEYS``),
    without the episode's wall-clock time."""
    from stock_libero import stock_info

    kept = []
    for info in infos:
        info = stock_info(info) if fastenv else dict(info)
        if "episode" in info:
            info["episode"] = {key: value for key, value in info["episode"].items() if key != "t"}
        if info:
            kept.append(info)
    return kept


def _assert_same_libero_data(ours, ref):
    assert len(ours) == len(ref)
    for t, (got, want) in enumerate(zip(ours, ref)):
        got = (*got[:5], _episode_infos(got[5], fastenv=True), *got[6:])
        want = (*want[:5], _episode_infos(want[5], fastenv=False), *want[6:])
        assert_identical(got, want, f"recv {t}", loose_scalars=True)


@same_data_on_stock_libero
def test_pufferlib_on_libero_returns_what_its_multiprocessing_backend_returns_over_stock_libero(chunk, monkeypatch):
    """Every recv (observations, rewards, terminals, truncations, teacher actions, agent ids, masks,
    and the infos' episode statistics: return and length in simulator steps) of PufferLibVecEnv over
    fastenv's vector env equals Multiprocessing's over LIBERO's own env, chunk 1 and chunk 8, bit for
    bit; fastenv's own info keys are set aside (at chunk 8 and at 1 alike, fastenv's infos are never
    empty: PufferLib's trainer would log ``success`` and the chunk keys beside the episodes). Not
    against Serial: stock LIBERO envs in one process draw each other's scenes (see the comment above)."""
    from stock_libero import schedule_success

    schedule_success(monkeypatch)
    want = _in_own_process(_run_libero, "stock", chunk)
    _assert_same_libero_data(_in_own_process(_run_libero, "fastenv", chunk), want)
    # What the window covers: episodes ended by success and by the time limit, at least 2 per env.
    terminals, truncations = np.stack([out[2] for out in want]), np.stack([out[3] for out in want])
    assert terminals.sum() >= 1 and truncations.sum() >= 1, (terminals.sum(), truncations.sum())
    assert ((terminals | truncations).sum(axis=0) >= 2).all(), (terminals | truncations).sum(axis=0)
    episodes = [info for out in want for info in _episode_infos(out[5], fastenv=False)]
    assert len(episodes) == (terminals | truncations).sum() and all(set(info) == {"episode"} for info in episodes)
    # Negative control: each final observation shifted to the one before it, below the adapter, is caught.
    shifted = _in_own_process(_run_libero, "fastenv", chunk, True)
    with pytest.raises(AssertionError, match=r"recv \d+\[0\]"):  # the observations of an ending step
        _assert_same_libero_data(shifted, want)
