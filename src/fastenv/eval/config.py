"""``EvalConfig``: what ``fastenv.eval.run`` evaluates and how, every field checked where it is built.

``fastenv eval``'s options build one (``fastenv.eval.command``); in Python::

    config = EvalConfig(suites="libero_spatial", tasks=[0], episodes=2, workers=2)
    payload = fastenv.eval.run(policy, config)

A wrong field raises ``ValueError`` (or ``TypeError``) naming the field, what it expects and what
came, before a worker starts. What depends on the policy (its chunk against the protocol, one
worker at least per policy) and on the episode list (``only``'s ids, a suite's step budget) is
checked when ``run`` starts, before anything is built.
"""

from __future__ import annotations

import math
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from fastenv.eval.protocol import Protocol

__all__ = ["EvalConfig"]


def _int(name: str, value: Any, low: int, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        also = " (or None for its default)" if optional else ""
        raise ValueError(f"EvalConfig.{name} must be an int >= {low}{also}, got {value!r}")


def _seconds(name: str, value: Any, optional: bool) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        also = " (or None)" if optional else ""
        raise ValueError(f"EvalConfig.{name} must be a number of seconds >= 0{also}, got {value!r}")


@dataclass
class EvalConfig:
    """An evaluation's episode list, its loop, its workers and batching, and what it writes."""

    suites: Sequence[str] | str = ("libero_spatial",)
    """The LIBERO suites (``fastenv.eval.episode_list``); one name or several."""
    tasks: Sequence[int] | Mapping[str, Sequence[int]] | None = None
    """The tasks of each suite (default: all), or per suite."""
    episodes: int = 50
    """Episodes per task, on its init states ``0 .. episodes - 1``."""
    seed: int = 7
    """The envs' seed, as the reference loops seed them."""
    protocol: Protocol | str = "openpi"
    """The loop's numbers: ``"openpi"`` (openpi's ``examples/libero/main.py``), ``"oft"``, or a ``Protocol``."""
    only: Sequence[str] | str | None = None
    """Episode ids to run alone (``"libero_spatial/3/17"``), from the same list."""
    workers: int | None = None
    """Worker processes (default: the CPUs this process may use)."""
    envs_per_worker: int = 2
    """Env slots per worker."""
    max_envs: int | None = None
    """At most this many envs alive in all (default: workers x envs_per_worker)."""
    max_batch: int | None = None
    """B_max, the policy's largest batch. The policy is called when ``max_batch`` envs wait for a
    chunk, when the oldest has waited ``batch_timeout``, or when every running episode waits. Where
    neither is given, the first calls run with every env slot and 10 ms, then fastenv's tuning model
    chooses both from the policy's and the envs' measured costs (the JSON's ``run.tuned``). With
    several policies, each has its own B_max and T_max (``run.policies``)."""
    batch_timeout: float | None = None
    """T_max, in seconds."""
    hang_timeout: float = 600.0
    """A worker silent that long while it has work is replaced."""
    retries: int = 2
    """Restarts of an episode before the run stops."""
    out: str | os.PathLike | None = None
    """The results JSON, refused if it exists unless ``resume``."""
    resume: bool = False
    """Keep the episodes ``out`` holds and run the others."""
    video: int = 0
    """Film the first ``video`` episodes of each task (every step's third-person frame, at the protocol's frame rate)."""
    video_dir: str | os.PathLike | None = None
    """Where the videos go (default: beside ``out``)."""
    record_actions: bool = False
    """Keep every action in the results (their digest is always kept)."""
    progress: bool = True
    """Show a progress bar."""
    context: str = "spawn"
    """The multiprocessing start method: "spawn" or "forkserver" (LIBERO's renderer does not survive a fork)."""
    backend: str = "local"
    """``"local"`` (worker processes here) or ``"ray"`` (Ray actors over a cluster)."""
    ray_options: dict[str, Any] | None = None
    """Where the actors run (the vector env's ``RayOptions``: ``address``, ``num_cpus``, ``num_gpus``,
    ``resources``, ``placement_strategy``, ``runtime_env``); for ``backend="ray"`` only."""
    time_limit: float | None = None
    """Seconds after which no episode starts; those running finish, the results are marked
    incomplete, and ``resume`` goes on from them."""

    def __post_init__(self) -> None:
        if isinstance(self.suites, str):
            self.suites = (self.suites,)
        elif isinstance(self.suites, Sequence) and all(isinstance(s, str) for s in self.suites):
            self.suites = tuple(self.suites)
        else:
            raise TypeError(f"EvalConfig.suites must be a suite's name or a sequence of them, got {self.suites!r}")
        if isinstance(self.protocol, str):
            self.protocol = Protocol.named(self.protocol)
        if not isinstance(self.protocol, Protocol):
            raise TypeError(f"EvalConfig.protocol must be 'openpi', 'oft' or a fastenv.eval.Protocol, got {self.protocol!r}")
        if self.only is not None:
            self.only = (self.only,) if isinstance(self.only, str) else tuple(self.only)
        _int("episodes", self.episodes, 1)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"EvalConfig.seed must be an int, got {self.seed!r}")
        for name, low in (("envs_per_worker", 1), ("retries", 0), ("video", 0)):
            _int(name, getattr(self, name), low)
        for name in ("workers", "max_envs", "max_batch"):
            _int(name, getattr(self, name), 1, optional=True)
        _seconds("batch_timeout", self.batch_timeout, optional=True)
        _seconds("hang_timeout", self.hang_timeout, optional=False)
        _seconds("time_limit", self.time_limit, optional=True)
        for name in ("resume", "record_actions", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"EvalConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if self.backend not in ("local", "ray"):
            raise ValueError(f"EvalConfig.backend must be 'local' or 'ray', got {self.backend!r}")
        if self.ray_options is not None and self.backend != "ray":
            raise ValueError(f"EvalConfig.ray_options are for backend='ray', got backend={self.backend!r}")
        if self.context not in multiprocessing.get_all_start_methods() or self.context == "fork":
            raise ValueError(f"EvalConfig.context must be 'spawn' or 'forkserver' (LIBERO's renderer does not survive a fork), "
                             f"got {self.context!r}")

    @classmethod
    def field_names(cls) -> list[str]:
        """The fields a config takes (and ``run``'s old keyword form took)."""
        return [f.name for f in fields(cls) if f.init]
