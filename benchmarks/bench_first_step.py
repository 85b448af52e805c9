"""The first step on a machine whose numba cache does not hold LIBERO's control loop yet.

Each run is a fresh process (one env, or a 4-env vector env on fastenv's workers) timed from
``gym.make`` on: the build and reset, the first step, and the first ``--steps`` chunks. numba's
cache (``NUMBA_CACHE_DIR``) is, per run, a fresh copy of one that holds robosuite's own compiled
functions (what any earlier robosuite run leaves) and either not fastenv's control loop
("cold") or also fastenv's ("warm", after ``fastenv compile``). Cold runs go both ways:
``FASTENV_COMPILE=inline`` (the first step compiles, the behaviour before the background
compile) and the default ``background`` (a child process compiles while the Python loop steps).
On an empty cache (a new machine: robosuite's own numba functions not compiled either) one env
of fastenv's default is timed beside stock LIBERO's ``OffScreenRenderEnv``, whose first step
compiles robosuite's functions: fastenv's first step must not wait longer than stock's.
After each cold run the benchmark waits for its background compile to end before the next run.
Configurations are interleaved over rounds; medians, spreads and ratios from one run, JSON.

    python benchmarks/bench_first_step.py --rounds 3 --out results/bench_first_step.json
    python benchmarks/bench_first_step.py --only-busy --rounds 3 --out results/bench_first_step_busy.json

``--busy`` (``--only-busy``: nothing else) times the empty-cache pair again with a CPU-bound process
on each of the machine's other cores: fastenv's background compile, at the CPU's lowest priority,
must not make its first step wait (the aim: within stock LIBERO's first step + 2 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, wait_for_background_compile, write_json  # noqa: E402

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import gymnasium as gym
import fastenv  # noqa: F401
from fastenv.core.fast_paths import FastPath
num_envs, steps, chunk = int(sys.argv[1]), int(sys.argv[2]), 8
kwargs = dict(suite="libero_goal", task_id=3, chunk=chunk, camera_size=64)
env = gym.make("fastenv/Libero-v0", **kwargs) if num_envs == 1 else gym.make_vec("fastenv/Libero-v0", num_envs=num_envs, **kwargs)
env.reset(seed=0)
built = time.perf_counter()
actions = np.random.default_rng(0).uniform(-1, 1, (steps, *env.action_space.shape)).astype(np.float32)
times, compiled = [], []
for action in actions:
    start = time.perf_counter()
    env.step(action)
    times.append(time.perf_counter() - start)
    if num_envs == 1:
        compiled.append(env.unwrapped.adapter.fast_paths()[FastPath.COMPILED_CONTROL_LOOP])
env.close()
print(json.dumps({"build_s": built - t0, "first_step_s": times[0], "steps_s": sum(times), "compiled": compiled}))
"""

STOCK_TIMED = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
from fastenv.backends.libero import LiberoTask
from fastenv.backends.libero.task import import_libero
steps, chunk = int(sys.argv[2]), 8
task = LiberoTask.load("libero_goal", 3)
env = import_libero().OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=64, camera_widths=64)
env.reset()
built = time.perf_counter()
actions = np.random.default_rng(0).uniform(-1, 1, (steps * chunk, 7))
times = []
for action in actions:
    start = time.perf_counter()
    env.step(action)
    times.append(time.perf_counter() - start)
env.close()
print(json.dumps({"build_s": built - t0, "first_step_s": times[0], "steps_s": sum(times), "compiled": []}))
"""

STOCK = """
import numpy as np
from fastenv.backends.libero import LiberoTask
from fastenv.backends.libero.task import import_libero
task = LiberoTask.load("libero_goal", 3)
env = import_libero().OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=32, camera_widths=32)
env.reset()
env.step(np.zeros(7))
env.close()
"""

CONFIGS = [
    # (name, cache, FASTENV_COMPILE)
    ("cold cache, inline (before)", "cold", "inline"),
    ("cold cache, background (default)", "cold", "background"),
    ("warm cache", "warm", "background"),
]
# An empty cache (a new machine: robosuite's own numba functions not compiled either), one env:
# stock LIBERO (its first step compiles robosuite's functions) against fastenv's default.
EMPTY = [
    ("empty cache, stock LIBERO", "empty", "stock"),
    ("empty cache, fastenv (default)", "empty", "background"),
]
# The same with the machine's other cores busy (``--busy``): a CPU-bound process on each core but
# the first, at normal priority, for the whole run. fastenv's background compile runs at the CPU's
# lowest priority: it must not take the core the stepping process needs.
BUSY = [
    ("empty cache, stock LIBERO, other cores busy", "empty", "stock"),
    ("empty cache, fastenv (default), other cores busy", "empty", "background"),
]
LOAD = "while True: pass"


class _Load:
    """CPU-bound processes on every core but the first, while inside."""

    def __init__(self, on: bool) -> None:
        self.on, self.processes = on, []

    def __enter__(self) -> "_Load":
        if self.on:
            for core in sorted(os.sched_getaffinity(0))[1:]:
                process = subprocess.Popen([sys.executable, "-c", LOAD])
                os.sched_setaffinity(process.pid, {core})
                self.processes.append(process)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def _run(code: list[str], cache: str, mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "FASTENV_COMPILE": mode}
    return subprocess.run([sys.executable, *code], env=env, capture_output=True, text=True, check=False, timeout=1800)


def docs_table(payload: dict) -> str:
    """The table of docs/benchmarks.md, from the JSON."""
    lines = [
        f"| envs | numba cache, `FASTENV_COMPILE` | build and reset, s | first step, s | first {payload['steps']} chunks, s |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in payload["rows"]:
        lines.append(f"| {row['num_envs']} | {row['config']} | {row['build_s']:.1f} | {row['first_step_s']:.2f} | {row['steps_s']:.1f} |")
    lines.append("")
    lines += [f"- {name}: **{value:+.2f}**" if name.endswith(", s") else f"- {name}: **{value:.1f}x**" for name, value in payload["ratios"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", default=None, help="print the docs table of this JSON, and exit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="chunks of 8 timed per run")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[1, 4], help="1: one env; more: a vector env on workers")
    parser.add_argument("--busy", action="store_true", help="also time the empty-cache pair with the other cores busy")
    parser.add_argument("--only-busy", action="store_true", help="time only the empty-cache pair with the other cores busy (one env)")
    parser.add_argument("--out", default="results/bench_first_step.json")
    args = parser.parse_args(argv)
    if args.only_busy:
        args.busy, args.num_envs = True, [1]
    if args.table:
        payload = json.loads(open(args.table).read())
        print(docs_table(payload))
        return payload

    work = tempfile.mkdtemp(prefix="fastenv-first-step-")
    base, warm = os.path.join(work, "robosuite-only"), os.path.join(work, "warm")
    try:
        for code, cache in ((["-c", STOCK], base),):
            run = _run(code, cache, "inline")
            assert run.returncode == 0, run.stderr[-3000:]
        shutil.copytree(base, warm)
        run = _run(["-m", "fastenv.cli", "compile"], warm, "inline")
        assert run.returncode == 0, run.stderr[-3000:]

        samples: dict[tuple[int, str], list[dict]] = {}
        for r in range(args.rounds):
            for num_envs in args.num_envs:
                configs = [] if args.only_busy else CONFIGS + (EMPTY if num_envs == 1 else [])
                configs += BUSY if args.busy and num_envs == 1 else []
                for name, cache_kind, mode in configs:
                    cache = os.path.join(work, f"run-{r}-{num_envs}-{mode}-{cache_kind}")
                    if cache_kind == "empty":
                        os.makedirs(cache)
                    else:
                        shutil.copytree(base if cache_kind == "cold" else warm, cache)
                    code = STOCK_TIMED if mode == "stock" else CHILD
                    with _Load((name, cache_kind, mode) in BUSY):
                        run = _run(["-c", code, str(num_envs), str(args.steps)], cache, "background" if mode == "stock" else mode)
                    assert run.returncode == 0, run.stderr[-3000:]
                    sample = json.loads(run.stdout.strip().splitlines()[-1])
                    sample["background_line"] = "in a background process" in run.stderr
                    sample["inline_line"] = "later processes load it from numba's cache" in run.stderr
                    sample["waited_after_s"] = wait_for_background_compile(cache)
                    samples.setdefault((num_envs, name), []).append(sample)
                    shutil.rmtree(cache, ignore_errors=True)
                    print(f"round {r + 1}/{args.rounds} envs={num_envs} {name}: first step {sample['first_step_s']:.2f} s, "
                          f"{args.steps} chunks {sample['steps_s']:.2f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    rows = []
    for (num_envs, name), runs in samples.items():
        compiled = [run["compiled"] for run in runs if run["compiled"]]
        rows.append({
            "num_envs": num_envs, "config": name,
            "build_s": med([r["build_s"] for r in runs]),
            "first_step_s": med([r["first_step_s"] for r in runs]),
            "first_step_spread_s": [min(r["first_step_s"] for r in runs), max(r["first_step_s"] for r in runs)],
            "steps_s": med([r["steps_s"] for r in runs]),
            "steps_spread_s": [min(r["steps_s"] for r in runs), max(r["steps_s"] for r in runs)],
            "first_compiled_step": med([c.index(True) if True in c else len(c) for c in compiled]) if compiled else None,
            "background_line": [r["background_line"] for r in runs], "inline_line": [r["inline_line"] for r in runs],
        })
    ratios = {}  # of the medians (each cold run takes seconds to minutes: a round is not one moment)
    for num_envs in args.num_envs:
        by = {row["config"]: row for row in rows if row["num_envs"] == num_envs}
        if num_envs == 1 and BUSY[0][0] in by:
            stock, ours = (by[name] for name, _, _ in BUSY)
            ratios["other cores busy, empty cache: fastenv's first step minus stock LIBERO's, s"] = ours["first_step_s"] - stock["first_step_s"]
        if CONFIGS[0][0] not in by:
            continue
        before, after, warm_row = (by[name] for name, _, _ in CONFIGS)
        ratios[f"{num_envs} env(s): first step, before / after"] = before["first_step_s"] / after["first_step_s"]
        ratios[f"{num_envs} env(s): first {args.steps} chunks, before / after"] = before["steps_s"] / after["steps_s"]
        ratios[f"{num_envs} env(s): first step, after / warm cache"] = after["first_step_s"] / warm_row["first_step_s"]
        if num_envs == 1 and EMPTY[0][0] in by:
            stock, ours = (by[name] for name, _, _ in EMPTY)
            ratios["empty cache: fastenv's first step (a chunk of 8) / stock LIBERO's (one action)"] = ours["first_step_s"] / stock["first_step_s"]
    print_table(rows, [("num_envs", "envs", "d"), ("config", "numba cache, FASTENV_COMPILE", "s"), ("build_s", "build+reset s", ".2f"),
                       ("first_step_s", "first step s", ".2f"), ("steps_s", f"first {args.steps} chunks s", ".2f"),
                       ("first_compiled_step", "first compiled step", ".0f")])
    for name, value in ratios.items():
        print(f"{name}: {value:+.2f}" if name.endswith(", s") else f"{name}: {value:.1f}x")
    payload = {"benchmark": "first_step", "rounds": args.rounds, "steps": args.steps, "chunk": 8, "camera_size": 64,
               "task": "libero_goal/3", "rows": rows, "ratios": ratios, "machine": machine(),
               "command": "python benchmarks/bench_first_step.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
