"""Choose MuJoCo's headless OpenGL platform before MuJoCo is imported."""

from __future__ import annotations

import ctypes.util
import os
import sys
import warnings

from fastenv import gpus


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
    if chosen == "egl" and "mujoco" not in sys.modules:
        gpus.choose_egl_device()  # the EGL device that is this process's CUDA device, by identity
    return chosen


def gl_renderer() -> str | None:
    """GL_RENDERER of the current OpenGL context (PyOpenGL), None where none is current."""
    try:
        from OpenGL.GL import GL_RENDERER, glGetString

        value = glGetString(GL_RENDERER)
    except Exception:
        return None
    return value.decode(errors="replace") if value else None


# The process that made an OpenGL context (built a LIBERO env). A child forked from it inherits
# this value and a copy of the driver's state, which deadlocks at the child's first context (EGL
# and OSMesa hold locks of threads that fork does not copy); a spawned child starts with None.
_context_process: int | None = None


def note_gl_context() -> None:
    """Record that this process now holds an OpenGL context."""
    global _context_process
    _context_process = os.getpid()


def check_not_forked_after_gl(what: str) -> None:
    """Refuse at once, rather than hang, to build ``what`` in a child forked after an OpenGL context."""
    if _context_process is not None and _context_process != os.getpid():
        raise RuntimeError(
            f"{what}: this process was forked from one that had built a LIBERO env, and an OpenGL (EGL) "
            "context does not survive fork: building one here would hang. Gymnasium's AsyncVectorEnv "
            "(gym.make_vec(id, vectorization_mode='async')) builds one env in the main process, then forks its "
            "workers (fork is its default start method on Linux). Use gym.make_vec(id, num_envs=N) (fastenv's "
            "own vector env, the default mode: workers, shared memory, chunks), or keep Gymnasium's "
            "AsyncVectorEnv with vector_kwargs={'context': 'spawn'} (and the main guard, "
            "if __name__ == '__main__':), or vectorization_mode='sync' (the envs in one process)"
        )
