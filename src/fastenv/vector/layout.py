"""Which worker holds which env, and which envs make up each pipeline stage."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fastenv._validation import check_positive_int


@dataclass(frozen=True)
class Layout:
    """N envs over W workers in S pipeline stages.

    Stage k is the contiguous slice of envs ``[k*N/S, (k+1)*N/S)``; env i lives on worker
    ``i % W``. So every stage is spread evenly over all workers: each worker steps N/(W*S) envs of
    every stage, and no stage waits on one worker's serial loop.

    Examples:
        >>> Layout(8, 2, 2).stage_envs(1)
        array([4, 5, 6, 7])
    """

    num_envs: int
    num_workers: int
    num_stages: int = 1

    def __post_init__(self) -> None:
        n = check_positive_int("num_envs", self.num_envs)
        w = check_positive_int("num_workers", self.num_workers)
        s = check_positive_int("pipeline_stages", self.num_stages)
        if n % (w * s):
            raise ValueError(
                f"num_envs must be a multiple of num_workers * pipeline_stages so every stage is spread "
                f"evenly over every worker; got num_envs={n}, num_workers={w}, pipeline_stages={s} "
                f"({n} % {w * s} = {n % (w * s)})"
            )

    @property
    def stage_size(self) -> int:
        """Envs per stage."""
        return self.num_envs // self.num_stages

    @property
    def envs_per_worker(self) -> int:
        return self.num_envs // self.num_workers

    def stage_envs(self, stage: int) -> np.ndarray:
        """Global ids of the envs in ``stage``."""
        self.check_stage(stage)
        m = self.stage_size
        return np.arange(stage * m, (stage + 1) * m)

    def stage_of(self, env_id: int) -> int:
        return env_id // self.stage_size

    def worker_of(self, env_id: int) -> int:
        return env_id % self.num_workers

    def worker_envs(self, worker: int) -> np.ndarray:
        """Global ids of the envs ``worker`` holds, in its local order."""
        return np.arange(worker, self.num_envs, self.num_workers)

    def check_stage(self, stage: int) -> int:
        if isinstance(stage, bool) or not isinstance(stage, (int, np.integer)):
            raise TypeError(f"stage must be an integer, got {stage!r}")
        if not 0 <= stage < self.num_stages:
            raise ValueError(f"stage must be in [0, {self.num_stages}), got {stage}")
        return int(stage)

    def check_env_ids(self, env_ids) -> np.ndarray:
        """``env_ids`` as a 1-D int array of distinct, known ids; else ValueError."""
        ids = np.asarray(env_ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or len(ids) == 0:
            raise ValueError(f"env_ids must be a non-empty 1-D array of integers, got {env_ids!r}")
        bad = ids[(ids < 0) | (ids >= self.num_envs)]
        if len(bad):
            raise ValueError(f"env_ids must be in [0, {self.num_envs}), got {bad.tolist()}")
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f"env_ids must be distinct, got {ids.tolist()}")
        return ids.astype(np.int64)
