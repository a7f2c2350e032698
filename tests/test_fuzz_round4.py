"""Fuzzing the classes of issue 40, so that they cannot come back unseen: user profiles (closed
supports, constant offsets, NaN at run time), binned passes with outliers and queries out of the
data's range at every tolerance, lattice data (ties of ``x`` with distinct ``y``) in every
leave-one-out, sparse matrices in every non-canonical form, and upgrades of the compiled cache.

Every oracle is a direct float64 formula or a reference computed on the same data another way
(the dense array for a sparse matrix, the exact pass for a binned one)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fuzz_common import examples

from localkit import Kernel, LocalMeanRegressor, kernel_density, local_mean
from localkit.engine import local_polynomial
from localkit.engine.passes.binned import FLOOR, TOLERANCE

TOLERANCES = (None, 1e-2, 1e-4, 1e-6, 1e-8)


# --- user profiles ---------------------------------------------------------------------------------------------------

def _family(kind, offset, a):
    """A user profile ``log k(u2)`` and its support: ``offset`` is a constant added to ``log k``."""
    if kind == "closed_cosine":  # finite at u = 1: cos(a pi u / 2), a < 1
        return (lambda u2, xp: offset + xp.log(xp.cos(a * xp.pi * xp.sqrt(u2) / 2))), 1.0
    if kind == "closed_poly":  # 1 - a u^2, a < 1: k(1) = 1 - a > 0
        return (lambda u2, xp: offset + xp.log1p(-a * u2)), 1.0
    if kind == "gaussian":
        return (lambda u2, xp: offset - a * u2), None
    return (lambda u2, xp: offset - a * xp.sqrt(u2)), None  # laplacian-like


def _direct(log_k, support, Q, X, h):
    u2 = ((Q[:, None, :] - X[None]) ** 2).sum(-1) / h ** 2
    L = log_k(np.where(u2 <= 1.0, u2, 0.0) if support else u2, np)
    L = np.where(u2 <= 1.0, L, -np.inf) if support else L
    top = L.max(axis=1, keepdims=True)
    return np.exp(L - np.where(np.isfinite(top), top, 0.0))


@settings(max_examples=examples())
@given(seed=st.integers(0, 2**16), kind=st.sampled_from(["closed_cosine", "closed_poly", "gaussian", "laplacian"]),
       offset=st.sampled_from([0.0, 37.0, 200.0, 1000.0, -1000.0, 1e5]), a=st.floats(0.2, 0.95),
       d=st.integers(1, 3), dtype=st.sampled_from(["float64", "float32"]),
       algorithm=st.sampled_from(["auto", "dense", "streamed", "neighbors"]))
def test_user_profiles_are_computed_as_stated(seed, kind, offset, a, d, dtype, algorithm):
    log_k, support = _family(kind, offset, a)
    if support is None and algorithm == "neighbors":
        algorithm = "dense"  # the neighbour path takes compact kernels only
    rng = np.random.default_rng(seed)
    X, Q = rng.uniform(size=(60, d)), rng.uniform(size=(9, d))
    y = np.sin(5 * X[:, 0]) + X[:, -1]
    h = 0.6
    w = _direct(log_k, support, Q, X, h)
    K = Kernel(log_k, bandwidth=h, support=support)
    m = local_mean(Q.astype(dtype), X.astype(dtype), y.astype(dtype), K, algorithm=algorithm)
    live = w.sum(1) > 0
    # float32: the user's own sum offset + log k rounds by eps |offset| before any pass sees it
    tol = 1e-9 if dtype == "float64" else 1e-5 + 2 * np.finfo(np.float32).eps * abs(offset)
    np.testing.assert_allclose(m[live], (w @ y / w.sum(1))[live], rtol=0, atol=tol * np.ptp(y))


@settings(max_examples=examples(0.5))
@given(seed=st.integers(0, 2**16), start=st.floats(4.5, 30.0), algorithm=st.sampled_from(["auto", "dense", "streamed",
                                                                                          "binned"]),
       function=st.sampled_from(["local_mean", "kernel_density"]))
def test_nan_from_a_user_profile_beyond_the_probe_raises(seed, start, algorithm, function):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(40, 1))
    Q = np.r_[rng.uniform(size=(3, 1)), [[1.0 + 1.05 * math.sqrt(start) * 0.1]]]  # one query where u2 > start
    K = Kernel(lambda u2, xp: xp.where(u2 > start, xp.nan, -u2 / 2), bandwidth=0.1)
    with pytest.raises(ValueError, match="returned NaN at u2"):
        if function == "local_mean":
            local_mean(Q, X, X[:, 0], K, algorithm=algorithm)
        else:
            kernel_density(Q, X, K, algorithm=algorithm)


# --- binned passes: outliers, queries out of range, every tolerance --------------------------------------------------

def _log_k(kernel, Q, X, h):
    """``log k(|q - x|^2 / h^2)`` in float64, from the differences (the profile's own statement)."""
    u2 = ((Q[:, None, :] - X[None]) ** 2).sum(-1) / h ** 2
    return Kernel(kernel).profile.log_k(u2)


@settings(max_examples=examples())
@given(seed=st.integers(0, 2**16), d=st.integers(1, 2), outlier=st.sampled_from([None, 3.0, 30.0, 1e4, 1e12]),
       far=st.sampled_from([0.0, 5.0, 8.0, 40.0]), tolerance=st.sampled_from(TOLERANCES),
       kernel=st.sampled_from(["gaussian", "cauchy", "epanechnikov", "biweight"]))
def test_binned_meets_the_tolerance_or_refuses(seed, d, outlier, far, tolerance, kernel):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(300, d))
    if outlier is not None:
        X = np.r_[X, np.full((1, d), 1.0 + outlier)]
    y = np.sin(6 * X[:, 0])
    h = 0.1
    Q = np.r_[rng.uniform(size=(12, d)), np.full((2, d), 1.0 + far * h), np.full((1, d), -far * h)]
    try:
        m = local_mean(Q, X, y, kernel, h, algorithm="binned", tolerance=tolerance)
    except ValueError as exc:  # refused: the reason names the tolerance and the bound
        assert "algorithm='binned' cannot compute this pass: tolerance" in str(exc)
        return
    L = _log_k(kernel, Q, X, h)
    top = L.max(axis=1, keepdims=True)
    w = np.exp(L - np.where(np.isfinite(top), top, 0.0))
    W = np.exp(top[:, 0]) * w.sum(1)  # the exact weight sums
    exact = w @ y / np.where(w.sum(1) > 0, w.sum(1), 1.0)
    tol = TOLERANCE if tolerance is None else tolerance
    live = W > 0
    # the documented bound at any query: the local mean's error times its weight sum, relative to
    # the largest weight sum (:mod:`localkit.engine.passes.binned`), for the tolerance met
    if tolerance is not None:
        assert np.all(np.abs(m - exact)[live] * W[live] <= tol * W.max() * np.ptp(y) + 1e-12)
    # far from the samples (below the FFT's round-off at the tolerance), a profile without a support is exact
    unresolved = live & (W <= FLOOR * len(X) / tol) & (kernel in ("gaussian", "cauchy"))
    np.testing.assert_allclose(m[unresolved], exact[unresolved], rtol=0, atol=1e-9 * np.ptp(y))


# --- lattice data in every leave-one-out -------------------------------------------------------------------------------

@st.composite
def lattice(draw):
    """Samples on a few distinct x, each with several distinct y, and some copies of whole rows."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    levels = draw(st.integers(2, 6))
    n = draw(st.integers(8, 30))
    x = rng.integers(0, levels, size=n).astype(float) / levels
    y = np.round(rng.normal(size=n), 1)  # rounding: some rows repeat x and y both
    copies = rng.integers(0, n, size=draw(st.integers(0, 4)))
    return np.r_[x, x[copies]][:, None], np.r_[y, y[copies]]


def _loo_direct(X, y, kernel, h):
    """Leave-one-out by whole rows: row i leaves out every row equal to it in x and y."""
    out = np.empty(len(X))
    L = _log_k(kernel, X, X, h)
    for i in range(len(X)):
        keep = ~((X[:, 0] == X[i, 0]) & (y == y[i]))
        Li = np.where(keep, L[i], -np.inf)
        w = np.exp(Li - Li.max()) if np.isfinite(Li.max()) else np.zeros(len(X))
        out[i] = w @ y / w.sum() if w.sum() > 0 else np.nan
    return out


@pytest.mark.filterwarnings("ignore::localkit.exceptions.EmptyNeighbourhoodWarning")  # empty="nan" is asked for
@settings(max_examples=examples())
@given(data=lattice(), kernel=st.sampled_from(["gaussian", "epanechnikov", "tricube", "laplacian"]),
       h=st.sampled_from([0.15, 0.4, 2.0]), algorithm=st.sampled_from(["auto", "dense", "neighbors", "streamed"]))
def test_every_leave_one_out_leaves_out_whole_rows(data, kernel, h, algorithm):
    X, y = data
    if algorithm == "neighbors" and kernel in ("gaussian", "laplacian"):
        algorithm = "dense"
    ref = _loo_direct(X, y, kernel, h)
    live = np.isfinite(ref)
    if algorithm == "streamed" and np.unique(np.c_[X, y], axis=0).shape[0] < len(X):
        with pytest.raises(ValueError, match="repeat a row"):  # copies of rows: the streamed pass refuses, saying so
            local_mean(None, X, y, kernel, h, exclude_self=True, algorithm=algorithm, empty="nan")
        return
    m = local_mean(None, X, y, kernel, h, exclude_self=True, algorithm=algorithm, empty="nan")
    np.testing.assert_allclose(m[live], ref[live], rtol=1e-10, atol=1e-12)
    fit = local_polynomial(None, X, y, 0, kernel, h, exclude_self=True, algorithm="dense")
    np.testing.assert_allclose(fit.values[live, 0], ref[live], rtol=1e-9, atol=1e-12)


# --- sparse matrices in every non-canonical form -----------------------------------------------------------------------

def _sparse_form(D, form, rng):
    from scipy import sparse

    M = sparse.csr_matrix(D)
    if form == "unsorted":
        M = M.copy()
        for i in range(M.shape[0]):
            a, b = M.indptr[i], M.indptr[i + 1]
            perm = a + rng.permutation(b - a)
            M.indices[a:b], M.data[a:b] = M.indices[perm].copy(), M.data[perm].copy()
        M.has_sorted_indices = False
        return M
    if form == "duplicates":  # every stored value in two entries (halves), in random order within the row
        indptr, indices, data = [0], [], []
        for i in range(M.shape[0]):
            a, b = M.indptr[i], M.indptr[i + 1]
            cols, vals = np.r_[M.indices[a:b], M.indices[a:b]], np.r_[0.5 * M.data[a:b], 0.5 * M.data[a:b]]
            perm = rng.permutation(len(cols))
            indices += list(cols[perm])
            data += list(vals[perm])
            indptr.append(len(indices))
        return sparse.csr_matrix((np.array(data), np.array(indices, dtype=np.int32), np.array(indptr)), shape=D.shape)
    return {"csc": sparse.csc_matrix, "coo": sparse.coo_matrix, "csr": sparse.csr_matrix,
            "lil": sparse.lil_matrix}[form](D)


@settings(max_examples=examples())
@given(seed=st.integers(0, 2**16), form=st.sampled_from(["unsorted", "duplicates", "csc", "coo", "lil"]),
       metric=st.sampled_from(["manhattan", "euclidean", "cosine"]), k=st.integers(1, 6),
       density=st.floats(0.1, 0.9))
def test_sparse_in_every_form_equals_the_dense_array(seed, form, metric, k, density):
    rng = np.random.default_rng(seed)
    D = rng.uniform(1.0, 2.0, size=(40, 6)) * (rng.uniform(size=(40, 6)) < density)
    Qd = rng.uniform(1.0, 2.0, size=(8, 6)) * (rng.uniform(size=(8, 6)) < density)
    for A in (D, Qd):  # a powers-of-two value in one column of each row: halves add up exactly, no zero row
        A[np.arange(len(A)), rng.integers(0, 6, len(A))] = 2.0 ** rng.integers(-2, 3, len(A))
    y = rng.normal(size=40)
    Xs, Qs = _sparse_form(D, form, rng), _sparse_form(Qd, form, rng)
    dense = LocalMeanRegressor(kernel="uniform", n_neighbors=k, metric=metric).fit(D, y)
    sparse_fit = LocalMeanRegressor(kernel="uniform", n_neighbors=k, metric=metric).fit(Xs, y)
    np.testing.assert_allclose(sparse_fit.predict(Qs), dense.predict(Qd), rtol=0, atol=1e-12)
    np.testing.assert_allclose(sparse_fit.predict(Qs), sparse_fit.predict(_sparse_form(Qd, "csr", rng)),
                               rtol=0, atol=1e-12)


# --- the compiled cache across upgrades ------------------------------------------------------------------------------

@settings(max_examples=examples(0.2))
@given(first=st.integers(-5, 5), second=st.integers(-5, 5))
def test_the_compiled_cache_follows_every_upgrade_of_a_table(tmp_path_factory, first, second):
    """The probe modules of ``tests/test_compiled_cache.py`` in a copied package: a table
    rewritten with ``first``, then ``second``; the cached caller never returns the old table's value."""
    from test_compiled_cache import _PASS, _PROBE, _TABLE, _copy_package, _run

    root = _copy_package(tmp_path_factory.mktemp("site"))
    (root / "localkit" / "_probe_pass.py").write_text(_PASS)
    for value in (first, second):
        (root / "localkit" / "_probe_table.py").write_text(_TABLE.replace("return 1.0 - u\n", f"return {value}.0 - u\n"))
        assert _run(root, _PROBE)["value"] == value - 0.5
