"""Single LIBERO env: stock -> +slim -> +skip-obs (chunk 8, 32), with the physics floor.

All configurations are built in one process and timed in interleaved rounds, so the ratios are
measured side by side. Writes JSON (medians, ratios) to --out.

    python benchmarks/bench_single_env.py --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="libero_10")
    parser.add_argument("--task-id", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=64, help="env steps per config per round")
    parser.add_argument("--chunks", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--out", default="results/bench_single_env.json")
    args = parser.parse_args(argv)

    from fastenv.backends.libero import LiberoTask, _libero, make_env

    _libero()
    from libero.libero.envs import OffScreenRenderEnv

    task = LiberoTask.load(args.suite, args.task_id)
    size = args.camera_size
    print(f"building envs: {args.suite} task {args.task_id}, {size}x{size} cameras ...", flush=True)
    stock = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=size, camera_widths=size)
    configs = {"stock": None, "slim": make_env(args.suite, args.task_id, chunk=None, camera_size=size)}
    for k in args.chunks:
        configs[f"skip-obs chunk {k}"] = make_env(args.suite, args.task_id, chunk=k, camera_size=size)

    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (args.steps, 7)).astype(np.float32)

    def reset_all():
        stock.reset()
        stock.set_init_state(task.init_states[0])
        for env in configs.values():
            if env is not None:
                env.reset(options={"init_state_id": 0})

    def run(name: str) -> float:
        """ms per env step for one block of args.steps steps."""
        env = configs[name]
        start = time.perf_counter()
        if env is None:
            for a in actions:
                stock.step(a)
        elif name == "slim":
            for a in actions:
                env.step(a)
        else:
            k = env.action_space.shape[0]
            for i in range(0, len(actions) - k + 1, k):
                env.step(actions[i : i + k])
        steps = args.steps if env is None or name == "slim" else (args.steps // env.action_space.shape[0]) * env.action_space.shape[0]
        return (time.perf_counter() - start) * 1000.0 / steps

    # Physics-only sub-step and one render of the slim observation, for the floor.
    slim = configs["slim"].unwrapped

    def floor_parts() -> tuple[float, float]:
        t0 = time.perf_counter()
        for a in actions:
            slim.substep(a)
        t1 = time.perf_counter()
        for _ in range(8):
            slim.observe()
        t2 = time.perf_counter()
        return (t1 - t0) * 1000.0 / len(actions), (t2 - t1) * 1000.0 / 8

    samples: dict[str, list[float]] = {name: [] for name in configs}
    sub, render = [], []
    reset_all()
    for name in configs:  # warm-up block
        run(name)
    for r in range(args.rounds):
        reset_all()
        for name in configs:
            samples[name].append(run(name))
        reset_all()
        s, o = floor_parts()
        sub.append(s)
        render.append(o)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {samples[n][-1]:.1f}" for n in configs), flush=True)

    substep_ms, render_ms = statistics.median(sub), statistics.median(render)
    stock_ms = statistics.median(samples["stock"])
    rows = []
    for name in configs:
        ms = statistics.median(samples[name])
        k = configs[name].action_space.shape[0] if name.startswith("skip-obs") else 1
        floor = (k * substep_ms + render_ms) / k if k > 1 else None
        rows.append(
            {
                "config": name,
                "chunk": k,
                "ms_per_step": ms,
                "speedup_vs_stock": stock_ms / ms,
                "floor_ms_per_step": floor,
                "ratio_to_floor": ms / floor if floor else None,
                "samples_ms": samples[name],
            }
        )
    print()
    print_table(
        rows,
        [
            ("config", "config", "s"),
            ("ms_per_step", "ms/env step", ".2f"),
            ("speedup_vs_stock", "x stock", ".2f"),
            ("floor_ms_per_step", "floor ms/step", ".2f"),
            ("ratio_to_floor", "x floor", ".2f"),
        ],
    )
    print(f"\nphysics-only sub-step: {substep_ms:.2f} ms; one slim observation (1 camera + proprio): {render_ms:.2f} ms")
    payload = {
        "benchmark": "single_env",
        "suite": args.suite,
        "task_id": args.task_id,
        "camera_size": size,
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "substep_ms": substep_ms,
        "observe_ms": render_ms,
        "results": rows,
        "machine": machine(),
    }
    path = write_json(args.out, payload)
    print(f"wrote {path}")
    stock.close()
    for env in configs.values():
        if env is not None:
            env.close()
    return payload


if __name__ == "__main__":
    main()
