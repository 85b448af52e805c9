"""Shared fixtures: real LIBERO envs with small cameras, built once per session."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

# The tests check that the compiled control loop serves from an env's first steps: where numba's
# cache is empty, each test process compiles it before its first step (tests/test_first_step.py
# checks the default, a background compile).
os.environ.setdefault("FASTENV_COMPILE", "inline")
# Two test processes share a 2-core machine (pytest-xdist): Mesa's llvmpipe renders on one thread in
# each (images do not depend on its thread count), so they do not oversubscribe the cores.
os.environ.setdefault("LP_NUM_THREADS", "1")

SMALL = 64  # camera side for tests: small, but every render still goes through MuJoCo + EGL


def _libero_missing_reason() -> str | None:
    if importlib.util.find_spec("libero") is None:
        return 'LIBERO is not installed (pip install -e ".[libero]")'
    return None


def _maniskill_missing_reason() -> str | None:
    if importlib.util.find_spec("mani_skill") is None:
        return 'ManiSkill is not installed (pip install -e ".[maniskill]")'
    from fastenv.backends.maniskill import vulkan_unavailable_reason

    return vulkan_unavailable_reason()


MISSING = pytest.StashKey[str]()

# RLinf's LIBERO stack (tests/test_libero_stacks.py): in CI, where it is not built yet, its virtual
# environment is made in the background from the start of the session (mostly downloads and
# unpacking), and the tests that run in it wait for it. The test processes (pytest-xdist's workers)
# share one build: the first to ask starts it, holding a lock on VENV.lock until the build ends, and
# VENV-build.done marks a build that succeeded.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RLINF_STACK = os.path.join(ROOT, ".stacks", "rlinf")


def start_stack_build(venv: str, stack: str) -> None:
    """Start building the stack into ``venv`` unless it is built or being built (by any process)."""
    import fcntl
    import subprocess

    if os.path.exists(venv + "-build.done") or (os.path.exists(os.path.join(venv, "bin", "python")) and not os.path.exists(venv + "-build.log")):
        return  # built (by this machinery, or by hand)
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    fd = os.open(venv + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another test process builds it
        if os.path.exists(venv + "-build.done"):
            return
        script = os.path.join(ROOT, "scripts", "libero_stack.sh")
        with open(venv + "-build.log", "w") as out:
            # the build inherits the locked descriptor: the lock is held until it exits
            subprocess.Popen(["bash", "-c", 'bash "$0" "$1" "$2" && touch "$2-build.done"', script, stack, venv], stdout=out,
                             stderr=subprocess.STDOUT, pass_fds=(fd,))
    finally:
        os.close(fd)


def wait_for_stack(venv: str, timeout: float = 1200.0) -> str | None:
    """The stack's Python once no process builds it any more; None where it is not built (a build that
    failed fails the calling test with its log)."""
    import fcntl
    import time

    deadline = time.monotonic() + timeout
    fd = os.open(venv + ".lock", os.O_RDWR | os.O_CREAT, 0o666) if os.path.isdir(os.path.dirname(venv)) else None
    try:
        while fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the stack build of {venv} ran past {timeout:.0f} s")
                time.sleep(2.0)
    finally:
        if fd is not None:
            os.close(fd)
    python = os.path.join(venv, "bin", "python")
    log = venv + "-build.log"
    if os.path.exists(log) and not os.path.exists(venv + "-build.done"):
        with open(log) as f:
            pytest.fail(f"building {venv} failed:\n{f.read()[-3000:]}")
    return python if os.path.exists(python) else None


def pytest_collection_finish(session):
    if os.environ.get("CI") and any("test_a_conformance_sample_on_rlinfs_stack" in item.nodeid for item in session.items):
        start_stack_build(RLINF_STACK, "rlinf")


_DURATIONS: dict[str, float] = {}  # test id -> its time, setup to teardown


def pytest_runtest_logreport(report):
    """Each test's time, setup to teardown (in the main process under xdist: the reports arrive there)."""
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_unconfigure(config):
    """Under CI, the files and the tests that took the most test time, printed last (after pytest's
    own closing line, where a log's tail keeps it): where the suite's time goes, commit by commit."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if not os.environ.get("CI") or hasattr(config, "workerinput") or reporter is None or not _DURATIONS:
        return
    by_file: dict[str, float] = {}
    for nodeid, seconds in _DURATIONS.items():
        by_file[nodeid.split("::")[0]] = by_file.get(nodeid.split("::")[0], 0.0) + seconds
    reporter.write_line(f"test time by file ({sum(by_file.values()):.0f} s in all, over the test processes):")
    for path, seconds in sorted(by_file.items(), key=lambda kv: -kv[1])[:20]:
        reporter.write_line(f"  {seconds:7.0f} s  {path}")
    reporter.write_line("the slowest tests:")
    for nodeid, seconds in sorted(_DURATIONS.items(), key=lambda kv: -kv[1])[:30]:
        reporter.write_line(f"  {seconds:7.0f} s  {nodeid}")


def pytest_runtest_setup(item):
    if MISSING in item.stash:
        pytest.fail(item.stash[MISSING], pytrace=False)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "ci_sample(group, keep=1, share=1): one of several end-to-end runs of the same claim; under CI, `keep` of the group's "
        "tests run, on a `share` of the commits (a long test alone in its group: share=1/3), drawn by the commit "
        "(FASTENV_CONFORM_SEED replays a draw, FASTENV_CI_FULL=1 runs them all)",
    )
    config.addinivalue_line(
        "markers",
        "big_memory: builds many simulators at once; one such test at a time over the test processes (a machine-wide lock)",
    )


def ci_sampled_out(items: list) -> list:
    """Under CI (unless FASTENV_CI_FULL is set), the ``ci_sample`` tests the commit's draw leaves out:
    the same draw in every test process (it depends on the commit and the collection only)."""
    import random

    if not os.environ.get("CI") or os.environ.get("FASTENV_CI_FULL"):
        return []
    from fastenv.conformance import sample_seed

    groups: dict[str, list] = {}
    keep: dict[str, int] = {}
    share: dict[str, float] = {}
    for item in items:
        marker = item.get_closest_marker("ci_sample")
        if marker is not None:
            groups.setdefault(marker.args[0], []).append(item)
            keep[marker.args[0]] = int(marker.kwargs.get("keep", 1))
            share[marker.args[0]] = float(marker.kwargs.get("share", 1.0))
    out = []
    seed = sample_seed()
    for name, members in sorted(groups.items()):
        draw = random.Random(f"{seed}:{name}")
        if draw.random() >= share[name]:  # not this commit's turn: the whole group waits
            out += members
            continue
        chosen = set(draw.sample(range(len(members)), min(keep[name], len(members))))
        out += [item for i, item in enumerate(members) if i not in chosen]
    return out


@pytest.fixture(autouse=True)
def _one_big_memory_test_at_a_time(request):
    """Tests marked ``big_memory`` hold a lock shared by the test processes while they run, so two of
    them (each building several LIBERO envs, a GB or more each) never run at once."""
    if request.node.get_closest_marker("big_memory") is None:
        yield
        return
    import fcntl

    fd = os.open(os.path.join(ROOT, ".pytest-big-memory.lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# The peers' own vector-env tests (tests/peer): every contract runs per commit, each parametrized one
# on PEER_SAMPLE of its cases; outside CI, or with FASTENV_CI_FULL=1, every case runs.
PEER_SAMPLE = 2


def mark_peer_samples(items: list) -> None:
    for item in items:
        if "/peer/" in item.nodeid.replace("\\", "/") and hasattr(item, "callspec") and item.get_closest_marker("ci_sample") is None:
            item.add_marker(pytest.mark.ci_sample(f"peer:{item.module.__name__}:{item.originalname}", keep=PEER_SAMPLE))


def pytest_collection_modifyitems(config, items):
    mark_peer_samples(items)
    sampled_out = ci_sampled_out(items)
    if sampled_out:
        items[:] = [item for item in items if item not in sampled_out]
        config.hook.pytest_deselected(items=sampled_out)
    checks = {"libero": _libero_missing_reason, "maniskill": _maniskill_missing_reason}
    for marker, check in checks.items():
        marked = [item for item in items if marker in item.keywords]
        reason = check() if marked else None
        if reason is None:
            continue
        for item in marked:
            if os.environ.get("CI"):
                # In CI the real simulator is the main evidence: a missing one fails the test.
                item.stash[MISSING] = f"CI without {marker}: {reason}"
            else:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def libero_task():
    from fastenv.backends.libero import LiberoTask

    return LiberoTask.load("libero_10", 0)


@pytest.fixture(scope="session")
def stock_env(libero_task):
    """LIBERO's own OffScreenRenderEnv (two cameras, observation every step), the reference."""
    from fastenv.backends.libero.task import import_libero

    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    env = StockLibero(OffScreenRenderEnv(bddl_file_name=libero_task.bddl_file, camera_heights=SMALL, camera_widths=SMALL))
    yield env
    env.close()


class StockLibero:
    """LIBERO's own env with its GL context made current before each call that renders or frees.

    robosuite renders into (and frees its render context from) whichever GL context is
    current, assuming one env per process; the tests hold several.
    """

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def _current(self):
        from fastenv.backends.libero.adapter import make_gl_current

        make_gl_current(self._env.env)

    def reset(self):
        self._current()
        return self._env.reset()

    def step(self, action):
        self._current()
        return self._env.step(action)

    def set_init_state(self, state):
        self._current()
        return self._env.set_init_state(state)

    def close(self):
        self._current()
        self._env.close()


def stock_reset(stock_env, libero_task, init_state_id: int):
    stock_env.reset()
    return stock_env.set_init_state(libero_task.init_states[init_state_id])


@pytest.fixture(scope="session")
def libero_stock_keys_env():
    """fastenv LIBERO env with the stock observation set and chunk=1."""
    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=1, modalities=None, camera_size=SMALL)
    yield env
    env.close()


@pytest.fixture(scope="session")
def libero_slim_env():
    """fastenv LIBERO env in its fast configuration (one camera + proprio), chunk 8."""
    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=8, camera_size=SMALL)
    yield env
    env.close()


@pytest.fixture
def actions():
    return np.random.default_rng(7).uniform(-1, 1, (40, 7)).astype(np.float32)
