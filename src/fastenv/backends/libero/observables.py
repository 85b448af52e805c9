"""robosuite's observables: what a kept sensor reads, and where the stock step samples it.

Two facts of robosuite decide what a pruned, sub-stepped env must do to give the stock values:

- Sensors read each other's values from a cache shared by the env's observables (LIBERO's
  ``<object>_to_robot0_eef_pos`` reads ``robot0_eef_pos``; ``<object>_to_robot0_eef_quat`` reads
  a value ``<object>_to_robot0_eef_pos`` writes). A kept sensor whose inputs are not computed
  silently falls back to a default (the world frame, zeros). ``sensor_dependencies`` finds what
  each sensor reads by running them once on a recording cache; the adapter enables the closure.
- ``env.step`` samples each observable once per control period, at the physics step where the
  observable's own timer says so (in LIBERO's tasks, the 24th of 25), not at the step's end, so
  the stock observation is the state there. A sub-step advances those timers exactly as the
  stock step does (``SampleClock``) and records the simulation state before that physics step
  (``SamplePoint``); an observation taken later (where an episode ends inside a chunk) re-runs
  that one physics step from the record and computes the sensors there, as the stock step did.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from fastenv.backends.libero.mujoco_facts import facts


# -- what a sensor reads ----------------------------------------------------------------------------
class _RecordingCache(dict):
    """An observation cache that notes, per running sensor, the entries it looks up and writes."""

    def __init__(self) -> None:
        super().__init__()
        self.current: str | None = None
        self.reads: defaultdict[str, set[str]] = defaultdict(set)
        self.writers: defaultdict[str, set[str]] = defaultdict(set)

    def _read(self, key: Any) -> None:
        if self.current is not None:
            self.reads[self.current].add(key)

    def __getitem__(self, key: Any) -> Any:
        self._read(key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self._read(key)
        return super().__contains__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._read(key)
        return super().get(key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        # Outside a sensor, the write is the observable storing its own value under its name.
        self.writers[key].add(self.current if self.current is not None else key)
        super().__setitem__(key, value)


@contextmanager
def probing(raw: Any) -> Iterator[None]:
    """Inside: the env's observables may be run to learn about them, and nothing the env's own
    samples depend on changes. Each observable's corrupter, filter and delayer are left out (a
    filter may keep state or record what it is given, a noise corrupter or a sampled delay draws
    from numpy's generator), and its timers, values and the env's cache are put back afterwards."""
    from robosuite.utils import observables as stock

    observables = raw._observables
    saved = {
        name: (o._sensor, o._enabled, o._corrupter, o._filter, o._delayer, o._time_since_last_sample, o._sampled,
               o._current_delay, o._current_observed_value)
        for name, o in observables.items()
    }
    own_cache = raw._obs_cache
    raw._obs_cache = dict(own_cache)
    try:
        for o in observables.values():
            o._corrupter, o._filter, o._delayer = stock.NO_CORRUPTION, stock.NO_FILTER, stock.NO_DELAY
        yield
    finally:
        raw._obs_cache = own_cache
        for name, o in observables.items():
            (o._sensor, o._enabled, o._corrupter, o._filter, o._delayer, o._time_since_last_sample, o._sampled,
             o._current_delay, o._current_observed_value) = saved[name]


def sensor_dependencies(raw: Any) -> dict[str, frozenset[str]]:
    """For each observable of a robosuite env, the observables whose cached values its sensor reads.

    Every observable is run once (all enabled, forced) on a recording cache, inside ``probing``.
    """
    observables = raw._observables
    cache = _RecordingCache()

    def recording(name: str, sensor: Any) -> Any:
        def run(obs_cache: Any) -> Any:
            cache.current = name
            try:
                return sensor(obs_cache)
            finally:
                cache.current = None

        return run

    with probing(raw):
        for name, o in observables.items():
            o._sensor, o._enabled = recording(name, o._sensor), True
        raw._obs_cache = cache
        raw._update_observables(force=True)
    deps = {}
    for name in observables:
        writers = set().union(*(cache.writers.get(key, ()) for key in cache.reads.get(name, ())))
        deps[name] = frozenset(writers - {name})
    return deps


def closure(names: Iterable[str], deps: Mapping[str, frozenset[str]]) -> set[str]:
    """``names`` and everything they read, directly or not."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(deps.get(name, ()))
    return out


# -- when the stock step samples ---------------------------------------------------------------------
class IrregularSampling(Exception):
    """The enabled observables do not all sample at one physics step per control step (delays,
    other rates): a sub-step must then update them as robosuite's own loop does."""


class SampleClock:
    """The sampling timers of a set of observables, advanced as robosuite's ``Observable.update`` does.

    ``advance(n, dt)`` runs ``n`` physics steps of timer arithmetic (the same float operations, in
    the same order, as the stock step) and returns the physics step (1-based) at which the
    observables sample, 0 if none does. Raises ``IrregularSampling`` unless all of them share one
    timer with no delay, sample at most once, and compute nothing that a skipped sample would
    change (``_irregular``).
    """

    def __init__(self, observables: Iterable[Any]) -> None:
        self.observables = list(observables)
        for o in self.observables:
            why = _irregular(o)
            if why:
                raise IrregularSampling(why)
        # What each sample runs, as seen here: a change later (``modify_observable``) is noticed.
        self._functions = [(o._corrupter, o._filter, o._delayer) for o in self.observables]
        self._steps: dict[tuple[Any, ...], Any] = {}  # _timer_steps' answers

    def advance(self, n: int, dt: float) -> int:
        """Run ``n`` physics steps of the timers; the physics step that samples (0: none)."""
        at, t, sampled = self._run(n, dt)
        for o in self.observables:
            o._time_since_last_sample, o._sampled = t, sampled
        return at

    def peek(self, n: int, dt: float) -> int:
        """What ``advance(n, dt)`` would return, the timers left alone."""
        return self._run(n, dt)[0]

    def _run(self, n: int, dt: float) -> tuple[int, float, bool]:
        obs = self.observables
        if not obs:
            return 0, 0.0, False
        first = obs[0]
        t, sampled, period, delay = first._time_since_last_sample, first._sampled, first._sampling_timestep, first._current_delay
        for o, functions in zip(obs, self._functions):
            if (o._time_since_last_sample, o._sampled, o._sampling_timestep, o._current_delay) != (t, sampled, period, delay):
                raise IrregularSampling("observables sample on different timers")
            if (o._corrupter, o._filter, o._delayer) != functions:
                raise IrregularSampling("an observable's corrupter, filter or delayer changed")
        key = (t, sampled, period, delay, n, dt)
        found = self._steps.get(key)
        if found is None:
            found = _timer_steps(t, sampled, period, delay, n, dt)
            if len(self._steps) < 4096:  # the timers cycle through a few states; a bound all the same
                self._steps[key] = found
        if isinstance(found, IrregularSampling):
            raise IrregularSampling(str(found))
        return found


def _timer_steps(t: float, sampled: bool, period: float, delay: float, n: int, dt: float) -> tuple[int, float, bool] | IrregularSampling:
    """robosuite's observable timers over ``n`` physics steps of ``dt`` from ``(t, sampled)``: the
    step that samples (0: none) and the timer after, as its ``Observable.update`` computes them
    (the same float operations in the same order), or why it is not one sample per env step. A pure
    function of its arguments, so ``SampleClock`` keeps its answers."""
    at = 0
    for j in range(1, n + 1):
        t += dt
        if not sampled and period - delay >= t:
            if at:
                return IrregularSampling("an observable samples twice in one step")
            sampled, at = True, j
        if t >= period:
            if not sampled:
                if at:
                    return IrregularSampling("an observable samples twice in one step")
                at = j
            t %= period
            sampled = False
    return at, t, sampled


# robosuite's factories whose corrupter is a pure function of its input (no state, no random draw).
_PURE_CORRUPTERS = frozenset({"create_deterministic_corrupter.<locals>.corrupter"})


def _irregular(o: Any) -> str:
    """Why a sample of ``o`` must run where and whenever robosuite's loop runs it ("" if it need not).

    A sub-step computes a sample only when an observation reads it. That is the stock value only if
    a skipped sample changes nothing: no delay (it moves the sample point and draws the next
    delay), a corrupter that is a pure function (noise corrupters draw from numpy's generator) and
    no filter (robosuite lets a filter keep state or record what it is given).
    """
    from robosuite.utils import observables as stock

    if o._delayer is not stock.NO_DELAY:
        return "an observable has a sampling delay"
    corrupter = o._corrupter
    pure = corrupter is stock.NO_CORRUPTION or (
        getattr(corrupter, "__module__", "") == stock.__name__ and getattr(corrupter, "__qualname__", "") in _PURE_CORRUPTERS
    )
    if not pure:
        return "an observable has a corrupter that may draw random numbers or keep state"
    if o._filter is not stock.NO_FILTER:
        return "an observable has a filter (it may keep state)"
    return ""


def sample_observables(raw: Any, observables: Iterable[Any]) -> None:
    """What a sample of ``Observable.update`` computes (sensor, corrupter, filter; the cached and
    observed values), for the enabled observables in order, leaving their timers alone."""
    cache = raw._obs_cache
    for o in observables:
        value = np.array(o._filter(o._corrupter(o._sensor(cache))))
        o._current_observed_value = value[0] if len(value.shape) == 1 and value.shape[0] == 1 else value
        cache[o.name] = np.array(o._current_observed_value)


class SamplePoint:
    """The simulation state just before the physics step at which the stock step samples.

    ``capture()`` records MuJoCo's integration state (everything ``mj_step`` reads); ``at()``
    swaps in the state right after that physics step (re-run from the record: MuJoCo is
    deterministic) and puts the live state back, bit for bit, when the block ends.
    """

    def __init__(self, model: Any, data: Any) -> None:
        import mujoco

        self.mujoco, self.model, self.data = mujoco, model, data
        self.spec = mujoco.mjtState.mjSTATE_INTEGRATION
        self.state = np.empty(mujoco.mj_stateSize(model, self.spec))
        self.pending = False  # a state was captured whose sensors were not computed yet
        self._backup: Any = None

    def capture(self) -> None:
        self.mujoco.mj_getState(self.model, self.data, self.state, self.spec)
        self.pending = True

    @contextmanager
    def at(self) -> Iterator[None]:
        mujoco, model, data = self.mujoco, self.model, self.data
        copy_data = facts().copy_data  # there is one wherever a SamplePoint is used (LiberoAdapter._enable_only)
        if self._backup is None:
            self._backup = mujoco.MjData(model)
        copy_data(self._backup, model, data)
        try:
            mujoco.mj_setState(model, data, self.state, self.spec)
            mujoco.mj_step(model, data)
            yield
        finally:
            copy_data(data, model, self._backup)
