"""TorchRL's contract for Gymnasium vector envs (its test/libs/test_gym.py: ``check_env_specs`` and the
vector-env tests), checked on fastenv's vector env through ``fastenv.integrations.torchrl``.

The env under test is ``GymWrapper(PipelineVectorEnv(..., autoreset_mode=DISABLED))`` (what
``fastenv.integrations.torchrl.wrap`` builds) over small envs; the reference, where one is
compared, is TorchRL over Gymnasium's own ``SyncVectorEnv`` in the ``DISABLED`` autoreset mode
over the same env constructors and seeds. Each test names the TorchRL test whose contract it checks.

Differences from TorchRL's tests:

* TorchRL runs CartPole and HalfCheetah in Gymnasium's ``AsyncVectorEnv``; here the envs are
  small test envs (a fixed-length countdown, random-length episodes in chunks of 3) in fastenv's
  workers, so that episode ends and chunks are where the checks need them.
* ``test_gymnasium_autoreset`` compares TorchRL over ``DISABLED`` with TorchRL over
  ``SAME_STEP``; fastenv always reaches TorchRL in ``DISABLED`` (TorchRL's ``SAME_STEP`` path
  fails on infos whose keys differ between reset and step, and misses a ``Dict`` space's final
  observation), so the comparison is with Gymnasium's own ``DISABLED`` vector env.
* The info-reader parts (``field1`` read from infos) do not apply: in the ``DISABLED`` mode
  TorchRL registers no info reader, for Gymnasium's envs as for fastenv's.
* ``GymEnv(..., num_envs=N)`` (TorchRL building the vector env itself), ``from_pixels`` and the
  old-gym variants are TorchRL's own construction paths, not a wrapped env's contract.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import pytest

from helpers import need
need("torchrl")

from fastenv.integrations.torchrl import wrap  # noqa: I001  (before TorchRL: MUJOCO_GL)

import torch  # noqa: E402
from fakes import CountdownEnv, RandomLengthEnv  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from torchrl.collectors import Collector, RandomPolicy  # noqa: E402
from torchrl.envs import GymWrapper  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

import fastenv  # noqa: E402
from fastenv.vector import PipelineVectorEnv  # noqa: E402

N = 4
DISABLED = gym.vector.AutoresetMode.DISABLED


def chunked_random_env() -> gym.Env:
    return fastenv.wrap(RandomLengthEnv(), chunk=3)


countdown = functools.partial(CountdownEnv, 4)  # observation: steps since reset; truncated at 4


@pytest.fixture(scope="module")
def random_env():
    env = wrap(PipelineVectorEnv([chunked_random_env] * N, num_workers=2, autoreset_mode=DISABLED))
    yield env
    env.close()


@pytest.fixture(scope="module")
def countdown_env():
    env = wrap(PipelineVectorEnv([countdown] * N, num_workers=2, autoreset_mode=DISABLED))
    yield env
    env.close()


def assert_same_td(a, b):
    a, b = a.flatten_keys("."), b.flatten_keys(".")
    assert sorted(a.keys()) == sorted(b.keys())
    for key in b.keys():
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key


def test_vecenvs_wrapper_batch_size_and_specs(random_env, countdown_env):
    # TorchRL: test_vecenvs_wrapper (batch size of a wrapped vector env, check_env_specs)
    for env in (random_env, countdown_env):
        assert env.batch_size == torch.Size([N])
        check_env_specs(env)
    assert random_env.action_spec.shape == torch.Size([N, 3, 3])  # a chunk of 3 actions per env


def test_vecenvs_nan_no_missing_next_observation(random_env):
    # TorchRL: test_vecenvs_nan (no NaN in next observations where an episode ended), rollout and collector
    random_env.set_seed(0)
    torch.manual_seed(0)
    rollout = random_env.rollout(40, break_when_any_done=False)
    assert rollout["next", "done"].sum() >= N
    assert torch.isfinite(rollout["x"]).all() and torch.isfinite(rollout["next", "x"]).all()
    env = wrap(PipelineVectorEnv([chunked_random_env] * 2, num_workers=1, autoreset_mode=DISABLED))  # its own: a collector closes its env when done
    collector = Collector(env, RandomPolicy(env.action_spec), frames_per_batch=40, total_frames=80)
    for batch in collector:
        assert batch["next", "done"].any()
        assert torch.isfinite(batch["x"]).all() and torch.isfinite(batch["next", "x"]).all()
    collector.shutdown()


def test_rollout_consistency_next_observation_is_the_next_root_observation(random_env):
    # TorchRL: rollout_consistency_assertion (used by test_vecenvs_env): where no episode ended, the
    # next observation is the observation the next step starts from; where one ended, the next
    # step starts from a reset (t == 0) and the final observation is the episode's last.
    random_env.set_seed(3)
    rollout = random_env.rollout(30, break_when_any_done=False)
    done = rollout["next", "done"][:, :-1, 0]
    nxt, root = rollout["next", "x"][:, :-1], rollout["x"][:, 1:]
    assert torch.equal(nxt[~done], root[~done])
    assert (rollout["t"][:, 1:].argmax(-1)[done] == 0).all()
    assert (rollout["next", "t"][:, :-1].argmax(-1)[done] > 0).all()


def test_gymnasium_autoreset_same_rollout_as_gymnasiums_disabled_vector_env(random_env):
    # TorchRL: test_gymnasium_autoreset (the same rollout, step for step, from another vector env)
    ref = GymWrapper(gym.vector.SyncVectorEnv([chunked_random_env] * N, autoreset_mode=gym.vector.AutoresetMode.DISABLED))
    try:
        random_env.set_seed(5)
        torch.manual_seed(0)
        ours = random_env.rollout(25, break_when_any_done=False)
        ref.set_seed(5)
        theirs = ref.reset()
        steps = []
        for action in ours["action"].unbind(1):
            theirs["action"] = action
            out, theirs = ref.step_and_maybe_reset(theirs)
            steps.append(out)
        assert_same_td(ours, torch.stack(steps, 1))
        assert ours["next", "truncated"].any() and ours["next", "terminated"].any()
    finally:
        ref.close()


def test_resetting_strategies_agree_and_root_observations_are_never_terminal(countdown_env):
    # TorchRL: test_resetting_strategies (fixed-length episodes: the last observation shows only
    # in "next"; a manual full reset, reset() and a rollout's own reset give the same data)
    td = countdown_env.rollout(5, break_when_any_done=False)
    assert not (td["observation"] == 4).any()
    assert (td["next", "observation"] == 4).sum() == N  # each env's episode ends at step 4
    runs = []
    for how in ("mask", "reset", "rollout"):
        torch.manual_seed(0)
        countdown_env.set_seed(0)
        if how == "rollout":
            runs.append(countdown_env.rollout(10, break_when_any_done=False))
            continue
        start = countdown_env.reset(TensorDict({"_reset": torch.ones(N, 1, dtype=torch.bool)}, [N])) if how == "mask" else countdown_env.reset()
        runs.append(countdown_env.rollout(10, break_when_any_done=False, auto_reset=False, tensordict=start))
    for run in runs[1:]:
        assert_same_td(run.exclude("action"), runs[0].exclude("action"))


def test_set_seed_gives_the_same_rollout_again(random_env):
    # TorchRL: test_set_seed_and_reset_works (seeding through the wrapper reaches every env)
    rollouts = []
    for _ in range(2):
        random_env.set_seed(9)
        torch.manual_seed(1)
        rollouts.append(random_env.rollout(12, break_when_any_done=False))
    assert_same_td(rollouts[0], rollouts[1])


def test_the_wrapper_is_in_torchrls_preferred_autoreset_mode(random_env):
    # TorchRL's GymWrapper takes SAME_STEP or DISABLED (which it prefers): fastenv's env comes in DISABLED.
    assert random_env._env.metadata["autoreset_mode"] == DISABLED
