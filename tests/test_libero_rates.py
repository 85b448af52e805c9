"""LIBERO at control and observation rates other than 20 Hz: ``fastenv.wrap`` on a user's env
against the same env stepped one action at a time (the sweep: ``fastenv conform libero_rates``)."""

import numpy as np
import pytest

import fastenv
from fastenv import conformance

pytestmark = pytest.mark.libero


def _pair(control_freq=20, obs_rate=None, setting=None):
    """Two LIBERO envs of libero_10 task 0 built as a user builds them, without cameras, set alike."""
    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.task import import_libero

    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    task = LiberoTask.load("libero_10", 0)
    envs = []
    for _ in range(2):
        env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_names=[], use_camera_obs=False, control_freq=control_freq)
        for name in env.env._observables:
            if obs_rate is not None:
                env.env.modify_observable(name, "sampling_rate", obs_rate)
            if setting is not None:
                setting(env.env, name)
        envs.append(env)
    return task, envs


def _play(task, stock, user, chunk, steps, seed=0):
    """Chunks through ``fastenv.wrap(user)`` beside ``stock`` stepped one action at a time: the chunk
    ends whose observation differs from stock's."""
    env = fastenv.wrap(user, chunk=chunk)
    try:
        stock.seed(seed)
        stock.reset()
        stock.set_init_state(task.init_states[0])
        env.reset(seed=seed)
        user.set_init_state(task.init_states[0])
        rng = np.random.default_rng(seed)
        actions = rng.uniform(-1, 1, (steps, 7))
        actions[:, 2] -= 0.3
        stale = []
        for c in range(steps // chunk):
            block = actions[c * chunk : (c + 1) * chunk]
            rewards = [stock.step(a)[1] for a in block[:-1]]
            stock_obs, reward, _, _ = stock.step(block[-1])
            obs, _, _, _, info = env.step(block)
            assert list(info["chunk_rewards"]) == [*rewards, reward]
            if any(not np.array_equal(obs[k], stock_obs[k]) for k in stock_obs):
                stale.append((c + 1) * chunk)
        return stale
    finally:
        env.close()


@pytest.mark.parametrize(
    "control_freq,obs_rate,chunk,steps",
    [
        (30, None, 8, 200),  # 16 physics steps an env step, observables every 25: some steps sample nothing
        (20, 10, 3, 81),  # every observable at half the control rate, chunks of 3 against its period of 2
    ],
)
def test_a_chunks_observation_is_the_stock_one_at_any_control_and_observation_rate(control_freq, obs_rate, chunk, steps):
    task, (stock, user) = _pair(control_freq, obs_rate)
    try:
        assert _play(task, stock, user, chunk, steps) == []
    finally:
        stock.close()
        user.close()


def test_a_filter_sees_the_samples_the_stock_env_takes_and_no_others():
    # robosuite lets a filter keep state (or record what it is given): wrapping the env and
    # sub-steps must feed it exactly the stock env's samples, in order.
    from fastenv.conformance.libero_rates import RunningMean

    given = {0: [], 1: []}

    def setting(index):
        def apply(raw, name):
            if name == "robot0_joint_pos":
                mean = RunningMean()

                def recording(value):
                    given[index].append(np.array(value))
                    return mean(value)

                raw.modify_observable(name, "filter", recording)
        return apply

    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.task import import_libero

    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    task = LiberoTask.load("libero_10", 0)
    envs = []
    for index in range(2):
        env = OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_names=[], use_camera_obs=False, control_freq=30)
        for name in env.env._observables:
            env.env.modify_observable(name, "sampling_rate", 15)
            setting(index)(env.env, name)
        envs.append(env)
    stock, user = envs
    try:
        given[0].clear(), given[1].clear()  # what each saw while built (robosuite's own samples, alike)
        assert _play(task, stock, user, chunk=4, steps=60) == []
        assert len(given[1]) == len(given[0]) > 20
        assert all(np.array_equal(a, b) for a, b in zip(given[0], given[1]))
    finally:
        stock.close()
        user.close()


def test_the_sample_clock_steps_aside_for_what_a_skipped_sample_would_change():
    from robosuite.utils.observables import (
        create_deterministic_corrupter,
        create_deterministic_delayer,
        create_gaussian_noise_corrupter,
    )

    from fastenv.backends.libero.observables import IrregularSampling, SampleClock

    task, (env, other) = _pair()
    other.close()
    try:
        raw = env.env
        name = "robot0_joint_pos"
        o = raw._observables[name]
        SampleClock([o])  # stock settings: sub-steps compute only the samples an observation reads
        raw.modify_observable(name, "corrupter", create_deterministic_corrupter(0.1))
        clock = SampleClock([o])  # a pure corrupter changes nothing when a sample is skipped
        for setting, value, match in [
            ("corrupter", create_gaussian_noise_corrupter(0.0, 0.1), "corrupter"),
            ("filter", lambda x: x, "filter"),
            ("delayer", create_deterministic_delayer(0.01), "delay"),
        ]:
            raw.modify_observable(name, setting, value)
            with pytest.raises(IrregularSampling, match=match):
                SampleClock([o])
            raw.modify_observable(name, setting, None)
        raw.modify_observable(name, "filter", lambda x: x)  # set after the clock was made
        with pytest.raises(IrregularSampling, match="changed"):
            clock.advance(25, raw.model_timestep)
    finally:
        env.close()


def test_the_rate_sweep_lists_every_axis():
    from fastenv.conformance import libero_rates

    cases = libero_rates.cases(["libero_10/0"])
    axes = {name: {c.option(name) for c in cases} for name in ("control_freq", "obs_rate", "modifier", "chunk")}
    assert axes["control_freq"] == {10, 20, 23, 30, 40}
    assert axes["obs_rate"] == {"stock", "below", "equal", "above", "mixed"}
    assert axes["modifier"] == {"none", "corrupter", "delay", "filter"}
    assert axes["chunk"] == {3, 4, 8}
    assert all(c.option("steps") >= 200 for c in cases)
    assert len(cases) == len(set(cases)) == 5 * (5 + 3) * 3
    with pytest.raises(ValueError, match="unknown obs_rate"):
        libero_rates.apply_setting(None, 20, "fast", "none")


def test_a_sample_of_the_rate_sweep_equals_the_stock_env():
    seed = conformance.sample_seed()
    module, tasks = conformance.select("libero_rates", sample_tasks=1, seed=seed)
    all_cases = module.cases(tasks)
    chosen = conformance.sample(all_cases, 1, f"{seed}:rates")  # one case a commit: each is a 268-step pair of runs
    try:
        outcomes = conformance.run_cases(chosen, module.check, progress=False)
    finally:
        module.close()
    failed = [f"{o.case.id}: {o.difference}" for o in outcomes if not o.passed]
    assert not failed, f"FASTENV_CONFORM_SEED={seed} differs from stock:\n" + "\n".join(failed)
    assert all(o.compared > 0 and o.skipped is None for o in outcomes)
