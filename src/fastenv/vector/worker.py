"""The worker process: holds a slice of envs, steps the ones it is told to, writes to shared memory.

Observations, actions, rewards and flags go through the shared block; commands and replies
through the worker's mailbox (``mailbox``: the common steps in shared memory, the rest pickled).
The envs are stepped by fastenv's executor with the vector env's autoreset mode, as Gymnasium's
vector envs step theirs: SAME_STEP resets a done env in the same step, its final observation
written to its row of the ``final_obs`` arrays; NEXT_STEP resets it instead of stepping it the next
time it is sent an action (which is not run); DISABLED never resets it (the caller does).
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from fastenv.core.arrays import put_rows, take_rows
from fastenv.core.batch import EnvBatch
from fastenv.core.executor import Executor
from fastenv.vector.mailbox import WorkerMailbox
from fastenv.vector.profiling import ProfileRequest, TimedBatch, Timings
from fastenv.vector.shared import (
    SharedArrays,
    leaf_items,
    leaf_specs,
    structure,
    unsupported_leaf,
    wide_dtype,
)

# Commands (main -> worker); replies (worker -> main) start with the same word, or "error".
STEP, RESET, CALL, SET_ATTR, ATTACH, CLOSE = "step", "reset", "call", "set_attr", "attach", "close"
READY, ENV, ERROR, STARTUP_ERROR, RESULT = "ready", "env", "error", "startup_error", "result"

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "LP_NUM_THREADS", "NUMEXPR_NUM_THREADS")


MAIN_GUARD_NOTE = "FASTENV_WORKER_NOTE"  # a file where a worker that cannot start says why
MAIN_GUARD_MESSAGE = (
    "fastenv's vector env starts its workers with 'spawn', which runs your script again in each worker: "
    "build the vector env (gym.make_vec, PipelineVectorEnv, make_vec...) under `if __name__ == \"__main__\":`"
)


def check_not_bootstrapping() -> None:
    """Refuse to start workers from inside a worker that is still importing the user's script.

    A spawned worker runs the main script's module-level code again; without the
    ``if __name__ == "__main__":`` guard that code builds another vector env there. The worker
    writes why to the file its parent named (``MAIN_GUARD_NOTE``) and exits quietly; the parent
    raises the one-line error.
    """
    import multiprocessing

    if not getattr(multiprocessing.current_process(), "_inheriting", False):
        return
    note = os.environ.get(MAIN_GUARD_NOTE)
    if note:
        with open(note, "w") as f:
            f.write(MAIN_GUARD_MESSAGE)
        os._exit(3)
    raise RuntimeError(MAIN_GUARD_MESSAGE)


class PickledFns:
    """Env constructors shipped to a worker with cloudpickle; a failure to unpickle them there is
    kept, with its traceback, and raised when the worker builds its envs (so the parent hears it)."""

    def __init__(self, fns: Sequence[Callable[[], gym.Env]]) -> None:
        self.fn = list(fns)

    def __getstate__(self) -> bytes:
        import cloudpickle

        return cloudpickle.dumps(self.fn)

    def __setstate__(self, blob: bytes) -> None:
        import pickle

        try:
            self.fn = pickle.loads(blob)
            self.error = None
        except Exception as exc:  # noqa: BLE001  (reported by the worker, see start_core)
            self.fn, self.error = None, (f"{type(exc).__name__}: {exc}", traceback.format_exc())


class ByValue:
    """``value`` sent through a plain pickle (multiprocessing's) as cloudpickle pickles it; it
    unpickles to ``value`` itself. A class the worker rebuilt from the constructors' pickles (a
    space subclass of the user's script, or of a module pickled by value) is not the one its
    module would import, so a plain pickle cannot send it back by name."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> tuple:
        import cloudpickle

        return (cloudpickle.loads, (cloudpickle.dumps(self.value),))


def env_attr(env: gym.Env, name: str, default: Any = None) -> Any:
    """An attribute found anywhere in the wrapper stack, or ``default``."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return default


class WorkerCore:
    """The envs of one worker and what it does with them, apart from any transport.

    The envs are one batch stepped by fastenv's executor, so a worker gives exactly the semantics
    of ``ActionChunk`` and of the batched backends; ``autoreset_mode`` is what it does with an env
    whose episode ended (Gymnasium's ``AutoresetMode``: see the module). ``rows`` maps each local
    env to its row in the output arrays.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        env_ids: Sequence[int],
        rows: Sequence[int],
        autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
    ):
        self.env_ids = [int(i) for i in env_ids]
        self.local = {gid: j for j, gid in enumerate(self.env_ids)}
        self.rows = [int(r) for r in rows]
        self.envs = [fn() for fn in env_fns]
        self.autoreset_mode = AutoresetMode(autoreset_mode)
        self.batch, self.executor = batch_executor(self.envs, autoreset=self.autoreset_mode is AutoresetMode.SAME_STEP)
        # NEXT_STEP: the envs whose episode ended at their last step, which their next step resets.
        self.next_step = self.autoreset_mode is AutoresetMode.NEXT_STEP
        self.to_reset = np.zeros(len(self.envs), dtype=bool)
        # The seed of an env's next reset when it is not the caller's: a fresh env of a replaced
        # worker (NEXT_STEP and DISABLED reset it after its restart is reported, not with it).
        self.reset_seeds: list[int | None] = [None] * len(self.envs)
        self._index = [np.array([j]) for j in range(len(self.envs))]  # each env as a batch of one row
        self._index_cache: dict[tuple[int, ...], tuple[np.ndarray, list[int], Any]] = {}
        self.action_space = self.envs[0].action_space
        # A space the arrays cannot hold is described all the same: the vector env refuses it
        # with a ValueError (PipelineVectorEnv._setup_spaces), and never steps these envs.
        laid_out = unsupported_leaf(self.action_space) is None
        self.action_dtypes = {path: dtype for path, _, dtype in leaf_specs(self.action_space, "actions")} if laid_out else {}
        plain = not isinstance(self.action_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self._action_dtype = self.action_dtypes["actions"] if plain and laid_out else None  # one leaf: cast without walking

    def describe(self, pipeline_stages: int) -> dict[str, Any]:
        """Spaces and capabilities, after rescaling shared physics for the pipeline."""
        env = self.envs[0]
        for other in self.envs[1:]:
            if other.observation_space != env.observation_space or other.action_space != env.action_space:
                raise ValueError(
                    "all envs of a vector env must have the same spaces; got "
                    f"{other.observation_space} / {other.action_space} and {env.observation_space} / {env.action_space}"
                )
        shared = bool(env_attr(env, "shared_physics", False))
        scaled = False
        if shared and pipeline_stages > 1:
            # Every stage's step advances the whole physics world, so each env sees S physics
            # steps per action of its own: divide the step so its simulated time stays the same.
            for e in self.envs:
                e.get_wrapper_attr("set_physics_dt")(e.get_wrapper_attr("base_physics_dt") / pipeline_stages)
            scaled = True
        return {
            "observation_space": env.observation_space,
            "action_space": env.action_space,
            "metadata": dict(env.metadata),
            "render_mode": env.render_mode,
            "spec": env.spec,
            "shared_physics": shared,
            "physics_scaled": scaled,
        }

    def attach(self, obs: Any, final_obs: Any, actions: Any, rewards: np.ndarray, terminations: np.ndarray, truncations: np.ndarray) -> None:
        self.obs, self.final_obs, self.actions = obs, final_obs, actions
        self.rewards, self.terminations, self.truncations = rewards, terminations, truncations

    def step(self, gids: Sequence[int], dtypes: dict[str, Any] | None = None, *, noteworthy: bool = False) -> list[tuple[int, dict, dict | None]]:
        """Step envs ``gids`` with their action rows, as one batch (autoreset where done).

        ``dtypes`` says per action leaf how the caller gave it (see ``action_rows``). Returns
        (gid, info, final_info or None) per env, or with ``noteworthy`` only for the envs with an
        info or an ended episode (what a reply to a whole batch carries). When an env raises, the
        exception goes on and ``batch.failed_row`` says which env it was.
        """
        local, rows, index = self._indices(gids)
        self.batch.failed_row = -1
        if self.next_step and self.to_reset[local].any():
            return self._step_or_reset(gids, dtypes, noteworthy)
        out = self.executor.step(local, self.action_rows(index, dtypes))
        self.rewards[index] = out.rewards
        self.terminations[index] = out.terminated
        self.truncations[index] = out.truncated
        obs = self.obs
        if isinstance(obs, np.ndarray):  # one leaf: the rows in one assignment (put_rows walks structures)
            obs[index] = out.obs
        else:
            for row, o in zip(rows, out.obs):
                put_rows(obs, row, o)
        if not self.executor.autoreset:  # an ended env keeps its last observation: no final one
            if self.next_step:
                self.to_reset[local] = out.ended
            return self._entries(gids, out.infos, None, noteworthy)
        ended = out.ended.nonzero()[0].tolist() if np.count_nonzero(out.ended) else []
        for i in ended:
            put_rows(self.final_obs, rows[i], out.final_obs[i])
        infos = out.infos
        if not noteworthy:
            finals: list[dict | None] = [None] * len(rows)
            for i in ended:
                finals[i] = out.final_infos[i]
            return list(zip(gids, infos, finals))
        if not ended and not any(infos):  # the common step: nothing to report
            return []
        return [(gid, infos[i], out.final_infos[i] if i in ended else None) for i, gid in enumerate(gids) if infos[i] or i in ended]

    @staticmethod
    def _entries(gids: Sequence[int], infos: list[dict], finals: list[dict | None] | None, noteworthy: bool) -> list[tuple[int, dict, dict | None]]:
        """``step``'s replies for envs without a final info: all, or the ``noteworthy`` ones (an info)."""
        if not noteworthy:
            return list(zip(gids, infos, finals or [None] * len(infos)))
        return [(gid, info, None) for gid, info in zip(gids, infos) if info]

    def _step_or_reset(self, gids: Sequence[int], dtypes: dict[str, Any] | None, noteworthy: bool) -> list[tuple[int, dict, dict | None]]:
        """A NEXT_STEP step of ``gids`` some of which ended their episode at their last step: those
        are reset instead (their actions are not run) and report the reset's observation and info,
        reward 0 and no flag, as Gymnasium's vector envs do; the others step."""
        gids = list(gids)
        resetting = [gid for gid in gids if self.to_reset[self.local[gid]]]
        stepping = [gid for gid in gids if not self.to_reset[self.local[gid]]]
        entries: dict[int, tuple[int, dict, dict | None]] = {}
        if stepping:
            for entry in self.step(stepping, dtypes_for(dtypes, gids, stepping), noteworthy=False):
                entries[entry[0]] = entry
        local, rows, index = self._indices(resetting)
        seeds = [self.reset_seeds[j] for j in local.tolist()]
        obs, infos = self.executor.reset(local, seeds, None)
        for row, o in zip(rows, obs):
            put_rows(self.obs, row, o)
        self.rewards[index] = 0.0
        self.terminations[index] = False
        self.truncations[index] = False
        self.to_reset[local] = False
        for j in local.tolist():
            self.reset_seeds[j] = None
        for gid, info in zip(resetting, infos):
            entries[gid] = (gid, info, None)
        return self._entries(gids, [entries[gid][1] for gid in gids], None, noteworthy)

    def _indices(self, gids: Sequence[int]) -> tuple[np.ndarray, list[int], Any]:
        """(local rows, output rows, their index) of ``gids``: a slice where the rows are evenly spaced.

        Kept per group of envs stepped together (stages, the whole worker, single envs), so a
        step builds no index arrays.
        """
        key = tuple(gids)
        found = self._index_cache.get(key)
        if found is None:
            local = [self.local[gid] for gid in key]
            rows = [self.rows[j] for j in local]
            stride = rows[1] - rows[0] if len(rows) > 1 else 1
            if stride > 0 and rows == list(range(rows[0], rows[-1] + 1, stride)):
                index: Any = slice(rows[0], rows[-1] + 1, stride)  # a view: env i of worker w of W is row w + i*W
            else:
                index = np.array(rows)
            if len(self._index_cache) >= 4 * len(self.envs) + 16:  # arbitrary env_ids subsets: keep it bounded
                self._index_cache.clear()
            found = self._index_cache[key] = (np.array(local, dtype=np.int64), rows, index)
        return found

    def action_rows(self, rows: Any, dtypes: dict[str, Any] | None) -> Any:
        """The actions of ``rows`` exactly as the caller gave them, as SyncVectorEnv hands them on.

        The shared buffers hold every leaf in a wide dtype; ``dtypes`` maps a leaf's path to the
        caller's dtype when it is not the space's, or to the rows themselves (aligned with
        ``rows``) when the wide dtype could not hold them exactly. None: the space's dtypes.
        """
        if dtypes is None and self._action_dtype is not None:  # the hot path: one leaf, the space's dtype
            return self.actions[rows].astype(self._action_dtype)  # a copy: the buffer takes the next step's
        batch = take_rows(self.actions, rows)
        leaves = {}
        for path, leaf in leaf_items(self.action_space, batch, "actions"):
            given = None if dtypes is None else dtypes.get(path)
            if given is None:
                leaves[path] = leaf.astype(self.action_dtypes[path], copy=False)
            elif isinstance(given, np.dtype):
                leaves[path] = leaf.astype(given, copy=False)
            else:
                leaves[path] = given
        return structure(self.action_space, leaves, "actions")

    def reset_one(self, gid: int, seed: int | None, options: dict | None) -> dict:
        j = self.local[gid]
        row = self.rows[j]
        if seed is None:  # a fresh env of a replaced worker, not yet reset: seeded as its restart is
            seed = self.reset_seeds[j]
        obs, infos = self.executor.reset(self._index[j], [seed], options)
        self.to_reset[j] = False
        self.reset_seeds[j] = None
        put_rows(self.obs, row, obs[0])
        self.rewards[row] = 0.0
        self.terminations[row] = False
        self.truncations[row] = False
        return infos[0]

    def restart_one(self, gid: int, seed: int | None) -> dict:
        """A fresh env after a worker restart: the info of a step in which nothing ran.

        With SAME_STEP the env is reset now (its reset info comes first); with NEXT_STEP its next
        step resets it, with DISABLED the caller's reset does, seeded ``seed`` either way.
        """
        j = self.local[gid]
        null = self.executor.null_step_infos(self._index[j])[0]
        if self.executor.autoreset:
            return {**self.reset_one(gid, seed, None), **null}
        self.to_reset[j] = self.next_step
        self.reset_seeds[j] = seed
        return dict(null)

    def profile(self, action: str) -> dict[str, Any] | None:
        """The profiler: "start" times the executor's calls into the envs, "stop" ends that,
        "reset" starts over, "report" returns the timings so far."""
        timed = isinstance(self.executor.sim, TimedBatch)
        if action == "start" and not timed:
            self.timings = Timings()
            self.executor.sim = TimedBatch(self.batch, self.timings)
        elif action == "stop" and timed:
            self.executor.sim = self.batch
        elif action == "reset":
            self.timings = Timings()
            if timed:
                self.executor.sim = TimedBatch(self.batch, self.timings)
        elif action == "report":
            return getattr(self, "timings", Timings()).as_dict()
        return None

    def call(self, gids: Sequence[int], target: Any, args: tuple, kwargs: dict) -> list[Any]:
        """Call a method (or read an attribute) by name, or apply a function, on each env."""
        if isinstance(target, ProfileRequest):  # for the worker, not its envs: answered once
            return [self.profile(target.action)] + [None] * (len(gids) - 1)
        out = []
        for gid in gids:
            env = self.envs[self.local[gid]]
            if isinstance(target, str):
                attr = env.get_wrapper_attr(target)
                out.append(attr(*args, **kwargs) if callable(attr) else attr)
            else:  # a function shipped with cloudpickle (PipelineVectorEnv.apply)
                out.append(target.fn(env, *args, **kwargs))
        return out

    def set_attr(self, gids: Sequence[int], name: str, values: Sequence[Any]) -> None:
        for gid, value in zip(gids, values):
            self.envs[self.local[gid]].set_wrapper_attr(name, value)

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:  # closing must not hide the error that brought us here
                traceback.print_exc()
        self.envs = []


def batch_executor(envs: Sequence[gym.Env], autoreset: bool = True) -> tuple[EnvBatch, Executor]:
    """The envs as one batch under the executor, with same-step autoreset (or, ``autoreset=False``, none).

    An env whose outermost layer runs its actions through an executor of its own says so with
    ``batch_spec()`` (fastenv's ``ActionChunk``): ``(env below, owner, options)``. When every env
    says so with the same owner and options, this executor runs them over the envs below, so the
    envs of a worker take their sub-steps together: the same data (the executor is the same), and
    envs sharing one physics world advance it once per sub-step.
    """
    specs = []
    for env in envs:
        # the env's own class (a wrapper above that forwards attributes must not lend it ActionChunk's)
        spec = getattr(type(env), "batch_spec", None)
        specs.append(spec(env) if callable(spec) else None)
    first = specs[0]
    if first is not None and all(spec is not None and spec[1:] == first[1:] for spec in specs):
        _, owner, options = first
        batch = EnvBatch([spec[0] for spec in specs], owner=owner, skip_observations=options["skip_observations"])
        return batch, Executor(
            batch, chunk=options["chunk"], gamma=options["gamma"], autoreset=autoreset, episode_statistics=options["episode_statistics"]
        )
    batch = EnvBatch(envs)
    return batch, Executor(batch, autoreset=autoreset)


def limit_threads(threads: int | None) -> dict[str, str]:
    """Environment variables that cap a worker's native thread pools at ``threads``."""
    if threads is None:
        return {}
    return {name: str(threads) for name in THREAD_VARIABLES}


def start_core(
    env_fns_blob: Any,
    env_ids: Sequence[int],
    rows: Sequence[int],
    pipeline_stages: int,
    threads: int | None,
    autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
) -> tuple[WorkerCore, dict[str, Any]]:
    """Cap the threads, build the envs and describe them (any transport's worker starts so)."""
    if threads is not None:
        os.environ.update(limit_threads(threads))
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(threads)
    error = getattr(env_fns_blob, "error", None)
    if error is not None:
        raise RuntimeError(f"the env constructors could not be unpickled in the worker: {error[0]}\n{error[1]}")
    core = WorkerCore(env_fns_blob.fn, env_ids, rows, autoreset_mode)
    description = core.describe(pipeline_stages)
    description["pid"] = os.getpid()
    return core, description


def serve(core: WorkerCore, message: tuple, send: Callable[[tuple], None]) -> None:
    """Carry out one command, sending its replies (one per env for per-env steps)."""
    kind = message[0]
    if kind == STEP:
        _, cmd, gids, restarts, per_env, dtypes = message
        replies = []
        stepped = gids
        if restarts:
            for gid in gids:
                if gid in restarts:
                    try:
                        entry = (gid, core.restart_one(gid, restarts[gid]), None)
                    except Exception as exc:
                        send(error_message(cmd, [gid], exc))
                        continue
                    if per_env:
                        send((ENV, cmd, entry))
                    else:
                        replies.append(entry)
            stepped = [gid for gid in gids if gid not in restarts]
        # Envs sent by stage are stepped as one batch; envs sent one by one (dynamic batching)
        # are stepped one by one, each result sent as soon as it is there.
        for batch in ([gid] for gid in stepped) if per_env else ([stepped] if stepped else []):
            try:
                entries = core.step(batch, dtypes_for(dtypes, gids, batch), noteworthy=not per_env)
            except Exception as exc:  # every env of the batch fails: none has a result
                send(error_message(cmd, batch, exc, core))
                continue
            if per_env:
                send((ENV, cmd, entries[0]))
            else:
                replies += entries
        if not per_env:
            send((STEP, cmd, replies))
    elif kind == RESET:
        _, cmd, gids, seeds, options = message
        replies = []
        for gid, seed in zip(gids, seeds):
            try:
                replies.append((gid, core.reset_one(gid, seed, options), None))
            except Exception as exc:
                send(error_message(cmd, [gid], exc))
        send((RESET, cmd, replies))
    elif kind in (CALL, SET_ATTR):
        cmd = message[1]
        try:
            if kind == CALL:
                _, _, gids, target, args, kwargs = message
                send((RESULT, cmd, core.call(gids, target, args, kwargs)))
            else:
                _, _, gids, name, values = message
                core.set_attr(gids, name, values)
                send((RESULT, cmd, None))
        except Exception as exc:
            send(error_message(cmd, [None], exc))
    else:
        raise ValueError(f"unknown command {kind!r}")


def dtypes_for(dtypes: dict[str, Any] | None, gids: Sequence[int], batch: list[int]) -> dict[str, Any] | None:
    """A step command's action ``dtypes`` for ``batch``, part of its ``gids`` (rows sent along are cut to it)."""
    if dtypes is None or all(isinstance(given, np.dtype) for given in dtypes.values()):
        return dtypes
    position = {gid: i for i, gid in enumerate(gids)}
    index = [position[gid] for gid in batch]
    return {path: given if isinstance(given, np.dtype) else given[index] for path, given in dtypes.items()}


def error_message(cmd: int, gids: Sequence[int | None], exc: BaseException, core: WorkerCore | None = None) -> tuple:
    """(ERROR, cmd, envs that have no result, text, traceback, env that raised, its builtin class's name)."""
    origin = gids[0]
    if core is not None and 0 <= core.batch.failed_row < len(core.env_ids):
        origin = core.env_ids[core.batch.failed_row]
    text = f"{type(exc).__name__}: {exc}"
    return (ERROR, cmd, list(gids), text, "".join(traceback.format_exception(exc)), origin, builtin_class(exc))


def builtin_class(exc: BaseException) -> str:
    """The name of the builtin exception class ``exc`` is an instance of, the most derived one
    (a class of the user's may not unpickle in the main process; its builtin base does)."""
    return next(c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c)


def worker_main(
    env_fns_blob: Any,
    env_ids: list[int],
    conn: Any,
    pipeline_stages: int,
    threads: int | None,
    spin_wait: float,
    semaphores: tuple[Any, Any, Any],
    autoreset_mode: AutoresetMode = AutoresetMode.SAME_STEP,
) -> None:
    """Entry point of a worker process (spawned: envs are created here, never forked).

    ``semaphores`` count the messages to this worker and from it, and wake the vector env
    (see ``mailbox``); the handshake (ready or startup error) goes through ``conn`` alone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when workers stop
    try:
        core, description = start_core(env_fns_blob, env_ids, env_ids, pipeline_stages, threads, autoreset_mode)
        conn.send((READY, ByValue(description)))  # the parent receives the description itself
    except BaseException as exc:  # report, then exit: the main process raises with this text
        conn.send((STARTUP_ERROR, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        conn.close()
        return
    shared: SharedArrays | None = None
    mailbox = WorkerMailbox(conn, *semaphores, spin_wait, STEP, ENV)
    try:
        while True:
            try:
                message = mailbox.receive()
            except (EOFError, OSError):  # the main process has gone
                break
            if message is None or message[0] == CLOSE:
                break
            if message[0] == ATTACH:
                _, handle, obs_space, act_space, (commands, replies, index) = message
                shared = SharedArrays.attach(handle)
                core.attach(*buffers(shared.arrays, obs_space, act_space))
                mailbox.attach(shared.arrays[commands][index], shared.arrays[replies][index])
            else:
                serve(core, message, mailbox.send)
    finally:
        core.close()
        if shared is not None:
            core.attach(None, None, None, None, None, None)
            mailbox.attach(None, None)
            shared.close()
        try:
            conn.close()
        except OSError:
            pass


def buffers(arrays: dict[str, np.ndarray], obs_space: Any, act_space: Any) -> tuple[Any, ...]:
    """(obs, final_obs, actions, rewards, terminations, truncations) views of named arrays."""
    return (
        structure(obs_space, arrays, "obs"),
        structure(obs_space, arrays, "final_obs"),
        structure(act_space, arrays, "actions"),
        arrays["rewards"],
        arrays["terminations"],
        arrays["truncations"],
    )


def array_specs(obs_space: Any, act_space: Any) -> list[tuple[str, tuple[int, ...], np.dtype]]:
    """Every array a vector env moves, laid out from its spaces (actions in their ``wide_dtype``)."""
    return (
        leaf_specs(obs_space, "obs")
        + leaf_specs(obs_space, "final_obs")
        + [(path, shape, wide_dtype(dtype)) for path, shape, dtype in leaf_specs(act_space, "actions")]
        + [("rewards", (), np.dtype(np.float64)), ("terminations", (), np.dtype(np.bool_)), ("truncations", (), np.dtype(np.bool_))]
    )
