"""``fastenv eval`` against openpi's ``examples/libero/main.py`` run unchanged on LIBERO's own env.

openpi's script is not part of fastenv: this runs where ``FASTENV_OPENPI_ROOT`` names its checkout
(as tests/test_libero_eval.py's script comparisons do). The whole comparison (two suites, every task
of libero_spatial, 1, 2 and 4 workers, three batch settings, two policies, a negative control) is
``python -m fastenv.conformance.eval --openpi OPENPI_ROOT``; its result is
``results/eval_conformance.json``, checked here on every run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_comparison_is_equal_everywhere_and_its_negative_control_differs():
    result = json.loads((ROOT / "results" / "eval_conformance.json").read_text())
    rows = result["rows"]
    runs = [r for r in rows if not r.get("negative control")]
    controls = [r for r in rows if r.get("negative control")]
    assert result["equal"] and runs and controls
    assert all(r["equal"] for r in runs) and not any(r["equal"] for r in controls)
    assert {r["policy"] for r in runs} == {"projection", "network"}
    assert {(r["suite"], r["tasks"]) for r in runs} >= {("libero_spatial", 10), ("libero_object", 2)}
    assert {r["run"].split(",")[1].strip() for r in runs} == {"1 workers", "2 workers", "4 workers"}
    assert any("tuned" in r["run"] for r in runs)


@pytest.mark.libero
@pytest.mark.timeout(1800)
def test_a_sample_equals_openpis_loop_where_its_checkout_is_given(tmp_path):
    root = os.environ.get("FASTENV_OPENPI_ROOT")
    if not root or not (Path(root) / "examples" / "libero" / "main.py").is_file():
        pytest.skip("FASTENV_OPENPI_ROOT does not name a checkout of openpi (docs/eval.md says how to run this)")
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, "-m", "fastenv.conformance.eval", "--openpi", root, "--suite", "libero_spatial:1",
                          "--trials", "2", "--policies", "projection", "--settings", "1:1:0,2:0:0.05", "--out", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=1700)
    assert out.exists(), run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["equal"], [r["differences"] for r in result["rows"]]
    assert run.returncode == 0
