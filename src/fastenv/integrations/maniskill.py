"""ManiSkill's vector-env conventions on a fastenv vector env: scripts written for ManiSkill run unchanged.

ManiSkill's own training scripts build ``gym.make(env_id, num_envs=N, ...)``, wrap it in
``RecordEpisode`` for videos and trajectories, then in ``ManiSkillVectorEnv(env, N,
ignore_terminations=..., record_metrics=...)``, and read torch tensors on a device, a flat state
observation, ``infos["final_observation"]`` as the whole batch, ``infos["final_info"]`` with
``"episode"`` metrics (``success_once``, ``fail_once``, ``return``, ``episode_len``, ``reward``,
and with ``ignore_terminations`` also ``success_at_end``/``fail_at_end``), and the ``_final_info``
mask. This module has the same three steps under the same names: ``make`` (for ``gym.make``),
``RecordEpisode`` and ``ManiSkillVectorEnv``. Import them from here and change ``gym.make`` to
``make``: the envs then run in fastenv's vector env (N CPU envs in worker processes where
ManiSkill's own CPU simulation holds one, or the batched GPU env in place), the script sees
ManiSkill's conventions, and the recordings are ManiSkill's files. ``make_vec`` does all of
``make`` and ``ManiSkillVectorEnv`` in one call.

Importing this module needs ``pip install -e ".[maniskill]"``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv

from fastenv._deps import require
from fastenv.backends.maniskill.observations import maniskill_layout
from fastenv.core.arrays import put_rows, tree_map
from fastenv.integrations._maniskill_configure import configure
from fastenv.integrations._maniskill_flatten import (
    FlattenActionSpaceWrapper,
    FlattenRGBDObservationWrapper,
    flattened,
)
from fastenv.integrations._maniskill_record import RecordEpisode
from fastenv.vector import VECTOR_OPTIONS

torch = require("torch", "maniskill", "PyTorch")

RESET_KEYS = ("reconfigure",)  # what ManiSkill's reset adds to its info


def _tensor(value: Any, device: Any) -> Any:
    return tree_map(lambda x: torch.as_tensor(x if hasattr(x, "detach") else np.asarray(x), device=device), value)


def _numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def _as_dtype(value: Any, dtype: Any) -> Any:
    return value if dtype is None or value.dtype == dtype else value.to(dtype)


def _maniskill_seeds(seed: int, num_envs: int) -> list[int]:
    """The per-env seeds ManiSkill's ``BaseEnv.reset(seed=seed)`` derives for ``num_envs`` envs.

    ``_set_main_rng``/``_set_episode_rng`` (3.0.1): env 0 gets ``seed``, the others draws of
    ``RandomState(seed)``; a reset with this list leaves every seed and generator as ``seed`` does.
    """
    return [seed, *np.random.RandomState(seed).randint(2**31, size=(num_envs - 1,)).tolist()]


def _info_dtypes(env: gym.Env) -> dict[str, Any]:
    """The torch dtype of each entry of a ManiSkill env's info (run in a worker: ``apply``)."""

    def dtypes(info: Mapping[str, Any]) -> dict[str, Any]:
        return {key: dtypes(value) if isinstance(value, Mapping) else getattr(value, "dtype", None) for key, value in info.items()}

    return dtypes(env.get_wrapper_attr("adapter").base.get_info())


def _layout_space(space: gym.Space) -> gym.Space:
    """A Dict space under fastenv's keys in ManiSkill's layout (as ``_obs`` lays out the values)."""
    if not isinstance(space, gym.spaces.Dict):
        return space
    nest = lambda tree: gym.spaces.Dict([(k, nest(v)) for k, v in tree.items()]) if isinstance(tree, Mapping) else tree  # noqa: E731
    return nest(maniskill_layout(space.spaces))


class _Limit:
    """What ManiSkill's ``gym_utils.find_max_episode_steps_value(envs._env)`` reads."""

    def __init__(self, max_episode_steps: int | None) -> None:
        self.max_episode_steps = max_episode_steps
        self.spec = None

    def get_wrapper_attr(self, name: str) -> Any:
        if name == "max_episode_steps":
            return self.max_episode_steps
        raise AttributeError(name)


class ManiSkillConventions(VectorEnv):
    """A fastenv vector env of ManiSkill envs, seen the way ManiSkill's ``ManiSkillVectorEnv`` shows them.

    Args:
        env: the fastenv vector env (``gym.make_vec("fastenv/ManiSkill-v0", ..., chunk=None)``).
        record_metrics: add ManiSkill's ``episode`` metrics to the infos.
        ignore_terminations: report no termination (the envs were built not to end on them),
            and record ``success_at_end``/``fail_at_end``.
        device: where tensors go (default: CUDA when there is one, else the CPU).
        max_episode_steps: the episodes' time limit, for ``find_max_episode_steps_value``.

    Examples:
        >>> envs = ManiSkillConventions(gym.make_vec("fastenv/ManiSkill-v0", num_envs=8, chunk=None), record_metrics=True)
    """

    def __init__(
        self,
        env: VectorEnv,
        *,
        record_metrics: bool = False,
        ignore_terminations: bool = False,
        device: Any = None,
        max_episode_steps: int | None = None,
    ) -> None:
        self.env = env
        self.num_envs = env.num_envs
        self._batched = hasattr(env.unwrapped, "sim")  # fastenv's batched ManiSkill env (GPU), not CPU workers
        self.record_metrics, self.ignore_terminations = bool(record_metrics), bool(ignore_terminations)
        self.device = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
        self._env = _Limit(max_episode_steps)
        # ManiSkill's info dtypes (an int32 elapsed_steps, float32 evaluations): CPU workers hand a 0-d
        # value on as a Python scalar, which batches to int64 or float64. The batched env keeps them.
        raw = env.unwrapped
        self._dtypes = {} if self._batched or not hasattr(raw, "apply") else raw.apply(_info_dtypes, env_ids=[0])[0]
        space = env.single_observation_space
        # ManiSkill's state obs mode gives the flat array; its FlattenRGBDObservationWrapper a dict, even of "state" alone
        self._flat = isinstance(space, gym.spaces.Dict) and list(space.spaces) == ["state"] and not flattened(env)
        self.single_observation_space = space["state"] if self._flat else _layout_space(space)
        self.single_action_space = env.single_action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self.metadata = {**env.metadata, "autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = env.render_mode
        self.spec = env.spec
        n = self.num_envs
        self.success_once = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.fail_once = torch.zeros(n, dtype=torch.bool, device=self.device)
        self.returns = torch.zeros(n, dtype=torch.float32, device=self.device)

    # -- ManiSkill's layout ----------------------------------------------------------------------
    def _obs(self, obs: Mapping[str, Any]) -> Any:
        """Flat state as ManiSkill's state mode gives it; else ManiSkill's nested layout (agent, extra,
        sensor_param, sensor_data by camera, state)."""
        if self._flat:
            return _tensor(obs["state"], self.device)
        return _tensor(maniskill_layout(obs), self.device)

    def _info(self, infos: Mapping[str, Any], done: np.ndarray | None = None, *, dtypes: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Every env's info as batched tensors in ManiSkill's dtypes: the step's own where an episode ended (from final_info)."""
        dtypes = self._dtypes if dtypes is None else dtypes
        out: dict[str, Any] = {}
        for key, value in infos.items():
            if key.startswith("_") or key in ("final_obs", "final_observation", "final_info", "env_ids"):
                continue
            if key in RESET_KEYS:  # a reset's, never a step's; ManiSkill gives one Python bool for the call
                if done is None:
                    out[key] = bool(_numpy(value).any())
                continue
            if isinstance(value, Mapping):
                out[key] = self._info(value, dtypes=dtypes.get(key) or {})
            else:
                out[key] = _as_dtype(_tensor(value, self.device), dtypes.get(key))
        if done is not None and "final_info" in infos:
            final = infos["final_info"]
            rows = torch.as_tensor(done, device=self.device)
            for key, value in final.items():
                if key.startswith("_") or isinstance(value, Mapping):
                    continue
                value = _as_dtype(_tensor(value, self.device), dtypes.get(key))
                if key in out and out[key].shape == value.shape:
                    out[key] = torch.where(rows.reshape(-1, *[1] * (value.ndim - 1)), value, out[key])
                else:
                    out[key] = value
        return out

    def _restart_metrics(self, rows: Any) -> None:
        self.success_once[rows] = False
        self.fail_once[rows] = False
        self.returns[rows] = 0

    # -- Gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """ManiSkill's reset (``options["env_idx"]``: those envs only).

        On the batched path an int seed gives every env the seed ManiSkill's own ``reset(seed=int)``
        derives for it (resetting all envs is then exactly ManiSkill's); on CPU workers env i gets
        seed + i. In a partial reset each env's episode follows from its own seed.
        """
        options = dict(options or {})
        # One env's seed is the int itself either way; kept an int, a RecordEpisode below records
        # reset_kwargs as ManiSkill's does ({"seed": 3}, not [3]).
        if self._batched and self.num_envs > 1 and isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            seed = _maniskill_seeds(int(seed), self.num_envs)
        rows: Any = slice(None)
        if "env_idx" in options:  # ManiSkill's partial reset option
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[np.asarray(torch.as_tensor(options.pop("env_idx")).cpu())] = True
            options["reset_mask"], rows = mask, torch.as_tensor(mask, device=self.device)
        obs, infos = self.env.reset(seed=seed, options=options or None)
        self._restart_metrics(rows)
        return self._obs(obs), self._info(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict]:
        if hasattr(actions, "detach") and not self._batched:  # CPU workers take numpy
            actions = _numpy(actions)
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        done_np = _numpy(terminations) | _numpy(truncations)
        reward = _tensor(rewards, self.device)
        if "chunk_steps" not in infos:
            reward = reward.to(torch.float32)  # ManiSkill's dtype: one step's reward is a float32
        terminations = _tensor(terminations, self.device)
        truncations = _tensor(truncations, self.device)
        step_info = self._info(infos, done_np)  # what the step itself reported, for every env
        episode: dict[str, Any] | None = None
        if self.record_metrics:
            episode = {}
            self.returns += reward
            if "success" in step_info:
                self.success_once |= step_info["success"].bool()
                episode["success_once"] = self.success_once.clone()
            if "fail" in step_info:
                self.fail_once |= step_info["fail"].bool()
                episode["fail_once"] = self.fail_once.clone()
            episode["return"] = self.returns.clone()
            episode["episode_len"] = step_info["elapsed_steps"].to(torch.int32).clone()
            episode["reward"] = episode["return"] / episode["episode_len"]
            if self.ignore_terminations:
                for key in ("success", "fail"):
                    if key in step_info:
                        episode[f"{key}_at_end"] = step_info[key].clone()
        if self.ignore_terminations:
            terminations = torch.zeros_like(terminations)
        done = torch.as_tensor(done_np, device=self.device)
        if not done_np.any():
            out = step_info
            if episode is not None:
                out["episode"] = episode
            return self._obs(obs), reward, terminations, truncations, out
        # ManiSkill's layout: the whole batch's step observation and info, a mask of the ended.
        final_obs = tree_map(lambda x: x.clone(), self._obs(obs))  # a copy: the ended rows are overwritten below
        finals = infos["final_obs"]
        for i in np.flatnonzero(done_np).tolist():
            put_rows(final_obs, slice(i, i + 1), self._obs(tree_map(lambda value: _numpy(value)[None], dict(finals[i]))))
        final_info = dict(step_info)
        if episode is not None:
            final_info["episode"] = episode
        self._restart_metrics(done)
        out = self._info(infos)  # after the reset: every env's current info
        out.update(final_observation=final_obs, final_info=final_info, _final_info=done, _final_observation=done, _elapsed_steps=done)
        return self._obs(obs), reward, terminations, truncations, out

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()


_warned_cuda = False


def make(env_id: str, num_envs: int = 1, **options: Any) -> VectorEnv:
    """Where a ManiSkill script calls ``gym.make(env_id, num_envs=N, ...)``: the same envs, run by fastenv.

    ``options`` are ManiSkill's env arguments (``control_mode``, ``render_mode``,
    ``reconfiguration_freq``, ``sim_backend``, ...) and fastenv's vector options (``num_workers``,
    ...). One action per step, as ManiSkill's scripts send; every key the obs mode gives. With
    ``sim_backend="physx_cuda"`` (ManiSkill's scripts ask for it) and no CUDA the envs run on
    fastenv's CPU workers, and a warning says so once. Wrap the result in this module's
    ``RecordEpisode`` and ``ManiSkillVectorEnv``, as the script does with ManiSkill's.

    Examples:
        >>> envs = ManiSkillVectorEnv(make("PickCube-v1", num_envs=8, num_workers=2), 8, record_metrics=True)
    """
    global _warned_cuda
    from fastenv.backends.maniskill import maniskill_registry

    asked = dict(options)
    if "cuda" in str(options.get("sim_backend", "")) and not torch.cuda.is_available():
        if not _warned_cuda:
            warnings.warn(
                f"sim_backend={options['sim_backend']!r} asks for CUDA, which this machine does not have: "
                "the envs run on ManiSkill's CPU simulation instead, in fastenv's worker processes",
                UserWarning,
                stacklevel=2,
            )
            _warned_cuda = True
        del options["sim_backend"]
    options.setdefault("obs_mode", "state")
    envs = gym.make_vec("fastenv/ManiSkill-v0", num_envs=num_envs, env_id=env_id, chunk=None, modalities=None, **options)
    # what ManiSkill's gym.make records (RecordEpisode's env_info): the task's registered arguments, then
    # the script's in its order; a CUDA sim_backend replaced above as the CPU one that ran, so that the
    # file rebuilds these envs on this machine
    spec = maniskill_registry()[env_id]
    env_kwargs = {k: v for k, v in asked.items() if k not in VECTOR_OPTIONS and k != "max_episode_steps"}
    if "sim_backend" in env_kwargs and "sim_backend" not in options:
        env_kwargs["sim_backend"] = "physx_cpu"
    envs.maniskill_spec = {
        "env_id": env_id,
        "env_kwargs": {**spec.default_kwargs, "num_envs": num_envs, **env_kwargs},
        "max_episode_steps": options.get("max_episode_steps") or spec.max_episode_steps,
    }
    return envs


class ManiSkillVectorEnv(ManiSkillConventions):
    """ManiSkill's ``ManiSkillVectorEnv(env, num_envs, auto_reset, ignore_terminations, record_metrics)``
    over an env from ``make`` (wrapped in ``RecordEpisode`` or not).

    Examples:
        >>> envs = ManiSkillVectorEnv(make("PickCube-v1", num_envs=8), 8, ignore_terminations=True, record_metrics=True)
    """

    def __init__(
        self,
        env: Any,
        num_envs: int | None = None,
        auto_reset: bool = True,
        ignore_terminations: bool = False,
        record_metrics: bool = False,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(env, str):  # ManiSkill builds the env itself when given its id
            env = make(env, num_envs=1 if num_envs is None else num_envs, **kwargs)
        elif kwargs:
            raise TypeError(f"env arguments {sorted(kwargs)} go with an env id, not with an env")
        if not isinstance(env, VectorEnv):
            raise TypeError(
                f"expected an env from fastenv.integrations.maniskill.make(...), got {type(env).__name__}: "
                "replace gym.make(env_id, num_envs=N, ...) with make(env_id, num_envs=N, ...)"
            )
        if not auto_reset:
            raise ValueError("fastenv's vector envs always reset ended episodes in the same step (auto_reset=True)")
        configure(env, ignore_terminations=ignore_terminations)
        spec = getattr(env.unwrapped, "maniskill_spec", {})
        super().__init__(
            env, record_metrics=record_metrics, ignore_terminations=ignore_terminations, device=device,
            max_episode_steps=spec.get("max_episode_steps", getattr(env.unwrapped, "max_episode_steps", None)),
        )


def make_vec(
    env_id: str,
    num_envs: int,
    *,
    obs_mode: str = "state",
    ignore_terminations: bool = False,
    record_metrics: bool = False,
    device: Any = None,
    **options: Any,
) -> ManiSkillVectorEnv:
    """What ``ManiSkillVectorEnv(gym.make(env_id, num_envs=N, obs_mode=...), N, ignore_terminations=...,
    record_metrics=...)`` builds, run by fastenv: ``ManiSkillVectorEnv(make(...), ...)`` in one call.

    ``options`` go to ``make`` (ManiSkill's env arguments, ``num_workers``, ...).

    Examples:
        >>> envs = make_vec("PickCube-v1", 8, ignore_terminations=True, record_metrics=True, num_workers=2)
    """
    envs = make(env_id, num_envs, obs_mode=obs_mode, **options)
    return ManiSkillVectorEnv(envs, num_envs, ignore_terminations=ignore_terminations, record_metrics=record_metrics, device=device)


__all__ = [
    "FlattenActionSpaceWrapper", "FlattenRGBDObservationWrapper", "ManiSkillConventions", "ManiSkillVectorEnv", "RecordEpisode",
    "configure", "make", "make_vec",
]
