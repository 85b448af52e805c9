"""An evaluation worker: a process holding a few env slots, each running one episode at a time.

The runner sends ``("start", slot, episode, attempt, film)`` and ``("act", slot, chunk)``; the worker
answers each with ``("obs", slot, episode_id, element, step, chunk_seconds)`` when the episode needs a chunk, or
``("done", slot, result)`` when it ended, or ``("error", slot, episode_id, text)``. A slot's env is
built when it first runs an episode of a task and rebuilt only when the slot moves to another
task; an episode starts with the env seeded and put on its init state, so what ran on the env
before does not reach it (fastenv's reset in place equals LIBERO's rebuilding hard reset).

A camera renders only when its image is read: at a chunk's start (the policy's observation), and
at every step of an episode being filmed.
"""

from __future__ import annotations

import hashlib
import os
import resource
import time
import traceback
from collections import deque
from typing import Any

import numpy as np

from fastenv.eval.protocol import DUMMY_ACTION, Protocol, openpi_element

FAULTS_VARIABLE = "FASTENV_EVAL_FAULTS"  # tests: "die@EPISODE,hang@EPISODE" on an episode's first attempt


class _Episode:
    def __init__(self, episode: dict[str, Any], held: dict[str, Any], loop: Any, protocol: Protocol, film: bool, record: bool) -> None:
        self.info, self.held, self.loop = episode, held, loop
        self.id = episode["id"]
        self.budget = protocol.steps_for(episode["suite"])
        self.steps, self.ret, self.success = 0, 0.0, False
        self.plan: deque = deque()
        self.digest = hashlib.sha256()
        self.actions: list[list[float]] | None = [] if record else None
        self.frames: list[np.ndarray] | None = [] if film else None
        self.renders_before = loop.renders(held)
        self.started = time.perf_counter()
        self.obs: Any = None
        self.fault: str | None = None

    def keep_frame(self) -> None:
        if self.frames is not None:
            self.frames.append(self.loop.frame(self.obs))


class OpenpiLoop:
    """openpi's ``examples/libero/main.py`` loop (and OFT's) on fastenv's ``OffScreenRenderEnv``.

    A loop builds a task's env (``build``), starts an episode on it (``begin``: the observation
    the policy is first asked with), prepares the policy's element from an observation, steps an
    action (``step``: observation, reward, done) and gives a video frame. The worker does the
    rest: chunks, the step budget, results.
    """

    def __init__(self, protocol: Protocol) -> None:
        self.protocol = protocol

    def build(self, suite: str, task: int) -> dict[str, Any]:
        from fastenv.backends.libero import LiberoTask
        from fastenv.integrations.libero_eval import OffScreenRenderEnv

        spec = LiberoTask.load(suite, task)
        size = self.protocol.camera_size
        env = OffScreenRenderEnv(bddl_file_name=spec.bddl_file, camera_heights=size, camera_widths=size)
        return {"env": env, "states": spec.init_states, "language": spec.language}

    def begin(self, held: dict[str, Any], episode: dict[str, Any]) -> Any:
        env = held["env"]
        self._position(held, episode["seed"], episode["init_state"])
        env.reset()
        obs = env.set_init_state(held["states"][episode["init_state"]])
        for _ in range(self.protocol.num_steps_wait):  # objects fall and settle; nothing is read
            obs, _, _, _ = env.step(list(DUMMY_ACTION))
        return obs

    @staticmethod
    def _position(held: dict[str, Any], seed: int, index: int) -> None:
        """Put the env's scene draws where the reference loop has them at its episode ``index``:
        the env seeded once, then ``index`` episodes each reset and put on their init state.

        LIBERO places some fixtures at random at each reset, and an init state does not cover
        them: an episode's scene depends on the resets since the env was seeded. The position
        after ``k`` resets is kept per seed, so each is drawn once per worker."""
        env, stream = held["env"], held.setdefault("streams", {}).setdefault(seed, {})
        if 0 not in stream:
            env.seed(seed)
            stream[0] = env.scene_stream
        k = max(j for j in stream if j <= index)
        env.scene_stream = stream[k]
        while k < index:
            env.reset()
            env.set_init_state(held["states"][k])
            k += 1
            stream[k] = env.scene_stream

    def element(self, held: dict[str, Any], obs: Any) -> dict[str, Any]:
        return openpi_element(obs, held["language"], self.protocol.resize_size)

    def step(self, held: dict[str, Any], action: list[float]) -> tuple[Any, float, bool]:
        obs, reward, done, _ = held["env"].step(action)
        return obs, reward, done

    def frame(self, obs: Any) -> np.ndarray:
        return np.ascontiguousarray(obs["agentview_image"][::-1, ::-1])

    def renders(self, held: dict[str, Any]) -> int:
        return held["env"].camera_renders

    def close(self, held: dict[str, Any]) -> None:
        held["env"].close()


# The loops a Protocol names, and where each is imported from (a worker imports the one it runs).
LOOPS = {"openpi": "fastenv.eval.worker:OpenpiLoop", "lerobot": "fastenv.eval.lerobot_eval:LeRobotLoop"}


def make_loop(protocol: Protocol) -> Any:
    import importlib

    module, _, name = LOOPS[protocol.loop].partition(":")
    return getattr(importlib.import_module(module), name)(protocol)


class Worker:
    """The episodes of one process (``main`` runs it on a pipe)."""

    def __init__(self, index: int, protocol: Protocol, record_actions: bool = False, video_dir: str | None = None) -> None:
        self.index, self.protocol, self.record, self.video_dir = index, protocol, record_actions, video_dir
        self.loop = make_loop(protocol)
        self.slots: dict[int, dict[str, Any]] = {}  # slot -> what the loop built for a task, and "task": (suite, task)
        self.running: dict[int, _Episode] = {}
        self.faults = {}
        for item in filter(None, os.environ.get(FAULTS_VARIABLE, "").split(",")):
            kind, _, episode = item.partition("@")
            self.faults[episode] = kind

    # -- an episode's life ----------------------------------------------------------------------
    def start(self, slot: int, episode: dict[str, Any], attempt: int, film: bool) -> tuple:
        key = (episode["suite"], episode["task"])
        held = self.slots.get(slot)
        if held is None or held["task"] != key:
            if held is not None:
                self.slots.pop(slot)
                self.loop.close(held)
            held = self.slots[slot] = {**self.loop.build(*key), "task": key}
        run = self.running[slot] = _Episode(episode, held, self.loop, self.protocol, film, self.record)
        run.fault = self.faults.get(run.id) if attempt == 1 else None
        run.obs = self.loop.begin(held, episode)
        run.keep_frame()
        return self._request(slot, run)

    def _request(self, slot: int, run: _Episode, seconds: float | None = None) -> tuple:
        """The request for a chunk; ``seconds``: what stepping the last chunk took (the runner's
        tuning reads it)."""
        return ("obs", slot, run.id, self.loop.element(run.held, run.obs), run.steps, seconds)

    def act(self, slot: int, chunk: np.ndarray) -> tuple:
        run = self.running[slot]
        if run.fault == "die":
            os._exit(17)  # a crash mid-episode, for the runner's restart
        if run.fault == "hang":
            time.sleep(10**6)
        began = time.perf_counter()
        run.plan.extend(chunk)  # the rows this protocol uses, checked by the runner before sending
        while run.plan:
            action = run.plan.popleft().tolist()
            run.obs, reward, done = self.loop.step(run.held, action)
            run.steps += 1
            run.ret += float(reward)
            run.digest.update(np.asarray(action, dtype=np.float64).tobytes())
            if run.actions is not None:
                run.actions.append(action)
            run.keep_frame()
            if done:
                run.success = True
                return self._finish(slot, run)
            if run.steps >= run.budget:
                return self._finish(slot, run)
        request = self._request(slot, run)  # the element's renders count as the chunk's
        return request[:-1] + (time.perf_counter() - began,)

    def _finish(self, slot: int, run: _Episode) -> tuple:
        self.running.pop(slot)
        result = {
            **run.info, "success": run.success, "length": run.steps, "return": run.ret,
            "actions_sha256": run.digest.hexdigest(), "camera_renders": self.loop.renders(run.held) - run.renders_before,
            "seconds": time.perf_counter() - run.started, "worker": self.index,
            "worker_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        if run.actions is not None:
            result["actions"] = run.actions
        if run.frames is not None and self.video_dir:
            result["video"] = self._write_video(run)
        return ("done", slot, result)

    def _write_video(self, run: _Episode) -> str:
        import imageio

        name = f"{run.info['suite']}_task{run.info['task']}_init{run.info['init_state']}_{'success' if run.success else 'failure'}.mp4"
        path = os.path.join(self.video_dir, name)
        imageio.mimwrite(path, run.frames, fps=self.protocol.video_fps)
        return path

    def close(self) -> None:
        for held in self.slots.values():
            self.loop.close(held)
        self.slots.clear()

    # -- the pipe -------------------------------------------------------------------------------
    def handle(self, message: tuple) -> tuple | None:
        kind, slot = message[0], message[1]
        episode = message[2]["id"] if kind == "start" else getattr(self.running.get(slot), "id", None)
        try:
            if kind == "start":
                return self.start(slot, message[2], message[3], message[4])
            if kind == "act":
                return self.act(slot, message[2])
            raise ValueError(f"unknown command {kind!r}")
        except Exception:  # noqa: BLE001 (sent to the runner, which names the episode and stops)
            self.running.pop(slot, None)
            return ("error", slot, episode, traceback.format_exc())


def main(index: int, conn: Any, protocol: Protocol, record_actions: bool, video_dir: str | None) -> None:
    """A worker process's loop on its end of the pipe."""
    worker = Worker(index, protocol, record_actions, video_dir)
    conn.send(("hello", os.getpid()))
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message[0] == "close":
                return
            conn.send(worker.handle(message))
    except KeyboardInterrupt:
        return
    finally:
        worker.close()
