"""The streaming local-mean engine: definition, paths, invariances, numerics, memory."""
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_diabetes

from localkit import Kernel, local_mean, local_sums
from localkit.exceptions import EmptyNeighbourhoodWarning
from localkit.kernels import PROFILES


def brute_local_mean(Q, X, V, name="gaussian", h=1.0, exclude_self=False):
    K = Kernel(name, bandwidth=h)(Q, X)
    if exclude_self:
        np.fill_diagonal(K, 0.0)
    return (K @ V) / K.sum(1)[:, None] if V.ndim == 2 else (K @ V) / K.sum(1)


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X[:, :4] / X[:, :4].std(0), y


@pytest.mark.parametrize("name", sorted(PROFILES) + ["softmax"])
def test_local_mean_equals_its_definition(diabetes, name):
    X, y = diabetes
    h = 1.5 if name != "softmax" else 4.0
    got = local_mean(X[:60], X, y, kernel=name, bandwidth=h, algorithm="dense", block_size=(17, 50))
    np.testing.assert_allclose(got, brute_local_mean(X[:60], X, y, name, h), rtol=1e-12)


@pytest.mark.parametrize("name", [n for n, p in PROFILES.items() if p.compact])
def test_neighbour_path_equals_dense_path(diabetes, name):
    X, y = diabetes
    V = np.c_[y, X[:, 0]]
    for loo in [False, True]:
        dense = local_mean(None, X, V, kernel=name, bandwidth=2.0, exclude_self=loo, algorithm="dense")
        nbr = local_mean(None, X, V, kernel=name, bandwidth=2.0, exclude_self=loo, algorithm="neighbors")
        np.testing.assert_allclose(nbr, dense, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(dense, brute_local_mean(X, X, V, name, 2.0, loo), rtol=1e-12, atol=1e-13)
    K = Kernel(name, n_neighbors=9)(X[:80], X)
    if name not in ("epanechnikov", "biweight", "triweight", "tricube", "triangular", "cosine"):
        assert np.all(K.sum(1) > 0)
    ok = K.sum(1) > 0  # profiles that vanish at u = 1 give the 9th neighbour no weight
    np.testing.assert_allclose(local_mean(X[:80], X, V, kernel=name, n_neighbors=9)[ok],
                               (K @ V / K.sum(1)[:, None])[ok], rtol=1e-12)


def test_auto_takes_the_neighbour_path_when_few_samples_carry_weight(rng, monkeypatch):
    from localkit.engine.passes import neighbors

    X = rng.uniform(size=(5000, 2))
    y = np.sin(6 * X[:, 0])
    calls = []
    monkeypatch.setattr(neighbors, "radius_block_sums",
                        lambda *a, f=neighbors.radius_block_sums, **k: calls.append(1) or f(*a, **k))
    # leave-one-out is beyond the compiled pass, so "auto" chooses between radius and dense
    auto = local_mean(None, X, y, kernel="epanechnikov", bandwidth=0.02, exclude_self=True)
    assert calls, "the radius path was not chosen"
    np.testing.assert_allclose(auto, local_mean(None, X, y, kernel="epanechnikov", bandwidth=0.02,
                                                exclude_self=True, algorithm="dense"),
                               rtol=1e-12, atol=1e-13)  # round-off relative to |y| <= 1 where the mean crosses 0


def test_knn_gaussian_uses_kth_neighbour_distance(diabetes):
    X, y = diabetes
    D = np.sqrt(((X[:50, None] - X[None]) ** 2).sum(-1))
    h = np.sort(D, axis=1)[:, 6]
    K = np.exp(-0.5 * (D / h[:, None]) ** 2)
    np.testing.assert_allclose(local_mean(X[:50], X, y, n_neighbors=7), K @ y / K.sum(1), rtol=1e-10)


def test_exclude_self_is_leave_one_out(diabetes):
    X, y = diabetes
    X, y = X[:120], y[:120]
    got = local_mean(None, X, y, bandwidth=0.8, exclude_self=True, block_size=(13, 29))
    expected = [local_mean(X[[i]], np.delete(X, i, 0), np.delete(y, i), bandwidth=0.8)[0] for i in range(len(X))]
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    knn = local_mean(None, X, y, kernel="uniform", n_neighbors=5, exclude_self=True)
    expected = [np.delete(y, i)[np.argsort(np.delete(((X - X[i]) ** 2).sum(1), i))[:5]].mean() for i in range(len(X))]
    np.testing.assert_allclose(knn, expected, rtol=1e-12)


def test_tiny_bandwidth_gives_nearest_value_not_nan(diabetes):
    X, y = diabetes
    Q = X[:40] + 1e-3
    nearest = y[np.argmin(((Q[:, None] - X[None]) ** 2).sum(-1), axis=1)]
    # (the Cauchy profile is excluded: its polynomial tail tends to inverse-distance weighting)
    for name in ["gaussian", "laplacian"]:
        got = local_mean(Q, X, y, kernel=name, bandwidth=1e-9)
        np.testing.assert_allclose(got, nearest, rtol=1e-12)
    out = local_sums(Q, X, y, bandwidth=1e-9)
    assert np.all(np.isfinite(out.log_weight_sum)) and np.all(out.log_weight_sum < -1e6)


def test_empty_neighbourhood_policies(diabetes):
    X, y = diabetes
    far = X[:5] + 100.0
    nearest = y[np.argmin(((far[:, None] - X[None]) ** 2).sum(-1), axis=1)]
    out = local_sums(far, X, y, kernel="epanechnikov", bandwidth=0.5)
    np.testing.assert_array_equal(out.mean, nearest)
    assert out.empty.all() and np.all(out.weight_sum == 0)
    with pytest.warns(RuntimeWarning, match="empty neighbourhood"):
        assert np.isnan(local_mean(far, X, y, kernel="epanechnikov", bandwidth=0.5, empty="nan")).all()
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_mean(far, X, y, kernel="epanechnikov", bandwidth=0.5, empty="raise")


def test_values_may_be_2d_and_weight_sums_returned(diabetes):
    X, y = diabetes
    V = np.c_[y, -y, X[:, 1]]
    m, w = local_mean(X[:20], X, V, bandwidth=1.0, return_weight_sum=True)
    assert m.shape == (20, 3)
    np.testing.assert_allclose(m[:, 0], -m[:, 1])
    np.testing.assert_allclose(w, Kernel("gaussian")(X[:20], X).sum(1), rtol=1e-12)


def test_float32_is_kept(diabetes):
    X, y = diabetes
    X32, y32 = X.astype(np.float32), y.astype(np.float32)
    got = local_mean(X32[:30], X32, y32, bandwidth=1.0)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, local_mean(X[:30], X, y, bandwidth=1.0), rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), shift=st.floats(-50, 50), h=st.floats(0.05, 5.0),
       bq=st.integers(1, 40), bs=st.integers(1, 40),
       name=st.sampled_from(["gaussian", "epanechnikov", "laplacian", "tricube"]))
def test_invariances(seed, shift, h, bq, bs, name):
    """Permuting samples, translating all inputs and changing block sizes change nothing."""
    rng = np.random.default_rng(seed)
    X, Q = rng.normal(size=(60, 3)), rng.normal(size=(15, 3))
    V = rng.normal(size=(60, 2))
    base = local_mean(Q, X, V, kernel=name, bandwidth=h)
    perm = rng.permutation(60)
    np.testing.assert_allclose(local_mean(Q, X[perm], V[perm], kernel=name, bandwidth=h), base,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(local_mean(Q + shift, X + shift, V, kernel=name, bandwidth=h), base,
                               rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(local_mean(Q, X, V, kernel=name, bandwidth=h, block_size=(bq, bs)), base,
                               rtol=1e-9, atol=1e-12)


def test_results_do_not_depend_on_threads(diabetes):
    X, y = diabetes
    one = local_mean(None, X, y, bandwidth=0.7, n_jobs=1, block_size=(31, 64))
    two = local_mean(None, X, y, bandwidth=0.7, n_jobs=2, block_size=(31, 64))
    np.testing.assert_array_equal(one, two)


def test_memory_does_not_grow_with_queries_times_samples():
    """60,000 x 60,000 in d=3: 3.6e9 pairs, which as a dense matrix would need 29 GB."""
    rng = np.random.default_rng(1)
    n = 60_000
    X = rng.normal(size=(n, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=n)
    tracemalloc.start()
    m = local_mean(None, X, y, bandwidth=0.3)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 300 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert np.all(np.isfinite(m))
    np.testing.assert_allclose(m[:50], brute_local_mean(X[:50], X, y, h=0.3), rtol=1e-10)


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(queries=[[np.nan, 0.0]]), ValueError, "queries contains NaN"),
    (dict(samples=[[np.inf, 0.0], [0.0, 1.0]]), ValueError, "samples contains NaN or infinity"),
    (dict(values=[np.nan, 1.0]), ValueError, "values contains NaN"),
    (dict(queries=[[0.0, 0.0, 0.0]]), ValueError, "queries has 3 features, but 2"),
    (dict(values=[1.0, 2.0, 3.0]), ValueError, "values has 3 rows but samples has 2"),
    (dict(values=None), ValueError, "values must be an array"),
    (dict(samples=np.zeros((0, 2)), values=np.zeros(0)), ValueError, "samples is empty"),
    (dict(queries=np.zeros((0, 2))), ValueError, "queries is empty"),
    (dict(samples=np.zeros((2, 2, 2))), ValueError, "samples must be 1-D or 2-D"),
    (dict(bandwidth=-1.0), ValueError, "bandwidth must be finite and > 0"),
    (dict(bandwidth=np.nan), ValueError, "bandwidth"),
    (dict(kernel="boxcar"), ValueError, "kernel must be one of"),
    (dict(n_neighbors=0), ValueError, "n_neighbors"),
    (dict(n_neighbors=3), ValueError, "n_neighbors must be <= n_samples"),
    (dict(empty="zero"), ValueError, "The 'empty' parameter of local_mean must be a str among"),
    (dict(algorithm="tree"), ValueError, "The 'algorithm' parameter of local_mean must be a str among"),
    (dict(algorithm="neighbors"), ValueError, "needs a compact profile"),
    (dict(exclude_self=True), ValueError, "exclude_self=True"),
    (dict(exclude_self="yes"), TypeError, "exclude_self must be True or False"),
    (dict(block_size=0), ValueError, "The 'block_size' parameter of local_mean"),
    (dict(memory_budget=-5), ValueError, "The 'memory_budget' parameter of local_mean"),
    (dict(n_jobs=0), ValueError, "The 'n_jobs' parameter of local_mean"),
    (dict(sample_scale=[1.0]), ValueError, "sample_scale must have shape"),
    (dict(queries=[["a", "b"]]), ValueError, "queries must hold numbers"),
])
def test_bad_input(kwargs, err, match):
    args = dict(queries=[[0.0, 0.0]], samples=[[0.0, 1.0], [1.0, 0.0]], values=[1.0, 2.0])
    args.update(kwargs)
    q, s, v = args.pop("queries"), args.pop("samples"), args.pop("values")
    with pytest.raises(err, match=match):
        local_mean(q, s, v, **args)


def test_knn_uniform_is_exact_whatever_the_algorithm(diabetes):
    from sklearn.neighbors import KNeighborsRegressor

    X, y = diabetes
    ref = KNeighborsRegressor(7).fit(X[100:], y[100:]).predict(X[:100])
    for algorithm in ["auto", "dense", "neighbors"]:
        got = local_mean(X[:100], X[100:], y[100:], kernel="uniform", n_neighbors=7, algorithm=algorithm)
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9)


def test_knn_gaussian_with_duplicates_counts_only_the_coinciding_samples():
    """k duplicates at the query make h(x*) = 0: only distance-0 samples carry weight."""
    X = np.array([[0.0, 0.0]] * 4 + [[1.0, 0.0], [0.0, 2.0]])
    v = np.array([1.0, 2.0, 3.0, 4.0, 100.0, 200.0])
    got = local_mean([[0.0, 0.0]], X, v, kernel="gaussian", n_neighbors=3)
    np.testing.assert_allclose(got, [2.5])


@pytest.mark.parametrize("name, algorithm", [("gaussian", "auto"), ("epanechnikov", "dense"),
                                             ("epanechnikov", "neighbors"), ("tricube", "compiled"),
                                             ("uniform", "auto")])
def test_integer_sample_weights_equal_repeated_samples(diabetes, name, algorithm):
    X, y = diabetes
    w = np.random.default_rng(0).integers(0, 4, len(X))  # zeros drop samples
    with warnings.catch_warnings(record=True) as caught:  # compact kernels leave some queries empty
        warnings.simplefilter("always", EmptyNeighbourhoodWarning)
        m, s = local_mean(X[:60], X, y, name, 0.12, sample_weight=w, return_weight_sum=True, algorithm=algorithm,
                          empty="nan")
        m_rep, s_rep = local_mean(X[:60], np.repeat(X, w, axis=0), np.repeat(y, w), name, 0.12,
                                  return_weight_sum=True, algorithm=algorithm, empty="nan")
    n_empty = int(np.sum(np.isnan(m)))
    assert [r.message.n_empty for r in caught] == ([n_empty] * 2 if n_empty else [])
    assert np.any(s > 0)
    np.testing.assert_allclose(m, m_rep, rtol=1e-12, atol=1e-10, equal_nan=True)
    np.testing.assert_allclose(s, s_rep, rtol=1e-12)


def test_sample_weight_scale_does_not_matter_and_empty_falls_back_to_a_weighted_sample(diabetes):
    X, y = diabetes
    w = np.ones(len(X))
    w[0] = 0.0
    big = local_mean(X[:5], X, y, "uniform", 1e-9, sample_weight=w * 1e300)
    # query 0 sits on sample 0, whose weight is 0: the nearest sample that carries weight answers
    nearest_other = np.argsort(((X - X[0]) ** 2).sum(axis=1))[1]
    assert big[0] == y[nearest_other]
    np.testing.assert_array_equal(big[1:], y[1:5])


@pytest.mark.parametrize("w, match", [(np.ones(3), "shape"), (-np.ones(442), ">= 0"),
                                      (np.zeros(442), "zero everywhere"), (np.full(442, np.nan), "NaN or infinity")])
def test_bad_sample_weight(diabetes, w, match):
    X, y = diabetes
    with pytest.raises(ValueError, match=f"sample_weight.*{match}|{match}.*sample_weight"):
        local_mean(X[:3], X, y, sample_weight=w)


def test_leave_one_out_of_one_sample_is_an_error_not_a_leak():
    with pytest.raises(ValueError, match="exclude_self.*at least 2 samples"):
        local_mean(None, [[0.0]], [1.0], exclude_self=True)


def test_an_exception_in_a_worker_thread_reaches_the_caller(monkeypatch):
    """Query blocks run on threads; a failure in one of them is raised in the caller, no hang."""
    from localkit.engine.query_blocks import QueryBlock

    X = np.random.default_rng(0).normal(size=(3000, 2))
    calls = []

    def failing(self, cols, fold_offset=False):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("boom in a worker")
        return original(self, cols, fold_offset)

    original = QueryBlock.log_weights
    monkeypatch.setattr(QueryBlock, "log_weights", failing)
    with pytest.raises(RuntimeError, match="boom in a worker"):
        local_mean(X, X, X[:, 0], bandwidth=0.5, n_jobs=2, block_size=(100, 500))
