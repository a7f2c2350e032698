"""The fixed costs removed from a call (issue 36) change no result: the compiled pass's values
laid out once, the checks that a plain float array skips, the grid a few queries never build,
the per-row fixed point's bookkeeping. Each against a direct float64 formula or the checks it skips."""
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.datasets import load_diabetes
from sklearn.utils.validation import validate_data

from localkit import Kernel, KernelDensity, LocalMeanRegressor
from localkit.engine import BoundKernel, iterate, row_max_abs_change
from localkit.engine.planner import Pass


def _epanechnikov_means(X, Q, h, V, c=None):
    """``sum_j c_j k(u_ij) v_j / sum_j c_j k(u_ij)`` and the weight sum, in float64, pair by pair."""
    u2 = ((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=2) / h ** 2
    K = np.where(u2 <= 1.0, 1.0 - u2, 0.0) * (1.0 if c is None else c)
    return K @ V / K.sum(axis=1, keepdims=True), K.sum(axis=1)


@pytest.mark.parametrize("weighted", [False, True])
def test_compiled_pass_values_laid_out_once_follow_the_values(weighted):
    """Two prepared value sets passed in turn (and a plain array): each pass sums its own values,
    as the formula does, although the strips' layout of the values is kept between calls."""
    rng = np.random.default_rng(0)
    X, Q = rng.normal(size=(3000, 2)), rng.normal(size=(7, 2))
    c = rng.uniform(0.5, 2.0, len(X)) if weighted else None
    bound = BoundKernel(Kernel("epanechnikov", bandwidth=0.4), X, sample_weight=c)
    assert bound.explain(Q).path == "compiled"
    V1, V2 = np.sin(X[:, 0]), np.c_[X[:, 1] ** 2, np.cos(X[:, 0])]
    p1, p2 = bound.prepare(V1), bound.prepare(V2)
    for values, V in ((p1, V1), (p2, V2), (p1, V1), (V2, V2), (p2, V2)):
        mean, weight_sum = _epanechnikov_means(X, Q, 0.4, V.reshape(len(X), -1), c)
        out = bound.sums(Q, values)
        np.testing.assert_allclose(out.mean.reshape(mean.shape), mean, rtol=1e-12)
        np.testing.assert_allclose(out.weight_sum, weight_sum, rtol=1e-12)


def test_density_without_values_is_laid_out_once_and_stays_exact():
    """``sums(queries)`` without values reuses one layout: repeated densities equal the formula."""
    rng = np.random.default_rng(1)
    X, Q = rng.normal(size=(2000, 3)), rng.normal(size=(5, 3))
    bound = BoundKernel(Kernel("epanechnikov", bandwidth=1.5), X)
    assert bound.prepare(None) is bound.prepare(None)
    _, weight_sum = _epanechnikov_means(X, Q, 1.5, np.ones((len(X), 1)))
    for _ in range(2):
        np.testing.assert_allclose(bound.sums(Q).weight_sum, weight_sum, rtol=1e-12)


def test_few_queries_build_no_grid():
    """Binning alone would cost as much as the exact pass of 10 queries: the planner decides so
    without the grid (the extent of every sample), and takes the exact compiled pass."""
    rng = np.random.default_rng(2)
    X, Q = rng.normal(size=(120_000, 3)), rng.normal(size=(10, 3))
    bound = BoundKernel(Kernel("epanechnikov", bandwidth=0.3), X)
    a = Pass(bound, Q, None, False)
    assert not a.binned_by_default()
    assert "grid" not in a.__dict__
    assert bound.explain(Q).path == "compiled"


def test_plain_arrays_skip_validate_data_with_its_result():
    """A finite float ndarray is what scikit-learn's validate_data would return: the same array,
    ``n_features_in_`` set and feature names dropped; anything else still takes it, and its messages."""
    X, y = load_diabetes(return_X_y=True)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    est = LocalMeanRegressor(kernel="uniform", n_neighbors=7).fit(frame, y)
    assert hasattr(est, "feature_names_in_")
    est.fit(X, y)  # refit on an array: the names go, as validate_data drops them
    assert not hasattr(est, "feature_names_in_") and est.n_features_in_ == X.shape[1]
    Q = X[:5]
    assert est._validate_queries(Q) is Q and validate_data(est, Q, reset=False) is Q
    bad = X[:5].copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est.predict(bad)
    with pytest.raises(ValueError, match="X has 3 features, but LocalMeanRegressor is expecting 10"):
        est.predict(X[:5, :3])
    est.fit(frame, y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.predict(X[:5])  # an array at an estimator fitted with names: scikit-learn's warning
    assert any("feature names" in str(w.message) for w in caught)


def test_density_fit_on_a_plain_array_matches_scikit_learn():
    """The fit's fast path gives the density scikit-learn's KernelDensity gives."""
    from sklearn.neighbors import KernelDensity as Reference

    X = np.random.default_rng(3).normal(size=(500, 2))
    ours = KernelDensity(kernel="epanechnikov", bandwidth=0.5).fit(X)
    ref = Reference(kernel="epanechnikov", bandwidth=0.5).fit(X)
    np.testing.assert_allclose(ours.score_samples(X[:20]), ref.score_samples(X[:20]), rtol=1e-12)
    assert ours.n_features_in_ == 2


def test_per_row_driver_counts_and_freezes_rows():
    """Rows stop on their own change; each row's count is the updates it took, the whole state
    that of a direct loop over the rows (x -> x / 2 stops when |x / 2 - x| <= tol)."""
    x = np.array([[1.0, 0.0], [8.0, -4.0], [0.0, 0.0], [1024.0, 3.0]])
    out = iterate(lambda S, rows: S / 2.0, x, tol=0.25, max_iter=50, per_row=True, inclusive=True,
                  change=row_max_abs_change)
    expected_iter = []
    for row in x:
        s, n = row.copy(), 0
        while True:
            new, n = s / 2.0, n + 1
            done = np.max(np.abs(new - s)) <= 0.25
            s = new
            if done:
                break
        expected_iter.append(n)
        np.testing.assert_array_equal(out.state[len(expected_iter) - 1], s)
    np.testing.assert_array_equal(out.row_iter, expected_iter)
    assert out.n_iter == max(expected_iter) and out.converged.all()
    capped = iterate(lambda S, rows: S / 2.0, x, tol=0.25, max_iter=3, per_row=True, inclusive=True,
                     change=row_max_abs_change, warn=False)
    np.testing.assert_array_equal(capped.row_iter, np.minimum(expected_iter, 3))
    np.testing.assert_array_equal(capped.converged, np.array(expected_iter) <= 3)
