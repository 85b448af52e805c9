"""What a user who gets something wrong sees: one clear line, before anything expensive runs."""

import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest

from fastenv.vector import PipelineVectorEnv, WorkerError


def test_a_script_without_the_main_guard_is_told_so_in_one_line(tmp_path):
    # Workers are spawned: each runs the script's module-level code again and would build more
    # workers. Before, this ended in a 150-line traceback and "worker 0 died (exit code 1)".
    script = tmp_path / "no_guard.py"
    script.write_text(textwrap.dedent("""
        import gymnasium as gym
        from fastenv.vector import PipelineVectorEnv

        envs = PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2)
        envs.close()
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("fastenv.vector.transport.WorkerError: worker 0 could not start: fastenv's vector env starts")
    assert 'under `if __name__ == "__main__":`' in last
    assert len(out.stderr.splitlines()) < 30, out.stderr  # the workers exit quietly: no traceback of theirs


def _explode(message):
    raise ValueError(message)


class Unpicklable:
    """An env constructor that pickles in the parent but fails to unpickle in the worker."""

    def __call__(self):
        return gym.make("CartPole-v1")

    def __reduce__(self):
        return _explode, ("this constructor cannot be rebuilt in a worker",)


def test_a_worker_that_cannot_unpickle_its_constructors_says_why():
    with pytest.raises(WorkerError, match=r"(?s)worker 0 failed to build its envs: .*could not be unpickled in the worker: "
                       r"ValueError: this constructor cannot be rebuilt in a worker"):
        PipelineVectorEnv([Unpicklable()] * 2, num_workers=1)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"chunk": 0}, ValueError, "chunk must be an integer >= 1, got 0"),
        ({"chunk": 4.0}, TypeError, r"chunk must be an integer >= 1, got 4.0 \(float\)"),
        ({"gamma": 1.5}, ValueError, r"gamma must be in \(0, 1\], got 1.5"),
        ({"chunk": None, "gamma": 0.9}, ValueError, "pass chunk= as well"),
        ({"camera_size": 0}, ValueError, "camera_size must be an integer >= 1, got 0"),
        ({"max_episode_steps": -1}, ValueError, "max_episode_steps must be an integer >= 1, got -1"),
        ({"render_mode": "human"}, ValueError, "render_mode must be None or 'rgb_array', got 'human'"),
        ({"modalities": "agentview_image"}, TypeError, "a sequence of keys, got the string 'agentview_image'"),
        ({"modalities": []}, ValueError, "at least one observation key"),
    ],
)
@pytest.mark.parametrize("entry", ["make_env", "make_vec"])
def test_libero_options_are_checked_before_anything_is_built(monkeypatch, entry, kwargs, error, match):
    from fastenv.backends import libero
    from fastenv.envs import libero as libero_envs

    def built(*args, **kw):
        raise AssertionError("something was built before the options were checked")

    monkeypatch.setattr(libero.LiberoTask, "load", built)
    monkeypatch.setattr(libero_envs, "make_pipeline", built)
    with pytest.raises(error, match=match):
        libero_envs.make_env(**kwargs) if entry == "make_env" else libero_envs.make_vec(2, **kwargs)


@pytest.mark.maniskill
def test_maniskills_own_env_renders_after_import_fastenv_with_no_further_call(tmp_path):
    # SAPIEN needs a Vulkan device; on a machine without one, scripts/vulkan.sh's CPU driver is
    # found by `import fastenv` itself (before, it needed configure_vulkan() first).
    import os

    code = textwrap.dedent("""
        import fastenv, gymnasium as gym, mani_skill.envs
        env = gym.make("PickCube-v1", obs_mode="rgb", sensor_configs=dict(width=16, height=16))
        obs, _ = env.reset(seed=0)
        print(tuple(obs["sensor_data"]["base_camera"]["rgb"].shape))
        env.close()
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("(1, 16, 16, 3)")
    # A driver the user chose is left alone.
    check = "import os, fastenv; print(os.environ['VK_ICD_FILENAMES'])"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, env={**env, "VK_ICD_FILENAMES": "/chosen.json"})
    assert out.stdout.strip() == "/chosen.json"


@pytest.mark.libero
def test_gym_makes_max_sim_steps_reaches_the_env_in_simulator_steps():
    # gym.make keeps max_episode_steps for Gymnasium's TimeLimit, which counts chunks (12 chunks
    # of 8 would be 96 simulator steps); max_sim_steps is the env's own limit, and it ends the
    # episode inside a chunk. Every other path: tests/test_gym_paths.py.
    import fastenv  # noqa: F401

    env = gym.make("fastenv/Libero-v0", chunk=8, modalities=["robot0_proprio-state"], max_sim_steps=12)
    try:
        assert env.unwrapped.max_episode_steps == 12
        env.reset(seed=0)
        action = env.action_space.sample() * 0
        _, _, terminated, truncated, info = env.step(action)
        assert not truncated and info["chunk_steps"] == 8
        _, _, terminated, truncated, info = env.step(action)
        assert truncated and not terminated and info["chunk_steps"] == 4  # 12 simulator steps in all
    finally:
        env.close()


class _Stream:
    def __init__(self, tty):
        self.text, self.tty = "", tty

    def write(self, text):
        self.text += text

    def flush(self):
        pass

    def isatty(self):
        return self.tty


def test_a_slow_build_says_so_while_it_runs_and_a_fast_one_prints_nothing():
    import time

    from fastenv.vector.progress import BuildProgress

    fast = _Stream(tty=False)
    with BuildProgress(4, 2, stream=fast, delay=0.5) as progress:
        progress.ready()
        progress.ready()
    assert fast.text == ""

    log = _Stream(tty=False)  # a log: one line when it starts, one when it is done
    with BuildProgress(4, 2, stream=log, delay=0.1) as progress:
        time.sleep(0.3)
        progress.ready()
    lines = log.text.splitlines()
    assert lines[0] == "fastenv: building 4 envs in 2 workers: 0/2 ready, 0 s"
    assert len(lines) == 2 and lines[1].startswith("fastenv: 4 envs in 2 workers built in ")

    terminal = _Stream(tty=True)  # a terminal: one line, updated in place
    with BuildProgress(4, 2, stream=terminal, delay=0.0) as progress:
        time.sleep(1.3)
        progress.ready()
        time.sleep(1.0)
    assert terminal.text.count("\r") >= 2 and "1/2 ready" in terminal.text and terminal.text.count("\n") == 1


def test_the_vector_env_shows_its_build(capfd):
    with PipelineVectorEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2, progress=True):
        pass
    err = capfd.readouterr().err
    assert "fastenv: building 2 envs in 2 workers" in err and "fastenv: 2 envs in 2 workers built in" in err


def test_a_closed_sim_env_says_so():
    from fakes import FakeAdapter

    from fastenv import SimEnv

    env = SimEnv(FakeAdapter())
    env.reset(seed=0)
    env.close()
    env.close()  # closing twice is fine
    action = np.zeros(3, np.float32)
    for call in (lambda: env.step(action), lambda: env.reset(seed=0), lambda: env.substep(action), env.observe):
        with pytest.raises(gym.error.ClosedEnvironmentError, match="is closed: build a new env"):
            call()


def test_the_maniskill_gpu_env_takes_only_same_step_autoreset_and_says_where_the_others_run():
    for mode in ("NextStep", "Disabled"):
        with pytest.raises(ValueError, match=r"autoreset_mode must be SAME_STEP, got AutoresetMode\.\w+; the CPU workers"):
            gym.make_vec("fastenv/ManiSkill-v0", num_envs=2, env_id="PickCube-v1", sim_backend="physx_cuda", autoreset_mode=mode)
