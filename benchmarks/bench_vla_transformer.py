"""What a VLA-sized transformer costs per call on a GPU: latency against batch, and its a + b x batch.

``fastenv.bench.policies.VLASizedTransformer`` (random weights, bf16: a SigLIP-sized vision tower per view,
a Gemma-2B-sized backbone over the image and prompt tokens, an action expert denoising the chunk
over 10 steps) is timed with CUDA events at each batch size (median of ``--repeats`` calls after
warm-ups), a line a + b x batch is fitted, and set beside the presets of ``fastenv.policy_cost``
(whose per-call / per-sample split is an assumption, 10% / 90%, that this measures on one GPU).

    python benchmarks/bench_vla_transformer.py --out results/bench_vla_transformer.json   # needs CUDA
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
from _common import machine, write_json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--chunks", type=int, nargs="+", default=[32, 50])
    parser.add_argument("--views", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", default="results/bench_vla_transformer.json")
    args = parser.parse_args()
    import torch

    from fastenv.bench.policies import VLASizedTransformer
    from fastenv.policy_cost import PRESETS

    if not torch.cuda.is_available():
        raise SystemExit("bench_vla_transformer: needs a CUDA GPU (the model is served in bf16 on one)")
    rows = []
    for chunk in args.chunks:
        torch.manual_seed(0)
        with torch.device("cuda"):  # made on the GPU, not made on the CPU and moved
            model = VLASizedTransformer(chunk=chunk, views=args.views)
        ms = {}
        for batch in args.batches:
            for _ in range(3):
                model.run(batch)
            times = []
            for _ in range(args.repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                model.run(batch)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end))
            ms[batch] = statistics.median(times)
            print(f"chunk {chunk}, batch {batch}: {ms[batch]:.1f} ms (spread {max(times) - min(times):.1f})", flush=True)
        b, a = np.polyfit(list(ms), list(ms.values()), 1)
        rows.append({"chunk": chunk, "views": args.views, "parameters": model.parameters_count(), "ms_by_batch": ms,
                     "fit_per_call_ms": float(a), "fit_per_sample_ms": float(b),
                     "per_sample_share_at_batch_1": float(b / (a + b))})
        del model
        torch.cuda.empty_cache()
    payload = {"benchmark": "bench_vla_transformer", "device": torch.cuda.get_device_name(), "torch": torch.__version__,
               "machine": machine(), "args": vars(args), "results": rows,
               "presets": {k: {"per_call_s": v.per_call_s, "per_sample_s": v.per_sample_s, "chunk": v.chunk} for k, v in PRESETS.items()}}
    for r in rows:
        print(f"chunk {r['chunk']}: {r['fit_per_call_ms']:.1f} ms + {r['fit_per_sample_ms']:.1f} ms x batch "
              f"({100 * r['per_sample_share_at_batch_1']:.0f}% per sample at batch 1), {r['parameters'] / 1e9:.2f}B parameters")
    print(f"wrote {write_json(args.out, payload)}")


if __name__ == "__main__":
    main()
