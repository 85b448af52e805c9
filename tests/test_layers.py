"""fastenv's layers point one way (docs/architecture.md): read every import in src/fastenv with ast.

Function-level imports count as much as module-level ones: a lazy import that points up is still
a dependency on the layer above. There is no exception: the backends' old entry points
(``make_env``, ``make_vec``, ``make_cpu_env`` from before ``fastenv.envs``) are not handed on from
the layer above; asking a backend for one raises an ``AttributeError`` that names its home.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src"

# Each group's layer, lowest first. A module may import its own group and any lower layer; groups
# of one layer are independent (none imports another).
LAYERS: list[tuple[str, ...]] = [
    ("_validation", "_deps", "machine", "policy_cost", "gpus"),  # leaves: plain functions, no fastenv imports
    ("core",),  # protocols, SimEnv, executor, chunk space, registry of adopters, fast paths
    ("backends", "wrappers", "vector"),  # one simulator each | single-env wrappers | workers and pipeline
    ("tuning",),  # layouts measured on vector envs
    ("envs",),  # the assembly: Gymnasium ids, SimEnv -> wrap -> pipeline for every backend
    ("integrations", "returns", "doctor"),  # frameworks' drop-ins, value targets, diagnosis
    ("eval",),  # whole benchmarks: an episode list over workers, the policy batched
    ("conformance", "bench"),  # sweeps against the stock simulators, the main job
    ("bench_server", "run_clock", "policy"),  # old paths of fastenv.bench's modules, warning for one release
    ("fastenv",),  # the package's own namespace (fastenv/__init__.py)
    ("cli",),
]
RANK = {group: rank for rank, groups in enumerate(LAYERS) for group in groups}

# The entry points that lived in a backend before the assembly layer, and their home now.
MOVED_ENTRY_POINTS = {
    "fastenv.backends.libero": ("fastenv.envs.libero", ("make_env", "make_vec")),
    "fastenv.backends.maniskill": ("fastenv.envs.maniskill", ("make_env", "make_vec", "make_cpu_env")),
    "fastenv.backends.behavior": ("fastenv.envs.behavior", ("make_env",)),
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


def _imports(module: str) -> list[tuple[str, int]]:
    """(imported fastenv module, line) for each import in ``module``."""
    tree = ast.parse(MODULES[module].read_text())
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
                out.append((target, node.lineno))
    return out


EDGES = {module: _imports(module) for module in MODULES}


def test_every_group_has_a_layer():
    assert sorted({_group(m) for m in MODULES} - set(RANK)) == []


def test_no_import_points_up():
    wrong = []
    for module, imports in EDGES.items():
        for target, line in imports:
            here, there = _group(module), _group(target)
            if here == there or RANK[there] < RANK[here]:
                continue
            relation = "a layer above" if RANK[there] > RANK[here] else "a sibling of its layer"
            wrong.append(f"{module}:{line} imports {target} ({relation})")
    assert wrong == []


def test_no_import_cycles_between_files():
    graph = {m: {t for t, _ in imports} for m, imports in EDGES.items()}
    cycles = _cycles(graph)
    assert cycles == []


@pytest.mark.parametrize("backend", sorted(MOVED_ENTRY_POINTS))
def test_a_backend_names_the_home_of_its_old_entry_points_and_hands_none_on(backend):
    import importlib

    module = importlib.import_module(backend)
    home, names = MOVED_ENTRY_POINTS[backend]
    for name in names:
        assert callable(getattr(importlib.import_module(home), name))
        with pytest.raises(AttributeError, match=re.escape(f"{backend}.{name} moved to {home}.{name}")):
            getattr(module, name)
        assert not hasattr(module, name)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        module.nothing_here  # noqa: B018


def _moved_uses(path: pathlib.Path, label: str) -> list[str]:
    """Where a file takes an old entry point from a backend: imported from, or read off, the backend module."""
    tree = ast.parse(path.read_text())
    names = {name for _, moved in MOVED_ENTRY_POINTS.values() for name in moved}
    aliases, uses = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in MOVED_ENTRY_POINTS:
                    aliases.add(alias.asname or alias.name)
                elif node.module in MOVED_ENTRY_POINTS and alias.name in names:
                    uses.append(f"{label}:{node.lineno} imports {full}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MOVED_ENTRY_POINTS and alias.asname:
                    aliases.add(alias.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            base = node.value
            dotted = ast.unparse(base)
            if (isinstance(base, ast.Name) and base.id in aliases) or dotted in MOVED_ENTRY_POINTS:
                uses.append(f"{label}:{node.lineno} reads {dotted}.{node.attr}")
    return uses


def test_no_code_of_the_project_takes_an_entry_point_from_a_backend():
    # Such a use fails only when it runs: the package, the tests, the examples and the benchmarks
    # are read here, so a lazy or rarely run one is found too.
    root = SRC.parent
    files = [path for folder in ("src", "tests", "examples", "benchmarks") for path in sorted((root / folder).rglob("*.py"))]
    assert len(files) > len(MODULES)
    uses = [use for path in files for use in _moved_uses(path, path.relative_to(root).as_posix())]
    assert uses == []


def test_the_moved_check_sees_an_old_entry_point_taken(tmp_path):
    fake = tmp_path / "user.py"
    fake.write_text("from fastenv.backends import maniskill as ms\nfrom fastenv.backends.libero import make_vec\nms.make_cpu_env()\n")
    assert _moved_uses(fake, "user.py") == ["user.py:2 imports fastenv.backends.libero.make_vec", "user.py:3 reads ms.make_cpu_env"]


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The check can fail: a core module that imports the vector layer is reported."""
    fake = tmp_path / "fastenv" / "core"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from fastenv.vector import PipelineVectorEnv\n")
    monkeypatch.setitem(MODULES, "fastenv.core.bad", fake / "bad.py")
    imports = _imports("fastenv.core.bad")
    assert imports == [("fastenv.vector", 2)]
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
