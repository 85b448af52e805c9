"""One MuJoCo render context per process for LIBERO envs whose models hold the same assets.

robosuite gives every env its own render context: a GL context and a MuJoCo ``MjrContext``, into
which MuJoCo uploads the model's textures, meshes and height fields. On a CPU renderer that is
host memory (~0.65 GB for a LIBERO scene's ~185 MB of textures), paid again by every env of the
same task in a worker. What an ``MjrContext`` holds depends only on those assets (and the
offscreen buffer settings): envs whose models have the same ones can render through one.

While fastenv builds or hard-resets a LIBERO env (``sharing()``), robosuite's render context is a
``SharedRenderContext`` when an earlier env of this process has the same assets: its scene, camera
and options are the env's own, its GL and MuJoCo contexts that earlier env's (no textures are
uploaded again). ``share_render_context(raw)`` does the same for an env built elsewhere. Every frame is rendered by MuJoCo from the env's own model
and data into the same kind of context, so the pixels are the same. Set ``FASTENV_SHARE_RENDER=0``
to keep robosuite's context per env. Either way every robosuite render context of the process frees
its GL objects in its own GL context (``free_in_own_context``), not in whichever is current.
"""

from __future__ import annotations

import hashlib
import os
import sys
import weakref
from typing import Any

import numpy as np

ASSET_PREFIXES = ("tex_", "mesh_", "hfield_", "skin_")  # what mjr_makeContext uploads from a model

_owners: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()


def enabled() -> bool:
    return os.environ.get("FASTENV_SHARE_RENDER", "1") != "0"


def asset_key(model: Any) -> str:
    """A digest of what a MuJoCo render context holds for ``model`` (an ``mujoco.MjModel``)."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(n for n in dir(model) if n.startswith(ASSET_PREFIXES)):
        value = getattr(model, name)
        if isinstance(value, np.ndarray):
            digest.update(name.encode())
            digest.update(str(value.shape).encode() + value.dtype.str.encode())
            digest.update(np.ascontiguousarray(value).data)
    vis = model.vis
    settings = (vis.global_.offwidth, vis.global_.offheight, vis.quality.offsamples, vis.quality.shadowsize, model.ntex, model.nmesh, model.nhfield, model.nskin)
    digest.update(repr(settings).encode())
    return digest.hexdigest()


def shared_context_type() -> type:
    """The class of a render context that uses another env's (a subclass of robosuite's)."""
    from robosuite.utils.binding_utils import MjRenderContextOffscreen

    global _SHARED
    if _SHARED is None:

        class _Shared(MjRenderContextOffscreen):
            """An env's render context (its own scene, camera and options) whose GL and MuJoCo
            contexts are those of ``owner``, an earlier env's with the same assets."""

            def __init__(self, sim: Any, device_id: int, owner: Any, max_width: int = 640, max_height: int = 480) -> None:
                import robosuite.utils.binding_utils as binding

                self._owner = owner
                gl_context = binding.GLContext
                binding.GLContext = _NoContext  # robosuite's __init__ would make a GL context: the owner's serves
                try:
                    super().__init__(sim, device_id=device_id, max_width=max_width, max_height=max_height)
                finally:
                    binding.GLContext = gl_context

            @property
            def gl_ctx(self) -> Any:
                return self._owner.gl_ctx

            @gl_ctx.setter
            def gl_ctx(self, own: Any) -> None:  # what robosuite's __init__ assigns: not kept
                pass

            @property
            def con(self) -> Any:
                return self._owner.con

            def _set_mujoco_context_and_buffers(self) -> None:  # the owner's MjrContext is this env's
                self._owner.gl_ctx.make_current()

            def update_offscreen_size(self, width: int, height: int) -> None:
                self._owner.update_offscreen_size(width, height)

            def upload_texture(self, tex_id: int) -> None:
                raise RuntimeError(
                    "this env shares its render context with other envs of the same assets; changing a texture "
                    "would change theirs: build the envs with FASTENV_SHARE_RENDER=0"
                )

            def __del__(self) -> None:  # the owner's contexts are the owner's to free
                pass

        _SHARED = _Shared
    return _SHARED


_SHARED: Any = None


def free_in_own_context() -> None:
    """Make every robosuite render context of this process free its GL objects in its own GL context.

    robosuite frees a render context's ``MjrContext`` (textures, meshes, buffers, by id) in
    whatever GL context is current when it is collected: an env dropped while another env's context
    is current takes that env's textures with it, and the other env renders garbage from then on.
    With one context serving several envs this would hit all of them. Installed once; each freed
    context is made current first and the one current before is made current again after.
    """
    from robosuite.utils.binding_utils import MjRenderContext

    if getattr(MjRenderContext.__del__, "_fastenv_own_context", False):
        return
    original = MjRenderContext.__del__

    def __del__(self: Any) -> None:
        previous, own = _current_egl(), getattr(getattr(self, "gl_ctx", None), "_context", None)
        try:
            self.gl_ctx.make_current()
        except Exception:  # at interpreter exit EGL may be gone already
            pass
        original(self)
        _restore_egl(previous, own)

    __del__._fastenv_own_context = True  # type: ignore[attr-defined]
    MjRenderContext.__del__ = __del__


def _egl() -> Any:
    return sys.modules.get("robosuite.renderers.context.egl_context")


def _current_egl() -> Any:
    egl = _egl()
    try:
        return None if egl is None else egl.EGL.eglGetCurrentContext()
    except Exception:
        return None


def _restore_egl(previous: Any, freed: Any) -> None:
    """Make ``previous`` (an EGL context) current again unless it is the one just freed."""
    egl = _egl()
    if egl is None or not previous or (freed is not None and getattr(freed, "address", None) == previous.address):
        return
    try:
        egl.EGL.eglMakeCurrent(egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE, previous)
    except Exception:  # at interpreter exit EGL may be gone already
        pass


class _NoContext:
    """What robosuite's render context makes as its GL context, for a context that uses another's."""

    def __init__(self, **kwargs: Any) -> None:
        pass


def _owner_for(sim: Any, device_id: Any) -> tuple[tuple[Any, ...], Any]:
    key = (device_id, asset_key(sim.model._model))
    return key, _owners.get(key)


class sharing:
    """Inside: robosuite envs built (or hard-reset) get a render context that shares the GL and
    MuJoCo contexts of an earlier env of this process with the same assets; the first gets its own."""

    def __enter__(self) -> sharing:
        import robosuite.environments.base as base

        free_in_own_context()

        self._base, self._original = base, base.MjRenderContextOffscreen
        if enabled():
            shared = shared_context_type()
            owned = self._original

            def make(sim: Any, device_id: Any, max_width: int = 640, max_height: int = 480) -> Any:
                key, owner = _owner_for(sim, device_id)
                if owner is None:
                    context = owned(sim, device_id=device_id, max_width=max_width, max_height=max_height)
                    _owners[key] = context
                    return context
                return shared(sim, device_id, owner, max_width, max_height)

            base.MjRenderContextOffscreen = make
        return self

    def __exit__(self, *exc: Any) -> None:
        self._base.MjRenderContextOffscreen = self._original


def share_render_context(raw: Any) -> bool:
    """For an env built elsewhere (adopted): render ``raw`` through the context of an earlier env of
    this process with the same assets, freeing its own; the first such env keeps its own and
    becomes the one others use. Returns whether the env now shares another's."""
    sim = raw.sim
    own = getattr(sim, "_render_context_offscreen", None)
    if own is None or not enabled():
        return False
    free_in_own_context()
    cls = shared_context_type()
    if isinstance(own, cls):
        return True
    key, owner = _owner_for(sim, own.device_id)
    if owner is None or owner is own:
        _owners[key] = own
        return False
    vopt = own.vopt  # robosuite sets the mesh groups on it after building: keep them
    own.gl_ctx.make_current()  # robosuite frees a context's GL objects in the current GL context
    sim._render_context_offscreen = None  # so the shared context's own setup does not free it first
    shared = cls(sim, own.device_id, owner)
    shared.vopt = vopt
    del own  # its MjrContext and GL context are freed
    owner.gl_ctx.make_current()
    return True


__all__ = ["asset_key", "enabled", "free_in_own_context", "share_render_context", "shared_context_type", "sharing"]
