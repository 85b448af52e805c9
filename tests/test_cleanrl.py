"""CleanRL's own ppo_continuous_action.py, with only its env construction statement changed.

CleanRL's script is not redistributed with fastenv: point ``CLEANRL_PPO_SCRIPT`` at a copy of
https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo_continuous_action.py to run this test.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import skip_unless_script_imports

SCRIPT = os.environ.get("CLEANRL_PPO_SCRIPT")
ENV_STATEMENT = re.compile(r"^(?P<indent>[ \t]*)envs = gym\.vector\.SyncVectorEnv\(\n.*?^(?P=indent)\)\n", re.M | re.S)
ROOT = Path(__file__).resolve().parent.parent


def readme_lines() -> list[str]:
    """The lines the README says to paste into CleanRL's script, as typed there."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"tests/test_cleanrl\.py pastes them -->\n```python\n(?P<body>.*?)```", text, re.S)
    assert block is not None, "the README's CleanRL lines were not found"
    return block.group("body").strip().splitlines()


# The README's lines, plus short episodes so some end within the tiny budget.
REPLACEMENT = "".join("{indent}" + line + "\n" for line in readme_lines()).replace("gamma=args.gamma)", "gamma=args.gamma, max_episode_steps=32)")


def patched(source: str) -> str:
    """The script with its one env construction statement replaced by a fastenv one."""
    new, count = ENV_STATEMENT.subn(lambda m: REPLACEMENT.format(indent=m.group("indent")), source)
    if count != 1:
        raise AssertionError(f"expected one `envs = gym.vector.SyncVectorEnv(...)` statement, found {count}")
    return new


def test_the_readme_lines_import_what_they_use():
    lines = readme_lines()
    assert lines[0] == "import fastenv.integrations.cleanrl"
    assert lines[1].startswith("envs = fastenv.integrations.cleanrl.make_vec(args.num_envs, args.env_id,")


def test_patch_changes_exactly_one_statement():
    source = 'x = 1\n    envs = gym.vector.SyncVectorEnv(\n        [make_env(i) for i in range(2)]\n    )\n    assert ok\n'
    out = patched(source)
    assert out.count("\n") == source.count("\n") - 1
    assert out.startswith("x = 1\n    import fastenv.integrations.cleanrl\n    envs = fastenv.integrations.cleanrl.make_vec(")
    assert out.endswith("    assert ok\n")


@pytest.mark.libero
@pytest.mark.skipif(SCRIPT is None, reason="set CLEANRL_PPO_SCRIPT to CleanRL's ppo_continuous_action.py (not redistributed)")
def test_cleanrl_ppo_continuous_action_runs_on_libero(tmp_path):
    source = patched(Path(SCRIPT).read_text())
    skip_unless_script_imports(source, "cleanrl")  # tyro, tensorboard, ...: what the script imports
    script = tmp_path / "ppo_continuous_action.py"
    script.write_text(source)
    args = ["--env-id", "fastenv/Libero-v0", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--no-cuda"]
    out = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("SPS:") == 2  # two PPO iterations of 2 envs x 16 chunks
    assert "episodic_return=" in out.stdout  # 32-step episodes in chunks of 8 ended and were logged
    assert list((tmp_path / "runs" / "fastenv").glob("Libero-v0__*"))  # the run is named after the env id


def _pendulum(gamma):
    import gymnasium as gym

    from fastenv.integrations.cleanrl import ppo_continuous_wrappers

    return ppo_continuous_wrappers(gym.make("Pendulum-v1", max_episode_steps=7), gamma)


def test_cleanrls_wrappers_in_fastenvs_workers_equal_them_in_gymnasiums_own_vector_env():
    # The recipe keeps CleanRL's make_env wrappers around each env, in fastenv's workers: the data
    # equals SyncVectorEnv (SAME_STEP) over the same wrapped envs, step for step, episode ends included.
    import functools

    import gymnasium as gym
    import numpy as np

    from fastenv.vector import PipelineVectorEnv

    make = functools.partial(_pendulum, 0.9)
    ours = PipelineVectorEnv([make] * 4, num_workers=2)
    ref = gym.vector.SyncVectorEnv([make] * 4, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        a, b = ours.reset(seed=3), ref.reset(seed=3)
        np.testing.assert_array_equal(a[0], b[0])
        rng = np.random.default_rng(0)
        for _ in range(20):
            action = rng.uniform(-4, 4, (4, 1)).astype(np.float32)  # beyond the [-2, 2] bounds: clipped
            a, b = ours.step(action), ref.step(action)
            for x, y in zip(a[:4], b[:4]):
                np.testing.assert_array_equal(x, y)
            if b[3].any():
                np.testing.assert_array_equal(a[4]["final_obs"][b[3]].tolist(), b[4]["final_obs"][b[3]].tolist())
            assert np.abs(a[0]).max() <= 10 and np.abs(a[1]).max() <= 10
        assert ours.get_attr("gamma") == (0.9,) * 4  # NormalizeReward's, one per env
    finally:
        ours.close()
        ref.close()
