"""CleanRL's own ppo_continuous_action.py, with only its env construction statement changed, and
the script's rollout loop gathering on fastenv what it gathers on LIBERO's own env.

CleanRL's script is not redistributed with fastenv: point ``CLEANRL_PPO_SCRIPT`` at a copy of
https://github.com/vwxyzjn/cleanrl/blob/master/cleanrl/ppo_continuous_action.py to run the test that
runs it. The same-data test needs no script: it writes out the script's env construction over
LIBERO's own env (``tests/stock_libero.py``) in Gymnasium's ``AsyncVectorEnv`` and the script's
rollout loop, at chunk 1 and chunk 8 (the reference chunk loop), with a negative control.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from stock_libero import same_data_on_stock_libero
from helpers import need, skip_unless_script_imports

SCRIPT = os.environ.get("CLEANRL_PPO_SCRIPT")
ENV_STATEMENT = re.compile(r"^(?P<indent>[ \t]*)envs = gym\.vector\.SyncVectorEnv\(\n.*?^(?P=indent)\)\n", re.M | re.S)
ROOT = Path(__file__).resolve().parent.parent


def readme_lines() -> list[str]:
    """The lines the README says to paste into CleanRL's script, as typed there."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"tests/test_cleanrl\.py pastes them -->\n```python\n(?P<body>.*?)```", text, re.S)
    assert block is not None, "the README's CleanRL lines were not found"
    return block.group("body").strip().splitlines()


# The README's lines, plus short episodes so some end within the tiny budget.
REPLACEMENT = "".join("{indent}" + line + "\n" for line in readme_lines()).replace("gamma=args.gamma)", "gamma=args.gamma, max_episode_steps=32)")


def patched(source: str) -> str:
    """The script with its one env construction statement replaced by a fastenv one."""
    new, count = ENV_STATEMENT.subn(lambda m: REPLACEMENT.format(indent=m.group("indent")), source)
    if count != 1:
        raise AssertionError(f"expected one `envs = gym.vector.SyncVectorEnv(...)` statement, found {count}")
    return new


def test_the_readme_lines_import_what_they_use():
    lines = readme_lines()
    assert lines[0] == "import fastenv.integrations.cleanrl"
    assert lines[1].startswith("envs = fastenv.integrations.cleanrl.make_vec(args.env_id, args.num_envs,")


def test_patch_changes_exactly_one_statement():
    source = 'x = 1\n    envs = gym.vector.SyncVectorEnv(\n        [make_env(i) for i in range(2)]\n    )\n    assert ok\n'
    out = patched(source)
    assert out.count("\n") == source.count("\n") - 1
    assert out.startswith("x = 1\n    import fastenv.integrations.cleanrl\n    envs = fastenv.integrations.cleanrl.make_vec(")
    assert out.endswith("    assert ok\n")


@pytest.mark.libero
@pytest.mark.skipif(SCRIPT is None, reason="set CLEANRL_PPO_SCRIPT to CleanRL's ppo_continuous_action.py (not redistributed)")
def test_cleanrl_ppo_continuous_action_runs_on_libero(tmp_path):
    source = patched(Path(SCRIPT).read_text())
    skip_unless_script_imports(source, "cleanrl")  # tyro, tensorboard, ...: what the script imports
    script = tmp_path / "ppo_continuous_action.py"
    script.write_text(source)
    args = ["--env-id", "fastenv/Libero-v0", "--num-envs", "2", "--num-steps", "16", "--total-timesteps", "64", "--num-minibatches", "2", "--update-epochs", "1", "--no-cuda"]
    out = subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("SPS:") == 2  # two PPO iterations of 2 envs x 16 chunks
    assert "episodic_return=" in out.stdout  # 32-step episodes in chunks of 8 ended and were logged
    assert list((tmp_path / "runs" / "fastenv").glob("Libero-v0__*"))  # the run is named after the env id


def _pendulum(gamma):
    import gymnasium as gym

    from fastenv.integrations.cleanrl import ppo_continuous_wrappers

    return ppo_continuous_wrappers(gym.make("Pendulum-v1", max_episode_steps=7), gamma)


def test_cleanrls_wrappers_in_fastenvs_workers_equal_them_in_gymnasiums_own_vector_env():
    # The recipe keeps CleanRL's make_env wrappers around each env, in fastenv's workers: the data
    # equals SyncVectorEnv (SAME_STEP) over the same wrapped envs, step for step, episode ends included.
    import functools

    import gymnasium as gym
    import numpy as np

    from fastenv.vector import PipelineVectorEnv

    make = functools.partial(_pendulum, 0.9)
    ours = PipelineVectorEnv([make] * 4, num_workers=2)
    ref = gym.vector.SyncVectorEnv([make] * 4, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    try:
        a, b = ours.reset(seed=3), ref.reset(seed=3)
        np.testing.assert_array_equal(a[0], b[0])
        rng = np.random.default_rng(0)
        for _ in range(20):
            action = rng.uniform(-4, 4, (4, 1)).astype(np.float32)  # beyond the [-2, 2] bounds: clipped
            a, b = ours.step(action), ref.step(action)
            for x, y in zip(a[:4], b[:4]):
                np.testing.assert_array_equal(x, y)
            if b[3].any():
                np.testing.assert_array_equal(a[4]["final_obs"][b[3]].tolist(), b[4]["final_obs"][b[3]].tolist())
            assert np.abs(a[0]).max() <= 10 and np.abs(a[1]).max() <= 10
        assert ours.get_attr("gamma") == (0.9,) * 4  # NormalizeReward's, one per env
    finally:
        ours.close()
        ref.close()


@pytest.mark.libero
def test_make_vec_with_gamma_gives_max_episode_steps_to_the_env_in_simulator_steps():
    # With gamma each env is built by gym.make in the workers, which would keep max_episode_steps
    # for Gymnasium's TimeLimit (12 chunks); it means the env's own limit, as without gamma.
    import numpy as np

    from fastenv.integrations.cleanrl import make_vec

    envs = make_vec("fastenv/Libero-v0", 1, gamma=0.9, num_workers=1, camera_size=32, max_episode_steps=12)
    try:
        envs.reset(seed=0)
        zeros = np.zeros(envs.action_space.shape, np.float32)
        assert not envs.step(zeros)[3].any()
        *_, terminated, truncated, info = envs.step(zeros)  # 8 + 4 simulator steps
        assert truncated.tolist() == [True] and terminated.tolist() == [False]
        assert info["final_info"][0]["chunk_steps"] == 4 and info["final_info"][0]["episode"]["l"] == 12
    finally:
        envs.close()


# -- the same data as CleanRL's script on LIBERO's own env -----------------------------------------
# CleanRL's "collector" is ppo_continuous_action.py's rollout loop over its env construction: a vector
# env of envs each wrapped by its make_env. The reference is that loop over Gymnasium's multi-process
# vector env of LIBERO's own env (AsyncVectorEnv started with spawn, each stock env in a process of its
# own), each env wrapped as the script's make_env wraps it, stepped one action at a time (chunk 1) or K at
# a time by the reference chunk loop (tests/stock_libero.py); fastenv's side is the same loop over
# fastenv.integrations.cleanrl.make_vec. A fixed deterministic policy from the observation acts for the
# script's Gaussian one, and a fixed linear critic for its value head. Each side runs in a fresh process:
# AsyncVectorEnv builds a stock env in the calling process to read its spaces.

LIBERO_SEED, LIBERO_GAMMA, LIBERO_LAMBDA = 1, 0.99, 0.95
LIBERO_STEPS = {1: 32, 8: 6}  # the script's --num-steps, two iterations: 64 or 96 simulator steps per env at most


def _clip10(x):
    import numpy as np

    return np.clip(x, -10, 10)


def _script_env(chunk: int):
    """One stock env wrapped as the script's make_env wraps one (Gymnasium 1.x signatures).

    The script's RecordEpisodeStatistics counts ``env.step`` calls, chunks on a chunked env; fastenv's
    CleanRL options log the episode over simulator steps in its place (docs/training.md), so here it
    records below the chunk loop, once per simulator step.
    """
    import gymnasium as gym
    from stock_libero import ChunkLoop, make_stock

    env = gym.wrappers.RecordEpisodeStatistics(make_stock())
    env = env if chunk == 1 else ChunkLoop(env, chunk)
    env = gym.wrappers.FlattenObservation(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, _clip10, env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=LIBERO_GAMMA)
    return gym.wrappers.TransformReward(env, _clip10)


def _logged_episodes(infos, global_step: int) -> tuple[list, str]:
    """The episodes the script logs at this step, (global_step, env, return, length), and the layout of
    ``infos["final_info"]`` they came in: Gymnasium 1.x's dict of batched arrays with ``_episode``
    masks, which the script reads since its Gymnasium 1.x port, or an array of per-env dicts, which
    its earlier versions read (``for info in infos["final_info"]``) and fastenv's CleanRL options give."""
    import numpy as np

    if "final_info" not in infos:
        return [], "none"
    final = infos["final_info"]
    if isinstance(final, dict):
        ended = np.nonzero(final["_episode"])[0]
        return [(global_step, int(i), float(final["episode"]["r"][i]), int(final["episode"]["l"][i])) for i in ended], "batched"
    return [(global_step, i, float(info["episode"]["r"]), int(info["episode"]["l"])) for i, info in enumerate(final)
            if info and "episode" in info], "per-env"


def _rollout_on_libero(side: str, chunk: int) -> dict:
    """The script's rollout loop, two iterations of ``LIBERO_STEPS[chunk]`` steps, on one ``side``: what it
    stores, what it logs, what each step returned and the advantages and returns it computes."""
    import functools

    import gymnasium as gym
    import numpy as np
    import torch
    from fakes import AlteredReward
    from stock_libero import fastenv_options

    import fastenv.integrations.cleanrl

    if side == "stock":
        envs = gym.vector.AsyncVectorEnv([functools.partial(_script_env, chunk)] * 2, context="spawn",
                                         autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    else:
        envs = fastenv.integrations.cleanrl.make_vec("fastenv/Libero-v0", 2, gamma=LIBERO_GAMMA, num_workers=2, **fastenv_options(chunk))
        if side == "fastenv-altered":  # one reward of one env off by 1e-6
            envs = AlteredReward(envs, call=5, index=1, by=1e-6)
    num_steps, num_envs = LIBERO_STEPS[chunk], 2
    torch.manual_seed(LIBERO_SEED)
    critic = torch.nn.Linear(int(np.prod(envs.single_observation_space.shape)), 1)
    scale = torch.linspace(-3.0, 3.0, int(np.prod(envs.single_action_space.shape)))
    out = {"iterations": [], "steps": [], "logged": [], "layouts": set()}
    try:
        obs = torch.zeros((num_steps, num_envs) + envs.single_observation_space.shape)
        actions = torch.zeros((num_steps, num_envs) + envs.single_action_space.shape)
        rewards = torch.zeros((num_steps, num_envs))
        dones = torch.zeros((num_steps, num_envs))
        values = torch.zeros((num_steps, num_envs))
        global_step = 0
        next_obs, _ = envs.reset(seed=LIBERO_SEED)
        next_obs = torch.Tensor(next_obs)
        next_done = torch.zeros(num_envs)
        for _ in range(2):
            for step in range(num_steps):
                global_step += num_envs
                obs[step] = next_obs
                dones[step] = next_done
                with torch.no_grad():
                    action = torch.tanh(torch.sin(next_obs.sum(1, keepdim=True) * scale))
                    values[step] = critic(next_obs).flatten()
                actions[step] = action
                next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
                next_done = np.logical_or(terminations, truncations)
                final_obs = [(i, np.asarray(infos["final_obs"][i])) for i in np.flatnonzero(next_done)]
                out["steps"].append((next_obs.copy(), reward.copy(), terminations.copy(), truncations.copy(), final_obs))
                rewards[step] = torch.tensor(reward).view(-1)
                next_obs, next_done = torch.Tensor(next_obs), torch.Tensor(next_done)
                logged, layout = _logged_episodes(infos, global_step)
                out["logged"] += logged
                out["layouts"].add(layout)
            with torch.no_grad():  # the script's bootstrap and GAE
                next_value = critic(next_obs).reshape(1, -1)
                advantages = torch.zeros_like(rewards)
                lastgaelam = 0
                for t in reversed(range(num_steps)):
                    if t == num_steps - 1:
                        nextnonterminal, nextvalues = 1.0 - next_done, next_value
                    else:
                        nextnonterminal, nextvalues = 1.0 - dones[t + 1], values[t + 1]
                    delta = rewards[t] + LIBERO_GAMMA * nextvalues * nextnonterminal - values[t]
                    advantages[t] = lastgaelam = delta + LIBERO_GAMMA * LIBERO_LAMBDA * nextnonterminal * lastgaelam
                returns = advantages + values
            out["iterations"].append({name: tensor.numpy().copy() for name, tensor in (
                ("obs", obs), ("actions", actions), ("rewards", rewards), ("dones", dones), ("values", values),
                ("advantages", advantages), ("returns", returns))})
    finally:
        envs.close()
    return out


def _in_fresh_process(side: str, chunk: int) -> dict:
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_rollout_on_libero, side, chunk).result()


def _assert_same_rollout(got: dict, want: dict) -> None:
    from helpers import assert_same

    assert len(got["iterations"]) == len(want["iterations"]) == 2
    for n, (g, w) in enumerate(zip(got["iterations"], want["iterations"])):
        for key in w:
            assert g[key].dtype == w[key].dtype, f"iteration {n}: {key} dtype"
            assert_same(g[key], w[key], f"iteration {n}: {key}")
    assert len(got["steps"]) == len(want["steps"])
    for t, (g, w) in enumerate(zip(got["steps"], want["steps"])):
        for name, a, b in zip(("obs", "reward", "terminations", "truncations"), g, w):
            assert a.dtype == b.dtype, f"step {t}: {name} dtype"
            assert_same(a, b, f"step {t}: {name}")
        assert [i for i, _ in g[4]] == [i for i, _ in w[4]], f"step {t}: the envs that ended"
        for (i, a), (_, b) in zip(g[4], w[4]):
            assert a.dtype == b.dtype, f"step {t}: final observation dtype"
            assert_same(a, b, f"step {t}: final observation of env {i}")
    assert got["logged"] == want["logged"], "the episodes logged (global_step, env, return, length)"


@same_data_on_stock_libero
def test_the_scripts_rollout_gathers_on_fastenv_what_it_gathers_on_async_vector_env_over_stock_libero(chunk, monkeypatch):
    """The script vectorizes with Gymnasium's SyncVectorEnv, which steps its envs in one process, where stock LIBERO envs are not independent (tests/stock_libero.py says why). So the reference is
    Gymnasium's multi-process vector env, AsyncVectorEnv, in the script's autoreset mode (SAME_STEP).
    Compared bit for bit, dtypes too: what the loop stores (observations, actions, rewards, dones, the
    critic's values), what each step returned (observations, rewards, terminations, truncations, the
    final observations), the episodes it logs (return and length; not the wall time) and the advantages
    and returns it computes. The layout of ``infos["final_info"]`` differs, by fastenv's CleanRL options
    (``info_format="per_env"``), and is asserted as such.
    """
    need("torch")
    from stock_libero import schedule_success

    schedule_success(monkeypatch)
    want = _in_fresh_process("stock", chunk)
    got = _in_fresh_process("fastenv", chunk)
    assert want["layouts"] == {"none", "batched"} and got["layouts"] == {"none", "per-env"}
    _assert_same_rollout(got, want)
    # What the window covers: several episodes per env, ended by success and by the time limit.
    terminations = sum(step[2] for step in want["steps"])
    truncations = sum(step[3] for step in want["steps"])
    ended = sum(step[2] | step[3] for step in want["steps"])  # (a success at the time limit is both)
    assert (ended >= 2).all() and terminations.any() and truncations.any(), (terminations, truncations)
    assert len(want["logged"]) == ended.sum()
    # Negative control: one reward of one env altered by 1e-6, below the script's loop, is caught.
    with pytest.raises(AssertionError):
        _assert_same_rollout(_in_fresh_process("fastenv-altered", chunk), want)
