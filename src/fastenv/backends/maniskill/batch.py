"""Many ManiSkill envs in one physics world (usually on a GPU) as a fastenv ``BatchSimulator``.

The envs not being stepped hold their last control targets (``_HeldTargets``); seeded envs reset
one by one keep their own random streams (``_RandomStreams``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from fastenv.backends.maniskill.adapter import check_capture
from fastenv.backends.maniskill.observations import extract, space_for, terminated_of
from fastenv.core.arrays import take_rows


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
        self.single_observation_space = spaces.Dict({k: space_for(v) for k, v in self.full_obs.items()})
        self.capture: frozenset[str] = frozenset()  # what infos also carry for a recorder (set_capture)

    def set_capture(self, capture: Sequence[str]) -> None:
        """As ``ManiSkillAdapter.set_capture``: frames ("render") and states ("state") in the infos, per row."""
        self.capture = check_capture(capture, self.base)

    def _captured(self, info: dict[str, Any], rows: Any, *, reset: bool) -> dict[str, Any]:
        from fastenv.core.arrays import tree_map

        base = self.base
        if "render" in self.capture and not reset:
            info["render"] = self.torch.as_tensor(base.render(), device=self.device)[rows]
        if "state" in self.capture:
            info["env_state"] = tree_map(lambda v: self.torch.as_tensor(v, device=self.device)[rows], base.get_state_dict())
            if reset:
                info["episode_seed"] = self.torch.as_tensor(np.asarray(base._episode_seed, dtype=np.int64), device=self.device)[rows]
        return info

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
        info = self._rows_of(info, rows)
        return take_rows(self.full_obs, rows), self._captured(info, rows, reset=True) if self.capture else info

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
        terminated = terminated_of(info, self.num_envs, self.device)[rows]
        if self.ignore_terminations:
            terminated = torch.zeros_like(terminated)
        truncated = torch.zeros_like(terminated)
        if self.max_episode_steps is not None:  # whatever terminated says, as ManiSkill's TimeLimitWrapper
            truncated = self._env_steps[rows] >= self.max_episode_steps
        info = self._rows_of(info, rows)
        return reward[rows], terminated, truncated, self._captured(info, rows, reset=False) if self.capture else info

    def step(self, rows: Any, actions: Any) -> tuple[Any, Any, Any, Any, Any]:
        reward, terminated, truncated, info = self.substep(rows, actions)
        return self.observe(rows), reward, terminated, truncated, info

    def observe(self, rows: Any) -> Any:
        return take_rows(extract(self.base.get_obs(self._info), self.keys, self.cameras), rows)
