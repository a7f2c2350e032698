"""localkit.nn.functional against its references: PyTorch's SDPA, the engine's local mean (on
iris), scikit-learn's kNN, the closed form of weighted least squares."""
import math

import numpy as np
import pytest

import torch
import torch.nn.functional as F  # noqa: E402
from sklearn.datasets import load_diabetes, load_iris  # noqa: E402
from sklearn.neighbors import KNeighborsRegressor  # noqa: E402
from test_fuzz_common import LAYOUTS, as_layout  # noqa: E402

from localkit.engine import local_mean  # noqa: E402
from localkit.kernels.profiles import PROFILES  # noqa: E402
from localkit.nn import attention_weights, explain_attention, kernel_attention, local_linear_attention  # noqa: E402
from localkit.nn import functional  # noqa: E402
from localkit.nn._profiles import LOG_PROFILES  # noqa: E402

TOL32 = 1e-5


def qkv(B=2, H=3, L=7, S=9, d=8, dv=5, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, L, d, generator=g, dtype=dtype), torch.randn(B, H, S, d, generator=g, dtype=dtype),
            torch.randn(B, H, S, dv, generator=g, dtype=dtype))


def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


# --- profiles: the torch formulas are the numpy ones ------------------------------------------
def test_torch_profiles_are_the_kernel_modules_profiles():
    assert set(LOG_PROFILES) == set(PROFILES)
    u2 = np.linspace(0, 2.5, 501) ** 2
    for name, profile in PROFILES.items():
        ours = LOG_PROFILES[name](torch.tensor(u2)).numpy()
        ref = profile.log_k(u2)
        np.testing.assert_allclose(np.exp(ours), np.exp(ref), rtol=0, atol=1e-15, err_msg=name)
        both = np.isfinite(ours) & np.isfinite(ref)  # cosine at u = 1: log(cos(pi/2)) vs -inf, both k = 0
        assert both.sum() >= np.isfinite(ref).sum() - 1
        np.testing.assert_allclose(ours[both], ref[both], rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_gradients_are_finite(name):
    u2 = torch.tensor([0.0, 0.25, 1.0, 1.5], dtype=torch.float64, requires_grad=True)
    out = LOG_PROFILES[name](u2)
    if out.requires_grad:  # the uniform profile is constant inside its support
        out.clamp_min(-50).sum().backward()
        assert torch.all(torch.isfinite(u2.grad))


# --- the softmax kernel is scaled_dot_product_attention -------------------------------------
@pytest.mark.parametrize("causal", [False, True])
def test_softmax_equals_sdpa(causal):
    q, k, v = qkv(L=9, S=9)
    np.testing.assert_allclose(kernel_attention(q, k, v, causal=causal),
                               F.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=TOL32, rtol=0)
    # the dense path (top_k = S keeps everything) computes the same local mean
    np.testing.assert_allclose(kernel_attention(q, k, v, causal=causal, top_k=9),
                               F.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=TOL32, rtol=0)


def test_softmax_bandwidth_and_masks_equal_sdpa():
    q, k, v = qkv()
    g = torch.Generator().manual_seed(1)
    bool_mask = torch.rand(2, 1, 7, 9, generator=g) > 0.3
    bool_mask[..., 0] = True
    float_mask = torch.randn(7, 9, generator=g)
    for mask in (bool_mask, float_mask):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / 2.5)
        np.testing.assert_allclose(kernel_attention(q, k, v, bandwidth=2.5, mask=mask), ref, atol=TOL32, rtol=0)
    # causal and a mask together: the product of the two kernels
    causal = torch.ones(7, 9, dtype=torch.bool).tril()
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask & causal)
    np.testing.assert_allclose(kernel_attention(q, k, v, mask=bool_mask, causal=True), ref, atol=TOL32, rtol=0)


def test_per_head_bandwidth_tensor():
    q, k, v = qkv()
    h = torch.tensor([1.0, 2.0, 4.0]).view(3, 1, 1)
    out = kernel_attention(q, k, v, bandwidth=h)
    for i, hi in enumerate((1.0, 2.0, 4.0)):
        np.testing.assert_allclose(out[:, i], kernel_attention(q[:, i], k[:, i], v[:, i], bandwidth=hi), atol=TOL32)
    out_g = kernel_attention(q, k, v, "gaussian", bandwidth=h)
    np.testing.assert_allclose(out_g[:, 2], kernel_attention(q[:, 2], k[:, 2], v[:, 2], "gaussian", bandwidth=4.0),
                               atol=TOL32)


# --- every path takes views: transposed, strided, expanded q, k, v and masks -----------------
#: one call per path of kernel_attention (localkit.nn.functional.PATHS), by the arguments that select it
PATHS = {
    "softmax: CPU flash kernel": {},
    "softmax, causal: CPU flash kernel": {"causal": True},
    "gaussian: CPU flash kernel with its key bias": {"kernel": "gaussian"},
    "gaussian, causal: CPU flash kernel with its key bias": {"kernel": "gaussian", "causal": True},
    "per-head bandwidth: CPU flash kernel": {"bandwidth": "per-head"},
    "d_v != d: SDPA": {"dv": 5},
    "bool mask: SDPA": {"mask": "bool"},
    "gaussian, float mask: SDPA": {"kernel": "gaussian", "mask": "float"},
    "dropout: dense SDPA": {"dropout_p": 0.3},
    "float mask with grad: dense SDPA": {"mask": "float-grad"},
    "uniform, float mask with grad: dense weights": {"kernel": "uniform", "bandwidth": 3.0, "mask": "float-grad"},
    "causal and a mask: streamed": {"causal": True, "mask": "bool"},
    "laplacian: compiled CPU pass": {"kernel": "laplacian"},
    "epanechnikov, causal: compiled CPU pass": {"kernel": "epanechnikov", "bandwidth": 3.0, "causal": True},
    "cauchy, key mask: compiled CPU pass": {"kernel": "cauchy", "mask": "key"},
    "laplacian, mask by query: streamed": {"kernel": "laplacian", "mask": "bool"},
    "top_k: streamed twice": {"top_k": 3},
    "overflowing logits: CPU flash kernel, then streamed over 4^e": {"scale": 1e19},
    "window: banded": {"window": 2},
    "window, key mask: banded": {"kernel": "gaussian", "window": ("tricube", 3.0), "mask": "key"},
    "window, float mask: streamed": {"window": 2, "mask": "float"},
}


def _path_inputs(dv=8, mask=None, scale=1.0, **_):
    """Leaves ``q, k, v`` (and a mask), float32, that require grad, for a call of :data:`PATHS`."""
    q, k, v = (t.requires_grad_() for t in qkv(d=8, dv=dv))
    with torch.no_grad():
        q.mul_(scale), k.mul_(scale)
    g = torch.Generator().manual_seed(2)
    masks = {"bool": lambda: torch.rand(2, 1, 7, 9, generator=g) > 0.3,
             "key": lambda: torch.rand(2, 1, 1, 9, generator=g) > 0.2,
             "float": lambda: torch.randn(2, 1, 7, 9, generator=g).masked_fill(torch.rand(2, 1, 7, 9, generator=g) < 0.2,
                                                                               -math.inf),
             "float-grad": lambda: torch.randn(2, 1, 7, 9, generator=g).requires_grad_()}
    return (q, k, v), (masks[mask]() if mask else None)


@pytest.mark.parametrize("layout", [layout for layout in LAYOUTS if layout != "contiguous"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_every_path_takes_views_of_q_k_v_and_masks(path, layout):
    """Views in every layout (q, k, v and the mask at once) give the result and gradients of their
    contiguous copies. The CPU flash kernel assumes a unit stride in the last dimension: a
    transposed ``q`` gave outputs 1.7e38 off in float32 (issue 26)."""
    options = dict(PATHS[path])
    leaves, mask = _path_inputs(**options)
    for name in ("dv", "mask", "scale"):
        options.pop(name, None)
    if options.get("bandwidth") == "per-head":
        options["bandwidth"] = torch.tensor([0.5, 1.0, 2.0]).view(3, 1, 1).requires_grad_()
    if mask is not None:
        leaves += (mask,) if mask.requires_grad else ()
        mask_view = as_layout(mask, layout)

    def call(to_input):
        torch.manual_seed(0)  # the same dropout draws
        q, k, v = (to_input(as_layout(t, layout)) for t in leaves[:3])
        out = kernel_attention(q, k, v, mask=None if mask is None else to_input(mask_view), **options)
        grads = torch.autograd.grad(out, leaves, torch.randn(out.shape, generator=torch.Generator().manual_seed(3)))
        return out, grads

    out, grads = call(lambda t: t)
    ref, ref_grads = call(lambda t: t.contiguous())
    assert bool(torch.isfinite(ref).all())
    torch.testing.assert_close(out, ref)
    if "scale" in PATHS[path]:  # one-hot weights: the gradients, p (1 - p) 1e38, are round-off
        return
    for name, grad, ref_grad in zip("qkvm", grads, ref_grads):
        torch.testing.assert_close(grad, ref_grad, msg=lambda m: f"gradient of {name}: {m}")


@pytest.mark.parametrize("path", sorted(set(PATHS) - {"overflowing logits: CPU flash kernel, then streamed over 4^e"}))
def test_every_path_has_gradients_of_gradients(path):
    """Double backward (``create_graph=True``, as ``nn.MultiheadAttention`` allows) through every
    path, against finite differences in float64 (``gradgradcheck``). Before issue 26: the CPU flash
    kernel raised from torch's internals, ``cdist`` too, and the streamed pass gave second
    derivatives 0.6 off, silently."""
    options = dict(PATHS[path])
    (q, k, v), mask = _path_inputs(**options)
    q, k, v = (t.detach()[:1, :2, :n, :2].double().requires_grad_() for t, n in ((q, 3), (k, 4), (v, 4)))
    if mask is not None:
        mask = mask.detach()[:1, :, :3, :4]
        mask = mask.double().requires_grad_(options["mask"] == "float-grad") if mask.is_floating_point() else mask
    for name in ("dv", "mask", "scale"):
        options.pop(name, None)
    bandwidth = options.pop("bandwidth", None)
    if bandwidth == "per-head":
        bandwidth = torch.tensor([0.5, 2.0], dtype=torch.float64).view(2, 1, 1).requires_grad_()
    if options.get("top_k"):
        options["top_k"] = 2
    learned = [t for t in (mask, bandwidth) if isinstance(t, torch.Tensor) and t.requires_grad]

    def attention(q, k, v, *rest):
        torch.manual_seed(0)  # the same dropout draws
        rest = iter(rest)
        m = next(rest) if mask is not None and mask.requires_grad else mask
        h = next(rest) if isinstance(bandwidth, torch.Tensor) else bandwidth
        return kernel_attention(q, k, v, mask=m, bandwidth=h, **options)

    assert torch.autograd.gradgradcheck(attention, [q, k, v] + learned, fast_mode=True)


@pytest.mark.parametrize("case", sorted(PATHS))
def test_explain_attention_names_the_path_that_runs(case, monkeypatch):
    """The path :func:`explain_attention` names is the one the call runs (the dispatch reads the
    same table), and the CPU flash kernel's overflow hands the call to the streamed path."""
    options = dict(PATHS[case])
    (q, k, v), mask = _path_inputs(**options)
    for name in ("dv", "mask", "scale"):
        options.pop(name, None)
    if options.get("bandwidth") == "per-head":
        options["bandwidth"] = torch.tensor([0.5, 1.0, 2.0]).view(3, 1, 1)
    plan = explain_attention(q, k, v, mask=mask, **options)
    assert case.split(": ")[1].startswith(plan.path)  # each case is named by its path
    assert set(plan.reasons) == {p.name for p in functional.PATHS} and all(plan.reasons.values())
    assert f"-> {plan.path}" in str(plan)
    ran = []
    monkeypatch.setattr(functional, "PATHS", tuple(
        p._replace(run=lambda call, p=p: ran.append(p.name) or p.run(call)) for p in functional.PATHS))
    kernel_attention(q, k, v, mask=mask, **options)
    assert ran == ([plan.path, "streamed"] if "then streamed" in case else [plan.path])


@pytest.mark.parametrize("kernel, dtype, options", [
    ("gaussian", torch.float32, {}), ("softmax", torch.float32, {"causal": True}),
    ("laplacian", torch.float64, {}), ("laplacian", torch.float32, {"window": 3}),
    ("epanechnikov", torch.float32, {"top_k": 4}), ("cauchy", torch.float32, {"mask": "per-query"})],
    ids=["gaussian", "softmax causal", "laplacian float64", "window", "top_k", "mask by query"])
def test_pair_bias_off_the_compiled_pass_is_the_float_mask_it_stands_for(kernel, dtype, options):
    """Where the compiled CPU pass does not take a call, ``pair_bias = (a, b)`` is the float mask
    ``a @ b^T`` (added to a mask given too): the same path, output and gradients."""
    q, k, v = qkv(dtype=dtype)
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(3, 7, 2, generator=g, dtype=dtype), torch.randn(9, 2, generator=g, dtype=dtype)
    a, b = a.requires_grad_(True), b.requires_grad_(True)
    mask = torch.rand(7, 9, generator=g) > 0.3 if options.pop("mask", None) else None
    bias = a @ b.transpose(-1, -2)
    folded = bias if mask is None else bias.masked_fill(~mask, -math.inf)
    assert (explain_attention(q, k, v, kernel, mask=mask, pair_bias=(a, b), **options).path
            == explain_attention(q, k, v, kernel, mask=folded, **options).path != "compiled CPU pass")
    out = kernel_attention(q, k, v, kernel, mask=mask, pair_bias=(a, b), **options)
    ref = kernel_attention(q, k, v, kernel, mask=folded, **options)
    assert torch.equal(out, ref)
    for x, y in zip(torch.autograd.grad(out.sum(), (a, b)), torch.autograd.grad(ref.sum(), (a, b))):
        torch.testing.assert_close(x, y)


def test_explain_attention_says_why_not():
    q, k, v = qkv(dv=8)
    plan = explain_attention(q, k, v, "laplacian", window=2)
    assert plan.path == "banded"
    assert plan.reasons["SDPA"] == "the kernel is not a softmax of inner products (softmax, Gaussian)"
    assert plan.reasons["streamed"] == "applies, but banded takes the call first"
    plan = explain_attention(q, k, v, causal=True)
    assert plan.path == "CPU flash kernel"
    assert plan.reasons["SDPA"] == "the CPU flash kernel takes it"
    assert plan.reasons["streamed"] == "applies: takes the call if CPU flash kernel hands it over"
    assert explain_attention(q, k, v, top_k=3).reasons["SDPA"] == "top_k (a kNN kernel) streams"
    with pytest.raises(ValueError, match="dropout_p"):
        explain_attention(q, k, v, dropout_p=1.5)


def test_gradients_of_gradients_with_dropout_and_a_distance_kernel_are_refused_by_name():
    q, k, v = (t.double().requires_grad_() for t in qkv(L=4, S=5, d=3, dv=3))
    out = kernel_attention(q, k, v, "laplacian", dropout_p=0.2)
    with pytest.raises(RuntimeError, match="create_graph=True.*dropout_p > 0.*'laplacian'"):
        torch.autograd.grad(out.sum(), q, create_graph=True)
    torch.autograd.grad(kernel_attention(q, k, v, "laplacian", dropout_p=0.2).sum(), q)  # first order: fine


def test_the_issues_transposed_image_features():
    """Issue 26's case: image features flattened and transposed, one tensor as q, k and v."""
    t = torch.randn(2, 16, 6, 6, generator=torch.Generator().manual_seed(0)).flatten(2).transpose(1, 2).unsqueeze(1)
    for kernel in ("softmax", "gaussian"):
        torch.testing.assert_close(kernel_attention(t, t, t, kernel), kernel_attention(*[t.contiguous()] * 3, kernel))


# --- distance kernels are the engine's local mean (on iris) ---------------------------------
@pytest.mark.parametrize("kernel,h", [("gaussian", 0.5), ("laplacian", 0.5), ("epanechnikov", 2.0),
                                      ("tricube", 2.5), ("cauchy", 0.7), ("cosine", 2.0)])
def test_distance_kernels_equal_engine_local_mean(kernel, h):
    X, y = iris()
    Q, V = X[::3], np.c_[y, X[:, 0]]
    ref = local_mean(Q, X, V, kernel=kernel, bandwidth=h)
    out64 = kernel_attention(torch.tensor(Q), torch.tensor(X), torch.tensor(V), kernel, bandwidth=h)
    np.testing.assert_allclose(out64.numpy(), ref, atol=1e-10, rtol=0)
    out32 = kernel_attention(*(torch.tensor(a, dtype=torch.float32) for a in (Q, X, V)), kernel, bandwidth=h)
    np.testing.assert_allclose(out32.numpy(), ref, atol=TOL32 * np.abs(V).max(), rtol=0)


def test_softmax_equals_engine_softmax_kernel():
    X, y = iris()
    ref = local_mean(X[:40], X, y, kernel="softmax", bandwidth=5.0)
    out = kernel_attention(torch.tensor(X[:40]), torch.tensor(X), torch.tensor(y, dtype=torch.float64)[:, None], bandwidth=5.0)
    np.testing.assert_allclose(out[:, 0].numpy(), ref, atol=1e-10)


def test_gaussian_default_bandwidth_is_sqrt_d_scaling():
    q, k, v = qkv(d=16)
    # exp(-|q-k|^2 / (2 sqrt d)): a softmax of q.k / sqrt(d) with the bias -|k|^2 / (2 sqrt d)
    bias = (-(k * k).sum(-1) / (2 * 4.0)).unsqueeze(-2)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    np.testing.assert_allclose(kernel_attention(q, k, v, "gaussian"), ref, atol=TOL32)


# --- kernels in position, kNN kernels, empty rows ----------------------------------------------
def test_window_is_a_compact_kernel_in_position():
    q, k, v = qkv(L=9, S=9)
    offset = torch.arange(9)[:, None] - torch.arange(9)[None, :]
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=offset.abs() <= 2)
    np.testing.assert_allclose(kernel_attention(q, k, v, window=2), ref, atol=TOL32)
    tri = torch.tensor(PROFILES["tricube"].log_k((offset.numpy() / 3.0) ** 2), dtype=torch.float32)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=tri)
    np.testing.assert_allclose(kernel_attention(q, k, v, window=("tricube", 3.0)), ref, atol=TOL32)


def test_top_k_uniform_is_knn_regression():
    X, y = load_diabetes(return_X_y=True)
    X = X[:, :4] * 10
    Q, S, yS = X[:60], X[60:], y[60:]
    ref = KNeighborsRegressor(n_neighbors=7).fit(S, yS).predict(Q)
    out = kernel_attention(torch.tensor(Q), torch.tensor(S), torch.tensor(yS)[:, None], "uniform",
                           bandwidth=1e3, top_k=7)
    np.testing.assert_allclose(out[:, 0].numpy(), ref, rtol=1e-12)
    out_g = kernel_attention(torch.tensor(Q), torch.tensor(S), torch.tensor(yS)[:, None], "gaussian",
                             bandwidth=1e3, top_k=7)  # nearly flat kernel on the same 7 neighbours
    np.testing.assert_allclose(out_g[:, 0].numpy(), ref, rtol=1e-4)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "laplacian", "epanechnikov"])
def test_empty_rows_give_zero_not_nan(kernel):
    q, k, v = qkv(dtype=torch.float64)
    q.requires_grad_(True)
    mask = torch.ones(7, 9, dtype=torch.bool)
    mask[3] = False
    out = kernel_attention(q, k, v, kernel, mask=mask)
    assert torch.all(out[..., 3, :] == 0) and torch.all(torch.isfinite(out))
    out.sum().backward()
    assert torch.all(torch.isfinite(q.grad))
    dense = kernel_attention(q, k, v, kernel, mask=mask, top_k=9)
    np.testing.assert_allclose(out.detach(), dense.detach(), atol=1e-12)


def test_compact_kernel_outside_support_gives_zero():
    q = torch.tensor([[0.0], [10.0]])
    k = torch.tensor([[0.0], [0.5]])
    v = torch.tensor([[1.0], [3.0]])
    out = kernel_attention(q, k, v, "epanechnikov", bandwidth=1.0)
    np.testing.assert_allclose(out[:, 0], [(1 * 1 + 3 * 0.75) / 1.75, 0.0], atol=1e-6)


def test_attention_weights_rows_sum_to_one_and_match_output():
    q, k, v = qkv(dtype=torch.float64)
    for kernel in ("softmax", "gaussian", "laplacian"):
        w = attention_weights(q, k, kernel, causal=True)
        np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
        assert torch.all(w.triu(1) == 0)
        np.testing.assert_allclose(w @ v, kernel_attention(q, k, v, kernel, causal=True), atol=1e-12)


# --- local linear attention -------------------------------------------------------------------
def wls_reference(q, k, v, w, ridge):
    """Per query: least squares on [1, k_j - q_i] with sqrt(w) rows and sqrt(ridge) rows on B."""
    out = np.empty((len(q), v.shape[1]))
    d = k.shape[1]
    for i in range(len(q)):
        A = np.c_[np.ones(len(k)), k - q[i]] * np.sqrt(w[i])[:, None]
        b = v * np.sqrt(w[i])[:, None]
        A = np.r_[A, np.c_[np.zeros((d, 1)), np.sqrt(ridge) * np.eye(d)]]
        b = np.r_[b, np.zeros((d, v.shape[1]))]
        out[i] = np.linalg.lstsq(A, b, rcond=None)[0][0]
    return out


@pytest.mark.parametrize("kernel,causal", [("softmax", False), ("softmax", True), ("gaussian", False)])
def test_local_linear_attention_is_weighted_least_squares(kernel, causal):
    q, k, v = (t[0, 0].double() for t in qkv(L=12, S=12, d=4, dv=3, seed=3))
    ridge = 0.05
    w = attention_weights(q, k, kernel, causal=causal).numpy()
    ref = wls_reference(q.numpy(), k.numpy(), v.numpy(), w, ridge)
    out64 = local_linear_attention(q, k, v, kernel, ridge=ridge, causal=causal)
    np.testing.assert_allclose(out64.numpy(), ref, atol=1e-10)
    out32 = local_linear_attention(q.float(), k.float(), v.float(), kernel, ridge=ridge, causal=causal)
    np.testing.assert_allclose(out32.numpy(), ref, atol=1e-4)


def test_local_linear_attention_on_iris_float32():
    X, y = iris()
    X32 = torch.tensor(X + 100.0, dtype=torch.float32)  # an offset that naive moments would not survive
    V = torch.tensor(np.c_[y, X[:, 3]], dtype=torch.float32)
    ridge, h = 1e-2, 1.0
    w = attention_weights(X32.double(), X32.double(), "gaussian", bandwidth=h).numpy()
    ref = wls_reference(X + 100.0, X + 100.0, V.double().numpy(), w, ridge)
    out = local_linear_attention(X32, X32, V, "gaussian", ridge=ridge, bandwidth=h)
    np.testing.assert_allclose(out.numpy(), ref, atol=1e-3)


def test_local_linear_reproduces_linear_values_and_tends_to_local_mean():
    q, k, _ = qkv(dtype=torch.float64, d=3)
    A = torch.tensor([[1.0, -2.0, 0.5], [0.0, 3.0, 1.0]], dtype=torch.float64)
    v = k @ A.T + torch.tensor([0.5, -1.0], dtype=torch.float64)
    out = local_linear_attention(q, k, v, ridge=1e-9)
    np.testing.assert_allclose(out, q @ A.T + torch.tensor([0.5, -1.0], dtype=torch.float64), atol=1e-6)
    q, k, v = qkv(dtype=torch.float64)
    np.testing.assert_allclose(local_linear_attention(q, k, v, ridge=1e9, causal=True),
                               kernel_attention(q, k, v, causal=True), atol=1e-7)


def test_local_linear_attention_gradcheck_and_empty_rows():
    q, k, v = (t[:1, :1, :5].double().requires_grad_(True) for t in qkv(L=5, S=5, d=3, dv=2))
    assert torch.autograd.gradcheck(lambda a, b, c: local_linear_attention(a, b, c, ridge=0.1, causal=True),
                                    (q, k, v))
    mask = torch.ones(5, 5, dtype=torch.bool)
    mask[2] = False
    out = local_linear_attention(q, k, v, mask=mask)
    assert torch.all(out[..., 2, :] == 0) and torch.all(torch.isfinite(out))


# --- bad input ----------------------------------------------------------------------------------
def test_bad_input():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="kernel must be one of"):
        kernel_attention(q, k, v, "nope")
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="bandwidth"):
            kernel_attention(q, k, v, bandwidth=bad)
    with pytest.raises(ValueError, match="bandwidth"):
        kernel_attention(q, k, v, bandwidth=torch.tensor([1.0, -1.0, 1.0]).view(3, 1, 1))
    with pytest.raises(TypeError, match="bandwidth"):
        kernel_attention(q, k, v, bandwidth="1")
    with pytest.raises(ValueError, match="same last dimension"):
        kernel_attention(q, k[..., :4], v)
    with pytest.raises(ValueError, match="same length"):
        kernel_attention(q, k, v[..., :3, :])
    with pytest.raises(ValueError, match="do not broadcast"):
        kernel_attention(q, k[:, :2], v[:, :2])
    with pytest.raises(ValueError, match="shape"):
        kernel_attention(q[0, 0, 0], k, v)
    with pytest.raises(TypeError, match="floating-point"):
        kernel_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="one dtype"):
        kernel_attention(q.double(), k, v)
    with pytest.raises(ValueError, match="dropout_p"):
        kernel_attention(q, k, v, dropout_p=1.0)
    with pytest.raises(ValueError, match="mask"):
        kernel_attention(q, k, v, mask=torch.ones(7, 8, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN"):
        kernel_attention(q, k, v, mask=torch.full((7, 9), math.nan))
    with pytest.raises(TypeError, match="mask"):
        kernel_attention(q, k, v, mask=torch.ones(7, 9, dtype=torch.int64))
    with pytest.raises(ValueError, match="window"):
        kernel_attention(q, k, v, window=-1)
    with pytest.raises(ValueError, match="compact"):
        kernel_attention(q, k, v, window=("gaussian", 2.0))
    with pytest.raises(ValueError, match="top_k"):
        kernel_attention(q, k, v, top_k=0)
    a, b = torch.zeros(7, 2), torch.zeros(9, 2)
    for bad, error in (((a,), TypeError), ([a, "b"], TypeError), ((a.long(), b), TypeError),
                       ((a[:, :1], b), ValueError), ((a[:6], b), ValueError), ((a, b[:8]), ValueError),
                       ((torch.zeros(5, 7, 2), b), ValueError), ((a, torch.full((9, 2), math.inf)), ValueError),
                       ((torch.full((7, 2), math.nan), b), ValueError)):
        with pytest.raises(error, match="pair_bias"):
            kernel_attention(q, k, v, "laplacian", pair_bias=bad)
    for bad in (0.0, -1.0, math.inf):
        with pytest.raises(ValueError, match="ridge"):
            local_linear_attention(q, k, v, ridge=bad)
