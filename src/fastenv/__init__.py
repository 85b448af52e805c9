"""fastenv: drop-in Gymnasium wrappers and vector envs that make heavy robot simulators fast for RL.

``import fastenv`` loads only gymnasium and numpy; each simulator is imported by its backend.
"""

from fastenv.backends._vulkan import configure_vulkan
from fastenv.core import Executor, SimEnv, SubstepDisabledWarning
from fastenv.core.protocol import BatchSimulator, GymAdapter, SimulatorAdapter
from fastenv.core.registry import register_backend
from fastenv.envs import register_envs
from fastenv.tuning import Plan, tune
from fastenv.wrappers import ActionChunk, HeadlessRender, PruneModalities, wrap

__version__ = "0.1.0"

register_envs()
configure_vulkan()  # ManiSkill (SAPIEN) then finds the CPU Vulkan driver of scripts/vulkan.sh by itself

__all__ = [
    "ActionChunk",
    "BatchSimulator",
    "Executor",
    "GymAdapter",
    "HeadlessRender",
    "Plan",
    "PruneModalities",
    "SimEnv",
    "SimulatorAdapter",
    "SubstepDisabledWarning",
    "__version__",
    "register_backend",
    "register_envs",
    "tune",
    "wrap",
]
