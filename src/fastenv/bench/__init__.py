"""``fastenv bench``, the main job: how fast a LIBERO rollout is with each of fastenv's steps.

One concern a module:

- ``ablation``: the configurations one after another (Default, +Slim, ... +FastSubstep), ``run``;
- ``server``: many envs per policy, as on a GPU server, against the bound (``--regime server``),
  its ``run`` in three phases (``calibrate``, ``choose``, ``measure``); ``server_policy``: its
  policy process;
- ``envs``: the keys each regime keeps, episode lengths, a stock-like env stepping one action at a time;
- ``placement``: cores, pinning, the policy's device, memory;
- ``same_data``: each env's trajectory, recorded as arrays and compared with the reference's;
- ``clock``: how long a run has left, from what its parts measured;
- ``report``: the progress bar, the tables, the figure, where the JSON goes;
- ``policies``: the benchmark's torch policies (imported only where a run needs them).

``import fastenv.bench`` loads no torch; the ablation's entry points are here as before.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from fastenv.bench.ablation import (
    BenchConfig,
    Variant,
    estimate_seconds,
    reference_parts,
    run,
    summarize,
    variants,
)
from fastenv.bench.report import ablation_table as format_table
from fastenv.bench.report import output_file, plot

__all__ = ["BenchConfig", "Variant", "estimate_seconds", "format_table", "output_file", "plot", "reference_parts", "run", "summarize",
           "variants"]

# Names this module held before it was a package: where each lives now (they warn for one release).
_MOVED = {
    "Pinned": "fastenv.bench.placement", "cores": "fastenv.bench.placement",
    "stepwise_env": "fastenv.bench.envs", "IMAGE_KEY": "fastenv.bench.envs", "STATE_KEY": "fastenv.bench.envs",
    "SLIM_MODALITIES": "fastenv.bench.envs",
    "per_worker": "fastenv.bench.report", "renderer_line": "fastenv.bench.report",
    "VLACost": "fastenv.bench.ablation", "add_overlap": "fastenv.bench.ablation", "REFERENCE_MS_PER_ENV_STEP": "fastenv.bench.ablation",
}


def __getattr__(name: str) -> Any:
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module 'fastenv.bench' has no attribute {name!r}")
    warnings.warn(f"fastenv.bench.{name} moved to {home}.{name}; the old name goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(home), name)
