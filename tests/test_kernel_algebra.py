"""The kernel algebra (issue 23): kernels on groups of columns, categorical kernels, products.

References: statsmodels' ``KernelReg`` (``reg_type`` "lc" and "ll") and ``KDEMultivariate``
at given bandwidths, on statsmodels' own ``fair`` data set and on generated mixed data, to
1e-10; a product of Gaussians on single columns equals one Gaussian with per-feature
bandwidths, to 1e-12; the categorical kernels their formulas.
"""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

from statsmodels.nonparametric.kernel_density import KDEMultivariate
from statsmodels.nonparametric.kernel_regression import KernelReg

from localkit import Kernel, LocalMeanRegressor, LocalPolynomialRegressor, kernel_density, local_mean, local_sums
from localkit.engine import BoundKernel
from localkit.kernels import resolve_bandwidth

PROFILE = {"c": "gaussian", "u": "aitchison_aitken", "o": "wang_ryzin"}


def product(var_type, bw):
    """statsmodels' ``var_type`` and ``bw`` as a product kernel, one factor per column: the
    one-line spelling, checked here against the factors written out."""
    K = Kernel.from_var_type(var_type, bw)
    factors = [Kernel(PROFILE[t], bandwidth=b, features=[j]) for j, (t, b) in enumerate(zip(var_type, bw))]
    assert repr(K) == " * ".join(map(repr, factors))
    return K


def test_var_type_spelling_is_checked():
    with pytest.raises(ValueError, match="var_type must be a string of the letters"):
        Kernel.from_var_type("cx", [1.0, 0.2])
    with pytest.raises(ValueError, match="bandwidth has 1 entries; var_type='cu' has 2"):
        Kernel.from_var_type("cu", [1.0])
    with pytest.raises(ValueError, match="aitchison_aitken.*in \\[0, 1\\]"):
        Kernel.from_var_type("cu", [1.0, 2.0])
    assert "epanechnikov" in repr(Kernel.from_var_type("co", 0.5, continuous="epanechnikov"))


def _fair():
    from statsmodels.datasets import fair

    data = fair.load_pandas().data
    return data.iloc[:300], data.iloc[300:340]


#: columns of statsmodels' ``fair`` data per var_type (yrs_married, age continuous; occupation,
#: occupation_husb unordered; rate_marriage, religious ordered), and bandwidths
FAIR = {
    "cu": (["yrs_married", "occupation"], [2.5, 0.3]),
    "co": (["age", "rate_marriage"], [4.0, 0.4]),
    "cuo": (["yrs_married", "occupation", "religious"], [3.0, 0.2, 0.5]),
    "uuo": (["occupation", "occupation_husb", "rate_marriage"], [0.3, 0.1, 0.6]),
}


def _mixed(seed=0, n=250, m=40):
    rng = np.random.default_rng(seed)
    X = np.c_[rng.normal(size=n) * 2.0 + 5.0, rng.integers(0, 4, n), rng.integers(1, 6, n), rng.integers(0, 3, n)]
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] + rng.normal(size=n) * 0.2
    Q = np.c_[rng.normal(size=m) * 2.0 + 5.0, rng.integers(0, 4, m), rng.integers(1, 6, m), rng.integers(0, 3, m)]
    return X, y, Q


#: generated mixed data: columns (continuous, unordered 4 levels, ordered 5 levels, unordered 3 levels)
MIXED = {"cu": ([0, 1], [0.7, 0.25]), "co": ([0, 2], [0.5, 0.35]), "cuo": ([0, 1, 2], [0.8, 0.15, 0.4]),
         "uuo": ([1, 3, 2], [0.2, 0.3, 0.45])}


def _compare(X, y, Q, var_type, bw):
    K = product(var_type, bw)
    lc = KernelReg(y, X, var_type=var_type, reg_type="lc", bw=bw, rng=0).fit(Q)[0]  # rng: statsmodels' notice
    ll = KernelReg(y, X, var_type=var_type, reg_type="ll", bw=bw, rng=0).fit(Q)[0]  # of its random-state default
    pdf = KDEMultivariate(X, var_type=var_type, bw=bw, rng=0).pdf(Q)
    ours_lc = LocalMeanRegressor(kernel=K).fit(X, y).predict(Q)
    ours_ll = LocalPolynomialRegressor(kernel=K, degree=1).fit(X, y).predict(Q)
    ours_pdf = kernel_density(Q, X, kernel=K)
    return (np.max(np.abs(ours_lc - lc)), np.max(np.abs(ours_ll - ll)), np.max(np.abs(ours_pdf / pdf - 1.0)))


@pytest.mark.parametrize("var_type", sorted(FAIR))
def test_statsmodels_fair(var_type):
    train, test = _fair()
    cols, bw = FAIR[var_type]
    X, Q = train[cols].to_numpy(float), test[cols].to_numpy(float)
    Q[:, 0] += 0.25  # queries between the levels of a continuous column too
    if var_type[0] != "c":
        Q = test[cols].to_numpy(float)
    lc, ll, pdf = _compare(X, train["affairs"].to_numpy(), Q, var_type, bw)
    assert lc < 1e-10 and ll < 1e-10 and pdf < 1e-10, (lc, ll, pdf)


@pytest.mark.parametrize("var_type", sorted(MIXED))
def test_statsmodels_generated_mixed(var_type):
    X, y, Q = _mixed()
    cols, bw = MIXED[var_type]
    lc, ll, pdf = _compare(X[:, cols], y, Q[:, cols], var_type, bw)
    assert lc < 1e-10 and ll < 1e-10 and pdf < 1e-10, (lc, ll, pdf)


@pytest.mark.parametrize("algorithm", ["auto", "dense", "streamed"])
def test_product_of_gaussians_is_per_feature_bandwidth(algorithm):
    rng = np.random.default_rng(1)
    X, y, Q = rng.normal(size=(300, 3)), rng.normal(size=300), rng.normal(size=(50, 3)) * 1.5
    h = np.array([0.3, 0.7, 1.1])
    K = (Kernel("gaussian", bandwidth=h[0], features=[0]) * Kernel("gaussian", bandwidth=h[2], features=[2])
         * Kernel("gaussian", bandwidth=h[1], features=[1]))
    mine = local_sums(Q, X, y, K, algorithm=algorithm)
    ref = local_sums(Q, X, y, "gaussian", bandwidth=h, algorithm=algorithm)
    np.testing.assert_allclose(mine.mean, ref.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mine.log_weight_sum, ref.log_weight_sum, rtol=0, atol=1e-12)
    np.testing.assert_allclose(kernel_density(Q, X, kernel=K), kernel_density(Q, X, bandwidth=h), rtol=1e-12)
    # a group of two columns with a per-feature bandwidth, times the third
    K2 = Kernel("gaussian", bandwidth=h[:2], features=[0, 1]) * Kernel("gaussian", bandwidth=h[2], features=[2])
    np.testing.assert_allclose(local_mean(Q, X, y, K2, algorithm=algorithm), ref.mean, rtol=0, atol=1e-12)


def test_categorical_formulas():
    X = np.array([[0.0, 1.0], [1.0, 3.0], [2.0, 4.0], [1.0, 1.0]])
    Q = np.array([[1.0, 2.0], [5.0, 1.0]])
    lam = 0.3
    aa = Kernel("aitchison_aitken", bandwidth=lam, features=[0])(Q, X)
    c = 3  # levels of column 0 in the samples
    np.testing.assert_allclose(aa, np.where(Q[:, :1] == X[:, 0], 1 - lam, lam / (c - 1)), rtol=1e-15)
    wr = Kernel("wang_ryzin", bandwidth=lam, features=[1])(Q, X)
    d = np.abs(Q[:, 1:2] - X[:, 1])
    np.testing.assert_allclose(wr, np.where(d == 0, 1 - lam, (1 - lam) / 2 * lam ** d), rtol=1e-15)
    # one smoothing per column: the product of the columns' kernels
    both = Kernel("wang_ryzin", bandwidth=[0.2, 0.5])(Q, X)
    single = [Kernel("wang_ryzin", bandwidth=b, features=[j])(Q, X) for j, b in enumerate([0.2, 0.5])]
    np.testing.assert_allclose(both, single[0] * single[1], rtol=1e-15)
    # the engine's blocks equal the dense matrix
    K = Kernel("aitchison_aitken", bandwidth=0.1, features=[0]) * Kernel("wang_ryzin", bandwidth=0.4, features=[1])
    np.testing.assert_allclose(np.exp(BoundKernel(K, X).log_weights(Q)), K(Q, X), rtol=1e-14)


@pytest.mark.parametrize("name", ["aitchison_aitken", "wang_ryzin"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_compiled_categorical_block_is_the_statement(name, dtype):
    # NumPy's blocks take one compiled pass; the array-API statement (any other namespace) is the
    # definition: the same sums, bit for bit, at lam 0 and 1 (log 0 = -inf) and between
    from localkit.kernels.categorical import CategoricalColumns

    rng = np.random.default_rng(5)
    codes = rng.integers(0, 4, size=(500, 4)).astype(dtype)
    Q = rng.integers(0, 5, size=(60, 4)).astype(dtype)  # level 4 unseen in the samples
    for lam in ([0.02, 0.3, 0.0, 1.0], [0.5, 0.1, 0.9, 0.25]):
        columns = CategoricalColumns(name, np.array(lam), codes)
        got = columns.log_weights(np, Q, codes)
        want = columns._log_k(np, [(Q[:, j:j + 1], codes[None, :, j]) for j in range(4)], Q)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, want)


def test_smoothing_at_zero_and_one():
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 3, 60).astype(float)[:, None]
    y = rng.normal(size=60)
    cell = np.array([y[codes[:, 0] == v].mean() for v in range(3)])
    # lam = 0: the cell means (other levels weigh exp(-inf) = 0)
    for name in ("aitchison_aitken", "wang_ryzin"):
        m = local_mean(np.arange(3.0)[:, None], codes, y, Kernel(name, bandwidth=0.0))
        np.testing.assert_allclose(m, cell, rtol=1e-13)
    # aitchison_aitken, lam = 1: the mean over the other levels
    m = local_mean(np.arange(3.0)[:, None], codes, y, Kernel("aitchison_aitken", bandwidth=1.0))
    np.testing.assert_allclose(m, [y[codes[:, 0] != v].mean() for v in range(3)], rtol=1e-13)
    # wang_ryzin, lam = 1: no weight anywhere, the empty-neighbourhood policy (no NaN)
    out = local_sums(np.arange(3.0)[:, None], codes, y, Kernel("wang_ryzin", bandwidth=1.0))
    assert out.empty.all() and np.all(np.isfinite(out.mean)) and np.all(out.log_weight_sum == -np.inf)
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_sums(np.arange(3.0)[:, None], codes, y, Kernel("wang_ryzin", bandwidth=1.0), empty="raise")


def test_rules_resolved_per_factor():
    rng = np.random.default_rng(3)
    X = np.c_[rng.normal(size=(200, 2)) * [1.0, 5.0], rng.normal(size=200) * 0.1, rng.integers(0, 3, 200)]
    y = rng.normal(size=200)
    K = Kernel("gaussian", bandwidth="scott", features=[0, 1]) * Kernel("gaussian", bandwidth="silverman",
                                                                        features=[2])
    K = K * Kernel("aitchison_aitken", bandwidth=0.3, features=[3])
    reg = LocalMeanRegressor(kernel=K).fit(X, y)
    h01, h2 = resolve_bandwidth("scott", X[:, :2]), resolve_bandwidth("silverman", X[:, 2:3])
    np.testing.assert_allclose(reg.bandwidth_[0], h01, rtol=1e-15)
    assert reg.bandwidth_[1] == h2 and reg.bandwidth_[2] == 0.3
    fixed = (Kernel("gaussian", bandwidth=np.r_[h01, h2], features=[0, 1, 2])
             * Kernel("aitchison_aitken", bandwidth=0.3, features=[3]))
    np.testing.assert_allclose(reg.predict(X[:30]), local_mean(X[:30], X, y, fixed), rtol=0, atol=1e-13)


def test_compact_factor_empty_neighbourhood_and_leave_one_out():
    rng = np.random.default_rng(4)
    X = np.c_[rng.uniform(0, 10, 80), rng.integers(0, 2, 80)]
    y = rng.normal(size=80)
    K = Kernel("epanechnikov", bandwidth=0.3, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.4, features=[1])
    assert K.compact
    Q = np.array([[50.0, 0.0], [X[0, 0], X[0, 1]]])
    out = local_sums(Q, X, y, K)
    assert out.empty[0] and not out.empty[1]
    assert out.mean[0] == y[np.argmax(X[:, 0])]  # the nearest sample in the scaled columns
    # leave-one-out equals the explicit sum without the query's own sample
    W = K(X, X)
    np.fill_diagonal(W, 0.0)
    loo = LocalMeanRegressor(kernel=K).fit(X, y).loo_predict()
    has = W.sum(1) > 0
    np.testing.assert_allclose(loo[has], (W @ y)[has] / W.sum(1)[has], rtol=1e-12)


def test_block_size_and_float32():
    X, y, Q = _mixed(5)
    K = product("cuo", [0.8, 0.15, 0.4])
    ref = local_sums(Q[:, :3], X[:, :3], y, K)
    small = local_sums(Q[:, :3], X[:, :3], y, K, block_size=(7, 13))
    np.testing.assert_allclose(small.mean, ref.mean, rtol=0, atol=1e-13)
    f32 = local_sums(Q[:, :3].astype(np.float32), X[:, :3].astype(np.float32), y.astype(np.float32), K)
    assert f32.mean.dtype == np.float32
    np.testing.assert_allclose(f32.mean, ref.mean, rtol=0, atol=2e-5)


def test_planner_takes_dense_and_says_why_not_others():
    X, y, Q = _mixed(6)
    K = Kernel("epanechnikov", bandwidth=1.0, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    plan = BoundKernel(K, X).explain(Q)
    assert plan.path == "dense"  # 250 samples: no probe, the full pass
    for path in ("compiled", "binned"):
        assert "groups of columns" in plan.reasons[path]
    assert "compact factor" in plan.reasons["neighbors"]
    for algorithm in ("compiled", "binned"):
        with pytest.raises(ValueError, match=f"algorithm='{algorithm}'"):
            local_sums(Q, X, y, K, algorithm=algorithm)
    smooth = Kernel("gaussian", bandwidth=1.0, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    assert "needs a compact factor" in BoundKernel(smooth, X).explain(Q).reasons["neighbors"]
    with pytest.raises(ValueError, match="algorithm='neighbors' cannot compute this pass: needs a compact factor"):
        local_sums(Q, X, y, smooth, algorithm="neighbors")


def _diabetes_mixed():
    """scikit-learn's diabetes data: age, bmi, bp (continuous) and sex as codes 0/1."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    return np.c_[X[:, [0, 2, 3]], (X[:, 1] > 0).astype(float)], y


@pytest.mark.parametrize("profile", ["gaussian", "epanechnikov", "uniform", "tricube"])
def test_knn_factor_on_every_column_is_the_knn_kernel(profile):
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    factor = Kernel(profile, n_neighbors=15, features=list(range(X.shape[1])))
    plain = Kernel(profile, n_neighbors=15)
    for loo in (False, True):
        a, b = local_sums(None, X, y, factor, exclude_self=loo), local_sums(None, X, y, plain, exclude_self=loo)
        np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(a.log_weight_sum, b.log_weight_sum, rtol=0, atol=1e-12)
        np.testing.assert_allclose(BoundKernel(factor, X).weights(X[:40], exclude_self=False),
                                   BoundKernel(plain, X).weights(X[:40]), rtol=0, atol=1e-12)
    # ties of x with other y (lattice data: each row left out alone), as for the plain kNN kernel
    Xd, yd = np.r_[X, X[:30]], np.r_[y, y[:30] + 1.0]
    np.testing.assert_allclose(local_sums(None, Xd, yd, factor, exclude_self=True).mean,
                               local_sums(None, Xd, yd, plain, exclude_self=True).mean, rtol=0, atol=1e-12)


def _knn_times_aa(X, Q, k, lam, profile, loo):
    """The weights of ``Kernel(profile, n_neighbors=k, features=[0, 1, 2]) * Kernel("aitchison_aitken",
    bandwidth=lam, features=[3])`` (two levels) written out; ``loo``: ``Q`` are the first samples."""
    D = np.sqrt(((Q[:, None, :3] - X[None, :, :3]) ** 2).sum(-1))
    Dk = np.where(np.arange(len(X))[None, :] == np.arange(len(Q))[:, None], np.inf, D) if loo else D
    h = np.sort(Dk, axis=1)[:, k - 1]  # the k-th nearest (another sample, leave-one-out)
    u2 = (D / h[:, None]) ** 2
    K_c = np.exp(-u2 / 2) if profile == "gaussian" else np.where(u2 < 1, 1 - u2, 0.0)
    K_u = np.where(Q[:, None, 3] == X[None, :, 3], 1 - lam, lam)  # c = 2 levels: lam / (c - 1)
    W = K_c * K_u
    if loo:
        W[np.arange(len(Q)), np.arange(len(Q))] = 0.0
    return W


@pytest.mark.parametrize("profile", ["gaussian", "epanechnikov"])
def test_knn_factor_times_categorical_is_its_formula(profile):
    X, y = _diabetes_mixed()
    k, lam = 20, 0.3
    K = Kernel(profile, n_neighbors=k, features=[0, 1, 2]) * Kernel("aitchison_aitken", bandwidth=lam, features=[3])
    Q = X[:60]
    for loo in (False, True):
        W = _knn_times_aa(X, Q, k, lam, profile, loo)
        ref = W @ y / W.sum(1)
        if loo:
            mine = LocalMeanRegressor(kernel=K).fit(X, y).loo_predict()[:60]
        else:
            mine = local_mean(Q, X, y, K)
        np.testing.assert_allclose(mine, ref, rtol=1e-12)
    assert BoundKernel(K, X).explain().path == ("neighbors" if profile == "epanechnikov" else "dense")
    # the local linear fit: weighted least squares with those weights, the design centred at the query
    W = _knn_times_aa(X, Q[:20], k, lam, profile, False)
    ref = [np.linalg.lstsq(np.c_[np.ones(len(X)), X - q] * np.sqrt(w)[:, None], y * np.sqrt(w), rcond=None)[0][0]
           for q, w in zip(Q[:20], W)]
    np.testing.assert_allclose(LocalPolynomialRegressor(kernel=K, degree=1).fit(X, y).predict(Q[:20]), ref,
                               rtol=1e-10)


def test_knn_factor_needs_the_host_search():
    X, y = _diabetes_mixed()
    K = Kernel("gaussian", n_neighbors=10, features=[0, 1]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[3])
    with pytest.raises(ValueError, match="n_neighbors: a kNN factor"):
        local_sums(X[:5], X, y, K, algorithm="streamed")
    with pytest.raises(ValueError, match="kNN factor"):
        kernel_density(X[:5], X, kernel=K)


def _fair_mixed():
    from statsmodels.datasets import fair

    data = fair.load_pandas().data
    cols = ["age", "yrs_married", "educ", "children", "occupation", "religious"]
    return data[cols].to_numpy(float), data["affairs"].to_numpy(float)


#: a compact factor on three columns of ``fair`` (about 3% of the samples in its support) times a
#: Gaussian, an unordered and an ordered factor
FAIR_PRODUCT = (Kernel("epanechnikov", bandwidth=[3.0, 3.2, 1.5], features=[0, 1, 2])
                * Kernel("gaussian", bandwidth=1.0, features=[3]) * Kernel("aitchison_aitken", bandwidth=0.3, features=[4])
                * Kernel("wang_ryzin", bandwidth=0.4, features=[5]))


def test_compact_factor_takes_the_neighbour_path_on_fair():
    X, y = _fair_mixed()
    bound = BoundKernel(FAIR_PRODUCT, X)
    plan = bound.explain(exclude_self=True)
    assert plan.path == "neighbors" and "radius search" in plan.reasons["neighbors"]
    X, y = X[:2500], y[:2500]  # the comparisons on a part: the dense path takes seconds on all
    Q = X[::7] + np.array([0.5, 0.3, 0.2, 0.0, 0.0, 0.0])
    for queries, loo in ((None, False), (None, True), (Q, False)):
        a = local_sums(queries, X, y, FAIR_PRODUCT, exclude_self=loo)
        b = local_sums(queries, X, y, FAIR_PRODUCT, exclude_self=loo, algorithm="dense")
        np.testing.assert_array_equal(a.empty, b.empty)
        np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(a.log_weight_sum, b.log_weight_sum, rtol=0, atol=1e-12)
    # the uniform profile's edge, on fair's lattice of values (many samples at exactly h), decided
    # alike on both paths: as the compact factor searched, and as a second compact factor
    for K in (Kernel("uniform", bandwidth=[5.0, 3.5, 3.0], features=[0, 1, 2]) * Kernel("gaussian", features=[3]),
              Kernel("epanechnikov", bandwidth=[3.0, 3.2, 1.5], features=[0, 1, 2])
              * Kernel("uniform", bandwidth=1.0, features=[3])):
        a = local_sums(None, X, y, K, exclude_self=True, algorithm="neighbors")
        b = local_sums(None, X, y, K, exclude_self=True, algorithm="dense")
        np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-12)
        np.testing.assert_allclose(a.log_weight_sum, b.log_weight_sum, rtol=0, atol=1e-12)
    # the blocks of weights, with sample weights
    c = np.random.default_rng(0).uniform(0.5, 2.0, len(X))
    a = BoundKernel(FAIR_PRODUCT, X, sample_weight=c)
    np.testing.assert_allclose(a.sums(Q, y).mean,
                               a.using(dataclasses.replace(a.options, algorithm="dense")).sums(Q, y).mean,
                               rtol=0, atol=1e-12)


def test_compact_knn_factor_times_gaussian_on_fair_with_ties():
    """``fair``'s columns hold many ties: the k-th distance is often 0 (every other observation at
    the query's point of the factor's columns then weighs k(0)) or shared by several samples
    (those at it weigh 0: tricube vanishes there; a row with no weight left is empty)."""
    X, y = _fair_mixed()
    X = X[:1500, [0, 1, 2, 3]]
    y = y[:1500]
    k = 40
    K = Kernel("tricube", n_neighbors=k, features=[0, 1]) * Kernel("gaussian", bandwidth=1.0, features=[3])
    assert BoundKernel(K, X).explain(exclude_self=True).path == "neighbors"
    out = local_sums(None, X, y, K, exclude_self=True, algorithm="dense")  # taken on the neighbour path still
    # the same observation, a copy of the whole row (x and y), is left out (issue 40: ties of x with another y stay)
    same = (X[:, None, :] == X[None, :, :]).all(-1) & (y[:, None] == y[None, :])
    D = np.sqrt(((X[:, None, :2] - X[None, :, :2]) ** 2).sum(-1))
    h = np.sort(np.where(same, np.inf, D), axis=1)[:, k - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(h[:, None] > 0, D / h[:, None], np.where(D == 0, 0.0, np.inf))
    W = np.where(u < 1, (1 - u ** 3) ** 3, 0.0) * np.exp(-0.5 * (X[:, None, 3] - X[None, :, 3]) ** 2)
    W[same] = 0.0
    empty = W.sum(1) == 0
    assert 0 < np.mean(h == 0) < 1 and empty.any()  # both kinds of ties occur here
    np.testing.assert_array_equal(out.empty, empty)
    np.testing.assert_allclose(out.mean[~empty], (W @ y)[~empty] / W.sum(1)[~empty], rtol=1e-12)


def test_repr_and_pickle():
    K = Kernel("gaussian", bandwidth=0.5, features=[0, 1]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[2])
    assert repr(K) == ("Kernel('gaussian', bandwidth=0.5, features=[0, 1]) * "
                       "Kernel('aitchison_aitken', bandwidth=0.2, features=[2])")
    assert repr(pickle.loads(pickle.dumps(K))) == repr(K)
    X, y, Q = _mixed(7)
    reg = LocalMeanRegressor(kernel=K).fit(X[:, :3], y)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(Q[:, :3]), reg.predict(Q[:, :3]))
    from sklearn.base import clone

    assert repr(clone(reg).kernel) == repr(K)


def test_feature_names_from_dataframe():
    import pandas as pd
    X, y, Q = _mixed(8)
    cols = ["x", "kind", "grade", "other"]
    frame, queries = pd.DataFrame(X, columns=cols), pd.DataFrame(Q, columns=cols)
    by_name = Kernel("gaussian", bandwidth=0.7, features=["x"]) * Kernel("wang_ryzin", bandwidth=0.3,
                                                                         features=["grade"])
    by_index = Kernel("gaussian", bandwidth=0.7, features=[0]) * Kernel("wang_ryzin", bandwidth=0.3, features=[2])
    a = LocalMeanRegressor(kernel=by_name).fit(frame, y).predict(queries)
    np.testing.assert_array_equal(a, LocalMeanRegressor(kernel=by_index).fit(X, y).predict(Q))
    with pytest.raises(ValueError, match="no column"):
        LocalMeanRegressor(kernel=Kernel("gaussian", features=["nope"])).fit(frame, y)
    with pytest.raises(ValueError, match="names columns"):
        LocalMeanRegressor(kernel=by_name).fit(X, y)


@pytest.mark.parametrize("make, match", [
    (lambda: Kernel("gaussian", features=[0]) * Kernel("gaussian", features=[0, 1]), "features"),
    (lambda: Kernel("gaussian", features=[0]) * Kernel("gaussian"), "features"),
    (lambda: Kernel("gaussian", features=[0]) * Kernel("softmax"), "softmax"),
    (lambda: Kernel("softmax", features=[0]), "features"),
    (lambda: Kernel("gaussian", features=[0, 0]), "features"),
    (lambda: Kernel("gaussian", features=[-1]), "features"),
    (lambda: Kernel("gaussian", features=[]), "features"),
    (lambda: Kernel("gaussian", metric="cosine", bandwidth=1.0, features=[0]), "metric"),
    (lambda: Kernel("aitchison_aitken", bandwidth=1.5), "bandwidth"),
    (lambda: Kernel("aitchison_aitken", bandwidth=-0.1), "bandwidth"),
    (lambda: Kernel("wang_ryzin", bandwidth="scott"), "bandwidth"),
    (lambda: Kernel("wang_ryzin", bandwidth=0.2, n_neighbors=3), "n_neighbors"),
])
def test_bad_kernels(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_bad_input_at_bind_and_in_estimators():
    X, y, Q = _mixed(9)
    with pytest.raises(ValueError, match="out of range"):
        local_mean(Q, X, y, Kernel("gaussian", features=[7]))
    with pytest.raises(ValueError, match="integer codes"):
        local_mean(Q, X, y, Kernel("aitchison_aitken", bandwidth=0.2, features=[0]))
    with pytest.raises(ValueError, match="single level"):
        local_mean(None, np.ones((5, 1)), np.arange(5.0), Kernel("aitchison_aitken", bandwidth=0.2))
    with pytest.raises(ValueError, match="entries for 2 columns"):
        local_mean(Q, X, y, Kernel("wang_ryzin", bandwidth=[0.1, 0.2, 0.3], features=[1, 2]))
    K = Kernel("gaussian", features=[0]) * Kernel("wang_ryzin", bandwidth=0.2, features=[2])
    with pytest.raises(ValueError, match="query_scale"):
        local_sums(Q, X, y, K, query_scale=np.ones(len(Q)))
    with pytest.raises(ValueError, match="sample_scale"):
        local_sums(Q, X, y, K, sample_scale=np.ones(len(X)))
    for params in ({"n_neighbors": 5}, {"bandwidth": "cv"}, {"metric": "manhattan"}, {"weights": "distance"}):
        with pytest.raises(ValueError, match=next(iter(params))):
            LocalMeanRegressor(kernel=K, **params).fit(X, y)
    with pytest.raises(ValueError, match="carries its own bandwidths"):
        LocalPolynomialRegressor(kernel=K, frac=0.5).fit(X, y)
    with pytest.raises(ValueError, match="group of columns|groups of columns|has a bandwidth per factor"):
        BoundKernel(K, X).squared_distances(Q)


@pytest.mark.parametrize("dtype, atol", [("float64", 1e-12), ("float32", 2e-5)])
def test_streamed_pass_on_tensors(dispatch, dtype, atol):
    import torch
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    X, y, Q = _mixed(11)
    K = (Kernel("epanechnikov", bandwidth=1.5, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
         * Kernel("wang_ryzin", bandwidth=0.3, features=[2]))
    ref = local_sums(Q, X, y, K)
    dens = kernel_density(Q, X, kernel=K)
    t = getattr(torch, dtype)
    for device in devices:
        Xt, yt, Qt = (torch.tensor(a, dtype=t, device=device) for a in (X, y, Q))
        out = local_sums(Qt, Xt, yt, K)
        assert isinstance(out.mean, torch.Tensor) and out.mean.device.type == device
        np.testing.assert_allclose(out.mean.cpu().numpy(), ref.mean, rtol=0, atol=atol)
        np.testing.assert_allclose(out.log_weight_sum.cpu().numpy(), ref.log_weight_sum, rtol=0, atol=atol)
        reg = LocalMeanRegressor(kernel=K).fit(Xt, yt)
        np.testing.assert_allclose(reg.predict(Qt).cpu().numpy(), ref.mean, rtol=0, atol=atol)
        np.testing.assert_allclose(kernel_density(Qt, Xt, kernel=K).cpu().numpy(), dens, rtol=atol * 10)


def test_streamed_pass_on_array_api_strict(dispatch):
    import array_api_strict as xp
    X, y, Q = _mixed(12)
    K = Kernel("gaussian", bandwidth=0.8, features=[0]) * Kernel("wang_ryzin", bandwidth=0.3, features=[2])
    out = local_sums(xp.asarray(Q), xp.asarray(X), xp.asarray(y), K)
    assert type(out.mean).__module__.startswith("array_api_strict")
    np.testing.assert_allclose(np.asarray(out.mean), local_mean(Q, X, y, K), rtol=0, atol=1e-12)


def test_user_guide_page_runs():
    import pathlib
    import re

    page = pathlib.Path(__file__).parent.parent / "docs" / "user_guide" / "composing_kernels.rst"
    blocks = re.findall(r"\.\. code-block:: python\n\n((?:   .*\n|\n)+)", page.read_text())
    assert blocks
    namespace = {}
    for block in blocks:
        exec(compile("\n".join(line[3:] for line in block.splitlines()), str(page), "exec"), namespace)
    assert namespace["nw"].bandwidth_ == (0.4, 0.2, 0.3)
    assert namespace["same"] and namespace["keeps_edge"].n_iter_ >= 2
