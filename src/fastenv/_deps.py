"""Lazy imports of optional dependencies, with errors that say how to install the extra."""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from types import ModuleType

from gymnasium.error import DependencyNotInstalled

DISTRIBUTION = "fastenv-rl"  # not on the package index: extras install from a checkout


def checkout() -> Path | None:
    """The checkout this fastenv is imported from (its ``pyproject.toml`` names ``fastenv-rl``),
    or None (an installed copy, not editable)."""
    root = Path(__file__).resolve().parents[2]  # src/fastenv/_deps.py -> the checkout
    try:
        text = (root / "pyproject.toml").read_text()
    except OSError:
        return None
    return root if f'name = "{DISTRIBUTION}"' in text else None


def install_command(extra: str) -> str:
    """The command that installs fastenv's ``extra`` (comma-separated extras) into this Python,
    as typed from where the user stands: the checkout fastenv is imported from, or else any
    checkout of fastenv (the package is not on the package index).

    Examples:
        >>> install_command("numba").endswith('[numba]"')
        True
    """
    root = checkout()
    if root is not None:
        return f'{shlex.quote(sys.executable)} -m pip install -e "{root}[{extra}]"'
    return f'pip install ".[{extra}]" (in a checkout of fastenv: {DISTRIBUTION} is not on the package index)'


def require(module: str, extra: str, what: str | None = None) -> ModuleType:
    """Import ``module`` or raise ``DependencyNotInstalled`` with the command that installs the
    fastenv extra.

    Examples:
        >>> np = require("numpy", "core")
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        name = what or module
        raise DependencyNotInstalled(
            f"{name} is not installed (import of {module!r} failed: {exc}). Install it with: {install_command(extra)}"
        ) from exc
