"""Which flags of ManiSkill's PPO baseline learn on a CPU machine: ppo.py patched by the documented diff.

ManiSkill's ``examples/baselines/ppo/ppo.py`` (not redistributed here: ``--script`` points to it)
gets the documented patch (docs/backends/maniskill.md) with ``git apply`` (``patch -p1`` without git) in a temporary folder, then
runs there once per ``--flags`` string, one run at a time, with this interpreter. Each run's
evaluations (the script's ``eval_success_once_mean``, ``eval_success_at_end_mean`` and
``eval_return_mean`` lines, at the ``global_step`` of the ``Epoch`` line before them) and its wall
time go to ``--out``; ``--append`` adds runs to an existing file. The script saves no videos or
checkpoints here (``--no-capture-video --no-save-model``); every other flag is its own or given.

    python benchmarks/maniskill_ppo_cpu_flags.py --script path/to/ManiSkill/examples/baselines/ppo/ppo.py \\
        --flags "--num-envs 16 --num-minibatches 4 --control-mode pd_ee_delta_pose --eval-freq 10 --total-timesteps 80800" \\
        --out results/maniskill_ppo_cpu_flags.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from _common import machine, write_json

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "backends" / "maniskill.md"
MARKER = "<!-- patch: ManiSkill's examples/baselines/ppo/ppo.py -->"
FIXED = ["--no-capture-video", "--no-save-model"]
EPOCH = re.compile(r"^Epoch: (\d+), global_step=(\d+)$")
METRIC = re.compile(r"^eval_(\w+)_mean=(\S+)$")


def readme_diff(readme: Path = DOCS) -> str:
    text = readme.read_text()
    return text[text.index(MARKER):].split("```diff\n", 1)[1].split("```", 1)[0]


def patched_script(script: Path, folder: Path) -> Path:
    """ManiSkill's ppo.py with the documented diff applied, at examples/baselines/ppo/ppo.py under ``folder``."""
    target = folder / "examples" / "baselines" / "ppo" / "ppo.py"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(script, target)
    diff = folder / "fastenv-ppo.diff"
    diff.write_text(readme_diff())
    if shutil.which("git"):
        args = ["git", "apply", str(diff)]
    else:
        args = ["patch", "-p1", "--batch", "-i", str(diff)]
    done = subprocess.run(args, cwd=folder, capture_output=True, text=True, check=False,
                          env={**os.environ, "GIT_CEILING_DIRECTORIES": str(folder.parent)})
    if done.returncode:
        raise SystemExit(f"the documented diff does not apply to {script}: {done.stdout}{done.stderr}")
    return target


def parse_evals(stdout: str) -> list[dict[str, Any]]:
    """The script's evaluations: step (its global_step) and each ``eval_<metric>_mean``."""
    evals: list[dict[str, Any]] = []
    step = None
    for line in stdout.splitlines():
        line = line.strip()
        match = EPOCH.match(line)
        if match:
            step = int(match.group(2))
            continue
        if line == "Evaluating":
            evals.append({"step": step})
            continue
        match = METRIC.match(line)
        if match and evals:
            evals[-1][match.group(1)] = float(match.group(2))
    return evals


def first_step_at(evals: list[dict[str, Any]], key: str, value: float) -> int | None:
    return next((e["step"] for e in evals if e.get(key, -1.0) >= value), None)


def run(script: Path, flags: list[str], env_id: str, timeout: float, threads: int | None) -> dict[str, Any]:
    args = [sys.executable, str(script), "--env-id", env_id, *FIXED, *flags]
    env = dict(os.environ)
    if threads is not None:  # torch's threads in the script's process (the envs run in fastenv's workers)
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    start = time.perf_counter()
    try:
        done = subprocess.run(args, cwd=script.parent, env=env, capture_output=True, text=True, timeout=timeout, check=False)
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr, code = f"timed out after {timeout} s", None
    wall = time.perf_counter() - start
    evals = parse_evals(stdout)
    row = {
        "flags": flags,
        "command": " ".join(["python", "ppo.py", "--env-id", env_id, *FIXED, *map(shlex.quote, flags)]),
        "torch_threads": threads,
        "returncode": code,
        "wall_s": round(wall, 1),
        "iterations": sum(1 for line in stdout.splitlines() if line.startswith("SPS:")),
        "evals": evals,
        "first_step_success_once_1": first_step_at(evals, "success_once", 1.0),
        "first_step_success_at_end_1": first_step_at(evals, "success_at_end", 1.0),
        "last_eval": evals[-1] if evals else None,
    }
    if code != 0:
        row["stderr_tail"] = stderr[-2000:]
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", type=Path, required=True, help="ManiSkill's examples/baselines/ppo/ppo.py")
    parser.add_argument("--flags", action="append", required=True, help="ppo.py flags of one run (repeat for more runs)")
    parser.add_argument("--env-id", default="PushCube-v1")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--threads", type=int, default=1,
                        help="OMP_NUM_THREADS for the script's process (default %(default)s: its small MLP beside the env workers; 0: unset)")
    parser.add_argument("--out", default="results/maniskill_ppo_cpu_flags.json")
    parser.add_argument("--append", action="store_true", help="add the runs to --out's runs")
    args = parser.parse_args(argv)
    out = Path(args.out)
    payload: dict[str, Any] = json.loads(out.read_text()) if args.append and out.exists() else {
        "benchmark": "maniskill_ppo_cpu_flags", "env_id": args.env_id, "runs": []}
    payload.update({"mani_skill": metadata.version("mani_skill"), "machine": machine(),
                    "patch": "docs/backends/maniskill.md's diff of examples/baselines/ppo/ppo.py"})
    with tempfile.TemporaryDirectory(prefix="fastenv-ppo-") as folder:
        script = patched_script(args.script, Path(folder))
        for flags in args.flags:
            row = run(script, shlex.split(flags), args.env_id, args.timeout, args.threads or None)
            row["benchmark_command"] = ("python benchmarks/maniskill_ppo_cpu_flags.py --script path/to/ppo.py "
                                        f"--flags {shlex.quote(flags)} --out {args.out}" + (" --append" if args.append else ""))
            payload["runs"].append(row)
            write_json(out, payload)
            last = row["last_eval"] or {}
            print(f"{flags}: {row['wall_s']} s, {row['iterations']} iterations, success_once 1.0 first at "
                  f"{row['first_step_success_once_1']}, last eval {last}")
    return payload


if __name__ == "__main__":
    main()
