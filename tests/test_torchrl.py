"""TorchRL on fastenv: a collector gathers the same data as on TorchRL's own vectorization of the envs.

On random-length episodes the reference is TorchRL's default vectorization of single envs,
``SerialEnv`` over one ``GymWrapper`` per env (each seeded as the vector env seeds it: seed + i),
which resets each env itself when its episode ends. On LIBERO it is ``ParallelEnv`` over LIBERO's
own env (``tests/stock_libero.py``), each in a process of its own, at chunk 1 and chunk 8 (the
reference chunk loop). Negative controls: a shifted final observation, one LIBERO reward altered.
fastenv's vector env reaches TorchRL through ``fastenv.integrations.torchrl``: its own ``DISABLED``
autoreset mode, TorchRL's ``GymWrapper`` over it.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest
from stock_libero import same_data_on_stock_libero

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("torchrl")

# First: TorchRL's imports load MuJoCo, and fastenv chooses its GL platform before that.
import fastenv.integrations.torchrl as adapter  # noqa: I001
from fastenv.integrations.torchrl import make_vec, wrap  # noqa: I001

import torch  # noqa: E402
from fakes import RandomLengthEnv, ShiftedFinalObservation  # noqa: E402
from helpers import assert_same  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.envs import Compose, GymWrapper, ParallelEnv, RewardSum, SerialEnv, StepCounter, TransformedEnv  # noqa: E402

import fastenv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

CHUNK, SEED, N = 3, 11, 4
DISABLED = gym.vector.AutoresetMode.DISABLED


def chunked_random_env() -> gym.Env:
    """Episodes of 1 to 12 steps, terminated or truncated at random, in chunks of 3: most end mid-chunk."""
    return fastenv.wrap(RandomLengthEnv(), chunk=CHUNK)


def _stock_env(make, seed: int):
    env = make()
    env.reset(seed=seed)  # the collector's reset() goes on from here, as the vector env's does
    return GymWrapper(env)


def stock(make, num_envs: int, seed: int):
    """TorchRL's ``SerialEnv`` over single envs seeded as ``reset(seed=seed)`` seeds a vector env."""
    return SerialEnv(num_envs, [functools.partial(_stock_env, make, seed + i) for i in range(num_envs)])


def with_stats(env):
    """The episode statistics a TorchRL script logs: steps and return so far (``StepCounter``, ``RewardSum``)."""
    return TransformedEnv(env, Compose(StepCounter(), RewardSum()))


def policy(td):
    """Deterministic actions from the observation, so equal data needs equal observations all along."""
    x = td["x"].sum(-1, keepdim=True)
    t = td["t"].argmax(-1, keepdim=True).to(torch.float32)
    td["action"] = torch.tanh(torch.sin(x + 0.37 * t)[..., None] * torch.linspace(-1.5, 1.5, 3 * CHUNK).view(CHUNK, 3))
    return td


def collect(env, frames: int, batches: int) -> list[dict[str, np.ndarray]]:
    out = []
    collector = Collector(env, policy, frames_per_batch=frames, total_frames=frames * batches)
    for batch in collector:
        out.append({".".join(k) if isinstance(k, tuple) else k: v.numpy().copy() for k, v in batch.flatten_keys(".").items()})
    collector.shutdown()
    return out


@pytest.fixture(scope="module")
def stock_data():
    return collect(with_stats(stock(chunked_random_env, N, SEED)), 32, 2)


def _fastenv_data(shift: bool = False, workers: int = 2):
    venv = PipelineVectorEnv([chunked_random_env] * N, num_workers=workers, autoreset_mode=DISABLED)
    venv.reset(seed=SEED)
    try:
        return collect(with_stats(wrap(ShiftedFinalObservation(venv) if shift else venv)), 32, 2)
    finally:
        venv.close()


@pytest.mark.parametrize("workers", [1, 2, 4])  # the layout must not change the data
def test_a_collector_gathers_on_fastenv_what_it_gathers_on_torchrls_serial_env(stock_data, workers):
    ours = _fastenv_data(workers=workers)
    assert len(ours) == len(stock_data) == 2
    for got, want in zip(ours, stock_data):
        assert sorted(got) == sorted(want)
        for key in want:
            assert got[key].dtype == want[key].dtype, key
            assert_same(got[key], want[key], key)
    # What the data covers: episodes that end mid-chunk, truncated ones that bootstrap from the
    # final observation, terminated ones, and episode statistics over several episodes.
    data = {k: np.concatenate([b[k] for b in stock_data], axis=1) for k in stock_data[0]}
    ended = data["next.done"][..., 0]
    steps_at_end = data["next.t"].argmax(-1)[ended]
    assert (steps_at_end % CHUNK != 0).any() and (steps_at_end % CHUNK == 0).any()
    assert data["next.truncated"].any() and data["next.terminated"].any()
    assert ended.sum() >= 2 * N
    assert (data["next.step_count"][..., 0][ended] >= 1).all()


def test_a_shifted_final_observation_is_caught(stock_data):
    ours = _fastenv_data(shift=True)
    with pytest.raises(AssertionError):
        for got, want in zip(ours, stock_data):
            for key in want:
                assert_same(got[key], want[key], key)


def test_only_a_disabled_vector_env_is_taken():
    envs = PipelineVectorEnv([chunked_random_env] * 2, num_workers=1)  # SAME_STEP, fastenv's default
    try:
        with pytest.raises(ValueError, match=r"needs a vector env with DISABLED autoreset \(TorchRL resets the envs that ended "
                                             r"itself.*got autoreset_mode=AutoresetMode.SAME_STEP.*autoreset_mode='Disabled'"):
            wrap(envs)
    finally:
        envs.close()
    with pytest.raises(ValueError, match=r"needs DISABLED autoreset .*got autoreset_mode='SameStep': leave it out"):
        make_vec("fastenv/Libero-v0", 2, autoreset_mode="SameStep")


@pytest.mark.parametrize("name", ["TorchRLVecEnv", "ResetOnRequest"])
def test_the_wrapper_that_held_resets_says_what_replaces_it(name):
    with pytest.raises(AttributeError, match=r"is gone: fastenv's vector env waits for TorchRL's reset itself.*make_vec"):
        getattr(adapter, name)


# -- the same data as TorchRL on LIBERO's own env ------------------------------------------------
# The reference is TorchRL's Collector, with StepCounter and RewardSum, on TorchRL's multi-process
# vectorization of LIBERO's own env (ParallelEnv over GymWrapper(make_stock(...)): each stock env in a
# process of its own), stepped one action at a time (chunk 1) or K at a time by the reference chunk loop
# (tests/stock_libero.py); fastenv's side is the same Collector on fastenv.integrations.torchrl.make_vec.

LIBERO_SEED = 3
LIBERO_FRAMES = {1: 40, 8: 6}  # env steps per env and batch, two batches: 80 or 96 simulator steps per env


def _libero_policy(chunk: int):
    """Deterministic flat actions (``chunk`` sub-actions of 7) from the observation."""
    scale = torch.linspace(-3.0, 3.0, 7 * chunk)

    def policy(td):
        x = td["observation"].sum(-1, keepdim=True) * 1e-3
        td["action"] = torch.tanh(torch.sin(x * scale))
        return td

    return policy


def _collect_libero(env, chunk: int) -> list[dict[str, np.ndarray]]:
    frames = 2 * LIBERO_FRAMES[chunk]
    collector = Collector(with_stats(env), _libero_policy(chunk), frames_per_batch=frames, total_frames=2 * frames)
    try:
        return [{k: v.numpy().copy() for k, v in batch.flatten_keys(".").items()} for batch in collector]
    finally:
        collector.shutdown()


def _stock_torchrl(chunk: int) -> list[dict[str, np.ndarray]]:
    from stock_libero import make_stock

    # Each stock env seeded as reset(seed=LIBERO_SEED) seeds a vector env. metadata_from_workers: the
    # specs come from the workers, so no LIBERO env is built in this process (by default ParallelEnv
    # builds one here to read them).
    env = ParallelEnv(2, functools.partial(_stock_env, functools.partial(make_stock, chunk=chunk)),
                      create_env_kwargs=[{"seed": LIBERO_SEED + i} for i in range(2)], mp_start_method="spawn",
                      metadata_from_workers=True)
    try:
        return _collect_libero(env, chunk)
    finally:
        env.close(raise_if_closed=False)  # (the collector's shutdown closes it)


def _fastenv_torchrl(chunk: int, alter=None) -> list[dict[str, np.ndarray]]:
    from stock_libero import fastenv_options

    if alter is None:
        env = make_vec("fastenv/Libero-v0", 2, num_workers=2, **fastenv_options(chunk))
    else:  # the deliberately wrong vector env below TorchRL's adapter
        env = wrap(alter(gym.make_vec("fastenv/Libero-v0", num_envs=2, num_workers=2, autoreset_mode=DISABLED,
                                 **fastenv_options(chunk))))
    env.set_seed(LIBERO_SEED)  # TorchRL seeds a vector env as reset(seed=LIBERO_SEED): env i gets LIBERO_SEED + i
    try:
        return _collect_libero(env, chunk)
    finally:
        env.close(raise_if_closed=False)


def _assert_same_libero_collection(got: list[dict[str, np.ndarray]], want: list[dict[str, np.ndarray]]) -> None:
    assert len(got) == len(want) == 2
    for b, (g, w) in enumerate(zip(got, want)):
        assert sorted(g) == sorted(w), f"batch {b}: keys"
        for key in w:
            assert g[key].dtype == w[key].dtype, f"batch {b}: {key} dtype"
            assert_same(g[key], w[key], f"batch {b}: {key}")


@same_data_on_stock_libero
def test_a_collector_gathers_on_fastenv_what_it_gathers_on_parallel_env_over_stock_libero(chunk, monkeypatch):
    """TorchRL's default vectorization of N envs, ``SerialEnv``, steps them in one process, where stock LIBERO envs are not independent (tests/stock_libero.py says why). So the reference is
    TorchRL's multi-process one, ``ParallelEnv`` (started with spawn), which gives each stock env a process
    of its own. Compared bit for bit, dtypes too: everything the Collector gathers (observations, actions,
    rewards, done/terminated/truncated, the final observation in ("next", "observation"), StepCounter's
    and RewardSum's episode statistics, trajectory ids).
    """
    from fakes import AlteredReward
    from stock_libero import schedule_success

    schedule_success(monkeypatch)
    want = _stock_torchrl(chunk)
    _assert_same_libero_collection(_fastenv_torchrl(chunk), want)
    # What the window covers: several episodes per env, ended by success and by the time limit.
    data = {k: np.concatenate([b[k] for b in want], axis=1) for k in want[0]}
    ended = data["next.done"][..., 0]
    assert (ended.sum(1) >= 2).all(), ended.sum(1)
    assert data["next.terminated"].any() and data["next.truncated"].any()
    # Negative control: one reward of one env altered by 1e-6, below TorchRL's adapter, is caught.
    with pytest.raises(AssertionError):
        _assert_same_libero_collection(_fastenv_torchrl(chunk, alter=lambda v: AlteredReward(v, call=5, index=1, by=1e-6)), want)
