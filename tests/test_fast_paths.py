"""The fast paths' names have one source (``fastenv.core.fast_paths.FastPath``): each prints, formats
and writes to JSON as the sentence it always had, a LIBERO env's ``fast_paths()`` is keyed by them,
and no other source file spells one out as a string."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path

import pytest

import fastenv
from fastenv.core import FastPath

SENTENCES = {
    "COMPILED_CONTROL_LOOP": "compiled control loop",
    "COMPILED_POLICY_STEP": "compiled policy step",
    "FAST_CONTROL_LOOP": "fast control loop",
    "OBSERVATION_AT_CHUNK_END": "observation at a chunk's end",
    "IN_PLACE_RESET": "in-place reset",
    "SHARED_RENDER_CONTEXT": "shared render context",
    "CONTACT_CHECK_BY_GEOM_ID": "contact check by geom id",
}


def test_each_fast_path_prints_formats_and_writes_json_as_its_sentence():
    assert {m.name: m.value for m in FastPath} == SENTENCES
    for member in FastPath:
        sentence = SENTENCES[member.name]
        assert str(member) == f"{member}" == "%s" % member == format(member) == sentence
        assert f"{member:>40}" == f"{sentence:>40}"
        assert repr({member: True}) == repr({sentence: True})  # a dict of them prints as before
        assert json.dumps({member: True}) == json.dumps({sentence: True})
        assert json.dumps([member], indent=1) == json.dumps([sentence], indent=1)
        # a dict read back from an old results file is looked up by member, and the other way round
        assert json.loads(json.dumps({sentence: 1}))[member] == 1 and {member: 1}[sentence] == 1
        assert FastPath(sentence) is member and pickle.loads(pickle.dumps(member)) is member


@pytest.mark.libero
def test_a_libero_env_is_keyed_by_fast_paths(libero_slim_env):
    env = libero_slim_env.unwrapped
    env.reset(seed=0)
    paths = env.fast_paths()  # SimEnv's, from the adapter's
    assert list(paths) == list(FastPath) and all(type(path) is FastPath for path in paths)
    assert all(type(path) is FastPath for path in env.adapter.fast_paths())


def _docstrings(tree: ast.AST) -> set[int]:
    nodes = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, nodes) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def test_no_source_file_spells_out_a_fast_path():
    sentences = {member.value for member in FastPath}
    package = Path(fastenv.__file__).parent
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "core" / "fast_paths.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        docstrings = _docstrings(tree)
        found += [f"{path.relative_to(package)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in sentences and id(node) not in docstrings]
    assert not found, "use fastenv.core.fast_paths.FastPath: " + "; ".join(found)
