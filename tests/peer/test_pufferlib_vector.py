"""PufferLib's own emulation and vectorization checks, run on ``fastenv.integrations.pufferlib.PufferLibVecEnv``.

PufferLib's ``tests/test.py`` steps a vector env beside independent ``GymnasiumPufferEnv`` copies,
resetting a copy on the step after its episode ended with reward 0 and no flags
(``test_puffer_vectorization``), and checks that ``emulation.nativize`` gives back the raw env's
observation (``test_gymnasium_emulation``); ``tests/test_api.py`` checks that misuse raises
``APIUsageError``. Each test below does the same for the vector env under test,
``PufferLibVecEnv(PipelineVectorEnv(...))`` over small envs; the comparison with ``Serial`` and
``Multiprocessing`` themselves is ``tests/test_pufferlib.py``. Not applicable: PettingZoo
(multi-agent) envs and the Ray backend.
"""

from __future__ import annotations

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("pufferlib")

import pufferlib  # noqa: E402
import pufferlib.emulation  # noqa: E402
from fakes import FlatRandomLengthEnv, RandomLengthEnv  # noqa: E402
from helpers import assert_identical  # noqa: E402

from fastenv.integrations.pufferlib import PufferLibVecEnv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

N = 3


def vec_env(env):
    return PufferLibVecEnv(PipelineVectorEnv([env] * N, num_workers=1, autoreset_mode="NextStep"))


@pytest.mark.parametrize("env_cls", [RandomLengthEnv, FlatRandomLengthEnv], ids=["dict", "box"])
def test_the_vector_env_steps_as_independent_emulated_envs_that_reset_on_the_next_step(env_cls):
    raw = [pufferlib.emulation.GymnasiumPufferEnv(env_creator=env_cls) for _ in range(N)]
    rng = np.random.default_rng(1)
    with vec_env(env_cls) as venv:
        assert venv.num_agents == N and venv.driver_env.num_agents == 1
        obs, _ = venv.reset(seed=7)
        raw_obs = np.concatenate([env.reset(seed=7 + i)[0].copy() for i, env in enumerate(raw)])  # (1, n) each
        for _ in range(40):
            assert_identical(obs, raw_obs, "observations")
            actions = rng.uniform(-1, 1, venv.action_space.shape).astype(np.float32)
            rows = []
            for env, action in zip(raw, np.split(actions, N)):
                if env.done:  # the copy of a vector env's reset: no action run, reward 0, no flags
                    rows.append((env.reset()[0].copy(), 0.0, False, False))
                else:
                    ob, reward, terminal, truncation, _ = env.step(action)
                    rows.append((ob.copy(), reward, terminal, truncation))
            obs, rewards, terminals, truncations, _ = venv.step(actions)
            raw_obs = np.concatenate([row[0] for row in rows])
            assert_identical(rewards, np.asarray([row[1] for row in rows], np.float32), "rewards")
            assert_identical(terminals, np.asarray([row[2] for row in rows]), "terminals")
            assert_identical(truncations, np.asarray([row[3] for row in rows]), "truncations")


def test_nativize_gives_back_the_raw_observation():
    raw = RandomLengthEnv()
    with vec_env(RandomLengthEnv) as venv:
        obs, _ = venv.reset(seed=4)
        raw_obs, _ = raw.reset(seed=4)
        native = pufferlib.emulation.nativize(obs[0], venv.driver_env.env.observation_space, venv.obs_dtype)
        np.testing.assert_array_equal(native["x"], raw_obs["x"])
        assert int(native["t"]) == raw_obs["t"]


def test_misuse_raises_pufferlibs_api_usage_error():
    with vec_env(FlatRandomLengthEnv) as venv:
        with pytest.raises(pufferlib.APIUsageError, match="Call reset before stepping"):
            venv.recv()
        with pytest.raises(pufferlib.APIUsageError, match="Call \\(async\\) reset \\+ recv before sending"):
            venv.send(np.zeros(venv.action_space.shape, np.float32))
        venv.async_reset(0)
        venv.recv()
        with pytest.raises(pufferlib.APIUsageError, match="Actions do not match action space"):
            venv.send(np.full(venv.action_space.shape, 5.0, np.float32))
