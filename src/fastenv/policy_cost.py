"""What a VLA's inference costs, as a wait: ``latency = a + b x batch`` per call, the CPU free meanwhile.

A vision-language-action model runs on an accelerator: while it computes a chunk of actions, the
CPU cores that step the simulators are free. ``InferenceCost`` models that: each policy call waits
``per_call_s + per_sample_s * batch`` seconds in ``time.sleep`` (no CPU spent), counting the time
the real (small) policy already took against it. It is what ``fastenv bench --policy-cost`` and
``fastenv tune --policy-cost`` put in the loop, so that pipeline stages and dynamic batching are
measured where they were designed to pay: a policy as slow as the envs.

Named presets come from published figures (docs/benchmarks.md cites each). The figures give a
chunk's latency at a batch of one; how it grows with the batch is not published, so each preset
splits it as a VLA-sized transformer measured on one H100 does
(``benchmarks/bench_vla_transformer.py``, ``results/bench_vla_transformer.json``: 2.2B parameters
in bf16, eager PyTorch, 92 ms + 3.8 ms x batch, so 96% per call and 4% per sample at batch 1):

- ``pi05-behavior``: pi0.5 / Comet (about 3B parameters) in the BEHAVIOR study that RLinf
  published, 0.4-0.5 s per chunk forward pass of 32 actions (12-16 ms per env step): 0.45 s at a
  batch of one. Its chunk: 32.
- ``pi05-rtx4090``: pi0.5 with Triton kernels and CUDA graphs on one RTX 4090, two camera views,
  29.2 ms per chunk (Dexmal's realtime-vla benchmark matrix). Its chunk: 50.
- ``pi0-eager``: pi0 in eager PyTorch, two views, "over 100 ms" per chunk before CUDA graphs (the
  same paper, "Running VLAs at Real-time Speed"): 0.1 s. Its chunk: 50.

``--policy-cost A,B`` sets any other cost (seconds per call, seconds per sample).

Examples:
    >>> cost = inference_cost("0.05,0.01")
    >>> round(cost.seconds(4), 3)
    0.09
    >>> inference_cost("pi05-behavior").chunk
    32
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class InferenceCost:
    """``per_call_s + per_sample_s * batch`` seconds per policy call, spent waiting (no CPU)."""

    per_call_s: float
    per_sample_s: float
    name: str = "custom"
    chunk: int | None = None  # the chunk the figure was measured at (None: any)
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("per_call_s", "per_sample_s"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"InferenceCost.{field} must be a number of seconds >= 0, got {value!r}")

    def seconds(self, batch: int) -> float:
        """The latency of one call over ``batch`` observations."""
        if batch < 1:
            raise ValueError(f"a policy call serves at least one env, got batch={batch}")
        return self.per_call_s + self.per_sample_s * batch

    def wait(self, batch: int, spent: float = 0.0) -> float:
        """Sleep what is left of ``seconds(batch)`` after ``spent`` seconds of real work; returns the sleep."""
        left = self.seconds(batch) - spent
        if left > 0:
            time.sleep(left)
        return max(left, 0.0)

    def per_env_step_ms(self, batch: int, chunk: int) -> float:
        """Milliseconds of policy per env step when every call serves ``batch`` envs a chunk of ``chunk``."""
        return 1000.0 * self.seconds(batch) / (batch * chunk)

    def describe(self) -> str:
        return f"{self.name}: {1000 * self.per_call_s:g} ms + {1000 * self.per_sample_s:g} ms x batch per call"


# The per-sample share of a call at batch 1, as measured for a VLA-sized transformer on an H100
# (results/bench_vla_transformer.json, chunk 32: 92.2 ms + 3.8 ms x batch).
PER_SAMPLE_SHARE = 0.04


def _split(total_s: float, name: str, chunk: int, source: str) -> InferenceCost:
    """A published latency at batch 1, split into per call and per sample as the measured shape."""
    return InferenceCost(round((1 - PER_SAMPLE_SHARE) * total_s, 6), round(PER_SAMPLE_SHARE * total_s, 6), name, chunk, source)


PRESETS: dict[str, InferenceCost] = {
    "pi05-behavior": _split(
        0.45, "pi05-behavior", 32,
        "RLinf, 'RLinf Brings a 25x System Optimization to BEHAVIOR' (rlinf.readthedocs.io, resources/blog/"
        "behavior_system_optimization): pi0.5 / Comet, 0.4-0.5 s per chunk forward pass of 32 actions",
    ),
    "pi05-rtx4090": _split(
        0.0292, "pi05-rtx4090", 50,
        "Dexmal, realtime-vla README benchmark matrix (github.com/Dexmal/realtime-vla): Pi05 Triton, RTX 4090, 2 views, 29.2 ms",
    ),
    "pi0-eager": _split(
        0.100, "pi0-eager", 50,
        "'Running VLAs at Real-time Speed' (Dexmal): pi0 with two views took over 100 ms before CUDA graphs",
    ),
}


def inference_cost(spec: str | InferenceCost | None) -> InferenceCost | None:
    """A preset's name, ``"A"`` or ``"A,B"`` (seconds per call, seconds per sample), an ``InferenceCost``, or None."""
    if spec is None or isinstance(spec, InferenceCost):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a policy cost is a preset name or 'A,B' in seconds, got {type(spec).__name__}")
    if spec in PRESETS:
        return PRESETS[spec]
    parts = spec.split(",")
    if len(parts) in (1, 2):
        try:
            a, b = float(parts[0]), float(parts[1]) if len(parts) == 2 else 0.0
        except ValueError:
            pass
        else:
            return InferenceCost(a, b, f"{a:g}s+{b:g}s*batch")
    raise ValueError(
        f"unknown policy cost {spec!r}: expected one of {sorted(PRESETS)}, 'A' or 'A,B' "
        "(seconds per call, seconds per sample in the batch), e.g. '0.05,0.4'"
    )
