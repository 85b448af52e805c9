"""Resident memory per LIBERO env as envs share a process (a worker holds its envs this way).

For each configuration a fresh process builds envs one at a time (each reset and stepped a few
times, so its buffers exist), and its resident memory (VmRSS) is read after 1, 2, 4, 8 envs:
what an additional env of the same task costs, stock against fastenv, with and without a camera.

- stock, cameras: LIBERO's ``OffScreenRenderEnv`` with its stock observation set (two 128-px cameras);
- stock, no camera: LIBERO's ``ControlEnv`` without offscreen renderer or camera observations;
- fastenv, camera: ``agentview_image`` (128 px) + ``robot0_proprio-state`` (fastenv's default);
- fastenv, camera, own render context: the same with ``FASTENV_SHARE_RENDER=0`` (every env its
  own GL and MuJoCo render context, as robosuite makes them: fastenv before it shared them);
- fastenv, no camera: ``robot0_proprio-state`` only (no renderer is built).

    python benchmarks/bench_memory.py --out results/bench_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json  # noqa: E402

CONFIGS = ("stock, cameras", "stock, no camera", "fastenv, camera", "fastenv, camera, own render context", "fastenv, no camera")


def rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def child(config: str, counts: list[int], suite: str, task_id: int, size: int) -> dict[str, Any]:
    """In a fresh process: build envs of ``config`` one at a time; RSS after each count in ``counts``."""
    import numpy as np

    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.adapter import make_gl_current
    from fastenv.backends.libero.task import import_libero
    from fastenv.envs.libero import make_env

    lib = import_libero()
    task = LiberoTask.load(suite, task_id)
    envs: list[Any] = []
    out = {"baseline": rss(), "rss": {}}
    action = np.zeros(7, dtype=np.float32)
    for n in range(1, max(counts) + 1):
        if config.startswith("stock"):
            if config == "stock, cameras":
                from libero.libero.envs import OffScreenRenderEnv

                env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=size, camera_widths=size)
            else:
                env = lib.ControlEnv(bddl_file_name=task.bddl_file, has_renderer=False, has_offscreen_renderer=False, use_camera_obs=False)
            make_gl_current(env.env)
            env.reset()
            env.set_init_state(task.init_states[0])
            for _ in range(5):
                env.step(action)
        else:
            keys = ["robot0_proprio-state"] if config == "fastenv, no camera" else ["agentview_image", "robot0_proprio-state"]
            env = make_env(suite, task_id, modalities=keys, camera_size=size, chunk=None)
            env.reset(seed=n)
            for _ in range(5):
                env.step(action)
        envs.append(env)
        if n in counts:
            out["rss"][n] = rss()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 2, 4, 8], help="env counts to read memory at")
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--suite", default="libero_10")
    parser.add_argument("--task-id", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", default="results/bench_memory.json")
    args = parser.parse_args(argv)
    counts = sorted(set(args.envs))
    if args.child:
        print(json.dumps(child(args.child, counts, args.suite, args.task_id, args.camera_size)))
        return {}
    rows = []
    for config in args.configs:
        print(f"== {config}: building {max(counts)} envs in one process ...", flush=True)
        cmd = [sys.executable, __file__, "--child", config, "--envs", *map(str, counts), "--suite", args.suite,
               "--task-id", str(args.task_id), "--camera-size", str(args.camera_size)]
        environ = {**os.environ, "FASTENV_SHARE_RENDER": "0" if config.endswith("own render context") else "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=environ)
        if done.returncode != 0:
            raise RuntimeError(f"{config}: the measuring process failed:\n{done.stderr[-3000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        by_count = {int(n): v for n, v in result["rss"].items()}
        first = by_count[counts[0]]
        for n in counts:
            extra = (by_count[n] - first) / (n - counts[0]) if n > counts[0] else None
            rows.append({"config": config, "envs": n, "rss_gb": by_count[n] / 2**30, "extra_per_env_gb": None if extra is None else extra / 2**30,
                         "first_env_gb": (first - result["baseline"]) / 2**30})
    print()
    print_table(rows, [("config", "LIBERO, one process", "s"), ("envs", "envs", "d"), ("rss_gb", "resident GB", ".2f"),
                       ("first_env_gb", "first env GB", ".2f"), ("extra_per_env_gb", "each further env GB", ".2f")])
    payload = {"benchmark": "memory_per_env", "suite": args.suite, "task_id": args.task_id, "camera_size": args.camera_size,
               "envs": counts, "rows": rows, "machine": machine()}
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
