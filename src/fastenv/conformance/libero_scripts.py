"""openpi's and OpenVLA-OFT's LIBERO evaluation scripts: unchanged, and on fastenv.

Each script runs three ways in this process, with the same stand-in policy in place of its model
(server): unchanged, on LIBERO's own ``OffScreenRenderEnv``; with the one-line change (fastenv's
``OffScreenRenderEnv``); and with the observation also prepared only when the policy asks for a
chunk (``fastenv.integrations.libero_eval.patch``). For every episode it compares, exactly, every
action sent to ``env.step``, the success and the number of steps; it counts the camera images
each run rendered and the frames each episode's video would keep (the videos are not written).

The stand-in policy reads both images and the state it is given (a fixed random projection of
them), so an observation prepared wrongly would change its actions. LIBERO's success check fires
on ``success_schedule``'s schedule (random actions never succeed otherwise).

The scripts are not part of fastenv: give their checkouts,
``python -m fastenv.conformance.libero_scripts --openpi OPENPI_ROOT --oft OPENVLA_OFT_ROOT --out results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.conformance import success_schedule
from fastenv.conformance.rlinf import command

VARIANTS = ("unchanged", "fastenv", "fastenv, renders read")


class _Recorder:
    """An env as the script sees it, recording each episode's actions and ends."""

    def __init__(self, env: Any, log: list[dict[str, Any]]) -> None:
        self._env, self._log = env, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def set_init_state(self, state: Any) -> Any:
        self._log.append({"actions": [], "success": False})
        return self._env.set_init_state(state)

    def step(self, action: Any) -> Any:
        obs, reward, done, info = self._env.step(action)
        if self._log:
            self._log[-1]["actions"].append(np.asarray(action, dtype=np.float64))
            self._log[-1]["success"] = self._log[-1]["success"] or bool(done)
        return obs, reward, done, info


def _features(images: list[np.ndarray], state: np.ndarray) -> np.ndarray:
    pooled = [np.asarray(i, dtype=np.float64).reshape(8, i.shape[0] // 8, 8, i.shape[1] // 8, 3).mean(axis=(1, 3)).ravel() / 255 for i in images]
    return np.concatenate([*pooled, np.asarray(state, dtype=np.float64)])


def _chunk(features: np.ndarray, rows: int) -> np.ndarray:
    w = np.random.default_rng(0).normal(size=(rows * 7, features.size)) / np.sqrt(features.size)
    return np.tanh(w @ features).reshape(rows, 7)


class _Suites:
    """LIBERO's benchmark module with each suite cut to its first ``tasks`` tasks; a suite named in
    ``tasks_of`` (a standard one) gives another's tasks and init states (a perturbed suite's), as
    LIBERO-PRO's README has the loops evaluate its suites: the perturbed suite's tasks, under the
    name, and so the step budget, of its base suite."""

    def __init__(self, benchmark: Any, tasks: int, tasks_of: dict[str, str] | None = None) -> None:
        self._benchmark, self._tasks, self._tasks_of = benchmark, tasks, dict(tasks_of or {})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._benchmark, name)

    def get_benchmark_dict(self) -> dict[str, Any]:
        tasks = self._tasks

        def cut(cls: Any) -> Any:
            def make() -> Any:
                suite = cls()
                suite.n_tasks = min(tasks, suite.n_tasks)
                return suite
            return make

        suites = self._benchmark.get_benchmark_dict()
        return {name: cut(suites[self._tasks_of.get(name, name)]) for name in suites}


@contextlib.contextmanager
def _modules(stubs: dict[str, types.ModuleType], path: list[str]) -> Iterator[None]:
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    sys.path[:0] = path
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
        for p in path:
            sys.path.remove(p)


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    return module


def _exec_script(name: str, path: Path, source: str) -> types.ModuleType:
    """The script, run as a module named ``name`` (its dataclasses look their module up)."""
    module = _module(name, __file__=str(path))
    sys.modules[name] = module
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 (the script under test)
    return module


def _env_factory(variant: str, log: list[dict[str, Any]], sims: list[Any]) -> Any:
    from libero.libero import envs

    from fastenv.integrations.libero_eval import OffScreenRenderEnv

    stock = envs.OffScreenRenderEnv

    def make(**kwargs: Any) -> Any:
        # the scripts build an env per task and leave the last open (a GB each): close it here,
        # keeping what it counted
        for i, previous in enumerate(sims):
            if not isinstance(previous, types.SimpleNamespace):
                sims[i] = types.SimpleNamespace(camera_renders=getattr(previous, "camera_renders", 0))
                previous.close()
        env = stock(**kwargs) if variant == "unchanged" else OffScreenRenderEnv(**kwargs)
        sims.append(env)
        return _Recorder(env, log)

    return make


def run_openpi(root: Path, variant: str, *, suite: str, tasks: int, trials: int, replan_steps: int = 5,
               policy: Any = None, tasks_of: str | None = None) -> dict[str, Any]:
    """openpi's examples/libero/main.py, one of ``VARIANTS``; ``policy(element) -> chunk`` answers
    for its model server (default: the projection of both images and the state, 10 rows);
    ``tasks_of``: a perturbed suite whose tasks run under ``suite``'s name and budget (``_Suites``)."""
    from libero.libero import benchmark

    from fastenv.integrations.libero_eval import patch

    source = (root / "examples" / "libero" / "main.py").read_text()
    if variant == "fastenv, renders read":
        source = patch(source, "openpi")
    log: list[dict[str, Any]] = []
    sims: list[Any] = []
    frames: list[int] = []

    class Client:
        def __init__(self, host: str, port: int) -> None:
            pass

        def infer(self, element: dict) -> dict:
            if policy is not None:
                return {"actions": policy(element)}
            features = _features([element["observation/image"], element["observation/wrist_image"]], element["observation/state"])
            return {"actions": _chunk(features, 10)}

    client_src = str(root / "packages" / "openpi-client" / "src")
    imageio = _module("imageio", mimwrite=lambda path, images, fps=None: frames.append(len(images)))
    with _modules({"imageio": imageio}, [client_src]), tempfile.TemporaryDirectory() as out:
        module = _exec_script("openpi_libero_main", root / "examples" / "libero" / "main.py", source)
        module._websocket_client_policy = _module("ws", WebsocketClientPolicy=Client)
        module.OffScreenRenderEnv = _env_factory(variant, log, sims)
        module.benchmark = _Suites(benchmark, tasks, {suite: tasks_of} if tasks_of else None)
        start = time.perf_counter()
        module.eval_libero(module.Args(task_suite_name=suite, num_trials_per_task=trials, replan_steps=replan_steps, video_out_path=out))
        seconds = time.perf_counter() - start
    return {"episodes": log, "video frames": frames, "seconds": seconds, "renders": _closed(sims, _renders(sims, log, variant))}


def run_oft(root: Path, variant: str, *, suite: str, tasks: int, trials: int) -> dict[str, Any]:
    """OpenVLA-OFT's experiments/robot/libero/run_libero_eval.py, one of ``VARIANTS`` (its model
    stack stubbed: prismatic's constants are its own file; TensorFlow's resize is PIL's here)."""
    import importlib.util

    from libero.libero import benchmark
    from PIL import Image

    from fastenv.integrations.libero_eval import patch

    log: list[dict[str, Any]] = []
    sims: list[Any] = []
    frames: list[int] = []

    def resize_image_for_policy(img: np.ndarray, size: Any) -> np.ndarray:
        size = (size, size) if isinstance(size, int) else tuple(size)
        return np.asarray(Image.fromarray(img).resize(size, Image.LANCZOS))

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the model stack is not loaded in this comparison")

    constants_spec = importlib.util.spec_from_file_location("prismatic.vla.constants", root / "prismatic" / "vla" / "constants.py")
    constants = importlib.util.module_from_spec(constants_spec)
    constants_spec.loader.exec_module(constants)
    stubs = {
        "prismatic": _module("prismatic", __path__=[]), "prismatic.vla": _module("prismatic.vla", __path__=[]), "prismatic.vla.constants": constants,
        "tensorflow": _module("tensorflow"), "wandb": _module("wandb"), "draccus": _module("draccus", wrap=lambda *a, **k: (lambda f: f)),
        "experiments.robot.openvla_utils": _module(
            "experiments.robot.openvla_utils", resize_image_for_policy=resize_image_for_policy,
            **{name: unavailable for name in ("get_action_head", "get_noisy_action_projector", "get_processor", "get_proprio_projector",
                                              "get_vla", "get_vla_action", "get_action_from_server")}),
    }
    script = root / "experiments" / "robot" / "libero" / "run_libero_eval.py"
    source = script.read_text()
    if variant == "fastenv, renders read":
        source = patch(source, "oft")
    with _modules(stubs, [str(root)]), tempfile.TemporaryDirectory() as out:
        for name in [m for m in sys.modules if m == "experiments" or m.startswith("experiments.") and m != "experiments.robot.openvla_utils"]:
            del sys.modules[name]
        cwd = os.getcwd()
        os.chdir(out)
        try:
            module = _exec_script("oft_run_libero_eval", script, source)
            utils = sys.modules["experiments.robot.libero.libero_utils"]
            utils.OffScreenRenderEnv = _env_factory(variant, log, sims)
            module.benchmark = _Suites(benchmark, tasks)
            module.initialize_model = lambda cfg: (None, None, None, None, None)
            module.save_rollout_video = lambda images, idx, success, task_description, log_file=None: frames.append(len(images))

            def get_action(cfg: Any, model: Any, observation: dict, task_description: str, **kwargs: Any) -> list[np.ndarray]:
                features = _features([observation["full_image"], observation["wrist_image"]], observation["state"])
                chunk = _chunk(features, 8)
                chunk[:, -1] = (chunk[:, -1] + 1) / 2  # the model's gripper: [0, 1], 1 = open
                return list(chunk)

            module.get_action = get_action
            start = time.perf_counter()
            module.eval_libero(module.GenerateConfig(task_suite_name=suite, num_trials_per_task=trials, local_log_dir=out))
            seconds = time.perf_counter() - start
        finally:
            os.chdir(cwd)
    return {"episodes": log, "video frames": frames, "seconds": seconds, "renders": _closed(sims, _renders(sims, log, variant))}


def _closed(sims: list[Any], value: Any) -> Any:
    """``value``, once the scripts' envs are closed (they leave them open: a GB each, task after task)."""
    for sim in sims:
        if not isinstance(sim, types.SimpleNamespace):
            sim.close()
    sims.clear()
    return value


def _renders(sims: list[Any], log: list[dict[str, Any]], variant: str) -> int:
    """Camera images rendered: LIBERO's env renders its two cameras at every reset, init state and step."""
    if variant == "unchanged":
        return 2 * (2 * len(log) + sum(len(e["actions"]) for e in log))  # (the settling steps are among the recorded ones)
    return sum(sim.camera_renders for sim in sims)


def compare(script: str, root: Path, *, suite: str, tasks: int, trials: int) -> dict[str, Any]:
    runner = run_openpi if script == "openpi" else run_oft
    runs = {variant: runner(root, variant, suite=suite, tasks=tasks, trials=trials) for variant in VARIANTS}
    ref = runs["unchanged"]["episodes"]
    result: dict[str, Any] = {"script": script, "suite": suite, "tasks": tasks, "trials per task": trials,
                              "episodes": len(ref), "successes": sum(e["success"] for e in ref),
                              "steps": [len(e["actions"]) for e in ref], "runs": {}}
    for variant, run in runs.items():
        eps = run["episodes"]
        differences = []
        if len(eps) != len(ref):
            differences.append(f"{len(eps)} episodes against {len(ref)}")
        for i, (a, b) in enumerate(zip(ref, eps)):
            if len(a["actions"]) != len(b["actions"]):
                differences.append(f"episode {i}: {len(b['actions'])} steps against {len(a['actions'])}")
            elif any(x.tobytes() != y.tobytes() for x, y in zip(a["actions"], b["actions"])):
                differences.append(f"episode {i}: actions differ")
            if a["success"] != b["success"]:
                differences.append(f"episode {i}: success {b['success']} against {a['success']}")
        result["runs"][variant] = {"equal": not differences, "differences": differences[:10], "seconds": run["seconds"],
                                   "camera renders": run["renders"], "video frames": run["video frames"]}
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openpi", type=Path, help="a checkout of openpi (its examples/libero/main.py)")
    parser.add_argument("--oft", type=Path, help="a checkout of OpenVLA-OFT (its experiments/robot/libero/run_libero_eval.py)")
    parser.add_argument("--suite", default="libero_spatial")
    parser.add_argument("--tasks", type=int, default=2, help="the suite's first N tasks")
    parser.add_argument("--trials", type=int, default=2, help="episodes per task")
    parser.add_argument("--success-after", type=int, default=40, help="robosuite steps (the 10 settling ones included) before a success may fire")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if not args.openpi and not args.oft:
        parser.error("give --openpi and/or --oft: the scripts' checkouts")
    os.environ["FASTENV_SUCCESS_AFTER"] = str(args.success_after)
    success_schedule.enable()
    results = []
    for script, root in (("openpi", args.openpi), ("oft", args.oft)):
        if root is None:
            continue
        result = compare(script, root, suite=args.suite, tasks=args.tasks, trials=args.trials)
        results.append(result)
        for variant, run in result["runs"].items():
            status = "equal" if run["equal"] else "; ".join(run["differences"][:3])
            print(f"{script} {variant}: {status}; {result['episodes']} episodes, {result['successes']} successes, "
                  f"{run['camera renders']} camera renders, video frames {run['video frames']}, {run['seconds']:.1f} s", flush=True)
    if args.out:
        from fastenv.backends.libero.mujoco_facts import installed_stack

        with open(args.out, "w") as fh:
            given = list(sys.argv[1:] if argv is None else argv)
            shown = [f"<{given[i - 1][2:]} checkout>" if i and given[i - 1] in ("--openpi", "--oft") else a for i, a in enumerate(given)]
            json.dump({"command": command("fastenv.conformance.libero_scripts", shown),
                       "stack": installed_stack(), "results": results}, fh, indent=2)
    return 0 if all(run["equal"] for r in results for run in r["runs"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
