"""fastenv: drop-in Gymnasium wrappers and vector envs that make heavy robot simulators fast for RL.

``import fastenv`` loads only gymnasium and numpy; each simulator is imported by its backend.
"""

from fastenv.backends.base import GymAdapter, SimulatorAdapter
from fastenv.core import SimEnv, as_sim_env
from fastenv.registration import register_envs
from fastenv.wrappers import ActionChunk, HeadlessRender, PruneModalities, wrap

__version__ = "0.1.0"

register_envs()

__all__ = [
    "ActionChunk",
    "GymAdapter",
    "HeadlessRender",
    "PruneModalities",
    "SimEnv",
    "SimulatorAdapter",
    "__version__",
    "as_sim_env",
    "register_envs",
    "wrap",
]
