"""ManiSkill3 on this machine's CPU: stock ManiSkill vs fastenv, one env and a vector of envs.

Tasks: PickCube-v1 (``--env-ids`` names others, e.g. PushCube-v1 PickCube-v1) with state
observations, and with one rgb camera at 64 and 128 px. One env: ManiSkill's own env stepped one
action at a time (an observation every step) against fastenv's CPU env with chunks of 1, 8 and 32
(``--chunks``; one observation per chunk). Each row of the one-env, vector and reset parts records
the device SAPIEN rendered on (ManiSkill's ``_render_device``: the GPU through Vulkan where CUDA is
there, else the CPU through Mesa's lavapipe). A vector of envs (ManiSkill's
CPU simulation holds one env per process): Gymnasium's AsyncVectorEnv over the stock env against
fastenv's vector env (its workers) with chunks of 1, 8 and 32. Resets: is the stock reset the
long pole of an episode (ms per reset against ms per step, and its share of an episode of
PickCube's 50 steps)? PPO-shaped (``--parts ppo``): ManiSkill's PPO baseline's loop on the CPU
(PushCube-v1, a policy per action, rollout buffers, GAE and one update epoch), state and a 128-px
rgb camera, on ManiSkill's own CPU paths (its vector env over its one CPU env, with its
``FlattenRGBDObservationWrapper`` for rgb; Gymnasium's AsyncVectorEnv over its ``CPUGymWrapper``
envs) against fastenv (the drop-ins: ``make_vec`` for state, ``make`` + fastenv's
``FlattenRGBDObservationWrapper`` + ``ManiSkillVectorEnv`` for rgb with one action per step and
with chunks of 8; and fastenv's own vector env, one action per step and chunks of 8 actions per
observation). Configurations are timed in
interleaved rounds; ratios are medians of per-round ratios. Writes JSON to --out.

    python benchmarks/bench_maniskill.py --rounds 3
    python benchmarks/bench_maniskill.py --parts resets --rounds 3
    python benchmarks/bench_maniskill.py --env-ids PushCube-v1 PickCube-v1 --tasks "rgb 128 px" --parts single --rounds 2
    python benchmarks/bench_maniskill.py --parts ppo --rounds 3 --out results/bench_maniskill_ppo.json
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from typing import Any

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json

PARTS = ("single", "vector", "resets", "ppo")
ENV_IDS = ["PickCube-v1"]  # the default; its configs keep the task's name alone
CHUNKS = [1, 8, 32]
TASKS = {  # name: (obs_mode, fastenv keys, camera side)
    "state": ("state", ["state"], None),
    "rgb 64 px": ("rgb", ["base_camera_rgb"], 64),
    "rgb 128 px": ("rgb", ["base_camera_rgb"], 128),
}


class StockNumpy(gym.Wrapper):
    """ManiSkill's own CPU env for Gymnasium's AsyncVectorEnv: its batch of one as numpy (no other change)."""

    def __init__(self, env: gym.Env, keys: list[str]) -> None:
        super().__init__(env)
        self.keys = keys
        self.action_space = env.unwrapped.single_action_space
        self.observation_space = gym.spaces.Dict(
            {
                k: gym.spaces.Box(0, 255, v.shape, v.dtype) if v.dtype == np.uint8 else gym.spaces.Box(-np.inf, np.inf, v.shape, v.dtype)
                for k, v in self._numpy(env.reset(seed=0)[0]).items()
            }
        )

    def _numpy(self, raw: Any) -> dict[str, np.ndarray]:
        out = {}
        for key in self.keys:
            value = raw if key == "state" and not isinstance(raw, dict) else (
                raw["state"] if key == "state" else raw["sensor_data"]["base_camera"]["rgb"]
            )
            out[key] = value[0].numpy()
        return out

    def reset(self, **kwargs: Any):
        raw, _ = self.env.reset(**kwargs)
        return self._numpy(raw), {}

    def step(self, action: Any):
        raw, reward, terminated, truncated, _ = self.env.step(action)
        return self._numpy(raw), float(reward[0]), bool(terminated[0]), bool(truncated[0]), {}

    def render_device(self) -> dict[str, Any] | None:
        """``render_device`` of this env, for the vector's ``call`` (in its worker process)."""
        return render_device(self.env)


def stock_env(obs_mode: str, size: int | None, numpy_keys: list[str] | None = None, env_id: str = "PickCube-v1") -> gym.Env:
    from fastenv.backends.maniskill import configure_vulkan

    configure_vulkan()
    import mani_skill.envs  # noqa: F401

    kwargs = {} if size is None else {"sensor_configs": {"width": size, "height": size}}
    env = gym.make(env_id, obs_mode=obs_mode, sim_backend="physx_cpu", **kwargs)
    return env if numpy_keys is None else StockNumpy(env, numpy_keys)


def render_device(env: Any) -> dict[str, Any] | None:
    """The device SAPIEN renders ``env`` on: ManiSkill's ``_render_device`` (a ``sapien.Device``) of a
    stock env or of the ManiSkill env in fastenv's one-env stack, with the Vulkan devices SAPIEN sees."""
    base = env.unwrapped
    base = getattr(getattr(base, "adapter", None), "base", base)  # fastenv's SimEnv holds the ManiSkill env in its adapter
    device = getattr(base, "_render_device", None)
    if device is None:
        return None
    import sapien

    summary = sapien.render.get_device_summary().splitlines()
    return {
        "device": str(device), "name": device.name, "pci_string": device.pci_string, "is_cuda": device.is_cuda(),
        "is_cpu": device.is_cpu(), "cuda_id": device.cuda_id if device.is_cuda() else None,
        "render_backend": getattr(getattr(base, "backend", None), "render_backend", None),
        "vulkan_devices": [line.split(":", 1)[1].strip() for line in summary if line.startswith("GPU:")],
    }


def vector_render_device(envs: Any) -> dict[str, Any] | None:
    """``render_device`` of a vector's first env, in its worker (fastenv's ``apply``, Gymnasium's ``call``)."""
    if hasattr(envs, "apply"):
        return envs.apply(render_device, env_ids=[0])[0]
    return envs.call("render_device")[0]


def render_name(device: dict[str, Any] | None) -> str | None:
    """A table cell for ``render_device``: "cuda:0 NVIDIA H100 80GB HBM3", "cpu (llvmpipe ...)"."""
    if device is None:
        return None
    return f"{device['device']} {device['name']}" if device["is_cuda"] else f"{device['device']} ({', '.join(device['vulkan_devices'])})"


def label(env_id: str, task: str, env_ids: list[str]) -> str:
    """A config's name before " | ": the task alone for the default env id (today's names), else the env id and task."""
    return task if env_ids == ENV_IDS else f"{env_id} {task}"


def draw_actions(rng: np.random.Generator, shape: tuple[int, ...], dims: dict[str, int]) -> dict[str, np.ndarray]:
    """One draw of uniform actions, the widest env's, cut to each env id's action size."""
    actions = rng.uniform(-1, 1, (*shape, max(dims.values()))).astype(np.float32)
    return {env_id: actions[..., :dim] for env_id, dim in dims.items()}


def run_single(env: gym.Env, actions: np.ndarray, chunk: int | None) -> float:
    """ms per simulator step over ``actions`` (resetting where an episode ends)."""
    start = time.perf_counter()
    if chunk is None:
        for a in actions:
            _, _, term, trunc, _ = env.step(a)
            if bool(np.asarray(term).any() or np.asarray(trunc).any()):
                env.reset()
        steps = len(actions)
    else:
        blocks = len(actions) // chunk
        for i in range(blocks):
            _, _, term, trunc, _ = env.step(actions[i * chunk : (i + 1) * chunk])
            if term or trunc:
                env.reset()
        steps = blocks * chunk
    return (time.perf_counter() - start) * 1000.0 / steps


def run_vector(envs: Any, actions: np.ndarray, chunk: int | None) -> float:
    """env-steps per second over ``actions`` (T, N, act): autoreset, so no resets by hand."""
    n = envs.num_envs
    start = time.perf_counter()
    if chunk is None:
        for a in actions:
            envs.step(a)
        steps = len(actions) * n
    else:
        blocks = len(actions) // chunk
        for i in range(blocks):
            envs.step(np.swapaxes(actions[i * chunk : (i + 1) * chunk], 0, 1))
        steps = blocks * chunk * n
    return steps / (time.perf_counter() - start)


def time_resets(env: gym.Env, count: int, first_seed: int) -> float:
    """ms per seeded reset, ``count`` of them."""
    start = time.perf_counter()
    for i in range(count):
        env.reset(seed=first_seed + i)
    return (time.perf_counter() - start) * 1000.0 / count


def ratio_rows(samples: dict[str, list[float]], base: str, higher_is_better: bool) -> dict[str, float]:
    """Median over rounds of each config's ratio to ``base`` (how many times faster)."""
    out = {}
    for name, values in samples.items():
        ratios = [(v / b) if higher_is_better else (b / v) for v, b in zip(values, samples[base])]
        out[name] = statistics.median(ratios)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=64, help="simulator steps per config per round (one env)")
    parser.add_argument("--vector-steps", type=int, default=32, help="simulator steps per env per round (vector)")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), help=f"of {list(TASKS)}")
    parser.add_argument("--env-ids", nargs="+", default=list(ENV_IDS), help="ManiSkill tasks of the single, vector and reset parts")
    parser.add_argument("--chunks", nargs="+", type=int, default=list(CHUNKS), help="fastenv's chunk sizes (single and vector parts)")
    parser.add_argument("--resets", type=int, default=20, help="resets per task per round")
    parser.add_argument("--parts", nargs="+", default=["single", "vector", "resets"], choices=PARTS)
    parser.add_argument("--ppo-envs", type=int, default=8, help="envs of the PPO-shaped run (ManiSkill's one CPU env aside)")
    parser.add_argument("--ppo-steps", type=int, default=32, help="rollout steps per env per PPO iteration (a multiple of 8)")
    parser.add_argument("--ppo-obs", nargs="+", default=["state", "rgb"], choices=["state", "rgb"])
    parser.add_argument("--ppo-camera", type=int, default=128, help="camera side of the PPO-shaped rgb rows (px, >= 64)")
    parser.add_argument("--out", default="results/bench_maniskill.json")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown task(s) {unknown}; choose from {list(TASKS)}")
    if min(args.chunks) < 1:
        parser.error(f"--chunks must be positive, got {args.chunks}")
    if "ppo" in args.parts and (args.ppo_steps < 8 or args.ppo_steps % 8):
        parser.error(f"--ppo-steps must be a positive multiple of 8 (the chunked rows send 8 actions at a time), got {args.ppo_steps}")
    if "ppo" in args.parts and args.ppo_camera < 64:
        parser.error(f"--ppo-camera must be at least 64 px (the policy's CNN shrinks an image 30-fold), got {args.ppo_camera}")
    chunked = {"single": args.steps, "vector": args.vector_steps}  # the parts that step chunks of up to max(--chunks)
    short = {part: n for part, n in chunked.items() if part in args.parts and n < max(args.chunks)}
    if short:
        parser.error(f"the {sorted(short)} part(s) step chunks of up to {max(args.chunks)} simulator steps: "
                     f"--steps / --vector-steps must be >= {max(args.chunks)}, got {short}")

    rng = np.random.default_rng(0)
    payload: dict[str, Any] = {"benchmark": "maniskill_cpu", "rounds": args.rounds, "single": {}, "vector": {}, "resets": {}, "ppo": {}}
    if "single" in args.parts:
        payload["single"] = bench_single(args, rng)
    if "vector" in args.parts:
        payload["vector"] = bench_vector(args, rng)
    if "resets" in args.parts:
        payload["resets"] = bench_resets(args, rng)
    if "ppo" in args.parts:
        from bench_maniskill_ppo import bench_ppo

        payload["ppo"] = bench_ppo(args)
    payload["settings"] = {k: v for k, v in vars(args).items() if k != "out"}
    payload["machine"] = machine()
    print(f"\nwrote {write_json(args.out, payload)}")
    return payload


def bench_resets(args: argparse.Namespace, rng: np.random.Generator) -> list[dict[str, Any]]:
    """Stock ManiSkill's reset against its step, per task, interleaved over rounds."""
    print("== stock resets ==", flush=True)
    envs: dict[str, gym.Env] = {}
    env_ids: dict[str, str] = {}  # config -> env id
    for env_id in args.env_ids:
        for task in args.tasks:
            name = label(env_id, task, args.env_ids)
            envs[name], env_ids[name] = stock_env(TASKS[task][0], TASKS[task][2], env_id=env_id), env_id
    dims = {env_ids[name]: env.unwrapped.single_action_space.shape[0] for name, env in envs.items()}
    actions = draw_actions(rng, (args.steps,), dims)
    steps: dict[str, list[float]] = {name: [] for name in envs}
    resets: dict[str, list[float]] = {name: [] for name in envs}
    for name, env in envs.items():  # warm-up
        env.reset(seed=0)
        run_single(env, actions[env_ids[name]], None)
    for r in range(args.rounds):
        for name, env in envs.items():
            steps[name].append(run_single(env, actions[env_ids[name]], None))
            resets[name].append(time_resets(env, args.resets, r * args.resets))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{t} step {steps[t][-1]:.2f} reset {resets[t][-1]:.2f} ms" for t in envs), flush=True)
    rows = []
    for name, env in envs.items():
        step, reset = statistics.median(steps[name]), statistics.median(resets[name])
        episode = env.spec.max_episode_steps or 50
        rows.append({
            "config": name, "ms_per_step": step, "ms_per_reset": reset, "reset_in_steps": reset / step,
            "episode_steps": episode, "reset_share_of_episode": reset / (reset + episode * step),
            "samples_step_ms": steps[name], "samples_reset_ms": resets[name],
            "env_id": env_ids[name], "render_device": render_device(env),
        })
        env.close()
    print()
    print_table([{**row, "render": render_name(row["render_device"])} for row in rows],
                [("config", f"stock {', '.join(args.env_ids)}, CPU", "s"), ("ms_per_step", "ms/step", ".2f"), ("ms_per_reset", "ms/reset", ".2f"),
                 ("reset_in_steps", "reset in steps", ".1f"), ("reset_share_of_episode", "share of an episode", ".1%"), ("render", "rendered on", "s")])
    return rows


def config_groups(args: argparse.Namespace) -> Any:
    """Each (env id, task) of the run: its group label, env id, obs mode, fastenv keys and camera side."""
    for env_id in args.env_ids:
        for task in args.tasks:
            obs_mode, keys, size = TASKS[task]
            yield label(env_id, task, args.env_ids), env_id, obs_mode, keys, size


def bench_single(args: argparse.Namespace, rng: np.random.Generator) -> list[dict[str, Any]]:
    """One env: stock against fastenv's chunks."""
    from fastenv.envs.maniskill import make_cpu_env

    print("== one env ==", flush=True)
    singles: dict[str, tuple[gym.Env, int | None]] = {}
    groups: dict[str, str] = {}  # a group of configs (env id and task) -> its env id
    for group, env_id, obs_mode, keys, size in config_groups(args):
        groups[group] = env_id
        singles[f"{group} | stock"] = (stock_env(obs_mode, size, env_id=env_id), None)
        for k in args.chunks:
            singles[f"{group} | fastenv chunk {k}"] = (make_cpu_env(env_id, modalities=keys, chunk=k, camera_size=size), k)
    for env, _ in singles.values():
        env.reset(seed=0)
    dims = {env_id: singles[f"{group} | stock"][0].unwrapped.single_action_space.shape[0] for group, env_id in groups.items()}
    actions = draw_actions(rng, (args.steps,), dims)
    env_of = {name: groups[name.split(" |")[0]] for name in singles}  # config -> env id
    samples: dict[str, list[float]] = {name: [] for name in singles}
    for name, (env, k) in singles.items():  # warm-up
        run_single(env, actions[env_of[name]], k)
    for r in range(args.rounds):
        for name, (env, k) in singles.items():
            samples[name].append(run_single(env, actions[env_of[name]], k))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {v[-1]:.2f}" for n, v in samples.items()), flush=True)
    rows = []
    for group in groups:
        task_samples = {n: v for n, v in samples.items() if n.startswith(group + " |")}
        ratios = ratio_rows(task_samples, f"{group} | stock", higher_is_better=False)
        for name, values in task_samples.items():
            rows.append({"config": name, "ms_per_step": statistics.median(values), "x_stock": ratios[name], "samples_ms": values,
                         "env_id": env_of[name], "render_device": render_device(singles[name][0])})
    print()
    print_table([{**row, "render": render_name(row["render_device"])} for row in rows],
                [("config", f"one env ({', '.join(args.env_ids)}, CPU)", "s"), ("ms_per_step", "ms/env step", ".2f"), ("x_stock", "x stock", ".2f"),
                 ("render", "rendered on", "s")])
    for env, _ in singles.values():
        env.close()
    return rows


def bench_vector(args: argparse.Namespace, rng: np.random.Generator) -> list[dict[str, Any]]:
    """A vector of envs: Gymnasium's AsyncVectorEnv of stock envs against fastenv's vector env."""
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    import fastenv  # noqa: F401  (registers fastenv/ManiSkill-v0)

    print(f"\n== {args.num_envs} envs ==", flush=True)
    vectors: dict[str, tuple[Any, int | None]] = {}
    groups: dict[str, str] = {}  # a group of configs (env id and task) -> its env id
    for group, env_id, obs_mode, keys, size in config_groups(args):
        groups[group] = env_id
        fn = functools.partial(stock_env, obs_mode, size, keys, env_id=env_id)
        vectors[f"{group} | stock, AsyncVectorEnv"] = (
            AsyncVectorEnv([fn] * args.num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn"), None
        )
        for k in args.chunks:
            vectors[f"{group} | fastenv chunk {k}"] = (
                gym.make_vec("fastenv/ManiSkill-v0", num_envs=args.num_envs, num_workers=args.workers, env_id=env_id,
                             chunk=k, modalities=keys, camera_size=size),
                k,
            )
    for envs, _ in vectors.values():
        envs.reset(seed=0)
    dims = {env_id: vectors[f"{group} | stock, AsyncVectorEnv"][0].single_action_space.shape[0] for group, env_id in groups.items()}
    vactions = draw_actions(rng, (args.vector_steps, args.num_envs), dims)
    env_of = {name: groups[name.split(" |")[0]] for name in vectors}  # config -> env id
    vsamples: dict[str, list[float]] = {name: [] for name in vectors}
    for name, (envs, k) in vectors.items():  # warm-up
        run_vector(envs, vactions[env_of[name]], k)
    for r in range(args.rounds):
        for name, (envs, k) in vectors.items():
            vsamples[name].append(run_vector(envs, vactions[env_of[name]], k))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {v[-1]:.0f}" for n, v in vsamples.items()), flush=True)
    vrows = []
    for group in groups:
        task_samples = {n: v for n, v in vsamples.items() if n.startswith(group + " |")}
        ratios = ratio_rows(task_samples, f"{group} | stock, AsyncVectorEnv", higher_is_better=True)
        for name, values in task_samples.items():
            vrows.append({"config": name, "env_steps_per_s": statistics.median(values), "x_stock": ratios[name], "samples": values,
                          "env_id": env_of[name], "render_device": vector_render_device(vectors[name][0])})
    print()
    print_table([{**row, "render": render_name(row["render_device"])} for row in vrows],
                [("config", f"{args.num_envs} envs ({args.workers} fastenv workers)", "s"), ("env_steps_per_s", "env-steps/s", ".0f"),
                 ("x_stock", "x stock", ".2f"), ("render", "rendered on (env 0)", "s")])
    for envs, _ in vectors.values():
        envs.close()
    return vrows


if __name__ == "__main__":
    main()
