"""The compiled LIBERO control loop against robosuite's own loop under every BLAS kernel set numpy's
OpenBLAS can dispatch to on this CPU.

One machine runs one kernel set; ``OPENBLAS_CORETYPE`` (read once, when OpenBLAS loads) makes a
process run another. For each core type a child process is started with it set; the child builds
two envs of one LIBERO task, one stepped by fastenv's compiled control loop (its policy step
included) and one by robosuite's own loop, steps both with the same actions (the gripper
toggling, the arm pushed into the table: contacts), and compares after every env step the whole
simulator state, the sensors, what the controller and the robot's buffers hold, and the final
observation, bit for bit. A fast path that steps aside (a ``fastenv:`` warning) fails the core type
as a difference would. Where the CPU lacks a core type's instructions OpenBLAS runs another, and
the table says which ran ("served").

    python -m fastenv.conformance.core_types --out results/conformance_core_types.json

``--core-types`` picks some (a test samples them per commit); ``--steps`` sets the env steps.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any

from fastenv.core.fast_paths import FastPath

# OpenBLAS's x86-64 core types (its DYNAMIC_ARCH names), oldest first; "" is the machine's own choice.
CORE_TYPES = ("", "Prescott", "Nehalem", "SandyBridge", "Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids")
TASKS = ("libero_goal/5", "libero_10/0", "libero_spatial/2", "libero_object/4", "libero_90/35")
STEPS = 60
STEP_FIELDS = ("qpos", "qvel", "act", "qacc", "qacc_warmstart", "ctrl", "qfrc_constraint", "efc_force", "xpos", "sensordata", "cacc",
               "cfrc_int", "cfrc_ext", "time")
CONTROLLER = ("ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel", "joint_pos", "joint_vel", "J_pos", "J_ori", "J_full", "mass_matrix",
              "torques")
BUFFERS = ("recent_qpos", "recent_actions", "recent_torques", "recent_ee_forcetorques", "recent_ee_pose", "recent_ee_vel", "recent_ee_acc")


def task_for(core_type: str) -> str:
    """The task a core type is checked on (they differ, so a sweep covers several scenes)."""
    return TASKS[CORE_TYPES.index(core_type) % len(TASKS)] if core_type in CORE_TYPES else TASKS[0]


def check(task: str, steps: int = STEPS, seed: int = 0) -> dict[str, Any]:
    """In this process: fastenv's compiled loop against robosuite's own on ``task`` (suite/id), bit for bit."""
    import warnings

    import numpy as np

    from fastenv.backends.libero import LiberoAdapter, LiberoTask, machine_facts

    suite, task_id = task.split("/")
    out: dict[str, Any] = {"task": task, "steps": steps, "served": machine_facts.blas().core_type, "difference": None}
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always", RuntimeWarning)
        libero_task = LiberoTask.load(suite, int(task_id))
        fast, stock = (LiberoAdapter(libero_task, keys=["robot0_proprio-state"], camera_size=32) for _ in range(2))
        stock.fast_substep = False
        try:
            rng = np.random.default_rng(seed)
            actions = rng.uniform(-1, 1, (steps, 7)).astype(np.float32)
            actions[:, 2] -= 0.5  # down into the table and the objects: contacts
            actions[:, -1] = np.sign(np.sin(np.arange(steps) / 4.0))  # the gripper toggles
            for adapter in (fast, stock):
                adapter.reset(seed=seed, options={"init_state_id": seed % 10}, rng=np.random.default_rng(seed))
            compared = 0
            for k, action in enumerate(actions):
                if fast.substep(action) != stock.substep(action):
                    out["difference"] = f"reward or flags at env step {k}"
                    break
                where = _first_difference(fast._raw, stock._raw)
                compared += 1
                if where:
                    out["difference"] = f"{where} after env step {k + 1}"
                    break
            if out["difference"] is None:
                a, b = fast.observe()["robot0_proprio-state"], stock.observe()["robot0_proprio-state"]
                if a.tobytes() != b.tobytes():
                    out["difference"] = "the final observation"
            loop = fast._control_loop()
            out[FastPath.COMPILED_CONTROL_LOOP] = bool(loop is not None and loop._checked)
            out["controller linear algebra"] = linear_algebra()
            out[FastPath.COMPILED_POLICY_STEP] = bool(loop is not None and loop._policy is not None and loop._policy.checked)
            out["env steps compared"] = compared
        finally:
            fast.close()
            stock.close()
    out["said"] = list(dict.fromkeys(str(w.message) for w in said if str(w.message).startswith("fastenv:")))
    out["passed"] = bool(out["difference"] is None and out.get(FastPath.COMPILED_CONTROL_LOOP) and out.get(FastPath.COMPILED_POLICY_STEP)
                        and not out["said"])
    return out


def linear_algebra() -> str | None:
    """How the compiled loop computed the controller's linear algebra in this process (``_kernels.LA_LEVELS``)."""
    from fastenv.backends.libero.compiled import kernel

    built = kernel()
    if built is None or built.level is None:
        return None
    return built._kernels.LA_LEVELS[built.level]


def _first_difference(a: Any, b: Any) -> str | None:
    import numpy as np

    for name in STEP_FIELDS:
        if np.asarray(getattr(a.sim.data, name)).tobytes() != np.asarray(getattr(b.sim.data, name)).tobytes():
            return f"data.{name}"
    ra, rb = a.robots[0], b.robots[0]
    for name in CONTROLLER:
        x, y = np.asarray(getattr(ra.controller, name)), np.asarray(getattr(rb.controller, name))
        if x.shape != y.shape or x.tobytes(order="A") != y.tobytes(order="A"):
            return f"controller.{name}"
    for name in BUFFERS:
        for part in ("last", "current"):
            x, y = np.asarray(getattr(getattr(ra, name), part)), np.asarray(getattr(getattr(rb, name), part))
            if x.dtype != y.dtype or x.tobytes() != y.tobytes():
                return f"robot.{name}.{part}"
    if ra.recent_ee_vel_buffer.buf.tobytes() != rb.recent_ee_vel_buffer.buf.tobytes():
        return "robot.recent_ee_vel_buffer"
    return None


def run_child(core_type: str, task: str | None = None, steps: int = STEPS, timeout: float = 900.0) -> dict[str, Any]:
    """``check`` in a child process with ``OPENBLAS_CORETYPE=core_type`` ("": unset, the machine's own)."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    if core_type:
        env["OPENBLAS_CORETYPE"] = core_type
    env.setdefault("FASTENV_COMPILE", "inline")  # compiled from the first step (numba's cache, when it holds them)
    task = task or task_for(core_type)
    start = time.perf_counter()
    try:
        run = subprocess.run([sys.executable, "-m", "fastenv.conformance.core_types", "--child", task, "--steps", str(steps)],
                             env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"core_type": core_type, "task": task, "passed": False, "difference": f"no answer in {timeout:.0f} s"}
    lines = run.stdout.strip().splitlines()
    try:
        out = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"core_type": core_type, "task": task, "passed": False, "difference": f"the child exited {run.returncode}: {run.stderr[-2000:]}"}
    out["core_type"] = core_type
    out["seconds"] = round(time.perf_counter() - start, 1)
    return out


def sweep(core_types: tuple[str, ...] = CORE_TYPES, steps: int = STEPS) -> dict[str, Any]:
    """Every core type in a child; the table with the stack it ran on."""
    from fastenv.backends.libero.mujoco_facts import installed_stack
    from fastenv.doctor import cpu

    rows = [run_child(c, steps=steps) for c in core_types]
    return {
        "command": "python -m fastenv.conformance.core_types " + " ".join(sys.argv[1:]),
        "machine": {**cpu(), "platform": platform.platform()},
        "stack": installed_stack(),
        "served_kernel_sets": sorted({r.get("served") or "?" for r in rows}),
        "passed": all(r.get("passed") for r in rows),
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fastenv.conformance.core_types", description=__doc__.split("\n\n")[0])
    parser.add_argument("--core-types", nargs="+", metavar="NAME", help=f"the core types (default all: {', '.join(c or 'own' for c in CORE_TYPES)}; "
                        "'own' is the machine's own choice)")
    parser.add_argument("--steps", type=int, default=STEPS, help="env steps per core type (default %(default)s)")
    parser.add_argument("--out", help="write the table as JSON here")
    parser.add_argument("--child", metavar="TASK", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(check(args.child, args.steps)))
        return 0
    chosen = tuple("" if c == "own" else c for c in (args.core_types or [c or "own" for c in CORE_TYPES]))
    table = sweep(chosen, args.steps)
    for row in table["rows"]:
        mark = "equal" if row.get("passed") else f"FAILED: {row.get('difference') or row.get('said')}"
        print(f"OPENBLAS_CORETYPE={row['core_type'] or '(unset)':15} served {row.get('served') or '?':12} {row['task']:18} {mark}"
              f" (linear algebra: {row.get('controller linear algebra')})")
    print(f"kernel sets that ran: {', '.join(table['served_kernel_sets'])}")
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(table, f, indent=2)
    return 0 if table["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
