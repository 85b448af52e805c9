"""``fastenv eval`` on a GPU server: episodes per hour with a VLA-sized policy on the GPU.

    python benchmarks/bench_eval_gpu.py --episodes 6 --out results/bench_eval_gpu.json

Runs libero_spatial (every task, ``--episodes`` init states each) with openpi's protocol through
``fastenv.eval.run``, the workers on the host's cores (EGL renders on the GPU) and, as the
batched policy, ``fastenv.policy.VLASizedTransformer`` on CUDA: pi0's shape and cost (SigLIP
tower per view, Gemma-2B backbone, action expert, 10 flow-matching steps) with random weights.
Its output is meaningless, so the actions come from the projection stand-in and LIBERO's success
check fires on ``success_schedule``'s schedule after ``--success-after`` steps (about a trained
pi0's episode length on libero_spatial); the time is the transformer's, run on each batch.

Prints and writes episodes per hour, the policy's calls, mean batch and busy share (the share of
the run the GPU spent in the policy), the workers' memory, and vla-eval's published figure beside
it (2,000 LIBERO episodes in 18 min on one H100, its paper's headline). Sized to finish in under
8 minutes on the 16-core H100 machine; on a machine without CUDA it refuses to start.
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


class TransformerPolicy:
    """The projection stand-in's actions, after VLASizedTransformer's work on the batch (CUDA)."""

    def __new__(cls, chunk: int) -> Any:
        import torch

        from fastenv.eval import BatchPolicy, ProjectionPolicy
        from fastenv.policy import VLASizedTransformer

        class _Policy(BatchPolicy):
            def __init__(self) -> None:
                self.model = VLASizedTransformer(chunk=chunk).to("cuda")
                self.actions = ProjectionPolicy(rows=chunk)
                self.model.run(1)  # warm up CUDA and the kernels
                torch.cuda.synchronize()

            def infer(self, requests: Any) -> list:
                self.model.run(len(requests))
                torch.cuda.synchronize()
                return self.actions.infer(requests)

            def describe(self) -> dict:
                return {"form": "VLASizedTransformer on CUDA", "parameters": self.model.parameters_count(), "chunk": chunk,
                        "device": torch.cuda.get_device_name(0)}

        return _Policy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=6, help="episodes per task (libero_spatial: 10 tasks)")
    parser.add_argument("--workers", type=int, default=None, help="worker processes (default: the cores less one for the policy)")
    parser.add_argument("--envs-per-worker", type=int, default=2)
    parser.add_argument("--chunk", type=int, default=10, help="the policy's chunk (openpi's pi0 on LIBERO: 10, replanning every 5)")
    parser.add_argument("--success-after", type=int, default=120, help="robosuite steps before LIBERO's success may fire")
    parser.add_argument("--out", default="results/bench_eval_gpu.json")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        parser.error("no CUDA device: this benchmark is for a GPU server (the 2-core rows are bench_eval_scale.py's)")
    from _common import machine

    from fastenv.conformance import success_schedule
    from fastenv.eval import run
    from fastenv.eval.command import report

    os.environ["FASTENV_SUCCESS_AFTER"] = str(args.success_after)
    success_schedule.enable()
    cores = len(os.sched_getaffinity(0))
    workers = args.workers or max(1, cores - 1)
    policy = TransformerPolicy(args.chunk)
    start = time.perf_counter()
    payload = run(policy, "libero_spatial", episodes=args.episodes, workers=workers, envs_per_worker=args.envs_per_worker,
                  batch_timeout=0.02, progress=True)
    seconds = time.perf_counter() - start
    print(report(payload, args.out))
    r = payload["run"]
    published = VLA_EVAL_PUBLISHED["episodes"] / (VLA_EVAL_PUBLISHED["minutes"] / 60)
    out = {
        "command": "python benchmarks/bench_eval_gpu.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(), "gpu": torch.cuda.get_device_name(0), "cores": cores, "workers": workers,
        "episodes": r["episodes_run"], "seconds": seconds, "episodes_per_hour": r["episodes_per_hour"],
        "policy": r["policy"], "env_steps": r["env_steps"], "camera_renders": r["camera_renders"],
        "worker_max_rss_mb": r["worker_max_rss_mb"], "success_rate": payload["total"]["success_rate"],
        "vla_eval_published": {**VLA_EVAL_PUBLISHED, "episodes_per_hour": published},
        "note": "episodes end by LIBERO's success check on a schedule (the policy's weights are random); vla-eval's "
                "figure is its published one (pi0-class model, its own episodes), not run here",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"fastenv eval: {r['episodes_per_hour']:.0f} episodes/hour on {cores} cores and {out['gpu']}; vla-eval published "
          f"{published:.0f} episodes/hour ({VLA_EVAL_PUBLISHED['episodes']} in {VLA_EVAL_PUBLISHED['minutes']} min on "
          f"{VLA_EVAL_PUBLISHED['gpu']}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
