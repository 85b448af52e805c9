"""Stand-in for ``omnigibson.macros``: a macro dict locked after a value is read (``unlocked()`` to override)."""

import contextlib


class MacroDict(dict):
    def __init__(self, **values):
        super().__init__(values)
        object.__setattr__(self, "_read", set())
        object.__setattr__(self, "_locked", True)

    def __getattr__(self, name):
        self._read.add(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"'MacroDict' object has no attribute '{name}'") from None

    def __setattr__(self, name, value):
        if name in self._read and self._locked:
            raise AttributeError(
                f"Cannot set attribute {name} in MacroDict, it has already been used. "
                "If knowingly overwriting value, set value within context `with unlocked()`"
            )
        self[name] = value

    @contextlib.contextmanager
    def unlocked(self):
        locked = self._locked
        object.__setattr__(self, "_locked", False)
        yield
        object.__setattr__(self, "_locked", locked)


gm = MacroDict(
    HEADLESS=False,
    RENDER_VIEWER_CAMERA=True,
    NO_OMNI_LOGS=False,
    USE_GPU_DYNAMICS=False,
    ENABLE_HQ_RENDERING=False,
    ENABLE_FLATCACHE=False,
    ENABLE_OBJECT_STATES=True,
    ENABLE_TRANSITION_RULES=True,
    DEFAULT_SIM_STEP_FREQ=30,
    DEFAULT_RENDERING_FREQ=30,
    DEFAULT_PHYSICS_FREQ=120,
)
