"""KernelDensity and LocalPolynomialRegressor bind their training set once, in ``fit`` (a later
call builds no BoundKernel, and gives what one fresh engine call gives, bit for bit), and a fit on
a dask array keeps the samples on the cluster (KernelDensity) or refuses by name
(LocalPolynomialRegressor), computing nothing whole."""
import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_iris
from sklearn.neighbors import KernelDensity as SkKernelDensity

from localkit import Kernel, KernelDensity, LocalPolynomialRegressor, kernel_density
from localkit.engine import local_polynomial
from localkit.engine import BoundKernel
from localkit.engine import bound as bound_module


@pytest.fixture
def count_binds(monkeypatch):
    """How many times a BoundKernel is built."""
    calls = []
    original = BoundKernel.__init__

    def counting(self, *args, **kwargs):
        calls.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(bound_module.BoundKernel, "__init__", counting)
    return calls


DENSITIES = [
    lambda: KernelDensity(kernel="gaussian", bandwidth="scott"),
    lambda: KernelDensity(kernel="epanechnikov", bandwidth=0.6),
    lambda: KernelDensity(kernel="gaussian", bandwidth=0.5, metric="mahalanobis"),
    lambda: KernelDensity(kernel=Kernel("gaussian", bandwidth=0.4, features=[0, 1])
                          * Kernel("epanechnikov", bandwidth=0.9, features=[2, 3])),
]


@pytest.mark.parametrize("make", DENSITIES)
def test_kernel_density_scores_without_rebinding(make, count_binds):
    X = load_iris().data
    kde = make().fit(X[::2])
    count_binds.clear()
    got = [kde.score_samples(X[rows]) for rows in (slice(1, 4), slice(1, None, 2), slice(0, 1))]
    assert kde.score(X[1::2]) == pytest.approx(np.sum(got[1]), rel=1e-12)
    assert len(count_binds) == 0
    # what kernel_density gives in one call on the same samples (its own binding), bit for bit
    if kde._metric_map is None:
        want = kernel_density(X[1::2], X[::2], kde.kernel_, log=True)
        np.testing.assert_array_equal(got[1], want)


def test_kernel_density_binding_equals_scikit_learn():
    X = load_iris().data
    for kernel in ("gaussian", "epanechnikov", "exponential"):
        ours = KernelDensity(kernel=kernel, bandwidth=0.7).fit(X[::2]).score_samples(X[1::2])
        ref = SkKernelDensity(kernel=kernel, bandwidth=0.7).fit(X[::2]).score_samples(X[1::2])
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


POLYNOMIALS = [
    lambda: LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.08),
    lambda: LocalPolynomialRegressor(kernel="biweight", bandwidth=0.5, degree=2),
    lambda: LocalPolynomialRegressor(kernel="gaussian", frac=0.3),
    lambda: LocalPolynomialRegressor(kernel="gaussian", bandwidth="scott", robust_iters=2),
]


@pytest.mark.parametrize("make", POLYNOMIALS)
def test_local_polynomial_predicts_without_rebinding(make, count_binds):
    X, y = load_diabetes(return_X_y=True)
    X = X[:, [0, 2, 3]]  # age, bmi, blood pressure (sex, binary, has no curvature)
    reg = make().fit(X[:300], y[:300])
    count_binds.clear()
    got = reg.predict(X[300:])
    reg.predict(X[:2])
    reg.predict_derivative(X[300:310])
    assert len(count_binds) == 0
    # the fit of one engine call, which binds the samples itself
    want = local_polynomial(X[300:], X[:300], y[:300], reg.degree, reg.kernel_,
                            sample_weight=reg._weights()).values[:, 0]
    np.testing.assert_array_equal(got, want)


def test_local_polynomial_refuses_a_bound_kernel_of_another_kernel():
    X, y = load_diabetes(return_X_y=True)
    bound = BoundKernel(Kernel("gaussian", bandwidth=0.1), X)
    with pytest.raises(ValueError, match="bound is"):
        local_polynomial(X[:3], X, y, 1, Kernel("gaussian", bandwidth=0.2), bound=bound)
    rule = BoundKernel(Kernel("gaussian", bandwidth="scott"), X)
    with pytest.raises(ValueError, match="resolved on the weighted samples"):
        local_polynomial(X[:3], X, y, 1, rule.kernel, bound=rule, sample_weight=np.ones(len(X)))


# -- dask: nothing computed whole ---------------------------------------------------------------
class _Whole(da.Array):
    """A dask array that refuses to be computed or converted whole."""

    def __dask_postcompute__(self):
        raise AssertionError("the samples were computed whole")

    def __array__(self, *args, **kwargs):
        raise AssertionError("the samples were converted to NumPy whole")


def _whole(x, rows):
    a = da.from_array(x, chunks=(rows,) + x.shape[1:])
    return _Whole(a.dask, a.name, a.chunks, meta=a._meta)


def _rows_returned(out, d):
    """Rows of ``d``-column 2-D arrays among a scheduler's results (nested lists and tuples)."""
    if isinstance(out, (list, tuple)):
        return sum(_rows_returned(o, d) for o in out)
    return out.shape[0] if isinstance(out, np.ndarray) and out.ndim == 2 and out.shape[1] == d else 0


@pytest.fixture
def guarded_scheduler():
    """dask's threaded scheduler, refusing any compute that brings as many sample rows to the
    client as the samples have (the samples computed whole, by whatever derived array)."""
    limit = {}

    def get(dsk, keys, **kwargs):
        out = dask.threaded.get(dsk, keys, **kwargs)
        if "n" in limit and _rows_returned(out, limit["d"]) >= limit["n"]:
            raise AssertionError("a compute returned every sample to the client")
        return out

    with dask.config.set(scheduler=get):
        yield limit


def test_our_guards_catch_a_whole_compute(guarded_scheduler):
    X = load_iris().data
    guarded_scheduler.update(n=len(X), d=4)
    W = _whole(X, 40)
    with pytest.raises(AssertionError, match="whole"):
        W.compute()
    with pytest.raises(AssertionError, match="whole"):
        np.asarray(W)
    with pytest.raises(AssertionError, match="every sample"):
        (W + 0.0).compute()


@pytest.mark.parametrize("params", [dict(bandwidth="scott"), dict(kernel="epanechnikov", bandwidth=0.8),
                                    dict(kernel=Kernel("gaussian", bandwidth="silverman", features=[0, 1])
                                         * Kernel("gaussian", bandwidth=0.5, features=[2, 3]))])
def test_kernel_density_fits_on_dask_without_computing_the_samples(guarded_scheduler, params):
    X = load_iris().data
    guarded_scheduler.update(n=len(X), d=4)
    want = KernelDensity(**params).fit(X)
    kde = KernelDensity(**params).fit(_whole(X, 40))
    assert isinstance(kde.X_fit_, da.Array)
    np.testing.assert_allclose(np.ravel(kde.bandwidth_ if not isinstance(kde.bandwidth_, tuple) else
                                        np.concatenate([np.ravel(b) for b in kde.bandwidth_])),
                               np.ravel(want.bandwidth_ if not isinstance(want.bandwidth_, tuple) else
                                        np.concatenate([np.ravel(b) for b in want.bandwidth_])), rtol=1e-12)
    lazy = kde.score_samples(X[:30])
    assert isinstance(lazy, da.Array) and lazy.dtype == np.float64
    np.testing.assert_allclose(lazy.compute(), want.score_samples(X[:30]), rtol=1e-12)
    for method, args in [("sample", ()), ("cdf", ([0.0],)), ("loo_log_likelihood", ())]:
        with pytest.raises(ValueError, match="not available on dask arrays"):
            getattr(kde, method)(*args)


def test_kernel_density_refuses_cv_and_mapped_metrics_on_dask():
    X = da.from_array(load_iris().data, chunks=40)
    with pytest.raises(ValueError, match="bandwidth='cv' is not available on dask"):
        KernelDensity(bandwidth="cv").fit(X)
    with pytest.raises(ValueError, match="metric='mahalanobis' is not available on dask"):
        KernelDensity(metric="mahalanobis", bandwidth=0.5).fit(X)


def test_local_polynomial_refuses_dask_by_name(guarded_scheduler):
    X, y = load_diabetes(return_X_y=True)
    guarded_scheduler.update(n=len(X), d=X.shape[1])
    with pytest.raises(ValueError, match="LocalPolynomialRegressor.fit is not available on dask arrays"):
        LocalPolynomialRegressor(bandwidth=0.1).fit(_whole(X, 100), y)
