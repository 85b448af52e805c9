"""Every example runs end to end in a subprocess with a tiny budget, and exits cleanly."""

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import need

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

pytestmark = pytest.mark.libero


def run(name: str, *args: str) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    # closed envs: no EGL or MuJoCo tracebacks from destructors at exit
    assert "Traceback" not in out.stderr and "Exception ignored" not in out.stderr, out.stderr[-3000:]
    return out.stdout


def test_ppo_libero():
    out = run("ppo_libero.py", "--total-steps", "256", "--num-envs", "2", "--num-workers", "1", "--num-steps", "8", "--max-episode-steps", "40")
    assert "iteration 2: 256 simulator steps" in out


def test_wrap_existing_env():
    out = run("wrap_existing_env.py", "--chunks", "2", "--camera-size", "32")
    assert "wrapped (1 camera, chunk 8)" in out and "['agentview_image', 'robot0_proprio-state']" in out
    assert "sub-steps run 4" in out


def test_make_vec_stages():
    out = run("make_vec_stages.py", "--num-envs", "2", "--num-workers", "1", "--iterations", "3", "--camera-size", "32")
    assert all(word in out for word in ("step():", "stages:", "dynamic batching:"))


def test_sb3_ppo_libero():
    need("stable_baselines3")
    out = run("sb3_ppo_libero.py", "--timesteps", "64", "--num-envs", "2", "--num-workers", "2", "--n-steps", "32", "--camera-size", "48")
    assert "trained 64 chunks" in out


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_torchrl_ppo_libero():
    need("torchrl")
    out = run("torchrl_ppo_libero.py", "--total-frames", "64", "--frames-per-batch", "32", "--num-envs", "2", "--num-workers", "2",
              "--camera-size", "32", "--max-episode-steps", "40", "--epochs", "1", "--minibatch", "16")
    assert "batch 2: 64 chunks (512 simulator steps)" in out
    assert "0 episodes ended" not in out  # 40-step episodes in chunks of 8 end within each batch of 16 chunks per env


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_tianshou_ppo_libero():
    need("tianshou")
    out = run("tianshou_ppo_libero.py", "--epochs", "1", "--epoch-num-steps", "32", "--collection-step-num-env-steps", "16", "--num-envs", "2",
              "--num-test-envs", "0", "--camera-size", "32", "--chunk", "4", "--max-episode-steps", "40", "--batch-size", "16")
    assert "trained 32 chunks (128 simulator steps), 2 episodes" in out  # 40-step episodes of 10 chunks ended


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_skrl_ppo_libero():
    need("skrl")
    out = run("skrl_ppo_libero.py", "--timesteps", "16", "--rollouts", "8", "--num-envs", "2", "--num-workers", "2", "--camera-size", "32",
              "--max-episode-steps", "40", "--learning-epochs", "1", "--mini-batches", "2", "--write-interval", "0")
    assert "trained 16 timesteps: 32 chunks (256 simulator steps)" in out


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_sbx_ppo_libero():
    need("sbx")
    out = run("sbx_ppo_libero.py", "--timesteps", "64", "--num-envs", "2", "--num-workers", "2", "--n-steps", "32", "--camera-size", "32")
    assert "trained 64 chunks (512 simulator steps)" in out


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_rllib_ppo_libero():
    need("tree")
    out = run("rllib_ppo_libero.py", "--iterations", "2", "--batch", "32", "--minibatch", "16", "--epochs", "1", "--num-envs", "2",
              "--num-workers", "2", "--max-episode-steps", "40")
    assert "iteration 2: 64 chunks sampled" in out
    assert " 0 episodes ended" not in out  # 40-step episodes are 5 chunks: each env ends 3 in 32 chunks


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_rl_games_ppo_libero(tmp_path):
    need("rl_games")
    out = run("rl_games_ppo_libero.py", "--epochs", "2", "--num-envs", "2", "--num-workers", "2", "--horizon", "16", "--minibatch", "16",
              "--camera-size", "32", "--chunk", "4", "--max-episode-steps", "40", "--train-dir", str(tmp_path))
    assert "epoch 2: 64 chunks (256 simulator steps), 6 episodes ended" in out  # 40-step episodes of 10 chunks


@pytest.mark.ci_sample("an RL library's PPO example on LIBERO", keep=2)
def test_pufferlib_libero():
    need("pufferlib")
    out = run("pufferlib_libero.py", "--iterations", "2", "--num-envs", "2", "--num-workers", "2", "--horizon", "15",
              "--camera-size", "32", "--chunk", "4", "--max-episode-steps", "40")
    # 40-step episodes of 10 chunks, and PufferLib's reset step after each: every env ends one in 16 steps
    assert "iteration 2: 32 chunks (128 simulator steps), 2 episodes ended" in out
