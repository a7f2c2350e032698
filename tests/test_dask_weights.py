"""The dask path with sample weights that vanish on whole chunks, against the in-memory engine and
an independent float64 formula, for several sample chunkings (1, 2, 3, 7 rows).

* Leave-one-out (``exclude_self=True``) with a fixed bandwidth: a chunk whose only sample that
  carries weight is one query's own still weighs for every other query of that chunk (it was
  dropped for all of them), and the empty-neighbourhood fallback is the nearest weighted sample
  other than the query itself.
* A compact kNN kernel whose k nearest samples all have zero weight: the empty policy "nearest"
  takes the nearest sample that carries weight, wherever it lies (dask raised).
"""
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask

from localkit.engine import local_sums

CHUNKS = [1, 2, 3, 7]
PROFILES = {  # k(u) of the scaled distance u, by hand
    "gaussian": lambda u: np.exp(-0.5 * u ** 2),
    "epanechnikov": lambda u: np.where(u < 1, 1 - u ** 2, 0.0),
    "triangular": lambda u: np.where(u < 1, 1 - u, 0.0),
    "uniform": lambda u: np.where(u <= 1, 1.0, 0.0),
}


@pytest.fixture(autouse=True)
def synchronous():
    with dask.config.set(scheduler="synchronous"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _nearest_live(X, w, i, q, exclude):
    """The row of the nearest sample with weight (another than ``i`` with ``exclude``, unless it
    is the only one: the engine's fallback)."""
    d = np.linalg.norm(X - q, axis=1)
    d[w <= 0] = np.inf
    if exclude and np.isfinite(np.delete(d, i)).any():
        d[i] = np.inf
    return int(np.argmin(d))


def _formula_fixed(X, y, w, kernel, h):
    """Leave-one-out local mean and log weight sum at every sample, fixed bandwidth."""
    n = len(X)
    mean, log_sum = np.empty(n), np.empty(n)
    for i in range(n):
        K = w * PROFILES[kernel](np.linalg.norm(X - X[i], axis=1) / h)
        K[i] = 0.0
        total = K.sum()
        log_sum[i] = np.log(total) if total > 0 else -np.inf
        mean[i] = K @ y / total if total > 0 else y[_nearest_live(X, w, i, X[i], True)]
    return mean, log_sum


def _formula_knn(Q, X, y, w, kernel, k, exclude):
    """Local mean over exactly the k nearest, ``c_j k(d_j / d_k)`` (queries: the samples with
    ``exclude``), and its log weight sum."""
    mean, log_sum = np.empty(len(Q)), np.empty(len(Q))
    for i, q in enumerate(Q):
        d = np.linalg.norm(X - q, axis=1)
        if exclude:
            d[i] = np.inf
        near = np.argsort(d, kind="stable")[:k]
        K = w[near] * PROFILES[kernel](d[near] / d[near[-1]])
        total = K.sum()
        log_sum[i] = np.log(total) if total > 0 else -np.inf
        mean[i] = K @ y[near] / total if total > 0 else y[_nearest_live(X, w, i, q, exclude)]
    return mean, log_sum


def _dask(Q, X, y, w, rows, **kw):
    ch = lambda a: da.from_array(a, chunks=(rows,) + a.shape[1:])
    out = local_sums(None if Q is None else ch(Q), ch(X), ch(y), sample_weight=ch(w), **kw)
    return np.asarray(out.mean.compute()), np.asarray(out.log_weight_sum.compute())


def _agree(got, ref, formula):
    (gm, gl), (rm, rl), (fm, fl) = got, ref, formula
    # log(1 - d_j / d_k) of a neighbour near the k-th loses digits to the distances' round-off
    np.testing.assert_allclose(gm, rm, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gl, rl, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gm, fm, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gl, fl, rtol=1e-9, atol=1e-12)


@pytest.fixture(scope="module")
def weighted():
    """Points on a line, over half of them (irregularly, five in a row) without weight, so that
    chunks hold a single weighted sample or none."""
    rng = np.random.default_rng(7)
    X = np.sort(rng.uniform(0, 4, 21))[:, None]
    y = rng.normal(size=21)
    w = rng.uniform(0.5, 2.0, 21)
    w[[1, 3, 4, 6, 8, 9, 10, 11, 12, 15, 16, 19]] = 0.0
    return X, y, w


@pytest.mark.parametrize("rows", CHUNKS)
def test_leave_one_out_reproducer(rows):
    X, y, w = np.array([[0.0], [0.1], [0.2], [0.3]]), np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 0, 1, 1])
    kw = {"kernel": "gaussian", "bandwidth": 1.0, "exclude_self": True}
    ref = local_sums(None, X, y, sample_weight=w, **kw)
    got = _dask(X, X, y, w, rows, **kw)
    _agree(got, (ref.mean, ref.log_weight_sum), _formula_fixed(X, y, w, "gaussian", 1.0))
    assert abs(got[0][1] - 2.66001675) < 1e-6  # (1 e^{-.005} 1 + ...): was 3.496, the first chunk dropped


@pytest.mark.parametrize("rows", CHUNKS)
@pytest.mark.parametrize("kernel, h", [("gaussian", 0.4), ("epanechnikov", 0.3), ("uniform", 0.25)])
def test_leave_one_out_with_zero_weights(weighted, rows, kernel, h):
    X, y, w = weighted
    kw = {"kernel": kernel, "bandwidth": h, "exclude_self": True, "algorithm": "dense"}
    ref = local_sums(None, X, y, sample_weight=w, **kw)
    got = _dask(X, X, y, w, rows, **kw)
    _agree(got, (ref.mean, ref.log_weight_sum), _formula_fixed(X, y, w, kernel, h))
    if kernel != "gaussian":
        assert ref.empty.any()  # the fallback to the nearest weighted sample is exercised


@pytest.mark.parametrize("rows", CHUNKS)
def test_leave_one_out_nearest_skips_the_query_itself(rows):
    """Tiny bandwidth: every neighbourhood is empty; the nearest weighted sample is another
    than the query, even where the query's own is the only weighted one of its chunk; with no
    other weighted sample anywhere, its own value (the in-memory fallback)."""
    X = np.array([[0.0], [1.0], [1.5], [3.0], [3.2], [7.0], [7.1]])
    y = np.arange(7.0) * 10
    for w in (np.array([1.0, 0, 1, 0, 1, 1, 0]), np.array([0.0, 0, 0, 1, 0, 0, 0]), np.array([0.0, 1, 0, 0, 0, 0, 1])):
        kw = {"kernel": "epanechnikov", "bandwidth": 0.01, "exclude_self": True}
        ref = local_sums(None, X, y, sample_weight=w, **kw)
        got = _dask(X, X, y, w, rows, **kw)
        _agree(got, (ref.mean, ref.log_weight_sum), _formula_fixed(X, y, w, "epanechnikov", 0.01))


@pytest.mark.parametrize("rows", CHUNKS)
@pytest.mark.parametrize("kernel", ["triangular", "uniform"])
def test_knn_reproducer(rows, kernel):
    X, y, w = np.array([[0.0], [1.0], [2.0], [10.0]]), np.array([1.0, 2.0, 3.0, 4.0]), np.array([0.0, 0, 0, 1])
    Q = np.array([[0.5]])
    ref = local_sums(Q, X, y, kernel, n_neighbors=2, sample_weight=w)
    got = _dask(Q, X, y, w, rows, kernel=kernel, n_neighbors=2)
    _agree(got, (ref.mean, ref.log_weight_sum), _formula_knn(Q, X, y, w, kernel, 2, False))
    assert got[0][0] == 4.0 and got[1][0] == -np.inf


@pytest.mark.parametrize("rows", CHUNKS)
@pytest.mark.parametrize("kernel", ["triangular", "uniform"])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("exclude_self", [False, True])
def test_compact_knn_with_zero_weights(weighted, rows, kernel, k, exclude_self):
    X, y, w = weighted
    Q = X if exclude_self else np.r_[X + 0.013, [[-0.5], [4.5]]]
    kw = {"kernel": kernel, "n_neighbors": k, "exclude_self": exclude_self}
    ref = local_sums(None if exclude_self else Q, X, y, sample_weight=w, **kw)
    got = _dask(Q, X, y, w, rows, **kw)
    _agree(got, (ref.mean, ref.log_weight_sum), _formula_knn(Q, X, y, w, kernel, k, exclude_self))
    assert ref.empty.any()  # some query's k nearest all lack weight (or weigh 0 at the edge)


def test_compact_knn_with_no_weight_anywhere_raises():
    X, y = np.array([[0.0], [1.0], [2.0]]), np.array([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="zero everywhere"):
        _dask(X, X, y, np.zeros(3), 2, kernel="triangular", n_neighbors=1)
