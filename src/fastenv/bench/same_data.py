"""Same data: each env's trajectory in a run, recorded cheaply and compared with the reference's.

A trajectory is, per env, what the policy read of each observation it acted on, and per chunk a
digest of the reward, terminated, truncated and, where an episode ended, the final observation.
Calls record whole arrays (no per-env Python on the policy's path: the observations are copied,
or the policy hands their fingerprints); the per-env sequences are digested when they are read,
after the timed window (``seal``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def _digest(arrays: Mapping[str, Any], keys: Sequence[str]) -> bytes:
    return hashlib.blake2b(b"".join(np.ascontiguousarray(arrays[k]).tobytes() for k in keys)).digest()


class Trajectories:
    """Each of ``n`` envs' trajectory, over the observation keys ``keys``."""

    def __init__(self, n: int, keys: Sequence[str]) -> None:
        self.n, self.keys = n, tuple(keys)
        self._observed: list[tuple[np.ndarray, Any]] = []
        self._stepped: list[tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, bytes]]] = []
        self._prints: list[list[Any]] = [[] for _ in range(n)]
        self._events: list[list[str]] = [[] for _ in range(n)]
        self.episodes_ended = 0

    def observed(self, ids: Any, seen: np.ndarray | Mapping[str, np.ndarray]) -> None:
        """The observations of envs ``ids`` that the policy read: their fingerprints (an array, one
        per env, the policy's own), or the observations themselves (a dict of arrays: copied now,
        digested over ``keys`` when read)."""
        ids = np.array(ids)
        kept = np.array(seen) if isinstance(seen, np.ndarray) else {k: np.array(seen[k]) for k in self.keys}
        self._observed.append((ids, kept))

    def stepped(self, ids: Any, rewards: Any, terminated: Any, truncated: Any, infos: Mapping[str, Any]) -> None:
        """A chunk's results for envs ``ids`` (a SAME_STEP vector env's: ``infos["final_obs"]`` where one ended)."""
        ids = np.array(ids)
        finals: dict[int, bytes] = {}
        ended = infos.get("_final_obs")
        if ended is not None and np.any(ended):
            for j in np.flatnonzero(ended).tolist():  # episodes that ended: rare
                finals[int(ids[j])] = _digest(infos["final_obs"][j], self.keys)
            self.episodes_ended += len(finals)
        flags = np.stack([np.asarray(terminated, bool), np.asarray(truncated, bool)], 1).astype(np.uint8)
        self._stepped.append((ids, np.array(rewards, np.float64), flags, finals))

    def seal(self) -> None:
        """Digest what was recorded since the last seal into the per-env sequences, and let the copies go."""
        for ids, seen in self._observed:
            if isinstance(seen, np.ndarray):
                for i, p in zip(ids.tolist(), seen.tolist()):
                    self._prints[i].append(p)
            else:
                for j, i in enumerate(ids.tolist()):
                    self._prints[i].append(_digest({k: v[j] for k, v in seen.items()}, self.keys).hex())
        for ids, rewards, flags, finals in self._stepped:
            for j, i in enumerate(ids.tolist()):
                h = hashlib.blake2b(rewards[j].tobytes() + flags[j].tobytes())
                if i in finals:
                    h.update(finals[i])
                self._events[i].append(h.hexdigest())
        self._observed, self._stepped = [], []

    @property
    def prints(self) -> list[list[Any]]:
        """Per env, what the policy read of each observation (its fingerprint or digest), in order."""
        self.seal()
        return self._prints

    @property
    def events(self) -> list[list[str]]:
        """Per env, one digest per chunk stepped, in order."""
        self.seal()
        return self._events


def compare(ours: Trajectories | Sequence[Trajectories], ref: Trajectories | Sequence[Trajectories]) -> dict[str, Any]:
    """Env by env (round by round, given lists): do the observations and chunks both runs have agree?
    ``chunks_compared`` is the fewest chunks compared in any env; ``first_difference`` says where."""
    pairs = [(ours, ref, "")] if isinstance(ours, Trajectories) else [(a, b, f"round {r + 1}, ") for r, (a, b) in enumerate(zip(ours, ref))]
    compared = None
    for mine, theirs, where in pairs:
        prints, ref_prints, events, ref_events = mine.prints, theirs.prints, mine.events, theirs.events
        for i in range(len(ref_prints)):
            for name, a, b in (("observation", prints[i], ref_prints[i]), ("chunk", events[i], ref_events[i])):
                common = min(len(a), len(b))
                for t in range(common):
                    if a[t] != b[t]:
                        return {"equal": False, "chunks_compared": t, "first_difference": f"{where}env {i}, {name} {t}"}
            common = min(len(events[i]), len(ref_events[i]))
            compared = common if compared is None else min(compared, common)
    return {"equal": True, "chunks_compared": compared or 0, "first_difference": None}
