"""LIBERO's own env with Gymnasium's API, nothing of fastenv below it: the reference the RL libraries'
same-data tests compare fastenv against (``tests/test_<library>.py``, ``tests/test_stock_reference.py``).

``StockLibero`` steps ``libero.libero.envs.OffScreenRenderEnv`` one action at a time (robosuite's
control loop, a hard reset that reloads the model, every camera LIBERO renders by default rendered
at every step). ``reset(seed=s)`` does what LIBERO's evaluations do: ``env.seed(s)`` (numpy's global
generator), ``env.reset()``, ``env.set_init_state(init_states[i])``, the init state ``i`` drawn from
the env's own Gymnasium generator; an unseeded reset goes on from there. ``terminated`` is LIBERO's
``done`` (its success check); the time limit is Gymnasium's ``TimeLimit`` (``max_episode_steps``
actions). The kept keys are concatenated, in Gymnasium's ``Dict`` order (sorted keys), into one
float32 vector: the flattening every library's MLP policy reads.

``ChunkLoop`` is the reference of an action chunk, written out: K actions stepped one after another,
physics, reward and termination at every one, the rewards summed, the observation the last
step's, stopping early where the episode ends.

Each env is meant to live in a process of its own (a library's subprocess vectorization): robosuite
renders into whichever OpenGL context is current, and LIBERO places its scenes with numpy's global
generator, both shared by every env of a process. ``own_context=True`` makes the env's context
current before each call that renders, for the tests that hold several stock envs in one process.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from gymnasium import spaces  # noqa: E402

def same_data_on_stock_libero(test: Any) -> Any:
    """The marks of each RL library's same-data test on stock LIBERO (``tests/test_<library>.py``): the
    real simulator, many envs at once (one such test at a time), one of the group per commit under CI
    (``FASTENV_CI_FULL=1`` runs them all), at chunk 1 (the stock env's own data) and chunk 8 (the
    reference chunk loop, ``ChunkLoop``)."""
    test = pytest.mark.parametrize("chunk", [1, 8])(test)
    test = pytest.mark.ci_sample("an RL library's collector on LIBERO against its own vectorization of the stock env")(test)
    return pytest.mark.libero(pytest.mark.big_memory(test))


# "put the yellow and white mug in the microwave and close it": a microwave placed at random and a door
# sampler, which LIBERO draws again at every reset (its scenes differ from episode to episode)
SUITE, TASK_ID = "libero_10", 9
KEYS = ("agentview_image", "robot0_proprio-state")
MAX_EPISODE_STEPS = 20  # simulator steps; with success from step 17 on (schedule_success), episodes end both ways
CAMERA = 32


def _task(suite: str, task_id: int) -> tuple[str, np.ndarray]:
    """The task's BDDL file and init states, read through LIBERO's benchmark API."""
    from libero.libero import benchmark, get_libero_path

    bench = benchmark.get_benchmark_dict()[suite]()
    task = bench.get_task(task_id)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    return bddl, bench.get_task_init_states(task_id)


class StockLibero(gym.Env):
    """LIBERO's ``OffScreenRenderEnv``, its observation keys ``keys`` flattened into one float32 vector."""

    metadata = {"render_modes": []}

    def __init__(self, suite: str = SUITE, task_id: int = TASK_ID, *, camera_size: int = CAMERA, keys: tuple[str, ...] = KEYS,
                 own_context: bool = False) -> None:
        from libero.libero.envs import OffScreenRenderEnv

        bddl, self.init_states = _task(suite, task_id)
        self.env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=camera_size, camera_widths=camera_size)
        self.keys = sorted(keys)  # Gymnasium's Dict order
        self.own_context = own_context
        shapes = self._current_shapes()
        low = np.concatenate([np.full(int(np.prod(shapes[k])), 0.0 if k.endswith("_image") else -np.inf, np.float32) for k in self.keys])
        self.observation_space = spaces.Box(low, np.where(low == 0.0, np.float32(255), np.float32(np.inf)), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (7,), np.float32)

    def _current_shapes(self) -> dict[str, tuple[int, ...]]:
        spec = self.env.env.observation_spec()
        return {k: np.shape(spec[k]) for k in self.keys}

    def _current(self) -> None:
        if self.own_context:
            self.env.env.sim._render_context_offscreen.gl_ctx.make_current()

    def _flat(self, obs: dict[str, Any]) -> np.ndarray:
        return np.concatenate([np.asarray(obs[k], dtype=np.float32).ravel() for k in self.keys])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.env.seed(seed)
        state_id = int(self.np_random.integers(len(self.init_states)))
        self._current()
        self.env.reset()  # a hard reset makes a new render context, current from then on
        self._current()
        return self._flat(self.env.set_init_state(self.init_states[state_id])), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self._current()
        obs, reward, done, _ = self.env.step(np.asarray(action, dtype=np.float64))
        return self._flat(obs), float(reward), bool(done), False, {}

    def close(self) -> None:
        self._current()
        self.env.close()


class ChunkLoop(gym.Wrapper):
    """K actions a step (a flat ``K * 7`` vector), each stepped by the env below; the rewards summed."""

    def __init__(self, env: gym.Env, chunk: int) -> None:
        super().__init__(env)
        self.chunk = chunk
        inner = env.action_space
        self.action_space = spaces.Box(np.tile(inner.low, chunk), np.tile(inner.high, chunk), dtype=inner.dtype)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        total = 0.0
        for sub in np.asarray(action).reshape(self.chunk, -1):
            obs, reward, terminated, truncated, info = self.env.step(sub)
            total += reward
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def make_stock(*, chunk: int = 1, max_episode_steps: int = MAX_EPISODE_STEPS, camera_size: int = CAMERA, suite: str = SUITE, task_id: int = TASK_ID,
               keys: tuple[str, ...] = KEYS, own_context: bool = False) -> gym.Env:
    """One stock env: ``StockLibero`` under Gymnasium's ``TimeLimit`` (simulator steps), in chunks of ``chunk``."""
    from gymnasium.wrappers import TimeLimit

    env = TimeLimit(StockLibero(suite, task_id, camera_size=camera_size, keys=keys, own_context=own_context), max_episode_steps)
    return env if chunk == 1 else ChunkLoop(env, chunk)


def fastenv_options(chunk: int) -> dict[str, Any]:
    """fastenv's LIBERO options for the same env as ``make_stock(chunk=chunk)``: every fast path on (the defaults)."""
    return {"suite": SUITE, "task_id": TASK_ID, "chunk": chunk, "camera_size": CAMERA, "modalities": list(KEYS),
            "max_episode_steps": MAX_EPISODE_STEPS, "flatten": True}


def schedule_success(monkeypatch: Any, after: int = 16) -> None:
    """LIBERO's success check fires on a schedule set by the robot's state, from step ``after + 1`` on,
    in every process started from now on (the stock envs' and fastenv's workers alike), so that short
    runs of random actions end episodes by success as well as by the time limit. This process stays
    as it is: build LIBERO envs in other processes only.
    """
    from fastenv.conformance import success_schedule

    monkeypatch.setenv(success_schedule.VARIABLE, "1")
    monkeypatch.setenv("FASTENV_SUCCESS_AFTER", str(after))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([success_schedule.HOOK, *paths]))


# What fastenv's LIBERO env adds to an info that LIBERO's own env does not give (docs/backends/libero.md):
# the instruction and the init state drawn at a reset, LIBERO's success flag and the chunk keys at a step.
FASTENV_INFO_KEYS = frozenset({"language_instruction", "init_state_id", "success", "chunk_steps", "chunk_rewards"})


def stock_info(info: dict[str, Any]) -> dict[str, Any]:
    """An info of fastenv's LIBERO env (per env, or batched by a library) less ``FASTENV_INFO_KEYS``:
    what the stock env's info holds beside the keys both give."""
    return {key: value for key, value in info.items() if key not in FASTENV_INFO_KEYS}
