"""The documented differences between kernel_density / KernelDensity and their references:
the closed tophat support against scikit-learn's open one, and the per-feature bandwidth rules
against scipy's full-covariance gaussian_kde in d > 1."""
import numpy as np
from scipy.stats import gaussian_kde, multivariate_normal
from sklearn.datasets import load_iris
from sklearn.neighbors import KernelDensity as SKKernelDensity

from localkit import KernelDensity, kernel_density


def test_tophat_counts_a_sample_at_distance_h_where_scikit_learn_does_not():
    X = [[0.0], [3.0]]
    ours = KernelDensity(kernel="tophat", bandwidth=1.0).fit(X).score_samples([[1.0], [0.5]])
    ref = SKKernelDensity(kernel="tophat", bandwidth=1.0).fit(X).score_samples([[1.0], [0.5]])
    assert ref[0] == -np.inf and np.isclose(ours[0], np.log(0.25))  # closed u <= 1 against open u < 1
    np.testing.assert_allclose(ours[1], ref[1], rtol=0, atol=1e-14)  # inside the support: equal


def test_scott_rule_in_2d_is_gaussian_kde_with_a_diagonal_covariance():
    X = load_iris(return_X_y=True)[0][:, :2]
    q = X[::10] + 0.05
    kde = gaussian_kde(X.T)
    diagonal = np.mean([multivariate_normal(x, np.diag(np.diag(kde.covariance))).pdf(q) for x in X], axis=0)
    ours = kernel_density(q, X, "gaussian", "scott")
    np.testing.assert_allclose(ours, diagonal, rtol=1e-12)
    assert np.max(np.abs(ours - kde(q.T)) / kde(q.T)) > 0.01  # the full covariance differs


def test_cosine_matches_scikit_learn_in_odd_dimensions_only():
    X = load_iris(return_X_y=True)[0]
    for d, equal in ((1, True), (2, False), (3, True)):
        Z, q = X[:, :d], X[::10, :d] + 0.05
        ours = KernelDensity(kernel="cosine", bandwidth=0.8).fit(Z).score_samples(q)
        ref = SKKernelDensity(kernel="cosine", bandwidth=0.8).fit(Z).score_samples(q)
        assert np.allclose(ours, ref, rtol=0, atol=1e-12) == equal
