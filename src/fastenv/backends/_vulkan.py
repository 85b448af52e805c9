"""Point Vulkan at the CPU driver ``scripts/vulkan.sh`` installed, before SAPIEN is imported.

SAPIEN (ManiSkill) needs a Vulkan device even for state-only tasks. On a machine without one,
``scripts/vulkan.sh`` unpacks Mesa's CPU driver into the virtual environment; ``import fastenv``
points Vulkan's loader at it, so ``gym.make("PickCube-v1", obs_mode="rgb")`` works after it with
no further call. A machine with a GPU gets no such driver, and a driver chosen with
``VK_ICD_FILENAMES``/``VK_DRIVER_FILES`` is left alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

VULKAN_ICD = Path("share", "fastenv", "vulkan", "lvp_icd.json")  # under sys.prefix (scripts/vulkan.sh)


def configure_vulkan() -> str | None:
    """Point Vulkan's loader at the CPU driver ``scripts/vulkan.sh`` put in this environment.

    Only when no driver was chosen (``VK_ICD_FILENAMES``/``VK_DRIVER_FILES``) and that driver is
    there; must run before SAPIEN is imported. Returns the ICD file in effect, if any.
    """
    chosen = os.environ.get("VK_ICD_FILENAMES") or os.environ.get("VK_DRIVER_FILES")
    if chosen:
        return chosen
    icd = Path(sys.prefix) / VULKAN_ICD
    if icd.is_file():
        os.environ["VK_ICD_FILENAMES"] = str(icd)
        return str(icd)
    return None

