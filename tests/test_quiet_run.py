"""A user sees only what concerns them: no upstream noise at each env build, and a terminated run
exits quietly with nothing left behind (counted in a child process's output)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BUILD = """
import numpy as np
import gymnasium as gym
import fastenv  # noqa: F401

if __name__ == "__main__":
    env = gym.make("fastenv/Libero-v0", suite="libero_goal", task_id=3, chunk=2, camera_size=32)
    env.reset(seed=0)
    env.step(np.zeros((2, 7), np.float32))
    env.close()
    envs = gym.make_vec("fastenv/Libero-v0", num_envs=2, suite="libero_goal", task_id=3, chunk=2, camera_size=32, num_workers=1)
    envs.reset(seed=0)
    envs.step(np.zeros((2, 2, 7), np.float32))
    envs.close()
    print("done")
"""

STEPPING = """
import sys
import numpy as np
import gymnasium as gym
from fastenv.vector import PipelineVectorEnv

if __name__ == "__main__":
    envs = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 4, num_workers=2, progress=False)
    envs.reset(seed=0)
    print("stepping", *envs.worker_pids, flush=True)
    while True:
        envs.step(np.zeros(4, dtype=np.int64))
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for the user (its parent, the terminated process, is not waiting for it)
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


@pytest.mark.libero
@pytest.mark.timeout(600)
def test_building_and_stepping_libero_envs_prints_nothing_from_robosuite_or_libero(tmp_path):
    run = subprocess.run([sys.executable, "-c", BUILD], cwd=tmp_path, capture_output=True, text=True, timeout=500, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout == "done\n"  # LIBERO printed "[info] Applying task order index ..." per benchmark built
    for line in ("No private macro file found", "private macro file", "setup_macros.py", "Applying task order index"):
        assert line not in run.stderr, run.stderr
    # what is left is fastenv's own: the workers' build progress
    assert all(line.startswith("fastenv: ") for line in run.stderr.splitlines()), run.stderr


def test_robosuites_other_messages_still_pass():
    import logging

    from fastenv.backends.libero.task import quiet_robosuite_import

    quiet_robosuite_import()
    quiet_robosuite_import()  # once is enough
    logger = logging.getLogger("robosuite_logs")
    assert len(logger.filters) == len({type(f) for f in logger.filters})
    dropped = logging.LogRecord("robosuite_logs", logging.WARNING, __file__, 1, "No private macro file found!", None, None)
    kept = logging.LogRecord("robosuite_logs", logging.WARNING, __file__, 1, "Controller has no attribute", None, None)
    assert not logger.filter(dropped) and logger.filter(kept)


@pytest.mark.timeout(300)
def test_sigterm_to_the_main_process_exits_quietly_with_nothing_left(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", STEPPING], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline()
    assert line.startswith("stepping"), child.communicate(timeout=60)
    workers = [int(pid) for pid in line.split()[1:]]
    assert len(workers) == 2 and all(_alive(pid) for pid in workers)
    time.sleep(0.5)  # mid-rollout
    child.send_signal(signal.SIGTERM)
    _, stderr = child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM  # what a shell reports for a terminated process
    assert "Traceback" not in stderr and "leaked" not in stderr and "BrokenPipe" not in stderr, stderr
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers), "a worker outlived the terminated process"
    assert not [p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(f"fastenv_{child.pid}_")]


def test_a_handler_the_program_set_is_left_alone(tmp_path):
    script = """
import signal
import gymnasium as gym
from fastenv.vector import PipelineVectorEnv

def mine(signum, frame):
    pass

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, mine)
    envs = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=1, progress=False)
    print(signal.getsignal(signal.SIGTERM) is mine)
    envs.close()
"""
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "True", run.stderr
