"""Moved to ``fastenv.eval.lanes``; this module warns and hands its names on for one release."""

from __future__ import annotations

import warnings

from fastenv.eval.lanes import (
    BATCH_FRACTIONS,
    BOUNDS,
    RETUNE_AFTER_CALLS,
    TIMEOUTS,
    TUNE_AFTER_CALLS,
    Lane,
    choose_batching,
    describe_choice,
    fit_policy_seconds,
    lane_workers,
    share_of_cpus,
)

__all__ = [
    "BATCH_FRACTIONS", "BOUNDS", "RETUNE_AFTER_CALLS", "TIMEOUTS", "TUNE_AFTER_CALLS", "Lane", "choose_batching", "describe_choice",
    "fit_policy_seconds", "lane_workers", "share_of_cpus",
]

warnings.warn("fastenv.eval.serving moved to fastenv.eval.lanes; the old module goes in the next release", DeprecationWarning, stacklevel=2)
