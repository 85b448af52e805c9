"""Compile LIBERO's control loop into numba's cache: ``python -m fastenv.backends.libero._warm``.

Run in the background by the first process of a machine whose envs would otherwise wait for the
compile (``compiled.ready``), and in the foreground by ``fastenv compile``. It builds one small
LIBERO env (proprioception only, no camera) and steps it until every compiled function its envs
run here has run once, compiled inline (``FASTENV_COMPILE=inline``): numba writes each to its
cache, where the other processes load it from. A function this machine's envs do not run (a fast
path that steps aside here) is recorded as such (``compiled.record_unused``), so no later process
starts a compile for it; the last lines say which fast paths serve.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

from fastenv.core.fast_paths import FastPath

# Tasks tried in turn: one the installed LIBERO distribution has is enough (the compiled
# functions' types do not depend on the task).
TASKS = (("libero_goal", 3), ("libero_10", 0), ("libero_spatial", 0), ("libero_object", 0))
CHUNK = 4
STEPS = 3


def warm() -> tuple[set[str], dict[str, bool], list[str], float]:
    """Compile (or load) every compiled function this machine's envs run: the ones that ran, which
    fast paths served the env, the step-aside lines it printed, and the seconds it took."""
    os.environ["FASTENV_COMPILE"] = "inline"
    import numpy as np

    from fastenv.backends.libero import compiled, make_sim
    from fastenv.core import EnvBatch, Executor

    start = time.perf_counter()
    errors = []
    for suite, task_id in TASKS:
        try:
            env = make_sim(suite, task_id, modalities=("robot0_proprio-state",))
        except Exception as error:  # a suite this distribution does not have
            errors.append(f"{suite}/{task_id}: {type(error).__name__}: {error}")
            continue
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", RuntimeWarning)
                # two episodes: the first step after the second reset is a compiled env step that
                # starts from what robosuite's reset left in the controller (another specialization)
                # chunks as ActionChunk runs them (its executor): sub-steps, one observation at the end
                executor = Executor(EnvBatch([env], owner="fastenv compile"), chunk=CHUNK)
                row, actions = np.zeros(1, dtype=np.int64), np.zeros((1, CHUNK, *env.action_space.shape), dtype=env.action_space.dtype)
                for episode in range(2):
                    executor.reset(row, [episode], None)
                    for _ in range(STEPS):
                        executor.step(row, actions)
            served = env.adapter.fast_paths()
            served.pop(FastPath.SHARED_RENDER_CONTEXT, None)  # this env has no camera: nothing to share
        finally:
            env.close()
        lines = list(dict.fromkeys(str(w.message) for w in said if str(w.message).startswith("fastenv:")))
        kernel = compiled.kernel()
        return (set() if kernel is None else set(kernel._called)), served, lines, time.perf_counter() - start
    raise RuntimeError("no LIBERO task could be built: " + "; ".join(errors))


def main() -> int:
    """Compile, record what this machine's envs do not run, and say what serves. Exit status 1 only
    where nothing could be built; a fast path that steps aside by design is reported, not failed."""
    from fastenv.backends.libero import compiled

    ran, served, lines, seconds = warm()
    kernel = compiled.kernel()
    why = " ".join(lines) or "the env did not reach it"
    if kernel is not None:
        compiled.record_unused(kernel._kernels, {name: why for name in compiled.KERNELS if name not in ran})
    for line in lines:
        print(line, file=sys.stderr)
    serving = [path for path, on in served.items() if on]
    aside = [path for path, on in served.items() if not on]
    head = (f"fastenv: LIBERO's control loop is compiled into numba's cache ({seconds:.1f} s)" if kernel is not None and ran
            else f"fastenv: nothing was compiled ({seconds:.1f} s)")
    print(f"{head}; serving here: {', '.join(serving) or 'none'}" + (f"; stepping aside (same data, robosuite's code): {', '.join(aside)}"
                                                                      if aside else ""))
    if aside:
        print("fastenv doctor says why each steps aside and what to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
