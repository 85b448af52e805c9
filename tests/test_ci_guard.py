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


class _Item:
    def __init__(self, name, group=None, keep=1, share=1.0):
        self.name = name
        self._marker = None if group is None else type("Mark", (), {"args": (group,), "kwargs": {"keep": keep, "share": share}})()

    def get_closest_marker(self, name):
        return self._marker if name == "ci_sample" else None


def test_ci_runs_a_draw_of_each_sampled_group_that_the_commit_decides(monkeypatch):
    # Under CI the tests of a ci_sample group run `keep` of their members, drawn by the commit's
    # seed (the same draw in every test process); FASTENV_CI_FULL or no CI runs them all.
    from conftest import ci_sampled_out

    items = [_Item("a", "g"), _Item("b", "g"), _Item("c", "g"), _Item("d", "h", keep=2), _Item("e", "h", keep=2), _Item("f")]
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("FASTENV_CI_FULL", raising=False)
    draws = set()
    for seed in ("1", "2", "3", "4", "5", "6"):
        monkeypatch.setenv("FASTENV_CONFORM_SEED", seed)
        out = ci_sampled_out(items)
        assert out == ci_sampled_out(list(items))  # a replayable draw
        assert sum(i.name in "abc" for i in out) == 2 and sum(i.name in "de" for i in out) == 0 and "f" not in [i.name for i in out]
        draws.add(tuple(i.name for i in out))
    assert len(draws) > 1  # the draw moves with the seed
    # A group with a share runs on that share of the commits (drawn by the seed, replayable), whole
    # groups at a time: over 60 seeds, a third runs within a few sigma.
    items = [_Item("x", "rare", share=1 / 3), _Item("y", "rare", share=1 / 3), _Item("z", "often")]
    runs = []
    for seed in range(60):
        monkeypatch.setenv("FASTENV_CONFORM_SEED", str(seed))
        out = [i.name for i in ci_sampled_out(items)]
        assert out == [i.name for i in ci_sampled_out(list(items))] and "z" not in out
        assert out in (["x", "y"], ["x"], ["y"])  # none of the group, or keep=1 of it
        runs.append(len(out) == 1)
    assert 8 <= sum(runs) <= 32, sum(runs)
    items = [_Item("a", "g"), _Item("b", "g")]
    monkeypatch.setenv("FASTENV_CI_FULL", "1")
    assert ci_sampled_out(items) == []
    monkeypatch.delenv("FASTENV_CI_FULL")
    monkeypatch.delenv("CI")
    assert ci_sampled_out(items) == []


@pytest.mark.parametrize("module, files", [
    ("tianshou", ["test_tianshou.py", "peer/test_tianshou_vector_envs.py"]),
    ("stable_baselines3", ["test_sb3.py", "peer/test_sb3_vec_envs.py"]),
])
@pytest.mark.parametrize("ci", ["true", ""])
def test_a_library_the_test_extras_install_that_does_not_import_fails_in_ci_and_skips_elsewhere(tmp_path, module, files, ci):
    # A broken extra: the package is there but does not import (shadowed here by one that raises).
    (tmp_path / module).mkdir()
    (tmp_path / module / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *(str(TESTS / f) for f in files)],
                         capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=300)
    if ci:
        assert out.returncode != 0 and f"{len(files)} errors" in out.stdout, out.stdout[-2000:]
        assert f"CI installs {module}" in out.stdout and "broken on purpose" in out.stdout
    else:
        assert out.returncode == 5 and f"{len(files)} skipped" in out.stdout, out.stdout[-2000:]  # 5: no test ran
        assert f"{module} does not import (broken on purpose)" in out.stdout
