"""The binned local polynomial (``algorithm="binned"``: binned moments, as R's KernSmooth::locpoly)
and local derivatives, against the exact local polynomial, R's KernSmooth ``locpoly`` and
statsmodels' ``KernelReg`` marginal effects; the inputs they refuse."""
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris, load_wine
from statsmodels.nonparametric.kernel_regression import KernelReg

from localkit import LocalPolynomialRegressor
from localkit.engine import BoundKernel, local_polynomial, local_sums
from localkit.engine.local_models.polynomial import monomial_exponents
from localkit.engine.passes.binned import MOMENT_GRID_SIZE, Grid
from localkit.kernels import Kernel
from localkit.kernels.profiles import PROFILES, Profile

from r_reference import have_kernsmooth, r_locpoly

#: profiles whose slope jumps inside or at the edge of their support: the binned moments err by O(delta / h)
ROUGH = {"triangular", "laplacian", "uniform", "epanechnikov", "cosine"}


def _data(d):
    """diabetes' bmi; iris' petals; wine's alcohol, colour, proline; and a target."""
    if d == 1:
        data = load_diabetes()
        return data.data[:, [2]], data.target
    if d == 2:
        data = load_iris()
        return data.data[:, [2, 3]], data.data[:, 0]
    data = load_wine()
    return data.data[:, [0, 9, 12]], data.target.astype(float)


def _condition(X, profile, h, c, degree):
    """The condition number of each query's local Gram matrix equilibrated to a unit diagonal (the
    exact weights; inf where it is singular): the binned moments' error reaches the fit times it."""
    W = BoundKernel(Kernel(profile, bandwidth=h), X).weights(X) * c[None]
    E = monomial_exponents(X.shape[1], degree)
    Z = (X[None, :, :] - X[:, None, :]) / h
    Psi = np.prod(Z[:, :, None, :] ** E[None, None], axis=-1)
    G = np.einsum("qn,qna,qnb->qab", W, Psi, Psi)
    diag = np.sqrt(np.einsum("qaa->qa", G))
    with np.errstate(invalid="ignore", divide="ignore"):  # a monomial without weight: singular (inf)
        C = G / (diag[:, :, None] * diag[:, None, :])
    bad = ~np.isfinite(C).all(axis=(1, 2))
    C[bad] = np.eye(len(E))
    lam = np.linalg.eigvalsh(C)
    return np.where(bad | (lam[:, 0] <= 0), np.inf, lam[:, -1] / np.where(lam[:, 0] > 0, lam[:, 0], 1.0))


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("profile", ["gaussian", "tricube", "epanechnikov", "laplacian"])
@pytest.mark.parametrize("degree", [0, 1, 2])
def test_binned_local_polynomial_equals_exact_to_the_bound(d, profile, degree):
    """The documented bound (localkit.engine.local_polynomial, algorithm="binned"): at a query whose
    exact local design is regular, the fit's error and the slopes' (times the bandwidth) stay below
    ``cond(C) B range(y)``, ``C`` the equilibrated local Gram matrix, ``B = 8 (delta/h)^2`` for a
    profile smooth across its support (``4 delta/h`` for one whose slope jumps), ``delta/h`` the
    largest grid spacing in bandwidths; float32 adds its round-off. Measured (float64): at most 0.2
    of it (tricube's slopes in 1-D), the Gaussian's below 0.005. Without the condition number the
    compact profiles' fits at the data's sparse edges exceed ``B range(y)``."""
    X, y = _data(d)
    h = 0.5 * X.std(axis=0)
    grid = None if d < 3 else (40, 48, 56)
    spacing = float(np.max(Grid(X, X, h, PROFILES[profile], grid or MOMENT_GRID_SIZE[d]).spacing))
    c = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    B = 4 * spacing if profile in ROUGH else 8 * spacing**2
    cond = _condition(X, profile, h, c, degree) if degree else np.ones(len(X))
    for dtype in (np.float64, np.float32) if profile in ("gaussian", "epanechnikov") else (np.float64,):
        Xd = X.astype(dtype)
        got = local_polynomial(None, Xd, y, degree, profile, h, sample_weight=c, algorithm="binned",
                               slopes=degree > 0, grid_size=grid)
        ref = local_polynomial(None, Xd, y, degree, profile, h, sample_weight=c, algorithm="dense", slopes=degree > 0)
        assert got.values.dtype == dtype and (degree == 0 or got.slopes.dtype == dtype)
        ok = ~ref.singular & ~got.singular & ~ref.empty & np.isfinite(cond)
        assert ok.sum() >= 20, (profile, d, degree)  # compact kernels in 3-D at h = std / 2: most are singular
        bound = (cond * B + (2e-5 if dtype == np.float32 else 1e-12)) * np.ptp(y)
        assert np.all(np.abs(got.values - ref.values)[ok, 0] <= bound[ok]), (profile, d, degree, dtype)
        if degree:
            err = np.max(np.abs(got.slopes - ref.slopes)[:, :, 0] * h[None, :], axis=1)
            assert np.all(err[ok] <= bound[ok]), (profile, d, degree, dtype)


def test_binned_degree_zero_is_the_binned_local_mean():
    """Corners blended by shares times weight sums: degree 0 is the binned pass's local mean."""
    X, y = _data(2)
    h = 0.4 * X.std(axis=0)
    c = np.random.default_rng(1).uniform(0.5, 2.0, len(X))
    Q = np.random.default_rng(2).uniform(X.min(axis=0), X.max(axis=0), (40, 2))
    got = local_polynomial(Q, X, y, 0, "biweight", h, sample_weight=c, algorithm="binned")
    ref = local_sums(Q, X, y, "biweight", h, sample_weight=c, algorithm="binned", grid_size=MOMENT_GRID_SIZE[2])
    np.testing.assert_allclose(got.values[:, 0], ref.mean, rtol=1e-10)


# R 4.2.2 Patched (2022-11-10 r83330), KernSmooth 2.23.20, on load_diabetes(): x = data[:, 2] (bmi),
# y = target, bandwidth = 0.3 * x.std() = 0.014269544824634819 (numpy's std, ddof=0):
#   locpoly(x, y, drv = drv, degree = degree, bandwidth = 0.014269544824634819, gridsize = 401)$y[seq(1, 401, 40)]
# (defaults: kernel "normal", range.x = range(x), truncate = TRUE; grid seq(min(x), max(x), length = 401))
KERNSMOOTH_BANDWIDTH = 0.014269544824634819
KERNSMOOTH = {  # (degree, drv): the estimate at every 40th grid point
    (0, 0): [91.69759493994266, 99.11915456020631, 114.24965466581001, 136.55464359894938, 170.6692983714373,
             189.3341120433848, 201.79727144460892, 237.78146641944244, 274.99875589449283, 283.0108401467482,
             286.2071733121333],
    (1, 0): [89.70920376912481, 95.36426440231412, 112.03644306319757, 137.58281866748112, 175.20761636216324,
             189.61714884262722, 207.09001232276592, 247.88617721118936, 281.3695467700331, 286.35849921200173,
             271.50837270551216],
    (1, 1): [125.45123789455296, 639.3342788235369, 755.4823499572443, 1193.8183727630278, 1442.3589860213854,
             207.9957027548169, 1117.1628248245506, 1497.3982496218216, 1034.900380641156, 349.86526491740983,
             -2448.470249679896],
    (2, 0): [96.8948288264422, 95.18846304602427, 110.3296754688857, 136.00393364302096, 179.27289341661134,
             188.66679685695414, 203.46614646990525, 248.68490835924902, 287.4778158554908, 279.4005192892802,
             245.7249897161001],
    (2, 1): [-1060.7373116452468, 611.8765731134077, 710.0497139214211, 1207.9026798399557, 1350.8248349191038,
             230.52613441642023, 1343.1721469456636, 1427.4910626537785, 355.4541360788386, 520.0662920771218,
             -12409.636721613975],
}


class _KernSmoothNormal(Profile):
    """KernSmooth's kernel: the Gaussian truncated at 4 standard deviations (``tau = 4``), as a
    compact profile of ``u = d / (4 h)``: ``k(u^2) = exp(-8 u^2)`` for ``u <= 1``, 0 beyond."""

    def k(self, u2):
        u2 = np.asarray(u2)
        return np.where(u2 <= 1.0, np.exp(-8.0 * u2), 0.0)

    def log_k(self, u2):
        u2 = np.asarray(u2)
        return np.where(u2 <= 1.0, -8.0 * u2, -np.inf)


@pytest.fixture
def kernsmooth_normal(monkeypatch):
    """The name of KernSmooth's truncated Gaussian, registered for this test only."""
    monkeypatch.setitem(PROFILES, "kernsmooth_normal", _KernSmoothNormal("kernsmooth_normal", None, True))
    return "kernsmooth_normal"


def _ours(grid, x, y, degree, drv, kernel, bandwidth, algorithm="binned", grid_size=401):
    fit = local_polynomial(grid[:, None], x[:, None], y, degree, kernel, bandwidth, algorithm=algorithm,
                           grid_size=grid_size, slopes=drv == 1)
    return fit.values[:, 0] if drv == 0 else fit.slopes[:, 0, 0]


@pytest.mark.parametrize("degree, drv", sorted(KERNSMOOTH))
def test_binned_equals_kernsmooth_locpoly(degree, drv, kernsmooth_normal):
    """With KernSmooth's conventions reproduced (its 401-point grid over range(x), its kernel
    truncated at 4 standard deviations, so bandwidth 4 h on the compact profile) the binned local
    polynomial is ``locpoly`` to round-off: measured 3e-14 of the largest estimate (drv 0), 2e-13
    (drv 1). With localkit's own Gaussian (its tail kept to 2^-52) it differs from KernSmooth by the
    truncation, and is closer to the exact fit than KernSmooth is."""
    data = load_diabetes()
    x, y = data.data[:, 2], data.target
    h = 0.3 * x.std()
    assert h == KERNSMOOTH_BANDWIDTH
    grid = np.linspace(x.min(), x.max(), 401)  # R's seq(min(x), max(x), length = 401)
    ref = np.array(KERNSMOOTH[degree, drv])
    scale = np.abs(ref).max()
    got = _ours(grid, x, y, degree, drv, kernsmooth_normal, 4 * h)
    np.testing.assert_allclose(got[::40], ref, rtol=0, atol=1e-12 * scale)
    gaussian = _ours(grid, x, y, degree, drv, "gaussian", h)
    exact = _ours(grid, x, y, degree, drv, "gaussian", h, algorithm="dense")
    assert np.max(np.abs(gaussian - exact)) < 0.2 * np.max(np.abs(got - exact))


@pytest.mark.skipif(not have_kernsmooth(), reason="needs Rscript with KernSmooth (apt-get install r-cran-kernsmooth)")
@pytest.mark.parametrize("degree, drv", sorted(KERNSMOOTH))
def test_binned_equals_kernsmooth_locpoly_live(degree, drv, kernsmooth_normal):
    """The same on all 401 grid points, R run now (its grid returned, not rebuilt)."""
    data = load_diabetes()
    x, y = data.data[:, 2], data.target
    h = 0.3 * x.std()
    grid, ref, _, _ = r_locpoly(x, y, drv=drv, degree=degree, bandwidth=h)
    np.testing.assert_allclose(ref[::40], KERNSMOOTH[degree, drv], rtol=1e-13)
    got = _ours(grid, x, y, degree, drv, kernsmooth_normal, 4 * h)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("algorithm, rtol", [("auto", 1e-10), ("binned", 1e-3)])
def test_derivative_equals_kernelreg_marginal_effects(algorithm, rtol):
    """statsmodels' ``KernelReg(reg_type="ll").fit()`` returns the local linear fit and its slopes
    (marginal effects) with a Gaussian kernel of per-feature standard deviations ``bw``. Measured:
    exact 8e-15, binned (default grid) 1.5e-4 of the largest slope."""
    data = load_diabetes()
    X, y = data.data[:, [2, 3]], data.target
    h = 0.5 * X.std(axis=0)
    Q = X[::20]
    mean, mfx = KernelReg(y, X, var_type="cc", reg_type="ll", bw=h, rng=0).fit(Q)
    fit = LocalPolynomialRegressor(degree=1, kernel="gaussian", bandwidth=h, algorithm=algorithm).fit(X, y)
    slopes = fit.predict_derivative(Q)
    assert slopes.shape == (len(Q), 2)
    np.testing.assert_allclose(slopes, mfx, rtol=0, atol=rtol * np.abs(mfx).max())
    np.testing.assert_allclose(fit.predict(Q), mean, rtol=0, atol=rtol * np.ptp(y))


@pytest.mark.parametrize("degree", [1, 2])
def test_derivative_of_a_polynomial_is_exact(degree):
    """A local polynomial of degree p reproduces polynomials of degree p, and so their slopes,
    exactly (the exact path) and up to the grid's round-off (binned: the binned moments are exact
    moments of the binned samples, and a polynomial of degree p stays one)."""
    x = np.linspace(-1, 2, 200)[:, None]
    y = 1.0 + 2.0 * x[:, 0] + (0.5 * x[:, 0] ** 2 if degree == 2 else 0.0)
    Q = np.array([[-0.5], [0.3], [1.1]])
    true = 2.0 + (Q[:, 0] if degree == 2 else 0.0)
    for algorithm, tol in (("auto", 1e-10), ("binned", 1e-6)):
        fit = LocalPolynomialRegressor(degree=degree, kernel="gaussian", bandwidth=0.3, algorithm=algorithm).fit(x, y)
        np.testing.assert_allclose(fit.predict_derivative(Q)[:, 0], true, atol=tol)


def test_binned_estimator_with_weights_equals_exact():
    X, y = _data(1)
    h = 0.3 * X.std()
    c = np.random.default_rng(3).integers(1, 4, len(X)).astype(float)
    Q = np.linspace(X.min(), X.max(), 25)[:, None]
    for degree in (1, 2):
        exact = LocalPolynomialRegressor(degree=degree, kernel="gaussian", bandwidth=h).fit(X, y, sample_weight=c)
        binned = LocalPolynomialRegressor(degree=degree, kernel="gaussian", bandwidth=h, algorithm="binned")
        binned.fit(X, y, sample_weight=c)
        np.testing.assert_allclose(binned.predict(Q), exact.predict(Q), rtol=0, atol=1e-6 * np.ptp(y))
        np.testing.assert_allclose(binned.predict_derivative(Q), exact.predict_derivative(Q), rtol=0,
                                   atol=1e-5 * np.ptp(y) / h)


def test_binned_queries_beyond_reach_get_the_nearest_target():
    X, y = _data(1)
    h = 0.2 * X.std()
    Q = np.array([[X.min() - 10.0], [X.mean()], [X.max() + 10.0]])
    fit = local_polynomial(Q, X, y, 1, "epanechnikov", h, algorithm="binned", slopes=True)
    assert fit.empty.tolist() == [True, False, True]
    assert fit.values[0, 0] == y[X[:, 0].argmin()] and fit.values[2, 0] == y[X[:, 0].argmax()]
    assert np.all(fit.slopes[fit.empty] == 0)


@pytest.mark.parametrize("params, word", [
    (dict(algorithm="binned"), "frac"),  # the default span
    (dict(algorithm="binned", frac=0.3), "frac"),
    (dict(algorithm="binned", n_neighbors=30), "n_neighbors"),
    (dict(algorithm="binned", bandwidth=0.02, sample_neighbors=5), "sample_neighbors"),
    (dict(algorithm="binned", bandwidth="cv"), "bandwidth='cv'"),
    (dict(algorithm="binned", bandwidth=0.02, degree=3), "degree"),
    (dict(algorithm="binned", bandwidth=0.02, metric="manhattan"), "metric"),
    (dict(algorithm="binned", bandwidth=0.02, kernel="softmax"), "softmax"),
])
def test_binned_estimator_refusals_name_the_parameter(params, word):
    X, y = _data(1)
    with pytest.raises(ValueError, match=word):
        LocalPolynomialRegressor(**params).fit(X, y)


def test_binned_refuses_more_than_three_features():
    X = np.random.default_rng(0).normal(size=(60, 4))
    with pytest.raises(ValueError, match="n_features=4"):
        LocalPolynomialRegressor(algorithm="binned", bandwidth=1.0).fit(X, X[:, 0])


@pytest.mark.parametrize("kwargs, word", [
    (dict(degree=3), "degree"), (dict(n_neighbors=20), "n_neighbors"), (dict(exclude_self=True), "exclude_self"),
    (dict(sample_scale=np.ones(442)), "sample_scale"), (dict(algorithm="fast"), "algorithm"),
    (dict(degree=0, slopes=True), "slopes"),
])
def test_engine_refusals_name_the_parameter(kwargs, word):
    X, y = _data(1)
    args = dict(algorithm="binned", bandwidth=0.02, kernel="gaussian") | kwargs
    with pytest.raises(ValueError, match=word):
        local_polynomial(None, X, y, args.pop("degree", 1), **args)


def test_derivative_needs_degree_one():
    X, y = _data(1)
    fit = LocalPolynomialRegressor(degree=0, bandwidth=0.02).fit(X, y)
    with pytest.raises(ValueError, match="degree"):
        fit.predict_derivative(X[:3])
