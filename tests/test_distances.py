"""The one formation of a block's log-weights (``Kernel.log_weights`` over ``kernels.distances``) on
another array namespace equals NumPy's, and each distance rule equals its float64 definition."""
import array_api_strict as xps
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from localkit.kernels import Kernel
from localkit.kernels.distances import (exact_sq_distances, refined_sq_distances, rescale, row_sq, sq_distances,
                                        summed_sq_distances)


def _points(seed=0, n_q=40, n_s=70, d=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_s, d))
    Q = np.concatenate([rng.normal(size=(n_q - 3, d)), X[:3] + 1e-9])  # near-duplicates: the refined pairs
    return Q, X


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev", "minkowski", "cosine"])
def test_summed_distances_equal_scipy(metric):
    Q, X = _points()
    kernel = Kernel("gaussian", metric=metric, p=3)
    scipy_metric, kwargs = kernel.scipy_metric
    expected = cdist(Q, X, scipy_metric, **kwargs) ** 2
    got = np.asarray(summed_sq_distances(xps.asarray(Q), xps.asarray(X), kernel, xps))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(exact_sq_distances(Q, X, kernel), expected, rtol=1e-12, atol=1e-15)


def test_refined_distances_keep_near_pairs_relative():
    Q, X = _points()
    kernel = Kernel("laplacian")
    exact = cdist(Q, X, "sqeuclidean")
    got = refined_sq_distances(Q, X, row_sq(Q), row_sq(X), kernel)
    near = exact < 1e-6
    assert near.sum() == 3
    np.testing.assert_allclose(got[near], exact[near], rtol=1e-12)
    # the product form alone loses those pairs' digits: what the refinement is for
    product = sq_distances(Q, X, Kernel("gaussian"))
    assert np.max(np.abs(product[near] - exact[near]) / exact[near]) > 1e-6


def test_rescale_zero_bandwidth_counts_distance_zero_fully():
    u2 = np.array([[0.0, 4.0], [1.0, 9.0]])
    got = rescale(u2.copy(), np.array([0.0, 2.0]), np.array([1.0, 3.0]))
    np.testing.assert_array_equal(got, [[0.0, np.inf], [0.25, 0.25]])
    got_xp = rescale(xps.asarray(u2), xps.asarray([0.0, 2.0]), xps.asarray([1.0, 3.0]), xps)
    np.testing.assert_array_equal(np.asarray(got_xp), got)


@pytest.mark.parametrize("profile", ["gaussian", "laplacian", "epanechnikov", "cauchy"])
@pytest.mark.parametrize("exact", [False, True])
@pytest.mark.parametrize("scales", [False, True])
def test_log_weights_on_another_namespace_equal_numpys(profile, exact, scales):
    Q, X = _points(1)
    kernel = Kernel(profile, bandwidth=1.0)
    rng = np.random.default_rng(2)
    q_scale = rng.uniform(0.5, 2.0, len(Q)) if scales else None
    s_scale = rng.uniform(0.5, 2.0, len(X)) if scales and profile != "gaussian" else None
    L, offset = kernel.log_weights(Q, X, q_scale=q_scale, s_scale=s_scale, exact=exact)
    as_xp = (lambda a: None if a is None else xps.asarray(a))
    L_xp, offset_xp = kernel.log_weights(as_xp(Q), as_xp(X), q_scale=as_xp(q_scale), s_scale=as_xp(s_scale),
                                         exact=exact, xp=xps)
    assert type(L_xp).__module__.startswith("array_api_strict")
    finite = np.isfinite(L)
    np.testing.assert_array_equal(np.isfinite(np.asarray(L_xp)), finite)
    full, full_xp = L + offset[:, None], np.asarray(L_xp) + np.asarray(offset_xp)[:, None]
    np.testing.assert_allclose(full_xp[finite], full[finite], rtol=1e-12, atol=1e-12)
    # and both are log k of the float64 definition
    u2 = cdist(Q, X, "sqeuclidean") / np.outer(1.0 if q_scale is None else q_scale ** 2,
                                              1.0 if s_scale is None else s_scale ** 2)
    np.testing.assert_allclose(full[finite], kernel.profile.log_k(u2)[finite], rtol=1e-9, atol=1e-9)


def test_log_weights_fold_offset_is_log_k():
    Q, X = _points(3)
    kernel = Kernel("gaussian")
    L, offset = kernel.log_weights(xps.asarray(Q), xps.asarray(X), fold_offset=True, xp=xps)
    assert not np.any(np.asarray(offset))
    np.testing.assert_allclose(np.asarray(L), -0.5 * cdist(Q, X, "sqeuclidean"), rtol=1e-12, atol=1e-12)


def test_softmax_log_weights_are_logits_over_temperature_on_any_namespace():
    Q, X = _points(4)
    kernel = Kernel("softmax", bandwidth=0.7)
    expected = Q @ X.T / 0.7
    for xp, asarray in ((np, np.asarray), (xps, xps.asarray)):
        L, offset = kernel.log_weights(asarray(Q), asarray(X), temperature=0.7, xp=xp)
        np.testing.assert_allclose(np.asarray(L), expected, rtol=1e-12, atol=1e-12)  # (Q / T) X^T against Q X^T / T
        assert not np.any(np.asarray(offset))
