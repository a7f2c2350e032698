"""Reliability, round 4 (issue 40): each case of the issue against a reference computed here in
float64 (direct formulas, numerical integrals) or by the reference libraries.

The compiled cache's upgrade test is in ``tests/test_compiled_cache.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from localkit import Kernel, kernel_density, local_mean


# --- 2. a user profile with a closed support is not the uniform kernel -----------------------


def user_cosine(u2, xp):  # log k finite at u = 1 (-37): the cosine profile, written by a user
    return xp.log(xp.cos(xp.pi * xp.sqrt(u2) / 2))


def user_flat_top(u2, xp):  # 1 up to u = 1/2, then falls to e^-1 at the edge: flat at u = 0 and finite at 1
    return xp.where(u2 <= 0.25, 0.0 * u2, 0.25 - u2)


def _k_direct(log_k, u):
    """``k(u)`` in float64 on the closed support ``u <= 1``, 0 beyond."""
    inside = u <= 1.0
    return np.where(inside, np.exp(log_k(np.where(inside, u * u, 0.0), np)), 0.0)


def _cloud(n=200, m=30, d=1, seed=0):
    rng = np.random.default_rng(seed)
    X, Q = rng.uniform(size=(n, d)), rng.uniform(size=(m, d))
    return X, np.sin(6 * X[:, 0]) + X[:, -1], Q


@pytest.mark.parametrize("log_k", [user_cosine, user_flat_top])
@pytest.mark.parametrize("algorithm", ["auto", "dense", "neighbors", "streamed"])
def test_user_profile_finite_at_the_edge_is_computed_as_stated(log_k, algorithm):
    X, y, Q = _cloud(d=2)
    h = 0.5
    w = _k_direct(log_k, np.sqrt(((Q[:, None] - X[None]) ** 2).sum(-1)) / h)
    K = Kernel(log_k, bandwidth=h, support=1.0)
    np.testing.assert_allclose(local_mean(Q, X, y, K, algorithm=algorithm), w @ y / w.sum(1), rtol=0, atol=1e-12)
    # the density: the sums over the profile's integral, numerically (1-D: 2 int_0^1 k(r) dr h)
    X1, Q1 = X[:, :1], Q[:, :1]
    w1 = _k_direct(log_k, np.abs(Q1 - X1.T) / h)
    mass = 2 * h * integrate.quad(lambda r: float(_k_direct(log_k, np.array(r))), 0, 1, epsabs=1e-13)[0]
    np.testing.assert_allclose(kernel_density(Q1, X1, K, algorithm=algorithm), w1.sum(1) / (len(X1) * mass),
                               rtol=1e-9)


# --- 4. log k is defined up to a constant; a NaN at run time raises --------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("algorithm", ["auto", "dense", "streamed", "binned"])
@pytest.mark.parametrize("offset", [200.0, 1000.0, -1000.0])
def test_a_constant_added_to_log_k_changes_no_local_mean(offset, algorithm, dtype):
    X, y, Q = _cloud(n=300)
    h = 0.1
    w = np.exp(-0.5 * ((Q - X.T) / h) ** 2)  # the Gaussian, in float64
    K = Kernel(lambda u2, xp: offset - u2 / 2, bandwidth=h)
    m = local_mean(Q.astype(dtype), X.astype(dtype), y.astype(dtype), K, algorithm=algorithm)
    assert m.dtype == dtype
    tol = 1e-9 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(m, w @ y / w.sum(1), rtol=0, atol=tol)
    density = kernel_density(Q, X, K, algorithm=algorithm)
    np.testing.assert_allclose(density, w.sum(1) / (len(X) * h * np.sqrt(2 * np.pi)), rtol=1e-8)


def nan_beyond_three(u2, xp):  # the construction's probe looks at u2 in [0, 4] only
    return xp.where(u2 > 9.0, xp.nan, -u2 / 2)


@pytest.mark.parametrize("algorithm", ["auto", "dense", "streamed", "binned"])
def test_nan_from_a_user_profile_at_run_time_raises(algorithm):
    X, y, Q = _cloud(n=300)
    K = Kernel(nan_beyond_three, bandwidth=0.1)
    with pytest.raises(ValueError, match="user profile nan_beyond_three returned NaN at u2"):
        local_mean(Q, X, y, K, algorithm=algorithm)
    with pytest.raises(ValueError, match="returned NaN"):
        kernel_density(Q, X, K, algorithm=algorithm)


def test_nan_from_a_user_profile_in_attention_raises():
    torch = pytest.importorskip("torch")
    from localkit.nn import kernel_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, 5, 2, generator=g), 5 * torch.randn(1, 7, 2, generator=g), torch.randn(1, 7, 3, generator=g)
    with pytest.raises(ValueError, match="returned NaN"):
        kernel_attention(q, k, v, kernel=Kernel(nan_beyond_three), bandwidth=1.0)
