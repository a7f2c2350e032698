"""Bandwidth selection by exact leave-one-out, rules, per-feature and adaptive bandwidths. The
brute-force references are written out here with dense numpy matrices, not the engine."""
import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.special import softmax
from sklearn.datasets import load_diabetes, load_iris
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from localkit import LocalMeanClassifier, LocalMeanRegressor, LocalPolynomialRegressor, local_mean
from localkit.exceptions import NearSingularDesignWarning
from localkit.models.selection import sample_point_scales


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:250, :5], y[:250]


def brute_nw_loo(X, Y, h):
    """Gaussian Nadaraya–Watson leave-one-out predictions from the dense kernel matrix, every row
    at the query's point left out (iris repeats a row: its copy must not predict it)."""
    L = -cdist(X, X, "sqeuclidean") / (2 * h * h)
    L[cdist(X, X) == 0] = -np.inf
    return softmax(L, axis=1) @ Y  # log-space: a tiny h gives the nearest other sample, not 0/0


def fine_grid(X):
    s = np.sqrt(np.var(X, axis=0).sum())
    return np.geomspace(s / 50, 5 * s, 150)


def test_cv_regression_beats_a_fine_grid(diabetes):
    X, y = diabetes
    model = LocalMeanRegressor(bandwidth="cv").fit(X, y)
    loo = lambda h: np.mean((brute_nw_loo(X, y[:, None], h)[:, 0] - y) ** 2)
    best_grid = min(loo(h) for h in fine_grid(X))
    assert loo(model.bandwidth_) <= best_grid + 1e-9 * best_grid
    # the stored curve is the brute-force curve
    hs, curve = model.cv_results_["bandwidth"], model.cv_results_["loo_loss"]
    np.testing.assert_allclose(curve[::5], [loo(h) for h in hs[::5]], rtol=1e-9)


def test_cv_classification_brier_beats_a_fine_grid():
    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    onehot = np.eye(3)[y]
    brier = lambda h: np.mean(np.sum((brute_nw_loo(X, onehot, h) - onehot) ** 2, axis=1))
    model = LocalMeanClassifier(bandwidth="cv").fit(X, y)
    assert brier(model.bandwidth_) <= min(brier(h) for h in fine_grid(X)) + 1e-12
    assert model.score(X, y) > 0.9


def test_cv_local_polynomial_beats_a_fine_grid():
    rng = np.random.default_rng(1)
    x = np.sort(rng.uniform(0, 2 * np.pi, 150))
    y = np.sin(x) + 0.3 * rng.normal(size=len(x))
    X = x[:, None]
    model = LocalPolynomialRegressor(kernel="gaussian", bandwidth="cv").fit(X, y)

    def loo(h):  # refit without each sample: the definition, no smoother algebra
        preds = [LocalPolynomialRegressor(kernel="gaussian", bandwidth=h).fit(np.delete(X, i, 0), np.delete(y, i))
                 .predict(X[i:i + 1])[0] for i in range(len(X))]
        return np.mean((np.array(preds) - y) ** 2)

    # exact leave-one-out: the selector's score is the refit score
    h = model.bandwidth_
    np.testing.assert_allclose(model._loo_loss(X, y, h), loo(h), rtol=1e-10)
    np.testing.assert_allclose(np.mean((model.loo_predict() - y) ** 2), loo(h), rtol=1e-10)
    grid = np.geomspace(0.03, 18.0, 120)
    best_grid = min(model._loo_loss(X, y, g) for g in grid)
    assert model._loo_loss(X, y, h) <= best_grid


def test_rules_and_per_feature_bandwidths(diabetes):
    X, y = diabetes
    n, d = X.shape
    model = LocalPolynomialRegressor(kernel="gaussian", bandwidth="scott").fit(X, y)
    np.testing.assert_allclose(model.bandwidth_, n ** (-1 / (d + 4)) * X.std(axis=0, ddof=1))
    model = LocalPolynomialRegressor(kernel="gaussian", bandwidth="silverman").fit(X, y)
    np.testing.assert_allclose(model.bandwidth_, (n * (d + 2) / 4) ** (-1 / (d + 4)) * X.std(axis=0, ddof=1))
    # a per-feature bandwidth is the isotropic one on rescaled features
    h = np.array([0.05, 0.1, 0.02, 0.04, 0.08])
    a = LocalPolynomialRegressor(kernel="gaussian", bandwidth=h).fit(X, y).predict(X[:30])
    b = LocalPolynomialRegressor(kernel="gaussian", bandwidth=1.0).fit(X / h, y).predict(X[:30] / h)
    np.testing.assert_allclose(a, b, rtol=1e-9)


def test_balloon_and_sample_point_bandwidths(diabetes):
    X, y = diabetes
    D = cdist(X, X)
    k = 15
    # balloon: h(x*) = distance to the k-th nearest sample
    h_q = np.sort(D, axis=1)[:, k - 1]
    K = np.exp(-(D / h_q[:, None]) ** 2 / 2)
    got = LocalMeanRegressor(n_neighbors=k).fit(X, y).predict(X)
    np.testing.assert_allclose(got, K @ y / K.sum(axis=1), rtol=1e-10)
    # sample point: h_i = distance of sample i to its k-th nearest other sample
    h_s = sample_point_scales(X, k)
    np.testing.assert_allclose(h_s, np.sort(D, axis=1)[:, k])
    K = np.exp(-(D / (0.5 * h_s[None, :])) ** 2 / 2)
    got = local_mean(X, X, y, "gaussian", bandwidth=0.5, sample_scale=h_s)
    np.testing.assert_allclose(got, K @ y / K.sum(axis=1), rtol=1e-10)


def test_bad_cv_requests(diabetes):
    X, y = diabetes
    with pytest.raises(ValueError, match="n_neighbors"):
        LocalMeanRegressor(bandwidth="cv", n_neighbors=5).fit(X, y)
    with pytest.raises(ValueError, match="at least 3"):
        LocalMeanRegressor(bandwidth="cv").fit(X[:2], y[:2])
    with pytest.raises(ValueError, match="coincide"):
        LocalMeanRegressor(bandwidth="cv").fit(np.ones((10, 2)), y[:10])
    with pytest.raises(ValueError, match="n_neighbors"):
        sample_point_scales(X, len(X))


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier])
def test_check_estimator_with_cv(Est):
    # every check: the leave-one-out error is weighted as the fit (copies of a row leave out
    # together, engine/twins.py), so integer weights select the repeated rows' bandwidth
    check_estimator(Est(bandwidth="cv"))


@pytest.mark.parametrize("Est", [LocalMeanRegressor, LocalMeanClassifier, LocalPolynomialRegressor])
def test_cv_with_integer_weights_selects_the_repeated_rows_bandwidth(Est):
    """scikit-learn's weight-equivalence check on bandwidth='cv' (it failed: the leave-one-out
    error and its grid ignored the weights), and the same on diabetes."""
    from sklearn.utils.estimator_checks import check_sample_weight_equivalence_on_dense_data

    with warnings.catch_warnings(record=True) as caught:  # the check's 15 points: local lines singular at
        warnings.simplefilter("always", NearSingularDesignWarning)  # the chosen h, where they fall back
        check_sample_weight_equivalence_on_dense_data(Est.__name__, Est(bandwidth="cv"))
    assert not caught or Est is LocalPolynomialRegressor
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:120, :3], (y[:120] if Est is not LocalMeanClassifier else y[:120] > 140)
    c = np.random.default_rng(1).integers(0, 4, size=len(X))
    weighted = Est(bandwidth="cv").fit(X, y, sample_weight=c)
    repeated = Est(bandwidth="cv").fit(np.repeat(X, c, axis=0), np.repeat(y, c))
    assert weighted.bandwidth_ == pytest.approx(repeated.bandwidth_, rel=1e-6)


def test_sample_point_local_linear_equals_weighted_least_squares(diabetes):
    X, y = diabetes
    X = X[:, [0, 2]] / X[:, [0, 2]].std(axis=0)  # age and bmi: continuous, so every design is regular
    h_s = sample_point_scales(X, 10)
    D = cdist(X[:30], X)
    for kernel, profile in [("gaussian", lambda u: np.exp(-u * u / 2)),
                            ("epanechnikov", lambda u: np.clip(1 - u * u, 0, None))]:
        model = LocalPolynomialRegressor(kernel=kernel, bandwidth=1.5, sample_neighbors=10).fit(X, y)
        K = profile(D / (1.5 * h_s[None, :]))
        ref = []
        for q, w in zip(X[:30], K):  # weighted least squares on [1, x - x*]
            A = np.c_[np.ones(len(X)), X - q] * np.sqrt(w)[:, None]
            ref.append(np.linalg.lstsq(A, y * np.sqrt(w), rcond=None)[0][0])
        np.testing.assert_allclose(model.predict(X[:30]), ref, rtol=1e-9)
    model = LocalPolynomialRegressor(kernel="gaussian", bandwidth="cv", sample_neighbors=10).fit(X, y)
    assert model.bandwidth_ > 0 and model.sample_scale_.shape == (len(X),)
    with pytest.raises(ValueError, match="sample_neighbors"):
        LocalPolynomialRegressor(frac=0.5, sample_neighbors=10).fit(X, y)
