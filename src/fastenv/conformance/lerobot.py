"""fastenv's LeRobot LIBERO env against LeRobot's own, through LeRobot's own eval loop.

Each case builds the envs with LeRobot's ``make_env`` and with fastenv's
(``fastenv.integrations.lerobot``) on one config, and runs LeRobot's ``eval_policy_all`` on both
with the same policy and seeds, as ``lerobot-eval`` does (fastenv's run through
``skipping_rollout``, as ``python -m fastenv.integrations.lerobot`` runs it), for several batches
(so the init-state schedule carries across episodes, terminations included). It compares,
exactly: every rollout's actions, rewards, successes and dones; every observation the policy reads
(what reaches its network, after LeRobot's processing; every observation where the policy may read
them all); the video frames LeRobot's ``render`` gives; the per-episode and aggregated results
(sums, maxima, successes, seeds); each env's next init-state id. It counts the steps whose cameras
fastenv did not render.

The policies need no downloaded weights (``POLICIES``): LeRobot's ACT and diffusion policies,
randomly initialised (no pretrained backbone); pi0, pi0.5 and SmolVLA as their own classes
(``select_action``, action queue, image and state preparation) with their VLM replaced by a small
randomly initialised network of the same inputs (their VLMs need the Hub's configs and tokenizers,
and billions of parameters); and scripted actions through ACT's object, read every step. LIBERO's
success check fires on ``success_schedule``'s schedule in both (short random runs never succeed
otherwise).

Run it where LeRobot is installed: ``python -m fastenv.conformance.lerobot --out results.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.conformance import success_schedule
from fastenv.conformance.rlinf import command, leaves, same


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


POLICIES = ("scripted", "act", "diffusion", "pi0", "pi05", "smolvla")
CHUNK = 10  # the chunked policies' n_action_steps here


def _features(size: int) -> dict:
    from lerobot.configs.types import FeatureType, PolicyFeature

    return {
        "observation.images.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
        "observation.images.image2": PolicyFeature(type=FeatureType.VISUAL, shape=(3, size, size)),
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(8,)),
    }


def _standin_vlm(chunk_size: int, action_dim: int, reads: list) -> Any:
    """A small random network with a flow-matching VLA's ``sample_actions`` inputs (images, masks,
    tokens, state, noise): it reads every input it is given, and records them in ``reads``."""
    import torch

    class StandInVLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.LazyLinear(chunk_size * action_dim)

        def sample_actions(self, images: list, img_masks: list, lang_tokens: Any, lang_masks: Any, state: Any = None, noise: Any = None, **kwargs: Any) -> Any:
            # (pi0.5 has no state input: its state is in the prompt's tokens)
            reads.append({"images": [i.clone() for i in images], "tokens": lang_tokens.clone(), **({} if state is None else {"state": state.clone()})})
            pooled = [torch.nn.functional.adaptive_avg_pool2d(i.float(), 4).flatten(1) for i in images]
            x = torch.cat([*pooled, *([] if state is None else [state.float()]), lang_tokens.float()], dim=1)
            if noise is None:
                noise = torch.randn(x.shape[0], chunk_size, action_dim)  # a flow's draw, one per chunk
            return torch.tanh(self.net(x).view(-1, chunk_size, action_dim) + 0.1 * noise)

    return StandInVLM()


def make_policy(env_cfg: Any, size: int, kind: str) -> tuple[Any, ...]:
    """A policy of ``kind`` (``POLICIES``) and the processors lerobot-eval builds; and the list
    that gathers what reaches the policy's network."""
    import torch
    from lerobot.envs.factory import make_env_pre_post_processors
    from lerobot.policies.factory import make_policy as lerobot_make_policy
    from lerobot.policies.factory import make_pre_post_processors

    torch.manual_seed(0)
    reads: list = []
    if kind in ("scripted", "act", "diffusion"):
        if kind == "diffusion":
            from lerobot.policies.diffusion.configuration_diffusion import (
                DiffusionConfig,
            )

            cfg = DiffusionConfig(device="cpu", pretrained_backbone_weights=None, use_group_norm=True, crop_shape=None, n_obs_steps=2,
                                  horizon=16, n_action_steps=CHUNK, num_inference_steps=2, down_dims=(32, 64), spatial_softmax_num_keypoints=8)
        else:
            from lerobot.policies.act.configuration_act import ACTConfig

            cfg = ACTConfig(device="cpu", pretrained_backbone_weights=None, n_action_steps=CHUNK, chunk_size=CHUNK, dim_model=64,
                            dim_feedforward=128, n_encoder_layers=1, n_decoder_layers=1)
        cfg.input_features = _features(size)
        policy = lerobot_make_policy(cfg, env_cfg=env_cfg)
        pre, post = make_pre_post_processors(policy_cfg=cfg, pretrained_path=None)
        if kind == "act":
            policy.model.register_forward_pre_hook(lambda module, args: reads.append({k: v.clone() for k, v in args[0].items() if hasattr(v, "clone")}))
        elif kind == "diffusion":
            generate = policy.diffusion.generate_actions

            def generate_actions(batch: dict, noise: Any = None) -> Any:
                reads.append({k: v.clone() for k, v in batch.items() if hasattr(v, "clone")})
                return generate(batch, noise=noise)

            policy.diffusion.generate_actions = generate_actions
        else:  # scripted actions, through the policy object (LeRobot's loop reads every observation for it)
            state: dict[str, Any] = {}

            def reset() -> None:
                state["rng"] = np.random.default_rng(123)

            def select_action(batch: dict) -> Any:
                b = batch["observation.state"].shape[0]
                return torch.from_numpy(state["rng"].uniform(-1, 1, size=(b, 7)).astype(np.float32))

            policy.reset, policy.select_action = reset, select_action
    else:
        import importlib

        from lerobot.configs.types import FeatureType, PolicyFeature

        names = {"pi0": ("pi0", "PI0Config", "PI0Policy"), "pi05": ("pi05", "PI05Config", "PI05Policy"), "smolvla": ("smolvla", "SmolVLAConfig", "SmolVLAPolicy")}
        package, config_name, policy_name = names[kind]
        config_cls = getattr(importlib.import_module(f"lerobot.policies.{package}.configuration_{package}"), config_name)
        policy_cls = getattr(importlib.import_module(f"lerobot.policies.{package}.modeling_{package}"), policy_name)
        cfg = config_cls(device="cpu", n_action_steps=CHUNK, chunk_size=CHUNK)
        if hasattr(cfg, "image_resolution"):
            cfg.image_resolution = (size, size)
        if hasattr(cfg, "resize_imgs_with_padding"):
            cfg.resize_imgs_with_padding = (size, size)
        cfg.input_features = _features(size)
        cfg.output_features = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(7,))}
        # The class's own code, but not its VLM (the Hub's config, tokenizer and weights): a small
        # random network of the same inputs stands in for it.
        policy = policy_cls.__new__(policy_cls)
        torch.nn.Module.__init__(policy)
        policy.config = cfg
        policy.rtc_processor = None
        policy.model = _standin_vlm(CHUNK, cfg.max_action_dim, reads)
        policy.reset()
        tokens = torch.arange(1, 9).unsqueeze(0)

        def pre(observation: dict) -> dict:
            # The tokenizer's outputs (LeRobot's tokenizers come from the Hub): fixed prompt tokens,
            # then, as pi0.5's prompt carries it, the state discretized into 256 bins.
            state = observation["observation.state"]
            b = state.shape[0]
            out = {k: v for k, v in observation.items() if k != "task"}
            bins = torch.clamp(((state[:, :8].float() + 1) * 128).long(), 0, 255) + 9
            out["observation.language.tokens"] = torch.cat([tokens.expand(b, -1), bins], dim=1)
            out["observation.language.attention_mask"] = torch.ones(b, 16, dtype=torch.bool)
            return out

        def post(action: Any) -> Any:
            return action

        with torch.no_grad():  # the lazy layer's shape, from a first call (then the same start for both runs)
            policy.model.sample_actions([torch.zeros(1, 3, size, size)] * 2, None, torch.zeros(1, 16), None,
                                        None if kind == "pi05" else torch.zeros(1, cfg.max_state_dim))
            reads.clear()
        torch.manual_seed(0)
    env_pre, env_post = make_env_pre_post_processors(env_cfg=env_cfg, policy_cfg=cfg)
    return policy, env_pre, env_post, pre, post, reads


def run(make_env: Any, env_cfg: Any, policy_parts: tuple, *, n_envs: int, batches: int, start_seed: int, skipping: bool, videos: int = 1,
        use_async: bool = False, control: bool = False) -> tuple[list[tuple[str, Any]], float, dict[str, int]]:
    """LeRobot's eval over ``batches`` batches of ``n_envs`` episodes: everything it saw, as leaves;
    its seconds; counts (env steps, the policy's reads, steps whose cameras were not rendered).

    ``control``: a negative control, where the skip is told the policy never reads a step's
    observation (only the resets' are rendered): the comparison must then find differences.
    """
    import torch
    from lerobot.scripts import lerobot_eval

    from fastenv.integrations import lerobot as integration
    from fastenv.integrations.lerobot import observation_reader, skipping_rollout

    trace: list[tuple[str, Any]] = []
    stock_rollout = lerobot_eval.rollout
    inner = skipping_rollout(stock_rollout) if skipping else stock_rollout
    policy, stock_env_pre, env_post, pre, post, reads = policy_parts
    reads_all = observation_reader(policy) is None  # the policy may read every observation: trace them all
    rollouts = [0]
    counts = {"env steps": 0, "policy reads": 0, "steps without camera renders": 0}

    def rollout(*args: Any, **kwargs: Any) -> dict:
        env = kwargs["env"]
        callback = kwargs.get("render_callback")
        if callback is not None:  # the frames LeRobot's video keeps
            def render_callback(vec: Any) -> None:
                callback(vec)
                frames = [sub.render() for sub in vec.envs[:videos]] if hasattr(vec, "envs") else list(vec.call("render"))[:videos]
                trace.extend(leaves(frames, f"video[{rollouts[0]}]"))

            kwargs["render_callback"] = render_callback
        reads.clear()
        out = inner(*args, **kwargs)
        trace.extend(leaves(out, f"rollout[{rollouts[0]}]"))
        trace.extend(leaves(list(reads), f"policy reads[{rollouts[0]}]"))
        counts["env steps"] += int(np.prod(out["action"].shape[:2]))
        counts["policy reads"] += len(reads)
        trace.extend(leaves(list(env.get_attr("init_state_id")), f"init_state_id[{rollouts[0]}]"))
        rollouts[0] += 1
        return out

    steps = [0]

    def env_pre(observation: dict) -> dict:  # what the policy is given at each step, after LeRobot's processing
        out = stock_env_pre(observation)
        if reads_all:
            kept = {k: v for k, v in out.items() if k.startswith("observation.") or k == "task"}
            trace.extend(leaves(kept, f"observation[{steps[0]}]"))
        steps[0] += 1
        return out

    stock_seed = np.random.seed
    counter = iter(range(10**6))

    def seed(value: Any = None) -> None:  # LeRobot reseeds with None (OS entropy) after a success
        stock_seed(next(counter) if value is None else value)

    envs = make_env(env_cfg, n_envs=n_envs, use_async_envs=use_async)
    stock_reader = integration.observation_reader
    if control:
        integration.observation_reader = lambda policy: (lambda: False)
    for suite in envs.values():  # LeRobot 0.6 closes each task's envs after it: count what they skipped first
        for vec in suite.values():
            def close(vec: Any = vec, close: Any = vec.close, counted: list = []) -> None:  # noqa: B006 (once per vector env)
                if getattr(vec, "_fastenv", False) and not counted:
                    with contextlib.suppress(Exception):
                        counts["steps without camera renders"] += sum(vec.get_attr("fastenv_renders_skipped"))
                    counted.append(True)
                close()

            vec.close = close
    start = time.perf_counter()
    lerobot_eval.rollout = rollout
    np.random.seed = seed
    try:
        with tempfile.TemporaryDirectory() as videos_dir, torch.no_grad():
            info = lerobot_eval.eval_policy_all(
                envs=envs, policy=policy, env_preprocessor=env_pre, env_postprocessor=env_post,
                preprocessor=pre, postprocessor=post, n_episodes=n_envs * batches,
                max_episodes_rendered=videos, videos_dir=Path(videos_dir), start_seed=start_seed, max_parallel_tasks=1,
            )
        seconds = time.perf_counter() - start
        for group in info["per_task"]:
            metrics = {k: v for k, v in group["metrics"].items() if k not in ("video_paths", "predicted_video_paths")}
            trace.extend(leaves(metrics, f"per_task[{group['task_group']}/{group['task_id']}]"))
        overall = {k: v for k, v in info["overall"].items() if k not in ("eval_s", "eval_ep_s", "video_paths", "predicted_video_paths")}
        trace.extend(leaves(overall, "overall"))
    finally:
        lerobot_eval.rollout = stock_rollout
        integration.observation_reader = stock_reader
        np.random.seed = stock_seed
        from lerobot.envs.utils import close_envs

        close_envs(envs)
    return trace, seconds, counts


def compare(*, suite: str = "libero_goal", task_id: int = 3, size: int = 32, episode_length: int = 40, n_envs: int = 2, batches: int = 2, policy: str = "scripted", start_seed: int = 0, successes: bool = True, success_after: int = 32, use_async: bool = False, control: bool = False) -> dict[str, Any]:
    """One case; ``successes=False`` moves the success schedule past the episodes (they end at the time limit).

    ``success_after``: robosuite steps (the 10 settling ones included) after which the scheduled
    success may fire: episodes then end by success at different steps, across several chunks.
    """
    from lerobot.envs.factory import make_env as lerobot_make_env

    from fastenv.integrations.lerobot import lerobot_version
    from fastenv.integrations.lerobot import make_env as fastenv_make_env

    os.environ["FASTENV_SUCCESS_AFTER"] = str(success_after) if successes else str(10**9)

    env_cfg = small_config(suite, task_id, size, episode_length)
    traces, seconds, counts = [], {}, {}
    skipping = lerobot_version() >= (0, 5)
    for name, factory in (("lerobot", lerobot_make_env), ("fastenv", fastenv_make_env)):
        parts = make_policy(env_cfg, size, policy)  # the same start for both
        trace, seconds[name], counts[name] = run(factory, env_cfg, parts, n_envs=n_envs, batches=batches, start_seed=start_seed,
                                                  skipping=skipping and name == "fastenv", use_async=use_async, control=control and name == "fastenv")
        traces.append(trace)
    ref, out = traces
    differences = []
    if len(ref) != len(out):
        differences.append(f"{len(ref)} values from LeRobot, {len(out)} from fastenv")
    for (path_a, a), (path_b, b) in zip(ref, out):
        if path_a != path_b:
            differences.append(f"{path_a}: LeRobot has it, fastenv has {path_b} there")
            break
        if not same(a, b):
            differences.append(f"{path_a}: LeRobot {a!r:.120}, fastenv {b!r:.120}")
    seen = [v for p, v in ref if ".successes[" in p]
    return {
        "case": f"{suite}/{task_id} {policy}{'' if successes else ', time limits only'}{', async envs' if use_async else ''}"
                f"{', negative control (never observes)' if control else ''}",
        "negative control": control,
        "values": len(ref), "equal": not differences, "differences": differences[:20],
        "successes": [bool(x) for x in seen], "seconds": seconds, "counts": counts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["libero_goal/3", "libero_10/2"], help="suite/task_id (default: two suites)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--episode-length", type=int, default=40)
    parser.add_argument("--n-envs", type=int, default=2)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--async-envs", action="store_true", help="LeRobot's async vector envs (worker processes), for both")
    parser.add_argument("--control", action="store_true", help="also a negative control: the skip told that pi0 never reads (must differ)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    success_schedule.enable()
    results = []
    for spec in args.tasks:
        suite, task_id = spec.split("/")
        cases = [(kind, True, False) for kind in args.policies]
        if "scripted" in args.policies and not args.async_envs:
            # (not with async envs: their workers come from a forkserver that keeps the success
            # schedule of the first case it served)
            cases.append(("scripted", False, False))
        if args.control:
            cases.append(("pi0", True, True))
        for kind, successes, control in cases:
            result = compare(suite=suite, task_id=int(task_id), size=args.size, episode_length=args.episode_length, n_envs=args.n_envs,
                             batches=args.batches, policy=kind, successes=successes, use_async=args.async_envs, control=control)
            results.append(result)
            status = "equal" if result["equal"] else f"{len(result['differences'])} differ"
            if control:
                status += " (as a negative control must)" if not result["equal"] else " (a negative control must differ: the comparison is blind)"
            c = result["counts"]["fastenv"]
            print(f"{result['case']}: {result['values']} values, {status}, successes {result['successes']}, "
                  f"{c['steps without camera renders']} of {c['env steps']} env steps without camera renders "
                  f"(LeRobot {result['seconds']['lerobot']:.1f} s, fastenv {result['seconds']['fastenv']:.1f} s)", flush=True)
            for line in result["differences"][:10]:
                print("   ", line)
    if args.out:
        from fastenv.backends.libero.mujoco_facts import installed_stack
        from fastenv.integrations.lerobot import lerobot_version

        stack = {**installed_stack(), "lerobot": ".".join(map(str, lerobot_version())), "python": sys.version.split()[0]}
        payload = {"command": command("fastenv.conformance.lerobot", sys.argv[1:] if argv is None else argv), "stack": stack, "cases": results}
        with open(args.out, "w") as fh:
            json.dump(payload, fh, indent=2)
    return 0 if all(r["equal"] != r["negative control"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
