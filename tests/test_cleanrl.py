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

SCRIPT = os.environ.get("CLEANRL_PPO_SCRIPT")
ENV_STATEMENT = re.compile(r"^(?P<indent>[ \t]*)envs = gym\.vector\.SyncVectorEnv\(\n.*?^(?P=indent)\)\n", re.M | re.S)
# The README's line, plus short episodes so some end within the tiny budget.
REPLACEMENT = (
    '{indent}envs = gym.make_vec("fastenv:fastenv/Libero-v0", num_envs=args.num_envs, chunk=8, '
    'modalities=["robot0_proprio-state", "object-state"], flatten=True, episode_statistics=True, '
    'info_format="per_env", max_episode_steps=32)\n'
)


def patched(source: str) -> str:
    """The script with its one env construction statement replaced by a fastenv one."""
    new, count = ENV_STATEMENT.subn(lambda m: REPLACEMENT.format(indent=m.group("indent")), source)
    if count != 1:
        raise AssertionError(f"expected one `envs = gym.vector.SyncVectorEnv(...)` statement, found {count}")
    return new


def test_patch_changes_exactly_one_statement():
    source = 'x = 1\n    envs = gym.vector.SyncVectorEnv(\n        [make_env(i) for i in range(2)]\n    )\n    assert ok\n'
    out = patched(source)
    assert out.count("\n") == source.count("\n") - 2
    assert out.startswith("x = 1\n    envs = gym.make_vec(") and out.endswith("    assert ok\n")


@pytest.mark.libero
@pytest.mark.skipif(SCRIPT is None, reason="set CLEANRL_PPO_SCRIPT to CleanRL's ppo_continuous_action.py (not redistributed)")
def test_cleanrl_ppo_continuous_action_runs_on_libero(tmp_path):
    pytest.importorskip("tyro", reason="CleanRL's script needs tyro and tensorboard: pip install 'fastenv-rl[cleanrl]'")
    script = tmp_path / "ppo_continuous_action.py"
    script.write_text(patched(Path(SCRIPT).read_text()))
    args = ["--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--no-cuda"]
    out = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("SPS:") == 2  # two PPO iterations of 2 envs x 16 chunks
    assert "episodic_return=" in out.stdout  # 32-step episodes in chunks of 8 ended and were logged
