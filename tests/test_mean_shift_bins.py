"""Bin seeding: localkit's vectorised cells against scikit-learn's get_bin_seeds, exactly."""
import warnings

import numpy as np
import pytest
from sklearn.cluster import MeanShift as SkMeanShift
from sklearn.cluster import get_bin_seeds
from sklearn.datasets import load_diabetes, load_iris, make_blobs

from localkit import MeanShift
from localkit.models.cluster import bin_seeds

DATA = {
    "iris": load_iris().data,
    "diabetes": load_diabetes().data[:, :3],
    "blobs": make_blobs(n_samples=3000, centers=4, n_features=3, random_state=0)[0],
}


def sklearn_seeds(X, h, min_bin_freq):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seeds = get_bin_seeds(X, h, min_bin_freq)
    return seeds, [str(w.message) for w in caught]


@pytest.mark.parametrize("name", list(DATA))
@pytest.mark.parametrize("relative", [0.02, 0.1, 0.37, 1.0])
@pytest.mark.parametrize("min_bin_freq", [1, 2, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_bin_seeds_equal_scikit_learn(name, relative, min_bin_freq, dtype):
    X = DATA[name].astype(dtype)
    h = relative * float(np.ptp(X, axis=0).max())
    ref, ref_warnings = sklearn_seeds(X, h, min_bin_freq)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = bin_seeds(X, h, min_bin_freq)
    assert [str(w.message) for w in caught] == ref_warnings
    assert got.dtype == ref.dtype
    if len(ref):
        np.testing.assert_array_equal(got, ref)  # the same seeds, in the same order
        assert np.array_equal(np.signbit(got), np.signbit(ref))
    else:
        assert got.shape == (0, X.shape[1])


def test_binning_failure_warns_and_returns_the_points():
    X = DATA["blobs"]  # distinct points: each has a cell of its own
    ref, ref_warnings = sklearn_seeds(X, 1e-6, 1)
    with pytest.warns(UserWarning, match="Binning data failed with provided bin_size=0.000001"):
        got = bin_seeds(X, 1e-6)
    assert ref_warnings and got is X and ref is X
    assert bin_seeds(X, 0) is X and get_bin_seeds(X, 0) is X


def test_signed_zero_cells_are_one_cell_keeping_the_first_sign():
    X = np.array([[-0.1, 1.0], [0.1, 1.0], [0.2, 3.0], [-0.2, 3.0], [0.1, 1.1]])
    ref, _ = sklearn_seeds(X, 1.0, 1)
    got = bin_seeds(X, 1.0)
    np.testing.assert_array_equal(got, ref)
    assert np.array_equal(np.signbit(got), np.signbit(ref))


@pytest.mark.parametrize("min_bin_freq", [1, 3])
def test_mean_shift_with_bin_seeding_equals_scikit_learn(min_bin_freq):
    X = DATA["blobs"]
    ours = MeanShift(bandwidth=2.0, bin_seeding=True, min_bin_freq=min_bin_freq).fit(X)
    ref = SkMeanShift(bandwidth=2.0, bin_seeding=True, min_bin_freq=min_bin_freq).fit(X)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
