"""The cost model: a layout's throughput predicted from the costs the calibration measured."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fastenv.tuning.space import Candidate


@dataclass
class Costs:
    """What a layout's throughput is predicted from, measured by the calibration.

    Env seconds are per env call (one ``step``: a whole chunk for chunked envs), as one worker
    runs it alone on a core; resets apart (their rate per env call). Policy seconds are
    ``fixed + per_obs * batch``. ``command`` is the transport's cost per command message
    (sending, waking the worker, replying, handling the reply).
    """

    step_wall: float
    step_cpu: float
    reset_wall: float = 0.0
    reset_cpu: float = 0.0
    reset_rate: float = 0.0
    policy_wall: tuple[float, float] = (0.0, 0.0)
    policy_cpu: tuple[float, float] = (0.0, 0.0)
    command: float = 0.0
    cpus: int = 1
    worker_memory: dict[int, float] = field(default_factory=dict)  # workers -> bytes of all workers, measured
    memory_available: float | None = None  # bytes free with the calibration's workers' memory counted free


@dataclass
class Prediction:
    steps_per_s: float
    cycle_s: float
    bound: str
    terms: dict[str, float]


def expected_max_binomial(k: int, p: float, copies: int) -> float:
    """E[max of ``copies`` independent Binomial(k, p)]: resets of the unluckiest worker in a stage."""
    if k <= 0 or p <= 0.0 or copies <= 0:
        return 0.0
    p = min(p, 1.0)
    cdf, total = 0.0, 0.0
    for j in range(k):
        cdf += math.comb(k, j) * p**j * (1 - p) ** (k - j)
        total += 1.0 - min(cdf, 1.0) ** copies
    return total


def effective_max_batch(max_batch: int, num_envs: int) -> float:
    """The largest mean batch dynamic batching keeps up with ``max_batch`` B of N envs.

    In a closed loop the envs a call served are stepping when the next call starts, so unless
    every call takes all N envs, each env is served by one of at least two calls per cycle: with
    B > N/2 the calls alternate between B and N - B envs, N/2 on average.

    Examples:
        >>> effective_max_batch(6, 8), effective_max_batch(3, 8), effective_max_batch(8, 8)
        (4.0, 3.0, 8.0)
    """
    return float(max_batch) if max_batch >= num_envs else min(float(max_batch), num_envs / 2)


BOUNDS = {
    "policy": "the policy: its calls, one after another, take longest",
    "workers": "the env workers: each steps its envs one after another",
    "chain": "the chain of policy then step: nothing else is left to overlap with either",
    "cpu": "the CPU cores: env and policy work exceed what the cores give",
}


class CostModel:
    """Predicts the throughput of a layout from ``Costs`` (see the module's docstring).

    Examples:
        >>> model = CostModel(Costs(step_wall=0.01, step_cpu=0.01, policy_wall=(0.005, 0.0), cpus=2))
        >>> model.predict(Candidate(2), num_envs=4).bound   # policy, then 2 envs per worker: no overlap
        'chain'
    """

    def __init__(self, costs: Costs) -> None:
        self.costs = costs

    def predict(self, cand: Candidate, num_envs: int) -> Prediction:
        c, n, w = self.costs, num_envs, cand.num_workers
        pw0, pw1 = c.policy_wall
        pc0, pc1 = c.policy_cpu
        env_mean = c.step_wall + c.reset_rate * c.reset_wall  # per env call, resets amortized
        env_cpu = c.step_cpu + c.reset_rate * c.reset_cpu
        if cand.mode == "dynamic":
            cap = effective_max_batch(cand.max_batch, n)
            terms = self._dynamic_terms(cap, w, n, env_mean, env_cpu)
            if cand.timeout is not None:
                # A batch holds the envs that became ready while the policy ran and within T after
                # (recv's deadline), at most B: with envs ready at n per cycle, fewer than B when
                # T is short, and then more policy calls. Solved by a few fixed-point rounds.
                b = cap
                for _ in range(6):
                    cycle = max(terms.values())
                    b = min(cap, max(1.0, (n / cycle) * (pw0 + pw1 * b + cand.timeout) if cycle > 0 else cap))
                    terms = self._dynamic_terms(b, w, n, env_mean, env_cpu)
        else:
            s = cand.pipeline_stages
            m = n // s
            k = m // w  # env calls of one worker in one stage
            policy = pw0 + pw1 * m + w * c.command
            # A stage is done when its slowest worker is: the one with the most resets.
            stage = k * c.step_wall + expected_max_binomial(k, c.reset_rate, w) * c.reset_wall + c.command
            terms = {
                "policy": s * policy,
                "workers": s * (k * env_mean + c.command),
                # the stage's steps cannot go faster than the cores do their work (for S=1, the
                # cores idle while the policy runs: nothing overlaps it)
                "chain": policy + max(stage, m * env_cpu / c.cpus),
                "cpu": (n * env_cpu + s * (pc0 + pc1 * m) + 2 * s * w * c.command) / c.cpus,
            }
        bound = max(terms, key=terms.get)
        cycle = terms[bound]
        return Prediction(n / cycle if cycle > 0 else float("inf"), cycle, bound, terms)

    def _dynamic_terms(self, b: float, w: int, n: int, env_mean: float, env_cpu: float) -> dict[str, float]:
        """A dynamically batched cycle's terms for batches of ``b`` envs (on average)."""
        c = self.costs
        pw0, pw1 = c.policy_wall
        pc0, pc1 = c.policy_cpu
        per_batch = pw0 + pw1 * b + (min(b, w) + b) * c.command  # policy, sends, one reply per env
        calls = math.ceil(b / w - 1e-9)  # of one worker, for one batch
        return {
            "policy": (n / b) * per_batch,
            "workers": (n / w) * (env_mean + c.command),
            # a batch's steps cannot go faster than the cores do their work
            "chain": per_batch + max(calls * (env_mean + c.command), b * env_cpu / c.cpus),
            "cpu": (n * (env_cpu + 2 * c.command) + (n / b) * (pc0 + pc1 * b)) / c.cpus,
        }

    def memory(self, cand: Candidate, num_envs: int) -> float | None:
        """Predicted bytes of the workers of ``cand``: a line through the measured (workers, bytes)."""
        seen = self.costs.worker_memory
        if not seen:
            return None
        if len(seen) == 1:
            (w0, total), = seen.items()
            # Only one point: at least the measured total, and W' processes each at least the
            # smallest measured process's base share.
            return max(total, total * cand.num_workers / w0 if cand.num_workers > w0 else total)
        xs, ys = zip(*sorted(seen.items()))
        slope, intercept = np.polyfit(xs, ys, 1)
        return float(intercept + slope * cand.num_workers)

    def fits(self, cand: Candidate, num_envs: int) -> bool:
        """False when the layout's workers are predicted to need more than 90% of the memory left."""
        need, left = self.memory(cand, num_envs), self.costs.memory_available
        return need is None or left is None or need <= 0.9 * left
