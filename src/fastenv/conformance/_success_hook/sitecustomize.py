"""Put on PYTHONPATH by fastenv's framework conformance runs only: in every process of both stacks, LIBERO's
success check fires on a schedule set by the state (``FASTENV_SUCCESS_SCHEDULE=1``), so that short
runs of random actions end episodes by success inside chunks, in the framework's env and fastenv's alike."""

import importlib.abc
import importlib.util
import os
import sys

TARGET = "libero.libero.envs.env_wrapper"


def _scheduled_success(raw):
    after = int(os.environ.get("FASTENV_SUCCESS_AFTER", "16"))  # robosuite steps (settling ones count)

    def check():
        t = raw.timestep
        offset = int(abs(raw.sim.data.qpos[:7]).sum() * 100) % 6  # the robot's state picks the phase
        return t > after and (t + offset) % 6 in (0, 1)

    return check


def _patch(module):
    control_env = module.ControlEnv
    if getattr(control_env, "_fastenv_scheduled", False):
        return
    init = control_env.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.env._check_success = _scheduled_success(self.env)

    control_env.__init__ = __init__
    control_env._fastenv_scheduled = True


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch(module)


if os.environ.get("FASTENV_SUCCESS_SCHEDULE") == "1":
    sys.meta_path.insert(0, _AfterImport())
