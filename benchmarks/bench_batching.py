"""Where dynamic batching should pay: libero_10's ten tasks in one vector env, a VLA's cost in the loop.

Ten envs, one per task of libero_10 (their steps, renders and resets cost differently), episodes
ending at different lengths, each env's chunk of actions from a policy that costs what a VLA does on
an accelerator (``fastenv.policy_cost``, default ``pi05-behavior``: 432 ms + 18 ms x batch per call,
the CPU free meanwhile). Two settings: LIBERO's resets in place (fastenv's default) and rebuilt
(robosuite's hard reset, the long tail).

Per setting, with the trial runner ``fastenv.tune`` uses:

1. the grid: every layout of a space over the B_max / T_max trigger (``recv(max_batch=B,
   timeout=T)``: B in {2, 5, 8}, T in {10, 100, 500} ms), synchronous steps and pipeline stages;
2. ``fastenv.tune`` on the same space (its calibration, cost model and a few trials);
3. the verdict: the grid's best, the tuned plan and the default (synchronous) layout measured
   again, interleaved over rounds with longer trials on fresh workers.

Reported: the best dynamic layout over synchronous steps (in the grid; in the verdict too where
that layout is the grid's best or the plan), and the plan over the grid's best (aim: within 5%). Needs the LIBERO extra (``pip install -e ".[libero]"``).

    python benchmarks/bench_batching.py                        # both settings (about 30 min on 2 cores)
    python benchmarks/bench_batching.py --resets in-place      # one
    python benchmarks/bench_batching.py --quick                # smoke run: 2 tasks, short trials
"""

from __future__ import annotations

import argparse
import functools
import statistics
from typing import Any

import numpy as np
from _common import figure, machine, print_table, write_json
from bench_tune import run_setting

from fastenv import tuning
from fastenv.machine import available_cpus
from fastenv.policy_cost import inference_cost

IMAGE_KEY, STATE_KEY = "agentview_image", "robot0_proprio-state"


def task_fns(tasks: int, chunk: int, camera_size: int, episode_steps: int, hard_reset: bool, seed: int = 0) -> list[Any]:
    from fastenv.envs.libero import make_env

    rng = np.random.default_rng(seed)
    lengths = rng.integers(episode_steps // 2, 3 * episode_steps // 2 + 1, tasks)
    return [
        functools.partial(
            make_env, "libero_10", task, chunk=chunk, modalities=(IMAGE_KEY, STATE_KEY), camera_size=camera_size,
            max_episode_steps=int(length), hard_reset=hard_reset,
        )
        for task, length in enumerate(lengths)
    ]


def space(n: int, workers: int, batches: list[int], timeouts: list[float]) -> list[Any]:
    """Synchronous steps and pipeline stages on ``workers`` (and on N/2 workers), and the B/T grid."""
    out = [tuning.Candidate(workers, s) for s in tuning.divisors(n // workers) if s <= 5]
    if n // 2 != workers and n % (n // 2) == 0:
        out += [tuning.Candidate(n // 2, s) for s in tuning.divisors(2)]
    out += [tuning.Candidate(workers, 1, b, t) for b in batches if 1 <= b < n for t in timeouts]
    return out


def plot(rows: list[dict[str, Any]], path: str) -> str:
    """Every layout of the grid, per setting: steps/s, the tuned plan and the grid's best marked."""
    with figure(path, "libero_10's tasks with a VLA's cost: every layout of the grid", figsize=(11, 4.5)) as ax:
        width = 0.8 / len(rows)
        labels = [t["layout"].replace(" threads=1", "") for t in rows[0]["grid"]]
        for k, row in enumerate(rows):
            values = [t["steps_per_s"] for t in row["grid"]]
            bars = ax.bar(np.arange(len(values)) + k * width, values, width, label=row["setting"])
            for bar, t in zip(bars, row["grid"]):
                if t["layout"] == row["plan"]:
                    ax.annotate("plan", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom", fontsize=7)
        ax.set_xticks(np.arange(len(labels)) + width * (len(rows) - 1) / 2, labels, rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("chunks per second (higher is better)")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy-cost", default="pi05-behavior", help="a fastenv.policy_cost preset or A,B seconds (default %(default)s)")
    parser.add_argument("--tasks", type=int, default=10, help="envs, one per libero_10 task (default %(default)s)")
    parser.add_argument("--chunk", type=int, help="actions per chunk (default: the preset's, else 32)")
    parser.add_argument("--camera-size", type=int, default=64)
    parser.add_argument("--episode-steps", type=int, default=160, help="mean episode length; each env's is drawn in [1/2, 3/2] of it")
    parser.add_argument("--resets", nargs="+", choices=["in-place", "rebuilt"], default=["in-place", "rebuilt"])
    parser.add_argument("--trial-seconds", type=float, default=12.0)
    parser.add_argument("--min-cycles", type=int, default=2)
    parser.add_argument("--confirm-rounds", type=int, default=2)
    parser.add_argument("--confirm-seconds", type=float, default=20.0)
    parser.add_argument("--max-trials", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 tasks, in-place resets, short trials")
    parser.add_argument("--out", default="results/bench_batching.json")
    args = parser.parse_args()
    cost = inference_cost(args.policy_cost)
    chunk = args.chunk or cost.chunk or 32
    if args.quick:
        args.tasks, args.resets, args.trial_seconds, args.confirm_rounds, args.confirm_seconds = 2, ["in-place"], 0.5, 1, 0.5
        args.max_trials = 2
        args.episode_steps = 2 * chunk
    cpus = available_cpus()
    workers = max(d for d in tuning.divisors(args.tasks) if d <= cpus)
    grid_space = space(args.tasks, workers, sorted({2, args.tasks // 2, (4 * args.tasks) // 5} - {0}), [0.01, 0.1, 0.5])
    if args.quick:  # the three ways of driving the envs, once each
        grid_space = [c for c in grid_space if c.max_batch is None][:2] + [c for c in grid_space if c.max_batch is not None][:1]
    rows = []
    for resets in args.resets:
        setting = {
            "name": f"libero_10 x{args.tasks} tasks, resets {resets}",
            "env_fns": task_fns(args.tasks, chunk, args.camera_size, args.episode_steps, hard_reset=resets == "rebuilt"),
            "policy": None,
            "policy_cost": (cost.per_call_s, cost.per_sample_s),
            "space": grid_space,
        }
        # the synchronous layout and the best dynamic one are measured again beside the plan
        setting["confirm"] = [tuning.Candidate(workers, 1)]
        row = run_setting(setting, args)
        grid = {t["layout"]: t for t in row["grid"]}
        dynamic = max((t for t in row["grid"] if t["max_batch"] is not None), key=lambda t: t["steps_per_s"])
        sync = grid[tuning.Candidate(workers, 1).label]
        row["best_dynamic"] = dynamic["layout"]
        row["best_dynamic_over_sync_grid"] = dynamic["steps_per_s"] / sync["steps_per_s"]
        confirmed = row["confirm_steps_per_s"]
        if dynamic["layout"] in confirmed:
            row["best_dynamic_over_sync_confirmed"] = statistics.median(confirmed[dynamic["layout"]]) / statistics.median(confirmed[sync["layout"]])
        row["chunk"], row["policy_cost"] = chunk, cost.describe()
        rows.append(row)
        write_json(args.out, {"benchmark": "bench_batching", "machine": machine(), "args": vars(args), "results": rows})
    print()
    print_table(rows, [
        ("setting", "setting", ""), ("grid_best", "grid's best", ""), ("grid_best_steps_per_s", "steps/s", ".2f"),
        ("best_dynamic", "best B/T", ""), ("best_dynamic_over_sync_grid", "B/T x sync", ".2f"),
        ("best_dynamic_over_sync_confirmed", "confirmed", ".2f"),
        ("plan", "tuned plan", ""), ("plan_over_grid_best", "x grid best", ".2f"),
        ("confirm_plan_over_grid_best", "confirmed x best", ".2f"), ("tune_s", "tune s", ".0f"), ("grid_s", "grid s", ".0f"),
    ])
    path = write_json(args.out, {"benchmark": "bench_batching", "machine": machine(), "args": vars(args), "results": rows})
    print(f"\nwrote {path}, {plot(rows, str(path).removesuffix('.json') + '.png')}")


if __name__ == "__main__":
    main()
