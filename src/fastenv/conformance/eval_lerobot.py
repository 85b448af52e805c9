"""``fastenv eval`` with LeRobot's loop and policy against LeRobot 0.6.1's own ``eval_policy_all`` on its own env.

For each policy (LeRobot's ACT class initialised at random, and pi0's class with a small random
network for its VLM, ``fastenv.conformance.lerobot``'s stand-ins), LeRobot's ``eval_policy_all``
(what ``lerobot-eval`` calls) runs the episodes of two tasks on LeRobot's own ``LiberoEnv``, its
async vector env of ``--n-envs`` envs per task (``lerobot-eval``'s default where the batch is above
one), with a start seed, as ``lerobot-eval --eval.n_episodes=N --eval.batch_size=B --seed=S``
does. Then ``fastenv.eval.run`` runs the same episode list (``fastenv.eval.lerobot_eval``:
``LeRobotLoop``, ``LeRobotPolicy``, ``LeRobotProtocol(batch_size=B)``) with 1 and 2 workers, a call
per request and batches of every waiting env. Each episode's success, length, return and actions
(their digest) must equal LeRobot's, and the init state and seed LeRobot's env used must be
``lerobot_episode_list``'s.

The tasks are libero_spatial 0 and 4 by default: task 4 has an articulated fixture (the cabinet's
top drawer, open), whose scene depends on how many resets its env had before (the module
``fastenv.eval.lerobot_eval``); a negative control runs it with ``batch_size=1`` in the protocol
(resets counted as for a batch of one) and must differ there.

Batches: a batched network may give other last bits for another batch size (ACT's does here, about
1e-6). The policies' ``predict_action_chunk`` runs one observation at a time in both runs
(``fastenv.eval.lerobot_eval.per_sample``), LeRobot's batches of ``--n-envs`` and fastenv's of any size
alike; everything else (LeRobot's observation processing, the processors) runs on the whole batch.
With ``--batched``, a last row compares ACT run batched in both (LeRobot's batches are its
``--n-envs`` envs, fastenv's whatever waits): reported, not required to be equal. The stand-in
VLM's flow noise is zero (pi0 draws it from torch's global generator, per LeRobot batch).

LIBERO's success check fires on ``success_schedule``'s schedule (random policies never succeed
otherwise), in LeRobot's env workers and fastenv's alike; with a 26-step episode some episodes end
by success and some at the time limit. Run it in LeRobot's stack (``scripts/libero_stack.sh
lerobot-0.6``)::

    python -m fastenv.conformance.eval_lerobot --out results/eval_lerobot_conformance.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from fastenv.conformance import success_schedule
from fastenv.conformance.rlinf import command

# (workers, max_batch, batch_timeout): a call per request, and batches of every env slot (2 a worker), the
# policy waiting up to 2 s for them to fill (an env's chunk takes longer than that to step here)
SETTINGS = ((1, 1, 0.0), (1, None, 2.0), (2, 1, 0.0), (2, None, 2.0))
POLICIES = ("act", "pi0")


def env_config(suite: str, tasks: Sequence[int], size: int, episode_length: int) -> Any:
    """LeRobot's LIBERO env config: ``tasks`` of ``suite``, ``size`` pixel cameras, ``episode_length`` steps."""
    from lerobot.envs.configs import LiberoEnv as LiberoEnvConfig

    return LiberoEnvConfig(task=suite, task_ids=list(tasks), episode_length=episode_length, observation_height=size,
                           observation_width=size, obs_type="pixels_agent_pos")


def make_parts(env_cfg: Any, size: int, kind: str, *, one_at_a_time: bool = True) -> tuple[Any, ...]:
    """A deterministic policy of ``kind`` and its processors: (policy, env_pre, env_post, pre, post)."""
    import torch

    from fastenv.conformance.lerobot import make_policy
    from fastenv.eval.lerobot_eval import per_sample

    policy, env_pre, env_post, pre, post, _ = make_policy(env_cfg, size, kind)
    if kind in ("pi0", "pi05", "smolvla"):  # the stand-in VLM without its flow noise: deterministic
        sample = policy.model.sample_actions

        def sample_actions(images: list, *args: Any, noise: Any = None, **kwargs: Any) -> Any:
            zeros = torch.zeros(images[0].shape[0], policy.config.chunk_size, policy.config.max_action_dim)
            return sample(images, *args, noise=zeros, **kwargs)

        policy.model.sample_actions = sample_actions
    if one_at_a_time:
        per_sample(policy)
    return policy, env_pre, env_post, pre, post


def _digest(actions: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(actions, dtype=np.float64).tobytes()).hexdigest()


def reference(env_cfg: Any, parts: tuple, *, n_envs: int, n_episodes: int, start_seed: int) -> dict[str, Any]:
    """LeRobot's ``eval_policy_all`` on LeRobot's env (async vector envs): each kept episode's
    success, length, return, action digest, and the init state and seed its env used, by fastenv id."""
    import torch
    from lerobot.envs.factory import make_env
    from lerobot.envs.utils import close_envs
    from lerobot.scripts import lerobot_eval

    policy, env_pre, env_post, pre, post = parts
    rollouts: list[dict[str, Any]] = []
    stock = lerobot_eval.rollout

    def rollout(*args: Any, **kwargs: Any) -> dict:
        env = kwargs["env"]
        ids = [int(i) for i in env.get_attr("init_state_id")]  # the init states this rollout's resets use
        task = int(env.get_attr("task_id")[0])
        out = stock(*args, **kwargs)
        rollouts.append({"task": task, "ids": ids, "seeds": list(kwargs["seeds"]), "out": out})
        return out

    envs = make_env(env_cfg, n_envs=n_envs, use_async_envs=True)
    suite = env_cfg.task
    n_states = {tid: len(vec.get_attr("_init_states")[0]) for tid, vec in envs[suite].items()}
    start = time.perf_counter()
    lerobot_eval.rollout = rollout
    try:
        with torch.no_grad():
            info = lerobot_eval.eval_policy_all(envs=envs, policy=policy, env_preprocessor=env_pre, env_postprocessor=env_post,
                                                preprocessor=pre, postprocessor=post, n_episodes=n_episodes, max_episodes_rendered=0,
                                                start_seed=start_seed, max_parallel_tasks=1)
    finally:
        lerobot_eval.rollout = stock
        close_envs(envs)
    seconds = time.perf_counter() - start
    metrics = {int(group["task_id"]): group["metrics"] for group in info["per_task"]}
    episodes: dict[str, dict[str, Any]] = {}
    actions: dict[str, np.ndarray] = {}
    batch_ix: dict[int, int] = {}
    for r in rollouts:
        task = r["task"]
        b = batch_ix[task] = batch_ix.get(task, -1) + 1
        done = r["out"]["done"].numpy()
        for j in range(done.shape[0]):
            e = b * n_envs + j
            if e >= n_episodes:
                continue  # run, and dropped by eval_policy
            length = int(np.argmax(done[j])) + 1
            actions[f"{suite}/{task}/{e}"] = r["out"]["action"][j, :length].numpy().astype(np.float64)
            episodes[f"{suite}/{task}/{e}"] = {
                "success": bool(metrics[task]["successes"][e]), "length": length, "return": float(metrics[task]["sum_rewards"][e]),
                "actions_sha256": _digest(r["out"]["action"][j, :length].numpy()),
                "init_state": r["ids"][j] % n_states[task], "seed": int(r["seeds"][j]),
            }
    return {"episodes": episodes, "actions": actions, "seconds": seconds, "rollouts": len(rollouts)}


def differences(ref: dict[str, dict[str, Any]], results: Sequence[dict[str, Any]]) -> list[str]:
    from fastenv.conformance.eval import differences as compare

    return compare(ref, results, keys=("success", "length", "return", "actions_sha256"), reference="LeRobot")


def schedule_differences(ref: dict[str, dict[str, Any]], suite: str, tasks: Sequence[int], n_episodes: int, n_envs: int,
                         start_seed: int) -> list[str]:
    """Where the init states and seeds LeRobot's envs used differ from ``lerobot_episode_list``'s."""
    from fastenv.eval.lerobot_eval import lerobot_episode_list

    out = []
    listed = lerobot_episode_list(suite, tasks, n_episodes, n_envs, start_seed, n_init_states=50)
    for e in listed:
        got = ref.get(f"{e.suite}/{e.task}/{e.index}")
        if got is None or (got["init_state"], got["seed"]) != (e.init_state, e.seed):
            out.append(f"{e.suite}/{e.task}/{e.index}: LeRobot used {None if got is None else (got['init_state'], got['seed'])}, "
                       f"the schedule says {(e.init_state, e.seed)}")
    if len(listed) != len(ref):
        out.append(f"the schedule lists {len(listed)} episodes, LeRobot kept {len(ref)}")
    return out


def differing(ref: dict[str, dict[str, Any]], results: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many episodes differ from LeRobot's in each compared value."""
    got = {r["id"]: r for r in results}
    return {key: sum(1 for e, want in ref.items() if e in got and got[e][key] != want[key])
            for key in ("success", "length", "return", "actions_sha256")}


def largest_action_difference(ref_actions: dict[str, np.ndarray], results: Sequence[dict[str, Any]]) -> float:
    """The largest absolute difference between LeRobot's and fastenv's actions, over each episode's common steps."""
    out = 0.0
    for r in results:
        want = ref_actions.get(r["id"])
        if want is not None and r.get("actions"):
            got = np.asarray(r["actions"], dtype=np.float64)
            n = min(len(got), len(want))
            out = max(out, float(np.abs(got[:n] - want[:n]).max()) if n else 0.0)
    return out


def fastenv_run(parts: tuple, suite: str, tasks: Sequence[int], *, n_episodes: int, start_seed: int, protocol: Any, workers: int,
                max_batch: int | None, batch_timeout: float, record_actions: bool = False) -> dict[str, Any]:
    from fastenv.eval import EvalConfig, run
    from fastenv.eval.lerobot_eval import LeRobotPolicy

    policy, env_pre, env_post, pre, post = parts
    config = EvalConfig(suites=suite, tasks=list(tasks), episodes=n_episodes, seed=start_seed, protocol=protocol, workers=workers,
                        envs_per_worker=2, max_batch=max_batch, batch_timeout=batch_timeout, record_actions=record_actions, progress=False)
    return run(LeRobotPolicy(policy, pre, post, env_pre, env_post, name="conformance stand-in"), config)


def compare(*, suite: str, tasks: Sequence[int], n_episodes: int, n_envs: int, size: int, episode_length: int, start_seed: int,
            policies: Sequence[str], settings: Sequence[tuple], control: bool = True, batched: bool = False) -> dict[str, Any]:
    from fastenv.eval.lerobot_eval import (
        LeRobotProtocol,
        fastenv_episodes,
        lerobot_episode_list,
    )

    env_cfg = env_config(suite, tasks, size, episode_length)
    protocol = LeRobotProtocol(replan_steps=_chunk(), camera_size=size, max_steps=episode_length, batch_size=n_envs)
    expected_list = [e.as_dict() for e in fastenv_episodes(lerobot_episode_list(suite, tasks, n_episodes, n_envs, start_seed,
                                                                                 n_init_states=50), start_seed)]
    rows: list[dict[str, Any]] = []
    cases = [(kind, True) for kind in policies] + ([("act", False)] if batched else [])
    for kind, one_at_a_time in cases:
        parts = make_parts(env_cfg, size, kind, one_at_a_time=one_at_a_time)
        ref = reference(env_cfg, parts, n_envs=n_envs, n_episodes=n_episodes, start_seed=start_seed)
        schedule = schedule_differences(ref["episodes"], suite, tasks, n_episodes, n_envs, start_seed)
        network = "per observation" if one_at_a_time else "batched"
        base = {"policy": kind, "network": network, "suite": suite, "tasks": list(tasks), "episodes per task": n_episodes,
                "lerobot n_envs": n_envs, "successes": sum(e["success"] for e in ref["episodes"].values()),
                "lengths": [e["length"] for e in ref["episodes"].values()], "lerobot seconds": ref["seconds"],
                "schedule equal": not schedule, "schedule differences": schedule[:10]}
        print(f"{kind} ({network}): LeRobot's eval_policy_all, {len(ref['episodes'])} episodes in {ref['rollouts']} rollouts "
              f"({ref['seconds']:.0f} s), {base['successes']} successes, lengths {base['lengths']}; init states and seeds "
              f"{'as lerobot_episode_list says' if not schedule else schedule[:3]}", flush=True)
        runs = settings if one_at_a_time else [(2, None, 2.0)]
        for workers, max_batch, timeout in runs:
            start = time.perf_counter()
            payload = fastenv_run(parts, suite, tasks, n_episodes=n_episodes, start_seed=start_seed, protocol=protocol, workers=workers,
                                  max_batch=max_batch, batch_timeout=timeout, record_actions=not one_at_a_time)
            diffs = differences(ref["episodes"], payload["episodes"])
            extra: dict[str, Any] = {}
            if not one_at_a_time:
                extra = {"episodes differing in": differing(ref["episodes"], payload["episodes"]),
                         "largest action difference": largest_action_difference(ref["actions"], payload["episodes"])}
                for r in payload["episodes"]:
                    r.pop("actions", None)
            if payload["episode_list"] != expected_list:
                diffs.append("fastenv's episode list is not lerobot_episode_list's")
            p = payload["run"]["policy"]
            rows.append({**base, "run": f"fastenv eval, {workers} workers, max_batch {max_batch or 'all slots'}", "equal": not diffs,
                         "required": one_at_a_time, "differences": diffs[:10], "seconds": time.perf_counter() - start,
                         "policy calls": p["calls"], "mean batch": p["mean_batch"], "camera renders": payload["run"]["camera_renders"],
                         "env steps": payload["run"]["env_steps"], **extra})
            print(f"  {rows[-1]['run']}: {'equal' if not diffs else f'{len(diffs)} differ: {diffs[:3]}'} ({rows[-1]['seconds']:.0f} s, "
                  f"{p['calls']} policy calls, mean batch {p['mean_batch']:.2f}, {rows[-1]['camera renders']} camera renders for "
                  f"{rows[-1]['env steps']} env steps)", flush=True)
            if extra:
                print(f"    (not required equal) episodes differing in {extra['episodes differing in']}, actions by at most "
                      f"{extra['largest action difference']:.3g}", flush=True)
        if control and one_at_a_time:
            # the negative control: resets counted as for a batch of one; the task with a fixture must differ
            wrong = LeRobotProtocol(replan_steps=_chunk(), camera_size=size, max_steps=episode_length, batch_size=1)
            payload = fastenv_run(parts, suite, tasks, n_episodes=n_episodes, start_seed=start_seed, protocol=wrong, workers=2, max_batch=None,
                                  batch_timeout=2.0)
            diffs = differences(ref["episodes"], payload["episodes"])
            rows.append({**base, "run": "negative control: batch_size 1 in the protocol (LeRobot ran 2 envs per task)", "equal": not diffs,
                         "negative control": True, "differences": diffs[:10],
                         "episodes that differ": sorted({d.split(":")[0] for d in diffs})})
            verdict = "EQUAL (the comparison is blind)" if not diffs else "differs, as it must: " + ", ".join(rows[-1]["episodes that differ"])
            print(f"  negative control: {verdict}", flush=True)
    return {"rows": rows}


def _chunk() -> int:
    from fastenv.conformance.lerobot import CHUNK

    return CHUNK


def ok(result: dict[str, Any]) -> bool:
    """Every required row equal, the schedule LeRobot's, and every negative control different."""
    rows = result["rows"]
    return bool(rows) and all(
        (not r["equal"]) if r.get("negative control") else (r["equal"] and r["schedule equal"]) for r in rows if r.get("required", True)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--tasks", default="0,4", help="task ids of the suite (default 0,4: task 4 has an articulated fixture)")
    parser.add_argument("--episodes", type=int, default=5, help="episodes per task (LeRobot's n_episodes)")
    parser.add_argument("--n-envs", type=int, default=2, help="LeRobot's batch size: envs per task")
    parser.add_argument("--size", type=int, default=32, help="camera pixels")
    parser.add_argument("--episode-length", type=int, default=26, help="the env config's episode_length (policy steps)")
    parser.add_argument("--success-after", type=int, default=32,
                        help="robosuite steps (10 settling ones included) after which the scheduled success may fire")
    parser.add_argument("--seed", type=int, default=1000, help="lerobot-eval's --seed (the start seed)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--settings", nargs="+", default=None,
                        help="WORKERS:MAX_BATCH (MAX_BATCH 'all': every env slot); default 1:1 1:all 2:1 2:all")
    parser.add_argument("--no-control", action="store_true", help="leave out the negative control")
    parser.add_argument("--batched", action="store_true", help="also ACT run batched in both (reported, not required equal)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ["FASTENV_SUCCESS_AFTER"] = str(args.success_after)  # before LeRobot's env workers (a forkserver) start
    success_schedule.enable()
    settings = SETTINGS
    if args.settings:
        settings = []
        for text in args.settings:
            workers, _, batch = text.partition(":")
            settings.append((int(workers), None if batch == "all" else int(batch), 0.0 if batch == "1" else 2.0))
    tasks = [int(t) for t in args.tasks.split(",")]
    result = compare(suite=args.suite, tasks=tasks, n_episodes=args.episodes, n_envs=args.n_envs, size=args.size,
                     episode_length=args.episode_length, start_seed=args.seed, policies=args.policies, settings=settings,
                     control=not args.no_control, batched=args.batched)
    passed = ok(result)
    required = [r for r in result["rows"] if r.get("required", True) and not r.get("negative control")]
    print(f"{sum(r['equal'] for r in required)}/{len(required)} runs equal to LeRobot's eval_policy_all, "
          f"{sum(not r['equal'] for r in result['rows'] if r.get('negative control'))} negative controls differ: "
          f"{'PASS' if passed else 'FAIL'}", flush=True)
    if args.out:
        from fastenv.backends.libero.mujoco_facts import installed_stack
        from fastenv.integrations.lerobot import lerobot_version

        stack = {**installed_stack(), "lerobot": ".".join(map(str, lerobot_version())), "python": sys.version.split()[0]}
        payload = {"command": command("fastenv.conformance.eval_lerobot", sys.argv[1:] if argv is None else argv), "stack": stack,
                   "passed": passed, **result}
        with open(args.out, "w") as fh:
            json.dump(payload, fh, indent=1)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
