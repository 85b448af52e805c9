"""fastenv on a GPU server: which device renders, the main job, GPU memory per env, ManiSkill on the GPU.

    python benchmarks/bench_gpu_server.py --out results/bench_gpu_server.json
    python benchmarks/bench_gpu_server.py --parts maniskill --out results/bench_gpu_server_maniskill.json
    python benchmarks/bench_gpu_server.py --parts server eval --out results/bench_gpu_server_h200.json

``benchmarks/gpu_server_run.sh`` is the whole prepared run for a machine without network access
(it unpacks what ``benchmarks/pack_libero.py`` packed and runs the server and eval parts).

One prepared run for a machine with an NVIDIA GPU (sized for under 8 minutes on one H100 with 16
cores); each part runs in its own process under a time limit, and the JSON is written after each,
so a part that fails or runs out of time leaves the others' figures:

- ``devices``: ``fastenv doctor`` (each worker's renderer, one worker per visible GPU, with
  ``render_devices="auto"``) and the CUDA and EGL device lists as processes with each GPU alone
  (by index, by UUID) and in PCI order see them, with the EGL device matched to each
  (``fastenv.gpus``; the file is a recorded machine for ``tests/test_gpus.py``);
- ``libero``: ``fastenv compile``, then the main job, ``fastenv bench`` with 8 envs over the
  host's cores, the compiled loop serving, a VLA's cost spent by a random-weight transformer on
  the GPU (``--policy-compute transformer``); its rows, x Default and x floor, and each worker's
  renderer;
- ``server``: ``fastenv compile``, then ``fastenv bench --regime server`` (docs/gpu-servers.md): the
  VLA-sized transformer on the GPU, Default and fastenv at the layout its cost model chooses for
  16, 64 and 128 envs (the host's cores x 1, 4, 8), each against the bound ``min(N K / P(N), C / c)``;
- ``eval``: ``fastenv eval`` on libero_spatial with the same transformer (``benchmarks/bench_eval_gpu.py``,
  its arguments after ``--eval-args``): episodes per hour beside vla-eval's published figure;
- ``memory``: GPU memory per LIBERO env (NVML: the process's graphics memory and the device's used
  memory) as one process builds 1, 2 and 4 envs with two 128-px cameras, beside its resident memory;
- ``rlinf``: RLinf main's LIBERO env with its ``skip_intermediate_renders`` off and on against
  fastenv's drop-in under RLinf's own env worker (``benchmarks/bench_rlinf_stages.py``, one Python);
- ``maniskill``: ManiSkill's CPU physics with SAPIEN rendering on the GPU, PushCube-v1 and
  PickCube-v1 with one 128-px rgb camera, ManiSkill's own env against fastenv's chunks of 1 and 8
  (``benchmarks/bench_maniskill.py``), and the device SAPIEN rendered on.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("devices", "libero", "server", "eval", "memory", "rlinf", "maniskill")


LOGS: Path | None = None  # where each part's whole output goes, as it comes (set by main)


def _run(command: list[str], limit: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one part's command; its output's tail, exit code and seconds (the whole output in LOGS)."""
    start = time.perf_counter()
    LOGS.mkdir(parents=True, exist_ok=True)
    name = Path(command[2] if command[1] == "-m" else command[1]).stem + (f"-{command[3]}" if command[1] == "-m" and len(command) > 3 else "")
    out_path, err_path = LOGS / f"{name}.out.log", LOGS / f"{name}.err.log"
    # A session of its own: at the limit the part's whole process group goes (its env workers too),
    # so nothing it started runs on into the next part. Its output goes to files as it comes.
    with open(out_path, "w") as out_file, open(err_path, "w") as err_file:
        proc = subprocess.Popen(command, stdout=out_file, stderr=err_file, text=True, env={**os.environ, **(env or {})}, cwd=ROOT,
                                start_new_session=True)
        try:
            proc.wait(timeout=limit)
            code: Any = proc.returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything of the part's still running
        proc.wait()
    out, err = out_path.read_text(errors="replace"), err_path.read_text(errors="replace")
    seconds = round(time.perf_counter() - start, 1)
    print(f"$ {' '.join(command)}\n{out[-6000:]}\n{err[-3000:]}\n(exit {code}, {seconds} s)", flush=True)
    return {"command": command, "exit": code, "seconds": seconds, "stdout_tail": out[-4000:], "stderr_tail": err[-3000:]}


def part_devices(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    fastenv = [sys.executable, "-m", "fastenv.cli"]
    doctor = _run([*fastenv, "doctor", "--json", str(folder / "doctor.json"), "--record-gpus", str(folder / "gpus.json")], args.limit)
    out: dict[str, Any] = {"doctor": doctor}
    for name in ("doctor.json", "gpus.json"):
        if (folder / name).exists():
            out[name.removesuffix(".json")] = json.loads((folder / name).read_text())
    return out


def part_libero(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    fastenv = [sys.executable, "-m", "fastenv.cli"]
    compiled = _run([*fastenv, "compile"], 240)
    cores = len(os.sched_getaffinity(0))
    bench = _run([*fastenv, "bench", "--num-envs", "8", "--workers", str(4 if cores >= 6 else 2), "--device", "cuda",
                  "--policy-cost", args.policy_cost, "--policy-compute", "transformer", "--chunk", "8",
                  "--steps", str(args.steps), "--rounds", str(args.rounds), "--out", str(folder / "bench")], args.limit)
    out: dict[str, Any] = {"compile": compiled, "bench": bench}
    written = folder / "bench" / "fastenv_bench.json"
    if written.exists():
        out["fastenv_bench"] = json.loads(written.read_text())
    return out


def part_server(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """``fastenv bench --regime server``: Default and fastenv at 16, 64 and 128 envs (the host's cores x 1, 4, 8)
    with the VLA-sized transformer on the GPU, each against the bound."""
    fastenv = [sys.executable, "-m", "fastenv.cli"]
    compiled = _run([*fastenv, "compile"], 240)
    target = folder / "server"
    envs = [str(n) for n in args.envs] if args.envs else []
    device = ["--device", "cuda", "--policy-compute", "transformer"] if args.server_device == "cuda" else ["--device", "cpu", "--policy-compute", "wait"]
    default_envs = ["--default-envs", *map(str, args.default_envs)] if args.default_envs else []
    bench = _run([*fastenv, "bench", "--regime", "server", *device, "--policy-cost", args.policy_cost, "--suite", args.suite,
                  "--task-id", str(args.task_id), "--chunk", "8", "--camera-size", str(args.camera_size), "--seconds", str(args.server_seconds),
                  *(["--envs", *envs] if envs else []), *default_envs, "--out", str(target)], args.server_limit)
    out: dict[str, Any] = {"compile": compiled, "bench": bench}
    written = target / "fastenv_bench_server.json"
    if written.exists():
        out["fastenv_bench_server"] = json.loads(written.read_text())
    return out


def part_eval(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """``fastenv eval`` on libero_spatial with the VLA-sized transformer (``benchmarks/bench_eval_gpu.py``)."""
    target = folder / "eval_gpu.json"
    run = _run([sys.executable, str(ROOT / "benchmarks" / "bench_eval_gpu.py"), *args.eval_args, "--out", str(target)], args.eval_limit)
    out: dict[str, Any] = {"run": run}
    if target.exists():
        out["bench_eval_gpu"] = json.loads(target.read_text())
    return out


MEMORY_CHILD = """
import json, os, sys, time
import pynvml, psutil
from fastenv.envs.libero import make_env
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
def read():
    mine = [p.usedGpuMemory for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle) + pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            if p.pid == os.getpid() and p.usedGpuMemory is not None]
    return {"process_gpu_mb": round(sum(mine) / 2**20, 1) if mine else None,
            "device_used_mb": round(pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20, 1),
            "rss_mb": round(psutil.Process().memory_info().rss / 2**20, 1)}
rows = [{"envs": 0, **read()}]
envs = []
for n in (1, 2, 4):
    while len(envs) < n:
        env = make_env("libero_10", 0, chunk=None, camera_size=128, modalities=("agentview_image", "robot0_eye_in_hand_image"))
        env.reset(seed=len(envs))
        envs.append(env)
    rows.append({"envs": n, **read(), "renderer": envs[0].unwrapped.renderer()})
print(json.dumps(rows))
"""


def _memory(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rows": rows}
    base = rows[0]
    for key in ("process_gpu_mb", "device_used_mb", "rss_mb"):
        per = [(r[key] - base[key]) / r["envs"] for r in rows[1:] if r[key] is not None and base[key] is not None]
        if not per and key == "process_gpu_mb":
            per = [r[key] / r["envs"] for r in rows[1:] if r[key] is not None]
        out[f"{key}_per_env"] = [round(x, 1) for x in per]
    return out


def part_memory(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """fastenv's envs (one render context per process for envs of the same task) and, with
    ``FASTENV_SHARE_RENDER=0``, one context per env as stock LIBERO has."""
    out: dict[str, Any] = {}
    for name, env in (("shared render context", {}), ("a render context per env", {"FASTENV_SHARE_RENDER": "0"})):
        run = _run([sys.executable, "-c", MEMORY_CHILD], args.limit / 2, env)
        try:
            out[name] = _memory(json.loads(run["stdout_tail"].strip().splitlines()[-1]))
        except (ValueError, IndexError):
            out[name] = {"run": run}
    return out


def part_rlinf(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """RLinf main's LiberoEnv with skip_intermediate_renders off and on against fastenv's drop-in
    (RLinf's own EnvWorker), in this Python (RLinf's env layer importable here)."""
    target = folder / "rlinf_stages.json"
    run = _run([sys.executable, str(ROOT / "benchmarks" / "bench_rlinf_stages.py"), "--rows", "rlinf-main-skip-off", "rlinf-main-skip-on",
                "fastenv-shared", "--rlinf-main-python", sys.executable, "--rlinf-python", sys.executable, "--same-data", "",
                "--rounds", "1", "--chunks", "3", "--out", str(target)], args.limit)
    out: dict[str, Any] = {"run": run}
    if target.exists():
        out["bench_rlinf_stages"] = json.loads(target.read_text())
    return out


def part_maniskill(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    target = folder / "maniskill.json"
    run = _run([sys.executable, str(ROOT / "benchmarks" / "bench_maniskill.py"), "--env-ids", "PushCube-v1", "PickCube-v1",
                "--tasks", "rgb 128 px", "--parts", "single", "--rounds", str(args.rounds), "--steps", str(args.maniskill_steps),
                "--out", str(target)], args.limit)
    out: dict[str, Any] = {"run": run}
    if target.exists():
        out["bench_maniskill"] = json.loads(target.read_text())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS)
    parser.add_argument("--steps", type=int, default=64, help="fastenv bench: simulator steps per env per configuration")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--policy-cost", default="pi0-eager", help="fastenv bench's --policy-cost (spent by the transformer on CUDA)")
    parser.add_argument("--maniskill-steps", type=int, default=64)
    parser.add_argument("--envs", type=int, nargs="+", help="server: env counts (default: the cores x 1, 4, 8)")
    parser.add_argument("--server-seconds", type=float, default=10.0, help="server: seconds timed per row")
    parser.add_argument("--default-envs", type=int, nargs="+", help="server: run Default only at these N (default: every N)")
    parser.add_argument("--server-device", choices=["cuda", "cpu"], default="cuda",
                        help="server: the transformer on CUDA, or (cpu) pi0-eager's cost as a wait, a check of the part off the GPU")
    parser.add_argument("--suite", default="libero_spatial", help="server: LIBERO suite (default %(default)s)")
    parser.add_argument("--task-id", type=int, default=0)
    parser.add_argument("--camera-size", type=int, default=128, help="server: camera px (default %(default)s)")
    parser.add_argument("--server-limit", type=float, default=480.0, help="server: seconds for the whole part")
    parser.add_argument("--eval-args", nargs=argparse.REMAINDER, default=[], help="eval: bench_eval_gpu.py's arguments (last on the line)")
    parser.add_argument("--eval-limit", type=float, default=240.0, help="eval: seconds for the whole part")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds per part")
    parser.add_argument("--folder", default=None, help="where the parts' own files go (default: beside --out)")
    parser.add_argument("--out", default="results/bench_gpu_server.json")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import machine

    out = Path(args.out)
    folder = Path(args.folder) if args.folder else out.with_suffix("")
    folder.mkdir(parents=True, exist_ok=True)
    global LOGS
    LOGS = folder
    payload: dict[str, Any] = {"benchmark": "bench_gpu_server", "date": time.strftime("%Y-%m-%d"), "machine": machine(), "parts": {}}
    try:
        import torch

        payload["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        payload["gpu"] = None
    for name in args.parts:
        start = time.perf_counter()
        payload["parts"][name] = {**globals()[f"part_{name}"](args, folder), "part_seconds": round(time.perf_counter() - start, 1)}
        out.write_text(json.dumps(payload, indent=1, default=str))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
