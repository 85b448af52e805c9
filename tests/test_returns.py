"""GAE and n-step returns against a plain reference loop, with truncation bootstrapping."""

import numpy as np
import pytest

from fastenv.returns import gae, n_step_returns

BACKENDS = ["numpy", "numba"]


def reference_gae(r, v, term, trunc, final_v, next_v, discounts, lam):
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        last = 0.0
        for t in reversed(range(T)):
            if term[t, n]:
                following, cont = 0.0, 0.0
            elif trunc[t, n]:
                following, cont = final_v[t, n], 0.0
            else:
                following = next_v[n] if t == T - 1 else v[t + 1, n]
                cont = 1.0
            delta = r[t, n] + discounts[t, n] * following - v[t, n]
            last = delta + discounts[t, n] * lam * cont * last
            adv[t, n] = last
    return adv


def reference_nstep(r, v, term, trunc, final_v, next_v, discounts, k):
    T, N = r.shape
    out = np.zeros((T, N))
    for n in range(N):
        for t in range(T):
            total, scale = 0.0, 1.0
            for i in range(t, min(t + k, T)):
                total += scale * r[i, n]
                scale *= discounts[i, n]
                if term[i, n]:
                    break
                if trunc[i, n]:
                    total += scale * final_v[i, n]
                    break
                if i == min(t + k, T) - 1:
                    total += scale * (next_v[n] if i == T - 1 else v[i + 1, n])
            out[t, n] = total
    return out


def rollout(seed=0, T=40, N=5, chunk_discounts=False):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(T, N))
    v = rng.normal(size=(T, N))
    term = rng.random((T, N)) < 0.08
    trunc = (rng.random((T, N)) < 0.08) & ~term
    final_v = np.where(term | trunc, rng.normal(size=(T, N)), 0.0)
    next_v = rng.normal(size=N)
    if chunk_discounts:  # gamma ** k with k executed sub-steps (shorter chunks when an episode ends)
        k = np.where(term | trunc, rng.integers(1, 9, (T, N)), 8)
        discounts = 0.99**k
    else:
        discounts = np.full((T, N), 0.97)
    return r, v, term, trunc, final_v, next_v, discounts


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("chunks", [False, True])
def test_gae_matches_the_reference_loop(backend, chunks):
    r, v, term, trunc, final_v, next_v, disc = rollout(chunk_discounts=chunks)
    kwargs = {"discounts": disc} if chunks else {"gamma": 0.97}
    adv, ret = gae(r, v, term, trunc, next_v, final_values=final_v, lam=0.9, backend=backend, **kwargs)
    expected = reference_gae(r, v, term, trunc, final_v, next_v, disc, 0.9)
    np.testing.assert_allclose(adv, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret, expected + v, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 3, 50])
@pytest.mark.parametrize("chunks", [False, True])
def test_n_step_matches_the_reference_loop(backend, n, chunks):
    r, v, term, trunc, final_v, next_v, disc = rollout(seed=n, chunk_discounts=chunks)
    kwargs = {"discounts": disc} if chunks else {"gamma": 0.97}
    out = n_step_returns(r, v, term, trunc, next_v, n=n, final_values=final_v, backend=backend, **kwargs)
    np.testing.assert_allclose(out, reference_nstep(r, v, term, trunc, final_v, next_v, disc, n), rtol=1e-12, atol=1e-12)


def test_truncation_bootstraps_from_the_final_value_and_termination_does_not():
    r = np.array([[1.0, 1.0]])
    v = np.zeros((1, 2))
    term = np.array([[True, False]])
    trunc = np.array([[False, True]])
    final_v = np.array([[100.0, 10.0]])  # ignored for the terminated env
    _, ret = gae(r, v, term, trunc, np.array([5.0, 5.0]), final_values=final_v, gamma=0.5, lam=1.0)
    np.testing.assert_allclose(ret, [[1.0, 1.0 + 0.5 * 10.0]])
    ret1 = n_step_returns(r, v, term, trunc, np.array([5.0, 5.0]), n=1, final_values=final_v, discounts=np.array([[0.25, 0.25]]))
    np.testing.assert_allclose(ret1, [[1.0, 1.0 + 0.25 * 10.0]])


def test_one_step_gae_with_lambda_zero_is_the_td_target():
    r, v, term, trunc, final_v, next_v, disc = rollout(seed=3)
    _, ret = gae(r, v, term, trunc, next_v, final_values=final_v, gamma=0.97, lam=0.0)
    td = n_step_returns(r, v, term, trunc, next_v, n=1, final_values=final_v, gamma=0.97)
    np.testing.assert_allclose(ret, td, rtol=1e-12)


def test_bad_shapes_and_arguments():
    r, v, term, trunc, final_v, next_v, _ = rollout()
    with pytest.raises(ValueError, match=r"values must have shape \(40, 5\), got \(40, 4\)"):
        gae(r, v[:, :4], term, trunc, next_v, final_values=final_v)
    with pytest.raises(ValueError, match=r"next_values must have shape \(5,\)"):
        gae(r, v, term, trunc, next_v[:2], final_values=final_v)
    with pytest.raises(ValueError, match="lam must be in"):
        gae(r, v, term, trunc, next_v, final_values=final_v, lam=2.0)
    with pytest.raises(ValueError, match="backend must be"):
        gae(r, v, term, trunc, next_v, final_values=final_v, backend="cuda")
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        n_step_returns(r, v, term, trunc, next_v, n=0)
    with pytest.raises(ValueError, match=r"valid must have shape \(40, 5\)"):
        gae(r, v, term, trunc, next_v, final_values=final_v, valid=np.ones((40, 4), bool))


@pytest.mark.parametrize("fn", [gae, n_step_returns])
def test_truncations_without_final_values_are_refused(fn):
    # Bootstrapping a truncated episode from 0 silently turns it into a termination.
    r, v, term, trunc, final_v, next_v, _ = rollout()
    assert (trunc & ~term).any()
    kwargs = {"n": 3} if fn is n_step_returns else {}
    with pytest.raises(ValueError, match=r"truncated steps \(the first at t=\d+, env \d+\) but final_values is None"):
        fn(r, v, term, trunc, next_v, **kwargs)
    fn(r, v, term, np.zeros_like(trunc), next_v, **kwargs)  # no truncation: nothing to bootstrap


def reference_with_invented_steps(fn, r, v, term, trunc, final_v, next_v, disc, valid, **kwargs):
    """The reference on each env's valid stretches: a step before an invented one bootstraps from
    the value of the observation that follows it; invented steps get advantage 0 / return V."""
    T, N = r.shape
    out = np.zeros((T, N))
    for n in range(N):
        t = 0
        while t < T:
            if not valid[t, n]:
                out[t, n] = 0.0 if fn == "gae" else v[t, n]
                t += 1
                continue
            end = t
            while end < T and valid[end, n]:
                end += 1
            sl = slice(t, end)
            following = next_v[n] if end == T else v[end, n]
            args = (r[sl, n : n + 1], v[sl, n : n + 1], term[sl, n : n + 1], trunc[sl, n : n + 1], final_v[sl, n : n + 1], np.array([following]), disc[sl, n : n + 1])
            if fn == "gae":
                out[sl, n] = reference_gae(*args, kwargs["lam"])[:, 0]
            else:
                out[sl, n] = reference_nstep(*args, kwargs["n"])[:, 0]
            t = end
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invented_transitions_are_left_out(backend, seed):
    r, v, term, trunc, final_v, next_v, disc = rollout(seed=seed, chunk_discounts=True)
    valid = np.random.default_rng(seed + 10).random(r.shape) > 0.1
    assert (~valid).sum() > 5
    adv, ret = gae(r, v, term, trunc, next_v, final_values=final_v, discounts=disc, lam=0.9, valid=valid, backend=backend)
    expected = reference_with_invented_steps("gae", r, v, term, trunc, final_v, next_v, disc, valid, lam=0.9)
    np.testing.assert_allclose(adv, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ret[~valid], v[~valid])
    out = n_step_returns(r, v, term, trunc, next_v, n=4, final_values=final_v, discounts=disc, valid=valid, backend=backend)
    expected = reference_with_invented_steps("nstep", r, v, term, trunc, final_v, next_v, disc, valid, n=4)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
