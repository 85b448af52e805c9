"""In CI a test that needs a missing simulator fails the run; elsewhere it skips."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("ci, outcome, code", [("true", "1 error", 1), ("", "1 skipped", 0)])
def test_a_missing_simulator_fails_in_ci_and_skips_elsewhere(tmp_path, ci, outcome, code):
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import importlib.util
        _find = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a, **k: None if name == "libero" else _find(name, *a, **k)
    """))
    probe = TESTS / f"test_zz_probe_{os.getpid()}_{ci or 'local'}.py"
    probe.write_text("import pytest\n\n\n@pytest.mark.libero\ndef test_needs_libero():\n    pass\n")
    try:
        env = {**os.environ, "CI": ci, "PYTHONPATH": str(tmp_path)}
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", str(probe)],
                             capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=120)
    finally:
        probe.unlink()
    assert out.returncode == code, out.stdout[-2000:]
    assert outcome in out.stdout
