"""Attention kernels on a CUDA device against the float64 dense reference on the CPU: forward and
gradients, float32 and bfloat16, and the memory of the Gaussian's fused path (no (L, S) tensor).
Skipped without CUDA (CI has none; `python benchmarks/run_gpu_checks.py` runs them on a GPU)."""
import math

import pytest

import torch

from localkit.kernels.profiles import PROFILES
from localkit.nn import kernel_attention

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def dense_reference(q, k, v, kernel, h, causal):
    """``softmax(log k) v`` in float64 from the profile's formula, with dense weights (0 for a row
    whose kernel vanishes on every admissible key, as kernel_attention documents)."""
    q, k, v = (t.double() for t in (q, k, v))
    if kernel == "softmax":
        logits = q @ k.transpose(-2, -1) / h
    else:
        d2 = ((q[..., :, None, :] - k[..., None, :, :]) ** 2).sum(-1)
        logits = PROFILES[kernel].log_k_for(torch)(d2 / h ** 2)
    if causal:
        L, S = logits.shape[-2:]
        logits = logits.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), -math.inf)
    empty = torch.isneginf(logits).all(-1, keepdim=True)  # rows without any admissible key give 0
    return torch.softmax(logits.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0) @ v


FLOAT32, BFLOAT16 = (torch.float32, 1e-4), (torch.bfloat16, 3e-2)
# the SDPA kernels in every combination; the FlexAttention ones (each a compile) in a few
CASES = [(kernel, causal, dtype) for kernel in ("softmax", "gaussian") for causal in (False, True)
         for dtype in (FLOAT32, BFLOAT16)]
CASES += [("laplacian", True, FLOAT32), ("laplacian", False, BFLOAT16), ("epanechnikov", False, FLOAT32)]


@pytest.mark.parametrize("kernel, causal, dtype", CASES)
def test_forward_and_gradients_match_the_float64_reference(kernel, causal, dtype):
    dtype, atol = dtype
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 96, 16, generator=g) for _ in range(3))
    h = {"softmax": 4.0, "epanechnikov": 8.0}.get(kernel, 3.0)  # 8: no empty support at |q - k| ~ 5.7
    ref_inputs = [t.double().requires_grad_(True) for t in (q, k, v)]
    ref = dense_reference(*ref_inputs, kernel, h, causal)
    ref.pow(2).sum().backward()
    gpu = [t.to("cuda", dtype).requires_grad_(True) for t in (q, k, v)]
    out = kernel_attention(*gpu, kernel, bandwidth=h, causal=causal)
    assert out.dtype == dtype and out.is_cuda
    torch.testing.assert_close(out.double().cpu(), ref.detach(), rtol=0, atol=atol)
    out.float().pow(2).sum().backward()
    for got, want in zip(gpu, ref_inputs):
        scale = want.grad.abs().max().item()
        torch.testing.assert_close(got.grad.double().cpu(), want.grad, rtol=0, atol=10 * atol * scale)


def test_gaussian_forward_backward_forms_no_length_by_length_tensor():
    B, H, L, d = 1, 2, 4096, 32
    q, k, v = (torch.randn(B, H, L, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    kernel_attention(q, k, v, "gaussian").float().sum().backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    one_map = B * H * L * L * 2  # one bfloat16 (L, S) map per head
    assert peak < one_map / 4, f"peak {peak / 2**20:.1f} MiB against one (L, S) map of {one_map / 2**20:.0f} MiB"
