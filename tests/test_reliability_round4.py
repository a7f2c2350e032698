"""Reliability, round 4 (issue 40): each case of the issue against a reference computed here in
float64 (direct formulas, numerical integrals) or by the reference libraries.

The compiled cache's upgrade test is in ``tests/test_compiled_cache.py``.
"""
from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from scipy import integrate

from localkit import Kernel, kernel_density, local_mean


# --- 2. a user profile with a closed support is not the uniform kernel -----------------------


def user_cosine(u2, xp):  # log k finite at u = 1 (-37): the cosine profile, written by a user
    return xp.log(xp.cos(xp.pi * xp.sqrt(u2) / 2))


def user_flat_top(u2, xp):  # 1 up to u = 1/2, then falls to e^-1 at the edge: flat at u = 0 and finite at 1
    return xp.where(u2 <= 0.25, 0.0 * u2, 0.25 - u2)


def _k_direct(log_k, u):
    """``k(u)`` in float64 on the closed support ``u <= 1``, 0 beyond."""
    inside = u <= 1.0
    return np.where(inside, np.exp(log_k(np.where(inside, u * u, 0.0), np)), 0.0)


def _cloud(n=200, m=30, d=1, seed=0):
    rng = np.random.default_rng(seed)
    X, Q = rng.uniform(size=(n, d)), rng.uniform(size=(m, d))
    return X, np.sin(6 * X[:, 0]) + X[:, -1], Q


@pytest.mark.parametrize("log_k", [user_cosine, user_flat_top])
@pytest.mark.parametrize("algorithm", ["auto", "dense", "neighbors", "streamed"])
def test_user_profile_finite_at_the_edge_is_computed_as_stated(log_k, algorithm):
    X, y, Q = _cloud(d=2)
    h = 0.5
    w = _k_direct(log_k, np.sqrt(((Q[:, None] - X[None]) ** 2).sum(-1)) / h)
    K = Kernel(log_k, bandwidth=h, support=1.0)
    np.testing.assert_allclose(local_mean(Q, X, y, K, algorithm=algorithm), w @ y / w.sum(1), rtol=0, atol=1e-12)
    # the density: the sums over the profile's integral, numerically (1-D: 2 int_0^1 k(r) dr h)
    X1, Q1 = X[:, :1], Q[:, :1]
    w1 = _k_direct(log_k, np.abs(Q1 - X1.T) / h)
    mass = 2 * h * integrate.quad(lambda r: float(_k_direct(log_k, np.array(r))), 0, 1, epsabs=1e-13)[0]
    np.testing.assert_allclose(kernel_density(Q1, X1, K, algorithm=algorithm), w1.sum(1) / (len(X1) * mass),
                               rtol=1e-9)


# --- 4. log k is defined up to a constant; a NaN at run time raises --------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("algorithm", ["auto", "dense", "streamed", "binned"])
@pytest.mark.parametrize("offset", [200.0, 1000.0, -1000.0])
def test_a_constant_added_to_log_k_changes_no_local_mean(offset, algorithm, dtype):
    X, y, Q = _cloud(n=300)
    h = 0.1
    w = np.exp(-0.5 * ((Q - X.T) / h) ** 2)  # the Gaussian, in float64
    K = Kernel(lambda u2, xp: offset - u2 / 2, bandwidth=h)
    m = local_mean(Q.astype(dtype), X.astype(dtype), y.astype(dtype), K, algorithm=algorithm)
    assert m.dtype == dtype
    tol = 1e-9 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(m, w @ y / w.sum(1), rtol=0, atol=tol)
    density = kernel_density(Q, X, K, algorithm=algorithm)
    np.testing.assert_allclose(density, w.sum(1) / (len(X) * h * np.sqrt(2 * np.pi)), rtol=1e-8)


def nan_beyond_three(u2, xp):  # the construction's probe looks at u2 in [0, 4] only
    return xp.where(u2 > 9.0, xp.nan, -u2 / 2)


@pytest.mark.parametrize("algorithm", ["auto", "dense", "streamed", "binned"])
def test_nan_from_a_user_profile_at_run_time_raises(algorithm):
    X, y, Q = _cloud(n=300)
    K = Kernel(nan_beyond_three, bandwidth=0.1)
    with pytest.raises(ValueError, match="user profile nan_beyond_three returned NaN at u2"):
        local_mean(Q, X, y, K, algorithm=algorithm)
    with pytest.raises(ValueError, match="returned NaN"):
        kernel_density(Q, X, K, algorithm=algorithm)


def test_nan_from_a_user_profile_in_attention_raises():
    torch = pytest.importorskip("torch")
    from localkit.nn import kernel_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(1, 5, 2, generator=g), 5 * torch.randn(1, 7, 2, generator=g), torch.randn(1, 7, 3, generator=g)
    with pytest.raises(ValueError, match="returned NaN"):
        kernel_attention(q, k, v, kernel=Kernel(nan_beyond_three), bandwidth=1.0)


# --- 3. binned passes: a tolerance met or refused; queries far from the samples ---------------


def _with_outlier(n=100_000):
    rng = np.random.default_rng(3)
    X = np.r_[rng.uniform(size=(n, 1)), [[1e12]]]
    return X, np.sin(6 * X[:, 0]), rng.uniform(size=(40, 1))


@pytest.mark.parametrize("tolerance", [None, 1e-6])
def test_binned_pass_past_its_grid_is_refused(tolerance):
    X, y, Q = _with_outlier()
    with pytest.raises(ValueError, match=r"algorithm='binned'.*tolerance.*error bound.*1e\+14 bandwidths"):
        kernel_density(Q, X, bandwidth=0.01, algorithm="binned", tolerance=tolerance)
    with pytest.raises(ValueError, match=r"algorithm='binned'.*tolerance"):
        local_mean(Q, X, y, "gaussian", 0.01, algorithm="binned", tolerance=tolerance)


def test_binned_pass_past_its_grid_under_auto_is_exact():
    X, y, Q = _with_outlier(20_000)
    d = np.abs(Q - X.T) / 0.01
    w = np.exp(-0.5 * d * d)
    # "auto" under a tolerance may take an approximate exact-path (a truncated tail) that meets it
    np.testing.assert_allclose(kernel_density(Q, X, bandwidth=0.01, tolerance=1e-6),
                               w.sum(1) / (len(X) * 0.01 * np.sqrt(2 * np.pi)), rtol=1e-6)
    np.testing.assert_allclose(local_mean(Q, X, y, "gaussian", 0.01, tolerance=1e-6), w @ y / w.sum(1),
                               rtol=0, atol=1e-6 * np.ptp(y))


def test_binned_2d_density_meets_the_tolerance_or_refuses():
    from sklearn.neighbors import KernelDensity as SkKDE

    rng = np.random.default_rng(0)
    X, Q = rng.normal(size=(2000, 2)), rng.normal(size=(200, 2))
    exact = np.exp(SkKDE(bandwidth=0.6).fit(X).score_samples(Q))
    for tol in [1e-5, 1e-8]:  # the 1,536-point grid's bound over ~12 bandwidths is 5e-4
        with pytest.raises(ValueError, match=rf"tolerance.*is 0.000[0-9]+, not tolerance={tol:g}"):
            kernel_density(Q, X, bandwidth=0.6, algorithm="binned", tolerance=tol)
    for tol in [1e-3, 0.05]:
        binned = kernel_density(Q, X, bandwidth=0.6, algorithm="binned", tolerance=tol)
        dense = exact > 1e-3 * exact.max()  # where the documented relative bound holds
        assert np.max(np.abs(binned[dense] / exact[dense] - 1)) <= tol


def test_binned_uniform_with_a_tolerance_off_the_samples_is_refused():
    X, y, Q = _cloud()
    with pytest.raises(ValueError, match="no error bound off the samples"):
        local_mean(Q, X, y, "uniform", 0.2, algorithm="binned", tolerance=1e-3)
    # at the samples it has one
    local_mean(None, X, y, "uniform", 0.2, algorithm="binned", tolerance=1e-3)


@pytest.mark.parametrize("tolerance", [None, 1e-4, 1e-6])
def test_binned_gaussian_far_from_the_samples_is_the_exact_fit(tolerance):
    from localkit.engine import local_polynomial

    rng = np.random.default_rng(1)
    X = rng.uniform(size=(500, 1))
    y = np.sin(6 * X[:, 0]) + 3 * X[:, 0]
    h = 0.1
    Q = np.r_[rng.uniform(size=(20, 1)), 1.0 + h * np.array([[5.0], [6.0], [7.4], [8.0], [12.0], [40.0]]),
              -h * np.array([[7.0], [20.0]])]
    d = np.abs(Q - X.T) / h
    L = -0.5 * d * d
    w = np.exp(L - L.max(1, keepdims=True))  # in float64, shifted: no query is empty for a Gaussian
    ref = w @ y / w.sum(1)
    binned = local_mean(Q, X, y, "gaussian", h, algorithm="binned", tolerance=tolerance)
    np.testing.assert_allclose(binned, ref, rtol=0, atol=(tolerance or 1e-4) * np.ptp(y))
    # local linear: the far queries are extrapolations of the exact fit (statsmodels' KernelReg 'll')
    exact = local_polynomial(Q, X, y, 1, "gaussian", h, algorithm="dense").values.ravel()
    fit = local_polynomial(Q, X, y, 1, "gaussian", h, algorithm="binned", tolerance=tolerance)
    assert not fit.empty.any()
    got = fit.values.ravel()
    assert np.all(np.abs(got - exact) <= (tolerance or 1e-4) * np.maximum(np.ptp(y), np.abs(exact)))
    far = np.min(d, axis=1) >= 7.4  # the binned sums are below the FFT's round-off there: the exact fit itself
    np.testing.assert_allclose(got[far], exact[far], rtol=1e-10)


# --- 5. leave-one-out on lattice data: a copy is the whole row ---------------------------------


def _lattice(seed=0, n=120):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 12, size=n) / 4.0  # 12 distinct x, each with ~10 distinct y
    return x[:, None], np.sin(x) + 0.3 * rng.normal(size=n)


def _loo_by_rows(X, y, h, degree):
    """The plain leave-one-out error, a fit without row i at x_i (float64, Gaussian weights)."""
    err = []
    for i in range(len(X)):
        keep = np.arange(len(X)) != i
        w = np.exp(-0.5 * ((X[keep, 0] - X[i, 0]) / h) ** 2)
        D = np.column_stack([np.ones(keep.sum()), X[keep, 0] - X[i, 0]])[:, :degree + 1]
        beta = np.linalg.lstsq(D * np.sqrt(w)[:, None], y[keep] * np.sqrt(w), rcond=None)[0]
        err.append(y[i] - beta[0])
    return float(np.mean(np.square(err)))


@pytest.mark.parametrize("degree", [0, 1])
def test_cv_on_lattice_data_scores_the_plain_leave_one_out(degree):
    from localkit import LocalMeanRegressor, LocalPolynomialRegressor

    X, y = _lattice()
    model = (LocalMeanRegressor(kernel="gaussian", bandwidth="cv") if degree == 0 else
             LocalPolynomialRegressor(degree=1, kernel="gaussian", bandwidth="cv")).fit(X, y)
    hs, losses = model.cv_results_["bandwidth"], model.cv_results_["loo_loss"]
    for j in np.linspace(0, len(hs) - 1, 6).astype(int):
        assert losses[j] == pytest.approx(_loo_by_rows(X, y, hs[j], degree), rel=1e-9)
    # copies of whole rows still leave together: the rows twice choose the same bandwidth
    twice = (LocalMeanRegressor(kernel="gaussian", bandwidth="cv") if degree == 0 else
             LocalPolynomialRegressor(degree=1, kernel="gaussian", bandwidth="cv")).fit(np.r_[X, X], np.r_[y, y])
    assert twice.cv_results_["bandwidth"][np.argmin(twice.cv_results_["loo_loss"])] == pytest.approx(
        hs[np.argmin(losses)], rel=1e-6)


def test_leave_one_out_by_rows_in_the_engine():
    from localkit.engine import local_polynomial

    X, y = _lattice(1, 60)
    Y = np.column_stack([y, np.r_[y[:30], y[:30]]])  # a second column with repeated values
    X2 = np.r_[X[:30], X[:30]]  # rows 30..59 copy rows 0..29 in x, and in column 1 of Y, not in column 0
    for V in (y, Y, np.r_[y[:30], y[:30]]):  # lattice, lattice, copies of whole rows
        m = local_mean(None, X2, V, "gaussian", 0.4, exclude_self=True)
        f = local_polynomial(None, X2, V, 0, "gaussian", 0.4, exclude_self=True, algorithm="dense").values
        for i in range(60):
            keep = np.arange(60) != i
            Vr = np.asarray(V).reshape(60, -1)
            keep &= ~np.all(np.c_[X2, Vr] == np.c_[X2, Vr][i], axis=1)  # the copies of row i, x and values
            w = np.exp(-0.5 * ((X2[keep, 0] - X2[i, 0]) / 0.4) ** 2)
            np.testing.assert_allclose(np.reshape(m[i], -1), w @ Vr[keep] / w.sum(), rtol=1e-12)
            np.testing.assert_allclose(np.reshape(f[i], -1), w @ Vr[keep] / w.sum(), rtol=1e-10)


# --- 6. sparse samples and queries in every non-canonical form --------------------------------


def _non_canonical(D, form):
    """``D`` as a sparse matrix of the same values in ``form``."""
    from scipy import sparse

    M = sparse.csr_matrix(D)
    if form == "unsorted":
        M = M.copy()
        for i in range(M.shape[0]):
            a, b = M.indptr[i], M.indptr[i + 1]
            M.indices[a:b], M.data[a:b] = M.indices[a:b][::-1].copy(), M.data[a:b][::-1].copy()
        M.has_sorted_indices = False
    elif form == "duplicates":  # each stored value split in two entries of the same column, unsorted
        rows, cols = M.nonzero()
        vals = np.asarray(M[rows, cols]).ravel()
        order = np.random.default_rng(0).permutation(2 * len(vals))
        r, c, v = np.r_[rows, rows][order], np.r_[cols, cols][order], np.r_[0.25 * vals, 0.75 * vals][order]
        M = sparse.csr_matrix((v, (r, c)), shape=D.shape)  # scipy sums these at construction ...
        indptr = np.r_[0, np.cumsum(np.bincount(r[np.argsort(r, kind="stable")], minlength=D.shape[0]))]
        by_row = np.argsort(r, kind="stable")  # ... so build the CSR arrays by hand, duplicates kept
        M = sparse.csr_matrix((v[by_row], c[by_row], indptr), shape=D.shape)
        assert not M.has_canonical_format
    elif form == "explicit_zeros":  # a stored 0.0 in every row's first empty column
        rows, cols, vals = [], [], []
        for i, row in enumerate(D):
            empty = np.flatnonzero(row == 0)
            keep = np.r_[np.flatnonzero(row), empty[:1]]
            rows += [i] * len(keep)
            cols += list(keep)
            vals += list(row[keep])
        indptr = np.r_[0, np.cumsum(np.bincount(rows, minlength=D.shape[0]))]
        M = sparse.csr_matrix((np.array(vals), np.array(cols), indptr), shape=D.shape)
    elif form == "csc":
        M = sparse.csc_matrix(D)
    elif form == "coo":
        M = sparse.coo_matrix(D)
    return M, D


@pytest.mark.parametrize("form", ["unsorted", "duplicates", "explicit_zeros", "csc", "coo"])
@pytest.mark.parametrize("metric", ["manhattan", "euclidean", "cosine"])
def test_sparse_in_every_form_finds_the_neighbours_of_the_dense_array(form, metric):
    from scipy import sparse
    from sklearn.neighbors import KNeighborsRegressor, RadiusNeighborsRegressor

    from localkit import LocalMeanRegressor

    rng = np.random.default_rng(0)
    D = rng.uniform(size=(80, 8)) * (rng.uniform(size=(80, 8)) < 0.4)
    Qd = rng.uniform(size=(15, 8)) * (rng.uniform(size=(15, 8)) < 0.4)
    for A in (D, Qd):  # no zero row (cosine has no distance there)
        A[np.arange(len(A)), rng.integers(0, 8, len(A))] = rng.uniform(0.5, 1.0, len(A))
    y = rng.normal(size=80)
    Xs, D = _non_canonical(D, form)
    Qs, Qd = _non_canonical(Qd, form)
    before = Xs.copy()
    knn = LocalMeanRegressor(kernel="uniform", n_neighbors=5, metric=metric).fit(Xs, y)
    np.testing.assert_allclose(knn.predict(Qs), KNeighborsRegressor(5, metric=metric, algorithm="brute").fit(D, y)
                               .predict(Qd), rtol=0, atol=1e-12)
    r = 0.3 if metric == "cosine" else 1.5
    radius = LocalMeanRegressor(kernel="uniform", bandwidth=r, metric=metric).fit(Xs, y)
    with warnings.catch_warnings():  # scikit-learn's notice of a query without neighbours (NaN there)
        warnings.simplefilter("ignore", UserWarning)
        ref = RadiusNeighborsRegressor(radius=r, metric=metric, algorithm="brute").fit(D, y).predict(Qd)
    got = radius.predict(Qs)
    live = np.isfinite(ref)
    np.testing.assert_allclose(got[live], ref[live], rtol=0, atol=1e-12)
    # the caller's matrix is not modified
    assert (Xs != before).nnz == 0 and type(Xs) is type(before)
    if sparse.isspmatrix_csr(before):
        np.testing.assert_array_equal(Xs.indices, before.indices)


# --- 7. a bandwidth of 1e20 or more in float32 (c = h^-2 underflows to 0) -------------------------


@pytest.mark.parametrize("kernel", ["gaussian", "softmax", "laplacian", "epanechnikov", "cauchy"])
def test_attention_with_an_enormous_bandwidth_is_the_mean_of_the_values(kernel):
    torch = pytest.importorskip("torch")
    from localkit.nn import kernel_attention

    g = torch.Generator().manual_seed(0)
    # values narrower than the keys: the paths that bound the Gaussian's logits first (the 'math domain error')
    for batch, width in [((1,), 2), ((2, 4), 2), ((1,), 3), ((2, 4), 3)]:
        q, k, v = (torch.randn(*batch, n, w, generator=g) for n, w in ((6, 3), (7, 3), (7, width)))
        mean = v.double().mean(-2, keepdim=True).expand(*batch, 6, width)  # the limit h -> inf: every weight 1
        for h in [torch.tensor(1e20), torch.tensor(1e30), torch.tensor(torch.finfo(torch.float32).max),
                  torch.exp(torch.tensor(47.0)), 1e20, 1e300]:
            out = kernel_attention(q, k, v, kernel=kernel, bandwidth=h)
            torch.testing.assert_close(out.double(), mean, rtol=0, atol=1e-6)


def test_learned_log_bandwidth_near_47_trains():
    """A learned ``log h`` near 47 (``h = 2.6e20``): the output is the values' mean and the gradient
    in ``log h`` is finite (0: the weights no longer change with it)."""
    torch = pytest.importorskip("torch")
    from localkit.nn import kernel_attention

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 6, 3, generator=g), torch.randn(2, 7, 3, generator=g), torch.randn(2, 7, 2, generator=g)
    log_h = torch.full((2, 1, 1), 47.0, requires_grad=True)
    out = kernel_attention(q, k, v, kernel="gaussian", bandwidth=log_h.exp())
    torch.testing.assert_close(out.double(), v.double().mean(-2, keepdim=True).expand(2, 6, 2), rtol=0, atol=1e-6)
    out.sum().backward()
    assert torch.isfinite(log_h.grad).all()


# --- 8. train-lm: usage errors naming the option, a clear message where memory runs out ----------


@pytest.mark.parametrize("argv,option", [(["--device", "meta"], "--device meta"), (["--lr", "1e308"], "--lr"),
                                         (["--lr", "2"], "--lr"), (["--d-model", "100000"], "--d-model 100000"),
                                         (["--batch-size", "100000000"], "--batch-size 100000000")])
def test_train_lm_refuses_what_cannot_train_naming_the_option(argv, option, capsys, monkeypatch):
    pytest.importorskip("torch")
    from localkit.cli import main
    from localkit.nn import train_lm

    monkeypatch.setattr(train_lm, "train", lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(SystemExit) as exc:
        main(["train-lm"] + argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: localkit train-lm") and f"error: {option}" in err and "Traceback" not in err


@pytest.mark.parametrize("failure", ["numpy", "torch", "diverged"])
def test_train_lm_out_of_memory_or_diverging_is_one_line(failure, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    from localkit.nn import train_lm

    def train(*args, **kwargs):
        if failure == "numpy":
            np.empty(2**41, dtype=np.int64)  # 16 TiB: NumPy's allocation error (a MemoryError)
        if failure == "torch":
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory")
        raise train_lm.Diverged("the training loss is nan at step 3: training diverged; lower --lr (now 0.9)")

    monkeypatch.setattr(train_lm, "train", train)
    assert train_lm.main(train_lm._parse(["--batch-size", "8"])) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert ("--batch-size (8)" in err) if failure != "diverged" else ("lower --lr" in err)


# --- 9. columns of strings beside a categorical factor: named, with the fix ---------------------


def _mixed(n=60):
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"x": rng.normal(size=n), "colour": rng.choice(["red", "green", "blue"], size=n)})
    return df, (df.x + (df.colour == "red")).to_numpy()


@pytest.mark.parametrize("form", ["object", "category", "string", "numpy"])
def test_string_columns_in_a_categorical_product_are_named_with_the_fix(form):
    from localkit import LocalMeanRegressor

    df, y = _mixed()
    X = {"object": df, "category": df.assign(colour=df.colour.astype("category")),
         "string": df.assign(colour=df.colour.astype("string")), "numpy": df.to_numpy()}[form]
    K = Kernel("gaussian", 0.5, features=[0]) * Kernel("aitchison_aitken", 0.2, features=[1])
    label = "" if form == "numpy" else " ('colour')"
    with pytest.raises(ValueError, match=rf"X must hold numbers: column 1{re.escape(label)} holds 'blue', 'green', "
                                         r"'red'\..*OrdinalEncoder"):
        LocalMeanRegressor(kernel=K).fit(X, y)
    # encoded as the message says, the fit is statsmodels' mixed-data local constant regression
    from sklearn.preprocessing import OrdinalEncoder
    from statsmodels.nonparametric.kernel_regression import KernelReg

    codes = df.assign(colour=OrdinalEncoder().fit_transform(df[["colour"]])[:, 0]).to_numpy()
    model = LocalMeanRegressor(kernel=K).fit(codes, y)
    with pytest.raises(ValueError, match="column 1"):  # at predict too
        model.predict(X)
    ref = KernelReg(y, codes, var_type="cu", reg_type="lc", bw=[0.5, 0.2], rng=0).fit(codes)[0]
    np.testing.assert_allclose(model.predict(codes), ref, rtol=1e-10)
