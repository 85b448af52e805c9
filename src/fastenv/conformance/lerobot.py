"""fastenv's LeRobot LIBERO env against LeRobot's own, through LeRobot's own eval loop.

Each case builds the envs with LeRobot's ``make_env`` and with fastenv's
(``fastenv.integrations.lerobot``) on one config, and runs LeRobot's ``eval_policy_all`` on both
with the same policy and seeds, as ``lerobot-eval`` does, for several batches (so the init-state
schedule carries across episodes, terminations included). It compares, exactly: every rollout's
observations (images and robot state after LeRobot's processing), actions, rewards, successes
and dones; the per-episode and aggregated results (sums, maxima, successes, seeds); each env's
next init-state id; a ``render()`` frame.

The policy needs no downloaded weights: LeRobot's ACT, randomly initialised (no pretrained
backbone), and a scripted variant through the same policy object. LIBERO's success check fires
on ``success_schedule``'s schedule in both (short random runs never succeed otherwise).

Run it where LeRobot is installed: ``python -m fastenv.conformance.lerobot --out results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

from fastenv.conformance import success_schedule
from fastenv.conformance.rlinf import _leaves, _same, command


def small_config(suite: str, task_id: int, size: int, episode_length: int) -> Any:
    """LeRobot's LIBERO env config for one task, at ``size`` pixels.

    LeRobot 0.4.4's config does not pass its image size on to the env (which then renders
    256x256): a subclass of it does, so both envs render small images alike.
    """
    from dataclasses import dataclass

    from lerobot.envs.configs import EnvConfig
    from lerobot.envs.configs import LiberoEnv as LiberoEnvConfig

    if "libero_sized" not in EnvConfig.get_known_choices():

        @EnvConfig.register_subclass("libero_sized")
        @dataclass
        class SizedLiberoEnv(LiberoEnvConfig):
            @property
            def gym_kwargs(self) -> dict:
                return {**super().gym_kwargs, "observation_height": self.observation_height, "observation_width": self.observation_width}

    cls = EnvConfig.get_choice_class("libero_sized")
    return cls(task=suite, task_ids=[task_id], episode_length=episode_length, observation_height=size, observation_width=size, obs_type="pixels_agent_pos")


def make_policy(env_cfg: Any, size: int, scripted: bool) -> tuple[Any, ...]:
    """LeRobot's ACT with random weights (or its actions scripted), and the processors lerobot-eval builds."""
    import torch
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.envs.factory import make_env_pre_post_processors
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.factory import make_policy as lerobot_make_policy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, n_action_steps=8, chunk_size=8)
    cfg.input_features = {
        "observation.images.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
        "observation.images.image2": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,)),
    }
    policy = lerobot_make_policy(cfg, env_cfg=env_cfg)
    if scripted:
        state: dict[str, Any] = {}

        def reset() -> None:
            state["rng"] = np.random.default_rng(123)

        def select_action(batch: dict) -> Any:
            b = batch["observation.state"].shape[0]
            return torch.from_numpy(state["rng"].uniform(-1, 1, size=(b, 7)).astype(np.float32))

        policy.reset, policy.select_action = reset, select_action
    pre, post = make_pre_post_processors(policy_cfg=cfg, pretrained_path=None)
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=cfg)
    return policy, env_pre, env_post, pre, post


def run(make_env: Any, env_cfg: Any, policy_parts: tuple, *, n_envs: int, batches: int, start_seed: int) -> tuple[list[tuple[str, Any]], float]:
    """LeRobot's eval over ``batches`` batches of ``n_envs`` episodes; everything it saw, as leaves."""
    import torch
    from lerobot.scripts import lerobot_eval

    trace: list[tuple[str, Any]] = []
    stock_rollout = lerobot_eval.rollout

    rollouts = [0]

    def rollout(*args: Any, **kwargs: Any) -> dict:
        out = stock_rollout(*args, **kwargs)
        trace.extend(_leaves(out, f"rollout[{rollouts[0]}]"))
        rollouts[0] += 1
        return out

    policy, stock_env_pre, env_post, pre, post = policy_parts
    steps = [0]

    def env_pre(observation: dict) -> dict:  # what the policy is given at each step, after LeRobot's processing
        out = stock_env_pre(observation)
        kept = {k: v for k, v in out.items() if k.startswith("observation.") or k == "task"}
        trace.extend(_leaves(kept, f"observation[{steps[0]}]"))
        steps[0] += 1
        return out

    stock_seed = np.random.seed
    counter = iter(range(10**6))

    def seed(value: Any = None) -> None:  # LeRobot reseeds with None (OS entropy) after a success
        stock_seed(next(counter) if value is None else value)

    envs = make_env(env_cfg, n_envs=n_envs)
    start = time.perf_counter()
    lerobot_eval.rollout = rollout
    np.random.seed = seed
    try:
        with torch.no_grad():
            info = lerobot_eval.eval_policy_all(
                envs=envs, policy=policy, env_preprocessor=env_pre, env_postprocessor=env_post,
                preprocessor=pre, postprocessor=post, n_episodes=n_envs * batches,
                max_episodes_rendered=0, videos_dir=None, start_seed=start_seed, max_parallel_tasks=1,
            )
        seconds = time.perf_counter() - start
        for group in info["per_task"]:
            trace.extend(_leaves(group["metrics"], f"per_task[{group['task_group']}/{group['task_id']}]"))
        overall = {k: v for k, v in info["overall"].items() if k not in ("eval_s", "eval_ep_s", "video_paths")}
        trace.extend(_leaves(overall, "overall"))
        for suite in envs.values():
            for task_id, vec in suite.items():
                trace.extend(_leaves(list(vec.get_attr("init_state_id")), f"init_state_id[{task_id}]"))
                trace.extend(_leaves(vec.envs[0].render(), f"render[{task_id}]"))
    finally:
        lerobot_eval.rollout = stock_rollout
        np.random.seed = stock_seed
        from lerobot.envs.utils import close_envs

        close_envs(envs)
    return trace, seconds


def compare(*, suite: str = "libero_goal", task_id: int = 3, size: int = 32, episode_length: int = 30, n_envs: int = 2, batches: int = 2, scripted: bool = True, start_seed: int = 0, successes: bool = True) -> dict[str, Any]:
    """One case; ``successes=False`` moves the success schedule past the episodes (they end at the time limit)."""
    from lerobot.envs.factory import make_env as lerobot_make_env

    from fastenv.integrations.lerobot import make_env as fastenv_make_env

    os.environ["FASTENV_SUCCESS_AFTER"] = "16" if successes else str(10**9)

    env_cfg = small_config(suite, task_id, size, episode_length)
    parts = make_policy(env_cfg, size, scripted)
    traces, seconds = [], {}
    for name, factory in (("lerobot", lerobot_make_env), ("fastenv", fastenv_make_env)):
        trace, seconds[name] = run(factory, env_cfg, parts, n_envs=n_envs, batches=batches, start_seed=start_seed)
        traces.append(trace)
    ref, out = traces
    differences = []
    if len(ref) != len(out):
        differences.append(f"{len(ref)} values from LeRobot, {len(out)} from fastenv")
    for (path_a, a), (path_b, b) in zip(ref, out):
        if path_a != path_b:
            differences.append(f"{path_a}: LeRobot has it, fastenv has {path_b} there")
            break
        if not _same(a, b):
            differences.append(f"{path_a}: LeRobot {a!r:.120}, fastenv {b!r:.120}")
    seen = [v for p, v in ref if ".successes[" in p]
    return {
        "case": f"{suite}/{task_id} {'scripted' if scripted else 'random-init ACT'}{'' if successes else ', time limits only'}",
        "values": len(ref), "equal": not differences, "differences": differences[:20],
        "successes": [bool(x) for x in seen], "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["libero_goal/3", "libero_10/2"], help="suite/task_id")
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--episode-length", type=int, default=30)
    parser.add_argument("--n-envs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    success_schedule.enable()
    results = []
    for spec in args.tasks:
        suite, task_id = spec.split("/")
        for scripted, successes in ((True, True), (False, True), (True, False)):
            result = compare(suite=suite, task_id=int(task_id), size=args.size, episode_length=args.episode_length, n_envs=args.n_envs, batches=args.batches, scripted=scripted, successes=successes)
            results.append(result)
            status = "equal" if result["equal"] else f"{len(result['differences'])} differ"
            print(f"{result['case']}: {result['values']} values, {status}, successes {result['successes']} "
                  f"(LeRobot {result['seconds']['lerobot']:.1f} s, fastenv {result['seconds']['fastenv']:.1f} s)", flush=True)
            for line in result["differences"][:10]:
                print("   ", line)
    if args.out:
        from fastenv.backends.libero.mujoco_facts import installed_stack

        payload = {"command": command("fastenv.conformance.lerobot", sys.argv[1:] if argv is None else argv), "stack": installed_stack(), "cases": results}
        with open(args.out, "w") as fh:
            json.dump(payload, fh, indent=2)
    return 0 if all(r["equal"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
