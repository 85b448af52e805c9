"""The protocols a simulator adapter implements, and the generic adapter for any Gymnasium env.

``SimulatorAdapter`` is what every adapter must have. The capabilities below it are optional,
and each is what fastenv asks of an adapter that has it: ``ReportsFastPaths`` (which fast paths
serve), ``RendersAtRate`` (frames per second of its videos), ``SharesWorld`` (envs that advance
one physics world together), ``RescalesPhysics`` (a physics step a vector env may change),
``ObservesKeys`` (an observation of chosen keys, for the frameworks' drop-ins). ``isinstance``
checks a capability's names, not its signatures: ``tests/test_protocols.py`` checks those.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ObsType = Any
Info = dict[str, Any]


@runtime_checkable
class SimulatorAdapter(Protocol):
    """What fastenv needs from a simulator.

    An adapter is built headless and produces only the observation keys it was asked for
    (``select_keys``). ``substep`` runs one action through the controller, physics, reward and
    termination without producing an observation; ``observe`` produces one on demand; ``step`` is
    the simulator's own step, observation included. Spaces are those of one env.

    ``shared_physics`` is True when the adapter's envs live in one physics world that advances as
    a whole (ManiSkill on GPU, OmniGibson); ``physics_dt`` and ``set_physics_dt`` expose that
    world's step so a vector env can rescale it.
    """

    action_space: spaces.Space
    observation_space: spaces.Space
    render_mode: str | None
    shared_physics: bool

    def available_keys(self) -> tuple[str, ...]:
        """Every observation key this simulator can produce (built or not)."""
        ...

    def select_keys(self, keys: Sequence[str] | None) -> None:
        """Produce only ``keys`` from now on (None: the simulator's default set)."""
        ...

    def make_headless(self, render_mode: str | None) -> None:
        """Close any on-screen viewer; keep only ``render_mode`` (None or "rgb_array")."""
        ...

    def reset(
        self, *, seed: int | None, options: Mapping[str, Any] | None, rng: np.random.Generator
    ) -> tuple[ObsType, Info]:
        """Start an episode; ``rng`` is the env's generator for choices such as the init state."""
        ...

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        """Advance one action without producing an observation: (reward, terminated, truncated, info)."""
        ...

    def observe(self) -> ObsType:
        """Produce the observation of the current state."""
        ...

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        """The simulator's own step, observation included."""
        ...

    def render(self) -> np.ndarray | None:
        """An RGB frame when ``render_mode == "rgb_array"``, else None."""
        ...

    def close(self) -> None:
        """Release the simulator; calling it twice is allowed."""
        ...


@runtime_checkable
class ReportsFastPaths(Protocol):
    """An adapter with fast paths of its own says which serve now (``SimEnv.fast_paths``)."""

    def fast_paths(self) -> Mapping[str, bool]:
        """Each fast path (a ``FastPath``) and whether it serves this env now."""
        ...


@runtime_checkable
class RendersAtRate(Protocol):
    """An adapter whose frames have a rate of their own (``SimEnv.metadata["render_fps"]``)."""

    render_fps: int


@runtime_checkable
class SharesWorld(Protocol):
    """An adapter whose envs live in one physics world that advances as a whole (``shared_physics``).

    A sub-step is split in three so a batch of envs advances the world once: ``set_action`` (this
    env's action), ``advance_world`` (one step of the world, every env in it), ``evaluate`` (this
    env's reward and termination).
    """

    def set_action(self, action: Any) -> None:
        """Apply this env's action; the world advances later."""
        ...

    def advance_world(self) -> None:
        """One step of the shared world, for every env in it."""
        ...

    def evaluate(self) -> tuple[float, bool, bool, Info]:
        """This env's side of the world step: (reward, terminated, truncated, info)."""
        ...


@runtime_checkable
class RescalesPhysics(Protocol):
    """An adapter whose physics step a vector env may change (its pipeline stages share one world)."""

    base_physics_dt: float

    def set_physics_dt(self, dt: float) -> None:
        """Set the world's physics step (seconds)."""
        ...


@runtime_checkable
class ObservesKeys(Protocol):
    """An adapter that produces an observation of chosen keys on demand (the frameworks' drop-ins)."""

    def observe(self, keys: Sequence[str] | None = None) -> ObsType:
        """The observation of ``keys`` now (None: the selected keys)."""
        ...


ADAPTER_CAPABILITIES = (ReportsFastPaths, RendersAtRate, SharesWorld, RescalesPhysics, ObservesKeys)


@runtime_checkable
class BatchSimulator(Protocol):
    """A batch of ``num_envs`` envs that fastenv's executor steps by rows.

    ``rows`` are 1-D integer index arrays of ``ops``' kind (numpy, or torch on the simulator's
    device). A simulator that steps its envs one by one (``batched = False``) returns
    observations and infos as lists with one entry per row; a natively batched one
    (``batched = True``: ManiSkill on GPU, all envs in one physics world) returns batched
    structures over the rows. Rewards, terminated and truncated are arrays over the rows.

    ``substep`` advances the rows one action without producing observations; ``step`` is the
    simulator's own step (observations included); ``observe`` produces the rows' observations
    now. A simulator whose envs share one world advances it once per call, for all rows of it.
    """

    num_envs: int
    batched: bool
    ops: Any
    single_observation_space: spaces.Space
    single_action_space: spaces.Space

    def reset(self, rows: Any, seeds: Sequence[int | None] | None, options: Mapping[str, Any] | None) -> tuple[Any, Any]:
        """Start new episodes in ``rows``: (observations, infos)."""
        ...

    def substep(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any]:
        """One action per row, no observation: (rewards, terminated, truncated, infos)."""
        ...

    def step(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        """The simulator's own step of ``rows``: (observations, rewards, terminated, truncated, infos)."""
        ...

    def observe(self, rows: Any) -> Any:
        """The observations of ``rows`` now."""
        ...


def select_dict_keys(space: spaces.Space, keys: Sequence[str], available: Sequence[str]) -> spaces.Dict:
    """The sub-space of a Dict space with ``keys``; unknown keys raise ValueError listing the rest."""
    if not isinstance(space, spaces.Dict):
        raise ValueError(
            f"modality selection needs a Dict observation space, got {type(space).__name__}: {space}"
        )
    check_known_keys(keys, available)
    return spaces.Dict({key: space[key] for key in keys})


def check_known_keys(keys: Sequence[str], available: Sequence[str]) -> list[str]:
    """Return ``keys`` as a list without duplicates, or raise ValueError naming the unknown ones."""
    if isinstance(keys, str):
        raise TypeError(f"modalities must be a sequence of keys, got the string {keys!r}")
    keys = list(dict.fromkeys(keys))
    if not keys:
        raise ValueError("modalities must name at least one observation key, got an empty list")
    unknown = [key for key in keys if key not in available]
    if unknown:
        import difflib

        close = {key: difflib.get_close_matches(key, list(available), n=1) for key in unknown}
        hints = "; ".join(f"{key!r}: did you mean {match[0]!r}?" for key, match in close.items() if match)
        raise ValueError(
            f"unknown observation key(s) {unknown}" + (f" ({hints})" if hints else "") + f"; available keys: {sorted(available)}"
        )
    return keys


class GymAdapter:
    """Adapter for any Gymnasium env: same semantics, no speed-up.

    ``substep`` steps the env normally and keeps its observation aside, so the wrappers work on
    every env; keys are selected by filtering a Dict observation, not at the source.
    """

    shared_physics = False

    def __init__(self, env: gym.Env) -> None:
        if not isinstance(env, gym.Env):
            raise TypeError(f"GymAdapter wraps a gymnasium.Env, got {type(env).__name__}")
        self.env = env
        self.action_space = env.action_space
        self._full_space = env.observation_space
        self.observation_space = env.observation_space
        self.render_mode = env.render_mode
        self._keys: list[str] | None = None
        self._last_obs: ObsType = None

    def available_keys(self) -> tuple[str, ...]:
        if isinstance(self._full_space, spaces.Dict):
            return tuple(self._full_space.keys())
        return ()

    def select_keys(self, keys: Sequence[str] | None) -> None:
        if keys is None:
            self._keys, self.observation_space = None, self._full_space
            return
        self.observation_space = select_dict_keys(self._full_space, keys, self.available_keys())
        self._keys = list(self.observation_space.keys())

    def make_headless(self, render_mode: str | None) -> None:
        self.render_mode = make_gym_env_headless(self.env, render_mode)

    def _filter(self, obs: ObsType) -> ObsType:
        if self._keys is None:
            return obs
        return {key: obs[key] for key in self._keys}

    def reset(
        self, *, seed: int | None, options: Mapping[str, Any] | None, rng: np.random.Generator
    ) -> tuple[ObsType, Info]:
        obs, info = self.env.reset(seed=seed, options=None if options is None else dict(options))
        self._last_obs = obs
        return self._filter(obs), info

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._last_obs = obs
        return reward, terminated, truncated, info

    def observe(self) -> ObsType:
        if self._last_obs is None:
            raise RuntimeError("observe() called before reset()")
        return self._filter(self._last_obs)

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._last_obs = obs
        return self._filter(obs), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


KEEP = "keep"  # headless render mode: keep the frames the env was built to give (see headless_render_mode)


def headless_render_mode(current: str | None, wanted: str | None, supported: Sequence[str]) -> str | None:
    """The render mode an env gets when made headless.

    ``wanted`` is None (no frames), "rgb_array" (frames from ``render()``), or ``KEEP``: the
    env's own mode, with "human" (a window) turned into "rgb_array" where the env supports it.
    Headless means no window, not no frames.
    """
    if wanted not in (None, "rgb_array", KEEP):
        raise ValueError(f"a headless env renders to None, 'rgb_array' or {KEEP!r}, got {wanted!r}")
    if wanted == KEEP:
        if current in (None, "rgb_array"):
            return current
        return "rgb_array" if "rgb_array" in supported else None
    if wanted is not None and wanted not in supported:
        raise ValueError(f"this env cannot render {wanted!r}; its render modes are {list(supported)}")
    return wanted


def make_gym_env_headless(env: gym.Env, render_mode: str | None) -> str | None:
    """Close a Gymnasium env's window and set its render mode (see ``headless_render_mode``)."""
    base = env.unwrapped
    mode = headless_render_mode(base.render_mode, render_mode, base.metadata.get("render_modes", []))
    if base.render_mode == "human":
        _close_viewer(base)
    if base.render_mode != mode:
        # Gymnasium envs decide at every step whether to draw from their public render_mode.
        base.render_mode = mode
    return mode


def _close_viewer(base: gym.Env) -> None:
    """Close an on-screen viewer that a Gymnasium env already opened."""
    for name in ("mujoco_renderer", "viewer"):
        viewer = getattr(base, name, None)
        if viewer is not None and callable(getattr(viewer, "close", None)):
            viewer.close()
    if getattr(base, "screen", None) is not None:  # pygame-drawn envs (classic control, box2d)
        import pygame

        pygame.display.quit()
        base.screen = None
