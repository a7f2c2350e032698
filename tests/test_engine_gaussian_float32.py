"""The dense path's float32 Gaussian (log2-weights summed with exp2, cache-sized blocks) against
the definition in float64, with every option that changes its log-weights."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from localkit import local_sums

rng = np.random.default_rng(0)
X = rng.normal(size=(1500, 5)).astype(np.float32)
Q = rng.normal(size=(700, 5)).astype(np.float32)
V = np.c_[np.sin(X[:, 0]), np.cos(X[:, 1])].astype(np.float32)
C = rng.uniform(0, 2, len(X)).astype(np.float32)
C[::7] = 0  # dropped samples
S = rng.uniform(0.5, 1.5, len(X)).astype(np.float32)
H = np.array([0.8, 1.0, 1.2, 0.9, 1.1])
#: float32 log-weights of size up to ~40 carry ~40 * 2^-24 = 2.4e-6 each, and the sums their own rounding
LOG_SUM_ATOL = 2e-5


def definition(Q, X, v, h=1.0, q_scale=None, s_scale=None, c=None, exclude_self=False):
    """``(mean, log weight sum)`` from ``exp(-|q - x|^2 / (2 h^2 q_i^2 s_j^2))``, in float64."""
    Q, X, v = (np.asarray(a, dtype=np.float64) for a in (Q, X, v))
    u2 = cdist(Q / h, X / h, "sqeuclidean")
    if q_scale is not None:
        u2 /= np.asarray(q_scale, dtype=float)[:, None] ** 2
    if s_scale is not None:
        u2 /= np.asarray(s_scale, dtype=float) ** 2
    with np.errstate(divide="ignore"):
        L = -u2 / 2 + (0.0 if c is None else np.log(np.asarray(c, dtype=float)))
    if exclude_self:
        np.fill_diagonal(L, -np.inf)
    top = L.max(axis=1, keepdims=True)  # shifted, so that no row underflows
    W = np.exp(L - top)
    return (W @ v) / W.sum(1)[:, None], top[:, 0] + np.log(W.sum(1))


CASES = {  # name: (engine keywords, definition keywords)
    "plain": ({}, {}),
    "per-feature bandwidth": ({"bandwidth": H}, {"h": H}),
    "sample weights": ({"sample_weight": C}, {"c": C}),
    "per-sample scales": ({"sample_scale": S}, {"s_scale": S}),
    "per-query scales": ({"query_scale": S[:len(Q)]}, {"q_scale": S[:len(Q)]}),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("block_size", [None, (64, 200)])
def test_float32_gaussian_equals_the_definition(name, block_size):
    engine_kw, ref_kw = CASES[name]
    got = local_sums(Q, X, V, block_size=block_size, **engine_kw)
    mean, log_sum = definition(Q, X, V, **ref_kw)
    assert got.mean.dtype == np.float32
    np.testing.assert_allclose(got.mean, mean, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.log_weight_sum, log_sum, rtol=0, atol=LOG_SUM_ATOL)


def test_float32_gaussian_leave_one_out_and_knn_bandwidths():
    got = local_sums(None, X, V, n_neighbors=12, exclude_self=True)
    D = cdist(X.astype(float), X.astype(float))
    np.fill_diagonal(D, np.inf)
    kth = np.sort(D, axis=1)[:, 11]
    mean, log_sum = definition(X, X, V, q_scale=kth, exclude_self=True)
    np.testing.assert_allclose(got.mean, mean, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.log_weight_sum, log_sum, rtol=0, atol=LOG_SUM_ATOL)


@pytest.mark.parametrize("block_size", [None, (32, 500)])
def test_float32_gaussian_far_from_the_centre(block_size):
    """Samples spread over 2,000 bandwidths: query blocks lie beyond the matrix-product form's
    reach about the samples' centre; wide blocks form exact distances, narrow ones are recentred."""
    rng = np.random.default_rng(2)
    x = (rng.uniform(-1, 1, (4000, 2)) * [500, 1]).astype(np.float32)
    q = (rng.uniform(-1, 1, (600, 2)) * [500, 1]).astype(np.float32)
    v = np.sin(x[:, 0] / 7).astype(np.float32)
    got = local_sums(q, x, v, bandwidth=0.5, block_size=block_size)
    mean, log_sum = definition(q, x, v[:, None], h=0.5)
    np.testing.assert_allclose(got.mean, mean[:, 0], rtol=0, atol=1e-4)
    np.testing.assert_allclose(got.log_weight_sum, log_sum, rtol=0, atol=1e-3)


def test_float32_gaussian_rows_whose_weights_underflow_take_the_log_sum_exp_pass():
    """Queries 10-25 bandwidths from the samples: their weight sums (down to exp(-240)) lie below
    the bounded pass's floor, and the log-sum-exp pass gives them in full."""
    rng = np.random.default_rng(1)
    directions = rng.normal(size=(300, 5))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    q = (directions * rng.uniform(10, 25, (300, 1))).astype(np.float32)
    got = local_sums(q, X, V)
    mean, log_sum = definition(q, X, V)
    assert log_sum.min() < -200
    np.testing.assert_allclose(got.mean, mean, rtol=0, atol=2e-5)
    np.testing.assert_allclose(got.log_weight_sum, log_sum, rtol=2e-6, atol=0)
