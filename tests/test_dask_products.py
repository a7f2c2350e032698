"""Product kernels, categorical factors and sums of kernels on dask arrays (issue 23).

Reference: the in-memory engine on the same arrays, to round-off (1e-12). The samples are
sorted by an unordered column and cut into several chunks, so that chunks miss levels: a chunk
that counted its own levels (``c`` of the Aitchison-Aitken kernel) or resolved its own bandwidth
rule would weigh differently from the one pass over all the samples.
"""
from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import pytest

from localkit import Kernel, LocalMeanClassifier, LocalMeanRegressor, local_sums
from localkit.exceptions import EmptyNeighbourhoodWarning
from localkit.kernels.kernel import SumKernel

TOL = 1e-12


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def _mixed(seed=0, n=240, m=40):
    """Columns: continuous, unordered (4 levels), ordered (5 levels), unordered (3 levels); the
    samples sorted by the first unordered column, so that its first chunks show one level only."""
    rng = np.random.default_rng(seed)
    X = np.c_[rng.normal(size=n) * 2.0 + 5.0, rng.integers(0, 4, n), rng.integers(1, 6, n), rng.integers(0, 3, n)]
    X = X[np.argsort(X[:, 1], kind="stable")]
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] + rng.normal(size=n) * 0.2
    Q = np.c_[rng.normal(size=m) * 2.0 + 5.0, rng.integers(0, 4, m), rng.integers(1, 6, m), rng.integers(0, 3, m)]
    return X, y, Q


def _chunked(x, rows):
    return da.from_array(np.asarray(x), chunks=(rows,) + np.shape(x)[1:])


def _cuo(first="gaussian", bandwidth="scott"):
    return (Kernel(first, bandwidth=bandwidth, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
            * Kernel("wang_ryzin", bandwidth=0.35, features=[2]) * Kernel("aitchison_aitken", bandwidth=0.3,
                                                                            features=[3]))


def _same(got, want):
    mean, log_sum, empty = dask.compute(got.mean, got.log_weight_sum, got.empty)
    np.testing.assert_array_equal(empty, want.empty)
    np.testing.assert_allclose(mean, want.mean, rtol=0, atol=TOL)
    # the weight sums agree to TOL relative <=> their logs to TOL absolute (a relative tolerance on
    # a log near 0, a sum near 1, asked for more than the sum's own round-off: 1.3 ulps failed it)
    np.testing.assert_allclose(log_sum[~empty], want.log_weight_sum[~empty], rtol=0, atol=TOL)
    assert np.all(np.isneginf(log_sum[empty]))


def test_chunks_miss_levels():
    X, _, _ = _mixed()
    assert np.unique(X[:50, 1]).size == 1 and np.unique(X[:, 1]).size == 4  # the premise of every test here


@pytest.mark.parametrize("kernel", [_cuo(), _cuo("epanechnikov", 2.0),
                                    Kernel("aitchison_aitken", bandwidth=[0.2, 0.3], features=[1, 3])
                                    * Kernel("wang_ryzin", bandwidth=0.4, features=[2]),
                                    Kernel("gaussian", bandwidth="silverman", features=[0, 2])],
                         ids=["cuo-scott", "cuo-compact", "uuo", "features-rule"])
def test_product_equals_in_memory(kernel):
    X, y, Q = _mixed()
    want = local_sums(Q, X, y, kernel)
    _same(local_sums(_chunked(Q, 15), _chunked(X, 50), _chunked(y, 50), kernel), want)
    # two outputs, samples in memory beside dask queries
    Y = np.c_[y, np.cos(y)]
    want = local_sums(Q, X, Y, kernel)
    _same(local_sums(_chunked(Q, 15), X, Y, kernel), want)
    _same(local_sums(Q, _chunked(X, 50), Y, kernel), want)


def test_leave_one_out_and_sample_weight():
    X, y, _ = _mixed(1)
    w = np.random.default_rng(1).uniform(0, 3, len(X))
    w[:60] = 0  # a whole chunk without weight
    K = _cuo()  # the rule weighted by sample_weight, on all the samples
    want = local_sums(None, X, y, K, exclude_self=True, sample_weight=w)
    _same(local_sums(_chunked(X, 45), _chunked(X, 60), y, K, exclude_self=True, sample_weight=_chunked(w, 60)), want)


def test_empty_neighbourhood_policies():
    X, y, Q = _mixed(2)
    Q[:5, 0] += 50.0  # outside the compact factor's support
    K = _cuo("epanechnikov", 1.0)
    Qd, Xd = _chunked(Q, 15), _chunked(X, 50)
    want = local_sums(Q, X, y, K)
    assert want.empty[:5].all() and not want.empty[5:].any()
    _same(local_sums(Qd, Xd, y, K), want)
    with pytest.warns(EmptyNeighbourhoodWarning):
        nan = local_sums(Qd, Xd, y, K, empty="nan").mean.compute()
    assert np.isnan(nan[:5]).all() and np.isfinite(nan[5:]).all()
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_sums(Qd, Xd, y, K, empty="raise").mean.compute()


@pytest.mark.parametrize("kernel", [0.3 * _cuo() + 0.7 * Kernel("laplacian", bandwidth=2.0),
                                    SumKernel([(0.6, _cuo("epanechnikov", 1.0)), (0.4, Kernel("uniform", n_neighbors=7)),
                                               (0.0, Kernel("gaussian"))])],
                         ids=["product+plain", "compact+knn"])
def test_sum_equals_in_memory(kernel):
    X, y, Q = _mixed(3)
    Q[:3, 0] += 50.0  # far: empty for the compact product, not for the other term
    _same(local_sums(_chunked(Q, 15), _chunked(X, 50), _chunked(y, 50), kernel), local_sums(Q, X, y, kernel))
    w = np.random.default_rng(3).uniform(0, 2, len(X))
    want = local_sums(None, X, y, kernel, exclude_self=True, sample_weight=w)
    _same(local_sums(None, _chunked(X, 50), y, kernel, exclude_self=True, sample_weight=_chunked(w, 50)), want)
    want = local_sums(Q, X, None, kernel)  # weight sums only
    got = local_sums(_chunked(Q, 15), _chunked(X, 50), None, kernel)
    assert got.mean is None
    np.testing.assert_allclose(got.log_weight_sum.compute(), want.log_weight_sum, rtol=TOL, atol=0)


def test_sum_empty_everywhere_takes_the_sums_policy():
    X, y, Q = _mixed(4)
    Q[:4, 0] += 50.0  # outside both compact terms
    K = 0.5 * _cuo("epanechnikov", 1.0) + 0.5 * Kernel("uniform", bandwidth=1.5, features=[0])
    Qd, Xd = _chunked(Q, 15), _chunked(X, 50)
    want = local_sums(Q, X, y, K)
    assert want.empty[:4].all() and not want.empty[4:].any()
    _same(local_sums(Qd, Xd, y, K), want)  # "nearest": the first term's nearest sample
    with pytest.warns(EmptyNeighbourhoodWarning):
        nan = local_sums(Qd, Xd, y, K, empty="nan").mean.compute()
    assert np.isnan(nan[:4]).all() and np.isfinite(nan[4:]).all()
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_sums(Qd, Xd, y, K, empty="raise").mean.compute()


def test_regressor_fitted_in_memory_predicts_dask_queries():
    X, y, Q = _mixed(5)
    for kernel in (_cuo(), 0.5 * _cuo() + 0.5 * Kernel("gaussian", bandwidth=1.0, features=[0])):
        est = LocalMeanRegressor(kernel=kernel).fit(X, y)
        got = est.predict(_chunked(Q, 15))
        assert isinstance(got, da.Array)
        np.testing.assert_allclose(got.compute(), est.predict(Q), rtol=0, atol=TOL)


def test_bad_codes_are_refused_by_the_kernel_name():
    X, y, Q = _mixed(6)
    X[7, 1] = 0.5  # not a level
    with pytest.raises(ValueError, match="'aitchison_aitken' kernel compares levels"):
        local_sums(_chunked(Q, 15), _chunked(X, 50), y, _cuo())
    X, y, Q = _mixed(6)
    X[:, 3] = 1.0  # a single level in all the samples
    with pytest.raises(ValueError, match="single level"):
        local_sums(_chunked(Q, 15), _chunked(X, 50), y, _cuo()).mean.compute()



def test_knn_factors_are_refused_on_dask_samples():
    """A kNN factor's bandwidth is the distance to the k-th nearest of all the samples: a chunk
    would find its own (silently wrong: 0.86 off in the mean before the refusal)."""
    X, y, Q = _mixed(7)
    knn = Kernel("gaussian", n_neighbors=5, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    with pytest.raises(ValueError, match="k nearest samples"):
        local_sums(_chunked(Q, 15), _chunked(X, 50), y, knn)
    with pytest.raises(ValueError, match="k nearest samples"):
        local_sums(_chunked(Q, 15), _chunked(X, 50), y, 0.5 * knn + 0.5 * _cuo())
    # samples in one chunk hold every k nearest: then it runs, as a regressor fitted in memory
    # predicting dask queries does
    _same(local_sums(_chunked(Q, 15), _chunked(X, len(X)), y, knn), local_sums(Q, X, y, knn))
    reg = LocalMeanRegressor(kernel=knn).fit(X, y)
    np.testing.assert_allclose(reg.predict(_chunked(Q, 15)).compute(), reg.predict(Q), rtol=0, atol=TOL)


@pytest.mark.parametrize("Estimator", [LocalMeanRegressor, LocalMeanClassifier])
@pytest.mark.parametrize("kernel", ["product", "sum"])
def test_estimators_fitted_on_dask_samples_equal_in_memory(Estimator, kernel):
    """Rules and levels resolved by dask reductions over all the sample chunks (weighted), as a fit
    in memory resolves them: the predictions agree to round-off."""
    X, y, Q = _mixed(8)
    w = np.random.default_rng(8).uniform(0.5, 2.0, len(X))
    kern = _cuo() if kernel == "product" else 0.4 * _cuo() + 0.6 * Kernel("epanechnikov", bandwidth=2.0, features=[0])
    target = (y > np.median(y)).astype(int) if Estimator is LocalMeanClassifier else y
    mem = Estimator(kernel=kern).fit(X, target, sample_weight=w)
    lazy = Estimator(kernel=kern).fit(_chunked(X, 50), _chunked(target, 50), sample_weight=_chunked(w, 50))
    assert repr(lazy.kernel_) == repr(mem.kernel_)  # the same rules' values and levels
    got = lazy.predict_proba(_chunked(Q, 15)) if Estimator is LocalMeanClassifier else lazy.predict(_chunked(Q, 15))
    want = mem.predict_proba(Q) if Estimator is LocalMeanClassifier else mem.predict(Q)
    np.testing.assert_allclose(np.asarray(got), want, rtol=0, atol=TOL)


def test_cv_inside_a_kernel_is_refused_on_dask_samples():
    X, y, _ = _mixed(9)
    kern = Kernel("gaussian", bandwidth="cv", features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    with pytest.raises(ValueError, match="bandwidth='cv' inside a Kernel is not available on dask"):
        LocalMeanRegressor(kernel=kern).fit(_chunked(X, 50), _chunked(y, 50))


@pytest.mark.parametrize("kernel", ["product", "sum"])
def test_kernel_density_on_dask_equals_in_memory(kernel):
    """The density of a kernel on groups of columns: rules and levels of all the chunks, the
    continuous factors' normaliser from the resolved bandwidths (no samples needed for it)."""
    from localkit import kernel_density

    X, _, Q = _mixed(10)
    w = np.random.default_rng(10).uniform(0.5, 2.0, len(X))
    kern = _cuo() if kernel == "product" else 0.4 * _cuo() + 0.6 * (
        Kernel("epanechnikov", bandwidth=2.0, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.5, features=[1]))
    want = kernel_density(Q, X, kernel=kern, sample_weight=w)
    got = kernel_density(_chunked(Q, 15), _chunked(X, 50), kernel=kern, sample_weight=_chunked(w, 50))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=0)
