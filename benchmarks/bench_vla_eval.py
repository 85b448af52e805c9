"""A LIBERO evaluation as the loops VLA papers use run it: stock against fastenv, side by side.

    python benchmarks/bench_vla_eval.py --openpi OPENPI_ROOT --rounds 3 --out results/bench_vla_eval.json

Rows (libero_spatial task 0, two cameras at 256 px, a random policy: every episode runs to the
loop's step limit):

- LeRobot 0.6.1's ``eval_policy`` (what ``lerobot-eval`` runs; batch size 1 and a ``SyncVectorEnv``,
  as it picks on 2 cores), with pi0's policy class (``n_action_steps`` 50, its LIBERO setting) and
  its VLM replaced by a small random network (``fastenv.conformance.lerobot``): on LeRobot's env,
  and on fastenv's through ``skipping_rollout`` (what ``python -m fastenv.integrations.lerobot``
  runs). Each is measured without a video and with one (``lerobot-eval`` films the first 10
  episodes of each task: every step's frame); per 50 episodes is 10 filmed + 40 not. Runs in
  LeRobot's stack (``.stacks/lerobot-0.6``, ``bash scripts/libero_stack.sh lerobot-0.6``).
- openpi's ``examples/libero/main.py`` (``replan_steps`` 5), with a stand-in for its model server
  (``fastenv.conformance.libero_scripts``): unchanged; with fastenv's ``OffScreenRenderEnv``; and
  with its observation prepared only when it asks for a chunk. Its video is not encoded.

Rounds interleave the rows of each loop; every row of a round is compared with its stock row
("same results": every action, reward, success and episode length). Medians, spreads and ratios
(per round, then the median) are printed and written to JSON, with a chart beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
LEROBOT_STACK = ROOT / ".stacks" / "lerobot-0.6"
SUITE, TASK, SIZE = "libero_spatial", 0, 256


# -- LeRobot, in its stack --------------------------------------------------------------------------

def lerobot_rows(rounds: int, chunk: int) -> dict[str, Any]:
    """Runs in LeRobot's stack: per round, an episode per (env, video) on LeRobot's eval loop."""
    import numpy as np
    import torch
    from lerobot.envs.factory import make_env as lerobot_make_env
    from lerobot.scripts import lerobot_eval

    from fastenv.conformance import lerobot as conformance
    from fastenv.integrations.lerobot import make_env as fastenv_make_env
    from fastenv.integrations.lerobot import skipping_rollout

    conformance.CHUNK = chunk
    env_cfg = conformance.small_config(SUITE, TASK, SIZE, None)
    stock_rollout = lerobot_eval.rollout
    setups = {}
    for name, factory in (("LeRobot", lerobot_make_env), ("fastenv", fastenv_make_env)):
        policy, env_pre, env_post, pre, post, _ = conformance.make_policy(env_cfg, SIZE, "pi0")
        vec = factory(env_cfg, n_envs=1)[SUITE][TASK]
        setups[name] = (vec, policy, env_pre, env_post, pre, post)

    def episode(name: str, video: bool, seed: int) -> tuple[float, dict[str, Any]]:
        vec, policy, env_pre, env_post, pre, post = setups[name]
        lerobot_eval.rollout = skipping_rollout(stock_rollout) if name == "fastenv" else stock_rollout
        kept: dict[str, Any] = {}
        inner = lerobot_eval.rollout

        def rollout(*args: Any, **kwargs: Any) -> dict:  # what the episode produced, to compare with LeRobot's
            out = inner(*args, **kwargs)
            kept.update({k: v.numpy().tobytes() for k, v in out.items() if hasattr(v, "numpy")})
            return out

        lerobot_eval.rollout = rollout
        torch.manual_seed(seed)
        try:
            with tempfile.TemporaryDirectory() as videos, torch.no_grad():
                start = time.perf_counter()
                info = lerobot_eval.eval_policy(vec, policy, env_pre, env_post, pre, post, n_episodes=1,
                                                max_episodes_rendered=1 if video else 0, videos_dir=Path(videos), start_seed=seed)
                seconds = time.perf_counter() - start
        finally:
            lerobot_eval.rollout = stock_rollout
        kept["per_episode"] = json.dumps(info["per_episode"], sort_keys=True, default=str)
        return seconds, kept

    for name in setups:  # builds, first resets, compiles: not timed
        episode(name, False, 10**6)
    out: dict[str, Any] = {"rounds": []}
    for r in range(rounds):
        row: dict[str, Any] = {}
        for video in (False, True):
            ref = None
            for name in ("LeRobot", "fastenv"):
                seconds, kept = episode(name, video, r)
                label = f"{name}{', filmed' if video else ''}"
                if ref is None:
                    ref = kept
                row[label] = {"seconds": seconds, "same": kept == ref,
                              "steps": int(np.frombuffer(kept["action"], dtype=np.float32).size // 7)}
        out["rounds"].append(row)
        print(json.dumps({"round": r, **{k: round(v["seconds"], 2) for k, v in row.items()}}), file=sys.stderr, flush=True)
    for vec, *_ in setups.values():
        vec.close()
    return out


# -- openpi, in fastenv's environment ---------------------------------------------------------------

def openpi_rows(root: Path, rounds: int) -> dict[str, Any]:
    from fastenv.conformance.libero_scripts import VARIANTS, run_openpi

    labels = {"unchanged": "openpi", "fastenv": "openpi on fastenv", "fastenv, renders read": "openpi on fastenv, renders read"}
    for variant in VARIANTS:  # first builds and compiles: not timed
        run_openpi(root, variant, suite=SUITE, tasks=1, trials=1)
    out: dict[str, Any] = {"rounds": []}
    for r in range(rounds):
        row: dict[str, Any] = {}
        ref = None
        for variant in VARIANTS:
            run = run_openpi(root, variant, suite=SUITE, tasks=1, trials=1)
            episodes = [(len(e["actions"]), e["success"], b"".join(a.tobytes() for a in e["actions"])) for e in run["episodes"]]
            ref = episodes if ref is None else ref
            row[labels[variant]] = {"seconds": run["seconds"], "same": episodes == ref, "steps": episodes[0][0],
                                    "camera renders": run["renders"], "video frames": run["video frames"]}
        out["rounds"].append(row)
        print(json.dumps({"round": r, **{k: round(v["seconds"], 2) for k, v in row.items()}}), file=sys.stderr, flush=True)
    return out


# -- the summary -------------------------------------------------------------------------------------

def summarize(rounds: list[dict[str, Any]], reference: str) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for label in rounds[0]:
        seconds = [r[label]["seconds"] for r in rounds]
        ratios = [r[reference]["seconds"] / r[label]["seconds"] for r in rounds]
        rows[label] = {"seconds per episode": statistics.median(seconds), "spread": [min(seconds), max(seconds)],
                       "speed-up": statistics.median(ratios), "speed-up spread": [min(ratios), max(ratios)],
                       "same results": all(r[label]["same"] for r in rounds), "steps": rounds[0][label]["steps"]}
    return rows


def chart(payload: dict[str, Any], path: Path) -> None:
    """Seconds per episode of every row, stock and fastenv, grouped by loop."""
    from _common import figure

    labels, values, colors = [], [], []
    for loop, data in payload["loops"].items():
        short = loop.split(" ")[0]  # lerobot-eval, openpi
        for label, row in data["rows"].items():
            labels.append(label if label.startswith("openpi") else f"{short}: {label}")
            values.append(row["seconds per episode"])
            colors.append("tab:gray" if row["speed-up"] == 1.0 else "tab:blue")
    with figure(path, "A LIBERO evaluation episode, 256 px", figsize=(10, 4.5)) as ax:
        ax.barh(labels[::-1], values[::-1], color=colors[::-1], label="seconds per episode")
        for y, v in enumerate(values[::-1]):
            ax.text(v, y, f" {v:.1f}", va="center")
        ax.set_xlabel("seconds (median of rounds); gray: stock")
        ax.set_xlim(0, max(values) * 1.15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openpi", type=Path, help="a checkout of openpi (its examples/libero/main.py); without it, no openpi rows")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=50, help="the LeRobot policy's n_action_steps")
    parser.add_argument("--out", default="results/bench_vla_eval.json")
    parser.add_argument("--lerobot-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chart-only", action="store_true", help="redraw the chart from --out's JSON")
    args = parser.parse_args()
    if args.chart_only:
        chart(json.loads(Path(args.out).read_text()), Path(args.out).with_suffix(".png"))
        return
    if args.lerobot_worker:
        print(json.dumps(lerobot_rows(args.rounds, args.chunk)))
        return

    from _common import machine, write_json

    payload: dict[str, Any] = {"command": "python benchmarks/bench_vla_eval.py " + " ".join(
        a if not a.startswith("/") else "<checkout>" for a in sys.argv[1:]), "machine": machine(),
        "task": f"{SUITE}/{TASK}", "camera size": SIZE, "loops": {}}
    python = LEROBOT_STACK / "bin" / "python"
    if python.exists():
        env = {**os.environ, "LIBERO_CONFIG_PATH": str(LEROBOT_STACK / "libero-config"), "HF_HUB_OFFLINE": "1"}
        run = subprocess.run([str(python), __file__, "--lerobot-worker", "--rounds", str(args.rounds), "--chunk", str(args.chunk)],
                             env=env, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise SystemExit(f"LeRobot's rows failed:\n{run.stderr[-4000:]}")
        lerobot = json.loads(run.stdout.strip().splitlines()[-1])
        rows = summarize([{k: v for k, v in r.items() if "filmed" not in k} for r in lerobot["rounds"]], "LeRobot")
        rows.update(summarize([{k: v for k, v in r.items() if "filmed" in k} for r in lerobot["rounds"]], "LeRobot, filmed"))
        for name in ("LeRobot", "fastenv"):  # lerobot-eval's 50 episodes of a task: the first 10 filmed
            filmed = f"{name}, filmed"
            rows[name]["seconds per 50 episodes"] = 10 * rows[filmed]["seconds per episode"] + 40 * rows[name]["seconds per episode"]
        rows["fastenv"]["speed-up per 50 episodes"] = rows["LeRobot"]["seconds per 50 episodes"] / rows["fastenv"]["seconds per 50 episodes"]
        payload["loops"][f"lerobot-eval 0.6.1 (pi0's class, n_action_steps {args.chunk})"] = {"rows": rows, "rounds": lerobot["rounds"]}
    else:
        print(f"no LeRobot 0.6 stack in {LEROBOT_STACK.relative_to(ROOT)}: its rows are left out", file=sys.stderr)
    if args.openpi:
        openpi = openpi_rows(args.openpi, args.rounds)
        rows = summarize(openpi["rounds"], "openpi")
        for label, row in rows.items():
            row["seconds per 50 episodes"] = 50 * row["seconds per episode"]
            row["camera renders per episode"] = openpi["rounds"][0][label]["camera renders"]
        payload["loops"]["openpi examples/libero/main.py (replan_steps 5)"] = {"rows": rows, "rounds": openpi["rounds"]}
    out = write_json(args.out, payload)
    print(f"{'loop':<52} {'row':<34} {'s/episode':>10} {'speed-up':>9} {'s/50 ep':>9} same")
    for loop, data in payload["loops"].items():
        for label, row in data["rows"].items():
            per50 = row.get("seconds per 50 episodes")
            print(f"{loop:<52} {label:<34} {row['seconds per episode']:>10.2f} {row['speed-up']:>8.2f}x "
                  f"{'' if per50 is None else f'{per50:>9.0f}'} {row['same results']}")
    chart(payload, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
