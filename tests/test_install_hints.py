"""Every install instruction works from where the user stands: fastenv-rl is not on the package
index, so the docs install from a checkout and fastenv's messages give the whole command."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from gymnasium.error import DependencyNotInstalled

from fastenv import _deps

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def _texts() -> dict[Path, str]:
    tracked = subprocess.run(["git", "ls-files", "*.md", "*.py", "*.sh", "*.toml", "*.yml"], cwd=ROOT, capture_output=True, text=True, check=True)
    return {ROOT / name: (ROOT / name).read_text() for name in tracked.stdout.split() if (ROOT / name).exists()}


def test_no_instruction_installs_fastenv_from_the_package_index():
    wrong = [f"{path.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}"
             for path, text in _texts().items() for m in re.finditer(r"pip install [\"']?fastenv-rl", text)]
    assert not wrong, f"fastenv-rl is not on the package index: {wrong}"


def test_every_extra_the_docs_install_exists():
    named = {extra.strip() for text in _texts().values() for group in re.findall(r"pip install (?:-e )?[\"']\.\[([^\]]+)\]", text)
             for extra in group.split(",") if "{" not in extra} - {"extra", "extras"}  # placeholders
    assert named and named <= EXTRAS, f"unknown extras {sorted(named - EXTRAS)}"


def test_the_command_in_a_message_names_this_python_and_this_checkout_and_pip_accepts_it():
    command = shlex.split(_deps.install_command("numba"))
    assert command[:5] == [sys.executable, "-m", "pip", "install", "-e"]
    assert command[5] == f"{ROOT}[numba]" and len(command) == 6
    # pip takes it as typed (resolving nothing, installing nothing)
    check = subprocess.run([*command[:4], "--dry-run", "--no-deps", "--no-build-isolation", *command[4:]],
                           capture_output=True, text=True, check=False, timeout=300)
    assert check.returncode == 0 and "Would install fastenv-rl" in check.stdout, check.stdout + check.stderr


def test_a_missing_dependency_says_the_whole_command():
    with pytest.raises(DependencyNotInstalled) as error:
        _deps.require("fastenv_no_such_module", "numba", "numba")
    assert str(error.value).endswith(f"Install it with: {_deps.install_command('numba')}")
    assert f'-m pip install -e "{ROOT}[numba]"' in str(error.value)


def test_outside_a_checkout_the_command_says_to_run_it_in_one(monkeypatch):
    monkeypatch.setattr(_deps, "checkout", lambda: None)
    assert _deps.install_command("ray") == 'pip install ".[ray]" (in a checkout of fastenv: fastenv-rl is not on the package index)'


def test_the_numba_backend_of_the_returns_says_the_command(monkeypatch):
    from fastenv import returns

    monkeypatch.setattr(returns, "_numba", lambda: None)
    with pytest.raises(DependencyNotInstalled, match=re.escape(_deps.install_command("numba"))):
        returns._backend("numba")
