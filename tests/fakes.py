"""Tiny injectable fakes for pure-logic tests (the real simulator tests use LIBERO)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv.core.arrays import get_row, put_rows, take_rows


class FakeViewer:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


class CountingEnv(gym.Env):
    """Dict observation {"pos", "vel", "image"}; reward = step index; counts how often it observes.

    Terminates at ``terminate_at`` and truncates at ``truncate_at`` (steps since reset).
    """

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": 10}

    def __init__(
        self, terminate_at: int | None = None, truncate_at: int | None = None, render_mode: str | None = None
    ) -> None:
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-np.inf, np.inf, (2,), np.float64),
                "vel": spaces.Box(-np.inf, np.inf, (2,), np.float64),
                "image": spaces.Box(0, 255, (4, 4, 3), np.uint8),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.terminate_at, self.truncate_at = terminate_at, truncate_at
        self.render_mode = render_mode
        self.viewer = FakeViewer() if render_mode == "human" else None
        self.t = 0
        self.pos = np.zeros(2)
        self.observations_made = 0
        self.actions: list[np.ndarray] = []

    def _obs(self) -> dict[str, np.ndarray]:
        self.observations_made += 1
        image = np.full((4, 4, 3), self.t % 256, np.uint8)
        return {"pos": self.pos.copy(), "vel": np.full(2, float(self.t)), "image": image}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        self.pos = self.np_random.uniform(-1, 1, 2)
        return self._obs(), {"reset": True}

    def step(self, action: Any):
        self.actions.append(np.asarray(action).copy())
        self.t += 1
        self.pos = self.pos + np.asarray(action, dtype=np.float64)
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        truncated = self.truncate_at is not None and self.t >= self.truncate_at
        return self._obs(), float(self.t), terminated, truncated, {"t": self.t}

    def render(self):
        if self.render_mode == "rgb_array":
            return np.zeros((8, 8, 3), np.uint8)
        return None


class FakeAdapter:
    """A SimulatorAdapter with a counter state; records which calls produced an observation."""

    shared_physics = False

    def __init__(self, terminate_at: int | None = None, truncate_at: int | None = None) -> None:
        self.action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self._full = spaces.Dict(
            {"state": spaces.Box(-np.inf, np.inf, (1,), np.float64), "rgb": spaces.Box(0, 255, (2, 2, 3), np.uint8)}
        )
        self.observation_space = self._full
        self.keys = ("state", "rgb")
        self.render_mode = None
        self.terminate_at, self.truncate_at = terminate_at, truncate_at
        self.t = 0
        self.calls: list[str] = []
        self.headless_calls: list[Any] = []

    def available_keys(self) -> tuple[str, ...]:
        return ("state", "rgb")

    def select_keys(self, keys):
        from fastenv.core.protocol import check_known_keys

        self.keys = tuple(check_known_keys(keys, self.available_keys())) if keys else ("state", "rgb")
        self.observation_space = spaces.Dict({k: self._full[k] for k in self.keys})

    def make_headless(self, render_mode):
        self.headless_calls.append(render_mode)
        self.render_mode = render_mode

    def _obs(self):
        full = {"state": np.array([float(self.t)]), "rgb": np.full((2, 2, 3), self.t, np.uint8)}
        return {k: full[k] for k in self.keys}

    def reset(self, *, seed, options, rng):
        self.t = 0
        self.calls.append("reset")
        return self._obs(), {}

    def _advance(self):
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        truncated = self.truncate_at is not None and self.t >= self.truncate_at
        return float(self.t), terminated, truncated, {"t": self.t}

    def substep(self, action):
        self.calls.append("substep")
        return self._advance()

    def observe(self):
        self.calls.append("observe")
        return self._obs()

    def step(self, action):
        self.calls.append("step")
        reward, terminated, truncated, info = self._advance()
        return self._obs(), reward, terminated, truncated, info

    def render(self):
        return None

    def close(self):
        self.calls.append("close")


class RandomLengthEnv(gym.Env):
    """Dict observation, episodes of random length (drawn from the env's seeded generator).

    Terminates or truncates (chosen at random too) when the episode length is reached.
    """

    metadata = {"render_modes": []}

    def __init__(self, max_len: int = 12) -> None:
        self.observation_space = spaces.Dict(
            {"x": spaces.Box(-10.0, 10.0, (3,), np.float32), "t": spaces.Discrete(100)}
        )
        self.action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.max_len = max_len

    def _obs(self):
        return {"x": self.x.copy(), "t": self.t}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.length = int(self.np_random.integers(1, self.max_len + 1))
        self.ends_by_truncation = bool(self.np_random.integers(2))
        self.x = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return self._obs(), {"length": self.length}

    def step(self, action):
        self.t += 1
        self.x = np.clip(self.x + np.asarray(action, np.float32), -10, 10).astype(np.float32)
        done = self.t >= self.length
        reward = float(self.x.sum())
        info = {"t": self.t}
        return self._obs(), reward, done and not self.ends_by_truncation, done and self.ends_by_truncation, info


class FlatRandomLengthEnv(RandomLengthEnv):
    """RandomLengthEnv observing one float64 vector ``[x, t]`` (what MLP-only libraries such as
    rl_games take; float64 as many Gymnasium envs give it)."""

    def __init__(self, max_len: int = 12) -> None:
        super().__init__(max_len=max_len)
        self.observation_space = spaces.Box(-np.inf, np.inf, (4,), np.float64)

    def _obs(self):
        return np.array([*self.x, self.t], np.float64)


class ScoredEnv(FlatRandomLengthEnv):
    """FlatRandomLengthEnv that reports its episode's return as ``info["scores"]`` when the episode
    ends (the key rl_games' default observer logs)."""

    def reset(self, *, seed=None, options=None):
        self.episode_return = 0.0
        return super().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.episode_return += reward
        if terminated or truncated:
            info["scores"] = self.episode_return
        return obs, reward, terminated, truncated, info


class QuietEnv(RandomLengthEnv):
    """RandomLengthEnv whose resets and steps give empty infos (as most Gymnasium envs do)."""

    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed, options=options)[0], {}

    def step(self, action):
        return (*super().step(action)[:4], {})


class GateEnv(gym.Env):
    """Steps wait while the file ``gate`` exists (set up by a test), then continue.

    Lets tests hold an env mid-step in a worker without timing assumptions. ``raise_at`` makes
    the step with that index raise; a step that waits at the gate first creates ``entered``.
    """

    metadata = {"render_modes": []}

    def __init__(self, gate: str | None = None, raise_at: int | None = None, entered: str | None = None) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.gate, self.raise_at, self.entered = gate, raise_at, entered

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action):
        import os
        import time

        if self.entered is not None and self.gate is not None and os.path.exists(self.gate):
            open(self.entered, "w").close()
        while self.gate is not None and os.path.exists(self.gate):
            time.sleep(0.01)
        self.t += 1
        if self.raise_at is not None and self.t == self.raise_at:
            raise RuntimeError(f"GateEnv failed on purpose at step {self.t}")
        return np.array([float(self.t)]), 1.0, False, False, {}


class SharedWorldAdapter(FakeAdapter):
    """Envs of one process share one physics world, as OmniGibson's do (one ``og.sim``).

    A sub-step is split the way fastenv steps shared worlds: ``set_action`` (this env's target,
    kept until its next action, as a robot controller's command is), ``advance_world`` (one step
    of ``dt`` for the whole world), ``evaluate``. Observations are the world's simulated time and
    step count; ``target_log`` keeps this env's target at every world step.
    """

    shared_physics = True
    base_physics_dt = 0.01
    world = {"time": 0.0, "steps": 0, "members": []}  # one per process

    def __init__(self) -> None:
        super().__init__()
        self.dt = self.base_physics_dt
        self.target = np.zeros(3)
        self.target_log: list[np.ndarray] = []
        self.world["members"].append(self)
        self.observation_space = spaces.Dict(
            {"sim_time": spaces.Box(0, np.inf, (1,), np.float64), "world_steps": spaces.Box(0, np.inf, (1,), np.float64)}
        )

    def set_physics_dt(self, dt: float) -> None:
        self.dt = dt

    def _obs(self):
        return {"sim_time": np.array([self.world["time"]]), "world_steps": np.array([float(self.world["steps"])])}

    def set_action(self, action) -> None:
        self.target = np.asarray(action, dtype=np.float64).copy()

    def advance_world(self) -> None:
        self.world["time"] += self.dt
        self.world["steps"] += 1
        for member in self.world["members"]:
            member.target_log.append(member.target.copy())

    def evaluate(self):
        self.t += 1
        return 0.0, False, False, {}

    def _advance(self):  # never used: SimEnv steps shared worlds through the three calls above
        raise AssertionError("a shared world must advance once for all its envs, not once per env")


def make_shared_world_env():
    from fastenv import SimEnv

    return SimEnv(SharedWorldAdapter())


def make_chunked_shared_world_env():
    import fastenv

    return fastenv.wrap(make_shared_world_env(), chunk=3)


class CountdownEnv(gym.Env):
    """Box observation [steps since reset]; ends after ``length`` steps (truncated unless ``terminate``)."""

    metadata = {"render_modes": []}

    def __init__(self, length: int = 1, terminate: bool = False) -> None:
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.length, self.terminate = length, terminate

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0]), {"start": True}

    def step(self, action):
        self.t += 1
        done = self.t >= self.length
        return np.array([float(self.t)]), float(self.t), done and self.terminate, done and not self.terminate, {"t": self.t}


class DictCountdownEnv(CountdownEnv):
    """CountdownEnv with a dict observation ``{"t": [steps since reset]}``."""

    def __init__(self, length: int = 1, terminate: bool = False) -> None:
        super().__init__(length, terminate)
        self.observation_space = spaces.Dict({"t": self.observation_space})

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return {"t": obs}, info

    def step(self, action):
        obs, *rest = super().step(action)
        return ({"t": obs}, *rest)


def make_chunked_fake(chunk: int = 3, gamma: float | None = 0.5, terminate_at: int | None = None, truncate_at: int | None = 7):
    """A SimEnv over FakeAdapter in fastenv's stack: chunked, sub-steps skip observations."""
    import fastenv
    from fastenv import SimEnv

    return fastenv.wrap(SimEnv(FakeAdapter(terminate_at=terminate_at, truncate_at=truncate_at)), chunk=chunk, gamma=gamma)


class SleepyAdapter(FakeAdapter):
    """FakeAdapter whose calls take known time: a sub-step 2 ms, an observation 5 ms, a reset 20 ms.

    A plain step costs a sub-step and an observation (7 ms). Episodes truncate after ``length``.
    """

    SUBSTEP, OBSERVE, RESET = 0.002, 0.005, 0.020

    def __init__(self, length: int = 6) -> None:
        super().__init__(truncate_at=length)

    def reset(self, *, seed, options, rng):
        time.sleep(self.RESET)
        return super().reset(seed=seed, options=options, rng=rng)

    def substep(self, action):
        time.sleep(self.SUBSTEP)
        return super().substep(action)

    def observe(self):
        time.sleep(self.OBSERVE)
        return super().observe()

    def step(self, action):
        time.sleep(self.SUBSTEP + self.OBSERVE)
        return super().step(action)


def make_sleepy_env(chunk: int = 3, length: int = 6):
    import fastenv
    from fastenv import SimEnv

    return fastenv.wrap(SimEnv(SleepyAdapter(length)), chunk=chunk)


def record_action(action: Any) -> Any:
    """An action exactly as received: (type name, dtype, a copy of its values), leaf by leaf."""
    if isinstance(action, dict):
        return {key: record_action(value) for key, value in action.items()}
    if isinstance(action, tuple):
        return tuple(record_action(value) for value in action)
    return (type(action).__name__, np.asarray(action).dtype.str, np.array(action, copy=True))


class ActionRecorderEnv(gym.Env):
    """Keeps every action it receives (``record_action``) in ``received``; truncates after ``length`` steps."""

    metadata = {"render_modes": []}

    def __init__(self, action_space: spaces.Space | None = None, length: int = 3) -> None:
        self.action_space = action_space if action_space is not None else spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
        self.length = length
        self.received: list[Any] = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0]), {}

    def step(self, action):
        self.received.append(record_action(action))
        self.t += 1
        return np.array([float(self.t)]), 0.0, False, self.t >= self.length, {}


class NoisyEnv(RandomLengthEnv):
    """RandomLengthEnv that draws from its seeded generator on every step too (noise, ``info["draw"]``).

    Its trajectory depends on every draw before it, so a skipped, repeated or re-seeded step
    shows. ``raise_at`` makes its step with that index (counted over episodes) raise.
    """

    def __init__(self, max_len: int = 6, raise_at: int | None = None) -> None:
        super().__init__(max_len=max_len)
        self.raise_at = raise_at
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps == self.raise_at:
            raise RuntimeError(f"NoisyEnv failed on purpose at step {self.steps}")
        noise = self.np_random.normal(0.0, 0.1, 3).astype(np.float32)
        obs, reward, terminated, truncated, info = super().step(np.asarray(action, np.float32) + noise)
        return obs, reward, terminated, truncated, {**info, "draw": float(self.np_random.random())}


class SpaceEnv(gym.Env):
    """Observes samples of ``observation_space`` (drawn from the env's seeded generator); checks
    that each action it gets is in ``action_space``; terminates after ``length`` steps if given."""

    def __init__(self, observation_space, action_space=None, length=None):
        self.observation_space = observation_space
        self.action_space = observation_space if action_space is None else action_space
        self.length = length
        self.t = 0

    def _draw(self):
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        return self.observation_space.sample()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._draw(), {}

    def step(self, action):
        assert action in self.action_space, f"action {action!r} is not in {self.action_space}"
        self.t += 1
        terminated = self.length is not None and self.t >= self.length
        return self._draw(), float(self.t), terminated, False, {}


class WalkEnv(gym.Env):
    """A walk along ``size`` cells: action 1 steps right, 0 stays; reaching the end terminates,
    ``size + 3`` steps truncate. ``nested`` observes a Dict holding a Tuple (as Tianshou's
    dict-state tests do), else a 1-element array."""

    def __init__(self, size: int, nested: bool = False) -> None:
        self.size, self.nested = size, nested
        self.action_space = spaces.Discrete(2)
        cell = spaces.Box(0, 100, (1,), np.float32)
        self.observation_space = (
            spaces.Dict({"cell": cell, "extra": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)))})
            if nested else cell
        )

    def _obs(self):
        cell = np.array([self.cell], np.float32)
        if not self.nested:
            return cell
        return {"cell": cell, "extra": (self.steps % 3, self.np_random.uniform(-1, 1, 2).astype(np.float32))}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell, self.steps = 0, 0
        return self._obs(), {"size": self.size}

    def step(self, action):
        self.cell += int(action)
        self.steps += 1
        terminated = self.cell >= self.size
        return self._obs(), float(terminated), terminated, self.steps >= self.size + 3 and not terminated, {"steps": self.steps}


class ShiftedFinalObservation(gym.vector.VectorWrapper):
    """A deliberately wrong vector env (negative control): each final observation is the one before
    it, where the autoreset mode puts it (``infos["final_obs"]`` in SAME_STEP, the step's own
    observation in NEXT_STEP)."""

    def reset(self, **kwargs):
        obs, infos = self.env.reset(**kwargs)
        self.last = take_rows(obs, slice(None))  # a copy: a library may take over the dict it gets
        return obs, infos

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        ended = np.flatnonzero(terminations | truncations)
        if "final_obs" in infos:
            infos["final_obs"] = infos["final_obs"].copy()
            for i in ended:
                infos["final_obs"][i] = get_row(self.last, i)
        else:
            obs = take_rows(obs, slice(None))
            for i in ended:
                put_rows(obs, i, get_row(self.last, i))
        self.last = take_rows(obs, slice(None))
        return obs, rewards, terminations, truncations, infos


class AlteredReward(gym.vector.VectorWrapper):
    """A deliberately wrong vector env (negative control): env ``index``'s reward at step call ``call``
    (counted from 1 after each reset of all the envs: a ``reset_mask`` reset does not count) is off by ``by``."""

    def __init__(self, env, call: int, index: int = 0, by: float = 1e-6):
        super().__init__(env)
        self.at_call, self.index, self.by, self.calls = call, index, by, 0  # (``call`` is VectorWrapper's method)

    def reset(self, **kwargs):
        if "reset_mask" not in (kwargs.get("options") or {}):
            self.calls = 0
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        self.calls += 1
        if self.calls == self.at_call:
            rewards = np.array(rewards, copy=True)
            rewards[self.index] += self.by
        return obs, rewards, terminations, truncations, infos
