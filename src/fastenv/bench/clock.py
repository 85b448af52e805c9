"""How long a run of known parts has left, from what its parts measured so far on this machine.

A run is a list of ``Part``: each has a cost on a reference machine, a key naming what it repeats
(a configuration that runs once per round costs in its later rounds what it cost in its first),
and, where one comes before it, a build of some kind. Once anything is measured here, a part not
yet measured costs its reference times this machine's scale (the last measurement over its
reference), a part whose key was measured costs what it did, and the running part is projected
from its own progress. So a slow part weighs what it costs, not what its share of the steps is:
``fastenv bench``'s Default takes ten times as long per step as fastenv's configurations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Part", "RunClock"]

# The running part is projected from its own progress once this share of its timed work is done
# (before that, a few chunks say little: the first renders, an early reset).
LIVE_FROM = 0.1


@dataclass(frozen=True)
class Part:
    """One part of a run: its name, what it repeats, its reference seconds, the build before it."""

    name: str
    key: str
    reference_s: float
    build: str | None = None  # the kind of thing built before it (None: it reuses what is there)
    reference_build_s: float = 0.0

    def __post_init__(self) -> None:
        for field in ("reference_s", "reference_build_s"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"Part.{field} must be a number of seconds >= 0, got {value!r}")
        if self.reference_s == 0:
            raise ValueError(f"Part.reference_s must be > 0, got 0 (part {self.name!r})")


class RunClock:
    """The time left of a run of ``parts``, told the times of its events as they happen.

    Events, in order, for each part: ``start_build`` and ``built`` (where it has a build),
    ``start_part``, ``progress`` (the share of its timed work done; the first call, with 0, marks
    where timed work begins), ``finish_part``. Times are seconds on one clock (``now``).

    Examples:
        >>> clock = RunClock([Part("slow", "slow", 10.0), Part("fast", "fast", 1.0)])
        >>> clock.start(0.0); clock.start_part(0, 0.0); clock.finish_part(20.0)  # twice the reference
        >>> clock.remaining(20.0)
        2.0
    """

    def __init__(self, parts: Sequence[Part]) -> None:
        parts = list(parts)
        if not parts or not all(isinstance(p, Part) for p in parts):
            raise ValueError(f"a run needs one or more Part, got {parts!r}")
        self.parts = parts
        self.started: float | None = None
        self.current: int | None = None  # the running part's index
        self.next = 0  # the first part not finished
        self.measured: dict[str, float] = {}  # key -> seconds of its last finished part
        self.built_s: dict[str, float] = {}  # kind -> seconds of its last build
        self.scale: float | None = None  # seconds here per reference second, from the last measurement
        self.build_scale: float | None = None
        self._building: tuple[str, float, float] | None = None  # (kind, start, reference seconds)
        self._built_for: int | None = None  # the part whose build is done (it has not started yet)
        self._part_start = 0.0
        self._timed_start: float | None = None
        self._fraction = 0.0
        self._fraction_at = 0.0
        self.history: list[tuple[float, float | None]] = []  # (elapsed, estimated total) at each note()

    def start(self, now: float) -> None:
        self.started = now

    def start_build(self, kind: str, now: float) -> None:
        part = self.parts[self.next]
        self._building = (kind, now, part.reference_build_s)

    def built(self, now: float) -> None:
        if self._building is None:
            raise RuntimeError("built() without start_build()")
        kind, start, reference = self._building
        self._building, self._built_for = None, self.next
        self.built_s[kind] = now - start
        if reference > 0:
            self.build_scale = (now - start) / reference
            if self.scale is None:
                self.scale = self.build_scale  # the first measurement here: better than none

    def start_part(self, index: int, now: float) -> None:
        if index != self.next:
            raise RuntimeError(f"part {index} started, part {self.next} expected (parts run in order)")
        self.current, self._part_start = index, now
        self._timed_start, self._fraction, self._fraction_at = None, 0.0, now

    def progress(self, fraction: float, now: float) -> None:
        if self._timed_start is None:
            self._timed_start = now
        self._fraction, self._fraction_at = min(1.0, max(0.0, float(fraction))), now

    def finish_part(self, now: float) -> None:
        if self.current is None:
            raise RuntimeError("finish_part() without start_part()")
        part = self.parts[self.current]
        seconds = now - self._part_start
        self.measured[part.key] = seconds
        self.scale = seconds / part.reference_s
        self.current, self.next = None, self.current + 1

    def _part_estimate(self, part: Part, scale: float | None) -> float | None:
        if part.key in self.measured:
            return self.measured[part.key]
        return None if scale is None else part.reference_s * scale

    def _build_estimate(self, part: Part, scale: float | None) -> float | None:
        if part.build is None:
            return 0.0
        if part.build in self.built_s:
            return self.built_s[part.build]
        scale = self.build_scale if self.build_scale is not None else scale
        return None if scale is None else part.reference_build_s * scale

    def _live(self) -> float | None:
        """The running part's projected seconds from its own progress (None: too early to say)."""
        if self.current is None or self._timed_start is None or self._fraction < LIVE_FROM:
            return None
        before = self._timed_start - self._part_start
        return before + (self._fraction_at - self._timed_start) / self._fraction

    def remaining(self, now: float) -> float | None:
        """Seconds left (None until something is measured here)."""
        live = self._live()
        scale = self.scale
        if live is not None and self.parts[self.current].key not in self.measured:  # type: ignore[index]
            scale = live / self.parts[self.current].reference_s  # type: ignore[index]  # the newest measurement
        if scale is None:
            return None
        left = 0.0
        if self._building is not None:
            _, start, _ = self._building
            left += max(0.0, (self._build_estimate(self.parts[self.next], scale) or 0.0) - (now - start))
        if self.current is not None:
            expected = live if live is not None else self._part_estimate(self.parts[self.current], scale)
            left += max(0.0, (expected or 0.0) - (now - self._part_start))
        for i in range(self.next + (self.current is not None), len(self.parts)):
            part = self.parts[i]
            if not (i == self.next and (self._building is not None or self._built_for == i)):  # under way: above; or done
                left += self._build_estimate(part, scale) or 0.0
            left += self._part_estimate(part, scale) or 0.0
        return left

    def total(self, now: float) -> float | None:
        """The whole run's estimated seconds: elapsed plus what is left (None until something is measured)."""
        left = self.remaining(now)
        return None if left is None or self.started is None else (now - self.started) + left

    def note(self, now: float) -> float | None:
        """``total(now)``, kept in ``history`` as (elapsed, total)."""
        total = self.total(now)
        if self.started is not None:
            self.history.append((round(now - self.started, 1), None if total is None else round(total, 1)))
        return total
