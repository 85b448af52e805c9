"""Every RL library adapter has one shape: ``make_vec(env_id, num_envs, **kwargs)`` and, where the
library takes an object of its own, a ``<Library>VecEnv``; the old names warn for one release."""

import importlib
import inspect
import warnings

import pytest
from helpers import need

# library module, its extra's import name, the adapter's VecEnv class (None: the library takes
# Gymnasium's vector env, or a wrapper of its own), the old names -> the new
ADAPTERS = [
    ("sb3", "stable_baselines3", "SB3VecEnv", {"make_vec_env": "make_vec"}),
    ("torchrl", "torchrl", None, {"make_env": "make_vec"}),  # TorchRL's GymWrapper over the DISABLED vector env
    ("tianshou", "tianshou", "TianshouVecEnv", {"make_vec_env": "make_vec", "TianshouVectorEnv": "TianshouVecEnv"}),
    ("pufferlib", "pufferlib", "PufferLibVecEnv", {"make": "make_vec", "PufferVecEnv": "PufferLibVecEnv"}),
    ("rl_games", "rl_games", "RlGamesVecEnv", {}),
    ("rllib", None, None, {}),
    ("skrl", "skrl", None, {}),
    ("cleanrl", None, None, {}),
]


@pytest.mark.parametrize(("library", "needs", "vec_env", "old"), ADAPTERS, ids=[a[0] for a in ADAPTERS])
def test_each_adapter_offers_make_vec_with_the_id_first_and_its_vec_env(library, needs, vec_env, old):
    if needs is not None:
        need(needs)
    module = importlib.import_module(f"fastenv.integrations.{library}")
    params = list(inspect.signature(module.make_vec).parameters.values())
    assert [p.name for p in params[:2]] == ["env_id", "num_envs"], params
    assert params[-1].kind is inspect.Parameter.VAR_KEYWORD
    assert "make_vec" in module.__all__
    if vec_env is not None:
        assert inspect.isclass(getattr(module, vec_env)) and vec_env in module.__all__
    for name, new in old.items():
        with pytest.warns(DeprecationWarning, match=f"{library}.{name} is now fastenv.integrations.{library}.{new}"):
            assert getattr(module, name) is getattr(module, new)


def test_cleanrls_old_argument_order_warns_and_builds_the_same_vector_env(monkeypatch):
    import gymnasium as gym

    from fastenv.integrations import cleanrl

    made = []
    monkeypatch.setattr(gym, "make_vec", lambda env_id, num_envs, **kwargs: made.append((env_id, num_envs, kwargs)))
    cleanrl.make_vec("fastenv/Libero-v0", 3)
    with pytest.warns(DeprecationWarning, match=r"make_vec\(env_id, num_envs\)"):
        cleanrl.make_vec(3, "fastenv/Libero-v0")
    with pytest.warns(DeprecationWarning):
        cleanrl.make_vec(3)  # the old default id
    assert made[0] == made[1] == made[2] and made[0][:2] == ("fastenv/Libero-v0", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="num_envs is required"):
            cleanrl.make_vec("fastenv/Libero-v0")
        with pytest.raises(ValueError, match="num_envs must be an int >= 1, got 0"):
            cleanrl.make_vec("fastenv/Libero-v0", 0)


def test_a_vector_env_in_another_mode_is_refused_the_same_way_by_every_adapter():
    import gymnasium as gym
    from fakes import RandomLengthEnv

    from fastenv.integrations._vector import make_vector_env, require_autoreset

    envs = gym.vector.SyncVectorEnv([RandomLengthEnv], autoreset_mode=gym.vector.AutoresetMode.NEXT_STEP)
    with pytest.raises(ValueError, match=r"X needs a vector env with SAME_STEP autoreset \(why\), got autoreset_mode=AutoresetMode.NEXT_STEP: "
                                         r"make it with gym.make_vec\(..., autoreset_mode='SameStep'\)"):
        require_autoreset(envs, gym.vector.AutoresetMode.SAME_STEP, "X", "why")

    class Declares:  # a vector env that declares no autoreset mode
        metadata: dict = {}

    with pytest.raises(ValueError, match="got autoreset_mode=None"):
        require_autoreset(Declares(), gym.vector.AutoresetMode.SAME_STEP, "X", "why")
    with pytest.raises(ValueError, match=r"X needs NEXT_STEP autoreset \(why\), got autoreset_mode='SameStep': leave it out"):
        make_vector_env("CartPole-v1", 2, gym.vector.AutoresetMode.NEXT_STEP, "X", "why", autoreset_mode="SameStep")
    with pytest.raises(ValueError, match="num_envs must be an int >= 1, got 0"):
        make_vector_env("CartPole-v1", 0, gym.vector.AutoresetMode.NEXT_STEP, "X", "why")
