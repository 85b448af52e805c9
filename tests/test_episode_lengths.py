"""Episode lengths as each library logs them, checked against what docs/training.md says they count.

With ``chunk=K``, SB3's ``ep_len_mean`` (its ``VecMonitor``) and Gymnasium's
``RecordEpisodeStatistics`` count ``env.step`` calls, i.e. chunks; CleanRL's ``episodic_length``
(``info["episode"]["l"]`` from ``episode_statistics=True``) counts simulator steps. The units are
read from the docs' own sentences, so a doc that says otherwise fails here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from helpers import need

ROOT = Path(__file__).resolve().parent.parent
TRAINING = ROOT / "docs" / "training.md"

STEPS, CHUNK = 20, 8  # a 20-step episode in chunks of 8: 8 + 8 + 4 simulator steps, 3 chunks
# gym.make's options: the env's own limit in simulator steps is max_sim_steps there
OPTIONS = {"chunk": CHUNK, "camera_size": 32, "max_sim_steps": STEPS, "modalities": ["robot0_proprio-state"]}

# What each library logs, as docs/training.md names it.
LOGGED = {
    "sb3": "SB3's `ep_len_mean` counts",
    "cleanrl": "CleanRL's `episodic_length` counts",
    "gymnasium": "Gymnasium's `RecordEpisodeStatistics`, wrapped around a chunked env, counts",
}


def documented_unit(text: str, library: str) -> str:
    """"chunks" or "simulator steps": what the text says the library's episode length counts."""
    match = re.search(re.escape(LOGGED[library]).replace(r"\ ", r"\s+") + r"\s+(?P<unit>.+?)(?::|;|\.\s)", text, re.DOTALL)
    assert match, f"no sentence '{LOGGED[library]} ...' in the text"
    unit = " ".join(match.group("unit").split())
    if unit.startswith("simulator steps"):
        return "simulator steps"
    if unit.startswith(("`env.step` calls", "chunks")):
        return "chunks"
    raise AssertionError(f"{library}: unit not recognised in '{unit}'")


def expected_length(library: str, sim_steps: int, chunk: int) -> int:
    unit = documented_unit(TRAINING.read_text(), library)
    return sim_steps if unit == "simulator steps" else math.ceil(sim_steps / chunk)


def test_training_docs_and_readme_state_each_librarys_unit() -> None:
    training = TRAINING.read_text()
    assert documented_unit(training, "sb3") == "chunks"
    assert documented_unit(training, "cleanrl") == "simulator steps"
    assert documented_unit(training, "gymnasium") == "chunks"
    readme = (ROOT / "README.md").read_text()
    assert documented_unit(readme, "sb3") == "chunks"
    assert documented_unit(readme, "cleanrl") == "simulator steps"
    # The worked example agrees with the units: SB3 ceil(S / K), CleanRL S.
    example = re.search(
        r"A (?P<steps>\d+)-step \S+ episode with `chunk=(?P<chunk>\d+)` logs `ep_len_mean` (?P<sb3>\d+) in SB3"
        r"\s+and\s+`episodic_length`\s+(?P<cleanrl>\d+) in CleanRL",
        training,
    )
    assert example, "docs/training.md lost its worked example of the two lengths"
    steps, chunk = int(example["steps"]), int(example["chunk"])
    assert int(example["sb3"]) == expected_length("sb3", steps, chunk) == math.ceil(steps / chunk)
    assert int(example["cleanrl"]) == expected_length("cleanrl", steps, chunk) == steps


def _run_episode(env: gym.Env) -> tuple[int, int, dict]:
    """One episode of zero actions: (env.step calls, simulator steps, the last step's info)."""
    env.reset(seed=0)
    calls, sim_steps, done = 0, 0, False
    while not done:
        _, _, terminated, truncated, info = env.step(np.zeros(env.action_space.shape, np.float32))
        calls += 1
        sim_steps += int(info["chunk_steps"])
        done = terminated or truncated
    return calls, sim_steps, info


@pytest.mark.libero
def test_sb3_ep_len_mean_counts_chunks() -> None:
    """What PPO logs as ``rollout/ep_len_mean`` through fastenv's ``SB3VecEnv`` and ``VecMonitor``
    (``make_vec``'s stack, over an in-process vector env to keep the test short)."""
    need("stable_baselines3", "Stable-Baselines3 is not installed")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.logger import KVWriter, Logger

    import fastenv  # noqa: F401  (registers fastenv/Libero-v0)
    from fastenv.integrations.sb3 import RestartMarksCallback, RolloutBuffer, SB3VecEnv, VecMonitor

    class Capture(KVWriter):
        def __init__(self) -> None:
            self.rows: list[dict] = []

        def write(self, key_values, key_excluded, step=0) -> None:
            self.rows.append(dict(key_values))

    class SimulatorSteps(BaseCallback):
        """Sums each step's ``chunk_steps``: the simulator steps of each ended episode."""

        def __init__(self) -> None:
            super().__init__()
            self.current, self.ended = 0, []

        def _on_step(self) -> bool:
            self.current += int(self.locals["infos"][0]["chunk_steps"])
            if self.locals["dones"][0]:
                self.ended.append(self.current)
                self.current = 0
            return True

    vector_env = gym.vector.SyncVectorEnv(
        [lambda: gym.make("fastenv/Libero-v0", **OPTIONS)], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP
    )
    venv = VecMonitor(SB3VecEnv(vector_env))
    try:
        model = PPO("MultiInputPolicy", venv, n_steps=6, batch_size=6, n_epochs=1, seed=0, device="cpu",
                    rollout_buffer_class=RolloutBuffer)
        capture = Capture()
        model.set_logger(Logger(folder=None, output_formats=[capture]))
        counter = SimulatorSteps()
        model.learn(total_timesteps=6, callback=[counter, RestartMarksCallback()])  # 6 chunks: two 20-step episodes
    finally:
        venv.close()
    assert counter.ended == [STEPS, STEPS]
    logged = [row["rollout/ep_len_mean"] for row in capture.rows if "rollout/ep_len_mean" in row]
    assert logged, f"SB3 logged no ep_len_mean: {capture.rows}"
    assert logged[-1] == expected_length("sb3", STEPS, CHUNK) == math.ceil(STEPS / CHUNK)


@pytest.mark.libero
def test_cleanrl_episodic_length_counts_simulator_steps_gymnasiums_statistics_chunks() -> None:
    import fastenv  # noqa: F401  (registers fastenv/Libero-v0)
    from fastenv.integrations.cleanrl import OPTIONS as CLEANRL

    # What CleanRL's script logs: info["episode"]["l"] of an env with fastenv.integrations.cleanrl's
    # options (episode_statistics=True), which its make_vec builds in place of RecordEpisodeStatistics.
    single = {k: v for k, v in CLEANRL.items() if k != "info_format"}  # info_format: the vector env's
    assert single["episode_statistics"] and single["chunk"] == CHUNK
    env = gym.make("fastenv/Libero-v0", **{**single, **OPTIONS})
    try:
        calls, sim_steps, info = _run_episode(env)
    finally:
        env.close()
    assert (calls, sim_steps) == (math.ceil(STEPS / CHUNK), STEPS)
    assert info["episode"]["l"] == expected_length("cleanrl", STEPS, CHUNK) == STEPS

    # Gymnasium's own RecordEpisodeStatistics around a chunked env.
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("fastenv/Libero-v0", **OPTIONS))
    try:
        calls, sim_steps, info = _run_episode(env)
    finally:
        env.close()
    assert (calls, sim_steps) == (math.ceil(STEPS / CHUNK), STEPS)
    assert info["episode"]["l"] == expected_length("gymnasium", STEPS, CHUNK) == math.ceil(STEPS / CHUNK)
