"""The value-target recipe of docs/training.md, on envs that discount inside chunks (``gamma=``).

tests/test_docs.py runs every snippet as pasted on the real simulator (the default env, which
sums a chunk's rewards); this runs the same program with ``gym.make_vec`` answering fake envs
built with ``gamma=0.9``, where the bootstrap discount of a chunk is ``0.9**k`` for its own k.
"""

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
from fakes import make_chunked_fake

import fastenv
from fastenv.vector import PipelineVectorEnv

TRAINING = (Path(__file__).resolve().parent.parent / "docs" / "training.md").read_text()


def block_after(heading: str) -> str:
    """The first ```python block after ``heading`` in docs/training.md."""
    start = TRAINING.index(heading)
    return re.compile(r"```python\n(.*?)```", re.S).search(TRAINING, start).group(1)


class _Proprio(gym.ObservationWrapper):
    """The fake's observation under the key the recipe's critic reads."""

    def __init__(self, env):
        super().__init__(env)
        self.observation_space = gym.spaces.Dict({"robot0_proprio-state": env.observation_space["state"]})

    def observation(self, obs):
        return {"robot0_proprio-state": obs["state"]}


def _fake():
    return _Proprio(make_chunked_fake(chunk=4, gamma=0.9, truncate_at=10))


def test_gae_recipe_with_chunk_discounts(monkeypatch):
    code = block_after("## Value targets with the right bootstrap")
    monkeypatch.setattr(gym, "make_vec", lambda *a, **k: PipelineVectorEnv([_fake] * k["num_envs"], num_workers=2))
    scope = {"__name__": "__main__"}
    exec(compile(code, "docs/training.md", "exec"), scope)
    advantages, returns, truncations = scope["advantages"], scope["returns"], scope["truncations"]
    assert advantages.shape == returns.shape == (8, 2)
    assert truncations.sum() == 4  # 10-step episodes in chunks of 4 (4, 4, 2) end at steps 2 and 5
    # a truncated chunk bootstraps from V(final obs), discounted by gamma**k with k its own sub-steps
    t, i = np.argwhere(truncations)[0]
    assert t == 2 and scope["discounts"][t, i] == 0.9**2 and scope["discounts"][0, i] == 0.9**4
    assert scope["final_values"][t, i] == 0.01 * 10 * len(scope["envs"].single_observation_space["robot0_proprio-state"].low)
    assert fastenv  # registered the ids the recipe names
