"""fastenv's core: SimEnv, the executor that gives every backend the same step semantics, and
the batch interface it steps."""

from fastenv.core.batch import EnvBatch, EnvRow, SubstepDisabledWarning
from fastenv.core.env import SimEnv
from fastenv.core.executor import Executor, StepResult
from fastenv.core.fast_paths import FastPath

__all__ = ["EnvBatch", "EnvRow", "Executor", "FastPath", "SimEnv", "StepResult", "SubstepDisabledWarning"]
