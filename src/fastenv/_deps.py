"""Lazy imports of optional dependencies, with errors that name the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from gymnasium.error import DependencyNotInstalled


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``DependencyNotInstalled`` naming the fastenv extra.

    Example:
        >>> np = require("numpy", "core")
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = what or module
        raise DependencyNotInstalled(
            f"{name} is not installed (import of {module!r} failed: {exc}). "
            f'Install it with: pip install "fastenv-rl[{extra}]"'
        ) from exc
