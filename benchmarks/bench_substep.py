"""LIBERO sub-step cost per suite: robosuite's loop, fastenv's Python loop, fastenv's compiled loop,
against the raw ``mujoco.mj_step`` calls of the same physics.

A sub-step is one action as a user's ``step`` pays for it without an observation (fastenv's
``substep``: controller and physics at every physics step, reward, success check). For one task
of each suite (``--tasks`` picks others), the configurations run the same actions from the same
seeded init state in interleaved rounds; medians, spreads and ratios come from one run.

- robosuite's loop: ``fast_substep=False`` (robosuite's own ``sim.forward``/``_pre_action``/``sim.step``);
- fastenv, Python loop: fastenv's control loop with its compiled physics steps turned off;
- fastenv: the default (the policy step's controller and physics steps 2..n compiled, ``compiled.py``);
- compiled physics steps: the same number of physics steps, each as fastenv's compiled loop runs
  its steps 2..n (``mj_step1``, robosuite's controller, ``mj_step2``, all in one numba call, no
  Python): the floor of the control loop where robosuite's controller runs at every physics step
  bit for bit, its LAPACK calls made between MuJoCo's as in a rollout;
- raw mj_step + OSC matrices: the raw calls, each followed by robosuite's ``opspace_matrices``
  on the controller's matrices (its inverse and three SVD pseudo-inverses, LAPACK through numba),
  which the controller computes at every physics step: what robosuite's own function costs beside
  the physics, numba's workspace queries and allocations included (the compiled loop makes the
  same LAPACK calls with less around them, ``compiled.py``, and can come in under it);
- raw mj_step: the sub-steps' own physics as bare ``mujoco.mj_step`` calls: the actuator
  commands robosuite's controller set at each physics step of the same actions from the same
  init state (recorded once from robosuite's loop), written to ``data.ctrl`` and stepped, nothing
  else. The run ends in the state the sub-steps end in, bit for bit (checked), so the raw calls
  do exactly the sub-steps' physics; every ratio is to this;
- raw mj_step, ctrl held: as many ``mujoco.mj_step`` calls from the same init state with
  ``data.ctrl`` left as it is (the arm not controlled, so its contacts, and the cost of a step,
  differ from a rollout's): the baseline of the earlier runs, kept for comparison.

    python benchmarks/bench_substep.py --out results/bench_substep.json

Every task of every suite (a sweep adds the median and worst task per suite, and a plot of each
task's ratio against its raw physics beside the JSON):

    python benchmarks/bench_substep.py --tasks all --configs robosuite fastenv --rounds 5 --out results/bench_substep_all.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import figure, machine, print_table, write_json  # noqa: E402

TASKS = {"libero_spatial": 0, "libero_object": 0, "libero_goal": 0, "libero_10": 0, "libero_90": 0}
CONFIGS = ("robosuite's loop", "fastenv, Python loop", "fastenv", "compiled physics steps", "raw mj_step + OSC matrices", "raw mj_step",
           "raw mj_step, ctrl held")


def measure(suite: str, task_id: int, rounds: int, steps: int, seed: int, only: tuple[str, ...] = CONFIGS) -> dict[str, Any]:
    import mujoco

    from fastenv.backends.libero.task import quiet_robosuite_import

    quiet_robosuite_import()
    from robosuite.utils.control_utils import opspace_matrices

    from fastenv.backends.libero.compiled import kernel as compiled_kernel
    from fastenv.envs.libero import make_env

    env = make_env(suite, task_id, chunk=8, camera_size=64)
    adapter = env.unwrapped.adapter
    actions = np.random.default_rng(seed).uniform(-0.5, 0.5, size=(steps, 7)).astype(np.float32)
    # without the compiled kernel (robosuite's controller not compiled by numba) there is no such floor
    configs = [c for c in CONFIGS if c in only and (c != "compiled physics steps" or compiled_kernel() is not None)]
    samples: dict[str, list[float]] = {c: [] for c in configs}

    trajectories: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def trajectory(init: int) -> tuple[np.ndarray, np.ndarray]:
        """The actuator commands of every physics step of ``actions`` from ``init``, and the end state."""
        if init not in trajectories:
            env.reset(seed=seed, options={"init_state_id": init})
            fast, adapter.fast_substep = adapter.fast_substep, False  # robosuite's loop: its sim.step() is the physics step
            sim = adapter._raw.sim
            data = sim.data._data
            commands: list[np.ndarray] = []
            step = sim.step
            sim.step = lambda *a, **k: (commands.append(data.ctrl.copy()), step(*a, **k))[1]
            try:
                for action in actions:
                    adapter.substep(action)
            finally:
                del sim.step
                adapter.fast_substep = fast
            trajectories[init] = (np.array(commands), np.concatenate([data.qpos, data.qvel, data.act]))
        return trajectories[init]

    def run(config: str, init: int) -> float:
        commands, end = trajectory(init) if config in ("raw mj_step", "raw mj_step + OSC matrices") else (None, None)
        env.reset(seed=seed, options={"init_state_id": init})
        if config.startswith("raw mj_step"):
            model, data = adapter._raw.sim.model._model, adapter._raw.sim.data._data
            if config == "raw mj_step, ctrl held":
                start = time.perf_counter()
                for _ in range(steps * adapter._n_substeps):
                    mujoco.mj_step(model, data)
                return (time.perf_counter() - start) * 1000.0 / steps
            ctrl = data.ctrl
            if config == "raw mj_step":
                start = time.perf_counter()
                for command in commands:
                    ctrl[:] = command
                    mujoco.mj_step(model, data)
                elapsed = time.perf_counter() - start
                if not np.array_equal(np.concatenate([data.qpos, data.qvel, data.act]), end):
                    raise AssertionError(f"{suite} task {task_id}: the raw calls did not end where the sub-steps did")
                return elapsed * 1000.0 / steps
            adapter.substep(actions[0])  # the controller's matrices at a live state
            c = adapter._raw.robots[0].controller
            matrices = (c.mass_matrix, c.J_full, c.J_pos, c.J_ori)
            env.reset(seed=seed, options={"init_state_id": init})
            start = time.perf_counter()
            for command in commands:
                ctrl[:] = command
                mujoco.mj_step(model, data)
                opspace_matrices(*matrices)
            return (time.perf_counter() - start) * 1000.0 / steps
        if config == "compiled physics steps":
            adapter.fast_substep = True
            loop = adapter._control_loop()
            loop.compiled = True
            adapter.substep(actions[0])  # the controller's goal and the arguments at a live state
            robot = adapter._raw.robots[0]
            gripper_step = np.array([-1.0, 1.0]) * robot.gripper.speed * np.sign(actions[0][-1:])
            args, rest = loop._physics_args(robot.controller, robot.gripper, gripper_step)
            physics_steps = compiled_kernel().physics_steps
            start = time.perf_counter()
            physics_steps(steps * adapter._n_substeps, True, *args, *rest, -1, np.empty(0), np.int32(0))  # no state recorded
            return (time.perf_counter() - start) * 1000.0 / steps
        adapter.fast_substep = config != "robosuite's loop"
        loop = adapter._control_loop()
        if loop is not None:
            loop.compiled = config == "fastenv"
        start = time.perf_counter()
        for action in actions:
            adapter.substep(action)
        return (time.perf_counter() - start) * 1000.0 / steps

    for config in configs:  # warm-up (numba loads or compiles its functions here)
        run(config, 0)
    loop = adapter._control_loop()
    compiled_used = bool(loop is not None and loop._checked)
    policy_step_used = bool(compiled_used and loop._policy is not None and loop._policy.checked)
    for r in range(rounds):
        for config in configs:
            samples[config].append(run(config, r % 10))
    env.close()
    raw = samples["raw mj_step"]
    rows = []
    for config in configs:
        v = samples[config]
        rows.append({
            "suite": suite, "task_id": task_id, "config": config, "ms_per_substep": statistics.median(v), "spread_ms": max(v) - min(v),
            "x_raw_mj_step": statistics.median([a / b for a, b in zip(v, raw)]),
            "x_faster_than_robosuite": (statistics.median([a / b for a, b in zip(samples["robosuite's loop"], v)])
                                        if "robosuite's loop" in samples else None),
            "samples_ms": v,
        })
    return {"rows": rows, "compiled_used": compiled_used, "policy_step_used": policy_step_used, "physics_steps_per_substep": adapter._n_substeps}


SHORT = {"robosuite": "robosuite's loop", "python": "fastenv, Python loop", "fastenv": "fastenv", "floor": "compiled physics steps",
         "osc": "raw mj_step + OSC matrices", "raw": "raw mj_step", "held": "raw mj_step, ctrl held"}


def parse_tasks(specs: list[str]) -> list[tuple[str, int]]:
    """``suite:task_id``, ``suite:all`` (every task of the suite) or ``all`` (every task of every suite)."""
    from fastenv.conformance.libero import tasks as every_task

    out: list[tuple[str, int]] = []
    for spec in specs:
        suite, _, task = spec.partition(":")
        if spec == "all" or task == "all":
            names = every_task(None if spec == "all" else [suite])
            out += [(name.split("/")[0], int(name.split("/")[1])) for name in names]
        elif task.isdigit():
            out.append((suite, int(task)))
        else:
            raise ValueError(f"--tasks takes suite:task_id, suite:all or all, e.g. libero_10:0; got {spec!r}")
    return out


def sweep_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per suite and configuration: tasks, and the median, worst and best task's ratio to raw mj_step."""
    out = []
    for suite in dict.fromkeys(r["suite"] for r in rows):
        for config in dict.fromkeys(r["config"] for r in rows if r["suite"] == suite):
            picked = [r for r in rows if r["suite"] == suite and r["config"] == config]
            worst = max(picked, key=lambda r: r["x_raw_mj_step"])
            out.append({"suite": suite, "config": config, "tasks": len(picked),
                        "median_x_raw": statistics.median(r["x_raw_mj_step"] for r in picked),
                        "max_x_raw": worst["x_raw_mj_step"], "worst_task": worst["task_id"],
                        "min_x_raw": min(r["x_raw_mj_step"] for r in picked)})
    return out


def plot(rows: list[dict[str, Any]], path: Any) -> None:
    """Each task's sub-step against its raw physics: a configuration's ratio to the raw calls
    over the raw calls' time per sub-step, one point per task (a sweep's figure)."""
    raw = {(r["suite"], r["task_id"]): r["ms_per_substep"] for r in rows if r["config"] == "raw mj_step"}
    styles = {"fastenv, Python loop": ("tab:orange", "x"), "fastenv": ("tab:blue", "o"), "compiled physics steps": ("tab:green", "."),
              "raw mj_step + OSC matrices": ("tab:gray", ".")}
    with figure(path, "LIBERO sub-step per task against its own raw physics", (7, 4.2)) as ax:
        for config, (color, marker) in styles.items():
            picked = [r for r in rows if r["config"] == config]
            if picked:
                ax.scatter([raw[(r["suite"], r["task_id"])] for r in picked], [r["x_raw_mj_step"] for r in picked], s=12, color=color,
                           marker=marker, label=f"{config} ({len(picked)} tasks)")
        ax.axhline(1.5, color="black", linewidth=0.8, linestyle="--", label="1.5x the raw calls")
        ax.set_xlabel("raw mj_step calls of a sub-step (the same physics), ms")
        ax.set_ylabel("sub-step / raw mj_step calls")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=[f"{s}:{t}" for s, t in TASKS.items()],
                        help="suite:task_id, suite:all or all; one task per suite by default")
    parser.add_argument("--configs", nargs="+", choices=list(SHORT), default=list(SHORT),
                        help="configurations to run (raw mj_step always runs: every ratio is to it)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of all configurations, interleaved")
    parser.add_argument("--steps", type=int, default=20, help="sub-steps per configuration and round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/bench_substep.json")
    args = parser.parse_args(argv)
    try:
        tasks = parse_tasks(args.tasks)
    except ValueError as exc:
        parser.error(str(exc))
    only = tuple(SHORT[c] for c in dict.fromkeys([*args.configs, "raw"]))
    rows, per_task = [], {}
    for suite, task_id in tasks:
        print(f"== {suite} task {task_id}", flush=True)
        result = measure(suite, task_id, args.rounds, args.steps, args.seed, only)
        if not result["compiled_used"]:
            print(f"   note: {suite} task {task_id} did not use the compiled loop (see compiled.py)")
        rows += result["rows"]
        per_task[f"{suite}:{task_id}"] = {k: v for k, v in result.items() if k != "rows"}
    print()
    print_table(rows, [("suite", "suite", "s"), ("task_id", "task", "d"), ("config", "sub-step", "s"), ("ms_per_substep", "ms", ".3f"),
                       ("spread_ms", "spread", ".3f"), ("x_raw_mj_step", "x raw mj_step", ".2f"),
                       ("x_faster_than_robosuite", "x faster than robosuite's", ".2f")])
    payload = {"benchmark": "substep_per_suite", "rounds": args.rounds, "steps": args.steps, "seed": args.seed, "tasks": per_task,
               "rows": rows, "machine": machine(), "command": "python benchmarks/bench_substep.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    if len(tasks) > len({suite for suite, _ in tasks}):  # a sweep: several tasks of a suite
        payload["summary"] = sweep_summary(rows)
        print()
        print_table(payload["summary"], [("suite", "suite", "s"), ("config", "sub-step", "s"), ("tasks", "tasks", "d"),
                                         ("median_x_raw", "median x raw", ".2f"), ("max_x_raw", "worst x raw", ".2f"),
                                         ("worst_task", "worst task", "d"), ("min_x_raw", "best x raw", ".2f")])
        plot(rows, os.path.splitext(args.out)[0] + ".png")
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
