"""The FlexAttention formulation of every kernel (the CUDA path) against the float64 streamed path.

On the CPU FlexAttention runs eagerly and forward only (it materialises the scores, slowly), which
still checks the augmented features, ``score_mod`` and the block mask; the compiled kernel, its
backward and bfloat16 are checked where a CUDA device is present.
"""
import math
import warnings

import numpy as np
import pytest

import torch

from localkit.nn import kernel_attention
from localkit.engine.flex import flex_kernel_attention

CASES = [("softmax", {"causal": True}), ("gaussian", {"causal": True, "padding": True}),
         ("epanechnikov", {"window": 5, "padding": True}), ("laplacian", {"window": ("tricube", 7.5), "padding": True})]


def inputs(device="cpu", dtype=torch.float32, L=40):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, L, 8, generator=g) * s for s in (0.5, 0.5, 1.0))
    keep = torch.ones(2, 1, 1, L, dtype=torch.bool)
    keep[1, ..., :12] = False  # with causal: rows without any admissible key
    return [t.to(device, dtype) for t in (q, k, v)] + [keep.to(device)]


def run(kernel, opts, q, k, v, keep, compiled):
    h = math.sqrt(8) if kernel == "softmax" else 3.0
    c = torch.tensor(1 / h if kernel == "softmax" else 1 / h ** 2, device=q.device).expand(2, 2, 1, 1)
    window = opts.get("window")
    window = ("uniform", float(window)) if isinstance(window, int) else window
    mask = keep if opts.get("padding") else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not fused
        out = flex_kernel_attention(kernel, q, k, v, c, opts.get("causal", False), window, mask, compiled)
    ref = kernel_attention(q.double(), k.double(), v.double(), kernel, bandwidth=h, mask=mask,
                           causal=opts.get("causal", False), window=opts.get("window"))
    return out, ref


def test_flex_formulation_matches_streamed_reference_on_cpu():
    """One case with every ingredient: profile features, a windowed profile and padding in the mask."""
    q, k, v, keep = inputs()
    out, ref = run(*CASES[-1], q, k, v, keep, compiled=False)
    np.testing.assert_allclose(out.double().cpu(), ref.cpu(), atol=2e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel,opts", CASES)
def test_compiled_flex_forward_backward_bf16_on_cuda(kernel, opts):
    q, k, v, keep = inputs("cuda", torch.bfloat16, L=256)
    for t in (q, k, v):
        t.requires_grad_(True)
    out, ref = run(kernel, opts, q, k, v, keep, compiled=True)
    np.testing.assert_allclose(out.double().detach().cpu(), ref.detach().cpu(), atol=3e-2)
    out.float().sum().backward()
    assert all(torch.all(torch.isfinite(t.grad)) for t in (q, k, v))
