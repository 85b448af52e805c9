"""Resident memory of a LIBERO env over a long run: does it stay flat over resets and steps?

Each configuration runs in a fresh process: one env of libero_10 task 0 with a 128-px camera,
episodes of ``--steps-per-episode`` random actions (one chunk), each from the next init state,
and the process's resident memory (VmRSS) read every ``--every`` resets. The default run is
10,000 resets and 100,000 steps through fastenv. robosuite's default reset rebuilds the MuJoCo
model and its render context on every reset (``hard_reset``), which is reported upstream to leak;
those configurations run ``--hard-resets`` episodes (a rebuild costs about a second).

- fastenv: ``make_env`` with its in-place reset (fastenv's default);
- fastenv, hard reset: ``make_env(hard_reset=True)`` (robosuite's reset, rebuilding);
- stock: LIBERO's ``OffScreenRenderEnv`` (two 128-px cameras, robosuite's hard reset).

Growth is the slope of a straight line fitted to the second half of the readings (after the
allocator has settled), in MB per 1,000 resets.

    python benchmarks/bench_memory_flat.py --out results/bench_memory_flat.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import figure, machine, print_table, write_json  # noqa: E402
from bench_memory import rss  # noqa: E402

CONFIGS = ("fastenv", "fastenv, hard reset", "stock")


def child(config: str, resets: int, steps: int, every: int, suite: str, task_id: int, size: int) -> dict[str, Any]:
    """In a fresh process: ``resets`` episodes of ``steps`` random actions; RSS every ``every`` resets."""
    import numpy as np

    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.adapter import make_gl_current
    from fastenv.backends.libero.task import import_libero
    from fastenv.envs.libero import make_env

    import_libero()
    task = LiberoTask.load(suite, task_id)
    n_init = len(task.init_states)
    rng = np.random.default_rng(0)
    if config == "stock":
        from libero.libero.envs import OffScreenRenderEnv

        env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=size, camera_widths=size)

        def episode(i: int, actions: Any) -> None:
            make_gl_current(env.env)
            env.reset()
            make_gl_current(env.env)
            env.set_init_state(task.init_states[i % n_init])
            for action in actions:
                env.step(action)
    else:
        env = make_env(suite, task_id, chunk=steps, camera_size=size, hard_reset=config == "fastenv, hard reset")

        def episode(i: int, actions: Any) -> None:
            env.reset(options={"init_state_id": i % n_init})
            env.step(actions)

    readings: dict[str, list[float]] = {"resets": [], "steps": [], "rss": [], "seconds": []}
    started = time.perf_counter()
    for i in range(resets + 1):
        if i % every == 0 or i == resets:
            readings["resets"].append(i)
            readings["steps"].append(i * steps)
            readings["rss"].append(rss())
            readings["seconds"].append(time.perf_counter() - started)
        if i < resets:
            episode(i, rng.uniform(-1.0, 1.0, size=(steps, 7)).astype(np.float32))
    env.close()
    return readings


def growth_mb_per_1000(resets: list[int], values: list[int]) -> float:
    """Slope of a line fitted to the second half of the readings, MB per 1,000 resets."""
    import numpy as np

    half = len(resets) // 2
    x, y = np.asarray(resets[half:], dtype=float), np.asarray(values[half:], dtype=float)
    return float(np.polyfit(x, y, 1)[0] * 1000 / 2**20) if len(x) > 1 else float("nan")


def plot(results: dict[str, dict[str, Any]], path: Any) -> None:
    with figure(path, "One LIBERO env (libero_10 task 0, 128-px camera) over a long run") as ax:
        for config, r in results.items():
            label = f"{config}: {r['growth_mb_per_1000_resets']:+.1f} MB per 1,000 resets"
            ax.plot(r["resets"], [v / 2**30 for v in r["rss"]], marker="." if len(r["resets"]) < 200 else None, label=label)
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlabel(f"resets ({results[next(iter(results))]['steps_per_episode']} steps each)")
        ax.set_ylabel("resident memory, GB")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--resets", type=int, default=10_000, help="episodes through fastenv's in-place reset")
    parser.add_argument("--hard-resets", type=int, default=300, help="episodes for the configurations that rebuild on reset")
    parser.add_argument("--steps-per-episode", type=int, default=10)
    parser.add_argument("--every", type=int, default=0, help="read memory every N resets (default: 100 readings per run)")
    parser.add_argument("--suite", default="libero_10")
    parser.add_argument("--task-id", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="results/bench_memory_flat.json")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    if min(args.resets, args.hard_resets, args.steps_per_episode) < 1:
        parser.error("--resets, --hard-resets and --steps-per-episode must be at least 1")
    if args.child:
        n = args.resets if args.child == "fastenv" else args.hard_resets
        every = args.every or max(1, n // 100)
        print(json.dumps(child(args.child, n, args.steps_per_episode, every, args.suite, args.task_id, args.camera_size)))
        return {}
    results: dict[str, dict[str, Any]] = {}
    for config in args.configs:
        n = args.resets if config == "fastenv" else args.hard_resets
        print(f"== {config}: {n} resets, {n * args.steps_per_episode} steps ...", flush=True)
        cmd = [sys.executable, __file__, "--child", config, "--resets", str(args.resets), "--hard-resets", str(args.hard_resets),
               "--steps-per-episode", str(args.steps_per_episode), "--every", str(args.every), "--suite", args.suite,
               "--task-id", str(args.task_id), "--camera-size", str(args.camera_size)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{config}: the measuring process failed:\n{done.stderr[-3000:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        r["steps_per_episode"] = args.steps_per_episode
        r["growth_mb_per_1000_resets"] = growth_mb_per_1000(r["resets"], r["rss"])
        results[config] = r
    rows = [
        {"config": c, "resets": r["resets"][-1], "steps": r["steps"][-1], "start_gb": r["rss"][0] / 2**30, "end_gb": r["rss"][-1] / 2**30,
         "growth": r["growth_mb_per_1000_resets"], "seconds": r["seconds"][-1]}
        for c, r in results.items()
    ]
    print()
    print_table(rows, [("config", "LIBERO, one env", "s"), ("resets", "resets", "d"), ("steps", "steps", "d"), ("start_gb", "start GB", ".3f"),
                       ("end_gb", "end GB", ".3f"), ("growth", "MB per 1,000 resets", "+.1f"), ("seconds", "seconds", ".0f")])
    payload = {"benchmark": "memory_over_a_long_run", "suite": args.suite, "task_id": args.task_id, "camera_size": args.camera_size,
               "steps_per_episode": args.steps_per_episode, "results": results, "machine": machine()}
    path = write_json(args.out, payload)
    if not args.no_plot:
        plot(results, path.with_suffix(".png"))
    print(f"\nwrote {path}" + ("" if args.no_plot else f" and {path.with_suffix('.png')}"))
    return payload


if __name__ == "__main__":
    main()
