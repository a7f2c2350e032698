"""A kNN bandwidth whose k-th neighbour lies at the query's own point (``d_k = 0``: k or more
samples coincide with it). For a profile that vanishes at the edge of its support (every compact
one but the uniform) ``k(d / d_k)`` is then the limit ``h -> 0``: every sample at the point weighs
``k(0)``, however many there are, and none other (R's lowess takes all of them); the k that a
search returns would be an arbitrary pick, dependent on the sample order and the path. The
uniform profile keeps exactly k samples, as scikit-learn's KNeighborsRegressor."""
import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.neighbors import KNeighborsRegressor

from localkit import LocalMeanRegressor, LocalPolynomialRegressor
from localkit.engine import local_sums
from localkit.exceptions import NearSingularDesignWarning


@pytest.fixture(scope="module")
def lattice():
    """Six samples at the origin, four around it, and 30 on a small integer grid."""
    rng = np.random.default_rng(0)
    X = np.r_[np.zeros((6, 2)), [[1, 0], [0, 1], [-1, 0], [0, -1]], rng.integers(-2, 3, (30, 2))].astype(float)
    y = rng.normal(size=len(X))
    w = rng.uniform(0.5, 2.0, len(X))
    return X, y, w


def _at_point_mean(X, y, w, q):
    """The weighted mean of the samples at ``q``."""
    there = np.all(X == q, axis=1)
    return np.sum(w[there] * y[there]) / np.sum(w[there])


@pytest.mark.parametrize("kernel", ["epanechnikov", "tricube", "triangular", "cosine"])
@pytest.mark.parametrize("algorithm", ["auto", "dense", "neighbors"])
def test_every_coincident_sample_weighs_in_memory(lattice, kernel, algorithm):
    X, y, w = lattice
    origin = np.zeros((1, 2))
    for k in (2, 3, 6):  # fewer than, and as many as, the samples at the origin
        out = local_sums(origin, X, y, kernel, n_neighbors=k, sample_weight=w, algorithm=algorithm)
        np.testing.assert_allclose(out.mean, [_at_point_mean(X, y, w, origin)], rtol=1e-14)
        at_origin = np.flatnonzero(np.all(X == 0, axis=1))
        assert len(at_origin) > 6  # the grid adds some
        np.testing.assert_allclose(np.exp(out.log_weight_sum), [w[at_origin].sum()], rtol=1e-14)
        loo = local_sums(None, X, y, kernel, n_neighbors=k, sample_weight=w, exclude_self=True, algorithm=algorithm)
        # leave-one-out leaves out the copies of a row (x and y): the samples at the origin have
        # distinct y (lattice data), so each leaves out itself alone (issue 40), and the k or more
        # others at the point are its neighbourhood: their weighted mean
        for i in at_origin:
            others = at_origin[at_origin != i]
            np.testing.assert_allclose(loo.mean[i], np.sum(w[others] * y[others]) / np.sum(w[others]), rtol=1e-13)


def test_the_fit_does_not_depend_on_the_sample_order(lattice):
    X, y, w = lattice
    perm = np.random.default_rng(1).permutation(len(X))
    for k in (3, 6):
        fit = LocalMeanRegressor(kernel="tricube", n_neighbors=k).fit(X, y, sample_weight=w)
        again = LocalMeanRegressor(kernel="tricube", n_neighbors=k).fit(X[perm], y[perm], sample_weight=w[perm])
        np.testing.assert_allclose(fit.predict(X[:10]), again.predict(X[:10]), rtol=1e-14)


def test_uniform_keeps_exactly_k_as_scikit_learn(lattice):
    X, y, _ = lattice
    got = LocalMeanRegressor(kernel="uniform", n_neighbors=3).fit(X, y).predict(np.zeros((1, 2)))
    ref = KNeighborsRegressor(n_neighbors=3).fit(X, y).predict(np.zeros((1, 2)))
    np.testing.assert_allclose(got, ref, rtol=1e-14)
    assert got[0] != pytest.approx(y[np.all(X == 0, axis=1)].mean())


def test_array_api_tensors_take_every_coincident_sample(lattice, monkeypatch):
    torch = pytest.importorskip("torch")
    import sklearn

    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    X, y, w = lattice
    ref = local_sums(X, X, y, "epanechnikov", n_neighbors=3, sample_weight=w)
    with sklearn.config_context(array_api_dispatch=True):
        got = local_sums(torch.tensor(X), torch.tensor(X), torch.tensor(y), "epanechnikov", n_neighbors=3,
                         sample_weight=torch.tensor(w))
        # leave-one-out leaves out every row at the query's point: not on tensors, so refused
        with pytest.raises(ValueError, match="leaves out every row at the query's point, which the array-API"):
            local_sums(None, torch.tensor(X), torch.tensor(y), "epanechnikov", n_neighbors=3, exclude_self=True)
    np.testing.assert_array_equal(got.empty.numpy(), ref.empty)
    np.testing.assert_allclose(got.mean.numpy(), ref.mean, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got.log_weight_sum.numpy(), ref.log_weight_sum, rtol=1e-13)


def test_dask_takes_every_coincident_sample_across_chunks(lattice):
    da = pytest.importorskip("dask.array")
    X, y, w = lattice
    perm = np.random.default_rng(2).permutation(len(X))  # the origin's samples spread over the chunks
    X, y, w = X[perm], y[perm], w[perm]
    ref = local_sums(X, X, y, "tricube", n_neighbors=3, sample_weight=w)
    chunks = lambda a: da.from_array(a, chunks=7)  # noqa: E731
    got = local_sums(chunks(X), chunks(X), chunks(y), "tricube", n_neighbors=3, sample_weight=chunks(w))
    mean, log_sum, empty = (np.asarray(a.compute()) for a in (got.mean, got.log_weight_sum, got.empty))
    np.testing.assert_array_equal(empty, ref.empty)
    np.testing.assert_allclose(mean, ref.mean, rtol=1e-13)
    np.testing.assert_allclose(log_sum, ref.log_weight_sum, rtol=1e-13)
    # leave-one-out leaves out every row at the query's point: not across chunks, so refused
    loo = local_sums(chunks(X), chunks(X), chunks(y), "tricube", n_neighbors=3, exclude_self=True)
    with pytest.raises(ValueError, match="leaves out every row at the query's point, which the dask path"):
        loo.mean.compute()


def test_dask_compact_knn_applies_the_empty_policy():
    da = pytest.importorskip("dask.array")
    X = np.array([[0.0], [1.0], [-1.0], [5.0]])  # the query 0 leaves itself out: two neighbours at distance 1
    y = np.array([0.0, 1.0, 3.0, 7.0])
    got = local_sums(da.from_array(X, chunks=2), da.from_array(X, chunks=2), da.from_array(y, chunks=2),
                     "epanechnikov", n_neighbors=2, exclude_self=True)
    assert bool(got.empty[0].compute()) and got.mean[0].compute() in (1.0, 3.0)  # was NaN, silently
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_sums(da.from_array(X, chunks=2), da.from_array(X, chunks=2), da.from_array(y, chunks=2),
                   "epanechnikov", n_neighbors=2, exclude_self=True, empty="raise").mean.compute()


@pytest.mark.parametrize("kw", [dict(frac=0.04), dict(frac=0.1, degree=2), dict(n_neighbors=5, robust_iters=2)])
def test_loess_on_tied_x_is_the_mean_of_the_ties_and_order_free(kw):
    x, y = load_iris(return_X_y=True)  # sepal length: 35 distinct values among 150
    x, t = x[:, :1], x[:, 2]
    perm = np.random.default_rng(3).permutation(len(x))
    with pytest.warns(NearSingularDesignWarning):  # windows of one distinct x: the local mean, as intended
        fit = LocalPolynomialRegressor(**kw).fit(x, t).predict(x)
    with pytest.warns(NearSingularDesignWarning):
        again = LocalPolynomialRegressor(**kw).fit(x[perm], t[perm]).predict(x)
    np.testing.assert_allclose(fit, again, rtol=1e-12, atol=1e-12)


@pytest.mark.filterwarnings("ignore:.*near-singular")
@pytest.mark.parametrize("algorithm, metric", [("auto", "euclidean"), ("auto", "manhattan"),
                                               ("dense", "euclidean")])
def test_local_polynomial_at_a_point_of_many_samples(lattice, algorithm, metric):
    X, y, w = lattice
    model = LocalPolynomialRegressor(n_neighbors=3, algorithm=algorithm, metric=metric).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(model.predict(np.zeros((1, 2))), [_at_point_mean(X, y, w, np.zeros(2))], rtol=1e-13)
    x1 = np.array([0.0, 1, 1, 1, 1, 1, 2])[:, None]
    y1 = np.arange(7.0)
    for order in ([0, 1, 2, 3, 4, 5, 6], [0, 5, 4, 3, 2, 1, 6]):  # R's lowess: 3, the mean of the ties
        got = LocalPolynomialRegressor(frac=3 / 7, algorithm=algorithm, metric=metric).fit(x1[order], y1[order])
        np.testing.assert_allclose(got.predict([[1.0]]), [3.0], rtol=1e-14)
