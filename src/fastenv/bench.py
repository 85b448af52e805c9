"""`fastenv bench`: the ablation Default -> +Slim -> +SkipObs -> +Pipeline -> +Async, with a real policy.

Each configuration adds one thing to the previous one:

- Default: LIBERO's stock observation set (two cameras, all state, an observation every step),
  one action per step, in Gymnasium's AsyncVectorEnv (one process per env, no thread limits).
- +Slim: headless, pruned to one camera + proprioception, in fastenv's vector env (workers hold
  several envs, threads capped).
- +SkipObs: action chunks of K, one observation per chunk.
- +Pipeline: two pipeline stages; the policy runs on one while the other steps.
- +Async: dynamic batching; the policy serves whichever envs are ready.

The policy (``fastenv.policy.ChunkPolicy``: a CNN over the camera image and an MLP over
proprioception, emitting an action chunk and a value) runs in this process, on the GPU when there
is one, on one CPU thread otherwise. Episodes are cut at ``episode_steps`` so resets are part of
every rollout, as in training.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_KEY, STATE_KEY = "agentview_image", "robot0_proprio-state"
SLIM_MODALITIES = (IMAGE_KEY, STATE_KEY)


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
    steps: int = 192
    episode_steps: int = 160
    max_batch: int | None = None
    batch_timeout: float = 0.05
    out: str = "results"
    seed: int = 0

    @classmethod
    def quick(cls, **overrides: Any) -> BenchConfig:
        """A smoke run: 2 small envs, a few steps, no reset inside the timed window."""
        base = dict(num_envs=2, workers=1, chunk=4, stages=2, camera_size=64, steps=16, episode_steps=64)
        base.update(overrides)
        return cls(**base)

    def check(self) -> None:
        from fastenv.vector import Layout

        Layout(self.num_envs, self.workers, self.stages)  # raises a clear ValueError on a bad layout
        for name in ("num_envs", "workers", "chunk", "stages", "camera_size", "steps", "episode_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class Variant:
    """One configuration of the ablation."""

    name: str
    vector: str  # "async" (gymnasium AsyncVectorEnv) or "fastenv"
    chunk: int | None
    modalities: tuple[str, ...] | None
    stages: int = 1
    mode: str = "step"  # "step", "pipeline" or "dynamic"


def variants(cfg: BenchConfig) -> list[Variant]:
    return [
        Variant("Default", "async", None, None),
        Variant("+Slim", "fastenv", None, SLIM_MODALITIES),
        Variant(f"+SkipObs (chunk {cfg.chunk})", "fastenv", cfg.chunk, SLIM_MODALITIES),
        Variant(f"+Pipeline ({cfg.stages} stages)", "fastenv", cfg.chunk, SLIM_MODALITIES, cfg.stages, "pipeline"),
        Variant("+Async (dynamic batching)", "fastenv", cfg.chunk, SLIM_MODALITIES, 1, "dynamic"),
    ]


def _env_fn(cfg: BenchConfig, variant: Variant) -> Callable[[], Any]:
    from fastenv.backends.libero import make_env

    return functools.partial(
        make_env,
        cfg.suite,
        cfg.task_id,
        chunk=variant.chunk,
        modalities=variant.modalities,
        camera_size=cfg.camera_size,
        max_episode_steps=cfg.episode_steps,
    )


def _build_key(variant: Variant) -> tuple[Any, ...]:
    # +SkipObs, +Pipeline and +Async differ only in how they are driven: one vector env, built
    # with the pipeline's stages, serves the three (step() and env_ids ignore the stages).
    return (variant.vector, variant.chunk, variant.modalities)


def _build(cfg: BenchConfig, variant: Variant) -> Any:
    fn = _env_fn(cfg, variant)
    if variant.vector == "async":
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode

        # spawn: EGL contexts do not survive fork, Gymnasium's default start method on Linux.
        return AsyncVectorEnv([fn] * cfg.num_envs, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
    from fastenv.vector import PipelineVectorEnv

    return PipelineVectorEnv([fn] * cfg.num_envs, num_workers=cfg.workers, pipeline_stages=cfg.stages)


class _CpuClock:
    """CPU seconds used by this process and all its descendants."""

    def __init__(self) -> None:
        import psutil

        self.root = psutil.Process()

    def __call__(self) -> float:
        total = 0.0
        for proc in [self.root, *self.root.children(recursive=True)]:
            try:
                times = proc.cpu_times()
                total += times.user + times.system
            except Exception:  # a process that just exited
                continue
        return total


def _pick(obs: dict[str, np.ndarray], ids: slice | np.ndarray) -> dict[str, np.ndarray]:
    return {IMAGE_KEY: obs[IMAGE_KEY][ids], STATE_KEY: obs[STATE_KEY][ids]}


def run_variant(cfg: BenchConfig, variant: Variant, envs: Any, device: Any, progress: Any = None) -> dict[str, Any]:
    """Warm up and time one configuration on ``envs``; returns its measurements."""
    import torch

    from fastenv.policy import ChunkPolicy

    chunk = variant.chunk or 1
    image_shape = envs.single_observation_space[IMAGE_KEY].shape
    state_dim = envs.single_observation_space[STATE_KEY].shape[0]
    torch.manual_seed(cfg.seed)
    policy = ChunkPolicy(image_shape, state_dim, chunk, 7).to(device).eval()

    def act(obs: dict[str, np.ndarray]) -> np.ndarray:
        actions, _ = policy.act(obs, IMAGE_KEY, STATE_KEY, device)
        return actions if variant.chunk else actions[:, 0]

    n = cfg.num_envs
    target = cfg.steps * n  # simulator steps to time
    obs, _ = envs.reset(seed=cfg.seed)
    for _ in range(2):  # warm-up: first renders, first policy calls
        obs, *_ = envs.step(act(obs))
    clock = _CpuClock()
    cpu0, start = clock(), time.perf_counter()
    done = 0
    if variant.mode == "step":
        while done < target:
            obs, *_ = envs.step(act(obs))
            done += n * chunk
            if progress is not None:
                progress.update(n * chunk)
    elif variant.mode == "pipeline":
        m = envs.layout.stage_size
        for k in range(variant.stages):
            envs.send(act(_pick(obs, slice(k * m, (k + 1) * m))), stage=k)
        while done < target:
            for k in range(variant.stages):
                stage_obs, *_ = envs.recv(stage=k)
                done += m * chunk
                if progress is not None:
                    progress.update(m * chunk)
                envs.send(act(stage_obs), stage=k)  # the other stages step meanwhile
    else:
        batch = cfg.max_batch or max(1, n // 2)
        envs.send(act(obs), env_ids=np.arange(n))
        while done < target:
            batch_obs, _, _, _, infos = envs.recv(max_batch=batch, timeout=cfg.batch_timeout)
            ids = infos["env_ids"]
            done += len(ids) * chunk
            if progress is not None:
                progress.update(len(ids) * chunk)
            envs.send(act(batch_obs), env_ids=ids)
    wall = time.perf_counter() - start
    cpu = clock() - cpu0
    # Steps still in flight are neither counted nor timed; collect them before closing.
    if variant.mode == "pipeline":
        for k in range(variant.stages):
            envs.recv(stage=k)
    elif variant.mode == "dynamic":
        while len(envs.in_flight()):
            envs.recv(max_batch=n)
    return {
        "config": variant.name,
        "env_steps": done,
        "seconds": wall,
        "ms_per_env_step": wall * 1000.0 / done,
        "env_steps_per_s": done / wall,
        "cpu_cores_busy_per_env": cpu / wall / n,
        "variant": dataclasses.asdict(variant),
    }


def _device(name: str) -> Any:
    import torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        torch.set_num_threads(1)  # the policy gets one core; the rest are the simulators'
    return torch.device(name)


def run(cfg: BenchConfig, only: list[str] | None = None) -> dict[str, Any]:
    """Run the ablation; writes ``fastenv_bench.json`` and ``fastenv_bench.png`` in ``cfg.out``."""
    from tqdm import tqdm

    cfg.check()
    device = _device(cfg.device)
    chosen = [v for v in variants(cfg) if only is None or v.name.split(" ")[0] in only]
    rows = []
    envs, key = None, None
    try:
        with tqdm(total=cfg.steps * cfg.num_envs * len(chosen), unit="step", desc="fastenv bench", mininterval=1.0) as progress:
            for variant in chosen:
                progress.set_postfix_str(variant.name)
                if _build_key(variant) != key:
                    if envs is not None:
                        envs.close()
                    envs, key = _build(cfg, variant), _build_key(variant)
                rows.append(run_variant(cfg, variant, envs, device, progress))
    finally:
        if envs is not None:
            envs.close()
    base = rows[0]["ms_per_env_step"]
    for row in rows:
        row["speedup_vs_default"] = base / row["ms_per_env_step"]
    payload = {
        "benchmark": "fastenv bench",
        "config": dataclasses.asdict(cfg),
        "policy_device": str(device),
        "results": rows,
        "machine": {
            "cpu_count": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
    }
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "fastenv_bench.json").write_text(json.dumps(payload, indent=2))
    payload["files"] = [str(out / "fastenv_bench.json"), str(_plot(rows, out / "fastenv_bench.png", cfg))]
    return payload


def format_table(rows: list[dict[str, Any]]) -> str:
    headers = ["configuration", "ms/env step", "env-steps/s", "x Default", "CPU cores busy/env"]
    cells = [
        [r["config"], f"{r['ms_per_env_step']:.1f}", f"{r['env_steps_per_s']:.1f}", f"{r['speedup_vs_default']:.2f}", f"{r['cpu_cores_busy_per_env']:.2f}"]
        for r in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    return "\n".join(lines)


def _plot(rows: list[dict[str, Any]], path: Path, cfg: BenchConfig) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["config"] for r in rows]
    values = [r["env_steps_per_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    bars = ax.bar(range(len(rows)), values, color=["#9e9e9e"] + ["#1f77b4"] * (len(rows) - 1))
    for bar, row in zip(bars, rows):
        ax.annotate(f"{row['speedup_vs_default']:.1f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom")
    ax.set_xticks(range(len(rows)), names, rotation=15, ha="right")
    ax.set_ylabel("env-steps/s (higher is better)")
    ax.set_title(
        f"fastenv bench: LIBERO {cfg.suite} task {cfg.task_id}, {cfg.num_envs} envs, "
        f"{cfg.camera_size}px, {os.cpu_count()} CPU cores"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
