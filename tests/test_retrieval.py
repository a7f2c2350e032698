"""Retrieval at scale (issue 37): the exact scan of many features equals scikit-learn's brute-force
neighbours bit for bit in indices, the approximate inverted lists report their recall within their
stated error, the truncated pass's omitted-weight bound holds, indexes survive pickles and clones."""
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from sklearn.base import clone
from sklearn.neighbors import KNeighborsClassifier, NearestNeighbors

from localkit import Kernel, LocalMeanClassifier, LocalMeanRegressor
from localkit.engine import BoundKernel, EngineOptions, planner, retrieval
from localkit.engine.passes import neighbors

faiss = retrieval.faiss_module()
needs_faiss = pytest.mark.skipif(faiss is None, reason="faiss is not installed (the retrieval extra)")


def clustered(n, d, n_queries=0, seed=0, centres=20, spread=3.0):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((centres, d)) * spread
    X = C[rng.integers(0, centres, n)] + rng.standard_normal((n, d))
    Q = C[rng.integers(0, centres, n_queries)] + rng.standard_normal((n_queries, d))
    return X, Q


def flat(X, use_faiss):
    return retrieval.FlatIndex(lambda rows: np.asarray(X[rows], dtype=np.float64), len(X), X.shape[1],
                               faiss if use_faiss else None)


SCANS = [pytest.param(False, id="own-scan"), pytest.param(True, id="faiss-scan", marks=needs_faiss)]


@pytest.mark.parametrize("use_faiss", SCANS)
@pytest.mark.parametrize("k", [1, 5, 12])
def test_flat_index_equals_scikit_learn_brute_force(use_faiss, k):
    X, Q = clustered(3000, 24, 400)
    dist, idx = flat(X, use_faiss).kneighbors(Q, k)
    ref_d, ref_i = NearestNeighbors(algorithm="brute").fit(X).kneighbors(Q, k)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_allclose(dist, ref_d, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("use_faiss", SCANS)
def test_flat_index_ties_are_scikit_learns(use_faiss):
    """Integer lattice points: many exact ties, which scikit-learn orders by its own search; the
    scan hands every query with a near tie to it, so the indices are its own."""
    rng = np.random.default_rng(1)
    X = rng.integers(0, 3, size=(2000, 20)).astype(np.float64)
    Q = rng.integers(0, 3, size=(150, 20)).astype(np.float64)
    index = flat(X, use_faiss)
    _, idx = index.kneighbors(Q, 7)
    np.testing.assert_array_equal(idx, NearestNeighbors(algorithm="brute").fit(X).kneighbors(Q, 7)[1])
    assert index.uncertified_ > 0  # the ties went to scikit-learn


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_estimator_on_the_scan_equals_scikit_learn(dtype):
    """A kNN classifier of 20,000 samples in 16 features takes the scan; its neighbours and
    probabilities are scikit-learn's brute force's (float32 input included)."""
    X, Q = clustered(retrieval.SCAN_MIN_SAMPLES, retrieval.SCAN_MIN_FEATURES, 300, seed=2)
    X, Q = X.astype(dtype), Q.astype(dtype)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 1)
    ours = LocalMeanClassifier(kernel="uniform", n_neighbors=9).fit(X, y)
    ref = KNeighborsClassifier(9, algorithm="brute").fit(X, y)
    bound = ours._kept[next(iter(ours._kept))][0].bound
    assert planner.index_plan(bound).kind in ("tiled", "faiss")
    assert "index: tiled" in str(bound.explain(Q[:3])) or "index: faiss" in str(bound.explain(Q[:3]))
    np.testing.assert_array_equal(ours.kneighbors(Q)[1], ref.kneighbors(Q)[1])
    np.testing.assert_allclose(ours.predict_proba(Q), ref.predict_proba(Q), atol=1e-6)


def test_faiss_absent_runs_the_own_scan(monkeypatch):
    monkeypatch.setattr(retrieval, "faiss_module", lambda: None)
    X, Q = clustered(retrieval.SCAN_MIN_SAMPLES, 16, 50, seed=3)
    bound = BoundKernel(Kernel("uniform", n_neighbors=4), X)
    assert planner.index_plan(bound).kind == "tiled"
    assert bound.index.backend == "own tiled scan"
    _, idx = bound.index.kneighbors(bound.index_points(Q), 4)
    np.testing.assert_array_equal(idx, NearestNeighbors(algorithm="brute").fit(bound.index_points(None))
                                  .kneighbors(bound.index_points(Q), 4)[1])
    approximate = BoundKernel(Kernel("uniform", n_neighbors=4), X, options=EngineOptions(algorithm="approximate"))
    assert isinstance(approximate.index, retrieval.ListIndex)  # the inverted lists need no faiss


def test_low_dimensional_knn_keeps_the_tree():
    X, Q = clustered(30_000, 3, 10)
    bound = BoundKernel(Kernel("uniform", n_neighbors=5), X)
    assert planner.index_plan(bound).kind == "tree"
    few_features = BoundKernel(Kernel("uniform", n_neighbors=5), X[:500])
    assert planner.index_plan(few_features).kind == "tree"  # fewer than 6 features: the tree is faster


def small_scan(X):
    return retrieval.FlatIndex(lambda rows: np.asarray(X[rows], dtype=np.float64), len(X), X.shape[1],
                               reference="tree")


def _small_tables():
    from sklearn.datasets import load_diabetes, load_wine

    diabetes, wine = load_diabetes().data, load_wine().data
    return {"diabetes": (diabetes[:331], diabetes[331:]), "wine": (wine[:124], wine[124:]),
            "diabetes far from the origin": (diabetes[:331] + 1e4, diabetes[331:] + 1e4)}


@pytest.mark.parametrize("table", ["diabetes", "wine", "diabetes far from the origin"])
@pytest.mark.parametrize("k", [1, 7, 20])
def test_small_scan_equals_the_k_d_tree_to_the_bit(table, k):
    """Few samples in 6-15 features take the scan; its certified answers are the k-d tree's, the
    distances to the bit (the re-ranking sums squared differences in the tree's order)."""
    X, Q = _small_tables()[table]
    index = small_scan(X)
    dist, idx = index.kneighbors(Q, k)
    ref_d, ref_i = neighbors.TreeIndex(X, "euclidean").kneighbors(Q, k)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_array_equal(dist, ref_d)
    assert index.uncertified_ < len(Q) // 10  # the scan's own answers (it measures from the samples' centre)


def test_small_scan_hands_ties_to_the_k_d_tree():
    """Lattice points tie exactly; the tree orders ties by its own search, and answers them here."""
    rng = np.random.default_rng(4)
    X = rng.integers(0, 3, size=(400, 8)).astype(np.float64)
    Q = rng.integers(0, 3, size=(60, 8)).astype(np.float64)
    index = small_scan(X)
    dist, idx = index.kneighbors(Q, 6)
    ref_d, ref_i = neighbors.TreeIndex(X, "euclidean").kneighbors(Q, 6)
    np.testing.assert_array_equal(idx, ref_i)
    np.testing.assert_array_equal(dist, ref_d)
    assert index.uncertified_ > 0
    radius = index.radius_neighbors(Q[:3], 1.0, return_distance=False)  # the tree's radius search
    for found, q in zip(radius, Q[:3]):
        np.testing.assert_array_equal(np.sort(found), np.flatnonzero(((X - q) ** 2).sum(axis=1) <= 1.0))


def test_knn_on_a_small_table_takes_the_small_scan_and_equals_scikit_learn():
    from sklearn.datasets import load_diabetes
    from sklearn.neighbors import KNeighborsRegressor

    X, y = load_diabetes(return_X_y=True)
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=7).fit(X[:331], y[:331])
    ref = KNeighborsRegressor(7).fit(X[:331], y[:331])
    bound = ours._kept[next(iter(ours._kept))][0].bound
    assert planner.index_plan(bound).kind == "small"
    assert "index: small" in str(bound.explain(X[331:334]))
    np.testing.assert_array_equal(ours.kneighbors(X[331:])[1], ref.kneighbors(X[331:])[1])
    np.testing.assert_allclose(ours.predict(X[331:]), ref.predict(X[331:]), rtol=1e-13)
    loaded = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(loaded.predict(X[331:]), ours.predict(X[331:]))
    loaded_bound = loaded._kept[next(iter(loaded._kept))][0].bound
    assert loaded_bound.index.fallback.reference == "tree"


@pytest.mark.parametrize("d, centres, spread", [(16, 10, 1.0), (32, 50, 3.0)])
def test_reported_recall_matches_measured_recall(monkeypatch, d, centres, spread):
    """The recall the inverted lists report, measured on a sample of their first queries, equals the
    recall of all of them against scikit-learn's exact neighbours within the errors stated (three
    lists probed, so that some neighbours are missed)."""
    monkeypatch.setattr(retrieval, "DEFAULT_PROBES", 3)
    X, Q = clustered(12_000, d, 3000, seed=4, centres=centres, spread=spread)
    model = LocalMeanRegressor(kernel="uniform", n_neighbors=10, algorithm="approximate").fit(X, X[:, 0])
    bound = model._kept[next(iter(model._kept))][0].bound
    index = bound.index
    assert isinstance(index, retrieval.ListIndex) and index.recall_ is None
    assert "measured on the first queries" in str(planner.index_plan(bound))
    _, found = model.kneighbors(Q)
    assert index.recall_k_ == 10 and 0 < index.recall_error_ < 0.05
    _, truth = NearestNeighbors(algorithm="brute").fit(X).kneighbors(Q, 10)
    per_query = np.array([len(np.intersect1d(f, t)) for f, t in zip(found, truth)]) / 10
    measured, error = per_query.mean(), max(per_query.std(ddof=1), 0.1) / np.sqrt(len(Q))
    assert measured < 1.0  # lists that miss some: the comparison means something
    assert abs(index.recall_ - measured) <= 3 * np.hypot(index.recall_error_, error)
    assert f"recall@10 {index.recall_:.3f}" in str(planner.index_plan(bound))


def test_lists_partition_the_samples_and_every_list_is_the_exact_search():
    """The lists hold each sample once, in float32 less the centre; probing every list is the exact
    search (scikit-learn's neighbours, distances from coordinate differences); a query whose probed
    lists hold fewer than k samples probes more and still gets k."""
    X, Q = clustered(6000, 24, 300, seed=7, centres=30, spread=4.0)
    index = retrieval.ListIndex(lambda i: X[i], len(X), X.shape[1])
    L = len(index.centres)
    assert index.starts[-1] == len(X) and L == len(index.starts) - 1 > 100
    np.testing.assert_array_equal(np.sort(index.order), np.arange(len(X)))
    np.testing.assert_allclose(index.X32, (X[index.order] - index.centre).astype(np.float32), rtol=1e-6, atol=1e-6)
    dist, truth = NearestNeighbors(algorithm="brute").fit(X).kneighbors(Q, 10)
    d2, found = index._rerank(Q, index._search(Q, 10, L), 10)
    np.testing.assert_array_equal(found[:, :10], truth)
    np.testing.assert_allclose(np.sqrt(d2[:, :10]), np.linalg.norm(Q[:, None] - X[truth], axis=2), rtol=1e-12)
    k = int(np.diff(index.starts).max()) + 1  # more than any one list holds
    assert (index._search(Q[:20], k, 1) >= 0).all()


def test_tolerance_takes_the_fewest_lists_whose_recall_bound_meets_it():
    """``tolerance=0.005``: the lists probed are the first count of the ladder whose recall on the
    probes (against scikit-learn's exact neighbours here), less two standard errors, reaches 0.995;
    every query's recall then meets it; explain() and pickles keep the count."""
    X, Q = clustered(12_000, 32, 3000, seed=4, centres=50, spread=3.0)
    tolerance = 0.005
    model = LocalMeanRegressor(kernel="uniform", n_neighbors=10, algorithm="approximate",
                               tolerance=tolerance).fit(X, X[:, 0])
    bound = model._kept[next(iter(model._kept))][0].bound
    index = bound.index
    _, found = model.kneighbors(Q)
    chosen = index.breadths_[(10, tolerance)]
    exact = NearestNeighbors(algorithm="brute").fit(X)
    rows, _ = index._probes(Q, 10)
    truth = exact.kneighbors(Q[rows], 10)[1]

    def meets(probes):
        hits = np.array([len(np.intersect1d(f, t)) for f, t in zip(index._search(Q[rows], 10, probes), truth)]) / 10
        r = hits.mean()
        error = np.sqrt(max(hits.var(ddof=1), r * (1 - r) / 10, 1 / (10 * len(rows))) / len(rows))
        return r - 2 * error >= 1 - tolerance

    ladder = list(retrieval.PROBES)
    assert chosen in ladder and chosen > ladder[0]
    assert meets(chosen) and not any(meets(p) for p in ladder[:ladder.index(chosen)])
    per_query = np.array([len(np.intersect1d(f, t)) for f, t in zip(found, exact.kneighbors(Q, 10)[1])]) / 10
    assert per_query.mean() >= 1 - tolerance
    assert f"(k=10: {chosen})" in str(planner.index_plan(bound))
    loaded = pickle.loads(pickle.dumps(model))
    assert loaded._kept[next(iter(loaded._kept))][0].bound.index.breadths_ == {(10, tolerance): chosen}
    np.testing.assert_array_equal(loaded.kneighbors(Q[:50])[1], found[:50])


def test_approximate_pickles_and_clones():
    X, Q = clustered(3000, 20, 200, seed=5)
    y = X[:, 0] ** 2
    model = LocalMeanRegressor(kernel="uniform", n_neighbors=6, algorithm="approximate").fit(X, y)
    before = model.predict(Q)
    blob = pickle.dumps(model)
    assert len(blob) < X.nbytes + 3 * 4 * X.shape[0] + 100_000  # the samples, not their float32 copy too
    loaded = pickle.loads(blob)
    np.testing.assert_array_equal(loaded.predict(Q), before)
    index = loaded._kept[next(iter(loaded._kept))][0].bound.index
    assert isinstance(index, retrieval.ListIndex) and index.recall_ is not None  # travelled (not rebuilt)
    np.testing.assert_array_equal(index.X32, model._kept[next(iter(model._kept))][0].bound.index.X32)
    again = clone(model)
    assert again.get_params() == model.get_params() and not hasattr(again, "_kept")
    np.testing.assert_array_equal(again.fit(X, y).predict(Q), before)


def test_approximate_compact_kernel_radius_search():
    X, Q = clustered(3000, 8, 100, seed=6)
    kernel = Kernel("epanechnikov", bandwidth=2.0)
    approx = BoundKernel(kernel, X, options=EngineOptions(algorithm="approximate")).sums(Q, X[:, 0])
    exact = BoundKernel(kernel, X, options=EngineOptions(algorithm="dense")).sums(Q, X[:, 0])
    # the lists find (nearly) every sample of each support: the sums agree where they did
    close = np.isclose(approx.log_weight_sum, exact.log_weight_sum, rtol=0, atol=1e-9)
    assert close.mean() > 0.9
    np.testing.assert_allclose(approx.mean[close], exact.mean[close], atol=1e-9)


#: the profiles of the truncated pass as direct float64 formulas of u = d / h: log k(u)
DIRECT_LOG_K = {"gaussian": lambda u: -0.5 * u ** 2, "laplacian": lambda u: -u, "cauchy": lambda u: -np.log1p(u ** 2)}


def direct_log_sums(X, Q, y, h, profile, w=None):
    """``(log sum_j c_j k(|q - x_j| / h), local mean)`` by coordinate differences in float64."""
    u = np.sqrt(((Q[:, None, :] - X[None, :, :]) ** 2).sum(-1)) / h
    L = DIRECT_LOG_K[profile](u) + (0.0 if w is None else np.log(w / w.max()))
    top = L.max(axis=1, keepdims=True)
    W = np.exp(L - top)
    return top[:, 0] + np.log(W.sum(axis=1)) + (0.0 if w is None else np.log(w.max())), (W @ y) / W.sum(axis=1)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(profile=st.sampled_from(["gaussian", "laplacian", "cauchy"]),
       h=st.floats(0.05, 3.0), tol=st.sampled_from([1e-2, 1e-4, 1e-6]),
       n=st.integers(40, 400), seed=st.integers(0, 1000), weighted=st.booleans(),
       centres=st.sampled_from([0, 3, 12]))
def test_omitted_weight_bound_holds(monkeypatch, profile, h, tol, n, seed, weighted, centres):
    """The truncated pass's reported bound is at least the weight it left out (relative to the weight
    kept, against direct float64 sums), and at most ``tolerance``; its means are the exact ones to
    that tolerance; on data without clusters (``centres=0``) and with them."""
    monkeypatch.setattr(planner, "TRUNCATED_MIN_SAMPLES", 0)
    monkeypatch.setattr(planner, "TRUNCATED_AUTO_FRACTION", 1.0)
    monkeypatch.setattr(planner, "TRUNCATED_BUILD_QUERIES", 0.0)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 4)) * rng.uniform(0.5, 2.0, 4)
    if centres:
        X += rng.standard_normal((centres, 4))[rng.integers(0, centres, n)] * 20
    Q = np.concatenate([X[rng.integers(0, n, 15)] + rng.standard_normal((15, 4)), rng.standard_normal((5, 4)) * 30])
    y = rng.standard_normal(n)
    w = rng.uniform(0.1, 2.0, n) if weighted else None
    bound = BoundKernel(Kernel(profile, bandwidth=h), X, sample_weight=w, options=EngineOptions(tolerance=tol))
    assert bound.explain(Q).path == "truncated"
    got = bound.sums(Q, y)
    log_sum, mean = direct_log_sums(X, Q, y, h, profile, w)
    true_rel = np.expm1(log_sum - got.log_weight_sum)
    assert np.all(got.omitted <= tol)
    # beside the bound, the round-off of log-weights of size |log_sum| (far queries: u^2 / 2 ~ 1e4)
    rounding = 1e-12 + 16 * np.finfo(np.float64).eps * np.abs(log_sum)
    assert np.all(true_rel <= got.omitted * (1 + 1e-9) + rounding)
    np.testing.assert_allclose(got.mean, mean, atol=2 * tol * np.ptp(y) + 1e-10)


def test_truncated_pass_visits_few_samples_of_clustered_data():
    """On clustered data at the clusters' spread the probe visits a small share of the samples and
    "auto" takes the truncated pass; without clusters it visits every one, "auto" takes the dense
    pass and says why, and ``algorithm="approximate"`` still returns the exact sums (nothing omitted)."""
    X, Q = clustered(planner.TRUNCATED_MIN_SAMPLES, 8, 40, seed=7, centres=200, spread=10.0)
    kernel = Kernel("gaussian", bandwidth=1.0)
    bound = BoundKernel(kernel, X, options=EngineOptions(tolerance=1e-6))
    # 40 queries < 4 sqrt(n): "auto" does not build the clusters for them (labelling the samples
    # would cost more than the dense pass), and says so
    plan = bound.explain(Q)
    assert plan.path == "dense" and "sqrt(n_samples)" in plan.reasons["truncated"]
    assert bound.built("clusters") is None
    bound.clusters  # a binding that holds them (built by a larger call before) is probed at any count
    plan = bound.explain(Q)
    assert plan.path == "truncated" and "LocalSums.omitted" in plan.reasons["truncated"]
    assert planner.Pass(bound, Q, None, False).truncated_visits < 0.05
    U = np.random.default_rng(8).uniform(-1, 1, (planner.TRUNCATED_MIN_SAMPLES, 8))
    wide = BoundKernel(Kernel("gaussian", bandwidth=2.0), U, options=EngineOptions(tolerance=1e-6))
    many = int(planner.TRUNCATED_BUILD_QUERIES * np.sqrt(len(U))) + 1  # enough queries to build them
    plan = wide.explain(U[:many])
    assert plan.path == "dense" and "visits 100%" in plan.reasons["truncated"]
    approx = BoundKernel(Kernel("gaussian", bandwidth=2.0), U[:3000], options=EngineOptions(algorithm="approximate"))
    got = approx.sums(U[:10], U[:3000, 0])
    assert np.all(got.omitted == 0)
    log_sum, mean = direct_log_sums(U[:3000], U[:10], U[:3000, 0], 2.0, "gaussian")
    np.testing.assert_allclose(got.log_weight_sum, log_sum, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.mean, mean, rtol=0, atol=1e-12)


def test_truncated_pass_memory_does_not_grow_with_queries_times_samples():
    """The pass holds bounds for a block of queries against the clusters and one cluster's
    log-weights at a time: its peak allocation stays far below ``n_queries x n_samples`` floats."""
    import tracemalloc

    X, Q = clustered(planner.TRUNCATED_MIN_SAMPLES, 8, 4000, seed=9, centres=100, spread=10.0)
    bound = BoundKernel(Kernel("gaussian", bandwidth=1.0), X, options=EngineOptions(tolerance=1e-6))
    bound.sums(Q[:5], X[:, 0])  # the clusters built
    tracemalloc.start()
    try:
        bound.sums(Q, X[:, 0])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(Q) * len(X) * 8 / 8


@pytest.mark.parametrize("tolerance", [-1e-3, 0.0, float("nan"), 1.5])
def test_bad_tolerance_names_the_parameter(tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        EngineOptions(tolerance=tolerance)
    X = np.random.default_rng(0).standard_normal((50, 3))
    with pytest.raises(ValueError, match="tolerance"):
        LocalMeanRegressor(tolerance=tolerance).fit(X, X[:, 0])


@pytest.mark.parametrize("metric", ["manhattan", "cosine"])
def test_approximate_with_unsupported_metric_names_it(metric):
    X = np.random.default_rng(0).standard_normal((100, 5))
    with pytest.raises(ValueError, match="metric"):
        BoundKernel(Kernel("uniform", n_neighbors=3, metric=metric), X, options=EngineOptions(algorithm="approximate"))
    with pytest.raises(ValueError, match="metric"):
        LocalMeanRegressor(kernel="uniform", n_neighbors=3, metric=metric, algorithm="approximate").fit(X, X[:, 0])


def test_approximate_is_never_chosen_silently():
    X, Q = clustered(retrieval.SCAN_MIN_SAMPLES, 32, 5)
    bound = BoundKernel(Kernel("uniform", n_neighbors=5), X)
    assert planner.index_plan(bound).kind != "lists"
    assert planner.index_plan(BoundKernel(Kernel("gaussian", bandwidth=1.0), X)).kind != "lists"
