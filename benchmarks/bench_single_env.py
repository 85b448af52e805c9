"""Single LIBERO env: stock -> +slim -> +skip-obs (chunk 8, 32), with the physics floor; resets
and the physics-only sub-step against what they cost in stock robosuite and raw MuJoCo.

All configurations are built in one process and timed in interleaved rounds, so the ratios are
measured side by side. Resets: LIBERO's own hard reset (the model and its render context rebuilt)
against fastenv's in-place reset, both followed by the same init state. Sub-step: robosuite's
control loop (25 physics steps with the controller) against fastenv's, and against the 25 raw
``mujoco.mj_step`` calls inside it. Writes JSON (medians, spreads, ratios) to --out.

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
    parser.add_argument("--resets", type=int, default=3, help="resets per config per round")
    parser.add_argument("--out", default="results/bench_single_env.json")
    args = parser.parse_args(argv)

    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.task import import_libero
    from fastenv.envs.libero import make_env

    import_libero()
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

    from fastenv.backends.libero.adapter import make_gl_current

    def reset_all():
        make_gl_current(stock.env)  # robosuite renders into (and frees from) the current GL context
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
            make_gl_current(stock.env)
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
        observing = 0.0
        for a in actions[:8]:  # an observation after each sub-step: what a chunk's end costs (a
            slim.substep(a)  # second observe() of the same state would return the cached one)
            t = time.perf_counter()
            slim.observe()
            observing += time.perf_counter() - t
        return (t1 - t0) * 1000.0 / len(actions), observing * 1000.0 / 8

    # Resets: the stock env's hard reset against fastenv's in-place one (same init states).
    import mujoco

    hard = make_env(args.suite, args.task_id, chunk=None, camera_size=size, hard_reset=True).unwrapped
    fast = configs["slim"].unwrapped

    def time_resets() -> dict[str, float]:
        out = {}
        make_gl_current(stock.env)
        t0 = time.perf_counter()
        for i in range(args.resets):
            stock.reset()
            stock.set_init_state(task.init_states[i])
        out["reset: LIBERO's own (hard)"] = (time.perf_counter() - t0) / args.resets
        for name, env in (("reset: fastenv hard_reset=True", hard), ("reset: fastenv in place", fast)):
            t0 = time.perf_counter()
            for i in range(args.resets):
                env.reset(options={"init_state_id": i})
            out[name] = (time.perf_counter() - t0) / args.resets
        return out

    # Sub-step: robosuite's loop, fastenv's, and the raw mj_step calls of the same physics.
    adapter = fast.adapter

    def time_substeps() -> dict[str, float]:
        out = {}
        for name, flag in (("sub-step: robosuite's loop", False), ("sub-step: fastenv's loop", True)):
            adapter.fast_substep = flag
            t0 = time.perf_counter()
            for a in actions:
                adapter.substep(a)
            out[name] = (time.perf_counter() - t0) * 1000.0 / len(actions)
        adapter.fast_substep = True
        model, data = adapter._raw.sim.model._model, adapter._raw.sim.data._data
        n = adapter._n_substeps
        t0 = time.perf_counter()
        for _ in range(len(actions) * n):
            mujoco.mj_step(model, data)
        out[f"sub-step: {n} raw mj_step"] = (time.perf_counter() - t0) * 1000.0 / len(actions)
        return out

    reset_samples: dict[str, list[float]] = {}
    substep_samples: dict[str, list[float]] = {}

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
        for name, value in time_resets().items():
            reset_samples.setdefault(name, []).append(value)
        reset_all()
        for name, value in time_substeps().items():
            substep_samples.setdefault(name, []).append(value)
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

    def spread(values: list[float]) -> float:
        return max(values) - min(values)

    stock_reset_s = reset_samples["reset: LIBERO's own (hard)"]
    reset_rows = [
        {"config": name, "s_per_reset": statistics.median(v), "spread_s": spread(v),
         "x_stock": statistics.median([a / b for a, b in zip(stock_reset_s, v)]), "samples_s": v}
        for name, v in reset_samples.items()
    ]
    raw_name = next(n for n in substep_samples if "raw" in n)
    robosuite_ms = substep_samples["sub-step: robosuite's loop"]
    substep_rows = [
        {"config": name, "ms": statistics.median(v), "spread_ms": spread(v),
         "x_robosuite": statistics.median([a / b for a, b in zip(robosuite_ms, v)]),
         "x_raw_mj_step": statistics.median([b / a for a, b in zip(substep_samples[raw_name], v)]), "samples_ms": v}
        for name, v in substep_samples.items()
    ]
    print()
    print_table(reset_rows, [("config", "reset (then an init state)", "s"), ("s_per_reset", "s/reset", ".3f"),
                             ("spread_s", "spread", ".3f"), ("x_stock", "x faster than LIBERO's", ".1f")])
    print()
    print_table(substep_rows, [("config", "physics-only sub-step", "s"), ("ms", "ms", ".2f"), ("spread_ms", "spread", ".2f"),
                               ("x_robosuite", "x faster than robosuite's", ".2f"), ("x_raw_mj_step", "x raw mj_step time", ".2f")])
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
        "resets": reset_rows,
        "substeps": substep_rows,
        "machine": machine(),
    }
    path = write_json(args.out, payload)
    print(f"wrote {path}")
    hard.close()
    make_gl_current(stock.env)
    stock.close()
    for env in configs.values():
        if env is not None:
            env.close()
    return payload


if __name__ == "__main__":
    main()
