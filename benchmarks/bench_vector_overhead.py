"""Vector-env overhead: 8 CartPole envs, fastenv (2 workers, 1 worker) vs Gymnasium, SB3 and PufferLib.

The vector envs are timed in interleaved rounds (each built, timed and closed in turn) so the
ratios are measured side by side. Writes JSON (medians, ratios, fastenv against PufferLib's best
row when PufferLib is importable) to --out.

    python benchmarks/bench_vector_overhead.py --rounds 5 --steps 2000

``--before REF`` adds fastenv as committed at ``REF`` (its ``src/fastenv`` taken with ``git
archive``), 2 workers, timed in the same rounds by a child process that imports that copy: the
before and after of a change to the vector env, measured in one run.
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
from collections.abc import Callable

import gymnasium as gym
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, print_table, write_json  # noqa: E402

NUM_ENVS = 8


def make_cartpole() -> gym.Env:
    return gym.make("CartPole-v1")


def gymnasium_async():
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    envs = AsyncVectorEnv([make_cartpole] * NUM_ENVS, autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    return envs.step, envs.close


def gymnasium_sync():
    from gymnasium.vector import AutoresetMode, SyncVectorEnv

    envs = SyncVectorEnv([make_cartpole] * NUM_ENVS, autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    return envs.step, envs.close


def fastenv_pipeline(workers: int):
    def build():
        from fastenv.vector import PipelineVectorEnv

        envs = PipelineVectorEnv([make_cartpole] * NUM_ENVS, num_workers=workers)
        envs.reset(seed=0)
        return envs.step, envs.close

    return build


def sb3_subproc():
    from stable_baselines3.common.vec_env import SubprocVecEnv

    envs = SubprocVecEnv([make_cartpole] * NUM_ENVS)
    envs.reset()

    def step(actions):
        envs.step_async(actions)
        return envs.step_wait()

    return step, envs.close


def pufferlib_multiprocessing(num_workers: int) -> Callable:
    # PufferLib's workers and main process busy-wait on shared memory: with as many workers as
    # cores, three spinning processes share two cores; one worker leaves one core to each
    return lambda: _pufferlib("Multiprocessing", num_workers)


def pufferlib_serial():
    return _pufferlib("Serial", None)


def _pufferlib(backend: str, num_workers: int | None):
    """PufferLib's vector env over the 8 CartPole envs, written for pufferlib-core 3.x's API.

    ``make`` takes the env class and its keyword arguments (``env_kwargs``), and calls it as
    ``GymnasiumPufferEnv(env_creator=..., buf=..., seed=...)`` in the worker (``buf``: the env's
    slice of the shared buffers). All the envs in one batch (``batch_size=8``) so that every step
    returns all 8, as the other vector envs do.
    """
    import inspect

    import pufferlib.emulation
    import pufferlib.vector

    cls = getattr(pufferlib.vector, backend)
    kwargs: dict = {}
    if num_workers is not None:
        kwargs.update(num_workers=num_workers, batch_size=NUM_ENVS)
        # 3.x refuses more workers than physical cores unless told (overwork); the 2-worker row
        # is meant to run where psutil counts fewer physical than logical cores too
        if "overwork" in inspect.signature(cls).parameters:
            kwargs["overwork"] = True
    envs = pufferlib.vector.make(
        pufferlib.emulation.GymnasiumPufferEnv, env_kwargs={"env_creator": make_cartpole},
        backend=cls, num_envs=NUM_ENVS, **kwargs,
    )
    envs.reset(seed=0)

    def close():
        envs.close()
        # Multiprocessing.close terminates its workers without waiting for them: wait, so that no
        # spinning worker is left running while the next vector env is timed
        for process in getattr(envs, "processes", []):
            process.join(timeout=10)

    return envs.step, close


CANDIDATES: dict[str, Callable] = {
    "gymnasium AsyncVectorEnv (8 processes)": gymnasium_async,
    "fastenv PipelineVectorEnv (2 workers)": fastenv_pipeline(2),
    "fastenv PipelineVectorEnv (1 worker)": fastenv_pipeline(1),
    "gymnasium SyncVectorEnv (1 process)": gymnasium_sync,
    "SB3 SubprocVecEnv (8 processes)": sb3_subproc,
    "PufferLib Multiprocessing (2 workers)": pufferlib_multiprocessing(2),
    "PufferLib Multiprocessing (1 worker)": pufferlib_multiprocessing(1),
    "PufferLib Serial (1 process)": pufferlib_serial,
}
BASELINE = "gymnasium AsyncVectorEnv (8 processes)"
# The default layout on 2 cores (the most workers up to the CPU count that divide the envs).
FASTENV = "fastenv PipelineVectorEnv (2 workers)"
# fastenv is compared with PufferLib's process-parallel rows; its Serial row (one process, like
# SyncVectorEnv) is listed beside them.
PUFFERLIB = ("PufferLib Multiprocessing (2 workers)", "PufferLib Multiprocessing (1 worker)")


def rate(build: Callable, actions: np.ndarray) -> float:
    """Env-steps per second of ``actions`` after a warm-up of 200 steps; the vector env closed after."""
    step, close = build()
    try:
        for a in actions[:200]:
            step(a)
        start = time.perf_counter()
        for a in actions:
            step(a)
        return NUM_ENVS * len(actions) / (time.perf_counter() - start)
    finally:
        close()


def checkout(ref: str, into: str) -> str:
    """``src/fastenv`` of commit ``ref`` extracted under ``into``; its commit id."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=root, check=True, capture_output=True, text=True)
    archive = subprocess.run(["git", "archive", commit.stdout.strip(), "src/fastenv"], cwd=root, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", into], input=archive.stdout, check=True)
    return commit.stdout.strip()


def child_rate(src: str, workers: int, steps: int) -> float:
    """``rate`` of fastenv's vector env with ``workers`` workers in a child process that imports
    fastenv from ``src``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", str(workers), "--steps", str(steps)],
                          env=env, check=True, capture_output=True, text=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["fastenv"].startswith(os.path.realpath(src)):
        raise RuntimeError(f"the child imported fastenv from {result['fastenv']}, not from {src}")
    return result["rate"]


def _child(workers: int, steps: int) -> None:
    import fastenv

    actions = np.random.default_rng(0).integers(0, 2, (steps, NUM_ENVS))
    value = rate(fastenv_pipeline(workers), actions)
    print(json.dumps({"rate": value, "fastenv": os.path.realpath(fastenv.__file__)}))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000, help="vector steps per config per round")
    parser.add_argument("--out", default="results/bench_vector_overhead.json")
    parser.add_argument("--before", metavar="REF", help="also time fastenv as committed at this git ref (2 workers)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)  # internal: time fastenv from PYTHONPATH, print JSON
    args = parser.parse_args(argv)
    if args.child is not None:
        _child(args.child, args.steps)
        return {}
    before = tempfile.TemporaryDirectory() if args.before else None
    candidates = dict(CANDIDATES)
    before_commit = None
    if before is not None:
        before_commit = checkout(args.before, before.name)
        src = os.path.join(before.name, "src")
        candidates[f"fastenv PipelineVectorEnv (2 workers), before ({before_commit[:7]})"] = lambda: child_rate(src, 2, args.steps)

    # Each round builds, warms up, times and closes every vector env in turn, so no idle (or
    # busy-polling) worker of one config runs while another is timed.
    actions = np.random.default_rng(0).integers(0, 2, (args.steps, NUM_ENVS))
    samples: dict[str, list[float]] = {}
    skipped: dict[str, str] = {}
    for r in range(args.rounds):
        for name, build in candidates.items():
            if name in skipped:
                continue
            try:
                value = build() if name not in CANDIDATES else rate(build, actions)
            except ImportError as exc:
                skipped[name] = f"not installed: {exc}"
                print(f"skipping {name}: {skipped[name]}")
                continue
            samples.setdefault(name, []).append(value)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n.split(' (')[0]} {s[-1]:,.0f}" for n, s in samples.items()), flush=True)

    base = statistics.median(samples[BASELINE])
    rows = [
        {
            "vector env": name,
            "env_steps_per_s": statistics.median(s),
            "x_async": statistics.median(s) / base,
            "samples": s,
        }
        for name, s in samples.items()
    ]
    print()
    print_table(rows, [("vector env", "vector env", "s"), ("env_steps_per_s", "env-steps/s", ",.0f"), ("x_async", "x AsyncVectorEnv", ".2f")])
    payload = {
        "benchmark": "vector_overhead",
        "num_envs": NUM_ENVS,
        "rounds": args.rounds,
        "steps_per_round": args.steps,
        "results": rows,
        "skipped": skipped,
        "versions": _versions(),
        "fastenv_vs_async": statistics.median(samples[FASTENV]) / base,
        # Each round times both back to back: the median of per-round ratios pairs like with like.
        "fastenv_vs_async_per_round": statistics.median(f / a for f, a in zip(samples[FASTENV], samples[BASELINE])),
        "machine": machine(),
    }
    print(
        f"\nfastenv / gymnasium AsyncVectorEnv: {payload['fastenv_vs_async']:.2f}x of medians, "
        f"{payload['fastenv_vs_async_per_round']:.2f}x median of per-round ratios"
    )
    puffer = [name for name in PUFFERLIB if name in samples]
    if puffer:
        best = max(puffer, key=lambda name: statistics.median(samples[name]))
        payload["pufferlib_best"] = best
        payload["fastenv_vs_pufferlib_best"] = statistics.median(samples[FASTENV]) / statistics.median(samples[best])
        payload["fastenv_vs_pufferlib_best_per_round"] = statistics.median(f / p for f, p in zip(samples[FASTENV], samples[best]))
        print(
            f"fastenv / {best}: {payload['fastenv_vs_pufferlib_best']:.2f}x of medians, "
            f"{payload['fastenv_vs_pufferlib_best_per_round']:.2f}x median of per-round ratios"
        )
    if before_commit is not None:
        name = next(n for n in samples if n.endswith(f"before ({before_commit[:7]})"))
        payload["before_commit"] = before_commit
        payload["fastenv_vs_before_per_round"] = statistics.median(f / b for f, b in zip(samples[FASTENV], samples[name]))
        print(f"fastenv / fastenv at {before_commit[:7]}: {payload['fastenv_vs_before_per_round']:.2f}x median of per-round ratios")
        before.cleanup()
    print(f"wrote {write_json(args.out, payload)}")
    return payload


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("gymnasium", "stable_baselines3"):
        try:
            module = __import__(name)
            out[name] = getattr(module, "__version__", None) or metadata.version(name)
        except Exception:  # not installed
            out[name] = None
    # PufferLib ships as pufferlib-core (3.x wheels) or pufferlib (sources up to 3.0); both import
    # as pufferlib: the version and the distribution of the one imported
    out["pufferlib"] = out["pufferlib_distribution"] = None
    try:
        import pufferlib
    except ImportError:  # not installed
        return out
    for dist in ("pufferlib-core", "pufferlib"):
        try:
            files = metadata.distribution(dist).locate_file("pufferlib/__init__.py")
        except metadata.PackageNotFoundError:
            continue
        if os.path.realpath(str(files)) == os.path.realpath(pufferlib.__file__):
            out["pufferlib"], out["pufferlib_distribution"] = metadata.version(dist), dist
            return out
    out["pufferlib"] = getattr(pufferlib, "__version__", None)  # on PYTHONPATH, no metadata
    return out


if __name__ == "__main__":
    main()
