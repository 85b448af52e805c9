"""``fastenv eval`` on a GPU server: episodes per hour with a VLA-sized policy on the GPU.

    MUJOCO_GL=egl python benchmarks/bench_eval_gpu.py --seconds 300 --out results/bench_eval_gpu.json

Runs libero_spatial (every task, ``--episodes`` init states each) with openpi's protocol through
``fastenv.eval.run``, the workers on the host's cores (EGL renders on the GPU) and, as the
batched policy, ``fastenv.bench.policies.VLASizedTransformer`` built on the GPU: pi0's shape and cost
(SigLIP tower per view, Gemma-2B backbone, action expert, 10 flow-matching steps) with random
weights. Its output is meaningless, so the actions come from the projection stand-in and
LIBERO's success check fires on ``success_schedule``'s schedule after ``--success-after``
robosuite steps (about a trained pi0's episode length on libero_spatial); the time is the
transformer's, run on each batch. B_max and T_max are chosen by the runner from the first calls
(the fit ``a + b x batch`` and the choice are recorded) unless ``--max-batch``/``--batch-timeout``.

``--seconds S`` starts no episode after S seconds (those running finish): the run fits a time
budget whatever the machine's speed. ``--policies N`` loads N copies of the model, copy ``i`` on
GPU ``i mod (GPUs)``, worker ``w`` served by copy ``w mod N`` (a multi-GPU host).

Prints ``fastenv eval``'s report and writes a JSON: episodes per hour over the whole run and in
its steady part (from the first episode's end to the last episode's start), the minutes 2,000
episodes would take at that rate (plus the time to the first end), the policy's calls, mean
batch, busy share (the share of the run the GPU spent in the policy), the fit and the B_max
chosen, the workers' memory, the GPU's name and memory, and vla-eval's published figure beside
it (2,000 LIBERO episodes in 18 min on one H100, its paper's headline; not run here).

``--device cpu`` is a smoke run for a machine without CUDA: a tiny transformer on the CPU, 64 px
cameras and one 100-step episode by default (tests/test_bench_eval_gpu.py runs it on 1 task x 1 episode).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

VLA_EVAL_PUBLISHED = {"episodes": 2000, "minutes": 18, "gpu": "1 H100", "source": "vla-eval (arXiv 2603.13966), its headline figure"}
EPISODES_TO_EXTRAPOLATE = 2000
AIM_MINUTES = 10  # the aim: 2,000 libero_spatial episodes in 10 minutes on one H100 with 16 cores

# The tiny transformer of the CPU smoke run (VLASizedTransformer's docstring example, two views).
TINY = {"views": 2, "width": 32, "depth": 1, "mlp": 64, "heads": 2, "expert_width": 16, "expert_mlp": 32, "steps": 2,
        "prompt_tokens": 4, "vision_width": 16, "vision_depth": 1, "vision_mlp": 32}
# What a --device differs in where an option is not given: (camera px, policy steps, success after, tasks, episodes per task).
# The smoke run's episode is long enough (about 20 policy calls) for B_max and T_max to be chosen.
DEFAULTS = {"cuda": (None, None, 120, None, 50), "cpu": (64, 100, 100, "0", 1)}


def transformer_policy(chunk: int, device: str, tiny: bool) -> Any:
    """The projection stand-in's actions, after VLASizedTransformer's work on the batch (its time is the call's).

    The model is built on ``device`` directly (2.2B parameters made on the CPU and then moved
    take far longer), and records when its episodes start and end (the steady rate)."""
    import torch

    from fastenv.eval import BatchPolicy, ProjectionPolicy
    from fastenv.bench.policies import VLASizedTransformer

    class TransformerPolicy(BatchPolicy):
        def __init__(self) -> None:
            start = time.perf_counter()
            with torch.device(device):
                self.model = VLASizedTransformer(chunk=chunk, **(TINY if tiny else {}), **({"dtype": torch.float32} if tiny else {}))
            self.build_seconds = time.perf_counter() - start
            self.actions = ProjectionPolicy(rows=chunk)
            if torch.device(device).type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)  # the peak serving takes, not the build's (float32, then cast)
            self.starts: list[float] = []
            self.ends: list[float] = []
            self._sync()
            self.model.run(1)  # warm up the device and its kernels
            self._sync()

        def _sync(self) -> None:
            if torch.device(device).type == "cuda":
                torch.cuda.synchronize(device)

        def start_episode(self, episode: str, meta: Any, worker: int) -> None:
            self.starts.append(time.monotonic())

        def end_episode(self, episode: str, result: Any) -> None:
            self.ends.append(time.monotonic())

        def infer(self, requests: Any) -> list:
            self.model.run(len(requests))
            self._sync()
            return self.actions.infer(requests)

        def describe(self) -> dict:
            name = torch.cuda.get_device_name(torch.device(device)) if torch.device(device).type == "cuda" else "cpu"
            return {"form": f"VLASizedTransformer on {device}", "parameters": self.model.parameters_count(), "chunk": chunk,
                    "device": name, "tiny": tiny, "build_seconds": round(self.build_seconds, 2)}

    return TransformerPolicy()


def steady_rate(start: float, starts: list[float], ends: list[float]) -> dict[str, Any]:
    """Episodes per hour from the first episode's end to the last episode's start (the run's
    steady part: its envs built, no slot idle for want of episodes), and the seconds to the first end."""
    if not ends:
        return {"episodes_per_hour": None, "window_seconds": 0.0, "episodes_in_window": 0, "seconds_to_first_end": None}
    first = min(ends)
    last_start = max(starts) if starts else first
    window = max(0.0, last_start - first)
    inside = sum(first < t <= last_start for t in ends)
    rate = 3600 * inside / window if window > 0 and inside >= 2 else None
    return {"episodes_per_hour": rate, "window_seconds": window, "episodes_in_window": inside, "seconds_to_first_end": first - start}


def minutes_for(episodes: int, rate_per_hour: float | None, lead_seconds: float = 0.0) -> float | None:
    """Minutes ``episodes`` take at ``rate_per_hour``, after ``lead_seconds`` of getting going."""
    if not rate_per_hour:
        return None
    return (lead_seconds + 3600 * (episodes - 1) / rate_per_hour) / 60 if episodes > 1 else lead_seconds / 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda: the pi0-sized transformer on the GPU; cpu: a smoke run with a tiny one (default %(default)s)")
    parser.add_argument("--tasks", default=None, help="libero_spatial's tasks, e.g. 0-9 (default: all; --device cpu: 0)")
    parser.add_argument("--episodes", type=int, default=None, help="episodes per task (default 50; --device cpu: 1)")
    parser.add_argument("--seconds", type=float, default=None, help="start no episode after this many seconds (default: none)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: the cores less one for the policy)")
    parser.add_argument("--envs-per-worker", type=int, default=2)
    parser.add_argument("--max-batch", type=int, default=None, help="B_max (default: chosen from the first calls)")
    parser.add_argument("--batch-timeout", type=float, default=None, help="T_max in seconds (default: chosen with B_max)")
    parser.add_argument("--policies", type=int, default=1, help="copies of the model, copy i on GPU i mod (GPUs) (default 1)")
    parser.add_argument("--chunk", type=int, default=10, help="the policy's chunk (openpi's pi0 on LIBERO: 10, replanning every 5)")
    parser.add_argument("--camera-size", type=int, default=None, help="camera px (default 256, the protocol's; --device cpu: 64)")
    parser.add_argument("--max-steps", type=int, default=None, help="policy steps an episode may take (default: the suite's; cpu: 100)")
    parser.add_argument("--success-after", type=int, default=None, help="robosuite steps before LIBERO's success may fire "
                                                                      "(default 120; --device cpu: 100)")
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--out", default="results/bench_eval_gpu.json")
    args = parser.parse_args(argv)
    import torch

    camera, steps, after, tasks, episodes = DEFAULTS[args.device]
    camera = args.camera_size or camera
    steps = args.max_steps or steps
    after = args.success_after if args.success_after is not None else after
    tasks = args.tasks if args.tasks is not None else tasks
    episodes = args.episodes or episodes
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("no CUDA device: this benchmark is for a GPU server (--device cpu is a smoke run; the 2-core rows are "
                     "bench_eval_scale.py's)")
    if args.policies < 1:
        parser.error(f"--policies must be >= 1, got {args.policies}")
    from _common import machine

    from fastenv.conformance import success_schedule
    from fastenv.eval import EvalConfig, Protocol, parse_tasks, run
    from fastenv.eval.command import report

    os.environ["FASTENV_SUCCESS_AFTER"] = str(after)
    success_schedule.enable()
    cores = len(os.sched_getaffinity(0))
    workers = args.workers or max(1, cores - 1)
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    devices = [f"cuda:{i % gpus}" for i in range(args.policies)] if gpus else ["cpu"] * args.policies
    policies = [transformer_policy(args.chunk, d, tiny=args.device == "cpu") for d in devices]
    protocol = Protocol(**{k: v for k, v in (("camera_size", camera), ("max_steps", steps)) if v is not None})
    start_wall = time.perf_counter()
    start = time.monotonic()
    config = EvalConfig(suites="libero_spatial", tasks=parse_tasks(tasks), episodes=episodes, protocol=protocol, workers=workers,
                        envs_per_worker=args.envs_per_worker, max_batch=args.max_batch, batch_timeout=args.batch_timeout,
                        time_limit=args.seconds, progress=not args.no_progress)
    payload = run(policies if len(policies) > 1 else policies[0], config)
    seconds = time.perf_counter() - start_wall
    print(report(payload, args.out))
    r = payload["run"]
    steady = steady_rate(start, [t for p in policies for t in p.starts], [t for p in policies for t in p.ends])
    overall = r["episodes_per_hour"]
    rate = steady["episodes_per_hour"] or overall
    lead = steady["seconds_to_first_end"] if steady["episodes_per_hour"] else 0.0
    minutes = minutes_for(EPISODES_TO_EXTRAPOLATE, rate, lead or 0.0)
    published = VLA_EVAL_PUBLISHED["episodes"] / (VLA_EVAL_PUBLISHED["minutes"] / 60)
    each = r["policies"]
    given = "given" if args.max_batch is not None or args.batch_timeout is not None else "not chosen: too few calls"
    out = {
        "benchmark": "bench_eval_gpu",
        "command": "python benchmarks/bench_eval_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(), "device": args.device,
        "gpu": [torch.cuda.get_device_name(i) for i in range(gpus)] if gpus else None,
        "gpu_max_memory_mb": [round(torch.cuda.max_memory_allocated(i) / 2**20, 1) for i in range(gpus)] if gpus else None,
        "torch": torch.__version__, "cores": cores, "workers": r["workers"], "env_slots": r["env_slots"],
        "protocol": payload["protocol"], "success_after": after, "time_limit_s": args.seconds, "complete": payload["complete"],
        "stopped": payload["stopped"], "episodes": r["episodes_run"], "seconds": seconds, "success_rate": payload["total"]["success_rate"],
        "episodes_per_hour": overall, "steady": steady,
        "minutes_for_2000": minutes,
        "minutes_for_2000_at_the_whole_runs_rate": minutes_for(EPISODES_TO_EXTRAPOLATE, overall),
        "aim_minutes_for_2000": AIM_MINUTES,
        "policy": r["policy"],
        "policies": [{k: p[k] for k in ("device", "workers", "calls", "mean_batch", "busy_share", "max_batch", "batch_timeout")}
                     | {"fit": (p["tuned"] or {}).get("fit"), "chosen_by": p["tuned"]["by"] if p["tuned"] else given,
                        "bound": (p["tuned"] or {}).get("bound"), "build_seconds": p["build_seconds"]} for p in each],
        "env_steps": r["env_steps"], "camera_renders": r["camera_renders"], "restarts": r["restarts"],
        "worker_max_rss_mb": r["worker_max_rss_mb"],
        "vla_eval_published": {**VLA_EVAL_PUBLISHED, "episodes_per_hour": published},
        "note": "episodes end by LIBERO's success check on a schedule (the policy's weights are random); vla-eval's "
                "figure is its published one (pi0-class model, its own episodes), not run here",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    where = ", ".join(out["gpu"]) if out["gpu"] else "the CPU"
    line = "-" if minutes is None else f"{minutes:.1f} min"
    fit = each[0]["tuned"]["fit"] if each[0]["tuned"] else None
    fit_text = (f"B_max {given}" if fit is None else
                f"fit a {1000 * fit['a']:.1f} ms + b {1000 * fit['b']:.2f} ms x batch" if fit["how"] == "least squares" else
                f"one batch size measured ({fit['batch_sizes'][0]}: {1000 * fit['seconds']:.1f} ms)")
    steady_text = "-" if steady["episodes_per_hour"] is None else f"{steady['episodes_per_hour']:.0f}"
    print(f"fastenv eval: {'-' if overall is None else f'{overall:.0f}'} episodes/hour over the run, "
          f"{steady_text} steady, on {r['workers']} workers "
          f"and {where}; 2,000 episodes: {line} (aim {AIM_MINUTES} min; vla-eval published {VLA_EVAL_PUBLISHED['minutes']} min on "
          f"{VLA_EVAL_PUBLISHED['gpu']}, {published:.0f} episodes/hour); policy: {fit_text}, B_max {each[0]['max_batch']}, "
          f"busy {100 * (r['policy']['busy_share'] or 0):.0f}%; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
