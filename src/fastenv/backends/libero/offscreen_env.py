"""LIBERO's ``OffScreenRenderEnv`` API (what evaluation loops call) on fastenv's adapter.

A step's observation is a mapping computed key by key when first read: a camera's image renders
only when read, the robot and object state is computed (without rendering) when first read, and
an observation nobody reads (a settling step's, a step whose chunk goes on) costs nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

HORIZON = 1000  # LIBERO's ControlEnv default (ignore_done=False): robosuite refuses later steps

# This process's simulators together: camera images the stock env would have rendered (every
# camera at each reset, init state and step) and those rendered (read).
PROCESS = {"stock": 0, "rendered": 0}
PATHS: dict[int, dict[str, bool]] = {}  # each simulator's fast paths, as last seen (at its resets and its close)


class Observation(Mapping):
    """A step's raw observation, each key computed when first read.

    Read after a later step or reset, it refuses: it would no longer be that step's. Made with
    ``images=False``, its camera images are blank (zeros) and nothing renders: the step's state
    is still the real one.
    """

    def __init__(self, sim: Simulator, images: bool = True) -> None:
        self._sim, self._generation, self._images = sim, sim.generation, images
        self._value: dict[str, Any] = {}

    def _fill(self, key: str) -> None:
        sim = self._sim
        if self._generation != sim.generation:
            raise RuntimeError("a LIBERO observation read after the env moved on: read each step's before the next")
        if key not in sim.keys:
            raise KeyError(key)
        if key in sim.image_keys:
            if self._images:
                self._value.update(sim.observe([key]))
                sim.camera_renders += 1
                PROCESS["rendered"] += 1
            else:
                self._value[key] = sim.blank(key)
        else:
            self._value.update(sim.observe([k for k in sim.keys if k not in sim.image_keys and k not in self._value]))

    def __getitem__(self, key: str) -> Any:
        if key not in self._value:
            self._fill(key)
        return self._value[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sim.keys)

    def __len__(self) -> int:
        return len(self._sim.keys)


class Simulator:
    """LIBERO's ``OffScreenRenderEnv`` as evaluation loops call it (``seed``, ``reset``,
    ``set_init_state``, ``step``, ``check_success``, ``env``), on fastenv's adapter."""

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter
        # LIBERO's env is reset again and again here: each reset draws as the stock env's next
        # one (its model loaded once more each time), not as a fresh env's first
        adapter._samplers.loads = 1
        self._reset_pending = 1  # resets owed before the next read: the scenes they draw (an init state replaces them)
        self._from_global = False
        self.generation = 0
        self.observe_next = True  # whether the next step's images may be read (False: blank ones)
        self.camera_renders = 0  # camera images rendered for observations
        self.observations = 0  # observations returned (resets, init states, steps): the stock env renders each
        self.keys = tuple(adapter.keys)
        self.image_keys = frozenset(k for k in self.keys if adapter._image_kind(k) is not None)
        self._blank: dict[str, np.ndarray] = {}

    # what loops read through LIBERO's env
    @property
    def env(self) -> Any:
        return self._adapter._raw

    @property
    def robots(self) -> Any:
        return self._adapter._raw.robots

    @property
    def language_instruction(self) -> str:
        return self._adapter.task.language

    def check_success(self) -> bool:
        return self._adapter._env.check_success()

    def seed(self, seed: int | None) -> None:
        # LIBERO seeds numpy's global generator (OS entropy for None), and its reset draws the
        # scene from it: the reset here draws from a copy of what that seeding left.
        self._adapter._env.seed(seed)
        self._adapter._randomness.state = np.random.get_state()
        self._from_global = False

    @property
    def scene_stream(self) -> Any:
        """Where the env's scene draws stand (what ``seed`` sets and each reset advances: the
        random stream, and the model loads the stock env would have made): saved and put back,
        an episode starts from the draws a given history of resets leaves."""
        return self._adapter._randomness.state, self._adapter._samplers.loads

    @scene_stream.setter
    def scene_stream(self, stream: Any) -> None:
        self._adapter._randomness.state, self._adapter._samplers.loads = stream
        self._from_global = False

    def note_fast_paths(self) -> None:
        if getattr(self._adapter, "_env", None) is not None:
            PATHS[id(self)] = {str(k): bool(v) for k, v in self._adapter.fast_paths().items()}

    def reset(self, draws: int = 1, from_global: bool = False) -> Observation:
        if self.observations:
            self.note_fast_paths()  # after an episode: the paths it ran on
        # An init state usually comes right after: the reset happens with it (unless none comes).
        # ``from_global``: the scenes come from numpy's global generator as it stands when they are
        # drawn, and advance it, as a stock env's build and first reset do.
        self._reset_pending = draws
        self._from_global = from_global
        self.generation += 1
        return self._observation(True)

    def set_init_state(self, state: np.ndarray) -> Observation:
        self._reset(state)
        return self._observation(True)

    def _observation(self, images: bool) -> Observation:
        self.observations += 1
        PROCESS["stock"] += len(self.image_keys)
        return Observation(self, images)

    @property
    def stock_images(self) -> int:
        """Camera images LIBERO's own env would have rendered for this one's observations so far."""
        return self.observations * len(self.image_keys)

    def _reset(self, state: np.ndarray | None) -> None:
        options = None if state is None else {"init_state": state}
        randomness = self._adapter._randomness
        if self._from_global:
            randomness.state = np.random.get_state()
        for _ in range(1 if state is not None else max(1, self._reset_pending)):
            self._adapter.reset(seed=None, options=options, rng=np.random.default_rng())
        if self._from_global:
            np.random.set_state(randomness.state)
            self._from_global = False
        self._reset_pending = 0
        self.generation += 1

    def observe(self, keys: list[str] | None = None) -> dict[str, np.ndarray]:
        if self._reset_pending:
            self._reset(None)
        return self._adapter.observe(keys)

    def blank(self, key: str) -> np.ndarray:
        blank = self._blank.get(key)
        if blank is None:
            space = self._adapter.observation_space[key]
            blank = self._blank[key] = np.zeros(space.shape, space.dtype)
            blank.flags.writeable = False
        return blank

    def step(self, action: Any) -> tuple[Observation, float, bool, dict]:
        if self._reset_pending:
            self._reset(None)
        raw = self._adapter._raw
        if raw.timestep >= HORIZON:
            raise ValueError("executing action in terminated episode")  # robosuite's own check and words
        reward, success, _, _ = self._adapter.substep(action)
        self.generation += 1
        return self._observation(self.observe_next), reward, success, {}  # LIBERO: done is success; robosuite's info is empty

    def close(self) -> None:
        if self.observations:
            self.note_fast_paths()
        self._adapter.close()
