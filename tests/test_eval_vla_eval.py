"""VlaEvalPolicy against a real vla-eval ``PredictModelServer`` (batching on, chunk buffer on).

The server is vla-eval's own (``vla_eval.api.serve_background`` on a free port, or a subprocess
that is killed); its model is a small deterministic function of the observation, so every answer
is checked against that function called directly on what vla-eval's LIBERO benchmark would send.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("vla_eval")
need("websockets")
need("msgpack")

import anyio  # vla-eval's dependency
from vla_eval.api import serve_background
from vla_eval.model_servers.predict import PredictModelServer

from fastenv.eval.policies import PolicyUnavailable, Request
from fastenv.eval.vla_eval import VlaEvalPolicy, vla_eval_observation, vla_eval_state

CHUNK = 4  # the server's chunk_size: it runs its model every CHUNK observations of a session


def tiny_chunk(obs: dict) -> np.ndarray:
    """The stand-in model: a (CHUNK, 7) chunk from the state, both images and the instruction."""
    state = np.asarray(obs["states"], dtype=np.float64)
    images = obs["images"]
    look = images["agentview"].astype(np.float64).mean() / 255 + 2 * images["wrist"].astype(np.float64).mean() / 255
    words = sum(obs["task_description"].encode()) % 97 / 97
    base = np.concatenate([state[:6], [look + words]])
    return np.stack([base + 0.01 * row for row in range(CHUNK)])


class TinyServer(PredictModelServer):
    """vla-eval's PredictModelServer with a tiny model; records what reaches it."""

    def __init__(self) -> None:
        super().__init__(chunk_size=CHUNK, max_batch_size=16, max_wait_time=0.05)
        self.batch_sizes: list[int] = []
        self.seen: list[dict] = []
        self.starts: list[dict] = []
        self.ends: list[dict] = []
        self.release = threading.Event()  # what an observation with the instruction "hang" waits for

    def get_observation_params(self) -> dict:
        return {"send_wrist_image": True, "send_state": True}

    def get_action_spec(self) -> dict:
        return {}

    def get_observation_spec(self) -> dict:
        return {}

    def predict_batch(self, obs_batch, ctx_batch):
        self.batch_sizes.append(len(obs_batch))
        self.seen.extend(obs_batch)
        time.sleep(0.02)  # a model's time: the next observations gather meanwhile
        return [{"actions": tiny_chunk(obs)} for obs in obs_batch]

    async def on_episode_start(self, config, ctx) -> None:
        self.starts.append(config)
        await super().on_episode_start(config, ctx)

    async def on_episode_end(self, result, ctx) -> None:
        self.ends.append(result)
        await super().on_episode_end(result, ctx)

    async def on_observation(self, obs, ctx) -> None:
        while obs["task_description"] == "hang" and not self.release.is_set():
            await anyio.sleep(0.01)
        await super().on_observation(obs, ctx)


def element(seed: int, prompt: str) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "observation/image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/wrist_image": rng.integers(0, 256, (224, 224, 3), dtype=np.uint8),
        "observation/state": rng.normal(size=8),
        "prompt": prompt,
    }


def request(task: int, init: int, step: int, worker: int, slot: int, prompt: str | None = None) -> Request:
    episode = f"libero_spatial/{task}/{init}"
    meta = {"suite": "libero_spatial", "task": task, "init_state": init, "seed": 7}
    return Request(episode, element(1000 * task + 10 * init + step, prompt or f"task {task}"), step, worker, slot, meta)


def expected(policy: VlaEvalPolicy, req: Request, row: int = 0) -> np.ndarray:
    """The model called directly on the observation vla-eval's LIBERO would send, as the server
    answers it (float32, one row)."""
    return tiny_chunk(policy.observation(req))[row].astype(np.float32).astype(np.float64)[None]


def wait_for(cond, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, "the server did not get it in time"
        time.sleep(0.01)


@pytest.fixture
def server():
    model = TinyServer()
    handle = serve_background(model)
    yield model, handle.url
    model.release.set()
    handle.close()


def test_batch_from_several_workers_gets_the_models_actions_and_the_server_batches(server):
    model, url = server
    policy = VlaEvalPolicy(url, timeout=10)
    policy.open(3)
    try:
        slots = [(w, s) for w in range(3) for s in range(2)]
        for i, _ in enumerate(slots):
            policy.start_episode(f"libero_spatial/{i}/0", {}, slots[i][0])
        assert policy.reads_chunk_starts_only is False
        firsts = None
        for step in range(CHUNK + 1):
            reqs = [request(i, 0, step, w, s) for i, (w, s) in enumerate(slots)]
            answers = policy.infer(reqs)
            assert len(answers) == len(reqs)
            if step == 0:
                firsts = reqs
            for i, (req, answer) in enumerate(zip(reqs, answers)):
                assert answer.shape == (1, 7)
                # the chunk's rows come from the session's buffer; a new chunk every CHUNK steps
                want = expected(policy, firsts[i], step) if step < CHUNK else expected(policy, req, 0)
                np.testing.assert_array_equal(answer, want)
        # the model ran twice per session (steps 0 and CHUNK), in batches across the connections
        assert sum(model.batch_sizes) == 2 * len(slots)
        assert max(model.batch_sizes) > 1, model.batch_sizes
        # what reached the server is vla-eval's LIBERO observation, pixels unchanged
        got = {obs["task_description"]: obs for obs in model.seen[: len(slots)]}
        for req in firsts:
            obs = got[req.element["prompt"]]
            assert set(obs) == {"images", "task_description", "states"} and set(obs["images"]) == {"agentview", "wrist"}
            np.testing.assert_array_equal(obs["images"]["agentview"], req.element["observation/image"])
            np.testing.assert_array_equal(obs["images"]["wrist"], req.element["observation/wrist_image"])
            np.testing.assert_array_equal(obs["states"], vla_eval_state(req.element["observation/state"]))
        # one EPISODE_START per episode, with vla-eval's task fields
        assert sorted(s["task"]["task_id"] for s in model.starts) == list(range(len(slots)))
        assert model.starts[0]["task"].keys() == {"name", "suite", "task_id", "episode_idx"}
        assert {s["task"]["name"] for s in model.starts} == {f"task {i}" for i in range(len(slots))}
        for i, (w, _) in enumerate(slots):
            policy.end_episode(f"libero_spatial/{i}/0", {"id": f"libero_spatial/{i}/0", "success": i % 2 == 0, "steps": CHUNK + 1})
        wait_for(lambda: len(model.ends) == len(slots))
        assert sorted(e["metrics"]["success"] for e in model.ends) == [False] * 3 + [True] * 3
        assert all(e["steps"] == CHUNK + 1 for e in model.ends)
        # the next episode on a slot starts with a fresh chunk (EPISODE_START emptied the buffer)
        policy.start_episode("libero_spatial/0/1", {}, 0)
        nxt = request(0, 1, 0, 0, 0)
        np.testing.assert_array_equal(policy.infer([nxt])[0], expected(policy, nxt, 0))
        assert len(model.starts) == len(slots) + 1
        assert policy.describe()["server"]["model_server"] == "TinyServer"
        assert policy.describe()["observation"] == {"send_wrist_image": True, "send_state": True, "quat_no_antipodal": False}
    finally:
        policy.close()


def test_png_images_reach_the_server_unchanged(server):
    model, url = server
    policy = VlaEvalPolicy(url, timeout=10, image_format="png")
    try:
        req = request(3, 4, 0, 0, 0)
        np.testing.assert_array_equal(policy.infer([req])[0], expected(policy, req))
        np.testing.assert_array_equal(model.seen[-1]["images"]["agentview"], req.element["observation/image"])
    finally:
        policy.close()


def test_a_server_that_never_answers_raises_policy_unavailable_within_the_timeout_and_is_reconnected(server):
    model, url = server
    policy = VlaEvalPolicy(url, timeout=1.0)
    try:
        reqs = [request(0, 0, 0, 0, 0), request(1, 0, 0, 1, 0, prompt="hang"), request(2, 0, 0, 2, 0)]
        for r in reqs:
            policy.start_episode(r.episode, r.meta, r.worker)
        start = time.monotonic()
        with pytest.raises(PolicyUnavailable, match="no answer within 1 s") as info:
            policy.infer(reqs)
        assert 0.9 <= time.monotonic() - start < 2.5  # the bounded wait
        assert info.value.episodes == ["libero_spatial/1/0"]
        answers = info.value.answers
        assert answers[1] is None
        np.testing.assert_array_equal(answers[0], expected(policy, reqs[0]))
        np.testing.assert_array_equal(answers[2], expected(policy, reqs[2]))
        # the runner starts the episode again: a new connection (session) and a new EPISODE_START
        model.release.set()
        starts = len(model.starts)
        policy.start_episode(reqs[1].episode, reqs[1].meta, 1)
        again = request(1, 0, 0, 1, 0, prompt="hang")
        np.testing.assert_array_equal(policy.infer([again])[0], expected(policy, again))
        assert len(model.starts) == starts + 1
    finally:
        policy.close()


SERVE_IN_SUBPROCESS = """
import sys, time
sys.path.insert(0, sys.argv[1])
from test_eval_vla_eval import TinyServer
from vla_eval.api import serve_background
handle = serve_background(TinyServer())
print(handle.port, flush=True)
time.sleep(120)
"""


def test_a_killed_server_raises_policy_unavailable_at_once_and_a_refused_one_too():
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen([sys.executable, "-c", SERVE_IN_SUBPROCESS, tests], stdout=subprocess.PIPE, text=True)
    policy = VlaEvalPolicy(f"127.0.0.1:{proc.stdout.readline().strip()}", timeout=5.0)
    try:
        reqs = [request(i, 0, 0, i, 0) for i in range(2)]
        for r in reqs:
            policy.start_episode(r.episode, r.meta, r.worker)
        for answer, req in zip(policy.infer(reqs), reqs):
            np.testing.assert_array_equal(answer, expected(policy, req))
        proc.kill()
        proc.wait(10)
        for _ in range(2):  # dropped, then refused on reconnecting
            start = time.monotonic()
            with pytest.raises(PolicyUnavailable) as info:
                policy.infer([request(i, 0, 1, i, 0) for i in range(2)])
            assert time.monotonic() - start < 2.0  # no wait for the timeout: the connection is gone
            assert sorted(info.value.episodes) == [r.episode for r in reqs]
            assert info.value.answers == [None, None]
    finally:
        policy.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def robosuite_axis_angle(quat: np.ndarray) -> np.ndarray:
    """robosuite's quat2axisangle (what fastenv's element holds): no flip to w >= 0."""
    w = float(np.clip(quat[3], -1.0, 1.0))
    den = math.sqrt(1.0 - w * w)
    return np.zeros(3) if math.isclose(den, 0.0) else quat[:3] * 2.0 * math.acos(w) / den


def test_the_state_is_vla_eval_libero_s_axis_angle():
    from vla_eval.rotation import quat_to_axisangle

    rng = np.random.default_rng(0)
    flipped = 0
    for _ in range(200):
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        flipped += quat[3] < 0
        pos, grip = rng.normal(size=3), rng.normal(size=2)
        ours = np.concatenate([pos, robosuite_axis_angle(quat), grip])  # fastenv's observation/state
        theirs = np.concatenate([pos, quat_to_axisangle(quat), grip])  # vla-eval LIBERO's "states"
        np.testing.assert_allclose(vla_eval_state(ours), theirs, atol=2e-6)
        unflipped = np.concatenate([pos, robosuite_axis_angle(quat).astype(np.float32), grip])
        np.testing.assert_allclose(vla_eval_state(ours, quat_no_antipodal=True), unflipped)
    assert flipped > 50
    obs = vla_eval_observation(element(0, "x"), send_wrist_image=False, send_state=False)
    assert set(obs) == {"images", "task_description"} and set(obs["images"]) == {"agentview"}


def test_the_module_needs_no_client_packages_to_import():
    code = "import sys, fastenv.eval.vla_eval; bad = {'vla_eval', 'websockets', 'msgpack'} & set(sys.modules); assert not bad, bad"
    subprocess.run([sys.executable, "-c", code], check=True)
