"""Choose MuJoCo's headless OpenGL platform before MuJoCo is imported."""

from __future__ import annotations

import ctypes.util
import os
import sys
import warnings


def configure_mujoco_gl() -> str:
    """Set ``MUJOCO_GL`` (EGL by default, OSMesa as fallback) unless the user already chose one.

    Must run before ``mujoco`` is imported; returns the platform in effect.
    """
    chosen = os.environ.get("MUJOCO_GL")
    if chosen is None:
        if "mujoco" in sys.modules:
            warnings.warn(
                "mujoco was imported before fastenv could set MUJOCO_GL; rendering uses mujoco's default",
                stacklevel=3,
            )
            return ""
        has_egl = ctypes.util.find_library("EGL") is not None
        has_osmesa = ctypes.util.find_library("OSMesa") is not None
        chosen = "osmesa" if has_osmesa and not has_egl else "egl"
        os.environ["MUJOCO_GL"] = chosen
    if chosen in ("egl", "osmesa"):
        os.environ.setdefault("PYOPENGL_PLATFORM", chosen)
    return chosen
