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
from localkit.fused.flex import flex_kernel_attention

CASES = [("softmax", {"causal": True}), ("gaussian", {"causal": True}), ("epanechnikov", {"window": 5}),
         ("laplacian", {"window": ("tricube", 7.5)})]


def inputs(device="cpu", dtype=torch.float32, L=40):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, L, 8, generator=g) * s for s in (0.5, 0.5, 1.0))
    return [t.to(device, dtype) for t in (q, k, v)]


def run(kernel, opts, q, k, v, compiled):
    h = math.sqrt(8) if kernel == "softmax" else 3.0
    c = torch.tensor(1 / h if kernel == "softmax" else 1 / h ** 2, device=q.device).expand(2, 2, 1, 1)
    window = opts.get("window")
    window = ("uniform", float(window)) if isinstance(window, int) else window
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not fused
        out = flex_kernel_attention(kernel, q, k, v, c, opts.get("causal", False), window, compiled)
    ref = kernel_attention(q.double(), k.double(), v.double(), kernel, bandwidth=h,
                           causal=opts.get("causal", False), window=opts.get("window"))
    return out, ref


@pytest.mark.parametrize("kernel,opts", CASES)
def test_flex_formulation_matches_streamed_reference_on_cpu(kernel, opts):
    """Every ingredient: the profile features, a windowed profile, the causal block mask."""
    out, ref = run(kernel, opts, *inputs(), compiled=False)
    np.testing.assert_allclose(out.double().cpu(), ref.cpu(), atol=2e-5)


@pytest.mark.parametrize("dtype, fused", [(torch.float32, "The Triton attention kernel"),
                                          (torch.float64, "FlexAttention")])
def test_a_kernel_that_cannot_compile_streams_instead(monkeypatch, dtype, fused):
    """A compile failure (they vary with torch and Triton) costs speed, never the answer: on CUDA,
    float32 and half inputs take our Triton kernel, float64 FlexAttention (routes forced here)."""
    import localkit.fused.flex as flex
    import localkit.nn.functional as functional

    def broken(*args, **kwargs):
        raise RuntimeError("Triton: acc.type.shape == ret_ty.shape")

    q, k, v = (t.to(dtype) for t in inputs())
    ref = kernel_attention(q.double(), k.double(), v.double(), "laplacian", bandwidth=3.0, window=5)
    monkeypatch.setattr(functional, "flex_available", lambda q: True)
    if dtype == torch.float64:
        monkeypatch.setattr(functional, "flex_kernel_attention", broken)
    else:
        triton_attention = pytest.importorskip("localkit.fused.triton_attention")
        monkeypatch.setattr(triton_attention, "triton_kernel_attention", broken)
    monkeypatch.setattr(flex, "_FAILED", set())
    with pytest.warns(RuntimeWarning, match=f"{fused} failed to compile.*streamed"):
        out = kernel_attention(q, k, v, "laplacian", bandwidth=3.0, window=5)
    np.testing.assert_allclose(out.double(), ref, atol=2e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per kernel: the next call streams without a word
        kernel_attention(q, k, v, "laplacian", bandwidth=3.0, window=5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel,opts", CASES)
def test_compiled_flex_forward_backward_bf16_on_cuda(kernel, opts):
    q, k, v = inputs("cuda", torch.bfloat16, L=256)
    for t in (q, k, v):
        t.requires_grad_(True)
    out, ref = run(kernel, opts, q, k, v, compiled=True)
    np.testing.assert_allclose(out.double().detach().cpu(), ref.detach().cpu(), atol=3e-2)
    out.float().sum().backward()
    assert all(torch.all(torch.isfinite(t.grad)) for t in (q, k, v))


@pytest.mark.parametrize("L, S", [(300, 300), (130, 257), (256, 100)])
@pytest.mark.parametrize("causal, window", [(True, None), (False, ("uniform", 5.0)), (True, ("tricube", 140.5)),
                                            (False, ("uniform", 0.0))])
def test_block_masks_from_the_blocks_bounds_equal_torchs_dense_construction(L, S, causal, window):
    """Our block masks (built from each pair of blocks' offset range, never from ``L x S`` pairs)
    list the same partial and full key blocks per query block as torch's ``create_block_mask``
    (which evaluates every pair), and their ``mask_mod`` admits exactly the kernel's pairs."""
    from torch.nn.attention.flex_attention import create_block_mask, create_mask

    from localkit.fused.flex import _block_mask

    ours = _block_mask(L, S, causal, window, "cpu")
    torchs = create_block_mask(ours.mask_mod, None, None, L, S, device="cpu")
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    admitted = (i >= j) if causal else torch.ones(L, S, dtype=torch.bool)
    if window is not None:
        admitted = admitted & ((i - j).abs() <= math.floor(window[1]))
    assert torch.equal(create_mask(ours.mask_mod, None, None, L, S, device="cpu")[0, 0], admitted)
    for count, index in [("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices")]:
        n_ours, n_torchs = getattr(ours, count)[0, 0], getattr(torchs, count)[0, 0]
        assert torch.equal(n_ours, n_torchs)
        for row, n in enumerate(n_ours.tolist()):
            assert sorted(getattr(ours, index)[0, 0, row, :n].tolist()) == \
                sorted(getattr(torchs, index)[0, 0, row, :n].tolist())
