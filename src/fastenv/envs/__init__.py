"""The assembly layer: fastenv's Gymnasium ids, and the envs they build from the layers below.

Every backend is assembled here the same way: the backend's ``make_sim`` builds one env's
``SimEnv`` (``fastenv.backends``), ``fastenv.wrap`` puts fastenv's wrappers on it
(``fastenv.wrappers``), and ``make_pipeline`` runs N of them in workers (``fastenv.vector``). A
module per backend holds its entry points (``libero``, ``maniskill``, ``behavior``); the table
below registers them, and the backends that adopt envs someone already built (``fastenv.wrap``).
Entry points are strings so nothing heavy is imported.

``gym.make(id, max_episode_steps=N)`` keeps ``N`` to itself: it never reaches the entry point, and
Gymnasium's ``TimeLimit`` counts actions, which for a chunked env are chunks of K simulator steps.
fastenv's entry points read it from ``gym.make``'s call and pass it on as the env's own limit
(each backend's ``max_episode_steps``: simulator steps for LIBERO and ManiSkill), so it means
what it means everywhere else in fastenv. Gymnasium's ``TimeLimit`` stays above it and never
fires first (N actions are at least N simulator steps).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

import gymnasium as gym

from fastenv.core.registry import register_builtin
from fastenv.envs.options import built_by_rllib
from fastenv.vector import VECTOR_OPTIONS, BatchedEnv


@dataclass(frozen=True)
class BackendEntry:
    """One backend's line: its Gymnasium id, the module of its entry points, what it adopts."""

    env_id: str
    module: str  # holds make_env (and make_vec when the backend vectorizes)
    vector: bool = True
    gl: bool = False  # renders with OpenGL in the env's process (a forked copy of a context deadlocks)
    adopts: tuple[str, ...] = ()  # qualified class names that fastenv.wrap hands to the backend's adopt
    adopt: str | None = None


BACKENDS = {
    "libero": BackendEntry(
        "fastenv/Libero-v0", "fastenv.envs.libero", gl=True,
        adopts=("libero.libero.envs.env_wrapper.ControlEnv", "liberopro.liberopro.envs.env_wrapper.ControlEnv",
                "liberoplus.liberoplus.envs.env_wrapper.ControlEnv"),
        adopt="fastenv.backends.libero:adopt",
    ),
    "behavior": BackendEntry("fastenv/Behavior-v0", "fastenv.envs.behavior", vector=False),
    "maniskill": BackendEntry(
        "fastenv/ManiSkill-v0", "fastenv.envs.maniskill",
        adopts=("mani_skill.envs.sapien_env.BaseEnv",), adopt="fastenv.backends.maniskill:adopt",
    ),
}
_BY_ID = {entry.env_id: entry for entry in BACKENDS.values()}


def register_envs() -> None:
    """Register the fastenv ids with Gymnasium, and the backends that adopt built envs (idempotent)."""
    for name, entry in BACKENDS.items():
        if entry.env_id not in gym.registry:
            # No passive checker: with num_envs the env is batched (array rewards), which it would
            # warn about; check_env still passes on the single env.
            gym.register(
                id=entry.env_id,
                entry_point=f"fastenv.envs:make_{name}",
                vector_entry_point=f"{entry.module}:make_vec" if entry.vector else None,
                disable_env_checker=True,
            )
        if entry.adopt is not None:
            register_builtin(name, entry.adopts, entry.adopt)


def gym_make_time_limit(frame: FrameType | None) -> int | None:
    """``max_episode_steps`` given to the ``gym.make`` call that runs an entry point, if any.

    ``frame`` is the entry point's caller: ``gym.make`` calls the entry point directly.
    """
    if frame is None or frame.f_code is not getattr(gym.envs.registration.make, "__code__", None):
        return None
    limit = frame.f_locals.get("max_episode_steps")
    return None if limit is None or limit == -1 else limit


def forking_async_vector_env(frame: FrameType | None) -> bool:
    """Whether this env is being built by Gymnasium's ``AsyncVectorEnv`` that will fork its workers.

    ``AsyncVectorEnv`` builds one env in the calling process, then starts its workers with the
    ``context`` it was given, by default the platform's (fork on Linux).
    """
    import multiprocessing

    init = getattr(gym.vector.AsyncVectorEnv.__init__, "__code__", None)
    while frame is not None:
        if frame.f_code is init:
            context = frame.f_locals.get("context")
            method = context if isinstance(context, str) else multiprocessing.get_context(context).get_start_method()
            return method == "fork"
        frame = frame.f_back
    return False


def _entry(env_id: str, frame: FrameType | None, kwargs: dict[str, Any]) -> Any:
    entry = _BY_ID[env_id]
    if entry.gl and forking_async_vector_env(frame):
        raise ValueError(
            f"gym.make_vec({env_id!r}, vectorization_mode='async') forks its workers after building an env here, "
            "and an OpenGL (EGL) context does not survive fork: they would hang. Use gym.make_vec(id, num_envs=N) "
            "(fastenv's own vector env, the default mode: workers, shared memory, chunks), or keep Gymnasium's "
            "AsyncVectorEnv with vector_kwargs={'context': 'spawn'} (and the main guard, "
            "if __name__ == '__main__':); vectorization_mode='sync' runs the envs in this process"
        )
    batched = kwargs.get("num_envs") is not None or any(key in kwargs for key in (*VECTOR_OPTIONS, "vector_kwargs"))
    if batched and entry.vector and built_by_rllib(frame):
        raise ValueError(
            f"RLlib's env runner is building single {env_id} envs (gym_env_vectorize_mode='sync', its default) with vector "
            f"options {sorted(key for key in kwargs if key in (*VECTOR_OPTIONS, 'vector_kwargs', 'num_envs'))}: "
            "pass .env_runners(gym_env_vectorize_mode='vector_entry_point') to the config for fastenv's vector env"
        )
    make_env = importlib.import_module(entry.module).make_env
    limit = gym_make_time_limit(frame)
    if limit is not None:
        if batched:
            raise _batched_time_limit(env_id, limit)
        kwargs["max_episode_steps"] = limit
    env = make_env(**kwargs)
    if limit is not None and _is_batched(env):
        env.close()  # ManiSkill on a GPU is batched whatever the options
        raise _batched_time_limit(env_id, limit)
    return env


def _is_batched(env: Any) -> bool:
    return isinstance(env.unwrapped, BatchedEnv)


def _batched_time_limit(env_id: str, limit: int) -> ValueError:
    return ValueError(
        f"gym.make({env_id!r}, max_episode_steps={limit}) builds a batched env here (num_envs, vector "
        "options, or ManiSkill on a GPU), and Gymnasium's TimeLimit would count the batch's steps and "
        f"truncate every env at once; pass it to gym.make_vec({env_id!r}, num_envs=..., "
        f"max_episode_steps={limit}), where each env counts its own"
    )


def make_libero(**kwargs: Any) -> Any:
    """``gym.make("fastenv/Libero-v0", ...)``: ``fastenv.envs.libero.make_env``, with ``gym.make``'s
    ``max_episode_steps`` passed on (simulator steps)."""
    return _entry("fastenv/Libero-v0", sys._getframe(1), kwargs)


def make_maniskill(**kwargs: Any) -> Any:
    """``gym.make("fastenv/ManiSkill-v0", ...)``: ``fastenv.envs.maniskill.make_env``, with
    ``gym.make``'s ``max_episode_steps`` passed on (simulator steps)."""
    return _entry("fastenv/ManiSkill-v0", sys._getframe(1), kwargs)


def make_behavior(**kwargs: Any) -> Any:
    """``gym.make("fastenv/Behavior-v0", ...)``: ``fastenv.envs.behavior.make_env``, with
    ``gym.make``'s ``max_episode_steps`` passed on (OmniGibson's own timeout)."""
    return _entry("fastenv/Behavior-v0", sys._getframe(1), kwargs)
