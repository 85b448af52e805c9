"""The LIBERO backend on the real simulator, compared with LIBERO's own OffScreenRenderEnv."""

import gc

import gymnasium as gym
import numpy as np
import pytest
from conftest import SMALL, StockLibero, stock_reset

import fastenv

pytestmark = pytest.mark.libero


def sim_state(env_or_stock):
    raw = env_or_stock.unwrapped.adapter._raw if hasattr(env_or_stock, "unwrapped") else env_or_stock.env
    return raw.sim.data.qpos.copy(), raw.sim.data.qvel.copy()


def test_substep_leaves_the_same_state_as_stock_steps(stock_env, libero_task, libero_stock_keys_env, actions):
    env = libero_stock_keys_env.unwrapped
    stock_reset(stock_env, libero_task, 5)
    env.reset(options={"init_state_id": 5})
    for k, action in enumerate(actions[:12]):
        stock_env.step(action)
        env.substep(action)
        stock_qpos, stock_qvel = sim_state(stock_env)
        qpos, qvel = sim_state(libero_stock_keys_env)
        assert np.array_equal(qpos, stock_qpos), f"qpos differs after {k + 1} sub-steps"
        assert np.array_equal(qvel, stock_qvel), f"qvel differs after {k + 1} sub-steps"


def test_the_fast_control_loop_is_robosuites_loop_bit_for_bit_over_a_long_rollout(libero_task):
    # 300 env steps (7,500 physics steps) with the gripper opening and closing and the arm
    # pushed into the table: every state and reward equal to robosuite's own loop.
    from fastenv.backends.libero import LiberoAdapter

    fast, stock = (LiberoAdapter(libero_task, keys=["robot0_proprio-state"], camera_size=SMALL) for _ in range(2))
    stock.fast_substep = False
    rng = np.random.default_rng(5)
    actions = rng.uniform(-1, 1, (300, 7)).astype(np.float32)
    actions[:, 2] -= 0.5  # downwards: contacts
    actions[:, -1] = np.sign(np.sin(np.arange(300) / 7.0))  # the gripper toggles
    try:
        for adapter in (fast, stock):
            adapter.reset(seed=None, options={"init_state_id": 8}, rng=rng)
        assert fast._control_loop() is not None and stock._control_loop() is None
        for k, action in enumerate(actions):
            assert_same_step(fast, stock, action, k)
        assert np.array_equal(fast.observe()["robot0_proprio-state"], stock.observe()["robot0_proprio-state"])
        assert fast._control_loop()._checked is True  # physics steps 2..n ran compiled
        assert fast._control_loop()._policy.checked is True  # and the policy step
        assert_same_robot_state(fast._raw, stock._raw)
    finally:
        fast.close()
        stock.close()


def _fast_and_stock(suite="libero_object", task_id=0, seed=0):
    from fastenv.backends.libero import LiberoAdapter, LiberoTask

    task = LiberoTask.load(suite, task_id)
    fast, stock = (LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=SMALL) for _ in range(2))
    stock.fast_substep = False
    for adapter in (fast, stock):
        adapter.reset(seed=seed, options={"init_state_id": 0}, rng=np.random.default_rng(seed))
    return fast, stock


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python-loop"])
def test_a_state_mujoco_resets_is_reset_as_in_robosuites_loop(monkeypatch, tmp_path, compiled):
    # mj_step's checks reset a state holding a value beyond 1e10; fastenv's first physics step,
    # which finishes mj_step after the loop's forward pass, then runs mj_step whole (the compiled
    # policy step calls MuJoCo's C function; the Python loop mujoco.mj_step, watched here).
    import mujoco

    monkeypatch.chdir(tmp_path)  # MuJoCo logs its warning to MUJOCO_LOG.TXT there
    fast, stock = _fast_and_stock()
    fast._control_loop().compiled = compiled
    steps = []
    real_step = mujoco.mj_step
    monkeypatch.setattr(mujoco, "mj_step", lambda m, d: (steps.append(d), real_step(m, d)))
    try:
        for k, action in enumerate(np.random.default_rng(1).uniform(-1, 1, (5, 7))):
            if k == 2:
                for adapter in (fast, stock):
                    adapter._raw.sim.data.qvel[-1] = 1e11
            steps.clear()
            assert fast.substep(action) == stock.substep(action)
            if not compiled:
                assert (fast._raw.sim.data._data in steps) == (k == 2)  # only the bad state took mj_step whole
            for name in ("qpos", "qvel", "qacc_warmstart", "ctrl", "time"):
                assert np.array_equal(getattr(fast._raw.sim.data, name), getattr(stock._raw.sim.data, name)), f"{name} after {k + 1}"
        assert fast._raw.sim.data.time == stock._raw.sim.data.time < 0.2  # MuJoCo did reset the state (5 steps: 0.25 s)
    finally:
        fast.close()
        stock.close()


def test_where_mujocos_split_step_is_not_its_step_robosuites_loop_runs():
    # The RK4 integrator or a control callback: mj_step1 + mj_step2 is not mj_step
    import mujoco

    fast, stock = _fast_and_stock()
    try:
        assert fast._control_loop() is not None
        mujoco.set_mjcb_control(lambda m, d: None)
        try:
            assert fast._control_loop() is None
        finally:
            mujoco.set_mjcb_control(None)
        for adapter in (fast, stock):
            adapter._raw.sim.model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
        assert fast._control_loop() is None
        for action in np.random.default_rng(2).uniform(-1, 1, (3, 7)):
            assert fast.substep(action) == stock.substep(action)
            assert np.array_equal(fast._raw.sim.data.qpos, stock._raw.sim.data.qpos)
    finally:
        fast.close()
        stock.close()


def assert_same_robot_state(a, b):
    # What robosuite's loop leaves on the controller, the robot and the gripper after a step.
    ca, cb = a.robots[0].controller, b.robots[0].controller
    for name in ("ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel", "joint_pos", "joint_vel", "J_pos", "J_ori", "J_full", "mass_matrix", "torques"):
        x, y = np.asarray(getattr(ca, name)), np.asarray(getattr(cb, name))
        assert x.shape == y.shape and x.tobytes(order="A") == y.tobytes(order="A") and x.flags.f_contiguous == y.flags.f_contiguous, name
    assert ca.new_update == cb.new_update
    assert np.array_equal(a.robots[0].torques, b.robots[0].torques)
    assert np.array_equal(a.robots[0].gripper.current_action, b.robots[0].gripper.current_action)
    assert_same_buffers(a.robots[0], b.robots[0])


def assert_same_buffers(a, b):
    # The robot's buffers of recent values (robosuite pushes them at each policy step).
    for name in ("recent_qpos", "recent_actions", "recent_torques", "recent_ee_forcetorques", "recent_ee_pose", "recent_ee_vel", "recent_ee_acc"):
        for part in ("last", "current"):
            x, y = np.asarray(getattr(getattr(a, name), part)), np.asarray(getattr(getattr(b, name), part))
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f"{name}.{part}"
    ra, rb = a.recent_ee_vel_buffer, b.recent_ee_vel_buffer
    assert (ra.ptr, ra._size) == (rb.ptr, rb._size) and ra.buf.tobytes() == rb.buf.tobytes()


# what an env step leaves in MjData: the state, the controls, the constraint solution, the sensors
# and what the force and torque sensors compute (the compiled loop runs only the last physics
# step of an env step with MuJoCo's sensor stages)
STEP_FIELDS = ("qpos", "qvel", "act", "qacc", "qacc_warmstart", "ctrl", "qfrc_constraint", "efc_force", "xpos", "sensordata", "cacc",
               "cfrc_int", "cfrc_ext")


def assert_same_step(a, b, action, k):
    """Step both adapters with ``action``: the same reward and flags, and the same STEP_FIELDS after."""
    assert a.substep(action) == b.substep(action), f"reward/flags differ at step {k}"
    for name in STEP_FIELDS:
        assert np.array_equal(getattr(a._raw.sim.data, name), getattr(b._raw.sim.data, name)), f"{name} differs after {k + 1} steps"


def _rollout_pair(suite, task_id, steps, seed=3):
    from fastenv.backends.libero import LiberoAdapter, LiberoTask

    task = LiberoTask.load(suite, task_id)
    compiled, python = (LiberoAdapter(task, keys=["robot0_proprio-state"], camera_size=SMALL) for _ in range(2))
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps, 7)).astype(np.float32)
    actions[:, 2] -= 0.5  # down into the table and the objects: contacts
    actions[:, -1] = np.sign(np.sin(np.arange(steps) / 5.0))
    for adapter in (compiled, python):
        adapter.reset(seed=seed, options={"init_state_id": 2}, rng=np.random.default_rng(seed))
    python._control_loop().compiled = False
    return compiled, python, actions


@pytest.mark.ci_sample("the compiled physics steps against the Python loop, one task a suite", keep=2)
@pytest.mark.parametrize("suite,task_id", [("libero_spatial", 3), ("libero_object", 5), ("libero_goal", 7), ("libero_90", 35)])
def test_the_compiled_physics_steps_are_the_python_loops_on_every_suite(suite, task_id):
    # fastenv's physics steps after an env step's first run in one numba function (MuJoCo's and
    # numpy's BLAS functions called directly, robosuite's own numba controller functions): every
    # state, reward and what the controller is left with equal the Python loop's (itself
    # robosuite's bit for bit, see the long rollout above), and the compiled path did run.
    compiled, python, actions = _rollout_pair(suite, task_id, 40)
    names = ("ee_pos", "ee_ori_mat", "ee_pos_vel", "ee_ori_vel", "joint_pos", "joint_vel", "J_pos", "J_ori", "J_full", "mass_matrix", "torques")
    try:
        for k, action in enumerate(actions):
            assert_same_step(compiled, python, action, k)
            if k % 7 == 3:  # the robot's buffers, the force and torque buffer's computed from its recorded states
                assert_same_buffers(compiled._raw.robots[0], python._raw.robots[0])
            if k == 10:  # arrays a caller kept: later steps give the controller new ones, as robosuite does
                kept = {name: getattr(compiled._raw.robots[0].controller, name) for name in names}
                values = {name: np.array(value) for name, value in kept.items()}
        assert compiled._control_loop()._checked is True and python._control_loop()._checked is None
        assert compiled._control_loop()._policy.checked is True  # the compiled policy step ran
        assert type(compiled._raw.robots[0].recent_ee_forcetorques).__name__ == "LazyForceTorques"  # and the whole step compiled
        for name in names:
            assert np.array_equal(kept[name], values[name]), f"{name} kept from step 11 changed"
            assert getattr(compiled._raw.robots[0].controller, name) is not kept[name], name
        assert_same_robot_state(compiled._raw, python._raw)
        assert np.array_equal(compiled.observe()["robot0_proprio-state"], python.observe()["robot0_proprio-state"])
    finally:
        compiled.close()
        python.close()


def test_a_compiled_loop_that_disagrees_falls_back_to_the_python_loop(monkeypatch):
    # Before an env runs compiled, its controller is evaluated both ways at the live state; a
    # difference in the last bit (another numpy, BLAS or robosuite build) and the env keeps the
    # Python loop, with a warning, and its steps stay the Python loop's.
    from fastenv.backends.libero import compiled as compiled_module

    real = compiled_module.Kernel.control
    monkeypatch.setattr(compiled_module.Kernel, "control", lambda self, *args: np.nextafter(real(self, *args), np.inf))
    compiled, python, actions = _rollout_pair("libero_10", 0, 6)
    try:
        with pytest.warns(RuntimeWarning, match="compiled control loop's torques differ"):
            compiled.substep(actions[0])
        python.substep(actions[0])
        loop = compiled._control_loop()
        assert loop._checked is False and loop.compiled is False
        for action in actions[1:]:
            assert compiled.substep(action) == python.substep(action)
        assert np.array_equal(compiled._raw.sim.data.qpos, python._raw.sim.data.qpos)
    finally:
        compiled.close()
        python.close()


def test_the_first_step_after_a_reset_runs_compiled_on_what_the_controller_holds(monkeypatch):
    # After a reset robosuite's controller keeps what it read before the init state was set (its
    # update() is a no-op at the first policy step); the compiled env step computes with those
    # attributes, as robosuite does: the steps after an in-place reset equal robosuite's loop.
    from fastenv.backends.libero import compiled as compiled_module

    given = []
    real = compiled_module.Kernel.env_step
    monkeypatch.setattr(compiled_module.Kernel, "env_step", lambda self, *args: (given.append(args[-1] is not None), real(self, *args))[1])
    fast, stock = _fast_and_stock("libero_goal", 7)
    actions = np.random.default_rng(4).uniform(-1, 1, (16, 7)).astype(np.float32)
    try:
        for k, action in enumerate(actions):
            if k in (6, 11):
                for adapter in (fast, stock):
                    adapter.reset(seed=k, options={"init_state_id": k % 10}, rng=np.random.default_rng(k))
            assert fast.substep(action) == stock.substep(action), f"reward/flags differ at step {k}"
            for name in ("qpos", "qvel", "qacc_warmstart", "ctrl"):
                assert np.array_equal(getattr(fast._raw.sim.data, name), getattr(stock._raw.sim.data, name)), f"{name} after {k + 1}"
            assert_same_robot_state(fast._raw, stock._raw)
        assert given.count(True) == 2  # the first step after each reset, compiled
    finally:
        fast.close()
        stock.close()


def test_the_force_and_torque_buffer_computes_robosuites_values_when_read():
    # A compiled env step records the state its policy step starts from; the robot's buffer of
    # end-effector force and torque computes the sensors there when read. It is robosuite's
    # DeltaBuffer in every way a caller sees: values, delta, average, push, clear.
    compiled, python, actions = _rollout_pair("libero_goal", 7, 12)
    try:
        for action in actions:
            assert compiled.substep(action) == python.substep(action)
        lazy, plain = compiled._raw.robots[0].recent_ee_forcetorques, python._raw.robots[0].recent_ee_forcetorques
        assert type(lazy).__name__ == "LazyForceTorques" and isinstance(lazy, type(plain)) and lazy.dim == plain.dim
        assert np.any(plain.current != 0)  # contacts: forces to compare

        def same():
            for name in ("current", "last", "delta", "average"):
                x, y = np.asarray(getattr(lazy, name)), np.asarray(getattr(plain, name))
                assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name

        same()
        for buffer in (lazy, plain):
            buffer.push(np.arange(6.0))
        same()
        for buffer in (lazy, plain):
            buffer.clear()
        same()
        for action in actions[:3]:  # pushes after a clear: recorded states again
            assert compiled.substep(action) == python.substep(action)
        same()
    finally:
        compiled.close()
        python.close()


def test_a_compiled_policy_step_that_disagrees_falls_back_to_robosuites(monkeypatch):
    # The compiled policy step is compared once per env with robosuite's robot.control from the
    # same state; a difference in the last bit of a buffer and the env keeps robosuite's, with a
    # warning, its steps still robosuite's.
    from fastenv.backends.libero import compiled as compiled_module

    real = compiled_module.Kernel.policy_step

    def off_by_one_bit(self, *args):
        real(self, *args)
        out = args[-2]  # policy_step's ``out``: the last value is the acceleration estimate's
        out[-1] = np.nextafter(out[-1], np.inf)

    monkeypatch.setattr(compiled_module.Kernel, "policy_step", off_by_one_bit)
    compiled, python, actions = _rollout_pair("libero_10", 0, 6)
    try:
        with pytest.warns(RuntimeWarning, match="compiled policy step differs"):
            for action in actions[:2]:  # after a reset the controller holds what it read before: robosuite's step first
                assert compiled.substep(action) == python.substep(action)
        policy = compiled._control_loop()._policy
        assert policy.checked is False and not policy.applies()
        for action in actions[2:]:
            assert compiled.substep(action) == python.substep(action)
        assert compiled._control_loop()._checked is True  # the physics steps still run compiled
        assert_same_robot_state(compiled._raw, python._raw)
    finally:
        compiled.close()
        python.close()


@pytest.mark.parametrize("suite,task_id", [("libero_spatial", 3), ("libero_goal", 7)])
def test_contact_checks_by_geom_id_answer_as_robosuite(suite, task_id):
    # The success check's contact tests (by geom id) give robosuite's answers for every pair of
    # the scene's objects, the robot, and one object against anything, at states with contacts.
    from fastenv.backends.libero.contacts import ContactCheck

    adapter, other, actions = _rollout_pair(suite, task_id, 30)
    other.close()
    raw = adapter._raw
    try:
        assert isinstance(raw.check_contact, ContactCheck)
        models = [*raw.objects_dict.values(), *raw.fixtures_dict.values(), raw.robots[0].robot_model, raw.robots[0].gripper]
        checked = touching = 0
        for k, action in enumerate(actions):
            adapter.substep(action)
            if k % 3:
                continue
            for i, first in enumerate(models):
                for second in [None, *models[i + 1:]]:
                    ours = raw.check_contact(first, second)
                    assert ours == type(raw).check_contact(raw, first, second), (k, first.name, getattr(second, "name", None))
                    checked += 1
                    touching += ours
        assert checked > 100 and touching > 0
    finally:
        adapter.close()


def test_chunk_one_reproduces_the_stock_env(stock_env, libero_task, libero_stock_keys_env, actions):
    env = libero_stock_keys_env
    ref = stock_reset(stock_env, libero_task, 2)
    obs, info = env.reset(options={"init_state_id": 2})
    assert set(obs) == set(ref)
    for key in ref:
        assert np.array_equal(obs[key], ref[key]), key
    for action in actions[:10]:
        ref, ref_reward, ref_done, _ = stock_env.step(action)
        obs, reward, terminated, truncated, info = env.step(action[None])
        for key in ref:
            assert np.array_equal(obs[key], ref[key]), key
        assert reward == ref_reward and terminated == ref_done and truncated is False
    assert info["language_instruction"] == libero_task.language


def test_chunk_observation_equals_stock_after_the_same_steps(stock_env, libero_task, libero_slim_env, actions):
    env = libero_slim_env
    stock_reset(stock_env, libero_task, 1)
    env.reset(options={"init_state_id": 1})
    for c in range(3):
        chunk = actions[8 * c : 8 * (c + 1)]
        stock_rewards = []
        for action in chunk:
            ref, r, _, _ = stock_env.step(action)
            stock_rewards.append(r)
        obs, reward, terminated, truncated, info = env.step(chunk)
        assert np.array_equal(obs["agentview_image"], ref["agentview_image"])
        assert np.array_equal(obs["robot0_proprio-state"], ref["robot0_proprio-state"])
        assert info["chunk_steps"] == 8
        np.testing.assert_array_equal(info["chunk_rewards"], stock_rewards)
        assert reward == sum(stock_rewards) and not terminated and not truncated


def test_max_episode_steps_truncates_inside_a_chunk_with_the_stock_final_observation(stock_env, libero_task, actions):
    from fastenv.envs.libero import make_env

    env = make_env("libero_10", 0, chunk=8, camera_size=SMALL, max_episode_steps=5, init_state_id=4)
    try:
        ref = stock_reset(stock_env, libero_task, 4)
        env.reset()
        for action in actions[:5]:
            ref, *_ = stock_env.step(action)
        obs, reward, terminated, truncated, info = env.step(actions[:8])
        assert truncated and not terminated and info["chunk_steps"] == 5
        assert np.array_equal(obs["agentview_image"], ref["agentview_image"])
        assert np.array_equal(obs["robot0_proprio-state"], ref["robot0_proprio-state"])
        qpos, _ = sim_state(env)
        assert np.array_equal(qpos, stock_env.env.sim.data.qpos)  # the last 3 actions never ran
    finally:
        env.close()


def test_success_terminates_inside_the_chunk(monkeypatch, libero_slim_env, actions):
    env = libero_slim_env
    env.reset(seed=0)
    raw = env.unwrapped.adapter._raw
    start = raw.timestep

    def success_on_third_step():
        return raw.timestep >= start + 3

    # Successes are rare with random actions; the wiring from LIBERO's success check to
    # termination is what is tested here, on the real simulator.
    monkeypatch.setattr(raw, "_check_success", success_on_third_step)
    obs, reward, terminated, truncated, info = env.step(actions[:8])
    assert terminated and not truncated
    assert info["chunk_steps"] == 3 and info["success"] is True
    assert env.observation_space.contains(obs)


def test_make_returns_the_slim_headless_chunked_env():
    env = gym.make(
        "fastenv/Libero-v0",
        suite="libero_10",
        task_id=0,
        chunk=8,
        modalities=["agentview_image", "robot0_proprio-state"],
        camera_size=SMALL,
    )
    try:
        assert env.action_space.shape == (8, 7)
        assert set(env.observation_space.keys()) == {"agentview_image", "robot0_proprio-state"}
        assert env.observation_space["agentview_image"].shape == (SMALL, SMALL, 3)
        assert env.render_mode is None
        obs, info = env.reset(seed=0)
        assert 0 <= info["init_state_id"] < 50
        assert env.observation_space.contains(obs)
        assert env.unwrapped.max_episode_steps == 520
    finally:
        env.close()


def test_passes_gymnasium_check_env():
    from gymnasium.utils.env_checker import check_env

    env = gym.make("fastenv/Libero-v0", camera_size=32, chunk=4)
    try:
        check_env(env.unwrapped)
        check_env(env)
    finally:
        env.close()


def test_seeded_resets_choose_the_same_init_state(libero_slim_env):
    ids = [libero_slim_env.reset(seed=s)[1]["init_state_id"] for s in (11, 12, 11)]
    assert ids[0] == ids[2]
    obs_a, _ = libero_slim_env.reset(seed=11)
    obs_b, _ = libero_slim_env.reset(seed=11)
    assert np.array_equal(obs_a["agentview_image"], obs_b["agentview_image"])


def dirty_episode(env, steps=30):
    """An episode that moves the arm and drives the gripper to its limits (state a reset must clear)."""
    rng = np.random.default_rng(3)
    env.reset(options={"init_state_id": 11})
    for k in range(steps):
        action = rng.uniform(-1, 1, (1, 7)).astype(np.float32)
        action[0, -1] = 1.0 if k < steps // 2 else -1.0
        env.step(np.repeat(action, env.action_space.shape[0], axis=0))  # one chunk


def test_the_default_reset_is_in_place_and_bit_for_bit_a_fresh_stock_reset(stock_env, libero_task, libero_stock_keys_env, actions):
    # The stock env resets hard (the model is rebuilt: a fresh env); fastenv resets in place.
    env = libero_stock_keys_env
    raw = env.unwrapped.adapter._raw
    model = raw.sim.model
    dirty_episode(env)
    assert np.any(raw.robots[0].gripper.current_action != 0)  # the state robosuite's soft reset keeps
    obs, _ = env.reset(options={"init_state_id": 3})
    assert raw.sim.model is model  # not rebuilt
    ref = stock_reset(stock_env, libero_task, 3)
    for key in ref:
        assert np.array_equal(obs[key], ref[key]), key
    for k, action in enumerate(actions[:20]):
        ref, ref_reward, ref_done, _ = stock_env.step(action)
        obs, reward, terminated, _, _ = env.step(action[None])
        for key in ref:
            assert np.array_equal(obs[key], ref[key]), f"{key} after {k + 1} steps"
        assert reward == ref_reward and terminated == ref_done


def test_closing_one_env_leaves_the_others_images_intact(libero_slim_env):
    # robosuite frees a render context in whichever GL context is current; several envs share a
    # worker process, and a closed (or rebuilt) neighbour must not blank the others' cameras.
    from fastenv.envs.libero import make_env

    ref, _ = libero_slim_env.reset(options={"init_state_id": 6})
    other = make_env("libero_10", 1, chunk=None, camera_size=SMALL)
    other.reset(options={"init_state_id": 0})
    other.close()
    obs, _ = libero_slim_env.reset(options={"init_state_id": 6})
    assert np.array_equal(obs["agentview_image"], ref["agentview_image"])
    assert np.array_equal(libero_slim_env.unwrapped.observe()["agentview_image"], ref["agentview_image"])


@pytest.mark.parametrize("suite, task_id", [("libero_10", 0), ("libero_spatial", 3)])
def test_chunks_after_an_in_place_reset_equal_a_fresh_stock_env(suite, task_id, actions):
    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.task import import_libero
    from fastenv.envs.libero import make_env

    task = LiberoTask.load(suite, task_id)
    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    env = make_env(suite, task_id, chunk=8, camera_size=SMALL, modalities=["agentview_image", "agentview_depth", "robot0_proprio-state"])
    stock = StockLibero(OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_heights=SMALL, camera_widths=SMALL, camera_depths=True))
    try:
        dirty_episode(env, steps=4)
        # Fixtures without joints (libero_spatial's cabinet and stove) are placed at random at
        # every reset from numpy's global generator, which a seed seeds, in both envs.
        env.reset(seed=21, options={"init_state_id": 5})
        stock.seed(21)
        stock.reset()
        stock.set_init_state(task.init_states[5])
        for c in range(3):
            for action in actions[8 * c : 8 * (c + 1)]:
                ref, *_ = stock.step(action)
            obs, *_ = env.step(actions[8 * c : 8 * (c + 1)])
            for key in ("agentview_image", "agentview_depth", "robot0_proprio-state"):
                assert np.array_equal(obs[key], ref[key]), f"{key} after chunk {c}"
    finally:
        env.close()
        stock.close()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"suite": "libero_11"}, ValueError, r"unknown LIBERO suite 'libero_11'; did you mean 'libero_10'\? available suites: \[.*'libero_10'"),
        ({"suite": "libero10"}, ValueError, r"unknown LIBERO suite 'libero10'; did you mean 'libero_10'\?"),
        ({"suite": "LIBERO_GOAL"}, ValueError, r"did you mean 'libero_goal'\?"),
        ({"task_id": 10}, ValueError, r"task_id must be in \[0, 10\) for suite 'libero_10', got 10"),
        ({"task_id": -1}, ValueError, r"task_id must be in \[0, 10\)"),
        ({"chunk": 0}, ValueError, "chunk must be an integer >= 1, got 0"),
        ({"init_state_id": 50}, ValueError, r"init_state_id must be in \[0, 50\), got 50"),
        ({"camera_size": 0}, ValueError, "camera_size must be an integer >= 1"),
        ({"render_mode": "human"}, ValueError, "render_mode must be None or 'rgb_array'"),
    ],
)
def test_bad_construction_arguments(kwargs, error, match):
    from fastenv.envs.libero import make_env

    with pytest.raises(error, match=match):
        make_env(**kwargs)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.zeros((8, 6)), r"shape \(8, 7\), got shape \(8, 6\)"),
        (np.zeros(7), r"shape \(8, 7\), got shape \(7,\)"),
        (np.where(np.eye(8, 7) > 0, np.nan, 0.0), "must be finite"),
        (np.zeros((8, 7), dtype=object), "real-valued array"),
    ],
)
def test_bad_actions_leave_the_env_usable(libero_slim_env, bad, match):
    env = libero_slim_env
    env.reset(options={"init_state_id": 0})
    qpos_before, _ = sim_state(env)
    with pytest.raises(ValueError, match=match):
        env.step(bad)
    qpos_after, _ = sim_state(env)
    assert np.array_equal(qpos_before, qpos_after)  # nothing was executed
    obs, *_ = env.step(np.zeros((8, 7), np.float32))
    assert env.observation_space.contains(obs)


def test_unknown_reset_option(libero_slim_env):
    with pytest.raises(ValueError, match=r"unknown reset option\(s\) \['reset_mask'\]; allowed: \['init_state_id', 'init_state'\]"):
        libero_slim_env.reset(options={"reset_mask": True})
    obs, _ = libero_slim_env.reset(options={"init_state_id": 3})
    assert libero_slim_env.observation_space.contains(obs)


def test_wrap_an_existing_libero_env(stock_env, libero_task, actions):
    from fastenv.backends.libero import LiberoAdapter

    env = fastenv.wrap(stock_env._env, chunk=4, modalities=["agentview_image"])  # LIBERO's own env
    assert isinstance(env.unwrapped.adapter, LiberoAdapter)
    assert env.unwrapped.adapter.hard_reset == stock_env.env.hard_reset  # resets as it was built to
    stock_env.reset()
    stock_env.set_init_state(libero_task.init_states[0])
    obs, *_ = env.step(actions[:4])
    assert obs["agentview_image"].shape == (SMALL, SMALL, 3)
    assert env.unwrapped.max_episode_steps == stock_env.env.horizon
    raw = stock_env.env
    assert not raw._observables["robot0_eye_in_hand_image"].is_enabled()  # pruned at the source
    with pytest.raises(ValueError, match="built with cameras"):
        env.unwrapped.select_modalities(["frontview_image"])
    # Closing the fastenv stack gives the user's env back as it came, every observable as it was.
    env.close()
    assert raw._observables["robot0_eye_in_hand_image"].is_enabled()
    assert raw.hard_reset  # its own setting back
    ref = stock_reset(stock_env, libero_task, 0)
    assert {"agentview_image", "robot0_eye_in_hand_image", "robot0_proprio-state"} <= set(ref)


def test_a_wrapped_envs_seeded_reset_is_a_fresh_envs_first_and_init_states_make_the_users_agree():
    # What docs/backends/libero.md says of a wrapped env's seeded reset, on a task whose scene
    # appends object-property samplers at every model load (libero_spatial 4).
    from fastenv.backends.libero import LiberoTask
    from fastenv.backends.libero.task import import_libero

    import_libero()
    from libero.libero.envs import OffScreenRenderEnv

    task = LiberoTask.load("libero_spatial", 4)

    def build():
        return OffScreenRenderEnv(bddl_file_name=task.bddl_file, camera_names=[], use_camera_obs=False)

    fresh, own, user = build(), build(), build()
    env = fastenv.wrap(user)
    try:
        fresh.seed(7)
        first = fresh.reset()  # a fresh env's first seeded reset
        own.reset()
        own.seed(7)
        again = own.reset()  # the same env's own second reset draws more numbers first
        key = "object-state"
        for _ in range(2):
            obs, _ = env.reset(seed=7)
            assert np.array_equal(obs[key], first[key])
        assert not np.array_equal(again[key], first[key])
        state = task.init_states[0]
        assert np.array_equal(user.set_init_state(state)[key], own.set_init_state(state)[key])
    finally:
        env.close()
        for e in (fresh, own, user):
            e.close()


def _context(env):
    return env.unwrapped.adapter._raw.sim._render_context_offscreen


def test_envs_of_the_same_task_render_through_one_context_with_the_stock_pixels(stock_env, libero_task, actions):
    # Two fastenv envs of one task in one process (a worker's envs): they render through one GL and
    # MuJoCo context (no textures uploaded again). Stepped in turn from different
    # init states, each one's images are the stock env's (its own render context) after the same
    # steps; a third task's env has its own context; dropping a stock env or closing the first
    # leaves the second's intact.
    from fastenv.backends.libero.render_sharing import shared_context_type
    from fastenv.envs.libero import make_env

    SharedRenderContext = shared_context_type()
    first = make_env("libero_10", 0, chunk=None, camera_size=SMALL)
    second = make_env("libero_10", 0, chunk=None, camera_size=SMALL)
    other = make_env("libero_spatial", 3, chunk=None, camera_size=SMALL)
    try:
        # the first env of these assets in this process owns the context (an earlier test's may)
        assert isinstance(_context(second), SharedRenderContext)
        assert _context(second).con is _context(first).con and _context(second).gl_ctx is _context(first).gl_ctx
        assert _context(other).con is not _context(first).con
        other.reset(seed=0)
        images = {}
        for env, init in ((first, 1), (second, 4)):
            obs, _ = env.reset(options={"init_state_id": init})
            images[init] = [obs["agentview_image"]]
        for action in actions[:6]:
            for env, init in ((first, 1), (second, 4)):
                images[init].append(env.step(action)[0]["agentview_image"])
                other.step(action)
        for init in (1, 4):
            ref = stock_reset(stock_env, libero_task, init)
            assert np.array_equal(images[init][0], ref["agentview_image"]), init
            for t, action in enumerate(actions[:6]):
                ref = stock_env.step(action)[0]
                assert np.array_equal(images[init][t + 1], ref["agentview_image"]), (init, t)
        # robosuite frees a render context in whatever GL context is current: a stock env dropped
        # while the shared one is current must not take the shared textures with it
        from libero.libero.envs import OffScreenRenderEnv

        dropped = OffScreenRenderEnv(bddl_file_name=libero_task.bddl_file, camera_heights=SMALL, camera_widths=SMALL)
        dropped.reset()
        second.step(actions[0])  # the shared context is the current one
        del dropped
        gc.collect()
        first.close()
        first = None
        obs, _ = second.reset(options={"init_state_id": 1})
        assert np.array_equal(obs["agentview_image"], images[1][0])
        assert np.array_equal(second.step(actions[0])[0]["agentview_image"], images[1][1])
    finally:
        for env in (first, second, other):
            if env is not None:
                env.close()


def test_sharing_render_contexts_can_be_turned_off(monkeypatch):
    from fastenv.backends.libero.render_sharing import shared_context_type
    from fastenv.envs.libero import make_env

    SharedRenderContext = shared_context_type()
    monkeypatch.setenv("FASTENV_SHARE_RENDER", "0")
    envs = [make_env("libero_10", 0, chunk=None, camera_size=SMALL) for _ in range(2)]
    try:
        assert not any(isinstance(_context(env), SharedRenderContext) for env in envs)
        assert _context(envs[0]).con is not _context(envs[1]).con
    finally:
        for env in envs:
            env.close()


def test_the_memory_benchmark_sees_the_shared_render_context(tmp_path):
    # bench_memory.py, two envs per process: an env sharing the first's render context adds far less
    # resident memory than one with its own (0.30 against 0.95 GB on the 2-core machine).
    import sys
    from pathlib import Path

    from fastenv.machine import release_free_memory

    release_free_memory()  # harmless anywhere; gives glibc's free pages back here
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_memory

    configs = ["fastenv, camera", "fastenv, camera, own render context"]
    payload = bench_memory.main(["--envs", "1", "2", "--configs", *configs, "--camera-size", str(SMALL), "--out", str(tmp_path / "m.json")])
    extra = {row["config"]: row["extra_per_env_gb"] for row in payload["rows"] if row["envs"] == 2}
    assert set(extra) == set(configs)
    assert extra["fastenv, camera"] < 0.6 * extra["fastenv, camera, own render context"]


def test_the_long_run_memory_benchmark_reads_memory_over_every_reset(tmp_path):
    # bench_memory_flat.py, a few episodes: a reading every 2 resets and after the last, the steps
    # each episode ran, and a growth figure fitted to them.
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_memory_flat

    out = tmp_path / "flat.json"
    args = ["--configs", "fastenv", "fastenv, hard reset", "--resets", "5", "--hard-resets", "3", "--every", "2",
            "--steps-per-episode", "3", "--camera-size", str(SMALL), "--out", str(out)]
    payload = bench_memory_flat.main(args)
    runs = payload["results"]
    assert runs["fastenv"]["resets"] == [0, 2, 4, 5] and runs["fastenv"]["steps"] == [0, 6, 12, 15]
    assert runs["fastenv, hard reset"]["resets"] == [0, 2, 3]
    for run in runs.values():
        assert all(v > 100 * 2**20 for v in run["rss"]) and np.isfinite(run["growth_mb_per_1000_resets"])
    assert json.loads(out.read_text())["results"].keys() == runs.keys() and out.with_suffix(".png").exists()


def test_the_substep_benchmark_runs_every_configuration_and_the_compiled_loop(tmp_path):
    # bench_substep.py on one task, one short round: every configuration measured, ratios taken
    # against the raw mj_step calls, and fastenv's row did run the compiled loop.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_substep

    payload = bench_substep.main(["--tasks", "libero_object:0", "--rounds", "1", "--steps", "2", "--out", str(tmp_path / "s.json")])
    rows = {row["config"]: row for row in payload["rows"]}
    assert list(rows) == list(bench_substep.CONFIGS)
    assert rows["raw mj_step"]["x_raw_mj_step"] == 1.0 and all(row["ms_per_substep"] > 0 for row in rows.values())
    assert payload["tasks"]["libero_object:0"] == {"compiled_used": True, "policy_step_used": True, "physics_steps_per_substep": 25}


def test_the_substep_benchmark_sweeps_every_task_and_names_the_worst(tmp_path):
    # --tasks suite:all / all expand to every task; a sweep of several tasks of a suite adds the
    # median and worst task per suite and configuration; a bad spec is refused before any env is built.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import bench_substep

    assert bench_substep.parse_tasks(["libero_goal:all"]) == [("libero_goal", i) for i in range(10)]
    assert len(bench_substep.parse_tasks(["all"])) == 130
    with pytest.raises(ValueError, match="suite:task_id"):
        bench_substep.parse_tasks(["libero_goal"])
    payload = bench_substep.main(["--tasks", "libero_goal:8", "libero_goal:9", "--configs", "fastenv", "--rounds", "1", "--steps", "2",
                                  "--out", str(tmp_path / "s.json")])
    assert {row["config"] for row in payload["rows"]} == {"fastenv", "raw mj_step"}
    summary = {row["config"]: row for row in payload["summary"]}
    fastenv = [row["x_raw_mj_step"] for row in payload["rows"] if row["config"] == "fastenv"]
    assert summary["fastenv"]["tasks"] == 2 and summary["fastenv"]["max_x_raw"] == max(fastenv)
    assert summary["fastenv"]["worst_task"] in (8, 9) and all(v["compiled_used"] for v in payload["tasks"].values())


@pytest.mark.parametrize("sample_last", [False, True], ids=["sampled-24th", "sampled-last"])
def test_physics_steps_before_the_last_skip_the_sensor_stages_and_the_last_leaves_stocks(monkeypatch, sample_last):
    # Inside an env step nothing reads MuJoCo's sensors, so the compiled loop runs its physics
    # steps but the last with mjDSBL_SENSOR set, then the last one with the sensors: everything
    # the step leaves (sensors, cacc, cfrc_*) is robosuite's loop's, the model's flags are given
    # back, and an observation sampled at either point (the 24th physics step, LIBERO's; the last)
    # is robosuite's.
    import mujoco

    from fastenv.backends.libero.compiled import kernel as compiled_kernel

    fast, stock = _fast_and_stock("libero_goal", 8)  # a task that tracks object states (a stove)
    kernel = compiled_kernel()
    model = fast._raw.sim.model._model
    during, calls, whole = [], [], []
    env_step, physics_steps, step = kernel.env_step, kernel.physics_steps, kernel.step

    def one_call(*a):
        # (count, capture_at, ..., flags, sensors_off, flags_at): the flags the call sets from its
        # first physics step until the last, and the model's flags when it returns
        flags, sensors_off, flags_at = a[-3:]
        out = step(*a)
        whole.append((a[-13], flags_at, sensors_off, flags.size and int(flags.__array_interface__["data"][0]), model.opt.disableflags))
        return out

    monkeypatch.setattr(kernel, "env_step", lambda *a: (during.append(model.opt.disableflags), env_step(*a))[1])
    monkeypatch.setattr(kernel, "physics_steps", lambda *a: (calls.append((a[0], model.opt.disableflags)), physics_steps(*a))[1])
    monkeypatch.setattr(kernel, "step", one_call)
    if sample_last:  # both sample at the last physics step (the state recorded there, in either loop)
        for adapter in (fast, stock):
            assert adapter._clock is not None
            monkeypatch.setattr(adapter._clock, "advance", lambda n, dt: n)
    rng = np.random.default_rng(2)
    actions = rng.uniform(-1, 1, (30, 7)).astype(np.float32)
    actions[:, -1] = np.sign(np.sin(np.arange(30) / 4.0))
    try:
        for k, action in enumerate(actions):
            assert_same_step(fast, stock, action, k)
            if k % 10 == 9:
                assert_same_buffers(fast._raw.robots[0], stock._raw.robots[0])
                a, b = fast.observe(), stock.observe()
                assert a.keys() == b.keys() and all(np.array_equal(a[key], b[key]) for key in a)
        sensors_off = int(mujoco.mjtDisableBit.mjDSBL_SENSOR)
        assert during and all(flags & sensors_off for flags in during)  # steps 1..n-1 ran without them
        last = [flags for count, flags in calls if count == 1]  # (the first steps, before the checks, run 2..n in one call)
        assert len(last) == len(during) and not any(flags & sensors_off for flags in last)  # the last with them
        # an env step in one call (robosuite's set_goal compiled too): the model's own flags, set
        # without the sensors from its first physics step until its last (flags_at), then given back
        flags_field = fast._control_loop()._flags()
        assert len(whole) > 20 and flags_field is not None and int(flags_field.__array_interface__["data"][0]) - model._address > 0
        assert all(at == count - 1 and off == sensors_off and address == flags_field.__array_interface__["data"][0]
                   for count, at, off, address, _ in whole)
        assert not any(after & sensors_off for *_, after in whole)
        assert not model.opt.disableflags & sensors_off
    finally:
        fast.close()
        stock.close()
