"""Kernel profiles, bandwidth rules and the dense kernel matrix."""
import numpy as np
import pytest
from scipy import integrate

from localkit import Kernel
from localkit.kernels import PROFILES, get_profile, resolve_bandwidth

COMPACT = [name for name, p in PROFILES.items() if p.compact]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_is_one_at_zero_and_decreasing(name):
    k = get_profile(name)
    u = np.linspace(0, 3, 301)
    values = k(u)
    assert values[0] == pytest.approx(1.0)
    assert np.all(np.diff(values) <= 1e-15)
    if k.compact:
        assert np.all(values[u > 1] == 0)


@pytest.mark.parametrize("name,formula", [
    ("gaussian", lambda u: np.exp(-u**2 / 2)),
    ("epanechnikov", lambda u: np.clip(1 - u**2, 0, None)),
    ("tricube", lambda u: np.clip(1 - u**3, 0, None) ** 3),
    ("biweight", lambda u: np.clip(1 - u**2, 0, None) ** 2),
    ("triweight", lambda u: np.clip(1 - u**2, 0, None) ** 3),
    ("triangular", lambda u: np.clip(1 - u, 0, None)),
    ("uniform", lambda u: (u <= 1).astype(float)),
    ("cosine", lambda u: np.where(u <= 1, np.cos(np.pi * np.minimum(u, 1) / 2), 0.0)),
    ("laplacian", lambda u: np.exp(-u)),
    ("cauchy", lambda u: 1 / (1 + u**2)),
])
def test_profile_formulas(name, formula):
    u = np.linspace(0, 2, 41)
    np.testing.assert_allclose(get_profile(name)(u), formula(u), atol=1e-15)


def test_uniform_support_is_inclusive():
    assert get_profile("uniform")(np.array([1.0]))[0] == 1.0


@pytest.mark.parametrize("name", [n for n in sorted(PROFILES) if n != "cauchy"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_normaliser_matches_numerical_integral(name, d):
    p = get_profile(name)
    upper = 1.0 if p.compact else 60.0
    radial, _ = integrate.quad(lambda r: p(np.array([r]))[0] * r ** (d - 1), 0, upper, limit=200)
    sphere = 2 * np.pi ** (d / 2) / __import__("math").gamma(d / 2)
    assert np.exp(p.log_normalizer(d)) == pytest.approx(sphere * radial, rel=1e-9)


def test_cauchy_has_no_density_beyond_1d():
    assert np.exp(get_profile("cauchy").log_normalizer(1)) == pytest.approx(np.pi)
    with pytest.raises(ValueError, match="not integrable"):
        get_profile("cauchy").log_normalizer(2)


def test_dense_matrix_matches_definition(rng):
    X, Y = rng.normal(size=(7, 3)), rng.normal(size=(11, 3))
    D = np.sqrt(((X[:, None] - Y[None]) ** 2).sum(-1))
    for name in PROFILES:
        np.testing.assert_allclose(Kernel(name, bandwidth=1.3)(X, Y), get_profile(name)(D / 1.3), atol=1e-12)
    np.testing.assert_allclose(Kernel("softmax", bandwidth=2.0)(X, Y), np.exp(X @ Y.T / 2.0), rtol=1e-12)


def test_per_feature_bandwidth_is_a_diagonal_metric(rng):
    X, Y = rng.normal(size=(5, 2)), rng.normal(size=(6, 2))
    h = np.array([0.5, 2.0])
    u2 = (((X[:, None] - Y[None]) / h) ** 2).sum(-1)
    np.testing.assert_allclose(Kernel("gaussian", bandwidth=h)(X, Y), np.exp(-u2 / 2), rtol=1e-12)


def test_knn_bandwidth_with_uniform_profile_is_knn(rng):
    X, Y = rng.normal(size=(4, 2)), rng.normal(size=(30, 2))
    K = Kernel("uniform", n_neighbors=5)(X, Y)
    D = np.sqrt(((X[:, None] - Y[None]) ** 2).sum(-1))
    expected = (D <= np.sort(D, axis=1)[:, [4]]).astype(float)
    np.testing.assert_array_equal(K, expected)
    assert np.all(K.sum(1) == 5)


def test_other_metrics(rng):
    X, Y = rng.normal(size=(3, 2)), rng.normal(size=(4, 2))
    D1 = np.abs(X[:, None] - Y[None]).sum(-1)
    np.testing.assert_allclose(Kernel("laplacian", metric="manhattan")(X, Y), np.exp(-D1), rtol=1e-12)
    Dinf = np.abs(X[:, None] - Y[None]).max(-1)
    np.testing.assert_allclose(Kernel("gaussian", metric="chebyshev")(X, Y), np.exp(-Dinf**2 / 2), rtol=1e-12)


def test_bandwidth_rules_match_scipy(rng):
    from scipy.stats import gaussian_kde

    x = rng.normal(size=(200, 1)) * 3
    for rule in ["scott", "silverman"]:
        kde = gaussian_kde(x[:, 0], bw_method=rule)
        assert resolve_bandwidth(rule, x) == pytest.approx(np.sqrt(kde.covariance[0, 0]), rel=1e-12)
    h = resolve_bandwidth("scott", rng.normal(size=(100, 3)) * [1, 2, 3])
    assert h.shape == (3,) and h[2] > h[1] > h[0]


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(name="gauss"), ValueError, "kernel must be one of"),
    (dict(name=3), TypeError, "kernel must be a string"),
    (dict(bandwidth=0.0), ValueError, "bandwidth must be finite and > 0"),
    (dict(bandwidth=-1.0), ValueError, "bandwidth"),
    (dict(bandwidth=np.inf), ValueError, "bandwidth"),
    (dict(bandwidth=np.nan), ValueError, "bandwidth"),
    (dict(n_neighbors=0), ValueError, "n_neighbors must be >= 1"),
    (dict(n_neighbors=2.5), TypeError, "n_neighbors must be an integer"),
    (dict(metric="mahalanobis"), ValueError, "metric must be one of"),
    (dict(name="softmax", n_neighbors=3), ValueError, "softmax"),
    (dict(name="softmax", bandwidth="scott"), ValueError, "temperature"),
])
def test_bad_kernel_parameters(kwargs, err, match):
    with pytest.raises(err, match=match):
        Kernel(**kwargs)


@pytest.mark.parametrize("bandwidth,match", [
    ("cv", "chosen by an estimator"), ("rule", "one of"), ([1.0, 2.0], "shape"),
    ([1.0, -2.0, 1.0], "every feature"), ([1.0, np.nan, 1.0], "every feature"),
])
def test_bad_bandwidth_values(rng, bandwidth, match):
    with pytest.raises(ValueError, match=match):
        resolve_bandwidth(bandwidth, rng.normal(size=(10, 3)))


def test_rule_on_constant_feature_is_an_error():
    with pytest.raises(ValueError, match="zero spread"):
        resolve_bandwidth("scott", np.ones((10, 1)))
