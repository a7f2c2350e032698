"""Every estimator binds its training set once, in ``fit`` (issue 36): a post-fit call constructs
no :class:`~localkit.engine.BoundKernel`; what fixed points apply every iteration (the samples'
weight operator, a prepared pass) equals the engine's plain pass."""
import pickle
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits, load_iris
from sklearn.linear_model import LinearRegression

import localkit
from localkit import Kernel
from localkit.exceptions import EmptyNeighbourhoodWarning
from localkit.engine import BoundKernel, EngineOptions, bind, twin_groups
from localkit.engine import bound as bound_module
from localkit.engine.options import DEFERRED
from localkit.engine.query_blocks import LOG_WEIGHT_TOL


@pytest.fixture
def count_binds(monkeypatch):
    calls = []
    original = BoundKernel.__init__

    def counting(self, *args, **kwargs):
        calls.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(bound_module.BoundKernel, "__init__", counting)
    return calls


def _data():
    X, y = load_iris(return_X_y=True)
    return X, y


def _bipolar():
    return np.where(load_digits().data[:20] > 7, 1.0, -1.0)


_X, _y = _data()
_partial = np.where(np.arange(150) % 5 == 0, _y, -1)
#: (estimator, fit arguments) for every exported estimator that keeps a training set
CASES = {
    "KernelDensity": (lambda: localkit.KernelDensity(kernel="epanechnikov", bandwidth=0.5), (_X,)),
    "LocalMeanRegressor": (lambda: localkit.LocalMeanRegressor(), (_X[:, :3], _X[:, 3])),
    "LocalMeanRegressor(value_kernel)": (lambda: localkit.LocalMeanRegressor(bandwidth=0.5, value_kernel=Kernel("gaussian", bandwidth=1.0)),
                                         (_X[:, :3], _X[:, 3])),
    "LocalMeanClassifier": (lambda: localkit.LocalMeanClassifier(n_neighbors=5, kernel="uniform"), (_X, _y)),
    "LocalPolynomialRegressor": (lambda: localkit.LocalPolynomialRegressor(bandwidth=0.5), (_X[:, :2], _X[:, 3])),
    "LocalPolynomialRegressor(sample_neighbors)": (
        lambda: localkit.LocalPolynomialRegressor(bandwidth=0.5, sample_neighbors=5), (_X[:, :2], _X[:, 3])),
    "Localized": (lambda: localkit.Localized(LinearRegression(), bandwidth=0.5), (_X[:, :2], _X[:, 3])),
    "MetricLearningKernelRegressor": (lambda: localkit.MetricLearningKernelRegressor(max_iter=3), (_X[:60, :3], _X[:60, 3])),
    "LearnedKernelRegressor": (lambda: localkit.LearnedKernelRegressor(n_components=4, d_embedding=2, n_frequencies=2,
                                                                        d_block=4, max_epochs=2, n_ensembles=1,
                                                                        random_state=0),
                               (_X[:, :3], _X[:, 3])),
    "LearnedKernelClassifier": (lambda: localkit.LearnedKernelClassifier(n_components=4, d_embedding=2, n_frequencies=2,
                                                                          d_block=4, max_epochs=2, n_ensembles=1,
                                                                          random_state=0),
                                (_X, _y)),
    "MeanShift": (lambda: localkit.MeanShift(bandwidth=1.0), (_X,)),
    "RelaxationLabeling": (lambda: localkit.RelaxationLabeling(bandwidth=1.0), (_X, _partial)),
    "HopfieldNetwork": (lambda: localkit.HopfieldNetwork(beta=0.1), (_bipolar(),)),
    "LocallyLinearEmbedding": (lambda: localkit.LocallyLinearEmbedding(n_neighbors=10), (_X,)),
    "LocalPCA": (lambda: localkit.LocalPCA(bandwidth=1.0), (_X,)),
    "TSKFuzzyRegressor": (lambda: localkit.TSKFuzzyRegressor(), (_X[:, :2], _X[:, 3])),
    "TSKFuzzyClassifier": (lambda: localkit.TSKFuzzyClassifier(), (_X, _y)),
    "LocalMeanDenoiser": (lambda: localkit.LocalMeanDenoiser(noise_std=0.5, n_iter=2), (_X,)),
    "LazyAutoencoder": (lambda: localkit.LazyAutoencoder(n_components=2, max_iter=5), (_X,)),
    "HierarchicalAutoencoder": (lambda: localkit.HierarchicalAutoencoder(n_components=(3, 2), max_iter=5), (_X,)),
    "LocalMeanTransformer": (lambda: localkit.LocalMeanTransformer(bandwidth=1.0), (_X,)),
    "ConditionalDensity": (lambda: localkit.ConditionalDensity(), (_X[:, :2], _X[:, 3])),
    "KernelQuantileRegressor": (lambda: localkit.KernelQuantileRegressor(degree=0, bandwidth=0.5),
                                (_X[:, :2], _X[:, 3])),
    "ConditionalModeClassifier": (lambda: localkit.ConditionalModeClassifier(), (_X[:, :2], _y)),
}
#: the post-fit calls of a conditional density, beside METHODS
CONDITIONAL_CALLS = {"pdf": lambda est, X: est.pdf(X, _X[:len(X), 3]), "cdf": lambda est, X: est.cdf(X, _X[:len(X), 3]),
                     "quantile": lambda est, X: est.quantile(X, 0.3), "mode": lambda est, X: est.mode(X)}
METHODS = ("predict", "predict_proba", "score_samples", "transform", "kneighbors", "inverse_transform", "explain")


def test_every_exported_estimator_is_covered():
    from sklearn.base import BaseEstimator

    estimators = {name for name in localkit.__all__
                  if isinstance(getattr(localkit, name), type) and issubclass(getattr(localkit, name), BaseEstimator)}
    # NonLocalMeans keeps no training set (it denoises the image it is given)
    assert estimators - {"NonLocalMeans"} <= {name.split("(")[0] for name in CASES}


@pytest.mark.parametrize("name", list(CASES))
def test_no_bind_after_fit(name, count_binds):
    make, args = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make().fit(*args)
        called = 0
        for method in METHODS:
            if not hasattr(est, method):
                continue
            if method == "inverse_transform":
                queries = est.transform(args[0][:7])
            else:
                queries = args[0][:7]
            count_binds.clear()
            if method == "kneighbors":
                if getattr(est, "n_neighbors", None) is None:
                    continue
                est.kneighbors(queries, n_neighbors=3)
            else:
                getattr(est, method)(queries)
            called += 1
            assert not count_binds, f"{name}.{method} bound its samples {len(count_binds)} times after fit"
        for method, call in CONDITIONAL_CALLS.items() if name == "ConditionalDensity" else ():
            count_binds.clear()
            call(est, args[0][:7])
            called += 1
            assert not count_binds, f"{name}.{method} bound its samples {len(count_binds)} times after fit"
    assert called


@pytest.mark.parametrize("name", ["LocalMeanDenoiser", "LazyAutoencoder", "HierarchicalAutoencoder", "HopfieldNetwork",
                                  "MetricLearningKernelRegressor", "LearnedKernelRegressor"])
def test_kept_bindings_pickle_exactly(name):
    make, args = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = make().fit(*args)
        method = est.predict if hasattr(est, "predict") else est.transform
        before = method(args[0][:9])
        blob = pickle.dumps(est)
        assert pickle.dumps(est) == blob  # pickling leaves the estimator as it was
        again = pickle.loads(blob)
        np.testing.assert_array_equal(method.__func__(again, args[0][:9]) if hasattr(method, "__func__")
                                      else getattr(again, method.__name__)(args[0][:9]), before)


@pytest.mark.parametrize("kernel", [Kernel("gaussian", bandwidth=0.4), Kernel("epanechnikov", bandwidth=0.25),
                                    Kernel("uniform", bandwidth=0.3), Kernel("tricube", n_neighbors=6)])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_operator_equals_a_pass(kernel, exclude_self):
    """The kept weight matrix (empty rows holding the policy's answer) and the streamed operator
    equal the engine's pass at the samples."""
    X = load_diabetes().data[:, :3] * 10
    X[:5] += 50.0  # isolated samples: empty rows for the compact kernels when left out
    V = np.random.default_rng(0).normal(size=(len(X), 3))
    # the operator leaves out the groups the samples were bound with, whatever V (a pass refines
    # them by its values: repeated rows of X with distinct V are not copies of one observation)
    bound = BoundKernel(kernel, X, twins=twin_groups(X))
    reference = bound.sums(None, V, exclude_self=exclude_self)
    kept = bound.operator(exclude_self=exclude_self)
    assert kept.matrix is not None
    streamed = bound.using(EngineOptions(memory_budget=1024)).operator(exclude_self=exclude_self)
    assert streamed.matrix is None
    # the weights of one block against the pass's recentred blocks: within the engine's stated
    # error of a log-weight far from the centre (query_blocks.LOG_WEIGHT_TOL, 2^-30 in float64)
    tol = LOG_WEIGHT_TOL[np.dtype(np.float64)]
    for op in (kept, streamed):
        np.testing.assert_allclose(op(V), reference.mean, rtol=tol, atol=tol)
        np.testing.assert_allclose(op.log_weight_sum, reference.log_weight_sum, rtol=tol, atol=tol)
    small = bound.using(EngineOptions(memory_budget=1024))  # the streamed operator is that pass
    np.testing.assert_array_equal(BoundKernel(kernel, X, options=small.options).operator(exclude_self=exclude_self)(V),
                                  streamed(V))  # the groups as bound (at each point), not refined by V
    np.testing.assert_array_equal(streamed(V), small.sums(None, V, exclude_self=exclude_self).mean)


def test_operator_empty_policies():
    X = np.array([[0.0], [0.1], [5.0]])
    V = np.array([[1.0], [2.0], [3.0]])
    kernel = Kernel("epanechnikov", bandwidth=0.5)
    nan = BoundKernel(kernel, X, options=EngineOptions(empty="nan"))
    with pytest.warns(localkit.exceptions.EmptyNeighbourhoodWarning):
        out = nan.operator(exclude_self=True)(V)
    assert np.isnan(out[2]).all() and np.isfinite(out[:2]).all()
    with pytest.raises(ValueError, match="empty neighbourhood"):
        BoundKernel(kernel, X, options=EngineOptions(empty="raise")).operator(exclude_self=True)
    nearest = BoundKernel(kernel, X).operator(exclude_self=True)(V)
    np.testing.assert_array_equal(nearest[:, 0], [2.0, 1.0, 2.0])  # sample 2's nearest other sample is 1


def test_deferred_empty_policy_flags_rows_without_filling_or_warning():
    """The internal policy of callers that apply the public one themselves (dask chunks): empty
    rows flagged, their means NaN, no warning, no nearest-sample search; not a public choice."""
    X = np.array([[0.0], [0.1], [5.0]])
    V = np.array([1.0, 2.0, 3.0])
    kernel = Kernel("epanechnikov", bandwidth=0.5)
    deferred = BoundKernel(kernel, X, options=EngineOptions(empty=DEFERRED))
    deferred.nearest = None  # a search for the nearest sample would fail here
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = deferred.sums(np.array([[0.05], [9.0]]), V)
        W = deferred.operator(exclude_self=True)(V[:, None])
    np.testing.assert_array_equal(out.empty, [False, True])
    assert np.isfinite(out.mean[0]) and np.isnan(out.mean[1]) and out.log_weight_sum[1] == -np.inf
    assert np.isnan(W[2]).all() and np.isfinite(W[:2]).all()
    with pytest.raises(ValueError, match=r"'empty' parameter of EngineOptions must be a str among") as info:
        EngineOptions(empty="bogus")
    assert all(policy in str(info.value) for policy in ("'nan'", "'nearest'", "'raise'"))
    assert DEFERRED not in str(info.value) and "Got 'bogus'" in str(info.value)  # "defer": taken, never offered
    with pytest.raises(ValueError, match="empty"):
        localkit.LocalMeanRegressor(kernel="epanechnikov", empty=DEFERRED).fit(X, V)


@pytest.mark.parametrize("kernel", [Kernel("softmax", bandwidth=8.0), Kernel("gaussian", bandwidth=3.0),
                                    Kernel("epanechnikov", bandwidth=6.0), Kernel("epanechnikov", bandwidth=0.5)])
@pytest.mark.parametrize("dtype, weighted", [(np.float64, False), (np.float32, True)])
def test_stepper_equals_a_pass(kernel, dtype, weighted):
    """The stepper's sums equal a pass's to round-off: small states take one block of log-weights
    (engine.passes.dense.OneBlock: each row's maximum factored out, where the dense pass sums
    a distance kernel's weights directly), the others the planned pass; rows with no weight
    (epanechnikov at h = 0.5 leaves most empty) go to the pass, whose empty policy answers them."""
    X = load_digits().data[:200].astype(dtype)
    c = np.random.default_rng(0).uniform(0.5, 2.0, len(X)) if weighted else None
    bound = BoundKernel(kernel, X, sample_weight=c, options=EngineOptions(empty="nan"))
    stepper = bound.stepper(X, X[:10])
    state = X[:10] + 0.5
    # round-off of sums of 200 terms in another order: n eps (float32: 1.2e-5; float64: 4e-14)
    rtol = len(X) * np.finfo(dtype).eps
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EmptyNeighbourhoodWarning)
        for _ in range(3):
            expected = bound.sums(state, X)
            got = stepper(state)
            np.testing.assert_allclose(got.mean, expected.mean, rtol=rtol, atol=rtol * np.abs(X).max())
            np.testing.assert_array_equal(stepper.means(state), got.mean)  # the means alone: the same arithmetic
            np.testing.assert_allclose(got.log_weight_sum, expected.log_weight_sum, rtol=0, atol=rtol)  # log: relative
            np.testing.assert_array_equal(got.empty, expected.empty)
            state = np.where(np.isnan(got.mean), state, got.mean).astype(dtype)


def test_stepper_takes_softmax_logits_beyond_the_exponent_guard_as_a_pass_does():
    """Logits whose bound exceeds 2^512 (a pass streams them divided by 2^k) yet differ by O(1):
    q = (1e160, 1) against x = (0, 1) and (0, 0) has logits 1 and 0, so the weights are
    softmax(1, 0) = (e, 1) / (1 + e) and the weight sum 1 + e. The one block once divided the
    logits by 2^k without multiplying their differences back (weights (1/2, 1/2))."""
    X = np.array([[0.0, 1.0], [0.0, 0.0]])
    bound = BoundKernel(Kernel("softmax", bandwidth=1.0), X)
    q = np.array([[1e160, 1.0]])
    stepper = bound.stepper(X, q)
    assert stepper.one_block is not None
    w = np.e / (1.0 + np.e)
    for got in (stepper(q).mean, stepper.means(q), bound.sums(q, X).mean):
        np.testing.assert_allclose(got, [[0.0, w]], rtol=1e-15)
    np.testing.assert_allclose(stepper(q).log_weight_sum, [np.log1p(np.e)], rtol=1e-15)
    # logits beyond the float range (4e308) go to the full pass: all the weight on the first sample
    X2 = np.array([[2.0, 2.0], [0.0, 0.0]])
    q2 = np.array([[1e308, 1e308]])
    stepper = BoundKernel(Kernel("softmax", bandwidth=1.0), X2).stepper(X2, q2)
    assert stepper.one_block is not None
    np.testing.assert_array_equal(stepper.means(q2), [[2.0, 2.0]])


def test_relaxation_labeling_kept_operator_equals_scikit_learn():
    """The kept operator changes no result: LabelPropagation's distributions on iris."""
    from sklearn.semi_supervised import LabelPropagation

    X, y = load_iris(return_X_y=True)
    partial = np.where(np.arange(len(y)) % 4 == 0, y, -1)
    ours = localkit.RelaxationLabeling(kernel="gaussian", bandwidth=np.sqrt(0.5 / 20)).fit(X, partial)
    ref = LabelPropagation(kernel="rbf", gamma=20, max_iter=1000).fit(X, partial)
    assert ours.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(ours.label_distributions_, ref.label_distributions_, atol=1e-10)


def test_binding_operator_on_given_affinities():
    X = load_iris().data
    A = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    op = localkit.engine.BoundAffinity(A).operator(exclude_self=True)
    V = np.arange(len(X), dtype=float)[:, None]
    B = A - np.diag(np.diag(A))
    np.testing.assert_allclose(op(V), B @ V / B.sum(1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(op.weight_sum, B.sum(1), rtol=1e-12)
    assert bind(Kernel("gaussian"), X).operator().matrix is not None


@pytest.mark.parametrize("n_features", [1, 2])
def test_local_polynomial_knn_keeps_its_sample_index(n_features, monkeypatch):
    """The kNN local polynomial's search structure over the samples (a grid index in 2+ features,
    their sorted order in 1) is built once per binding, not at every predict."""
    from localkit.engine.local_models import loess_grid, polynomial

    X, y = load_diabetes(return_X_y=True)
    X = X[:, 2:2 + n_features]
    built = []
    real_grid, real_argsort = loess_grid.GridIndex, np.argsort
    monkeypatch.setattr(polynomial, "GridIndex", lambda *a: built.append("grid") or real_grid(*a))
    model = localkit.LocalPolynomialRegressor(degree=1, kernel="tricube", n_neighbors=30).fit(X, y)
    first = model.predict(X[:40])
    monkeypatch.setattr(polynomial.np, "argsort", lambda *a, **k: built.append("sort") or real_argsort(*a, **k))
    built.clear()
    np.testing.assert_array_equal(model.predict(X[:40]), first)
    model.predict(X[40:90])
    assert "grid" not in built and "sort" not in built
