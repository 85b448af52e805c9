"""The reference loops' protocol, as options: what an episode does and what the policy is given.

``Protocol`` holds openpi's ``examples/libero/main.py`` (and OpenVLA-OFT's ``run_libero_eval.py``,
the same loop with ``replan_steps`` 8 and its own preprocessing) as numbers: ``num_steps_wait``
settling steps of LIBERO's dummy action after the episode's init state is put, then up to the
suite's step budget of policy steps, a new chunk asked for when the last ``replan_steps`` actions
are used up, the episode ending at success. The policy is given openpi's element: both cameras
rotated 180 degrees and resized with padding to ``resize_size`` (``openpi_client.image_tools``'s
``resize_with_pad``: PIL's bilinear resize, zero padding), the end effector's position, its
orientation as an axis-angle and the gripper's joints, and the task's instruction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fastenv.eval.episodes import suite_budget

__all__ = ["DUMMY_ACTION", "Protocol", "axis_angle", "check_chunk", "openpi_element", "resize_with_pad"]

DUMMY_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)  # LIBERO's "do nothing, gripper open"
ACTION_DIM = 7


@dataclass(frozen=True)
class Protocol:
    """An evaluation loop's numbers. The defaults are openpi's ``examples/libero/main.py``."""

    num_steps_wait: int = 10
    replan_steps: int = 5
    resize_size: int = 224
    camera_size: int = 256
    max_steps: int | None = None  # None: the suite's budget (its base suite's, episodes.suite_budget)
    video_fps: int = 10
    loop: str = "openpi"  # the episode loop the workers run (fastenv.eval.worker.LOOPS)

    def __post_init__(self) -> None:
        if self.loop not in ("openpi", "lerobot"):
            raise ValueError(f"Protocol.loop must be 'openpi' or 'lerobot', got {self.loop!r}")
        for name in ("num_steps_wait", "replan_steps", "resize_size", "camera_size", "video_fps"):
            value = getattr(self, name)
            low = 0 if name == "num_steps_wait" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"Protocol.{name} must be an int >= {low}, got {value!r}")
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ValueError(f"Protocol.max_steps must be an int >= 1 or None (the suite's budget), got {self.max_steps!r}")
        if self.camera_size % 8:
            raise ValueError(f"Protocol.camera_size must be a multiple of 8, got {self.camera_size}")

    @classmethod
    def named(cls, name: str, **overrides: Any) -> Protocol:
        """``"openpi"``: openpi's main.py (replan 5); ``"oft"``: OpenVLA-OFT's open loop of 8."""
        presets = {"openpi": {}, "oft": {"replan_steps": 8, "video_fps": 30}}
        if name not in presets:
            raise ValueError(f"unknown protocol {name!r}: expected one of {sorted(presets)}")
        return cls(**{**presets[name], **overrides})

    def steps_for(self, suite: str) -> int:
        """The policy steps an episode of ``suite`` may take: ``max_steps``, else the suite's budget."""
        return self.max_steps if self.max_steps is not None else suite_budget(suite)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def resize_with_pad(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """One ``(h, w, c)`` uint8 image resized to fit ``height x width`` without distortion (PIL's
    bilinear resize), centred on zeros: what ``openpi_client.image_tools.resize_with_pad`` gives."""
    from PIL import Image

    if image.shape[:2] == (height, width):
        return image
    pil = Image.fromarray(image)
    w, h = pil.size
    ratio = max(w / width, h / height)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = pil.resize((new_w, new_h), resample=Image.Resampling.BILINEAR)
    canvas = Image.new(resized.mode, (width, height), 0)
    canvas.paste(resized, (max(0, int((width - new_w) / 2)), max(0, int((height - new_h) / 2))))
    return np.asarray(canvas)


def axis_angle(quat: np.ndarray) -> np.ndarray:
    """A quaternion ``(x, y, z, w)`` as an axis-angle (robosuite's ``quat2axisangle``)."""
    from robosuite.utils.transform_utils import quat2axisangle

    return quat2axisangle(quat)


def _as_uint8(image: np.ndarray) -> np.ndarray:
    return (255 * image).astype(np.uint8) if np.issubdtype(image.dtype, np.floating) else image


def openpi_element(obs: Mapping[str, Any], instruction: str, resize: int) -> dict[str, Any]:
    """openpi's element for a LIBERO observation (``examples/libero/main.py``)."""
    img = np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])
    wrist = np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1])
    state = np.concatenate((obs["robot0_eef_pos"], axis_angle(obs["robot0_eef_quat"]), obs["robot0_gripper_qpos"]))
    return {
        "observation/image": _as_uint8(resize_with_pad(img, resize, resize)),
        "observation/wrist_image": _as_uint8(resize_with_pad(wrist, resize, resize)),
        "observation/state": state,
        "prompt": str(instruction),
    }


def check_chunk(chunk: Any, episode: str, replan_steps: int) -> np.ndarray:
    """The policy's answer for ``episode`` as a ``(rows, 7)`` float array, or a ValueError naming
    the episode and what came."""
    try:
        array = np.asarray(chunk, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"episode {episode}: the policy's chunk is not an array of numbers ({exc}); got {type(chunk).__name__}") from None
    if array.ndim != 2 or array.shape[1] != ACTION_DIM:
        raise ValueError(f"episode {episode}: the policy returned a chunk of shape {array.shape}; expected (rows, {ACTION_DIM}) "
                         f"LIBERO actions with rows >= replan_steps={replan_steps}")
    if array.shape[0] < replan_steps:
        raise ValueError(f"episode {episode}: the policy returned a chunk of {array.shape[0]} actions; the protocol replans "
                         f"every {replan_steps} steps, so each chunk needs at least {replan_steps}")
    if not np.isfinite(array[:replan_steps]).all():
        bad = sorted({int(r) for r in np.argwhere(~np.isfinite(array[:replan_steps]))[:, 0]})
        raise ValueError(f"episode {episode}: the policy returned non-finite actions (NaN or inf) in rows {bad} of its chunk")
    return array

