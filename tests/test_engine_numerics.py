"""Engine numerics: one statement per profile, data far from the origin, extreme bandwidths,
scale-free bandwidth rules, float32 kept."""
import numpy as np
import pytest
import torch
from scipy.spatial.distance import cdist

from localkit import local_mean, local_sums
from localkit.kernels import PROFILES
from localkit.kernels.bandwidth import resolve_bandwidth
from localkit.nn._profiles import LOG_PROFILES

U2 = np.array([0.0, 1e-300, 1e-12, 0.09, 0.25, 0.81, 0.999999, 1.0, 1.000001, 4.0, 1e6, np.inf])


def exact_local_mean(Q, X, v, name, h):
    """The definition, in float64 with exact (difference) distances and a row-max shift; NaN where
    no sample lies inside a compact kernel's support (no local mean)."""
    u2 = cdist(np.asarray(Q, dtype=float), np.asarray(X, dtype=float), "sqeuclidean") / h**2
    L = PROFILES[name].log_k(u2)
    top = L.max(axis=1)
    alive = top > -np.inf
    W = np.exp(L[alive] - top[alive, None])
    out = np.full(len(L), np.nan)
    out[alive] = (W @ np.asarray(v, dtype=float)) / W.sum(axis=1)
    return out


def test_numpy_square_root_of_the_profiles_equals_the_guarded_one():
    """NumPy's profiles take ``sqrt(max(u2, 0))`` unguarded (no gradient at 0 to protect): the
    values of the guarded statement (``_safe_sqrt``) on NumPy, negative and NaN inputs to 0, arrays
    and scalars."""
    import types

    from localkit.kernels.profiles import _host_sqrt, _safe_sqrt

    u2 = np.array([-1.0, -0.0, 0.0, 1e-300, 0.25, 2.0, 1e300, np.inf, np.nan])
    guarded = types.FunctionType(_safe_sqrt.__code__, {"xp": np})
    np.testing.assert_array_equal(_host_sqrt(u2), guarded(u2))
    u2 = np.array([-1.0, 0.0, 1e-30, 2.0, 3e38, np.inf, np.nan], dtype=np.float32)
    assert _host_sqrt(u2).dtype == np.float32
    np.testing.assert_array_equal(_host_sqrt(u2), guarded(u2))
    assert [float(_host_sqrt(np.float64(v))) for v in (-2.0, 4.0)] == [0.0, 2.0]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_three_evaluations_of_a_profile_agree(name):
    p = PROFILES[name]
    ref = p.log_k(U2)
    via_torch = p.log_k_for(torch)(torch.tensor(U2)).numpy()
    # the same statement; the libraries' sqrt/log1p may differ by an ulp, which log(1 - u^a)
    # amplifies by its condition number 1 / (1 - u^a) ~ 1e6 next to the edge of the support
    for other in (via_torch, LOG_PROFILES[name](torch.tensor(U2)).numpy()):
        np.testing.assert_allclose(other, ref, rtol=1e-9, atol=0)
    # and the values are the documented formulas
    u = np.sqrt(U2[:8])  # inside every support (u <= 1)
    formula = {"gaussian": np.exp(-u**2 / 2), "epanechnikov": 1 - u**2, "tricube": (1 - u**3) ** 3,
               "biweight": (1 - u**2) ** 2, "triweight": (1 - u**2) ** 3, "triangular": 1 - u,
               "uniform": np.ones_like(u), "cosine": np.cos(np.pi * u / 2), "laplacian": np.exp(-u),
               "cauchy": 1 / (1 + u**2),
               "parzen": np.where(u <= 0.5, 1 - 6 * u**2 + 6 * u**3, 2 * (1 - u) ** 3)}[name]
    np.testing.assert_allclose(np.exp(ref[:8]), formula, rtol=1e-12, atol=1e-15)
    # the direct weights (no log/exp: the compiled compact pass) are the same function, edges included
    direct = p.k(U2)
    # (to one ulp: NumPy's SIMD exp on AVX-512 machines and the libm exp numba calls may round the
    # Gaussian's exp(-u2/2) apart by one ulp, 1.3e-16 measured; polynomial forms agree bit for bit)
    np.testing.assert_array_max_ulp(np.array([p.compiled_k(float(u)) for u in U2]), direct, maxulp=1)
    np.testing.assert_allclose(direct, np.exp(ref), rtol=1e-14, atol=1e-300)
    np.testing.assert_array_equal(direct == 0, np.exp(ref) == 0)
    # gradients stay finite everywhere, also on the boundary of a compact support
    t = torch.tensor(U2[:-1], requires_grad=True)
    p.log_k_for(torch)(t).sum().backward()
    assert torch.isfinite(t.grad).all()


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-4), (np.float64, 1e-9)])
@pytest.mark.parametrize("name", ["gaussian", "laplacian", "cauchy"])
def test_weights_flushed_below_the_float_range_leave_the_mean_as_the_definition(dtype, tol, name):
    """Diabetes in 3 standardised features, bandwidths at which most log-weights fall below
    ``log(tiny)`` of the largest in their row (flushed to 0 before ``exp``), on both passes."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = (X[:, :3] - X[:, :3].mean(0)) / X[:, :3].std(0)
    v = (y - y.mean()) / y.std()
    for h in (0.05, 0.4):
        L = PROFILES[name].log_k(cdist(X[::4], X, "sqeuclidean") / h**2)
        if name == "gaussian" and h < 0.1:  # the flush has something to do
            assert np.mean(L - L.max(axis=1, keepdims=True) < np.log(np.finfo(dtype).tiny)) > 0.2
        ref = exact_local_mean(X[::4], X, v, name, h)
        for algorithm in ("dense", "auto"):
            got = local_mean(X[::4].astype(dtype), X.astype(dtype), v.astype(dtype), name, h, algorithm=algorithm)
            np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


@pytest.mark.parametrize("dtype, tol", [(np.float32, 1e-4), (np.float64, 1e-9)])
@pytest.mark.parametrize("name", ["gaussian", "epanechnikov", "laplacian", "tricube"])
def test_far_from_the_centre_matches_the_exact_definition(dtype, tol, name):
    """A sine sampled on [-50, 50] with h = 0.02 (2,500 bandwidths from the centre)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-50, 50, 3000)
    q = rng.uniform(-50, 50, 400)
    h = 0.05 if PROFILES[name].compact else 0.02
    ref = exact_local_mean(q[:, None], x[:, None], np.sin(x), name, h)
    got = local_mean(q.astype(dtype)[:, None], x.astype(dtype)[:, None], np.sin(x).astype(dtype), name, h)
    assert got.dtype == dtype
    finite = np.isfinite(ref)  # compact kernels: empty neighbourhoods take the nearest value
    np.testing.assert_allclose(got[finite], ref[finite], rtol=0, atol=tol)


def test_two_clusters_far_apart_with_a_tiny_bandwidth_float64():
    rng = np.random.default_rng(1)
    X = np.r_[rng.normal(0, 1e-6, (150, 2)), rng.normal(0, 1e-6, (150, 2)) + 1e3]
    v = rng.normal(size=300)
    Q = X[::5] + rng.normal(0, 1e-6, X[::5].shape)
    ref = exact_local_mean(Q, X, v, "gaussian", 1e-6)
    # the inputs themselves are known to 1e3 * 2^-52 = 2e-13, i.e. 2e-7 bandwidths
    np.testing.assert_allclose(local_mean(Q, X, v, bandwidth=1e-6), ref, atol=1e-6)


@pytest.mark.parametrize("shift", [0.0, 1e4, 1e8])
def test_results_do_not_depend_on_where_the_data_sit(shift):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(500, 3))
    Q = rng.normal(size=(60, 3))
    v = np.cos(X[:, 0])
    ref = local_mean(Q, X, v, bandwidth=0.3)
    # translated inputs are themselves rounded to shift * 2^-53, i.e. that many bandwidths off
    quantum = shift * 2.0**-53 / 0.3
    np.testing.assert_allclose(local_mean(Q + shift, X + shift, v, bandwidth=0.3), ref, atol=1e-12 + 10 * quantum)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(PROFILES))
@pytest.mark.parametrize("h", [1e-300, 1e-200, 1e-19, 1e19, 1e155, 1e300])
def test_any_finite_bandwidth_tiny_gives_the_nearest_value_huge_the_global_mean(dtype, name, h):
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (40, 2)).astype(dtype)
    v = rng.normal(size=40).astype(dtype)
    Q = (X[:7] + dtype(1e-3)).astype(dtype)
    out = local_sums(Q, X, v, name, h)
    assert out.mean.dtype == dtype and np.all(np.isfinite(out.mean))
    if h < 1 and name == "cauchy":  # a polynomial tail: the limit weighs samples by 1 / |x* - x|^2
        d2 = cdist(Q.astype(float), X.astype(float), "sqeuclidean")
        np.testing.assert_allclose(out.mean, (v / d2).sum(axis=1) / (1 / d2).sum(axis=1),
                                   rtol=1e-4 if dtype == np.float32 else 1e-10)
    elif h < 1:
        nearest = np.argmin(cdist(Q, X), axis=1)
        np.testing.assert_array_equal(out.mean, v[nearest])
    else:
        np.testing.assert_allclose(out.mean, np.full(7, v.astype(float).mean()), rtol=1e-5 if dtype == np.float32
                                   else 1e-12)


def test_bandwidth_rules_are_scale_free():
    X = np.random.default_rng(4).normal(size=(60, 2))
    base = resolve_bandwidth("scott", X)
    for scale in (1e155, 1e-162, 1e300):
        np.testing.assert_allclose(resolve_bandwidth("silverman", X * scale) / scale,
                                   resolve_bandwidth("silverman", X), rtol=1e-12)
        np.testing.assert_allclose(resolve_bandwidth("scott", X * scale) / scale, base, rtol=1e-12)
    got = local_mean(X[:5] * 1e155, X * 1e155, X[:, 0], bandwidth="scott")
    np.testing.assert_allclose(got, local_mean(X[:5], X, X[:, 0], bandwidth="scott"), rtol=1e-10)


def test_a_rule_beyond_the_float_range_is_an_error_not_a_global_mean():
    X = np.array([[1.7e308], [-1.7e308]])  # spread 1.7e308 * sqrt(2): no float holds it
    with pytest.raises(ValueError, match="bandwidth='scott'.*beyond the float range"):
        local_mean(X, X, [1.0, 2.0], bandwidth="scott")


@pytest.mark.parametrize("name", ["gaussian", "epanechnikov", "softmax"])
def test_float32_is_computed_and_returned(name):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 3)).astype(np.float32)
    v = rng.normal(size=(300, 2))  # float64 values do not promote the pass
    out = local_sums(X[:20], X, v, name, 1.0 if name != "softmax" else 2.0)
    assert out.mean.dtype == np.float32 and out.log_weight_sum.dtype == np.float32
    ref = local_mean(X[:20].astype(float), X.astype(float), v, name, 1.0 if name != "softmax" else 2.0)
    np.testing.assert_allclose(out.mean, ref, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profile_slope_is_the_derivative_of_its_statement(name):
    """``d log k / d u2`` as stated beside ``log k`` equals autograd of the statement (NumPy and
    PyTorch bindings), zero outside a compact support and where the statement takes sqrt at 0."""
    p = PROFILES[name]
    u2 = np.concatenate([U2[:-1], np.random.default_rng(0).uniform(0, 2, 200)])
    t = torch.tensor(u2, requires_grad=True)
    p.log_k_for(torch)(t).sum().backward()
    np.testing.assert_allclose(p.slope_for(torch)(torch.tensor(u2)).numpy(), t.grad.numpy(), rtol=1e-9, atol=0)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(p.slope_for(np)(u2), t.grad.numpy(), rtol=1e-9, atol=0)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_each_profiles_special_forms_are_facts_of_its_statement(name):
    """``log_linear`` (the inner-product form) holds exactly where ``log k = -u2 / 2`` bit for bit,
    ``smooth`` where ``log k`` is finite everywhere with a bounded slope at ``u = 0`` (no support's
    edge, no kink), and ``log_k0`` is ``log k(0) = 0`` (``K(x, x) = 1``)."""
    p = PROFILES[name]
    u2 = np.concatenate([U2, np.random.default_rng(0).uniform(0, 2, 200)])
    assert p.log_linear == np.array_equal(p.log_k(u2), -0.5 * u2)
    with np.errstate(all="ignore"):
        bounded = abs(p.slope_for(np)(np.array([1e-300]))[0]) < 1e10  # a kink: ~ 1 / u
    assert p.smooth == (bool(np.all(np.isfinite(p.log_k(u2[np.isfinite(u2)])))) and bounded)
    assert p.log_k0 == p.log_k(np.zeros(1))[0] == 0.0


def test_a_profile_without_a_slope_says_so():
    from localkit.kernels.profiles import Profile

    bare = Profile("mine", PROFILES["gaussian"].statement)
    with pytest.raises(ValueError, match="'mine' states no slope"):
        bare.slope_for(torch)


@pytest.mark.parametrize("h", [0.3, 1e-150, 1e150])
@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
def test_bound_squared_distances_are_the_profiles_argument(h, metric):
    """``BoundKernel.squared_distances``: ``u^2 = d(q, x)^2 / h^2`` whatever coordinates the engine
    keeps (scaled by ``h``, by a power of two for extreme bandwidths, or raw for cosine)."""
    from localkit.engine import BoundKernel
    from localkit.kernels import Kernel

    from sklearn.datasets import load_diabetes

    X = load_diabetes().data
    bound = BoundKernel(Kernel("cauchy", bandwidth=h, metric=metric), X[:50])
    want = (cdist(X[50:60], X[:50], metric) / h) ** 2
    np.testing.assert_allclose(bound.squared_distances(X[50:60]), want, rtol=1e-10)
    np.testing.assert_allclose(np.diag(bound.squared_distances()), 0.0, atol=1e-10 * want.max())
    with pytest.raises(ValueError, match="fixed bandwidth"):
        BoundKernel(Kernel("cauchy", n_neighbors=5), X[:50]).squared_distances(X[50:60])


@pytest.mark.parametrize("offset", [1e3, 1e5])
def test_float32_values_far_from_zero_keep_their_spread(offset):
    # weighted sums of values near 1e5 kept only the digits of their size (float32: 0.077 off on
    # digits, 8% of the spread); summed about their mean, the local means are within an ulp of
    # the offset of float64's
    from sklearn.datasets import load_digits

    X = load_digits().data[:600] / 16 + offset
    ref = local_sums(None, X, X, "gaussian", 1.5).mean
    got = local_sums(None, X.astype(np.float32), X.astype(np.float32), "gaussian", 1.5).mean
    assert got.dtype == np.float32
    assert np.abs(got - ref).max() <= np.spacing(np.float32(offset))
    empty = local_sums(X[:5].astype(np.float32) + 100, X.astype(np.float32), X.astype(np.float32), "epanechnikov",
                       0.5)  # empty neighbourhoods: the nearest sample's values, exactly
    np.testing.assert_array_equal(empty.mean, X.astype(np.float32)[empty_nearest(X[:5] + 100, X)])


def empty_nearest(Q, X):
    return np.argmin(cdist(Q, X), axis=1)


@pytest.mark.parametrize("algorithm", ["auto", "dense"])
def test_a_zero_weight_sample_nearest_a_far_query_does_not_hide_the_others(algorithm, monkeypatch):
    # the log-sum-exp's shift was the largest log K over all samples, the zero-weight one's: every
    # live sample underflowed against it and the neighbourhood was reported empty
    X, v, w = np.array([[0.0], [10.0], [11.0]]), np.array([5.0, 1.0, 2.0]), np.array([0.0, 1.0, 1.0])
    log_k = -0.5 * (np.array([100.0, 110.0, 111.0]) ** 2)
    ref_log_sum = np.logaddexp(log_k[1], log_k[2])
    out = local_sums([[-100.0]], X, v, "gaussian", 1.0, sample_weight=w, algorithm=algorithm)
    assert not out.empty[0]
    np.testing.assert_allclose(out.log_weight_sum, [ref_log_sum], rtol=1e-14)
    np.testing.assert_allclose(out.mean, [1.0], rtol=1e-12)
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    import sklearn

    with sklearn.config_context(array_api_dispatch=True):
        got = local_sums(torch.tensor([[-100.0]]), torch.tensor(X), torch.tensor(v), "gaussian", 1.0,
                         sample_weight=torch.tensor(w))
    np.testing.assert_allclose(got.log_weight_sum.numpy(), [ref_log_sum], rtol=1e-14)
    np.testing.assert_allclose(got.mean.numpy(), [1.0], rtol=1e-12)
    # float32: already 15 bandwidths away
    from localkit import kernel_density

    p = kernel_density([[0.0]], np.float32([[0], [15]]), bandwidth=1.0, sample_weight=np.float32([0, 1]), log=True)
    np.testing.assert_allclose(p, [-0.5 * 15 ** 2 - 0.5 * np.log(2 * np.pi)], rtol=1e-6)


def tight_clusters():
    """20 clusters of width 1e-3 spread over +-300, queries inside them, and the Gaussian local
    mean with the 5th-neighbour balloon bandwidth in float64 (dense, exact distances)."""
    rng = np.random.default_rng(0)
    centres = rng.uniform(-300, 300, (20, 2))
    X = centres[rng.integers(0, 20, 600)] + 1e-3 * rng.standard_normal((600, 2))
    y = rng.standard_normal(600)
    Q = X[::5] + 5e-4
    D2 = cdist(Q, X, "sqeuclidean")
    L = -0.5 * D2 / np.sort(D2, axis=1)[:, 4:5]
    W = np.exp(L - L.max(axis=1, keepdims=True))
    return Q, X, y, W @ y / W.sum(axis=1)


def test_knn_bandwidths_far_smaller_than_the_data_keep_their_digits(monkeypatch):
    # tight clusters spread wide, n_neighbors=5: the k-th distance (the balloon bandwidth) is far
    # below the unit scale at which the product form's cancellation was judged (float64: 3e-5 off)
    Q, X, y, ref = tight_clusters()
    for algorithm in ("auto", "dense"):
        got = local_sums(Q, X, y, "gaussian", n_neighbors=5, algorithm=algorithm).mean
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
    monkeypatch.setenv("SCIPY_ARRAY_API", "1")
    import sklearn

    with sklearn.config_context(array_api_dispatch=True):
        got = local_sums(torch.tensor(Q), torch.tensor(X), torch.tensor(y), "gaussian", n_neighbors=5).mean
        with pytest.raises(TypeError, match="exclude_self"):
            local_sums(torch.tensor(X), torch.tensor(X), torch.tensor(y), exclude_self="yes")
    np.testing.assert_allclose(got.numpy(), ref, rtol=0, atol=1e-9 * np.abs(ref).max())


def test_brute_force_neighbour_search_far_from_the_origin():
    # 64 features: scikit-learn searches by matrix products, which cancelled at digits + 1e6
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X, y = X[:400] + 1e6, y[:400].astype(float)
    D = cdist(X - 1e6, X - 1e6)
    u2 = (D / np.sort(D, axis=1)[:, 9:10]) ** 2
    W = np.exp(-0.5 * (u2 - u2.min(axis=1, keepdims=True)))
    np.testing.assert_allclose(local_sums(X, X, y, "gaussian", n_neighbors=10).mean, W @ y / W.sum(axis=1),
                               rtol=1e-12)
    W = np.clip(1 - (D / 20) ** 2, 0, None)
    out = local_sums(X, X, y, "epanechnikov", 20.0, algorithm="neighbors")
    np.testing.assert_allclose(out.log_weight_sum, np.log(W.sum(axis=1)), rtol=1e-12)


def test_small_neighbour_indexes_measure_differences():
    # a chunk of 37 samples made scikit-learn search by matrix products, whose cancellation at
    # |x| ~ 300 put 4e-6 into k-th distances of 1e-3 (the dask path's balloon bandwidths)
    da = pytest.importorskip("dask.array")
    Q, X, y, ref = tight_clusters()
    got = local_sums(da.from_array(Q, chunks=37), da.from_array(X, chunks=37), da.from_array(y, chunks=37),
                     "gaussian", n_neighbors=5).mean.compute()
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9 * np.abs(ref).max())
    small = local_sums(Q[:3], X[:20], y[:20], "gaussian", n_neighbors=5).mean  # 20 samples: a tree too
    D2 = cdist(Q[:3], X[:20], "sqeuclidean")
    L = -0.5 * D2 / np.sort(D2, axis=1)[:, 4:5]
    W = np.exp(L - L.max(axis=1, keepdims=True))
    np.testing.assert_allclose(small, W @ y[:20] / W.sum(axis=1), rtol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_refined_squared_distances_keep_a_relative_error_bound_near_duplicates_included(dtype):
    """The product ``|q|^2 + |x|^2 - 2 q.x`` with the near pairs formed again from differences: every
    pair within a few units of round-off over ``REFINE`` of the float64 distance from differences,
    coinciding points 0 exactly; a block of mostly near pairs goes to the differences whole."""
    from localkit.kernels import Kernel
    from localkit.kernels.distances import REFINE, refined_sq_distances

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 7)).astype(dtype)
    Q = np.vstack([X[:40], X[40:80] + dtype(1e-3) * rng.normal(size=(40, 7)).astype(dtype),
                   rng.normal(size=(60, 7)).astype(dtype)])
    kernel = Kernel("laplacian", bandwidth=1.0)
    sq = lambda A: np.einsum("ij,ij->i", A, A)
    got = refined_sq_distances(Q, X, sq(Q), sq(X), kernel)
    exact = cdist(Q.astype(np.float64), X.astype(np.float64), "sqeuclidean")
    assert got.dtype == dtype
    assert np.all(np.diagonal(got[:40, :40]) == 0.0)
    eps = np.finfo(dtype).eps
    assert np.max(np.abs(got - exact) / np.maximum(exact, np.finfo(dtype).tiny)) <= 8 * eps / REFINE
    far = Q + dtype(1e3)  # every pair near relative to the norms: differences for the whole block
    np.testing.assert_array_equal(refined_sq_distances(far, X + dtype(1e3), sq(far), sq(X + dtype(1e3)), kernel),
                                  cdist(far, X + dtype(1e3), "sqeuclidean").astype(dtype))


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_one_recentring_rule_on_the_host_and_on_tensors(library):
    """A block is kept as it is where the matrix-product form loses at most LOG_WEIGHT_TOL of a
    weight (2 eps |q|^2 / scale^2), recentred on its midrange where that suffices, its distances exact
    otherwise: the same decision for NumPy arrays and tensors (one function)."""
    from sklearn.externals.array_api_compat import array_namespace

    from localkit.engine.query_blocks import LOG_WEIGHT_TOL, measured_from

    eps = np.finfo(np.float32).eps
    reach = np.sqrt(LOG_WEIGHT_TOL[np.dtype(np.float32)] / (2 * eps))  # ~64 bandwidths in float32
    rng = np.random.default_rng(0)
    near = rng.uniform(-1, 1, (50, 3)).astype(np.float32)
    far = near + np.float32(4 * reach)
    wide = np.concatenate([near - np.float32(4 * reach), near + np.float32(4 * reach)])
    as_lib = (lambda a: a) if library == "numpy" else torch.from_numpy
    for Q, recentred, exact in ((near, False, False), (far, True, False), (wide, False, True)):
        Qx = as_lib(Q)
        P, centre, is_exact = measured_from(Qx, None, array_namespace(Qx))
        assert (centre is not None, is_exact) == (recentred, exact)
        expected = Q - 0.5 * (Q.min(axis=0) + Q.max(axis=0)) if recentred else Q
        np.testing.assert_array_equal(np.asarray(P), expected)
    # a per-query scale (a kNN bandwidth) divides the error by its square: far queries with wide
    # bandwidths need no recentring
    scale = np.full(len(far), np.float32(8 * reach))
    assert measured_from(as_lib(far), as_lib(scale), array_namespace(as_lib(far)))[1] is None
