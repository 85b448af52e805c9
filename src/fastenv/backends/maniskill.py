"""ManiSkill3 backend (mani-skill 3.0.x on SAPIEN), the only module that imports ManiSkill.

ManiSkill envs are batched natively: all parallel envs live in one physics system, on one
device. So fastenv does not split them into processes; ``ManiSkillVectorEnv`` drives the batched
env in place and keeps every tensor on its device:

- headless: no viewer, no human-render cameras unless ``render_mode="rgb_array"``;
- pruning: the obs mode asks only for the kept textures (rgb, depth, segmentation, ...) and
  state, sensors no kept key reads are removed before they are captured, images are sized by
  ``camera_size``;
- action chunks: each sub-step runs the action, physics, ``get_info`` (evaluation) and
  ``get_reward`` without ``get_obs`` (which is where sensors are rendered); the observation is
  taken once, at the chunk's end (and at an episode's end inside a chunk, for its final obs);
- same-step partial autoreset through ManiSkill's ``env_idx`` reset option, ``final_obs`` /
  ``final_info`` with their masks (batched tensors here, on the device);
- pipeline stages: ``send(actions, stage=k)`` steps the world in a background thread while the
  caller computes another stage's actions. The world is shared, so every stage's step advances
  all envs (the others hold still, with zero actions) and the physics step is divided by the
  number of stages: each env's simulated time per action stays what it was with one stage.

Written against mani-skill 3.0.1 (``BaseEnv._step_action``, ``get_info``, ``get_reward``,
``get_obs``, ``reset(options={"env_idx": ...})``, ``scene.set_timestep``).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv._deps import require
from fastenv._validation import check_positive_int
from fastenv.backends.base import KEEP, check_known_keys
from fastenv.core.executor import Executor
from fastenv.wrappers.action import chunk_space

TEXTURES = ("rgb", "depth", "segmentation", "position", "normal", "albedo")


def vulkan_unavailable_reason() -> str | None:
    """Why ManiSkill cannot build its envs here, or None when SAPIEN finds a rendering device."""
    try:
        import sapien
    except ImportError:
        return 'ManiSkill is not installed (pip install "fastenv[maniskill]")'
    try:
        sapien.render.get_device_summary()
    except RuntimeError as exc:
        return f"no Vulkan rendering device: SAPIEN says {exc!r} (ManiSkill needs one to build any task)"
    return None


def split_key(key: str, cameras: Sequence[str]) -> tuple[str, str] | None:
    """("camera", "texture") for keys like "base_camera_rgb"; None for "state"."""
    for cam in cameras:
        for texture in TEXTURES:
            if key == f"{cam}_{texture}":
                return cam, texture
    return None


def obs_mode_for(keys: Sequence[str], cameras: Sequence[str]) -> str:
    """The ManiSkill obs_mode that produces ``keys`` and nothing else.

    Example:
        >>> obs_mode_for(["state", "base_camera_rgb"], ["base_camera"])
        'rgb+state'
    """
    textures = [t for t in TEXTURES if any(split_key(k, cameras) == (c, t) for k in keys for c in cameras)]
    if not textures:
        return "state"
    return "+".join(textures + (["state"] if "state" in keys else []))


class _Pruned:
    """Mixin for a ManiSkill task class: only the kept sensors, no human-render cameras unless asked."""

    _fastenv_cameras: frozenset[str] | None = None
    _fastenv_render: bool = False

    @property
    def _default_sensor_configs(self) -> Any:
        from mani_skill.sensors.camera import parse_camera_configs

        configs = parse_camera_configs(super()._default_sensor_configs)
        if self._fastenv_cameras is None:
            return list(configs.values())
        return [c for uid, c in configs.items() if uid in self._fastenv_cameras]

    @property
    def _default_human_render_camera_configs(self) -> Any:
        return super()._default_human_render_camera_configs if self._fastenv_render else []


def _pruned_class(env_cls: type, cameras: frozenset[str] | None, render: bool) -> type:
    return type(env_cls.__name__, (_Pruned, env_cls), {"_fastenv_cameras": cameras, "_fastenv_render": render})


class ManiSkillBatch:
    """A batched ManiSkill env as a ``BatchSimulator``: all its envs in one physics world, on one device.

    A sub-step of some rows advances the whole world; the other envs hold still (zero actions).
    ``get_obs``, where ManiSkill renders, runs only in ``step`` and ``observe``. Episodes last
    ``max_episode_steps`` sub-steps of their own (truncation), or end on ``success`` or ``fail``.
    """

    batched = True

    def __init__(self, base: Any, keys: Sequence[str], cameras: Sequence[str], max_episode_steps: int | None) -> None:
        import torch

        from fastenv.core.arrays import TorchOps

        self.torch = torch
        self.base = base
        self.num_envs = int(base.num_envs)
        self.device = base.device
        self.ops = TorchOps(self.device)
        self.keys, self.cameras = tuple(keys), tuple(cameras)
        self.max_episode_steps = max_episode_steps
        self.single_action_space = base.single_action_space
        self._env_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._info: Mapping[str, Any] = base.get_info()
        self.full_obs = self._extract(base.get_obs(self._info))
        self.single_observation_space = spaces.Dict({k: _box_for(v) for k, v in self.full_obs.items()})

    def _extract(self, raw: Any) -> dict[str, Any]:
        # Cloned: rendered images may be views of the renderer's buffers, rewritten by the next capture.
        if not isinstance(raw, Mapping):
            return {"state": raw.clone()}
        out = {}
        for key in self.keys:
            split = split_key(key, self.cameras)
            value = raw["state"] if split is None else raw["sensor_data"][split[0]][split[1]]
            out[key] = value.clone()
        return out

    def _rows_of(self, info: Mapping[str, Any], rows: Any) -> dict[str, Any]:
        """The per-env entries of a ManiSkill info, for ``rows``."""
        out: dict[str, Any] = {}
        for key, value in info.items():
            if key == "elapsed_steps":
                continue
            if isinstance(value, Mapping):
                out[key] = self._rows_of(value, rows)
                continue
            value = self.torch.as_tensor(value, device=self.device)
            if value.ndim and value.shape[0] == self.num_envs:
                out[key] = value[rows]
        return out

    def reset(self, rows: Any, seeds: Sequence[int | None] | None, options: Mapping[str, Any] | None) -> tuple[Any, Any]:
        options = dict(options or {})
        everyone = len(rows) == self.num_envs
        if not everyone:
            options["env_idx"] = rows
        seed = None
        if seeds is not None and any(s is not None for s in seeds):
            seed = [int(s) for s in seeds] if everyone else int(seeds[0])
        raw, info = self.base.reset(seed=seed, options=options or None)
        self._env_steps[rows] = 0
        self._info = self.base.get_info()
        self.full_obs = self._extract(raw)
        return {k: v[rows] for k, v in self.full_obs.items()}, self._rows_of(info, rows)

    def substep(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any]:
        torch, base = self.torch, self.base
        full = torch.zeros((self.num_envs, *actions.shape[1:]), dtype=actions.dtype, device=self.device)
        full[rows] = actions  # a parallel env cannot skip the shared physics step: the others hold still
        applied = base._step_action(full)
        base._elapsed_steps += 1
        info = base.get_info()
        reward = torch.as_tensor(base.get_reward(obs=None, action=applied, info=info), device=self.device).to(torch.float64)
        self._info = info
        self._env_steps[rows] += 1
        terminated = _terminated(info, self.num_envs, self.device)[rows]
        truncated = torch.zeros_like(terminated)
        if self.max_episode_steps is not None:
            truncated = (self._env_steps[rows] >= self.max_episode_steps) & ~terminated
        return reward[rows], terminated, truncated, self._rows_of(info, rows)

    def step(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        reward, terminated, truncated, info = self.substep(rows, actions)
        return self.observe(rows), reward, terminated, truncated, info

    def observe(self, rows: Any) -> Any:
        obs = self._extract(self.base.get_obs(self._info))
        return {k: v[rows] for k, v in obs.items()}


class ManiSkillVectorEnv(VectorEnv):
    """A batched ManiSkill env with fastenv's chunks, pruning, autoreset and pipeline stages.

    Chunks, same-step autoreset, final observations and infos come from fastenv's executor, as
    for every backend; tensors stay on the env's device (infos in Gymnasium's layout: arrays
    with ``_key`` masks; ``final_obs`` one observation per env).

    Args:
        env: a ManiSkill env (``gym.make("PickCube-v1", num_envs=N, ...)``), wrapped or not.
        modalities: keys to keep: "state" and "<camera>_<texture>" (e.g. "base_camera_rgb").
        chunk: sub-actions per action (None: plain actions).
        gamma: discount inside a chunk (None sums rewards).
        max_episode_steps: simulator steps per episode (default: ManiSkill's registered limit).
        pipeline_stages: S; N must be a multiple of S.
        render_mode: None or "rgb_array".

    Example:
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
    ) -> None:
        import torch

        self.torch = torch
        self._env = env
        self.base = base = env.unwrapped
        self.num_envs = int(base.num_envs)
        self.device = base.device
        self.pipeline_stages = check_positive_int("pipeline_stages", pipeline_stages)
        if self.num_envs % self.pipeline_stages:
            raise ValueError(
                f"num_envs must be a multiple of pipeline_stages, got num_envs={self.num_envs}, pipeline_stages={pipeline_stages}"
            )
        if render_mode not in (None, "rgb_array", KEEP):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = None if render_mode in (None, KEEP) else render_mode
        if max_episode_steps is None:
            max_episode_steps = _registered_max_steps(env)
        max_episode_steps = None if max_episode_steps is None else check_positive_int("max_episode_steps", max_episode_steps)
        self._viewer_closed = self._make_headless()
        self._cameras = tuple(base._sensors)
        self.keys = self._prune(modalities)
        if self.pipeline_stages > 1:
            # Every stage's step advances the whole world: divide the physics step so an env's
            # S world steps per action take the time one took with a single stage.
            self.base_physics_dt = float(base.scene.timestep)
            base.scene.set_timestep(self.base_physics_dt / self.pipeline_stages)
        self.sim = ManiSkillBatch(base, self.keys, self._cameras, max_episode_steps)
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

    # -- construction helpers --------------------------------------------------------------------
    def _make_headless(self) -> bool:
        base = self.base
        viewer = getattr(base, "_viewer", None)
        if viewer is not None:
            viewer.close()
            base._viewer = None
            return True
        return False

    def _prune(self, modalities: Sequence[str] | None) -> tuple[str, ...]:
        base = self.base
        available = ("state", *(f"{c}_{t}" for c in self._cameras for t in TEXTURES))
        if modalities is None:
            sample = self._raw_keys(base.get_obs(base.get_info()))
            return tuple(sample)
        keys = check_known_keys(modalities, available)
        wanted = {split_key(k, self._cameras) for k in keys} - {None}
        produced = set(self._raw_keys(base.get_obs(base.get_info())))
        missing = [k for k in keys if k not in produced]
        if missing:
            raise ValueError(
                f"keys {missing} are not produced by this env (obs_mode={base.obs_mode!r}); build it with "
                f"obs_mode={obs_mode_for(keys, self._cameras)!r} or use gym.make('fastenv/ManiSkill-v0', modalities=...)"
            )
        # Sensors nobody reads are not captured; textures nobody reads are not requested.
        for uid in [uid for uid in base._sensors if uid not in {c for c, _ in wanted}]:
            del base._sensors[uid]
        visual = getattr(base.obs_mode_struct, "visual", None)
        if visual is not None:
            for texture in TEXTURES:
                if hasattr(visual, texture):
                    setattr(visual, texture, any(t == texture for _, t in wanted))
        return tuple(keys)

    def _raw_keys(self, raw: Any) -> list[str]:
        if not isinstance(raw, Mapping):
            return ["state"]
        keys = ["state"] if "state" in raw else []
        for cam, textures in raw.get("sensor_data", {}).items():
            keys += [f"{cam}_{t}" for t in textures]
        return keys

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
                finals[i] = {key: value[i] for key, value in out.final_obs.items()}
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

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset all envs, or those in ``options["reset_mask"]`` (a bool array of N)."""
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
        seeds = None
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in rows.tolist()]  # env i gets seed + i
        elif seed is not None:
            seeds = [seed[i] for i in rows.tolist()]
        _, info = self.executor.reset(rows, seeds, options or None)
        return dict(self.sim.full_obs), info

    def render(self) -> Any:
        return self.base.render() if self.render_mode == "rgb_array" else None

    def close_extras(self, **kwargs: Any) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._env.close()


def _box_for(batch: Any) -> spaces.Box:
    """The single-env Box of a batched tensor (its bounds from its dtype)."""
    dtype = np.dtype(str(batch.dtype).replace("torch.", ""))
    shape = tuple(batch.shape[1:])
    if dtype.kind in "iu":
        return spaces.Box(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype)
    if dtype.kind == "b":
        return spaces.Box(0, 1, shape, dtype)
    return spaces.Box(-np.inf, np.inf, shape, dtype)


def _registered_max_steps(env: gym.Env) -> int | None:
    current = env
    while current is not None:
        for name in ("_max_episode_steps", "max_episode_steps"):
            value = getattr(current, name, None)
            if isinstance(value, int):
                return value
        current = getattr(current, "env", None)
    spec = getattr(env, "spec", None)
    return getattr(spec, "max_episode_steps", None)


def _terminated(info: Mapping[str, Any], n: int, device: Any) -> Any:
    import torch

    out = torch.zeros(n, dtype=torch.bool, device=device)
    for key in ("success", "fail"):
        if key in info:
            out |= torch.as_tensor(info[key], device=device).bool().reshape(n)
    return out


def _maniskill() -> Any:
    require("mani_skill", "maniskill", "ManiSkill3 (the PyPI package mani-skill)")
    import mani_skill.envs  # noqa: F401  (registers the tasks)
    from mani_skill.utils.registration import REGISTERED_ENVS

    return REGISTERED_ENVS


def make_vec(
    num_envs: int = 1,
    *,
    env_id: str = "PickCube-v1",
    modalities: Sequence[str] | None = ("state",),
    chunk: int | None = 8,
    gamma: float | None = None,
    camera_size: int | tuple[int, int] | None = None,
    pipeline_stages: int = 1,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    **env_kwargs: Any,
) -> ManiSkillVectorEnv:
    """A ManiSkill task built lean for RL, as a batched vector env (``fastenv/ManiSkill-v0``).

    Example:
        >>> envs = gym.make_vec("fastenv/ManiSkill-v0", num_envs=256, env_id="PickCube-v1", chunk=8)
    """
    registered = _maniskill()
    if env_id not in registered:
        raise ValueError(f"unknown ManiSkill env_id {env_id!r}; known: {sorted(registered)}")
    spec = registered[env_id]
    keys = list(modalities) if modalities is not None else None
    cameras = None
    if keys is not None:
        cameras = frozenset(k.rsplit("_", 1)[0] for k in keys if k != "state")
        env_kwargs.setdefault("obs_mode", obs_mode_for(keys, [k.rsplit("_", 1)[0] for k in keys if k != "state"]))
    if camera_size is not None:
        h, w = (camera_size, camera_size) if isinstance(camera_size, int) else camera_size
        env_kwargs.setdefault("sensor_configs", dict(width=w, height=h))
    cls = _pruned_class(spec.cls, cameras, render_mode == "rgb_array")
    kwargs = {**spec.default_kwargs, **env_kwargs}
    env = cls(num_envs=num_envs, render_mode=render_mode, **kwargs)
    if max_episode_steps is None:
        max_episode_steps = spec.max_episode_steps
    return ManiSkillVectorEnv(
        env, modalities=keys, chunk=chunk, gamma=gamma, max_episode_steps=max_episode_steps,
        pipeline_stages=pipeline_stages, render_mode=render_mode,
    )


def adopt(
    env: gym.Env,
    *,
    chunk: int | None = None,
    modalities: Sequence[str] | None = None,
    gamma: float | None = None,
    render_mode: str | None = None,
) -> ManiSkillVectorEnv:
    """A ManiSkill env someone built, driven in place as a ``ManiSkillVectorEnv`` (the registry's entry)."""
    return ManiSkillVectorEnv(env, modalities=modalities, chunk=chunk, gamma=gamma, render_mode=render_mode)


def make_env(num_envs: int = 1, **kwargs: Any) -> gym.Env:
    """``gym.make("fastenv/ManiSkill-v0", env_id=..., num_envs=N, ...)``: the batched env as one gymnasium.Env."""
    from fastenv.vector import BatchedEnv

    return BatchedEnv(make_vec(num_envs, **kwargs))
