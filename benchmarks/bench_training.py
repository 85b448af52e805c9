"""The same PPO run over stock and fastenv rollouts, compared update by update, bit for bit.

Two identical CleanRL-style PPO agents (``examples/same_run.py``: same seeds, one torch thread,
per-env noise streams, row-wise policy evaluation where batches differ) train side by side, their
updates interleaved, one on the stock rollout stack and one on fastenv's. After every update the
two runs are compared exactly: the rollout's rewards, dones and kept observations, the actions,
log-probs and values, every minibatch's losses, and the parameters after the update (SHA-256 of
their bytes). Wall-clock per update and in total, and the ratio.

- ``libero``: a chunk policy (the published studies' setting): fastenv's ``ChunkPolicy`` (CNN over
  ``agentview_image`` + MLP over ``robot0_proprio-state``) emits K=8 actions per step.
  Stock: LIBERO's own ``OffScreenRenderEnv`` with its stock observation set (two cameras, all
  state) in Gymnasium's ``AsyncVectorEnv``, the K actions executed one ``step`` at a time (an
  observation rendered after every one; robosuite's resets and control loop; fastenv's
  ``ActionChunk`` over a plain Gymnasium env only loops over its ``step``). fastenv: its default
  stack (one camera + proprio, an observation at the chunk's end, in-place resets, the fast control
  loop) in its vector env, in the layout ``fastenv tune`` picks (``--layout auto``).
- ``maniskill``: PushCube-v1 from state, chunk 1: ManiSkill's CPU vector path (``AsyncVectorEnv``
  over ``CPUGymWrapper``) against fastenv's vector env.

    python benchmarks/bench_training.py                     # both settings (about 10 min on 2 cores)
    python benchmarks/bench_training.py --settings libero --updates 2 --layout dynamic --camera-size 64
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))
from _common import machine, print_table, write_json  # noqa: E402

IMAGE_KEY, STATE_KEY = "agentview_image", "robot0_proprio-state"
SETTINGS = ("libero", "maniskill")


class StockLibero(gym.Env):
    """LIBERO's own env (``OffScreenRenderEnv``, its stock observation set) with Gymnasium's API.

    ``reset(seed=s)`` does what LIBERO's evaluation does (``env.seed(s)``, ``env.reset()``,
    ``env.set_init_state(init_states[i])``), the init state ``i`` drawn from the env's Gymnasium
    generator; ``terminated`` is LIBERO's ``done`` (success); the time limit is Gymnasium's
    ``TimeLimit`` around it. Nothing of fastenv runs below this class. ``modalities`` keeps those
    keys only, and renders only the cameras among them (LIBERO's ``camera_names``); robosuite still
    computes every other observable at each step, as the stock env does.
    """

    metadata = {"render_modes": []}

    def __init__(self, suite: str, task_id: int, camera_size: int, modalities: tuple[str, ...] | None = None) -> None:
        from fastenv.backends.libero import LiberoTask

        self.task = LiberoTask.load(suite, task_id)
        cameras = {} if modalities is None else {"camera_names": [k.removesuffix("_image") for k in modalities if k.endswith("_image")]}
        self.env = self.task.stock_env(camera_size=camera_size, **cameras)
        spec = self.env.env.observation_spec()
        if modalities is not None:
            spec = {k: spec[k] for k in modalities}
        self.observation_space = gym.spaces.Dict(
            {
                k: gym.spaces.Box(0, 255, np.shape(v), np.uint8) if k.endswith("_image") else gym.spaces.Box(-np.inf, np.inf, np.shape(v), np.float64)
                for k, v in spec.items()
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (7,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.env.seed(seed)
        state_id = int(self.np_random.integers(len(self.task.init_states)))
        self.env.reset()
        obs = self.env.set_init_state(self.task.init_states[state_id])
        return self._obs(obs), {"init_state_id": state_id}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        obs, reward, done, info = self.env.step(np.asarray(action, dtype=np.float64))
        return self._obs(obs), float(reward), bool(done), False, {"success": bool(done)}

    def _obs(self, obs: dict) -> dict:
        return {k: np.asarray(obs[k], dtype=self.observation_space[k].dtype) for k in self.observation_space}

    def close(self) -> None:
        self.env.close()


def stock_libero_env(suite: str, task_id: int, camera_size: int, chunk: int, max_episode_steps: int) -> gym.Env:
    from gymnasium.wrappers import TimeLimit

    from fastenv.wrappers import ActionChunk

    return ActionChunk(TimeLimit(StockLibero(suite, task_id, camera_size), max_episode_steps), chunk)


def libero_stacks(args: argparse.Namespace, policy_cost: float) -> tuple[Any, Any, Any]:
    import functools

    from gymnasium.vector import AsyncVectorEnv, AutoresetMode
    from same_run import Stack

    from fastenv.envs.libero import make_vec

    fn = functools.partial(stock_libero_env, args.suite, args.task_id, args.camera_size, args.chunk, args.max_episode_steps)
    stock_envs = AsyncVectorEnv([fn] * args.num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    if args.layout == "auto":
        layout: dict[str, Any] = {"layout": "auto", "tune_options": {"policy_cost": policy_cost, "progress": False}}
    elif args.layout == "dynamic":
        from fastenv.tuning import Plan

        layout = {"layout": Plan(args.num_envs, args.workers, max_batch=1, timeout=0.0, reason="--layout dynamic: one env per policy call")}
    else:
        layout = {"num_workers": args.workers}
    fast_envs = make_vec(
        args.num_envs, suite=args.suite, task_id=args.task_id, chunk=args.chunk, camera_size=args.camera_size,
        max_episode_steps=args.max_episode_steps, **layout,
    )
    plan = fast_envs.plan
    mode = "step" if plan is None else plan.mode
    space = fast_envs.single_action_space

    def pick(obs: dict) -> dict:
        return {IMAGE_KEY: np.asarray(obs[IMAGE_KEY]), STATE_KEY: np.asarray(obs[STATE_KEY])}

    stock = Stack("stock", stock_envs, [IMAGE_KEY, STATE_KEY], pick, space.shape, space.low, space.high)
    fast = Stack("fastenv", fast_envs, [IMAGE_KEY, STATE_KEY], pick, space.shape, space.low, space.high, mode=mode)
    return stock, fast, plan


def run_setting(setting: str, args: argparse.Namespace) -> dict[str, Any]:
    import same_run
    import torch

    if setting == "libero":
        from fastenv.bench.policies import ChunkPolicy

        cfg = same_run.PPOConfig(
            num_envs=args.num_envs, num_steps=args.num_steps, gamma=0.99**args.chunk, gae_lambda=0.95,
            update_epochs=2, num_minibatches=2, seed=args.seed,
        )
        shape = (args.camera_size, args.camera_size, 3)
        probe = ChunkPolicy(shape, 39, args.chunk, 7)  # the policy's cost, for the tuner
        batch = {IMAGE_KEY: np.zeros((1, *shape), np.uint8), STATE_KEY: np.zeros((1, 39), np.float64)}
        probe.act(batch, IMAGE_KEY, STATE_KEY)
        start = time.perf_counter()
        for _ in range(5):
            probe.act(batch, IMAGE_KEY, STATE_KEY)
        stock, fast, plan = libero_stacks(args, (time.perf_counter() - start) / 5)
        state_dim = stock.envs.single_observation_space[STATE_KEY].shape[0]

        def make_agent() -> Any:
            return same_run.ImageAgent(IMAGE_KEY, shape, STATE_KEY, state_dim, args.chunk, 7)

        rowwise = fast.mode != "step"
        layout = "step (fixed)" if plan is None else f"{plan.candidate} ({plan.reason or 'tuned'})"
        what = {
            "task": f"LIBERO {args.suite} task {args.task_id}", "chunk": args.chunk, "camera_size": args.camera_size,
            "max_episode_steps": args.max_episode_steps,
            "stock": "AsyncVectorEnv(SAME_STEP, spawn) over ActionChunk(TimeLimit(LIBERO OffScreenRenderEnv, stock observation set))",
            "fastenv": f"fastenv.envs.libero.make_vec defaults, layout {layout}",
        }
    else:
        cfg = same_run.PPOConfig(num_envs=args.maniskill_envs, seed=args.seed)
        stock, fast = same_run.pushcube_stacks(cfg.num_envs, args.workers)
        obs_dim, act_dim = stock.envs.single_observation_space.shape[0], int(np.prod(stock.action_shape))

        def make_agent() -> Any:
            return same_run.StateAgent(obs_dim, act_dim)

        rowwise, plan = False, None
        what = {
            "task": f"ManiSkill {same_run.ENV_ID}", "chunk": 1, "maniskill_kwargs": same_run.MANISKILL_KWARGS,
            "stock": "AsyncVectorEnv(SAME_STEP, spawn) over mani_skill CPUGymWrapper(gym.make(..., sim_backend='physx_cpu'))",
            "fastenv": f"fastenv.envs.maniskill.make_vec(chunk=None, num_workers={args.workers})",
        }
    torch.set_num_threads(1)
    runners = []
    try:
        runners = [same_run.Runner(s, make_agent, cfg, rowwise=rowwise) for s in (stock, fast)]
        updates = []
        for u in range(args.updates if setting == "libero" else args.maniskill_updates):
            records = [r.iterate() for r in runners]  # interleaved over updates
            same = same_run.compare(*records)
            updates.append({"update": u + 1, "identical": same, "stock": records[0], "fastenv": records[1]})
            print(
                f"{setting} update {u + 1}: stock {records[0]['rollout_s'] + records[0]['update_s']:.1f} s, "
                f"fastenv {records[1]['rollout_s'] + records[1]['update_s']:.1f} s, identical: {all(same.values())}",
                flush=True,
            )
    finally:
        stock.close()
        fast.close()
    per_update = {name: [u[name]["rollout_s"] + u[name]["update_s"] for u in updates] for name in ("stock", "fastenv")}
    rollout = {name: [u[name]["rollout_s"] for u in updates] for name in ("stock", "fastenv")}
    return {
        "setting": setting,
        **what,
        "ppo": cfg.__dict__,
        "rowwise_policy": rowwise,
        "layout_plan": None if plan is None else {k: v for k, v in plan.__dict__.items() if k not in ("trials", "costs")},
        "transitions_per_update": cfg.num_envs * cfg.num_steps,
        "env_steps_per_update": cfg.num_envs * cfg.num_steps * (args.chunk if setting == "libero" else 1),
        "updates": updates,
        "identical_every_update": all(all(u["identical"].values()) for u in updates),
        "total_s": {name: sum(v) for name, v in per_update.items()},
        "median_update_s": {name: statistics.median(v) for name, v in per_update.items()},
        "median_rollout_s": {name: statistics.median(v) for name, v in rollout.items()},
        "ratio_total": sum(per_update["stock"]) / sum(per_update["fastenv"]),
        "ratio_median_update": statistics.median(a / b for a, b in zip(per_update["stock"], per_update["fastenv"])),
        "ratio_median_rollout": statistics.median(a / b for a, b in zip(rollout["stock"], rollout["fastenv"])),
    }


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4), squeeze=False)
    for ax, r in zip(axes[0], results):
        for name, color in (("stock", "#7f7f7f"), ("fastenv", "#1f77b4")):
            cum = np.cumsum([u[name]["rollout_s"] + u[name]["update_s"] for u in r["updates"]])
            ax.plot(range(1, len(cum) + 1), cum / 60, marker="o", color=color, label=name)
        same = "bit-identical at every update" if r["identical_every_update"] else "RUNS DIFFER"
        ax.set_title(f"{r['task']}, chunk {r['chunk']}: {r['ratio_total']:.2f}x sooner\n({same})", fontsize=10)
        ax.set_xlabel("PPO update")
        ax.set_ylabel("wall-clock minutes")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {SETTINGS}")
    p.add_argument("--suite", default="libero_10")
    p.add_argument("--task-id", type=int, default=0)
    p.add_argument("--num-envs", type=int, default=4, help="LIBERO envs")
    p.add_argument("--num-steps", type=int, default=8, help="LIBERO chunks per env per update")
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--camera-size", type=int, default=128)
    p.add_argument("--max-episode-steps", type=int, default=100, help="LIBERO time limit (ends inside a chunk of 8)")
    p.add_argument("--updates", type=int, default=10, help="LIBERO updates")
    p.add_argument("--layout", choices=("auto", "dynamic", "step"), default="auto", help="fastenv's LIBERO layout")
    p.add_argument("--maniskill-envs", type=int, default=16)
    p.add_argument("--maniskill-updates", type=int, default=20)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="results/bench_training.json")
    args = p.parse_args()
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        p.error(f"unknown settings {unknown}; expected some of {SETTINGS}")
    started = time.perf_counter()
    results = [run_setting(s, args) for s in settings]
    rows = [
        {
            "setting": r["task"], "identical": "yes" if r["identical_every_update"] else "NO", "updates": len(r["updates"]),
            "stock_s": r["total_s"]["stock"], "fastenv_s": r["total_s"]["fastenv"], "ratio": r["ratio_total"],
            "rollout_ratio": r["ratio_median_rollout"],
        }
        for r in results
    ]
    print_table(
        rows,
        [("setting", "setting", ""), ("identical", "bit-identical", ""), ("updates", "updates", "d"), ("stock_s", "stock s", ".1f"),
         ("fastenv_s", "fastenv s", ".1f"), ("ratio", "x sooner", ".2f"), ("rollout_ratio", "rollout x (median)", ".2f")],
    )
    payload = {"benchmark": "bench_training", "args": vars(args), "machine": machine(), "seconds": time.perf_counter() - started, "results": results}
    path = write_json(args.out, payload)
    png = path.with_suffix(".png")
    plot(results, png)
    print(f"wrote {path} and {png}")
    if not all(r["identical_every_update"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
