"""The ``fastenv`` command: ``fastenv bench`` runs the ablation on LIBERO (the main job)."""

from __future__ import annotations

import argparse
import sys


def _bench_parser(sub: argparse._SubParsersAction) -> None:
    from fastenv.bench import BenchConfig

    d = BenchConfig()
    p = sub.add_parser(
        "bench",
        help="ablation on LIBERO: Default -> +Slim -> +SkipObs -> +Pipeline -> +Async -> +FastReset -> +FastSubstep",
        description="Reproduce the rollout ablation on LIBERO with a real torch policy in the loop, "
        "interleaved over rounds; prints medians, spreads and where the time goes, and writes JSON "
        "and a PNG chart.",
    )
    p.add_argument("--quick", action="store_true", help="smoke run: 2 small envs, a few steps")
    p.add_argument("--suite", default=d.suite, help="LIBERO suite (default %(default)s)")
    p.add_argument("--task-id", type=int, default=d.task_id, help="task in the suite (default %(default)s)")
    p.add_argument("--num-envs", type=int, help=f"envs (default {d.num_envs})")
    p.add_argument("--workers", type=int, help=f"worker processes for fastenv's vector env (default {d.workers})")
    p.add_argument("--chunk", type=int, help=f"actions per chunk for +SkipObs and after (default {d.chunk})")
    p.add_argument("--stages", type=int, help=f"pipeline stages for +Pipeline (default {d.stages})")
    p.add_argument("--camera-size", type=int, help=f"camera side in pixels (default {d.camera_size})")
    p.add_argument("--device", default=d.device, help="policy device: auto, cpu, cuda (default %(default)s)")
    p.add_argument("--steps", type=int, help=f"simulator steps per env timed per configuration (default {d.steps})")
    p.add_argument("--episode-steps", type=int, help=f"mean episode length in simulator steps (default {d.episode_steps})")
    p.add_argument("--rounds", type=int, help=f"interleaved rounds (default {d.rounds})")
    p.add_argument("--policy-cores", type=int, help=f"CPU cores kept for the policy's process (default {d.policy_cores})")
    p.add_argument(
        "--only", nargs="+", choices=["Default", "+Slim", "+SkipObs", "+Pipeline", "+Async", "+FastReset", "+FastSubstep"],
        help="run only these",
    )
    p.add_argument("--out", default=d.out, help="folder for fastenv_bench.json and .png (default %(default)s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fastenv", description="fastenv: fast robot simulators for RL")
    sub = parser.add_subparsers(dest="command", required=True)
    _bench_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "bench":
        from fastenv.bench import BenchConfig, format_table, run

        given = {
            key: getattr(args, key)
            for key in ("num_envs", "workers", "chunk", "stages", "camera_size", "steps", "episode_steps", "rounds", "policy_cores")
            if getattr(args, key) is not None
        }
        common = dict(suite=args.suite, task_id=args.task_id, device=args.device, out=args.out, **given)
        cfg = BenchConfig.quick(**common) if args.quick else BenchConfig(**common)
        try:
            payload = run(cfg, args.only)
        except ValueError as exc:
            parser.error(str(exc))
        print()
        print(format_table(payload["results"]))
        print(
            f"\npolicy on {payload['policy_device']} (process on cores {payload['policy_cores']}), envs on cores "
            f"{payload['env_cores']}; wrote " + ", ".join(payload["files"])
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
