"""A seeded sample of the ManiSkill conformance sweep (``fastenv.conformance.maniskill``) on the real simulator.

The sample's seed is ``FASTENV_CONFORM_SEED`` if set, else the current git commit (each commit
checks other cases), else a constant; ``FASTENV_CONFORM_CASES`` sets how many cases (default 4).
The full sweep's table is ``results/conformance_maniskill.json``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("torch", "the ManiSkill backend needs it")
need("mani_skill")

from fastenv.conformance import Case, run_cases, sample, sample_seed  # noqa: E402
from fastenv.conformance import maniskill as conform  # noqa: E402

pytestmark = pytest.mark.maniskill

def test_a_seeded_sample_of_the_sweep_passes():
    seed = sample_seed()
    count = int(os.environ.get("FASTENV_CONFORM_CASES", "4"))
    chosen = sample(conform.cases(), count, seed)
    outcomes = run_cases(chosen, conform.check, progress=False)
    report = "\n".join(
        f"{o.case.id}: {'skipped: ' + o.skipped if o.skipped else ('passed' if o.passed else 'DIFFERS: ' + str(o.difference))} "
        f"({o.compared} values, {o.seconds} s)"
        for o in outcomes
    )
    print(f"sample seed {seed!r}:\n{report}")
    assert len(outcomes) == min(count, len(conform.cases()))
    for o in outcomes:
        assert o.passed, f"{o.case.id} differs from stock ManiSkill (sample seed {seed!r}): {o.difference}"
        if o.skipped is not None:
            assert o.skipped.strip(), f"{o.case.id} was skipped without a reason"
        else:
            assert o.compared > 0, f"{o.case.id} compared nothing"


def test_a_case_that_runs_compares_every_chunk_and_crosses_an_episode_end():
    # A fixed case, so every run compares at least one case whatever the sample drew.
    case = Case("maniskill", "PushCube-v1", "state", (("chunk", conform.CHUNK),))
    [outcome] = run_cases([case], conform.check, progress=False)
    assert outcome.passed and outcome.skipped is None, outcome.difference
    # 2 episodes of EPISODE=6 sub-steps in chunks of 4: 4 chunks (the 2nd and 4th end their episode)
    assert outcome.compared > 500


def test_a_multi_robot_task_steps_its_dict_actions_as_stock_does():
    # Two robots, a Dict of actions: fastenv's adapter used to turn it into an object array.
    case = Case("maniskill", "TwoRobotStackCube-v1", "state", (("chunk", 1),))
    [outcome] = run_cases([case], conform.check, progress=False)
    assert outcome.passed and outcome.skipped is None, outcome.difference
    assert outcome.compared > 500


def test_cases_cover_the_registry_and_refuse_unknown_tasks():
    from fastenv.backends.maniskill import maniskill_registry

    every = conform.cases()
    tasks = {c.task for c in every}
    assert tasks == set(maniskill_registry())
    assert {c.keys for c in every} == {"state", "rgb"}
    assert {c.option("chunk") for c in every} == {1, conform.CHUNK}
    assert [c for c in every if c.option("envs")]  # a few vector-env cases
    assert len({c.id for c in every}) == len(every)
    assert [c.id for c in conform.cases(["PickCube-v1"])][:2] == [
        "maniskill:PickCube-v1[state](chunk=1)", "maniskill:PickCube-v1[state](chunk=4)",
    ]
    with pytest.raises(ValueError, match=r"unknown ManiSkill task\(s\) \['PickCub-v1'\]"):
        conform.cases(["PickCub-v1"])
    with pytest.raises(ValueError, match="a list of ManiSkill task ids, got the string"):
        conform.cases("PickCube-v1")
    with pytest.raises(ValueError, match="not a ManiSkill case"):
        conform.check(Case("libero", "libero_90/1", "stock"), None)


def test_a_task_needing_a_download_is_skipped_with_the_reason():
    [outcome] = run_cases([Case("maniskill", "PickSingleYCB-v1", "state", (("chunk", 1),))], conform.check, progress=False)
    assert outcome.skipped is not None and "needs assets that are not downloaded (ycb)" in outcome.skipped


def test_importing_the_module_does_not_import_maniskill():
    code = "import sys, fastenv.conformance.maniskill; assert 'mani_skill' not in sys.modules and 'sapien' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
