"""skrl's contract for Gymnasium envs (its tests/envs/wrappers/torch/test_gymnasium_envs.py), checked on fastenv's envs.

The envs under test are ``skrl.envs.wrappers.torch.wrap_env`` over fastenv's single env
(``fastenv.wrap``, a chunked env) and over fastenv's vector env (``PipelineVectorEnv``) in each
autoreset mode; the reference, where one is compared, is the same wrapper over Gymnasium's
``SyncVectorEnv`` in the same mode over the same env constructors and seeds.

Differences from skrl's tests:

* skrl runs Pendulum-v1 (10 envs, ``gym.make_vec`` sync and async); here the envs are small test
  envs (random-length episodes in chunks of 3, a Dict observation with a Discrete step count) so
  that episodes end, inside chunks too, within a few steps, and each check is also a comparison
  with Gymnasium's vector env step for step.
* skrl's trainer tests (tests/trainers/torch/test_sequential.py) drive mock agents over mock envs
  with Hypothesis-drawn configurations; fastenv's check of the trainer is tests/test_skrl.py:
  skrl's ``SequentialTrainer`` and PPO over fastenv's vector env in each autoreset mode, the data
  compared with the same run over ``SyncVectorEnv``.
* ``AutoresetMode.DISABLED`` is not in skrl's tests: its wrapper never resets a vector env after
  the first reset, so such an env refuses the step after an episode end (checked here: fastenv
  says which envs and why, where ``SyncVectorEnv`` fails a bare ``assert``).
* ``render()``: the test envs draw nothing; skrl's wrapper renders a vector env through
  ``call("render")``, which Gymnasium's vector-env tests check on fastenv (tests/peer/test_gymnasium_vector.py).
* The old ``gym.vector.make`` fallback, ``render_mode="human"`` and CUDA devices are skrl's own
  concerns, not a wrapped env's.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import pytest

from helpers import need
need("skrl")

import torch  # noqa: E402
from fakes import RandomLengthEnv  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from skrl.envs.wrappers.torch import wrap_env  # noqa: E402
from skrl.envs.wrappers.torch.gymnasium_envs import GymnasiumWrapper  # noqa: E402
from skrl.utils import set_seed  # noqa: E402

import fastenv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402
from fastenv.vector.errors import EpisodeEndedError  # noqa: E402

N, CHUNK = 4, 3
MODES = [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP]


def chunked_random_env() -> gym.Env:
    return fastenv.wrap(RandomLengthEnv(), chunk=CHUNK)


def flat_chunked_random_env() -> gym.Env:
    return gym.wrappers.FlattenObservation(chunked_random_env())


def actions(step: int, num_envs: int = N) -> torch.Tensor:
    """A fixed sequence of flat actions (skrl's models act on flat tensors: a chunk of 3 x 3)."""
    return torch.sin(torch.arange(num_envs * CHUNK * 3, dtype=torch.float32).view(num_envs, -1) + step)


def check_step(out, num_envs: int, obs_size: int) -> None:
    observation, reward, terminated, truncated, info = out
    assert isinstance(observation, torch.Tensor) and observation.shape == torch.Size([num_envs, obs_size])
    assert isinstance(reward, torch.Tensor) and reward.shape == torch.Size([num_envs, 1]) and reward.dtype == torch.float32
    assert isinstance(terminated, torch.Tensor) and terminated.shape == torch.Size([num_envs, 1]) and terminated.dtype == torch.bool
    assert isinstance(truncated, torch.Tensor) and truncated.shape == torch.Size([num_envs, 1]) and truncated.dtype == torch.bool
    assert isinstance(info, Mapping)


@pytest.fixture(scope="module", params=MODES, ids=lambda m: m.value)
def vector_envs(request):
    """fastenv's vector env and Gymnasium's SyncVectorEnv in the same autoreset mode, flat observations
    (skrl's models size a ``Discrete`` as one-hot, its wrapper gives an index: flat, both are one-hot)."""
    ours = PipelineVectorEnv([flat_chunked_random_env] * N, num_workers=2, autoreset_mode=request.param)
    ref = gym.vector.SyncVectorEnv([flat_chunked_random_env] * N, autoreset_mode=request.param)
    yield ours, ref
    ours.close()
    ref.close()


def test_env_a_single_fastenv_env(capsys):
    # skrl: test_env (one env: properties, reset, steps, state)
    original = flat_chunked_random_env()
    env = wrap_env(original, "auto")
    assert isinstance(env, GymnasiumWrapper) and isinstance(wrap_env(original, "gymnasium"), GymnasiumWrapper)
    assert env.state_space is None and env.num_envs == 1 and env.num_agents == 1
    assert env.observation_space.shape == (103,) and env.action_space.shape == (CHUNK, 3)
    assert isinstance(env.device, torch.device)
    assert env._env is original and env._unwrapped is original.unwrapped
    for _ in range(2):
        observation, info = env.reset()
        assert observation.shape == torch.Size([1, 103]) and isinstance(info, Mapping) and env.state() is None
        for step in range(3):
            check_step(env.step(actions(step, 1)), 1, 103)
            assert env.state() is None
    env.close()


def test_vectorized_env_properties_and_methods(vector_envs):
    # skrl: test_vectorized_env (properties, the repeated reset of an autoreset env, steps)
    ours, _ = vector_envs
    env = wrap_env(ours, "auto")
    assert isinstance(env, GymnasiumWrapper) and isinstance(wrap_env(ours, "gymnasium"), GymnasiumWrapper)
    assert env._vectorized is True and env._env is ours and env._unwrapped is ours.unwrapped
    assert env.state_space is None and env.num_envs == N and env.num_agents == 1
    assert env.observation_space == ours.single_observation_space and env.action_space == ours.single_action_space
    assert isinstance(env.device, torch.device)
    size = 103  # the step count one-hot (100), then x (3)
    for _ in range(2):
        first, info = env.reset()
        again, _ = env.reset()  # a vector env resets once: later resets return the last observation
        assert torch.equal(first, again) and first.shape == torch.Size([N, size]) and isinstance(info, Mapping)
        assert env.state() is None
        for step in range(3):
            out = env.step(actions(step))
            check_step(out, N, size)
            assert env.state() is None
        assert torch.equal(env.reset()[0], out[0])  # the last step's observation, not a new reset


def test_the_wrapper_gives_the_same_tensors_as_over_sync_vector_env(vector_envs):
    # skrl: test_vectorized_env's checks, step for step against Gymnasium's own vector env, a
    # Dict observation (skrl flattens it: the index "t", then "x")
    runs = []
    mode = vector_envs[0].metadata["autoreset_mode"]
    ours = PipelineVectorEnv([chunked_random_env] * N, num_workers=2, autoreset_mode=mode)
    for venv in (ours, gym.vector.SyncVectorEnv([chunked_random_env] * N, autoreset_mode=mode)):
        set_seed(3)  # skrl's wrapper seeds the first reset with skrl's seed
        env = wrap_env(venv)
        steps = [env.reset()[0]]
        for step in range(30):
            steps.extend(env.step(actions(step))[:4])
        runs.append(steps)
        venv.close()
    ends = 0
    for a, b in zip(*runs):
        assert a.dtype == b.dtype and torch.equal(a, b)
    for step in range(30):
        ends += int((runs[0][4 * step + 3] | runs[0][4 * step + 4]).sum())
    assert ends >= N


def test_a_disabled_vector_env_refuses_the_step_after_an_episode_end():
    # not in skrl's tests: its wrapper never resets a vector env again, which DISABLED needs
    venv = PipelineVectorEnv([chunked_random_env] * 2, num_workers=1, autoreset_mode=AutoresetMode.DISABLED)
    try:
        env = wrap_env(venv)
        env.reset()
        with pytest.raises(EpisodeEndedError, match=r"ended their episodes .* must be reset before they step again"):
            for step in range(20):
                env.step(actions(step, 2))
    finally:
        venv.close()
