"""Compile LIBERO's control loop into numba's cache: ``python -m fastenv.backends.libero._warm``.

Run in the background by the first process of a machine whose envs would otherwise wait for the
compile (``compiled.ready``), and in the foreground by ``fastenv compile``. It builds one small
LIBERO env (proprioception only, no camera) and steps it until every compiled function has run
once, compiled inline (``FASTENV_COMPILE=inline``): numba writes each to its cache, where the
other processes load it from.
"""

from __future__ import annotations

import os
import sys
import time

# Tasks tried in turn: one the installed LIBERO distribution has is enough (the compiled
# functions' types do not depend on the task).
TASKS = (("libero_goal", 3), ("libero_10", 0), ("libero_spatial", 0), ("libero_object", 0))
CHUNK = 4
STEPS = 3


def warm() -> tuple[set[str], float]:
    """Compile (or load) every compiled function; the ones that ran and the seconds it took."""
    os.environ["FASTENV_COMPILE"] = "inline"
    import gymnasium as gym
    import numpy as np

    import fastenv  # noqa: F401  (registers fastenv/Libero-v0)
    from fastenv.backends.libero import compiled

    start = time.perf_counter()
    errors = []
    for suite, task_id in TASKS:
        try:
            env = gym.make("fastenv/Libero-v0", suite=suite, task_id=task_id, chunk=CHUNK, modalities=("robot0_proprio-state",))
        except Exception as error:  # a suite this distribution does not have
            errors.append(f"{suite}/{task_id}: {type(error).__name__}: {error}")
            continue
        try:
            env.reset(seed=0)
            for _ in range(STEPS):
                env.step(np.zeros(env.action_space.shape, dtype=env.action_space.dtype))
        finally:
            env.close()
        kernel = compiled.kernel()
        return (set() if kernel is None else set(kernel._called)), time.perf_counter() - start
    raise RuntimeError("no LIBERO task could be built: " + "; ".join(errors))


def main() -> int:
    from fastenv.backends.libero.compiled import KERNELS

    ran, seconds = warm()
    missing = [name for name in KERNELS if name not in ran]
    if missing:
        print(f"fastenv: the compiled control loop's {missing} did not run (it is not used here)", file=sys.stderr)
        return 1
    print(f"fastenv: LIBERO's control loop is compiled into numba's cache ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
