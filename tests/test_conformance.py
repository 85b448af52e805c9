"""The conformance harness itself: exact comparison, sampling, the table (pure logic, no simulator)."""

import json

import numpy as np
import pytest

from fastenv import conformance
from fastenv.conformance import Case, Comparer, Mismatch, Skip


@pytest.mark.parametrize(
    "ours, stock, match",
    [
        (np.zeros(3, np.float32), np.zeros(3, np.float64), r"x: float32\[3\] != stock float64\[3\]"),
        (np.zeros(3), np.zeros(4), r"x: float64\[3\] != stock float64\[4\]"),
        (np.array([0.0, 1e-12, 2.0]), np.array([0.0, 0.0, 2.5]), r"x differs from stock: 2 of 3 entries differ, max \|diff\| 0.5"),
        ({"a": 1}, {"a": 1, "b": 2}, r"x: keys \['a'\] != stock \['a', 'b'\]"),
        ({"a": np.ones(2)}, {"a": np.zeros(2)}, r"x\[a\] differs"),
        (np.array([np.nan]), np.array([0.0]), "differs"),
        (np.array([1.0]), np.array([np.nan]), "differs"),
    ],
)
def test_any_difference_is_a_mismatch_that_says_where(ours, stock, match):
    with pytest.raises(Mismatch, match=match):
        Comparer().equal("x", ours, stock)


def test_equal_values_are_counted():
    cmp = Comparer()
    cmp.equal("x", {"a": np.ones((2, 3)), "b": np.int64(4)}, {"a": np.ones((2, 3)), "b": np.int64(4)})
    cmp.equal("y", np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))  # NaN where stock has NaN
    assert cmp.compared == 9


def test_samples_are_reproducible_and_change_with_the_seed():
    cases = [Case("x", f"t{i}", "k") for i in range(50)]
    a, b, c = (conformance.sample(cases, 5, seed) for seed in ("s1", "s1", "s2"))
    assert a == b and a != c and len(a) == 5
    assert conformance.sample(cases, None, "s") == cases and conformance.sample(cases, 80, "s") == cases


def test_cases_pass_fail_or_skip_and_the_table_counts_them(tmp_path):
    def check(case, cmp):
        if case.keys == "bad":
            cmp.equal("obs", np.ones(2), np.zeros(2))
        if case.keys == "skip":
            raise Skip("needs assets")
        cmp.equal("obs", np.ones(2), np.ones(2))

    cases = [Case("x", "t1", k, (("chunk", 4),)) for k in ("good", "bad", "skip")]
    outcomes = conformance.run_cases(cases, check, progress=False)
    assert [o.passed for o in outcomes] == [True, False, True]
    assert outcomes[1].difference.startswith("obs differs") and outcomes[2].skipped == "needs assets"
    path = tmp_path / "table.json"
    conformance.write_table(str(path), outcomes, command="fastenv conform x", seconds=1.0)
    table = json.loads(path.read_text())
    assert table["summary"]["total"] == {"cases": 3, "passed": 1, "failed": 1, "skipped": 1, "compared": 2}
    assert table["differences"][0]["case"]["id"] == "x:t1[bad](chunk=4)"


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match=r"unknown conformance backend 'mujoco'; available: \['libero', 'libero_rates', 'maniskill'\]"):
        conformance.select("mujoco")


def test_the_cli_refuses_bad_sampling_options_before_running_anything(capsys):
    from fastenv.cli import main

    with pytest.raises(SystemExit):
        main(["conform", "libero", "--sample-tasks", "0"])
    assert "--sample-tasks must be >= 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["conform", "libero", "--shard", "x"])
    assert "--shard takes I/N" in capsys.readouterr().err
