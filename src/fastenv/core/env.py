"""SimEnv: a Gymnasium env over a simulator adapter, with the sub-step and observe-on-demand API."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from fastenv import gpus
from fastenv._validation import check_action, check_positive_int
from fastenv.core.protocol import (
    KEEP,
    Info,
    ObsType,
    RendersAtRate,
    ReportsFastPaths,
    SharesWorld,
    SimulatorAdapter,
    check_known_keys,
    headless_render_mode,
)


class SimEnv(gym.Env):
    """A Gymnasium env over a :class:`SimulatorAdapter`.

    Beyond ``reset``/``step`` it offers ``substep`` (advance one action, no observation) and
    ``observe`` (the observation now), which the executor uses to skip observations.
    ``max_episode_steps`` counts simulator steps, sub-steps included, and truncates; the step that
    truncates is the simulator's own, so the final observation is the stock one.

    Which keys the simulator produces is the union of what the wrappers above ask for
    (``request_modalities``), so two wrappers over one env never take keys from each other.

    Examples:
        >>> env = SimEnv(GymAdapter(gym.make("CartPole-v1")))
    """

    def __init__(self, adapter: SimulatorAdapter, *, max_episode_steps: int | None = None) -> None:
        if not isinstance(adapter, SimulatorAdapter):
            raise TypeError(f"SimEnv needs a SimulatorAdapter, got {type(adapter).__name__}")
        self.adapter = adapter
        self.max_episode_steps = (
            None if max_episode_steps is None else check_positive_int("max_episode_steps", max_episode_steps)
        )
        self.action_space = adapter.action_space
        self.observation_space = adapter.observation_space
        self.render_mode = adapter.render_mode
        base_metadata = getattr(getattr(adapter, "env", None), "metadata", {})  # a wrapped Gymnasium env's (GymAdapter)
        self.metadata = {
            "render_modes": ["rgb_array"],
            "render_fps": base_metadata.get("render_fps", adapter.render_fps if isinstance(adapter, RendersAtRate) else 20),
        }
        # what the adapter can do beyond the protocol, asked once (steps_world_together is read every sub-step)
        self._reports_fast_paths = isinstance(adapter, ReportsFastPaths)
        self._shares_world = isinstance(adapter, SharesWorld)
        self.elapsed_steps = 0
        self._pending_obs: ObsType = None
        self._requests: dict[Hashable, tuple[str, ...]] = {}
        self._closed = False

    # -- fastenv capabilities -------------------------------------------------------------------
    def available_modalities(self) -> tuple[str, ...]:
        """Observation keys the simulator can produce."""
        return self.adapter.available_keys()

    def select_modalities(self, keys: Sequence[str] | None) -> None:
        """This env's own selection: produce ``keys`` (None: the simulator's default set).

        Keys wrappers asked for (``request_modalities``) are produced as well.
        """
        self.request_modalities(self, keys)

    def request_modalities(self, owner: Hashable, keys: Sequence[str] | None) -> None:
        """``owner`` (a wrapper) needs ``keys``; the simulator produces the union of all requests."""
        if keys is not None:
            keys = tuple(check_known_keys(keys, self.available_modalities()))
        requests = dict(self._requests)
        if keys is None:
            requests.pop(owner, None)
        else:
            requests[owner] = keys
        self._apply(requests)

    def release_modalities(self, owner: Hashable) -> None:
        """``owner`` no longer needs any key."""
        if owner in self._requests:
            requests = dict(self._requests)
            del requests[owner]
            self._apply(requests)

    def _apply(self, requests: dict[Hashable, tuple[str, ...]]) -> None:
        union = list(dict.fromkeys(key for keys in requests.values() for key in keys)) if requests else None
        self.adapter.select_keys(union)  # raises before anything changes on unknown keys
        self._requests = requests
        self.observation_space = self.adapter.observation_space

    def make_headless(self, render_mode: str | None = KEEP) -> None:
        """Close any viewer; render only to arrays ("rgb_array"), or not at all (None)."""
        mode = headless_render_mode(self.adapter.render_mode, render_mode, ["rgb_array"])
        self.adapter.make_headless(mode)
        self.render_mode = self.adapter.render_mode

    def fast_paths(self) -> dict[str, bool]:
        """Which of the simulator's fast paths serve this env now (empty where its backend has none).

        Examples:
            >>> env.fast_paths()  # a LIBERO env
            {'compiled control loop': True, 'compiled policy step': True, ...}
        """
        return dict(self.adapter.fast_paths()) if self._reports_fast_paths else {}

    def renderer(self) -> dict[str, Any]:
        """What this env's process renders with (``fastenv.gpus``): the API (EGL, Vulkan), the
        renderer's name, whether it is a CPU renderer, the EGL device and how it was matched to the
        process's GPU; ``renderer`` None where nothing has rendered in the process yet.

        Examples:
            >>> env.renderer()  # a LIBERO env on an H100
            {'pid': 4242, 'api': 'EGL', 'renderer': 'NVIDIA H100 80GB HBM3/PCIe/SSE2', 'software': False, ...}
        """
        import os

        return {"pid": os.getpid(), "api": None, "renderer": None, "software": None, **(gpus.renderer_in_use() or {})}

    @property
    def shared_physics(self) -> bool:
        """True when this env's physics world is shared with other envs in the process."""
        return bool(getattr(self.adapter, "shared_physics", False))

    @property
    def base_physics_dt(self) -> float:
        """The physics step the simulator was built with (seconds)."""
        return self.adapter.base_physics_dt

    def set_physics_dt(self, dt: float) -> None:
        """Change the physics step (used by vector envs whose stages share one physics world)."""
        self.adapter.set_physics_dt(dt)

    # -- a physics world shared with the other envs of the process ---------------------------------
    @property
    def steps_world_together(self) -> bool:
        """True when envs of this process advance one shared world together.

        Such an adapter splits a sub-step into ``set_action`` (this env's action),
        ``advance_world`` (one step of the world, for every env in it) and ``evaluate`` (this env's
        reward and termination), so a batch of envs advances the world once per sub-step.
        """
        return self._shares_world and self.shared_physics

    def prepare(self, action: Any) -> None:
        """Apply this env's action; the world advances later, once for all (``advance_world``)."""
        action = check_action(action, self.action_space)
        self._pending_obs = None
        self.adapter.set_action(action)

    def advance_world(self) -> None:
        """One step of the shared world, for every env in it."""
        self.adapter.advance_world()

    def conclude(self) -> tuple[float, bool, bool, Info]:
        """This env's side of the world step: (reward, terminated, truncated, info)."""
        self.elapsed_steps += 1
        reward, terminated, truncated, info = self.adapter.evaluate()
        return float(reward), bool(terminated), bool(truncated) or self._truncates_now(), info

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        """Advance one action without an observation: (reward, terminated, truncated, info)."""
        if self._closed:
            raise self._closed_error()
        if self.steps_world_together:
            self.prepare(action)
            self.advance_world()
            return self.conclude()
        action = check_action(action, self.action_space)
        self._pending_obs = None
        self.elapsed_steps += 1
        if self._truncates_now():
            # The episode ends on this step whatever happens: take the simulator's own step so the
            # final observation, used to bootstrap the truncated return, is exactly the stock one.
            obs, reward, terminated, truncated, info = self.adapter.step(action)
            self._pending_obs = obs
            return float(reward), bool(terminated), True, info
        reward, terminated, truncated, info = self.adapter.substep(action)
        return float(reward), bool(terminated), bool(truncated), info

    def observe(self) -> ObsType:
        """The observation of the current state (the stock one when the last sub-step truncated)."""
        if self._closed:
            raise self._closed_error()
        if self._pending_obs is not None:
            obs, self._pending_obs = self._pending_obs, None
            return obs
        return self.adapter.observe()

    # -- Gymnasium API --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[ObsType, Info]:
        if self._closed:
            raise self._closed_error()
        super().reset(seed=seed)
        self._pending_obs = None
        obs, info = self.adapter.reset(seed=seed, options=options, rng=self.np_random)
        self.elapsed_steps = 0
        return obs, info

    def step(self, action: Any) -> tuple[ObsType, SupportsFloat, bool, bool, Info]:
        if self._closed:
            raise self._closed_error()
        action = check_action(action, self.action_space)
        self._pending_obs = None
        obs, reward, terminated, truncated, info = self.adapter.step(action)
        self.elapsed_steps += 1
        return obs, float(reward), bool(terminated), bool(truncated) or self._truncates_now(), info

    def _truncates_now(self) -> bool:
        return self.max_episode_steps is not None and self.elapsed_steps >= self.max_episode_steps

    def render(self) -> np.ndarray | None:
        return self.adapter.render()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.adapter.close()

    def _closed_error(self) -> gym.error.ClosedEnvironmentError:
        # (the adapter let its simulator go: it would fail on a None; checked inline, a sub-step is hot)
        return gym.error.ClosedEnvironmentError(f"{self!r} is closed: build a new env to step or reset again")

    def __repr__(self) -> str:
        return f"<SimEnv {type(self.adapter).__name__}>"
