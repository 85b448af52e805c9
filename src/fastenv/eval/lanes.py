"""The policies' side of ``fastenv.eval.run``: each policy's requests, its batches, its calls on a thread of its own.

A run has one ``Lane`` per policy (``--policy`` repeated: one server per GPU). Worker ``w`` is
served by policy ``w % P``; a lane holds the requests of its own workers only and forms its
batches from them, so one policy's batch never waits for another's workers. Every call to a
policy object (``start_episode``, ``infer``, ``end_episode``) runs on its lane's thread, in the
order the runner makes them: calls to different policies overlap in time, calls to one policy
never do, so a policy need not be thread-safe. The runner's loop never waits for a policy: a
lane says it is done through a pipe the loop waits on beside the workers'.

``choose_batching`` is how a lane's B_max and T_max are chosen from what its first calls
measured (``fastenv.tuning.CostModel``).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastenv.eval.policies import BatchPolicy, Request

__all__ = [
    "BOUNDS", "RETUNE_AFTER_CALLS", "TUNE_AFTER_CALLS", "Lane", "choose_batching", "describe_choice", "fit_policy_seconds", "lane_workers",
    "share_of_cpus",
]

TUNE_AFTER_CALLS = 16  # policy calls (and chunks stepped) measured before B_max and T_max are chosen
# ... and chosen once more after this many, from the calls after the first TUNE_AFTER_CALLS: the first
# calls run while the workers still build their envs and the device warms up, at small batches.
RETUNE_AFTER_CALLS = 64
BATCH_FRACTIONS = (0.25, 0.5, 0.75, 1.0)  # B_max candidates, as shares of the lane's env slots
TIMEOUTS = (0.002, 0.01, 0.05)  # T_max candidates, seconds


def fit_policy_seconds(sizes: Sequence[int], seconds: Sequence[float]) -> dict[str, Any]:
    """The policy's seconds per call as ``a + b x batch``: least squares over the calls.

    Where every call had the same batch size, ``a`` and ``b`` cannot be told apart: ``a`` and
    ``b`` are None and ``seconds`` is the median call at that size. A negative slope or intercept
    (noise around zero) is refitted with that term at zero.

    Examples:
        >>> fit = fit_policy_seconds([1, 2, 4], [0.12, 0.14, 0.18])
        >>> round(fit["a"], 3), round(fit["b"], 3), fit["how"]
        (0.1, 0.02, 'least squares')
    """
    x = np.asarray(sizes, float)
    y = np.asarray(seconds, float)
    if x.size == 0 or x.size != y.size:
        raise ValueError(f"fit_policy_seconds needs one call's seconds per batch size, got {x.size} sizes and {y.size} seconds")
    distinct = sorted({int(v) for v in x})
    base = {"calls": int(x.size), "batch_sizes": distinct}
    if len(distinct) == 1:
        return {**base, "a": None, "b": None, "seconds": float(np.median(y)), "how": "one batch size"}
    b, a = np.polyfit(x, y, 1)
    if b < 0:  # no cost per observation to be seen: all of it fixed
        a, b = float(np.mean(y)), 0.0
    elif a < 0:  # no fixed cost to be seen: all of it per observation (a line through the origin)
        a, b = 0.0, float(np.dot(x, y) / np.dot(x, x))
    return {**base, "a": float(a), "b": float(b), "how": "least squares"}


def choose_batching(sizes: Sequence[int], seconds: Sequence[float], chunk_seconds: Sequence[float], *, workers: int,
                    slots: int, cpus: float) -> dict[str, Any]:
    """B_max and T_max for one policy, from its first calls and its envs' chunks, by fastenv's tuning model.

    Args:
        sizes: each measured call's batch size.
        seconds: each measured call's seconds (``a + b x batch`` is fitted to them: ``fit_policy_seconds``).
        chunk_seconds: the envs' seconds to step a chunk (their median is used).
        workers: the workers the policy serves.
        slots: their env slots, N.
        cpus: the CPUs those workers may count on.

    Each B in {N/4, N/2, 3N/4, N} and T in {2, 10, 50} ms is predicted by ``fastenv.tuning.CostModel``
    (what ``fastenv tune`` predicts with). A large fixed cost per call (a GPU server's) beside envs
    quick to step makes whole batches best; envs slow to step beside a cheap call make smaller
    batches best (the policy serves some envs while the others step). Where every call had one
    batch size, the choice is the one best in the worse of the two readings of that call's cost,
    all of it fixed or all of it per observation: the measured size stays unless another is
    better under both. Returns the choice (``max_batch``, ``batch_timeout``), the ``fit``, the
    envs' ``chunk_seconds``, the predicted ``chunks_per_s`` and what ``bound`` it.

    Examples:
        >>> choice = choose_batching([1, 2, 4, 8] * 4, [0.5 + 0.001 * b for b in [1, 2, 4, 8] * 4], [0.01] * 16,
        ...                          workers=2, slots=8, cpus=2)
        >>> choice["max_batch"]   # a large fixed cost, envs quick to step: whole batches
        8
    """
    from fastenv.tuning.model import CostModel, Costs
    from fastenv.tuning.space import Candidate

    if not chunk_seconds:
        raise ValueError("choose_batching needs the envs' seconds per chunk, got none")
    fit = fit_policy_seconds(sizes, seconds)
    step = float(np.median(np.asarray(chunk_seconds, float)))
    if fit["how"] == "least squares":
        readings = [(fit["a"], fit["b"])]
    else:
        size = fit["batch_sizes"][0]
        readings = [(fit["seconds"], 0.0), (0.0, fit["seconds"] / size)]
    models = [CostModel(Costs(step_wall=step, step_cpu=step, policy_wall=r, policy_cpu=(0.0, 0.0), cpus=max(cpus, 1e-9)))
              for r in readings]
    options = [Candidate(workers, max_batch=b, timeout=t)
               for b in sorted({max(1, round(slots * f)) for f in BATCH_FRACTIONS}) for t in TIMEOUTS]

    def worst(candidate: Candidate) -> Any:
        return min((m.predict(candidate, slots) for m in models), key=lambda p: p.steps_per_s)

    best = max(options, key=lambda c: worst(c).steps_per_s)  # ties: the smaller batch, the shorter wait
    prediction = worst(best)
    return {"max_batch": best.max_batch, "batch_timeout": best.timeout, "fit": fit, "chunk_seconds": step,
            "chunks_per_s": prediction.steps_per_s, "bound": prediction.bound, "by": "fastenv.tuning.CostModel"}


# What each of the cost model's terms means for a run, in a user's words (fastenv.tuning.CostModel)
BOUNDS = {
    "policy": "the policy (it serves one call after another while the envs wait)",
    "workers": "the env workers (each steps its envs one after another while the policy waits)",
    "chain": "the round trip (a batch's policy call, then its envs' chunks, one after the other)",
    "cpu": "the CPU cores (the envs' work, and the policy's, keeps all of them busy)",
}


def describe_choice(tuned: dict[str, Any]) -> str:
    """What batching was chosen, from what measurement, and what bounds the run: plain sentences, one a line."""
    fit = tuned["fit"]
    sizes = fit["batch_sizes"]
    timeout = f"{1000 * tuned['batch_timeout']:g} ms"
    most = f"{tuned['max_batch']} observation{'s' * (tuned['max_batch'] != 1)}"
    skip = tuned.get("from_call") or 0
    calls = f"from calls {skip + 1} to {tuned['after_calls']}; the first {skip} ran while the envs were built and the device warmed up" \
        if skip else f"after the policy's first {tuned['after_calls']} calls"
    lines = [f"Batching chosen: a policy call takes up to {most}, waiting at most {timeout} for more to be ready (chosen {calls})."]
    if fit["how"] == "least squares":
        lines.append(f"Measured: a call took {1000 * fit['a']:.1f} ms plus {1000 * fit['b']:.2f} ms per observation in it "
                     f"(fitted over {fit['calls']} calls of {min(sizes)} to {max(sizes)} observations).")
    else:
        size = f"{sizes[0]} observation{'s' * (sizes[0] != 1)}"
        lines.append(f"Measured: a call took {1000 * fit['seconds']:.1f} ms; every call had {size}, so what is fixed and what grows "
                     "with the batch cannot be told apart: the choice is the one best under both readings.")
    lines.append(f"An env took {1000 * tuned['chunk_seconds']:.1f} ms to step one chunk of actions. The run is limited by "
                 f"{BOUNDS.get(tuned['bound'], tuned['bound'])}: about {tuned['chunks_per_s']:.1f} env chunks a second in all, "
                 "as the cost model predicts.")
    return "\n".join(lines)


class Lane:
    """One policy: its workers' requests, its batches, and every call to it on a thread of its own."""

    def __init__(self, index: int, policy: BatchPolicy, workers: list[int], slots: int, *, max_batch: int, batch_timeout: float,
                 tune: bool) -> None:
        self.index, self.policy, self.workers, self.slots = index, policy, workers, slots
        self.max_batch, self.batch_timeout, self.tuning = max_batch, batch_timeout, tune
        self.pending: list[tuple[float, Request]] = []  # (when it came, the request), oldest first
        self.inflight: list[tuple[Request, int]] | None = None  # the batch being served, with each worker's start count
        self.calls, self.served, self.busy_seconds = 0, 0, 0.0
        self.batch_sizes: list[int] = []
        self.fit_points: list[tuple[int, float]] = []  # (batch size, seconds) of the calls that measured the policy
        self.chunk_seconds: list[float] = []  # its workers' seconds to step a chunk
        self.tuned: dict[str, Any] | None = None
        self.wake, self._signal = multiprocessing.Pipe(duplex=False)  # the runner waits on ``wake``
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=f"fastenv-eval-policy-{index}", daemon=True)

    # -- the thread -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, method: str, *args: Any) -> None:
        """Call ``policy.method(*args)`` on the lane's thread, after the calls submitted before."""
        self._jobs.put((method, args))

    def call(self, batch: list[Request], starts: list[int]) -> None:
        """Serve ``batch`` (each request's worker at its ``starts``-th start); ``results`` gives the answer."""
        self.inflight = list(zip(batch, starts))
        self.submit("infer", batch)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            method, args = job
            start = time.perf_counter()
            try:
                value, error = getattr(self.policy, method)(*args), None
                if method == "infer":
                    value = list(value)  # a generator runs here, on this thread
            except BaseException as exc:  # noqa: BLE001 (handed to the runner, which decides)
                value, error = None, exc
            if method == "infer" or error is not None:
                self._done.put((method, args, value, error, time.perf_counter() - start))
                try:
                    self._signal.send_bytes(b"\0")
                except OSError:  # the runner closed the lane
                    return

    def results(self) -> list[tuple[str, tuple, Any, BaseException | None, float]]:
        """What finished since the last look: ``(method, args, value, error, seconds)`` for each call
        to ``infer`` and each other call that raised."""
        while self.wake.poll():
            self.wake.recv_bytes()
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, wait: float = 10.0) -> None:
        """Stop the thread after the calls submitted (a call in flight gets ``wait`` seconds)."""
        if self._thread.is_alive():
            self._jobs.put(None)
            self._thread.join(wait)
        for end in (self.wake, self._signal):
            end.close()

    # -- batching -------------------------------------------------------------------------------
    def due(self, running: int, now: float) -> float | None:
        """0 when a batch should go now; else the seconds until it should (None: nothing waits, or a call is out)."""
        if self.inflight is not None or not self.pending:
            return None
        if len(self.pending) >= self.max_batch or len(self.pending) >= running:
            return 0.0
        return max(0.0, self.pending[0][0] + self.batch_timeout - now)

    def take(self) -> list[Request]:
        batch = [r for _, r in self.pending[: self.max_batch]]
        self.pending = self.pending[self.max_batch:]
        return batch

    def waiting(self, worker: int) -> set[int]:
        """The slots of ``worker`` waiting for this policy (queued or in the call out)."""
        slots = {r.slot for _, r in self.pending if r.worker == worker}
        slots.update(r.slot for r, _ in self.inflight or () if r.worker == worker)
        return slots

    def record(self, size: int, seconds: float, cpus: float, measured: bool = True) -> None:
        """A call answered: its figures (``measured``: its seconds tell the policy's cost, which a call
        that lost requests to a lost server does not), and after ``TUNE_AFTER_CALLS`` measured calls
        (and chunks), B_max and T_max chosen."""
        self.calls += 1
        self.busy_seconds += seconds
        self.batch_sizes.append(size)
        if measured:
            self.fit_points.append((size, seconds))
        if not self.tuning or len(self.chunk_seconds) < TUNE_AFTER_CALLS:
            return
        if self.tuned is None and len(self.fit_points) >= TUNE_AFTER_CALLS:
            self.tune(cpus)
        elif self.tuned is not None and self.tuned["from_call"] == 0 and len(self.fit_points) >= RETUNE_AFTER_CALLS:
            self.tune(cpus, skip=TUNE_AFTER_CALLS)

    def tune(self, cpus: float, skip: int = 0) -> None:
        """B_max and T_max from the measured calls after the first ``skip`` (and the later half of the chunks when skipping)."""
        sizes, seconds = zip(*self.fit_points[skip:])
        chunks = self.chunk_seconds[len(self.chunk_seconds) // 2:] if skip else self.chunk_seconds
        choice = choose_batching(sizes, seconds, chunks, workers=max(1, len(self.workers)), slots=max(1, self.slots), cpus=cpus)
        self.max_batch, self.batch_timeout = choice["max_batch"], choice["batch_timeout"]
        fit = choice["fit"]
        first = None if self.tuned is None else {k: self.tuned[k] for k in ("max_batch", "batch_timeout", "fit", "after_calls")}
        self.tuned = {**choice, "after_calls": self.calls, "from_call": skip, "first_choice": first,
                      "policy_seconds": [fit["a"], fit["b"]] if fit["how"] == "least squares" else None}

    def figures(self, run_seconds: float) -> dict[str, Any]:
        """The JSON's record of this policy."""
        return {**self.policy.describe(), "workers": list(self.workers), "calls": self.calls, "served": self.served,
                "mean_batch": float(np.mean(self.batch_sizes)) if self.batch_sizes else None, "busy_seconds": self.busy_seconds,
                "busy_share": self.busy_seconds / run_seconds if run_seconds > 0 else None, "max_batch": self.max_batch,
                "batch_timeout": self.batch_timeout, "tuned": self.tuned}


def lane_workers(workers: int, policies: int) -> list[list[int]]:
    """The workers each policy serves: worker ``w`` is policy ``w % policies``'s.

    Examples:
        >>> lane_workers(5, 2)
        [[0, 2, 4], [1, 3]]
    """
    return [list(range(p, workers, policies)) for p in range(policies)]


def share_of_cpus(cpus: int, lane: int, total: int) -> float:
    """The CPUs a lane's workers may count on: the machine's, shared by workers."""
    return cpus * lane / total if total else float(cpus)

