"""Leave-one-out with repeated rows: every row at the query's point is left out with it.

The reference is the data without the copies: for a kernel, rows at one point are one
observation counted several times, so the leave-one-out estimate at a sample, its loss and the
bandwidth it selects are those of the distinct rows (up to round-off), and a brute-force
leave-one-out that masks every equal row agrees. scikit-learn's ``LeaveOneOut`` (and
statsmodels' ``cv_ls``) split rows, which on repeated rows predicts each sample from its copy."""
import warnings

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from scipy.special import softmax
from sklearn.datasets import load_diabetes

from localkit import Kernel, LazyAutoencoder, LocalMeanRegressor, LocalPolynomialRegressor, local_mean
from localkit.engine import BoundKernel, local_polynomial
from localkit.exceptions import LocalkitConvergenceWarning
from localkit.engine.reconstruction import reconstruction_gradient
from localkit.engine.twins import twin_groups
from localkit.models.selection import sample_point_scales


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:150, :4], y[:150] / y.std()


def doubled(*arrays):
    return [np.concatenate([a, a]) for a in arrays]


def test_twin_groups():
    X = np.array([[0.0, 1.0], [2.0, 3.0], [-0.0, 1.0], [2.0, 3.5]])
    g = twin_groups(X)
    assert g[0] == g[2] and len(set(g[[0, 1, 3]])) == 3
    assert twin_groups(X[:2]) is None  # all rows differ: the plain leave-one-out


@pytest.mark.parametrize("kernel, n_neighbors, algorithm", [
    ("gaussian", None, "dense"),          # dense path, smooth profile
    ("epanechnikov", None, "dense"),      # dense path, compact profile (empty rows -> nearest other)
    ("epanechnikov", None, "neighbors"),  # radius path
    ("tricube", 7, "auto"),               # compact kNN kernel: neighbour path
    ("gaussian", 7, "dense"),             # balloon bandwidth from the k-th other point
])
def test_every_numpy_path_leaves_out_every_twin(diabetes, kernel, n_neighbors, algorithm):
    """A kNN span counts rows: 2k rows of doubled data are the k nearest distinct points twice."""
    X, y = diabetes
    X2, y2 = doubled(X, y)
    bandwidth = 0.02 if n_neighbors is None else 1.0
    k2 = None if n_neighbors is None else 2 * n_neighbors
    once = local_mean(None, X, y, kernel, bandwidth, n_neighbors, True, algorithm=algorithm)
    twice = local_mean(None, X2, y2, kernel, bandwidth, k2, True, algorithm=algorithm)
    np.testing.assert_allclose(twice, np.r_[once, once], rtol=1e-10, atol=1e-12)
    kern = Kernel(kernel, bandwidth=bandwidth, n_neighbors=k2)
    W = BoundKernel(kern, X2).weights(None, exclude_self=True)
    assert not np.any(W[np.arange(len(X2)), (np.arange(len(X2)) + len(X)) % len(X2)])  # the copy weighs 0


def test_brute_force_reference_masks_equal_rows(diabetes):
    """Gaussian Nadaraya–Watson from the dense kernel matrix with every equal row masked, on
    data whose rows repeat 1, 2 or 3 times."""
    X, y = diabetes
    reps = np.arange(len(X)) % 3 + 1
    Xr, yr = np.repeat(X, reps, axis=0), np.repeat(y, reps)
    h = 0.03
    L = -cdist(Xr, Xr, "sqeuclidean") / (2 * h * h)
    L[cdist(Xr, Xr) == 0] = -np.inf
    expected = softmax(L, axis=1) @ yr
    np.testing.assert_allclose(local_mean(None, Xr, yr, "gaussian", h, exclude_self=True), expected, rtol=1e-10)


@pytest.mark.parametrize("estimator", [LocalMeanRegressor(kernel="gaussian", bandwidth="cv"),
                                       LocalMeanRegressor(kernel="epanechnikov", bandwidth="cv"),
                                       LocalPolynomialRegressor(kernel="gaussian", bandwidth="cv"),
                                       LocalPolynomialRegressor(kernel="epanechnikov", bandwidth="cv")],
                         ids=["nw-gaussian", "nw-epanechnikov", "ll-gaussian", "ll-epanechnikov"])
def test_cv_bandwidth_is_that_of_the_distinct_rows(diabetes, estimator):
    """Duplicating every row chose the grid's smallest bandwidth (each sample predicted from its
    copy); now the same bandwidth and leave-one-out curve as without the copies. The local
    linear with a compact profile chose it even without copies: a query whose neighbourhood
    emptied took its own target as the 'nearest' sample."""
    X, y = diabetes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # singular local designs at tiny h
        once = type(estimator)(**estimator.get_params()).fit(X, y)
        twice = type(estimator)(**estimator.get_params()).fit(*doubled(X, y))
    assert once.bandwidth_ > 5 * once.cv_results_["bandwidth"][0]  # an interior choice
    np.testing.assert_allclose(twice.bandwidth_, once.bandwidth_, rtol=1e-6)
    np.testing.assert_allclose(twice.cv_results_["loo_loss"][:24:4], once.cv_results_["loo_loss"][:24:4],
                               rtol=1e-7)


def test_local_polynomial_loo_equals_the_distinct_rows(diabetes):
    X, y = diabetes
    once = local_polynomial(None, X, y, 1, "tricube", n_neighbors=20, exclude_self=True).values
    twice = local_polynomial(None, *doubled(X, y), 1, "tricube", n_neighbors=40, exclude_self=True).values
    np.testing.assert_allclose(twice, np.r_[once, once], rtol=1e-9)


def test_sample_point_scales_skip_the_copies(diabetes):
    """A copy at distance 0 gave h_i = 0 (the sample then weighs nothing away from its point);
    the k counts rows, so the 2k-th of doubled data is the k-th distinct point."""
    X, _ = diabetes
    assert np.all(sample_point_scales(np.r_[X, X], 1) > 0)
    np.testing.assert_array_equal(sample_point_scales(np.r_[X, X], 6), np.tile(sample_point_scales(X, 3), 2))
    with pytest.raises(ValueError, match="n_neighbors must be <= n_samples - \\(rows at the same point\\)=6"):
        sample_point_scales(np.r_[X[:4], X[:4]], 7)


def test_lazy_autoencoder_leaves_out_the_copies_of_its_codes(diabetes):
    """The codes of repeated rows drift apart by round-off (~1e-14) during the fit: the
    leave-one-out groups are those of X, not of the codes."""
    X, _ = diabetes
    X2 = np.r_[X, X]
    Z = np.random.default_rng(0).normal(size=(len(X), 2))
    Z2 = np.r_[Z, Z + 1e-14]
    err, _ = reconstruction_gradient(Z, X, bandwidth=0.5)
    err2, _ = reconstruction_gradient(Z2, X2, bandwidth=0.5, twins=twin_groups(X2))
    np.testing.assert_allclose(err2, err, rtol=1e-9)
    with pytest.warns(LocalkitConvergenceWarning, match="max_iter=5"):  # short fits
        model = LazyAutoencoder(n_components=1, max_iter=5).fit(X2)
    with pytest.warns(LocalkitConvergenceWarning, match="max_iter=5"):
        init_error = LazyAutoencoder(n_components=1, max_iter=5).fit(X).init_error_
    assert model.reconstruction_error_ > 0.5 * init_error
