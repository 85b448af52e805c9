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
  which the controller computes at every physics step: the floor of any loop that keeps
  robosuite's arithmetic bit for bit;
- raw mj_step: the same number of ``mujoco.mj_step`` calls, nothing else.

    python benchmarks/bench_substep.py --out results/bench_substep.json
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
from _common import machine, print_table, write_json  # noqa: E402

TASKS = {"libero_spatial": 0, "libero_object": 0, "libero_goal": 0, "libero_10": 0, "libero_90": 0}
CONFIGS = ("robosuite's loop", "fastenv, Python loop", "fastenv", "compiled physics steps", "raw mj_step + OSC matrices", "raw mj_step")


def measure(suite: str, task_id: int, rounds: int, steps: int, seed: int) -> dict[str, Any]:
    import mujoco
    from robosuite.utils.control_utils import opspace_matrices

    from fastenv.backends.libero import make_env
    from fastenv.backends.libero.compiled import kernel as compiled_kernel

    env = make_env(suite, task_id, chunk=8, camera_size=64)
    adapter = env.unwrapped.adapter
    actions = np.random.default_rng(seed).uniform(-0.5, 0.5, size=(steps, 7)).astype(np.float32)
    # without the compiled kernel (robosuite's controller not compiled by numba) there is no such floor
    configs = [c for c in CONFIGS if c != "compiled physics steps" or compiled_kernel() is not None]
    samples: dict[str, list[float]] = {c: [] for c in configs}

    def run(config: str, init: int) -> float:
        env.reset(seed=seed, options={"init_state_id": init})
        if config.startswith("raw mj_step"):
            model, data = adapter._raw.sim.model._model, adapter._raw.sim.data._data
            if config == "raw mj_step":
                start = time.perf_counter()
                for _ in range(steps * adapter._n_substeps):
                    mujoco.mj_step(model, data)
                return (time.perf_counter() - start) * 1000.0 / steps
            adapter.substep(actions[0])  # the controller's matrices at a live state
            c = adapter._raw.robots[0].controller
            matrices = (c.mass_matrix, c.J_full, c.J_pos, c.J_ori)
            start = time.perf_counter()
            for _ in range(steps * adapter._n_substeps):
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
            "x_faster_than_robosuite": statistics.median([a / b for a, b in zip(samples["robosuite's loop"], v)]),
            "samples_ms": v,
        })
    return {"rows": rows, "compiled_used": compiled_used, "physics_steps_per_substep": adapter._n_substeps}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=[f"{s}:{t}" for s, t in TASKS.items()], help="suite:task_id, one per suite by default")
    parser.add_argument("--rounds", type=int, default=30, help="rounds of all configurations, interleaved")
    parser.add_argument("--steps", type=int, default=20, help="sub-steps per configuration and round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/bench_substep.json")
    args = parser.parse_args(argv)
    tasks = []
    for spec in args.tasks:
        suite, _, task = spec.partition(":")
        if not task.isdigit():
            parser.error(f"--tasks takes suite:task_id, e.g. libero_10:0; got {spec!r}")
        tasks.append((suite, int(task)))
    rows, per_task = [], {}
    for suite, task_id in tasks:
        print(f"== {suite} task {task_id}", flush=True)
        result = measure(suite, task_id, args.rounds, args.steps, args.seed)
        if not result["compiled_used"]:
            print(f"   note: {suite} task {task_id} did not use the compiled loop (see compiled.py)")
        rows += result["rows"]
        per_task[f"{suite}:{task_id}"] = {k: v for k, v in result.items() if k != "rows"}
    print()
    print_table(rows, [("suite", "suite", "s"), ("task_id", "task", "d"), ("config", "sub-step", "s"), ("ms_per_substep", "ms", ".3f"),
                       ("spread_ms", "spread", ".3f"), ("x_raw_mj_step", "x raw mj_step", ".2f"),
                       ("x_faster_than_robosuite", "x faster than robosuite's", ".2f")])
    payload = {"benchmark": "substep_per_suite", "rounds": args.rounds, "steps": args.steps, "seed": args.seed, "tasks": per_task,
               "rows": rows, "machine": machine()}
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
