"""LIBERO data faults outside the common tasks and key sets: each test failed before its fix.

Pruning that drops what a kept sensor reads, scenes drawn from a generator shared by a worker's
envs, seeded resets that differ between in-place and hard resets (and from a fresh stock env),
unseeded resets that drew as a fresh env's first instead of as the stock env's next,
physics steps per action rounded instead of truncated, and the final observation of an episode
that ends inside a chunk.
"""

import numpy as np
import pytest
from conftest import SMALL, StockLibero

pytestmark = pytest.mark.libero

FIXTURE_TASK = ("libero_90", 35)  # "open the microwave": a fixture placed at random, a door sampler


def fresh_stock(task, **kwargs):
    from fastenv.backends.libero.task import import_libero

    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    return StockLibero(OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=SMALL, camera_widths=SMALL, **kwargs))


def stock_seeded_reset(stock, task, seed, init_state_id):
    stock.seed(seed)
    stock.reset()
    return stock.set_init_state(task.init_states[init_state_id])


def fixture_positions(raw):
    model = raw.sim.model
    return {name: model.body_pos[model.body_name2id(f.root_body)].copy() for name, f in raw.fixtures_dict.items()}


@pytest.fixture(scope="module")
def fixture_task():
    from fastenv.backends.libero import LiberoTask

    return LiberoTask.load(*FIXTURE_TASK)


def test_a_kept_object_key_reads_the_robot_pose_its_sensor_needs(libero_task):
    # LIBERO's "<object>_to_robot0_eef_pos" sensors read robot0_eef_pos/quat from the sensor cache:
    # kept alone, those must be computed, or every relative pose falls back to the world frame.
    from fastenv.backends.libero import LiberoAdapter

    full = LiberoAdapter(libero_task, keys=None, camera_size=SMALL)
    pruned = LiberoAdapter(libero_task, keys=["object-state", "alphabet_soup_1_to_robot0_eef_quat"], camera_size=SMALL)
    try:
        rng = np.random.default_rng(0)
        actions = rng.uniform(-1, 1, (6, 7))
        for adapter in (full, pruned):
            adapter.reset(seed=None, options={"init_state_id": 0}, rng=rng)
        observables = pruned._raw._observables
        assert observables["robot0_eef_pos"].is_enabled() and not observables["robot0_joint_vel"].is_enabled()
        for k, action in enumerate(actions):
            ref = full.step(action)[0]
            obs = pruned.step(action)[0]
            for key in obs:
                assert np.array_equal(obs[key], ref[key]), f"{key} differs after {k + 1} steps"
    finally:
        full.close()
        pruned.close()


def test_the_final_observation_of_an_episode_ended_inside_a_chunk_is_the_stock_steps(libero_task, stock_env):
    # robosuite's step samples its observables at the physics step their timers say (the 24th of
    # 25 in LIBERO), not at the end: the observation taken where an episode ends inside a chunk
    # must be that one, not the state after the 25th.
    from conftest import stock_reset

    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=4, modalities=["agentview_image", "robot0_proprio-state"], camera_size=SMALL)
    try:
        raw = env.unwrapped.adapter._raw
        for r in (raw, stock_env.env):
            r._check_success = lambda r=r: r.timestep >= 3  # success at the 3rd step, in both
        env.reset(options={"init_state_id": 4})
        stock_reset(stock_env, libero_task, 4)
        actions = np.random.default_rng(1).uniform(-1, 1, (4, 7)).astype(np.float32)
        obs, reward, terminated, truncated, info = env.step(actions)
        for action in actions[:3]:
            ref, ref_reward, done, _ = stock_env.step(action)
        assert terminated and done and info["chunk_steps"] == 3
        for key in obs:
            assert np.array_equal(obs[key], ref[key]), key
        # ... and the next stock step samples where the stock env's would: observe() moved no timer.
        ref, *_ = stock_env.step(actions[3])
        obs, *_ = env.unwrapped.step(actions[3])
        for key in obs:
            assert np.array_equal(obs[key], ref[key]), f"{key} after observe()"
    finally:
        del stock_env.env._check_success
        env.close()


def test_an_envs_scenes_do_not_depend_on_the_envs_sharing_its_process(fixture_task):
    # Placements come from each env's own generator: env A's unseeded second episode is the same
    # whether env B resets in between (a worker shared) or not (alone).
    from fastenv.backends.libero import LiberoAdapter

    def episodes(with_neighbour):
        a = LiberoAdapter(fixture_task, keys=["robot0_proprio-state"], camera_size=SMALL)
        b = LiberoAdapter(fixture_task, keys=["robot0_proprio-state"], camera_size=SMALL) if with_neighbour else None
        try:
            rng_a, rng_b = np.random.default_rng(1), np.random.default_rng(2)
            a.reset(seed=5, options={"init_state_id": 0}, rng=rng_a)
            first = fixture_positions(a._raw)
            if b is not None:
                b.reset(seed=9, options={"init_state_id": 0}, rng=rng_b)
                b.reset(seed=None, options={"init_state_id": 0}, rng=rng_b)
            np.random.random(3)  # the process's own draws leave the env's alone too
            a.reset(seed=None, options={"init_state_id": 0}, rng=rng_a)
            return first, fixture_positions(a._raw)
        finally:
            a.close()
            if b is not None:
                b.close()

    alone, shared = episodes(False), episodes(True)
    for name in alone[1]:
        assert np.array_equal(alone[0][name], shared[0][name])
        assert np.array_equal(alone[1][name], shared[1][name]), f"{name}'s 2nd episode depends on the neighbour"
    assert any(not np.array_equal(alone[0][n], alone[1][n]) for n in alone[0])  # it is placed at random


def test_stock_hard_resets_are_not_reproducible_for_a_seed_and_fastenvs_are_a_fresh_envs_first(fixture_task):
    # LIBERO appends its property samplers at every model load: a stock env's second hard reset
    # with the same seed draws more numbers and moves the fixture. fastenv's seeded resets, in
    # place or hard, after any history, are a freshly built stock env's first reset.
    from fastenv.envs.libero import make_env

    seed, state = 7, 3
    stock = fresh_stock(fixture_task)
    try:
        first = stock_seeded_reset(stock, fixture_task, seed, state)
        first_fixtures = fixture_positions(stock.env)
        stock_seeded_reset(stock, fixture_task, seed, state)
        assert any(not np.array_equal(first_fixtures[n], p) for n, p in fixture_positions(stock.env).items())
    finally:
        stock.close()
    for hard_reset in (False, True):
        env = make_env(*FIXTURE_TASK, chunk=None, modalities=None, camera_size=SMALL, hard_reset=hard_reset)
        try:
            raw = env.unwrapped.adapter._raw
            for _ in range(2):  # a dirty history of seeded and unseeded resets and steps
                env.reset(seed=seed + 1)
                env.step(env.action_space.sample())
                env.reset()
            for _ in range(2):
                obs, _ = env.reset(seed=seed, options={"init_state_id": state})
                for name, pos in fixture_positions(raw).items():
                    assert np.array_equal(pos, first_fixtures[name]), f"{name} (hard_reset={hard_reset})"
                for key in first:
                    assert np.array_equal(obs[key], first[key]), f"{key} (hard_reset={hard_reset})"
        finally:
            env.close()


def test_unseeded_resets_draw_as_the_stock_envs_next_resets(fixture_task):
    # An RL library seeds once, then autoresets without a seed: each of the stock env's later hard
    # resets draws with one more load's property samplers, and fastenv's must draw as they do.
    from fastenv.envs.libero import make_env

    seed, states = 7, (3, 5, 1)
    actions = np.random.default_rng(0).uniform(-1, 1, (2, 7))
    stock = fresh_stock(fixture_task)
    want = []
    try:
        stock.seed(seed)
        for state in states:
            stock.reset()
            obs = stock.set_init_state(fixture_task.init_states[state])
            want.append((obs, fixture_positions(stock.env)))
            for action in actions:
                stock.step(action)
    finally:
        stock.close()
    assert any(not np.array_equal(want[0][1][n], p) for n, p in want[1][1].items())  # the fixture moved
    for hard_reset in (False, True):
        env = make_env(*FIXTURE_TASK, chunk=None, modalities=None, camera_size=SMALL, hard_reset=hard_reset)
        try:
            env.reset(seed=seed + 1)  # a history before the seeded reset changes nothing
            for e, state in enumerate(states):
                obs, _ = env.reset(seed=seed if e == 0 else None, options={"init_state_id": state})
                for name, pos in fixture_positions(env.unwrapped.adapter._raw).items():
                    assert np.array_equal(pos, want[e][1][name]), f"episode {e}: {name} (hard_reset={hard_reset})"
                for key in want[e][0]:
                    assert np.array_equal(obs[key], want[e][0][key]), f"episode {e}: {key} (hard_reset={hard_reset})"
                for action in actions:
                    env.step(action)
        finally:
            env.close()


def test_stepping_draws_nothing_from_numpys_global_generator(fixture_task):
    # Only resets swap in an env's own generator: a step must not draw at all, or envs sharing a
    # process would take each other's numbers.
    from fastenv.envs.libero import make_env

    env = make_env(*FIXTURE_TASK, chunk=4, modalities=["agentview_image", "object-state"], camera_size=SMALL)
    try:
        env.reset(seed=0)
        before = np.random.get_state()[1].copy(), np.random.get_state()[2]
        for _ in range(3):
            env.step(np.random.default_rng(0).uniform(-1, 1, (4, 7)))
        after = np.random.get_state()
        assert np.array_equal(after[1], before[0]) and after[2] == before[1]
    finally:
        env.close()


def test_an_adopted_env_at_30_hz_runs_robosuites_physics_steps_per_action(libero_task):
    # robosuite runs int(control_dt / model_dt) physics steps per action (16 at 30 Hz), not round() (17).
    import fastenv

    stock = fresh_stock(libero_task, control_freq=30, hard_reset=False)
    other = fresh_stock(libero_task, control_freq=30, hard_reset=False)
    env = fastenv.wrap(other._env, chunk=4, modalities=["robot0_proprio-state"])
    try:
        assert env.unwrapped.adapter._n_substeps == int(stock.env.control_timestep / stock.env.model_timestep) == 16
        stock.reset()
        stock.set_init_state(libero_task.init_states[0])
        env.reset()
        other.set_init_state(libero_task.init_states[0])
        actions = np.random.default_rng(2).uniform(-1, 1, (4, 7)).astype(np.float32)
        for action in actions:
            ref, *_ = stock.step(action)
        obs, *_ = env.step(actions)
        assert np.array_equal(stock.env.sim.data.qpos, other.env.sim.data.qpos)
        assert np.array_equal(obs["robot0_proprio-state"], ref["robot0_proprio-state"])
    finally:
        env.close()
        stock.close()
        other.close()


def test_observables_on_other_timers_fall_back_to_robosuites_loop_and_stay_exact(libero_task, stock_env):
    # A sensor sampled at another rate (here every other step) has no single sampling point per
    # sub-step: the sub-step then updates the observables as robosuite's own loop does.
    from conftest import stock_reset

    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=4, modalities=["robot0_proprio-state"], camera_size=SMALL)
    raws = (env.unwrapped.adapter._raw, stock_env.env)
    try:
        for r in raws:
            r.modify_observable("robot0_joint_pos", "sampling_rate", 10)
            r._check_success = lambda r=r: r.timestep >= 7
        env.reset(options={"init_state_id": 2})
        stock_reset(stock_env, libero_task, 2)
        actions = np.random.default_rng(3).uniform(-1, 1, (2, 4, 7)).astype(np.float32)
        for chunk in actions:
            obs, _, terminated, _, info = env.step(chunk)
            for action in chunk[: info["chunk_steps"]]:
                ref, *_ = stock_env.step(action)
            assert np.array_equal(obs["robot0_proprio-state"], ref["robot0_proprio-state"])
        assert terminated and info["chunk_steps"] == 3  # the final observation, inside the chunk
    finally:
        for r in raws:
            r.modify_observable("robot0_joint_pos", "sampling_rate", 20)
        del stock_env.env._check_success
        env.close()


class fail_first_placement:
    """Inside: the next placement raises RandomizationError once, and LIBERO's reset tries again."""

    def __enter__(self):
        from robosuite.utils.errors import RandomizationError
        from robosuite.utils.placement_samplers import SequentialCompositeSampler

        self.cls, self.original, self.failed = SequentialCompositeSampler, SequentialCompositeSampler.sample, False

        def sample(sampler, *args, **kwargs):
            if not self.failed:
                self.failed = True
                raise RandomizationError("placement failed on purpose")
            return self.original(sampler, *args, **kwargs)

        SequentialCompositeSampler.sample = sample
        return self

    def __exit__(self, *exc):
        self.cls.sample = self.original


def test_a_reset_that_retries_a_failed_placement_draws_as_the_stock_envs(fixture_task):
    # A hard reset's second attempt loads the model again (LIBERO appends its samplers once
    # more); an in-place reset's must draw the same numbers.
    from fastenv.envs.libero import make_env

    seed, state = 13, 2
    stock = fresh_stock(fixture_task)
    try:
        with fail_first_placement() as failure:
            ref = stock_seeded_reset(stock, fixture_task, seed, state)
        assert failure.failed
        ref_fixtures = fixture_positions(stock.env)
    finally:
        stock.close()
    for hard_reset in (False, True):
        env = make_env(*FIXTURE_TASK, chunk=None, modalities=None, camera_size=SMALL, hard_reset=hard_reset)
        try:
            env.reset(seed=seed + 1)
            with fail_first_placement():
                obs, _ = env.reset(seed=seed, options={"init_state_id": state})
            for name, pos in fixture_positions(env.unwrapped.adapter._raw).items():
                assert np.array_equal(pos, ref_fixtures[name]), f"{name} (hard_reset={hard_reset})"
            for key in ref:
                assert np.array_equal(obs[key], ref[key]), f"{key} (hard_reset={hard_reset})"
        finally:
            env.close()


@pytest.mark.parametrize("suite, task_id", [("libero_10", 0), ("libero_90", 35), ("libero_spatial", 3)])
def test_the_state_keys_read_from_the_bddl_file_are_the_simulators(suite, task_id):
    # make_env refuses an unknown key before building (seconds); the list it checks against must
    # be exactly the built env's (the conformance sweep checks it on every task, see its table).
    from fastenv.backends.libero import LiberoAdapter, LiberoTask

    task = LiberoTask.load(suite, task_id)
    adapter = LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=SMALL)
    try:
        built = [k for k in adapter.available_keys() if not any(k.startswith(f"{cam}_") for cam in adapter._model_cameras)]
    finally:
        adapter.close()
    assert sorted(task.state_keys()) == sorted(built)


def test_an_unknown_key_is_refused_with_the_closest_one_before_anything_is_built(monkeypatch):
    from fastenv.backends import libero
    from fastenv.envs.libero import make_env

    def built(*args, **kwargs):
        raise AssertionError("the simulator was built before the keys were checked")

    monkeypatch.setattr(libero, "LiberoAdapter", built)
    with pytest.raises(ValueError, match=r"\['agentview_rgb'\] \('agentview_rgb': did you mean 'agentview_image'\?\)"):
        make_env("libero_10", 0, modalities=["agentview_rgb"])
    with pytest.raises(ValueError, match=r"did you mean 'alphabet_soup_1_to_robot0_eef_pos'\?"):
        make_env("libero_10", 0, modalities=["robot0_proprio-state", "alphabet_soup_1_to_robot0_eef_po"])
