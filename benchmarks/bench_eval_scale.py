"""LIBERO evaluation throughput, three harnesses side by side: episodes per hour on this machine.

    python benchmarks/bench_eval_scale.py --openpi OPENPI_ROOT --out results/bench_eval_scale.json

(defaults: task 0, 4 episodes, 1 round, and vla-eval's one-shard check on 2 episodes: about 11
minutes on a 2-core machine with nothing else running; ``--tasks``, ``--episodes``, ``--rounds``.)

The same episodes (``libero_spatial``; the first ``--tasks`` tasks, init states ``0 .. --episodes - 1``
of each, seed 7) run, in one process's turn, on:

- **openpi**: openpi's ``examples/libero/main.py`` unchanged on LIBERO's own ``OffScreenRenderEnv``,
  sequential in one process (``fastenv.conformance.libero_scripts.run_openpi``: the script runs in
  this process, the stand-in policy answering for its model server; ``replan_steps`` 5).
- **vla-eval**: vla-eval 0.8.0 without Docker: its LIBERO benchmark (``mode: sync``) sharded over
  ``--shards`` ``vla-eval run`` processes (its dynamic work queue), talking to a vla-eval
  ``PredictModelServer`` that wraps the same stand-in (this file run with ``--vla-eval-server``),
  its batching on (``max_batch_size`` ``--max-batch``, ``max_wait_time`` ``--max-wait``) and
  ``chunk_size`` 5: the server runs the model on the observation of every 5th step and answers the
  steps between from the chunk's first 5 rows, which is what openpi's loop steps with
  ``replan_steps`` 5.
- **fastenv**: ``fastenv.eval.run`` with ``--workers`` worker processes and its default batching.

Each with a cheap policy (the stand-in alone) and with ``pi0-eager``'s cost
(``fastenv.policy_cost``: each model call waits ``a + b x batch`` seconds, the CPU free): in
openpi's loop inside the policy callable (batch 1), in vla-eval inside ``predict_batch``, in
fastenv as ``CostlyPolicy``.

**One stand-in, the same answers in all three.** ``standin_chunk(element)`` reads both cameras at
224 px (openpi's ``resize_with_pad``; vla-eval sends the raw 256 px renders, flipped as openpi flips
them, and its server resizes them with the same function before calling it) and the state's
position and gripper joints rounded to float32 (not the orientation: vla-eval flips the quaternion
to ``w >= 0`` before its axis-angle, openpi does not). It returns 10 rows of a fixed random
projection, ``tanh``, rounded to float32 values (vla-eval's server casts chunks to float32), with the
gripper column a sign (+1/-1), so vla-eval's ``sign(action[-1])`` changes nothing. Each row's
per-episode success, length and every action are compared with openpi's row ("same results"); the
actions come from openpi's env (recorded at ``env.step``), from vla-eval's own recording
(``step_rows``' executed ``action``, in the run's SQLite) and from ``fastenv.eval``'s
``record_actions``.

**vla-eval's sharded results are not openpi's, and cannot be made so from outside it.** LIBERO places
fixtures (bodies an init state does not cover: libero_spatial's cabinet and stove) with numpy's
global generator at every reset, so an episode's scene depends on the resets its env has done since
``env.seed(7)``. openpi runs a task's episodes in order on one env (episode ``i`` after ``i``
others); vla-eval's shards each build and seed their own env and take episodes from a shared queue,
so a shard's episode ``i`` usually has another number of episodes before it and another scene:
its images, so the stand-in's actions, differ from step 0. The JSON's ``scene_history`` checks the
rule on every vla-eval episode (the same as openpi's exactly when its shard's env had run ``i``
episodes of its task before it), and ``vla_eval_one_shard_check`` runs vla-eval again in one
shard process on task 0's first episodes, which come out as openpi's. Which episodes differ depends
on which shard claims what, so on timing. fastenv's workers put each env's scene draws where the
reference loop has them at the episode's index, so its results are openpi's whatever the worker.

**Success.** The stand-in never solves a task, so LIBERO's success check is put on a schedule
(``fastenv.conformance.success_schedule``, in this process and every process started from it):
after ``--success-after`` robosuite steps (settling steps count) it fires on steps picked by the
robot's joint positions (about one step in three). The default, 226 of at most 230, ends most
episodes with a success in their last four steps and lets the others fail at the 220-step budget:
every episode runs (nearly) the whole budget, as a failing policy's do, and a row whose robot state
differs ends its episodes otherwise. ``--success-after 0`` keeps LIBERO's own check (every episode
then fails at 220 steps).

**What is timed.** Wall seconds from the start of a row's run to its end: openpi's ``eval_libero``
call (in this process, LIBERO already imported, its env built in the row), vla-eval's shard
processes from launch to exit (Python start and imports, env builds; its model server is started
and listening before), ``fastenv.eval.run`` (worker start, imports, env builds). CPU seconds are
this process's and its reaped children's (``getrusage``), plus the vla-eval server's from its
start of listening to the end of the row. Camera renders: openpi and vla-eval step LIBERO's own
env, which renders both cameras at every reset, init state and step (counted as that); fastenv
counts its renders. The pi0-eager rows' policy busy share: the seconds spent in model calls (the
wait included) over the row's seconds; vla-eval's from its server's ``predict_batch`` calls.

**Cores to keep one H100 busy with a pi0-class policy.** From each system's cheap row:
``cpu_s_per_chunk`` = CPU seconds / chunks served (each chunk = 5 env steps, plus its share of
resets and settling steps, renders and transport). A model call over a batch of ``B`` takes
``a + b x B`` seconds (pi0-eager), so the envs must produce ``B`` chunk requests in that time:
``cores(B) = cpu_s_per_chunk x B / (a + b x B)``; printed for ``B`` = 1 (a GPU never idle, one request
at a time) and larger batches, and the limit ``cpu_s_per_chunk / b``.

Rounds interleave the rows; medians (and spreads, with ``--rounds`` > 1) are printed and written to
JSON with the command and the machine, and a chart beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

SUITE, SEED, NUM_STEPS_WAIT, REPLAN, RESIZE = "libero_spatial", 7, 10, 5, 224
ROWS, ACTION_DIM = 10, 7
SYSTEMS = ("openpi", "vla-eval", "fastenv")
COSTS = ("cheap", "pi0-eager")
LABELS = {"openpi": "openpi main.py, 1 process", "vla-eval": "vla-eval 0.8.0, {shards} shards + server",
          "fastenv": "fastenv eval, {workers} workers"}
SERVER_FLAG = "--vla-eval-server"


# -- the stand-in policy: one function for every row -------------------------------------------------

_WEIGHTS: dict[int, np.ndarray] = {}


def _weights(size: int) -> np.ndarray:
    w = _WEIGHTS.get(size)
    if w is None:
        w = _WEIGHTS[size] = np.random.default_rng(0).normal(size=(ROWS * ACTION_DIM, size)) / np.sqrt(size)
    return w


def standin_chunk(element: dict[str, Any]) -> np.ndarray:
    """A chunk of ``ROWS`` x 7 actions for openpi's element (224 px images, the 8-D state).

    Reads both images (8 x 8 cells' means) and the state's position (0:3) and gripper joints
    (6:8), rounded to float32; returns float32 values (as float64) with the gripper a sign."""
    pooled = []
    for key in ("observation/image", "observation/wrist_image"):
        image = np.ascontiguousarray(element[key], dtype=np.uint8)
        if image.shape != (RESIZE, RESIZE, 3):
            raise ValueError(f"the stand-in reads {RESIZE} px images, got {key} of shape {image.shape}")
        cell = RESIZE // 8
        pooled.append(image.astype(np.float64).reshape(8, cell, 8, cell, 3).mean(axis=(1, 3)).ravel() / 255)
    state = np.asarray(element["observation/state"], dtype=np.float64).ravel()
    if state.size != 8:
        raise ValueError(f"the stand-in reads LIBERO's 8-D state, got {state.size} values")
    kept = np.concatenate([state[0:3], state[6:8]]).astype(np.float32).astype(np.float64)
    features = np.concatenate([*pooled, kept])
    out = np.tanh(_weights(features.size) @ features).reshape(ROWS, ACTION_DIM)
    out[:, -1] = np.where(out[:, -1] >= 0, 1.0, -1.0)
    return out.astype(np.float32).astype(np.float64)


def vla_eval_element(obs: dict[str, Any]) -> dict[str, Any]:
    """vla-eval's LIBERO observation (raw 256 px images, flipped) as openpi's element."""
    from fastenv.eval.protocol import resize_with_pad

    images = obs["images"]
    return {
        "observation/image": resize_with_pad(np.ascontiguousarray(images["agentview"], dtype=np.uint8), RESIZE, RESIZE),
        "observation/wrist_image": resize_with_pad(np.ascontiguousarray(images["wrist"], dtype=np.uint8), RESIZE, RESIZE),
        "observation/state": np.asarray(obs["states"], dtype=np.float64),
        "prompt": str(obs.get("task_description", "")),
    }


def cores_needed(cpu_s_per_chunk: float, per_call_s: float, per_sample_s: float, batch: int) -> float:
    """Cores whose envs produce ``batch`` chunk requests in one model call's ``a + b x batch`` seconds."""
    return cpu_s_per_chunk * batch / (per_call_s + per_sample_s * batch)


def actions_digest(actions: Any) -> str:
    return hashlib.sha256(np.asarray(actions, dtype=np.float64).reshape(-1, ACTION_DIM).tobytes()).hexdigest()


def scene_history(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether vla-eval's differing episodes are those whose shard's env had run another number of
    episodes before them than openpi's env had (its init state index: openpi runs a task's episodes
    in order on one env), over every round."""
    matched, differing, predicted = [], [], True
    for run in runs:
        bad = {d.split(":")[0] for d in run["differences"]}
        for episode, v in run["episodes"].items():
            like_openpi = v["episodes_before_on_env"] == int(episode.split("/")[-1])
            (differing if episode in bad else matched).append(episode)
            predicted &= like_openpi == (episode not in bad)
    return {"same": sorted(set(matched)), "differ": sorted(set(differing)), "explained": predicted,
            "rule": "an episode comes out as openpi's exactly when the shard's env had run as many episodes of its task before it "
                    "as openpi's env had (its init state index); LIBERO places fixtures (bodies an init state does not cover) with "
                    "numpy's global generator at each reset, so a scene depends on the resets since env.seed, and the shards "
                    "split the episodes between two envs"}


def differences(ref: dict[str, dict[str, Any]], got: dict[str, dict[str, Any]]) -> list[str]:
    """How ``got``'s episodes differ from ``ref``'s: missing, success, length, first differing action."""
    out = []
    for episode, a in ref.items():
        if episode not in got:
            out.append(f"{episode}: missing")
            continue
        b = got[episode]
        if a["success"] != b["success"]:
            out.append(f"{episode}: success {b['success']} against {a['success']}")
        if a["length"] != b["length"]:
            out.append(f"{episode}: {b['length']} steps against {a['length']}")
        x, y = np.asarray(a["actions"], dtype=np.float64), np.asarray(b["actions"], dtype=np.float64)
        n = min(len(x), len(y))
        unequal = np.flatnonzero(np.any(x[:n] != y[:n], axis=1)) if n else np.array([], dtype=int)
        if unequal.size:
            out.append(f"{episode}: actions differ from step {int(unequal[0])} (largest difference "
                       f"{float(np.abs(x[:n] - y[:n]).max()):.3g})")
    out += [f"{episode}: not in openpi's row" for episode in got if episode not in ref]
    return out


# -- vla-eval's model server (this file, run with --vla-eval-server) ----------------------------------

def serve_vla_eval() -> None:
    from vla_eval.model_servers.predict import PredictModelServer
    from vla_eval.model_servers.serve import run_server

    from fastenv.policy_cost import inference_cost

    class StandInServer(PredictModelServer):
        """The stand-in as a vla-eval model server; ``cost``: a fastenv.policy_cost preset or "none"."""

        def __init__(self, *, chunk_size: int = REPLAN, max_batch_size: int = 2, max_wait_time: float = 0.01,
                     cost: str = "none", log: str = "") -> None:
            super().__init__(chunk_size=chunk_size, max_batch_size=max_batch_size, max_wait_time=max_wait_time)
            self.cost = None if cost == "none" else inference_cost(cost)
            self.log = open(log, "a") if log else None  # noqa: SIM115 (open while the server runs)

        def get_observation_params(self) -> dict[str, Any]:
            return {"send_wrist_image": True, "send_state": True}

        def get_action_spec(self) -> dict[str, Any]:
            return {}

        def get_observation_spec(self) -> dict[str, Any]:
            return {}

        def predict_batch(self, obs_batch: list, ctx_batch: list) -> list:
            start = time.perf_counter()
            out = [{"actions": standin_chunk(vla_eval_element(obs))} for obs in obs_batch]
            if self.cost is not None:
                self.cost.wait(len(obs_batch), time.perf_counter() - start)
            if self.log is not None:
                self.log.write(json.dumps({"batch": len(obs_batch), "seconds": time.perf_counter() - start}) + "\n")
                self.log.flush()
            return out

    sys.argv = [sys.argv[0], *[a for a in sys.argv[1:] if a != SERVER_FLAG]]
    run_server(StandInServer)


# -- the rows ----------------------------------------------------------------------------------------

def _rusage() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def _cpu_since(before: tuple[float, float]) -> float:
    now = _rusage()
    return (now[0] - before[0]) + (now[1] - before[1])


def openpi_row(root: Path, tasks: int, episodes: int, cost: Any) -> dict[str, Any]:
    from fastenv.conformance.libero_scripts import run_openpi

    busy, calls = [0.0], [0]

    def policy(element: dict[str, Any]) -> np.ndarray:
        start = time.perf_counter()
        chunk = standin_chunk(element)
        if cost is not None:
            cost.wait(1, time.perf_counter() - start)
        busy[0] += time.perf_counter() - start
        calls[0] += 1
        return chunk

    before = _rusage()
    start = time.perf_counter()
    run = run_openpi(root, "unchanged", suite=SUITE, tasks=tasks, trials=episodes, replan_steps=REPLAN, policy=policy)
    seconds = time.perf_counter() - start
    cpu = _cpu_since(before)
    results = {}
    for i, e in enumerate(run["episodes"]):
        actions = [np.asarray(a, dtype=np.float64) for a in e["actions"][NUM_STEPS_WAIT:]]  # the settling steps are not the policy's
        results[f"{SUITE}/{i // episodes}/{i % episodes}"] = {"success": bool(e["success"]), "length": len(actions), "actions": actions}
    env_steps = sum(len(e["actions"]) for e in run["episodes"])
    return {"seconds": seconds, "cpu_seconds": cpu, "episodes": results, "env_steps": env_steps, "chunks": calls[0],
            "camera_renders": run["renders"], "camera_renders_counted": "LIBERO's env: both cameras at every reset, init state and step",
            "policy_calls": calls[0], "mean_batch": 1.0, "policy_busy_seconds": busy[0]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, log: Path, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vla-eval's model server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"vla-eval's model server did not listen within {timeout:g} s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _vla_eval_episodes(db: Path) -> dict[str, dict[str, Any]]:
    """Per episode, from vla-eval's recording: success, steps and the executed actions."""
    import sqlite3

    out: dict[str, dict[str, Any]] = {}
    built: dict[str, tuple[int, int]] = {}  # sid (one per shard process) -> (its env's task, episodes run on it)
    with sqlite3.connect(db) as c:
        for sid, eid, context, steps, metrics, status, reason in c.execute(
                "select sid, eid, context, steps, metrics, status, failure_reason from episode_results order by rowid"):
            ctx = json.loads(context)
            episode = f"{ctx['suite']}/{ctx['task_id']}/{ctx['episode_idx']}"
            rows = c.execute("select fields from step_rows where sid = ? and eid = ? order by step_id", (sid, eid)).fetchall()
            actions = [np.asarray(json.loads(f)["action"], dtype=np.float64) for (f,) in rows]
            task, before = built.get(sid, (None, 0))
            before = before if task == ctx["task_id"] else 0  # the shard's env is built again (and seeded) when its task changes
            built[sid] = (ctx["task_id"], before + 1)
            out[episode] = {"success": bool((json.loads(metrics) or {}).get("success")), "length": int(steps or 0), "actions": actions,
                            "status": status, "failure": reason, "episodes_before_on_env": before}
    return out


def vla_eval_row(tasks: int, episodes: int, cost: str | None, *, shards: int, max_batch: int, max_wait: float,
                 tag: str, keep: Path | None) -> dict[str, Any]:
    import psutil

    cli = Path(sys.executable).with_name("vla-eval")
    cli = str(cli) if cli.exists() else shutil.which("vla-eval")
    if cli is None:
        raise SystemExit("vla-eval is not installed (pip install vla-eval==0.8.0)")
    work = Path(tempfile.mkdtemp(prefix="bench_eval_scale_"))
    port = _free_port()
    server_log, batches = work / "server.log", work / "batches.jsonl"
    config = work / "eval.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "server": {"url": f"ws://127.0.0.1:{port}", "timeout": 120},
        "output_dir": str(work / "out"),
        "benchmarks": [{"benchmark": "vla_eval.benchmarks.libero.benchmark:LIBEROBenchmark", "mode": "sync",
                        "episodes_per_task": episodes, "max_tasks": tasks,
                        "params": {"suite": SUITE, "seed": SEED, "num_steps_wait": NUM_STEPS_WAIT}}],
    }, indent=1))
    with open(server_log, "w") as log:
        server = subprocess.Popen([sys.executable, __file__, SERVER_FLAG, "--host", "127.0.0.1", "--port", str(port),
                                   "--args.chunk_size", str(REPLAN), "--args.max_batch_size", str(max_batch),
                                   "--args.max_wait_time", str(max_wait), "--args.cost", cost or "none", "--args.log", str(batches)],
                                  stdout=log, stderr=subprocess.STDOUT)
    procs: list[subprocess.Popen] = []
    try:
        _wait_listening(port, server, server_log)
        server_cpu0 = sum(psutil.Process(server.pid).cpu_times()[:4])
        eval_id = f"scale-{tag}"
        before = _rusage()
        start = time.perf_counter()
        for i in range(shards):
            with open(work / f"shard{i}.log", "w") as log:
                procs.append(subprocess.Popen([cli, "run", "-c", str(config), "--no-docker", "--eval-id", eval_id,
                                               "--shard-id", str(i), "--num-shards", str(shards)],
                                              stdout=log, stderr=subprocess.STDOUT))
        codes = [p.wait() for p in procs]
        seconds = time.perf_counter() - start
        cpu = _cpu_since(before) + sum(psutil.Process(server.pid).cpu_times()[:4]) - server_cpu0
    finally:
        for p in procs:
            _stop(p)
        _stop(server)
    if any(codes):
        tails = "\n".join(f"shard {i}: {(work / f'shard{i}.log').read_text()[-2000:]}" for i, c in enumerate(codes) if c)
        raise SystemExit(f"vla-eval's shards failed ({codes}):\n{tails}")
    results = _vla_eval_episodes(work / "out" / f"recording-{eval_id}.sqlite")
    errors = {k: v["failure"] for k, v in results.items() if v["status"] == "error"}
    if errors:
        raise SystemExit(f"vla-eval's episodes errored: {errors}")
    calls = [json.loads(line) for line in batches.read_text().splitlines() if line.strip()]
    env_steps = sum(r["length"] + NUM_STEPS_WAIT for r in results.values())
    if keep is not None:
        shutil.copytree(work, keep / tag, dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return {"seconds": seconds, "cpu_seconds": cpu, "episodes": results, "env_steps": env_steps,
            "chunks": sum(c["batch"] for c in calls), "camera_renders": 2 * (2 * len(results) + env_steps),
            "camera_renders_counted": "LIBERO's env: both cameras at every reset, init state and step",
            "policy_calls": len(calls), "mean_batch": statistics.fmean(c["batch"] for c in calls) if calls else None,
            "policy_busy_seconds": sum(c["seconds"] for c in calls)}


def fastenv_row(tasks: int, episodes: int, cost: str | None, *, workers: int) -> dict[str, Any]:
    from fastenv.eval import CallablePolicy, CostlyPolicy, EvalConfig, run

    def batch_policy(batch: dict[str, Any]) -> list[np.ndarray]:
        keys = ("observation/image", "observation/wrist_image", "observation/state")
        return [standin_chunk({k: batch[k][i] for k in keys}) for i in range(len(batch["episode"]))]

    policy = CallablePolicy(batch_policy, name="standin_chunk")
    if cost is not None:
        policy = CostlyPolicy(policy, cost)
    before = _rusage()
    start = time.perf_counter()
    payload = run(policy, EvalConfig(suites=SUITE, tasks=list(range(tasks)), episodes=episodes, seed=SEED, workers=workers,
                                     record_actions=True, progress=False))
    seconds = time.perf_counter() - start
    cpu = _cpu_since(before)
    results = {r["id"]: {"success": bool(r["success"]), "length": int(r["length"]), "actions": r["actions"]} for r in payload["episodes"]}
    p = payload["run"]["policy"]
    return {"seconds": seconds, "cpu_seconds": cpu, "episodes": results, "env_steps": payload["run"]["env_steps"],
            "chunks": p["served"], "camera_renders": payload["run"]["camera_renders"], "camera_renders_counted": "fastenv's count",
            "policy_calls": p["calls"], "mean_batch": p["mean_batch"], "policy_busy_seconds": p["busy_seconds"]}


# -- the summary -------------------------------------------------------------------------------------

def summarize(rounds: list[dict[str, dict[str, Any]]], episodes_total: int) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for key in rounds[0]:
        system, cost = key.split(" / ")
        runs = [r[key] for r in rounds]
        seconds = [x["seconds"] for x in runs]
        eph = [3600 * len(x["episodes"]) / x["seconds"] for x in runs]
        row: dict[str, Any] = {"system": system, "policy": cost, "episodes": len(runs[0]["episodes"]), "planned": episodes_total,
                               "seconds": statistics.median(seconds), "episodes_per_hour": statistics.median(eph),
                               "episodes_per_hour_spread": [min(eph), max(eph)]}
        for other in ("openpi", "vla-eval"):
            ref = f"{other} / {cost}"
            if ref in rounds[0]:
                ratios = [r[ref]["seconds"] / r[key]["seconds"] * len(r[key]["episodes"]) / len(r[ref]["episodes"]) for r in rounds]
                row[f"ratio_to_{other}"] = statistics.median(ratios)
                row[f"ratio_to_{other}_spread"] = [min(ratios), max(ratios)]
        row["same_results"] = all(not x["differences"] for x in runs)
        row["differences"] = sorted({d for x in runs for d in x["differences"]})[:20]
        first = runs[0]
        row["results"] = {e: {"success": v["success"], "length": v["length"], "actions_sha256": actions_digest(v["actions"]),
                              **({"episodes_before_on_env": v["episodes_before_on_env"]} if "episodes_before_on_env" in v else {})}
                          for e, v in sorted(first["episodes"].items())}
        if system == "vla-eval" and f"openpi / {cost}" in rounds[0]:
            row["scene_history"] = scene_history(runs)
            if not row["same_results"]:
                row["why_not_same"] = (("vla-eval's shards: " + row["scene_history"]["rule"]) if row["scene_history"]["explained"]
                                       else "not explained by the shards' env histories (see differences)")
        row["successes"] = sum(v["success"] for v in first["episodes"].values())
        for k in ("env_steps", "chunks", "camera_renders", "camera_renders_counted", "policy_calls", "mean_batch", "load_average_1min"):
            row[k] = first[k]
        row["cpu_seconds"] = statistics.median(x["cpu_seconds"] for x in runs)
        row["cores_busy"] = statistics.median(x["cpu_seconds"] / x["seconds"] for x in runs)
        row["cpu_s_per_env_step"] = statistics.median(x["cpu_seconds"] / x["env_steps"] for x in runs)
        row["cpu_s_per_chunk"] = statistics.median(x["cpu_seconds"] / x["chunks"] for x in runs)
        row["policy_busy_share"] = statistics.median(x["policy_busy_seconds"] / x["seconds"] for x in runs)
        rows[key] = row
    return rows


def chart(payload: dict[str, Any], path: Path) -> None:
    """Episodes per hour of every row, grouped by policy."""
    from _common import figure

    colors = {"openpi": "tab:gray", "vla-eval": "tab:orange", "fastenv": "tab:blue"}
    rows = payload["rows"]
    costs = [c for c in COSTS if any(r["policy"] == c for r in rows.values())]
    systems = [s for s in SYSTEMS if any(r["system"] == s for r in rows.values())]
    width = 0.8 / max(1, len(systems))
    top = max(r["episodes_per_hour"] for r in rows.values())
    with figure(path, f"LIBERO evaluation throughput, {payload['settings']['episodes']} episodes of {SUITE}, "
                      f"{payload['machine'].get('cpu_count')} cores", figsize=(8, 4.5)) as ax:
        for j, system in enumerate(systems):
            xs, ys = [], []
            for i, cost in enumerate(costs):
                row = rows.get(f"{system} / {cost}")
                if row is None:
                    continue
                xs.append(i + (j - (len(systems) - 1) / 2) * width)
                ys.append(row["episodes_per_hour"])
                same = "" if row["same_results"] is not False else "\nresults differ"
                ratio = row.get("ratio_to_openpi")
                text = f"{ys[-1]:.0f}" + ("" if ratio is None else f" ({ratio:.2f}x)")
                ax.text(xs[-1], ys[-1], text + same, ha="center", va="bottom", fontsize=8)
            ax.bar(xs, ys, width, color=colors[system], label=payload["labels"][system])
        ax.set_xticks(range(len(costs)), [f"policy: {c}" for c in costs])
        ax.set_ylabel("episodes per hour (median of rounds); (x openpi)")
        ax.set_ylim(0, top * 1.2)


def main() -> None:
    if SERVER_FLAG in sys.argv[1:]:
        serve_vla_eval()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openpi", type=Path, help="a checkout of openpi (its examples/libero/main.py, packages/openpi-client)")
    parser.add_argument("--tasks", type=int, default=1, help="the first TASKS tasks of libero_spatial (default 1: task 0)")
    parser.add_argument("--episodes", type=int, default=4, help="episodes per task: init states 0 .. EPISODES-1")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--success-after", type=int, default=226,
                        help="LIBERO's success check on fastenv's schedule after this many robosuite steps (0: LIBERO's own check)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="rows to run, of " + ",".join(SYSTEMS))
    parser.add_argument("--costs", default=",".join(COSTS), help="policies to run, of " + ",".join(COSTS))
    parser.add_argument("--workers", type=int, default=2, help="fastenv eval's worker processes")
    parser.add_argument("--shards", type=int, default=2, help="vla-eval's shard processes")
    parser.add_argument("--max-batch", type=int, default=2, help="vla-eval's server max_batch_size")
    parser.add_argument("--max-wait", type=float, default=0.01, help="vla-eval's server max_wait_time (seconds)")
    parser.add_argument("--check-episodes", type=int, default=2,
                        help="vla-eval's cheap row again with 1 shard on task 0's first episodes, compared with openpi's (0: no)")
    parser.add_argument("--keep", type=Path, help=argparse.SUPPRESS)  # a folder to keep vla-eval's logs and recordings in
    parser.add_argument("--out", default="results/bench_eval_scale.json")
    parser.add_argument("--chart-only", action="store_true", help="redraw the chart from --out's JSON")
    args = parser.parse_args()
    if args.chart_only:
        chart(json.loads(Path(args.out).read_text()), Path(args.out).with_suffix(".png"))
        return
    # One OpenGL set-up for every row, in this process and the processes it starts (vla-eval's LIBERO
    # sets EGL_PLATFORM=device itself): LIBERO's renders, and so the stand-in's answers, are alike.
    os.environ.setdefault("MUJOCO_GL", "egl")
    os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
    os.environ.setdefault("EGL_PLATFORM", "device")
    systems = [s for s in args.systems.split(",") if s]
    costs = [c for c in args.costs.split(",") if c]
    if set(systems) - set(SYSTEMS) or set(costs) - set(COSTS):
        parser.error(f"--systems is a subset of {SYSTEMS}, --costs of {COSTS}")
    if 0 < args.success_after <= NUM_STEPS_WAIT + 1:
        parser.error(f"--success-after is 0 (LIBERO's check) or more than the {NUM_STEPS_WAIT} settling steps + 1 (the loops ignore "
                     "a success while settling)")
    if "openpi" in systems and args.openpi is None:
        parser.error("openpi's row needs --openpi OPENPI_ROOT (or leave it out: --systems vla-eval,fastenv)")

    if args.success_after > 0:
        from fastenv.conformance import success_schedule

        os.environ["FASTENV_SUCCESS_AFTER"] = str(args.success_after)
        success_schedule.enable()
    from _common import machine, write_json

    from fastenv.policy_cost import inference_cost

    pi0 = inference_cost("pi0-eager")
    import libero.libero.envs  # noqa: F401 (imported before the rows: openpi's in-process row does not pay it)

    labels = {s: LABELS[s].format(shards=args.shards, workers=args.workers) for s in SYSTEMS}
    total = args.tasks * args.episodes
    load_start = os.getloadavg()
    rounds: list[dict[str, dict[str, Any]]] = []
    for r in range(args.rounds):
        row: dict[str, dict[str, Any]] = {}
        for cost in costs:
            spec = None if cost == "cheap" else cost
            for system in systems:
                load = os.getloadavg()[0]
                if system == "openpi":
                    got = openpi_row(args.openpi, args.tasks, args.episodes, None if spec is None else pi0)
                elif system == "vla-eval":
                    got = vla_eval_row(args.tasks, args.episodes, spec, shards=args.shards, max_batch=args.max_batch,
                                       max_wait=args.max_wait, tag=f"r{r}-{cost}", keep=args.keep)
                else:
                    got = fastenv_row(args.tasks, args.episodes, spec, workers=args.workers)
                got["load_average_1min"] = [load, os.getloadavg()[0]]  # at the row's start and end: other work on the machine
                ref = row.get(f"openpi / {cost}")
                got["differences"] = differences(ref["episodes"], got["episodes"]) if ref is not None else []
                row[f"{system} / {cost}"] = got
                print(json.dumps({"round": r, "row": f"{system} / {cost}", "seconds": round(got["seconds"], 1),
                                  "episodes/hour": round(3600 * len(got["episodes"]) / got["seconds"], 1),
                                  "cpu_seconds": round(got["cpu_seconds"], 1), "load": [round(x, 1) for x in got["load_average_1min"]],
                                  "same": not got["differences"],
                                  "differences": got["differences"][:3]}), file=sys.stderr, flush=True)
        rounds.append(row)

    one_shard = None
    if "vla-eval" in systems and "openpi" in systems and "cheap" in costs and args.check_episodes > 0 and args.shards > 1:
        # The same harness in one process on the first episodes: whether sharding is what changes its results.
        k = min(args.check_episodes, args.episodes)
        got = vla_eval_row(1, k, None, shards=1, max_batch=args.max_batch, max_wait=args.max_wait, tag="one-shard", keep=args.keep)
        ref = {e: v for e, v in rounds[0]["openpi / cheap"]["episodes"].items() if e in got["episodes"]}
        diff = differences(ref, got["episodes"])
        one_shard = {"shards": 1, "episodes": sorted(got["episodes"]), "same_results": not diff, "differences": diff,
                     "seconds": got["seconds"]}
        print(json.dumps({"row": "vla-eval / cheap, 1 shard (check)", **one_shard}), file=sys.stderr, flush=True)

    rows = summarize(rounds, total)
    for row in rows.values():
        row["label"] = labels[row["system"]]
        if "openpi" not in systems:
            row["same_results"] = None  # nothing to compare with
    cores: dict[str, Any] = {}
    for system in systems:
        row = rows.get(f"{system} / cheap")
        if row is None:
            continue
        c = row["cpu_s_per_chunk"]
        cores[system] = {"cpu_s_per_chunk": c, "cpu_s_per_env_step": row["cpu_s_per_env_step"],
                         **{f"batch {b}": cores_needed(c, pi0.per_call_s, pi0.per_sample_s, b) for b in (1, 8, 32)},
                         "batch -> infinity": c / pi0.per_sample_s}
    payload: dict[str, Any] = {
        "command": "python benchmarks/bench_eval_scale.py " + " ".join(
            "OPENPI_ROOT" if Path(a).is_absolute() and Path(a).exists() else a for a in sys.argv[1:]),
        "machine": machine(),
        "load_average_1_5_15min": {"start": load_start, "end": os.getloadavg(),
                                   "note": "other work on the machine while the rows ran (each row's 1-min load at its start and "
                                           "end is in its load_average_1min); with the cores shared, processes get time shares, so "
                                           "rows of several processes gain against a row of one"},
        "settings": {"suite": SUITE, "tasks": list(range(args.tasks)), "episodes_per_task": args.episodes, "episodes": total,
                     "seed": SEED, "rounds": args.rounds, "replan_steps": REPLAN, "num_steps_wait": NUM_STEPS_WAIT,
                     "success": (f"fastenv.conformance.success_schedule after {args.success_after} robosuite steps"
                                 if args.success_after > 0 else "LIBERO's own check"),
                     "vla_eval": {"version": _version("vla-eval"), "shards": args.shards, "mode": "sync", "server_chunk_size": REPLAN,
                                  "server_max_batch_size": args.max_batch, "server_max_wait_time_s": args.max_wait,
                                  "work_queue": "dynamic (its recording SQLite)"},
                     "fastenv": {"workers": args.workers, "envs_per_worker": 2, "batching": "fastenv.eval.run's default"},
                     "openpi": {"script": "examples/libero/main.py, unchanged", "process": "this one (LIBERO imported before)"},
                     "pi0_eager": {"per_call_s": pi0.per_call_s, "per_sample_s": pi0.per_sample_s, "source": pi0.source},
                     "renderer": {k: os.environ.get(k) for k in ("MUJOCO_GL", "PYOPENGL_PLATFORM", "EGL_PLATFORM")}},
        "labels": labels,
        "rows": rows,
        "vla_eval_one_shard_check": one_shard,
        "cores_to_keep_one_h100_busy": {
            "formula": "cores(B) = cpu_s_per_chunk * B / (a + b * B); cpu_s_per_chunk = the cheap row's CPU seconds / chunks served "
                       "(a chunk: 5 env steps and its share of resets, settling steps, renders, transport); a + b * B: pi0-eager's "
                       f"seconds for a model call over B chunks (a = {pi0.per_call_s} s, b = {pi0.per_sample_s} s); "
                       "'batch -> infinity' = cpu_s_per_chunk / b",
            "systems": cores,
        },
        "notes": [
            ("Each row's episodes are compared with openpi's row of the same policy: success, length and every executed action "
             "(openpi: recorded at env.step, settling steps left out; vla-eval: its recording's step_rows 'action'; fastenv: "
             "record_actions)."),
            ("openpi's row runs in this process with LIBERO already imported; vla-eval's and fastenv's rows include their "
             "processes' start (Python, imports, env builds). vla-eval's model server is started before its row and not timed."),
            ("Camera renders of openpi and vla-eval are counted from LIBERO's env's behaviour (both cameras at every reset, init "
             "state and step); fastenv counts its own."),
        ],
        "rounds": [{k: {kk: vv for kk, vv in v.items() if kk != "episodes"} for k, v in r.items()} for r in rounds],
    }
    out = write_json(args.out, payload)
    print(f"{'row':<44} {'episodes':>8} {'seconds':>8} {'ep/hour':>8} {'/openpi':>8} {'/vla-eval':>9} {'renders':>8} {'busy':>6} same")
    for row in rows.values():
        ro, rv = row.get("ratio_to_openpi"), row.get("ratio_to_vla-eval")
        busy = f"{100 * row['policy_busy_share']:.0f}%" if row["policy"] != "cheap" else "-"
        print(f"{row['label'] + ', ' + row['policy']:<44} {row['episodes']:>8} {row['seconds']:>8.1f} {row['episodes_per_hour']:>8.1f} "
              f"{'-' if ro is None else f'{ro:.2f}x':>8} {'-' if rv is None else f'{rv:.2f}x':>9} {row['camera_renders']:>8} {busy:>6} "
              f"{row['same_results']}")
        for d in row["differences"][:5]:
            print(f"    {d}")
        if row.get("scene_history") and row["differences"]:
            h = row["scene_history"]
            print(f"    explained by the shards' env histories (scene_history): {h['explained']}; same: {len(h['same'])}, differ: {len(h['differ'])}")
    if one_shard is not None:
        print(f"vla-eval in 1 shard on {', '.join(one_shard['episodes'])}: same results as openpi: {one_shard['same_results']}")
    print("cores to keep one H100 busy with pi0-eager (" + payload["cores_to_keep_one_h100_busy"]["formula"] + "):")
    for system, c in cores.items():
        print(f"  {labels[system]:<40} CPU s/chunk {c['cpu_s_per_chunk']:.3f}  batch 1: {c['batch 1']:.1f}  batch 8: {c['batch 8']:.1f}  "
              f"batch 32: {c['batch 32']:.1f}  limit: {c['batch -> infinity']:.0f}")
    chart(payload, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
