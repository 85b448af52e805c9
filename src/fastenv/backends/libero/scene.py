"""Where a LIBERO scene's randomness comes from: each env's own generator, the same draws every reset.

robosuite and LIBERO place objects and fixtures (bodies without joints, which an init state does
not cover: a microwave, a cabinet) with numpy's global generator (``np.random.uniform``...),
which ``env.seed(s)`` seeds. Two facts make that unfit for a vector env of several envs per
process, and are what this module corrects:

- The global generator is shared by every env of a process, so an env's scenes would depend on
  which envs share its worker and in what order they reset. ``OwnRandomness`` gives each env a
  generator of its own (numpy's legacy ``RandomState``, the one ``np.random.seed`` seeds, so a
  seed gives the draws LIBERO's own ``env.seed(seed)`` gives) and swaps it in while the env
  resets.
- LIBERO appends its object-property samplers (a door's open range, a stove's knob) to a list on
  every model load and never clears it, so each hard reset draws more numbers than the last one
  did before placing the fixtures: a stock env's scene for a given seed changes with the number
  of resets it has done, and an in-place reset (no load) draws fewer than a hard one.
  ``PropertySamplers`` sets the list before every reset to what the stock env has at that reset:
  a seeded reset draws as a freshly built stock env's first reset (the build's samplers and the
  reset's; one load's more for each attempt LIBERO repeats after a failed placement), so every
  seeded reset, in place or hard, is that first reset; each unseeded reset after it draws as the
  stock env's next reset does, one load's samplers more each time (an RL library's autoreset).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


class OwnRandomness:
    """An env's own numpy ``RandomState``, in place of numpy's global one while the env resets."""

    def __init__(self) -> None:
        self.state: Any = None  # RandomState.get_state() of the env's generator

    def seed(self, seed: int) -> None:
        self.state = np.random.RandomState(seed).get_state()

    def ensure(self, rng: np.random.Generator) -> None:
        """An env never seeded takes a seed from its own Gymnasium generator (OS entropy if unseeded)."""
        if self.state is None:
            self.seed(int(rng.integers(2**32)))

    @contextmanager
    def active(self) -> Iterator[None]:
        outer = np.random.get_state()
        np.random.set_state(self.state)
        try:
            yield
        finally:
            self.state = np.random.get_state()
            np.random.set_state(outer)


def _signature(sampler: Any) -> tuple:
    return type(sampler).__name__, getattr(sampler, "name", None), tuple(np.ravel(getattr(sampler, "joint_ranges", ())))


class PropertySamplers:
    """Keeps LIBERO's list of object-property samplers as the stock env has it at each reset."""

    def __init__(self, raw: Any) -> None:
        samplers = list(getattr(raw, "object_property_initializers", None) or [])
        # One model load appends the same samplers in the same order: the list repeats with that
        # period (an env someone else built may have loaded its model several times already).
        period = len(samplers)
        for p in range(1, len(samplers) + 1):
            if len(samplers) % p == 0 and all(_signature(s) == _signature(samplers[i % p]) for i, s in enumerate(samplers)):
                period = p
                break
        self.one_load = samplers[-period:] if period else []
        # The model loads a stock env has made before this env's next reset: each hard reset of
        # LIBERO's own env loads the model once more and appends one load's samplers, and every
        # sampler in the list draws. A freshly built env has loaded it once (its build).
        self.loads = 1

    def restart(self) -> None:
        """The next reset draws as a freshly built stock env's first reset (a seeded reset)."""
        self.loads = 1

    def before_reset(self, raw: Any) -> None:
        """Set the list so that this reset draws as the stock env's reset after ``loads`` model loads."""
        if not hasattr(raw, "object_property_initializers"):
            return
        loads = self.loads
        if raw.hard_reset:  # the reset loads the model, which appends one load's samplers
            raw.object_property_initializers = self.one_load * loads
        else:
            raw.object_property_initializers = self.one_load * (loads + 1)

    def after_reset(self) -> None:
        """A reset done: a stock env loaded its model once more."""
        self.loads += 1

    def after_failed_attempt(self, raw: Any) -> None:
        """A placement failed and LIBERO tries the reset again: a hard reset's next attempt loads
        the model once more (one more load's samplers); an in-place one draws as if it did."""
        if hasattr(raw, "object_property_initializers") and not raw.hard_reset:
            raw.object_property_initializers = raw.object_property_initializers + self.one_load
        self.loads += 1
