"""ManiSkill's own tools beside fastenv: `fastenv vulkan-env` for the processes that do not import
fastenv (ManiSkill's replay tool on a trajectory fastenv's recorder wrote), and ManiSkill's
render-device fallback message said no more than once for the envs fastenv builds."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import need

from fastenv import cli

FALLBACK = 'but CUDA device was not found. Falling back to "cpu" device'


def without_vulkan_choice() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")  # this environment's python first
    return env


def vulkan_env_command() -> str:
    script = Path(sys.executable).with_name("fastenv")
    return shlex.quote(str(script)) + " vulkan-env" if script.exists() else f"{shlex.quote(sys.executable)} -m fastenv.cli vulkan-env"


def test_vulkan_env_prints_the_driver_that_fastenv_uses(tmp_path):
    chosen = tmp_path / "my driver" / "icd.json"
    for name in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES"):  # a driver the user chose: the same line back, quoted
        env = {**without_vulkan_choice(), name: str(chosen)}
        done = subprocess.run([sys.executable, "-m", "fastenv.cli", "vulkan-env"], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"export {name}='{chosen}'\n"
        assert subprocess.run(["bash", "-c", f'eval "{done.stdout}"; printf %s "${name}"'], capture_output=True, text=True,
                              check=True).stdout == str(chosen)
    ours = Path(sys.prefix, "share", "fastenv", "vulkan", "lvp_icd.json")  # scripts/vulkan.sh's driver
    done = subprocess.run([sys.executable, "-m", "fastenv.cli", "vulkan-env"], env=without_vulkan_choice(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0
    if ours.is_file():
        assert done.stdout == f"export VK_ICD_FILENAMES={shlex.quote(str(ours))}\n"
    else:
        assert done.stdout == "" and "no CPU Vulkan driver" in done.stderr


def test_vulkan_env_prints_nothing_without_a_driver(monkeypatch, capsys):
    import fastenv.backends._vulkan as vulkan

    monkeypatch.setattr(vulkan, "configure_vulkan", lambda: None)
    monkeypatch.delenv("VK_DRIVER_FILES", raising=False)
    assert cli.main(["vulkan-env"]) == 0
    out = capsys.readouterr()
    assert out.out == "" and "no CPU Vulkan driver in this environment" in out.err


def maniskill_registry():
    need("torch", "the ManiSkill backend needs it")
    need("mani_skill")


@pytest.mark.maniskill
def test_maniskills_replay_tool_reads_fastenvs_trajectory_after_eval_vulkan_env(tmp_path):
    maniskill_registry()
    import h5py
    import torch

    from fastenv.integrations import maniskill as ms

    envs = ms.ManiSkillVectorEnv(ms.RecordEpisode(ms.make("PushCube-v1", num_envs=1, obs_mode="state", max_episode_steps=5), str(tmp_path),
                                                  save_video=False, trajectory_name="trajectory"), 1, ignore_terminations=True)
    envs.reset(seed=0)
    for _ in range(5):
        envs.step(torch.zeros(1, 8))
    envs.close()
    replay = f"python -m mani_skill.trajectory.replay_trajectory --traj-path {shlex.quote(str(tmp_path / 'trajectory.h5'))} --save-traj --allow-failure"
    replayed = tmp_path / "trajectory.state.pd_joint_delta_pos.physx_cpu.h5"

    ours = Path(sys.prefix, "share", "fastenv", "vulkan", "lvp_icd.json")
    if ours.is_file() and not torch.cuda.is_available():  # fastenv's CPU driver is this machine's Vulkan device
        bare = subprocess.run(["bash", "-c", replay], cwd=tmp_path, env=without_vulkan_choice(), capture_output=True, text=True, timeout=300, check=False)
        assert bare.returncode != 0 and 'Failed to find a supported physical device "cpu"' in bare.stderr, bare.stderr[-2000:]
        assert not replayed.exists()

    done = subprocess.run(["bash", "-c", f'eval "$({vulkan_env_command()})"; {replay}'], cwd=tmp_path, env=without_vulkan_choice(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Replayed 1 episodes" in done.stdout + done.stderr
    with h5py.File(replayed) as f:
        assert list(f) == ["traj_0"] and f["traj_0/actions"].shape == (5, 8)


@pytest.mark.maniskill
def test_maniskills_render_fallback_message_is_said_at_most_once(tmp_path):
    # ManiSkill's default render_backend asks for CUDA; without it ManiSkill logs the fallback to the
    # CPU device once per env it builds (16 lines in a ppo.py run). Four envs in two workers and one
    # in this process: at most one line, and ManiSkill's other warnings still shown.
    maniskill_registry()
    script = tmp_path / "build.py"
    script.write_text(textwrap.dedent('''
        from fastenv.envs import maniskill as backend
        from fastenv.integrations.maniskill import make

        if __name__ == "__main__":
            envs = make("PushCube-v1", num_envs=4, num_workers=2)
            envs.reset(seed=0)
            envs.close()
            backend.make_cpu_env("PushCube-v1").close()
            from mani_skill.utils.logging_utils import logger

            logger.warning("another ManiSkill warning")
    '''))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.count(FALLBACK) <= 1, done.stderr[-3000:]
    assert done.stderr.count("another ManiSkill warning") == 1
