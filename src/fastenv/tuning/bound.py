"""A policy server's rollout: what bounds it, and the layout that comes closest.

On a GPU server one policy process serves many envs: each call over a batch of ``B`` observations
takes ``P(B) = a + b x B`` seconds (``a`` the fixed cost of a call: kernel launches, the vision
tower's and the backbone's passes over a small batch; ``b`` what each observation adds), and each
env step costs the env side ``c`` CPU seconds (the control loop, physics, reward, a render). With
chunks of ``K`` actions and ``C`` cores for the envs, no layout of ``N`` envs does better than

    bound(N) = min(N K / P(N), C / c)      env steps per second

(the policy serving all N envs in one call, back to back; or every core stepping all the time).
That bound assumes the two overlap perfectly. In a closed loop they cannot quite: an env waits
for its own actions before it steps, so while the policy serves a batch, that batch's envs idle.
With all N envs in one call (one stage) nothing overlaps the call; with the envs split into S
groups the policy pays ``a`` S times per cycle. The best any layout can do is then

    closed_loop(N) = N K / min over S of cycle(S),
    cycle(1) = P(N) + E(N),  cycle(S) = max(S a + N b,  P(N/S) + E(N/S),  N K c / C),
    E(m) = max(K c_wall, m K c / C)     (m envs' chunks stepped over C cores)

``ServerCosts`` holds the measured ``a``, ``b``, ``c``, ``C`` and ``K`` and computes both, and
Default's rate (one process per env, the policy on the whole batch, nothing overlapped).
``choose_layout`` picks workers, stages or batching for N envs with ``fastenv tune``'s cost model
(``CostModel``) from those same measured costs.

Examples:
    >>> costs = ServerCosts(policy_fixed_s=0.096, policy_per_env_s=0.004, env_cpu_s=0.009, cores=15, chunk=8)
    >>> round(costs.bound(16))
    800
    >>> costs.limit(128)
    'envs'
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastenv._validation import check_positive_int
from fastenv.tuning.model import CostModel, Costs, Prediction, effective_max_batch
from fastenv.tuning.space import divisors, search_space
from fastenv.vector.plan import Candidate

__all__ = [
    "TIE", "ServerCosts", "bound_spread", "calibration_fault", "choose_layout", "describe_layout", "env_cost", "fit_policy_cost",
    "model_costs", "server_space",
]


def _seconds(name: str, value: Any, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number of seconds {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ServerCosts:
    """Measured costs of a policy server's rollout (all seconds).

    Args:
        policy_fixed_s: ``a``, the policy's seconds per call.
        policy_per_env_s: ``b``, its seconds per observation in the call.
        env_cpu_s: ``c``, the env side's CPU seconds per env step (sub-step), resets amortized.
        cores: ``C``, the cores the envs run on.
        chunk: ``K``, env steps per policy action.
        env_wall_s: one env step's wall seconds on a core of its own (a chunk's latency is K of
            them); default ``env_cpu_s``.
    """

    policy_fixed_s: float
    policy_per_env_s: float
    env_cpu_s: float
    cores: int
    chunk: int
    env_wall_s: float | None = None

    def __post_init__(self) -> None:
        _seconds("policy_fixed_s", self.policy_fixed_s)
        _seconds("policy_per_env_s", self.policy_per_env_s)
        _seconds("env_cpu_s", self.env_cpu_s, positive=True)
        if self.env_wall_s is not None:
            _seconds("env_wall_s", self.env_wall_s, positive=True)
        check_positive_int("cores", self.cores)
        check_positive_int("chunk", self.chunk)
        if self.policy_fixed_s == 0 and self.policy_per_env_s == 0:
            raise ValueError("a policy that costs nothing has no bound of its own: give policy_fixed_s or policy_per_env_s > 0")

    @property
    def wall_s(self) -> float:
        return self.env_cpu_s if self.env_wall_s is None else max(self.env_wall_s, self.env_cpu_s)

    def policy_seconds(self, batch: float) -> float:
        """``P(B) = a + b x B``."""
        return self.policy_fixed_s + self.policy_per_env_s * batch

    def policy_bound(self, num_envs: int) -> float:
        """``N K / P(N)``: env steps per second with the policy serving all N envs per call, back to back."""
        return num_envs * self.chunk / self.policy_seconds(num_envs)

    def env_bound(self) -> float:
        """``C / c``: env steps per second with every env core stepping all the time."""
        return self.cores / self.env_cpu_s

    def bound(self, num_envs: int) -> float:
        """``min(N K / P(N), C / c)``: no layout of N envs does better."""
        return min(self.policy_bound(num_envs), self.env_bound())

    def limit(self, num_envs: int) -> str:
        """Which term sets ``bound(N)``: "policy" or "envs"."""
        return "policy" if self.policy_bound(num_envs) <= self.env_bound() else "envs"

    def _stepping(self, envs: float) -> float:
        """Seconds to step one chunk of ``envs`` envs over the cores (at least one chunk's latency)."""
        return max(self.chunk * self.wall_s, envs * self.chunk * self.env_cpu_s / self.cores)

    def cycle(self, num_envs: int, stages: int) -> float:
        """Seconds for every one of N envs to get and step one chunk with S equal groups (the model above)."""
        if stages == 1:
            return self.policy_seconds(num_envs) + self._stepping(num_envs)
        m = num_envs / stages
        return max(stages * self.policy_fixed_s + num_envs * self.policy_per_env_s,
                   self.policy_seconds(m) + self._stepping(m),
                   num_envs * self.chunk * self.env_cpu_s / self.cores)

    def closed_loop(self, num_envs: int) -> tuple[float, int]:
        """(env steps per second, S): the best of the closed loop over S equal groups, S a divisor of N."""
        best = min(divisors(num_envs), key=lambda s: (self.cycle(num_envs, s), s))
        return num_envs * self.chunk / self.cycle(num_envs, best), best

    def default_rate(self, num_envs: int, env_cpu_s: float | None = None) -> float:
        """Default's env steps per second, nothing overlapped: ``N K / (P(N) + max(K c', N K c' / C))``,
        which is ``1 / (P(N) / (N K) + c' / C)`` once N >= C (``c'``: Default's own env cost per
        step, each env a process on a core of its own; default: these costs' env side)."""
        if env_cpu_s is None:
            c, wall = self.env_cpu_s, self.wall_s
        else:
            c = wall = _seconds("env_cpu_s", env_cpu_s, positive=True)
        stepping = max(self.chunk * wall, num_envs * self.chunk * c / self.cores)
        return num_envs * self.chunk / (self.policy_seconds(num_envs) + stepping)

    def describe(self, num_envs: int) -> dict[str, Any]:
        """The bound's inputs and terms for N envs, as the bench's JSON records them."""
        closed, stages = self.closed_loop(num_envs)
        return {
            "formula": "bound = min(N K / P(N), C / c), P(B) = a + b B",
            "inputs": {"a_s": self.policy_fixed_s, "b_s": self.policy_per_env_s, "c_s": self.env_cpu_s,
                       "c_wall_s": self.wall_s, "C": self.cores, "K": self.chunk, "N": num_envs},
            "policy_term": self.policy_bound(num_envs),
            "env_term": self.env_bound(),
            "bound": self.bound(num_envs),
            "limit": self.limit(num_envs),
            "closed_loop": closed,
            "closed_loop_stages": stages,
            "closed_loop_share_of_bound": closed / self.bound(num_envs),
        }


def env_cost(windows: Sequence[dict[str, float]], episode_steps: float, reset_cpu_s: float, reset_wall_s: float = 0.0, *,
             timed: dict[str, float] | None = None) -> dict[str, Any]:
    """``c`` (and its wall-clock twin) with its spread over calibration windows.

    Each window, and ``timed`` (the row's own timed window), holds its ``env_steps`` and the seconds
    its envs spent stepping them, resets left out (``step_cpu_total_s``, ``step_wall_total_s``); a
    reset's seconds are added once per ``episode_steps`` (the rows' mean episode length), so a
    window that happened to hold a reset or none counts the same. ``c_s`` is ``timed``'s where it
    is given, else the median window's; ``spread`` is how far the windows differ, max / min - 1.

    Examples:
        >>> windows = [{"env_steps": 32, "step_cpu_total_s": s, "step_wall_total_s": s} for s in (0.96, 1.00, 0.98)]
        >>> cost = env_cost(windows, episode_steps=160, reset_cpu_s=0.16)
        >>> round(cost["c_s"], 5), round(cost["spread"], 3)
        (0.03163, 0.04)
        >>> round(env_cost(windows, 160, 0.16, timed={"env_steps": 640, "step_cpu_total_s": 19.2, "step_wall_total_s": 19.2})["c_s"], 5)
        0.031
    """
    if not windows:
        raise ValueError("env_cost needs one calibration window or more, got none")
    if not episode_steps > 0:
        raise ValueError(f"episode_steps must be > 0, got {episode_steps!r}")

    def per_step(w: dict[str, float]) -> tuple[float, float]:
        if not w["env_steps"] > 0:
            raise ValueError(f"a calibration window stepped no env step: {w}")
        return (w["step_cpu_total_s"] / w["env_steps"] + reset_cpu_s / episode_steps,
                w["step_wall_total_s"] / w["env_steps"] + reset_wall_s / episode_steps)

    per_window = [per_step(w) for w in windows]
    cpu = [c for c, _ in per_window]
    median = (float(np.median(cpu)), float(np.median([w for _, w in per_window])))
    c, c_wall = per_step(timed) if timed is not None else median
    return {"c_s": c, "c_wall_s": c_wall, "c_from": "the timed window" if timed is not None else "the median window",
            "c_windows_s": cpu, "c_median_s": median[0], "c_min_s": min(cpu), "c_max_s": max(cpu), "spread": max(cpu) / min(cpu) - 1.0,
            "reset_cpu_s": reset_cpu_s, "reset_wall_s": reset_wall_s, "episode_steps": episode_steps}


def bound_spread(costs: ServerCosts, num_envs: int, c_spread: float, policy_spread: float) -> float:
    """The bound's relative spread: its calibration's spread on the term that sets it (``limit``)."""
    return c_spread if costs.limit(num_envs) == "envs" else policy_spread


def calibration_fault(rate: float, costs: ServerCosts, num_envs: int, spread: float, *, env_cpu_s: float | None = None,
                      policy_s: float | None = None) -> str | None:
    """Why a row that ran at ``rate`` env steps per second cannot be a result, or None where it can.

    No layout beats the bound, so a row above it by more than its calibration's ``spread`` says the
    calibration was wrong, not the row right. ``env_cpu_s`` (the row's own env CPU seconds per env
    step) and ``policy_s`` (its policy's seconds per call of all N envs) name which input was off.

    Examples:
        >>> costs = ServerCosts(policy_fixed_s=0.096, policy_per_env_s=0.004, env_cpu_s=0.0305, cores=1, chunk=8)
        >>> calibration_fault(31.0, costs, 4, spread=0.05) is None   # 0.95 of the bound
        True
        >>> calibration_fault(40.5, costs, 4, spread=0.05, env_cpu_s=0.0232)[:38]
        'calibration fault: 1.24x the bound, ab'
    """
    bound = costs.bound(num_envs)
    if rate <= bound * (1.0 + spread):
        return None
    limit = costs.limit(num_envs)
    why = (f"calibration fault: {rate / bound:.2f}x the bound, above the {1 + spread:.2f}x its calibration's spread allows: "
           "no layout beats the bound, so its inputs were measured otherwise than the row ran")
    if limit == "envs":
        why += f" (c = {1000 * costs.env_cpu_s:.1f} ms of CPU per env step"
        why += f", the row's envs spent {1000 * env_cpu_s:.1f} ms)" if env_cpu_s is not None else ")"
    else:
        why += f" (P(N) = {1000 * costs.policy_seconds(num_envs):.1f} ms a call of all N envs"
        why += f", the row's calls {1000 * policy_s:.1f} ms)" if policy_s is not None else ")"
    return why


def fit_policy_cost(batches: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """``(a, b)`` of ``P(B) = a + b x B`` by least squares over measured calls, each >= 0.

    With a single batch size measured, ``b`` is 0 and ``a`` the median.

    Examples:
        >>> fit_policy_cost([1, 2, 4], [0.11, 0.12, 0.14])
        (0.1, 0.01)
    """
    x, y = np.asarray(batches, float), np.asarray(seconds, float)
    if x.shape != y.shape or x.size == 0:
        raise ValueError(f"need as many batch sizes as call times, at least one; got {x.size} and {y.size}")
    if np.ptp(x) == 0:
        return float(np.median(y)), 0.0
    b, a = np.polyfit(x, y, 1)
    if a < 0:  # the line through the origin instead
        return 0.0, round(float(np.dot(x, y) / np.dot(x, x)), 12)
    if b < 0:
        return float(np.median(y)), 0.0
    return round(float(a), 12), round(float(b), 12)


def model_costs(costs: ServerCosts, *, reset_rate: float = 0.0, reset_s: float = 0.0, command_s: float = 2e-4) -> Costs:
    """``fastenv tune``'s ``Costs`` for a policy server: env calls of a whole chunk, the policy on
    its own core (it takes no env core's time), ``command_s`` per transport command."""
    k = costs.chunk
    return Costs(step_wall=k * costs.wall_s, step_cpu=k * costs.env_cpu_s, reset_wall=reset_s, reset_cpu=reset_s, reset_rate=reset_rate,
                 policy_wall=(costs.policy_fixed_s, costs.policy_per_env_s), policy_cpu=(0.0, 0.0), command=command_s, cpus=costs.cores)


def server_space(num_envs: int, cores: int, *, max_workers: int | None = None, max_stages: int = 8,
                 timeouts: Sequence[float] = (0.002, 0.01, 0.05)) -> list[Candidate]:
    """The layouts ``choose_layout`` considers: ``search_space`` with one thread per worker, at most
    ``max_workers`` workers (default: N, up to 2 per core)."""
    limit = min(num_envs, 2 * cores) if max_workers is None else check_positive_int("max_workers", max_workers)
    return [c for c in search_space(num_envs, cores, max_workers=limit, max_stages=max_stages, timeouts=timeouts) if c.threads_per_worker == 1]


# Predictions closer than this are a tie, won by the layout with fewer policy calls per cycle (whole
# batches pay the fixed cost least often), then the fewer workers.
TIE = 0.02


def choose_layout(costs: ServerCosts, num_envs: int, *, space: Sequence[Candidate] | None = None,
                  reset_rate: float = 0.0, reset_s: float = 0.0, command_s: float = 2e-4) -> tuple[Candidate, Prediction]:
    """The layout for N envs that ``fastenv tune``'s model predicts fastest from ``costs``, and its prediction.

    Examples:
        >>> policy_bound = ServerCosts(policy_fixed_s=0.1, policy_per_env_s=0.001, env_cpu_s=0.0005, cores=15, chunk=8)
        >>> choose_layout(policy_bound, 16)[0].mode     # the fixed cost dominates: all envs in each call
        'step'
    """
    n = check_positive_int("num_envs", num_envs)
    space = list(space) if space is not None else server_space(n, costs.cores)
    if not space:
        raise ValueError(f"no layout to choose from for num_envs={n}")
    model = CostModel(model_costs(costs, reset_rate=reset_rate, reset_s=reset_s, command_s=command_s))
    predicted = {c: model.predict(c, n) for c in space}
    top = max(p.steps_per_s for p in predicted.values())

    def calls(c: Candidate) -> float:  # policy calls per cycle
        return c.pipeline_stages if c.max_batch is None else n / effective_max_batch(c.max_batch, n)

    def key(c: Candidate) -> tuple:
        tied = predicted[c].steps_per_s >= top * (1 - TIE)
        return (not tied, calls(c) if tied else -predicted[c].steps_per_s, c.max_batch is not None, c.num_workers, c.timeout or 0.0)

    best = min(space, key=key)
    return best, predicted[best]


def describe_layout(cand: Candidate, prediction: Prediction, num_envs: int, chunk: int) -> dict[str, Any]:
    """The chosen layout as the bench's JSON records it (the model's cycle: every env one chunk)."""
    return {**dataclasses.asdict(cand), "mode": cand.mode, "label": cand.label, "envs_per_worker": num_envs // cand.num_workers,
            "predicted_env_steps_per_s": prediction.steps_per_s * chunk, "model_bound": prediction.bound,
            "model_terms_s": prediction.terms}
