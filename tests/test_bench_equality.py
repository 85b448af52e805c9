"""fastenv bench's "same data" column: each env's trajectory, compared with Default's (``fastenv.bench.same_data``)."""

import numpy as np
import pytest

from fastenv.bench.envs import IMAGE_KEY, SLIM_MODALITIES, STATE_KEY
from fastenv.bench.same_data import Trajectories, compare


def obs(n, value):
    return {IMAGE_KEY: np.full((n, 2, 2, 3), value, np.uint8), STATE_KEY: np.full((n, 3), float(value))}


def trajectory(values, final=None, ids=(0, 1)):
    """The policy reads a first observation, then each chunk's; ``final``: (chunk, value) of env 0's final observation."""
    t = Trajectories(2, SLIM_MODALITIES)
    t.observed(np.array([0, 1]), obs(2, 0))
    for k, v in enumerate(values):
        infos = {}
        if final is not None and k == final[0]:
            first = {key: value[0] for key, value in obs(1, final[1]).items()}
            infos = {"_final_obs": np.array([True, False]), "final_obs": [first, None]}
        t.stepped(np.array(ids), np.array([1.0, 0.0]), np.array([False, False]), np.array([False, False]), infos)
        t.observed(np.array(ids), obs(2, v))
    return t


def test_equal_trajectories_compare_equal_over_the_chunks_both_ran():
    same = compare([trajectory([1, 2, 3])], [trajectory([1, 2])])
    assert same == {"equal": True, "chunks_compared": 2, "first_difference": None}


def test_an_observation_or_a_final_observation_that_differs_is_found_with_where():
    diff = compare([trajectory([1, 5, 3])], [trajectory([1, 2, 3])])
    assert diff["equal"] is False and diff["first_difference"] == "round 1, env 0, observation 2"
    diff = compare([trajectory([1, 2], final=(1, 7))], [trajectory([1, 2], final=(1, 8))])
    assert diff["equal"] is False and diff["first_difference"] == "round 1, env 0, chunk 1"
    t = trajectory([1, 2], final=(1, 7))
    assert t.episodes_ended == 1


def test_a_different_reward_or_end_is_found_and_keys_not_kept_do_not_count():
    ref, ours = trajectory([1, 2]), trajectory([1, 2])
    ours.stepped(np.array([1]), np.array([0.5]), np.array([True]), np.array([False]), {})
    ref.stepped(np.array([1]), np.array([0.5]), np.array([False]), np.array([False]), {})
    assert compare(ours, ref)["first_difference"] == "env 1, chunk 2"
    a, b = Trajectories(1, SLIM_MODALITIES), Trajectories(1, SLIM_MODALITIES)
    a.observed([0], {**obs(1, 3), "other": np.zeros(1)})
    b.observed([0], {**obs(1, 3), "other": np.ones(1)})
    assert compare(a, b)["equal"]


def test_rows_are_recorded_for_the_envs_they_belong_to_and_copied_when_recorded():
    t = Trajectories(2, SLIM_MODALITIES)
    first = obs(2, 0)
    t.observed(np.array([0, 1]), first)
    first[IMAGE_KEY][:] = 9  # a vector env's buffer, written again by its next step
    t.stepped(np.array([1]), np.array([0.5]), np.array([True]), np.array([False]), {})
    t.observed(np.array([1]), obs(1, 4))
    assert [len(p) for p in t.prints] == [1, 2] and [len(e) for e in t.events] == [0, 1]
    again = Trajectories(2, SLIM_MODALITIES)
    again.observed(np.array([0, 1]), obs(2, 0))
    assert again.prints[0] == t.prints[0]
    t.seal()  # sealing twice, recording after: nothing lost
    t.observed(np.array([0]), obs(1, 5))
    assert [len(p) for p in t.prints] == [2, 2]


def test_a_rows_actions_do_not_depend_on_the_rows_served_with_it():
    from helpers import need

    torch = need("torch")
    from fastenv.bench.policies import ChunkPolicy

    torch.manual_seed(0)
    policy = ChunkPolicy((36, 36, 3), 5, chunk=2, action_dim=3)
    rng = np.random.default_rng(0)
    batch = {"img": rng.integers(0, 255, (3, 36, 36, 3), dtype=np.uint8), "s": rng.normal(size=(3, 5))}

    def gens():
        return [torch.Generator().manual_seed(10 + i) for i in range(3)]

    together, values = policy.act_rows(batch, "img", "s", gens())
    g = gens()
    alone = [policy.act_rows({k: v[i : i + 1] for k, v in batch.items()}, "img", "s", [g[i]])[0][0] for i in (2, 0, 1)]
    np.testing.assert_array_equal(together[[2, 0, 1]], np.stack(alone))
    assert together.shape == (3, 2, 3) and values.shape == (3,)
    assert not np.array_equal(together[0], together[1])  # each row its own noise
