"""What a ManiSkill env reports, under fastenv's names: observation keys ("state",
"<camera>_<texture>", and the raw observation's groups "agent", "extra", "sensor_param") and the
obs mode that makes them, the kept keys cut from a raw observation, the captures narrowed to them,
their spaces, the terminations an info says, and the way back to ManiSkill's own layout
(``maniskill_layout``) and to its ``FlattenRGBDObservationWrapper``'s (``flatten_rgbd``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from fastenv.core.protocol import check_known_keys

TEXTURES = ("rgb", "depth", "segmentation", "position", "normal", "albedo")
# The groups of a visual obs mode's raw observation (ManiSkill's ``_get_obs_with_sensor_data``),
# each one fastenv key holding a dict in ManiSkill's order; "+state" modes flatten agent and extra
# into "state" instead.
GROUPS = ("agent", "extra", "sensor_param")


def split_key(key: str, cameras: Sequence[str]) -> tuple[str, str] | None:
    """("camera", "texture") for keys like "base_camera_rgb"; None for "state"."""
    for cam in cameras:
        for texture in TEXTURES:
            if key == f"{cam}_{texture}":
                return cam, texture
    return None


def obs_mode_for(keys: Sequence[str], cameras: Sequence[str]) -> str:
    """The ManiSkill obs_mode that produces ``keys`` and nothing else.

    Examples:
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
    keys += [group for group in GROUPS if group in raw]
    for cam, textures in raw.get("sensor_data", {}).items():
        keys += [f"{cam}_{t}" for t in TEXTURES if t in textures]
    return keys


def _clone(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _clone(item) for key, item in value.items()}
    return value.clone()


def extract(raw: Any, keys: Sequence[str], cameras: Sequence[str]) -> dict[str, Any]:
    """The kept keys of one raw ManiSkill observation (batched tensors, cloned).

    Cloned: rendered images may be views of the renderer's buffers, rewritten by the next capture.
    """
    if not isinstance(raw, Mapping):
        return {"state": raw.clone()}
    out = {}
    for key in keys:
        split = split_key(key, cameras)
        value = raw[key] if split is None else raw["sensor_data"][split[0]][split[1]]
        out[key] = _clone(value)
    return out


def maniskill_layout(obs: Mapping[str, Any], cameras: Sequence[str] | None = None) -> dict[str, Any]:
    """An observation under fastenv's keys in ManiSkill's own layout (values, or spaces, as they are).

    Groups first ("agent", "extra", "sensor_param"), then "sensor_data" by camera and texture,
    then every other key ("state", or a flattening wrapper's "rgb", "depth"): the order
    ManiSkill's ``get_obs`` gives. Cameras in ``cameras``' order, else in sensor_param's (the
    env's sensor order), else as the keys come.

    Examples:
        >>> maniskill_layout({"base_camera_rgb": 1, "state": 2})
        {'sensor_data': {'base_camera': {'rgb': 1}}, 'state': 2}
    """
    params = obs.get("sensor_param")
    order = list(cameras or (params.keys() if isinstance(params, Mapping) else ()))
    sensor_data: dict[str, dict[str, Any]] = {cam: {} for cam in order}
    rest: dict[str, Any] = {}
    for key, value in obs.items():
        split = _camera_key(key, order)
        if split is not None:
            sensor_data.setdefault(split[0], {})[split[1]] = value
        elif key not in GROUPS:
            rest[key] = value
    out = {group: obs[group] for group in GROUPS if group in obs}
    for cam in list(sensor_data):
        textures = sensor_data[cam]
        sensor_data[cam] = {t: textures[t] for t in TEXTURES if t in textures}
    if any(sensor_data.values()):
        out["sensor_data"] = {cam: textures for cam, textures in sensor_data.items() if textures}
    out.update(rest)
    return out


def _camera_key(key: str, cameras: Sequence[str]) -> tuple[str, str] | None:
    """("camera", "texture") of a camera key; cameras not listed are read from the key's suffix."""
    split = split_key(key, cameras)
    if split is None and "_" in key:
        cam, texture = key.rsplit("_", 1)
        if texture in TEXTURES:
            return cam, texture
    return split


def flatten_rgbd(obs: Mapping[str, Any], *, rgb: bool, depth: bool, state: bool, sep_depth: bool, device: Any = None) -> dict[str, Any]:
    """ManiSkill's ``FlattenRGBDObservationWrapper.observation`` on a batch in ManiSkill's layout (torch).

    ``rgb``/``depth``: whether to keep them (False where the cameras do not capture them, as
    ManiSkill's wrapper decides at construction). The cameras' images are concatenated on the
    channel axis; everything but the sensor data and parameters is flattened into "state" by
    ManiSkill's own ``flatten_state_dict``.
    """
    import torch
    from mani_skill.utils import common

    obs = dict(obs)
    sensor_data = obs.pop("sensor_data", {})
    obs.pop("sensor_param", None)
    rgb_images = torch.concat([cam["rgb"] for cam in sensor_data.values()], dim=-1) if rgb and sensor_data else None
    depth_images = torch.concat([cam["depth"] for cam in sensor_data.values()], dim=-1) if depth and sensor_data else None
    out: dict[str, Any] = {}
    if state:
        out["state"] = common.flatten_state_dict(obs, use_torch=True, device=device)
    if rgb and not depth:
        out["rgb"] = rgb_images
    elif rgb and depth:
        if sep_depth:
            out["rgb"], out["depth"] = rgb_images, depth_images
        else:
            out["rgbd"] = torch.concat([rgb_images, depth_images], dim=-1)
    elif depth:
        out["depth"] = depth_images
    return out


class Selection:
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
        return ("state", *GROUPS, *(f"{c}_{t}" for c in self.cameras for t in TEXTURES))

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


def space_for(batch: Any) -> spaces.Space:
    """The single-env space of a batched value: a Box, or a Dict in the value's own order."""
    if isinstance(batch, Mapping):
        # ManiSkill flattens a group in its dict order: a sorted Dict would reorder the state
        return spaces.Dict([(key, space_for(value)) for key, value in batch.items()])
    return _box_for(batch)


def _box_for(batch: Any) -> spaces.Box:
    """The single-env Box of a batched tensor (its bounds from its dtype)."""
    dtype = np.dtype(str(batch.dtype).replace("torch.", ""))
    shape = tuple(batch.shape[1:])
    if dtype.kind in "iu":
        return spaces.Box(np.iinfo(dtype).min, np.iinfo(dtype).max, shape, dtype)
    if dtype.kind == "b":
        return spaces.Box(0, 1, shape, dtype)
    return spaces.Box(-np.inf, np.inf, shape, dtype)


def terminated_of(info: Mapping[str, Any], n: int, device: Any) -> Any:
    import torch

    out = torch.zeros(n, dtype=torch.bool, device=device)
    for key in ("success", "fail"):
        if key in info:
            out |= torch.as_tensor(info[key], device=device).bool().reshape(n)
    return out
