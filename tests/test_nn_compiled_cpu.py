"""The compiled CPU pass (:mod:`localkit.fused.cpu_attention`) against a float64 dense reference.

Every profile it takes x dtype x (none, causal, padding, causal + padding), forward and gradients
(``q``, ``k``, ``v`` and a learned per-head bandwidth), on inputs rounded to the dtype before both
computations; shapes cross several query and key tiles, and some queries coincide with keys (the
Laplacian's and the triangular profile's kink at ``u = 0``, where the pass recomputes distances
from differences). Windows take the banded path and float64 the streamed one
(tests/test_nn_streaming.py covers both for every profile).
"""
import math

import numpy as np
import pytest

import torch

from localkit.fused import cpu_attention
from localkit.nn import explain_attention, kernel_attention
from localkit.nn._profiles import LOG_PROFILES

KERNELS = cpu_attention.ROUTED
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
POSITIONS = ["none", "causal", "padding", "causal+padding"]
B, H, D, DV = 2, 2, 6, 3


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    """Tiles of 16 queries and 32 keys: every case crosses tile boundaries (the tile sizes are
    arguments of the compiled pass, so no recompilation)."""
    monkeypatch.setattr(cpu_attention, "TILE_Q", 16)
    monkeypatch.setattr(cpu_attention, "TILE_K", 32)


def qkv(dtype, L=70, S=90, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = 0.5 * torch.randn(B, H, L, D, generator=g, dtype=torch.float64)
    k = 0.5 * torch.randn(B, H, S, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, S, DV, generator=g, dtype=torch.float64)
    q[..., :5, :] = k[..., 3:8, :]  # queries at keys: u = 0
    return tuple(t.to(dtype) for t in (q, k, v))


def padding(S=90):
    keep = torch.ones(B, 1, 1, S, dtype=torch.bool)
    keep[0, ..., 60:] = False
    keep[1, ..., :20] = False  # with causal: batch 1's first 20 queries see no key
    return keep


def dense_reference(q, k, v, kernel, h, causal=False, keep=None, pair_bias=None):
    """The local mean in float64 with autograd: the weights formed, distances from differences,
    ``<a_i, b_j>`` added to the log-weights for ``pair_bias = (a, b)``."""
    d2 = ((q.unsqueeze(-2) - k.unsqueeze(-3)) ** 2).sum(-1)
    logw = LOG_PROFILES[kernel](d2 / h ** 2)
    if pair_bias is not None:
        logw = logw + pair_bias[0] @ pair_bias[1].transpose(-1, -2)
    if causal:
        logw = logw.masked_fill(torch.ones(logw.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    if keep is not None:
        logw = logw.masked_fill(~keep, -math.inf)
    empty = torch.isneginf(logw.amax(-1, keepdim=True))
    w = torch.softmax(logw.masked_fill(empty, 0.0), -1).masked_fill(empty, 0.0)
    return w @ v


def case(position):
    return "causal" in position, (padding() if "padding" in position else None)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kernel", KERNELS)
def test_forward_matches_float64_reference(kernel, dtype, position):
    q, k, v = qkv(dtype)
    causal, keep = case(position)
    assert explain_attention(q, k, v, kernel, bandwidth=1.5, mask=keep, causal=causal).path == "compiled CPU pass"
    out = kernel_attention(q, k, v, kernel, bandwidth=1.5, mask=keep, causal=causal)
    ref = dense_reference(*(t.double() for t in (q, k, v)), kernel, 1.5, causal, keep)
    assert out.dtype == dtype
    # float32 accumulation, then the cast to dtype (half an ulp of the output)
    tol = 2e-5 if dtype == torch.float32 else torch.finfo(dtype).eps * float(ref.abs().max())
    np.testing.assert_allclose(out.double(), ref, atol=tol, rtol=0)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kernel", KERNELS)
def test_gradients_match_autograd_of_dense_reference(kernel, position):
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float32, seed=1))
    h = torch.tensor([1.5, 1.2]).view(2, 1, 1).requires_grad_(True)  # learned, per head
    causal, keep = case(position)
    g = torch.randn(B, H, q.shape[-2], DV, generator=torch.Generator().manual_seed(2))
    out = kernel_attention(q, k, v, kernel, bandwidth=h, mask=keep, causal=causal)
    ours = torch.autograd.grad((out * g).sum(), (q, k, v, h))
    inputs = [t.detach().double().requires_grad_(True) for t in (q, k, v, h)]
    ref = dense_reference(*inputs[:3], kernel, inputs[3], causal, keep)
    refs = torch.autograd.grad((ref * g.double()).sum(), inputs)
    np.testing.assert_allclose(out.detach().double(), ref.detach(), atol=2e-5, rtol=0)
    # the pass's distances: |q|^2 + |k|^2 - 2 <q, k> in float32, recomputed from differences below
    # REFINE (|q|^2 + |k|^2), so a pair's u^2 is off by at most ~4 eps / REFINE = 3e-5 of itself
    tol = 4 * torch.finfo(torch.float32).eps / cpu_attention.REFINE
    for name, a, b in zip("qkvh", ours, refs):
        np.testing.assert_allclose(a.double(), b, atol=tol * float(b.abs().max()), rtol=0, err_msg=f"d{name}")


def pair_bias(L=70, S=90, r=3, seed=8):
    """``(a, b)``: ``a`` per batch-head ``(B, H, L, r)``, ``b`` shared ``(S, r)``, of both signs (so
    the pass's bound of each row's bias, :func:`~localkit.fused.cpu_attention._pair_bound`, is
    above its maximum)."""
    g = torch.Generator().manual_seed(seed)
    return 0.7 * torch.randn(B, H, L, r, generator=g), torch.randn(S, r, generator=g)


@pytest.mark.parametrize("position", ["none", "causal+padding"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_pair_bias_matches_float64_reference_forward_and_gradients(kernel, position):
    """``pair_bias = (a, b)`` adds ``<a_i, b_j>`` to each pair's log-weight, tile by tile in the
    pass: the output and the gradients of ``q``, ``k``, ``v``, a learned bandwidth, ``a`` and ``b``
    are those of the float64 reference with the ``(L, S)`` bias formed."""
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float32, seed=1))
    a, b = (t.requires_grad_(True) for t in pair_bias())
    h = torch.tensor([1.5, 1.2]).view(2, 1, 1).requires_grad_(True)
    causal, keep = case(position)
    assert explain_attention(q, k, v, kernel, bandwidth=h, mask=keep, causal=causal,
                             pair_bias=(a, b)).path == "compiled CPU pass"
    g = torch.randn(B, H, q.shape[-2], DV, generator=torch.Generator().manual_seed(2))
    out = kernel_attention(q, k, v, kernel, bandwidth=h, mask=keep, causal=causal, pair_bias=(a, b))
    ours = torch.autograd.grad((out * g).sum(), (q, k, v, h, a, b))
    inputs = [t.detach().double().requires_grad_(True) for t in (q, k, v, h, a, b)]
    ref = dense_reference(*inputs[:3], kernel, inputs[3], causal, keep, inputs[4:])
    refs = torch.autograd.grad((ref * g.double()).sum(), inputs)
    np.testing.assert_allclose(out.detach().double(), ref.detach(), atol=2e-5, rtol=0)
    tol = 4 * torch.finfo(torch.float32).eps / cpu_attention.REFINE  # as without the bias
    for name, x, y in zip(["q", "k", "v", "h", "a", "b"], ours, refs):
        np.testing.assert_allclose(x.double(), y, atol=tol * float(y.abs().max()), rtol=0, err_msg=f"d{name}")


@pytest.mark.parametrize("kernel", ["laplacian", "epanechnikov"])
def test_pair_bias_rows_whose_weights_underflow_are_summed_in_log_space(kernel):
    """A pair bias whose bound is far above its maximum: ``a_i = (100, 100)``, ``b_j = +-(1, -1)``
    give ``<a_i, b_j> = 0`` but a bound of 200, so every weight ``exp(bias - bound)`` underflows.
    Those rows are summed again in log space, forward and backward (the compact profile's too), and
    give the result without the bias."""
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float32, L=40, S=50, seed=9))
    a = torch.full((40, 2), 100.0)
    b = torch.tensor([[1.0, -1.0], [-1.0, 1.0]]).repeat(25, 1)
    assert float(cpu_attention._pair_bound(a[None], b[None]).amin()) == 200.0
    out = kernel_attention(q, k, v, kernel, bandwidth=1.5, pair_bias=(a, b))
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref = dense_reference(qd, kd, vd, kernel, 1.5)
    refs = torch.autograd.grad(ref.square().sum(), (qd, kd, vd))
    np.testing.assert_allclose(out.detach().double(), ref.detach(), atol=2e-5, rtol=0)
    for x, y in zip(grads, refs):
        np.testing.assert_allclose(x.double(), y, atol=1e-4 * float(y.abs().max()), rtol=0)


@pytest.mark.parametrize("kernel", ["laplacian", "cauchy"])
def test_gradients_of_gradients_through_the_pass(kernel):
    """``create_graph=True`` through the pass (a pair bias included): the second derivatives are
    those of the float64 reference. Before, the first backward also ran the pass's backward
    operator, which has no derivative, so the second raised."""
    q, k, v = (t[:1, :1].requires_grad_(True) for t in qkv(torch.float32, L=20, S=24, seed=10))
    a, b = (t[:1, :1, :20].requires_grad_(True) if t.dim() == 4 else t[:24].requires_grad_(True)
            for t in pair_bias())
    inputs = [t.detach().double().requires_grad_(True) for t in (q, k, v, a, b)]
    results = []
    for (q_, k_, v_, a_, b_), run in (((q, k, v, a, b), kernel_attention), (inputs, None)):
        out = (kernel_attention(q_, k_, v_, kernel, bandwidth=1.5, pair_bias=(a_, b_)) if run else
               dense_reference(q_, k_, v_, kernel, 1.5, pair_bias=(a_, b_)))
        dq, da = torch.autograd.grad(out.square().sum(), (q_, a_), create_graph=True)
        results.append(torch.autograd.grad(dq.square().sum() + da.sum(), (q_, k_, v_, a_, b_)))
    for name, x, y in zip(["q", "k", "v", "a", "b"], *results):
        np.testing.assert_allclose(x.double(), y, atol=1e-4 * float(y.abs().max()), rtol=0, err_msg=f"d{name}")


@pytest.mark.parametrize("kernel", ["epanechnikov", "uniform", "triangular"])
def test_compact_support_skips_far_tiles_and_keeps_the_result(kernel):
    """Points along a curve (locality): with a small bandwidth most key tiles lie beyond every
    query's support and are skipped; the result is the dense one."""
    t = torch.linspace(0, 6, 200, dtype=torch.float64)
    curve = torch.stack([torch.cos(t), torch.sin(t), t, 0.3 * t], -1).expand(B, H, 200, 4)
    q = (curve + 0.01 * torch.randn(curve.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    q, k = q.float(), curve.float().contiguous()
    v = torch.randn(B, H, 200, DV, generator=torch.Generator().manual_seed(4))
    h = 0.4
    flat = lambda x: x.reshape(B * H, 200, -1)
    qbox, kbox = cpu_attention._boxes(flat(q), 16), cpu_attention._boxes(flat(k), 32)
    gap = torch.clamp(torch.maximum(qbox[:, :, None, 0] - kbox[:, None, :, 1], kbox[:, None, :, 0] - qbox[:, :, None, 1]),
                      min=0)
    assert float((gap.square().sum(-1) > h ** 2 * 1.01).float().mean()) > 0.5  # most tile pairs are skipped
    out = kernel_attention(q, k, v, kernel, bandwidth=h)
    ref = dense_reference(q.double(), k.double(), v.double(), kernel, h)
    np.testing.assert_allclose(out.double(), ref, atol=2e-5, rtol=0)


@pytest.mark.parametrize("biased", [False, True], ids=["no pair bias", "pair bias"])
def test_compiles_whole_forward_and_backward(biased):
    """The pass is a pair of custom operators: ``torch.compile(fullgraph=True)`` traces them."""
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float32, L=20, S=24, seed=5))
    a, b = (t.requires_grad_(True) for t in pair_bias(L=20, S=24))
    keep = torch.ones(B, 1, 1, 24, dtype=torch.bool)
    keep[..., :3] = False
    wrt = (q, k, v, a, b) if biased else (q, k, v)
    f = lambda q, k, v, *ab: kernel_attention(q, k, v, "laplacian", bandwidth=1.5, mask=keep, causal=True,
                                              pair_bias=ab or None)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    out = compiled(*wrt)
    grads = torch.autograd.grad(out.square().sum(), wrt)
    eager = f(*wrt)
    refs = torch.autograd.grad(eager.square().sum(), wrt)
    np.testing.assert_allclose(out.detach(), eager.detach(), atol=1e-6)
    for a, b in zip(grads, refs):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_tiny_bandwidth_laplacian_is_the_nearest_key_forward_and_backward():
    """A bandwidth whose scale is capped: log-weights ~ -1e14, whose float32 ulp is ~1e7."""
    q, k, v = (t.requires_grad_(True) for t in qkv(torch.float32, L=13, S=17, seed=6))
    out = kernel_attention(q, k, v, "laplacian", bandwidth=1e-20)
    d2 = ((q.detach().double().unsqueeze(-2) - k.detach().double().unsqueeze(-3)) ** 2).sum(-1)
    nearest = torch.gather(v.detach().double(), -2, d2.argmin(-1, keepdim=True).expand(-1, -1, -1, DV))
    np.testing.assert_allclose(out.detach().double(), nearest, atol=1e-6)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)


def test_leaves_pytorchs_thread_count_as_the_user_set_it():
    """numba's OpenMP layer shares libgomp with PyTorch: its launch (the pass's first call in a
    process) reset ``torch.set_num_threads(1)`` to 2. A fresh process, so the launch happens here."""
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(1); torch.get_num_threads(); "
            "from localkit.nn import kernel_attention; q = torch.randn(1, 2, 64, 8); "
            "kernel_attention(q, q, q, 'epanechnikov', bandwidth=3.0); print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "1"


_COMPILE_EVENTS = """
import collections, json, torch
from numba.core import event
from localkit.nn import kernel_attention
q = torch.randn(1, 2, 64, 8, requires_grad=True)
with event.install_recorder("numba:compile") as recorder:
    kernel_attention(q, q, q, "epanechnikov", bandwidth=3.0).sum().backward()
print(json.dumps(collections.Counter(e.data["dispatcher"].py_func.__qualname__ for _, e in recorder.buffer
                                     if e.is_start)))
"""


def test_a_profile_compiles_its_own_loops_once_then_loads_from_disk(tmp_path):
    """A cold first call compiles the one profile it needs (not the switch's eleven), forward and
    backward; a second process loads both passes from numba's disk cache (compiles nothing)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "LOCALKIT_QUIET": "1"}
    counts = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", _COMPILE_EVENTS], capture_output=True, text=True, timeout=600,
                             env=env)
        assert out.returncode == 0, out.stderr
        counts.append(json.loads(out.stdout.splitlines()[-1]))
    cold, warm = counts
    for loop in ("weigh", "reweigh", "gradient"):
        assert cold[f"_tile_loops.<locals>.{loop}"] == 1
    assert cold["passes.<locals>.forward"] == cold["passes.<locals>.backward"] == 1
    assert not any(name.startswith(("passes.", "_tile_loops.")) for name in warm), warm


_SAVE_PASS_RESULTS = """
import sys, numpy as np, torch
from localkit.nn import kernel_attention
torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
q = torch.randn(1, 130, 16, generator=g, requires_grad=True)
k = torch.cat([q, torch.randn(1, 570, 16, generator=g)], 1)  # self pairs: distances from differences
v = torch.randn(1, 700, 3, generator=g, requires_grad=True)
out = kernel_attention(q, k, v, "laplacian", bandwidth=2.0)
grads = torch.autograd.grad(out.square().sum(), (q, k, v))
np.savez(sys.argv[1], out=out.detach().numpy(), **{n: t.numpy() for n, t in zip("qkv", grads)})
"""


def test_a_pass_compiled_and_a_pass_loaded_from_disk_give_the_same_bits(tmp_path):
    """The process that compiles a pass and one that loads it from numba's disk cache run the same
    arithmetic: no sum in the tile loops depends on how LLVM vectorises them (their separately
    compiled copy and the copy linked into the cached pass did, on an AVX-512 CPU: 3e-8 in the
    gradients, then 7e-3 in a learned kernel's embedding after three epochs)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "LOCALKIT_QUIET": "1"}
    for run in ("compiled", "loaded"):
        out = subprocess.run([sys.executable, "-c", _SAVE_PASS_RESULTS, str(tmp_path / f"{run}.npz")],
                             capture_output=True, text=True, timeout=600, env=env)
        assert out.returncode == 0, out.stderr
    compiled, loaded = np.load(tmp_path / "compiled.npz"), np.load(tmp_path / "loaded.npz")
    for name in ("out", "q", "k", "v"):
        assert np.array_equal(compiled[name], loaded[name]), name


@pytest.mark.parametrize("biased", [False, True], ids=["no pair bias", "pair bias"])
@pytest.mark.parametrize("kernel", ["epanechnikov", "laplacian"])
@pytest.mark.parametrize("batch_heads", [B * H, 1])
def test_thread_counts_give_the_same_bits(kernel, batch_heads, biased):
    """Tasks (a batch-head and a query tile; a batch-head backward) are independent: 1, 2 and 5
    threads give the same bits, the bandwidth's and a pair bias's gradients too, with fewer
    batch-heads than threads as well."""
    q, k, v = qkv(torch.float32, L=70, S=90, seed=7)
    a, b = pair_bias()
    keep = padding()
    if batch_heads == 1:
        q, k, v, keep, a = q[:1, :1], k[:1, :1], v[:1, :1], keep[:1], a[:1, :1]
    g = torch.randn(q.shape[:-1] + (DV,), generator=torch.Generator().manual_seed(3))
    q, k, v, a, b = (t.requires_grad_(True) for t in (q, k, v, a, b))
    h = torch.tensor([1.5, 1.2][:q.shape[1]]).view(-1, 1, 1).requires_grad_(True)
    wrt, bias = ((q, k, v, h, a, b), (a, b)) if biased else ((q, k, v, h), None)
    before = torch.get_num_threads()
    results = []
    try:
        for threads in (1, 2, 5):
            torch.set_num_threads(threads)
            out = kernel_attention(q, k, v, kernel, bandwidth=h, mask=keep, causal=True, pair_bias=bias)
            results.append([out.detach()] + list(torch.autograd.grad((out * g).sum(), wrt)))
    finally:
        torch.set_num_threads(before)
    for other in results[1:]:
        for name, x, y in zip(["out", "dq", "dk", "dv", "dh", "da", "db"], results[0], other):
            assert torch.equal(x, y), name


def test_vector_math_rounds_within_its_stated_ulps():
    """``exp`` within 1 float32 ulp of the exact value on [-87.3, 0] and 0 below the normal range;
    ``sin`` and ``cos`` within 3 on [0, pi/2] (relative, so near the cosine's zero at pi/2 too)."""
    import numba

    from localkit.fused import vector_math as vm

    @numba.njit
    def each(f, x):
        out = np.empty_like(x)
        for i in range(len(x)):
            out[i] = f(x[i])
        return out

    def ulps(got, exact):
        return np.max(np.abs(got - exact) / np.spacing(np.abs(exact).astype(np.float32)))

    x = np.linspace(-87.33, 0.0, 100_001).astype(np.float32)
    assert ulps(each(vm.exp, x), np.exp(x.astype(np.float64))) <= 1.0
    np.testing.assert_array_equal(each(vm.exp, np.array([-np.inf, -200.0, -87.4], np.float32)), 0.0)
    x = np.linspace(0.0, np.pi / 2, 100_001)[1:-1].astype(np.float32)
    assert ulps(each(vm.sin, x), np.sin(x.astype(np.float64))) <= 3.0
    assert ulps(each(vm.cos, x.astype(np.float64)), np.cos(x.astype(np.float64))) <= 3.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("which", ["pass", "scipy", "torch"])
def test_gemm_through_its_address_for_every_transposition(which, dtype):
    """The passes' ``?gemm`` (MKL's inside PyTorch on Intel CPUs where exported, else SciPy's),
    SciPy's and PyTorch's alike: ``C = alpha op(A) op(B) + beta C`` against NumPy for the four
    transpositions, in float32 (``sgemm``) and float64 (``dgemm``)."""
    import ctypes
    import os

    import numba

    from localkit.fused import blas

    name = "sgemm" if dtype == np.float32 else "dgemm"
    if which == "pass":
        address = blas.sgemm_address() if name == "sgemm" else blas.dgemm_address()
    elif which == "scipy":
        address = blas.get_cython_function_address("scipy.linalg.cython_blas", name)
    else:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        if not hasattr(lib, name + "_"):
            pytest.skip("this PyTorch build exports no Fortran BLAS")
        address = ctypes.cast(getattr(lib, name + "_"), ctypes.c_void_p).value

    @numba.njit
    def gemm(A, B, C, ta, tb):
        blas.gemm(address, blas.cells(), A, B, C, ta, tb, 1.5, 0.25)

    rng = np.random.default_rng(0)
    m, k, n = 7, 5, 3
    for ta in (False, True):
        for tb in (False, True):
            A = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
            B = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
            C = rng.standard_normal((m, n)).astype(dtype)
            expected = 1.5 * (A.T if ta else A).astype(np.float64) @ (B.T if tb else B) + 0.25 * C
            gemm(A, B, C, ta, tb)
            np.testing.assert_allclose(C, expected, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_the_passes_take_openblas_on_amd_cpus(monkeypatch):
    """On AMD CPUs the passes call SciPy's OpenBLAS, elsewhere MKL inside PyTorch where it exports
    it with its per-thread setting (held to one thread in each worker: a product then runs on the
    calling thread alone)."""
    from localkit.fused import blas

    scipy_s = blas.get_cython_function_address("scipy.linalg.cython_blas", "sgemm")
    monkeypatch.setattr(blas, "amd_cpu", lambda: True)
    blas._address.cache_clear()
    try:
        assert blas.sgemm_address() == scipy_s
        monkeypatch.setattr(blas, "amd_cpu", lambda: False)
        blas._address.cache_clear()
        if blas._mkl_local_setter() is not None and blas._torch_symbol("sgemm_") is not None:
            assert blas.sgemm_address() == blas._torch_symbol("sgemm_") != scipy_s
            setter = blas._mkl_local_setter()  # returns the setting it replaces
            before = setter(1)
            setter(before)  # read (PyTorch's set_num_threads sets it)
            with blas.one_mkl_thread():
                inside = setter(1)
            assert inside == 1 and setter(before) == before  # held to one inside, given back after
    finally:
        blas._address.cache_clear()


def test_laplacian_rows_far_from_every_key_are_summed_in_log_space():
    """Half the queries lie hundreds of bandwidths from every key (every weight ``exp(-u)``
    underflows float32): those rows are summed again with the running maximum, forward and
    backward, and match the float64 reference; the near rows keep the direct sums."""
    q, k, v = (t.float() for t in qkv(torch.float64, L=40, S=50, seed=7))
    q[..., 20:, :] += 60.0  # u ~ 60 sqrt(D) / h ~ 200
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    out = kernel_attention(q, k, v, "laplacian", bandwidth=0.75)
    ref = dense_reference(q.detach().double(), k.detach().double(), v.detach().double(), "laplacian", 0.75)
    np.testing.assert_allclose(out.detach().double(), ref, atol=2e-5, rtol=0)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    qd, kd, vd = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    refs = torch.autograd.grad(dense_reference(qd, kd, vd, "laplacian", 0.75).square().sum(), (qd, kd, vd))
    for a, b in zip(grads, refs):
        np.testing.assert_allclose(a.double(), b, atol=1e-4 * float(b.abs().max()), rtol=0)


def test_tile_loops_flush_subnormal_weights_and_gradient_terms():
    """Weights and gradient terms below float32's smallest normal number are 0 (as subnormal
    operands they slowed the tiles and their BLAS products 4-5x); the others are the formula's."""
    code, tiny = cpu_attention.NAMES.index("laplacian"), np.finfo(np.float32).tiny
    u = np.array([[0.0, 1.0, 70.0, 79.0, 85.0, 86.0]], dtype=np.float32)
    u2 = u * u  # k = exp(-u): 1, e^-1, then 4e-31 ... 4.4e-38 (normal), times the scales below
    kw = np.ones(6, dtype=np.float32)

    def is_clean(a):
        return np.all((a == 0) | (np.abs(a) >= tiny))

    s = u2.copy()
    cpu_attention._weigh(code, s, np.full(6, 1e-3, dtype=np.float32))
    exact = np.exp(-u.astype(np.float64)) * 1e-3
    assert is_clean(s) and np.array_equal(s == 0, exact < tiny)
    np.testing.assert_allclose(s[s > 0], exact[s > 0], rtol=1e-6)
    p = np.empty_like(u2)
    lse = np.array([np.log(1e4)], dtype=np.float32)  # scale exp(shift - lse) = 1e-4
    cpu_attention._reweigh(code, u2, p, np.zeros(6, dtype=np.float32), kw, lse, np.float32(0.0), False,
                           np.empty((1, 0), dtype=np.float32), np.zeros(1, dtype=np.float32))
    exact = np.exp(-u.astype(np.float64)) * 1e-4
    assert is_clean(p) and np.array_equal(p == 0, exact < tiny) and (p == 0).sum() == 3
    np.testing.assert_allclose(p[p > 0], exact[p > 0], rtol=1e-5)
    p = np.array([[0.5, 1e-30, 1e-30, 1e-20, 0.0, 0.2]], dtype=np.float32)
    g = np.array([[1.0, 2e-9, 1.0, 1e-9, 1.0, 1e-7]], dtype=np.float32)
    exact = p.astype(np.float64) * g * -0.25  # G = P (g - delta) d log k / d u^2, delta 0, slope -1 / (2u)
    u2 = np.full((1, 6), 4.0, dtype=np.float32)
    gb = np.empty_like(p)  # the pair bias's gradient P (g - delta), before g is overwritten
    cpu_attention._pair_bias_gradient(p, g, np.zeros(1, dtype=np.float32), gb)
    assert is_clean(gb) and gb[0, 1] == 0 and gb[0, 3] != 0
    np.testing.assert_allclose(gb[gb != 0], -4 * exact[gb != 0], rtol=1e-6)
    cpu_attention._gradient(code, u2, p, g, np.zeros(1, dtype=np.float32))
    assert is_clean(g) and g[0, 1] == 0 and g[0, 3] != 0
    np.testing.assert_allclose(g[g != 0], exact[g != 0], rtol=1e-3)
    w = np.array([[0.5, 0.5, 0.5, 0.0]], dtype=np.float32)  # times exp(bias - bound): 0.5 exp(-87) is subnormal
    cpu_attention._add_pair_bias(w, np.array([[0.0, -87.0, -80.0, 0.0]], dtype=np.float32), np.zeros(1, np.float32),
                                 np.zeros(1, np.float32), np.float32(0.0), False)
    assert is_clean(w) and w[0, 0] == 0.5 and w[0, 1] == 0 and w[0, 3] == 0
    np.testing.assert_allclose(w[0, 2], 0.5 * np.exp(-80.0), rtol=1e-6)
    np.testing.assert_array_equal(u2, g * np.float32(4.0))  # G u^2, for dc


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("compiled_backward", [True, False], ids=["pass backward", "folded flash backward"])
def test_gaussian_backward_by_the_pass_or_the_flash_kernel(monkeypatch, compiled_backward, causal, dtype):
    """The Gaussian's forward is the CPU flash kernel's; its backward the compiled pass's (AMD
    CPUs) or the flash kernel's on the key bias folded into one more head dimension: either way
    the gradients of ``q, k, v`` and a per-head bandwidth are autograd's of the dense float64
    reference on the same rounded inputs."""
    from localkit.nn import functional

    monkeypatch.setattr(functional, "_gaussian_backward_compiled", lambda: compiled_backward)
    q, k, _ = qkv(torch.float64, seed=3)
    v = torch.randn(k.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)  # the kernel's d_v = d
    q, k, v = (t.to(dtype).requires_grad_(True) for t in (q, k, v))
    h = torch.tensor([1.5, 1.2]).view(2, 1, 1).to(dtype).requires_grad_(True)
    assert explain_attention(q, k, v, "gaussian", bandwidth=h, causal=causal).path == "CPU flash kernel"
    g = torch.randn(q.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    out = kernel_attention(q, k, v, "gaussian", bandwidth=h, causal=causal)
    ours = torch.autograd.grad((out.double() * g).sum(), (q, k, v, h))
    inputs = [t.detach().double().requires_grad_(True) for t in (q, k, v, h)]
    ref = dense_reference(*inputs[:3], "gaussian", inputs[3], causal)
    refs = torch.autograd.grad((ref * g).sum(), inputs)
    # float32: the flash kernel's logits c <q, k> - c |k|^2 / 2 and their log-sum-exp, ~1e-6 of
    # each gradient; half inputs: the output and the gradients rounded to the dtype
    tol = 1e-5 if dtype == torch.float32 else 4 * torch.finfo(dtype).eps
    for name, a, b in zip("qkvh", ours, refs):
        assert a.dtype == dtype
        np.testing.assert_allclose(a.double(), b, atol=tol * float(b.abs().max()), rtol=0, err_msg=f"d{name}")


def test_gaussian_under_torch_compile_keeps_the_flash_backward(monkeypatch):
    """Inside ``torch.compile(fullgraph=True)`` the Gaussian keeps the flash kernel's backward
    (the traced path), eager calls take the compiled pass's (AMD CPUs): the same output and
    gradients."""
    from localkit.nn import functional

    monkeypatch.setattr(functional, "_gaussian_backward_compiled", lambda: True)
    taken = []
    monkeypatch.setattr(functional._GaussianAttention, "apply",
                        lambda *a, apply=functional._GaussianAttention.apply: taken.append(1) or apply(*a))
    q, k, _ = qkv(torch.float32, L=20, S=24, seed=6)
    v = torch.randn(k.shape, generator=torch.Generator().manual_seed(7))
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    f = lambda q, k, v: kernel_attention(q, k, v, "gaussian", bandwidth=1.5, causal=True)
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    assert taken == []
    eager = f(q, k, v)
    refs = torch.autograd.grad(eager.square().sum(), (q, k, v))
    assert taken == [1]
    np.testing.assert_allclose(out.detach(), eager.detach(), atol=1e-6)
    for a, b in zip(grads, refs):
        np.testing.assert_allclose(a, b, atol=1e-6)
