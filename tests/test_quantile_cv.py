"""``KernelQuantileRegressor(bandwidth="cv")``: bandwidths by the leave-one-out integrated squared
error of the fit's estimate of F(y | x) (Li, Lin and Racine, 2013; R's ``np::npcdistbw``). The
criterion against a brute-force leave-one-out loop in float64 (the local constant and the local
linear smoother's weights written out), the search against a grid, cell sums against the exact
passes, ``cv_results_``, bad input."""
from __future__ import annotations

import numpy as np
import pytest

from localkit import Kernel, KernelQuantileRegressor
from localkit.models.quantile import (CV_LEVELS, LEAST_STEP, local_linear_weights, local_quadratic_weights,
                                     step_quantiles)
from localkit.models.smoother_quantiles import smoother_quantiles


def mixed_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(size=n), rng.uniform(size=n), rng.integers(0, 3, n)])
    y = X[:, 0] + (0.2 + X[:, 1]) * rng.normal(size=n) + 0.5 * X[:, 2]
    return X, y


def brute_loo_weights(X, i, h, lam, linear):
    """``(keep, l)``: the samples but ``i`` and their weights at ``x_i``: Gaussian in the first
    ``len(h)`` columns, Aitchison-Aitken in the rest (``lam`` None: no categorical column); the
    intercept row of the weighted least squares on ``(1, z - z_i)`` (``linear`` true), also on the
    products ``(z - z_i)_a (z - z_i)_b``, ``a <= b`` (``linear=2``), or the normalised kernel weights."""
    n, p = len(X), len(h)
    keep = np.arange(n) != i
    dz = X[keep, :p] - X[i, :p]
    w = np.exp(-0.5 * np.sum((dz / h) ** 2, axis=1))
    for col in range(p, X.shape[1]):
        levels = len(np.unique(X[:, col]))
        w = w * np.where(X[keep, col] == X[i, col], 1 - lam, lam / (levels - 1))
    if linear:
        D = np.column_stack([np.ones(n - 1), dz])
        if linear == 2:
            a, b = np.triu_indices(p)
            D = np.column_stack([D, dz[:, a] * dz[:, b]])
        return keep, np.linalg.solve(D.T @ (w[:, None] * D), (D * w[:, None]).T)[0]
    return keep, w / w.sum()


def brute_cdf_cv(X, y, h, lam, linear):
    """``(1/n) sum_i sum_t ([y_i <= t] - F_{-i}(t | x_i))^2``, thresholds at y's quantiles of levels
    1/10, ..., 9/10; Gaussian in the first ``len(h)`` columns, Aitchison-Aitken in the rest (``lam``
    None: no categorical column); F the intercept of the weighted least squares of the indicators
    on ``(1, z - z_i)`` (linear) or their weighted mean."""
    n = len(X)
    thr = np.unique(np.quantile(y, CV_LEVELS))
    total = 0.0
    for i in range(n):
        keep, weights = brute_loo_weights(X, i, h, lam, linear)
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


# -- cv_target="quantile": a factor of the "cv" bandwidths per level, by the leave-one-out pinball loss --------
def brute_quantile(y, l, tau, interpolation):
    """The quantile of ``F(t) = max(0, max_{t' <= t} sum_j l_j [y_j <= t'])`` written out: the smallest
    distinct value where it reaches ``tau`` ("lower"), or ``np.interp`` of ``tau`` through the
    middles of its steps at the distinct values where it steps up by more than 1e-12 ("hazen")."""
    u = np.unique(y)
    F = np.maximum.accumulate(np.maximum([l[y <= t].sum() for t in u], 0.0))
    if interpolation == "lower":
        return u[min(np.sum(F < tau * (1 - 1e-13)), len(u) - 1)]
    before = np.r_[0.0, F[:-1]]
    knots = F > before + 1e-12  # the values where F steps up (rises of round-off are none)
    return np.interp(tau, 0.5 * (F + before)[knots], u[knots])


def brute_level_loss(X, y, h, lam, taus, linear, interpolation):
    """``(1/n) sum_i rho_tau(y_i - q_{-i}(tau | x_i))`` for each ``tau``, ``q_{-i}`` from
    :func:`brute_loo_weights`' weights without sample ``i``."""
    n = len(X)
    out = np.zeros(len(taus))
    for i in range(n):
        keep, l = brute_loo_weights(X, i, h, lam, linear)
        for j, tau in enumerate(taus):
            r = y[i] - brute_quantile(y[keep], l, tau, interpolation)
            out[j] += r * (tau - (r < 0)) / n
    return out


def scaled(reg, s):
    """The "cv" bandwidths of ``reg`` moved to the factor ``s`` (a row of ``level_scales``, one
    factor): ``h s`` and ``lam s^2`` (in [0, 1])."""
    res = reg.cv_results_
    (s,) = s
    best = res["bandwidths"][np.argmin(res["loo_loss"])].copy()
    best[:-1] *= s
    best[-1] = min(best[-1] * s ** 2, 1.0)
    return best


@pytest.mark.parametrize("method, interpolation", [("linear_weights", "hazen"), ("linear_weights", "lower"),
                                                   ("check", "hazen")])
def test_level_criterion_equals_the_leave_one_out_loop(method, interpolation):
    X, y = mixed_data()
    taus = [0.1, 0.5, 0.9]
    K = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv", features=[2])
    reg = KernelQuantileRegressor(quantile=taus, method=method, degree=0, kernel=K, cv_target="quantile",
                                  interpolation=interpolation).fit(X, y)
    res = reg.cv_results_
    assert res["level_scales"].shape[1] == 1 and res["level_loo_loss"].shape == (len(res["level_scales"]), 3)
    linear = method == "linear_weights"
    # the factors whose smoothing stays in Aitchison-Aitken's range lam <= (c - 1) / c (beyond it, other
    # levels weigh more than a row's own, and the linear weights' tiny steps leave the interpolation
    # between them to round-off: 1e-9 apart)
    compared = 0
    for s, losses in zip(res["level_scales"], res["level_loo_loss"]):
        b = scaled(reg, s)
        if b[2] <= 2 / 3:
            np.testing.assert_allclose(losses, brute_level_loss(X, y, b[:2], b[2], taus, linear, interpolation),
                                       rtol=1e-10)
            compared += 1
    assert compared >= 5
    for j in range(3):  # each level's bandwidths: the least loss of its column, the factor nearest 1 among equals
        k = min(range(len(res["level_scales"])),
                key=lambda k: (res["level_loo_loss"][k, j], abs(np.log(res["level_scales"][k, 0]))))
        expected = scaled(reg, res["level_scales"][k])  # (the second bandwidth is clipped at the search's bound)
        np.testing.assert_allclose(res["level_bandwidths"][j][[0, 2]], expected[[0, 2]], rtol=1e-12)


def test_level_search_is_no_worse_than_a_grid():
    """One bandwidth: each level's chosen factor has a leave-one-out pinball loss (brute force) no
    higher than the least over a grid of factors 2^(k / 4), k = -8..8."""
    rng = np.random.default_rng(1)
    n = 80
    x = np.sort(rng.uniform(0, 4, n))
    y = np.sin(2 * x) + (0.3 + 0.2 * x) * rng.normal(size=n)
    taus = [0.2, 0.8]
    reg = KernelQuantileRegressor(quantile=taus, method="linear_weights", bandwidth="cv", cv_target="quantile",
                                  interpolation="hazen").fit(x[:, None], y)
    h = float(reg.kernel_.bandwidth)
    grid = np.array([brute_level_loss(x[:, None], y, np.array([h * s]), None, taus, True, "hazen")
                     for s in 2.0 ** (np.arange(-8, 9) / 4)])
    for j in range(2):
        chosen = brute_level_loss(x[:, None], y, reg.cv_results_["level_bandwidths"][j], None, taus, True, "hazen")[j]
        assert chosen <= grid[:, j].min() * (1 + 1e-12)


def test_level_kernels_predict_their_levels():
    X, y = mixed_data(n=120, seed=3)
    taus = [0.1, 0.5, 0.9]
    K = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv", features=[2])
    reg = KernelQuantileRegressor(quantile=taus, method="linear_weights", kernel=K, cv_target="quantile").fit(X, y)
    res = reg.cv_results_
    assert set(res) == {"bandwidths", "loo_loss", "level_scales", "level_loo_loss", "level_bandwidths"}
    assert res["level_bandwidths"].shape == (3, 3) and len(reg.level_kernels_) == 3
    assert res["level_scales"].shape[1] == 1  # one factor, on every bandwidth
    assert np.all(np.diff(res["level_scales"][:, 0]) > 0) and 1.0 in res["level_scales"]
    for b, k in zip(res["level_bandwidths"], reg.level_kernels_):
        np.testing.assert_allclose(k.factors[0].bandwidth, b[:2], rtol=1e-12)
        assert k.factors[1].bandwidth == pytest.approx(b[2], rel=1e-12)
    # each level from its own kernel, then rearranged; another level from kernel_
    each = np.column_stack([KernelQuantileRegressor(quantile=t, method="linear_weights", kernel=k).fit(X, y).predict(X)
                            for t, k in zip(taus, reg.level_kernels_)])
    np.testing.assert_array_equal(reg.predict(X), np.sort(each, axis=1))
    other = KernelQuantileRegressor(quantile=0.3, method="linear_weights", kernel=reg.kernel_).fit(X, y)
    np.testing.assert_array_equal(reg.predict_quantiles(X, [0.3])[:, 0], other.predict(X))
    # refit without the target: no level kernels left over
    reg.set_params(cv_target="distribution").fit(X, y)
    assert not hasattr(reg, "level_kernels_") and "level_scales" not in reg.cv_results_


def test_hazen_interpolation_is_numpy_s():
    """Equal weights (every x alike: no slope for the linear weights) and distinct values: numpy's
    ``quantile(method="hazen")``; "lower" is numpy's ``method="inverted_cdf"``."""
    rng = np.random.default_rng(4)
    x, y = np.zeros((50, 1)), rng.normal(size=50)
    taus = [0.005, 0.1, 0.37, 0.5, 0.9, 0.995]
    for interpolation, reference in (("hazen", "hazen"), ("lower", "inverted_cdf")):
        for kwargs in ({"degree": 0}, {"method": "linear_weights"}):
            reg = KernelQuantileRegressor(quantile=taus, kernel="uniform", bandwidth=10.0, interpolation=interpolation,
                                          **kwargs).fit(x, y)
            np.testing.assert_allclose(reg.predict(x[:3]), np.tile(np.quantile(y, taus, method=reference), (3, 1)),
                                       rtol=1e-12, atol=1e-12)


def test_hazen_with_tied_values_takes_the_middle_of_each_step():
    """Tied values are one step of the mid-distribution function: [1, 2, 2, 3] has knots
    (1, 1/8), (2, 1/2), (3, 7/8)."""
    y = np.array([1.0, 2.0, 2.0, 3.0])
    reg = KernelQuantileRegressor(quantile=[0.1, 0.3, 0.5, 0.7, 0.9], degree=0, kernel="uniform", bandwidth=10.0,
                                  interpolation="hazen").fit(np.zeros((4, 1)), y)
    np.testing.assert_allclose(reg.predict([[0.0]])[0], [1.0, 1 + 0.175 / 0.375, 2.0, 2 + 0.2 / 0.375, 3.0],
                               rtol=1e-12)


@pytest.mark.parametrize("interpolation", ["hazen", "lower"])
def test_compiled_scan_is_the_statement(interpolation):
    """The compiled scan (weights, running maximum, knots in one pass per row) equals the NumPy
    statement it stands for: ``l = L * (C @ B.T)``, ``F`` the running maximum of its cumulative sum
    from 0, :func:`step_quantiles`, on weights that go negative, tied values, levels in any order,
    levels no step reaches, and rows of no weight or of too little for any knot to step."""
    rng = np.random.default_rng(8)
    n, m = 300, 4
    y = np.sort(np.round(rng.normal(size=n), 1))  # many ties
    B = np.hstack([np.ones((n, 1)), rng.normal(size=(n, m - 1))])
    L = rng.random((40, n)) * (rng.random((40, n)) < 0.3)
    L /= L.sum(axis=1)[:, None]
    C = np.hstack([np.ones((40, 1)), 0.4 * rng.normal(size=(40, m - 1))])  # l_i < 0 where c^T b_i < 0
    L[-1], L[-2], C[-3] = 0.0, 1e-13 * L[0], 0.0  # rows that never rise by LEAST_STEP: no knot steps
    taus = [0.9, 0.0001, 0.5, 0.1, 0.9999, 0.37]
    got = smoother_quantiles(L, B, C, y, taus, interpolation, LEAST_STEP)
    F = np.maximum.accumulate(np.maximum(np.cumsum(L * (C @ B.T), axis=1), 0.0), axis=1)
    np.testing.assert_allclose(got, step_quantiles(F, y, taus, interpolation), rtol=0, atol=1e-13)


def test_level_bad_input():
    X, y = mixed_data()
    for value in ("quantiles", "", None, 1):
        with pytest.raises((ValueError, TypeError), match="cv_target"):
            KernelQuantileRegressor(cv_target=value).fit(X[:, :2], y)
    for value in ("linear", "midpoint", None):
        with pytest.raises((ValueError, TypeError), match="interpolation"):
            KernelQuantileRegressor(interpolation=value).fit(X[:, :2], y)
    with pytest.raises(ValueError, match="no 'cv' bandwidth"):
        KernelQuantileRegressor(bandwidth=0.5, cv_target="quantile").fit(X[:, :2], y)
    with pytest.raises(ValueError, match="method='inversion'"):
        KernelQuantileRegressor(method="inversion", bandwidth="cv", cv_target="quantile").fit(X[:, :2], y)


# -- method="quadratic_weights": the local quadratic F(y | x) -------------------------------------------------
def test_quadratic_weights_fit_quadratics_and_fall_back_to_linear():
    """``sum_i l_i phi(z_i) = phi(z*)`` for ``phi`` every monomial of degree <= 2 (the fit of a
    quadratic at ``z*``); samples on a line determine no curvature across it: the local linear weights."""
    rng = np.random.default_rng(3)
    Z, Zq = rng.uniform(-2, 5, (200, 2)), rng.uniform(-1, 4, (7, 2))
    W = np.exp(-0.5 * np.sum((Zq[:, None, :] - Z[None, :, :]) ** 2, axis=2))
    L = local_quadratic_weights(W, Z, Zq)
    for f in (lambda z: np.ones(len(z)), lambda z: z[:, 0], lambda z: z[:, 1], lambda z: z[:, 0] ** 2,
              lambda z: z[:, 0] * z[:, 1], lambda z: z[:, 1] ** 2):
        np.testing.assert_allclose(L @ f(Z), f(Zq), rtol=1e-10, atol=1e-10)
    line = np.column_stack([Z[:, 0], 2 * Z[:, 0] + 1])
    np.testing.assert_allclose(local_quadratic_weights(W, line, Zq), local_linear_weights(W, line, Zq), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("weights", [local_linear_weights, local_quadratic_weights])
def test_weights_nearly_on_one_sample_fall_back_to_degree_zero(weights):
    """Integer columns and a narrow kernel: where a row's weights sit nearly all on one or two
    samples, ``C = M2 - M1 M1^T`` is round-off in some direction (~1e-13 of ``M2``), and its
    ``v = C^-1 D`` of up to ~1e14 made weights whose sums were off 1 by up to 0.7. Such rows fall
    back to degree 0, and every row's weights sum to 1 (to the sqrt(eps) that the covariance test
    leaves). The weights, and so the test, do not change with a column's units."""
    rng = np.random.default_rng(0)
    Z = np.column_stack([rng.integers(0, 19, 300), rng.integers(0, 61, 300)]).astype(float)
    Zq = np.column_stack([rng.integers(0, 19, 400), rng.integers(0, 61, 400)]) + rng.uniform(-0.5, 0.5, (400, 2))
    W = np.exp(-0.5 * np.sum(((Zq[:, None, :] - Z[None, :, :]) / 0.3) ** 2, axis=2))
    W, Zq = W[W.sum(axis=1) > 0], Zq[W.sum(axis=1) > 0]
    L = weights(W, Z, Zq)
    np.testing.assert_allclose(L.sum(axis=1), 1.0, rtol=0, atol=1e-6)
    one = W.max(axis=1) > (1 - 1e-9) * W.sum(axis=1)
    assert one.sum() >= 10
    np.testing.assert_allclose(L[one], W[one] / W[one].sum(axis=1)[:, None], rtol=1e-12, atol=0)
    # the smoother's weights do not depend on the units of a column, nor does the test of its rows
    units = np.array([1e6, 1e-3])
    np.testing.assert_allclose(weights(W, Z * units, Zq * units), L, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("interpolation", ["hazen", "lower"])
def test_quadratic_predictions_equal_the_written_out_fit(interpolation):
    X, y = mixed_data(n=120, seed=5)
    taus = [0.1, 0.5, 0.9]
    h, lam = np.array([1.2, 0.6]), 0.2
    K = Kernel("gaussian", bandwidth=list(h), features=[0, 1]) * Kernel("aitchison_aitken", bandwidth=lam, features=[2])
    reg = KernelQuantileRegressor(quantile=taus, method="quadratic_weights", kernel=K,
                                  interpolation=interpolation).fit(X, y)
    Xq = X[:8] + [0.1, -0.05, 0]
    for q, row in zip(Xq, reg.predict(Xq)):
        _, l = brute_loo_weights(np.vstack([X, q]), len(X), h, lam, 2)  # every sample, weighed at q
        np.testing.assert_allclose(row, [brute_quantile(y, l, tau, interpolation) for tau in taus], rtol=1e-10)


def test_quadratic_level_search_scales_each_continuous_bandwidth_and_the_smoothings():
    """``cv_target="quantile"``: each point's criterion is the brute-force leave-one-out pinball loss
    of the quadratic fit at ``h_c s_c`` (a factor per continuous column) and ``lam t`` (one factor
    for the categorical smoothings, in [0, 1]); ``"distribution"``: one point for every level, the
    least summed loss."""
    X, y = mixed_data(n=80, seed=1)
    taus = [0.1, 0.5, 0.9]
    K = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv", features=[2])
    reg = KernelQuantileRegressor(quantile=taus, method="quadratic_weights", kernel=K, cv_target="quantile",
                                  interpolation="hazen").fit(X, y)
    res = reg.cv_results_
    best = res["bandwidths"][np.argmin(res["loo_loss"])]

    def at(s):  # the bandwidths at the factors s = (s_1, s_2, t)
        return np.r_[best[:2] * s[:2], min(best[2] * s[2], 1.0)]

    assert res["level_scales"].shape[1] == 3
    compared, unequal, moved = 0, 0, set()
    for s, losses in zip(res["level_scales"], res["level_loo_loss"]):
        # windows wider than the criterion's along both columns: every leave-one-out fit's moments well
        # conditioned (at the criterion's own, narrow for a quadratic, their round-off reaches 1e-9)
        if np.all(s[:2] > 1):
            b = at(s)
            np.testing.assert_allclose(losses, brute_level_loss(X, y, b[:2], b[2], taus, 2, "hazen"), rtol=1e-9)
            compared += 1
            unequal += s[0] != s[1]
            moved.add(s[2])
    assert compared >= 3 and unequal >= 2 and len(moved) >= 2  # the smoothing's factor tried at several values
    for j in range(3):  # each level: the least loss of its column, the factors nearest 1 among equals
        k = min(range(len(res["level_scales"])),
                key=lambda k: (res["level_loo_loss"][k, j], np.abs(np.log2(res["level_scales"][k])).sum()))
        np.testing.assert_allclose(res["level_bandwidths"][j], at(res["level_scales"][k]), rtol=1e-12)
    one = KernelQuantileRegressor(quantile=taus, method="quadratic_weights", kernel=K, interpolation="hazen").fit(X, y)
    summed = one.cv_results_["level_loo_loss"].sum(axis=1)
    scales = one.cv_results_["level_scales"]
    s = scales[min(range(len(scales)), key=lambda k: (summed[k], np.abs(np.log2(scales[k])).sum()))]
    np.testing.assert_allclose(one.kernel_.factors[0].bandwidth, best[:2] * s[:2], rtol=1e-12)
    assert one.kernel_.factors[1].bandwidth == pytest.approx(at(s)[2], rel=1e-12)
    assert not hasattr(one, "level_kernels_")
