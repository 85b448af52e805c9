"""The layouts ``tune`` chooses from: N envs over W workers, S stages or dynamic batching, threads per worker."""

from __future__ import annotations

from collections.abc import Sequence

from fastenv._validation import check_positive_int
from fastenv.vector.plan import Candidate  # its home: the vector env reads plans of it


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def search_space(
    num_envs: int,
    cpus: int,
    *,
    max_workers: int | None = None,
    max_stages: int = 4,
    timeouts: Sequence[float] = (0.002, 0.01, 0.05),
) -> list[Candidate]:
    """Every layout ``tune`` considers (and a grid would measure) for ``num_envs`` on ``cpus`` CPUs.

    Workers: the divisors of N up to ``max_workers`` (default min(N, 4 * cpus)); stages: the
    divisors of N/W up to ``max_stages``; dynamic batching: B in {N/4, N/2, 3N/4} (rounded, 1 to
    N-1) with each of ``timeouts``; threads per worker: 1, and (with 2 CPUs or more) max(2, cpus // W).

    Examples:
        >>> len(search_space(4, 2))
        66
    """
    n = check_positive_int("num_envs", num_envs)
    cpus = check_positive_int("cpus", cpus)
    max_workers = min(n, 4 * cpus) if max_workers is None else check_positive_int("max_workers", max_workers)
    batches = sorted({max(1, round(n * f)) for f in (0.25, 0.5, 0.75)} - {n})
    out = []
    for w in (d for d in divisors(n) if d <= max_workers):
        for t in sorted({1} | ({max(2, cpus // w)} if cpus >= 2 else set())):
            for s in (d for d in divisors(n // w) if d <= max_stages):
                out.append(Candidate(w, s, threads_per_worker=t))
            for b in batches:
                for timeout in timeouts:
                    out.append(Candidate(w, 1, b, float(timeout), t))
    return out


def default_candidate(num_envs: int, cpus: int) -> Candidate:
    """The layout ``PipelineVectorEnv`` picks with no options: the most workers up to the CPUs, stepped whole."""
    return Candidate(max(d for d in divisors(num_envs) if d <= cpus), 1, threads_per_worker=1)
