"""A seeded sample of the LIBERO conformance sweep (``fastenv conform libero`` runs all of it).

The sample's seed is ``FASTENV_CONFORM_SEED`` or the commit: each commit checks other tasks, key
sets and modes, and a failure names the seed that replays it.
"""

import os

import pytest

from fastenv import conformance

pytestmark = pytest.mark.libero


# Cases of the sampled task: 8, and 4 in CI (the sample changes with the commit; `fastenv conform
# libero --jobs 2` runs the whole sweep).
CASES = 4 if os.environ.get("CI") else 8


def test_a_sample_of_the_sweep_equals_the_stock_env():
    seed = conformance.sample_seed()
    module, tasks = conformance.select("libero", sample_tasks=1, seed=seed)
    outcomes = conformance.sweep(module, tasks, cases_per_task=CASES, seed=seed, progress=False)
    failed = [f"{o.case.id}: {o.difference}" for o in outcomes if not o.passed]
    assert not failed, f"FASTENV_CONFORM_SEED={seed} differs from stock:\n" + "\n".join(failed)
    assert len(outcomes) == CASES and all(o.skipped is None for o in outcomes)
    assert all(o.compared > 0 for o in outcomes)


def test_the_sweep_sees_a_pruned_key_that_differs(monkeypatch):
    # The check must be able to fail: with the sensor dependencies dropped, a relative object pose
    # kept alone falls back to the world frame, and the sweep says where.
    import fastenv.backends.libero.adapter as adapter
    from fastenv.conformance import libero

    monkeypatch.setattr(adapter, "closure", lambda names, deps: set(names))
    task = "libero_10/0"
    cases = [c for c in libero.cases([task]) if c.keys == "alphabet_soup_1_to_robot0_eef_pos"]
    try:
        [outcome] = conformance.run_cases(cases, libero.check, progress=False)
    finally:
        libero.close()
    assert not outcome.passed
    assert "episode 1: first observation[alphabet_soup_1_to_robot0_eef_pos] differs from stock" in outcome.difference
