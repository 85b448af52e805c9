"""What a PipelineVectorEnv hands back: the results of some envs, read from shared memory, and the
error of a step in which envs raised, carrying the others' results."""

from __future__ import annotations

from typing import Any

import numpy as np

from fastenv.core.arrays import get_row, put_rows, take_rows
from fastenv.core.infos import add_info, step_keys, with_legacy_final_keys
from fastenv.vector.dispatch import IDLE, Restart, _EnvState
from fastenv.vector.transport import WorkerError


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


class _Results:
    """Gathers the results of envs whose results arrived (mixed into ``PipelineVectorEnv``)."""

    # Kept by PipelineVectorEnv.
    num_workers: int
    info_format: str
    _envs: list[_EnvState]
    _failed: set[int]
    _obs: Any
    _final_obs: Any
    _last_obs: Any
    _rewards: np.ndarray
    _terminations: np.ndarray
    _truncations: np.ndarray
    _busy_envs: int
    num_envs: int

    def _gather(self, gids: np.ndarray, rows: Any, with_ids: bool = False) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The results of ``gids`` (at ``rows`` of the arrays); they become idle.

        If some have none (an env raised in their worker), the others' results are delivered
        inside the ``WorkerError`` raised.
        """
        gid_list = gids.tolist()
        envs = self._envs
        records = [envs[gid] for gid in gid_list]
        obs = take_rows(self._obs, rows)
        rewards = self._rewards[rows].copy()
        terminations = self._terminations[rows].copy()
        truncations = self._truncations[rows].copy()
        infos: dict[str, Any] = {}
        size = len(records)
        per_env = self.info_format == "per_env"
        failed = []
        self._busy_envs -= size
        for pos, (gid, env) in enumerate(zip(gid_list, records)):
            env.status = IDLE
            if env.error is not None:
                failed.append(pos)
                continue
            if env.restart == Restart.RESULT:
                # The action was never run: report the episode cut where the caller last saw it.
                env.restart = Restart.NONE
                rewards[pos], terminations[pos], truncations[pos] = 0.0, False, True
                final = {**step_keys(env.info), "worker_restarted": True}
                add_info(infos, {"final_obs": get_row(self._last_obs, gid), "final_info": _PerEnv(final) if per_env else final}, pos, size)
                add_info(infos, {**env.info, "worker_restarted": True}, pos, size)
                continue
            if env.final is not None:
                if env.final or per_env:
                    add_info(infos, {"final_obs": get_row(self._final_obs, gid), "final_info": _PerEnv(env.final) if per_env else env.final}, pos, size)
                else:  # an empty final info: what add_info makes of it, without walking it
                    add_final_obs(infos, get_row(self._final_obs, gid), pos, size)
            if env.info:
                add_info(infos, env.info, pos, size)
        for pos in failed:  # no result: what the caller last saw, nothing happened
            put_rows(obs, pos, get_row(self._last_obs, int(gids[pos])))
            rewards[pos], terminations[pos], truncations[pos] = 0.0, False, False
        put_rows(self._last_obs, rows, obs)
        if "final_info" in infos and per_env:
            infos["final_info"] = np.array([None if f is None else f.info for f in infos["final_info"]], dtype=object)
        if with_ids:
            infos["env_ids"] = gids
        result = (obs, rewards, terminations, truncations, with_legacy_final_keys(infos))
        if failed:
            raise self._step_error(gids, failed, records, result)
        return result

    def _gather_whole(self, ended: list[int]) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        """The results of a ``_step_whole`` step: every env's, no info but the final observations of ``ended``."""
        obs = self._obs.copy() if isinstance(self._obs, np.ndarray) else take_rows(self._obs, slice(None))
        infos: dict[str, Any] = {}
        if ended:
            size = self.num_envs
            for gid in sorted(ended):
                if self.info_format == "per_env":
                    add_info(infos, {"final_obs": get_row(self._final_obs, gid), "final_info": _PerEnv({})}, gid, size)
                else:
                    add_final_obs(infos, get_row(self._final_obs, gid), gid, size)
            if self.info_format == "per_env":
                infos["final_info"] = np.array([None if f is None else f.info for f in infos["final_info"]], dtype=object)
            with_legacy_final_keys(infos)
        if isinstance(obs, np.ndarray):
            self._last_obs[:] = obs
        else:
            put_rows(self._last_obs, slice(None), obs)
        return obs, self._rewards.copy(), self._terminations.copy(), self._truncations.copy(), infos

    def _step_error(self, gids: np.ndarray, failed: list[int], records: list[_EnvState], result: tuple) -> WorkerError:
        """The error of a step in which envs raised, carrying the other envs' results."""
        failed_ids = np.sort(gids[failed])
        errors: dict[int, tuple[str, str]] = {}  # the first error of each env that raised
        for pos in failed:
            text, tb, origin = records[pos].error
            errors.setdefault(origin, (text, tb))
            records[pos].error = None
        self._failed.update(failed_ids.tolist())
        (origin, (text, tb)), *others = errors.items()
        also = "".join(f"(also env {o} in worker {o % self.num_workers}: {t})\n" for o, (t, _) in others)
        valid = np.ones(len(gids), dtype=bool)
        valid[failed] = False
        return WorkerError(
            f"env {origin} raised in worker {origin % self.num_workers}: {text}\n{also}"
            f"(envs {failed_ids.tolist()} have no result: reset them to continue, "
            f"reset(options={{'reset_mask': mask}}); the other envs stepped: their results are this "
            f"error's .results, rows where .valid)\n"
            f"--- worker traceback ---\n{tb}",
            failed_env_ids=failed_ids,
            results=result,
            env_ids=gids.copy(),
            valid=valid,
        )
