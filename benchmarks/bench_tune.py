"""fastenv.tune against an exhaustive grid over the same layouts, measured in one run.

For each setting (LIBERO chunk 8 and 32, each with a cheap and a costly policy; CartPole), the
grid measures every layout of ``fastenv.tuning.search_space`` with the same trial runner
``tune`` uses (same trial length, workers rebuilt only when W or threads change), then ``tune``
runs. Reported: the grid's best layout, the tuned plan, the tuned layout's throughput as the
grid measured it over the grid's best, and tune's wall time over the grid's (target <= 0.20).
The best of many short trials is biased upward (noise picks it), so the grid's best, the plan and
the default layout are then measured again, interleaved over rounds with longer trials on fresh
workers: the plan's median over the grid best's is the verdict (target >= 0.90).

- cheap policy: ``fastenv.bench.policies.ChunkPolicy`` (a small CNN + MLP) on this process's CPU;
- costly policy: the measured cost of a large policy on its own device, ``CostPolicy(0.05, 0.002)``
  (50 ms + 2 ms per observation, sleeping: it costs the CPU nothing, as a GPU policy);
- CartPole: Gymnasium's, with a policy that costs nothing (random actions).

    python benchmarks/bench_tune.py                      # all settings (about an hour on 2 cores)
    python benchmarks/bench_tune.py --only cartpole      # one setting
    python benchmarks/bench_tune.py --quick              # smoke run
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from typing import Any

import numpy as np
from _common import machine, print_table, write_json

from fastenv import tuning
from fastenv.machine import available_cpus

IMAGE_KEY, STATE_KEY = "agentview_image", "robot0_proprio-state"


def libero_fns(num_envs: int, chunk: int, camera_size: int, episode_steps: int, seed: int = 0) -> list[Any]:
    from fastenv.envs.libero import make_env

    rng = np.random.default_rng(seed)  # random episode ends: the long tail of real rollouts
    lengths = rng.integers(episode_steps // 2, 3 * episode_steps // 2 + 1, num_envs)
    return [
        functools.partial(
            make_env, "libero_10", 0, chunk=chunk, modalities=(IMAGE_KEY, STATE_KEY), camera_size=camera_size,
            max_episode_steps=int(length),
        )
        for length in lengths
    ]


class CheapPolicy:
    """ChunkPolicy on this process's CPU: a batch of LIBERO observations -> a batch of action chunks."""

    def __init__(self, camera_size: int, chunk: int) -> None:
        import torch

        from fastenv.bench.policies import ChunkPolicy

        torch.manual_seed(0)
        self.net = ChunkPolicy((camera_size, camera_size, 3), 39, chunk, 7).eval()

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        actions, _ = self.net.act(obs, IMAGE_KEY, STATE_KEY)
        return actions


def settings(args: argparse.Namespace) -> list[dict[str, Any]]:
    import gymnasium as gym

    out = []
    for chunk in (8, 32):
        for cost in ("cheap", "costly"):
            out.append({
                "name": f"libero-chunk{chunk}-{cost}",
                "env_fns": libero_fns(args.libero_envs, chunk, args.camera_size, args.episode_steps),
                "policy": CheapPolicy(args.camera_size, chunk) if cost == "cheap" else None,
                "policy_cost": None if cost == "cheap" else (0.05, 0.002),
            })
    out.append({
        "name": "cartpole",
        "env_fns": [functools.partial(gym.make, "CartPole-v1")] * args.cartpole_envs,
        "policy": None,
        "policy_cost": 0.0,
    })
    return out


def run_setting(setting: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    n = len(setting["env_fns"])
    cpus = available_cpus()
    space = setting.get("space") or tuning.search_space(n, cpus)
    if args.quick and not setting.get("space"):
        space = space[:: max(1, len(space) // 8)]
    common = dict(
        policy=setting["policy"], policy_cost=setting["policy_cost"], trial_seconds=args.trial_seconds,
        min_cycles=args.min_cycles, space=space, cpus=cpus,
    )
    print(f"\n== {setting['name']}: {n} envs, {len(space)} layouts, {cpus} CPUs")
    start = time.perf_counter()
    grid = tuning.grid(setting["env_fns"], **common)
    grid_s = time.perf_counter() - start
    best = max(grid, key=lambda t: t.steps_per_s)
    start = time.perf_counter()
    plan = tuning.tune(setting["env_fns"], max_trials=args.max_trials, **common)
    tune_s = time.perf_counter() - start
    by_layout = {t.candidate: t.steps_per_s for t in grid}
    default = tuning.default_candidate(n, cpus)
    plan_in_grid = by_layout.get(plan.candidate)
    confirmed = confirm(setting, [best.candidate, plan.candidate, default, *setting.get("confirm", [])], common, args)
    med = {label: statistics.median(v) for label, v in confirmed.items()}
    row = {
        "setting": setting["name"],
        "layouts": len(space),
        "grid_best": best.candidate.label,
        "grid_best_steps_per_s": best.steps_per_s,
        "default_in_grid_steps_per_s": by_layout.get(default),
        "plan": plan.candidate.label,
        "plan_steps_per_s_tune": plan.steps_per_s,
        "plan_steps_per_s_grid": plan_in_grid,
        "plan_over_grid_best": plan_in_grid / best.steps_per_s if plan_in_grid else None,
        "tune_trials": len(plan.trials),
        "confirm_steps_per_s": confirmed,
        "confirm_plan_over_grid_best": med[plan.candidate.label] / med[best.candidate.label],
        "confirm_plan_over_default": med[plan.candidate.label] / med[default.label],
        "grid_s": grid_s,
        "tune_s": tune_s,
        "time_ratio": tune_s / grid_s,
        "bound": plan.bound,
        "reason": plan.reason,
        "grid": [t.to_dict() for t in grid],
        "tune_trials_detail": plan.trials,
    }
    print(plan.summary())
    print(f"grid best {best.candidate.label}: {best.steps_per_s:.1f}; plan in grid {plan_in_grid or float('nan'):.1f} "
          f"({row['plan_over_grid_best'] or float('nan'):.2f}x); time {tune_s:.0f}s vs {grid_s:.0f}s ({row['time_ratio']:.2f}); "
          f"confirmed: plan {row['confirm_plan_over_grid_best']:.2f}x grid best, {row['confirm_plan_over_default']:.2f}x default")
    return row


def confirm(setting: dict[str, Any], layouts: list[Any], common: dict[str, Any], args: argparse.Namespace) -> dict[str, list[float]]:
    """Re-measure the grid's best, the tuned plan and the default, interleaved over rounds, with longer trials.

    The best of 66 short noisy trials is biased upward (the winner's curse); this measures the
    layouts that matter again, side by side, on fresh workers each time.
    """
    distinct = list(dict.fromkeys(layouts))
    out: dict[str, list[float]] = {c.label: [] for c in distinct}
    for _ in range(args.confirm_rounds):
        for cand in distinct:
            runner = tuning.TrialRunner(
                setting["env_fns"], setting["policy"], setting["policy_cost"], cpus=common["cpus"],
                trial_seconds=args.confirm_seconds, seed=0, vector_options={}, min_cycles=2 * args.min_cycles,
            )
            try:
                out[cand.label].append(runner.run(cand).steps_per_s)
            finally:
                runner.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", help="settings to run (names or prefixes: libero-chunk8, cartpole...)")
    parser.add_argument("--libero-envs", type=int, default=4)
    parser.add_argument("--cartpole-envs", type=int, default=8)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--episode-steps", type=int, default=160)
    parser.add_argument("--trial-seconds", type=float, default=3.0)
    parser.add_argument("--min-cycles", type=int, default=3, help="each trial times at least this many calls of every env")
    parser.add_argument("--confirm-rounds", type=int, default=2, help="rounds re-measuring the grid's best, the plan and the default")
    parser.add_argument("--confirm-seconds", type=float, default=8.0)
    parser.add_argument("--max-trials", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a few layouts of CartPole only")
    parser.add_argument("--out", default="results/bench_tune.json")
    args = parser.parse_args()
    if args.quick:
        args.only, args.trial_seconds, args.confirm_rounds, args.confirm_seconds = ["cartpole"], 0.3, 1, 0.3
    chosen = [s for s in settings(args) if not args.only or any(s["name"].startswith(o) for o in args.only)]
    rows = []
    for setting in chosen:
        rows.append(run_setting(setting, args))
        # after every setting, so a long run that is stopped keeps what it measured
        write_json(args.out, {"benchmark": "bench_tune", "machine": machine(), "args": vars(args), "results": rows})
    print()
    print_table(rows, [
        ("setting", "setting", ""), ("layouts", "layouts", "d"), ("grid_best", "grid's best", ""),
        ("grid_best_steps_per_s", "steps/s", ".1f"), ("plan", "tuned plan", ""), ("plan_steps_per_s_grid", "steps/s (grid)", ".1f"),
        ("plan_over_grid_best", "x grid best", ".2f"), ("default_in_grid_steps_per_s", "default", ".1f"),
        ("confirm_plan_over_grid_best", "confirmed x best", ".2f"), ("confirm_plan_over_default", "confirmed x default", ".2f"),
        ("tune_s", "tune s", ".0f"), ("grid_s", "grid s", ".0f"), ("time_ratio", "time ratio", ".2f"),
    ])
    path = write_json(args.out, {"benchmark": "bench_tune", "machine": machine(), "args": vars(args), "results": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
