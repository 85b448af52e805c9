"""A first step that compiles LIBERO's control loop says so on stderr instead of waiting silently."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fastenv.backends.libero import compiled

SCRIPT = """
import numpy as np
import gymnasium as gym
import fastenv  # noqa: F401

env = gym.make("fastenv/Libero-v0", suite="libero_goal", task_id=3, chunk=2, camera_size=32)
env.reset(seed=0)
env.step(np.zeros((2, 7), np.float32))
env.step(np.zeros((2, 7), np.float32))
env.close()
print("stepped")
"""


def test_a_slow_first_call_prints_one_line_and_a_fast_one_prints_nothing(monkeypatch, capsys):
    monkeypatch.setattr(compiled, "NOTICE_AFTER_S", 0.05)
    monkeypatch.setattr(compiled, "_noticed", False)
    with compiled.compiling_notice():
        pass  # a call loaded from the cache: done before the timer
    time.sleep(0.1)
    assert capsys.readouterr().err == ""
    for _ in range(2):
        with compiled.compiling_notice():
            time.sleep(0.2)  # compiling
    assert capsys.readouterr().err.count("compiling LIBERO's control loop with numba") == 1  # once per process


@pytest.mark.libero
@pytest.mark.timeout(900)
def test_a_fresh_numba_cache_makes_the_first_step_say_it_compiles(tmp_path):
    pytest.importorskip("numba")
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba-cache")}
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, check=False, capture_output=True, text=True, timeout=800)
    assert run.returncode == 0 and "stepped" in run.stdout, run.stderr[-3000:]
    assert run.stderr.count("fastenv: compiling LIBERO's control loop with numba") == 1
    again = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, check=False, capture_output=True, text=True, timeout=800)
    assert again.returncode == 0 and "compiling LIBERO's control loop" not in again.stderr  # loaded from the cache
