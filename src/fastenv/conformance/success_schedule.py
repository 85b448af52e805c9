"""LIBERO's success check on a schedule, for comparing envs over short runs of random actions.

Random actions almost never succeed in a few dozen steps, so a comparison of two env stacks
would never see an episode end by success. With the schedule on, every LIBERO ``ControlEnv``
built from then on (in this process and in every process started after, through
``sitecustomize`` on ``PYTHONPATH``) succeeds at steps set by its robot's state: both stacks
alike, and wherever their states differ, at other steps.
"""

from __future__ import annotations

import importlib.util
import os
import sys

HOOK = os.path.join(os.path.dirname(__file__), "_success_hook")
VARIABLE = "FASTENV_SUCCESS_SCHEDULE"


def enable() -> None:
    """Turn the schedule on here and in every process started from now on."""
    os.environ[VARIABLE] = "1"
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if HOOK not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([HOOK, *paths])
    if "fastenv_success_hook" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fastenv_success_hook", os.path.join(HOOK, "sitecustomize.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules["fastenv_success_hook"] = module
        spec.loader.exec_module(module)
        loaded = sys.modules.get(module.TARGET)
        if loaded is not None:  # LIBERO imported already: patch it now
            module._patch(loaded)
