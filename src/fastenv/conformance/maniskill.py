"""ManiSkill conformance: fastenv's CPU env against the stock ManiSkill env, over ManiSkill's task registry.

For every registered task, obs "state" and "rgb" (every camera's rgb, ``CAMERA`` px), chunk 1 and
``CHUNK``: fastenv's ``make_cpu_env`` and the stock ``gym.make(task, obs_mode=...,
sim_backend="physx_cpu", sensor_configs=..., max_episode_steps=...)``, reset with the same seeds and
stepped with the same random actions, the stock env one sub-action at a time. Episodes last
``EPISODE`` sub-steps, so with ``CHUNK`` the first ends inside a chunk; two episodes run, each after
a seeded reset. Compared exactly (``Comparer.equal``): after each reset the simulator state, the
observation and the info; per chunk ``chunk_steps``, terminated/truncated, the full simulator state
(``get_state``: every pose, velocity and joint position), each sub-step's reward (``chunk_rewards``)
and their sum, the observation at the chunk's end or where the episode ended (its final
observation), and every key of the stock info (``success``, ``fail``, ``elapsed_steps``, the task's
own). A task without a plain "rgb" mode is compared in its mode with rgb (SO100GraspCube:
"rgb+segmentation", fastenv keeping rgb only); ``OVERLAY_CASES`` add its green screen.

``VECTOR_CASES`` run fastenv's vector env (2 envs in one worker process, same-step autoreset,
unseeded autoresets under ``enhanced_determinism``) against 2 stock envs: observations, final
observations and infos, rewards, flags.

Each env runs on its own copy of torch's and numpy's global generators (``_GlobalStreams``), all
started alike: some tasks draw from them, unseeded, on every step (SO100GraspCube's camera poses),
and two envs in one process would otherwise take turns on one stream.

Rendering: SAPIEN on Mesa's lavapipe renders a state to the same pixels every time (every rgb case
of the sweep compares two envs' pixels exactly and agrees), so rgb is compared pixel for pixel.
Where anything differs, two fresh stock envs replay the stock env's calls, and the failure says
whether the stock env repeats itself there (states, then pixels): if it does not, the difference
is the simulator's or the renderer's, not fastenv's.

Tasks whose assets are not downloaded, that ask for a download while building, or that the stock
env cannot build or run here, are skipped with the reason (the stock error verbatim); so are tasks
whose actions fastenv's chunks do not take (Dict actions of multi-robot tasks), said as such.
fastenv failing where the stock env runs is a failure, never a skip.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fastenv.conformance import Case, Comparer, Mismatch, Skip

BACKEND = "maniskill"
OBS_MODES = ("state", "rgb")
CHUNKS = (1, 4)
CHUNK = 4
CAMERA = 32  # px per side: small, but every capture still goes through SAPIEN's renderer
EPISODE = 6  # sub-steps per episode: with chunks of 4 the first episode ends inside the second chunk
EPISODES = 2
SEEDS = (11, 12, 13)
VECTOR_ENVS = 2
VECTOR_CASES = (("PickCube-v1", "state"), ("PushCube-v1", "rgb"))
OVERLAY_CASES = ("SO100GraspCube-v1",)  # digital twins whose rgb is green-screened over an image (optional there)


def tasks() -> list[str]:
    """Every task ManiSkill registers, sorted."""
    from fastenv.backends.maniskill import maniskill_registry

    return sorted(maniskill_registry())


def cases(tasks: Sequence[str] | None = None) -> list[Case]:
    """Every case of ``tasks`` (default: every task ManiSkill registers), in a stable order."""
    from fastenv.backends.maniskill import maniskill_registry

    registered = maniskill_registry()
    if tasks is None:
        tasks = sorted(registered)
    else:
        if isinstance(tasks, str):
            raise ValueError(f"tasks must be a list of ManiSkill task ids, got the string {tasks!r}")
        unknown = [t for t in tasks if t not in registered]
        if unknown:
            raise ValueError(f"unknown ManiSkill task(s) {unknown}; known: {sorted(registered)}")
    out = [
        Case(BACKEND, task, obs, (("chunk", chunk),))
        for task in tasks
        for obs in OBS_MODES
        for chunk in CHUNKS
    ]
    out += [Case(BACKEND, task, obs, (("chunk", CHUNK), ("envs", VECTOR_ENVS))) for task, obs in VECTOR_CASES if task in tasks]
    out += [Case(BACKEND, task, "rgb", (("chunk", CHUNK), ("overlay", "noise"))) for task in OVERLAY_CASES if task in tasks]
    return out


def check(case: Case, cmp: Comparer) -> None:
    """Run ``case`` through fastenv and the stock env; ``Mismatch`` at the first difference, ``Skip`` if it cannot run here."""
    if case.backend != BACKEND:
        raise ValueError(f"not a ManiSkill case: {case.id}")
    if case.keys not in OBS_MODES:
        raise ValueError(f"case keys must be one of {OBS_MODES}, got {case.keys!r} ({case.id})")
    chunk, envs = case.option("chunk"), case.option("envs")
    for name, value in (("chunk", chunk), ("envs", envs)):
        if (value is not None or name == "chunk") and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"case {name} must be a positive int, got {value!r} ({case.id})")
    from fastenv.backends import maniskill as ms

    registered = ms.maniskill_registry()
    if case.task not in registered:
        raise ValueError(f"unknown ManiSkill task {case.task!r} ({case.id})")
    try:
        ms.check_assets(case.task, registered[case.task])
    except ValueError as exc:
        raise Skip(str(exc)) from None
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))  # each case its own actions, the same every run
    if envs is None:
        _check_single(case, cmp, chunk, rng)
    else:
        _check_vector(case, cmp, chunk, envs, rng)


# -- building ----------------------------------------------------------------------------------------
class _DownloadAsked(Exception):
    pass


@contextlib.contextmanager
def _no_prompt() -> Iterator[None]:
    """ManiSkill asks on stdin (then exits) when a robot's files are missing: make that a Skip."""
    from mani_skill.utils import download_asset

    def refuse(message: str) -> bool:
        raise _DownloadAsked(message)

    prompt = download_asset.prompt_yes_no
    download_asset.prompt_yes_no = refuse
    try:
        yield
    finally:
        download_asset.prompt_yes_no = prompt


_WARM: list[Any] = []  # one render system kept for the process (see _keep_renderer)
_BUILD_ERRORS: dict[str, str] = {}  # each task's first build failure in this process
_OVERLAY: list[str] = []  # the overlay image written for the overlay cases (once per process)


def _keep_renderer(env: Any) -> None:
    """Keep a SAPIEN render system on ``env``'s render device for the rest of the process.

    SAPIEN frees its renderer with the last render system, and the next env's first picture then
    builds it again (over 10 s on lavapipe): without this every rgb case would pay that.
    """
    if _WARM:
        return
    device = getattr(env.unwrapped, "_render_device", None)
    if device is None:
        return
    import sapien

    try:
        _WARM.append(sapien.render.RenderSystem(device))
    except RuntimeError:  # a device this SAPIEN cannot hold twice: cases are just slower
        pass


def _obs_mode(case: Case) -> str:
    """The task's obs mode for the case: "state", or "rgb" (else the task's mode with rgb in it)."""
    if case.keys == "state":
        return "state"
    from fastenv.backends.maniskill import maniskill_registry

    supported = list(getattr(maniskill_registry()[case.task].cls, "SUPPORTED_OBS_MODES", ()))
    if "rgb" in supported or "any_textures" in supported:
        return "rgb"
    with_rgb = [mode for mode in supported if "rgb" in mode.split("+")]
    if not with_rgb:
        raise Skip(f"the task has no obs mode with rgb (it supports {supported})")
    return with_rgb[0]  # e.g. "rgb+segmentation" (SO100GraspCube): fastenv then keeps rgb only


def _build_error(exc: BaseException) -> str:
    """The reason a stock env did not build, saying when it is missing downloadable data."""
    import mani_skill

    text = f"{type(exc).__name__}: {exc}"
    asset_dir = str(getattr(mani_skill, "ASSET_DIR", "")) or None
    if isinstance(exc, FileNotFoundError) and asset_dir and asset_dir in str(exc):
        return f"needs a download (missing under ManiSkill's asset directory): {text}"
    if "download" in str(exc).lower():
        return f"needs a download: {text}"
    return f"the stock env does not build here: {text}"


def _task_kwargs(case: Case) -> dict[str, Any]:
    """The task's own arguments for the case: a green-screen overlay (random noise) for overlay cases."""
    if case.option("overlay") is None:
        return {}
    if not _OVERLAY:
        import tempfile

        import cv2

        path = Path(tempfile.mkdtemp(prefix="fastenv-conform-")) / "overlay.png"
        cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
        _OVERLAY.append(str(path))
    return {"greenscreen_overlay_path": _OVERLAY[0]}


def _stock(case: Case, **kwargs: Any) -> Any:
    """The stock env, built as ManiSkill's own ``gym.make`` does; Skip with its error if it cannot be."""
    import gymnasium as gym

    from fastenv.backends.maniskill import configure_vulkan

    configure_vulkan()
    import mani_skill.envs  # noqa: F401  (registers the tasks)

    options: dict[str, Any] = dict(
        obs_mode=_obs_mode(case), sim_backend="physx_cpu", max_episode_steps=EPISODE, **_task_kwargs(case), **kwargs
    )
    if case.keys != "state":
        options["sensor_configs"] = dict(width=CAMERA, height=CAMERA)
    try:
        with _no_prompt():
            env = gym.make(case.task, **options)
    except _DownloadAsked as exc:
        raise Skip(f"needs a download (ManiSkill asks: {exc})") from None
    except Exception as exc:  # noqa: BLE001  (any error of the stock env is its own, reported verbatim)
        reason = _build_error(exc)
        first = _BUILD_ERRORS.setdefault(case.task, reason)
        if first != reason:  # ManiSkill can leave its registries half-built after a failed build
            reason = f"{first} (a later build in this process: {type(exc).__name__}: {exc})"
        raise Skip(reason) from None
    if case.keys != "state":
        _keep_renderer(env)
    return env


def _stock_call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        raise Skip(f"the stock env fails to {what} here: {type(exc).__name__}: {exc}") from None


def _fastenv_call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001  (the stock env ran this: fastenv's error is a failure)
        raise Mismatch(f"fastenv failed to {what} where the stock env did: {type(exc).__name__}: {exc}") from None


def _keys(case: Case, stock: Any) -> list[str]:
    if case.keys == "state":
        return ["state"]
    from mani_skill.sensors.camera import Camera

    cameras = [uid for uid, sensor in stock.unwrapped._sensors.items() if isinstance(sensor, Camera)]
    if not cameras:
        raise Skip(f"the task has no camera sensor (sensors: {sorted(stock.unwrapped._sensors)})")
    return [f"{cam}_rgb" for cam in cameras]


def _plain_actions(stock: Any, chunk: int) -> bool:
    """True for a task whose actions chunks do not take (Dict actions of multi-robot tasks): its
    chunk-1 case runs plain actions (``chunk=None``); a longer chunk is skipped, said as such."""
    from gymnasium import spaces

    space = stock.unwrapped.single_action_space
    if isinstance(space, spaces.Box):
        return False
    if chunk > 1:
        raise Skip(
            f"fastenv limitation: the task's actions are a {type(space).__name__} space ({space}); fastenv's action "
            "chunks (ActionChunk) take Box, Discrete and MultiDiscrete actions (its chunk-1 case runs plain actions)"
        )
    return True


def _actions(space: Any, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    """Random actions of ``space`` (a Box, or a Dict of Boxes: an array of dicts) in ``shape``."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        out = np.empty(shape, dtype=object)
        for index in np.ndindex(*shape):
            out[index] = {key: _actions(sub, (), rng) for key, sub in space.spaces.items()}
        return out
    low = np.where(np.isfinite(space.low), space.low, -1.0)
    high = np.where(np.isfinite(space.high), space.high, 1.0)
    return rng.uniform(low, high, (*shape, *space.shape)).astype(space.dtype)


# -- what the stock env gives, in fastenv's layout ---------------------------------------------------
def _stock_obs(raw: Any, keys: Sequence[str], row: int = 0) -> dict[str, np.ndarray]:
    out = {}
    for key in keys:
        if key == "state":
            value = raw["state"] if isinstance(raw, Mapping) else raw
        else:
            cam, texture = key.rsplit("_", 1)
            value = raw["sensor_data"][cam][texture]
        out[key] = value[row].numpy()
    return out


def _compare_info(cmp: Comparer, label: str, ours: Mapping[str, Any], stock: Mapping[str, Any]) -> None:
    """Every key of the stock info (row 0 of its batch of one).

    fastenv gives a 0-d row as a Python scalar (one env) or an entry of Gymnasium's per-key array
    (vector env: bool, int64, float64): such a value is compared in the stock's dtype, once its
    kind (bool, int, float) is the stock's and the cast loses nothing.
    """
    for key, value in stock.items():
        if key not in ours:
            raise Mismatch(f"{label}: info[{key!r}] missing (stock has it)")
        if isinstance(value, Mapping):
            _compare_info(cmp, f"{label}[{key}]", ours[key], value)
            continue
        if hasattr(value, "numpy"):
            want = value[0].numpy() if value.ndim else value.numpy()
        else:
            want = np.asarray(value)
        got = np.asarray(ours[key])
        if got.ndim == 0 and want.ndim == 0 and got.dtype != want.dtype:
            same_kind = got.dtype.kind == want.dtype.kind or {got.dtype.kind, want.dtype.kind} <= {"i", "u"}
            cast = got.astype(want.dtype)
            if not same_kind or cast != got:
                raise Mismatch(f"{label} info[{key}]: {got.dtype} {got} != stock {want.dtype} {want}")
            got = cast
        cmp.equal(f"{label} info[{key}]", got, want)


def _state(env_base: Any) -> np.ndarray:
    return env_base.get_state()[0].numpy()


# -- one env -------------------------------------------------------------------------------------------
class _GlobalStreams:
    """An env's own copy of torch's and numpy's global generators.

    Some tasks draw from them on every step, unseeded (SO100GraspCube's camera poses in
    ``_before_control_step``): two envs in one process would take turns on one stream. Each env
    runs on its own copy, all started from the same state, so both draw the same numbers if they
    make the same draws.
    """

    def __init__(self, seed: int) -> None:
        import torch

        self.torch = torch
        with self._saved():
            torch.default_generator.manual_seed(seed)  # the CPU generator only: CUDA's stay as they are
            np.random.seed(seed % 2**32)
            self.state = (torch.get_rng_state(), np.random.get_state())

    @contextlib.contextmanager
    def _saved(self) -> Iterator[None]:
        outside = (self.torch.get_rng_state(), np.random.get_state())
        try:
            yield
        finally:
            self.torch.set_rng_state(outside[0])
            np.random.set_state(outside[1])

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        with self._saved():
            self.torch.set_rng_state(self.state[0])
            np.random.set_state(self.state[1])
            try:
                return fn(*args, **kwargs)
            finally:
                self.state = (self.torch.get_rng_state(), np.random.get_state())


class _Env:
    """An env on its own global streams; the stock one records its calls (to replay them)."""

    def __init__(self, streams: _GlobalStreams, build: Any, *args: Any, **kwargs: Any) -> None:
        self.streams = streams
        self.env = streams.call(build, *args, **kwargs)
        self.trace: list[tuple[str, Any]] = []

    def reset(self, seed: int | None = None) -> tuple[Any, Any]:
        self.trace.append(("reset", seed))
        return self.streams.call(self.env.reset, seed=seed)

    def step(self, action: np.ndarray) -> tuple[Any, ...]:
        self.trace.append(("step", action))
        return self.streams.call(self.env.step, action)

    def close(self) -> None:
        self.streams.call(self.env.close)


class _StockEnv(_Env):
    def __init__(self, case: Case, seed: int, **kwargs: Any) -> None:
        super().__init__(_GlobalStreams(seed), _stock, case, **kwargs)
        self.base = self.env.unwrapped

    def reset(self, seed: int | None = None) -> tuple[Any, Any]:
        return _stock_call("reset", super().reset, seed)

    def step(self, action: np.ndarray) -> tuple[Any, ...]:
        return _stock_call("step", super().step, action)


class _OursEnv(_Env):
    def __init__(self, seed: int, *args: Any, **kwargs: Any) -> None:
        super().__init__(_GlobalStreams(seed), _fastenv_call, "build", *args, **kwargs)
        self.base = self.env.unwrapped.adapter.base

    def reset(self, seed: int | None = None) -> tuple[Any, Any]:
        return _fastenv_call("reset", super().reset, seed)

    def step(self, action: np.ndarray) -> tuple[Any, ...]:
        return _fastenv_call("step", super().step, action)


def _check_single(case: Case, cmp: Comparer, chunk: int, rng: np.random.Generator) -> None:
    from fastenv.envs.maniskill import make_cpu_env

    stream_seed = int(rng.integers(2**31))
    stock = _StockEnv(case, stream_seed)
    ours = None
    try:
        plain = _plain_actions(stock.env, chunk)
        keys = _keys(case, stock.env)
        ours = _OursEnv(
            stream_seed, make_cpu_env, case.task, modalities=keys, chunk=None if plain else chunk, obs_mode=_obs_mode(case),
            camera_size=CAMERA if case.keys != "state" else None, max_episode_steps=EPISODE, **_task_kwargs(case),
        )
        seeds = iter(SEEDS)
        actions = _actions(stock.base.single_action_space, (EPISODES * EPISODE, chunk), rng)
        check = _Checker(cmp, case, ours, stock, keys, stream_seed)
        check.reset("reset 0", next(seeds))
        episodes = c = 0
        while episodes < EPISODES:
            sub = actions[c]
            obs, reward, terminated, truncated, info = ours.step(sub[0] if plain else sub)
            if plain:  # one action, the simulator's own step: no chunk keys
                info = {**info, "chunk_steps": 1, "chunk_rewards": np.array([reward], dtype=np.float64)}
            rewards = np.zeros(chunk)
            for k in range(chunk):
                raw, r, s_term, s_trunc, s_info = stock.step(sub[k])
                rewards[k] = float(r[0])
                ended = bool(s_term[0]) or bool(s_trunc[0])
                if ended:
                    break
            label = f"episode {episodes} chunk {c}"
            cmp.equal(f"{label} chunk_steps", np.int64(info["chunk_steps"]), np.int64(k + 1))
            cmp.equal(f"{label} terminated", np.bool_(terminated), np.bool_(bool(s_term[0])))
            cmp.equal(f"{label} truncated", np.bool_(truncated), np.bool_(bool(s_trunc[0])))
            check.state(label)
            cmp.equal(f"{label} chunk_rewards", np.asarray(info["chunk_rewards"]), rewards)
            cmp.equal(f"{label} reward", np.float64(reward), np.float64(rewards.sum()))
            check.obs(f"{label} obs", obs, raw)
            _compare_info(cmp, label, info, s_info)
            c += 1
            if ended:
                episodes += 1
                if episodes < EPISODES:
                    check.reset(f"reset {episodes}", next(seeds))
    finally:
        if ours is not None:
            ours.close()
        stock.close()


class _Checker:
    """The comparisons of one env's case; a difference says whether the stock env repeats itself there."""

    def __init__(self, cmp: Comparer, case: Case, ours: _OursEnv, stock: _StockEnv, keys: Sequence[str], stream_seed: int) -> None:
        self.cmp, self.case, self.ours, self.stock, self.keys, self.stream_seed = cmp, case, ours, stock, keys, stream_seed

    def reset(self, label: str, seed: int) -> None:
        obs, info = self.ours.reset(seed)
        raw, s_info = self.stock.reset(seed)
        self.state(label)
        self.obs(f"{label} obs", obs, raw)
        _compare_info(self.cmp, label, info, s_info)

    def state(self, label: str) -> None:
        self._equal(f"{label} sim state", _state(self.ours.base), _state(self.stock.base))

    def obs(self, label: str, ours: Any, raw: Any) -> None:
        self._equal(label, ours, _stock_obs(raw, self.keys))

    def _equal(self, label: str, ours: Any, stock: Any) -> None:
        try:
            self.cmp.equal(label, ours, stock)
        except Mismatch as exc:
            raise Mismatch(f"{exc}; {_replay(self.case, self.stock.trace, self.keys, self.stream_seed)}") from None


def _replay(case: Case, trace: list, keys: Sequence[str], stream_seed: int) -> str:
    """Whether two fresh stock envs, given the stock env's calls, give the same states and observations."""
    first, second = _StockEnv(case, stream_seed), _StockEnv(case, stream_seed)
    try:
        states = pixels = 0
        for call, arg in trace:
            a, b = ((env.reset(arg) if call == "reset" else env.step(arg))[0] for env in (first, second))
            a, b = _stock_obs(a, keys), _stock_obs(b, keys)
            states += not np.array_equal(_state(first.base), _state(second.base))
            pixels += any(not np.array_equal(a[key], b[key]) for key in keys)
        if states:
            return (f"two stock envs given the same calls differ too (simulator state after {states} of {len(trace)} "
                    "calls): the stock env does not repeat itself here")
        if pixels:
            return (f"two stock envs given the same calls render different pixels too ({pixels} of {len(trace)} "
                    "observations, equal simulator states): the renderer is not deterministic here")
        return f"two stock envs given the same calls agree ({len(trace)} calls): the difference is fastenv's"
    finally:
        first.close()
        second.close()


# -- the vector env ------------------------------------------------------------------------------------
def _check_vector(case: Case, cmp: Comparer, chunk: int, n: int, rng: np.random.Generator) -> None:
    import gymnasium as gym

    from fastenv.core.infos import row_info

    # Autoresets are unseeded: enhanced_determinism derives them from the last seed in both.
    stream_seed = int(rng.integers(2**31))
    stocks: list[_StockEnv] = []
    envs = None
    try:
        stocks += [_StockEnv(case, stream_seed, enhanced_determinism=True) for _ in range(n)]
        if _plain_actions(stocks[0].env, chunk):  # (vector cases are for tasks with Box actions)
            raise Skip(f"the vector-env case chunks actions; {case.task}'s are not a Box")
        keys = _keys(case, stocks[0].env)
        envs = _fastenv_call(
            "build the vector env", gym.make_vec, "fastenv/ManiSkill-v0", num_envs=n, num_workers=1, env_id=case.task,
            chunk=chunk, modalities=keys, camera_size=CAMERA if case.keys != "state" else None,
            max_episode_steps=EPISODE, enhanced_determinism=True, obs_mode=_obs_mode(case), **_task_kwargs(case),
        )
        seed = SEEDS[0]
        obs, infos = _fastenv_call("reset", envs.reset, seed=seed)
        for i, stock in enumerate(stocks):
            raw, s_info = stock.reset(seed + i)  # env i gets seed + i
            cmp.equal(f"reset env {i} obs", {k: v[i] for k, v in obs.items()}, _stock_obs(raw, keys))
            _compare_info(cmp, f"reset env {i}", row_info(infos, i), s_info)
        rounds = EPISODES * -(-EPISODE // chunk)  # two episodes each (same-step autoreset)
        actions = _actions(stocks[0].base.single_action_space, (rounds, n, chunk), rng)
        ended_total = 0
        for c in range(rounds):
            obs, reward, terminated, truncated, infos = _fastenv_call("step", envs.step, actions[c])
            for i, stock in enumerate(stocks):
                rewards = np.zeros(chunk)
                for k in range(chunk):
                    raw, r, s_term, s_trunc, s_info = stock.step(actions[c, i, k])
                    rewards[k] = float(r[0])
                    ended = bool(s_term[0]) or bool(s_trunc[0])
                    if ended:
                        break
                label = f"chunk {c} env {i}"
                cmp.equal(f"{label} chunk_steps", np.int64(infos["chunk_steps"][i]), np.int64(k + 1))
                cmp.equal(f"{label} terminated", np.bool_(terminated[i]), np.bool_(bool(s_term[0])))
                cmp.equal(f"{label} truncated", np.bool_(truncated[i]), np.bool_(bool(s_trunc[0])))
                cmp.equal(f"{label} chunk_rewards", np.asarray(infos["chunk_rewards"][i]), rewards)
                cmp.equal(f"{label} reward", np.float64(reward[i]), np.float64(rewards.sum()))
                stock_obs = _stock_obs(raw, keys)
                if ended:
                    ended_total += 1
                    cmp.equal(f"{label} final obs", infos["final_obs"][i], stock_obs)
                    _compare_info(cmp, f"{label} final", row_info(infos["final_info"], i), s_info)
                    raw, s_info = stock.reset()  # same-step autoreset, unseeded
                    stock_obs = _stock_obs(raw, keys)
                _compare_info(cmp, label, row_info(infos, i), s_info)
                cmp.equal(f"{label} obs", {k: v[i] for k, v in obs.items()}, stock_obs)
        if ended_total < n * (EPISODES - 1):
            raise Mismatch(f"only {ended_total} episodes ended in {rounds} chunks: the case did not cross an episode end")
    finally:
        if envs is not None:
            envs.close()
        for stock in stocks:
            stock.close()


__all__ = ["CAMERA", "CHUNK", "EPISODE", "cases", "check"]
