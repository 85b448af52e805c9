"""Vector envs: workers, shared-memory transport, pipeline stages and dynamic batching."""

from fastenv.core.infos import final_observations
from fastenv.vector.batched import BatchedEnv
from fastenv.vector.factory import VECTOR_OPTIONS, make_pipeline
from fastenv.vector.layout import Layout
from fastenv.vector.pipeline import PipelineVectorEnv
from fastenv.vector.transport import WorkerError

__all__ = ["VECTOR_OPTIONS", "BatchedEnv", "Layout", "PipelineVectorEnv", "WorkerError", "final_observations", "make_pipeline"]
