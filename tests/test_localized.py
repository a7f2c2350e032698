"""The localization trick: Localized(estimator) against a hand-written loop of the same weighted
fits, and against the closed form of local linear regression."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris, load_wine
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.naive_bayes import GaussianNB
from sklearn.neighbors import KNeighborsRegressor
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from localkit import Kernel, Localized, LocalPolynomialRegressor
from localkit.engine import BoundKernel
from localkit.exceptions import BandwidthWarning


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return StandardScaler().fit_transform(X), y


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:200], y[:200]


def tight_logistic():
    # converged to 1e-10, so that the comparison measures the localization, not the solver's stop
    return LogisticRegression(tol=1e-10, max_iter=5000)


def test_local_logistic_equals_a_hand_loop(iris):
    X, y = iris
    Xq = X[::15] + 0.05
    got = Localized(tight_logistic(), bandwidth=1.2).fit(X, y).predict_proba(Xq)
    ref = []
    for q in Xq:
        w = Kernel("gaussian", bandwidth=1.2)(q[None], X)[0]
        ref.append(tight_logistic().fit(X, y, sample_weight=w).predict_proba(q[None])[0])
    np.testing.assert_allclose(got, np.array(ref), rtol=0, atol=1e-8)


def test_parallel_blocks_give_the_same_answer(iris):
    X, y = iris
    model = Localized(LogisticRegression(), kernel="tricube", n_neighbors=40).fit(X, y)
    one = model.predict_proba(X[::3])
    two = model.set_params(n_jobs=2).predict_proba(X[::3])
    np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("kw", [dict(kernel="gaussian", bandwidth=0.08), dict(kernel="tricube", n_neighbors=60)])
def test_localized_linear_regression_is_local_linear(diabetes, kw):
    X, y = diabetes
    got = Localized(LinearRegression(), **kw).fit(X, y).predict(X[:40])
    ref = LocalPolynomialRegressor(degree=1, **kw).fit(X, y).predict(X[:40])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-8)


def test_multi_output_targets_and_weighted_rules_equal_a_hand_loop(diabetes):
    """2-D targets go to an inner regressor that takes them; a rule takes the weighted spread."""
    from localkit.kernels.bandwidth import resolve_bandwidth

    X, y = diabetes
    X = X[:, :3]
    Y = np.c_[y, X[:, 0] * y, np.sin(y)]
    c = np.random.default_rng(0).uniform(0, 2, len(X))
    got = Localized(Ridge(alpha=0.1), bandwidth="scott").fit(X, Y, sample_weight=c).predict(X[:10])
    h = resolve_bandwidth("scott", X, sample_weight=c)
    ref = [Ridge(alpha=0.1).fit(X, Y, sample_weight=c * Kernel("gaussian", bandwidth=h)(q[None], X)[0]).predict(
        q[None])[0] for q in X[:10]]
    assert got.shape == (10, 3)
    np.testing.assert_allclose(got, np.array(ref), rtol=1e-10)


def test_absent_classes_get_probability_zero():
    X, y = load_wine(return_X_y=True)  # no duplicate points, so the neighbourhoods are unambiguous
    X = StandardScaler().fit_transform(X)
    Xq = X[::3]
    model = Localized(LogisticRegression(), kernel="tricube", n_neighbors=12).fit(X, y)
    proba = model.predict_proba(Xq)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(model.classes_, [0, 1, 2])
    # the classes with positive weight: among the 11 nearest (the 12th sits on the tricube's edge)
    near = np.argsort(((Xq[:, None, :] - X[None]) ** 2).sum(axis=2), axis=1, kind="stable")[:, :11]
    present = np.zeros((len(Xq), 3), dtype=bool)
    present[np.arange(len(Xq))[:, None], y[near]] = True
    assert (present.sum(axis=1) == 2).any()  # mixed neighbourhoods with one class absent
    assert np.all(proba[~present] == 0.0)
    assert np.all(proba[present] > 0.0)
    assert np.mean(proba.argmax(axis=1) == y[::3]) > 0.9
    # string labels map to the global classes
    names = np.array(["barolo", "grignolino", "barbera"])
    named = Localized(LogisticRegression(), kernel="tricube", n_neighbors=12).fit(X, names[y])
    np.testing.assert_array_equal(named.predict(Xq), names[proba.argmax(axis=1)])


def test_min_weight_drops_only_light_samples(diabetes):
    X, y = diabetes
    full = Localized(Ridge(alpha=1e-3), bandwidth=0.1).fit(X, y).predict(X[:20])
    light = Localized(Ridge(alpha=1e-3), bandwidth=0.1, min_weight=1e-12).fit(X, y).predict(X[:20])
    np.testing.assert_allclose(light, full, rtol=1e-6)


def test_empty_neighbourhood_gets_the_nearest_target(diabetes):
    X, y = diabetes
    far = X[:3] + np.r_[1.0, np.zeros(X.shape[1] - 1)]  # outside every tricube support
    nearest = np.argmin(((far[:, None, :] - X[None]) ** 2).sum(axis=2), axis=1)
    got = Localized(LinearRegression(), kernel="tricube", bandwidth=0.01).fit(X, y).predict(far)
    np.testing.assert_array_equal(got, y[nearest])


def test_bad_estimators_and_parameters(diabetes):
    X, y = diabetes
    with pytest.raises(TypeError, match="sample_weight"):
        Localized(KNeighborsRegressor()).fit(X, y)
    with pytest.raises(TypeError, match="fit"):
        Localized(object()).fit(X, y)
    with pytest.raises(ValueError, match="min_weight"):
        Localized(LinearRegression(), min_weight=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="bandwidth"):
        Localized(LinearRegression(), bandwidth=0.0).fit(X, y)
    with pytest.raises(ValueError, match="cv"):
        Localized(LinearRegression(), bandwidth="cv").fit(X, y)
    with pytest.raises(ValueError, match="'kernel' parameter.*Got 'softmax'"):  # K(x, x) = 1: a distance profile
        Localized(LinearRegression(), kernel="softmax").fit(X, y)
    with pytest.raises(ValueError, match="n_neighbors"):
        Localized(LinearRegression(), n_neighbors=10**6).fit(X, y)
    with pytest.raises(ValueError, match="NaN"):
        Localized(LinearRegression()).fit(np.where(X > 0.05, np.nan, X), y)
    # the default bandwidth, 1.0, on diabetes' scaled features is the global LinearRegression: said so
    with pytest.warns(BandwidthWarning, match=r"bandwidth=1.0 \(the default\).*global model \(LinearRegression"):
        model = Localized(LinearRegression()).fit(X, y)
    assert isinstance(model.weights_, BoundKernel) and model.weights_.samples is model.X_fit_
    with pytest.raises(ValueError, match="features"):
        model.predict(X[:, :3])
    assert not hasattr(model, "predict_proba")


# Localized(LogisticRegression()) passes too, but one lbfgs fit per query makes the suite take
# minutes; GaussianNB is a weighted classifier of the same shape and fits in microseconds.
@pytest.mark.parametrize("est", [Localized(LinearRegression()), Localized(GaussianNB())],
                         ids=["regressor", "classifier"])
def test_check_estimator(est):
    check_estimator(est)


def test_uniform_knn_kernel_fits_exactly_the_k_nearest():
    """Each local fit sees exactly its k nearest samples, the k-th included."""
    from sklearn.neighbors import NearestNeighbors

    X, y = load_diabetes(return_X_y=True)
    X, y, Q = X[:300, :3], y[:300], X[300:340, :3]
    got = Localized(LinearRegression(), kernel="uniform", n_neighbors=12).fit(X, y).predict(Q)
    idx = NearestNeighbors(n_neighbors=12).fit(X).kneighbors(Q)[1]
    expected = [LinearRegression().fit(X[i], y[i]).predict(q[None])[0] for i, q in zip(idx, Q)]
    np.testing.assert_allclose(got, expected, rtol=1e-10)


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "uniform", "cauchy"])
def test_min_weight_above_the_largest_kernel_weight_is_refused(diabetes, kernel):
    # every profile has K <= 1: min_weight=2 left out every sample at every query, and each
    # prediction silently became the nearest sample's target
    X, y = diabetes
    with pytest.raises(ValueError, match=r"min_weight=2\.0 leaves out every sample.*\[0, 1\]"):
        Localized(LinearRegression(), kernel=kernel, min_weight=2.0).fit(X, y)
    Localized(LinearRegression(), kernel=kernel, bandwidth=0.1, min_weight=1.0).fit(X, y)  # the bound is allowed


def test_min_weight_bound_scales_with_sample_weight(diabetes):
    X, y = diabetes
    c = np.where(np.arange(len(y)) % 2 == 0, 3.0, 0.5)
    with pytest.raises(ValueError, match=r"min_weight.*sample_weight.*\[0, 3\]"):
        Localized(Ridge(), min_weight=3.5).fit(X, y, sample_weight=c)
    Localized(Ridge(), bandwidth=0.1, min_weight=2.0).fit(X, y, sample_weight=c)


def test_queries_that_min_weight_empties_warn_with_their_count(diabetes):
    X, y = diabetes
    Xq = np.vstack([X[:4], X[:3] + 0.02])  # 4 queries on samples (K = 1), 3 off them
    nearest = np.argmin(((Xq[:, None, :] - X[None]) ** 2).sum(axis=2), axis=1)
    model = Localized(Ridge(alpha=1e-3), bandwidth=0.02, min_weight=0.999).fit(X, y)
    with pytest.warns(UserWarning, match=r"^some queries have no sample of weight >= min_weight=0\.999") as rec:
        got = model.predict(Xq)
    assert (rec[0].message.n_empty, rec[0].message.n_queries) == (3, 7)
    np.testing.assert_allclose(got[4:], y[nearest[4:]])
    with warnings.catch_warnings():  # nothing to warn about when every query keeps a sample
        warnings.simplefilter("error")
        model.predict(X[:4])


def test_min_weight_warning_counts_classifier_queries_once():
    X, y = load_iris(return_X_y=True)
    model = Localized(LogisticRegression(), bandwidth=0.05, min_weight=0.5).fit(X, y)
    with pytest.warns(UserWarning, match=r"^some queries have no sample") as record:
        model.predict(X[:2] + 0.1)
    counts = [(w.message.n_empty, w.message.n_queries) for w in record if "min_weight" in str(w.message)]
    assert counts == [(2, 2)]
