"""``fastenv.tune``: find the layout with the highest throughput for an env, a policy and a machine.

A layout is how a ``PipelineVectorEnv`` runs N envs: worker processes W (so N/W envs per worker),
pipeline stages S, dynamic batching (``max_batch`` B, ``timeout`` T) or none, native threads per
worker. Which one is best shifts with the env's cost, the policy's cost, the chunk length, N and
the cores, so it is measured, not guessed, but not over an exhaustive grid:

1. **Calibrate.** Build the default layout with the profiler on, run it briefly, and read the
   env's cost per call (stepping and resets apart, wall and CPU seconds) and the transport's cost
   per command; time the policy alone on batches of 1 and N observations.
2. **Model.** Predict every layout's throughput from those costs (``CostModel``): a cycle (every
   env one call) takes at least the policy's serial time, each worker's serial env time, one
   stage's chain of policy then step, and the CPU work over the cores; synchronous stages also wait
   for their slowest worker's resets, which dynamic batching does not.
3. **Measure.** Run the best predicted layout of each family (synchronous, pipelined, dynamically
   batched), then the next best overall, grouped so the workers are rebuilt as rarely as possible.
   The plan is the best *measured* layout, so the model only has to rank, not to be exact.

The result is a ``Plan``: the layout, its measured throughput and the default layout's, what
bounds it (``bound``) and why, and every trial; it saves to JSON, and
``PipelineVectorEnv(..., layout=plan)`` or ``gym.make_vec(..., layout="plan.json")`` runs it.

A concern per module: ``space`` (the layouts), ``model`` (their predicted throughput), ``trials``
(measuring a layout on live workers), ``search`` (``tune``, ``grid``, and ``plan_for``: the plan for
a vector env's ``layout`` argument), ``bound`` (a policy server's rollout: the most any layout can
do, and the layout that comes closest). Plans and their JSON are ``fastenv.vector.plan``'s: the vector
env reads them.

The vector env runs plans and does not import this package: ``plan_for`` is its default layout
resolver, named and imported only when ``layout="auto"`` is to be tuned (another may be passed as
``layout_resolver=``).

Examples:
    >>> plan = fastenv.tune(lambda: gym.make("CartPole-v1"), num_envs=8)
    >>> plan.save("plan.json")
    >>> envs = gym.make_vec("fastenv/Libero-v0", num_envs=8, layout="plan.json", chunk=8)
"""

from __future__ import annotations

from fastenv.tuning.model import (
    BOUNDS,
    CostModel,
    Costs,
    Prediction,
    expected_max_binomial,
)
from fastenv.tuning.search import (
    TIE,
    choose_trials,
    costs_from_calibration,
    grid,
    plan_for,
    refinement,
    tune,
)
from fastenv.tuning.space import Candidate, default_candidate, divisors, search_space
from fastenv.tuning.trials import (
    CostPolicy,
    Trial,
    TrialRunner,
    drive,
    measure_policy,
    spin_wait_for,
)
from fastenv.vector.plan import DEFAULT_SPIN_WAIT, PLAN_FORMAT, Plan, resolve_layout

__all__ = [
    "BOUNDS",
    "DEFAULT_SPIN_WAIT",
    "PLAN_FORMAT",
    "TIE",
    "Candidate",
    "CostModel",
    "CostPolicy",
    "Costs",
    "Plan",
    "Prediction",
    "Trial",
    "TrialRunner",
    "choose_trials",
    "costs_from_calibration",
    "default_candidate",
    "divisors",
    "drive",
    "expected_max_binomial",
    "grid",
    "measure_policy",
    "plan_for",
    "refinement",
    "resolve_layout",
    "search_space",
    "spin_wait_for",
    "tune",
]
