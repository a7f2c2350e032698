"""The streamed attention paths against an independent float64 dense reference.

Every kernel x dtype x kernel in position (causal, window, padding): the reference takes the
kernel's formula from :mod:`localkit.kernels.profiles` (NumPy, float64) and forms the full weight
matrix; gradients are checked against autograd through a dense float64 torch reference. Block
sizes are shrunk so that every case spans several query and key blocks.
"""
import math

import numpy as np
import pytest

import torch

from localkit.kernels.profiles import PROFILES
from localkit.nn import attention_weights, kernel_attention, local_linear_attention
from localkit.nn import _streaming
from localkit.nn._profiles import LOG_PROFILES

KERNELS = ["softmax"] + sorted(PROFILES)
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
POSITIONS = {
    "none": {},
    "causal": {"causal": True},
    "window": {"window": 5},
    "tricube-window": {"window": ("tricube", 7.5)},
    "padding": {"padding": True},
    "causal+padding": {"causal": True, "padding": True},
    "causal+window+padding": {"causal": True, "window": 6, "padding": True},
}
B, H, L, D, DV = 2, 2, 41, 8, 3
BANDWIDTH = {"softmax": None}  # the softmax's default sqrt(d); the profiles take h = 3 (see qkv)


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 8 keys and at most 16 queries: every case crosses block boundaries."""
    monkeypatch.setattr(_streaming, "KEY_BLOCK", 8)
    monkeypatch.setattr(_streaming, "POSITION_QUERY_BLOCK", 16)
    monkeypatch.setattr(_streaming, "BLOCK_BUDGET", 2 * B * H * 8)


def qkv(dtype, seed=0, L=L, S=L):
    g = torch.Generator().manual_seed(seed)
    q = 0.5 * torch.randn(B, H, L, D, generator=g, dtype=torch.float64)  # distances ~ 2, h = 3
    k = 0.5 * torch.randn(B, H, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, S, DV, generator=g, dtype=torch.float64)
    return tuple(t.to(dtype) for t in (q, k, v))


def padding_mask(S=L):
    keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    keep[0, ..., 30:] = False
    keep[1, ..., :12] = False  # with causal: the first 12 queries of batch 1 see no key at all
    return keep


def reference_weights(q, k, kernel, h, causal=False, window=None, keep=None):
    """Dense weights in float64 from the formulas of localkit.kernels.profiles (NumPy)."""
    q, k = (np.asarray(t, dtype=np.float64) for t in (q, k))
    if kernel == "softmax":
        logw = q @ np.swapaxes(k, -1, -2) / h
    else:
        d2 = ((q[..., :, None, :] - k[..., None, :, :]) ** 2).sum(-1)
        logw = PROFILES[kernel].log_k(d2 / h ** 2)
    offset = np.arange(q.shape[-2])[:, None] - np.arange(k.shape[-2])[None, :]
    if causal:
        logw = np.where(offset >= 0, logw, -np.inf)
    if window is not None:
        name, width = ("uniform", float(window)) if isinstance(window, int) else window
        logw = logw + PROFILES[name].log_k((offset / width) ** 2)
    if keep is not None:
        logw = np.where(np.asarray(keep), logw, -np.inf)
    top = logw.max(-1, keepdims=True)
    w = np.exp(logw - np.where(np.isfinite(top), top, 0.0))
    total = w.sum(-1, keepdims=True)
    return np.where(total > 0, w / np.where(total > 0, total, 1.0), 0.0)


def options(kernel, position):
    opts = {k: v for k, v in POSITIONS[position].items() if k != "padding"}
    keep = padding_mask() if POSITIONS[position].get("padding") else None
    h = BANDWIDTH.get(kernel, 3.0)
    return h, keep, opts


@pytest.mark.parametrize("position", sorted(POSITIONS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kernel", KERNELS)
def test_forward_matches_dense_float64_reference(kernel, dtype, position):
    q, k, v = qkv(dtype)
    h, keep, opts = options(kernel, position)
    out = kernel_attention(q, k, v, kernel, bandwidth=h, mask=keep, **opts)
    assert out.dtype == dtype and out.shape == (B, H, L, DV)
    w = reference_weights(q.double(), k.double(), kernel, math.sqrt(D) if h is None else h,
                          opts.get("causal", False), opts.get("window"), keep)
    ref = w @ v.double().numpy()
    # inputs are rounded to `dtype` before both computations; ours accumulates in float32, so the
    # error is float32 round-off plus the final cast (half an ulp of the output)
    eps = torch.finfo(dtype).eps
    tol = 2e-5 if dtype == torch.float32 else eps * float(np.abs(ref).max())
    np.testing.assert_allclose(out.double().numpy(), ref, atol=tol, rtol=0)


@pytest.mark.parametrize("L_q,S", [(23, 41), (41, 23)])
@pytest.mark.parametrize("window", [5, ("biweight", 6.5)])
def test_window_with_queries_and_keys_of_different_lengths(L_q, S, window):
    q, k, v = qkv(torch.float32, seed=12, L=L_q, S=S)
    keep = padding_mask(S)
    for mask in (None, keep):
        out = kernel_attention(q, k, v, "gaussian", bandwidth=3.0, window=window, mask=mask, causal=True)
        ref = reference_weights(q.double(), k.double(), "gaussian", 3.0, True, window, mask) @ v.double().numpy()
        np.testing.assert_allclose(out.numpy(), ref, atol=2e-5)


def dense_reference(q, k, v, kernel, h, causal=False, window=None, keep=None):
    """The same local mean with autograd, dense, float64, distances from differences."""
    if kernel == "softmax":
        logw = q @ k.transpose(-2, -1) / h
    else:
        d2 = ((q.unsqueeze(-2) - k.unsqueeze(-3)) ** 2).sum(-1)
        logw = LOG_PROFILES[kernel](d2 / h ** 2)
    offset = torch.arange(q.shape[-2])[:, None] - torch.arange(k.shape[-2])[None, :]
    if causal:
        logw = logw.masked_fill(offset < 0, -math.inf)
    if window is not None:
        name, width = ("uniform", float(window)) if isinstance(window, int) else window
        logw = logw + LOG_PROFILES[name]((offset.double() / width) ** 2)
    if keep is not None:
        logw = logw.masked_fill(~keep, -math.inf)
    empty = torch.isneginf(logw.amax(-1, keepdim=True))
    w = torch.softmax(logw.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
    return w @ v


@pytest.mark.parametrize("position", ["none", "causal+padding", "tricube-window"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_gradients_match_autograd_of_dense_reference(kernel, position):
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float64, seed=1))
    h, keep, opts = options(kernel, position)
    h = torch.tensor([3.0, 2.5], dtype=torch.float64).view(2, 1, 1).requires_grad_(True)  # learned, per head
    g = torch.randn(B, H, L, DV, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    out = kernel_attention(q, k, v, kernel, bandwidth=h, mask=keep, **opts)
    ours = torch.autograd.grad((out * g).sum(), (q, k, v, h), allow_unused=True)
    ref_out = dense_reference(q, k, v, kernel, h, opts.get("causal", False), opts.get("window"), keep)
    refs = torch.autograd.grad((ref_out * g).sum(), (q, k, v, h), allow_unused=True)
    np.testing.assert_allclose(out.detach(), ref_out.detach(), atol=1e-12)
    for name, a, b in zip("qkvh", ours, refs):
        a = torch.zeros_like(b) if a is None and b is not None else a
        b = torch.zeros_like(a) if b is None and a is not None else b
        if a is not None:
            np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"d{name}")


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "laplacian", "epanechnikov"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_backward_runs_and_matches(kernel, dtype):
    q, k, v = (t.requires_grad_(True) for t in qkv(dtype, seed=3))
    out = kernel_attention(q, k, v, kernel, bandwidth=None if kernel == "softmax" else 3.0, causal=True)
    out.float().square().sum().backward()
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = dense_reference(q64, k64, v64, kernel, math.sqrt(D) if kernel == "softmax" else 3.0, causal=True)
    ref.square().sum().backward()
    for a, b in ((q.grad, q64.grad), (k.grad, k64.grad), (v.grad, v64.grad)):
        assert a.dtype == dtype and torch.all(torch.isfinite(a))
        scale = float(b.abs().max())
        np.testing.assert_allclose(a.double().numpy(), b.numpy(), atol=8 * torch.finfo(dtype).eps * scale)


def causal_gaussian_qkv(dtype, dv, S, seed):
    """Keys ~ 0.5 N(0, I) with h = 3, one key far out (``|k|^2 / 2h^2`` ~ 1e4: ``exp`` of the key
    bias alone underflows even float64) and a query next to it, so that row is one-hot on it."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (0.5 * torch.randn(B, H, n, m, generator=g, dtype=torch.float64) for n, m in ((L, D), (S, D), (S, dv)))
    k[..., 7, :] += 150.0
    q[..., 10, :] = k[..., 7, :] + 0.01
    return tuple(t.to(dtype) for t in (q, k, v))


@pytest.mark.parametrize("kernel", ["gaussian", "softmax"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("S", [L, 23])
@pytest.mark.parametrize("dv", [D, DV], ids=["dv=d", "dv!=d"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_fused_paths_match_dense_reference(dtype, dv, S, causal, kernel):
    """The fused paths (CPU flash kernel, with the Gaussian's key bias, when ``d_v = d``;
    otherwise public SDPA, the Gaussian's bias folded into one more head dimension for the
    causal kernel or as its mask) in forward and backward; and beyond the float range, where the
    kernel's log-sum-exp reports the overflow, the limit: each query's nearest admissible key
    (largest ``<q, k>`` for the softmax)."""
    from localkit.nn import functional

    assert functional._cpu_flash_fits(*causal_gaussian_qkv(dtype, dv, S, 0), 0.0) == (dv == D)
    q, k, v = (t.requires_grad_(True) for t in causal_gaussian_qkv(dtype, dv, S, seed=13))
    out = kernel_attention(q, k, v, kernel, bandwidth=3.0, causal=causal)
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = dense_reference(q64, k64, v64, kernel, 3.0, causal=causal)
    big = 2.0 ** (600 if dtype == torch.float64 else 66)
    far = kernel_attention(q.detach() * big, k.detach() * big, v.detach(), kernel, bandwidth=3.0, causal=causal)
    d2 = ((q64.detach().unsqueeze(-2) - k64.detach().unsqueeze(-3)) ** 2).sum(-1)
    if kernel == "softmax":
        d2 = -(q64.detach() @ k64.detach().transpose(-2, -1))
    if causal:
        d2 = d2.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), math.inf)
    nearest = torch.gather(v64.detach(), -2, d2.argmin(-1, keepdim=True).expand(-1, -1, -1, dv))
    np.testing.assert_allclose(far.double(), nearest, atol=0)
    assert torch.all(torch.isfinite(out))
    # logits are c (<q, k> - |k|^2 / 2): absolute error ~ eps c |k|^2 on a logit, relative on a weight
    tol = 4 * torch.finfo(dtype).eps * float(k64.detach().square().sum(-1).max()) / 9.0
    np.testing.assert_allclose(out.detach().double(), ref.detach(), atol=tol * float(v64.detach().abs().max()), rtol=0)
    np.testing.assert_allclose(out[..., 10, :].detach().double(), v64[..., 7, :].detach(), atol=tol)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
    ours = torch.autograd.grad((out * g.to(dtype)).sum(), (q, k, v))
    refs = torch.autograd.grad((ref * g).sum(), (q64, k64, v64))
    for name, a, b in zip("qkv", ours, refs):
        np.testing.assert_allclose(a.double(), b, atol=tol * float(b.abs().max() + 1), rtol=0, err_msg=f"d{name}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_causal_gaussian_per_head_bandwidth_and_broadcast_batch(dtype):
    """A learned per-head bandwidth through the CPU flash path, with batch dimensions that are
    not (B, H) and broadcast between q and k, v."""
    g = torch.Generator().manual_seed(15)
    q = (0.5 * torch.randn(3, B, H, 19, D, generator=g, dtype=torch.float64)).requires_grad_(True)
    k, v = ((0.5 * torch.randn(B, H, 19, D, generator=g, dtype=torch.float64)).requires_grad_(True) for _ in range(2))
    h = torch.tensor([3.0, 2.5], dtype=torch.float64).view(2, 1, 1).requires_grad_(True)
    ref = dense_reference(q, k, v, "gaussian", h, causal=True)
    g_out = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    refs = torch.autograd.grad((ref * g_out).sum(), (q, k, v, h))
    args = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
    h_ = h.detach().to(dtype).requires_grad_(True)
    out = kernel_attention(*args, "gaussian", bandwidth=h_, causal=True)
    ours = torch.autograd.grad((out.double() * g_out).sum(), (*args, h_))
    if dtype == torch.float64:
        tol_out, tol_grad = 1e-13, 1e-11
    else:  # inputs rounded to dtype: relative error ~ eps on every weight
        tol_out = tol_grad = 8 * torch.finfo(dtype).eps
    np.testing.assert_allclose(out.detach().double(), ref.detach(), atol=tol_out * float(ref.detach().abs().max()), rtol=0)
    for name, a, b in zip("qkvh", ours, refs):
        np.testing.assert_allclose(a.double(), b, atol=tol_grad * float(b.abs().max()), rtol=0, err_msg=f"d{name}")


@pytest.mark.parametrize("route", ["none", "causal", "tricube-window", "padding", "causal+padding", "top_k"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
@pytest.mark.parametrize("dtype,big", [(torch.float64, 2.0 ** 660), (torch.float32, 2.0 ** 66)], ids=str)
def test_logits_beyond_the_float_range_give_the_limit(dtype, big, kernel, route):
    """``|q|, |k| ~ big``: ``<q, k>`` overflows, yet every row's weights are the exact ones: one-hot
    on the best admissible key for rows at that scale, and for query 0, scaled by ``1 / big``
    (softmax logits ``<q_0, k_j> / sqrt(d)`` of order one), the ordinary softmax weights (no
    tempering by a global factor). Reference: float64 logits of the unscaled tensors, with the
    rows at scale ``big`` multiplied by 1e300 (one-hot in float64 too)."""
    q0, k0, v = (t.to(dtype) for t in qkv(torch.float64, seed=16))
    row = torch.full((L, 1), big, dtype=torch.float64)
    row[0] = 1 / big
    q, k = (q0.double() * row).to(dtype), (k0.double() * big).to(dtype)  # powers of two: exact
    _, keep, opts = options(kernel, route if route in POSITIONS else "none")
    if route == "top_k":
        opts = {"top_k": 7}
    h = math.sqrt(D) if kernel == "softmax" else 3.0
    qr, kr = q0.double().numpy(), k0.double().numpy()
    if kernel == "softmax":
        logw = qr @ np.swapaxes(kr, -1, -2) / h
    else:
        logw = -((qr[..., :, None, :] - kr[..., None, :, :]) ** 2).sum(-1) / (2 * h * h)
        logw[..., 0, :] = -(kr * kr).sum(-1)[..., None, :].squeeze(-2) / (2 * h * h)  # q_0 ~ 0 next to k ~ big
    logw[..., 1:, :] *= 1e300
    if kernel == "gaussian":
        logw[..., 0, :] *= 1e300
    offset = np.arange(L)[:, None] - np.arange(L)[None, :]
    if opts.get("causal"):
        logw = np.where(offset >= 0, logw, -np.inf)
    if "window" in opts:
        name, width = opts["window"]
        logw = logw + PROFILES[name].log_k((offset / width) ** 2)
    if keep is not None:
        logw = np.where(keep.numpy(), logw, -np.inf)
    if route == "top_k":  # the 7 best of each row, by the same ordering
        kth = np.sort(logw, -1)[..., -7][..., None]
        logw = np.where(logw >= kth, logw, -np.inf)
    top = logw.max(-1, keepdims=True)
    w = np.exp(logw - np.where(np.isfinite(top), top, 0.0))
    w = np.where(np.isfinite(top), w / np.where(np.isfinite(top), w.sum(-1, keepdims=True), 1.0), 0.0)
    v = v.requires_grad_(True)
    out = kernel_attention(q, k, v, kernel, bandwidth=None if kernel == "softmax" else h, mask=keep, **opts)
    ref = w @ v.detach().double().numpy()
    tol = 4 * torch.finfo(dtype).eps * float(np.abs(ref).max())
    np.testing.assert_allclose(out.detach().double().numpy(), ref, atol=tol, rtol=0)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(17), dtype=torch.float64)
    (dv,) = torch.autograd.grad((out.double() * g).sum(), (v,))  # dV = W^T g: exact weights, exact gradient
    np.testing.assert_allclose(dv.double().numpy(), np.swapaxes(w, -1, -2) @ g.numpy(), atol=8 * tol, rtol=0)
    weights = attention_weights(q, k, kernel, bandwidth=None if kernel == "softmax" else h, mask=keep, **opts)
    np.testing.assert_allclose(weights.double().numpy(), w, atol=tol, rtol=0)


@pytest.mark.parametrize("position", ["none", "causal+padding", "tricube-window"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "laplacian", "epanechnikov", "uniform"])
def test_top_k_streams_and_matches_dense_reference(kernel, position):
    """A kNN kernel over streamed key blocks (running top-k, then the threshold as a kernel in
    position): forward and gradients against the dense float64 reference restricted to each
    row's ``top_k`` closest admissible keys (largest log-weight for the softmax and the
    Gaussian, smallest distance for the profiles)."""
    top_k = 6
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float64, seed=18))
    h, keep, opts = options(kernel, position)
    h = math.sqrt(D) if h is None else h
    causal, window = opts.get("causal", False), opts.get("window")
    qn, kn = q.detach().numpy(), k.detach().numpy()
    with np.errstate(divide="ignore"):
        if kernel in ("softmax", "gaussian"):
            near = np.log(reference_weights(qn, kn, kernel, h, causal, window, keep))
        else:
            allowed = reference_weights(qn, kn, "uniform", 1e9, causal, window, keep) > 0
            near = np.where(allowed, -np.sqrt(((qn[..., :, None, :] - kn[..., None, :, :]) ** 2).sum(-1)), -np.inf)
    kth = np.sort(near, -1)[..., -top_k][..., None]
    chosen = torch.tensor(near >= kth) & (torch.ones(L, L, dtype=torch.bool) if keep is None else keep)
    ref = dense_reference(q, k, v, kernel, h, causal, window, chosen)
    out = kernel_attention(q, k, v, kernel, bandwidth=h, mask=keep, top_k=top_k, **opts)
    np.testing.assert_allclose(out.detach(), ref.detach(), atol=1e-12)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(19), dtype=torch.float64)
    for name, a, b in zip("qkv", torch.autograd.grad((out * g).sum(), (q, k, v), allow_unused=True),
                          torch.autograd.grad((ref * g).sum(), (q, k, v), allow_unused=True)):
        a, b = (torch.zeros_like(v if name == "v" else q) if t is None else t for t in (a, b))
        np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"d{name}")
    out32 = local_linear_attention(q.float(), k.float(), v.float(), kernel, ridge=0.5, bandwidth=h, mask=keep,
                                   top_k=top_k, **opts)
    dense = local_linear_attention(q.float(), k.float(), v.float(), kernel, ridge=0.5, bandwidth=h,
                                   mask=None if keep is None else keep.float().log().requires_grad_(True),
                                   top_k=top_k, **opts)  # a float mask that requires grad: the dense path
    np.testing.assert_allclose(out32.detach(), dense.detach(), atol=1e-5)


def test_results_do_not_depend_on_block_size(monkeypatch):
    q, k, v = qkv(torch.float64, seed=4)
    mask = torch.rand(L, L, generator=torch.Generator().manual_seed(5)) > 0.2
    outs = []
    for block in (8, 16, 64):
        monkeypatch.setattr(_streaming, "KEY_BLOCK", block)
        monkeypatch.setattr(_streaming, "POSITION_QUERY_BLOCK", block)
        outs.append(kernel_attention(q, k, v, "laplacian", bandwidth=2.0, mask=mask, causal=True))
    for other in outs[1:]:
        np.testing.assert_allclose(other, outs[0], atol=1e-13)


def test_blocks_outside_the_window_and_padding_are_skipped():
    plan = _streaming.Plan("softmax", 64, 64, causal=True, window=("uniform", 4.0), q_block=16, k_block=8)
    for i0, i1, keys in plan.rows():
        assert keys[0][0] >= max(0, i0 - 4) and keys[-1][1] <= i1  # causal and reach 4
        assert sum(j1 - j0 for j0, j1 in keys) <= i1 - i0 + 4
    keep = torch.ones(2, 1, 1, 64, dtype=torch.bool)
    keep[..., 40:] = False  # every batch element padded from 40 on
    plan = _streaming.Plan("softmax", 64, 64, mask=keep, q_block=64, k_block=8)
    (_, _, keys), = plan.rows()
    assert keys[-1][1] == 40


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_tiny_bandwidth_gives_the_nearest_keys_value(dtype):
    """Issue 14: h = 1e-20 overflows 1/h^2 in float32; the limit h -> 0 is the nearest key."""
    q, k, v = qkv(dtype, seed=6, L=13, S=17)
    d2 = ((q.double().unsqueeze(-2) - k.double().unsqueeze(-3)) ** 2).sum(-1)
    nearest = torch.gather(v.double(), -2, d2.argmin(-1, keepdim=True).expand(-1, -1, -1, DV))
    for kernel in ("gaussian", "laplacian"):
        out = kernel_attention(q, k, v, kernel, bandwidth=1e-20)
        np.testing.assert_allclose(out.double(), nearest, atol=1e-6, err_msg=kernel)
    out = local_linear_attention(q, k, v, "gaussian", ridge=1e-3, bandwidth=1e-20)
    np.testing.assert_allclose(out.double(), nearest, atol=1e-5)


def test_tiny_per_head_bandwidth_tensor_is_finite():
    q, k, v = qkv(torch.float32, seed=7)
    h = torch.tensor([1e-20, 1.0]).view(2, 1, 1)
    out = kernel_attention(q, k, v, "gaussian", bandwidth=h)
    assert torch.all(torch.isfinite(out))
    np.testing.assert_allclose(out[:, 1], kernel_attention(q[:, 1], k[:, 1], v[:, 1], "gaussian", bandwidth=1.0),
                               atol=1e-6)


@pytest.mark.parametrize("position", ["none", "causal+padding", "tricube-window"])
@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "epanechnikov"])
def test_streamed_local_linear_matches_dense_weights(kernel, position):
    """Streamed moments against the closed form on the dense float64 reference weights."""
    q, k, v = qkv(torch.float64, seed=8)
    h, keep, opts = options(kernel, position)
    ridge = 0.05
    out = local_linear_attention(q, k, v, kernel, ridge=ridge, bandwidth=h, mask=keep, **opts)
    w = torch.tensor(reference_weights(q, k, kernel, math.sqrt(D) if h is None else h,
                                       opts.get("causal", False), opts.get("window"), keep))
    kbar, vbar = w @ k, w @ v
    c_kk = torch.einsum("...ij,...jk,...jl->...ikl", w, k, k) - kbar.unsqueeze(-1) * kbar.unsqueeze(-2)
    c_vk = torch.einsum("...ij,...jk,...jl->...ikl", w, v, k) - vbar.unsqueeze(-1) * kbar.unsqueeze(-2)
    x = torch.linalg.solve(c_kk + ridge * torch.eye(D, dtype=torch.float64), (kbar - q).unsqueeze(-1))
    ref = (vbar - (c_vk @ x).squeeze(-1)).masked_fill(w.sum(-1, keepdim=True) == 0, 0.0)
    np.testing.assert_allclose(out, ref, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_local_linear_low_precision_solves_in_float32(dtype):
    q, k, v = (t[:, :, :24].requires_grad_(True) for t in qkv(dtype, seed=9))
    out = local_linear_attention(q, k, v, ridge=0.1, causal=True)
    assert out.dtype == dtype and torch.all(torch.isfinite(out))
    ref = local_linear_attention(*(t.detach().double() for t in (q, k, v)), ridge=0.1, causal=True)
    np.testing.assert_allclose(out.detach().double(), ref, atol=4 * torch.finfo(dtype).eps * float(ref.abs().max()))
    out.float().sum().backward()
    assert all(torch.all(torch.isfinite(t.grad)) for t in (q, k, v))


def test_local_linear_gradients_through_checkpointed_blocks():
    """Gradients of the streamed, checkpointed moments against autograd through the dense weights
    (``top_k = S`` keeps every key and takes the dense path, gradchecked in test_nn_functional)."""
    q, k, v = (t[:, :, :24].requires_grad_(True) for t in qkv(torch.float64, seed=10))
    g = torch.randn(B, H, 24, DV, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    grads = []
    for top_k in (None, 24):
        out = local_linear_attention(q, k, v, "laplacian", ridge=0.1, bandwidth=2.0, window=6, top_k=top_k)
        grads.append(torch.autograd.grad((out * g).sum(), (q, k, v)))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, atol=1e-10)
