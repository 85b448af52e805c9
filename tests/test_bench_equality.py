"""fastenv bench's "same data" column: digests per env and chunk, compared with Default's."""

import numpy as np

from fastenv.bench import IMAGE_KEY, STATE_KEY, Trajectories, compare_trajectories


def obs(n, value):
    return {IMAGE_KEY: np.full((n, 2, 2, 3), value, np.uint8), STATE_KEY: np.full((n, 3), float(value))}


def trajectory(values, final=None, ids=(0, 1)):
    t = Trajectories(2)
    t.reset(obs(2, 0))
    for k, v in enumerate(values):
        infos = {}
        if final is not None and k == final[0]:
            first = {key: value[0] for key, value in obs(1, final[1]).items()}
            infos = {"_final_obs": np.array([True, False]), "final_obs": [first, None]}
        t.record(np.array(ids), obs(2, v), np.array([1.0, 0.0]), np.array([False, False]), np.array([False, False]), infos)
    return t


def test_equal_trajectories_compare_equal_over_the_chunks_both_ran():
    same = compare_trajectories([trajectory([1, 2, 3])], [trajectory([1, 2])])
    assert same == {"equal": True, "chunks_compared": 2, "first_difference": None}


def test_an_observation_or_a_final_observation_that_differs_is_found_with_where():
    diff = compare_trajectories([trajectory([1, 5, 3])], [trajectory([1, 2, 3])])
    assert diff["equal"] is False and diff["first_difference"] == "round 1, env 0, chunk 2"
    diff = compare_trajectories([trajectory([1, 2], final=(1, 7))], [trajectory([1, 2], final=(1, 8))])
    assert diff["equal"] is False and diff["first_difference"] == "round 1, env 0, chunk 2"
    t = trajectory([1, 2], final=(1, 7))
    assert t.episodes_ended == 1


def test_rows_are_recorded_for_the_envs_they_belong_to():
    t = Trajectories(2)
    t.reset(obs(2, 0))
    t.record(np.array([1]), obs(1, 4), np.array([0.5]), np.array([True]), np.array([False]), {})
    assert len(t.chunks[0]) == 1 and len(t.chunks[1]) == 2


def test_a_rows_actions_do_not_depend_on_the_rows_served_with_it():
    from helpers import need

    torch = need("torch")
    from fastenv.policy import ChunkPolicy

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
