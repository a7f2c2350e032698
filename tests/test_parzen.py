"""Stata's Parzen kernel (the cubic B-spline) as a profile: statsmodels' own reference values
(``results_kde_univ_weights.csv``, Stata's ``kdensity`` with weights, the ``x_par_wd`` column its
``test_kde.py`` leaves unimplemented), its normaliser, distribution function, sampler and the
engine's paths."""
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.nonparametric.tests as sm_tests
from scipy import integrate
from statsmodels.nonparametric.bandwidths import bw_scott

from localkit import KernelDensity, kernel_density
from localkit.kernels.profiles import PROFILES
from localkit.models.density import kernel_cdf, kernel_quantile

STATA = pd.read_csv(Path(sm_tests.__file__).parent / "results" / "results_kde_univ_weights.csv")


@pytest.mark.parametrize("algorithm", ["auto", "dense", "compiled", "neighbors"])
def test_weighted_density_equals_statas(algorithm):
    """statsmodels' TestKDEWeights setting: Scott's bandwidth of the unweighted data (statsmodels'
    ``bw_scott``, 1.059 min(sd, IQR / 1.349) n^-1/5), the weights, Stata's densities at the data
    to 7 decimals (the test's ``decimal_density``)."""
    x, w = STATA["x"].to_numpy(), STATA["weights"].to_numpy()
    kde = KernelDensity(kernel="parzen", bandwidth=bw_scott(x), algorithm=algorithm).fit(x[:, None], sample_weight=w)
    np.testing.assert_almost_equal(np.exp(kde.score_samples(x[:, None])), STATA["x_par_wd"], decimal=7)


def test_profile_is_statas_parzen_kernel():
    """Stata's ``parzen``: 4/3 - 8u^2 + 8|u|^3 for |u| <= 1/2, 8 (1 - |u|)^3 / 3 to 1, 0 beyond."""
    u = np.linspace(-1.3, 1.3, 2601)
    a = np.abs(u)
    stata = np.where(a <= 0.5, 4 / 3 - 8 * a ** 2 + 8 * a ** 3, np.where(a <= 1, 8 * (1 - a) ** 3 / 3, 0.0))
    np.testing.assert_allclose(kernel_density(u[:, None], [[0.0]], "parzen", 1.0), stata, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("d", [1, 2, 3, 5, 40])
def test_normaliser_integrates_to_one(d):
    p = PROFILES["parzen"]
    moment = integrate.quad(lambda r: p(r) * r ** (d - 1), 0.0, 1.0, points=[0.5], epsabs=0, epsrel=1e-13)[0]
    np.testing.assert_allclose(np.exp(p.log_radial_moment(d)), moment, rtol=1e-11)


def test_distribution_function_and_quantiles():
    p = PROFILES["parzen"]
    z = np.linspace(-1.2, 1.2, 97)
    want = [integrate.quad(lambda t: 4 / 3 * p(t), -1.0, min(zi, 1.0), points=[-0.5, 0.0, 0.5], epsabs=1e-14)[0]
            if zi > -1 else 0.0 for zi in z]
    np.testing.assert_allclose(kernel_cdf(p, z), want, rtol=0, atol=1e-13)
    q = np.linspace(0.0, 1.0, 41)
    np.testing.assert_allclose(kernel_cdf(p, kernel_quantile(p, q)), q, rtol=0, atol=1e-13)


def test_draws_follow_the_density():
    x = STATA["x"].to_numpy()[:, None]
    kde = KernelDensity(kernel="parzen", bandwidth=0.3).fit(x)
    draws = kde.sample(200_000, random_state=0)[:, 0]
    grid = np.linspace(x.min() - 0.3, x.max() + 0.3, 9)
    np.testing.assert_allclose(np.mean(draws[:, None] <= grid, axis=0), kde.cdf(grid), atol=4e-3)
