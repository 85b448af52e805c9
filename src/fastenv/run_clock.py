"""Moved to ``fastenv.bench.clock``; this module warns and hands its names on for one release."""

from __future__ import annotations

import warnings

from fastenv.bench.clock import LIVE_FROM, Part, RunClock

__all__ = ["LIVE_FROM", "Part", "RunClock"]

warnings.warn("fastenv.run_clock moved to fastenv.bench.clock; the old module goes in the next release", DeprecationWarning, stacklevel=2)
