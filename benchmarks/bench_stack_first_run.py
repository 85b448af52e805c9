"""A framework stack's first evaluation against its second, with and without the compile at build.

    python benchmarks/bench_stack_first_run.py --out results/bench_stack_first_run.json

In LeRobot 0.6.1's stack (``bash scripts/libero_stack.sh lerobot-0.6``), on a numba cache of its own
that starts empty (a machine the stack was just built on), ``python -m fastenv.integrations.lerobot``
evaluates ACT at random (offline flags, no videos) twice in a row, two ways:

- ``compiled at build``: ``fastenv compile`` first, as the stack script now ends;
- ``not compiled at build``: the first evaluation starts the background compile (at the CPU's
  lowest priority) and its envs step with the Python loop meanwhile.

Each evaluation is timed whole (the process, from start to exit), with the line fastenv prints at
its end. The aim: with the compile at build, the first evaluation is as fast as the second.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, wait_for_background_compile, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STACK = ROOT / ".stacks" / "lerobot-0.6"


def _timed(command: list[str], env: dict[str, str], cwd: str) -> dict:
    start = time.perf_counter()
    run = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600, check=False)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-3000:]}")
    said = [line for line in run.stderr.splitlines() if line.startswith("fastenv:")]
    return {"seconds": seconds, "fastenv_lines": said}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=str(STACK / "bin" / "python"), help="the stack's Python")
    parser.add_argument("--config", default=str(STACK / "libero-config"), help="its LIBERO_CONFIG_PATH")
    parser.add_argument("--episodes", type=int, default=2, help="episodes of the one task")
    parser.add_argument("--episode-length", type=int, default=120)
    parser.add_argument("--out", default="results/bench_stack_first_run.json")
    args = parser.parse_args(argv)
    if not Path(args.python).exists():
        parser.error(f"no stack at {args.python}: bash scripts/libero_stack.sh lerobot-0.6")
    evaluation = ["-m", "fastenv.integrations.lerobot", "--fastenv.videos_per_task=0", "--env.type=libero", "--env.task=libero_goal",
                  "--env.task_ids=[3]", f"--env.episode_length={args.episode_length}", "--env.observation_height=128",
                  "--env.observation_width=128", "--policy.type=act", "--policy.pretrained_backbone_weights=null",
                  "--policy.device=cpu", "--policy.push_to_hub=false", f"--eval.n_episodes={args.episodes}", "--eval.batch_size=1"]
    rows = []
    for way in ("compiled at build", "not compiled at build"):
        with tempfile.TemporaryDirectory(prefix="fastenv-stack-first-run-") as work:
            cache = os.path.join(work, "numba-cache")
            env = {**os.environ, "NUMBA_CACHE_DIR": cache, "LIBERO_CONFIG_PATH": args.config, "HF_HUB_OFFLINE": "1"}
            row: dict = {"way": way}
            if way == "compiled at build":
                row["compile"] = _timed([args.python, "-m", "fastenv.cli", "compile"], env, work)
            for k in ("first", "second"):
                row[k] = _timed([args.python, *evaluation, f"--output_dir={os.path.join(work, k)}"], env, work)
                row[k]["background_compile_waited_after_s"] = wait_for_background_compile(cache)
                print(f"{way}: {k} evaluation {row[k]['seconds']:.1f} s", flush=True)
            row["first_over_second"] = row["first"]["seconds"] / row["second"]["seconds"]
            rows.append(row)
    for row in rows:
        print(f"{row['way']}: first {row['first']['seconds']:.1f} s, second {row['second']['seconds']:.1f} s, "
              f"first / second {row['first_over_second']:.2f}")
    payload = {"benchmark": "stack_first_run", "stack": "lerobot-0.6", "episodes": args.episodes, "episode_length": args.episode_length,
               "rows": rows, "machine": machine(),
               "command": "python benchmarks/bench_stack_first_run.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
