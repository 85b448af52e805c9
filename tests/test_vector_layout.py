import numpy as np
import pytest

from fastenv.vector import Layout
from fastenv.vector.pipeline import default_num_workers


def test_stages_are_contiguous_slices_spread_over_every_worker():
    layout = Layout(12, 3, 2)
    assert layout.stage_size == 6
    np.testing.assert_array_equal(layout.stage_envs(0), [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(layout.stage_envs(1), [6, 7, 8, 9, 10, 11])
    np.testing.assert_array_equal(layout.worker_envs(1), [1, 4, 7, 10])
    for stage in range(2):
        owners = [layout.worker_of(i) for i in layout.stage_envs(stage)]
        assert sorted(owners) == [0, 0, 1, 1, 2, 2]  # every worker steps part of every stage


@pytest.mark.parametrize("n, w, s", [(8, 3, 1), (8, 2, 3), (6, 4, 1), (4, 8, 1), (2, 1, 4)])
def test_uneven_layouts_are_refused(n, w, s):
    with pytest.raises(ValueError, match=rf"num_envs must be a multiple of num_workers \* pipeline_stages.*num_envs={n}, num_workers={w}, pipeline_stages={s}"):
        Layout(n, w, s)


@pytest.mark.parametrize("n, w, s", [(0, 1, 1), (4, 0, 1), (4, 1, 0)])
def test_non_positive_sizes(n, w, s):
    with pytest.raises(ValueError, match="must be an integer >= 1"):
        Layout(n, w, s)


def test_stage_and_env_id_checks():
    layout = Layout(8, 2, 2)
    with pytest.raises(ValueError, match=r"stage must be in \[0, 2\), got 2"):
        layout.stage_envs(2)
    with pytest.raises(ValueError, match=r"env_ids must be in \[0, 8\), got \[8, -1\]"):
        layout.check_env_ids([0, 8, -1])
    with pytest.raises(ValueError, match="distinct"):
        layout.check_env_ids([1, 1])
    with pytest.raises(ValueError, match="non-empty 1-D array of integers"):
        layout.check_env_ids([0.5])


def test_default_workers_divide_every_stage(monkeypatch):
    monkeypatch.setattr("fastenv.machine.available_cpus", lambda: 4)  # the CPUs this process may use
    assert default_num_workers(8, 1) == 4
    assert default_num_workers(6, 2) == 3
    assert default_num_workers(10, 1) == 2
