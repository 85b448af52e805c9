"""ManiSkill's RecordEpisode through fastenv: the same video and trajectory files as ManiSkill's own.

The reference is ManiSkill's ``RecordEpisode`` under ManiSkill's ``ManiSkillVectorEnv``, as its PPO
script stacks them: on the CPU with the real simulator (one env: ManiSkill's CPU simulation holds
one), and on the batched path over the stand-in (``tests/fake_maniskill.py``).
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
need("torch", "ManiSkill's conventions are torch tensors")
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from fake_maniskill import FakeManiSkillEnv  # noqa: E402

from fastenv.backends.maniskill import ManiSkillVectorEnv as BatchedEnv  # noqa: E402


def h5_tree(path: Path) -> dict:
    """Every dataset of an h5 file: name -> (dtype, array)."""
    import h5py

    out: dict = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda name, item: out.__setitem__(name, (item.dtype, item[()])) if isinstance(item, h5py.Dataset) else None)
    return out


def assert_same_h5(ours: Path, ref: Path) -> int:
    got, want = h5_tree(ours), h5_tree(ref)
    assert sorted(got) == sorted(want)
    for name, (dtype, value) in want.items():
        assert got[name][0] == dtype and np.array_equal(got[name][1], value), name
    return len([name for name in want if name.count("/") == 1 and name.endswith("/actions")])


def differences(ours, ref, path: str = "") -> list[str]:
    """Every place where two nested results differ: dict keys and their order, types, dtypes, shapes, values."""
    if isinstance(ref, Mapping):
        if not isinstance(ours, Mapping):
            return [f"{path}: {type(ours).__name__}, ManiSkill's is a dict"]
        out = [] if list(ours) == list(ref) else [f"{path}: keys {list(ours)}, ManiSkill's {list(ref)}"]
        return out + [d for key in ref if key in ours for d in differences(ours[key], ref[key], f"{path}/{key}")]
    if type(ours) is not type(ref):
        return [f"{path}: {type(ours).__name__}, ManiSkill's {type(ref).__name__}"]
    if isinstance(ref, (list, tuple)):
        if len(ours) != len(ref):
            return [f"{path}: {len(ours)} items, ManiSkill's {len(ref)}"]
        return [d for i, (a, b) in enumerate(zip(ours, ref)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(ref, torch.Tensor):
        ours, ref = ours.cpu(), ref.cpu()
        if ours.dtype != ref.dtype or ours.shape != ref.shape:
            return [f"{path}: {ours.dtype} {tuple(ours.shape)}, ManiSkill's {ref.dtype} {tuple(ref.shape)}"]
        return [] if torch.equal(ours, ref) else [f"{path}: {ours}, ManiSkill's {ref}"]
    if isinstance(ref, (np.ndarray, np.generic)):
        if ours.dtype != ref.dtype or ours.shape != ref.shape:
            return [f"{path}: {ours.dtype} {ours.shape}, ManiSkill's {ref.dtype} {ref.shape}"]
        return [] if np.array_equal(ours, ref) else [f"{path}: {ours}, ManiSkill's {ref}"]
    return [] if ours == ref else [f"{path}: {ours!r}, ManiSkill's {ref!r}"]


def h5_nested(path: Path) -> dict:
    """An h5 file as nested dicts: each group's attributes and members in order, each dataset's
    dtype, shape, compression, attributes and values."""
    import h5py

    def walk(node):
        if isinstance(node, h5py.Dataset):
            return {"dtype": node.dtype, "shape": node.shape, "compression": node.compression,
                    "compression_opts": node.compression_opts, "attrs": dict(node.attrs), "value": node[()]}
        return {"attrs": dict(node.attrs), "members": {name: walk(node[name]) for name in node}}

    with h5py.File(path, "r") as f:
        return walk(f)


def assert_same_files(ours: Path, ref: Path) -> None:
    """The recorder's files: the same names, videos byte for byte, .json and .h5 compared entry by entry."""
    names = sorted(p.name for p in ref.iterdir())
    assert sorted(p.name for p in ours.iterdir()) == names
    for name in names:
        if name.endswith(".json"):
            assert differences(json.loads((ours / name).read_text()), json.loads((ref / name).read_text()), name) == []
        elif name.endswith(".h5"):
            assert differences(h5_nested(ours / name), h5_nested(ref / name), name) == []
        else:
            assert (ours / name).read_bytes() == (ref / name).read_bytes(), name


def _copied(value):
    if isinstance(value, Mapping):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return tuple(_copied(item) for item in value)
    return value.clone() if isinstance(value, torch.Tensor) else value.copy() if isinstance(value, np.ndarray) else value


def rollout(envs, seed, actions) -> list:
    """What the script sees: the reset's (obs, info) and every step's five results, copied as they came."""
    seen = [_copied(envs.reset(seed=seed))]
    seen += [_copied(envs.step(action)) for action in actions]
    envs.close()
    return seen


def stock_record():
    need("mani_skill.utils.wrappers.record", "ManiSkill's own RecordEpisode is the reference")
    from mani_skill.utils.registration import TimeLimitWrapper
    from mani_skill.utils.wrappers.record import RecordEpisode
    from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

    return RecordEpisode, ManiSkillVectorEnv, TimeLimitWrapper


def drive(envs, steps: int, n: int, action_dim: int, seed) -> None:
    envs.reset(seed=seed)
    rng = np.random.default_rng(4)
    for _ in range(steps):
        action = torch.as_tensor(rng.uniform(-1, 1, (n, action_dim)), dtype=torch.float32)
        if action_dim == 3:
            action[:, 0] = torch.as_tensor(rng.uniform(0.2, 1.0, n), dtype=torch.float32)  # some reach the goal
        envs.step(action)
    envs.close()


RECORD = dict(save_trajectory=True, trajectory_name="trajectory", video_fps=30)


@pytest.mark.parametrize("ignore_terminations", [True, False])
def test_batched_recording_writes_maniskills_files(tmp_path, ignore_terminations):
    # 4 envs in one world, partial resets (success ends an episode unless ignored), videos cut every
    # 5 steps, trajectories with states: byte for byte the files of ManiSkill's own wrappers.
    from fastenv.integrations import maniskill as ms

    Record, StockVector, TimeLimitWrapper = stock_record()
    limit, n = 6, 4
    make = lambda: FakeManiSkillEnv(num_envs=n, obs_mode="state", max_goal=8, render_mode="rgb_array", enhanced_determinism=True)  # noqa: E731
    stock = StockVector(
        Record(TimeLimitWrapper(make(), limit), str(tmp_path / "stock"), max_steps_per_video=5, **RECORD),
        ignore_terminations=ignore_terminations, record_metrics=True,
    )
    ours = ms.ManiSkillVectorEnv(
        ms.RecordEpisode(BatchedEnv(make(), max_episode_steps=limit, render_mode="rgb_array"), str(tmp_path / "ours"), max_steps_per_video=5, **RECORD),
        ignore_terminations=ignore_terminations, record_metrics=True, device="cpu",
    )
    drive(stock, 23, n, 3, [5, 6, 7, 8])
    drive(ours, 23, n, 3, [5, 6, 7, 8])
    names = sorted(p.name for p in (tmp_path / "stock").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "ours").iterdir())
    assert [f"{i}.mp4" for i in range(5)] == sorted(n for n in names if n.endswith(".mp4"))
    for name in names:
        if name.endswith(".mp4"):
            assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "stock" / name).read_bytes(), name
    episodes = assert_same_h5(tmp_path / "ours" / "trajectory.h5", tmp_path / "stock" / "trajectory.h5")
    assert episodes >= 12  # the ended episodes and, at close, the unfinished ones
    got, want = (json.loads((tmp_path / who / "trajectory.json").read_text()) for who in ("ours", "stock"))
    assert got == want


def test_info_on_video_writes_maniskills_frames(tmp_path):
    # info_on_video: each env's step info and reward written on its frame, as ManiSkill's does.
    from fastenv.integrations import maniskill as ms

    Record, StockVector, TimeLimitWrapper = stock_record()
    frames = {}
    for who in ("stock", "ours"):
        env = FakeManiSkillEnv(num_envs=2, obs_mode="state", render_mode="rgb_array", enhanced_determinism=True)
        env.render = lambda env=env: torch.zeros(2, 64, 64, 3, dtype=torch.uint8) + (env.pos[:, 0, None, None, None] * 40).clamp(0, 255).to(torch.uint8)
        options = dict(save_trajectory=False, info_on_video=True, max_steps_per_video=5, video_fps=30)
        if who == "stock":
            envs = StockVector(Record(TimeLimitWrapper(env, 5), str(tmp_path / who), **options), ignore_terminations=True)
        else:
            envs = ms.ManiSkillVectorEnv(ms.RecordEpisode(BatchedEnv(env, max_episode_steps=5, render_mode="rgb_array"), str(tmp_path / who), **options),
                                         ignore_terminations=True, device="cpu")
        drive(envs, 10, 2, 3, 3)
        frames[who] = sorted((tmp_path / who).glob("*.mp4"))
    assert [p.name for p in frames["ours"]] == [p.name for p in frames["stock"]] == ["0.mp4", "1.mp4"]
    for ours, stock in zip(frames["ours"], frames["stock"]):
        assert ours.read_bytes() == stock.read_bytes()


def test_recording_renders_only_while_a_video_is_saved(tmp_path):
    # save_video_trigger: frames are taken (and the envs render for the recorder) only on the
    # triggered steps; the files still equal ManiSkill's.
    from fastenv.integrations import maniskill as ms

    Record, StockVector, TimeLimitWrapper = stock_record()
    trigger = lambda step: (step // 4) % 3 == 0  # noqa: E731
    envs, fakes = {}, {}
    for who in ("stock", "ours"):
        env = FakeManiSkillEnv(num_envs=2, obs_mode="state", render_mode="rgb_array", enhanced_determinism=True)
        options = dict(save_trajectory=False, save_video_trigger=trigger, max_steps_per_video=4, video_fps=30)
        if who == "stock":
            envs[who] = StockVector(Record(TimeLimitWrapper(env, 5), str(tmp_path / who), **options), ignore_terminations=True)
        else:
            envs[who] = ms.ManiSkillVectorEnv(ms.RecordEpisode(BatchedEnv(env, max_episode_steps=5, render_mode="rgb_array"), str(tmp_path / who), **options), ignore_terminations=True, device="cpu")
        fakes[who] = env
    calls = []
    original = fakes["ours"].render
    fakes["ours"].render = lambda: calls.append(1) or original()
    for who, e in envs.items():
        drive(e, 24, 2, 3, 3)
    stock_videos = sorted((tmp_path / "stock").glob("*.mp4"))
    assert len(stock_videos) == 2
    for path in stock_videos:
        assert (tmp_path / "ours" / path.name).read_bytes() == path.read_bytes()
    assert len(calls) == 2 * (4 + 1)  # two videos of 4 steps and a first frame each


def test_record_episode_says_what_it_needs():
    import gymnasium as gym

    from fastenv.integrations import maniskill as ms

    with pytest.raises(TypeError, match=r"fastenv.integrations.maniskill.make"):
        ms.RecordEpisode(gym.make("CartPole-v1"), "out")
    quiet = BatchedEnv(FakeManiSkillEnv(num_envs=2, obs_mode="state"), max_episode_steps=5)
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        ms.RecordEpisode(quiet, "out", save_trajectory=False, max_steps_per_video=5)
    loud = BatchedEnv(FakeManiSkillEnv(num_envs=2, obs_mode="state", render_mode="rgb_array"), max_episode_steps=5, render_mode="rgb_array")
    with pytest.raises(ValueError, match="max_steps_per_video"):
        ms.RecordEpisode(loud, "out", save_trajectory=False)
    with pytest.raises(ValueError, match=r"capture takes \['render', 'state'\], got \['depth'\]"):
        loud.sim.set_capture(["depth"])
    with pytest.raises(ValueError, match="recording frames needs the env built with a render_mode"):
        quiet.sim.set_capture(["render"])
    with pytest.raises(ValueError, match="render_substeps"):
        ms.RecordEpisode(loud, "out", save_trajectory=False, max_steps_per_video=5, render_substeps=True)
    with pytest.raises(TypeError, match=r"replace gym.make"):
        ms.ManiSkillVectorEnv(gym.make("CartPole-v1"), 1)
    with pytest.raises(ValueError, match="auto_reset"):
        ms.ManiSkillVectorEnv(loud, 2, auto_reset=False)


# -- the real simulator (ManiSkill's CPU simulation) ----------------------------------------------------
CPU_KWARGS = dict(obs_mode="state", render_mode="rgb_array", max_episode_steps=10, enhanced_determinism=True)


def stock_cpu(out: Path, video_steps: int):
    import gymnasium as gym

    Record, StockVector, _ = stock_record()
    import mani_skill.envs  # noqa: F401

    env = gym.make("PushCube-v1", num_envs=1, sim_backend="physx_cpu", **CPU_KWARGS)
    env = Record(env, str(out), max_steps_per_video=video_steps, **RECORD)
    return StockVector(env, 1, ignore_terminations=True, record_metrics=True)


@pytest.mark.maniskill
@pytest.mark.big_memory
def test_cpu_recording_writes_maniskills_files(tmp_path, monkeypatch):
    # ManiSkill's PPO script on the CPU: its default sim_backend asks for CUDA (replaced, said once),
    # RecordEpisode records the eval envs. One env (all ManiSkill's CPU simulation holds): byte for
    # byte ManiSkill's files. Two envs: each env's episodes are those of ManiSkill's env with its seed,
    # and each video frame is ManiSkill's frames of the two, tiled.
    from fastenv.backends.maniskill import configure_vulkan

    configure_vulkan()
    from mani_skill.utils.visualization import misc
    from mani_skill.utils.wrappers import record as stock_module

    from fastenv.integrations import maniskill as ms

    frames: dict[str, list] = {}

    def keep(who):
        original = misc.images_to_video

        def images_to_video(images, output_dir, video_name, **kwargs):
            frames.setdefault(who, []).append([np.array(im) for im in images])
            return original(images, output_dir, video_name, **kwargs)

        return images_to_video

    monkeypatch.setattr(stock_module, "images_to_video", keep("stock"))
    drive(stock_cpu(tmp_path / "stock", 7), 25, 1, 8, 3)
    monkeypatch.setattr(misc, "images_to_video", keep("ours1"))
    monkeypatch.setattr(ms, "_warned_cuda", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = ms.ManiSkillVectorEnv(
            ms.RecordEpisode(ms.make("PushCube-v1", num_envs=1, sim_backend="physx_cuda", **CPU_KWARGS), str(tmp_path / "ours"), max_steps_per_video=7, **RECORD),
            1, ignore_terminations=True, record_metrics=True,
        )
        ms.make("PushCube-v1", num_envs=1, sim_backend="physx_cuda", **CPU_KWARGS).close()  # no second warning
    if not torch.cuda.is_available():
        said = [w for w in caught if "asks for CUDA" in str(w.message)]
        assert len(said) == 1 and "CPU simulation" in str(said[0].message)
    drive(ours, 25, 1, 8, 3)
    names = sorted(p.name for p in (tmp_path / "stock").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "ours").iterdir()) and "4.mp4" in names  # 3 episodes cut at 7 steps
    for name in names:  # videos, trajectory.h5 and trajectory.json
        assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "stock" / name).read_bytes(), name

    # two envs in fastenv's workers: env i has seed 3 + i, as ManiSkill's env reset with that seed
    # (videos of one 10-step episode each, so the single env's and the pair's cut alike)
    monkeypatch.setattr(stock_module, "images_to_video", keep("seed3"))
    drive(stock_cpu(tmp_path / "seed3", 10), 25, 1, 8, 3)
    monkeypatch.setattr(stock_module, "images_to_video", keep("seed4"))
    drive(stock_cpu(tmp_path / "seed4", 10), 25, 1, 8, 4)
    monkeypatch.setattr(misc, "images_to_video", keep("ours2"))
    two = ms.ManiSkillVectorEnv(
        ms.RecordEpisode(ms.make("PushCube-v1", num_envs=2, num_workers=2, **CPU_KWARGS), str(tmp_path / "two"), max_steps_per_video=10, **RECORD),
        2, ignore_terminations=True, record_metrics=True,
    )
    rng = np.random.default_rng(4)
    two.reset(seed=3)
    for _ in range(25):  # each env gets the actions the single-env runs got
        a = rng.uniform(-1, 1, (1, 8))
        two.step(torch.as_tensor(np.concatenate([a, a]), dtype=torch.float32))
    two.close()
    tiled = [[misc.tile_images(np.stack([a, b]), nrows=1) for a, b in zip(va, vb)] for va, vb in zip(frames["seed3"], frames["seed4"])]
    assert len(frames["ours2"]) == len(tiled) == 3  # two whole episodes, and the third's first 5 steps at close
    for video, want in zip(frames["ours2"], tiled):
        assert len(video) == len(want) and all(np.array_equal(a, b) for a, b in zip(video, want))
    got = h5_tree(tmp_path / "two" / "trajectory.h5")
    episodes = json.loads((tmp_path / "two" / "trajectory.json").read_text())["episodes"]
    assert len(episodes) == 6  # three per env
    singles = {seed: (h5_tree(tmp_path / d / "trajectory.h5"), json.loads((tmp_path / d / "trajectory.json").read_text())["episodes"]) for seed, d in ((3, "seed3"), (4, "seed4"))}
    for episode in episodes:
        owner = [s for s, (_, eps) in singles.items() if any(e["episode_seed"] == episode["episode_seed"] for e in eps)]
        assert len(owner) == 1
        tree, eps = singles[owner[0]]
        match = next(e for e in eps if e["episode_seed"] == episode["episode_seed"])
        prefix, ref = f"traj_{episode['episode_id']}/", f"traj_{match['episode_id']}/"
        names = sorted(k[len(ref):] for k in tree if k.startswith(ref))
        assert names == sorted(k[len(prefix):] for k in got if k.startswith(prefix))
        for name in names:
            assert np.array_equal(got[prefix + name][1], tree[ref + name][1]), name


def script_on_the_batched_path(monkeypatch, asked: dict):
    """ppo.py's ``make(..., sim_backend="physx_cuda")`` with CUDA at hand: the stand-in in place of
    ManiSkill's GPU world. Returns what ManiSkill's ``gym.make`` with ``asked`` would build."""
    import gymnasium as gym

    import fastenv.backends.maniskill as backend

    def fake(num_envs, render_mode=None, **_):
        env = FakeManiSkillEnv(num_envs=num_envs, obs_mode="state", max_goal=8, render_mode=render_mode, enhanced_determinism=True)
        env.spec = gym.envs.registration.EnvSpec("Fake-v1", kwargs={"num_envs": num_envs, **asked})  # what gym.make records
        return env

    monkeypatch.setattr(backend, "uses_gpu", lambda num_envs, sim_backend: True)
    monkeypatch.setattr(backend, "build", lambda env_id, num_envs, **kwargs: fake(num_envs, **kwargs))
    monkeypatch.setattr(backend, "maniskill_registry", lambda: {"Fake-v1": SimpleNamespace(max_episode_steps=6, default_kwargs={})})
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return fake


@pytest.mark.parametrize("num_envs,ignore_terminations", [(1, False), (4, False), (4, True)])
def test_the_script_on_the_batched_path_sees_maniskills_infos_and_files(tmp_path, monkeypatch, num_envs, ignore_terminations):
    # ppo.py's make, RecordEpisode and ManiSkillVectorEnv on the batched path (the stand-in): what the
    # script sees after the reset and each step (observations, rewards, flags, infos with final_info,
    # final_observation and the episode metrics) and every file the recorder writes (env_info and
    # reset_kwargs included) are those of gym.make + ManiSkill's two wrappers, entry by entry.
    from fastenv.integrations import maniskill as ms

    Record, StockVector, TimeLimitWrapper = stock_record()
    asked = dict(obs_mode="state", render_mode="rgb_array", sim_backend="physx_cuda")
    fake = script_on_the_batched_path(monkeypatch, asked)
    options = dict(trajectory_name="trajectory", max_steps_per_video=None if num_envs == 1 else 5, video_fps=30)
    stock = StockVector(Record(TimeLimitWrapper(fake(num_envs, render_mode="rgb_array"), 6), str(tmp_path / "stock"), **options), num_envs,
                        ignore_terminations=ignore_terminations, record_metrics=True)
    envs = ms.make("Fake-v1", num_envs=num_envs, **asked)
    assert isinstance(envs, BatchedEnv)
    ours = ms.ManiSkillVectorEnv(ms.RecordEpisode(envs, str(tmp_path / "ours"), **options), num_envs,
                                 ignore_terminations=ignore_terminations, record_metrics=True, device="cpu")
    rng = np.random.default_rng(4)
    actions = torch.as_tensor(rng.uniform(-1, 1, (20, num_envs, 3)), dtype=torch.float32)
    actions[..., 0] = torch.as_tensor(rng.uniform(0.2, 1.0, (20, num_envs)), dtype=torch.float32)  # some reach the goal
    seen = {"stock": rollout(stock, 3, actions), "ours": rollout(ours, 3, actions)}
    assert any("final_info" in info for *_, info in seen["stock"][1:])  # episodes ended
    assert differences(seen["ours"], seen["stock"]) == []
    assert_same_files(tmp_path / "ours", tmp_path / "stock")
    assert json.loads((tmp_path / "ours" / "trajectory.json").read_text())["env_info"]["env_id"] == "Fake-v1"


# ppo.py's arguments for one CPU env (no sim_backend: ManiSkill picks its CPU simulation), a small
# render camera for the videos
CPU_SCRIPT = dict(reconfiguration_freq=None, obs_mode="state", render_mode="rgb_array", max_episode_steps=10,
                  human_render_camera_configs=dict(width=64, height=64))


def cpu_script(tmp_path: Path, *, enhanced_determinism: bool, record: bool, ignore_terminations: bool) -> dict:
    """What ppo.py's script sees with ManiSkill's make, RecordEpisode and ManiSkillVectorEnv ("stock")
    and with fastenv's ("ours"), one CPU env each, the same actions; success from each episode's 4th step."""
    import gymnasium as gym

    from fastenv.backends.maniskill import configure_vulkan

    configure_vulkan()
    Record, StockVector, _ = stock_record()
    import mani_skill.envs  # noqa: F401

    from fastenv.integrations import maniskill as ms

    def succeed_from_4th_step(base):  # random actions seldom push the cube home (nested: sent to the worker by value)
        evaluate = base.evaluate
        base.evaluate = lambda: {**evaluate(), "success": base.elapsed_steps >= 4}

    kwargs = dict(CPU_SCRIPT, enhanced_determinism=enhanced_determinism)
    made = {"stock": gym.make("PushCube-v1", num_envs=1, **kwargs), "ours": ms.make("PushCube-v1", num_envs=1, **kwargs)}
    succeed_from_4th_step(made["stock"].unwrapped)
    made["ours"].unwrapped.apply(lambda env: succeed_from_4th_step(env.get_wrapper_attr("adapter").base))
    actions = torch.as_tensor(np.random.default_rng(4).uniform(-1, 1, (25, 1, 8)), dtype=torch.float32)
    wrappers = {"stock": (Record, StockVector), "ours": (ms.RecordEpisode, ms.ManiSkillVectorEnv)}
    seen = {}
    for who, env in made.items():
        record_episode, vector_env = wrappers[who]
        if record:
            env = record_episode(env, str(tmp_path / who), trajectory_name="trajectory", max_steps_per_video=7)
        envs = vector_env(env, 1, ignore_terminations=ignore_terminations, record_metrics=True)
        if who == "stock":
            torch.manual_seed(1)  # as ppo.py seeds torch: ManiSkill's unseeded draws come from the script's generator
        seen[who] = rollout(envs, 3, actions)
    return seen


@pytest.mark.maniskill
@pytest.mark.ci_sample("the script on the CPU")
@pytest.mark.parametrize("ignore_terminations", [True, False])
def test_the_script_on_the_cpu_sees_maniskills_infos_and_files(tmp_path, ignore_terminations):
    # ppo.py with one CPU env on the real simulator (enhanced_determinism), recording: everything it
    # sees after the reset and each step, and every file the recorder writes (env_info, reset_kwargs,
    # .h5 datasets with their dtypes and attributes), entry by entry ManiSkill's. (Without the
    # recorder: the next test's enhanced_determinism=True case.)
    seen = cpu_script(tmp_path, enhanced_determinism=True, record=True, ignore_terminations=ignore_terminations)
    ends = [info["final_info"]["episode"] for *_, info in seen["stock"][1:] if "final_info" in info]
    assert len(ends) >= 2 and all(bool(end["success_once"]) for end in ends)
    assert differences(seen["ours"], seen["stock"]) == []
    assert_same_files(tmp_path / "ours", tmp_path / "stock")
    assert "sim_backend" not in json.loads((tmp_path / "ours" / "trajectory.json").read_text())["env_info"]["env_kwargs"]


@pytest.mark.maniskill
@pytest.mark.ci_sample("CPU autoreset episodes")
@pytest.mark.parametrize("enhanced_determinism", [False, True])
def test_cpu_autoreset_episodes_are_maniskills_with_enhanced_determinism(tmp_path, enhanced_determinism):
    # What docs/backends/maniskill.md says: an unseeded reset (every autoreset) draws from torch's
    # generator, ManiSkill's in the script's process and fastenv's in the worker. Without
    # enhanced_determinism only the seeded first episode is ManiSkill's; with it every episode is.
    seen = cpu_script(tmp_path, enhanced_determinism=enhanced_determinism, record=False, ignore_terminations=False)
    resets = [t for t, (*_, info) in enumerate(seen["stock"]) if t and "final_info" in info]
    assert len(resets) >= 2
    first = resets[0]
    assert differences(seen["ours"][:first], seen["stock"][:first]) == []  # the seeded first episode
    later = differences(seen["ours"][first:], seen["stock"][first:])  # from the first autoreset on
    assert (later == []) == enhanced_determinism, later[:3]
