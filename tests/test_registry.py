"""The backend registry: which backend adopts an env someone built, keyed by its type."""

import numpy as np
import pytest
from fakes import FakeAdapter

import fastenv
from fastenv import SimEnv
from fastenv.core import registry
from fastenv.core.registry import find_backend, register_backend


class MySim:
    """A simulator that is not a gymnasium.Env (as LIBERO's envs are not)."""


class MySubSim(MySim):
    pass


@pytest.fixture
def restore_registry():
    saved = list(registry._BACKENDS)
    yield
    registry._BACKENDS[:] = saved


def test_a_registered_type_and_its_subclasses_are_adopted(restore_registry):
    adopted = []

    def adopt(sim, **options):
        adopted.append(sim)
        return SimEnv(FakeAdapter())

    register_backend("mysim", [MySim], adopt)
    assert find_backend(MySubSim()).name == "mysim"
    env = fastenv.wrap(MySubSim(), chunk=2)
    assert isinstance(adopted[0], MySubSim) and isinstance(env.unwrapped, SimEnv)
    env.reset()
    _, reward, *_ = env.step(np.zeros((2, 3), np.float32))
    assert reward == 1 + 2


def test_types_are_matched_by_name_without_importing_the_simulator():
    import subprocess
    import sys

    code = (
        "import sys; from fastenv.core.registry import find_backend\n"
        "ControlEnv = type('ControlEnv', (), {'__module__': 'libero.libero.envs.env_wrapper'})\n"
        "print(find_backend(ControlEnv()).name, find_backend(object()), 'libero' in sys.modules, 'robosuite' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["libero", "None", "False", "False"]


def test_an_unknown_object_is_refused_with_what_was_expected():
    with pytest.raises(TypeError, match=r"fastenv wraps a gymnasium.Env or an env of a registered simulator, got builtins.object"):
        fastenv.wrap(object())
