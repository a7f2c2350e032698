"""Kernel density against scikit-learn's KernelDensity and scipy's gaussian_kde."""
import numpy as np
import pytest
from scipy import integrate, special
from scipy.stats import gaussian_kde
from sklearn.datasets import load_iris
from sklearn.neighbors import KernelDensity

from localkit import KernelDensity as LocalKernelDensity, kernel_density

SKLEARN_NAMES = [("gaussian", "gaussian"), ("tophat", "uniform"), ("epanechnikov", "epanechnikov"),
                 ("exponential", "laplacian"), ("linear", "triangular"), ("cosine", "cosine")]


@pytest.fixture(scope="module")
def iris():
    return load_iris().data


# scikit-learn's cosine normaliser is wrong in even dimensions: compared in odd d only, and the
# 2-D case is checked against the exact integral in the next test
CASES = [(sk, ours, d) for sk, ours in SKLEARN_NAMES for d in (1, 2, 3) if not (sk == "cosine" and d == 2)]


@pytest.mark.parametrize("sk,ours,d", CASES)
def test_equals_sklearn_kernel_density(iris, sk, ours, d):
    X = iris[:, :d]
    Q = X + 0.05  # off the sample grid; 0.73 avoids distance ties at the boundary (data on a 0.1 grid)
    ref = KernelDensity(kernel=sk, bandwidth=0.73).fit(X).score_samples(Q)
    np.testing.assert_allclose(kernel_density(Q, X, kernel=ours, bandwidth=0.73, log=True), ref, atol=1e-12)


def test_cosine_in_2d_integrates_to_one_where_sklearn_does_not():
    """scikit-learn's series for the cosine normaliser drops a term in even d (4 instead of
    2*pi*(2/pi - 4/pi^2) = 1.4535 in 2-D); ours integrates to one."""
    samples = np.array([[0.0, 0.0]])
    f = lambda y, x: kernel_density([[x, y]], samples, kernel="cosine", bandwidth=1.0)[0]
    total, _ = integrate.dblquad(f, -1, 1, lambda x: -np.sqrt(1 - x * x), lambda x: np.sqrt(1 - x * x))
    assert total == pytest.approx(1.0, rel=1e-6)
    sk = np.exp(KernelDensity(kernel="cosine", bandwidth=1.0).fit(samples).score_samples([[0.0, 0.0]]))[0]
    assert sk == pytest.approx(1 / 4, rel=1e-12)
    ours = kernel_density([[0.0, 0.0]], samples, kernel="cosine", bandwidth=1.0)[0]
    assert ours == pytest.approx(1 / (2 * np.pi * (2 / np.pi - 4 / np.pi**2)), rel=1e-12)


@pytest.mark.parametrize("name", ["gaussian", "tricube", "biweight", "triweight", "cauchy", "cosine"])
def test_1d_density_integrates_to_one(iris, name):
    x = iris[:20, :1]
    total, _ = integrate.quad(lambda t: kernel_density([[t]], x, kernel=name, bandwidth=0.4)[0], -50, 60,
                              points=sorted(set(x[:, 0])), limit=500)
    # the mass inside [-50, 60]: one, but for the Cauchy's heavy tails (its exact value)
    inside = np.mean(np.arctan((60 - x) / 0.4) - np.arctan((-50 - x) / 0.4)) / np.pi if name == "cauchy" else 1.0
    assert total == pytest.approx(inside, abs=1e-7)


def test_scott_rule_equals_scipy_gaussian_kde(iris):
    x = iris[:, 2]
    q = np.linspace(0, 8, 50)
    np.testing.assert_allclose(kernel_density(q, x, bandwidth="scott"), gaussian_kde(x)(q), rtol=1e-12)
    np.testing.assert_allclose(kernel_density(q, x, bandwidth="silverman"),
                               gaussian_kde(x, bw_method="silverman")(q), rtol=1e-12)


@pytest.mark.parametrize("rule", ["scott", "silverman"])
def test_weighted_rules_equal_scipy_gaussian_kde_with_weights(iris, rule):
    """With sample weights the rules take the weighted spread and the effective size
    ``(sum w)^2 / sum w^2``, as ``gaussian_kde(weights=w)``; zero weights drop samples from both."""
    x = iris[:, 2]
    w = np.random.default_rng(0).uniform(0, 3, len(x))
    w[:20] = 0.0
    q = np.linspace(0, 8, 50)
    ref = gaussian_kde(x, bw_method=rule, weights=w)
    np.testing.assert_allclose(kernel_density(q, x, bandwidth=rule, sample_weight=w), ref(q), rtol=1e-12)
    est = LocalKernelDensity(bandwidth=rule).fit(x[:, None], sample_weight=w)
    np.testing.assert_allclose(est.bandwidth_, np.sqrt(ref.covariance[0, 0]), rtol=1e-12)
    np.testing.assert_allclose(np.exp(est.score_samples(q[:, None])), ref(q), rtol=1e-12)
    with pytest.raises(ValueError, match="at least 2 samples of positive weight, got 1"):
        kernel_density(q, x, bandwidth=rule, sample_weight=np.eye(len(x))[3])
    # equal weights: the unweighted rule
    np.testing.assert_allclose(kernel_density(q, x, bandwidth=rule, sample_weight=np.full(len(x), 2.5)),
                               kernel_density(q, x, bandwidth=rule), rtol=1e-12)


def test_log_density_is_exact_in_the_far_tail(iris):
    x = iris[:, :1]
    log_p = kernel_density([[1e3]], x, bandwidth=0.1, log=True)[0]
    assert np.isfinite(log_p) and log_p < -1e7


@pytest.mark.parametrize("queries,samples,match", [
    ([[np.nan, 0.0]], None, "queries contains NaN"),
    (None, [[np.inf, 0.0], [1.0, 1.0]], "samples contains NaN or infinity"),
    (None, np.zeros((0, 2)), "samples is empty"),
    (np.zeros((0, 2)), None, "queries is empty"),
    ([[0.0, 0.0, 0.0]], None, "queries has 3 features, but 2"),
])
def test_bad_density_data(iris, queries, samples, match):
    with pytest.raises(ValueError, match=match):
        kernel_density(iris[:5, :2] if queries is None else queries, iris[:, :2] if samples is None else samples)


@pytest.mark.parametrize("kwargs,match", [
    (dict(kernel="softmax"), "not a density"),
    (dict(kernel="cauchy"), "not integrable"),
    (dict(bandwidth=0), "bandwidth"),
    (dict(kernel="gaussian", bandwidth=[1.0]), "shape"),
])
def test_bad_density_input(iris, kwargs, match):
    with pytest.raises(ValueError, match=match):
        kernel_density(iris[:5, :2], iris[:, :2], **kwargs)


def _sklearn_cosine_log_norm(d):
    """scikit-learn's cosine normaliser (its series, exact in odd d) in arithmetic of d log10(d)
    digits: in floats its alternating terms reach ~d! (2/pi)^d and overflow to NaN beyond d ~ 170."""
    import mpmath  # a test extra

    with mpmath.workdps(int(d * np.log10(d)) + 30):
        factor, tmp, c = mpmath.mpf(0), 2 / mpmath.pi, (2 / mpmath.pi) ** 2
        for k in range(1, d + 1, 2):
            factor += tmp
            tmp *= -(d - k) * (d - k - 1) * c
        log_factor = float(mpmath.log(factor))
    return log_factor + np.log(2) + d / 2 * np.log(np.pi) - special.gammaln(d / 2)  # + log |S^(d-1)|


@pytest.mark.parametrize("d", [400, 3000])
@pytest.mark.parametrize("sk,ours", SKLEARN_NAMES)
def test_equals_sklearn_kernel_density_in_high_dimensions(sk, ours, d):
    # issue 26: the normaliser overflowed from d = 303 (gaussian: "not integrable") and raised
    # OverflowError from d ~ 2050; sklearn's log-space answer holds. Cosine: odd d (see above).
    d += sk == "cosine"
    rng = np.random.default_rng(d)
    X = rng.normal(size=(30, d))
    Q = np.vstack([X[:5] + 0.1, rng.normal(size=(3, d))])
    h = 5.0 if sk == "gaussian" else 3 * np.sqrt(d)  # every query inside every compact support
    ours = LocalKernelDensity(kernel=ours, bandwidth=h).fit(X).score_samples(Q)
    if sk == "cosine":  # scikit-learn's floats give NaN here: its series, exactly, on the same sums
        u = np.sqrt(((Q[:, None, :] - X[None]) ** 2).sum(axis=-1)) / h
        ref = np.log(np.cos(0.5 * np.pi * u).sum(axis=1) / len(X)) - d * np.log(h) - _sklearn_cosine_log_norm(d)
    else:
        ref = KernelDensity(kernel=sk, bandwidth=h).fit(X).score_samples(Q)
    np.testing.assert_allclose(ours, ref, rtol=1e-10)
