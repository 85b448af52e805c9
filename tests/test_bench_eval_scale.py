"""benchmarks/bench_eval_scale.py's pure parts: the stand-in every row calls, the comparison, the cores formula."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    saved = list(sys.path)
    spec = importlib.util.spec_from_file_location("bench_eval_scale", ROOT / "benchmarks" / "bench_eval_scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.path[:] = saved
    return module


def element(seed=0, size=224):
    rng = np.random.default_rng(seed)
    return {"observation/image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "observation/wrist_image": rng.integers(0, 256, (size, size, 3), dtype=np.uint8),
            "observation/state": rng.normal(size=8), "prompt": "a task"}


def test_the_chunk_is_float32_values_with_a_sign_for_the_gripper(bench):
    chunk = bench.standin_chunk(element())
    assert chunk.shape == (10, 7) and chunk.dtype == np.float64
    assert np.array_equal(chunk, chunk.astype(np.float32).astype(np.float64))  # vla-eval's cast to float32 changes nothing
    assert set(np.unique(chunk[:, -1])) <= {-1.0, 1.0}  # nor does its sign(gripper)
    assert np.array_equal(chunk, bench.standin_chunk(element()))


def test_the_chunk_reads_the_images_position_and_gripper_not_the_orientation(bench):
    e = element()
    ref = bench.standin_chunk(e)
    turned = {**e, "observation/state": np.concatenate([e["observation/state"][:3], -e["observation/state"][3:6],
                                                         e["observation/state"][6:]])}
    assert np.array_equal(bench.standin_chunk(turned), ref)
    as_float32 = {**e, "observation/state": e["observation/state"].astype(np.float32)}
    assert np.array_equal(bench.standin_chunk(as_float32), ref)
    for key, change in (("observation/image", lambda x: 255 - x), ("observation/wrist_image", lambda x: 255 - x),
                        ("observation/state", lambda x: x + np.r_[0.1, 0, 0, 0, 0, 0, 0, 0])):
        assert not np.array_equal(bench.standin_chunk({**e, key: change(e[key])}), ref), key


def test_vla_eval_s_raw_images_are_resized_as_openpi_resizes_them(bench):
    from fastenv.eval.protocol import resize_with_pad

    raw = element(1, size=256)
    obs = {"images": {"agentview": raw["observation/image"], "wrist": raw["observation/wrist_image"]},
           "states": raw["observation/state"].astype(np.float32), "task_description": "a task"}
    openpi = {**raw, "observation/image": resize_with_pad(raw["observation/image"], 224, 224),
              "observation/wrist_image": resize_with_pad(raw["observation/wrist_image"], 224, 224)}
    assert np.array_equal(bench.standin_chunk(bench.vla_eval_element(obs)), bench.standin_chunk(openpi))
    with pytest.raises(ValueError, match="224 px"):
        bench.standin_chunk(raw)


def test_differences_name_success_length_and_the_first_differing_action(bench):
    a = {"s/0/0": {"success": True, "length": 2, "actions": [[0.0] * 7, [1.0] * 7]},
         "s/0/1": {"success": False, "length": 1, "actions": [[0.0] * 7]}}
    assert bench.differences(a, a) == []
    b = {"s/0/0": {"success": False, "length": 3, "actions": [[0.0] * 7, [1.5] * 7, [0.0] * 7]}}
    assert bench.differences(a, b) == ["s/0/0: success False against True", "s/0/0: 3 steps against 2",
                                       "s/0/0: actions differ from step 1 (largest difference 0.5)", "s/0/1: missing"]


def test_scene_history_explains_differences_by_the_episodes_an_env_ran_before(bench):
    run = {"episodes": {"s/0/0": {"episodes_before_on_env": 0}, "s/0/1": {"episodes_before_on_env": 0},
                        "s/0/2": {"episodes_before_on_env": 1}},
           "differences": ["s/0/1: actions differ from step 0 (largest difference 0.1)", "s/0/2: 3 steps against 2"]}
    h = bench.scene_history([run])
    assert h["same"] == ["s/0/0"] and h["differ"] == ["s/0/1", "s/0/2"] and h["explained"]
    run["differences"] = run["differences"][:1]  # s/0/2 after another episode, yet the same: not what the rule says
    assert not bench.scene_history([run])["explained"]


def test_cores_needed(bench):
    assert bench.cores_needed(1.0, 0.096, 0.004, 1) == pytest.approx(10.0)
    assert bench.cores_needed(0.5, 0.096, 0.004, 8) == pytest.approx(0.5 * 8 / 0.128)
