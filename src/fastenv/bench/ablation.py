"""`fastenv bench`: how fast a LIBERO rollout is with each of fastenv's steps, and where the time goes.

Each configuration adds one thing to the previous one, in the order of the published ablation,
then fastenv's own steps:

- Default: LIBERO's stock observation set (two cameras, all state), each chunk's K actions
  executed one step at a time with an observation after every one, robosuite's hard resets and
  control loop, in Gymnasium's AsyncVectorEnv.
- +Slim: headless, pruned to one camera + proprioception, in fastenv's vector env (still an
  observation after every step).
- +SkipObs: one observation per chunk, at its end.
- +Pipeline: S pipeline stages; the policy runs on one while the others step.
- +Async: dynamic batching; the policy serves whichever envs are ready.
- +FastReset: LIBERO resets in place (bit for bit a rebuilt env's reset).
- +FastSubstep: robosuite's control loop with less around the same arithmetic (bit for bit).

The layout is the same for every configuration, as these systems are deployed: the policy
(``fastenv.bench.policies.ChunkPolicy``: a CNN over the camera image and an MLP over proprioception,
emitting an action chunk of K and a value, once per chunk in every configuration) runs in this process, on the GPU when there is one, and
this process is pinned to its own CPU core(s); the env processes are pinned to the other cores.
Episodes end at random lengths around ``episode_steps`` (the long tail dynamic batching is for),
so resets are part of every rollout, as in training. Configurations are interleaved over rounds;
the table gives medians and spreads, and fastenv's profiler (``PipelineVectorEnv(profile=True)``)
says where each configuration's wall time goes.

Every configuration must produce the same data as Default: the policy serves each env on its own
(``ChunkPolicy.act_rows``: its own noise stream, evaluated alone, so batching cannot change its
actions), and each env's trajectory (per chunk: the reward, terminated, truncated, the kept
observations the policy read, and per chunk the reward, terminated, truncated and the final
observation of an episode that ended; ``fastenv.bench.same_data``) is compared with Default's,
env by env over the chunks both ran (the "same data" column).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fastenv.bench.clock import Part, RunClock
from fastenv.bench.envs import (
    IMAGE_KEY,
    SLIM_MODALITIES,
    STATE_KEY,
    episode_lengths,
    stepwise_env,
)
from fastenv.bench.placement import Pinned, cores, policy_device
from fastenv.bench.report import ProgressBar, minutes, output_file, per_worker, plot
from fastenv.bench.same_data import Trajectories, compare
from fastenv.core.fast_paths import FastPath
from fastenv.machine import measured_on


@dataclass
class BenchConfig:
    """Options of ``fastenv bench`` (see ``fastenv bench --help``)."""

    suite: str = "libero_10"
    task_id: int = 0
    num_envs: int = 4
    workers: int = 2
    chunk: int = 8
    stages: int = 2
    camera_size: int = 128
    device: str = "auto"
    steps: int = 128
    episode_steps: int = 160
    rounds: int = 2
    policy_cores: int = 1
    max_batch: int | None = None
    batch_timeout: float = 0.05
    out: str = "results"
    seed: int = 0
    # A VLA's inference cost (fastenv.policy_cost: a preset's name or "A,B" seconds per call and per
    # sample), added to each policy call as a wait that spends no CPU; None: the small CNN alone.
    policy_cost: str | None = None
    # How that cost is spent: "wait" (sleep), "transformer" (a random-weight transformer of a VLA's
    # scale in bf16 on the GPU, instead of the wait), "auto" (the transformer where the policy runs on CUDA).
    policy_compute: str = "auto"

    @classmethod
    def full(cls, **overrides: Any) -> BenchConfig:
        """The long interleaved run: 192 simulator steps per env, configuration and round, 3 rounds."""
        return cls(**{"steps": 192, "rounds": 3, **overrides})

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """A smoke run: 2 small envs, a few steps, one round."""
        base = dict(num_envs=2, workers=1, chunk=4, stages=2, camera_size=64, steps=16, episode_steps=16, rounds=1)
        base.update(overrides)
        return cls(**base)

    def check(self) -> None:
        from fastenv.vector import Layout

        Layout(self.num_envs, self.workers, self.stages)  # raises a clear ValueError on a bad layout
        for name in ("num_envs", "workers", "chunk", "stages", "camera_size", "steps", "episode_steps", "rounds", "policy_cores"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        from fastenv.policy_cost import inference_cost

        inference_cost(self.policy_cost)  # a clear ValueError on an unknown preset or a bad "A,B"
        if self.policy_compute not in ("auto", "wait", "transformer"):
            raise ValueError(f"policy_compute must be 'auto', 'wait' or 'transformer', got {self.policy_compute!r}")
        output_file(self.out, "fastenv_bench.json")


@dataclass
class Variant:
    """One configuration of the ablation."""

    name: str
    build: str  # "stock" (Gymnasium's AsyncVectorEnv), "slim" or "chunked" (fastenv's vector env)
    mode: str = "step"  # "step", "pipeline" or "dynamic"
    hard_reset: bool = True
    fast_substep: bool = False
    paths: tuple[FastPath, ...] = ()  # the env's fast paths (``SimEnv.fast_paths``) this configuration adds, which must serve


# The fast paths each configuration relies on from its own on (each keeps its predecessors').
SKIP_OBS_PATHS = (FastPath.OBSERVATION_AT_CHUNK_END,)
RESET_PATHS = (*SKIP_OBS_PATHS, FastPath.IN_PLACE_RESET)
SUBSTEP_PATHS = (*RESET_PATHS, FastPath.FAST_CONTROL_LOOP, FastPath.COMPILED_CONTROL_LOOP, FastPath.COMPILED_POLICY_STEP)


def variants(cfg: BenchConfig) -> list[Variant]:
    return [
        Variant("Default", "stock"),
        Variant("+Slim", "slim"),
        Variant(f"+SkipObs (chunk {cfg.chunk})", "chunked", paths=SKIP_OBS_PATHS),
        Variant(f"+Pipeline ({cfg.stages} stages)", "chunked", "pipeline", paths=SKIP_OBS_PATHS),
        Variant("+Async (dynamic batching)", "chunked", "dynamic", paths=SKIP_OBS_PATHS),
        Variant("+FastReset (in place)", "chunked", "dynamic", hard_reset=False, paths=RESET_PATHS),
        Variant("+FastSubstep", "chunked", "dynamic", hard_reset=False, fast_substep=True, paths=SUBSTEP_PATHS),
    ]


def _env_fns(cfg: BenchConfig, build: str, env_cores: list[int]) -> list[Callable[[], Any]]:
    from fastenv.envs.libero import make_env

    stock = build == "stock"
    maker = functools.partial(make_env, chunk=cfg.chunk) if build == "chunked" else functools.partial(stepwise_env, cfg.chunk)
    return [
        Pinned(
            functools.partial(
                maker, cfg.suite, cfg.task_id,
                modalities=None if stock else SLIM_MODALITIES,
                camera_size=cfg.camera_size, max_episode_steps=length,
                hard_reset=True, fast_substep=False,  # the stock cost; later variants switch them
            ),
            env_cores,
        )
        for length in episode_lengths(cfg.num_envs, cfg.episode_steps, cfg.seed)
    ]


def _build(cfg: BenchConfig, build: str, env_cores: list[int]) -> Any:
    fns = _env_fns(cfg, build, env_cores)
    if build == "stock":
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode

        # spawn: EGL contexts do not survive fork, Gymnasium's default start method on Linux.
        return AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    from fastenv.vector import PipelineVectorEnv

    stages = cfg.stages if build == "chunked" else 1
    return PipelineVectorEnv(fns, num_workers=cfg.workers, pipeline_stages=stages, profile=True)


def _set_modes(envs: Any, hard_reset: bool, fast_substep: bool) -> None:
    def apply(env: Any) -> None:
        adapter = env.unwrapped.adapter
        adapter.fast_substep = fast_substep
        adapter.hard_reset = adapter._raw.hard_reset = hard_reset

    envs.apply(apply)


class VLACost:
    """What a VLA's call costs on top of the small policy's own: a wait (no CPU), or a VLA-sized
    transformer on the GPU (``fastenv.bench.policies.VLASizedTransformer``). The actions stay the small
    policy's, so every configuration's data stays comparable with Default's."""

    def __init__(self, cfg: BenchConfig, device: Any) -> None:
        from fastenv.policy_cost import inference_cost

        self.cost = inference_cost(cfg.policy_cost)
        self.model = None
        self.compute = "wait"
        if self.cost is not None and (cfg.policy_compute == "transformer" or (cfg.policy_compute == "auto" and device.type == "cuda")):
            if device.type != "cuda":
                raise ValueError(f"policy_compute='transformer' runs on CUDA: give --device cuda (the policy is on {device})")
            import torch

            from fastenv.bench.policies import VLASizedTransformer

            with torch.device(device):  # made on the GPU: 2.2B parameters made on the CPU and moved take far longer
                self.model = VLASizedTransformer(chunk=cfg.chunk)
            self.compute = f"VLASizedTransformer ({self.model.parameters_count() / 1e9:.1f}B parameters, bf16) on {device}"

    def __call__(self, batch: int, spent: float) -> None:
        if self.model is not None:
            import torch

            self.model.run(batch)
            torch.cuda.synchronize()
        elif self.cost is not None:
            self.cost.wait(batch, spent)

    def describe(self) -> dict[str, Any] | None:
        if self.cost is None:
            return None
        return {"name": self.cost.name, "per_call_s": self.cost.per_call_s, "per_sample_s": self.cost.per_sample_s,
                "chunk_of_the_figure": self.cost.chunk, "source": self.cost.source, "compute": self.compute}


def run_variant(
    cfg: BenchConfig, variant: Variant, envs: Any, policy: Any, device: Any, progress: Callable[[int, int], None] | None = None,
    vla: VLACost | None = None,
) -> dict[str, Any]:
    """Time one configuration on ``envs``; returns its measurements (one round). ``progress(done,
    target)`` is told the timed env steps done, first with 0 where the timing starts."""
    import torch

    chunk = cfg.chunk
    policy_s = 0.0
    n = cfg.num_envs
    generators = [torch.Generator().manual_seed(cfg.seed * 100_003 + i) for i in range(n)]
    trajectories = Trajectories(n, SLIM_MODALITIES)

    def act(obs: dict[str, np.ndarray], ids: Any = None) -> np.ndarray:
        nonlocal policy_s
        ids = np.arange(n) if ids is None else np.asarray(ids)
        trajectories.observed(ids, obs)  # copied now, digested after the timed window
        t0 = time.perf_counter()
        actions, _ = policy.act_rows(obs, IMAGE_KEY, STATE_KEY, [generators[i] for i in ids], device)
        if vla is not None:
            vla(len(ids), time.perf_counter() - t0)
        policy_s += time.perf_counter() - t0
        return actions

    def record(ids: Any, result: tuple) -> Any:
        obs, rewards, terminated, truncated, infos = result
        trajectories.stepped(np.arange(n) if ids is None else ids, rewards, terminated, truncated, infos)
        return obs

    profiled = hasattr(envs, "profile_report")
    if profiled:
        _set_modes(envs, variant.hard_reset, variant.fast_substep)
    target = cfg.steps * n  # simulator steps to time
    obs, _ = envs.reset(seed=cfg.seed)
    for _ in range(2):  # warm-up: first renders, first policy calls
        obs = record(None, envs.step(act(obs)))
    if profiled:
        envs.reset_profile()
    policy_s = 0.0
    start = time.perf_counter()
    done = 0
    if progress is not None:
        progress(0, target)  # timed work begins
    if variant.mode == "step":
        while done < target:
            obs = record(None, envs.step(act(obs)))
            done += n * chunk
            if progress is not None:
                progress(done, target)
    elif variant.mode == "pipeline":
        m = envs.layout.stage_size
        stage_ids = [np.arange(k * m, (k + 1) * m) for k in range(cfg.stages)]
        for k in range(cfg.stages):
            envs.send(act({key: obs[key][stage_ids[k]] for key in SLIM_MODALITIES}, stage_ids[k]), stage=k)
        while done < target:
            for k in range(cfg.stages):
                stage_obs = record(stage_ids[k], envs.recv(stage=k))
                done += m * chunk
                if progress is not None:
                    progress(done, target)
                envs.send(act(stage_obs, stage_ids[k]), stage=k)  # the other stages step meanwhile
    else:
        batch = cfg.max_batch or max(1, n // 2)
        envs.send(act(obs), env_ids=np.arange(n))
        while done < target:
            result = envs.recv(max_batch=batch, timeout=cfg.batch_timeout)
            ids = np.asarray(result[4]["env_ids"])
            batch_obs = record(ids, result)
            done += len(ids) * chunk
            if progress is not None:
                progress(done, target)
            envs.send(act(batch_obs, ids), env_ids=ids)
    wall = time.perf_counter() - start
    breakdown = {"policy": policy_s}
    env_cpu = None
    if profiled:
        report = envs.profile_report()
        for name in ("physics", "step", "observe", "reset", "transport_wait"):
            breakdown[name] = float(report.get(name, 0.0))
        env_cpu = sum(report["cpu_seconds"].values())  # the env work, whatever cores it waited for
    else:
        breakdown["env (stock, not broken down)"] = wall - policy_s
    # Steps still in flight are neither counted nor timed; collect them before the next run.
    if variant.mode == "pipeline":
        for k in range(cfg.stages):
            record(stage_ids[k], envs.recv(stage=k))
    elif variant.mode == "dynamic":
        while len(envs.in_flight()):
            result = envs.recv(max_batch=n)
            record(np.asarray(result[4]["env_ids"]), result)
    trajectories.seal()  # the round's observations digested, off the clock
    # Which fast paths served each env (in its worker) at the end of the round
    served = [dict(paths) for paths in envs.call("fast_paths")]
    return {"env_steps": done, "seconds": wall, "breakdown_s": breakdown, "env_cpu_s": env_cpu, "trajectories": trajectories,
            "fast_paths": served, "renderers": per_worker(envs.call("renderer"))}


# Reference costs: ms of wall time per env step of each configuration and seconds per vector-env
# build, on a 2-core machine without GPU (an AVX-512 one, 4 envs, 128-px camera; docs/benchmarks.md,
# results/fastenv_bench_2core_avx512.json: 10.2 min in all), and the overhead the sum misses
# (warm-ups, resets before timing, closing). A run's time is measured here, not taken from these:
# they say how the configurations' costs compare until each has run once on this machine
# (``reference_parts``, ``fastenv.run_clock``).
REFERENCE_MS_PER_ENV_STEP = {"Default": 164.0, "+Slim": 103.9, "+SkipObs": 24.5, "+Pipeline": 24.5, "+Async": 23.5, "+FastReset": 21.9,
                             "+FastSubstep": 15.2}
REFERENCE_BUILD_S = {"stock": 25.0, "slim": 13.0, "chunked": 13.0}
REFERENCE_OVERHEAD = 1.25


def _chosen(cfg: BenchConfig, only: list[str] | None) -> list[Variant]:
    return [v for v in variants(cfg) if only is None or v.name.split(" ")[0] in only]


def reference_parts(cfg: BenchConfig, only: list[str] | None = None) -> list[Part]:
    """The run as ``run`` does it, one part per configuration and round in its order, each with its
    seconds on the reference machine and the vector env built before it (one per kind and round).

    Per part: its env steps at the configuration's reference cost (with a VLA's cost, plus its
    policy's, or the larger of the two where the configuration overlaps them), times the overhead
    the reference run showed.
    """
    from fastenv.policy_cost import inference_cost

    cost = inference_cost(cfg.policy_cost)
    pixels = (cfg.camera_size / 128) ** 2
    parts = []
    for r in range(cfg.rounds):
        built = None
        for v in _chosen(cfg, only):
            ms = REFERENCE_MS_PER_ENV_STEP[v.name.split(" ")[0]] * (0.5 + 0.5 * pixels)
            if cost is not None:
                n = cfg.num_envs
                batch = {"pipeline": n // cfg.stages, "dynamic": cfg.max_batch or max(1, n // 2)}.get(v.mode, n)
                policy = cost.per_env_step_ms(batch, cfg.chunk)
                ms = max(ms, policy) if v.mode in ("pipeline", "dynamic") else ms + policy
            build = v.build if built != v.build else None
            built = v.build
            parts.append(Part(f"round {r + 1}/{cfg.rounds}: {v.name}", v.name, REFERENCE_OVERHEAD * ms / 1000.0 * cfg.steps * cfg.num_envs,
                              build, REFERENCE_OVERHEAD * REFERENCE_BUILD_S[v.build] * cfg.num_envs / 4 if build else 0.0))
    return parts


def estimate_seconds(cfg: BenchConfig, only: list[str] | None = None) -> float:
    """How long ``run`` takes on the reference 2-core machine (machines differ by 2-3x: ``run``
    measures its own time; see ``reference_parts``)."""
    return sum(p.reference_s + p.reference_build_s for p in reference_parts(cfg, only))


def run(cfg: BenchConfig, only: list[str] | None = None, announce: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the ablation; writes ``fastenv_bench.json`` and ``fastenv_bench.png`` in ``cfg.out`` (or, where
    ``cfg.out`` names a ``.json`` file, that file and the chart beside it as ``.png``).

    ``announce`` is told, once the first configuration's first round has run, how long the whole
    run takes on this machine (that round measured, the others by their reference ratios to it).
    """
    import torch

    from fastenv.bench.policies import ChunkPolicy
    from fastenv.vector.progress import lines_through

    cfg.check()
    clock = RunClock(reference_parts(cfg, only))
    clock.start(time.perf_counter())
    announced: dict[str, float] | None = None
    policy_cores, env_cores = cores(cfg.policy_cores)
    previous_affinity = os.sched_getaffinity(0)
    chosen = _chosen(cfg, only)
    samples: dict[str, list[dict[str, Any]]] = {v.name: [] for v in chosen}
    vec = None
    builds = 0
    bar = ProgressBar(clock)
    routed = lines_through(bar.write)  # the vector env's build lines, printed above the bar
    routed.__enter__()
    try:
        os.sched_setaffinity(0, policy_cores)  # env processes pin themselves to env_cores
        device = policy_device(cfg.device)
        if device.type == "cpu":
            torch.set_num_threads(len(policy_cores))  # the policy's own cores; the rest are the simulators'
        vla = VLACost(cfg, device)
        index = 0
        for r in range(cfg.rounds):
            built = None
            for variant in chosen:
                label = f"round {r + 1}/{cfg.rounds}: {variant.name}"
                # One vector env per kind of build and round (building is not timed): the
                # chunked configurations differ only in how they are driven and in the modes
                # run_variant sets, so they share one. Fresh env processes every round, and
                # only one vector env alive at a time: robosuite's hard resets leak memory
                # (GBs over a few hundred), and a LIBERO env holds about a GB.
                if built != variant.build:
                    clock.start_build(variant.build, time.perf_counter())  # closing the last one counts with it
                    bar.show(f"{label} (building its envs)", force=True)
                    if vec is not None:
                        vec.close()
                        vec = None
                    vec, built = _build(cfg, variant.build, env_cores), variant.build
                    clock.built(time.perf_counter())
                    builds += 1
                clock.start_part(index, time.perf_counter())
                bar.show(label, force=True)
                space = vec.single_observation_space
                torch.manual_seed(cfg.seed)
                policy = ChunkPolicy(space[IMAGE_KEY].shape, space[STATE_KEY].shape[0], cfg.chunk, 7).to(device).eval()

                def progress(done: int, target: int) -> None:
                    clock.progress(done / target, time.perf_counter())
                    bar.show()

                samples[variant.name].append(run_variant(cfg, variant, vec, policy, device, progress, vla))
                if variant is chosen[-1] and vec is not None:
                    vec.close()  # a round's last part closes its envs: part of its time
                    vec = None
                clock.finish_part(time.perf_counter())
                index += 1
                bar.show(force=True)
                if announced is None:
                    now = time.perf_counter()
                    total = clock.total(now)
                    announced = {"total_s": round(total, 1), "at_s": round(now - clock.started, 1)}  # type: ignore[arg-type, operator]
                    if announce is not None and index < len(clock.parts):
                        announce(f"about {minutes(total)} in all on this machine ({variant.name}'s first round took "  # type: ignore[arg-type]
                                 f"{now - clock.started:.0f} s here, its build included; the other configurations "
                                 "estimated from it by their reference ratios until each has run once)")
    finally:
        if vec is not None:
            vec.close()
        routed.__exit__(None, None, None)
        bar.close()
        os.sched_setaffinity(0, previous_affinity)
    seconds = time.perf_counter() - clock.started  # type: ignore[operator]
    rows = summarize(chosen, samples, len(env_cores))
    payload = {
        "benchmark": "fastenv bench",
        "config": dataclasses.asdict(cfg),
        "policy_device": str(device),
        "policy_cost": vla.describe(),  # None: the small CNN alone
        "policy_cores": policy_cores,
        "env_cores": env_cores,
        "vector_env_builds": builds,  # one per kind of build (stock, slim, chunked) and round
        "episode_lengths": episode_lengths(cfg.num_envs, cfg.episode_steps, cfg.seed),
        "results": rows,
        # The run's own time: what was announced after the first part, the bar's estimate of the whole
        # run as it went ((elapsed, estimated total) in seconds), and what each part took here.
        "timing": {"seconds": round(seconds, 1), "announced": announced, "reference_estimate_s": round(estimate_seconds(cfg, only), 1),
                   "estimates": clock.history,
                   "parts": [{"part": p.name, "reference_s": round(p.reference_s, 1)} for p in clock.parts],
                   "measured_s": {k: round(v, 1) for k, v in clock.measured.items()},
                   "builds_s": {k: round(v, 1) for k, v in clock.built_s.items()}},
        "machine": {**measured_on(), "cores_available": len(previous_affinity)},
    }
    target = output_file(cfg.out, "fastenv_bench.json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(payload, indent=2))
    payload["files"] = [str(target), str(plot(payload, target.with_suffix(".png")))]
    return payload


def summarize(chosen: list[Variant], samples: dict[str, list[dict[str, Any]]], env_cores: int) -> list[dict[str, Any]]:
    """Per configuration: medians and spreads over rounds, ratios to Default, the breakdown and the floor."""
    base_name = chosen[0].name
    rows = []
    for variant in chosen:
        runs = samples[variant.name]
        rates = [s["env_steps"] / s["seconds"] for s in runs]
        ms = [1000.0 * s["seconds"] / s["env_steps"] for s in runs]
        ratios = [a / b for a, b in zip(ms, (1000.0 * s["seconds"] / s["env_steps"] for s in samples[base_name]))]
        speedups = [1.0 / x for x in ratios]
        breakdown = {
            key: statistics.median(1000.0 * s["breakdown_s"].get(key, 0.0) / s["env_steps"] for s in runs)
            for key in dict.fromkeys(k for s in runs for k in s["breakdown_s"])
        }
        # The floor: the env work (CPU seconds of the envs' calls) spread over the env cores.
        cpu = [s["env_cpu_s"] for s in runs if s.get("env_cpu_s")]
        floor = statistics.median(1000.0 * c / s["env_steps"] for c, s in zip(cpu, runs)) / env_cores if cpu else None
        same = compare([s["trajectories"] for s in runs], [s["trajectories"] for s in samples[base_name]])
        envs_rounds = [paths for s in runs for paths in s.get("fast_paths", [])]
        served = {path: sum(bool(p.get(path)) for p in envs_rounds) for path in dict.fromkeys(k for p in envs_rounds for k in p)}
        missing = [path for path in variant.paths if served.get(path, 0) < len(envs_rounds) or not envs_rounds]
        row = {
            "config": variant.name,
            # per fast path: in how many envs (over rounds, counted in each worker) it served; the
            # configuration's own paths, and those that did not serve in every env
            "fast_paths_served": {"envs": len(envs_rounds), **served},
            "own_fast_paths": list(variant.paths),
            "own_fast_paths_not_served": missing,
            "same_data_as_default": same,
            "env_steps_per_s": statistics.median(rates),
            "spread_env_steps_per_s": max(rates) - min(rates),
            "ms_per_env_step": statistics.median(ms),
            "speedup_vs_default": statistics.median(speedups),
            "breakdown_ms_per_env_step": breakdown,
            "floor_ms_per_env_step": floor,
            "x_floor": statistics.median(ms) / floor if floor else None,
            "renderer_per_worker": runs[-1].get("renderers", []),
            "rounds": [{**{k: v for k, v in s.items() if k != "trajectories"}, "episodes_ended": s["trajectories"].episodes_ended} for s in runs],
            "variant": dataclasses.asdict(variant),
        }
        rows.append(row)
    add_overlap(rows)
    return rows


def add_overlap(rows: list[dict[str, Any]]) -> None:
    """For the rows that overlap the policy with the envs (+Pipeline, +Async): their gain over the
    synchronous row with the same env work (+SkipObs), beside the bound of perfect overlap,
    (env + policy) / max(env, policy), with env and policy the synchronous row's ms per env step."""
    ref = next((r for r in rows if r["variant"]["build"] == "chunked" and r["variant"]["mode"] == "step"), None)
    if ref is None:
        return
    policy = ref["breakdown_ms_per_env_step"].get("policy", 0.0)
    env = max(ref["ms_per_env_step"] - policy, 0.0)
    bound = (env + policy) / max(env, policy) if max(env, policy) > 0 else 1.0
    for r in rows:
        v = r["variant"]
        if v["mode"] in ("pipeline", "dynamic") and v["hard_reset"] == ref["variant"]["hard_reset"] and v["fast_substep"] == ref["variant"]["fast_substep"]:
            gain = ref["ms_per_env_step"] / r["ms_per_env_step"]
            r["overlap"] = {
                "reference": ref["config"], "env_ms_per_env_step": env, "policy_ms_per_env_step": policy,
                "bound_x": bound, "gain_x": gain, "share_of_bound": (gain - 1) / (bound - 1) if bound > 1 else None,
            }


