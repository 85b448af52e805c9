"""fastenv's layers point one way (docs/architecture.md): read every import in src/fastenv with ast.

Function-level imports count as much as module-level ones: a lazy import that points up is still
a dependency on the layer above. The one exception is named below: a backend's module
``__getattr__`` that serves ``make_env``/``make_vec`` from their old import path, which nothing
inside fastenv uses.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

# Each group's layer, lowest first. A module may import its own group and any lower layer; groups
# of one layer are independent (none imports another).
LAYERS: list[tuple[str, ...]] = [
    ("_validation", "_deps", "machine", "policy_cost", "gpus", "run_clock"),  # leaves: plain functions, no fastenv imports
    ("core",),  # protocols, SimEnv, executor, chunk space, registry of adopters, fast paths
    ("backends", "wrappers", "vector"),  # one simulator each | single-env wrappers | workers and pipeline
    ("tuning",),  # layouts measured on vector envs
    ("envs",),  # the assembly: Gymnasium ids, SimEnv -> wrap -> pipeline for every backend
    ("integrations", "policy", "returns", "doctor"),  # frameworks' drop-ins, policies, value targets, diagnosis
    ("eval",),  # whole benchmarks: an episode list over workers, the policy batched
    ("conformance", "bench"),  # sweeps against the stock simulators, the main job
    ("bench_server",),  # the main job's GPU-server regime: many envs per policy, against the bound
    ("fastenv",),  # the package's own namespace (fastenv/__init__.py)
    ("cli",),
]
RANK = {group: rank for rank, groups in enumerate(LAYERS) for group in groups}

# Old import paths of public names, served lazily from the layer above (a module __getattr__).
COMPAT_DOORS = {
    "fastenv.backends.libero": "fastenv.envs",
    "fastenv.backends.maniskill": "fastenv.envs",
    "fastenv.backends.behavior": "fastenv.envs",
}


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in (SRC / "fastenv").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _group(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "fastenv"


def _imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported fastenv module, line, inside a compat door) for each import in ``module``."""
    tree = ast.parse(MODULES[module].read_text())
    doors = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
    in_door = {id(n) for door in doors for n in ast.walk(door)}
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] == "fastenv"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "fastenv":
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names.append(full if full in MODULES else node.module)
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                out.append((target, node.lineno, id(node) in in_door))
    return out


EDGES = {module: _imports(module) for module in MODULES}


def test_every_group_has_a_layer():
    assert sorted({_group(m) for m in MODULES} - set(RANK)) == []


def test_no_import_points_up():
    wrong = []
    for module, imports in EDGES.items():
        for target, line, in_door in imports:
            here, there = _group(module), _group(target)
            if here == there or RANK[there] < RANK[here]:
                continue
            if in_door and COMPAT_DOORS.get(module) == f"fastenv.{there}":
                continue
            relation = "a layer above" if RANK[there] > RANK[here] else "a sibling of its layer"
            wrong.append(f"{module}:{line} imports {target} ({relation})")
    assert wrong == []


def test_no_import_cycles_between_files():
    graph = {m: {t for t, _, in_door in imports if not in_door} for m, imports in EDGES.items()}
    cycles = _cycles(graph)
    assert cycles == []


def test_compat_doors_serve_the_public_entry_points():
    from fastenv.backends import behavior, libero, maniskill
    from fastenv.envs import behavior as envs_behavior
    from fastenv.envs import libero as envs_libero
    from fastenv.envs import maniskill as envs_maniskill

    assert libero.make_env is envs_libero.make_env and libero.make_vec is envs_libero.make_vec
    assert maniskill.make_vec is envs_maniskill.make_vec and maniskill.make_cpu_env is envs_maniskill.make_cpu_env
    assert behavior.make_env is envs_behavior.make_env
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        libero.nothing_here  # noqa: B018


DOOR_NAMES = {"make_env", "make_vec", "make_cpu_env"}


def _door_uses(module: str) -> list[str]:
    """Where ``module`` takes a compat door: a door name imported from, or read off, a backend module."""
    tree = ast.parse(MODULES[module].read_text())
    aliases, uses = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in COMPAT_DOORS:
                    aliases.add(alias.asname or alias.name)
                elif node.module in COMPAT_DOORS and alias.name in DOOR_NAMES:
                    uses.append(f"{module}:{node.lineno} imports {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in COMPAT_DOORS and alias.asname:
                    aliases.add(alias.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in DOOR_NAMES:
            base = node.value
            dotted = ast.unparse(base)
            if (isinstance(base, ast.Name) and base.id in aliases) or dotted in COMPAT_DOORS:
                uses.append(f"{module}:{node.lineno} reads {dotted}.{node.attr}")
    return uses


def test_nothing_inside_fastenv_takes_a_compat_door():
    uses = [use for module in MODULES if not module.startswith("fastenv.backends") for use in _door_uses(module)]
    assert uses == []


def test_the_door_check_sees_a_door_taken(tmp_path, monkeypatch):
    fake = tmp_path / "user.py"
    fake.write_text("from fastenv.backends import maniskill as ms\nfrom fastenv.backends.libero import make_vec\nms.make_cpu_env()\n")
    monkeypatch.setitem(MODULES, "fastenv.user", fake)
    assert _door_uses("fastenv.user") == [
        "fastenv.user:2 imports fastenv.backends.libero.make_vec", "fastenv.user:3 reads ms.make_cpu_env"
    ]


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check can fail: a core module that imports the vector layer is reported."""
    fake = tmp_path / "fastenv" / "core"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from fastenv.vector import PipelineVectorEnv\n")
    monkeypatch.setitem(MODULES, "fastenv.core.bad", fake / "bad.py")
    imports = _imports("fastenv.core.bad")
    assert imports == [("fastenv.vector", 2, False)]
    assert RANK[_group("fastenv.vector")] > RANK[_group("fastenv.core.bad")]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found
