"""LIBERO inside RLinf and LeRobot: their env layers against fastenv's drop-ins, side by side.

    python benchmarks/bench_frameworks.py --rlinf-python .stacks/rlinf/bin/python \
        --lerobot-python .stacks/lerobot/bin/python --rounds 3 --out results/bench_frameworks.json

Rows, each the same LIBERO task (libero_10 task 0), two cameras, random actions:

- RLinf's ``LiberoEnv.chunk_step`` in the shape of RLinf's LIBERO examples (OpenVLA-OFT's chunk
  of 8 actions, agentview and wrist cameras, auto-reset, relative rewards; envs and image size
  scaled to this machine), and fastenv's drop-in for it (``fastenv.integrations.rlinf``);
- LeRobot's LIBERO vector env in its eval loop's shape (``SyncVectorEnv``, one action per step:
  a policy's chunk comes out of its queue one action at a time), and fastenv's drop-in for it
  (``fastenv.integrations.lerobot``);
- the stock baseline: LIBERO's ``OffScreenRenderEnv`` in Gymnasium's ``AsyncVectorEnv``, one
  process per env, one action per step.

Each framework runs in its own virtual environment (their pins conflict), so every row is a
process of its venv's Python; rounds interleave the rows. Per row: env-steps/s over the timed
chunks, ms per chunk of actions, the first reset's seconds per env, and resident memory per env
(the row's processes together, divided by the envs). "Same data" comes from the conformance runs
(``python -m fastenv.conformance.rlinf`` / ``.lerobot``), whose JSON this reads when given.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SUITE, TASK = "libero_10", 0
ROWS = {
    "rlinf": ("rlinf", "RLinf LiberoEnv.chunk_step"),
    "rlinf-fastenv": ("rlinf", "fastenv drop-in for RLinf"),
    "lerobot": ("lerobot", "LeRobot LiberoEnv, SyncVectorEnv"),
    "lerobot-fastenv": ("lerobot", "fastenv drop-in for LeRobot"),
    "async-stock": ("rlinf", "stock OffScreenRenderEnv, Gymnasium AsyncVectorEnv"),
}
PAIRS = {"rlinf-fastenv": "rlinf", "lerobot-fastenv": "lerobot"}


def _rss_mb() -> float:
    import psutil

    me = psutil.Process()
    return sum(p.memory_info().rss for p in [me, *me.children(recursive=True)]) / 2**20


def _rlinf(fastenv: bool, n: int, chunk: int, chunks: int, size: int) -> dict[str, float]:
    from omegaconf import OmegaConf

    from fastenv.conformance.rlinf import BASE_CFG

    if fastenv:
        from fastenv.integrations.rlinf import LiberoEnv
    else:
        from rlinf.envs.libero.libero_env import LiberoEnv
    cfg = OmegaConf.create({**BASE_CFG, "task_suite_name": SUITE, "specific_reset_id": TASK, "max_episode_steps": 512,
                            "init_params": {"camera_heights": size, "camera_widths": size}})
    env = LiberoEnv(cfg, n, 0, 1, None)
    try:
        start = time.perf_counter()
        env.reset()
        reset_s = (time.perf_counter() - start) / n
        rng = np.random.default_rng(0)
        env.chunk_step(rng.uniform(-1, 1, (n, chunk, 7)).astype(np.float32))  # warm-up
        start = time.perf_counter()
        for _ in range(chunks):
            env.chunk_step(rng.uniform(-1, 1, (n, chunk, 7)).astype(np.float32))
        seconds = time.perf_counter() - start
        rss = _rss_mb()
    finally:
        env.env.close()  # RLinf's vector env, or fastenv's in its place
    return {"seconds": seconds, "reset_s_per_env": reset_s, "rss_mb_per_env": rss / n}


def _lerobot(fastenv: bool, n: int, chunk: int, chunks: int, size: int) -> dict[str, float]:
    from fastenv.conformance.lerobot import small_config

    if fastenv:
        from fastenv.integrations.lerobot import make_env
    else:
        from lerobot.envs.factory import make_env
    vec = make_env(small_config(SUITE, TASK, size, 10_000), n_envs=n)[SUITE][TASK]
    return _one_action_per_step(vec, n, chunks * chunk, list(range(n)))


def _one_action_per_step(vec: Any, n: int, steps: int, seed: Any) -> dict[str, float]:
    """A vector env's first reset, then ``steps`` steps of one action each (after a warm-up step); closes it."""
    try:
        start = time.perf_counter()
        vec.reset(seed=seed)
        reset_s = (time.perf_counter() - start) / n
        rng = np.random.default_rng(0)
        vec.step(rng.uniform(-1, 1, (n, 7)).astype(np.float32))  # warm-up
        start = time.perf_counter()
        for _ in range(steps):  # LeRobot's eval loop and the stock baseline: one action per step
            vec.step(rng.uniform(-1, 1, (n, 7)).astype(np.float32))
        seconds = time.perf_counter() - start
        rss = _rss_mb()
    finally:
        vec.close()
    return {"seconds": seconds, "reset_s_per_env": reset_s, "rss_mb_per_env": rss / n}


class StockLibero:
    """LIBERO's OffScreenRenderEnv as a Gymnasium env: its stock step and reset (to init state 0)."""

    def __new__(cls, size: int) -> Any:
        import gymnasium as gym
        from gymnasium import spaces

        from fastenv.backends.libero import LiberoTask

        class _Env(gym.Env):
            def __init__(self) -> None:
                self.task = LiberoTask.load(SUITE, TASK)
                self.env = self.task.stock_env(camera_size=size)
                obs = self.env.reset()
                self.keys = ["agentview_image", "robot0_eye_in_hand_image", "robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"]
                self.observation_space = spaces.Dict({k: spaces.Box(-np.inf, np.inf, np.shape(obs[k]), np.asarray(obs[k]).dtype) if np.asarray(obs[k]).dtype != np.uint8 else spaces.Box(0, 255, np.shape(obs[k]), np.uint8) for k in self.keys})
                self.action_space = spaces.Box(-1, 1, (7,), np.float32)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.env.seed(seed)
                self.env.reset()
                return self._obs(self.env.set_init_state(self.task.init_states[0])), {}

            def step(self, action):
                obs, reward, done, _ = self.env.step(action)
                return self._obs(obs), float(reward), bool(done), False, {}

            def _obs(self, obs):
                return {k: obs[k] for k in self.keys}

            def close(self):
                self.env.close()

        return _Env()


def _async_stock(n: int, chunk: int, chunks: int, size: int) -> dict[str, float]:
    import functools

    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    vec = AsyncVectorEnv([functools.partial(StockLibero, size)] * n, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    return _one_action_per_step(vec, n, chunks * chunk, 0)


def run_row(row: str, n: int, chunk: int, chunks: int, size: int) -> dict[str, float]:
    if row in ("rlinf", "rlinf-fastenv"):
        out = _rlinf(row == "rlinf-fastenv", n, chunk, chunks, size)
    elif row in ("lerobot", "lerobot-fastenv"):
        out = _lerobot(row == "lerobot-fastenv", n, chunk, chunks, size)
    else:
        out = _async_stock(n, chunk, chunks, size)
    out["env_steps_per_s"] = n * chunk * chunks / out["seconds"]
    out["ms_per_chunk"] = 1000 * out["seconds"] / chunks
    return out


def _same_data(path: str | None) -> str:
    if not path or not os.path.exists(path):
        return "not checked in this run"
    cases = json.loads(Path(path).read_text())["cases"]
    equal = sum(c["equal"] for c in cases)
    return f"{equal}/{len(cases)} conformance cases equal ({os.path.basename(path)})"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--row", choices=list(ROWS), help=argparse.SUPPRESS)  # one row, in this process
    parser.add_argument("--rlinf-python", default=str(ROOT / ".stacks" / "rlinf" / "bin" / "python"))
    parser.add_argument("--lerobot-python", default=str(ROOT / ".stacks" / "lerobot" / "bin" / "python"))
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--chunks", type=int, default=4)
    parser.add_argument("--camera-size", type=int, default=128)
    parser.add_argument("--rlinf-conformance", default=str(ROOT / "results" / "rlinf_conformance.json"))
    parser.add_argument("--lerobot-conformance", default=str(ROOT / "results" / "lerobot_conformance.json"))
    parser.add_argument("--out", default=None)
    parser.add_argument("--table", default=None, help="print the docs table and ratios of this JSON, and exit")
    args = parser.parse_args(argv)
    if args.table:
        payload = json.loads(Path(args.table).read_text())
        print(docs_table(payload) + "\n\n" + docs_ratios(payload))
        return payload
    if args.row:
        print("ROW " + json.dumps(run_row(args.row, args.num_envs, args.chunk, args.chunks, args.camera_size)), flush=True)
        return {}
    pythons = {"rlinf": args.rlinf_python, "lerobot": args.lerobot_python}
    samples: dict[str, list[dict[str, float]]] = {row: [] for row in args.rows}
    for r in range(args.rounds):
        for row in args.rows:
            venv = Path(pythons[ROWS[row][0]]).parent.parent
            env = {**os.environ, "LIBERO_CONFIG_PATH": str(venv / "libero-config"), "HF_HUB_OFFLINE": "1"}
            command = [pythons[ROWS[row][0]], __file__, "--row", row, "--num-envs", str(args.num_envs), "--chunk", str(args.chunk),
                       "--chunks", str(args.chunks), "--camera-size", str(args.camera_size)]
            run = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
            line = next((l for l in run.stdout.splitlines() if l.startswith("ROW ")), None)
            if run.returncode != 0 or line is None:
                raise RuntimeError(f"row {row} failed:\n{run.stderr[-3000:]}")
            samples[row].append(json.loads(line[4:]))
            print(f"round {r + 1}/{args.rounds} {row}: {samples[row][-1]['env_steps_per_s']:.2f} env-steps/s", flush=True)
    same = {"rlinf": _same_data(args.rlinf_conformance), "lerobot": _same_data(args.lerobot_conformance)}
    rows = []
    for row in args.rows:
        s = samples[row]

        def med(key: str, s: list[dict[str, float]] = s) -> float:
            return statistics.median(x[key] for x in s)

        rows.append({
            "row": row, "label": ROWS[row][1], "venv": ROWS[row][0],
            "env_steps_per_s": med("env_steps_per_s"), "spread": [min(x["env_steps_per_s"] for x in s), max(x["env_steps_per_s"] for x in s)],
            "ms_per_chunk": med("ms_per_chunk"), "reset_s_per_env": med("reset_s_per_env"), "rss_mb_per_env": med("rss_mb_per_env"),
            "same_data": same[ROWS[row][0]] if row != "async-stock" else "the stock env itself", "samples": s,
        })
    ratios = {}
    for fast, stock in PAIRS.items():
        if fast in samples and stock in samples:
            ratios[f"{fast} / {stock}"] = statistics.median(a["env_steps_per_s"] / b["env_steps_per_s"] for a, b in zip(samples[fast], samples[stock]))
    for row in args.rows:
        if row != "async-stock" and "async-stock" in samples:
            ratios[f"{row} / async-stock"] = statistics.median(a["env_steps_per_s"] / b["env_steps_per_s"] for a, b in zip(samples[row], samples["async-stock"]))
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x (median of per-round ratios)")
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import machine

    payload = {
        "command": "python benchmarks/bench_frameworks.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "config": {"suite": SUITE, "task": TASK, "num_envs": args.num_envs, "chunk": args.chunk, "chunks": args.chunks,
                   "camera_size": args.camera_size, "cameras": ["agentview", "robot0_eye_in_hand"], "rounds": args.rounds},
        "machine": machine(), "rows": rows, "ratios": ratios,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(payload, indent=2))
        chart(payload, Path(args.out).with_suffix(".png"))
    return payload


def chart(payload: dict[str, Any], path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    from _common import figure

    with figure(path, f"LIBERO in RLinf and LeRobot: {payload['config']['num_envs']} envs, chunk {payload['config']['chunk']}, two cameras") as ax:
        rows = payload["rows"]
        ax.barh([r["label"] for r in rows], [r["env_steps_per_s"] for r in rows], color=["#888" if "fastenv" not in r["row"] else "#2a7" for r in rows], label="env-steps/s")
        ax.set_xlabel("env-steps/s (median over rounds)")
        ax.invert_yaxis()


def docs_ratios(payload: dict[str, Any]) -> str:
    labels = {row: label for row, (_, label) in ROWS.items()}
    lines = []
    for name, value in payload["ratios"].items():
        fast, stock = name.split(" / ")
        lines.append(f"- {labels[fast]} / {labels[stock]}: **{value:.2f}x**")
    return "\n".join(lines)


def docs_table(payload: dict[str, Any]) -> str:
    lines = ["| row | env-steps/s | ms per chunk | first reset, s per env | memory per env, MB | same data |", "| --- | --- | --- | --- | --- | --- |"]
    for r in payload["rows"]:
        lines.append(f"| {r['label']} | {r['env_steps_per_s']:.2f} | {r['ms_per_chunk']:.0f} | {r['reset_s_per_env']:.2f} | {r['rss_mb_per_env']:.0f} | {r['same_data']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
