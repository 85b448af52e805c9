"""Assertions shared by the vector-env tests."""

import contextlib
import functools
import importlib
import os

import numpy as np
import pytest


# Where each optional module the tests import comes from: a fastenv extra, or scripts/setup.sh (installed
# without its own pins). CI installs all of them (scripts/setup.sh's default extras): there, one missing
# is a broken install, and its tests fail with the import error instead of skipping.
INSTALLS = {
    "torch": "torch", "numba": "numba", "robosuite": "libero", "libero": "libero", "stable_baselines3": "sb3",
    "torchrl": "torchrl", "tensordict": "torchrl", "tianshou": "tianshou", "skrl": "skrl", "sbx": "sbx", "ray": "ray",
    "tree": "rllib", "mani_skill": "maniskill", "cv2": "maniskill", "vla_eval": "test", "websockets": "eval", "msgpack": "eval",
    "tyro": "cleanrl", "tensorboard": "cleanrl", "matplotlib": "bench", "tqdm": "bench",
}
FROM_SETUP = {"rl_games": "rl_games", "pufferlib": "pufferlib-core", "openpi_client": "openpi-client"}


def install_line(name: str) -> str:
    """How to install the module ``name`` for the tests."""
    top = name.split(".")[0]
    if top in FROM_SETUP:
        return f"scripts/setup.sh installs {FROM_SETUP[top]} for the tests"
    extra = INSTALLS.get(top, "test")
    return f'pip install -e ".[{extra}]"'


def need(name: str, why: str = ""):
    """Import the module ``name`` for a test (or a test module, at its top).

    Outside CI a missing module skips, with the line that installs it. Under CI (``CI`` set), which
    installs every module the tests use, it raises the ImportError: a broken extra fails the run.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get("CI"):
            raise ImportError(f"CI installs {name} ({install_line(name)}), and it does not import: {exc}") from exc
        missing = isinstance(exc, ModuleNotFoundError) and name.startswith(str(exc.name))
        reason = f"{name} is not installed" if missing else f"{name} does not import ({exc})"
        reason += f" ({install_line(name)})" + (f": {why}" if why else "")
        pytest.skip(reason, allow_module_level=True)


def assert_same(a, b, where=""):
    """Recursive exact equality of observations / infos (dicts, object arrays, arrays, scalars)."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert isinstance(b, np.ndarray) and a.shape == b.shape, where
        for x, y in zip(a, b):
            if x is None or y is None:
                assert x is None and y is None, where
            else:
                assert_same(x, y, where)
    else:
        assert np.array_equal(np.asarray(a), np.asarray(b)), f"{where}: {a} != {b}"


def without_legacy_keys(infos):
    """Drop the ``final_observation`` alias, checking it is the same object as ``final_obs``."""
    infos = dict(infos)
    if "final_obs" in infos:
        assert infos.pop("final_observation") is infos["final_obs"]
        assert infos.pop("_final_observation") is infos["_final_obs"]
    return infos


def lift_step_keys(infos, n):
    """Gymnasium SyncVectorEnv's infos with the STEP_KEYS of ended envs also at the top level.

    That is fastenv's one addition to Gymnasium's same-step layout: the keys a training loop reads
    on every step (chunk_steps, chunk_rewards, chunk_discount) stay at the top level when an
    episode ends (Gymnasium moves the whole step info into final_info).
    """
    from fastenv.core.infos import STEP_KEYS, add_info, row_info

    if "final_info" not in infos:
        return infos
    out = {}
    for i in range(n):
        top = row_info(infos, i)
        top.pop("final_obs", None)
        final = top.pop("final_info", None)
        if final is not None:
            top = {**top, **{k: final[k] for k in STEP_KEYS if k in final}}
            add_info(out, {"final_obs": infos["final_obs"][i], "final_info": final}, i, n)
        add_info(out, top, i, n)
    return out


def step_every_env(envs, actions, how, max_batch=2):
    """Step every env of a PipelineVectorEnv once, by ``how``: "step", "stage" or "env_ids".

    ``actions`` is the batch of all envs (arrays, or dicts / tuples of them).

    A ``WorkerError`` is caught and what it delivers kept. Returns ({env: (obs, reward,
    terminated, truncated, info)} of the envs that got a result, [the WorkerErrors raised]).
    """
    from fastenv.core.arrays import get_row, take_rows
    from fastenv.core.infos import row_info
    from fastenv.vector import WorkerError

    got, errors = {}, []

    def collect(call, ids=None):
        try:
            obs, reward, terminated, truncated, infos = call()
            valid = np.ones(len(reward), dtype=bool)
        except WorkerError as err:
            errors.append(err)
            if getattr(err, "results", None) is None:  # it delivered nothing
                return
            (obs, reward, terminated, truncated, infos), valid, ids = err.results, err.valid, err.env_ids
        ids = infos["env_ids"] if ids is None else ids
        for pos, gid in enumerate(np.asarray(ids).tolist()):
            if valid[pos]:
                info = row_info(infos, pos)
                info.pop("env_ids", None)
                got[gid] = (get_row(obs, pos), reward[pos], terminated[pos], truncated[pos], info)

    if how == "step":
        collect(lambda: envs.step(actions), np.arange(envs.num_envs))
    elif how == "stage":
        stages = range(envs.pipeline_stages)
        for k in stages:
            envs.send(take_rows(actions, envs.layout.stage_envs(k)), stage=k)
        for k in stages:
            collect(lambda k=k: envs.recv(stage=k), envs.layout.stage_envs(k))
    else:
        order = np.arange(envs.num_envs)[::-1]
        envs.send(take_rows(actions, order), env_ids=order)
        while len(envs.in_flight()):
            collect(lambda: envs.recv(max_batch=max_batch))
    return got, errors


class Alone:
    """One env stepped by itself, as a one-env ``SyncVectorEnv(SAME_STEP)``: the reference of one env's transitions."""

    def __init__(self, make, seed):
        from gymnasium.vector import AutoresetMode, SyncVectorEnv

        from fastenv.core.arrays import get_row

        self.sync = SyncVectorEnv([make], autoreset_mode=AutoresetMode.SAME_STEP)
        self.obs = get_row(self.sync.reset(seed=seed)[0], 0)

    def step(self, action):
        from fastenv.core.arrays import get_row
        from fastenv.core.infos import row_info

        obs, reward, terminated, truncated, infos = self.sync.step(np.asarray(action)[None])
        self.obs = get_row(obs, 0)
        return self.obs, reward[0], terminated[0], truncated[0], row_info(infos, 0)


def skip_unless_script_imports(source, extra):
    """Skip (under CI: fail) a test of a user's script when a module the script imports is missing.

    The skip conditions are the script's own module-level imports, so they cannot drift from it
    (imports inside functions or branches, such as an optional ``wandb``, are the script's options).
    """
    import ast


    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    for name in sorted(names):
        need(name, f"the script imports it (extra {extra})")


def commit_seed() -> int:
    """A seed that changes with the commit (``fastenv.conformance.sample_seed``: the commit, or
    ``FASTENV_CONFORM_SEED``), as an integer for Hypothesis."""
    import hashlib

    from fastenv.conformance import sample_seed

    return int(hashlib.sha256(sample_seed().encode()).hexdigest(), 16) % (2**32)


class Contracts:
    """Checks run one after another, each failure recorded (one LIBERO build serves them all)."""

    def __init__(self):
        self.broken = []

    @contextlib.contextmanager
    def check(self, name):
        try:
            yield
        except (Exception, pytest.fail.Exception) as exc:
            self.broken.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")

    def assert_all_held(self):
        assert not self.broken, "contracts broken:\n" + "\n".join(self.broken)


SCALARS = (bool, int, float, np.generic)


def assert_identical(ours, ref, where="data", *, loose_scalars=False):
    """``ours`` is ``ref`` bit for bit: types, dict keys, tuple lengths, dtypes, shapes and bytes.

    As strict as Gymnasium's ``data_equivalence(..., exact=True)``, and it says where they differ.
    ``loose_scalars`` (SB3's contract, which is on values): a scalar may come back as a numpy scalar
    of the same kind and value (a Python ``0`` as ``np.int64(0)``: fastenv carries infos in
    Gymnasium's batched layout), and any dict stands for a dict (DummyVecEnv's OrderedDict).
    """
    if loose_scalars and isinstance(ref, SCALARS) and isinstance(ours, SCALARS):
        assert np.asarray(ours).dtype.kind == np.asarray(ref).dtype.kind, f"{where}: {ours!r} != {ref!r}"
        assert ours == ref or (ours != ours and ref != ref), f"{where}: {ours!r} != {ref!r}"
        return
    if loose_scalars and isinstance(ref, dict):
        assert isinstance(ours, dict), f"{where}: {type(ours).__name__} is not a dict"
    else:
        assert type(ours) is type(ref), f"{where}: {type(ours).__name__} != {type(ref).__name__} ({ours!r} vs {ref!r})"
    same = functools.partial(assert_identical, loose_scalars=loose_scalars)
    if isinstance(ref, dict):
        assert set(ours) == set(ref), f"{where}: keys {sorted(ours)} != {sorted(ref)}"
        for key in ref:
            same(ours[key], ref[key], f"{where}/{key}")
    elif isinstance(ref, (tuple, list)):
        assert len(ours) == len(ref), f"{where}: length {len(ours)} != {len(ref)}"
        for i, (a, b) in enumerate(zip(ours, ref)):
            same(a, b, f"{where}[{i}]")
    elif isinstance(ref, np.ndarray):
        assert (ours.shape, ours.dtype) == (ref.shape, ref.dtype), f"{where}: {ours.dtype}{ours.shape} != {ref.dtype}{ref.shape}"
        if ref.dtype == object:
            for i, (a, b) in enumerate(zip(ours.reshape(-1), ref.reshape(-1))):
                same(a, b, f"{where}[{i}]")
        else:
            assert ours.tobytes() == ref.tobytes(), f"{where}: {ours!r} != {ref!r}"
    elif isinstance(ref, (np.generic, float)):
        assert np.asarray(ours).tobytes() == np.asarray(ref).tobytes(), f"{where}: {ours!r} != {ref!r}"
    else:
        assert ours == ref, f"{where}: {ours!r} != {ref!r}"
