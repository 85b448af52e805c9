"""The README's recipes run as written."""

import re
from pathlib import Path

import numpy as np
from fakes import make_chunked_fake

from fastenv.vector import PipelineVectorEnv

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def block_after(marker: str) -> str:
    """The first ```python block after ``marker`` in the README."""
    start = README.index(marker)
    match = re.compile(r"```python\n(.*?)```", re.S).search(README, start)
    return match.group(1)


def test_gae_recipe_with_chunk_discounts():
    code = block_after("`tests/test_readme.py` runs this block")
    with PipelineVectorEnv([lambda: make_chunked_fake(chunk=4, gamma=0.9, truncate_at=10)] * 4, num_workers=2) as envs:
        scope = {"envs": envs, "value": lambda obs: 0.1 * np.asarray(obs["state"])[:, 0]}
        exec(compile(code, "README.md", "exec"), scope)
        advantages, returns, truncations = scope["advantages"], scope["returns"], scope["truncations"]
        assert advantages.shape == returns.shape == (64, 4)
        assert truncations.sum() > 10  # 10-step episodes in chunks of 4 ended, and were bootstrapped
        # a truncated chunk bootstraps from V(final obs) discounted by gamma**k with k its own sub-steps
        t, i = np.argwhere(truncations)[0]
        assert scope["discounts"][t, i] == 0.9 ** 2 and scope["final_values"][t, i] == 0.1 * 10
