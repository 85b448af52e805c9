"""Layout plans a vector env runs: a layout (``Candidate``) and, once chosen, the evidence for it
(``Plan``), saved as JSON. ``fastenv.tuning`` makes them; the vector env only reads them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLAN_FORMAT = 1
DEFAULT_SPIN_WAIT = 2e-4


@dataclass(frozen=True)
class Candidate:
    """One layout of N envs: W workers, S stages or dynamic batching (B, T), threads per worker."""

    num_workers: int
    pipeline_stages: int = 1
    max_batch: int | None = None  # dynamic batching when set (then pipeline_stages is 1)
    timeout: float | None = None
    threads_per_worker: int = 1

    @property
    def mode(self) -> str:
        """"step" (all envs at once), "pipeline" (S stages) or "dynamic" (batching as envs get ready)."""
        if self.max_batch is not None:
            return "dynamic"
        return "pipeline" if self.pipeline_stages > 1 else "step"

    @property
    def label(self) -> str:
        if self.mode == "dynamic":
            how = f"dynamic B={self.max_batch} T={self.timeout * 1000:g}ms"
        elif self.mode == "pipeline":
            how = f"{self.pipeline_stages} stages"
        else:
            how = "step"
        return f"W={self.num_workers} {how} threads={self.threads_per_worker}"


@dataclass
class Plan:
    """A chosen layout and the evidence for it; ``PipelineVectorEnv(..., layout=plan)`` runs it."""

    num_envs: int
    num_workers: int
    pipeline_stages: int = 1
    max_batch: int | None = None
    timeout: float | None = None
    threads_per_worker: int = 1
    spin_wait: float = DEFAULT_SPIN_WAIT
    steps_per_s: float | None = None  # measured, env calls (vector-env transitions) per second
    default_steps_per_s: float | None = None
    default_layout: str | None = None
    bound: str | None = None
    reason: str | None = None
    machine: dict[str, Any] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    trials: list[dict[str, Any]] = field(default_factory=list)
    tune_seconds: float | None = None

    @property
    def candidate(self) -> Candidate:
        return Candidate(self.num_workers, self.pipeline_stages, self.max_batch, self.timeout, self.threads_per_worker)

    @property
    def mode(self) -> str:
        return self.candidate.mode

    def vector_options(self) -> dict[str, Any]:
        """The ``PipelineVectorEnv`` options this plan sets."""
        return {
            "num_workers": self.num_workers,
            "pipeline_stages": self.pipeline_stages,
            "threads_per_worker": self.threads_per_worker,
            "spin_wait": self.spin_wait,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"fastenv_plan": PLAN_FORMAT, **dataclasses.asdict(self)}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2))
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        if data.get("fastenv_plan") != PLAN_FORMAT:
            raise ValueError(f"not a fastenv layout plan (format {PLAN_FORMAT}): {str(data)[:200]}")
        names = {f.name for f in dataclasses.fields(cls)}
        plan = cls(**{k: v for k, v in data.items() if k in names})
        Candidate(plan.num_workers, plan.pipeline_stages, plan.max_batch, plan.timeout, plan.threads_per_worker)
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"no layout plan at {path}: write one with `fastenv tune ... --out {path}`") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a JSON layout plan: {exc}") from None
        return cls.from_dict(data)

    def summary(self) -> str:
        lines = [f"plan: {self.candidate.label} (spin_wait={self.spin_wait:g}s)"]
        if self.steps_per_s is not None:
            lines.append(f"measured: {self.steps_per_s:.1f} steps/s")
        if self.default_steps_per_s:
            ratio = self.steps_per_s / self.default_steps_per_s if self.steps_per_s else float("nan")
            lines.append(f"default layout ({self.default_layout}): {self.default_steps_per_s:.1f} steps/s -> {ratio:.2f}x")
        if self.reason:
            lines.append(f"why: {self.reason}")
        return "\n".join(lines)


def resolve_layout(layout: Any) -> Plan:
    """A ``Plan`` from a plan, a dict of one, or a path to its JSON ("auto" is resolved by the caller)."""
    if isinstance(layout, Plan):
        return layout
    if isinstance(layout, dict):
        return Plan.from_dict(layout)
    if isinstance(layout, (str, Path)):
        return Plan.load(layout)
    raise TypeError(f"layout must be 'auto', a fastenv.tuning.Plan, a dict or a path to a plan's JSON; got {layout!r}")


def read_plan(layout: Any, num_envs: int) -> Plan:
    """The plan ``layout`` (a plan, its dict or its JSON's path) names, checked to be for ``num_envs`` envs.

    Examples:
        >>> plan = read_plan("plan.json", 8)
    """
    plan = resolve_layout(layout)
    if plan.num_envs != num_envs:
        raise ValueError(f"the layout plan is for num_envs={plan.num_envs}, got {num_envs} env constructors")
    return plan
