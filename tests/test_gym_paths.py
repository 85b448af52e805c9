"""Every way Gymnasium builds a fastenv env gives it the same limit, read from the call's arguments.

The env's own limit (``max_episode_steps``, in simulator steps) reaches it as ``max_sim_steps``
through ``gym.make`` and the vector modes that call it, and as ``max_episode_steps`` through the
vector entry point; ``gym.make``'s ``max_episode_steps`` stays Gymnasium's ``TimeLimit`` (actions).
A stand-in ``make_env`` records what arrives (the real LIBERO env: tests/test_user_errors.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from fakes import CountingEnv

import fastenv  # noqa: F401  (registers the ids)
from fastenv.envs import gym_make_kwargs

ID = "fastenv/Libero-v0"


@pytest.fixture
def made(monkeypatch):
    """What fastenv.envs.libero.make_env and make_vec were called with; each builds a CountingEnv
    that truncates itself at its ``max_episode_steps``."""
    from fastenv.envs import libero

    calls: list[dict] = []

    def make_env(**kwargs):
        calls.append(kwargs)
        return CountingEnv(truncate_at=kwargs.get("max_episode_steps"))

    def make_vec(num_envs=1, **kwargs):
        calls.append({"num_envs": num_envs, **kwargs})
        limit = kwargs.get("max_episode_steps")
        return gym.vector.SyncVectorEnv([lambda: CountingEnv(truncate_at=limit)] * num_envs)

    monkeypatch.setattr(libero, "make_env", make_env)
    monkeypatch.setattr(libero, "make_vec", make_vec)
    return calls


def _steps_to_truncation(env: gym.Env, most: int = 50) -> int:
    env.reset(seed=0)
    for t in range(1, most + 1):
        *_, terminated, truncated, _ = env.step(np.zeros(2, np.float32))
        if terminated or truncated:
            return t
    return -1


def test_max_sim_steps_through_gym_make_is_the_envs_own_limit(made):
    env = gym.make(ID, chunk=4, max_sim_steps=3)
    assert made[-1] == {"chunk": 4, "max_episode_steps": 3}
    assert not isinstance(env, gym.wrappers.TimeLimit)
    assert _steps_to_truncation(env) == 3


def test_gym_makes_max_episode_steps_is_gymnasiums_time_limit_above_the_env(made):
    # gym.make keeps it: the env keeps its own default limit, the TimeLimit counts actions
    env = gym.make(ID, chunk=4, max_episode_steps=5)
    assert made[-1] == {"chunk": 4}
    assert isinstance(env, gym.wrappers.TimeLimit) and env.spec.max_episode_steps == 5
    assert _steps_to_truncation(env) == 5
    # both: the env's own in simulator steps, Gymnasium's in actions; the first to come ends it
    env = gym.make(ID, max_episode_steps=5, max_sim_steps=2)
    assert made[-1] == {"max_episode_steps": 2}
    assert _steps_to_truncation(env) == 2


def test_no_limit_and_minus_one_leave_the_env_as_built(made):
    for env in (gym.make(ID), gym.make(ID, max_episode_steps=-1)):
        assert made[-1] == {}
        assert not isinstance(env, gym.wrappers.TimeLimit)
        assert _steps_to_truncation(env) == -1


def test_gym_make_of_an_envs_spec_builds_the_same_env(made):
    env = gym.make(ID, chunk=2, max_sim_steps=4, max_episode_steps=9)
    assert env.spec.kwargs == {"chunk": 2, "max_sim_steps": 4} and env.spec.max_episode_steps == 9
    again = gym.make(env.spec)
    assert made[-1] == made[0] == {"chunk": 2, "max_episode_steps": 4}
    assert isinstance(again, gym.wrappers.TimeLimit) and again.spec.max_episode_steps == 9
    assert _steps_to_truncation(again) == 4


def test_a_batched_gym_make_gives_each_env_the_limit(made):
    gym.make(ID, num_envs=2, num_workers=1, max_sim_steps=6)
    assert made[-1] == {"num_envs": 2, "num_workers": 1, "max_episode_steps": 6}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gymnasiums_own_vector_envs_build_each_env_through_gym_make(made, mode):
    # async: forked workers (the stand-in has no OpenGL context), each built by gym.make
    vector_kwargs = {"context": "fork"} if mode == "async" else {}
    envs = gym.make_vec(ID, num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs, max_sim_steps=3)
    try:
        assert envs.get_attr("truncate_at") == (3, 3)
    finally:
        envs.close()
    envs = gym.make_vec(ID, num_envs=2, vectorization_mode=mode, vector_kwargs=vector_kwargs, max_episode_steps=3)
    try:
        assert envs.get_attr("truncate_at") == (None, None)  # each env under a TimeLimit of 3 actions
        envs.reset(seed=0)
        truncated = [envs.step(np.zeros((2, 2), np.float32))[3] for _ in range(3)]
        assert [t.tolist() for t in truncated] == [[False, False], [False, False], [True, True]]
    finally:
        envs.close()


def test_the_vector_entry_point_gets_max_episode_steps_itself(made):
    envs = gym.make_vec(ID, num_envs=2, chunk=4, max_episode_steps=7)
    try:
        assert made[-1] == {"num_envs": 2, "chunk": 4, "max_episode_steps": 7}
    finally:
        envs.close()


def test_the_registered_specs_stay_plain():
    # No additional wrappers: gym.make_vec refuses a vector entry point under a spec that has any.
    for env_id in ("fastenv/Libero-v0", "fastenv/ManiSkill-v0", "fastenv/Behavior-v0"):
        spec = gym.spec(env_id)
        assert spec.additional_wrappers == () and spec.max_episode_steps is None and spec.kwargs == {}
    assert "fastenv/Libero-v0" in gym.pprint_registry(disable_print=True)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"max_sim_steps": 0}, ValueError, "max_sim_steps must be an integer >= 1, got 0"),
        ({"max_sim_steps": 2.5}, TypeError, r"max_sim_steps must be an integer >= 1, got 2.5 \(float\)"),
    ],
)
def test_a_bad_max_sim_steps_is_refused_before_building(made, kwargs, error, match):
    with pytest.raises(error, match=match):
        gym.make(ID, **kwargs)
    assert made == []


def test_both_names_of_the_limit_in_one_entry_point_call_are_refused(made):
    # gym.make keeps its own max_episode_steps; an entry point sees both only from a spec's kwargs
    from fastenv.envs import make_libero

    with pytest.raises(TypeError, match="max_sim_steps=3 and max_episode_steps=4 name the same limit; give it once"):
        make_libero(max_sim_steps=3, max_episode_steps=4)
    assert made == []


def test_gym_make_kwargs_pass_a_fastenv_ids_limit_as_the_envs_own():
    options = {"chunk": 8, "max_episode_steps": 24}
    assert gym_make_kwargs(ID, options) == {"chunk": 8, "max_sim_steps": 24}
    assert options == {"chunk": 8, "max_episode_steps": 24}  # the caller's dict is left as it was
    assert gym_make_kwargs("Pendulum-v1", options) == options  # Gymnasium's TimeLimit, as everywhere
    assert gym_make_kwargs(ID, {"chunk": 8}) == {"chunk": 8}


def test_the_fork_guard_is_a_fact_of_the_process(tmp_path):
    # A child forked after this process noted an OpenGL context refuses at once; spawned and
    # forkserver children (fastenv's own workers) start without the note.
    code = textwrap.dedent("""
        import multiprocessing as mp
        from fastenv.backends import _gl

        def child(queue):
            try:
                _gl.check_not_forked_after_gl("a LIBERO env")
                queue.put("built")
            except RuntimeError as e:
                queue.put(str(e))

        if __name__ == "__main__":
            _gl.note_gl_context()
            _gl.check_not_forked_after_gl("a LIBERO env")  # the process that made the context builds on
            for method in ("fork", "spawn", "forkserver"):
                ctx = mp.get_context(method)
                queue = ctx.Queue()
                p = ctx.Process(target=child, args=(queue,))
                p.start()
                print(method, "->", queue.get(timeout=120))
                p.join()
    """)
    script = tmp_path / "fork_guard.py"  # a file: spawned children import the script's functions
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" -> ", 1) for line in out.stdout.strip().splitlines())
    assert lines["spawn"] == "built" and lines["forkserver"] == "built"
    assert lines["fork"].startswith("a LIBERO env: this process was forked from one that had built a LIBERO env")
    for way in ("gym.make_vec(id, num_envs=N)", "vector_kwargs={'context': 'spawn'}", "vectorization_mode='sync'"):
        assert way in lines["fork"]
