"""sample_weight in fit: integer weights equal repeated rows, zero weights equal dropped rows,
bad weights are refused by name, and scikit-learn's metadata routing passes them through."""
import warnings

import numpy as np
import pytest
import sklearn
import sklearn.cluster as skc
from sklearn.datasets import load_diabetes, load_iris, make_blobs
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import KFold, cross_validate
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from localkit import (KernelDensity, LocalMeanClassifier, LocalMeanRegressor, Localized, MeanShift, TSKFuzzyClassifier,
                      TSKFuzzyRegressor)


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:150, :3], y[:150]


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X[::2], y[::2]


def _weights(n, seed=0, high=4):
    w = np.random.default_rng(seed).integers(0, high, n)
    w[0] = 2  # at least one repeat and one positive weight whatever the draw
    return w


def _repeated(w, *arrays):
    return [np.repeat(a, w, axis=0) for a in arrays]


# -- local means ----------------------------------------------------------------------------
@pytest.mark.parametrize("params", [dict(kernel="gaussian", bandwidth=0.05),
                                    dict(kernel="epanechnikov", bandwidth=0.1),
                                    dict(kernel="tricube", bandwidth=0.1, algorithm="dense")])
def test_regressor_integer_weights_are_repeated_rows(diabetes, params):
    X, y = diabetes
    w = _weights(len(X))
    Q = X[::4] + 0.003
    weighted = LocalMeanRegressor(**params).fit(X, y, sample_weight=w)
    repeated = LocalMeanRegressor(**params).fit(*_repeated(w, X, y))
    np.testing.assert_allclose(weighted.predict(Q), repeated.predict(Q), rtol=0, atol=1e-10)
    # zero weights: the same fit as without those rows
    dropped = LocalMeanRegressor(**params).fit(X[w > 0], y[w > 0])
    np.testing.assert_allclose(weighted.predict(Q), LocalMeanRegressor(**params).fit(
        X, y, sample_weight=np.where(w > 0, w, 0)).predict(Q), rtol=0, atol=0)
    ones = np.where(w > 0, 1.0, 0.0)
    np.testing.assert_allclose(LocalMeanRegressor(**params).fit(X, y, sample_weight=ones).predict(Q),
                               dropped.predict(Q), rtol=0, atol=1e-10)


def test_regressor_weights_scale_free_and_loo(diabetes):
    X, y = diabetes
    w = np.random.default_rng(3).uniform(0.1, 2.0, len(X))
    a = LocalMeanRegressor(bandwidth=0.05).fit(X, y, sample_weight=w)
    b = LocalMeanRegressor(bandwidth=0.05).fit(X, y, sample_weight=1e6 * w)
    np.testing.assert_allclose(a.predict(X[:20]), b.predict(X[:20]), rtol=1e-12)
    # leave-one-out with weights: the weighted local mean of the other samples
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=2) / 0.05**2) * w
    np.fill_diagonal(K, 0.0)
    np.testing.assert_allclose(a.loo_predict(), K @ y / K.sum(axis=1), rtol=1e-10)


def test_classifier_integer_and_zero_weights(iris):
    X, y = iris
    w = _weights(len(X), seed=1)
    Q = X + 0.02
    for params in (dict(kernel="gaussian", bandwidth=0.4), dict(kernel="biweight", bandwidth=0.8)):
        weighted = LocalMeanClassifier(**params).fit(X, y, sample_weight=w)
        repeated = LocalMeanClassifier(**params).fit(*_repeated(w, X, y))
        np.testing.assert_allclose(weighted.predict_proba(Q), repeated.predict_proba(Q), rtol=0, atol=1e-10)
        np.testing.assert_array_equal(weighted.predict(Q), repeated.predict(Q))


# -- the localization trick -------------------------------------------------------------------
def test_localized_combines_sample_weight_with_the_kernel(diabetes):
    X, y = diabetes
    X, y = X[:60], y[:60]
    w = _weights(len(X), seed=2)
    Q = X[::6] + 0.004
    weighted = Localized(LinearRegression(), bandwidth=0.08).fit(X, y, sample_weight=w)
    repeated = Localized(LinearRegression(), bandwidth=0.08).fit(*_repeated(w, X, y))
    np.testing.assert_allclose(weighted.predict(Q), repeated.predict(Q), rtol=0, atol=1e-8)
    # each query's fit is the inner estimator with sample_weight = c_i K(x*, x_i)
    c = np.random.default_rng(5).uniform(0.2, 3.0, len(X))
    model = Localized(LinearRegression(), bandwidth=0.08).fit(X, y, sample_weight=c)
    q = Q[0]
    K = np.exp(-0.5 * np.sum((X - q) ** 2, axis=1) / 0.08**2)
    ref = LinearRegression().fit(X, y, sample_weight=c * K).predict(q[None])[0]
    assert model.predict(q[None])[0] == pytest.approx(ref, rel=1e-9)


def test_localized_classifier_zero_weights_drop_rows(iris):
    X, y = iris
    w = _weights(len(X), seed=4, high=3)
    est = Localized(LogisticRegression(max_iter=500), kernel="epanechnikov", bandwidth=1.5)
    weighted = est.fit(X, y, sample_weight=(w > 0).astype(float)).predict_proba(X[::5])
    dropped = Localized(LogisticRegression(max_iter=500), kernel="epanechnikov", bandwidth=1.5).fit(
        X[w > 0], y[w > 0]).predict_proba(X[::5])
    np.testing.assert_allclose(weighted, dropped, rtol=0, atol=1e-10)


# -- TSK ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [dict(alpha=1e-3), dict(alpha=0.1, order=0), dict(alpha=1e-3, max_iter=3)])
def test_tsk_regressor_integer_weights_are_repeated_rows(params):
    # well-separated clusters: k-means finds the same partition from either data set, so the
    # weighted standardisation, widths and least squares must give the same rules
    X, _ = make_blobs(n_samples=90, centers=[[2, 2], [-2, -2], [2, -2]], cluster_std=0.5, random_state=0)
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2
    w = _weights(len(X), seed=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # max_iter=3 stops early on purpose
        a = TSKFuzzyRegressor(n_rules=3, random_state=0, **params).fit(X, y, sample_weight=w)
        b = TSKFuzzyRegressor(n_rules=3, random_state=0, **params).fit(*_repeated(w, X, y))
    np.testing.assert_allclose(a.predict(X), b.predict(X), rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.centers_, b.centers_, rtol=0, atol=1e-10)


def test_tsk_classifier_integer_weights_are_repeated_rows():
    X, y = load_iris(return_X_y=True)
    w = _weights(len(X), seed=11, high=3)
    a = TSKFuzzyClassifier(n_rules=3, random_state=0).fit(X, y, sample_weight=w)
    b = TSKFuzzyClassifier(n_rules=3, random_state=0).fit(*_repeated(w, X, y))
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X), rtol=0, atol=1e-9)


# -- density and mean shift -------------------------------------------------------------------
def test_kernel_density_integer_weights(iris):
    X, _ = iris
    w = _weights(len(X), seed=6)
    a = KernelDensity(kernel="epanechnikov", bandwidth=0.7).fit(X, sample_weight=w).score_samples(X + 0.01)
    b = KernelDensity(kernel="epanechnikov", bandwidth=0.7).fit(np.repeat(X, w, axis=0)).score_samples(X + 0.01)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


@pytest.fixture(scope="module")
def blobs():
    X, _ = make_blobs(n_samples=120, centers=[[1, 1], [-1, -1], [1, -1]], cluster_std=0.4, random_state=0)
    return X


@pytest.mark.parametrize("params", [dict(bandwidth=0.8), dict(bandwidth=0.6, bin_seeding=True),
                                    dict(bandwidth=0.6, bin_seeding=True, min_bin_freq=3), dict(bandwidth=None)])
def test_mean_shift_integer_weights_are_sklearn_on_repeated_rows(blobs, params):
    w = _weights(len(blobs), seed=7)
    ours = MeanShift(**params).fit(blobs, sample_weight=w)
    ref = skc.MeanShift(**params).fit(np.repeat(blobs, w, axis=0))
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(np.repeat(ours.labels_, w), ref.labels_)


def test_gaussian_mean_shift_weights_are_repeated_rows(blobs):
    w = _weights(len(blobs), seed=8)
    a = MeanShift(kernel="gaussian", bandwidth=0.5).fit(blobs, sample_weight=w)
    b = MeanShift(kernel="gaussian", bandwidth=0.5, seeds=blobs[w > 0]).fit(np.repeat(blobs, w, axis=0))
    np.testing.assert_allclose(a.cluster_centers_, b.cluster_centers_, rtol=0, atol=1e-10)


def test_mean_shift_rules_that_count_points_need_integer_weights(blobs):
    w = np.full(len(blobs), 0.5)
    with pytest.raises(ValueError, match="sample_weight must hold integers.*bandwidth=None"):
        MeanShift().fit(blobs, sample_weight=w)
    with pytest.raises(ValueError, match="sample_weight must hold integers.*min_bin_freq"):
        MeanShift(bandwidth=0.6, bin_seeding=True, min_bin_freq=2).fit(blobs, sample_weight=w)
    MeanShift(bandwidth=0.6, bin_seeding=True).fit(blobs, sample_weight=w)  # bins present: no count


# -- validation -------------------------------------------------------------------------------
ESTIMATORS = [lambda: LocalMeanRegressor(), lambda: LocalMeanClassifier(), lambda: Localized(LinearRegression()),
              lambda: KernelDensity(), lambda: MeanShift(bandwidth=1.0), lambda: TSKFuzzyRegressor(n_rules=2),
              lambda: TSKFuzzyClassifier(n_rules=2)]


@pytest.mark.parametrize("make", ESTIMATORS)
@pytest.mark.parametrize("w, match", [
    (np.ones(5), "sample_weight.*shape"),
    (np.ones((6, 1)), "sample_weight.*1D"),
    (np.r_[-1.0, np.ones(5)], "sample_weight.*Negative"),
    (np.r_[np.nan, np.ones(5)], "sample_weight.*NaN"),
    (np.r_[np.inf, np.ones(5)], "sample_weight.*infinity"),
    (np.zeros(6), "sample_weight.*non-zero"),
])
def test_bad_sample_weight_is_refused_by_name(make, w, match):
    X = np.arange(12.0).reshape(6, 2)
    y = np.array([0, 1, 0, 1, 0, 1])
    with pytest.raises(ValueError, match=match):
        make().fit(X, y, sample_weight=w)


# -- metadata routing -------------------------------------------------------------------------
def test_metadata_routing_through_pipeline_and_cross_validate(diabetes):
    X, y = diabetes
    w = np.random.default_rng(9).uniform(0.5, 2.0, len(X))
    with sklearn.config_context(enable_metadata_routing=True):
        reg = LocalMeanRegressor(bandwidth=1.0).set_fit_request(sample_weight=True).set_score_request(
            sample_weight=True)
        pipe = make_pipeline(StandardScaler().set_fit_request(sample_weight=False), reg)
        cv = KFold(3)
        routed = cross_validate(pipe, X, y, cv=cv, params={"sample_weight": w}, return_estimator=True)
    for (train, test), est, score in zip(cv.split(X), routed["estimator"], routed["test_score"]):
        Z = StandardScaler().fit(X[train])
        ref = LocalMeanRegressor(bandwidth=1.0).fit(Z.transform(X[train]), y[train], sample_weight=w[train])
        np.testing.assert_allclose(est.predict(X[test]), ref.predict(Z.transform(X[test])), rtol=1e-12)
        np.testing.assert_array_equal(est[-1].sample_weight_, w[train])
        assert score == pytest.approx(ref.score(Z.transform(X[test]), y[test], sample_weight=w[test]), rel=1e-12)
