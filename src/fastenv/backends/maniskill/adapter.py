"""One ManiSkill env on ManiSkill's CPU simulation as a fastenv simulator adapter (numpy in, numpy out)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv.backends.maniskill.observations import (
    GROUPS,
    Selection,
    extract,
    space_for,
    terminated_of,
)
from fastenv.backends.maniskill.task import FRAME_RENDER_MODES, close_viewer
from fastenv.core.protocol import Info, ObsType

CAPTURES = frozenset({"render", "state"})


def check_capture(capture: Sequence[str], base: Any) -> frozenset[str]:
    """What a recorder may ask the envs to add to their infos, checked against the env."""
    unknown = set(capture) - CAPTURES
    if unknown:
        raise ValueError(f"capture takes {sorted(CAPTURES)}, got {sorted(unknown)}")
    if "render" in capture and base.render_mode not in FRAME_RENDER_MODES:
        raise ValueError(f"recording frames needs the env built with a render_mode of {FRAME_RENDER_MODES}, got {base.render_mode!r}")
    return frozenset(capture)


def one_row(value: Any, scalars: bool = True) -> Any:
    """Row 0 of a batched ManiSkill value, as numpy; 0-d values as Python scalars (infos), or with
    ``scalars=False`` as 0-d arrays of their own dtype (observations, whose space says the dtype)."""
    if isinstance(value, Mapping):
        return {key: one_row(item, scalars) for key, item in value.items()}
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if value.ndim == 0:
            return value.item() if scalars else value.numpy()
        value = value[0]
        return value.item() if scalars and value.ndim == 0 else value.numpy()
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

    Examples:
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
        self.render_mode = "rgb_array" if base.render_mode in FRAME_RENDER_MODES else None
        self._selection = Selection(base)
        self._info: Mapping[str, Any] = base.get_info()
        self.action_space = base.single_action_space
        self._spaces: dict[str, spaces.Box] = {}
        self.select_keys(keys)
        self.capture: frozenset[str] = frozenset()  # what infos also carry for a recorder (set_capture)

    def set_capture(self, capture: Sequence[str]) -> None:
        """Add to every info what ManiSkill's ``RecordEpisode`` reads from the env itself.

        "render": the frame after each step (before any autoreset); "state": ``get_state_dict()``
        after each step and reset (``env_state``), and the episode's seed on reset
        (``episode_seed``). Nothing is added (and nothing rendered) when ``capture`` is empty.
        """
        self.capture = check_capture(capture, self.base)

    def _captured(self, info: dict[str, Any], *, reset: bool) -> dict[str, Any]:
        if "render" in self.capture and not reset:
            info["render"] = one_row(self.base.render())
        if "state" in self.capture:
            info["env_state"] = one_row(self.base.get_state_dict())
            if reset:
                info["episode_seed"] = int(np.asarray(self.base._episode_seed).reshape(-1)[0])
        return info

    # -- keys and rendering ----------------------------------------------------------------------
    def available_keys(self) -> tuple[str, ...]:
        return self._selection.available()

    def select_keys(self, keys: Sequence[str] | None) -> None:
        self.keys = self._selection.select(keys)
        # a group's space follows the selection (sensor_param holds the captured cameras')
        missing = [k for k in self.keys if k not in self._spaces or k in GROUPS]
        if missing:
            sample = extract(self.base.get_obs(self._info), missing, self._selection.cameras)
            self._spaces.update({k: space_for(v) for k, v in sample.items()})
        self.observation_space = spaces.Dict({k: self._spaces[k] for k in self.keys})

    def make_headless(self, render_mode: str | None) -> None:
        close_viewer(self.base)
        if render_mode == "rgb_array" and self.base.render_mode not in FRAME_RENDER_MODES:
            raise ValueError(f"this ManiSkill env was built with render_mode={self.base.render_mode!r}; it cannot render frames (build it with 'rgb_array')")
        self.render_mode = render_mode

    # -- episode ---------------------------------------------------------------------------------
    def _observation(self, raw: Any) -> dict[str, np.ndarray]:
        return {key: one_row(value, scalars=False) for key, value in extract(raw, self.keys, self._selection.cameras).items()}

    def reset(self, *, seed: int | None, options: Mapping[str, Any] | None, rng: np.random.Generator) -> tuple[ObsType, Info]:
        raw, info = self.base.reset(seed=seed, options=None if options is None else dict(options))
        self._info = self.base.get_info()
        info = one_row(info)
        return self._observation(raw), self._captured(info, reset=True) if self.capture else info

    def substep(self, action: Any) -> tuple[float, bool, bool, Info]:
        # BaseEnv.step without get_obs: controller and physics, evaluation, reward.
        base = self.base
        applied = base._step_action(_action(action))
        base._elapsed_steps += 1
        info = base.get_info()
        reward = base.get_reward(obs=None, action=applied, info=info)
        self._info = info
        terminated = not self.ignore_terminations and bool(terminated_of(info, 1, base.device)[0])
        info = one_row(info)
        return float(one_row(reward)), terminated, False, self._captured(info, reset=False) if self.capture else info

    def observe(self) -> ObsType:
        return self._observation(self.base.get_obs(self._info))

    def step(self, action: Any) -> tuple[ObsType, float, bool, bool, Info]:
        raw, reward, terminated, _, info = self.base.step(_action(action))
        self._info = info
        terminated = not self.ignore_terminations and bool(one_row(terminated))
        info = one_row(info)
        return self._observation(raw), float(one_row(reward)), terminated, False, self._captured(info, reset=False) if self.capture else info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return one_row(self.base.render())

    def close(self) -> None:
        if self.owned:
            self.env.close()
        else:  # the user's env goes back as it came
            self._selection.restore()
