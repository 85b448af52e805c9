"""Every ``vectorization_mode`` Gymnasium accepts for fastenv/Libero-v0 works or is refused at once.

Each mode runs in a child process with a timeout, so a hang fails the test instead of hanging it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.libero, pytest.mark.timeout(900)]

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import gymnasium as gym
    import fastenv  # noqa: F401

    if __name__ == "__main__":
        mode, context = sys.argv[1], sys.argv[2]
        kwargs = {"vector_kwargs": {"context": context}} if context != "-" else {}
        mode = None if mode == "-" else mode
        envs = gym.make_vec("fastenv/Libero-v0", num_envs=2, vectorization_mode=mode, camera_size=32, chunk=2, **kwargs)
        obs, info = envs.reset(seed=0)
        actions = np.zeros((2, 2, 7), np.float32)
        for _ in range(2):
            obs, reward, terminated, truncated, info = envs.step(actions)
        print("OK", type(envs).__name__, np.asarray(obs["robot0_proprio-state"]).round(6).tolist(), flush=True)
        envs.close()
    """
)


def run_mode(tmp_path, mode: str, context: str) -> subprocess.CompletedProcess:
    script = tmp_path / "modes.py"
    script.write_text(SCRIPT)
    return subprocess.run([sys.executable, str(script), mode, context], cwd=tmp_path, check=False, capture_output=True, text=True, timeout=600)


def _proprio(run: subprocess.CompletedProcess) -> str:
    line = next(line for line in run.stdout.splitlines() if line.startswith("OK "))
    return line.split(" ", 2)[2]


def test_async_with_fork_is_refused_at_once_saying_what_to_use(tmp_path):
    # Gymnasium's default context here is fork: the main process builds one env, then forks its
    # workers, which refuse to build theirs (before, they hung). A worker builds its env outside
    # the try block that reports errors, so it dies printing its traceback and the main process
    # sees its pipe close; the run ends (a hang would time out).
    run = run_mode(tmp_path, "async", "-")
    assert run.returncode != 0 and "OK" not in run.stdout
    assert "Process Worker<AsyncVectorEnv>" in run.stderr
    said = run.stderr[run.stderr.index("RuntimeError: a LIBERO env: this process was forked"):]
    for way in ("gym.make_vec(id, num_envs=N)", "vector_kwargs={'context': 'spawn'}", "vectorization_mode='sync'"):
        assert way in said
    # The main process's own error: its pipe closed. The worker's traceback and the main
    # process's are written by two processes to one stream, in either order.
    ended = [line for line in run.stderr.splitlines() if line.split(":")[0] in ("EOFError", "ConnectionResetError", "BrokenPipeError")]
    assert ended, run.stderr[-3000:]


@pytest.mark.big_memory
def test_every_other_mode_runs_and_gives_the_same_observations(tmp_path):
    runs = {
        "vector_entry_point (default)": run_mode(tmp_path, "-", "-"),
        "sync": run_mode(tmp_path, "sync", "-"),
        "async, spawn": run_mode(tmp_path, "async", "spawn"),
    }
    for name, run in runs.items():
        assert run.returncode == 0, f"{name}:\n{run.stderr[-3000:]}"
    # Seeded resets and the same actions: the same proprioception, whichever vector env steps it
    # (no episode ends in these 4 sub-steps, so the autoreset modes do not differ here).
    assert len({_proprio(run) for run in runs.values()}) == 1, {name: _proprio(run) for name, run in runs.items()}


def test_a_child_forked_after_an_opengl_context_refuses_to_build_a_libero_env():
    from fastenv.backends import _gl

    previous = _gl._context_process
    _gl._context_process = -1  # as a forked child sees it: another process made the context
    try:
        with pytest.raises(RuntimeError, match="does not survive fork"):
            _gl.check_not_forked_after_gl("a LIBERO env")
    finally:
        _gl._context_process = previous


AFTER_AN_ENV = textwrap.dedent(
    """
    import numpy as np
    import gymnasium as gym
    import fastenv  # noqa: F401

    if __name__ == "__main__":
        options = dict(camera_size=32, chunk=2, modalities=["agentview_image", "robot0_proprio-state"])
        env = gym.make("fastenv/Libero-v0", **options)  # this process now holds an OpenGL context
        env.reset(seed=0)
        for context in ("spawn", "forkserver"):
            envs = gym.make_vec("fastenv/Libero-v0", num_envs=1, num_workers=1, context=context, **options)
            envs.reset(seed=0)
            obs, *_ = envs.step(np.zeros((1, 2, 7), np.float32))
            print("OK", context, obs["agentview_image"].shape, flush=True)
            envs.close()
        env.close()
    """
)


def test_fastenvs_own_workers_build_after_this_process_built_a_libero_env(tmp_path):
    # The fork guard is a fact of the process: spawned and forkserver workers start without it.
    script = tmp_path / "after_an_env.py"
    script.write_text(AFTER_AN_ENV)
    run = subprocess.run([sys.executable, str(script)], cwd=tmp_path, check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert [line for line in run.stdout.splitlines() if line.startswith("OK ")] == [
        "OK spawn (1, 32, 32, 3)", "OK forkserver (1, 32, 32, 3)"
    ]
