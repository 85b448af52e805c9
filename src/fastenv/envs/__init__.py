"""The assembly layer: fastenv's Gymnasium ids, and the envs they build from the layers below.

Every backend is assembled here the same way: the backend's ``make_sim`` builds one env's
``SimEnv`` (``fastenv.backends``), ``fastenv.wrap`` puts fastenv's wrappers on it
(``fastenv.wrappers``), and ``make_pipeline`` runs N of them in workers (``fastenv.vector``). A
module per backend holds its entry points (``libero``, ``maniskill``, ``behavior``); the table
below registers them, and the backends that adopt envs someone already built (``fastenv.wrap``).
Entry points are strings so nothing heavy is imported.

An env's own limit is its backend's ``max_episode_steps``, in simulator steps. ``gym.make`` keeps
that name for itself: ``gym.make(id, max_episode_steps=N)`` puts Gymnasium's ``TimeLimit`` on top,
which counts actions (chunks of K simulator steps), and ``N`` never reaches the entry point. So
through ``gym.make`` (and ``gym.make_vec``'s "sync" and "async" modes, which call it for each env)
the env's own limit is ``max_sim_steps=N``, which the entry points below pass on as the env's
``max_episode_steps``; it is kept in ``env.spec.kwargs``, so ``gym.make(env.spec)`` rebuilds the
same env. ``gym.make_vec``'s default mode hands ``max_episode_steps`` to the vector entry point
itself. Gymnasium has no hook that sees ``gym.make``'s ``N`` and leaves ``gym.make_vec`` working:
a spec's ``additional_wrappers`` receive the ``TimeLimit``, but ``gym.make_vec`` refuses a vector
entry point whose spec has any.

A LIBERO env built in a process forked from one that had built one (Gymnasium's ``AsyncVectorEnv``
with its default start method, fork) is refused by the backend (``fastenv.backends._gl``): the
copied OpenGL context would hang it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from fastenv._validation import check_positive_int
from fastenv.core.registry import register_builtin


@dataclass(frozen=True)
class BackendEntry:
    """One backend's line: its Gymnasium id, the module of its entry points, what it adopts."""

    env_id: str
    module: str  # holds make_env (and make_vec when the backend vectorizes)
    vector: bool = True
    adopts: tuple[str, ...] = ()  # qualified class names that fastenv.wrap hands to the backend's adopt
    adopt: str | None = None


BACKENDS = {
    "libero": BackendEntry(
        "fastenv/Libero-v0", "fastenv.envs.libero",
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


def _entry(env_id: str, kwargs: dict[str, Any]) -> Any:
    entry = _BY_ID[env_id]
    make_env = importlib.import_module(entry.module).make_env
    return make_env(**with_sim_steps(env_id, kwargs))


def with_sim_steps(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """An entry point's ``kwargs`` with ``max_sim_steps`` given to the env as its ``max_episode_steps``."""
    limit = kwargs.pop("max_sim_steps", None)
    if limit is None:
        return kwargs
    if kwargs.get("max_episode_steps") is not None:
        raise TypeError(
            f"{env_id}: max_sim_steps={limit!r} and max_episode_steps={kwargs['max_episode_steps']!r} name the same "
            "limit; give it once"
        )
    return {**kwargs, "max_episode_steps": check_positive_int("max_sim_steps", limit)}


def gym_make_kwargs(env_id: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` for ``gym.make(env_id, **kwargs)`` in which ``max_episode_steps`` is the env's own limit.

    On fastenv's ids it is passed as ``max_sim_steps`` (``gym.make`` would keep it for its
    ``TimeLimit``); other ids get ``kwargs`` as they are.
    """
    kwargs = dict(kwargs)
    if env_id in _BY_ID and kwargs.get("max_episode_steps") is not None:
        kwargs["max_sim_steps"] = kwargs.pop("max_episode_steps")
    return kwargs


def make_libero(**kwargs: Any) -> Any:
    """``gym.make("fastenv/Libero-v0", ...)``: ``fastenv.envs.libero.make_env``, with
    ``max_sim_steps`` as its ``max_episode_steps`` (simulator steps)."""
    return _entry("fastenv/Libero-v0", kwargs)


def make_maniskill(**kwargs: Any) -> Any:
    """``gym.make("fastenv/ManiSkill-v0", ...)``: ``fastenv.envs.maniskill.make_env``, with
    ``max_sim_steps`` as its ``max_episode_steps`` (simulator steps)."""
    return _entry("fastenv/ManiSkill-v0", kwargs)


def make_behavior(**kwargs: Any) -> Any:
    """``gym.make("fastenv/Behavior-v0", ...)``: ``fastenv.envs.behavior.make_env``, with
    ``max_sim_steps`` as its ``max_episode_steps`` (actions, by OmniGibson's own timeout)."""
    return _entry("fastenv/Behavior-v0", kwargs)
