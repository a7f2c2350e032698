"""LOESS robustness iterations against R: the weights and the stopping rule of R's lowess (clowess
in R's lowess.c), the plain median of R's loess(weights=, family="symmetric") under prior weights,
and statsmodels' lowess where its rule and R's agree."""
import warnings

import numpy as np
import pytest
import statsmodels.api as sm
from statsmodels.nonparametric.smoothers_lowess import lowess

from localkit import LocalPolynomialRegressor
from r_reference import have_r, r_loess, r_lowess
from localkit.models.polynomial import bisquare_weights

needs_r = pytest.mark.skipif(not have_r(), reason="Rscript (R's stats::lowess and loess) is not installed")


def exact_line_with_one_outlier():
    x = np.linspace(0, 1, 40)
    y = 3 * x + 0.1
    y[10] += 1.0
    return x, y


def test_weights_follow_r_thresholds():
    # cmad = 6 * median|e| = 6: u = |e| / 6
    e = np.array([0.0, 0.006, 0.0061, -3.0, 5.994, 5.9941, 6.0, 1.0, 1.0, -1.0, 1.0])
    w = bisquare_weights(e)
    u = np.abs(e) / 6.0
    expected = np.where(u <= 0.001, 1.0, np.where(u <= 0.999, (1 - u * u) ** 2, 0.0))
    np.testing.assert_array_equal(w, expected)
    assert w[1] == 1.0 and 0 < w[2] < 1.0 and w[4] > 0 and w[5] == 0.0 and w[6] == 0.0
    # the plain bisquare would give 1 - 2e-6 at u = 0.001 and 4e-6 just below u = 1: R clips both
    assert bisquare_weights(np.zeros(7)).tolist() == [1.0] * 7  # all exact: nothing to drop


def test_round_off_residuals_stop_the_iterations():
    # more than half the residuals round-off, the rest real: cmad < 1e-7 mean|e| -> stop (None)
    e = np.r_[np.full(21, 1e-16), np.full(19, 0.05)]
    assert 6 * np.median(np.abs(e)) < 1e-7 * np.mean(np.abs(e))
    assert bisquare_weights(e) is None
    # above R's threshold (here cmad = 6e-8 > 1e-7 * 0.024) the weights are computed
    e = np.r_[np.full(21, 1e-8), np.full(19, 0.05)]
    w = bisquare_weights(e)
    assert w is not None and np.allclose(w[:21], (1 - 1 / 36) ** 2) and np.all(w[21:] == 0.0)


@pytest.mark.parametrize("surface", ["direct", "interpolate"])
def test_exactly_fitted_data_keep_the_non_robust_fit(surface):
    """A line with one outlier: away from it the local lines fit exactly, so most residuals are
    round-off; the bisquare on 6 * (a round-off median) used to drop 16 of 40 exactly fitted
    samples and left the fit off the line by 1.0 (R's lowess: 0.144 at every iteration)."""
    x, y = exact_line_with_one_outlier()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the outlier's neighbourhood is near-singular
        plain = LocalPolynomialRegressor(frac=0.3, surface=surface).fit(x[:, None], y).predict(x[:, None])
        for it in (1, 2, 3):
            model = LocalPolynomialRegressor(frac=0.3, robust_iters=it, surface=surface).fit(x[:, None], y)
            np.testing.assert_array_equal(model.predict(x[:, None]), plain)
            np.testing.assert_array_equal(model.robust_weights_, np.ones(len(x)))
    if surface == "direct":  # R's lowess: 0.1439968 for iter = 0, 1, 2, 3
        assert np.abs(plain - (3 * x + 0.1)).max() == pytest.approx(0.1439967778, abs=1e-9)


@needs_r
def test_exactly_fitted_data_equal_r_lowess():
    x, y = exact_line_with_one_outlier()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for it in (0, 1, 3):
            ours = LocalPolynomialRegressor(frac=0.3, robust_iters=it).fit(x[:, None], y).predict(x[:, None])
            np.testing.assert_allclose(ours, r_lowess(x, y, 0.3, it), rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def sine():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 2 * np.pi, 400)
    y = np.sin(x) + 0.3 * rng.standard_t(2, size=len(x))
    return x, y


@needs_r
@pytest.mark.parametrize("frac", [0.05, 0.3, 2 / 3])
def test_robust_fit_equals_r_loess_and_statsmodels(sine, frac):
    x, y = sine
    it = 3  # R's loess default: iterations = 4
    ours = LocalPolynomialRegressor(frac=frac, robust_iters=it).fit(x[:, None], y).predict(x[:, None])
    # R's loess(family="symmetric", ) has the same weights (lowesw): round-off
    # (2e-15 measured); statsmodels' plain bisquare (no clipping at u = 0.001, 0.999) differs by
    # up to 1.3e-10 here. R's lowess also clips its tricube at 0.001 and 0.999 of the span: ~1e-9.
    fitted, _, _ = r_loess(x[:, None], y, span=frac, degree=1, surface="direct", robust=True, )
    np.testing.assert_allclose(ours, fitted, rtol=0, atol=1e-12)
    ref = lowess(y, x, frac=frac, it=it, delta=0, return_sorted=False)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-8)


def test_prior_weights_do_not_weight_the_median():
    """R's loess: robustness weights from the plain median of the plain residuals; the prior
    weights only multiply them (so integer weights are not repeated rows once robust)."""
    d = sm.datasets.engel.load_pandas().data
    X, y = d[["income"]].values, d["foodexp"].values
    w = np.random.default_rng(0).uniform(0.5, 2, len(X))
    first = LocalPolynomialRegressor(frac=0.75, sample_weight_type="prior").fit(X, y, sample_weight=w).predict(X)
    model = LocalPolynomialRegressor(frac=0.75, robust_iters=1, sample_weight_type="prior").fit(X, y, sample_weight=w)
    a = np.abs(y - first)
    u = a / (6 * np.median(a))
    np.testing.assert_allclose(model.robust_weights_, np.where(u <= 0.001, 1, np.where(u <= 0.999, (1 - u * u) ** 2, 0)),
                               rtol=0, atol=1e-12)


@needs_r
@pytest.mark.parametrize("span, degree", [(0.75, 1), (0.3, 2)])
def test_weighted_robust_fit_equals_r_loess(span, degree):
    # statsmodels' engel data (food expenditure up to ~2000): a weighted median gave up to 324 off
    d = sm.datasets.engel.load_pandas().data
    X, y = d[["income"]].values, d["foodexp"].values
    w = np.random.default_rng(0).uniform(0.5, 2, len(X))
    fitted, _, _ = r_loess(X, y, span=span, degree=degree, surface="direct", robust=True, sample_weight=w)
    ours = LocalPolynomialRegressor(frac=span, degree=degree, robust_iters=3, sample_weight_type="prior").fit(
        X, y, sample_weight=w).predict(X)
    np.testing.assert_allclose(ours, fitted, rtol=0, atol=1e-8 * np.abs(y).max())
