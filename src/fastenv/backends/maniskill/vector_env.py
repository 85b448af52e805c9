"""``ManiSkillVectorEnv``: a batched ManiSkill env driven in place, with fastenv's chunks, pruning,
autoreset and pipeline stages (tensors stay on the env's device).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv._validation import check_positive_int
from fastenv.backends.maniskill.batch import ManiSkillBatch
from fastenv.backends.maniskill.observations import Selection
from fastenv.backends.maniskill.task import (
    FRAME_RENDER_MODES,
    close_viewer,
    registered_max_steps,
)
from fastenv.core.arrays import view_row
from fastenv.core.executor import Executor
from fastenv.core.protocol import KEEP
from fastenv.core.spaces import chunk_space


class ManiSkillVectorEnv(VectorEnv):
    """A batched ManiSkill env (one world, usually on a GPU) with fastenv's chunks, pruning,
    autoreset and pipeline stages, in place.

    Chunks, same-step autoreset, final observations and infos come from fastenv's executor, as
    for every backend; tensors stay on the env's device (infos in Gymnasium's layout: arrays
    with ``_key`` masks; ``final_obs`` one observation per env). With pipeline stages every
    stage's step advances the whole world: the other stages' envs hold their last control
    targets, and the physics step is divided by S so each env's simulated time per action is
    what it was with one stage.

    Args:
        env: a ManiSkill env (``gym.make("PickCube-v1", num_envs=N, ...)``), wrapped or not.
        modalities: keys to keep: "state" and "<camera>_<texture>" (e.g. "base_camera_rgb").
        chunk: sub-actions per action (None: plain actions).
        gamma: discount inside a chunk (None sums rewards).
        max_episode_steps: simulator steps per episode (default: ManiSkill's registered limit).
        pipeline_stages: S; N must be a multiple of S.
        render_mode: None or "rgb_array".
        ignore_terminations: success and failure end no episode (only the time limit does).

    Examples:
        >>> envs = ManiSkillVectorEnv(gym.make("PickCube-v1", num_envs=64, obs_mode="rgb"), chunk=8)
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        modalities: Sequence[str] | None = None,
        chunk: int | None = None,
        gamma: float | None = None,
        max_episode_steps: int | None = None,
        pipeline_stages: int = 1,
        render_mode: str | None = None,
        ignore_terminations: bool = False,
    ) -> None:
        import torch

        self.torch = torch
        self._env = env
        self.base = base = env.unwrapped
        if isinstance(base.single_action_space, gym.spaces.Dict):
            # one batch of actions per sub-step, written into the world's targets as one tensor
            raise ValueError(
                "the batched ManiSkill env takes Box actions; a task with several agents (a Dict action space) "
                "runs on ManiSkill's CPU simulation in fastenv's workers (sim_backend='physx_cpu')"
            )
        self.num_envs = int(base.num_envs)
        self.device = base.device
        self.pipeline_stages = check_positive_int("pipeline_stages", pipeline_stages)
        if self.num_envs % self.pipeline_stages:
            raise ValueError(
                f"num_envs must be a multiple of pipeline_stages, got num_envs={self.num_envs}, pipeline_stages={pipeline_stages}"
            )
        if render_mode not in (None, "rgb_array", KEEP):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = ("rgb_array" if base.render_mode in FRAME_RENDER_MODES else None) if render_mode == KEEP else render_mode
        if max_episode_steps is None:
            max_episode_steps = registered_max_steps(env)
        max_episode_steps = None if max_episode_steps is None else check_positive_int("max_episode_steps", max_episode_steps)
        close_viewer(base)
        selection = Selection(base)
        self.keys = selection.select(modalities)
        if self.pipeline_stages > 1:
            # Every stage's step advances the whole world: divide the physics step so an env's
            # S world steps per action take the time one took with a single stage.
            self.base_physics_dt = float(base.scene.timestep)
            base.scene.set_timestep(self.base_physics_dt / self.pipeline_stages)
        self.sim = ManiSkillBatch(base, self.keys, selection.cameras, max_episode_steps, ignore_terminations)
        self.executor = Executor(self.sim, chunk=chunk, gamma=gamma, autoreset=True)
        self.chunk, self.gamma, self.max_episode_steps = self.executor.chunk, self.executor.gamma, max_episode_steps
        single_action = base.single_action_space
        self.single_action_space = single_action if self.chunk is None else chunk_space(single_action, self.chunk)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.single_observation_space = self.sim.single_observation_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": ["rgb_array"]}
        self._all = torch.arange(self.num_envs, device=self.device)
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: dict[int, concurrent.futures.Future] = {}
        self.closed = False

    # -- stepping --------------------------------------------------------------------------------
    def _as_actions(self, actions: Any, count: int) -> Any:
        torch = self.torch
        actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        shape = (count, *self.single_action_space.shape)
        if tuple(actions.shape) != shape:
            raise ValueError(f"actions must have shape {shape}, got {tuple(actions.shape)}")
        if not torch.isfinite(actions).all():
            raise ValueError("actions must be finite, got NaN or inf")
        return actions

    def _run(self, rows: Any, actions: Any) -> tuple[Any, ...]:
        """One executor step of ``rows``, in Gymnasium's vector layout."""
        out = self.executor.step(rows, actions)
        infos = dict(out.infos)
        if out.final_infos is not None:
            ended = out.ended
            finals = np.full(len(rows), None, dtype=object)
            for i in self.sim.ops.nonzero(ended).tolist():
                finals[i] = view_row(out.final_obs, i)
            infos["final_obs"] = infos["final_observation"] = finals
            infos["_final_obs"] = infos["_final_observation"] = ended
            infos["final_info"], infos["_final_info"] = out.final_infos, ended
        return out.obs, out.rewards, out.terminated, out.truncated, infos

    def _stage_ids(self, stage: int) -> Any:
        if isinstance(stage, bool) or not isinstance(stage, (int, np.integer)) or not 0 <= stage < self.pipeline_stages:
            raise ValueError(f"stage must be in [0, {self.pipeline_stages}), got {stage!r}")
        m = self.num_envs // self.pipeline_stages
        return self._all[stage * m : (stage + 1) * m]

    def step(self, actions: Any) -> tuple[Any, ...]:
        """Step all envs (plain Gymnasium semantics, SAME_STEP partial autoreset)."""
        if self._pending:
            raise RuntimeError(f"stages {sorted(self._pending)} still have actions in flight; recv() them first")
        return self._run(self._all, self._as_actions(actions, self.num_envs))

    def send(self, actions: Any, *, stage: int) -> None:
        """Step stage ``stage`` (the whole world advances) in the background; returns at once."""
        rows = self._stage_ids(stage)
        if stage in self._pending:
            raise RuntimeError(f"send(stage={stage}) twice: recv(stage={stage}) first")
        stage_actions = self._as_actions(actions, len(rows))
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fastenv-maniskill")
        self._pending[stage] = self._executor.submit(self._run, rows, stage_actions)

    def recv(self, *, stage: int) -> tuple[Any, ...]:
        """That stage's (obs, rewards, terminations, truncations, infos)."""
        self._stage_ids(stage)
        if stage not in self._pending:
            raise RuntimeError(f"recv(stage={stage}) without send(stage={stage})")
        return self._pending.pop(stage).result()

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset all envs, or those in ``options["reset_mask"]`` (a bool array of N).

        ``seed``: an int gives env i seed + i, a list of N gives env i ``seed[i]`` (None: unseeded).
        Resetting every env, all seeded, is one ManiSkill reset with those seeds; in a partial
        reset each seeded env's new episode depends on its own seed only (``ManiSkillBatch.reset``).
        """
        if self._pending:
            raise RuntimeError(f"reset(): stages {sorted(self._pending)} still have actions in flight; recv() them first")
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        rows = self._all
        if mask is not None:
            mask = self.torch.as_tensor(np.asarray(mask), dtype=self.torch.bool, device=self.device)
            if tuple(mask.shape) != (self.num_envs,) or not bool(mask.any()):
                raise ValueError(f"options['reset_mask'] must be a bool array of {self.num_envs} with a True, got {mask}")
            rows = self.torch.nonzero(mask).flatten()
        _, info = self.executor.reset(rows, self._seeds(seed, rows.tolist()), options or None)
        return dict(self.sim.full_obs), info

    def _seeds(self, seed: Any, rows: list[int]) -> list[int | None] | None:
        def is_int(value: Any) -> bool:
            return isinstance(value, (int, np.integer)) and not isinstance(value, bool)

        if seed is None:
            return None
        if is_int(seed):
            return [int(seed) + i for i in rows]  # env i gets seed + i
        if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
            raise ValueError(f"seed must be None, an int or a list of {self.num_envs} seeds, got {seed!r}")
        seed = list(seed)
        if len(seed) != self.num_envs or not all(s is None or is_int(s) for s in seed):
            raise ValueError(f"seed must be None, an int or a list of {self.num_envs} seeds (ints or None), got {seed!r}")
        return [None if seed[i] is None else int(seed[i]) for i in rows]

    def render(self) -> Any:
        return self.base.render() if self.render_mode == "rgb_array" else None

    def close_extras(self, **kwargs: Any) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._env.close()
