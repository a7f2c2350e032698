"""A 1-D density's cdf, sf, quantiles and entropy on the binned grid (many samples) against the
exact float64 sums, within the bound the docstrings state; KDEpy's grid with SciPy's
integration as an independent reference; the choice between the two."""
import numpy as np
import pytest
from KDEpy import FFTKDE
from scipy import integrate

from localkit import KernelDensity
from localkit.models.density import EXACT_SAMPLES


def _mixture(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.r_[rng.normal(size=n // 2), rng.normal(3.0, 0.5, size=n - n // 2)]


@pytest.fixture(scope="module")
def data():
    return _mixture(120_000)


def _bound(kde):
    """The docstring's absolute bound on F: the grid's bound times h times the largest density."""
    binned = kde._binned_distribution[1]
    return binned.grid.bound * float(kde.bandwidth_) * binned.f.max()


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov", "biweight", "tricube", "cosine", "parzen"])
def test_cdf_sf_and_quantiles_within_the_stated_bound(data, kernel):
    weights = np.random.default_rng(1).uniform(0.5, 2.0, len(data))
    kde = KernelDensity(kernel=kernel, bandwidth="scott").fit(data[:, None], sample_weight=weights)
    t = np.linspace(data.min() - 1, data.max() + 1, 41)
    binned_cdf, binned_sf = kde.cdf(t), kde.sf(t)  # None: binned beyond EXACT_SAMPLES
    assert getattr(kde, "_binned_distribution", None) is not None
    exact_cdf, exact_sf = kde.cdf(t, exact=True), kde.sf(t, exact=True)
    bound = _bound(kde)
    assert 0 < bound <= 1e-4
    np.testing.assert_allclose(binned_cdf, exact_cdf, rtol=0, atol=bound)
    np.testing.assert_allclose(binned_sf, exact_sf, rtol=0, atol=bound)
    q = np.array([0.0, 0.001, 0.05, 0.5, 0.93, 0.999, 1.0])
    Q = kde.icdf(q)
    np.testing.assert_allclose(kde.cdf(Q[1:-1], exact=True), q[1:-1], rtol=0, atol=bound)
    np.testing.assert_array_equal(Q[[0, -1]], kde.icdf(q[[0, -1]], exact=True))


def test_entropy_equals_the_exact_quadrature_within_the_bound():
    x = _mixture(3 * EXACT_SAMPLES // 2, seed=3)
    kde = KernelDensity(bandwidth="scott").fit(x[:, None])
    binned = kde.entropy()  # beyond EXACT_SAMPLES: binned
    exact = kde.entropy(exact=True)
    assert abs(binned - exact) <= kde._binned_distribution[1].grid.bound * abs(exact) + 1e-6
    # and the reference: scipy's quad of the exact density
    lo, hi = x.min() - 9 * kde.bandwidth_, x.max() + 9 * kde.bandwidth_
    f = lambda t: np.exp(kde.score_samples([[t]])[0])  # noqa: E731
    ref = -integrate.quad(lambda t: f(t) * np.log(f(t)), lo, hi, limit=400)[0]
    assert abs(binned - ref) < 1e-5


def test_agrees_with_kdepys_grid_and_scipy():
    """KDEpy's FFT density on its grid (Scott's rule there too: the same h), integrated by SciPy's
    cumulative trapezoid: the issue's reference, 4e-5 of ours on a million samples."""
    x = _mixture(400_000, seed=5)
    grid, density = FFTKDE(bw="scott").fit(x).evaluate(2**14)
    F = integrate.cumulative_trapezoid(density, grid, initial=0.0)
    kde = KernelDensity(bandwidth="scott").fit(x[:, None])
    t = np.linspace(-3, 4.5, 200)
    np.testing.assert_allclose(kde.cdf(t), np.interp(t, grid, F), rtol=0, atol=1e-4)
    q = np.array([0.01, 0.25, 0.5, 0.75, 0.99])
    np.testing.assert_allclose(kde.icdf(q), np.interp(q, F, grid), rtol=0, atol=1e-3)


def test_small_samples_and_capped_grids_stay_exact(data):
    small = KernelDensity(bandwidth=0.3).fit(data[:EXACT_SAMPLES, None])
    t = np.linspace(-2, 2, 5)
    np.testing.assert_array_equal(small.cdf(t), small.cdf(t, exact=True))
    # a kink at 0 asks for a grid beyond the largest: the default stays exact
    rough = KernelDensity(kernel="laplacian", bandwidth="scott").fit(data[:, None])
    np.testing.assert_array_equal(rough.cdf(t), rough.cdf(t, exact=True))
    # a tail beyond every grid (the Cauchy's, which reaches no u where k < 2^-52): exact too
    heavy = KernelDensity(kernel="cauchy", bandwidth="scott").fit(data[:, None])
    far = np.array([-50.0, 0.0, 60.0])
    np.testing.assert_array_equal(heavy.cdf(far), heavy.cdf(far, exact=True))
    assert 0 < heavy.cdf([-50.0])[0] < 0.01
    with pytest.raises(TypeError, match="exact must be True, False or None"):
        small.cdf(t, exact="yes")


def test_grid_options_rebuild_the_grid(data):
    kde = KernelDensity(bandwidth="scott").fit(data[:, None])
    t = np.linspace(-2, 4, 7)
    default = kde.cdf(t)
    kde.set_params(grid_size=257)
    coarse = kde.cdf(t, exact=False)
    assert kde._binned_distribution[1].grid.shape == (257,)
    assert np.abs(coarse - default).max() > 0
    np.testing.assert_allclose(coarse, kde.cdf(t, exact=True), atol=_bound(kde))
