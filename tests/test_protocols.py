"""Every backend's adapter against the protocols it claims (``fastenv.core.protocol``).

Class level: each method a protocol declares exists on the adapter, takes the protocol's
parameters by the same names (more, with defaults, are allowed), and nothing ``SimEnv`` asks of
an adapter is left out of the protocols. Instance level: ``isinstance`` on real adapters.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import typing

import gymnasium as gym
import pytest

from fastenv.core import protocol
from fastenv.core.protocol import (
    ADAPTER_CAPABILITIES,
    GymAdapter,
    ObservesKeys,
    RendersAtRate,
    ReportsFastPaths,
    RescalesPhysics,
    SharesWorld,
    SimulatorAdapter,
)


def _members(proto: type) -> tuple[dict[str, typing.Callable], set[str]]:
    """A protocol's methods and its data members."""
    methods = {
        name: value for name, value in vars(proto).items()
        if callable(value) and not name.startswith("_")
    }
    data = set(getattr(proto, "__annotations__", {}))
    return methods, data


def _adapter_classes() -> dict[str, tuple[type, tuple[type, ...]]]:
    from fastenv.backends.behavior import BehaviorAdapter
    from fastenv.backends.libero import LiberoAdapter
    from fastenv.backends.maniskill.adapter import ManiSkillAdapter

    return {
        "gym": (GymAdapter, ()),
        "libero": (LiberoAdapter, (ReportsFastPaths, RendersAtRate, ObservesKeys)),
        "maniskill": (ManiSkillAdapter, (RendersAtRate,)),
        "behavior": (BehaviorAdapter, (RendersAtRate, SharesWorld, RescalesPhysics)),
    }


def _compatible(method: typing.Callable, declared: typing.Callable) -> list[str]:
    """Why ``method`` cannot be called as ``declared`` is (empty: it can)."""
    got = inspect.signature(method).parameters
    wanted = [p for p in inspect.signature(declared).parameters.values() if p.name != "self"]
    problems = [f"lacks parameter {p.name!r}" for p in wanted if p.name not in got and not any(
        q.kind is q.VAR_KEYWORD for q in got.values())]
    extra = [p for name, p in got.items() if name != "self" and name not in {w.name for w in wanted}]
    problems += [f"requires extra parameter {p.name!r}" for p in extra
                 if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return problems


@pytest.mark.parametrize("backend", ["gym", "libero", "maniskill", "behavior"])
def test_each_adapter_class_has_what_its_protocols_declare(backend):
    cls, capabilities = _adapter_classes()[backend]
    problems = []
    for proto in (SimulatorAdapter, *capabilities):
        methods, _ = _members(proto)
        for name, declared in methods.items():
            method = getattr(cls, name, None)
            if not callable(method):
                problems.append(f"{proto.__name__}.{name} missing")
                continue
            problems += [f"{proto.__name__}.{name}: {why}" for why in _compatible(method, declared)]
    assert problems == []


@pytest.mark.parametrize("backend", ["gym", "libero", "maniskill", "behavior"])
def test_an_adapter_claims_no_capability_by_accident(backend):
    """A capability's methods on an adapter that is not listed for it would be used by SimEnv unchecked."""
    cls, capabilities = _adapter_classes()[backend]
    for proto in set(ADAPTER_CAPABILITIES) - set(capabilities):
        methods, data = _members(proto)
        if proto is ObservesKeys:  # observe() itself is in every adapter: the keys parameter is the capability
            has = "keys" in inspect.signature(cls.observe).parameters
        else:
            has = all(callable(getattr(cls, name, None)) for name in methods) and bool(methods)
            has = has or (not methods and all(name in vars(cls) for name in data))
        assert not has, f"{cls.__name__} has {proto.__name__}'s members: list it for that capability"


def test_simenv_asks_nothing_of_an_adapter_that_no_protocol_declares():
    """Every ``self.adapter.X`` in SimEnv is a member of a protocol."""
    source = pathlib.Path(inspect.getfile(protocol)).with_name("env.py").read_text()
    asked = {
        node.attr for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
        and node.value.attr == "adapter" and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"
    }
    declared = set()
    for proto in (SimulatorAdapter, *ADAPTER_CAPABILITIES):
        methods, data = _members(proto)
        declared |= set(methods) | data
    assert asked, "the scan found no adapter use: it reads the wrong file"
    assert sorted(asked - declared) == []


def test_a_gym_adapter_is_a_simulator_adapter_and_nothing_more():
    adapter = GymAdapter(gym.make("CartPole-v1"))
    assert isinstance(adapter, SimulatorAdapter)
    assert not any(isinstance(adapter, proto) for proto in (ReportsFastPaths, SharesWorld, RescalesPhysics, RendersAtRate))
    adapter.close()


@pytest.mark.libero
def test_a_real_libero_adapter_satisfies_its_protocols(libero_slim_env):
    adapter = libero_slim_env.unwrapped.adapter
    for proto in (SimulatorAdapter, ReportsFastPaths, RendersAtRate, ObservesKeys):
        assert isinstance(adapter, proto), proto.__name__
    assert libero_slim_env.unwrapped.fast_paths()  # SimEnv asks it
