"""What a PipelineVectorEnv hands back: the results of some envs, read from the pool's arrays, and
the error of a step in which envs raised, carrying the others' results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode

from fastenv.core.arrays import get_row, put_rows, take_rows, tree_leaves, tree_map
from fastenv.core.infos import add_info, step_keys, with_legacy_final_keys
from fastenv.vector.pool import EnvRecord, EnvStatus, Restart, WorkerPool
from fastenv.vector.transport import WorkerError, worker_error


class _PerEnv:
    """Marks an info dict to be kept whole (one object per env) rather than batched."""

    __slots__ = ("info",)

    def __init__(self, info: dict) -> None:
        self.info = info


def add_final_obs(infos: dict[str, Any], final_obs: Any, pos: int, size: int) -> None:
    """``add_info(infos, {"final_obs": final_obs, "final_info": {}}, pos, size)``, the common case, made directly.

    Gymnasium's layout: ``final_obs`` an object array (None where no episode ended),
    ``final_info`` a dict (empty here), each with its ``_key`` mask.
    """
    if "final_obs" not in infos:
        infos["final_obs"] = np.full(size, None, dtype=object)
        infos["_final_obs"] = np.zeros(size, dtype=np.bool_)
    infos["final_obs"][pos] = final_obs
    infos["_final_obs"][pos] = True
    if "final_info" not in infos:
        infos["final_info"] = {}
        infos["_final_info"] = np.zeros(size, dtype=np.bool_)
    infos["_final_info"][pos] = True


def row_reader(space: gym.Space | None) -> Callable[[Any, int], Any]:
    """``get_row`` for batches structured as ``space``, decided once per space.

    A float Box leaf of shape () comes back as a 0-d array (a copy of ``x[row, ...]``), as
    ``Box.sample`` draws it and SyncVectorEnv's final_obs keeps it, rather than the numpy scalar
    ``x[row]`` is; every other leaf as ``get_row`` gives it: an integer Box's or a Discrete's numpy
    scalar (as their ``sample`` draws them), an array's row. A space without such a leaf reads
    with ``get_row`` itself.
    """

    def marks(sub: gym.Space) -> Any:
        if isinstance(sub, spaces.Dict):
            return {key: marks(s) for key, s in sub.spaces.items()}
        if isinstance(sub, spaces.Tuple):
            return tuple(marks(s) for s in sub.spaces)
        return isinstance(sub, spaces.Box) and sub.shape == () and sub.dtype.kind == "f"

    zero_d = None if space is None else marks(space)
    if not any(tree_leaves(zero_d)):
        return get_row

    def read(batch: Any, row: int) -> Any:
        return tree_map(lambda x, scalar: x[row, ...].copy() if scalar else get_row(x, row), batch, zero_d)

    return read


class ResultReader:
    """Reads the results of envs whose results arrived in ``pool``, which become idle.

    Keeps the observation the caller last saw of each env: an env without a new result (it
    raised, or its worker was replaced) reports that one. With ``autoreset_mode=DISABLED`` it also
    keeps which envs ended their episode (``ended``) and were not reset since.
    """

    def __init__(
        self, pool: WorkerPool, info_format: str, obs_space: gym.Space | None = None, autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP
    ) -> None:
        self.pool = pool
        self.info_format = info_format
        self.row = row_reader(obs_space)  # one env's observation, copied (final_obs)
        self.last_obs = take_rows(pool.obs, slice(None))  # what the caller last saw, per env
        self.same_step = autoreset_mode is AutoresetMode.SAME_STEP
        self.ended = np.zeros(pool.layout.num_envs, dtype=bool) if autoreset_mode is AutoresetMode.DISABLED else None

    def gather(self, gids: np.ndarray, rows: Any, with_ids: bool = False) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The results of ``gids`` (at ``rows`` of the arrays); they become idle.

        If some have none (an env raised in their worker), the others' results are delivered
        inside the ``WorkerError`` raised.
        """
        pool = self.pool
        gid_list = gids.tolist()
        envs = pool.envs
        records = [envs[gid] for gid in gid_list]
        obs = take_rows(pool.obs, rows)
        rewards = pool.rewards[rows].copy()
        terminations = pool.terminations[rows].copy()
        truncations = pool.truncations[rows].copy()
        infos: dict[str, Any] = {}
        size = len(records)
        per_env = self.info_format == "per_env"
        failed = []
        pool.busy_envs -= size
        idle = EnvStatus.IDLE
        for pos, (gid, env) in enumerate(zip(gid_list, records)):
            env.status = idle
            if env.error is not None:
                failed.append(pos)
                continue
            if env.restart is Restart.RESULT:
                # The action was never run: report the episode cut where the caller last saw it.
                env.restart = Restart.NONE
                rewards[pos], terminations[pos], truncations[pos] = 0.0, False, True
                if not self.same_step:  # the cut episode's last observation is this one; a reset follows
                    put_rows(obs, pos, get_row(self.last_obs, gid))
                    add_info(infos, {**env.info, "worker_restarted": True}, pos, size)
                    continue
                final = {**step_keys(env.info), "worker_restarted": True}
                add_info(infos, {"final_obs": self.row(self.last_obs, gid), "final_info": _PerEnv(final) if per_env else final}, pos, size)
                add_info(infos, {**env.info, "worker_restarted": True}, pos, size)
                continue
            if env.final is not None:
                if env.final or per_env:
                    add_info(infos, {"final_obs": self.row(pool.final_obs, gid), "final_info": _PerEnv(env.final) if per_env else env.final}, pos, size)
                else:  # an empty final info: what add_info makes of it, without walking it
                    add_final_obs(infos, self.row(pool.final_obs, gid), pos, size)
            if env.info:
                add_info(infos, env.info, pos, size)
        for pos in failed:  # no result: what the caller last saw, nothing happened
            put_rows(obs, pos, get_row(self.last_obs, int(gids[pos])))
            rewards[pos], terminations[pos], truncations[pos] = 0.0, False, False
        put_rows(self.last_obs, rows, obs)
        if self.ended is not None:  # (an env that raised is neither: it must be reset all the same)
            self.ended[gids] = terminations | truncations
        if "final_info" in infos and per_env:
            infos["final_info"] = np.array([None if f is None else f.info for f in infos["final_info"]], dtype=object)
        if with_ids:
            infos["env_ids"] = gids
        result = (obs, rewards, terminations, truncations, with_legacy_final_keys(infos))
        if failed:
            raise self._step_error(gids, failed, records, result)
        return result

    def gather_whole(self, ended: list[int]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The results of a ``WorkerPool.step_whole`` step: every env's, no info but the final observations of ``ended``."""
        pool = self.pool
        obs = pool.obs
        obs = obs.copy() if isinstance(obs, np.ndarray) else take_rows(obs, slice(None))
        infos: dict[str, Any] = {}
        if ended:
            size = pool.layout.num_envs
            for gid in sorted(ended):
                if self.info_format == "per_env":
                    add_info(infos, {"final_obs": self.row(pool.final_obs, gid), "final_info": _PerEnv({})}, gid, size)
                else:
                    add_final_obs(infos, self.row(pool.final_obs, gid), gid, size)
            if self.info_format == "per_env":
                infos["final_info"] = np.array([None if f is None else f.info for f in infos["final_info"]], dtype=object)
            with_legacy_final_keys(infos)
        if isinstance(obs, np.ndarray):
            self.last_obs[:] = obs
        else:
            put_rows(self.last_obs, slice(None), obs)
        if self.ended is not None:
            np.logical_or(pool.terminations, pool.truncations, out=self.ended)
        return obs, pool.rewards.copy(), pool.terminations.copy(), pool.truncations.copy(), infos

    def keep_reset(self, gids: np.ndarray) -> Any:
        """Every env's observation after ``gids`` were reset (the others': what the caller last saw)."""
        put_rows(self.last_obs, gids, take_rows(self.pool.obs, gids))
        if self.ended is not None:
            self.ended[gids] = False
        return take_rows(self.last_obs, slice(None))

    def _step_error(self, gids: np.ndarray, failed: list[int], records: list[EnvRecord], result: tuple) -> WorkerError:
        """The error of a step in which envs raised, carrying the other envs' results."""
        failed_ids = np.sort(gids[failed])
        errors: dict[int, tuple[str, str, str]] = {}  # the first error of each env that raised
        for pos in failed:
            text, tb, origin, builtin = records[pos].error
            errors.setdefault(origin, (text, tb, builtin))
            records[pos].error = None
        self.pool.failed.update(failed_ids.tolist())
        (origin, (text, tb, builtin)), *others = errors.items()
        num_workers = self.pool.layout.num_workers
        also = "".join(f"(also env {o} in worker {o % num_workers}: {t})\n" for o, (t, _, _) in others)
        valid = np.ones(len(gids), dtype=bool)
        valid[failed] = False
        return worker_error(
            f"env {origin} raised in worker {origin % num_workers}: {text}\n{also}"
            f"(envs {failed_ids.tolist()} have no result: reset them to continue, "
            f"reset(options={{'reset_mask': mask}}); the other envs stepped: their results are this "
            f"error's .results, rows where .valid)\n"
            f"--- worker traceback ---\n{tb}",
            builtin,
            failed_env_ids=failed_ids,
            results=result,
            env_ids=gids.copy(),
            valid=valid,
        )
