"""rl_games' PPO run on a vector env and recorded: what its ``play_steps`` collects, for the tests
that compare it across vector envs."""

import numpy as np
from rl_games.torch_runner import Runner


def ppo_params(env_name, num_actors, horizon, train_dir, env_config=None):
    """A small continuous PPO config in the shape of rl_games' own yaml examples."""
    return {
        "seed": 7,
        "torch_threads": 0,
        "algo": {"name": "a2c_continuous"},
        "model": {"name": "continuous_a2c_logstd"},
        "network": {
            "name": "actor_critic",
            "separate": False,
            "space": {"continuous": {"mu_activation": "None", "sigma_activation": "None", "mu_init": {"name": "default"},
                                     "sigma_init": {"name": "const_initializer", "val": 0.0}, "fixed_sigma": True}},
            "mlp": {"units": [16], "activation": "elu", "initializer": {"name": "default"}},
        },
        "config": {
            "name": "same_data", "env_name": env_name, "env_config": dict(env_config or {}), "device": "cpu", "ppo_device": "cpu",
            "reward_shaper": {"scale_value": 1.0}, "normalize_input": False, "normalize_value": False, "normalize_advantage": True,
            "value_bootstrap": True, "gamma": 0.9, "tau": 0.95, "learning_rate": 1e-3, "lr_schedule": None, "kl_threshold": 0.008,
            "num_actors": num_actors, "horizon_length": horizon, "minibatch_size": num_actors * horizon, "mini_epochs": 1,
            "e_clip": 0.2, "clip_value": False, "critic_coef": 1.0, "entropy_coef": 0.0, "bounds_loss_coef": 0.0,
            "truncate_grads": False, "grad_norm": 1.0, "max_epochs": 2, "save_frequency": 0, "save_best_after": 1000,
            "print_stats": False, "torch_compile": False, "train_dir": str(train_dir),
        },
    }


def train(params, close=None, vec_env=None):
    """rl_games' PPO trained for the config's epochs; returns what each epoch's ``play_steps`` put in
    the experience buffer (and its returns), every vector-env result it saw, and its episode stats
    (with the model's parameters after training).
    ``close(venv)`` closes the vector env (default: its ``close()``); ``vec_env`` is handed to the
    agent through the config (``env_info`` and ``vec_env``) instead of made from ``env_name``."""
    runner = Runner()
    runner.load({"params": params})
    if vec_env is not None:  # (after load, which deep-copies the config)
        runner.params["config"].update(env_info=vec_env.get_env_info(), vec_env=vec_env)
    agent = runner.algo_factory.create(runner.algo_name, base_name="run", params=runner.params)
    venv, log, rollouts = agent.vec_env, [], []
    reset, step, play_steps = venv.reset, venv.step, agent.play_steps

    def logged_reset():
        out = reset()
        log.append(("reset", out))
        return out

    def logged_step(actions):
        out = step(actions)
        log.append(("step", np.array(actions, copy=True), out))
        return out

    def recorded_play_steps():
        batch = play_steps()
        rollouts.append({**{key: value.clone() for key, value in agent.experience_buffer.tensor_dict.items()}, "returns": batch["returns"].clone()})
        return batch

    venv.reset, venv.step, agent.play_steps = logged_reset, logged_step, recorded_play_steps
    try:
        agent.train()
    finally:
        (close or type(venv).close)(venv)
    scores = agent.algo_observer.game_scores  # what the default observer logs from infos["scores"]
    stats = {"rewards": agent.game_rewards.get_mean(), "lengths": agent.game_lengths.get_mean(), "games": len(agent.game_rewards),
             "scores": scores.get_mean() if scores.current_size else None,
             "parameters": {name: value.detach().cpu().numpy().copy() for name, value in agent.model.state_dict().items()}}
    return rollouts, log, stats
