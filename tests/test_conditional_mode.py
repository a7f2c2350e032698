"""Conditional mode classification and the significance test (issue 39): the classifier's
probabilities against statsmodels' ``KDEMultivariateConditional`` (``u|cc``, ``u|cu``) at the same
bandwidths, to 1e-10; the test's statistics against their formulas written with finite
differences of the local mean; its p-values on relevant and irrelevant columns; bad input."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator
from statsmodels.nonparametric.kernel_density import KDEMultivariateConditional

from localkit import ConditionalModeClassifier, Kernel, LocalMeanClassifier, LocalMeanRegressor, significance_test
from localkit.engine import BoundKernel
from localkit.models.significance import _statistic


def data(seed=0, n=240):
    rng = np.random.default_rng(seed)
    X = np.c_[rng.normal(size=n), rng.integers(0, 3, n).astype(float)]
    y = (X[:, 0] + 0.8 * X[:, 1] + rng.normal(size=n) > 1).astype(int) + (X[:, 0] > 1.2)
    return X, y


@pytest.mark.parametrize("lam", [0.0, 0.2])
def test_probabilities_equal_statsmodels(lam):
    X, y = data()
    K = Kernel("gaussian", bandwidth=0.5, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.3, features=[1])
    clf = ConditionalModeClassifier(kernel=K, y_smoothing=lam).fit(X, y)
    Q = X[:30] + np.c_[0.1 * np.ones(30), np.zeros(30)]
    ref = KDEMultivariateConditional(y.astype(float), X, "u", "cu", bw=[lam, 0.5, 0.3], rng=0)
    expected = np.column_stack([ref.pdf(np.full(30, float(c)), Q) for c in range(3)])
    np.testing.assert_allclose(clf.predict_proba(Q), expected, rtol=1e-10, atol=1e-300)
    np.testing.assert_array_equal(clf.predict(Q), clf.classes_[np.argmax(expected, axis=1)])


def test_no_smoothing_is_the_local_mean_classifier():
    X, y = data(1)
    labels = np.array(["low", "mid", "high"])[y]
    clf = ConditionalModeClassifier(bandwidth=0.4).fit(X, labels)
    ref = LocalMeanClassifier(bandwidth=0.4).fit(X, labels)
    np.testing.assert_allclose(clf.predict_proba(X), ref.predict_proba(X), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(clf.predict(X), ref.predict(X))


def test_check_estimator():
    check_estimator(ConditionalModeClassifier())


def test_classifier_bad_input():
    X, y = data()
    with pytest.raises(ValueError, match="y_smoothing"):
        ConditionalModeClassifier(y_smoothing=1.0).fit(X, y)
    with pytest.raises(ValueError, match="one class"):
        ConditionalModeClassifier().fit(X, np.zeros(len(X)))
    K = Kernel("gaussian", bandwidth=0.5, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.3, features=[1])
    clf = ConditionalModeClassifier(kernel=K).fit(X, y)
    with pytest.raises(ValueError, match="not seen at fit"):
        clf.predict([[0.0, 7.0]])
    with pytest.raises(ValueError, match="NaN"):
        clf.predict([[np.nan, 1.0]])


def mixed(seed=0, n=200):
    rng = np.random.default_rng(seed)
    X = np.c_[rng.uniform(size=n), rng.integers(0, 3, n), rng.integers(0, 4, n), rng.normal(size=n)]
    y = np.sin(5 * X[:, 0]) + 0.5 * (X[:, 1] == 2) + 0.2 * rng.normal(size=n)
    K = (Kernel("gaussian", bandwidth=0.1, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.1, features=[1])
         * Kernel("aitchison_aitken", bandwidth=0.1, features=[2]) * Kernel("gaussian", bandwidth=0.5, features=[3]))
    return X, y, K


def test_statistics_equal_their_formulas():
    X, y, K = mixed()
    bound = BoundKernel(K, X)
    reg = LocalMeanRegressor(kernel=K).fit(X, y)
    for j, h in ((0, 0.1), (3, 0.5)):  # continuous: mean squared derivative, by central differences
        e = 1e-5 * h
        up, down = X.copy(), X.copy()
        up[:, j] += e
        down[:, j] -= e
        derivative = (reg.predict(up) - reg.predict(down)) / (2 * e)
        np.testing.assert_allclose(_statistic(bound, X, y[:, None], j, K.factors[j], 0)[0], np.mean(derivative ** 2),
                                   rtol=1e-6)
    for j in (1, 2):  # categorical: squared differences from the first level
        levels = np.unique(X[:, j])
        at = []
        for v in levels:
            Q = X.copy()
            Q[:, j] = v
            at.append(reg.predict(Q))
        expected = sum(np.mean((m - at[0]) ** 2) for m in at[1:])
        np.testing.assert_allclose(_statistic(bound, X, y[:, None], j, K.factors[j], 0)[0], expected, rtol=1e-12)


def test_relevant_columns_are_found():
    X, y, K = mixed(3)
    result = significance_test(X, y, K, n_bootstrap=99, random_state=0)
    np.testing.assert_array_equal(result.columns, [0, 1, 2, 3])
    assert np.all(result.pvalue[:2] <= 0.02) and np.all(result.pvalue[2:] > 0.1)
    assert result.null_statistics.shape == (99, 4)
    again = significance_test(X, y, K, columns=[2], n_bootstrap=99, random_state=0)
    assert again.pvalue.shape == (1,)


def test_significance_bad_input():
    X, y, K = mixed()
    with pytest.raises(ValueError, match="columns"):
        significance_test(X, y, K, columns=[4])
    with pytest.raises(ValueError, match="y contains NaN"):
        significance_test(X, np.r_[y[:-1], np.nan], K)
    with pytest.raises(ValueError, match="y must have shape"):
        significance_test(X, y[:-1], K)
    with pytest.raises(ValueError, match="n_bootstrap"):
        significance_test(X, y, K, n_bootstrap=0)
    with pytest.raises(ValueError, match="Gaussian"):
        significance_test(X[:, :1], y, Kernel("epanechnikov", bandwidth=0.3))
    with pytest.raises(ValueError, match="NaN"):
        significance_test(np.r_[X[:-1], [[np.nan, 0, 0, 0]]], y, K)
