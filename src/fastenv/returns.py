"""Value targets over (T, N) rollouts: GAE and n-step returns with correct bootstrapping.

After a SAME_STEP autoreset the observation stored at t+1 belongs to the next episode, so the
value to bootstrap with at an episode's end comes from ``final_values`` (V of the final
observation): added, discounted, for a truncated episode, and 0 for a terminated one. With action
chunks each step has its own discount ``gamma**k`` (``info["chunk_discount"]``); pass them as
``discounts``.

A transition that did not happen (``infos["worker_restarted"]``: its worker died and the action
was never run) is left out with ``valid=False``: its advantage is 0 and its return its own value,
and no other step's target reaches into it (the step before bootstraps from the value of the
observation the lost action was chosen from).

Two implementations compute the same numbers: numpy (vectorised over envs, a loop over time) and
numba (a compiled double loop). ``backend="auto"`` uses numba when it is installed, the faster of
the two in ``benchmarks/bench_returns.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_numba_kernels: Any = None


def _as_2d(name: str, array: Any, shape: tuple[int, int] | None, dtype: Any = np.float64) -> np.ndarray:
    out = np.asarray(array, dtype=dtype)
    if out.ndim != 2 or (shape is not None and out.shape != shape):
        expected = "(T, N)" if shape is None else str(shape)
        raise ValueError(f"{name} must have shape {expected}, got {out.shape}")
    return out


def _inputs(rewards, values, terminations, truncations, final_values, next_values, gamma, discounts, valid):
    rewards = _as_2d("rewards", rewards, None)
    shape = rewards.shape
    values = _as_2d("values", values, shape)
    terminations = _as_2d("terminations", terminations, shape, np.bool_)
    truncations = _as_2d("truncations", truncations, shape, np.bool_)
    valid = np.ones(shape, dtype=bool) if valid is None else _as_2d("valid", valid, shape, np.bool_)
    if final_values is None:
        bootstrapped = truncations & ~terminations & valid
        if bootstrapped.any():
            t, n = np.argwhere(bootstrapped)[0].tolist()
            raise ValueError(
                f"truncations has {int(bootstrapped.sum())} truncated steps (the first at t={t}, env {n}) but "
                "final_values is None: a truncated episode bootstraps from V(infos['final_obs']); pass "
                "final_values, or count them in terminations to bootstrap them from 0"
            )
        final_values = np.zeros(shape)
    else:
        final_values = _as_2d("final_values", final_values, shape)
    next_values = np.asarray(next_values, dtype=np.float64)
    if next_values.shape != (shape[1],):
        raise ValueError(f"next_values must have shape ({shape[1]},), got {next_values.shape}")
    if discounts is None:
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        discounts = np.full(shape, float(gamma))
    else:
        discounts = _as_2d("discounts", discounts, shape)
    # The value that follows step t: V(final obs) after a truncation, 0 after a termination,
    # else V of the next stored observation (next_values after the last step).
    following = np.empty(shape)
    following[:-1] = values[1:]
    following[-1] = next_values
    following = np.where(truncations, final_values, following)
    following = np.where(terminations, 0.0, following)
    continues = ~(terminations | truncations)
    continues[:-1] &= valid[1:]  # a window stops before a transition that did not happen
    return rewards, values, following, continues, discounts, valid


def _backend(backend: str) -> str:
    if backend not in ("auto", "numpy", "numba"):
        raise ValueError(f"backend must be 'auto', 'numpy' or 'numba', got {backend!r}")
    if backend == "auto":
        return "numba" if _numba() is not None else "numpy"
    if backend == "numba" and _numba() is None:
        from gymnasium.error import DependencyNotInstalled

        from fastenv._deps import install_command

        raise DependencyNotInstalled(f"numba is not installed: {install_command('numba')}")
    return backend


def _numba() -> Any:
    global _numba_kernels
    if _numba_kernels is None:
        try:
            import numba
        except ImportError:
            _numba_kernels = False
            return None

        @numba.njit(cache=False)
        def gae_kernel(rewards, values, following, continues, discounts, valid, lam):
            steps, envs = rewards.shape
            adv = np.empty_like(rewards)
            for n in range(envs):
                last = 0.0
                for t in range(steps - 1, -1, -1):
                    if not valid[t, n]:
                        last = 0.0
                        adv[t, n] = 0.0
                        continue
                    delta = rewards[t, n] + discounts[t, n] * following[t, n] - values[t, n]
                    last = delta + discounts[t, n] * lam * continues[t, n] * last
                    adv[t, n] = last
            return adv

        @numba.njit(cache=False)
        def nstep_kernel(rewards, values, following, continues, discounts, valid, n_steps):
            steps, envs = rewards.shape
            out = np.empty_like(rewards)
            for n in range(envs):
                for t in range(steps):
                    if not valid[t, n]:
                        out[t, n] = values[t, n]
                        continue
                    total = 0.0
                    scale = 1.0
                    end = min(t + n_steps, steps)
                    for i in range(t, end):
                        total += scale * rewards[i, n]
                        scale *= discounts[i, n]
                        if not continues[i, n] or i == end - 1:
                            total += scale * following[i, n]
                            break
                    out[t, n] = total
            return out

        _numba_kernels = (gae_kernel, nstep_kernel)
    return _numba_kernels or None


def gae(
    rewards: Any,
    values: Any,
    terminations: Any,
    truncations: Any,
    next_values: Any,
    *,
    final_values: Any = None,
    gamma: float = 0.99,
    lam: float = 0.95,
    discounts: Any = None,
    valid: Any = None,
    backend: str = "auto",
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimates and returns (advantages + values), both (T, N).

    Args:
        rewards: (T, N) from the rollout.
        values: (T, N) from the rollout; ``values[t]`` is V of the observation the action at t was
            taken from.
        terminations: (T, N) from the rollout.
        truncations: (T, N) from the rollout.
        next_values: (N,) V of the observation after the last step.
        final_values: (T, N) V of ``infos["final_obs"]`` where an episode ended (read where
            truncated; required when there are truncations).
        gamma: per-step discount, used when ``discounts`` is None.
        lam: GAE lambda.
        discounts: (T, N) per-step discounts, e.g. ``infos["chunk_discount"]`` for action chunks.
        valid: (T, N) False for transitions that did not happen (``infos["worker_restarted"]``);
            leave them out of the loss too.
        backend: "auto", "numpy" or "numba".

    Examples:
        >>> adv, ret = gae(r, v, term, trunc, v_last, final_values=v_final, gamma=0.99, lam=0.95)
    """
    rewards, values, following, continues, discounts, valid = _inputs(
        rewards, values, terminations, truncations, final_values, next_values, gamma, discounts, valid
    )
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    if _backend(backend) == "numba":
        adv = _numba()[0](rewards, values, following, continues.astype(np.float64), discounts, valid, float(lam))
    else:
        deltas = rewards + discounts * following - values
        decay = discounts * lam * continues
        adv = np.empty_like(rewards)
        last = np.zeros(rewards.shape[1])
        for t in range(rewards.shape[0] - 1, -1, -1):
            last = np.where(valid[t], deltas[t] + decay[t] * last, 0.0)
            adv[t] = last
    return adv, adv + values


def n_step_returns(
    rewards: Any,
    values: Any,
    terminations: Any,
    truncations: Any,
    next_values: Any,
    *,
    n: int,
    final_values: Any = None,
    gamma: float = 0.99,
    discounts: Any = None,
    valid: Any = None,
    backend: str = "auto",
) -> np.ndarray:
    """n-step returns (T, N): up to n discounted rewards, then the bootstrap value.

    The window stops at an episode's end (bootstrapping from ``final_values`` when truncated, 0
    when terminated), at the rollout's end (bootstrapping from ``next_values``), and before a
    transition that did not happen (``valid``; bootstrapping from the value of its observation).

    Examples:
        >>> ret = n_step_returns(r, v, term, trunc, v_last, n=5, final_values=v_final)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    rewards, values, following, continues, discounts, valid = _inputs(
        rewards, values, terminations, truncations, final_values, next_values, gamma, discounts, valid
    )
    if _backend(backend) == "numba":
        return _numba()[1](rewards, values, following, continues, discounts, valid, int(n))
    steps = rewards.shape[0]
    out = np.empty_like(rewards)
    # G_t = r_t + d_t * (c_t * G_{t+1}^{(n-1)} + (1 - c_t) * following_t), with windows cut at T.
    for t in range(steps):
        end = min(t + n, steps)
        total = np.zeros(rewards.shape[1])
        scale = np.ones(rewards.shape[1])
        alive = np.ones(rewards.shape[1], dtype=bool)
        for i in range(t, end):
            total += np.where(alive, scale * rewards[i], 0.0)
            scale = scale * discounts[i]
            stop = alive & (~continues[i] | (i == end - 1))
            total += np.where(stop, scale * following[i], 0.0)
            alive &= ~stop
        out[t] = np.where(valid[t], total, values[t])
    return out
