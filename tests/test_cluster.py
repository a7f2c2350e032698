"""MeanShift against scikit-learn's MeanShift (uniform kernel) and as a fixed point of the local mean."""
import warnings

import numpy as np
import pytest
import sklearn.cluster as skc
from sklearn.datasets import load_iris, make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.utils.estimator_checks import check_estimator

from localkit import MeanShift, local_mean
from localkit.exceptions import LocalkitConvergenceWarning


@pytest.fixture(scope="module")
def blobs():
    X, y = make_blobs(n_samples=300, centers=[[1, 1], [-1, -1], [1, -1]], cluster_std=0.6, random_state=0)
    return X, y


@pytest.fixture(scope="module")
def separated():
    return make_blobs(n_samples=300, centers=[[1, 1], [-1, -1], [1, -1]], cluster_std=0.3, random_state=0)


def assert_same_as_sklearn(X, **params):
    with warnings.catch_warnings(record=True) as theirs:
        warnings.simplefilter("always")
        ref = skc.MeanShift(**params).fit(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours = MeanShift(**params).fit(X)
    # scikit-learn's warning where bin seeding fails, and ours; ours also says when max_iter cut seeds short
    binning = "Binning data failed with provided bin_size"
    assert all(binning in str(w.message) for w in theirs)
    assert sum(binning in str(w.message) for w in caught) == len(theirs)
    assert all(issubclass(w.category, LocalkitConvergenceWarning) for w in caught if binning not in str(w.message))
    assert ours.cluster_centers_.shape == ref.cluster_centers_.shape
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    assert ours.n_iter_ == ref.n_iter_
    Q = X[::7] + 0.3
    np.testing.assert_array_equal(ours.predict(Q), ref.predict(Q))
    return ours


@pytest.mark.parametrize("params", [
    dict(bandwidth=0.8),
    dict(bandwidth=None),
    dict(bandwidth=0.5, bin_seeding=True),
    dict(bandwidth=0.4, bin_seeding=True, min_bin_freq=3),
    dict(bandwidth=0.3, cluster_all=False),
    dict(bandwidth=0.8, max_iter=2),
    dict(bandwidth=0.8, max_iter=0),
])
def test_uniform_kernel_reproduces_sklearn_on_blobs(blobs, params):
    ours = assert_same_as_sklearn(blobs[0], **params)
    if params.get("cluster_all") is False:
        assert (ours.labels_ == -1).any()


def test_reproduces_sklearn_on_iris_and_with_given_seeds():
    X = load_iris().data
    assert_same_as_sklearn(X, bandwidth=None)
    assert_same_as_sklearn(X, bandwidth=0.9, seeds=X[::10] + 0.05)


def test_ties_at_the_bandwidth_are_decided_as_sklearn_does():
    # points exactly h apart: an integer grid (exact arithmetic throughout) and iris (0.1 steps);
    # membership |x - q|^2 <= h^2 is computed with the arithmetic of scikit-learn's radius query
    grid = np.stack(np.meshgrid(np.arange(6), np.arange(5)), -1).reshape(-1, 2).astype(float)
    grid = np.concatenate([grid, grid[:7] + [10, 0]])
    for h in (1.0, 1.5, 2.0):
        assert_same_as_sklearn(grid, bandwidth=h)
        assert_same_as_sklearn(grid, bandwidth=h, bin_seeding=True)
    assert_same_as_sklearn(load_iris().data, bandwidth=0.3)


def test_gaussian_mean_shift_stops_at_fixed_points_of_the_local_mean(separated):
    X, y = separated
    ms = MeanShift(kernel="gaussian", bandwidth=0.5, bin_seeding=True).fit(X)
    moved = local_mean(ms.cluster_centers_, X, X, "gaussian", 0.5)
    # the per-seed rule stops when a step is at most 1e-3 h
    assert np.linalg.norm(moved - ms.cluster_centers_, axis=1).max() <= 1e-3 * 0.5
    assert adjusted_rand_score(y, ms.labels_) > 0.95


def test_blurring_mean_shift_finds_the_blobs(separated):
    X, y = separated
    # a compact kernel: once the blobs collapse to points farther apart than h, nothing moves
    ms = MeanShift(kernel="epanechnikov", bandwidth=0.8, blurring=True).fit(X)
    assert len(ms.cluster_centers_) == 3
    assert adjusted_rand_score(y, ms.labels_) > 0.95
    assert ms.n_iter_ >= 1


def test_translation_moves_the_centres_and_keeps_the_labels(blobs):
    X = blobs[0]
    a = MeanShift(bandwidth=0.8).fit(X)
    b = MeanShift(bandwidth=0.8).fit(X + [100.0, -30.0])
    np.testing.assert_allclose(b.cluster_centers_, a.cluster_centers_ + [100.0, -30.0], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(b.labels_, a.labels_)


def test_float32_is_kept(blobs):
    ms = MeanShift(bandwidth=0.8).fit(blobs[0].astype(np.float32))
    assert ms.cluster_centers_.dtype == np.float32


@pytest.mark.parametrize("params, error, match", [
    (dict(bandwidth=0.0), ValueError, "bandwidth"),
    (dict(bandwidth=-1.0), ValueError, "bandwidth"),
    (dict(bandwidth="wide"), TypeError, "bandwidth"),
    (dict(kernel="softmax"), ValueError, "softmax"),
    (dict(kernel="boxcar"), ValueError, "kernel"),
    (dict(max_iter=-1), ValueError, "max_iter"),
    (dict(min_bin_freq=0), ValueError, "min_bin_freq"),
    (dict(blurring=True, bin_seeding=True), ValueError, "blurring"),
    (dict(bin_seeding="yes"), TypeError, "bin_seeding"),
    (dict(seeds=np.zeros((2, 3))), ValueError, "seeds has 3 features"),
    (dict(seeds=[[np.nan, 0.0]]), ValueError, "seeds"),
])
def test_bad_parameters(blobs, params, error, match):
    with pytest.raises(error, match=match):
        MeanShift(**params).fit(blobs[0])


def test_bad_data():
    with pytest.raises(ValueError, match="NaN|infinity"):
        MeanShift(bandwidth=1.0).fit([[0.0, np.inf], [1.0, 1.0]])
    with pytest.raises(ValueError):
        MeanShift(bandwidth=1.0).fit(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="No point was within"):
        MeanShift(bandwidth=0.1, seeds=[[100.0, 100.0]]).fit([[0.0, 0.0], [1.0, 1.0]])
    ms = MeanShift(bandwidth=1.0).fit([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]])
    with pytest.raises(ValueError, match="features"):
        ms.predict([[0.0, 0.0, 0.0]])


def test_check_estimator():
    # check_sample_weights_shape fits 4 distinct points, each 4 times: the estimated bandwidth
    # (distance to the 4th nearest, quantile 0.3 of 16) is 0, clustered as scikit-learn does
    check_estimator(MeanShift())
    check_estimator(MeanShift(bandwidth=1.0))  # every check, sample weights included


@pytest.mark.parametrize("X", [np.ones((10, 1)), np.r_[np.zeros((8, 2)), np.ones((3, 2))],
                               np.repeat(np.arange(3.0)[:, None], 40, axis=0)])
@pytest.mark.parametrize("options", [{}, {"bin_seeding": True}, {"cluster_all": False}])
def test_zero_estimated_bandwidth_clusters_duplicates_as_scikit_learn(X, options):
    """scikit-learn's regression test for its issue 28926: constant or duplicated data, whose
    estimated bandwidth is 0, gives one centre per distinct point and n_iter_ = 0 (it raised)."""
    ours, theirs = MeanShift(**options).fit(X), skc.MeanShift(**options).fit(X)
    assert ours.bandwidth_ == 0
    np.testing.assert_array_equal(ours.cluster_centers_, theirs.cluster_centers_)
    np.testing.assert_array_equal(ours.labels_, theirs.labels_)
    assert ours.n_iter_ == theirs.n_iter_ == 0
    np.testing.assert_array_equal(ours.predict(X[:5]), theirs.predict(X[:5]))


def test_zero_estimated_bandwidth_in_several_dimensions():
    """Where scikit-learn's radius-0 search finds no point (4-D iris rows repeated: it raises),
    the limit h -> 0 still gives one centre per distinct point, ties in count ordered by their
    coordinates descending (scikit-learn's order), and each point its own centre's label."""
    rows = load_iris().data[[0, 50, 100]]
    X = np.repeat(rows, 40, axis=0)
    ms = MeanShift().fit(X)
    assert ms.bandwidth_ == 0 and ms.n_iter_ == 0 and ms.kernel_ is None
    np.testing.assert_array_equal(ms.cluster_centers_, rows[[1, 2, 0]])  # 7.0 > 6.3 > 5.1
    np.testing.assert_array_equal(ms.cluster_centers_[ms.labels_], X)
