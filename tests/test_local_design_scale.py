"""The local polynomial's singularity test is about the design's collinearity, not its units: a
bandwidth far wider than the data (the global least-squares limit) or far narrower keeps the
local linear fit, in float64 and float32 (it used to fall back to the local mean, flagged
"near-singular", from h ~ 1e5 in float64 and h ~ 100 in float32)."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes
from statsmodels.nonparametric.kernel_regression import KernelReg

from localkit import LocalPolynomialRegressor


def _ols_at(X, y, Q):
    A = np.c_[np.ones(len(X)), X]
    return np.c_[np.ones(len(Q)), Q] @ np.linalg.lstsq(A, y, rcond=None)[0]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-9), (np.float32, 2e-5)])
@pytest.mark.parametrize("h", [1e3, 1e5, 1e10, 1e100])
def test_a_huge_bandwidth_gives_ordinary_least_squares(dtype, rtol, h):
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:200, [2, 8]], y[:200]  # bmi and s5, spread ~0.05
    Q = X[::20] + 0.01
    ref = _ols_at(X, y, Q)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "near-singular" fallback
        got = LocalPolynomialRegressor(kernel="gaussian", bandwidth=h).fit(X.astype(dtype), y.astype(dtype)) \
            .predict(Q.astype(dtype))
    assert got.dtype == dtype
    np.testing.assert_allclose(got, ref, rtol=rtol)


def test_kernelreg_local_linear_at_its_cross_validated_bandwidth():
    # statsmodels' KernelReg(bw='cv_ls') picks h ~ 1.3e5 for bmi (a straight line is best): the same fit
    X, y = load_diabetes(return_X_y=True)
    x = X[:150, 2:3]
    bw = np.array([1.3e5])
    ref = KernelReg(y[:150], x, var_type="c", reg_type="ll", bw=bw, rng=0).fit(x)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = LocalPolynomialRegressor(kernel="gaussian", bandwidth=bw).fit(x, y[:150]).predict(x)
    np.testing.assert_allclose(got, ref, rtol=1e-9)


@pytest.mark.parametrize("scale", [1e-150, 1e-8, 1.0, 1e8, 1e150])
def test_the_fit_is_invariant_to_the_units_of_x(scale):
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:120, [0, 2, 3]], y[:120]
    bw = 0.8 * X.std(axis=0)
    ref = LocalPolynomialRegressor(kernel="gaussian", bandwidth=bw, degree=2).fit(X, y).predict(X[:30])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = LocalPolynomialRegressor(kernel="gaussian", bandwidth=bw * scale, degree=2).fit(X * scale, y) \
            .predict(X[:30] * scale)
    np.testing.assert_allclose(got, ref, rtol=1e-8)


def test_ridge_with_a_bandwidth_beyond_the_float_range_is_refused():
    X, y = load_diabetes(return_X_y=True)
    X, y = X[:50, 2:3].astype(np.float32), y[:50].astype(np.float32)
    with pytest.raises(ValueError, match="ridge > 0 .* beyond the range of float32"):
        LocalPolynomialRegressor(kernel="gaussian", bandwidth=1e100, ridge=1e-3).fit(X, y).predict(X)
