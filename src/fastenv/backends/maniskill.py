"""ManiSkill3 backend (mani-skill 3.0.x on SAPIEN), the only module that imports ManiSkill.

ManiSkill runs its envs two ways, and fastenv follows:

- On CUDA (``sim_backend="physx_cuda"``) all parallel envs live in one physics system on the GPU.
  ``ManiSkillVectorEnv`` drives that batched env in place (``ManiSkillBatch`` under fastenv's
  executor) and keeps every tensor on its device.
- On the CPU (``physx_cpu``) a process holds one env. ``ManiSkillAdapter`` makes it a fastenv
  simulator adapter (numpy in, numpy out), and N of them run in fastenv's process (or Ray) workers
  with pipeline stages, dynamic batching and same-step autoreset, as LIBERO envs do.

Either way: headless (no viewer, no human-render camera unless ``render_mode="rgb_array"``);
pruning at the source (the obs mode asks only for the kept textures, sensors no kept key reads
are not built or not captured, images sized by ``camera_size``); sub-steps run the controller,
physics, evaluation (``get_info``) and reward without ``get_obs``, which is where ManiSkill
renders; the observation is taken at a chunk's end, and where an episode ends inside it.

Written against mani-skill 3.0.1 (``BaseEnv.step``, ``_step_action``, ``get_info``,
``get_reward``, ``get_obs``, ``reset(options={"env_idx": ...})``, ``scene.set_timestep``, the
agents' ``set_action`` and articulation drive targets).
"""

from __future__ import annotations

import concurrent.futures
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv._deps import require
from fastenv._validation import check_positive_int
from fastenv.backends._vulkan import configure_vulkan  # noqa: F401  (re-exported: its home before)
from fastenv.backends.base import KEEP, Info, ObsType, check_known_keys
from fastenv.core.executor import Executor
from fastenv.wrappers.action import chunk_space

TEXTURES = ("rgb", "depth", "segmentation", "position", "normal", "albedo")


# -- the machine -----------------------------------------------------------------------------------
def vulkan_unavailable_reason() -> str | None:
    """Why ManiSkill cannot build its envs here, or None when SAPIEN finds a rendering device."""
    configure_vulkan()
    try:
        import sapien
    except ImportError:
        return 'ManiSkill is not installed (pip install "fastenv-rl[maniskill]")'
    try:
        sapien.render.RenderMaterial()  # building any task creates render materials
    except RuntimeError as exc:
        return (
            f"no Vulkan rendering device: SAPIEN says {exc!r} (ManiSkill needs one to build any task; "
            "bash scripts/vulkan.sh installs Mesa's CPU driver on Debian 12)"
        )
    return None


def cuda_available() -> bool:
    """True when torch sees a CUDA device (ManiSkill's GPU simulation can run)."""
    torch = sys.modules.get("torch") or require("torch", "maniskill", "PyTorch")
    return bool(torch.cuda.is_available())


def _maniskill() -> Any:
    configure_vulkan()
    require("mani_skill", "maniskill", "ManiSkill3 (the PyPI package mani-skill)")
    import mani_skill.envs  # noqa: F401  (registers the tasks)
    from mani_skill.utils.registration import REGISTERED_ENVS

    return REGISTERED_ENVS


def check_assets(env_id: str, spec: Any) -> None:
    """Refuse a task whose assets are not downloaded (ManiSkill would ask on stdin, then fail offline)."""
    from mani_skill.utils import assets

    missing = []
    for asset_id in spec.asset_download_ids or []:
        ids = (
            assets.expand_data_group_into_individual_data_source_ids(asset_id)
            if asset_id in assets.DATA_GROUPS
            else [asset_id]
        )
        missing += [i for i in ids if not assets.is_data_source_downloaded(i)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ValueError(
            f"ManiSkill task {env_id!r} needs assets that are not downloaded ({shown}); download them first "
            f"(needs internet): python -m mani_skill.utils.download_asset {env_id}"
        )


# -- keys ------------------------------------------------------------------------------------------
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


def produced_keys(raw: Any) -> list[str]:
    """The fastenv keys in one raw ManiSkill observation."""
    if not isinstance(raw, Mapping):
        return ["state"]
    keys = ["state"] if "state" in raw else []
    for cam, textures in raw.get("sensor_data", {}).items():
        keys += [f"{cam}_{t}" for t in textures]
    return keys


def extract(raw: Any, keys: Sequence[str], cameras: Sequence[str]) -> dict[str, Any]:
    """The kept keys of one raw ManiSkill observation (batched tensors, cloned).

    Cloned: rendered images may be views of the renderer's buffers, rewritten by the next capture.
    """
    if not isinstance(raw, Mapping):
        return {"state": raw.clone()}
    out = {}
    for key in keys:
        split = split_key(key, cameras)
        value = raw["state"] if split is None else raw["sensor_data"][split[0]][split[1]]
        out[key] = value.clone()
    return out


class _Selection:
    """What a built ManiSkill env captures: which sensors and which textures, narrowed to some keys."""

    def __init__(self, base: Any) -> None:
        self.base = base
        self.sensors = dict(base._sensors)  # every sensor the env was built with
        visual = getattr(base.obs_mode_struct, "visual", None)
        self.textures = {t: getattr(visual, t) for t in TEXTURES if visual is not None and hasattr(visual, t)}
        self.state = getattr(base.obs_mode_struct, "state", None)
        self.cameras = tuple(self.sensors)
        self.built = produced_keys(base.get_obs(base.get_info()))

    def available(self) -> tuple[str, ...]:
        return ("state", *(f"{c}_{t}" for c in self.cameras for t in TEXTURES))

    def select(self, modalities: Sequence[str] | None) -> tuple[str, ...]:
        """Capture only what ``modalities`` read (None: all the env was built with)."""
        if modalities is None:
            self.restore()
            return tuple(self.built)
        keys = check_known_keys(modalities, self.available())
        missing = [k for k in keys if k not in self.built]
        if missing:
            raise ValueError(
                f"keys {missing} are not produced by this env (obs_mode={self.base.obs_mode!r}); build it with "
                f"obs_mode={obs_mode_for(keys, self.cameras)!r} or use gym.make('fastenv/ManiSkill-v0', modalities=...)"
            )
        wanted = {split_key(k, self.cameras) for k in keys} - {None}
        cameras, textures = {c for c, _ in wanted}, {t for _, t in wanted}
        overlaid = self._overlaid_cameras()
        if overlaid and "rgb" in textures and (cameras & overlaid or "segmentation" in textures):
            # ManiSkill's digital twins green-screen these cameras' rgb with their segmentation, and
            # read every one of them whenever rgb and segmentation are both captured.
            cameras |= overlaid
            textures.add("segmentation")
        # Sensors nobody reads are not captured; textures nobody reads are not requested.
        self.base._sensors = {uid: s for uid, s in self.sensors.items() if uid in cameras}
        visual = getattr(self.base.obs_mode_struct, "visual", None)
        for texture, built in self.textures.items():
            setattr(visual, texture, built and texture in textures)
        if self.state is not None and wanted:  # (a state-only obs mode has no struct to narrow)
            self.base.obs_mode_struct.state = "state" in keys
        return tuple(keys)

    def _overlaid_cameras(self) -> set[str]:
        """The cameras whose rgb ManiSkill overlays on a green screen (digital twins), if it does."""
        base = self.base
        if getattr(base, "rgb_overlay_mode", "none") == "none" or not getattr(base, "rgb_overlay_paths", None):
            return set()
        if not (self.textures.get("rgb") and self.textures.get("segmentation")):
            return set()  # the obs mode captures no segmentation: ManiSkill overlays nothing either
        return set(base.rgb_overlay_paths) & set(self.sensors)

    def restore(self) -> None:
        self.base._sensors = dict(self.sensors)
        visual = getattr(self.base.obs_mode_struct, "visual", None)
        for texture, on in self.textures.items():
            setattr(visual, texture, on)
        if self.state is not None:
            self.base.obs_mode_struct.state = self.state


def _box_for(batch: Any) -> spaces.Box:
    """The single-env Box of a batched tensor (its bounds from its dtype)."""
    dtype = np.dtype(str(batch.dtype).replace("torch.", ""))
    shape = tuple(batch.shape[1:])
    if dtype.kind in "iu":
        return spaces.Box(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype)
    if dtype.kind == "b":
        return spaces.Box(0, 1, shape, dtype)
    return spaces.Box(-np.inf, np.inf, shape, dtype)


def _terminated(info: Mapping[str, Any], n: int, device: Any) -> Any:
    import torch

    out = torch.zeros(n, dtype=torch.bool, device=device)
    for key in ("success", "fail"):
        if key in info:
            out |= torch.as_tensor(info[key], device=device).bool().reshape(n)
    return out


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


def _close_viewer(base: Any) -> None:
    if getattr(base, "_viewer", None) is not None:
        base._viewer.close()
        base._viewer = None


# -- one env on the CPU ------------------------------------------------------------------------------
def _row(value: Any) -> Any:
    """Row 0 of a batched ManiSkill value, as numpy (0-d values as Python scalars)."""
    if isinstance(value, Mapping):
        return {key: _row(item) for key, item in value.items()}
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if value.ndim == 0:
            return value.item()
        value = value[0]
        return value.item() if value.ndim == 0 else value.numpy()
    return value


def _action(action: Any) -> Any:
    """An action as ManiSkill takes it: numpy, a dict of numpy per agent for multi-robot tasks."""
    if isinstance(action, Mapping):
        return {key: np.asarray(value) for key, value in action.items()}
    return np.asarray(action)


class ManiSkillAdapter:
    """One ManiSkill env (``num_envs=1``, ManiSkill's CPU simulation) as a fastenv simulator adapter.

    Observations are dicts of numpy arrays with fastenv's keys ("state", "<camera>_<texture>");
    actions are numpy arrays; ``step`` is ManiSkill's own ``env.step``, so one step of it is the
    stock env's. The time limit is fastenv's (``SimEnv``'s ``max_episode_steps``), as in
    ManiSkill where it is Gymnasium's ``TimeLimit``.

    Args:
        env: the ManiSkill env (wrapped or not).
        keys: keys to produce (None: all the env was built with).
        owned: fastenv built it (closing closes it); otherwise closing gives it back as it came.
        ignore_terminations: success and failure end no episode (only the time limit does), as
            ManiSkill's vector env's option of that name.

    Example:
        >>> adapter = ManiSkillAdapter(gym.make("PickCube-v1", obs_mode="state"))
    """

    shared_physics = False

    def __init__(
        self, env: gym.Env, *, keys: Sequence[str] | None = None, owned: bool = False, ignore_terminations: bool = False
    ) -> None:
        import torch

        base = env.unwrapped
        if int(base.num_envs) != 1:
            raise ValueError(
                f"ManiSkillAdapter drives one env (num_envs=1), got num_envs={base.num_envs}; "
                "a batched env runs in ManiSkillVectorEnv"
            )
        self.torch = torch
        self.env, self.base, self.owned = env, base, owned
        self.ignore_terminations = bool(ignore_terminations)
        self.render_fps = int(getattr(base, "control_freq", 20) or 20)
        self.render_mode = base.render_mode if base.render_mode == "rgb_array" else None
        self._selection = _Selection(base)
        self._info: Mapping[str, Any] = base.get_info()
        self.action_space = base.single_action_space
        self._spaces: dict[str, spaces.Box] = {}
        self.select_keys(keys)

    # -- keys and rendering ----------------------------------------------------------------------
    def available_keys(self) -> tuple[str, ...]:
        return self._selection.available()

    def select_keys(self, keys: Sequence[str] | None) -> None:
        self.keys = self._selection.select(keys)
        missing = [k for k in self.keys if k not in self._spaces]
        if missing:
            sample = extract(self.base.get_obs(self._info), missing, self._selection.cameras)
            self._spaces.update({k: _box_for(v) for k, v in sample.items()})
        self.observation_space = spaces.Dict({k: self._spaces[k] for k in self.keys})

    def make_headless(self, render_mode: str | None) -> None:
        _close_viewer(self.base)
        if render_mode == "rgb_array" and self.base.render_mode != "rgb_array":
            raise ValueError("this ManiSkill env was built without render_mode='rgb_array'; it cannot render frames")
        self.render_mode = render_mode

    # -- episode ---------------------------------------------------------------------------------
    def _observation(self, raw: Any) -> dict[str, np.ndarray]:
        return {key: _row(value) for key, value in extract(raw, self.keys, self._selection.cameras).items()}

    def reset(self, *, seed: int | None, options: Mapping[str, Any] | None, rng: np.random.Generator) -> tuple[ObsType, Info]:
        raw, info = self.base.reset(seed=seed, options=None if options is None else dict(options))
        self._info = self.base.get_info()
        return self._observation(raw), _row(info)

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        # BaseEnv.step without get_obs: controller and physics, evaluation, reward.
        base = self.base
        applied = base._step_action(_action(action))
        base._elapsed_steps += 1
        info = base.get_info()
        reward = base.get_reward(obs=None, action=applied, info=info)
        self._info = info
        terminated = not self.ignore_terminations and bool(_terminated(info, 1, base.device)[0])
        return float(_row(reward)), terminated, False, _row(info)

    def observe(self) -> ObsType:
        return self._observation(self.base.get_obs(self._info))

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        raw, reward, terminated, _, info = self.base.step(_action(action))
        self._info = info
        terminated = not self.ignore_terminations and bool(_row(terminated))
        return self._observation(raw), float(_row(reward)), terminated, False, _row(info)

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return _row(self.base.render())

    def close(self) -> None:
        if self.owned:
            self.env.close()
        else:  # the user's env goes back as it came
            self._selection.restore()


# -- many envs in one world (GPU) ------------------------------------------------------------------
class _HeldTargets:
    """Keeps the control targets of the envs not being stepped while the shared world advances.

    ManiSkill's agents set every env's targets from one batched action. For the envs whose turn
    it is not (another pipeline stage's, or whose episode ended earlier in the chunk), the
    controllers' per-env state and the articulations' drive targets are put back as they were
    before ``set_action``, so those envs hold their last targets, exactly as ManiSkill's own
    ``step(None)`` holds everyone's.
    """

    def __init__(self, base: Any) -> None:
        self.base = base
        agent = base.agent
        agents = list(getattr(agent, "agents", [agent]))
        self.articulations = [a.robot for a in agents]
        self.controllers = []
        for a in agents:
            controller = a.controller
            self.controllers += list(getattr(controller, "controllers", {}).values()) or [controller]

    def _tensors(self, obj: Any) -> dict[str, Any]:
        n = self.base.num_envs
        out = {}
        for name, value in vars(obj).items():
            if hasattr(value, "shape") and hasattr(value, "clone") and value.ndim and value.shape[0] == n:
                out[name] = value
            elif hasattr(value, "raw_pose") and value.raw_pose.shape[0] == n:  # ManiSkill's batched Pose
                out[name] = value
        return out

    def snapshot(self) -> list[Any]:
        state = []
        for c in self.controllers:
            state.append({k: (v.raw_pose.clone() if hasattr(v, "raw_pose") else v.clone()) for k, v in self._tensors(c).items()})
        for art in self.articulations:
            state.append((art.get_drive_targets().clone(), art.get_drive_velocities().clone()))
        return state

    def restore(self, state: list[Any], rows: Any) -> None:
        k = len(self.controllers)
        for c, saved in zip(self.controllers, state[:k]):
            current = self._tensors(c)
            for name, value in saved.items():
                now = current.get(name)
                if now is None:
                    continue
                if hasattr(now, "raw_pose"):
                    raw = now.raw_pose.clone()
                    raw[rows] = value[rows]
                    setattr(c, name, type(now).create_from_pq(raw[:, :3], raw[:, 3:]))
                else:
                    now = now.clone()
                    now[rows] = value[rows]
                    setattr(c, name, now)
        for art, (targets, velocities) in zip(self.articulations, state[k:]):
            now_t, now_v = art.get_drive_targets().clone(), art.get_drive_velocities().clone()
            now_t[rows], now_v[rows] = targets[rows], velocities[rows]
            art.set_joint_drive_targets(now_t, joints=art.active_joints)
            art.set_joint_drive_velocity_targets(now_v, joints=art.active_joints)


class _RandomStreams:
    """ManiSkill's per-env random streams (BaseEnv 3.0.1: main and episode seeds and generators).

    A seeded ``BaseEnv.reset`` replaces every env's streams with those of its seed list, the envs
    it does not reset included. ``ManiSkillBatch`` resets seeded envs one by one; this keeps, for
    each env, the streams its own reset left, and every other env's as they were.
    """

    NAMES = ("_main_seed", "_batched_main_rng", "_episode_seed", "_batched_episode_rng")

    def __init__(self, base: Any) -> None:
        self.base = base
        self.active = all(getattr(base, name, None) is not None for name in self.NAMES)
        if self.active:
            self.main_seed = list(base._main_seed)
            self.main_rngs = list(base._batched_main_rng.rngs)
            self.main_rng = base._main_rng
            self.episode_seed = np.array(base._episode_seed)
            self.episode_rngs = list(base._batched_episode_rng.rngs)

    def keep(self, rows: Sequence[int]) -> None:
        """Keep the streams the last reset left to ``rows``."""
        if not self.active:
            return
        base = self.base
        for r in rows:
            self.main_seed[r] = base._main_seed[r]
            self.main_rngs[r] = base._batched_main_rng.rngs[r]
            self.episode_seed[r] = base._episode_seed[r]
            self.episode_rngs[r] = base._batched_episode_rng.rngs[r]
        if 0 in rows:  # ManiSkill's unbatched generators are env 0's
            self.main_rng = base._main_rng

    def restore(self) -> None:
        if not self.active:
            return
        base = self.base
        base._main_seed = self.main_seed
        base._batched_main_rng = type(base._batched_main_rng).from_rngs(self.main_rngs)
        base._main_rng = self.main_rng
        base._episode_seed = self.episode_seed
        base._batched_episode_rng = type(base._batched_episode_rng).from_rngs(self.episode_rngs)
        base._episode_rng = base._batched_episode_rng[0]


class ManiSkillBatch:
    """A batched ManiSkill env as a ``BatchSimulator``: all its envs in one physics world, on one device.

    A sub-step of some rows advances the whole world once, for all its envs together; the other
    envs hold their last control targets (``_HeldTargets``), never a substituted action.
    ``get_obs``, where ManiSkill renders, runs only in ``step`` and ``observe``. Episodes last
    ``max_episode_steps`` sub-steps of their own (truncation, reported with success on that step
    too, as ManiSkill's time limit), or end on ``success`` or ``fail``; ``elapsed_steps`` in the
    infos is each env's own count.
    """

    batched = True

    def __init__(
        self, base: Any, keys: Sequence[str], cameras: Sequence[str], max_episode_steps: int | None, ignore_terminations: bool = False
    ) -> None:
        import torch

        from fastenv.core.arrays import TorchOps

        self.torch = torch
        self.base = base
        self.num_envs = int(base.num_envs)
        self.device = base.device
        self.ops = TorchOps(self.device)
        self.keys, self.cameras = tuple(keys), tuple(cameras)
        self.max_episode_steps = max_episode_steps
        self.ignore_terminations = bool(ignore_terminations)
        self.single_action_space = base.single_action_space
        self._env_steps = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        self._info: Mapping[str, Any] = base.get_info()
        self._held = _HeldTargets(base)
        self.full_obs = extract(base.get_obs(self._info), self.keys, self.cameras)
        self.single_observation_space = spaces.Dict({k: _box_for(v) for k, v in self.full_obs.items()})

    def _rows_of(self, info: Mapping[str, Any], rows: Any) -> dict[str, Any]:
        """The per-env entries of a ManiSkill info, for ``rows``."""
        out: dict[str, Any] = {}
        for key, value in info.items():
            if isinstance(value, Mapping):
                out[key] = self._rows_of(value, rows)
                continue
            value = self.torch.as_tensor(value, device=self.device)
            if key == "elapsed_steps":
                # ManiSkill's counter advances for every env whenever the shared world steps (other
                # stages' turns, the rest of a chunk after an episode ended): each env's own count,
                # in ManiSkill's dtype.
                out[key] = self._env_steps[rows].to(value.dtype)
            elif value.ndim == 0:  # one value for the call (reset's "reconfigure"): every row's, as on the CPU path
                out[key] = value.reshape(1).expand(len(rows)).clone()
            elif value.shape[0] == self.num_envs:
                out[key] = value[rows]
        return out

    def reset(self, rows: Any, seeds: Sequence[int | None] | None, options: Mapping[str, Any] | None) -> tuple[Any, Any]:
        """Reset ``rows``: seeded envs each with its own seed, as a CPU env reset with it.

        All envs, all seeded (or none): one ManiSkill reset with the seed list, ManiSkill's own.
        Otherwise the unseeded envs reset together, and each seeded env alone with a seed list
        of its seed only: ManiSkill seeds the torch draws of a reset with the list's first seed and
        its per-env generators from the list, so a shared call would draw env i's episode from
        another env's seed and its position in the batch. Only the last call observes.
        """
        options = dict(options or {})
        row_list = rows.tolist()
        seeded = [] if seeds is None else [(r, int(s)) for r, s in zip(row_list, seeds) if s is not None]
        if not seeded:
            if len(row_list) < self.num_envs:
                options["env_idx"] = rows
            raw, info = self.base.reset(seed=None, options=options or None)
        elif len(seeded) == self.num_envs:
            raw, info = self.base.reset(seed=[s for _, s in seeded], options=options or None)
        else:
            unseeded = sorted(set(row_list) - {r for r, _ in seeded})
            calls = ([(unseeded, None)] if unseeded else []) + [([r], s) for r, s in seeded]
            raw, info = self._reset_each(calls, options)
        self._env_steps[rows] = 0
        self._info = self.base.get_info()
        self.full_obs = extract(raw, self.keys, self.cameras)
        return {k: v[rows] for k, v in self.full_obs.items()}, self._rows_of(info, rows)

    def _reset_each(self, calls: list[tuple[list[int], int | None]], options: dict[str, Any]) -> tuple[Any, Any]:
        base, torch = self.base, self.torch
        streams = _RandomStreams(base)
        for k, (env_idx, seed) in enumerate(calls):
            last = k == len(calls) - 1
            if not last:  # the observation (ManiSkill's render) is taken once, after every env reset
                base.get_obs = lambda *args, **kwargs: None
            try:
                raw, info = base.reset(
                    seed=None if seed is None else [seed] * self.num_envs,
                    options={**options, "env_idx": torch.as_tensor(env_idx, device=self.device)},
                )
            finally:
                if not last:
                    del base.get_obs
            streams.keep(env_idx)
        streams.restore()
        return raw, info

    def _step_world(self, rows: Any, actions: Any) -> Any:
        """Advance the world once: ``rows`` act, every other env holds its last targets."""
        torch, base = self.torch, self.base
        full = torch.zeros((self.num_envs, *actions.shape[1:]), dtype=actions.dtype, device=self.device)
        full[rows] = actions
        idle = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        idle[rows] = False
        if not bool(idle.any()):
            return base._step_action(full)
        agent = base.agent
        state = self._held.snapshot()
        original = agent.set_action

        def set_action_holding(action: Any) -> None:
            original(action)
            self._held.restore(state, idle)

        agent.set_action = set_action_holding  # for this step only: ManiSkill sets targets, then physics runs
        try:
            return base._step_action(full)
        finally:
            del agent.set_action

    def substep(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any]:
        torch, base = self.torch, self.base
        applied = self._step_world(rows, actions)
        base._elapsed_steps += 1
        info = base.get_info()
        reward = torch.as_tensor(base.get_reward(obs=None, action=applied, info=info), device=self.device).to(torch.float64)
        self._info = info
        self._env_steps[rows] += 1
        terminated = _terminated(info, self.num_envs, self.device)[rows]
        if self.ignore_terminations:
            terminated = torch.zeros_like(terminated)
        truncated = torch.zeros_like(terminated)
        if self.max_episode_steps is not None:  # whatever terminated says, as ManiSkill's TimeLimitWrapper
            truncated = self._env_steps[rows] >= self.max_episode_steps
        return reward[rows], terminated, truncated, self._rows_of(info, rows)

    def step(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        reward, terminated, truncated, info = self.substep(rows, actions)
        return self.observe(rows), reward, terminated, truncated, info

    def observe(self, rows: Any) -> Any:
        obs = extract(self.base.get_obs(self._info), self.keys, self.cameras)
        return {k: v[rows] for k, v in obs.items()}


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
        ignore_terminations: bool = False,
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
        self.render_mode = (base.render_mode if base.render_mode == "rgb_array" else None) if render_mode == KEEP else render_mode
        if max_episode_steps is None:
            max_episode_steps = _registered_max_steps(env)
        max_episode_steps = None if max_episode_steps is None else check_positive_int("max_episode_steps", max_episode_steps)
        _close_viewer(base)
        selection = _Selection(base)
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


# -- construction ------------------------------------------------------------------------------------
def uses_gpu(num_envs: int, sim_backend: str | None) -> bool:
    """Whether a ManiSkill task should run batched on the GPU (else: one CPU env per process)."""
    if sim_backend is not None and sim_backend != "auto":
        return "cuda" in sim_backend or sim_backend == "gpu"
    return num_envs > 1 and cuda_available()


def build(
    env_id: str,
    num_envs: int,
    *,
    modalities: Sequence[str] | None,
    camera_size: int | tuple[int, int] | None,
    render_mode: str | None,
    **env_kwargs: Any,
) -> gym.Env:
    """A ManiSkill task built lean: only the kept textures and cameras, no human-render camera unless asked."""
    registered = _maniskill()
    if env_id not in registered:
        raise ValueError(f"unknown ManiSkill env_id {env_id!r}; known: {sorted(registered)}")
    spec = registered[env_id]
    check_assets(env_id, spec)
    keys = list(modalities) if modalities is not None else None
    cameras = None
    if keys is not None:
        cameras = frozenset(k.rsplit("_", 1)[0] for k in keys if k != "state")
        env_kwargs.setdefault("obs_mode", obs_mode_for(keys, sorted(cameras)))
    if camera_size is not None:
        h, w = (camera_size, camera_size) if isinstance(camera_size, int) else camera_size
        env_kwargs.setdefault("sensor_configs", dict(width=w, height=h))
    cls = type(spec.cls.__name__, (_Pruned, spec.cls), {"_fastenv_cameras": cameras, "_fastenv_render": render_mode == "rgb_array"})
    return cls(num_envs=num_envs, render_mode=render_mode, **{**spec.default_kwargs, **env_kwargs})


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
        # a digital twin loads its green-screen overlay for each of these cameras (kept or not)
        overlaid = set(getattr(self, "rgb_overlay_paths", None) or ())
        return [c for uid, c in configs.items() if uid in self._fastenv_cameras or uid in overlaid]

    @property
    def _default_human_render_camera_configs(self) -> Any:
        return super()._default_human_render_camera_configs if self._fastenv_render else []


def make_cpu_env(
    env_id: str = "PickCube-v1",
    *,
    modalities: Sequence[str] | None = ("state",),
    chunk: int | None = 8,
    gamma: float | None = None,
    camera_size: int | tuple[int, int] | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    episode_statistics: bool = False,
    ignore_terminations: bool = False,
    **env_kwargs: Any,
) -> gym.Env:
    """One ManiSkill env on ManiSkill's CPU simulation, in fastenv's single-env stack (numpy)."""
    from fastenv.core import SimEnv
    from fastenv.wrappers import wrap

    env_kwargs.setdefault("sim_backend", "physx_cpu")
    env = build(env_id, 1, modalities=modalities, camera_size=camera_size, render_mode=render_mode, **env_kwargs)
    if max_episode_steps is None:
        max_episode_steps = _maniskill()[env_id].max_episode_steps
    adapter = ManiSkillAdapter(env, keys=modalities, owned=True, ignore_terminations=ignore_terminations)
    sim = SimEnv(adapter, max_episode_steps=max_episode_steps)
    return wrap(sim, chunk=chunk, gamma=gamma, render_mode=render_mode, episode_statistics=episode_statistics)


_VECTOR_OPTIONS = ("num_workers", "step_timeout", "startup_timeout", "threads_per_worker", "max_restarts", "spin_wait", "info_format", "context", "backend", "ray_options", "layout", "tune_options")


def make_vec(
    num_envs: int = 1,
    *,
    env_id: str = "PickCube-v1",
    modalities: Sequence[str] | None = ("state",),
    chunk: int | None = 8,
    gamma: float | None = None,
    camera_size: int | tuple[int, int] | None = None,
    pipeline_stages: int | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    sim_backend: str | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """A ManiSkill task built lean for RL, as a vector env (``fastenv/ManiSkill-v0``).

    With CUDA (or ``sim_backend="physx_cuda"``) the N envs are one batched env on the GPU,
    driven in place (``ManiSkillVectorEnv``). Without, each is a CPU env in fastenv's workers
    (``PipelineVectorEnv``: ``num_workers``, ``backend="ray"`` and the other vector options apply).

    Example:
        >>> envs = gym.make_vec("fastenv/ManiSkill-v0", num_envs=8, env_id="PickCube-v1", chunk=8)
    """
    num_envs = check_positive_int("num_envs", num_envs)
    vector = {key: kwargs.pop(key) for key in _VECTOR_OPTIONS if key in kwargs}
    if uses_gpu(num_envs, sim_backend):
        if vector:
            raise ValueError(f"{sorted(vector)} are options of the CPU workers; a GPU env is batched in one process")
        ignore_terminations = kwargs.pop("ignore_terminations", False)
        env = build(
            env_id, num_envs, modalities=modalities, camera_size=camera_size, render_mode=render_mode,
            sim_backend=sim_backend or "physx_cuda", **kwargs,
        )
        if max_episode_steps is None:
            max_episode_steps = _maniskill()[env_id].max_episode_steps
        return ManiSkillVectorEnv(
            env, modalities=modalities, chunk=chunk, gamma=gamma, max_episode_steps=max_episode_steps,
            pipeline_stages=pipeline_stages or 1, render_mode=render_mode, ignore_terminations=ignore_terminations,
        )
    from fastenv.vector import make_pipeline

    if env_id not in _maniskill():  # fail here, not in every worker
        raise ValueError(f"unknown ManiSkill env_id {env_id!r}; known: {sorted(_maniskill())}")
    check_assets(env_id, _maniskill()[env_id])
    if sim_backend is not None:
        kwargs["sim_backend"] = sim_backend
    if pipeline_stages is not None:
        vector["pipeline_stages"] = pipeline_stages
    return make_pipeline(
        make_cpu_env, num_envs, env_id=env_id, modalities=modalities, chunk=chunk,
        gamma=gamma, camera_size=camera_size, max_episode_steps=max_episode_steps, render_mode=render_mode,
        **vector, **kwargs,
    )


def make_env(num_envs: int | None = None, **kwargs: Any) -> gym.Env:
    """``gym.make("fastenv/ManiSkill-v0", env_id=..., ...)``: one CPU env, or with ``num_envs`` the
    vector env as one batched gymnasium.Env."""
    from fastenv.vector import BatchedEnv

    if num_envs is None and not uses_gpu(1, kwargs.get("sim_backend")) and "pipeline_stages" not in kwargs:
        return make_cpu_env(**kwargs)
    return BatchedEnv(make_vec(1 if num_envs is None else num_envs, **kwargs))


def adopt(env: gym.Env, **options: Any) -> Any:
    """A ManiSkill env someone built (the registry's entry).

    A CPU env of one becomes a ``SimEnv`` (fastenv's wrappers then go on top); a batched env is
    driven in place as a ``ManiSkillVectorEnv`` built with ``wrap()``'s options.
    """
    base = env.unwrapped
    if int(base.num_envs) == 1 and not getattr(getattr(base, "device", None), "type", "cpu") == "cuda":
        from fastenv.core import SimEnv

        return SimEnv(ManiSkillAdapter(env), max_episode_steps=_registered_max_steps(env))
    if options.get("flatten") or options.get("episode_statistics") or not options.get("headless", True):
        raise ValueError("for batched ManiSkill envs wrap() takes chunk, modalities, gamma and render_mode")
    return ManiSkillVectorEnv(
        env, modalities=options.get("modalities"), chunk=options.get("chunk"), gamma=options.get("gamma"),
        render_mode=options.get("render_mode", KEEP),
    )
