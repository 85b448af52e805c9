"""``fastenv eval``: the command's options, the policy named on the command line, and its report."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

from fastenv.eval.episodes import MAX_STEPS, parse_tasks

POLICY_HELP = (
    "the policy: 'projection' (a deterministic stand-in reading both images and the state), "
    "'openpi://HOST:PORT' (openpi's websocket policy server, scripts/serve_policy.py), "
    "'vla-eval://HOST:PORT' (a vla-eval model server), 'lerobot:PATH_OR_REPO' (a LeRobot pretrained policy), "
    "or 'MODULE:NAME' (a fastenv.eval.BatchPolicy instance or subclass, or a callable on a batch of observations). "
    "Repeat it for several servers of the same model (one per GPU): worker w is served by the (w mod N)-th"
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a policy on whole LIBERO suites: the episode list sharded over worker processes, the policy batched",
        description="Evaluate a policy on every episode of LIBERO suites (each task's first N init states), with the "
        "reference loops' protocol (openpi's examples/libero/main.py by default), over worker processes that each hold "
        "a few envs, the policy called on batches of the envs that wait for a chunk. Writes one JSON of per-episode "
        "results and success rates per task and suite, and prints a table. An episode's result depends on the episode "
        "only: --episode ID replays one alone, --resume goes on from a run that stopped.",
    )
    p.add_argument("--policy", action="append", metavar="POLICY", help=POLICY_HELP + " (required, but with --list-suites)")
    p.add_argument("--list-suites", action="store_true",
                   help="list every suite of the installed LIBERO: its tasks, init states, step budget, and whether it runs or why not "
                        "(with --out, also as JSON); runs nothing")
    p.add_argument("--suite", action="append", default=None, metavar="SUITE",
                   help=f"a LIBERO suite (repeat for several; default libero_spatial): {', '.join(MAX_STEPS)}, libero_100 "
                   "(libero_90 and libero_10), or any suite of the installed LIBERO that perturbs one of them and ships init "
                   "states (LIBERO-PRO's libero_spatial_swap, libero_goal_lan, libero_10_with_mug, ...; LIBERO-plus keeps the "
                   "standard names), each on its base suite's step budget")
    p.add_argument("--tasks", default=None, help="the tasks of each suite, e.g. 0,3,5-7 (default: all)")
    p.add_argument("--episodes", type=int, default=50, help="episodes per task, on init states 0..N-1 (default %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="the envs' seed, as the reference loops seed them (default %(default)s)")
    p.add_argument("--episode", action="append", default=None, metavar="ID",
                   help="run only this episode (SUITE/TASK/INIT_STATE, from the same list; repeat for several)")
    p.add_argument("--protocol", choices=["openpi", "oft"], default="openpi",
                   help="the loop: openpi's main.py (replan 5) or OpenVLA-OFT's (replan 8) (default %(default)s)")
    p.add_argument("--replan-steps", type=int, default=None, help="actions used from each chunk (default: the protocol's)")
    p.add_argument("--num-steps-wait", type=int, default=None, help="settling steps before the policy acts (default 10)")
    p.add_argument("--max-steps", type=int, default=None, help="policy steps an episode may take (default: the suite's budget)")
    p.add_argument("--camera-size", type=int, default=None, help="the cameras' size in pixels (default 256, as the loops render)")
    p.add_argument("--resize-size", type=int, default=None, help="the size the policy's images are resized to (default 224)")
    p.add_argument("--lerobot-batch-size", type=int, default=1,
                   help="with --policy lerobot:PATH, lerobot-eval's eval.batch_size whose episodes to reproduce (default %(default)s)")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default: the CPUs this process may use)")
    p.add_argument("--envs-per-worker", type=int, default=2, help="env slots per worker (default %(default)s)")
    p.add_argument("--max-envs", type=int, default=None, help="at most this many envs alive at once (default: workers x envs per worker)")
    p.add_argument("--max-batch", type=int, default=None,
                   help="B_max: the policy's largest batch (default: chosen by fastenv's tuning model after the first calls)")
    p.add_argument("--batch-timeout", type=float, default=None,
                   help="T_max: seconds the oldest request waits for a fuller batch (default: chosen with B_max)")
    p.add_argument("--policy-cost", default=None,
                   help="add a VLA's inference cost as a wait, a preset (pi0-eager, pi05-rtx4090, pi05-behavior) or A,B seconds")
    p.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local: worker processes here; ray: Ray actors over a Ray cluster (default %(default)s)")
    p.add_argument("--ray-address", default=None, help="the Ray cluster to join (default: RAY_ADDRESS, else a local one)")
    p.add_argument("--ray-num-cpus", type=float, default=1.0, help="CPUs each Ray actor reserves (default %(default)s)")
    p.add_argument("--hang-timeout", type=float, default=600.0, help="seconds a worker with work may stay silent before it is replaced")
    p.add_argument("--retries", type=int, default=2, help="restarts of an episode (lost worker, unanswered request) before the run stops")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds a policy server may take to answer one batch")
    p.add_argument("--out", default=None, help="the results JSON (refused if it exists, unless --resume)")
    p.add_argument("--resume", action="store_true", help="keep the episodes --out already holds and run the others")
    p.add_argument("--video", type=int, default=0, metavar="N", help="film the first N episodes of each task (every step's frame)")
    p.add_argument("--video-dir", default=None, help="where the videos go (default: beside --out)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="start no episode after this many seconds; those running finish, --resume goes on (default: none)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _host_port(text: str, scheme: str) -> tuple[str, int | None]:
    rest = text[len(scheme):]
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{scheme}HOST:PORT expected, got {text!r}")
    return host, int(port)


def make_policy(spec: str, timeout: float = 120.0) -> Any:
    """The policy ``--policy`` names (``POLICY_HELP``)."""
    from fastenv.eval.policies import BatchPolicy, OpenpiPolicy, ProjectionPolicy

    if spec == "projection":
        return ProjectionPolicy()
    if spec.startswith("openpi://"):
        host, port = _host_port(spec, "openpi://")
        return OpenpiPolicy(host, port, timeout=timeout)
    if spec.startswith("vla-eval://"):
        from fastenv.eval.vla_eval import VlaEvalPolicy

        host, port = _host_port(spec, "vla-eval://")
        return VlaEvalPolicy(f"ws://{host}:{port}", timeout=timeout)
    if spec.startswith("lerobot:"):
        from fastenv.eval.lerobot_eval import LeRobotPolicy

        return LeRobotPolicy.from_pretrained(spec[len("lerobot:"):])
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ValueError(f"--policy {spec!r}: expected {POLICY_HELP}")
    try:
        obj = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--policy {spec!r}: {exc}") from None
    if isinstance(obj, type) and issubclass(obj, BatchPolicy):
        return obj()
    if isinstance(obj, BatchPolicy) or callable(obj):
        return obj
    raise ValueError(f"--policy {spec!r} names a {type(obj).__name__}: expected a BatchPolicy or a callable on a batch")


def _kind(spec: str) -> str:
    """What kind of policy ``spec`` names: its scheme, else 'projection' or 'python'."""
    for scheme in ("openpi://", "vla-eval://", "lerobot:"):
        if spec.startswith(scheme):
            return scheme.rstrip(":/")
    return "projection" if spec == "projection" else "python"


def make_policies(specs: list[str], timeout: float = 120.0) -> list[Any]:
    """The policies ``--policy`` (repeated) names, all of one kind, each checked before anything runs."""
    kinds = {_kind(spec) for spec in specs}
    if len(kinds) > 1:
        raise ValueError(f"--policy given {len(specs)} times with policies of different kinds ({', '.join(sorted(kinds))}): "
                         "repeat it for several servers of one model")
    return [make_policy(spec, timeout) for spec in specs]


def list_suites(out: str | None) -> int:
    """``--list-suites``: the installed distribution's suites as a table (and JSON at ``out``)."""
    import json

    from fastenv.backends.libero.mujoco_facts import installed_stack
    from fastenv.eval.episodes import suite_table

    rows = suite_table()
    print("| suite | tasks | init states a task | steps an episode | fastenv eval |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        states = "-" if not r["init_states"] else "{}".format(r["init_states"][0]) if r["init_states"][0] == r["init_states"][1] else \
            "{}..{}".format(*r["init_states"])
        budget = r["max_steps"] if not isinstance(r["max_steps"], dict) else ", ".join(f"{k} {v}" for k, v in r["max_steps"].items())
        why = str(r["why"]).removeprefix(f"{r['suite']}: ").removeprefix(f"{r['suite']} ").split(" (")[0]
        empty = r.get("tasks_without_init_states") or []
        lacking = list(r.get("tasks_without_object_files") or {})
        failing = list(r.get("tasks_with_failing_objects") or {})
        notes = ([f"not task {', '.join(map(str, empty))}: no init states"] if empty else []) + \
            ([f"not task {', '.join(lacking)}: object files missing"] if lacking else []) + \
            ([f"not task {', '.join(failing)}: objects fail to build"] if failing else [])
        runs = "runs" + (f" ({'; '.join(notes)})" if notes else "")
        print(f"| {r['suite']} | {r['tasks'] if r['tasks'] is not None else '-'} | {states} | {budget or '-'} | "
              f"{runs if r['runs'] else 'refused: ' + why} |")
    runs = sum(r["runs"] for r in rows)
    print(f"\n{runs} of {len(rows)} suites run ({installed_stack().get('libero distribution', 'the installed LIBERO')})")
    if out:
        with open(out, "w") as fh:
            json.dump({"command": "fastenv eval --list-suites --out " + out, "stack": installed_stack(), "runs": runs, "suites": rows}, fh, indent=1)
        print(f"wrote {out}")
    return 0


def run_command(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from fastenv.eval.config import EvalConfig
    from fastenv.eval.policies import CostlyPolicy
    from fastenv.eval.protocol import Protocol
    from fastenv.eval.runner import EvalError, run

    if args.list_suites:
        return list_suites(args.out)
    if not args.policy:
        parser.error("the following arguments are required: --policy (or --list-suites)")

    overrides = {k: getattr(args, k) for k in ("replan_steps", "num_steps_wait", "max_steps", "camera_size", "resize_size")
                 if getattr(args, k) is not None}
    try:
        policies = make_policies(args.policy, args.timeout)
        policy = policies[0]
        if not getattr(policy, "reads_chunk_starts_only", True) and args.replan_steps is None:
            overrides["replan_steps"] = 1  # its server is sent every step's observation
        if hasattr(policy, "protocol") and callable(policy.protocol):  # a LeRobot policy: LeRobot's loop, its numbers
            protocol = policy.protocol(batch_size=args.lerobot_batch_size, **overrides)
        else:
            protocol = Protocol.named(args.protocol, **overrides)
        tasks = parse_tasks(args.tasks)
        if args.policy_cost is not None:
            from fastenv.eval.runner import _as_policy

            policies = [CostlyPolicy(_as_policy(p), args.policy_cost) for p in policies]
        suites = args.suite or ["libero_spatial"]
        config = EvalConfig(
            suites=suites, tasks=tasks, episodes=args.episodes, seed=args.seed, protocol=protocol, only=args.episode, workers=args.workers,
            envs_per_worker=args.envs_per_worker, max_envs=args.max_envs, max_batch=args.max_batch, batch_timeout=args.batch_timeout,
            hang_timeout=args.hang_timeout, retries=args.retries, out=args.out, resume=args.resume, video=args.video,
            video_dir=args.video_dir, progress=not args.no_progress, backend=args.backend, time_limit=args.time_limit,
            ray_options={"address": args.ray_address, "num_cpus": args.ray_num_cpus} if args.backend == "ray" else None)
    except (ValueError, TypeError, ImportError) as exc:
        parser.error(str(exc))
    print(f"fastenv eval: {', '.join(suites)}, {'all tasks' if tasks is None else f'tasks {args.tasks}'}, {args.episodes} episodes per "
          f"task ({protocol.replan_steps} actions a chunk, {protocol.num_steps_wait} settling steps)", file=sys.stderr, flush=True)
    try:
        payload = run(policies if len(policies) > 1 else policies[0], config)
    except ValueError as exc:
        parser.error(str(exc))
    except EvalError as exc:
        print(f"fastenv eval stopped: {str(exc).splitlines()[0]}", file=sys.stderr)
        if args.out:
            print(f"what ran is in {args.out}; --resume goes on from it", file=sys.stderr)
        return 1
    print(report(payload, args.out))
    return 0


def report(payload: dict[str, Any], out: str | None) -> str:
    """The table and the run's figures, as printed at the end."""
    from fastenv.eval.lanes import describe_choice
    from fastenv.eval.runner import format_table

    r = payload["run"]
    lines = [format_table(payload), ""]
    eph = r["episodes_per_hour"]
    lines.append(f"{r['episodes_run']} episodes in {r['seconds']:.0f} s ({'-' if eph is None else f'{eph:.0f}'} episodes/hour) on "
                 f"{r['workers']} workers x {r['env_slots'] // max(1, r['workers'])} envs; {r['camera_renders']} camera images rendered "
                 f"for {r['env_steps']} env steps; {r['restarts']} worker restarts")
    if payload.get("stopped"):
        lines.append(f"stopped: {payload['stopped']}")
    each = r.get("policies") or []
    for i, q in enumerate(each):
        name = "policy" if len(each) == 1 else f"policy {i} (workers {', '.join(map(str, q['workers'])) or 'none'})"
        if not q["calls"]:
            lines.append(f"{name}: no calls")
            continue
        lines.append(f"{name}: {q['calls']} calls, {q['mean_batch']:.1f} observations a call on average (at most {q['max_batch']}, waiting "
                     f"at most {1000 * q['batch_timeout']:g} ms for more), busy {100 * q['busy_share']:.0f}% of the run")
        if q.get("tuned"):
            lines += [f"  {line}" for line in describe_choice(q["tuned"]).splitlines()]
    memory = r["worker_max_rss_mb"]
    if memory:
        lines.append("worker memory (peak RSS, MB): " + ", ".join(f"{k}: {'idle (ran no episode)' if not v else f'{v:.0f}'}"
                                                                  for k, v in memory.items()))
    if r["resumed_from"]:
        lines.append(f"{r['resumed_from']} episodes kept from {out}")
    if out:
        lines.append(f"wrote {out}")
    return "\n".join(lines)
