"""fastenv's RLinf LIBERO env against RLinf's own: same config, seeds, reset-state ids and actions.

Each case builds RLinf's ``LiberoEnv`` and fastenv's (``fastenv.integrations.rlinf``) on one
config and drives both through the calls RLinf's env worker makes: ``reset`` (``is_start``),
``chunk_step`` with seeded random actions, ``update_reset_state_ids`` and a new rollout's reset, a
reset of some envs only, and single ``step`` calls. After every call it records what the call
returned and the env's own bookkeeping, and compares the two records value by value, exactly
(dtype, shape and bits):

- per chunk: the last observation (images, states, task descriptions), chunk rewards,
  terminations and truncations, every sub-step's infos (episode metrics: ``success_once``,
  ``return``, ``episode_len``, ``reward``, ``success_at_end``), and at an auto-reset the final
  observation and info and the masks;
- the env's reset-state ids, task and trial ids, elapsed steps, success and return counters and,
  in eval mode, its per-task success statistics;
- what differs by design: fastenv's ``None`` in place of each chunk's intermediate observations
  is checked too (every one ``None``, the last one not).

Short random-action runs rarely succeed, so LIBERO's success check is made to fire on a schedule
set by the robot's state, in both stacks' worker processes alike (``success_schedule``); truncations
come from a short ``max_episode_steps`` that ends episodes inside chunks.

Run it where RLinf is installed: ``python -m fastenv.conformance.rlinf --out results.json``.
``--cases worker worker_per_stage`` replays RLinf's env worker over two pipeline stages, fastenv's
stages on one shared pool of workers or on a pool each. ``--peer PYTHON`` compares this stack's
RLinf ``LiberoEnv`` with another RLinf's (RLinf main's stack, ``skip_intermediate_renders`` off
and on) over the same cases, each run by its own stack's Python.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fastenv.conformance import success_schedule

# RLinf's own LIBERO configs (examples/embodiment/config/env/libero_*.yaml), made short.
BASE_CFG: dict[str, Any] = {
    "env_type": "libero",
    "task_suite_name": "libero_goal",
    "auto_reset": True,
    "ignore_terminations": False,
    "max_episode_steps": 12,
    "max_steps_per_rollout_epoch": 24,
    "use_fixed_reset_state_ids": True,
    "use_ordered_reset_state_ids": False,
    "use_rel_reward": True,
    "use_step_penalty": False,
    "reward_coef": 5.0,
    "reset_gripper_open": True,
    "is_eval": False,
    "seed": 0,
    "group_size": 1,
    "video_cfg": {"save_video": False, "info_on_video": False, "video_base_dir": "video"},
    "init_params": {"camera_heights": 32, "camera_widths": 32},
}

# The modes RLinf's configs use, each a case: training (auto-reset, relative rewards), groups
# sharing reset states, termination ignored until the time limit (no auto-reset), evaluation
# (ordered reset states, per-task statistics), a step penalty with fresh random reset states.
CASES: dict[str, dict[str, Any]] = {
    "train": {},
    "groups": {"group_size": 2, "use_rel_reward": False, "seed": 3},
    "ignore_terminations": {"auto_reset": False, "ignore_terminations": True, "max_episode_steps": 15},
    "eval": {"is_eval": True, "ignore_terminations": True, "use_ordered_reset_state_ids": True, "seed": 1},
    "step_penalty": {"use_step_penalty": True, "use_fixed_reset_state_ids": False, "use_rel_reward": False, "seed": 7},
    "libero_10": {"task_suite_name": "libero_10", "seed": 5},
}


# RLinf's env worker path (two pipeline stages), by fastenv's pool option.
WORKER_CASES = {"worker": "shared", "worker_per_stage": "per_stage"}


@dataclass
class Result:
    case: str
    values: int = 0
    differences: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def equal(self) -> bool:
        return not self.differences


def make_cfg(case: str, **overrides: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create({**BASE_CFG, **CASES[case], **overrides})


def leaves(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield from leaves(value[key], f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        yield f"{path}#len", len(value)
        for i, item in enumerate(value):
            yield from leaves(item, f"{path}[{i}]")
    elif isinstance(value, np.ndarray) and value.dtype == object:
        yield f"{path}#shape", value.shape
        for i, item in enumerate(value.ravel()):
            yield from leaves(item, f"{path}[{i}]")
    elif isinstance(value, set):
        yield path, sorted(value)
    else:
        yield path, value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return type(a) is type(b) and a == b


STATE = ("reset_state_ids", "task_ids", "trial_ids", "_elapsed_steps", "success_once", "fail_once", "returns", "prev_step_reward", "start_idx", "_task_success_stats", "_eval_seen_trials")


def drive(env: Any, case: str, *, chunk: int, chunks: int, action_seed: int, fastenv: bool, facts: dict[str, Any] | None = None) -> list[tuple[str, Any]]:
    """The calls RLinf's env worker makes, and everything each returns, as (path, value) leaves.

    ``facts``, when given, counts the chunks' intermediate observations: produced, or ``None``.
    """
    rng = np.random.default_rng(action_seed)
    n = env.num_envs
    trace: list[tuple[str, Any]] = []

    def record(tag: str, value: Any) -> None:
        trace.extend(leaves(value, tag))
        trace.extend(leaves({name: getattr(env, name) for name in STATE if hasattr(env, name)}, f"{tag}/state"))

    record("reset", env.reset())
    for c in range(chunks):
        if c == chunks // 2:  # a new rollout epoch, as the env worker starts it
            env.update_reset_state_ids()
            env.is_start = True
            record(f"epoch[{c}]", env.reset())
        if c == chunks // 2 + 1 and not env.is_eval:
            record(f"partial[{c}]", env.reset(env_idx=np.array([n - 1])))
        actions = rng.uniform(-1, 1, size=(n, chunk, 7)).astype(np.float32)
        obs_list, rewards, terminations, truncations, infos_list = env.chunk_step(actions)
        skipped = obs_list[:-1]
        if facts is not None:
            facts["intermediate observations"] = facts.get("intermediate observations", 0) + sum(obs is not None for obs in skipped)
            facts["intermediate None"] = facts.get("intermediate None", 0) + sum(obs is None for obs in skipped)
        if fastenv and any(obs is not None for obs in skipped):
            trace.append((f"chunk[{c}].obs_list skipped", "an intermediate observation was produced"))
        if obs_list[-1] is None:
            trace.append((f"chunk[{c}].obs_list[-1]", None))
        record(f"chunk[{c}]", {"obs": obs_list[-1], "n_obs": len(obs_list), "rewards": rewards, "terminations": terminations, "truncations": truncations, "infos": infos_list})
    for s in range(2):  # RLinf's single-step API, observed every step
        actions = rng.uniform(-1, 1, size=(n, 7)).astype(np.float32)
        record(f"step[{s}]", env.step(actions, auto_reset=True))
    return trace


def compare_case(case: str, *, num_envs: int = 2, chunk: int = 5, chunks: int = 6, action_seed: int = 0, **overrides: Any) -> Result:
    """One case: RLinf's env and fastenv's on the same config, seeds and actions."""
    from rlinf.envs.libero.libero_env import LiberoEnv as RLinfLiberoEnv

    from fastenv.integrations.rlinf import LiberoEnv

    result = Result(case)
    traces = []
    for name, cls in (("rlinf", RLinfLiberoEnv), ("fastenv", LiberoEnv)):
        start = time.perf_counter()
        env = cls(make_cfg(case, **overrides), num_envs, 0, 1, None)
        try:
            traces.append(drive(env, case, chunk=chunk, chunks=chunks, action_seed=action_seed, fastenv=name == "fastenv"))
        finally:
            env.env.close()  # RLinf's vector env, or fastenv's in its place
        result.seconds[name] = time.perf_counter() - start
    _diff(result, *traces)
    return result


def _env_pids(vec: Any) -> list[int]:
    """The process ids of a stage's envs: fastenv's workers, or RLinf's one process per env."""
    if hasattr(vec, "worker_pids"):
        return list(vec.worker_pids)
    return [worker.process.pid for worker in vec.workers]


# RLinf's main branch as a peer of 0.3.0 (its stack: bash scripts/libero_stack.sh rlinf-main): its
# LiberoEnv with skip_intermediate_renders off and on, each compared with 0.3.0's on the same case.
PEER_VARIANTS = {"skip off": {"skip_intermediate_renders": False}, "skip on": {"skip_intermediate_renders": True}}


def dump_trace(case: str, path: str, *, num_envs: int, chunk: int, chunks: int, overrides: Mapping[str, Any]) -> None:
    """``drive`` this stack's own RLinf ``LiberoEnv`` (config ``overrides`` added) and pickle its trace to ``path``."""
    import importlib.metadata
    import pickle

    from rlinf.envs.libero.libero_env import LiberoEnv

    facts: dict[str, Any] = {"rlinf": importlib.metadata.version("rlinf")}
    start = time.perf_counter()
    env = LiberoEnv(make_cfg(case, **overrides), num_envs, 0, 1, None)
    try:
        trace = drive(env, case, chunk=chunk, chunks=chunks, action_seed=0, fastenv=False, facts=facts)
    finally:
        env.env.close()
    facts["seconds"] = time.perf_counter() - start
    with open(path, "wb") as fh:
        pickle.dump({"trace": trace, "facts": facts}, fh)


def _peer_trace(python: str, case: str, overrides: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
    """``dump_trace`` run by another stack's ``python`` (its LIBERO config beside it, as the stack script writes it)."""
    import pickle
    import subprocess
    import tempfile

    venv = os.path.dirname(os.path.dirname(python))
    env = {**os.environ, "LIBERO_CONFIG_PATH": os.path.join(venv, "libero-config")}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.pkl")
        args = ["--dump-trace", out, "--cases", case, "--overrides", json.dumps(dict(overrides))]
        args += [f"--{key.replace('_', '-')}={value}" for key, value in kwargs.items()]
        run = subprocess.run([python, "-m", "fastenv.conformance.rlinf", *args], env=env, check=False, capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"the peer stack's run of {case} failed:\n{run.stderr[-3000:]}")
        with open(out, "rb") as fh:
            return pickle.load(fh)


def compare_peer(case: str, python: str, *, num_envs: int = 2, chunk: int = 5, chunks: int = 6) -> list[Result]:
    """RLinf 0.3.0's own ``LiberoEnv`` (this stack) against another RLinf's (``python``'s stack),
    the peer with each of ``PEER_VARIANTS``: same case, seeds and actions, every value compared.

    Three results: each variant against 0.3.0, and skip on against skip off (what the skip alone changes).
    """
    import importlib.metadata

    from rlinf.envs.libero.libero_env import LiberoEnv

    ours: dict[str, Any] = {"rlinf": importlib.metadata.version("rlinf")}
    start = time.perf_counter()
    env = LiberoEnv(make_cfg(case), num_envs, 0, 1, None)
    try:
        reference = drive(env, case, chunk=chunk, chunks=chunks, action_seed=0, fastenv=False, facts=ours)
    finally:
        env.env.close()
    ours["seconds"] = time.perf_counter() - start
    peers = {name: _peer_trace(python, case, overrides, num_envs=num_envs, chunk=chunk, chunks=chunks) for name, overrides in PEER_VARIANTS.items()}
    results = []
    named = {name: f"rlinf {peer['facts']['rlinf']} {name}" for name, peer in peers.items()}  # main's version: 0.4.0
    pairs = [(f"rlinf {ours['rlinf']}", reference, ours, named[name], peer["trace"], peer["facts"]) for name, peer in peers.items()]
    off, on = peers["skip off"], peers["skip on"]
    pairs.append((named["skip off"], off["trace"], off["facts"], named["skip on"], on["trace"], on["facts"]))
    for name_a, trace_a, facts_a, name_b, trace_b, facts_b in pairs:
        result = Result(f"{case}: {name_b} vs {name_a}")
        _diff(result, trace_a, trace_b, (name_a, name_b))
        result.seconds = {name_a: facts_a["seconds"], name_b: facts_b["seconds"]}
        result.facts = {name_a: facts_a, name_b: facts_b}
        results.append(result)
    return results


def worker_shell(worker_cls: type, env_cfg: Mapping[str, Any], *, stages: int, num_envs: int, chunk: int) -> Any:
    """An RLinf env worker of ``worker_cls`` without Ray, its envs built by its own ``_setup_env_and_wrappers``.

    ``EnvWorker.__init__`` needs RLinf's cluster, so the instance gets the attributes it would set
    for a training run (one rank, ``stages`` pipeline stages of ``num_envs`` envs, OpenVLA-OFT's
    chunk of ``chunk`` actions); ``env_cfg`` is its ``env.train`` config. Its ``env_list`` holds
    each stage's env (in ``RecordVideo`` when the config saves videos).
    """
    from omegaconf import OmegaConf
    from rlinf.envs import get_env_cls

    cfg = OmegaConf.create({
        "env": {"train": {**env_cfg, "total_num_envs": num_envs * stages, "rollout_epoch": 1}},
        "rollout": {"pipeline_stage_num": stages},
        "actor": {"model": {"model_type": "openvla_oft", "num_action_chunks": chunk, "action_dim": 7}},
        "runner": {"only_eval": False},
    })
    worker = object.__new__(worker_cls)
    worker.cfg, worker.stage_num, worker._rank, worker._world_size, worker._worker_info = cfg, stages, 0, 1, None
    worker.enable_train, worker.enable_eval, worker.only_eval = True, False, False
    worker.train_num_envs_per_stage, worker.model_cfg = num_envs, cfg.actor.model
    worker.use_external_reward_model, worker.train_enable_offload, worker.eval_enable_offload = False, False, False
    worker.last_obs_list, worker.last_intervened_info_list, worker.env_list, worker.eval_env_list = [], [], [], []
    worker.env_list = worker._setup_env_and_wrappers(get_env_cls("libero", cfg.env.train), cfg.env.train, num_envs)
    return worker


def replay_worker(
    worker_cls: type,
    *,
    stages: int = 2,
    num_envs: int = 2,
    chunk: int = 5,
    chunks: int = 4,
    video_dir: str | None = None,
    fastenv_options: Mapping[str, Any] | None = None,
) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """RLinf's env worker's own code on one machine, without Ray: the calls its rollout makes.

    ``worker_cls`` is RLinf's ``EnvWorker`` or fastenv's (``fastenv.integrations.rlinf``). Its
    ``__init__`` needs RLinf's cluster, so the instance gets the attributes it would set, and then
    RLinf's own methods run: ``_setup_env_and_wrappers`` (``get_env_cls`` from the config, RLinf's
    ``RecordVideo`` around each stage's env when ``video_dir`` is given), ``_init_env``,
    ``env_interact_step`` per stage and chunk (RLinf's ``prepare_actions`` for OpenVLA-OFT, the
    model type of its LIBERO examples), and ``finish_rollout`` (videos flushed, reset-state ids
    renewed). ``fastenv_options`` go in the env config's ``fastenv`` key (fastenv's worker reads
    them). Returns the leaves of every ``EnvOutput`` and env info, and facts about the run: the
    env classes, the env processes (distinct process ids over all stages) and, with fastenv, the
    pools of workers the stages use.
    """
    import torch
    from rlinf.envs.wrappers import RecordVideo

    env_cfg = {**BASE_CFG, "max_steps_per_rollout_epoch": chunk * chunks, "video_cfg": {
        "save_video": video_dir is not None, "info_on_video": False, "video_base_dir": video_dir or "video"}}
    if fastenv_options is not None:
        env_cfg["fastenv"] = dict(fastenv_options)
    worker = worker_shell(worker_cls, env_cfg, stages=stages, num_envs=num_envs, chunk=chunk)
    envs = [env.env if isinstance(env, RecordVideo) else env for env in worker.env_list]  # the LIBERO envs themselves
    facts: dict[str, Any] = {}
    facts["env classes"] = [f"{type(env).__module__}.{type(env).__name__}" for env in envs]
    facts["env processes"] = len({pid for env in envs for pid in _env_pids(env.env)})
    if all(hasattr(env.env, "worker_pids") for env in envs):  # fastenv's: the pools the stages use
        pools = {id(env.env.envs): env.env.envs for env in envs}.values()
        facts["pools"] = len(pools)
        facts["workers per pool"] = sorted(pool.num_workers for pool in pools)
    trace: list[tuple[str, Any]] = []
    try:
        worker._init_env()
        trace.extend(leaves(worker.last_obs_list, "init_obs"))
        rng = np.random.default_rng(0)
        from rlinf.scheduler.hardware.accelerators.accelerator import AcceleratorType

        worker._timer_metrics, worker._accelerator_type = {}, AcceleratorType.NO_ACCEL  # as RLinf's Worker.__init__ sets them on a CPU node
        for c in range(chunks):
            for stage in range(stages):
                actions = torch.from_numpy(rng.uniform(0, 1, size=(num_envs, chunk, 7)).astype(np.float32))
                env_output, env_info = worker.env_interact_step(actions, stage)
                trace.extend(leaves(vars(env_output), f"chunk[{c}].stage[{stage}].output"))
                trace.extend(leaves(env_info, f"chunk[{c}].stage[{stage}].env_info"))
        if video_dir is not None:
            facts["video frames"] = [len(env.render_images) for env in worker.env_list]
        worker.finish_rollout()
        if video_dir is not None:
            for env in worker.env_list:  # RecordVideo writes its mp4 files in a thread
                for future in getattr(env, "_save_futures", []):
                    future.result()
            facts["videos written"] = sorted(os.path.relpath(os.path.join(d, f), video_dir) for d, _, fs in os.walk(video_dir) for f in fs)
        trace.extend(leaves([env.reset_state_ids for env in envs], "next_reset_state_ids"))
    finally:
        for env in envs:
            env.env.close()  # RLinf's vector env, or fastenv's in its place
    return trace, facts


def compare_worker(*, pool: str = "shared", **kwargs: Any) -> Result:
    """RLinf's env worker path with RLinf's env and with fastenv's drop-in (one import apart).

    ``pool``: fastenv's ``pool`` option, "shared" (all pipeline stages on one pool of workers,
    the default) or "per_stage" (a pool per stage).
    """
    from rlinf.workers.env.env_worker import EnvWorker as RLinfEnvWorker

    from fastenv.integrations.rlinf import EnvWorker

    result = Result("env worker" if pool == "shared" else f"env worker, pool {pool}")
    traces = []
    for name, cls in (("rlinf", RLinfEnvWorker), ("fastenv", EnvWorker)):
        start = time.perf_counter()
        video_dir = kwargs.pop("video_dir", None)
        options = {"pool": pool} if name == "fastenv" else None
        trace, facts = replay_worker(cls, **kwargs, video_dir=None if video_dir is None else os.path.join(video_dir, name), fastenv_options=options)
        kwargs["video_dir"] = video_dir
        result.seconds[name] = time.perf_counter() - start
        result.facts[name] = facts
        traces.append(trace)
    _diff(result, *traces)
    return result


def _diff(result: Result, ref: list[tuple[str, Any]], out: list[tuple[str, Any]], names: tuple[str, str] = ("RLinf", "fastenv")) -> None:
    first, second = names
    result.values = len(ref)
    if len(ref) != len(out):
        result.differences.append(f"{len(ref)} values from {first}, {len(out)} from {second}")
    for (path_a, a), (path_b, b) in zip(ref, out):
        if path_a != path_b:
            result.differences.append(f"{path_a}: {first} has it, {second} has {path_b} there")
            break
        if not same(a, b):
            result.differences.append(f"{path_a}: {first} {a!r:.120}, {second} {b!r:.120}")


def command(module: str, argv: list[str]) -> str:
    """The command line as run, without the machine's paths (an absolute path keeps its last two parts)."""
    shown = [os.path.join(*a.split(os.sep)[-2:]) if os.path.isabs(a) else a for a in argv]
    return " ".join(["python -m", module, *shown])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=[*CASES, *WORKER_CASES], choices=[*CASES, *WORKER_CASES],
                        help="'worker': RLinf's env worker path (two pipeline stages on one shared pool), with videos; "
                        "'worker_per_stage': the same with a pool per stage")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=6)
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--peer", default=None, metavar="PYTHON",
                        help="compare this stack's RLinf LiberoEnv with the one of PYTHON's stack (RLinf main: "
                        ".stacks/rlinf-main/bin/python), skip_intermediate_renders off and on, over the --cases (env cases only)")
    parser.add_argument("--dump-trace", default=None, help=argparse.SUPPRESS)  # the peer's side of --peer
    parser.add_argument("--overrides", default="{}", metavar="JSON",
                        help="config keys set in every env case, e.g. '{\"skip_intermediate_renders\": true}' in RLinf main's stack")
    args = parser.parse_args(argv)
    success_schedule.enable()
    try:
        overrides = json.loads(args.overrides)
    except ValueError:
        overrides = None
    if not isinstance(overrides, dict):
        parser.error(f"--overrides takes a JSON object of config keys, got {args.overrides!r}")
    if args.dump_trace:
        (case,) = args.cases
        dump_trace(case, args.dump_trace, num_envs=args.num_envs, chunk=args.chunk, chunks=args.chunks, overrides=overrides)
        return 0
    if args.peer is not None:
        if not os.path.exists(args.peer):
            parser.error(f"--peer {args.peer}: no such Python (build the stack: bash scripts/libero_stack.sh rlinf-main)")
        cases = [case for case in args.cases if case in CASES]
        if not cases:
            parser.error(f"--peer compares the env cases {list(CASES)}, got {args.cases}")
        args.cases = cases
    results = []
    for case in args.cases:
        if args.peer is not None:
            num_envs = max(args.num_envs, 2 * CASES[case].get("group_size", 1))
            for result in compare_peer(case, args.peer, num_envs=num_envs, chunk=args.chunk, chunks=args.chunks):
                results.append(result)
                status = "equal" if result.equal else f"{len(result.differences)} differ"
                print(f"{result.case}: {result.values} values, {status}", flush=True)
                for line in result.differences[:10]:
                    print("   ", line)
            continue
        if case in WORKER_CASES:
            import tempfile

            with tempfile.TemporaryDirectory() as videos:
                result = compare_worker(pool=WORKER_CASES[case], num_envs=args.num_envs, chunk=args.chunk, chunks=args.chunks, video_dir=videos)
        else:
            num_envs = max(args.num_envs, 2 * CASES[case].get("group_size", 1))
            result = compare_case(case, num_envs=num_envs, chunk=args.chunk, chunks=args.chunks, **overrides)
        results.append(result)
        status = "equal" if result.equal else f"{len(result.differences)} differ"
        print(f"{case}: {result.values} values, {status} (RLinf {result.seconds['rlinf']:.1f} s, fastenv {result.seconds['fastenv']:.1f} s)", flush=True)
        for line in result.differences[:10]:
            print("   ", line)
    if args.out:
        from fastenv.backends.libero.mujoco_facts import installed_stack

        payload = {
            "command": command("fastenv.conformance.rlinf", sys.argv[1:] if argv is None else argv),
            "stack": installed_stack(),
            "cases": [{"case": r.case, "values": r.values, "equal": r.equal, "differences": r.differences[:20], "seconds": r.seconds, "facts": r.facts} for r in results],
        }
        with open(args.out, "w") as fh:
            json.dump(payload, fh, indent=2)
    return 0 if all(r.equal for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
