"""The main job, `fastenv bench`, end to end (quick) and its argument errors."""

import json
import subprocess
import sys

import pytest

from fastenv.cli import main


def test_impossible_layout_is_refused_before_building_anything(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "--num-envs", "3", "--workers", "2"])
    assert exit_info.value.code == 2
    assert "num_envs must be a multiple of num_workers * pipeline_stages" in capsys.readouterr().err


@pytest.mark.libero
def test_bench_quick_writes_table_json_and_chart(tmp_path):
    pytest.importorskip("torch", reason='fastenv bench needs pip install "fastenv[bench]"')
    out = subprocess.run(
        [sys.executable, "-m", "fastenv.cli", "bench", "--quick", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for name in ("Default", "+Slim", "+SkipObs (chunk 4)", "+Pipeline (2 stages)", "+Async (dynamic batching)"):
        assert name in out.stdout
    payload = json.loads((tmp_path / "fastenv_bench.json").read_text())
    rows = payload["results"]
    assert [r["config"].split(" ")[0] for r in rows] == ["Default", "+Slim", "+SkipObs", "+Pipeline", "+Async"]
    assert all(r["env_steps"] >= 32 and r["ms_per_env_step"] > 0 for r in rows)
    assert rows[0]["speedup_vs_default"] == 1.0
    assert (tmp_path / "fastenv_bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
