"""``torch.compile(fullgraph=True)`` through the fused, banded and streamed attention paths on the
CPU, forward and backward, against the dense float64 reference of test_nn_streaming.

One function through the three paths is traced whole (dynamo and AOT autograd, no code generation:
a few seconds); the per-path cases compile with inductor and run with ``LOCALKIT_SLOW_TESTS=1``."""
import os

import numpy as np
import pytest
import torch
from test_nn_streaming import dense_reference

from localkit.nn import LocalMeanAttention, kernel_attention, local_linear_attention

slow = pytest.mark.skipif(os.environ.get("LOCALKIT_SLOW_TESTS") != "1",
                          reason="torch.compile, several seconds a case: LOCALKIT_SLOW_TESTS=1 runs it")
B, H, L, D = 1, 2, 40, 8


def qkv(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(0.5 * torch.randn(B, H, L, D, generator=g, dtype=torch.float64)).requires_grad_(True) for _ in range(3)]


def padding():
    keep = torch.ones(B, 1, 1, L, dtype=torch.bool)
    keep[..., 33:] = False
    return keep


def check(f, ref, inputs, backend="inductor"):
    """``f`` compiled with fullgraph (a graph break raises) against ``ref``, output and gradients."""
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend=backend)(*inputs)
    expected = ref(*inputs)
    np.testing.assert_allclose(out.detach(), expected.detach(), atol=1e-12)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    ours = torch.autograd.grad((out * g).sum(), inputs)
    theirs = torch.autograd.grad((expected * g).sum(), inputs)
    for name, a, b in zip("qkv", ours, theirs):
        np.testing.assert_allclose(a, b, atol=1e-10, err_msg=f"d{name}")


def test_fused_banded_and_streamed_paths_compile_without_graph_breaks():
    keep = padding()

    def attend(q, k, v):
        return (kernel_attention(q, k, v, "gaussian", bandwidth=3.0, causal=True)  # CPU flash kernel, key bias
                + kernel_attention(q, k, v, window=5, mask=keep)  # banded key view
                + kernel_attention(q, k, v, "laplacian", bandwidth=3.0, causal=True, mask=keep))  # streamed

    def reference(q, k, v):
        return (dense_reference(q, k, v, "gaussian", 3.0, causal=True)
                + dense_reference(q, k, v, "softmax", D ** 0.5, window=5, keep=keep)
                + dense_reference(q, k, v, "laplacian", 3.0, causal=True, keep=keep))

    # aot_eager: the whole graph, forward and backward, traced as inductor gets it, in seconds;
    # inductor's code generation itself is exercised by the slow cases
    check(attend, reference, qkv(), backend="aot_eager")


@slow
@pytest.mark.parametrize("kernel,opts", [
    ("softmax", {"causal": True}), ("softmax", {"padding": True}), ("gaussian", {"padding": True}),
    ("gaussian", {"window": ("tricube", 6.5), "padding": True}), ("epanechnikov", {"causal": True, "window": 7}),
    ("laplacian", {"padding": True}), ("softmax", {"causal": True, "float padding": True})])
def test_each_path_compiles_without_graph_breaks(kernel, opts):
    keep = padding()
    mask = keep if opts.get("padding") else None
    if opts.get("float padding"):
        mask = torch.zeros(keep.shape, dtype=torch.float64).masked_fill(~keep, -torch.inf)
    h = D ** 0.5 if kernel == "softmax" else 3.0
    kw = {"causal": opts.get("causal", False), "window": opts.get("window")}
    check(lambda q, k, v: kernel_attention(q, k, v, kernel, bandwidth=h, mask=mask, **kw),
          lambda q, k, v: dense_reference(q, k, v, kernel, h, keep=None if mask is None else keep, **kw), qkv())


@slow
def test_local_linear_and_module_compile_without_graph_breaks():
    q, k, v = qkv(2)
    torch._dynamo.reset()
    f = torch.compile(lambda q, k, v: local_linear_attention(q, k, v, ridge=0.1, causal=True), fullgraph=True)
    np.testing.assert_allclose(f(q, k, v).detach(), local_linear_attention(q, k, v, ridge=0.1, causal=True).detach(),
                               atol=1e-12)
    m = LocalMeanAttention(16, 2, kernel="laplacian", batch_first=True, learn_bandwidth=True, dtype=torch.float64)
    x = torch.randn(2, L, 16, dtype=torch.float64)
    pad = torch.zeros(2, L, dtype=torch.bool)
    pad[1, 30:] = True
    torch._dynamo.reset()
    f = torch.compile(lambda x: m(x, key_padding_mask=pad, need_weights=False)[0], fullgraph=True)
    out = f(x)
    np.testing.assert_allclose(out.detach(), m(x, key_padding_mask=pad, need_weights=False)[0].detach(), atol=1e-12)
    out.sum().backward()
    assert m.log_bandwidth.grad is not None and torch.all(torch.isfinite(m.log_bandwidth.grad))
