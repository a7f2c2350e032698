"""The engine and the estimators on dask arrays, computed on a real LocalCluster of two worker
processes, against the in-memory results (relative 1e-9) on scikit-learn's bundled data."""
import subprocess
import sys

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.datasets import load_diabetes, load_digits, load_iris, load_wine, make_blobs
from sklearn.linear_model import LinearRegression
from sklearn.neighbors import KernelDensity
from sklearn.preprocessing import StandardScaler

from localkit import (HopfieldNetwork, Kernel, LazyAutoencoder, Localized, LocallyLinearEmbedding,
                      LocalMeanClassifier, LocalMeanDenoiser, LocalMeanRegressor, LocalPCA, LocalPolynomialRegressor,
                      MeanShift, MetricLearningKernelRegressor, RelaxationLabeling, TSKFuzzyClassifier,
                      TSKFuzzyRegressor, kernel_density, local_mean)
from localkit.engine import local_sums
from localkit.exceptions import LocalkitConvergenceWarning

RTOL = 1e-9
#: compact profiles take the dense path here: "auto" would pick the numba pass, which every fresh
#: worker process compiles (tens of seconds); the reduction is the same whatever the path
DENSE = {"algorithm": "dense"}
#: above a worker process's own footprint (~455 MiB measured with numpy, scipy, scikit-learn, pandas,
#: numba and localkit's models loaded)
MEMORY_LIMIT = 600e6


@pytest.fixture(scope="module")
def client():
    # no pausing at 80% of the limit (480 MB, just above that footprint): a paused worker runs no
    # task and the test waits forever; beyond 95% a worker is still restarted, which a test sees
    with dask.config.set({"distributed.worker.memory.pause": False}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=MEMORY_LIMIT,
                         dashboard_address=":0") as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def wine():
    X, y = load_wine(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def close(a, b, rtol=RTOL):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=rtol, atol=0)


def chunked(x, rows):
    return da.from_array(np.asarray(x), chunks=(rows,) + x.shape[1:])


def test_import_localkit_does_not_import_dask():
    code = "import localkit, localkit.engine, localkit.models, sys; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("kernel, bandwidth", [("gaussian", 1.5), ("epanechnikov", 1.3), ("tricube", 1.4),
                                               ("uniform", 1.2), ("cosine", 1.3), ("laplacian", 2.0),
                                               ("cauchy", 1.0), ("softmax", 4.0), ("gaussian", "scott")])
def test_profiles_equal_in_memory(client, wine, kernel, bandwidth):
    X, y = wine
    Q = X[::3] * 1.3  # some queries leave every compact support: the empty policy is exercised too
    want = local_sums(Q, X, y, kernel, bandwidth, **DENSE)
    got = local_sums(chunked(Q, 17), chunked(X, 40), chunked(y, 25), kernel, bandwidth, **DENSE)
    assert isinstance(got.mean, da.Array)
    mean, log_sum, empty = dask.compute(got.mean, got.log_weight_sum, got.empty)
    close(mean, want.mean)
    np.testing.assert_array_equal(empty, want.empty)
    close(log_sum[~empty], want.log_weight_sum[~empty])
    assert np.all(np.isneginf(log_sum[empty]))
    if kernel in ("epanechnikov", "uniform"):
        assert empty.any()  # the nearest-sample fallback was compared


@pytest.mark.parametrize("kernel", ["uniform", "epanechnikov", "gaussian"])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_knn_kernel_and_leave_one_out_equal_in_memory(client, wine, kernel, exclude_self):
    X, y = wine
    onehot = np.eye(3)[y]
    Q = None if exclude_self else X[::6]
    want = local_mean(Q, X, onehot, kernel, n_neighbors=9, exclude_self=exclude_self)
    # unequal chunks, some smaller than k: the k nearest are merged across several chunks
    rows = 25 if exclude_self else 6
    got = local_mean(Q, chunked(X, rows), chunked(onehot, 50), kernel, n_neighbors=9, exclude_self=exclude_self)
    close(got.compute(), want)


@pytest.mark.parametrize("metric", [dict(metric="minkowski", p=3), dict(metric="cosine"), dict(metric="manhattan")])
def test_other_metrics_equal_in_memory(client, wine, metric):
    X, y = wine
    for kernel, kw in [("uniform", dict(n_neighbors=6)), ("gaussian", dict(bandwidth=0.8))]:
        want = LocalMeanRegressor(kernel, **kw, **metric).fit(X, y).predict(X[::4])
        got = LocalMeanRegressor(kernel, **kw, **metric).fit(chunked(X, 50), chunked(y * 1.0, 50)).predict(X[::4])
        close(got.compute(), want)
    with pytest.raises(ValueError, match="not available on dask arrays"):
        local_mean(chunked(X, 50), chunked(X, 50), y, metric="precomputed")


@pytest.mark.parametrize("kernel", ["gaussian", "epanechnikov"])
def test_fixed_bandwidth_leave_one_out_and_sample_weight(client, wine, kernel):
    X, y = wine
    w = np.random.default_rng(0).uniform(0, 3, len(X))
    w[:30] = 0  # a whole chunk without weight
    want = local_sums(None, X, y, kernel, 2.5, exclude_self=True, sample_weight=w)
    # queries chunked unlike the samples: re-chunked so that only diagonal pairs drop a weight
    got = local_sums(chunked(X, 45), chunked(X, 30), y, kernel, 2.5, exclude_self=True, sample_weight=chunked(w, 30))
    mean, log_sum = dask.compute(got.mean, got.log_weight_sum)
    close(mean, want.mean)
    close(log_sum[np.isfinite(log_sum)], want.log_weight_sum[np.isfinite(want.log_weight_sum)])


def test_weighted_bandwidth_rule_equals_in_memory(client, wine):
    X, y = wine
    w = np.random.default_rng(0).uniform(0, 3, len(X))
    w[:30] = 0
    want = local_sums(None, X, y, "gaussian", "scott", sample_weight=w)
    got = local_sums(chunked(X, 45), chunked(X, 30), y, "gaussian", "scott", sample_weight=chunked(w, 30))
    close(got.mean.compute(), want.mean)
    est = LocalMeanRegressor(bandwidth="silverman").fit(chunked(X, 30), chunked(y, 30), sample_weight=chunked(w, 30))
    close(est.bandwidth_, LocalMeanRegressor(bandwidth="silverman").fit(X, y, sample_weight=w).bandwidth_)


def test_empty_neighbourhood_policies(client, wine):
    X, y = wine
    Q = np.vstack([X[:5], X[:5] + 50.0])  # the last five are far from every sample
    got = local_sums(chunked(Q, 4), chunked(X, 40), y, "epanechnikov", 2.0, **DENSE)
    mean, empty = dask.compute(got.mean, got.empty)
    np.testing.assert_array_equal(empty, [False] * 5 + [True] * 5)
    close(mean, local_mean(Q, X, y, "epanechnikov", 2.0, **DENSE))
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_mean(chunked(Q, 4), chunked(X, 40), y, "epanechnikov", 2.0, empty="raise", **DENSE).compute()
    nan = local_mean(chunked(Q, 4), chunked(X, 40), y, "epanechnikov", 2.0, empty="nan", **DENSE).compute()
    assert np.isnan(nan[5:]).all() and np.isfinite(nan[:5]).all()


def test_kernel_density_equals_in_memory_and_scikit_learn(client, wine):
    X, _ = wine
    X = X[:, :3]
    Q = X[::4] + 0.1
    for kernel, sk in [("gaussian", "gaussian"), ("epanechnikov", "epanechnikov"), ("uniform", "tophat")]:
        got = kernel_density(chunked(Q, 13), chunked(X, 31), kernel, 1.2, **DENSE)
        assert isinstance(got, da.Array)
        got = got.compute()
        close(got, kernel_density(Q, X, kernel, 1.2, **DENSE))
        close(got, np.exp(KernelDensity(kernel=sk, bandwidth=1.2).fit(X).score_samples(Q)))
    close(kernel_density(Q, chunked(X, 31), "gaussian", "silverman").compute(), kernel_density(Q, X, "gaussian", "silverman"))


def test_float32_is_kept(client, wine):
    X, y = wine
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    got = local_mean(chunked(X32, 50), chunked(X32, 50), y32, "gaussian", 2.0)
    assert got.dtype == np.float32
    close(got.compute(), local_mean(X32, X32, y32, "gaussian", 2.0), rtol=1e-5)


def test_regressor_fits_without_gathering_the_samples(client):
    X, y = load_diabetes(return_X_y=True)
    Xd, yd = chunked(X, 100), chunked(y, 100)
    for params in [dict(bandwidth=0.05), dict(kernel="uniform", n_neighbors=7),
                   dict(kernel="epanechnikov", bandwidth="scott", **DENSE)]:
        want = LocalMeanRegressor(**params).fit(X, y)
        reg = LocalMeanRegressor(**params).fit(Xd, yd)
        assert isinstance(reg.X_fit_, da.Array) and isinstance(reg.y_fit_, da.Array)
        np.testing.assert_allclose(reg.bandwidth_, want.bandwidth_, rtol=1e-12)
        pred = reg.predict(Xd[::2])
        assert isinstance(pred, da.Array)
        close(pred.compute(), want.predict(X[::2]))
        close(reg.predict(X[:20]).compute(), want.predict(X[:20]))  # NumPy queries, dask samples
        close(reg.loo_predict().compute(), want.loo_predict())
    # fitted in memory, dask queries: predicted chunk-wise on the cluster
    close(want.predict(Xd).compute(), want.predict(X))


def test_classifier_on_dask(client, wine):
    X, y = wine
    names = np.array(["barolo", "grignolino", "barbera"])[y]
    for params in [dict(bandwidth=1.5), dict(kernel="uniform", n_neighbors=5)]:
        want = LocalMeanClassifier(**params).fit(X, names)
        clf = LocalMeanClassifier(**params).fit(chunked(X, 40), chunked(names, 40))
        np.testing.assert_array_equal(clf.classes_, want.classes_)
        assert isinstance(clf.onehot_, da.Array)
        close(clf.predict_proba(chunked(X, 33)).compute(), want.predict_proba(X))
        np.testing.assert_array_equal(clf.predict(chunked(X, 33)).compute(), want.predict(X))


@pytest.mark.parametrize("bin_seeding", [True, False])
def test_mean_shift_on_dask(client, bin_seeding):
    """Seeds in memory, one distributed pass per iteration: the same centres, partition and
    iteration count as in memory (Gaussian kernel: no compiled pass to build in each worker)."""
    X, _ = make_blobs(n_samples=300 if not bin_seeding else 900, centers=[[1, 1], [-1, -1], [1, -1]],
                      cluster_std=0.4, random_state=0)
    want = MeanShift(kernel="gaussian", bandwidth=0.7, bin_seeding=bin_seeding).fit(X)
    got = MeanShift(kernel="gaussian", bandwidth=0.7, bin_seeding=bin_seeding).fit(chunked(X, 250))
    assert isinstance(got.labels_, da.Array)
    np.testing.assert_allclose(got.cluster_centers_, want.cluster_centers_, atol=1e-6, rtol=0)
    np.testing.assert_array_equal(got.labels_.compute(), want.labels_)
    assert got.n_iter_ == want.n_iter_
    np.testing.assert_array_equal(want.predict(chunked(X, 100)).compute(), want.predict(X))
    with pytest.raises(ValueError, match="give bandwidth"):
        MeanShift().fit(chunked(X, 250))


def _stopped_at_5(est, *data):
    """``est.fit(*data)`` stopped at ``max_iter=5`` (quick: the test compares the fitted model's
    predictions in memory and on dask), with the warning that says so."""
    with pytest.warns(LocalkitConvergenceWarning, match="did not converge within max_iter=5"):
        return est.fit(*data)


def _fitted(name):
    """Small fitted estimators of every kind that predicts or transforms queries, and their data."""
    X, y = load_diabetes(return_X_y=True)
    iris_X, iris_y = load_iris(return_X_y=True)
    digits = load_digits().data[:300] / 16
    partial = np.where(np.arange(150) % 5 == 0, iris_y, -1)
    return {
        "polynomial": lambda: (LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.1).fit(X[:, :3], y), X[:, :3]),
        "localized": lambda: (Localized(LinearRegression(), bandwidth=0.1).fit(X[:, :3], y), X[:42, :3]),
        "denoiser": lambda: (LocalMeanDenoiser(noise_std=0.4).fit(digits), digits),
        "lazy_autoencoder": lambda: (_stopped_at_5(LazyAutoencoder(n_components=2, max_iter=5), digits[:150]), digits),
        "lle": lambda: (LocallyLinearEmbedding(n_neighbors=12).fit(digits[:200]), digits),
        "local_pca": lambda: (LocalPCA(n_components=1, bandwidth=1.0).fit(iris_X), iris_X),
        "metric_learning": lambda: (_stopped_at_5(MetricLearningKernelRegressor(max_iter=5), X[:200], y[:200]), X),
        "tsk_regressor": lambda: (TSKFuzzyRegressor(n_rules=3, random_state=0).fit(X, y), X),
        "tsk_classifier": lambda: (TSKFuzzyClassifier(n_rules=3, random_state=0).fit(iris_X, iris_y), iris_X),
        "relaxation": lambda: (RelaxationLabeling(bandwidth=0.5).fit(iris_X, partial), iris_X),
        "hopfield": lambda: (HopfieldNetwork(beta=0.1).fit(np.where(digits[:50] > 0.5, 1.0, -1.0)),
                             np.where(digits > 0.5, 1.0, -1.0)),
    }[name]()


@pytest.mark.parametrize("name", ["polynomial", "localized", "denoiser", "lazy_autoencoder", "lle", "local_pca",
                                  "metric_learning", "tsk_regressor", "tsk_classifier", "relaxation", "hopfield"])
def test_estimators_fitted_in_memory_map_dask_query_chunks(client, name):
    est, Q = _fitted(name)
    for method in ("predict", "predict_proba", "transform"):
        if hasattr(est, method):
            got = getattr(est, method)(chunked(Q, 70))
            assert isinstance(got, da.Array), method
            np.testing.assert_allclose(got.compute(), getattr(est, method)(Q), rtol=1e-10, atol=1e-12)


def test_bad_input_is_refused_by_name(client, wine):
    X, y = wine
    Xd = chunked(X, 40)
    with pytest.raises(ValueError, match="queries has 2 features"):
        local_mean(Xd[:, :2], Xd, y)
    with pytest.raises(ValueError, match="values has 10 rows"):
        local_mean(Xd, Xd, y[:10])
    with pytest.raises(ValueError, match="sample_weight has 3 rows, but 178"):
        local_mean(Xd, Xd, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="samples is empty"):
        local_mean(Xd, Xd[:0], y[:0])
    with pytest.raises(ValueError, match="queries must be the samples"):
        local_mean(Xd[:10], Xd, y, exclude_self=True)
    with pytest.raises(ValueError, match="The 'empty' parameter of local_mean must be a str among"):
        local_mean(Xd, Xd, y, empty="zero")
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        local_mean(Xd[Xd[:, 0] > 0], Xd, y)
    with pytest.raises(ValueError, match="n_neighbors must be <= n_samples"):
        local_mean(Xd, Xd, y, n_neighbors=1000)
    with pytest.raises(ValueError, match="bandwidth must be finite and > 0"):
        local_mean(Xd, Xd, y, bandwidth=-1.0)
    bad = X.copy()
    bad[100, 3] = np.nan  # found when the chunk holding it is computed
    with pytest.raises(ValueError, match="samples contains NaN or infinity"):
        local_mean(Xd, chunked(bad, 40), y).compute()
    with pytest.raises(ValueError, match="sample_weight must be >= 0"):
        local_mean(Xd, Xd, y, sample_weight=-chunked(np.ones(len(X)), 40)).compute()
    with pytest.raises(ValueError, match="bandwidth='cv' is not available"):
        LocalMeanRegressor(bandwidth="cv").fit(Xd, chunked(y * 1.0, 40))


def test_native_threads_follow_threads_per_worker(client):
    def inside_a_task():
        import numba
        from threadpoolctl import threadpool_info

        from localkit.engine.backends.dask import _native_threads

        with _native_threads(1):
            return numba.get_num_threads(), {lib["num_threads"] for lib in threadpool_info()}

    for numba_threads, native in client.run(inside_a_task).values():
        assert numba_threads == 1 and native <= {1}


def test_streams_a_sample_set_larger_than_a_worker(client):
    """640 MB of samples, generated lazily chunk by chunk on the workers, each of which may hold
    600 MB: on a regular grid of spacing 1/n the Gaussian sums are exact to round-off (the
    trapezoid rule), so the density of the uniform grid is 1 and the local mean of x^2 is
    q^2 + h^2."""
    n, h = 80_000_000, 0.01
    grid = (da.arange(n, chunks=1_000_000, dtype=np.float64) / n)[:, None]
    assert grid.nbytes > MEMORY_LIMIT
    q = np.array([[0.3], [0.45], [0.5], [0.7]])
    out = local_sums(q, grid, grid[:, 0] ** 2, "gaussian", h)
    mean, log_sum = dask.compute(out.mean, out.log_weight_sum)
    close(mean, q[:, 0] ** 2 + h ** 2, rtol=1e-9)
    close(np.exp(log_sum) / (n * h * np.sqrt(2 * np.pi)), np.ones(4), rtol=1e-9)
    assert len(client.scheduler_info()["workers"]) == 2  # no worker was lost on the way


def test_kernel_density_keeps_float32_on_dask():
    X = np.random.default_rng(0).normal(size=(100, 2)).astype(np.float32)
    lazy = kernel_density(da.from_array(X, chunks=30), da.from_array(X, chunks=30), "gaussian", 0.5)
    got = lazy.compute()
    assert lazy.dtype == got.dtype == np.float32
    np.testing.assert_allclose(got, kernel_density(X.astype(float), X.astype(float), "gaussian", 0.5), rtol=1e-5)


def test_product_and_sum_kernels_on_a_cluster(client):
    """The kernels fixed on all the samples (rules, categorical levels) travel to the workers."""
    rng = np.random.default_rng(7)
    X = np.c_[rng.normal(size=200), np.sort(rng.integers(0, 4, 200))]  # the first chunks miss levels
    y, Q = np.sin(3 * X[:, 0]) + X[:, 1], np.c_[rng.normal(size=30), rng.integers(0, 4, 30)]
    K = Kernel("gaussian", bandwidth="scott", features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    for kernel in (K, 0.3 * K + 0.7 * Kernel("laplacian", bandwidth=2.0)):
        want = local_sums(Q, X, y, kernel)
        got = local_sums(chunked(Q, 10), chunked(X, 40), chunked(y, 40), kernel, **DENSE)
        mean, log_sum = dask.compute(got.mean, got.log_weight_sum)
        np.testing.assert_allclose(mean, want.mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(log_sum, want.log_weight_sum, rtol=1e-12, atol=0)
