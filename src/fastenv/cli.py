"""The ``fastenv`` command: ``fastenv bench`` runs the ablation on LIBERO (the main job);
``fastenv tune`` finds the fastest layout for an env and a policy; ``fastenv eval`` evaluates a
policy on whole LIBERO suites, sharded and batched; ``fastenv conform`` checks
fastenv against the stock simulator over its task space; ``fastenv compile`` compiles LIBERO's
control loop into numba's cache; ``fastenv doctor`` says which fast paths serve on this machine and
why the others do not; ``fastenv vulkan-env`` prints the Vulkan driver line for ManiSkill's
own tools (``eval "$(fastenv vulkan-env)"``)."""

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
    p.add_argument("--full", action="store_true", help="the long interleaved run: 192 steps per env, 3 rounds (about 20 min on 2 cores)")
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
        "--policy-cost", metavar="PRESET|A,B",
        help="add a VLA's inference cost to each policy call, spent as a wait that leaves the CPU free: a preset from "
        "published figures (pi05-behavior, pi05-rtx4090, pi0-eager; docs/benchmarks.md cites each) or A,B seconds per "
        "call and per sample; a preset's chunk is the default --chunk",
    )
    p.add_argument(
        "--policy-compute", choices=["auto", "wait", "transformer"], default=d.policy_compute,
        help="how --policy-cost is spent: a wait, or a random-weight transformer of a VLA's scale in bf16 on CUDA "
        "(auto: the transformer where the policy runs on CUDA; default %(default)s)",
    )
    p.add_argument(
        "--only", nargs="+", choices=["Default", "+Slim", "+SkipObs", "+Pipeline", "+Async", "+FastReset", "+FastSubstep"],
        help="run only these",
    )
    p.add_argument("--out", default=d.out, help="folder for fastenv_bench.json and .png (fastenv_bench_server.json with --regime "
                   "server), or a .json file to write instead, the chart beside it as .png (default %(default)s)")
    server = p.add_argument_group(
        "--regime server", "a policy server's regime (docs/gpu-servers.md): N envs per policy process, Default and fastenv at the "
        "layout its cost model chooses, each against the bound min(N K / P(N), C / c); --chunk, --camera-size, --device, "
        "--policy-cost, --policy-compute, --suite, --task-id, --episode-steps, --policy-cores and --out apply too",
    )
    server.add_argument("--regime", choices=["ablation", "server"], default="ablation",
                        help="ablation: the configurations one after another (default); server: the policy-server regime")
    server.add_argument("--envs", type=int, nargs="+", metavar="N",
                        help="env counts to run (default: the machine's cores x 1, 4 and 8: 16, 64, 128 on 16 cores)")
    server.add_argument("--seconds", type=float, help="seconds timed per row (default 20)")
    server.add_argument("--rows", nargs="+", choices=["Default", "fastenv"], help="rows to run (default both)")
    server.add_argument("--default-envs", type=int, nargs="+", metavar="N", help="run Default only at these N (default: every N)")


def _tune_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="find the fastest layout (workers, stages, batching, threads) for an env and a policy on this machine",
        description="Calibrate on the default layout, model every layout's throughput from the measured costs, "
        "measure the best few, and print and save the fastest as a plan (PipelineVectorEnv(layout=...), "
        "gym.make_vec(..., layout='plan.json')).",
    )
    p.add_argument("env_id", help="a Gymnasium id: fastenv/Libero-v0, fastenv/ManiSkill-v0, CartPole-v1...")
    p.add_argument("--num-envs", type=int, required=True, help="N envs")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="an option of the env (repeatable; VALUE is read as a Python literal, else a string): chunk=8")
    cost = p.add_mutually_exclusive_group()
    cost.add_argument("--policy", metavar="MODULE:NAME", help="the policy: a callable from a batch of observations to a batch of actions")
    cost.add_argument("--policy-cost", metavar="FIXED[,PER_OBS]|PRESET",
                      help="the policy's measured cost in seconds per call (and per observation), or a VLA's published cost by "
                      "name (pi05-behavior, pi05-rtx4090, pi0-eager: docs/benchmarks.md cites each); trials sleep that long")
    p.add_argument("--max-trials", type=int, default=4, help="layouts measured after the calibration (default %(default)s)")
    p.add_argument("--trial-seconds", type=float, default=2.0, help="seconds each layout is timed (default %(default)s)")
    p.add_argument("--cpus", type=int, help="CPUs to plan for (default: what this process may use, cgroup limits included)")
    p.add_argument("--out", default="fastenv_plan.json", help="where to write the plan (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _conform_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "conform",
        help="fastenv against the stock simulator over every task, key set and mode (exact comparison)",
        description="Play one scenario per case (episode ends inside chunks, seeded and unseeded resets) through "
        "fastenv and through the stock simulator stepped one action at a time, compare every value exactly, and "
        "write the per-case table as JSON. Without sampling options every case of every task runs (hours).",
    )
    p.add_argument("backend", choices=["libero", "libero_rates", "maniskill"], help="which simulator (libero_rates: LIBERO at other control and observation rates)")
    p.add_argument("--tasks", nargs="+", metavar="TASK", help="only these tasks (libero_90/35, PickCube-v1...)")
    p.add_argument("--sample-tasks", type=int, metavar="N", help="a sample of N tasks")
    p.add_argument("--cases-per-task", type=int, metavar="M", help="a sample of M cases of each task")
    p.add_argument("--seed", help="the samples' seed (default: FASTENV_CONFORM_SEED, else the git commit)")
    p.add_argument("--shard", metavar="I/N", help="every N-th task from the I-th (to split a sweep over machines)")
    p.add_argument("--jobs", type=int, default=1, help="processes sharing the tasks, one core each (default %(default)s)")
    p.add_argument("--out", help="the JSON table (default results/conformance_<backend>.json)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def _run_conform(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> int:
    import os
    import shlex
    import time

    from fastenv import conformance

    shard = None
    if args.shard:
        try:
            i, n = (int(x) for x in args.shard.split("/"))
        except ValueError:
            parser.error(f"--shard takes I/N, got {args.shard!r}")
        shard = (i, n)
    for name in ("sample_tasks", "cases_per_task"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    seed = args.seed or conformance.sample_seed()
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    start = time.perf_counter()
    out = args.out or os.path.join("results", f"conformance_{args.backend}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    command = "fastenv " + " ".join(shlex.quote(a) for a in argv)
    if args.jobs > 1:
        if shard is not None:
            parser.error("--jobs splits the tasks itself; give --jobs or --shard, not both")
        return _conform_jobs(args, seed, out, command, start)
    try:
        module, tasks = conformance.select(args.backend, tasks=args.tasks, sample_tasks=args.sample_tasks, seed=seed, shard=shard)
    except ValueError as exc:
        parser.error(str(exc))
    def save(task: str, outcomes: list) -> None:  # the table so far, so a long sweep loses nothing
        done = tasks.index(task) + 1
        failed = sum(1 for o in outcomes if not o.passed)
        print(f"[{done}/{len(tasks)}] {task}: {len(outcomes)} cases so far, {failed} differ", file=sys.stderr, flush=True)
        extra = {"seed": seed, "tasks": tasks, "complete": done == len(tasks), **_stack(module)}
        conformance.write_table(out, outcomes, command=command, seconds=time.perf_counter() - start, extra=extra)

    outcomes = conformance.sweep(module, tasks, cases_per_task=args.cases_per_task, seed=seed, progress=not args.quiet, after_task=save)
    seconds = time.perf_counter() - start
    payload = conformance.write_table(out, outcomes, command=command, seconds=seconds,
                                      extra={"seed": seed, "tasks": tasks, "complete": True, **_stack(module)})
    return _conform_report(args.backend, payload, seconds, out)


def _stack(module: object) -> dict[str, object]:
    """What the backend says of the stack it ran on (``{"stack": ...}``), or nothing."""
    stack = getattr(module, "stack", None)
    return {"stack": stack()} if stack is not None else {}


def _conform_jobs(args: argparse.Namespace, seed: str, out: str, command: str, start: float) -> int:
    """Run the sweep as ``args.jobs`` shards in subprocesses (one native thread each), then merge."""
    import os
    import subprocess
    import tempfile
    import time

    from fastenv import conformance

    with tempfile.TemporaryDirectory(dir=os.path.dirname(out) or ".", prefix=".conform-") as tmp:
        parts = [os.path.join(tmp, f"shard{i}.json") for i in range(args.jobs)]
        base = [sys.executable, "-m", "fastenv.cli", "conform", args.backend, "--seed", seed, "--quiet"]
        for name in ("tasks", "sample_tasks", "cases_per_task"):
            value = getattr(args, name)
            if value is not None:
                base += [f"--{name.replace('_', '-')}", *(map(str, value) if isinstance(value, list) else [str(value)])]
        env = {**os.environ, "LP_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        procs = [subprocess.Popen([*base, "--shard", f"{i}/{args.jobs}", "--out", part], env=env) for i, part in enumerate(parts)]
        codes = [p.wait() for p in procs]
        missing = [part for part, code in zip(parts, codes) if not os.path.exists(part)]
        if missing:
            print(f"shards failed to write their tables (exit codes {codes})", file=sys.stderr)
            return 2
        seconds = time.perf_counter() - start
        payload = conformance.merge_tables(parts, out, command=command, seconds=seconds, extra={"seed": seed, "jobs": args.jobs})
    return _conform_report(args.backend, payload, seconds, out)


def _conform_report(backend: str, payload: dict, seconds: float, out: str) -> int:
    total = payload["summary"]["total"]
    print(
        f"{backend}: {len(payload['summary']['tasks'])} tasks, {total['cases']} cases: {total['passed']} passed, "
        f"{total['failed']} failed, {total['skipped']} skipped; {total['compared']:,} values compared in {seconds:.0f} s; wrote {out}"
    )
    for row in payload["cases"]:
        if not row["passed"]:
            print(f"  DIFFERS {row['case']['id']}: {row['difference']}")
        elif row["skipped"]:
            print(f"  skipped {row['case']['id']}: {row['skipped']}")
    return 1 if total["failed"] else 0


def _literal(text: str) -> object:
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _run_tune(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    import functools
    import importlib

    import gymnasium as gym

    from fastenv.tuning import tune

    env_kwargs = {}
    for item in args.env_arg:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--env-arg takes KEY=VALUE, got {item!r}")
        env_kwargs[key] = _literal(value)
    if args.env_id not in gym.registry:
        parser.error(f"unknown env id {args.env_id!r}")
    policy = policy_cost = None
    if args.policy:
        module, sep, name = args.policy.partition(":")
        if not sep:
            parser.error(f"--policy takes MODULE:NAME, got {args.policy!r}")
        policy = getattr(importlib.import_module(module), name)
    elif args.policy_cost:
        from fastenv.policy_cost import inference_cost

        try:
            policy_cost = inference_cost(args.policy_cost)
        except ValueError as exc:
            parser.error(f"--policy-cost: {exc}")
    try:
        plan = tune(
            functools.partial(gym.make, args.env_id, **env_kwargs), policy, num_envs=args.num_envs, policy_cost=policy_cost,
            max_trials=args.max_trials, trial_seconds=args.trial_seconds, cpus=args.cpus, progress=not args.quiet, out=args.out,
        )
    except ValueError as exc:
        parser.error(str(exc))
    print(plan.summary())
    print("\ntrials (steps/s = vector-env transitions per second):")
    for trial in plan.trials:
        print(f"  {trial['layout']:<40} measured {trial['steps_per_s']:10.1f}  predicted {trial['predicted_steps_per_s']:10.1f}  bound: {trial['bound']}")
    if args.env_id.startswith("fastenv/"):
        use = f"gym.make_vec({args.env_id!r}, num_envs={args.num_envs}, layout={args.out!r}, ...)"
    else:
        use = f"PipelineVectorEnv([lambda: gym.make({args.env_id!r})] * {args.num_envs}, layout={args.out!r})"
    print(f"\nwrote {args.out}; use it with {use}")


# Commands without options: name, help, description.
_PLAIN_COMMANDS = (
    (
        "compile",
        "compile LIBERO's control loop into numba's cache now (else the first process does it in the background)",
        "Compile LIBERO's control loop with numba into numba's cache, in the foreground (30-60 s, once per "
        "machine). Without it, the first process whose envs need it compiles it in a background process while the "
        "Python loop, the same arithmetic, steps the envs.",
    ),
    (
        "vulkan-env",
        "print the shell line that points Vulkan at this environment's CPU driver, for tools run outside fastenv",
        "Print `export VK_ICD_FILENAMES=...`: the Vulkan driver `import fastenv` points SAPIEN at (the CPU "
        "driver scripts/vulkan.sh put in this environment, or the one VK_ICD_FILENAMES/VK_DRIVER_FILES already "
        "chose), for ManiSkill's own tools in the same shell: eval \"$(fastenv vulkan-env)\"; python -m "
        "mani_skill.trajectory.replay_trajectory ... Prints nothing (and says why on stderr) where there is none "
        "to point at: a machine with a GPU's driver needs no line.",
    ),
)


def _run_vulkan_env() -> int:
    import os
    import shlex

    from fastenv.backends._vulkan import configure_vulkan

    chosen = os.environ.get("VK_DRIVER_FILES") if os.environ.get("VK_DRIVER_FILES") and not os.environ.get("VK_ICD_FILENAMES") else None
    icd = configure_vulkan()
    if icd is None:
        print(
            "fastenv vulkan-env: no CPU Vulkan driver in this environment and none chosen: Vulkan's loader finds the "
            "system's drivers by itself (bash scripts/vulkan.sh installs Mesa's CPU driver on a machine without one)",
            file=sys.stderr,
        )
        return 0
    print(f"export {'VK_DRIVER_FILES' if chosen else 'VK_ICD_FILENAMES'}={shlex.quote(icd)}")
    return 0


def _doctor_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="which fast paths serve on this machine and install, and for each that does not, why and what to do",
        description="Read what this machine gives fastenv (the CPU's SIMD extensions, numpy's BLAS and its kernel set, "
        "what numba compiles for and whether its cache holds LIBERO's control loop for this CPU, the renderer, a "
        "Vulkan device for ManiSkill), build and step one LIBERO env, and say which of its fast paths serve; for "
        "each that steps aside, the reason it gave and what to change.",
    )
    p.add_argument("--suite", default="libero_goal", help="the LIBERO suite of the env it builds (default %(default)s)")
    p.add_argument("--task-id", type=int, default=3, help="its task (default %(default)s)")
    p.add_argument("--no-env", action="store_true", help="read the facts only, build no env (seconds instead of a minute)")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--record-gpus", metavar="PATH",
                   help="also record this machine's CUDA and EGL device lists, as processes with each GPU alone (by index and by "
                   "UUID) and in PCI order see them, to PATH (JSON; the tests' recorded machines are such files)")


def _run_doctor(args: argparse.Namespace) -> int:
    import json

    from fastenv.doctor import diagnose, format_report

    report = diagnose(args.suite, args.task_id, env=not args.no_env)
    print(format_report(report))
    if args.record_gpus:
        from fastenv.gpus import record

        with open(args.record_gpus, "w") as f:
            json.dump(record(), f, indent=1)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, default=str)
    return 0


def main(argv: list[str] | None = None) -> int:
    from fastenv import __version__

    parser = argparse.ArgumentParser(prog="fastenv", description="fastenv: fast robot simulators for RL")
    parser.add_argument("--version", action="version", version=f"fastenv {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _bench_parser(sub)
    _tune_parser(sub)
    _conform_parser(sub)
    _doctor_parser(sub)
    from fastenv.eval.command import add_parser as _eval_parser

    _eval_parser(sub)
    for name, help_text, description in _PLAIN_COMMANDS:
        sub.add_parser(name, help=help_text, description=description)
    args = parser.parse_args(argv)
    if args.command == "vulkan-env":
        return _run_vulkan_env()
    if args.command == "doctor":
        return _run_doctor(args)
    if args.command == "eval":
        from fastenv.eval.command import run_command

        return run_command(parser, args)
    if args.command == "compile":
        from fastenv.backends.libero._warm import main as compile_main

        return compile_main()
    if args.command == "conform":
        return _run_conform(parser, args, sys.argv[1:] if argv is None else list(argv))
    if args.command == "tune":
        _run_tune(parser, args)
    if args.command == "bench" and args.regime == "server":
        return _run_bench_server(parser, args)
    if args.command == "bench":
        if args.envs is not None or args.seconds is not None or args.rows is not None or args.default_envs is not None:
            parser.error("--envs, --seconds, --rows and --default-envs are options of --regime server")
        from fastenv.bench import BenchConfig, format_table, run

        given = {
            key: getattr(args, key)
            for key in ("num_envs", "workers", "chunk", "stages", "camera_size", "steps", "episode_steps", "rounds", "policy_cores")
            if getattr(args, key) is not None
        }
        if args.policy_cost is not None and "chunk" not in given and not args.quick:
            from fastenv.policy_cost import inference_cost

            try:
                preset_chunk = inference_cost(args.policy_cost).chunk
            except ValueError as exc:
                parser.error(f"--policy-cost: {exc}")
            if preset_chunk is not None:
                given["chunk"] = preset_chunk  # the chunk the published figure was measured at
        common = dict(suite=args.suite, task_id=args.task_id, device=args.device, out=args.out, policy_cost=args.policy_cost,
                      policy_compute=args.policy_compute, **given)
        if args.quick and args.full:
            parser.error("--quick and --full are exclusive")
        cfg = BenchConfig.quick(**common) if args.quick else BenchConfig.full(**common) if args.full else BenchConfig(**common)
        try:
            cfg.check()
        except ValueError as exc:
            parser.error(str(exc))
        from fastenv.bench import variants

        count = len([v for v in variants(cfg) if args.only is None or v.name.split(" ")[0] in args.only])
        print(
            f"fastenv bench: {count} configurations x {cfg.rounds} rounds x {cfg.num_envs} envs x {cfg.steps} steps; "
            "how long it takes here is said once the first configuration has run (machines differ by 2-3x)",
            flush=True,
        )
        from tqdm import tqdm

        try:
            payload = run(cfg, args.only, announce=lambda text: tqdm.write(f"fastenv bench: {text}"))
        except ValueError as exc:
            parser.error(str(exc))
        print()
        print(format_table(payload["results"]))
        if payload["policy_cost"]:
            c = payload["policy_cost"]
            print(f"\nVLA regime: {c['name']}, {1000 * c['per_call_s']:g} ms + {1000 * c['per_sample_s']:g} ms x batch per call, "
                  f"spent as {c['compute']}; chunk {cfg.chunk}")
        print(
            f"\npolicy on {payload['policy_device']} (process on cores {payload['policy_cores']}), envs on cores "
            f"{payload['env_cores']}; wrote " + ", ".join(payload["files"])
        )
        aside = {r["config"]: r["own_fast_paths_not_served"] for r in payload["results"] if r.get("own_fast_paths_not_served")}
        if aside:
            print(f"fastenv bench: in these rows their own fast paths did not serve in every env: {aside} "
                  "(fastenv doctor says why and what to do)", file=sys.stderr)
        differ = [r["config"] for r in payload["results"] if not r["same_data_as_default"]["equal"]]
        if differ:
            print(f"fastenv bench: {differ} did not produce Default's data (the 'same data' column says where)", file=sys.stderr)
            return 1
    return 0


def _run_bench_server(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from fastenv.bench.report import server_table as format_table
    from fastenv.bench.server import ServerConfig, run

    ablation_only = {"--quick": args.quick, "--full": args.full, "--only": args.only, "--num-envs": args.num_envs,
                     "--workers": args.workers, "--stages": args.stages, "--steps": args.steps, "--rounds": args.rounds}
    given = [name for name, value in ablation_only.items() if value not in (None, False)]
    if given:
        parser.error(f"{', '.join(given)}: options of the ablation, not of --regime server (it chooses the layout itself)")
    options = {key: getattr(args, key) for key in ("chunk", "camera_size", "episode_steps", "policy_cores", "seconds") if getattr(args, key) is not None}
    if args.envs is not None:
        options["envs"] = tuple(args.envs)
    if args.rows is not None:
        options["rows"] = tuple(args.rows)
    if args.default_envs is not None:
        options["default_envs"] = tuple(args.default_envs)
    if args.policy_cost is not None:
        options["policy_cost"] = args.policy_cost
    cfg = ServerConfig(suite=args.suite, task_id=args.task_id, device=args.device, policy_compute=args.policy_compute, out=args.out, **options)
    try:
        cfg.check()
    except ValueError as exc:
        parser.error(str(exc))
    payload = run(cfg)
    print()
    print(format_table(payload))
    print(f"\nwrote {', '.join(payload['files'])}")
    differ = [f"N={e['num_envs']}" for e in payload["rows"] if not e.get("fastenv", {}).get("same_data_as_default", {"equal": True})["equal"]]
    if differ:
        print(f"fastenv bench: fastenv's rows at {differ} did not produce Default's data (the 'same data' column says where)", file=sys.stderr)
    faults = [f"N={e['num_envs']} {name}" for e in payload["rows"] for name in ("Default", "fastenv") if (e.get(name) or {}).get("calibration_fault")]
    if faults:
        print(f"fastenv bench: {', '.join(faults)} ran above the bound by more than its calibration's spread: a calibration fault, "
              "not a result (the lines under the table say which input was off)", file=sys.stderr)
    return 1 if differ or faults else 0


if __name__ == "__main__":
    sys.exit(main())
