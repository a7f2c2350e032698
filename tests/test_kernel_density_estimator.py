"""localkit.KernelDensity against scikit-learn's KernelDensity, and its sampler against the
analytic mixture it should draw from."""
import numpy as np
import pytest
from scipy import integrate, stats
from sklearn.datasets import load_iris
from sklearn.neighbors import KernelDensity as SkKernelDensity
from sklearn.utils.estimator_checks import check_estimator

from localkit import KernelDensity, kernel_density
from localkit.kernels.profiles import PROFILES

SHARED = [("gaussian", "gaussian"), ("tophat", "uniform"), ("epanechnikov", "epanechnikov"),
          ("exponential", "laplacian"), ("linear", "triangular"), ("cosine", "cosine")]
# scikit-learn's cosine normaliser is wrong in even dimensions (see tests/test_density.py)
CASES = [(sk, ours, d) for sk, ours in SHARED for d in (1, 2, 3) if not (sk == "cosine" and d == 2)]


@pytest.fixture(scope="module")
def iris():
    return load_iris().data


@pytest.fixture(scope="module")
def weights(iris):
    return np.random.default_rng(7).uniform(0.0, 3.0, len(iris))


@pytest.mark.parametrize("sk,ours,d", CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_score_samples_equals_sklearn(iris, weights, sk, ours, d, weighted):
    X = iris[:, :d]
    Q = X[::3] + 0.05  # off the 0.1 grid; 0.73 avoids distance ties at the compact boundary
    w = weights if weighted else None
    ref = SkKernelDensity(kernel=sk, bandwidth=0.73).fit(X, sample_weight=w)
    kde = KernelDensity(kernel=ours, bandwidth=0.73).fit(X, sample_weight=w)
    np.testing.assert_allclose(kde.score_samples(Q), ref.score_samples(Q), rtol=0, atol=1e-10)
    assert kde.score(Q) == pytest.approx(ref.score(Q), rel=1e-12)


def test_sklearn_kernel_names_and_functional_form_agree(iris, weights):
    kde = KernelDensity(kernel="tophat", bandwidth=0.8).fit(iris, sample_weight=weights)
    np.testing.assert_allclose(kde.score_samples(iris[:10]),
                               kernel_density(iris[:10], iris, "uniform", 0.8, log=True, sample_weight=weights),
                               rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernel", ["gaussian", "tophat"])
@pytest.mark.parametrize("weighted", [False, True])
def test_sample_draws_as_sklearn_does(iris, weights, kernel, weighted):
    w = weights if weighted else None
    ours = KernelDensity(kernel=kernel, bandwidth=0.4).fit(iris, sample_weight=w).sample(200, random_state=3)
    ref = SkKernelDensity(kernel=kernel, bandwidth=0.4).fit(iris, sample_weight=w).sample(200, random_state=3)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


def _radial_moments(profile, d):
    """``E[r^2]`` of the radius with density ~ r^(d-1) k(r), by quadrature of the profile."""
    top = 1.0 if profile.compact else np.inf
    m0 = integrate.quad(lambda r: profile(r) * r ** (d - 1), 0, top)[0]
    m2 = integrate.quad(lambda r: profile(r) * r ** (d + 1), 0, top)[0]
    return m2 / m0


@pytest.mark.parametrize("name", sorted(set(PROFILES) - {"cauchy"}))
def test_sample_mean_and_covariance_match_the_mixture(name):
    # a weighted mixture of three points in 2-D: mean = sum c_i x_i / sum c, covariance =
    # the weighted covariance of the points plus h^2 E[r^2] / d times the identity
    X = np.array([[0.0, 0.0], [3.0, 1.0], [-1.0, 4.0]])
    c = np.array([1.0, 2.0, 0.5])
    h, d, n = 0.7, 2, 40_000
    draws = KernelDensity(kernel=name, bandwidth=h).fit(X, sample_weight=c).sample(n, random_state=0)
    p = c / c.sum()
    mean = p @ X
    cov = (X - mean).T @ ((X - mean) * p[:, None]) + h * h * _radial_moments(PROFILES[name], d) / d * np.eye(d)
    # standard errors: ~sqrt(var / n) for the mean, ~var * sqrt(2 / n) for the covariance
    np.testing.assert_allclose(draws.mean(axis=0), mean, atol=5 * np.sqrt(cov.diagonal().max() / n))
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=6 * cov.diagonal().max() * np.sqrt(2 / n))


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_sampled_radii_follow_the_profile(name):
    """Kolmogorov-Smirnov: |x - x_0| / h of draws around one sample against the CDF of
    r^(d-1) k(r) integrated numerically (3-D; the Cauchy has a density in 1-D only)."""
    d = 1 if name == "cauchy" else 3
    profile = PROFILES[name]
    kde = KernelDensity(kernel=name, bandwidth=0.5).fit(np.zeros((1, d)))
    r = np.linalg.norm(kde.sample(1500, random_state=1), axis=1) / 0.5
    top = 1.0 if profile.compact else np.inf
    total = integrate.quad(lambda s: profile(s) * s ** (d - 1), 0, top)[0]
    cdf = np.vectorize(lambda x: integrate.quad(lambda s: profile(s) * s ** (d - 1), 0, min(x, top))[0] / total)
    assert stats.kstest(r, cdf).pvalue > 1e-3


def test_sample_is_reproducible_and_weights_pick_rows(iris):
    kde = KernelDensity(kernel="epanechnikov", bandwidth=0.3).fit(iris)
    np.testing.assert_array_equal(kde.sample(5, random_state=4), kde.sample(5, random_state=4))
    assert not np.array_equal(kde.sample(5, random_state=4), kde.sample(5, random_state=5))
    # all the weight on one row: every draw lies within h of it
    w = np.zeros(len(iris))
    w[17] = 2.0
    draws = KernelDensity(kernel="epanechnikov", bandwidth=0.3).fit(iris, sample_weight=w).sample(500, random_state=0)
    assert np.all(np.linalg.norm(draws - iris[17], axis=1) <= 0.3 + 1e-12)
    assert kde.sample(0).shape == (0, iris.shape[1])  # as scikit-learn's gaussian KernelDensity.sample(0)


def test_integer_and_zero_weights_are_repeated_and_dropped_rows(iris):
    w = np.random.default_rng(0).integers(0, 4, len(iris))
    Q = iris[::5] + 0.03
    for kernel in ("gaussian", "biweight", "tricube"):
        a = KernelDensity(kernel=kernel, bandwidth=0.6).fit(iris, sample_weight=w).score_samples(Q)
        b = KernelDensity(kernel=kernel, bandwidth=0.6).fit(np.repeat(iris, w, axis=0)).score_samples(Q)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


def test_bandwidth_rules_and_profiles_without_a_density():
    x = load_iris().data[:, 2:3]
    kde = KernelDensity(bandwidth="scott").fit(x)
    q = np.linspace(0, 8, 20)[:, None]
    np.testing.assert_allclose(np.exp(kde.score_samples(q)), stats.gaussian_kde(x[:, 0])(q[:, 0]), rtol=1e-12)
    assert KernelDensity(kernel="cauchy").fit(x).score_samples(q).shape == (20,)
    with pytest.raises(ValueError, match="cauchy.*not integrable in 2"):
        KernelDensity(kernel="cauchy").fit(np.c_[x, x])
    with pytest.raises(ValueError, match="kernel"):
        KernelDensity(kernel="softmax").fit(x)


@pytest.mark.parametrize("bad, match", [
    (dict(X=[[np.nan, 1.0]]), "NaN"),
    (dict(X=[[np.inf, 1.0]]), "infinity"),
    (dict(X=np.zeros((0, 2))), "0 sample"),
    (dict(sample_weight=[1.0, -1.0, 1.0]), "sample_weight.*Negative"),
    (dict(sample_weight=[1.0, np.nan, 1.0]), "sample_weight.*NaN"),
    (dict(sample_weight=[0.0, 0.0, 0.0]), "sample_weight.*non-zero"),
    (dict(sample_weight=[1.0, 1.0]), "sample_weight.*shape"),
])
def test_fit_rejects_bad_input(bad, match):
    args = dict(X=np.arange(6.0).reshape(3, 2), sample_weight=None) | bad
    with pytest.raises(ValueError, match=match):
        KernelDensity().fit(args["X"], sample_weight=args["sample_weight"])


def test_sample_and_bandwidth_validation():
    kde = KernelDensity().fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="n_samples"):
        kde.sample(-1)
    with pytest.raises(TypeError, match="n_samples"):
        kde.sample(2.5)
    with pytest.raises(ValueError, match="bandwidth"):
        KernelDensity(bandwidth=-1.0).fit(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="features"):
        kde.score_samples(np.zeros((2, 3)))


def test_check_estimator():
    check_estimator(KernelDensity())
