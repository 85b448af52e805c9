"""fastenv's drop-in for ManiSkill's vector env against ManiSkill's own, on ManiSkill's real simulation.

Each stack runs in a process of its own (ManiSkill holds one GPU physics system per process), from
the same seed with the same actions, and the test compares what the two returned step by step:
observations, rewards, terminations, truncations, final observations and episode metrics. With
CUDA: 16 envs in one GPU world (``physx_cuda``, fastenv's batched in-place path) through partial
autoresets. Without CUDA the CUDA case is skipped and the same comparison runs on ManiSkill's CPU
simulation (one env, fastenv's worker path).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from helpers import need  # noqa: I001  (first: a missing module skips, or fails under CI)
torch = need("torch", "the ManiSkill backend needs it")
need("mani_skill")

pytestmark = pytest.mark.maniskill

STEPS, EPISODE = 30, 12


def rollout(stack: str, backend: str, num_envs: int, obs_mode: str, out: str) -> None:
    """Run ``stack`` ("stock" or "fastenv") for STEPS steps of seeded random actions; save what it returned."""
    import gymnasium as gym

    import fastenv  # noqa: F401  (where there is no GPU: Vulkan's CPU driver, before SAPIEN loads)
    from fastenv.integrations.maniskill import make_vec

    kwargs = dict(obs_mode=obs_mode, max_episode_steps=EPISODE, enhanced_determinism=True, sim_backend=backend)
    if stack == "stock":
        import mani_skill.envs  # noqa: F401
        from mani_skill.vector.wrappers.gymnasium import ManiSkillVectorEnv

        envs = ManiSkillVectorEnv(gym.make("PickCube-v1", num_envs=num_envs, **kwargs), num_envs, record_metrics=True)
    else:
        extra = {"num_workers": 1} if backend == "physx_cpu" else {}
        envs = make_vec("PickCube-v1", num_envs, record_metrics=True, **kwargs, **extra)
    record: dict[str, list] = {}

    def keep(name: str, value) -> None:
        record.setdefault(name, []).append(torch.as_tensor(value).cpu().numpy().tolist())

    obs, _ = envs.reset(seed=1)
    keep("obs", obs)
    rng = np.random.default_rng(4)
    for _ in range(STEPS):
        action = torch.as_tensor(rng.uniform(-1, 1, (num_envs, *envs.single_action_space.shape)), dtype=torch.float32)
        obs, reward, term, trunc, infos = envs.step(action)
        for name, value in (("obs", obs), ("reward", reward), ("terminated", term), ("truncated", trunc)):
            keep(name, value)
        ended = infos.get("_final_info", torch.zeros(num_envs, dtype=torch.bool))
        keep("ended", ended)
        keep("final_obs", infos["final_observation"] if "final_observation" in infos else torch.zeros_like(torch.as_tensor(obs)))
        episode = infos["final_info"]["episode"] if "final_info" in infos else infos["episode"]
        keep("return", episode["return"])
    envs.close()
    with open(out, "w") as f:
        json.dump({"device": str(getattr(envs, "device", "cpu")), **record}, f)


def run(stack: str, backend: str, num_envs: int, obs_mode: str, tmp_path) -> dict:
    out = tmp_path / f"{stack}.json"
    done = subprocess.run([sys.executable, __file__, stack, backend, str(num_envs), obs_mode, str(out)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def cuda() -> bool:
    return torch.cuda.is_available()


@pytest.mark.parametrize("backend, num_envs", [
    ("physx_cpu", 1),
    pytest.param("physx_cuda", 16, marks=pytest.mark.skipif(not cuda(), reason="ManiSkill's GPU simulation needs CUDA")),
])
def test_the_drop_in_returns_what_maniskills_own_vector_env_returns(backend, num_envs, tmp_path):
    stock = run("stock", backend, num_envs, "state", tmp_path)
    ours = run("fastenv", backend, num_envs, "state", tmp_path)
    for name in ("obs", "reward", "terminated", "truncated", "ended", "final_obs", "return"):
        for t, (a, b) in enumerate(zip(ours[name], stock[name])):
            assert np.array_equal(np.asarray(a), np.asarray(b)), f"{name} differs at step {t}"
    assert np.asarray(stock["ended"]).any(axis=1).sum() >= STEPS // EPISODE  # episodes ended (autoresets were compared)


if __name__ == "__main__":
    rollout(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5])
