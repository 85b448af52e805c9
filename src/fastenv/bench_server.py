"""Moved to ``fastenv.bench.server`` (the regime), ``fastenv.bench.server_policy`` (its policy
process), ``fastenv.bench.placement``, ``fastenv.bench.same_data`` and ``fastenv.bench.report``
(``format_table`` is ``server_table`` there). This module warns and hands the names on for one release."""

from __future__ import annotations

import warnings
from typing import Any

from fastenv.bench import placement, report, same_data, server, server_policy

warnings.warn("fastenv.bench_server moved to fastenv.bench.server (and server_policy, placement, same_data, report); "
              "the old module goes in the next release", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    if name == "format_table":
        return report.server_table
    for module in (server, server_policy, placement, same_data):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module 'fastenv.bench_server' has no attribute {name!r}")
