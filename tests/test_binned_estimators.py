"""The binned pass's settings on the estimators (issue 24): ``grid_size`` and ``tolerance`` reach
the engine as given to the functions, and are validated by name."""
import numpy as np
import pytest
from sklearn.datasets import load_diabetes

from localkit import KernelDensity, LocalMeanClassifier, LocalMeanRegressor, LocalPolynomialRegressor, kernel_density
from localkit.engine import local_mean, local_polynomial


@pytest.fixture(scope="module")
def bmi():
    X, y = load_diabetes(return_X_y=True)
    return X[:, 2:3], y


def test_local_mean_estimators_pass_grid_size_and_tolerance(bmi):
    X, y = bmi
    Q = np.linspace(X.min(), X.max(), 57)[:, None]
    for grid_size in (None, 97):
        reg = LocalMeanRegressor(bandwidth=0.01, algorithm="binned", grid_size=grid_size).fit(X, y)
        want = local_mean(Q, X, y, "gaussian", 0.01, algorithm="binned", grid_size=grid_size)
        np.testing.assert_array_equal(reg.predict(Q), want)
    coarse = LocalMeanRegressor(bandwidth=0.01, algorithm="binned", grid_size=97).fit(X, y).predict(Q)
    exact = local_mean(Q, X, y, "gaussian", 0.01)
    assert np.abs(coarse - exact).max() > 1e-9  # the grid was taken (97 points: a visible error)
    # "auto" under a tolerance takes the binned pass where its bound meets it, and stays within it
    auto = LocalMeanRegressor(bandwidth=0.01, tolerance=1e-3).fit(X, y).predict(Q)
    np.testing.assert_array_equal(auto, local_mean(Q, X, y, "gaussian", 0.01, tolerance=1e-3))
    np.testing.assert_allclose(auto, exact, rtol=1e-3, atol=0)
    labels = (y > np.median(y)).astype(int)
    clf = LocalMeanClassifier(bandwidth=0.01, algorithm="binned", grid_size=97).fit(X, labels)
    p1 = local_mean(Q, X, labels.astype(float), "gaussian", 0.01, algorithm="binned", grid_size=97)
    np.testing.assert_allclose(clf.predict_proba(Q)[:, 1], p1, rtol=0, atol=1e-15)


def test_kernel_density_and_local_polynomial_pass_grid_size_and_tolerance(bmi):
    X, y = bmi
    Q = np.linspace(X.min(), X.max(), 57)[:, None]
    kde = KernelDensity(bandwidth=0.01, algorithm="binned", grid_size=129).fit(X)
    want = kernel_density(Q, X, bandwidth=0.01, log=True, algorithm="binned", grid_size=129)
    np.testing.assert_array_equal(kde.score_samples(Q), want)
    kde = KernelDensity(bandwidth=0.01, tolerance=1e-3).fit(X)
    np.testing.assert_array_equal(kde.score_samples(Q), kernel_density(Q, X, bandwidth=0.01, log=True, tolerance=1e-3))
    fit = LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.02, algorithm="binned", grid_size=129).fit(X, y)
    want = local_polynomial(Q, X, y, 1, "gaussian", 0.02, algorithm="binned", grid_size=129).values[:, 0]
    np.testing.assert_array_equal(fit.predict(Q), want)


@pytest.mark.parametrize("Estimator", [LocalMeanRegressor, LocalMeanClassifier, KernelDensity, LocalPolynomialRegressor])
@pytest.mark.parametrize("param, bad", [("grid_size", 1), ("grid_size", 2.5), ("tolerance", 0.0), ("tolerance", 1.0),
                                        ("tolerance", np.nan), ("tolerance", "tight")])
def test_bad_grid_settings_are_refused_by_name(bmi, Estimator, param, bad):
    X, y = bmi
    target = (y > np.median(y)).astype(int) if Estimator is LocalMeanClassifier else y
    with pytest.raises((ValueError, TypeError), match=param):
        est = Estimator(**{param: bad})
        est.fit(X) if Estimator is KernelDensity else est.fit(X, target)
