"""``KernelQuantileRegressor(bandwidth="cv")``: bandwidths by the leave-one-out integrated squared
error of the fit's estimate of F(y | x) (Li, Lin and Racine, 2013; R's ``np::npcdistbw``). The
criterion against a brute-force leave-one-out loop in float64 (the local constant and the local
linear smoother's weights written out), the search against a grid, cell sums against the exact
passes, ``cv_results_``, bad input."""
from __future__ import annotations

import numpy as np
import pytest

from localkit import Kernel, KernelQuantileRegressor
from localkit.models.quantile import CV_LEVELS


def mixed_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(size=n), rng.uniform(size=n), rng.integers(0, 3, n)])
    y = X[:, 0] + (0.2 + X[:, 1]) * rng.normal(size=n) + 0.5 * X[:, 2]
    return X, y


def brute_cdf_cv(X, y, h, lam, linear):
    """``(1/n) sum_i sum_t ([y_i <= t] - F_{-i}(t | x_i))^2``, thresholds at y's quantiles of levels
    1/10, ..., 9/10; Gaussian in the first ``len(h)`` columns, Aitchison-Aitken in the rest (``lam``
    None: no categorical column); F the intercept of the weighted least squares of the indicators
    on ``(1, z - z_i)`` (linear) or their weighted mean."""
    n, p = len(X), len(h)
    thr = np.unique(np.quantile(y, CV_LEVELS))
    total = 0.0
    for i in range(n):
        keep = np.arange(n) != i
        dz = X[keep, :p] - X[i, :p]
        w = np.exp(-0.5 * np.sum((dz / h) ** 2, axis=1))
        for col in range(p, X.shape[1]):
            levels = len(np.unique(X[:, col]))
            w = w * np.where(X[keep, col] == X[i, col], 1 - lam, lam / (levels - 1))
        if linear:
            D = np.column_stack([np.ones(n - 1), dz])
            weights = np.linalg.solve(D.T @ (w[:, None] * D), (D * w[:, None]).T)[0]
        else:
            weights = w / w.sum()
        F = weights @ (y[keep][:, None] <= thr)
        total += np.sum(((y[i] <= thr) - F) ** 2)
    return total / n


def near_the_minimum(res, count=6):
    """Points of the search whose criterion is within twice the least (where the local linear
    weights are well determined; the search's far points leave too little weight in a window)."""
    values = res["loo_loss"]
    near = np.flatnonzero(values <= 2 * values.min())
    return near[np.linspace(0, len(near) - 1, min(count, len(near))).astype(int)]


@pytest.mark.parametrize("method, degree", [("check", 0), ("linear_weights", 0)])
def test_criterion_equals_the_leave_one_out_loop_mixed(method, degree):
    X, y = mixed_data()
    K = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv", features=[2])
    reg = KernelQuantileRegressor(method=method, degree=degree, kernel=K).fit(X, y)
    res = reg.cv_results_
    linear = method == "linear_weights"
    for k in near_the_minimum(res):
        h = res["bandwidths"][k]
        assert res["loo_loss"][k] == pytest.approx(brute_cdf_cv(X, y, h[:2], h[2], linear), rel=1e-10)
    best = res["bandwidths"][np.argmin(res["loo_loss"])]
    np.testing.assert_allclose(reg.kernel_.factors[0].bandwidth, best[:2], rtol=1e-12)
    assert reg.kernel_.factors[1].bandwidth == pytest.approx(best[2], rel=1e-12)


def test_criterion_of_degree_one_is_the_local_linear_one():
    X, y = mixed_data()
    X = X[:, :2]
    reg = KernelQuantileRegressor(degree=1, bandwidth="cv").fit(X, y)
    res = reg.cv_results_
    for k in near_the_minimum(res):
        h = res["bandwidths"][k]
        assert res["loo_loss"][k] == pytest.approx(brute_cdf_cv(X, y, h, None, True), rel=1e-10)


@pytest.mark.parametrize("method", ["check", "linear_weights"])
def test_search_finds_the_minimum_of_a_grid(method):
    """One bandwidth: the chosen h has a criterion (brute force) no higher than the least of a
    fine grid, and lies within one grid step of the grid's minimiser."""
    rng = np.random.default_rng(1)
    n = 80
    x = np.sort(rng.uniform(0, 4, n))
    y = np.sin(2 * x) + (0.3 + 0.2 * x) * rng.normal(size=n)
    reg = KernelQuantileRegressor(degree=0, method=method, bandwidth="cv").fit(x[:, None], y)
    linear = method == "linear_weights"
    grid = np.geomspace(0.05, 3.0, 121)
    values = np.array([brute_cdf_cv(x[:, None], y, np.array([h]), None, linear) for h in grid])
    h = float(reg.kernel_.bandwidth)
    chosen = brute_cdf_cv(x[:, None], y, np.array([h]), None, linear)
    assert chosen <= values.min() * (1 + 1e-9)
    step = np.log(grid[1] / grid[0])
    assert abs(np.log(h / grid[np.argmin(values)])) <= step


@pytest.mark.parametrize("method", ["check", "linear_weights"])
def test_cell_sums_agree_with_the_exact_search(method):
    """With ``tolerance`` (cell sums) the criterion is the exact one to the binning's error, and the
    smoothing chosen as good as the exact search's (one ``"cv"`` factor, the Gaussian's fixed)."""
    X, y = mixed_data(n=300, seed=2)
    K = Kernel("gaussian", bandwidth=[0.5, 0.3], features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv",
                                                                          features=[2])
    exact = KernelQuantileRegressor(method=method, degree=0, kernel=K).fit(X, y)
    cells = KernelQuantileRegressor(method=method, degree=0, kernel=K, tolerance=1e-4).fit(X, y)
    linear = method == "linear_weights"

    def brute(lam):
        return brute_cdf_cv(X, y, np.array([0.5, 0.3]), lam, linear)

    res = cells.cv_results_
    for lam, value in zip(res["bandwidths"][:, 0], res["loo_loss"]):
        assert value == pytest.approx(brute(lam), rel=1e-3)
    assert brute(cells.kernel_.factors[1].bandwidth) == pytest.approx(brute(exact.kernel_.factors[1].bandwidth),
                                                                      rel=1e-4)
    assert np.min(exact.cv_results_["loo_loss"]) == pytest.approx(brute(exact.kernel_.factors[1].bandwidth), rel=1e-10)


def test_cv_results_and_refit():
    X, y = mixed_data()
    K = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv", features=[2])
    reg = KernelQuantileRegressor(quantile=[0.1, 0.9], degree=0, kernel=K).fit(X, y)
    res = reg.cv_results_
    assert set(res) == {"bandwidths", "loo_loss"}
    assert res["bandwidths"].shape == (len(res["loo_loss"]), 3)
    assert np.all(res["bandwidths"][:, :2] > 0)
    assert np.all((res["bandwidths"][:, 2] >= 0) & (res["bandwidths"][:, 2] <= 1))
    assert np.all(np.isfinite(res["loo_loss"]))
    # the fit with the chosen kernel given as numbers predicts the same
    fixed = KernelQuantileRegressor(quantile=[0.1, 0.9], degree=0, kernel=reg.kernel_).fit(X, y)
    np.testing.assert_array_equal(reg.predict(X[:10]), fixed.predict(X[:10]))
    assert not hasattr(fixed, "cv_results_")
    reg.set_params(kernel=reg.kernel_).fit(X, y)
    assert not hasattr(reg, "cv_results_")


def test_bad_input():
    X, y = mixed_data()
    for tol in (0.0, 1.0, -1e-3, "small"):
        with pytest.raises(ValueError, match="tolerance"):
            KernelQuantileRegressor(bandwidth="cv", tolerance=tol).fit(X[:, :2], y)
    for bw in ("crossval", "CV", -1.0, 0.0):
        with pytest.raises(ValueError, match="bandwidth"):
            KernelQuantileRegressor(bandwidth=bw).fit(X[:, :2], y)
    with pytest.raises(ValueError, match="at least 3 samples"):
        KernelQuantileRegressor(degree=0, bandwidth="cv").fit(X[:2, :1], y[:2])
    K = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv", features=[2])
    with pytest.raises(ValueError, match="degree=1"):  # refused before any search
        KernelQuantileRegressor(kernel=K).fit(X, y)
    with pytest.raises(ValueError, match="take one value"):
        KernelQuantileRegressor(degree=0, bandwidth="cv").fit(np.c_[X[:, :1], np.ones(len(X))], y)
