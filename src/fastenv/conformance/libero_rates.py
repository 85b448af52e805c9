"""LIBERO at other control and observation rates: ``fastenv.wrap`` on a user's own env against that env.

The main sweep (``conformance.libero``) runs every task at LIBERO's 20 Hz, where every env step
samples every observable once. A user's ``OffScreenRenderEnv(..., control_freq=...)``, or one
whose observables were set to other rates with robosuite's ``modify_observable``, samples some
env steps and not others, and an observation then returns an older sample. This sweep plays each
such setting through ``fastenv.wrap(env, chunk=K)`` beside the same env unwrapped, stepped one
action at a time, over one long episode (every phase of the sampling timers against the chunk
boundaries) and a second after a reset, and compares every value exactly. Axes (each case's mode):

- ``control_freq``: 10, 20, 30, 40 and 23 Hz (the physics runs at 500 Hz: 30 and 23 do not
  divide it, so robosuite truncates their steps to 16 and 21 physics steps);
- ``obs_rate``: ``stock`` (robosuite's 20 Hz), ``below``/``equal``/``above`` (half, equal to and
  twice the control rate, every observable), ``mixed`` (cameras at half the control rate, the
  state at robosuite's rate);
- ``modifier``: none, or on every state observable robosuite's deterministic ``corrupter``, a
  deterministic ``delay`` (every observable) or a ``filter`` that keeps state (a running mean),
  each at half the control rate (noise corrupters and sampled delays draw from numpy's global
  generator, so they are left out: the same draws in law, not in order);
- ``chunk``: 3, 4 and 8 sub-steps (they divide some of the sampling periods and not others).

Episode 1 is seeded, set to an init state (LIBERO's protocol) and truncated by robosuite's
horizon at step ``EPISODE_STEPS`` (inside a chunk); episode 2 follows a seeded reset. Compared:
every chunk's observation (images included), each sub-step's reward, the flags, the final
observation. ``fastenv conform libero_rates`` runs it (default: the first task of each suite).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.conformance import Case, Comparer, Mismatch, Resident

BACKEND = "libero_rates"
SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")
CONTROL_RATES = (10, 20, 30, 40, 23)
OBS_RATES = ("stock", "below", "equal", "above", "mixed")
MODIFIERS = ("corrupter", "delay", "filter")
CHUNKS = (3, 4, 8)
EPISODE_STEPS = 241  # episode 1's horizon: not a multiple of any chunk, so it ends inside one
SECOND_EPISODE_STEPS = 27
CAMERA = 32
SEED = 2000


def tasks(suites: Sequence[str] | None = None) -> list[str]:
    """The default tasks of the rate sweep: the first task of each suite (any task can be given)."""
    return [f"{suite}/0" for suite in suites or SUITES]


def cases(task_list: Sequence[str] | None = None) -> list[Case]:
    """Every rate case of every task: each observation rate unmodified, each modifier at the
    ``below`` rate, for every control rate and chunk (ordered so that cases share their recordings)."""
    out = []
    for task in task_list or tasks():
        for freq in CONTROL_RATES:
            settings = [(rate, "none") for rate in OBS_RATES] + [("below", m) for m in MODIFIERS]
            for rate, modifier in settings:
                for chunk in CHUNKS:
                    mode = (("control_freq", freq), ("obs_rate", rate), ("modifier", modifier), ("chunk", chunk), ("steps", EPISODE_STEPS))
                    out.append(Case(BACKEND, task, "stock", mode))
    return out


# -- the observables' settings ------------------------------------------------------------------------
class RunningMean:
    """A filter that keeps state: the mean of every value it was given (deterministic)."""

    def __init__(self) -> None:
        self.total: Any = None
        self.count = 0

    def __call__(self, value: Any) -> Any:
        value = np.asarray(value, dtype=np.float64)
        self.total = value.copy() if self.total is None else self.total + value
        self.count += 1
        return self.total / self.count


def apply_setting(raw: Any, control_freq: float, obs_rate: str, modifier: str) -> None:
    """Set every observable of a robosuite env as a case says (``modify_observable``, as a user does).

    Takes effect at the env's next reset, which starts every observable's timer.
    """
    from robosuite.utils.observables import (
        create_deterministic_corrupter,
        create_deterministic_delayer,
    )

    rates = {"stock": None, "below": control_freq / 2, "equal": control_freq, "above": control_freq * 2, "mixed": None}
    if obs_rate not in rates:
        raise ValueError(f"unknown obs_rate {obs_rate!r}; expected one of {list(rates)}")
    if modifier not in ("none", *MODIFIERS):
        raise ValueError(f"unknown modifier {modifier!r}; expected none or one of {list(MODIFIERS)}")
    for name, o in raw._observables.items():
        image = o.modality == "image"
        rate = control_freq / 2 if obs_rate == "mixed" and image else rates[obs_rate]
        if rate is not None:
            raw.modify_observable(name, "sampling_rate", rate)
        if modifier == "corrupter" and not image:
            raw.modify_observable(name, "corrupter", create_deterministic_corrupter(0.01))
        elif modifier == "delay":
            # Below the sampling period, or robosuite samples at once and warns at every step.
            raw.modify_observable(name, "delayer", create_deterministic_delayer(0.4 / (rate or 20)))
        elif modifier == "filter" and not image:
            raw.modify_observable(name, "filter", RunningMean())


class _StockSettings:
    """What ``apply_setting`` changes, as the env was built, to put back before the next setting."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.saved = {name: (o._sampling_timestep, o._corrupter, o._filter, o._delayer) for name, o in raw._observables.items()}

    def apply(self, control_freq: float, obs_rate: str, modifier: str) -> None:
        for name, o in self.raw._observables.items():
            o._sampling_timestep, o._corrupter, o._filter, o._delayer = self.saved[name]
        apply_setting(self.raw, control_freq, obs_rate, modifier)


# -- one task's runs -------------------------------------------------------------------------------
_RESIDENT = Resident()
close = _RESIDENT.close  # closes the envs of the task and rate last checked


def check(case: Case, cmp: Comparer) -> None:
    """Play the case through ``fastenv.wrap`` and through the same env unwrapped; raise ``Mismatch`` at a difference."""
    task, freq = case.task, case.option("control_freq")
    _RESIDENT.get((task, freq), lambda: _RateRunner(task, freq)).check(case, cmp)


@dataclass
class _Recording:
    """The stock env's episodes: first observation, then (observation, reward) per step."""

    first: list[dict] = field(default_factory=list)
    steps: list[list[tuple[dict, float]]] = field(default_factory=list)


class _RateRunner:
    """One task at one control rate: LIBERO's env built twice, one stepped unwrapped (the stock
    reference), one wrapped by fastenv for each case and given back after it."""

    def __init__(self, task: str, control_freq: float) -> None:
        from fastenv.backends.libero import LiberoTask

        suite, _, task_id = task.partition("/")
        self.task = LiberoTask.load(suite, int(task_id))
        self.control_freq = control_freq
        self.seed = SEED + int(task_id)
        self._recordings: dict[tuple[str, str], _Recording] = {}
        self._stock: Any = None
        self._user: Any = None

    def _build(self) -> tuple[Any, _StockSettings]:
        from fastenv.backends.libero.task import import_libero

        OffScreenRenderEnv = import_libero().OffScreenRenderEnv

        env = OffScreenRenderEnv(
            bddl_file_name=self.task.bddl_file, camera_names=["agentview"], camera_heights=CAMERA, camera_widths=CAMERA,
            control_freq=self.control_freq, horizon=EPISODE_STEPS,
        )
        return env, _StockSettings(env.env)

    def _actions(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        actions = rng.uniform(-1, 1, (EPISODE_STEPS + SECOND_EPISODE_STEPS + max(CHUNKS), 7))
        actions[:, 2] -= 0.3  # towards the table: contacts
        actions[:, 6] = np.sign(np.sin(np.arange(len(actions)) / 9.0))  # the gripper closes and opens
        return actions

    def _record(self, obs_rate: str, modifier: str) -> _Recording:
        """The stock env through both episodes, every step's observation kept (episode 2 a chunk longer
        than the case plays, for the chunk that crosses its end)."""
        from fastenv.backends.libero.adapter import make_gl_current
        from fastenv.backends.libero.scene import PropertySamplers

        if (obs_rate, modifier) in self._recordings:
            return self._recordings[obs_rate, modifier]
        if self._stock is None:
            self._stock = self._build()
        env, settings = self._stock
        raw = env.env
        settings.apply(self.control_freq, obs_rate, modifier)
        samplers = PropertySamplers(raw)
        rec = _Recording()
        actions = iter(self._actions())
        for e, steps in enumerate((EPISODE_STEPS, SECOND_EPISODE_STEPS + max(CHUNKS))):
            make_gl_current(raw)
            env.seed(self.seed + e)
            samplers.before_reset(raw)  # a fresh env's first reset, as fastenv's seeded reset is
            env.reset()
            rec.first.append(_copy(env.set_init_state(self.task.init_states[e])))
            taken = []
            for _ in range(steps):
                obs, reward, _, _ = env.step(next(actions))
                taken.append((_copy(obs), float(reward)))
            rec.steps.append(taken)
        self._recordings[obs_rate, modifier] = rec
        return rec

    def check(self, case: Case, cmp: Comparer) -> None:
        from fastenv.wrappers import wrap

        obs_rate, modifier, chunk = case.option("obs_rate"), case.option("modifier"), case.option("chunk")
        rec = self._record(obs_rate, modifier)
        if self._user is None:
            self._user = self._build()
        user_env, settings = self._user
        settings.apply(self.control_freq, obs_rate, modifier)
        env = wrap(user_env, chunk=chunk)
        try:
            actions = self._actions()
            a = 0
            for e, steps in enumerate((EPISODE_STEPS, SECOND_EPISODE_STEPS)):
                env.reset(seed=self.seed + e)
                first = user_env.set_init_state(self.task.init_states[e])  # LIBERO's protocol, on the user's env
                cmp.equal(f"episode {e + 1}: first observation", _copy(first), rec.first[e])
                step = 0
                while step < steps:
                    obs, _, terminated, truncated, info = env.step(actions[a : a + chunk])
                    ran = int(info["chunk_steps"])
                    where = f"episode {e + 1}, steps {step + 1}-{step + ran}"
                    ref = rec.steps[e][step : step + ran]
                    if ran != len(ref) or ran != chunk and not truncated:
                        raise Mismatch(f"{where}: fastenv ran {ran} steps where the stock env runs {len(ref)}")
                    cmp.equal(f"{where}: rewards", np.asarray(info["chunk_rewards"][:ran]), np.array([r for _, r in ref]))
                    cmp.equal(f"{where}: observation", _copy(obs), ref[-1][0])
                    cmp.equal(f"{where}: terminated", bool(terminated), False)
                    cmp.equal(f"{where}: truncated", bool(truncated), e == 0 and step + ran == EPISODE_STEPS)
                    step += ran
                    a += ran
                a = EPISODE_STEPS  # episode 2's actions start where the stock env's did
        finally:
            env.close()  # the user's env goes back as it came

    def close(self) -> None:
        from fastenv.backends.libero.adapter import make_gl_current

        for built in (self._user, self._stock):
            if built is not None:
                make_gl_current(built[0].env)
                built[0].close()
        self._user = self._stock = None
        self._recordings.clear()


def _copy(obs: Any) -> dict:
    return {k: np.array(v, copy=True) for k, v in obs.items()}
