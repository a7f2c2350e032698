"""Local linear attention's compiled forward pass (:mod:`localkit.fused.cpu_local_linear`) against
the float64 streamed path (the reference: moments streamed over key blocks and a solve).

Every kernel it takes x dtype x (none, causal, padding, causal + padding), on inputs rounded to the
dtype before both computations, tiles small enough that every case crosses several query and key
tiles; the routing (inference only: gradients, float64, windows and ``top_k`` keep the streamed
path); linear values reproduced; ``torch.compile(fullgraph=True)``.
"""
import numpy as np
import pytest

import torch

from localkit.fused import cpu_attention, cpu_local_linear
from localkit.nn import local_linear_attention

KERNELS = ("softmax", "gaussian") + cpu_attention.ROUTED
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
POSITIONS = ["none", "causal", "padding", "causal+padding"]
B, H, D, DV = 2, 2, 6, 3
#: a ridge well above float32 round-off: rows with few keys (causal, compact supports) have
#: ``z = (C_kk + ridge I)^{-1} (kbar - q)`` of size ``|kbar - q| / ridge``, and the float32 error of
#: the intercept grows with it (the float32 streamed path's alike)
RIDGE = 0.05


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    """Tiles of 16 queries and 32 keys (arguments of the compiled pass: no recompilation)."""
    monkeypatch.setattr(cpu_local_linear, "TILE_Q", 16)
    monkeypatch.setattr(cpu_local_linear, "TILE_K", 32)


@pytest.fixture
def calls(monkeypatch):
    """How many times local_linear_attention entered the compiled pass."""
    count = []
    original = cpu_local_linear.cpu_local_linear

    def counted(*args):
        count.append(1)
        return original(*args)

    monkeypatch.setattr(cpu_local_linear, "cpu_local_linear", counted)
    return count


def qkv(dtype, L=70, S=90, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = 0.5 * torch.randn(B, H, L, D, generator=g, dtype=torch.float64) + 3.0  # off the origin
    k = 0.5 * torch.randn(B, H, S, D, generator=g, dtype=torch.float64) + 3.0
    v = torch.randn(B, H, S, DV, generator=g, dtype=torch.float64) - 2.0
    q[..., :5, :] = k[..., 3:8, :]  # queries at keys: u = 0
    return tuple(t.to(dtype) for t in (q, k, v))


def padding(S=90):
    keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    keep[0, ..., 60:] = False
    keep[1, ..., :20] = False  # with causal: batch 1's first 20 queries see no key
    return keep


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kernel", KERNELS)
def test_forward_matches_float64_streamed_path(kernel, dtype, position, calls):
    q, k, v = qkv(dtype)
    causal, keep = "causal" in position, (padding() if "padding" in position else None)
    h = None if kernel in ("softmax", "gaussian") else 2.0
    out = local_linear_attention(q, k, v, kernel, ridge=RIDGE, bandwidth=h, mask=keep, causal=causal)
    assert calls == [1] and out.dtype == dtype
    ref = local_linear_attention(*(t.double() for t in (q, k, v)), kernel, ridge=RIDGE, bandwidth=h, mask=keep,
                                 causal=causal)
    if keep is not None and causal:
        assert torch.all(ref[1, :, :20] == 0)  # rows without a key give 0 in both
    # float32 accumulation (inputs ~3 off the origin), then the cast to dtype (half an ulp of the output)
    tol = 2e-5 * float(ref.abs().max()) + (0.0 if dtype == torch.float32
                                            else torch.finfo(dtype).eps * float(ref.abs().max()))
    np.testing.assert_allclose(out.double(), ref, atol=tol, rtol=0)


def test_float_key_mask_and_broadcast_bandwidth(calls):
    q, k, v = qkv(torch.float32, L=40, S=50, seed=1)
    bias = torch.randn(B, 1, 1, 50, generator=torch.Generator().manual_seed(2)).double()
    bias[0, ..., :10] = -float("inf")
    h = torch.tensor([1.5, 3.0]).view(1, H, 1, 1)  # one bandwidth per head
    out = local_linear_attention(q, k, v, "laplacian", ridge=RIDGE, bandwidth=h, mask=bias.float())
    ref = local_linear_attention(q.double(), k.double(), v.double(), "laplacian", ridge=RIDGE, bandwidth=h.double(),
                                 mask=bias)
    assert calls == [1]
    np.testing.assert_allclose(out.double(), ref, atol=2e-5 * float(ref.abs().max()), rtol=0)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "epanechnikov"])
def test_linear_values_are_reproduced(kernel, calls):
    """``v = A k + b`` gives ``A q + b`` at every query (``ridge -> 0``), far from the origin too."""
    q, k, _ = qkv(torch.float32, L=50, S=300, seed=3)
    A = torch.tensor([[1.0, -2.0, 0.5, 0.0, 1.0, 0.25], [0.0, 3.0, 1.0, -1.0, 0.5, 2.0]])
    b = torch.tensor([0.5, -1.0])
    out = local_linear_attention(q, k, k @ A.T + b, kernel, ridge=1e-6, bandwidth=None if kernel != "epanechnikov"
                                 else 4.0)
    assert calls == [1]
    expected = q.double() @ A.double().T + b.double()
    np.testing.assert_allclose(out.double(), expected, atol=2e-4 * float(expected.abs().max()), rtol=0)


def test_default_ridge_at_several_tiles():
    """The default ridge (1e-3), every query with every key: float32 round-off only."""
    q, k, v = qkv(torch.float32, L=150, S=170, seed=4)
    out = local_linear_attention(q, k, v)
    ref = local_linear_attention(q.double(), k.double(), v.double())
    np.testing.assert_allclose(out.double(), ref, atol=1e-4 * float(ref.abs().max()), rtol=0)


def test_training_float64_window_top_k_and_query_masks_keep_the_streamed_path(calls):
    q, k, v = qkv(torch.float32, L=20, S=20)
    grads = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out = local_linear_attention(*grads, ridge=RIDGE)
    out.sum().backward()  # the streamed path's gradients
    assert all(t.grad is not None for t in grads)
    local_linear_attention(*(t.double() for t in (q, k, v)))
    local_linear_attention(q, k, v, window=4)
    local_linear_attention(q, k, v, top_k=5)
    local_linear_attention(q, k, v, mask=torch.ones(20, 20, dtype=torch.bool).tril())
    assert calls == []
    with torch.no_grad():  # inference: the compiled pass, the same intercepts
        fused = local_linear_attention(*grads, ridge=RIDGE)
    assert calls == [1]
    out = out.detach()
    np.testing.assert_allclose(fused, out, atol=2e-5 * float(out.abs().max()))


def test_compiles_whole():
    """The pass is a custom operator: ``torch.compile(fullgraph=True)`` traces it."""
    q, k, v = qkv(torch.float32, L=20, S=24, seed=5)
    keep = torch.ones(B, 1, 1, 24, dtype=torch.bool)
    keep[..., :3] = False
    f = lambda q, k, v: local_linear_attention(q, k, v, "gaussian", ridge=RIDGE, mask=keep, causal=True)
    with torch.no_grad():
        out = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
        np.testing.assert_allclose(out, f(q, k, v), atol=1e-6)


@pytest.mark.parametrize("case", ["positive definite", "indefinite by round-off"])
def test_solve_by_cholesky_or_pivoted_elimination(case):
    """``_solve``: Cholesky where every pivot stays above ``ridge / 2``; Gaussian elimination with
    partial pivoting where round-off left ``C + ridge I`` indefinite (as moments of keys ~1e8 in
    float32 do), both against NumPy's LU solve in float64."""
    import numba

    rng = np.random.default_rng(0)
    d, ridge = 6, 1e-3
    X = rng.standard_normal((40, d))
    C = X.T @ X / 40
    if case != "positive definite":
        C = C - 2.0 * np.eye(d)  # negative pivots: Cholesky would take the root of one (nan)
    A = C + ridge * np.eye(d)
    b = rng.standard_normal(d)

    @numba.njit
    def solve(A, b, ridge):
        cpu_local_linear._solve(A, b, ridge)

    upper = np.triu(A)  # the pass fills only the upper triangle
    x = b.copy()
    solve(upper.copy(), x, ridge)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-10, atol=1e-12)


def test_moment_features():
    K = np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)
    M = np.empty((2, 5, 1 + 3 + 6), np.float32)
    cpu_local_linear._moment_features(K, M, 0, 2)
    f, g = np.triu_indices(3)
    np.testing.assert_array_equal(M, np.concatenate([np.ones((2, 5, 1), np.float32), K, K[..., f] * K[..., g]], -1))
