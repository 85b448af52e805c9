"""GAE and n-step returns: numpy vs numba on the same rollouts, side by side.

    python benchmarks/bench_returns.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="128x8,256x64,1024x256", help="T x N rollouts")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--n", type=int, default=5, help="n of the n-step returns")
    parser.add_argument("--out", default="results/bench_returns.json")
    args = parser.parse_args(argv)

    from fastenv.returns import gae, n_step_returns

    rows = []
    for shape in args.shapes.split(","):
        T, N = (int(x) for x in shape.split("x"))
        rng = np.random.default_rng(0)
        r, v = rng.normal(size=(T, N)), rng.normal(size=(T, N))
        term = rng.random((T, N)) < 0.02
        trunc = (rng.random((T, N)) < 0.02) & ~term
        final_v, next_v = rng.normal(size=(T, N)), rng.normal(size=N)
        disc = np.where(term | trunc, 0.99 ** rng.integers(1, 9, (T, N)), 0.99**8)
        fns = {
            "gae": lambda b: gae(r, v, term, trunc, next_v, final_values=final_v, discounts=disc, backend=b),
            f"{args.n}-step": lambda b: n_step_returns(r, v, term, trunc, next_v, n=args.n, final_values=final_v, discounts=disc, backend=b),
        }
        for name, fn in fns.items():
            times = {}
            for backend in ("numpy", "numba"):
                fn(backend)  # compile / warm up
                samples = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    fn(backend)
                    samples.append((time.perf_counter() - start) * 1000)
                times[backend] = statistics.median(samples)
            rows.append(
                {"what": name, "shape": f"{T}x{N}", "numpy_ms": times["numpy"], "numba_ms": times["numba"], "numba_speedup": times["numpy"] / times["numba"]}
            )
    print_table(rows, [("what", "returns", "s"), ("shape", "T x N", "s"), ("numpy_ms", "numpy ms", ".3f"), ("numba_ms", "numba ms", ".3f"), ("numba_speedup", "numba x", ".1f")])
    payload = {"benchmark": "returns", "repeats": args.repeats, "results": rows, "machine": machine()}
    print(f"wrote {write_json(args.out, payload)}")
    return payload


if __name__ == "__main__":
    main()
