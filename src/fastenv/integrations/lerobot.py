"""LeRobot's LIBERO env on fastenv: LeRobot's own class, eval loop and data, with the waste cut.

LeRobot (``lerobot``, with ``hf-libero``) evaluates on LIBERO through
``lerobot.envs.libero.LiberoEnv`` in a ``SyncVectorEnv``, one action per step (a policy keeps its
chunk in a queue). ``LiberoEnv`` here is LeRobot's class, its ``reset``, ``step``, observation
format, success flags and init-state schedule running as LeRobot wrote them, over a simulator
that wastes less:

- a reset puts the init state into the built model in place, bit for bit a rebuilt one (LIBERO's
  default rebuilds the MuJoCo model and its renderer at every reset: seconds each), without
  rendering the observations nobody reads (robosuite's reset's, and the settling steps' but the
  last);
- each step runs fastenv's control loop (compiled where numba is installed) and renders only the
  observation LeRobot reads: the cameras it asked for, the robot's proprioception, none of the
  object-state sensors LeRobot drops;
- one render context per process for all envs of a task.

LeRobot's loop reads every step's observation, so the chunk-end observation saving does not apply
here; ``fastenv.integrations.rlinf`` and fastenv's own envs have it.

Switch with one import, ``from fastenv.integrations.lerobot import make_env`` in place of
``lerobot.envs.factory``'s, or run ``lerobot-eval`` through fastenv:
``python -m fastenv.integrations.lerobot <lerobot-eval arguments>``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from fastenv._deps import require

__all__ = ["main", "make_env"]  # and LiberoEnv, built at first use where LeRobot is installed

# What LeRobot's LiberoEnv reads of a raw LIBERO observation (``_format_raw_obs``), besides images.
STATE_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "robot0_gripper_qvel", "robot0_joint_pos", "robot0_joint_vel")
HORIZON = 1000  # LIBERO's ControlEnv default, which LeRobot keeps (ignore_done=False)


class _Observation(Mapping):
    """A step's raw observation, computed when first read (the settling steps' never are).

    Read after a later step or reset, it refuses: it would no longer be that step's.
    """

    def __init__(self, sim: _Simulator) -> None:
        self._sim, self._generation, self._value = sim, sim.generation, None

    def _get(self) -> Mapping[str, Any]:
        if self._value is None:
            if self._generation != self._sim.generation:
                raise RuntimeError("a LIBERO observation read after the env moved on: read each step's before the next")
            self._value = self._sim.observe()
        return self._value

    def __getitem__(self, key: str) -> Any:
        return self._get()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


class _Simulator:
    """LIBERO's ``OffScreenRenderEnv`` as LeRobot's ``LiberoEnv`` calls it, on fastenv's adapter."""

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter
        self._reset_pending = True
        self.generation = 0

    # what LeRobot reads through ``self._env``
    @property
    def env(self) -> Any:
        return self._adapter._raw

    @property
    def robots(self) -> Any:
        return self._adapter._raw.robots

    def check_success(self) -> bool:
        return self._adapter._env.check_success()

    def seed(self, seed: int | None) -> None:
        # LIBERO seeds numpy's global generator (OS entropy for None), and its reset draws the
        # scene from it: the reset here draws from a copy of what that seeding left.
        self._adapter._env.seed(seed)
        self._adapter._randomness.state = np.random.get_state()

    def reset(self) -> _Observation:
        # LeRobot puts an init state right after: the reset happens with it (unless none comes).
        self._reset_pending = True
        self.generation += 1
        return _Observation(self)

    def set_init_state(self, state: np.ndarray) -> dict[str, np.ndarray]:
        self._reset(state)
        return self.observe()

    def _reset(self, state: np.ndarray | None) -> None:
        options = None if state is None else {"init_state": state}
        self._adapter.reset(seed=None, options=options, rng=np.random.default_rng())
        self._reset_pending = False
        self.generation += 1

    def observe(self) -> dict[str, np.ndarray]:
        if self._reset_pending:
            self._reset(None)
        return self._adapter.observe()

    def step(self, action: Any) -> tuple[_Observation, float, bool, dict]:
        if self._reset_pending:
            self._reset(None)
        raw = self._adapter._raw
        if raw.timestep >= HORIZON:
            raise ValueError("executing action in terminated episode")  # robosuite's own check and words
        reward, success, _, _ = self._adapter.substep(action)
        self.generation += 1
        return _Observation(self), reward, success, {}  # LIBERO: done is success; robosuite's info is empty

    def close(self) -> None:
        self._adapter.close()


@functools.cache
def _env_class() -> type:
    libero = require("lerobot.envs.libero", "lerobot", "LeRobot (lerobot) with hf-libero")

    class LiberoEnv(libero.LiberoEnv):  # type: ignore[misc, name-defined]
        """LeRobot's ``LiberoEnv`` (same arguments, observations, infos and init-state schedule) on fastenv.

        Examples:
            >>> env = LiberoEnv(task_suite=suite, task_id=3, task_suite_name="libero_goal", obs_type="pixels_agent_pos")
        """

        def _make_envs_task(self, task_suite: Any, task_id: int = 0) -> _Simulator:
            from fastenv.backends.libero import LiberoAdapter, LiberoTask
            from fastenv.backends.libero.task import _libero

            task = task_suite.get_task(task_id)
            self.task = task.name
            self.task_description = task.language
            bddl = f"{_libero().get_libero_path('bddl_files')}/{task.problem_folder}/{task.bddl_file}"
            cameras = [key[: -len("_image")] for key in self.camera_name]
            keys = [f"{cam}_image" for cam in cameras] + list(STATE_KEYS)
            adapter = LiberoAdapter(
                LiberoTask(str(getattr(task_suite, "name", "")), -1, bddl, None, task.language),
                keys=keys, camera_size=(self.observation_height, self.observation_width),
            )
            return _Simulator(adapter)

    LiberoEnv.__module__ = __name__
    return LiberoEnv


@contextlib.contextmanager
def _fastenv_libero() -> Iterator[None]:
    """LeRobot's LIBERO module builds fastenv's env while inside (its env factories look it up by name)."""
    libero = require("lerobot.envs.libero", "lerobot", "LeRobot (lerobot) with hf-libero")
    stock = libero.LiberoEnv
    libero.LiberoEnv = _env_class()
    try:
        yield
    finally:
        libero.LiberoEnv = stock


def make_env(cfg: Any, n_envs: int = 1, use_async_envs: bool = False, **kwargs: Any) -> Any:
    """LeRobot's ``make_env`` with fastenv's LIBERO env: ``{suite: {task_id: vector env}}``.

    Any other env type is LeRobot's own. ``use_async_envs=True`` is refused for LIBERO: LeRobot's
    eval loop reads ``env.envs[0]``, which only ``SyncVectorEnv`` has (it fails the same way with
    LeRobot's env).
    """
    factory = require("lerobot.envs.factory", "lerobot", "LeRobot (lerobot)")
    if "libero" not in str(getattr(cfg, "type", "")):
        return factory.make_env(cfg, n_envs=n_envs, use_async_envs=use_async_envs, **kwargs)
    if use_async_envs:
        raise ValueError(
            "use_async_envs=True with LIBERO: LeRobot's eval loop reads env.envs[0], which only SyncVectorEnv has "
            "(lerobot 0.4.4 fails with AttributeError on its own env too); use the default use_async_envs=False"
        )
    with _fastenv_libero():  # SyncVectorEnv builds its envs here
        return factory.make_env(cfg, n_envs=n_envs, use_async_envs=False, **kwargs)


def main(argv: list[str] | None = None) -> None:
    """``lerobot-eval`` with fastenv's LIBERO env: ``python -m fastenv.integrations.lerobot <its arguments>``."""
    lerobot_eval = require("lerobot.scripts.lerobot_eval", "lerobot", "LeRobot's lerobot-eval")
    if argv is not None:
        sys.argv = [sys.argv[0], *argv]
    lerobot_eval.make_env = make_env  # the name its eval_main calls
    lerobot_eval.main()


def __getattr__(name: str) -> Any:
    # The env class subclasses LeRobot's, so it exists only where LeRobot is installed.
    if name == "LiberoEnv":
        return _env_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
