"""Array-API dispatch: PyTorch tensors (and array-api-strict arrays) in, computed on their device, the same type out."""
import array_api_strict
import numpy as np
import pytest
import torch
from sklearn.datasets import load_diabetes, load_iris

from localkit import (LocalMeanClassifier, LocalMeanDenoiser, LocalMeanRegressor, MeanShift, kernel_density,
                      local_mean, local_sums)
from localkit.exceptions import EmptyNeighbourhoodWarning

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X, y


def same(tensor, ref, device, atol):
    assert isinstance(tensor, torch.Tensor) and tensor.device.type == device
    np.testing.assert_allclose(tensor.cpu().numpy(), ref, rtol=0, atol=atol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name, h", [("gaussian", 0.05), ("epanechnikov", 0.1), ("laplacian", 0.05),
                                     ("uniform", 0.03), ("softmax", 0.01), ("cauchy", 0.05)])
def test_local_sums_on_tensors_equal_numpy(dispatch, diabetes, device, name, h):
    X, y = diabetes
    Xt, yt = torch.tensor(X, device=device), torch.tensor(y, device=device)
    out = local_sums(Xt[:80], Xt, yt, name, h)
    ref = local_sums(X[:80], X, y, name, h)
    same(out.mean, ref.mean, device, 1e-9)
    same(out.log_weight_sum, ref.log_weight_sum, device, 1e-11)


@pytest.mark.parametrize("device", DEVICES)
def test_leave_one_out_weights_float32_and_empty_neighbourhoods(dispatch, diabetes, device):
    X, y = diabetes
    Xt, yt = torch.tensor(X, device=device), torch.tensor(y, device=device)
    same(local_mean(None, Xt, yt, "gaussian", 0.05, exclude_self=True),
         local_mean(None, X, y, "gaussian", 0.05, exclude_self=True), device, 1e-9)
    w = np.random.default_rng(0).integers(0, 3, len(X))  # zeros: empty neighbourhoods fall back
    same(local_mean(Xt[:60], Xt, yt, "tricube", 0.08, sample_weight=torch.tensor(w, device=device)),
         local_mean(X[:60], X, y, "tricube", 0.08, sample_weight=w), device, 1e-9)
    got = local_mean(Xt.float()[:60], Xt.float(), yt.float(), "gaussian", 0.05)
    assert got.dtype == torch.float32
    ref = local_mean(X[:60], X, y, "gaussian", 0.05)
    np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-4)


def test_far_from_the_origin_in_float32_on_tensors(dispatch):
    rng = np.random.default_rng(0)
    x = rng.uniform(-50, 50, 2000)
    q = rng.uniform(-50, 50, 300)
    ref = local_mean(q[:, None], x[:, None], np.sin(x), "gaussian", 0.02)
    got = local_mean(torch.tensor(q, dtype=torch.float32)[:, None], torch.tensor(x, dtype=torch.float32)[:, None],
                     torch.tensor(np.sin(x), dtype=torch.float32), "gaussian", 0.02)
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-4)


@pytest.mark.parametrize("device", DEVICES)
def test_estimators_keep_tensors_on_their_device(dispatch, diabetes, device):
    X, y = diabetes
    T = lambda a: torch.tensor(a, device=device)  # noqa: E731
    same(LocalMeanRegressor(bandwidth=0.05).fit(T(X), T(y)).predict(T(X[:30])),
         LocalMeanRegressor(bandwidth=0.05).fit(X, y).predict(X[:30]), device, 1e-9)
    same(kernel_density(T(X[:20, :2]), T(X[:, :2]), bandwidth="scott"),
         kernel_density(X[:20, :2], X[:, :2], bandwidth="scott"), device, 1e-12)
    Xi, yi = load_iris(return_X_y=True)
    clf, ref = LocalMeanClassifier(bandwidth=0.5).fit(T(Xi), T(yi)), LocalMeanClassifier(bandwidth=0.5).fit(Xi, yi)
    same(clf.predict_proba(T(Xi[::7])), ref.predict_proba(Xi[::7]), device, 1e-12)
    same(clf.predict(T(Xi[::7])), ref.predict(Xi[::7]), device, 0)
    ms, ms_ref = MeanShift(bandwidth=1.0).fit(T(Xi)), MeanShift(bandwidth=1.0).fit(Xi)
    same(ms.cluster_centers_, ms_ref.cluster_centers_, device, 1e-12)
    same(ms.labels_, ms_ref.labels_, device, 0)
    same(ms.predict(T(Xi[:5])), ms_ref.predict(Xi[:5]), device, 0)
    den, den_ref = LocalMeanDenoiser(noise_std=0.5).fit(T(Xi)), LocalMeanDenoiser(noise_std=0.5).fit(Xi)
    same(den.transform(T(Xi[:10])), den_ref.transform(Xi[:10]), device, 1e-12)


def test_without_dispatch_numpy_stays_the_engine(diabetes):
    X, y = diabetes
    assert isinstance(local_mean(X[:3], X, y, bandwidth=0.1), np.ndarray)


def test_unsupported_options_on_tensors_are_clear_errors(dispatch, diabetes):
    X, y = diabetes
    Xt, yt = torch.tensor(X), torch.tensor(y)
    with pytest.raises(ValueError, match="metric='precomputed' is not available for array-API"):
        local_mean(Xt[:3], Xt, yt, "uniform", 0.1, metric="precomputed")
    with pytest.raises(ValueError, match="metric=<function.*is not available for array-API"):
        local_mean(Xt[:3], Xt, yt, "uniform", 0.1, metric=lambda a, b: 0.0)
    with pytest.raises(ValueError, match="n_neighbors must be <= n_samples=442"):
        local_mean(Xt[:3], Xt, yt, "uniform", n_neighbors=443)
    with pytest.raises(ValueError, match="queries has 3 features"):
        local_mean(Xt[:3, :3], Xt, yt)
    with pytest.raises(ValueError, match="samples contains NaN"):
        local_mean(Xt[:3], Xt * float("nan"), yt)


@pytest.mark.parametrize("device", DEVICES)
def test_weighted_bandwidth_rules_equal_numpy(dispatch, diabetes, device):
    """A rule with sample weights (weighted spread, effective size) on tensors, as on NumPy arrays:
    the local mean, the density and the regressor's bandwidth."""
    X, y = diabetes
    w = np.random.default_rng(0).uniform(0, 2, len(X))
    w[:50] = 0.0
    Xt, yt, wt = (torch.tensor(a, device=device) for a in (X, y, w))
    same(local_mean(Xt[:40], Xt, yt, "gaussian", "silverman", sample_weight=wt),
         local_mean(X[:40], X, y, "gaussian", "silverman", sample_weight=w), device, 1e-9)
    same(kernel_density(Xt[:40, :2], Xt[:, :2], bandwidth="scott", sample_weight=wt, log=True),
         kernel_density(X[:40, :2], X[:, :2], bandwidth="scott", sample_weight=w, log=True), device, 1e-9)
    with pytest.raises(ValueError, match="at least 2 samples of positive weight, got 1"):
        local_mean(Xt[:4], Xt, yt, "gaussian", "scott", sample_weight=torch.eye(len(X), device=device)[0])
    fitted = LocalMeanRegressor(bandwidth="scott").fit(Xt, yt, sample_weight=wt).bandwidth_
    np.testing.assert_allclose(np.asarray(fitted), LocalMeanRegressor(bandwidth="scott").fit(
        X, y, sample_weight=w).bandwidth_, rtol=1e-12)


@pytest.mark.parametrize("name, h", [("gaussian", 0.05), ("epanechnikov", 0.12), ("cauchy", 0.05),
                                     ("softmax", 0.01)])
@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk", [None, 100])
def test_flexattention_formulation_equals_numpy(diabetes, monkeypatch, name, h, exclude_self, weighted, chunk):
    """The CUDA path's FlexAttention calls (run eagerly here, on the CPU) in float32 against the
    float64 engine: means and log weight sums of every row that has a neighbour, with leave-one-out
    and log sample weights, within float32's error budget of the log weights; one call, or chunks
    of 100 samples (and one of 42) merged by their log-sum-exp."""
    import warnings

    from localkit.engine.backends import array_api as namespace
    from localkit.engine.backends.array_api import flex_sums
    from localkit.engine.query_blocks import LOG_WEIGHT_TOL
    from localkit.kernels import Kernel

    X64, y64 = diabetes
    w64 = np.random.default_rng(1).uniform(0, 2, len(X64)) if weighted else None
    with warnings.catch_warnings(record=True) as caught:  # a compact kernel leaves some rows without a neighbour
        warnings.simplefilter("always", EmptyNeighbourhoodWarning)
        ref = local_sums(X64, X64, y64, name, h, exclude_self=exclude_self, sample_weight=w64, empty="nan")
    assert [w.message.n_empty for w in caught] == ([int(ref.empty.sum())] if ref.empty.any() else [])
    X, y = X64.astype(np.float32), y64.astype(np.float32)
    w = None if w64 is None else w64.astype(np.float32)
    centre = 0 if name == "softmax" else X.mean(0)
    Xs = torch.tensor(X - centre) / (1 if name == "softmax" else h)
    Qs = torch.tensor(X - centre) / h
    weight = None if w is None else torch.tensor(w / w.max())
    if chunk is not None:
        monkeypatch.setattr(namespace, "FLEX_KEYS", chunk)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not fused
        S, shift = flex_sums(Qs, Xs, torch.tensor(y)[:, None], weight, Kernel(name, bandwidth=h), exclude_self,
                             compiled=False)
    log_sum = (shift + torch.log(S[:, -1])).numpy() + (0 if w is None else np.log(w.max()))
    alive = np.isfinite(ref.log_weight_sum)
    assert alive.sum() > 0.9 * len(X)
    np.testing.assert_array_equal(np.isfinite(log_sum), alive)
    np.testing.assert_allclose((S[:, 0] / S[:, 1]).numpy()[alive], ref.mean[alive], rtol=1e-4)
    np.testing.assert_allclose(log_sum[alive], ref.log_weight_sum[alive], rtol=0,
                               atol=LOG_WEIGHT_TOL[np.dtype(np.float32)])


def test_flexattention_chunks_and_new_sample_weights_do_not_recompile(monkeypatch):
    """The chunks' key offsets (leave-one-out) and the log sample weights reach ``score_mod`` as
    tensors, so that compiled FlexAttention is traced once for all chunks and calls (traced by
    dynamo here, on the CPU, with the eager backend; a recompile raises)."""
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    from localkit.engine.backends import array_api as namespace
    from localkit.fused import flex
    from localkit.engine.backends.array_api import flex_sums
    from localkit.kernels import Kernel

    torch._dynamo.reset()
    monkeypatch.setitem(flex._COMPILED, "flex", torch.compile(flex_attention, dynamic=False, backend="aot_eager"))
    monkeypatch.setattr(namespace, "FLEX_KEYS", 128)
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(384, 4, generator=g), torch.randn(384, 1, generator=g)
    with warnings.catch_warnings(), torch._dynamo.config.patch(error_on_recompile=True):
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not fused
        for _ in range(2):
            weight = torch.rand(384, generator=g) + 0.1
            S, shift = flex_sums(X, X, y, weight / weight.max(), Kernel("gaussian", bandwidth=1.0), True)
    S_eager, shift_eager = flex_sums(X, X, y, weight / weight.max(), Kernel("gaussian", bandwidth=1.0), True,
                                     compiled=False)
    torch._dynamo.reset()
    np.testing.assert_allclose(S.numpy(), S_eager.numpy(), rtol=1e-6)
    np.testing.assert_allclose(shift.numpy(), shift_eager.numpy(), rtol=1e-6)


@cuda
@pytest.mark.parametrize("name, h", [("gaussian", 0.05), ("epanechnikov", 0.12), ("softmax", 0.01)])
def test_float32_on_cuda_takes_the_fused_path_and_keeps_its_digits(dispatch, diabetes, name, h):
    from localkit.engine.backends.array_api import _flex_fits
    from localkit.engine.options import EngineOptions
    from localkit.kernels import Kernel

    X, y = diabetes
    w = np.random.default_rng(1).uniform(0, 2, len(X))
    Xt, yt, wt = (torch.tensor(a, dtype=torch.float32, device="cuda") for a in (X, y, w))
    centre = 0 if name == "softmax" else Xt.mean(0)
    assert _flex_fits(torch, (Xt - centre) / h, (Xt - centre) / (1 if name == "softmax" else h),
                      Kernel(name, bandwidth=h), EngineOptions())
    for exclude_self in (False, True):
        got = local_sums(None, Xt, yt, name, h, exclude_self=exclude_self, sample_weight=wt)
        ref = local_sums(None, X, y, name, h, exclude_self=exclude_self, sample_weight=w)
        assert got.mean.dtype == torch.float32 and got.mean.is_cuda
        np.testing.assert_allclose(got.mean.cpu().numpy(), ref.mean, rtol=1e-4)
        np.testing.assert_allclose(got.log_weight_sum.cpu().numpy(), ref.log_weight_sum, rtol=0, atol=1e-4)


@pytest.fixture
def host_engine_off(monkeypatch):
    """Call it after the NumPy references: from then on MeanShift must run no host path of the
    engine (its passes run on the tensors' device)."""
    import localkit.engine.passes as paths

    def host(*args, **kwargs):
        raise AssertionError("a host path of the engine was called for tensors")

    def off():
        monkeypatch.setattr(paths, "PATHS", {name: host for name in paths.PATHS})
    return off


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("params", [
    dict(bandwidth=1.0, bin_seeding=True), dict(bandwidth=0.8, bin_seeding=True, min_bin_freq=3),
    dict(bandwidth=0.7, cluster_all=False), dict(bandwidth=None), dict(kernel="gaussian", bandwidth=0.6),
    dict(kernel="epanechnikov", bandwidth=1.2, bin_seeding=True), dict(bandwidth=0.9, max_iter=3),
    dict(bandwidth=0.5, blurring=True, max_iter=20), dict(kernel="gaussian", bandwidth=0.4, blurring=True, max_iter=5),
    dict(bandwidth=1.0, seeds=load_iris().data[::10])])
def test_mean_shift_on_tensors_equals_numpy(dispatch, host_engine_off, device, params):
    import warnings

    X = load_iris().data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter reached: warned alike
        ref = MeanShift(**params).fit(X)
        host_engine_off()
        seeds = params.get("seeds")
        params = params if seeds is None else dict(params, seeds=torch.tensor(seeds, device=device))
        got = MeanShift(**params).fit(torch.tensor(X, device=device))
    same(got.cluster_centers_, ref.cluster_centers_, device, 1e-10)
    same(got.labels_, ref.labels_, device, 0)
    assert got.n_iter_ == ref.n_iter_ and got.bandwidth_ == pytest.approx(ref.bandwidth_, rel=1e-14)
    same(got.predict(torch.tensor(X[::3], device=device)), ref.predict(X[::3]), device, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_mean_shift_on_tensors_with_sample_weight_and_float32(dispatch, host_engine_off, device):
    X = load_iris().data
    w = np.random.default_rng(0).integers(0, 4, len(X))
    cases = [dict(bandwidth=0.9), dict(bandwidth=None), dict(bandwidth=1.0, bin_seeding=True, min_bin_freq=2),
             dict(kernel="gaussian", bandwidth=0.5)]
    refs = [MeanShift(**params).fit(X, sample_weight=w) for params in cases]
    ref32 = MeanShift(kernel="gaussian", bandwidth=0.5).fit(X)
    host_engine_off()
    for params, ref in zip(cases, refs):
        got = MeanShift(**params).fit(torch.tensor(X, device=device), sample_weight=torch.tensor(w, device=device))
        same(got.cluster_centers_, ref.cluster_centers_, device, 1e-10)
        same(got.labels_, ref.labels_, device, 0)
    got = MeanShift(kernel="gaussian", bandwidth=0.5).fit(torch.tensor(X, dtype=torch.float32, device=device))
    ref = ref32
    assert got.cluster_centers_.dtype == torch.float32
    # seeds stop once they move less than 1e-3 h: float32 round-off moves the stop within that
    np.testing.assert_allclose(got.cluster_centers_.cpu().numpy(), ref.cluster_centers_, rtol=0, atol=1e-3 * 0.5)
    same(got.labels_, ref.labels_, device, 0)
    with pytest.raises(ValueError, match="X contains NaN"):
        MeanShift(bandwidth=1.0).fit(torch.tensor(X * np.nan, device=device))
    with pytest.raises(ValueError, match="X has 2 features, but MeanShift is expecting 4"):
        got.predict(torch.tensor(X[:, :2], device=device))


@pytest.mark.parametrize("name", ["gaussian", "epanechnikov", "uniform", "tricube", "laplacian"])
@pytest.mark.parametrize("exclude_self", [False, True])
@pytest.mark.parametrize("metric, p", [("euclidean", 2), ("minkowski", 3), ("minkowski", 1.5), ("manhattan", 2),
                                       ("chebyshev", 2), ("cosine", 2)])
def test_knn_bandwidths_and_metrics_on_tensors_equal_numpy(dispatch, diabetes, name, exclude_self, metric, p):
    X, y = diabetes
    if metric == "chebyshev":  # discrete features tie at the k-th distance, where the tree and the sort
        X = X + 1e-7 * np.random.default_rng(3).normal(size=X.shape)  # keep different samples: break ties
    w = np.random.default_rng(2).uniform(0.5, 2, len(X))
    Xt, yt, wt = torch.tensor(X), torch.tensor(y), torch.tensor(w)
    Q, Qt = (None, None) if exclude_self else (X[:70], Xt[:70])
    got = local_sums(Qt, Xt, yt, name, n_neighbors=15, exclude_self=exclude_self, metric=metric, p=p, sample_weight=wt)
    ref = local_sums(Q, X, y, name, n_neighbors=15, exclude_self=exclude_self, metric=metric, p=p, sample_weight=w)
    same(got.mean, ref.mean, "cpu", 1e-9)  # values ~1e2: 1e-11 relative
    same(got.log_weight_sum, ref.log_weight_sum, "cpu", 1e-12)


@pytest.mark.parametrize("name, h", [("gaussian", 0.05), ("epanechnikov", 0.12), ("triangular", 0.1),
                                     ("cauchy", 0.05)])
@pytest.mark.parametrize("metric, p", [("minkowski", 3), ("manhattan", 2), ("chebyshev", 2), ("cosine", 2)])
def test_fixed_bandwidth_metrics_on_tensors_equal_numpy(dispatch, diabetes, name, h, metric, p):
    X, y = diabetes
    h = 3 * h if metric == "cosine" else h  # cosine distances are in [0, 2]
    got = local_sums(torch.tensor(X[:90]), torch.tensor(X), torch.tensor(y), name, h, metric=metric, p=p)
    ref = local_sums(X[:90], X, y, name, h, metric=metric, p=p)
    same(got.mean, ref.mean, "cpu", 1e-9)
    same(got.log_weight_sum, ref.log_weight_sum, "cpu", 1e-12)


@pytest.mark.parametrize("name", ["gaussian", "epanechnikov", "laplacian", "uniform"])
def test_per_point_scales_on_tensors_equal_numpy(dispatch, diabetes, name):
    """``u = d / (h q_i s_j)`` on tensors, zero scales included: distance 0 counts fully, others
    not at all."""
    X, y = diabetes
    rng = np.random.default_rng(3)
    qs, ss = rng.uniform(0.5, 2, 80), rng.uniform(0.5, 2, len(X))
    qs[3], ss[5] = 0.0, 0.0
    Q = np.vstack([X[:79], X[5:6]])  # the last query sits on the sample of zero scale
    got = local_sums(torch.tensor(Q), torch.tensor(X), torch.tensor(y), name, 0.08,
                     query_scale=torch.tensor(qs), sample_scale=torch.tensor(ss))
    ref = local_sums(Q, X, y, name, 0.08, query_scale=qs, sample_scale=ss)
    same(got.mean, ref.mean, "cpu", 1e-9)
    same(got.log_weight_sum, ref.log_weight_sum, "cpu", 1e-12)
    with pytest.raises(ValueError, match="query_scale cannot be combined with n_neighbors"):
        local_sums(torch.tensor(Q), torch.tensor(X), torch.tensor(y), name, n_neighbors=3,
                   query_scale=torch.tensor(qs))
    with pytest.raises(ValueError, match=r"sample_scale must have shape \(442,\)"):
        local_sums(torch.tensor(Q), torch.tensor(X), torch.tensor(y), name, 0.08, sample_scale=torch.tensor(qs))


@pytest.mark.parametrize("scale", [1e154, 1e200])
def test_softmax_logits_beyond_the_float_range_on_tensors(dispatch, scale):
    """Logits ``<q, x> / h`` past float64's range: the local mean is the limit (the values of
    the samples that maximise ``<q, x>``), as the NumPy engine streams it, not NaN."""
    rng = np.random.default_rng(4)
    X, y = rng.normal(size=(300, 3)) * scale, rng.normal(size=300)
    got = local_sums(torch.tensor(X[:40]), torch.tensor(X), torch.tensor(y), "softmax", 1e-3)
    ref = local_sums(X[:40], X, y, "softmax", 1e-3)
    assert np.all(np.isfinite(ref.mean))
    same(got.mean, ref.mean, "cpu", 1e-12)
    np.testing.assert_allclose(got.log_weight_sum.numpy(), ref.log_weight_sum, rtol=1e-12)
    # against the limit itself: each query's softmax picks the sample of largest <q, x>
    np.testing.assert_allclose(got.mean.numpy(), y[np.argmax(X[:40] / scale @ (X / scale).T, axis=1)], rtol=0,
                               atol=1e-12)
    beyond = local_sums(torch.tensor(X[:40] * 1e100), torch.tensor(X), torch.tensor(y), "softmax", 1e-3)
    same(beyond.mean, got.mean, "cpu", 1e-12)  # 2^k beyond the float range itself (the NumPy engine overflows)


def test_softmax_logits_beyond_float32s_range_on_float32_tensors(dispatch):
    """float32 logits past float32's range: the shift by 2^-k takes the tensor's dtype, so a
    step of 2^1000 was float32's inf and every mean came out 0."""
    rng = np.random.default_rng(0)
    X, y = (1e35 * rng.standard_normal((50, 3))).astype(np.float32), rng.integers(0, 40, 50).astype(np.float32)
    ref = local_sums(X[:4], X, y, "softmax", 1.0)
    got = local_sums(torch.tensor(X[:4]), torch.tensor(X), torch.tensor(y), "softmax", 1.0)
    np.testing.assert_array_equal(ref.mean, y[np.argmax(X[:4].astype(np.float64) @ X.T.astype(np.float64), axis=1)])
    same(got.mean, ref.mean, "cpu", 0)



def test_softmax_logits_beyond_bfloat16s_range_on_bfloat16_tensors(dispatch):
    """bfloat16 logits past its range (~3.4e38, float32's): the exponent is taken from the tensor's
    own float range. It was float64's for every dtype but float32, so that these logits overflowed
    to inf and a mean came out NaN."""
    torch.manual_seed(0)
    X = torch.randn(50, 3, dtype=torch.bfloat16) * 1e19
    y = torch.arange(50, dtype=torch.bfloat16)  # integers below 256: exact in bfloat16
    got = local_sums(X[:4], X, y, "softmax", 1.0)
    top = np.argmax(X[:4].double().numpy() @ X.double().numpy().T, axis=1)  # the limit: the largest logit's sample
    np.testing.assert_array_equal(got.mean.float().numpy(), top.astype(np.float32))

@pytest.mark.parametrize("metric, h", [("euclidean", 0.04), ("manhattan", 0.1)])
def test_empty_neighbourhoods_leave_one_out_on_tensors_equal_numpy(dispatch, diabetes, metric, h):
    """Many queries with no other sample in the support: each takes its nearest other sample
    that carries weight (in the kernel's metric), as the NumPy engine does."""
    X, y = diabetes
    w = np.random.default_rng(5).integers(0, 2, len(X)).astype(float)
    got = local_sums(None, torch.tensor(X), torch.tensor(y), "epanechnikov", h, exclude_self=True, metric=metric,
                     sample_weight=torch.tensor(w))
    ref = local_sums(None, X, y, "epanechnikov", h, exclude_self=True, metric=metric, sample_weight=w)
    assert 20 < ref.empty.sum() < len(X)
    same(got.empty, ref.empty, "cpu", 0)
    same(got.mean, ref.mean, "cpu", 1e-9)


def test_compiled_arithmetic_on_tensors(dispatch, diabetes):
    """algorithm='compiled' decides the support as the compiled pass does, |q - x|^2 <= h^2 in
    raw coordinates: on a grid, the points h away count, as on the host (the scaled coordinates
    of the default path decide ~100 of these 144 rows otherwise)."""
    g = 0.1 * np.arange(12.0) + 0.3
    X = np.stack(np.meshgrid(g, g), axis=-1).reshape(-1, 2)
    y = np.sin(X).sum(axis=1)
    for h in (0.1, 0.2, 0.5):  # many samples sit h away (up to round-off)
        got = local_sums(torch.tensor(X), torch.tensor(X), torch.tensor(y), "uniform", h, algorithm="compiled")
        ref = local_sums(X, X, y, "uniform", h, algorithm="compiled")
        d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
        np.testing.assert_array_equal(np.rint(torch.exp(got.log_weight_sum).numpy()), (d2 <= h * h).sum(axis=1))
        same(got.mean, ref.mean, "cpu", 1e-12)
    with pytest.raises(ValueError, match="algorithm='compiled' cannot compute this pass: needs a compact profile"):
        local_sums(torch.tensor(X), torch.tensor(X), torch.tensor(y), "gaussian", 1.0, algorithm="compiled")


def test_per_point_scales_through_local_sums(dispatch, diabetes):
    X, y = diabetes
    rng = np.random.default_rng(2)
    qs, ss = rng.uniform(0.5, 2, 40), rng.uniform(0.5, 2, len(X))
    got = local_sums(torch.tensor(X[:40]), torch.tensor(X), torch.tensor(y), "gaussian", 0.05,
                     query_scale=torch.tensor(qs), sample_scale=torch.tensor(ss))
    ref = local_sums(X[:40], X, y, "gaussian", 0.05, query_scale=qs, sample_scale=ss)
    same(got.mean, ref.mean, "cpu", 1e-9)
    same(got.log_weight_sum, ref.log_weight_sum, "cpu", 1e-11)


def test_fused_local_sums_that_fail_to_compile_stream_instead(dispatch, diabetes, monkeypatch):
    import localkit.fused.flex as flex
    import localkit.engine.backends.array_api as namespace

    def broken(*args, **kwargs):
        raise RuntimeError("LoweringException: NYI")

    monkeypatch.setattr(namespace, "_flex_fits", lambda *args: True)  # as for float32 CUDA tensors
    monkeypatch.setattr(flex, "_FAILED", set())
    monkeypatch.setattr(namespace, "flex_sums", broken)
    X, y = (a.astype(np.float32) for a in diabetes)
    with pytest.warns(RuntimeWarning, match="FlexAttention failed to compile"):
        got = local_mean(torch.tensor(X[:30]), torch.tensor(X), torch.tensor(y), "gaussian", 0.05)
    np.testing.assert_allclose(got.numpy(), local_mean(X[:30].astype(float), X.astype(float), y.astype(float),
                                                       "gaussian", 0.05), rtol=1e-4)


@pytest.mark.parametrize("name, h, options", [("gaussian", 0.05, {"exclude_self": True}),
                                              ("epanechnikov", 0.1, {"sample_weight": "w"}),
                                              ("laplacian", 0.05, {}), ("softmax", 0.01, {}),
                                              ("tricube", 1.0, {"n_neighbors": 7}),
                                              ("gaussian", 0.3, {"metric": "cosine"})])
def test_the_strict_array_api_namespace_equals_numpy(dispatch, diabetes, name, h, options):
    """array-api-strict, the standard's own minimal namespace (scikit-learn tests with it too):
    nothing beyond the standard is used, e.g. no out-of-bounds slice stops."""
    xp = array_api_strict
    X, y = diabetes
    w = np.random.default_rng(0).uniform(0, 2, len(X))
    options = {key: (w if value == "w" else value) for key, value in options.items()}
    strict = {key: (xp.asarray(value) if isinstance(value, np.ndarray) else value) for key, value in options.items()}
    queries = None if options.get("exclude_self") else X[:300]
    got = local_sums(None if queries is None else xp.asarray(queries), xp.asarray(X), xp.asarray(y), name, h,
                     **strict)
    ref = local_sums(queries, X, y, name, h, **options)
    assert type(got.mean).__module__.startswith("array_api_strict")
    np.testing.assert_allclose(np.asarray(got.mean), ref.mean, rtol=1e-10)


def test_estimators_on_the_strict_array_api_namespace(dispatch, diabetes):
    xp = array_api_strict
    X, y = diabetes
    Xi, yi = load_iris(return_X_y=True)
    A = xp.asarray
    pairs = [(LocalMeanRegressor(bandwidth=0.05).fit(A(X), A(y)).predict(A(X[:300])),
              LocalMeanRegressor(bandwidth=0.05).fit(X, y).predict(X[:300])),
             (LocalMeanClassifier(bandwidth=0.5).fit(A(Xi), A(yi)).predict_proba(A(Xi)),
              LocalMeanClassifier(bandwidth=0.5).fit(Xi, yi).predict_proba(Xi)),
             (MeanShift(bandwidth=1.0).fit(A(Xi)).cluster_centers_, MeanShift(bandwidth=1.0).fit(Xi).cluster_centers_),
             (LocalMeanDenoiser(noise_std=0.5).fit(A(Xi)).transform(A(Xi)),
              LocalMeanDenoiser(noise_std=0.5).fit(Xi).transform(Xi)),
             (kernel_density(A(X[:300, :2]), A(X[:, :2]), bandwidth="scott"),
              kernel_density(X[:300, :2], X[:, :2], bandwidth="scott"))]
    for got, ref in pairs:
        assert type(got).__module__.startswith("array_api_strict")
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.float64, 1e-9)])
@pytest.mark.parametrize("name", ["gaussian", "laplacian", "cauchy"])
def test_weights_flushed_below_the_float_range_on_tensors(dispatch, dtype, tol, name):
    """Diabetes in 3 standardised features at h = 0.05, where most Gaussian log-weights fall below
    ``log(tiny)`` of their row's largest and are flushed before ``exp`` on the streamed tensor
    path too: the means are those of the definition (float64 NumPy, a sum of exact weights)."""
    from scipy.spatial.distance import cdist

    from localkit.kernels import PROFILES

    X, y = load_diabetes(return_X_y=True)
    X = (X[:, :3] - X[:, :3].mean(0)) / X[:, :3].std(0)
    v = (y - y.mean()) / y.std()
    L = PROFILES[name].log_k(cdist(X[::4], X, "sqeuclidean") / 0.05**2)
    W = np.exp(L - L.max(axis=1, keepdims=True))
    ref = W @ v / W.sum(axis=1)
    got = local_sums(torch.tensor(X[::4], dtype=dtype), torch.tensor(X, dtype=dtype), torch.tensor(v, dtype=dtype),
                     name, 0.05, block_size=64)  # block_size: the streamed path, not a fused one
    np.testing.assert_allclose(got.mean.numpy(), ref, rtol=0, atol=tol)


def test_estimators_on_tensors_bind_once_pickle_and_explain(dispatch, diabetes, monkeypatch):
    """Issue 22: tensors get the one bound kernel too: ``fit`` binds once (a prediction pays only
    for its queries), the fitted estimator pickles and predicts the same after, and the plan names
    the pass that runs on the device and why the host paths are not taken."""
    import pickle

    from localkit.engine import BoundKernel, bound as bound_module

    X, y = diabetes
    Xt, yt = torch.tensor(X), torch.tensor(y)
    reg = LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.1).fit(Xt, yt)
    built = []
    original = BoundKernel.__init__
    monkeypatch.setattr(bound_module.BoundKernel, "__init__",
                        lambda self, *a, **k: built.append(1) or original(self, *a, **k))
    first = reg.predict(Xt[:50])
    second = reg.predict(Xt[50:100])
    assert built == [] and isinstance(first, torch.Tensor)
    np.testing.assert_allclose(torch.cat([first, second]).numpy(),
                               LocalMeanRegressor(kernel="epanechnikov", bandwidth=0.1).fit(X, y).predict(X[:100]),
                               rtol=0, atol=1e-9)
    again = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(again.predict(Xt[:50]).numpy(), first.numpy())
    plan = BoundKernel(reg.kernel_, Xt).explain(Xt[:5])
    assert plan.path == "streamed" and "torch" in plan.reasons["streamed"]
    assert all("NumPy arrays only" in plan.reasons[p] for p in ("dense", "neighbors", "compiled", "binned"))
    with pytest.raises(ValueError, match="log_weights forms .* needs NumPy samples"):
        BoundKernel(reg.kernel_, Xt).log_weights(Xt[:5])


def test_host_samples_meet_device_queries_with_their_own_options(dispatch, diabetes):
    """Host samples asked at tensor queries bind once on that device; a copy with other options
    (``using``) gets its own device copy, not the first one's."""
    from localkit import Kernel
    from localkit.engine import BoundKernel, EngineOptions

    X, y = diabetes
    bound = BoundKernel(Kernel("epanechnikov", bandwidth=0.05), X)
    far = torch.tensor(X[:3] + 10.0)
    nearest = bound.sums(far, y).mean
    assert isinstance(nearest, torch.Tensor)
    np.testing.assert_allclose(nearest.numpy(), bound.sums(X[:3] + 10.0, y).mean, rtol=0, atol=1e-12)
    with pytest.warns(RuntimeWarning, match="empty neighbourhood"):
        nan = bound.using(EngineOptions(empty="nan")).sums(far, y).mean
    assert torch.isnan(nan).all() and not torch.isnan(nearest).any()


def test_the_bound_kernels_neighbour_searches_need_numpy_samples(dispatch):
    from localkit import Kernel
    from localkit.engine import BoundKernel

    X = torch.tensor(np.random.default_rng(0).normal(size=(20, 2)))
    bound = BoundKernel(Kernel("uniform", n_neighbors=3), X)
    for search, arg in (("kneighbors", 3), ("radius_neighbors", 0.5)):
        with pytest.raises(ValueError, match=f"{search} searches a neighbour index on the host: it needs NumPy"):
            getattr(bound, search)(X[:2], arg)
