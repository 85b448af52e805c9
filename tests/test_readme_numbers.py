"""The README's figures are read off the committed JSON of the run its sentence names.

Each test finds a figure in README.md by the words around it and derives it again from the JSON
(rounded as the README rounds it), so a README that outlives a new run, or a JSON that changes
under an old sentence, fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _json(name: str) -> dict:
    return json.loads((ROOT / "results" / name).read_text())


def _said(pattern: str) -> re.Match:
    found = re.search(pattern, " ".join(README.split()))  # the README's lines joined: sentences wrap anywhere
    assert found is not None, f"the README no longer says {pattern!r}"
    return found


def test_the_headline_is_the_2core_ablations_last_row():
    results = _json("fastenv_bench_2core_avx512.json")["results"]
    said = _said(r"\*\*(\d+\.\d)x\*\* the stock env's throughput on a 2-core machine without GPU \((\d+\.\d) to (\d+\.\d) env-steps/s\)")
    assert float(said[1]) == round(max(r["speedup_vs_default"] for r in results), 1)
    assert (float(said[2]), float(said[3])) == (round(results[0]["env_steps_per_s"], 1), round(results[-1]["env_steps_per_s"], 1))
    vla = _json("fastenv_bench_2core_vla.json")["results"]
    assert float(_said(r"--policy-cost pi05-behavior`\), \*\*(\d+\.\d)x\*\*")[1]) == round(max(r["speedup_vs_default"] for r in vla), 1)


def test_the_rl_libraries_ratios_are_the_benchmarks_each_saying_what_it_compares():
    payload = _json("bench_rl_libraries.json")
    chunk = payload["config"]["chunk"]
    libraries = payload["config"]["libraries"]
    assert all(r["status"] == "ran" for r in payload["rows"]), "every row of the run the README quotes ran"
    three_rows = all("row" in r for r in payload["rows"])
    if three_rows:  # stock, fastenv-1 (the same data), fastenv-K (chunks)
        assert {(r["library"], r["row"]) for r in payload["rows"]} == {
            (lib, row) for lib in libraries for row in ("stock", "fastenv-1", f"fastenv-{chunk}")}
        chunks = [r["x_stock_chunks"] for r in payload["rows"] if r["row"] == f"fastenv-{chunk}"]
        same = [r["x_stock_same_data"] for r in payload["rows"] if r["row"] == "fastenv-1"]
        said = _said(r"\*\*(\d+\.\d)x to (\d+\.\d)x at the same data\*\*")
        assert (float(said[1]), float(said[2])) == (round(min(same), 1), round(max(same), 1))
    else:  # a run before the three rows: its fastenv row ran chunks of K, so its ratio is "with chunks of K" only
        chunks = [r["x_stock"] for r in payload["rows"] if r["side"] == "fastenv"]
        assert "at the same data**" not in README
    said = _said(rf"\*\*(\d+\.\d)x to (\d+\.\d)x with chunks of {chunk}\*\*")
    assert (float(said[1]), float(said[2])) == (round(min(chunks), 1), round(max(chunks), 1))
    assert len(libraries) == int(_said(r"on LIBERO, for each of the (\d+) libraries")[1])


def test_the_server_regimes_figures_are_its_runs():
    rows = _json("fastenv_bench_server_2core.json")["rows"]
    bound = [row["fastenv"]["x_bound"] for row in rows]
    assert all(row["fastenv"]["calibration_fault"] is None for row in rows), "a row above its bound is a fault, not a figure"
    said = _said(r"on 2 cores fastenv reaches (\d\.\d\d)-(\d\.\d\d) of the bound")
    assert (float(said[1]), float(said[2])) == (round(min(bound), 2), round(max(bound), 2))
    h200 = _json("fastenv_bench_server_h200.json")
    at_128 = next(row for row in h200["rows"] if row["num_envs"] == 128)
    rederived = next(row for row in h200["rederived"]["rows"] if row["num_envs"] == 128)
    said = _said(r"On one H200, 128 envs ran at (\d+) env-steps/s, (\d\.\d\d) of the bound")
    assert int(said[1]) == round(at_128["fastenv"]["env_steps_per_s"])
    assert float(said[2]) == round(rederived["x_bound"], 2)
