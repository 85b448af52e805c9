"""ManiSkill's ``RecordEpisode`` over a fastenv ManiSkill vector env: the same videos and trajectory files.

ManiSkill's wrapper sits on the batched ``BaseEnv`` and reads the env itself after each step
(``render()``, ``get_state_dict()``, ``_episode_seed``) before ``ManiSkillVectorEnv`` resets the
ended envs. fastenv's envs live in worker processes (or are driven in place) and reset an ended
env in the same step, so the workers put what the recorder reads into the step's info, taken
before the reset (``configure(env, capture=...)``): the frame, the state and the episode seed, which
the recorder takes out of the infos it hands on (the script sees ManiSkill's). It then writes what
ManiSkill's would: ``{output_dir}/{n}.mp4`` (the envs' frames tiled, ManiSkill's ``images_to_video``),
and ``{trajectory_name}.h5`` + ``.json`` in ManiSkill's trajectory format (``traj_{id}`` groups of
``obs``, ``actions``, ``terminated``, ``truncated``, ``success``, ``fail``, ``env_states``,
``rewards``; the episodes' seeds, control mode and lengths).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import VectorEnv, VectorWrapper

from fastenv.backends.maniskill.observations import maniskill_layout
from fastenv.core.arrays import tree_map
from fastenv.integrations._maniskill_configure import configure
from fastenv.integrations._maniskill_flatten import flattened

CAPTURED = ("render", "env_state", "episode_seed")  # info keys the workers add for the recorder


def _consumed(infos: Mapping[str, Any]) -> dict[str, Any]:
    """The infos without what the envs added for the recorder (nor their masks), in ``final_info`` too:
    ManiSkill's recorder reads the env itself, so the script's infos never carry these."""
    out = {key: value for key, value in infos.items() if key.removeprefix("_") not in CAPTURED}
    if isinstance(out.get("final_info"), Mapping):
        out["final_info"] = _consumed(out["final_info"])
    return out


def _numpy(value: Any) -> Any:
    return tree_map(lambda x: x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x), value)


def _state(value: Any) -> Any:
    """A state dict from the infos, without the vector env's ``_key`` masks."""
    if isinstance(value, Mapping):
        return {k: _state(v) for k, v in value.items() if not k.startswith("_")}
    return _numpy(value)


def _rows(value: Any, rows: Any) -> Any:
    return tree_map(lambda x: x[rows], value)


def _select(done: np.ndarray, final: Any, current: Any) -> Any:
    """Per env: ``final``'s row where the env's episode ended in the step, else ``current``'s."""

    def pick(f: np.ndarray, c: np.ndarray) -> np.ndarray:
        return np.where(done.reshape(-1, *[1] * (f.ndim - 1)), f, c)

    return tree_map(pick, final, current)


def _layout(obs: Mapping[str, Any], flattened: bool) -> Any:
    """An observation as ManiSkill's recorder records it: a flattening wrapper's dict as it is (even
    of "state" alone), else the flat state of a state obs mode, else ManiSkill's nested layout."""
    if flattened:
        return dict(obs)
    if list(obs) == ["state"]:
        return obs["state"]
    return maniskill_layout(obs)


class _Episode:
    """One env's episode so far, as ManiSkill's buffer holds it: T+1 observations and states, T of the rest."""

    def __init__(self, obs: Any, state: Any, seed: Any, reset_kwargs: dict[str, Any]) -> None:
        self.obs, self.states = [obs], [state]
        self.seed, self.reset_kwargs = seed, reset_kwargs
        self.actions: list[Any] = []
        self.rewards: list[float] = []
        self.terminated: list[bool] = []
        self.truncated: list[bool] = []
        self.success: list[bool] | None = []
        self.fail: list[bool] | None = []


def _stack(items: list[Any]) -> Any:
    return tree_map(lambda *leaves: np.stack(leaves), *items) if isinstance(items[0], dict) else np.stack(items)


def _write(group: Any, key: str, data: Any) -> None:
    """ManiSkill's ``recursive_add_to_h5py``: groups for dicts, gzip for images."""
    if isinstance(data, dict):
        sub = group.create_group(key, track_order=True)
        for k, v in data.items():
            _write(sub, k, v)
    elif key in ("rgb", "depth", "seg"):
        group.create_dataset(key, data=data, dtype=data.dtype, compression="gzip", compression_opts=5)
    else:
        group.create_dataset(key, data=data, dtype=data.dtype)


class RecordEpisode(VectorWrapper):
    """ManiSkill's ``RecordEpisode`` (same arguments, same files) for an env from
    ``fastenv.integrations.maniskill.make``; goes where the script puts ManiSkill's, under
    ``ManiSkillVectorEnv``.

    Frames and states are taken by the envs at the end of each step, before an ended env resets,
    as ManiSkill's wrapper takes them before ``ManiSkillVectorEnv`` resets it; nothing is rendered
    for the recorder while no video is being saved (``save_video_trigger``). Observations are
    recorded as the script sees them (for state-only obs modes ManiSkill's flat array).
    ``render_substeps`` is not supported.

    Examples:
        >>> envs = RecordEpisode(make("PickCube-v1", num_envs=4, render_mode="rgb_array"), "videos", save_trajectory=False, max_steps_per_video=50)
    """

    def __init__(
        self,
        env: VectorEnv,
        output_dir: str,
        save_trajectory: bool = True,
        trajectory_name: str | None = None,
        save_video: bool = True,
        info_on_video: bool = False,
        save_on_reset: bool = True,
        save_video_trigger: Callable[[int], bool] | None = None,
        max_steps_per_video: int | None = None,
        clean_on_close: bool = True,
        record_reward: bool = True,
        record_env_state: bool = True,
        video_fps: int = 30,
        render_substeps: bool = False,
        avoid_overwriting_video: bool = False,
        source_type: str | None = None,
        source_desc: str | None = None,
    ) -> None:
        if not isinstance(env, VectorEnv):
            raise TypeError(
                f"expected an env from fastenv.integrations.maniskill.make(...), got {type(env).__name__}: "
                "replace gym.make(env_id, num_envs=N, ...) with make(env_id, num_envs=N, ...)"
            )
        if render_substeps:
            raise ValueError("render_substeps is not supported: fastenv records one frame per step")
        if env.num_envs > 1 and save_video and max_steps_per_video is None:
            raise ValueError("with several envs, give max_steps_per_video (as ManiSkill's RecordEpisode asks)")
        if save_video and env.render_mode != "rgb_array":
            raise ValueError(f"recording videos needs the envs made with render_mode='rgb_array', got {env.render_mode!r}")
        super().__init__(env)
        self._flattened = flattened(env)  # observations recorded as the flattening wrapper gives them
        self.output_dir = Path(output_dir)
        if save_trajectory or save_video:
            self.output_dir.mkdir(parents=True, exist_ok=True)
        self.save_trajectory, self._save_video = bool(save_trajectory), bool(save_video)
        self.info_on_video, self.save_on_reset = info_on_video, save_on_reset
        self.save_video_trigger, self.max_steps_per_video = save_video_trigger, max_steps_per_video
        self.clean_on_close, self.record_reward, self.record_env_state = clean_on_close, record_reward, record_env_state
        self.video_fps, self._avoid_overwriting_video = video_fps, avoid_overwriting_video
        self.video_nrows = int(np.sqrt(self.num_envs))
        self._elapsed_record_steps, self._episode_id, self._video_id, self._video_steps = 0, -1, -1, 0
        self.render_images: list[np.ndarray] = []
        self._episodes: list[_Episode | None] = [None] * self.num_envs
        self._capture: tuple[str, ...] | None = None
        self._closed = False
        spec = getattr(env.unwrapped, "maniskill_spec", None)
        self.max_episode_steps = spec["max_episode_steps"] if spec is not None else getattr(env.unwrapped, "max_episode_steps", None)
        if self.save_trajectory:
            import h5py
            from mani_skill import get_commit_info

            name = trajectory_name or time.strftime("%Y%m%d_%H%M%S")
            self._h5_file = h5py.File(self.output_dir / f"{name}.h5", "w")
            self._json_path = self._h5_file.filename.replace(".h5", ".json")
            env_info = None if spec is None else {"env_id": spec["env_id"], "env_kwargs": dict(spec["env_kwargs"])}
            self._json_data: dict[str, Any] = {"env_info": env_info, "commit_info": get_commit_info(), "episodes": []}
            if env_info is not None:
                env_info["max_episode_steps"] = self.max_episode_steps
            if source_type is not None:
                self._json_data["source_type"] = source_type
            if source_desc is not None:
                self._json_data["source_desc"] = source_desc
            self._control_mode = self._read_control_mode()
        self._set_capture(self.save_video)

    # -- what the envs add to their infos ----------------------------------------------------------
    def _set_capture(self, frames: bool) -> None:
        capture = tuple(["render"] * frames + ["state"] * self.save_trajectory)
        if capture != self._capture:
            configure(self.env, capture=capture)
            self._capture = capture

    def _read_control_mode(self) -> Any:
        raw = self.env.unwrapped
        if hasattr(raw, "sim"):
            return raw.base.control_mode
        return raw.apply(_control_mode, env_ids=[0])[0]

    @property
    def save_video(self) -> bool:
        if not self._save_video:
            return False
        return self.save_video_trigger(self._elapsed_record_steps) if self.save_video_trigger is not None else True

    # -- video -----------------------------------------------------------------------------------------
    def _frame(self, frames: np.ndarray, infos: dict[str, Any] | None = None) -> np.ndarray:
        from mani_skill.utils.visualization.misc import put_info_on_image, tile_images

        frames = np.asarray(frames)
        if infos is not None:
            frames = frames.copy()
            for i in range(len(frames)):
                frames[i] = put_info_on_image(frames[i], {k: v if np.size(v) == 1 else v[i] for k, v in infos.items()})
        return frames[0] if len(frames) == 1 else tile_images(frames, nrows=self.video_nrows)

    def _render_now(self) -> np.ndarray:
        frames = self.env.render()
        if isinstance(frames, (tuple, list)):
            return np.stack([_numpy(f) for f in frames])
        return _numpy(frames)

    def flush_video(self, name: str | None = None, suffix: str = "", verbose: bool = False, ignore_empty_transition: bool = True, save: bool = True) -> None:
        """Write the frames so far as ``{output_dir}/{video_id}.mp4`` (ManiSkill's naming)."""
        from mani_skill.utils.visualization.misc import images_to_video

        if not self.render_images or (ignore_empty_transition and len(self.render_images) == 1):
            return
        if save:
            self._video_id += 1
            video_name = name
            if name is None:
                video_name = f"{self._video_id}" + (f"_{suffix}" if suffix else "")
                while self._avoid_overwriting_video and (self.output_dir / (video_name.replace(" ", "_").replace("\n", "_") + ".mp4")).exists():
                    self._video_id += 1
                    video_name = f"{self._video_id}" + (f"_{suffix}" if suffix else "")
            images_to_video(self.render_images, str(self.output_dir), video_name=video_name, fps=self.video_fps, verbose=verbose)
        self._video_steps = 0
        self.render_images = []

    # -- trajectories ------------------------------------------------------------------------------------
    def flush_trajectory(self, verbose: bool = False, ignore_empty_transition: bool = True, env_idxs_to_flush: Any = None, save: bool = True) -> None:
        """Write the given envs' episodes so far (all envs': None) as ``traj_{id}`` groups."""
        from mani_skill.utils import common
        from mani_skill.utils.io_utils import dump_json

        rows = range(self.num_envs) if env_idxs_to_flush is None else np.asarray(env_idxs_to_flush).reshape(-1).tolist()
        for i in rows:
            episode = self._episodes[i]
            if episode is None or (ignore_empty_transition and not episode.actions):
                continue
            self._episodes[i] = None
            if not save:
                continue
            self._episode_id += 1
            group = self._h5_file.create_group(f"traj_{self._episode_id}", track_order=True)
            _write(group, "obs", _stack(episode.obs))
            info: dict[str, Any] = {
                "episode_id": self._episode_id,
                "episode_seed": episode.seed,
                "control_mode": self._control_mode,
                "elapsed_steps": len(episode.actions),
                "reset_kwargs": episode.reset_kwargs if self.num_envs == 1 else {},
            }
            actions = _stack(episode.actions)
            if isinstance(actions, dict):
                _write(group, "actions", actions)
            else:
                group.create_dataset("actions", data=actions, dtype=np.float32)
            group.create_dataset("terminated", data=np.asarray(episode.terminated), dtype=bool)
            group.create_dataset("truncated", data=np.asarray(episode.truncated), dtype=bool)
            for key in ("success", "fail"):
                values = getattr(episode, key)
                if values is not None:
                    group.create_dataset(key, data=np.asarray(values), dtype=bool)
                    info[key] = np.asarray(values[-1])
            if self.record_env_state:
                _write(group, "env_states", _stack(episode.states))
            if self.record_reward:
                group.create_dataset("rewards", data=np.asarray(episode.rewards), dtype=np.float32)
            self._json_data["episodes"].append(common.to_numpy(info))
            dump_json(self._json_path, self._json_data, indent=2)
            if verbose:
                print(f"Recorded episode {self._episode_id}")

    def _start(self, rows: list[int], obs: Any, infos: Mapping[str, Any], reset_kwargs: dict[str, Any]) -> None:
        if not self.save_trajectory:
            return
        obs = _layout(_numpy(obs), self._flattened)
        states = _state(infos["env_state"])
        seeds = _numpy(infos["episode_seed"])
        for i in rows:
            self._episodes[i] = _Episode(_rows(obs, i), _rows(states, i), int(seeds[i]), copy.deepcopy(reset_kwargs))

    # -- Gymnasium API ---------------------------------------------------------------------------------
    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        mask = None if options is None or "reset_mask" not in options else np.asarray(options["reset_mask"], dtype=bool)
        rows = list(range(self.num_envs)) if mask is None else np.flatnonzero(mask).tolist()
        if self.save_on_reset:
            if self.save_video and self.num_envs == 1:
                self.flush_video()
            if self.save_trajectory:
                self.flush_trajectory(env_idxs_to_flush=rows)
        obs, infos = self.env.reset(seed=seed, options=options)
        kwargs: dict[str, Any] = {"options": None if mask is None else {"env_idx": np.asarray(rows)}}
        if seed is not None:
            kwargs["seed"] = seed
        self._start(rows, obs, infos, kwargs)
        return obs, _consumed(infos)

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        want_frames = self.save_video
        if want_frames and self._video_steps == 0:  # the video's first frame: the state the step starts from
            self.render_images.append(self._frame(self._render_now()))
        self._set_capture(want_frames)
        obs, rewards, terminations, truncations, infos = self.env.step(actions)
        done = np.asarray(_numpy(terminations)) | np.asarray(_numpy(truncations))
        final = infos.get("final_info", {})
        own = {k: _numpy(v) for k, v in infos.items() if not k.startswith("_") and k not in ("final_obs", "final_observation", "final_info")}
        if done.any():  # the step's own values where an episode ended: from final_info
            own = {k: _select(done, _numpy(final[k]), own[k]) if k in own else _numpy(final[k]) for k in final if not k.startswith("_")}
        if self.save_trajectory:
            self._append(actions, obs, rewards, done, own, infos)
        if want_frames:
            self._video_steps += 1
            if self.info_on_video:
                from mani_skill.utils import gym_utils

                scalars = gym_utils.extract_scalars_from_info({k: v for k, v in own.items() if k not in CAPTURED}, batch_size=self.num_envs)
                reward = np.asarray(_numpy(rewards))
                scalars["reward"] = [float(r) for r in reward] if reward.size > 1 else float(reward.reshape(-1)[0])
                self.render_images.append(self._frame(own["render"], scalars))
            else:
                self.render_images.append(self._frame(own["render"]))
            if self.max_steps_per_video is not None and self._video_steps >= self.max_steps_per_video:
                self.flush_video()
        self._elapsed_record_steps += 1
        if done.any():  # ManiSkillVectorEnv's reset of the ended envs, as it reaches ManiSkill's recorder
            rows = np.flatnonzero(done).tolist()
            if self.save_on_reset:
                if self.save_video and self.num_envs == 1:
                    self.flush_video()
                if self.save_trajectory:
                    self.flush_trajectory(env_idxs_to_flush=rows)
            self._start(rows, obs, infos, {"options": {"env_idx": np.asarray(rows)}})
        return obs, rewards, terminations, truncations, _consumed(infos)

    def _append(self, actions: Any, obs: Any, rewards: Any, done: np.ndarray, own: dict[str, Any], infos: Mapping[str, Any]) -> None:
        obs = _layout(_numpy(obs), self._flattened)
        if done.any():
            finals = infos["final_obs"]
            obs = tree_map(np.copy, obs)
            for i in np.flatnonzero(done).tolist():
                final = _layout(tree_map(lambda v: _numpy(v)[None], dict(finals[i])), self._flattened)
                tree_map(lambda x, f, i=i: x.__setitem__(i, f[0]), obs, final)
        actions, rewards = _numpy(actions), np.asarray(_numpy(rewards), dtype=np.float64).reshape(-1)
        success, fail = own.get("success"), own.get("fail")
        # ManiSkill's own terminated (success or fail), whatever ManiSkillVectorEnv then ignores
        terminated = np.zeros(self.num_envs, dtype=bool)
        if success is not None:
            terminated |= np.asarray(success, dtype=bool)
        if fail is not None:
            terminated |= np.asarray(fail, dtype=bool)
        truncations = self._truncated(own, done, terminated)
        for i, episode in enumerate(self._episodes):
            if episode is None:
                continue
            episode.obs.append(_rows(obs, i))
            episode.states.append(_rows(_state(own["env_state"]), i))
            episode.actions.append(_rows(actions, i))
            episode.rewards.append(float(rewards[i]))
            episode.terminated.append(bool(terminated[i]))
            episode.truncated.append(bool(truncations[i]))
            episode.success = None if success is None or episode.success is None else [*episode.success, bool(success[i])]
            episode.fail = None if fail is None or episode.fail is None else [*episode.fail, bool(fail[i])]

    def _truncated(self, own: dict[str, Any], done: np.ndarray, terminated: np.ndarray) -> np.ndarray:
        """ManiSkill's time limit: truncated once an episode has run max_episode_steps steps."""
        steps = own.get("elapsed_steps")
        if steps is None or self.max_episode_steps is None:
            return done & ~terminated
        return np.asarray(steps).reshape(-1) >= self.max_episode_steps

    def close(self, **kwargs: Any) -> None:
        if self._closed:
            return
        self._closed = True
        if self.save_trajectory:
            from mani_skill.utils.io_utils import dump_json
            from mani_skill.utils.wrappers.record import clean_trajectories

            if self.save_on_reset:
                self.flush_trajectory()
            if self.clean_on_close:
                clean_trajectories(self._h5_file, self._json_data)
                dump_json(self._json_path, self._json_data, indent=2)
            self._h5_file.close()
        if self.save_video and self.save_on_reset:
            self.flush_video()
        super().close(**kwargs)


def _control_mode(env: Any) -> Any:
    return env.get_wrapper_attr("adapter").base.control_mode


__all__ = ["RecordEpisode"]
