"""ManiSkill's batched GPU simulation: fastenv's ManiSkillVectorEnv beside ManiSkill's own, 256 to 4096 envs.

For each number of envs and obs mode, one child process builds one ManiSkill env
(``sim_backend="physx_cuda"``, 128-px cameras) and wraps it three ways, timed in interleaved
rounds over that same env (one GPU physics system per process):

- ManiSkill's ``ManiSkillVectorEnv`` (the stock reference, what ManiSkill's PPO steps);
- fastenv's ``ManiSkillVectorEnv`` with plain actions (chunk 1): its overhead over ManiSkill's;
- fastenv's with chunks of 8: the physics, reward and termination of every sub-step, one
  observation (one render) per chunk.

All three keep every key the env was built with. A block resets with a seed, then steps random
actions for ``--steps`` simulator steps per env (chunk 8: steps / 8 chunks), synchronised with the
GPU before and after. Env-steps/s (simulator steps), medians, ratios to ManiSkill's per round,
and the GPU memory the env took (nvidia-smi, where it answers).

    python benchmarks/bench_maniskill_gpu.py --num-envs 256 1024 4096 --obs state rgb --out results/bench_maniskill_gpu.json

On a machine without CUDA, ``--sim-backend physx_cpu --num-envs 1`` runs the same comparison on
ManiSkill's CPU simulation (one env).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import gpu_memory_mb, machine, print_table, write_json  # noqa: E402

STOCK = "ManiSkill ManiSkillVectorEnv"
CHUNK1 = "fastenv, chunk 1"
CHUNK8 = "fastenv, chunk 8"


def build(env_id: str, num_envs: int, obs: str, camera_size: int, sim_backend: str) -> Any:
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401  (registers the tasks)

    kwargs: dict[str, Any] = {"num_envs": num_envs, "obs_mode": obs, "sim_backend": sim_backend, "render_mode": None}
    if obs != "state":
        kwargs["sensor_configs"] = {"width": camera_size, "height": camera_size}
    return gym.make(env_id, **kwargs)


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One env of ``args.child_envs`` envs and ``args.child_obs``, the three wrappers timed over it."""
    import torch

    from fastenv.backends.maniskill import ManiSkillVectorEnv  # first: where there is no GPU it points Vulkan at the CPU driver
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv as StockVectorEnv  # isort: skip

    n, obs = args.child_envs, args.child_obs
    memory_before = gpu_memory_mb()
    start = time.perf_counter()
    env = build(args.env_id, n, obs, args.camera_size, args.sim_backend)
    wrappers = {
        STOCK: StockVectorEnv(env, n, ignore_terminations=False, record_metrics=True),
        CHUNK1: ManiSkillVectorEnv(env),
        CHUNK8: ManiSkillVectorEnv(env, chunk=8),
    }
    build_s = time.perf_counter() - start
    device = wrappers[CHUNK1].device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    memory_after = gpu_memory_mb()
    generator = torch.Generator(device=device).manual_seed(0)

    def block(name: str, seed: int) -> float:
        envs = wrappers[name]
        envs.reset(seed=seed)
        chunk = 8 if name == CHUNK8 else 1
        shape = envs.single_action_space.shape
        actions = [torch.rand((n, *shape), generator=generator, device=device) * 2 - 1 for _ in range(args.steps // chunk)]
        envs.step(actions[0])  # warm-up: the first step after a reset
        sync()
        begin = time.perf_counter()
        for a in actions:
            envs.step(a)
        sync()
        return n * len(actions) * chunk / (time.perf_counter() - begin)

    samples: dict[str, list[float]] = {name: [] for name in wrappers}
    for r in range(args.rounds):
        for name in wrappers:
            samples[name].append(block(name, r))
    env.close()
    memory = None if memory_before is None or memory_after is None else (memory_after - memory_before) / n
    return {"num_envs": n, "obs": obs, "device": str(device), "build_s": build_s, "gpu_memory_mb_per_env": memory, "samples": samples}


def run_child(args: argparse.Namespace, n: int, obs: str) -> dict[str, Any]:
    command = [sys.executable, os.path.abspath(__file__), "--child-envs", str(n), "--child-obs", obs, "--env-id", args.env_id,
               "--sim-backend", args.sim_backend, "--camera-size", str(args.camera_size), "--steps", str(args.steps),
               "--rounds", str(args.rounds)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode:
        raise RuntimeError(f"{n} envs, obs {obs}: the child process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-id", default="PickCube-v1")
    parser.add_argument("--num-envs", type=int, nargs="+", default=[256, 1024, 4096])
    parser.add_argument("--obs", nargs="+", default=["state", "rgb"], choices=["state", "rgb"])
    parser.add_argument("--sim-backend", default="physx_cuda", help="physx_cuda (the batched GPU path) or physx_cpu (one env)")
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64, help="simulator steps per env per block (a multiple of 8)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the three wrappers, interleaved")
    parser.add_argument("--timeout", type=float, default=540.0, help="seconds per child process (one env size and obs mode)")
    parser.add_argument("--out", default="results/bench_maniskill_gpu.json")
    parser.add_argument("--child-envs", type=int, help=argparse.SUPPRESS)  # internal: run one configuration, print JSON
    parser.add_argument("--child-obs", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps % 8 or args.steps < 8:
        parser.error(f"--steps must be a positive multiple of 8 (chunks of 8), got {args.steps}")
    if args.child_envs is not None:
        print(json.dumps(child(args)))
        return {}
    if args.sim_backend == "physx_cpu" and any(n != 1 for n in args.num_envs):
        parser.error(f"ManiSkill's CPU simulation holds one env per process: --num-envs 1 with physx_cpu, got {args.num_envs}")
    rows = []
    for obs in args.obs:
        for n in args.num_envs:
            print(f"== {n} envs, obs {obs}", flush=True)
            result = run_child(args, n, obs)
            stock = result["samples"][STOCK]
            for name, values in result["samples"].items():
                rows.append({
                    "num_envs": n, "obs": obs, "config": name, "env_steps_per_s": statistics.median(values),
                    "spread": max(values) - min(values), "x_maniskill": statistics.median(a / b for a, b in zip(values, stock)),
                    "samples": values, "device": result["device"], "build_s": result["build_s"],
                    "gpu_memory_mb_per_env": result["gpu_memory_mb_per_env"],
                })
    print_table(rows, [("obs", "obs", "s"), ("num_envs", "envs", "d"), ("config", "vector env", "s"),
                       ("env_steps_per_s", "env-steps/s", ",.0f"), ("x_maniskill", "x ManiSkill's", ".3f")])
    payload = {"benchmark": "maniskill_gpu", "env_id": args.env_id, "sim_backend": args.sim_backend, "camera_size": args.camera_size,
               "steps": args.steps, "rounds": args.rounds, "rows": rows, "machine": machine()}
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
