"""The samples' column extremes and means that every binding of a norm metric reads
(:func:`localkit.kernels.bandwidth.column_extremes`, :func:`~localkit.kernels.bandwidth.safe_mean`):
exactly NumPy's extremes, means within round-off of a float64 mean, whatever the shape of the
array (narrow ones are read along wide rows, with rows left over)."""
import numpy as np
import pytest

from localkit.kernels.bandwidth import MEAN_SLICE, column_extremes, safe_mean


@pytest.mark.parametrize("shape", [(MEAN_SLICE + 1, 1), (3 * MEAN_SLICE + 7, 3), (MEAN_SLICE + 13, 7),
                                   (MEAN_SLICE + 5, 15), (MEAN_SLICE + 5, 40), (50, 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_extremes_are_numpys_and_means_are_float64_means(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    X = (rng.standard_normal(shape) * 10.0 + np.arange(shape[1])).astype(dtype)
    X[rng.integers(len(X)), 0] = 1e3  # an extreme anywhere, also in the rows left over
    X[-1, -1] = -1e3
    lo, hi = column_extremes(X)
    assert lo.dtype == hi.dtype == dtype
    np.testing.assert_array_equal(lo, X.min(axis=0))
    np.testing.assert_array_equal(hi, X.max(axis=0))
    mean = safe_mean(X)
    assert mean.dtype == dtype
    exact = X.astype(np.float64).mean(axis=0)
    # recursive summation of n terms (error <= n eps mean |x|: float64 sums for large arrays, else
    # NumPy's mean in the dtype), the scaling in and out and the rounding to dtype
    summed = np.float64 if len(X) > MEAN_SLICE else dtype
    bound = (len(X) * np.finfo(summed).eps * np.abs(X).mean(axis=0)
             + 3 * np.finfo(dtype).eps * np.abs(X).mean(axis=0))
    assert np.all(np.abs(mean - exact) <= bound)


def test_a_mean_near_the_largest_float_does_not_overflow():
    X = np.full((MEAN_SLICE + 3, 3), 1e308)
    X[::2] = 1.7e308
    mean = safe_mean(X)  # the plain sum overflows to inf
    np.testing.assert_allclose(mean, 1.35e308 + 0.35e308 / len(X), rtol=len(X) * np.finfo(float).eps)


def test_a_strided_array_is_read_as_numpy_reads_it():
    X = np.random.default_rng(0).standard_normal((2 * MEAN_SLICE, 6))[:, ::2]  # not C-contiguous
    lo, hi = column_extremes(X)
    np.testing.assert_array_equal(lo, X.min(axis=0))
    np.testing.assert_array_equal(hi, X.max(axis=0))
