"""Output-adaptive regression, ``value_kernel=`` (issue 23): each sample also weighs
``K_y(f_t(x*), y_i)``, iterated from the plain fit to a fixed point.

References: the fixed point written directly with NumPy (dense weights, the same iteration and
stopping rule) for the local mean and the local linear fit, to 1e-10; a value kernel of huge
bandwidth gives the plain fit back; on a generated noisy step the edge is kept where the plain
fit blurs it.
"""
import warnings

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

from localkit import Kernel, LocalMeanRegressor, LocalPolynomialRegressor
from localkit.exceptions import LocalkitConvergenceWarning


def _step(n=200, seed=0):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0, 1, n))
    y = (x > 0.5) + 0.5 * x + 0.1 * rng.standard_normal(n)
    return x[:, None], y


def direct_fixed_point(Q, X, y, h, hy, degree=0, tol=1e-8, max_iter=100):
    """The output-adaptive fit by definition: Gaussian weights in x and y, per query, weighted
    least squares of degree 0 or 1 in x only, from the plain fit, until a move below ``tol``.
    ``h`` may be ``[(w_k, h_k), ...]``: the sum of Gaussians ``sum_k w_k K_{h_k}`` in x."""
    terms = h if isinstance(h, list) else [(1.0, h)]
    Kx = sum(w * np.exp(-0.5 * ((Q[:, None, 0] - X[None, :, 0]) / hk) ** 2) for w, hk in terms)

    def fit(W):
        if degree == 0:
            return W @ y / W.sum(axis=1)
        out = np.empty(len(Q))
        for i, w in enumerate(W):
            A = np.c_[np.ones(len(X)), X[:, 0] - Q[i, 0]]
            out[i] = np.linalg.solve(A.T @ (w[:, None] * A), A.T @ (w * y))[0]
        return out

    f = fit(Kx)
    moving = np.ones(len(Q), dtype=bool)
    for _ in range(max_iter):
        new = fit(Kx * np.exp(-0.5 * ((f[:, None] - y[None, :]) / hy) ** 2))
        stop = np.abs(new - f) < tol
        f = np.where(moving, new, f)
        moving &= ~stop
        if not moving.any():
            break
    return f


@pytest.mark.parametrize("degree", [0, 1])
def test_equals_the_direct_fixed_point(degree):
    X, y = _step()
    Q = np.linspace(0, 1, 41)[:, None]
    value = Kernel("gaussian", bandwidth=0.25)
    est = (LocalMeanRegressor(bandwidth=0.06, value_kernel=value) if degree == 0 else
           LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.06, value_kernel=value))
    got = est.fit(X, y).predict(Q)
    np.testing.assert_allclose(got, direct_fixed_point(Q, X, y, 0.06, 0.25, degree), rtol=0, atol=1e-10)
    assert est.n_iter_ >= 2 and est.value_kernel_.features == (1,)


def test_sums_and_learned_mixtures_take_a_value_kernel():
    X, y = _step()
    Q = np.linspace(0, 1, 41)[:, None]
    value = Kernel("gaussian", bandwidth=0.25)
    g1, g2 = Kernel("gaussian", bandwidth=0.03), Kernel("gaussian", bandwidth=0.1)
    got = LocalMeanRegressor(kernel=0.3 * g1 + 0.7 * g2, value_kernel=value).fit(X, y).predict(Q)
    want = direct_fixed_point(Q, X, y, [(0.3, 0.03), (0.7, 0.1)], 0.25)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10)
    # a learned mixture: its weights are those of the plain local mean, then the fixed point
    mixed = LocalMeanRegressor(kernel=[g1, g2], value_kernel=value).fit(X, y)
    w = mixed.kernel_weights_
    want = direct_fixed_point(Q, X, y, [(w[0], 0.03), (w[1], 0.1)], 0.25)
    np.testing.assert_allclose(mixed.predict(Q), want, rtol=0, atol=1e-10)
    np.testing.assert_allclose(w, LocalMeanRegressor(kernel=[g1, g2]).fit(X, y).kernel_weights_, rtol=0, atol=0)


@pytest.mark.parametrize("make", [lambda vk: LocalMeanRegressor(bandwidth=0.06, value_kernel=vk),
                                  lambda vk: LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.06,
                                                                      value_kernel=vk)])
def test_wide_value_kernel_is_the_plain_fit_and_the_edge_is_kept(make):
    X, y = _step(seed=1)
    Q = np.linspace(0.05, 0.95, 91)[:, None]
    plain = make(None).fit(X, y).predict(Q)
    np.testing.assert_allclose(make(Kernel("gaussian", bandwidth=1e9)).fit(X, y).predict(Q), plain, rtol=0,
                               atol=1e-12)
    truth = (Q[:, 0] > 0.5) + 0.5 * Q[:, 0]
    near = (np.abs(Q[:, 0] - 0.5) < 0.1) & (np.abs(Q[:, 0] - 0.5) > 0.015)  # either side, off the jump itself
    adaptive = make(Kernel("gaussian", bandwidth=0.2)).fit(X, y).predict(Q)
    # the plain fit blurs the jump over about two bandwidths; the adaptive one keeps it
    assert np.abs(adaptive - truth)[near].max() < 0.25 * np.abs(plain - truth)[near].max()


def test_several_targets_rules_and_sample_weight():
    X, y = _step(seed=2)
    Y = np.c_[y, 2 * y]
    reg = LocalMeanRegressor(bandwidth=0.06, value_kernel=Kernel("gaussian", bandwidth="scott")).fit(X, Y)
    assert reg.predict(X[:5]).shape == (5, 2) and reg.value_kernel_.features == (1, 2)
    w = np.random.default_rng(0).integers(1, 3, len(y))
    rep = LocalMeanRegressor(bandwidth=0.06, value_kernel=Kernel("gaussian", bandwidth=0.2))
    np.testing.assert_allclose(rep.fit(X, y, sample_weight=w).predict(X[:20]),
                               rep.fit(np.repeat(X, w, axis=0), np.repeat(y, w)).predict(X[:20]), rtol=0, atol=1e-10)


def test_convergence_warning_and_refusals():
    X, y = _step()
    with pytest.warns(LocalkitConvergenceWarning, match="value kernel's fixed point did not converge"):
        reg = LocalMeanRegressor(bandwidth=0.06, value_kernel=Kernel("gaussian", bandwidth=0.2), max_iter=1).fit(X, y)
    assert reg.n_iter_ == 1
    value = Kernel("gaussian", bandwidth=0.2)
    for est, match in [(LocalMeanRegressor(n_neighbors=5, value_kernel=value), "fixed bandwidth"),
                       (LocalMeanRegressor(value_kernel=Kernel("gaussian", features=[0])), "distance Kernel"),
                       (LocalMeanRegressor(weights="distance", n_neighbors=None, value_kernel=value), "weights"),
                       (LocalPolynomialRegressor(frac=0.3, value_kernel=value), "fixed bandwidth"),
                       (LocalPolynomialRegressor(bandwidth=0.1, robust_iters=2, value_kernel=value), "robust_iters")]:
        with pytest.raises(ValueError, match=match):
            est.fit(X, y)
    with pytest.raises(ValueError, match="loo_predict"):
        LocalMeanRegressor(bandwidth=0.06, value_kernel=value).fit(X, y).loo_predict()


def test_scikit_learn_estimator_checks():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LocalkitConvergenceWarning)  # the checks' random targets
        check_estimator(LocalMeanRegressor(value_kernel=Kernel("gaussian", bandwidth=2.0)))
