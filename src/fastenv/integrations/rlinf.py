"""RLinf's LIBERO env on fastenv: the same class, config and data, with the simulator work cut.

RLinf (``rlinf``) runs LIBERO through ``rlinf.envs.libero.libero_env.LiberoEnv``: one
``OffScreenRenderEnv`` per env in its own process, stepped one action at a time. Its
``chunk_step`` steps, renders and packages an observation after every action of a chunk, and its
env worker keeps only the last one; every reset rebuilds the env (in training) and renders 15
settling steps. ``LiberoEnv`` here is RLinf's class with its simulator layer replaced:

- RLinf's own code keeps everything it computes: reset-state ids, groups, rewards
  (``use_rel_reward``, ``reward_coef``, step penalty), terminations and truncations,
  ``ignore_terminations``, auto-reset, eval mode and its per-task statistics, episode metrics,
  observation packaging. Only ``self.env`` (its ``ReconfigureSubprocEnv``) is fastenv's.
- A chunk's actions go to fastenv's workers at once. Each env takes them as sub-steps (fastenv's
  control loop, no renders) and is observed once, at the chunk's end. The 15 settling steps of a
  reset run the same way.
- A reset reuses the built env when the task and cameras are unchanged, resetting it in place
  (bit for bit a rebuilt env's reset), and shares one render context per worker.

What differs, by design: ``chunk_step``'s observation list holds ``None`` in place of the
observations nobody reads (every position but the last). RLinf's env worker reads only the last,
and RLinf's ``RecordVideo`` drops ``None`` entries (RLinf wrote it so for envs that skip
intermediate observations), so a video holds one frame per chunk (the chunk's last) plus the
frame after each reset. Raw observations hold the five keys RLinf reads.

Use it in place of RLinf's class, or switch a whole RLinf run with one import in its entry
script: ``from fastenv.integrations.rlinf import EnvWorker`` (instead of
``rlinf.workers.env.env_worker``'s), which builds this class wherever RLinf's config says
``env_type: libero``.

Pipeline stages (``rollout.pipeline_stage_num: N``): RLinf's env worker builds one env per stage.
fastenv's ``EnvWorker`` serves all N from one pool of worker processes, each worker holding a
slice of every stage (RLinf's "hybrid partition"), so whichever stage RLinf steps runs on all the
pool's workers while the policy computes another stage's actions. ``fastenv: {pool: per_stage}``
gives each stage a pool of its own instead (the layout before).
"""

from __future__ import annotations

import atexit
import collections
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from fastenv._deps import require
from fastenv.integrations._tally import Tally, announce

__all__ = ["check_init_params", "check_options", "fastenv_env_cls"]  # and, built at first use where RLinf is installed: LiberoEnv, EnvWorker, AsyncEnvWorker

# RLinf's reset steps this many zero actions after putting the init state (libero_env.reset).
SETTLE_STEPS = 15
# What RLinf's LiberoEnv reads of a raw LIBERO observation (``_extract_image_and_state``).
STATE_KEYS = ("robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos")
STOCK_CAMERAS = ("agentview", "robot0_eye_in_hand")  # OffScreenRenderEnv's cameras
# ``init_params`` (OffScreenRenderEnv's arguments) this env reproduces, with LIBERO's defaults.
INIT_PARAMS = {"camera_heights": 128, "camera_widths": 128, "camera_names": STOCK_CAMERAS, "horizon": 1000, "ignore_done": False}


# fastenv's own keys in an RLinf env config (``fastenv: {...}``), with their defaults.
OPTIONS: dict[str, Any] = {"num_workers": None, "pool": "shared"}
POOLS = ("shared", "per_stage")


def check_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The config's ``fastenv`` keys, checked: ``num_workers`` (None or a positive int) and ``pool``.

    ``pool``: "shared" (one pool of workers for all of an env worker's pipeline stages, each worker
    holding a slice of every stage) or "per_stage" (each stage's env its own pool). ``num_workers``
    counts the workers of a pool: the shared one, or each stage's.
    """
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"the config's fastenv keys are {sorted(OPTIONS)}; got {unknown} as well")
    out = {**OPTIONS, **options}
    workers = out["num_workers"]
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers <= 0):
        raise ValueError(f"fastenv.num_workers must be a positive int (or null for the default: at most one per CPU), got {workers!r}")
    if out["pool"] not in POOLS:
        raise ValueError(f"fastenv.pool must be one of {list(POOLS)}, got {out['pool']!r}")
    return out


def _cfg_options(cfg: Any) -> dict[str, Any]:
    options = cfg.get("fastenv", None) if hasattr(cfg, "get") else None
    if options is not None and not isinstance(options, Mapping):
        from omegaconf import OmegaConf

        options = OmegaConf.to_container(options, resolve=True)
    return check_options(options)


def check_init_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """OffScreenRenderEnv's arguments as this env takes them; others are refused, naming them."""
    unknown = sorted(set(params) - set(INIT_PARAMS) - {"bddl_file_name", "seed"})
    if unknown:
        raise ValueError(
            f"fastenv's RLinf LIBERO env takes the init_params {sorted(INIT_PARAMS)}; got {unknown} as well. "
            "Remove them, or use RLinf's own LiberoEnv for this config"
        )
    out = {**INIT_PARAMS, **{k: v for k, v in params.items() if k in INIT_PARAMS}}
    for key in ("camera_heights", "camera_widths"):
        value = out[key]
        if isinstance(value, (list, tuple)):
            if len(set(value)) != 1:
                raise ValueError(f"init_params.{key}: one size for every camera, got {list(value)}")
            value = value[0]
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"init_params.{key} must be a positive int, got {value!r}")
        out[key] = int(value)
    names = out["camera_names"]
    out["camera_names"] = (names,) if isinstance(names, str) else tuple(names)
    return out


class _Row(gym.Env):
    """One env of RLinf's LIBERO env, inside a fastenv worker: a LIBERO task on fastenv's adapter.

    Its results travel by ``PipelineVectorEnv.call_at`` (RLinf's semantics: an env steps on after
    success until its chunk ends), so the spaces below only describe it to the vector env.
    """

    observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = spaces.Box(-1.0, 1.0, (7,), np.float32)

    def __init__(self, index: int, params: Mapping[str, Any] | None) -> None:
        self.index = index  # the row in its pool: the key of its value in each call
        self._adapter: Any = None
        self._spec: tuple | None = None
        if params is not None:  # else a row of a shared pool: its stage's env configures it
            self.rlinf_reconfigure({index: params})

    # Each call carries one value per env, keyed by env index: every env takes its own.
    def rlinf_reconfigure(self, by_env: Mapping[int, Mapping[str, Any]]) -> None:
        """RLinf's ``reconfigure``: a new task's env; the same task's is kept (reset in place)."""
        from fastenv.backends.libero import LiberoAdapter, LiberoTask

        params = dict(by_env[self.index])
        seed = params.pop("seed")
        bddl = params.pop("bddl_file_name")
        args = check_init_params(params)
        cameras = args["camera_names"]
        spec = (bddl, args["camera_heights"], args["camera_widths"], cameras)
        if spec != self._spec:
            if self._adapter is not None:
                self._adapter.close()
                self._adapter = None
            keys = [f"{cam}_image" for cam in cameras] + list(STATE_KEYS)
            task = LiberoTask("", -1, bddl, None, "")
            self._adapter = LiberoAdapter(task, keys=keys, camera_size=(args["camera_heights"], args["camera_widths"]))
            self._spec = spec
        self.horizon, self.ignore_done = int(args["horizon"]), bool(args["ignore_done"])
        self._seed = seed
        self._reset_pending = True
        self._timestep = 0

    def rlinf_seed(self, by_env: Mapping[int, int | None]) -> None:
        self._seed = by_env[self.index]  # LIBERO's env.seed seeds the placements of the next reset

    def rlinf_reset(self) -> None:
        # RLinf puts an init state right after (but LIBERO-plus): the reset happens with it.
        self._reset_pending = True

    def rlinf_set_init_state(self, by_env: Mapping[int, np.ndarray]) -> None:
        self._reset(by_env[self.index])

    def _reset(self, state: np.ndarray | None) -> None:
        options = None if state is None else {"init_state": state}
        rng = np.random.default_rng(self._seed)
        self._adapter.reset(seed=self._seed, options=options, rng=rng)
        self._reset_pending = False
        self._timestep = 0

    def rlinf_run(self, by_env: Mapping[int, np.ndarray]) -> tuple[list[float], list[bool], dict[str, np.ndarray]]:
        """The env's actions as sub-steps, observed after the last: (rewards, successes, obs)."""
        if self._reset_pending:
            self._reset(None)
        rewards, dones = [], []
        for action in by_env[self.index]:
            if not self.ignore_done and self._timestep >= self.horizon:
                raise ValueError("executing action in terminated episode")  # robosuite's own check and words
            self._timestep += 1
            reward, success, _, _ = self._adapter.substep(action)
            rewards.append(reward)
            dones.append(success)
        return rewards, dones, self._adapter.observe()

    def fastenv_fast_paths(self) -> dict[str, bool] | None:
        return None if self._adapter is None else {str(k): bool(v) for k, v in self._adapter.fast_paths().items()}

    def step(self, action: Any) -> Any:
        raise RuntimeError("an RLinf row is stepped through LiberoEnv (chunk_step / step)")

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def close(self) -> None:
        if self._adapter is not None:
            self._adapter.close()
            self._adapter = None


class _Rows:
    """RLinf's ``ReconfigureSubprocEnv`` interface over fastenv's workers: one stage's envs.

    ``run_chunk`` steps each env's actions at once; the ``step`` calls RLinf's code makes next,
    with the same actions, are then answered from those results, without a simulator call: an
    observation where the chunk ended, ``None`` before. A ``step`` with nothing queued is one
    observed sub-step in the workers.

    Built from ``params``, it has a pool of workers of its own; built by ``_Pool.stage``, its envs
    are rows ``rows`` of a pool shared with the other stages (RLinf's env i is row ``rows[i]``).
    """

    def __init__(
        self,
        params: Sequence[Mapping[str, Any]] | None = None,
        *,
        num_workers: int | None = None,
        step_timeout: float = 600.0,
        pool: _Pool | None = None,
        rows: Sequence[int] | None = None,
    ) -> None:
        if pool is None:
            from fastenv.vector import PipelineVectorEnv

            if params is None:
                raise ValueError("_Rows needs the envs' params, or a pool and its rows")
            fns = [functools.partial(_Row, i, dict(p)) for i, p in enumerate(params)]
            self.envs = PipelineVectorEnv(fns, num_workers=num_workers, step_timeout=step_timeout, progress=False)
            self._rows = list(range(len(fns)))
        else:
            self.envs = pool.envs
            self._rows = [int(r) for r in rows or ()]
        self._pool = pool
        self.stage: int | None = None  # its pipeline stage, in a shared pool
        self.env_num = len(self._rows)
        self._queue: list[collections.deque] = [collections.deque() for _ in range(self.env_num)]
        self.closed = False

    def __len__(self) -> int:
        return self.env_num

    @property
    def worker_pids(self) -> list[int]:
        """The process ids of the workers these envs live on (a shared pool's: every stage's)."""
        return self.envs.worker_pids

    def _ids(self, id: Any) -> list[int]:
        if id is None:
            return list(range(self.env_num))
        return [int(id)] if np.isscalar(id) else [int(i) for i in id]

    def _call(self, ids: list[int], name: str, values: Sequence[Any] | None = None) -> tuple[Any, ...]:
        """``name`` on RLinf's envs ``ids`` (each given its value of ``values``), in their rows of the pool."""
        rows = [self._rows[i] for i in ids]
        if values is None:
            return self.envs.call_at(rows, name)
        return self.envs.call_at(rows, name, dict(zip(rows, values)))

    def reconfigure_env_fns(self, env_fns: Sequence[Mapping[str, Any]], id: Any = None) -> None:
        self._call(self._ids(id), "rlinf_reconfigure", env_fns)

    def seed(self, seed: Any = None) -> list[None]:
        ids = self._ids(None)
        if seed is None or isinstance(seed, (int, np.integer)):  # RLinf's vector env: env i gets seed + i
            seeds = [None if seed is None else int(seed) + i for i in ids]
        else:
            seeds = list(seed)
        self._call(ids, "rlinf_seed", seeds)
        return [None] * len(ids)

    def reset(self, id: Any = None, **kwargs: Any) -> None:
        ids = self._ids(id)
        self._drop(ids)
        self._call(ids, "rlinf_reset")

    def set_init_state(self, init_state: Sequence[np.ndarray], id: Any = None) -> None:
        self._call(self._ids(id), "rlinf_set_init_state", init_state)

    def run_chunk(self, actions: np.ndarray, id: Any = None) -> None:
        """Step env ``id[j]`` through ``actions[j]`` (K actions) now; queue what each step returns."""
        ids = self._ids(id)
        if any(self._queue[i] for i in ids):
            raise RuntimeError("a chunk is already queued for these envs: its steps were not all taken")
        results = self._call(ids, "rlinf_run", actions)
        for i, row_actions, (rewards, dones, obs) in zip(ids, actions, results):
            last = len(rewards) - 1
            for k, (reward, done) in enumerate(zip(rewards, dones)):
                self._queue[i].append((row_actions[k], obs if k == last else None, reward, done))

    def step(self, action: Any, id: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        ids = self._ids(id)
        action = np.asarray(action)
        queued = [bool(self._queue[i]) for i in ids]
        if any(queued):
            if not all(queued):
                raise RuntimeError(f"envs {[i for i, q in zip(ids, queued) if not q]} have no queued step while others do")
            entries = [self._queue[i].popleft() for i in ids]
            for i, row, entry in zip(ids, action, entries):
                if row.dtype != entry[0].dtype or not np.array_equal(row, entry[0]):
                    raise RuntimeError(f"env {i} was stepped with an action other than the one its chunk ran")
        else:
            results = self._call(ids, "rlinf_run", [action[j][None] for j in range(len(ids))])
            entries = [(None, obs, rewards[0], dones[0]) for rewards, dones, obs in results]
        obs = np.empty(len(ids), dtype=object)
        obs[:] = [entry[1] for entry in entries]
        rewards = np.stack([entry[2] for entry in entries])
        dones = np.stack([entry[3] for entry in entries])
        # LIBERO's step info is empty; RLinf's vector env adds each env's id (and stacks the dicts).
        return obs, rewards, dones, np.stack([{"env_id": i} for i in ids])

    def set_camera_rendering(self, enabled: bool, id: Any = None) -> None:
        """RLinf main's ``skip_intermediate_renders`` turns the cameras off inside a chunk: fastenv's
        workers render a chunk's last sub-step only anyway, so there is nothing to switch."""

    def pending(self) -> int:
        return sum(len(q) for q in self._queue)

    def check_drained(self, where: str) -> None:
        left = self.pending()
        if left:
            self._drop(range(self.env_num))
            raise RuntimeError(
                f"RLinf's {where} took fewer steps than fastenv ran ahead ({left} left): this RLinf version "
                "steps other than fastenv's drop-in expects; use RLinf's own LiberoEnv and report it"
            )

    def _drop(self, ids: Any) -> None:
        for i in ids:
            self._queue[i].clear()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._pool is None:
            self.envs.close()
        else:
            self._pool.release(self)


class _Pool:
    """One pool of fastenv workers for all pipeline stages of an RLinf env worker (the hybrid partition).

    Stage k's env i is row ``k * num_envs + i``; row r lives on worker ``r % W``, so every stage
    is spread over all W workers and each worker holds a slice of every stage. The rows start
    empty: each stage's ``LiberoEnv`` builds its envs in them (``_Rows.reconfigure_env_fns``).
    The workers stop when every stage's envs are closed.

    W defaults to the most workers, up to the CPU count, that split a stage evenly (RLinf steps
    one stage at a time, so more would wait); a W of one's own must divide the pool's rows.
    """

    def __init__(self, stages: int, num_envs: int, *, num_workers: int | None = None, step_timeout: float = 600.0) -> None:
        from fastenv.vector import PipelineVectorEnv
        from fastenv.vector.pipeline import default_num_workers

        self.stages, self.num_envs = int(stages), int(num_envs)
        rows = self.stages * self.num_envs
        if num_workers is None:
            num_workers = default_num_workers(rows, self.stages)
        elif rows % num_workers:
            raise ValueError(
                f"fastenv.num_workers={num_workers} must divide the shared pool's {rows} envs "
                f"({self.stages} pipeline stages of {self.num_envs}); or set fastenv.pool: per_stage"
            )
        fns = [functools.partial(_Row, r, None) for r in range(rows)]
        self.envs = PipelineVectorEnv(fns, num_workers=num_workers, step_timeout=step_timeout, progress=False)
        self._given: set[int] = set()
        self._open: set[int] = set()

    @property
    def num_workers(self) -> int:
        return self.envs.num_workers

    def stage(self, k: int) -> _Rows:
        """Stage ``k``'s envs, as RLinf's vector env (once per stage)."""
        if not 0 <= k < self.stages or k in self._given:
            raise RuntimeError(f"stage {k} of a shared pool of {self.stages} stages was asked for again, or does not exist")
        self._given.add(k)
        self._open.add(k)
        rows = _Rows(pool=self, rows=range(k * self.num_envs, (k + 1) * self.num_envs))
        rows.stage = k
        return rows

    def release(self, rows: _Rows) -> None:
        self._open.discard(getattr(rows, "stage", -1))
        if not self._open and len(self._given) == self.stages:
            self.close()

    def close(self) -> None:
        self.envs.close()


def _as_numpy(actions: Any) -> np.ndarray:
    if hasattr(actions, "detach"):  # RLinf's step: ``actions.detach().cpu().numpy()``
        return actions.detach().cpu().numpy()
    return np.asarray(actions)


def _rlinf_libero_env() -> type:
    return require("rlinf.envs.libero.libero_env", "rlinf", "RLinf (rlinf) with its LIBERO env").LiberoEnv


@functools.cache
def _env_class() -> type:
    class LiberoEnv(_rlinf_libero_env()):  # type: ignore[misc]
        """RLinf's ``LiberoEnv`` (same constructor, config keys and methods) on fastenv.

        One config key of its own, optional: ``fastenv: {num_workers: N, pool: shared}``
        (``check_options``). Built directly, it has a pool of workers of its own (default: one
        worker per CPU, at most one per env); built by fastenv's ``EnvWorker``, its stage's rows
        of the pool the worker's stages share (``pool: per_stage``: a pool of its own).

        Examples:
            >>> env = LiberoEnv(cfg, num_envs=4, seed_offset=0, total_num_processes=1, worker_info=None)
            >>> obs, infos = env.reset()
            >>> obs_list, rewards, terminations, truncations, infos_list = env.chunk_step(actions)
        """

        def __init__(self, *args: Any, fastenv_rows: _Rows | None = None, **kwargs: Any) -> None:
            # ``fastenv_rows``: this env's rows of a pool shared by an env worker's stages (its EnvWorker gives them)
            self._fastenv_rows = fastenv_rows
            # sub-steps stepped and observations made (each renders every camera), its rows' fast paths
            self._fastenv_record = _record()
            super().__init__(*args, **kwargs)
            self._fastenv_record.update(envs=self.num_envs, cameras=_cameras(self))

        def _fastenv_count(self, envs: int, sub_steps: int) -> None:
            record = getattr(self, "_fastenv_record", None)  # None: RLinf's own __init__ still running
            if record is not None:
                record["steps"][0] += envs * sub_steps
                record["steps"][1] += envs

        def _fastenv_note_paths(self) -> None:
            env = getattr(self, "env", None)
            if isinstance(env, _Rows) and not env.closed and getattr(self, "_fastenv_record", None) is not None:
                self._fastenv_record["paths"] = [p for p in env._call(env._ids(None), "fastenv_fast_paths") if p]

        def _init_env(self) -> None:
            if self._fastenv_rows is None:
                self.env = _Rows(self.get_env_fn_params(), num_workers=_cfg_options(self.cfg)["num_workers"])
            else:
                if len(self._fastenv_rows) != self.num_envs:
                    raise ValueError(f"{len(self._fastenv_rows)} rows of the shared pool for {self.num_envs} envs")
                self.env = self._fastenv_rows
                self.env.reconfigure_env_fns(self.get_env_fn_params())  # builds this stage's envs in their rows

        def _reconfigure(self, reset_state_ids: Any, env_idx: Any) -> None:
            super()._reconfigure(reset_state_ids, env_idx)
            zero = np.zeros((len(env_idx), SETTLE_STEPS, 7))  # RLinf's reset steps these next
            if self.cfg.reset_gripper_open:
                zero[..., -1] = -1
            self.env.run_chunk(zero, env_idx)
            self._fastenv_count(len(env_idx), SETTLE_STEPS)

        def reset(self, env_idx: Any = None, reset_state_ids: Any = None) -> Any:
            if getattr(self, "_fastenv_record", {"steps": [0]})["steps"][0]:
                self._fastenv_note_paths()  # after an episode: the paths it ran on
            out = super().reset(env_idx=env_idx, reset_state_ids=reset_state_ids)
            self.env.check_drained("reset")
            return out

        def chunk_step(self, chunk_actions: Any) -> Any:
            actions = _as_numpy(chunk_actions)
            self.env.run_chunk(actions)
            self._fastenv_count(actions.shape[0], actions.shape[1])
            out = super().chunk_step(chunk_actions)
            self.env.check_drained("chunk_step")
            return out

        def _wrap_obs(self, obs_list: Any) -> Any:
            if any(obs is None for obs in obs_list):
                return None  # a sub-step inside a chunk: not observed
            return super()._wrap_obs(obs_list)

        def fastenv_tally(self) -> Tally:
            """Camera images RLinf's own env would have rendered (every camera at every sub-step),
            those rendered (every camera once a chunk), and the fast paths of this env's rows."""
            self._fastenv_note_paths()
            return _tally([self._fastenv_record])

        def close(self) -> None:
            env = getattr(self, "env", None)
            if isinstance(env, _Rows):
                record = getattr(self, "_fastenv_record", None)
                if record is not None and record["steps"][0] and not record["said"]:
                    tally = self.fastenv_tally()
                    record["said"] = True
                    tally.say(f"RLinf's LiberoEnv ({self.num_envs} envs)")
                env.close()

    LiberoEnv.__module__ = __name__
    return LiberoEnv


_RECORDS: list[dict[str, Any]] = []  # each fastenv LiberoEnv's counts in this process (kept past the env)


def _cameras(env: Any) -> int:
    """The cameras each observation of ``env`` renders (its init_params' camera_names)."""
    try:
        return len(check_init_params(env.cfg.get("init_params", None) or {})["camera_names"])
    except (TypeError, ValueError, AttributeError):
        return len(STOCK_CAMERAS)


def _record() -> dict[str, Any]:
    """A LiberoEnv's counts: RLinf's env worker never closes its envs, so what they did not render
    is said when the process ends, for those not closed (one line for them all)."""
    if not _RECORDS:
        atexit.register(_say_unsaid)
    record = {"steps": [0, 0], "paths": [], "envs": 0, "cameras": None, "said": False}
    _RECORDS.append(record)
    return record


def _tally(records: Sequence[dict[str, Any]]) -> Tally:
    tally = Tally()
    for record in records:
        cameras = record["cameras"] or len(STOCK_CAMERAS)
        tally.add_images(record["steps"][0] * cameras, record["steps"][1] * cameras)
        tally.add_paths(record["paths"])
    return tally


def _say_unsaid() -> None:
    records = [r for r in _RECORDS if r["steps"][0] and not r["said"]]
    for record in records:
        record["said"] = True
    if records:
        _tally(records).say(f"RLinf's LiberoEnv ({sum(r['envs'] for r in records)} envs in this process)")


_WORKERS = {"EnvWorker": "rlinf.workers.env.env_worker", "AsyncEnvWorker": "rlinf.workers.env.async_env_worker"}


@functools.cache
def _worker_class(name: str) -> type:
    base = getattr(require(_WORKERS[name], "rlinf", "RLinf's env worker"), name)

    def _setup_env_and_wrappers(self: Any, env_cls: type, env_cfg: Any, num_envs_per_stage: int) -> Any:
        cls = fastenv_env_cls(env_cls)
        if cls is not env_cls:
            announce(f"RLinf's {name} (fastenv.integrations.rlinf)",
                     "its LIBERO envs are fastenv's (RLinf's LiberoEnv: the same EnvOutput), in a pool of worker processes; "
                     "cameras render once a chunk; each LiberoEnv says at its close what it did not render")
        options = _cfg_options(env_cfg) if cls is not env_cls else None
        if options is None or options["pool"] == "per_stage":
            return base._setup_env_and_wrappers(self, cls, env_cfg, num_envs_per_stage)
        # One pool for every stage: RLinf builds stage k's env k-th, and it gets the pool's stage k.
        pool = _Pool(self.stage_num, num_envs_per_stage, num_workers=options["num_workers"])
        stages = iter(range(self.stage_num))

        def make(**kwargs: Any) -> Any:
            stage = next(stages, None)
            if stage is None:
                raise RuntimeError(f"RLinf built more LIBERO envs than its {self.stage_num} pipeline stages: set fastenv.pool: per_stage")
            return cls(**kwargs, fastenv_rows=pool.stage(stage))

        try:
            return base._setup_env_and_wrappers(self, make, env_cfg, num_envs_per_stage)
        except BaseException:
            pool.close()
            raise

    return type(name, (base,), {
        "__module__": __name__,
        "__qualname__": name,
        "__doc__": f"RLinf's ``{name}``, building fastenv's LIBERO env where RLinf's config says ``env_type: libero``.",
        "_setup_env_and_wrappers": _setup_env_and_wrappers,
    })


def fastenv_env_cls(env_cls: type) -> type:
    """fastenv's class in place of RLinf's ``LiberoEnv``; any other env class unchanged."""
    return _env_class() if env_cls is _rlinf_libero_env() else env_cls


def __getattr__(name: str) -> Any:
    # The classes subclass RLinf's, so they exist only where RLinf is installed, built at first use.
    if name == "LiberoEnv":
        return _env_class()
    if name in _WORKERS:
        return _worker_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
