"""Moved to ``fastenv.tuning.bound``; this module warns and hands its names on for one release."""

from __future__ import annotations

import warnings

from fastenv.tuning.bound import (
    TIE,
    ServerCosts,
    bound_spread,
    calibration_fault,
    choose_layout,
    describe_layout,
    env_cost,
    fit_policy_cost,
    model_costs,
    server_space,
)

__all__ = [
    "TIE", "ServerCosts", "bound_spread", "calibration_fault", "choose_layout", "describe_layout", "env_cost", "fit_policy_cost",
    "model_costs", "server_space",
]

warnings.warn("fastenv.tuning.server moved to fastenv.tuning.bound; the old module goes in the next release", DeprecationWarning, stacklevel=2)
