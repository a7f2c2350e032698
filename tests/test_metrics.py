"""Metrics beyond the Euclidean: cosine, minkowski with p, callables and precomputed distances,
against scikit-learn's neighbours and the definition."""
import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.datasets import load_digits, load_wine
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

from localkit import Kernel, LocalMeanClassifier, LocalMeanRegressor, LocalPolynomialRegressor, local_mean


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:600], y[:600]


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y


def test_cosine_knn_classifier_equals_scikit_learn(digits):
    X, y = digits
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=7, metric="cosine").fit(X[:500], y[:500])
    ref = KNeighborsClassifier(n_neighbors=7, metric="cosine").fit(X[:500], y[:500])
    np.testing.assert_allclose(ours.predict_proba(X[500:]), ref.predict_proba(X[500:]), atol=1e-12)
    np.testing.assert_array_equal(ours.predict(X[500:]), ref.predict(X[500:]))


@pytest.mark.parametrize("p", [1, 3, 4.5])
def test_minkowski_knn_regressor_equals_scikit_learn(wine, p):
    X, y = wine
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=5, metric="minkowski", p=p).fit(X[:150], y[:150])
    ref = KNeighborsRegressor(n_neighbors=5, metric="minkowski", p=p).fit(X[:150], y[:150])
    np.testing.assert_allclose(ours.predict(X[150:]), ref.predict(X[150:]), atol=1e-12)


def test_precomputed_and_callable_distances_equal_scikit_learn(wine):
    X, y = wine
    D_fit, D_new = cdist(X[:150], X[:150]), cdist(X[150:], X[:150])
    ref = KNeighborsRegressor(n_neighbors=6).fit(X[:150], y[:150]).predict(X[150:])
    pre = LocalMeanRegressor(kernel="uniform", n_neighbors=6, metric="precomputed").fit(D_fit, y[:150])
    np.testing.assert_allclose(pre.predict(D_new), ref, atol=1e-12)
    l1 = lambda a, b: float(np.abs(a - b).sum())  # noqa: E731
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=6, metric=l1).fit(X[:150], y[:150]).predict(X[150:])
    ref_l1 = KNeighborsRegressor(n_neighbors=6, metric="manhattan").fit(X[:150], y[:150]).predict(X[150:])
    np.testing.assert_allclose(ours, ref_l1, atol=1e-12)


@pytest.mark.parametrize("metric, scipy_metric, kwargs", [("cosine", "cosine", {}),
                                                          ("minkowski", "minkowski", {"p": 3.0}),
                                                          ("chebyshev", "chebyshev", {})])
@pytest.mark.parametrize("name", ["gaussian", "epanechnikov", "laplacian"])
def test_fixed_bandwidth_local_mean_is_the_definition(wine, metric, scipy_metric, kwargs, name):
    X, y = wine
    h = 0.4 if metric == "cosine" else 3.0
    D = cdist(X[::4], X, scipy_metric, **kwargs) / h
    W = np.exp(Kernel(name).profile.log_k(D**2))
    ref = (W @ y) / W.sum(1)
    got = local_mean(X[::4], X, y, name, h, metric=metric, p=kwargs.get("p", 2), empty="nan")
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    # precomputed distances give the same numbers
    pre = local_mean(cdist(X[::4], X, scipy_metric, **kwargs), cdist(X, X, scipy_metric, **kwargs), y, name, h,
                     metric="precomputed", empty="nan")
    np.testing.assert_allclose(pre, ref, rtol=1e-12)


@pytest.mark.parametrize("metric, scipy_metric", [("cosine", "cosine"), ("manhattan", "cityblock")])
def test_per_point_scales_divide_every_metric(wine, metric, scipy_metric):
    """``u = d(q_i, x_j) / (h * query_scale_i * sample_scale_j)`` from scipy's distances."""
    X, y = wine
    rng = np.random.default_rng(3)
    qs, ss = rng.uniform(0.5, 2, len(X[::4])), rng.uniform(0.5, 2, len(X))
    h = 0.4 if metric == "cosine" else 3.0
    u = cdist(X[::4], X, scipy_metric) / (h * qs[:, None] * ss[None, :])
    W = np.exp(-0.5 * u**2)
    got = local_mean(X[::4], X, y, "gaussian", h, metric=metric, query_scale=qs, sample_scale=ss)
    np.testing.assert_allclose(got, (W @ y) / W.sum(1), rtol=1e-12)


def test_metrics_that_cannot_be_honoured_are_clear_errors(wine):
    X, y = wine
    with pytest.raises(ValueError, match="scalar bandwidth"):
        local_mean(X[:3], X, y, bandwidth="scott", metric="cosine")
    with pytest.raises(ValueError, match="square"):
        local_mean(X[:3], X, y, metric="precomputed")
    with pytest.raises(ValueError, match="p .*>= 1"):
        Kernel(metric="minkowski", p=0.5)
    with pytest.raises(ValueError, match="metric"):
        LocalPolynomialRegressor(metric="cosine").fit(X, y)
    with pytest.raises(ValueError, match="metric"):
        Kernel(metric="mahalanobis-ish")
