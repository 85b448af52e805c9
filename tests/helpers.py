"""Assertions shared by the vector-env tests."""

import numpy as np


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
