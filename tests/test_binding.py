"""Estimators bind once (issue 22): ``fit`` keeps the engine's bound kernel, ``predict`` pays only
for its queries, and cloning, pickling, ``set_params`` and refitting keep scikit-learn's semantics."""
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_iris
from sklearn.neighbors import KNeighborsRegressor, NearestNeighbors

from localkit import Kernel, LocalMeanClassifier, LocalMeanRegressor, LocalMeanTransformer, local_sums
from localkit.engine import BoundKernel, bind
from localkit.engine import bound as bound_module
from localkit.engine.passes.neighbors import make_index


@pytest.fixture
def count_binds(monkeypatch):
    """How many times a BoundKernel is built (its samples centred, scaled, checked)."""
    calls = []
    original = BoundKernel.__init__

    def counting(self, *args, **kwargs):
        calls.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(bound_module.BoundKernel, "__init__", counting)
    return calls


ESTIMATORS = [
    lambda: LocalMeanRegressor(kernel="uniform", n_neighbors=7),
    lambda: LocalMeanRegressor(kernel="gaussian", bandwidth=0.05),
    lambda: LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.08, empty="nearest"),
    lambda: LocalMeanClassifier(kernel="tricube", n_neighbors=9),
    lambda: LocalMeanTransformer(kernel="gaussian", bandwidth=0.1),
]


@pytest.mark.parametrize("make", ESTIMATORS)
def test_predict_never_rebinds(make, count_binds):
    X, y = load_diabetes(return_X_y=True)
    est = make()
    if isinstance(est, LocalMeanClassifier):
        y = (y > np.median(y)).astype(int)
    est.fit(X, y)
    assert len(count_binds) == 1
    method = est.transform if isinstance(est, LocalMeanTransformer) else est.predict
    for rows in (slice(0, 3), slice(10, 50), slice(0, 1)):
        method(X[rows])
    assert len(count_binds) == 1


@pytest.mark.parametrize("make", ESTIMATORS)
def test_kept_kernel_equals_a_fresh_pass(make):
    """Bit for bit what one engine call on the same samples gives (the path before binding)."""
    X, y = load_diabetes(return_X_y=True)
    est = make()
    if isinstance(est, LocalMeanClassifier):
        y = (y > np.median(y)).astype(int)
    est.fit(X[:300], y[:300])
    values = {LocalMeanRegressor: lambda: est.y_fit_, LocalMeanClassifier: lambda: est.onehot_,
              LocalMeanTransformer: lambda: est.values_fit_}[type(est)]()
    fresh = local_sums(X[300:], est.X_fit_, values, est.kernel_, empty=est.empty, algorithm=est.algorithm).mean
    kept = est._local_sums(X[300:]).mean
    np.testing.assert_array_equal(kept, fresh)


def test_pickle_round_trip_is_compact_and_exact():
    X, y = load_diabetes(return_X_y=True)
    reg = LocalMeanRegressor(kernel="uniform", n_neighbors=5).fit(X, y)
    before = reg.predict(X[:40])  # builds the neighbour index
    assert reg._bound.bound._cache
    blob = pickle.dumps(reg)
    # the samples and targets once each (plus a few hundred bytes), not the tree or a second copy
    assert len(blob) < X.nbytes + y.nbytes + 4096
    again = pickle.loads(blob)
    assert not again._bound.bound._cache  # rebuilt on first use
    np.testing.assert_array_equal(again.predict(X[:40]), before)
    np.testing.assert_array_equal(again.loo_predict(), reg.loo_predict())


def test_bound_kernel_pickles_its_coordinates_exactly():
    X = load_diabetes().data * 1e3 + 5.0
    bound = BoundKernel(Kernel("gaussian", bandwidth=7.0), X)
    again = pickle.loads(pickle.dumps(bound))
    np.testing.assert_array_equal(again.X, bound.X)
    np.testing.assert_array_equal(again.x_sq, bound.x_sq)
    np.testing.assert_array_equal(again.sums(X[:9], X[:, 0]).mean, bound.sums(X[:9], X[:, 0]).mean)


def test_set_params_after_fit_applies_engine_options_and_refit_rebinds():
    X, y = load_diabetes(return_X_y=True)
    reg = LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.02).fit(X[:100], y[:100])
    far = X[100:140] + 1.0  # outside every support
    assert np.all(np.isfinite(reg.predict(far)))  # empty="nearest"
    reg.set_params(empty="raise")
    with pytest.raises(ValueError, match="empty neighbourhood"):
        reg.predict(far)
    reg.set_params(empty="nearest", bandwidth=0.2)  # a kernel parameter: the fitted kernel stays ...
    fitted = reg.predict(X[:5])
    np.testing.assert_array_equal(fitted, LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.02)
                                  .fit(X[:100], y[:100]).predict(X[:5]))
    reg.fit(X[:100], y[:100])  # ... until refit
    np.testing.assert_array_equal(reg.predict(X[:5]), LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.2)
                                  .fit(X[:100], y[:100]).predict(X[:5]))


def test_clone_carries_no_bound_kernel():
    X, y = load_iris(return_X_y=True)
    clf = LocalMeanClassifier(kernel="uniform", n_neighbors=3).fit(X, y)
    fresh = clone(clf)
    assert not hasattr(fresh, "_bound")
    np.testing.assert_array_equal(fresh.fit(X, y).predict_proba(X), clf.predict_proba(X))


def test_knn_regression_equals_scikit_learn_at_latency_size():
    """The latency benchmark's case (10 queries, 200,000 samples, 3-D), at a smaller n: the same answer."""
    rng = np.random.default_rng(0)
    X, y, Q = rng.normal(size=(20_000, 3)), rng.normal(size=20_000), rng.normal(size=(10, 3))
    ours = LocalMeanRegressor(kernel="uniform", n_neighbors=10).fit(X, y).predict(Q)
    np.testing.assert_allclose(ours, KNeighborsRegressor(10).fit(X, y).predict(Q), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("metric,p", [("euclidean", 2), ("manhattan", 2), ("chebyshev", 2), ("minkowski", 1),
                                      ("minkowski", 2), ("minkowski", 3), ("minkowski", np.inf)])
def test_tree_index_answers_as_nearest_neighbors(metric, p):
    """The engine's tree (sklearn's KDTree queried directly) gives NearestNeighbors' answers to the bit."""
    X = load_diabetes().data[:, :6]
    Q = X[::7] + 1e-3
    ours = make_index(X, metric, p, exact=True)
    theirs = NearestNeighbors(metric=metric, p=p, algorithm="kd_tree").fit(X)
    assert ours.n_samples_fit_ == theirs.n_samples_fit_
    for a, b in zip(ours.kneighbors(Q, n_neighbors=6), theirs.kneighbors(Q, n_neighbors=6)):
        np.testing.assert_array_equal(a, b)
    d_ours, i_ours = ours.radius_neighbors(Q, radius=0.05, sort_results=True)
    d_theirs, i_theirs = theirs.radius_neighbors(Q, radius=0.05, sort_results=True)
    for a, b, c, d in zip(d_ours, d_theirs, i_ours, i_theirs):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(c, d)
    only = ours.radius_neighbors(Q, radius=0.05, return_distance=False)
    for a, b in zip(only, i_theirs):
        np.testing.assert_array_equal(np.sort(a), np.sort(b))


def test_bind_dispatches_by_array_library():
    X = load_iris().data
    assert isinstance(bind(Kernel("gaussian", bandwidth=1.0), X).bound, BoundKernel)
    import dask.array as da

    deferred = bind(Kernel("gaussian", bandwidth=1.0), da.from_array(X, chunks=50))
    assert deferred.bound is None  # the samples stay on the cluster
    np.testing.assert_allclose(deferred.sums(X[:5], X[:, 0]).mean.compute(),
                               bind(Kernel("gaussian", bandwidth=1.0), X).sums(X[:5], X[:, 0]).mean, rtol=1e-12)


def test_dask_queries_against_a_kept_numpy_kernel():
    import dask.array as da

    X, y = load_diabetes(return_X_y=True)
    reg = LocalMeanRegressor(kernel="gaussian", bandwidth=0.05).fit(X, y)
    lazy = reg.predict(da.from_array(X[:60], chunks=25))
    np.testing.assert_allclose(lazy.compute(), reg.predict(X[:60]), rtol=1e-12)


@pytest.mark.parametrize("kernel,options,path", [
    (Kernel("gaussian", bandwidth=0.5), {}, "dense"),
    (Kernel("epanechnikov", bandwidth=0.1), {}, "compiled"),
    (Kernel("uniform", n_neighbors=5), {}, "neighbors"),
    (Kernel("uniform", n_neighbors=5), {"algorithm": "dense"}, "neighbors"),  # the tree's distances, always
    (Kernel("epanechnikov", bandwidth=0.1), {"algorithm": "dense"}, "dense"),
    (Kernel("epanechnikov", bandwidth=0.1), {"algorithm": "neighbors"}, "neighbors"),
    (Kernel("gaussian", bandwidth=0.5), {"algorithm": "binned"}, "binned"),
])
def test_explain_names_the_path_that_runs(kernel, options, path, monkeypatch):
    from localkit.engine import EngineOptions
    from localkit.engine import passes as paths_module

    X = np.random.default_rng(0).normal(size=(3000, 3))
    bound = BoundKernel(kernel, X, options=EngineOptions(**options))
    plan = bound.explain(X[:50])
    assert plan.path == path and set(plan.reasons) == {"dense", "neighbors", "compiled", "binned", "streamed", "truncated"}
    assert all(plan.reasons.values()) and f"-> {path}" in str(plan)
    ran = []
    for name, func in list(paths_module.PATHS.items()):
        monkeypatch.setitem(paths_module.PATHS, name, lambda *a, _n=name, _f=func: ran.append(_n) or _f(*a))
    bound.sums(X[:50], X[:, 0])
    assert ran == [path]


def test_explain_says_why_the_compiled_pass_is_refused():
    X = np.random.default_rng(0).normal(size=(500, 3))
    plan = BoundKernel(Kernel("epanechnikov", bandwidth=0.1), X).explain(exclude_self=True)
    assert plan.path != "compiled" and "exclude_self" in plan.reasons["compiled"]
    plan = BoundKernel(Kernel("gaussian", bandwidth=0.1, metric="manhattan"), X).explain()
    assert "compact" in plan.reasons["compiled"] and "manhattan" in plan.reasons["compiled"]


def test_the_refusals_kept_per_binding_follow_each_pass():
    """A binding keeps its kernel's refusals of a path once derived, one set per (query scales
    given or not, exclude_self): a pass that leaves one out, or takes per-query scales, does not
    refuse the compiled pass to the plain pass after it, nor the other way round."""
    X = np.random.default_rng(0).normal(size=(500, 3))
    bound = BoundKernel(Kernel("epanechnikov", bandwidth=0.1), X)
    for _ in range(2):
        assert "exclude_self" in bound.explain(exclude_self=True).reasons["compiled"]
        assert "per-query scales" in bound.explain(X[:5], query_scale=np.ones(5)).reasons["compiled"]
        assert bound.explain(X[:5]).path == "compiled"


@pytest.mark.parametrize("d, path", [(24, "compiled"), (40, "dense")])
def test_a_compact_kernel_in_many_features_takes_the_compiled_pass_up_to_its_limit(d, path):
    # diabetes' 10 features side by side with noise columns: both passes give the same local means
    X, y = load_diabetes(return_X_y=True)
    X = np.c_[X, np.random.default_rng(0).normal(scale=0.05, size=(len(X), d - X.shape[1]))]
    kern = Kernel("epanechnikov", bandwidth=0.4)
    plan = BoundKernel(kern, X).explain(X[:40])
    assert plan.path == path and f"{d}" in plan.reasons["compiled"]
    auto = LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.4).fit(X, y).predict(X[:40])
    dense = LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.4, algorithm="dense").fit(X, y).predict(X[:40])
    np.testing.assert_allclose(auto, dense, rtol=1e-12)


STREAMED_CASES = [("gaussian", dict(bandwidth=0.1)), ("epanechnikov", dict(bandwidth=0.15)),
                  ("uniform", dict(bandwidth=0.12)), ("uniform", dict(n_neighbors=7)), ("gaussian", dict(n_neighbors=9)),
                  ("softmax", dict(bandwidth=0.01)), ("laplacian", dict(bandwidth=0.2, metric="manhattan")),
                  ("cosine", dict(bandwidth=0.3, metric="cosine")), ("tricube", dict(bandwidth=np.linspace(0.1, 0.3, 10))),
                  ("gaussian", dict(bandwidth="scott"))]


@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("name, kwargs", STREAMED_CASES)
def test_the_streamed_pass_runs_on_numpy_and_equals_the_host_paths(name, kwargs, exclude_self):
    """The array-API pass (the one a device runs) on NumPy arrays, asked for by name: the same
    local means and log weight sums as the planner's host paths, empty rows alike (issue 22: one
    pass written against the array API, run by every array library)."""
    X, y = load_diabetes(return_X_y=True)
    w = np.random.default_rng(0).uniform(0, 2, len(X))
    queries = None if exclude_self else X[:60] + 0.01
    host = local_sums(queries, X, y, name, exclude_self=exclude_self, sample_weight=w, empty="nearest", **kwargs)
    streamed = local_sums(queries, X, y, name, exclude_self=exclude_self, sample_weight=w, empty="nearest",
                          algorithm="streamed", **kwargs)
    np.testing.assert_array_equal(streamed.empty, host.empty)
    np.testing.assert_allclose(streamed.mean, host.mean, rtol=0, atol=1e-13 * np.ptp(y))
    live = ~host.empty
    np.testing.assert_allclose(streamed.log_weight_sum[live], host.log_weight_sum[live], rtol=0, atol=1e-12)
    assert np.all(np.isneginf(streamed.log_weight_sum[~live]))


def test_the_streamed_pass_is_explained_and_refused_by_name():
    X = load_diabetes().data
    plan = BoundKernel(Kernel("gaussian", bandwidth=0.1), X).explain()
    assert plan.path == "dense" and "when asked for" in plan.reasons["streamed"]
    from localkit.engine import EngineOptions

    asked = BoundKernel(Kernel("gaussian", bandwidth=0.1), X, options=EngineOptions(algorithm="streamed")).explain()
    assert asked.path == "streamed" and "-> streamed" in str(asked)
    D = np.abs(X[:, :1] - X[:, :1].T)
    with pytest.raises(ValueError, match="algorithm='streamed' cannot compute this pass: metric='precomputed'"):
        local_sums(None, D, X[:, 0], "gaussian", 0.1, metric="precomputed", algorithm="streamed")
    with pytest.raises(ValueError, match="exclude_self=True .* repeat a row"):  # copies of whole rows (x and y)
        local_sums(None, np.vstack([X, X[:3]]), np.r_[np.arange(len(X)), np.arange(3)].astype(float), "gaussian",
                   0.1, exclude_self=True, algorithm="streamed")


def test_the_bound_kernels_neighbour_searches_equal_scikit_learns_and_check_their_input():
    """BoundKernel.kneighbors / radius_neighbors: scikit-learn's NearestNeighbors answers (per-feature
    bandwidths: the coordinates over them), and bad input named."""
    X = load_diabetes().data[:, :4]
    h = np.array([0.02, 0.05, 0.03, 0.04])
    for kernel, ref_X in ((Kernel("uniform", bandwidth=0.05), X), (Kernel("uniform", bandwidth=h), X / h)):
        bound = BoundKernel(kernel, X)
        ref = NearestNeighbors().fit(ref_X)
        dist, idx = bound.kneighbors(X[:30], 6)
        ref_dist, ref_idx = ref.kneighbors(ref_X[:30], 6)
        np.testing.assert_array_equal(idx, ref_idx)
        np.testing.assert_allclose(dist, ref_dist, rtol=1e-12, atol=1e-15)
        dist, idx = bound.kneighbors(None, 6, exclude_self=True)
        np.testing.assert_array_equal(idx, ref.kneighbors(None, 6)[1])
        radius = 0.05 if np.ndim(kernel.bandwidth) == 0 else 1.0
        dist, idx = bound.radius_neighbors(X[:30], radius, sort_results=True)
        ref_dist, ref_idx = ref.radius_neighbors(ref_X[:30], radius, sort_results=True)
        for d, i, rd, ri in zip(dist, idx, ref_dist, ref_idx):
            np.testing.assert_array_equal(i, ri)
            np.testing.assert_allclose(d, rd, rtol=1e-12, atol=1e-15)
    bound = BoundKernel(Kernel("uniform", bandwidth=0.05), X)
    for k, error, match in ((0, ValueError, "k must be between 1 and 442"), (443, ValueError, "between 1 and 442"),
                            (2.5, TypeError, "k must be an integer"), (True, TypeError, "k must be an integer")):
        with pytest.raises(error, match=match):
            bound.kneighbors(X[:3], k)
    with pytest.raises(ValueError, match="between 1 and 441 .the samples, less the query itself"):
        bound.kneighbors(None, 442, exclude_self=True)
    for radius, error in ((-1.0, ValueError), (np.nan, ValueError), (np.inf, ValueError), ("1", TypeError)):
        with pytest.raises(error, match="radius must be a"):
            bound.radius_neighbors(X[:3], radius)
    with pytest.raises(TypeError, match="exclude_self must be True or False"):
        bound.kneighbors(None, 3, exclude_self="yes")
    with pytest.raises(ValueError, match="queries contains NaN"):
        bound.kneighbors(np.array([[np.nan, 0, 0, 0]]), 3)
