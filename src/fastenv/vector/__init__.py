"""Vector envs: workers, shared-memory transport, pipeline stages and dynamic batching."""

from fastenv.vector.layout import Layout
from fastenv.vector.pipeline import PipelineVectorEnv, WorkerError

__all__ = ["Layout", "PipelineVectorEnv", "WorkerError"]
