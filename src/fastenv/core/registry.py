"""Which backend takes over an env someone already built: a small registry keyed by type.

An entry names the classes it adopts by their qualified names (so nothing is imported to look
them up) and the function that adopts an instance, as ``"module:function"`` (imported only when
an env of that type comes). Subclasses match: ``OffScreenRenderEnv`` is a LIBERO ``ControlEnv``.

The function takes the env and ``wrap()``'s options. It returns a ``SimEnv`` over the backend's
adapter, on which ``wrap()`` then puts fastenv's wrappers; or, for an env that is batched in
place (ManiSkill on a GPU: all parallel envs in one physics world), the finished vector env,
built with those options.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Backend:
    """A registry entry: ``types`` (qualified class names) are adopted by ``adopt``."""

    name: str
    types: tuple[str, ...]
    adopt: str | Callable[..., Any]

    def load(self) -> Callable[..., Any]:
        if callable(self.adopt):
            return self.adopt
        module, _, attr = self.adopt.partition(":")
        return getattr(importlib.import_module(module), attr)


# Users' entries first (register_backend), then fastenv's own (register_builtin, from fastenv.envs).
_BACKENDS: list[Backend] = []


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_backend(name: str, types: Sequence[type | str], adopt: str | Callable[..., Any]) -> None:
    """Make ``fastenv.wrap`` adopt envs of ``types`` with ``adopt(env, **options)`` (checked before the built-in ones).

    Examples:
        >>> register_backend("mysim", [MySimEnv], lambda env, **options: SimEnv(MySimAdapter(env)))
    """
    if isinstance(types, (str, type)):
        types = [types]
    names = tuple(t if isinstance(t, str) else qualified_name(t) for t in types)
    if not names:
        raise ValueError("register_backend needs at least one type")
    _BACKENDS.insert(0, Backend(name, names, adopt))


def register_builtin(name: str, types: Sequence[str], adopt: str | Callable[..., Any]) -> None:
    """Add one of fastenv's own backends after every user's entry (once per name)."""
    if not any(backend.name == name for backend in _BACKENDS):
        _BACKENDS.append(Backend(name, tuple(types), adopt))


def find_backend(env: Any) -> Backend | None:
    """The backend registered for ``env``'s type (or its unwrapped env's), or None."""
    candidates = [type(env)]
    unwrapped = getattr(env, "unwrapped", env)
    if unwrapped is not env:
        candidates.append(type(unwrapped))
    for cls in candidates:
        names = {qualified_name(c) for c in cls.__mro__}
        for backend in _BACKENDS:
            if names.intersection(backend.types):
                return backend
    return None
