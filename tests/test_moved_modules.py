"""Public modules that moved: the old path warns, naming the new module, and hands on the same objects for one release."""

from __future__ import annotations

import importlib
import re
import sys

import pytest

# old path -> (new path, the public names the old module had)
MOVED = {
    "fastenv.tuning.server": ("fastenv.tuning.bound", (
        "TIE", "ServerCosts", "bound_spread", "calibration_fault", "choose_layout", "describe_layout", "env_cost", "fit_policy_cost",
        "model_costs", "server_space",
    )),
    "fastenv.eval.serving": ("fastenv.eval.lanes", (
        "BATCH_FRACTIONS", "BOUNDS", "RETUNE_AFTER_CALLS", "TIMEOUTS", "TUNE_AFTER_CALLS", "Lane", "choose_batching", "describe_choice",
        "fit_policy_seconds", "lane_workers", "share_of_cpus",
    )),
    "fastenv.eval.lerobot": ("fastenv.eval.lerobot_eval", (
        "CAMERAS", "CONTROL_FREQ", "DEFAULT_START_SEED", "DUMMY_ACTION", "LEROBOT_DEFAULT_MAX_STEPS", "LEROBOT_MAX_STEPS",
        "NUM_STEPS_WAIT", "RENDER_FPS", "STATE_KEYS", "LeRobotEpisode", "LeRobotLoop", "LeRobotPolicy", "LeRobotProtocol",
        "fastenv_episodes", "lerobot_element", "lerobot_episode_list", "per_sample",
    )),
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_warns_naming_its_new_home_and_hands_on_the_same_objects(old, monkeypatch):
    new, names = MOVED[old]
    home = importlib.import_module(new)
    # a fresh import of the old path, as a script's first one (the warning is said at import)
    monkeypatch.delitem(sys.modules, old, raising=False)
    parent, _, leaf = old.rpartition(".")
    monkeypatch.delattr(sys.modules[parent], leaf, raising=False)
    with pytest.warns(DeprecationWarning, match=rf"^{re.escape(old)} moved to {re.escape(new)};"):
        shim = importlib.import_module(old)
    assert sorted(shim.__all__) == sorted(names)
    for name in names:
        assert getattr(shim, name) is getattr(home, name), name


def test_the_eval_workers_import_lerobots_loop_from_its_new_module():
    # named in a string, imported by each worker: an import check over the source does not see it
    from fastenv.eval.worker import LOOPS

    assert LOOPS["lerobot"] == "fastenv.eval.lerobot_eval:LeRobotLoop"
    module, _, name = LOOPS["lerobot"].partition(":")
    assert hasattr(importlib.import_module(module), name)
