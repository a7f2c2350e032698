"""Every distance profile's attention as one compiled pass on the CPU, forward and backward.

``out_i = sum_j k(u_ij) v_j / sum_j k(u_ij)`` with ``u_ij^2 = c |q_i - k_j|^2`` (``c = 1 / h^2``) for
the profiles that are not a softmax of inner products (Laplacian, Cauchy and the compact ones;
softmax and Gaussian run on PyTorch's CPU flash kernel). Flash attention's tiling, compiled by
numba: each task (a batch-head ``n`` and a tile of ``TILE_Q`` queries) walks over tiles of
``TILE_K`` keys, takes ``<q, k>`` of the tile from one BLAS product (``np.dot``, cache-sized),
forms the weights in place and adds ``P V`` with a second product. Nothing ``(L, S)``-sized is
ever stored: memory is the output, the row log-sum-exp and one tile per thread.

Measured before choosing (CPU, float32, B=1 H=8 L=4096 d=64, 2 cores shared with other work, load
3-10; SDPA 0.6-1.1 s there, 0.29 s on a quiet machine): FlexAttention under ``torch.compile``
(torch 2.13) compiles on the CPU (49 s the first call) but runs the Laplacian forward at 2.1 s,
~2.5-3x SDPA, and has neither a backward pass nor a log-sum-exp on the CPU
("torch.compile on CPU only supports inference"); whole-row chunks (256 queries x every key)
under ``torch.compile`` took 3.5-4.2 s (the two products alone, out of cache, cost 2x SDPA); this
pass: see ``benchmarks/RESULTS.md`` (issue 27's section) for its ratios to SDPA.

* **Distances** come from ``|q|^2 + |k|^2 - 2 <q, k>`` on ``q`` and ``k`` centred on the keys'
  mean (the BLAS product); where that is below ``REFINE (|q|^2 + |k|^2)`` (near-duplicate
  points, whose expanded distance is mostly round-off) the pair's distance is recomputed from
  differences, so that the profiles with a kink at ``u = 0`` (Laplacian, triangular) keep
  float32 accuracy there (self-attention with ``q = k``).
* **Weights**: compact profiles and the Cauchy profile are summed directly
  (:attr:`~localkit.kernels.profiles.Profile.compiled_k`: ``(1 - u^a)^b`` is a few products; their
  weights lie in ``[0, 1]`` and cannot all underflow); the Laplacian in log space with the online
  maximum (``exp(-u)`` underflows beyond ``u ~ 100``).
* **Block sparsity**: ``causal`` ends each query tile's keys at its last query; for a compact
  profile a key tile whose bounding box lies farther than the bandwidth from the query tile's
  bounding box is skipped (``c * gap^2 > 1``, with a round-off margin), so a small bandwidth on
  data with locality costs less than dense attention. A key bias (padding masks, ``(..., 1, S)``)
  multiplies the weights.
* **Backward** (flash attention's recomputation): per batch-head, each tile's weights are formed
  again from the saved row log-sum-exp, ``P = exp(log k + b - lse)``, and with
  ``G = P * (dO V^T - rowsum(dO * O)) * (d log k / d u^2)``:
  ``dV += P^T dO``, ``dQ = 2c (rowsum(G) Q - G K)``, ``dK += 2c (colsum(G) K - G^T Q)``,
  ``dc += sum(G u^2) / c``. Parallel over batch-heads (each owns its ``dK``, ``dV``).
"""
from __future__ import annotations

import math

import numba
import numpy as np
import torch

from .._threads import numba_threads, threadpools
from ..kernels.profiles import PROFILES, _rebind, _scalar_namespace

#: the profiles this pass computes (every one that is not a softmax of inner products)
NAMES = tuple(name for name, p in PROFILES.items() if not p.log_linear)
#: summed in log space with the online maximum: those whose weights can all underflow
LOG_SPACE = tuple(name for name in NAMES if not (PROFILES[name].compact or PROFILES[name].polynomial_tail))
#: queries and keys per tile: a tile of weights is 128 KiB (L2-sized), the key tile 512 x d; not
#: swept (no quiet machine in issue 27's session: load 7-13 on 2 cores)
TILE_Q, TILE_K = 64, 512
#: pairs whose expanded squared distance is below this share of ``|q|^2 + |k|^2`` are recomputed
#: from differences (the expansion's round-off is ~1e-7 of it in float32)
REFINE = 2.0 ** -6

_njit = numba.njit(cache=False, inline="always")
_WEIGHT = tuple(PROFILES[name].compiled_k for name in NAMES)
_LOG = tuple(_rebind(PROFILES[name].statement, _scalar_namespace(), _njit) for name in NAMES)
_SLOPE = tuple(PROFILES[name].slope_for(_scalar_namespace(), _njit) for name in NAMES)
# fixed module-level names, chosen by a code inside the compiled passes: numba caches a pass on
# disk only when it calls module-level functions (see localkit.engine.passes.compiled)
(_w0, _w1, _w2, _w3, _w4, _w5, _w6, _w7, _w8) = _WEIGHT
(_l0, _l1, _l2, _l3, _l4, _l5, _l6, _l7, _l8) = _LOG
(_s0, _s1, _s2, _s3, _s4, _s5, _s6, _s7, _s8) = _SLOPE


@numba.njit(inline="always")
def _weight(code, u2):
    if code == 0:
        return _w0(u2)
    if code == 1:
        return _w1(u2)
    if code == 2:
        return _w2(u2)
    if code == 3:
        return _w3(u2)
    if code == 4:
        return _w4(u2)
    if code == 5:
        return _w5(u2)
    if code == 6:
        return _w6(u2)
    if code == 7:
        return _w7(u2)
    return _w8(u2)


@numba.njit(inline="always")
def _log_weight(code, u2):
    if code == 0:
        return _l0(u2)
    if code == 1:
        return _l1(u2)
    if code == 2:
        return _l2(u2)
    if code == 3:
        return _l3(u2)
    if code == 4:
        return _l4(u2)
    if code == 5:
        return _l5(u2)
    if code == 6:
        return _l6(u2)
    if code == 7:
        return _l7(u2)
    return _l8(u2)


@numba.njit(inline="always")
def _slope(code, u2):
    if code == 0:
        return _s0(u2)
    if code == 1:
        return _s1(u2)
    if code == 2:
        return _s2(u2)
    if code == 3:
        return _s3(u2)
    if code == 4:
        return _s4(u2)
    if code == 5:
        return _s5(u2)
    if code == 6:
        return _s6(u2)
    if code == 7:
        return _s7(u2)
    return _s8(u2)


@numba.njit(inline="always")
def _scaled_distances(s, Q, K, qn, kn, n, i0, j0, c, causal):
    """``s`` (the tile's ``<q, k>``) overwritten with ``u^2 = c |q - k|^2``; ``-1`` where causal
    excludes the pair."""
    nq, nk = s.shape
    d = Q.shape[2]
    for a in range(nq):
        i = i0 + a
        for b in range(nk):
            j = j0 + b
            if causal and j > i:
                s[a, b] = -1.0
                continue
            full = qn[n, i] + kn[n, j]
            d2 = full - 2.0 * s[a, b]
            if d2 < REFINE * full:  # near-duplicates: from differences
                d2 = 0.0
                for f in range(d):
                    t = Q[n, i, f] - K[n, j, f]
                    d2 += t * t
            s[a, b] = c * max(d2, 0.0)


@numba.njit(inline="always")
def _skipped(qbox, kbox, n, t, jt, c, margin):
    """Whether every pair of query tile ``t`` and key tile ``jt`` lies beyond a compact support:
    the gap between their bounding boxes, ``c gap^2 > 1 + margin``."""
    gap2 = 0.0
    for f in range(qbox.shape[3]):
        g = max(qbox[n, t, 0, f] - kbox[n, jt, 1, f], kbox[n, jt, 0, f] - qbox[n, t, 1, f], 0.0)
        gap2 += g * g
    return c * gap2 > 1.0 + margin


@numba.njit(parallel=True, cache=True)
def attention_forward(Q, K, V, qn, kn, C, kb, kw, code, logspace, causal, qbox, kbox, margin, tq, tk, out, lse):
    """Fill ``out`` ``(N, L, dv)`` and ``lse`` ``(N, L)`` (``-inf``: no key with weight).

    ``Q, K, V``: ``(N, L, d)``, ``(N, S, d)``, ``(N, S, dv)`` float32, C-contiguous, ``Q`` and ``K``
    centred alike; ``qn, kn``: their squared norms; ``C``: ``(N,)`` scales; ``kb``: ``(1 or N, S)``
    key log-weights (0, ``-inf`` for padding) and ``kw = exp(kb - max kb)``; ``code``: index in
    :data:`NAMES`; ``logspace``: sum ``exp(log k + kb - m)`` with the online maximum ``m`` (else
    ``k kw``, and ``lse`` misses ``max kb``, added by the caller); ``qbox, kbox``: ``(N, tiles, 2,
    d)`` bounding boxes for skipping (compact profiles; empty otherwise)."""
    N, L, d = Q.shape
    S, dv = K.shape[1], V.shape[2]
    n_qt = (L + tq - 1) // tq
    skip = qbox.shape[1] > 0
    for task in numba.prange(N * n_qt):
        n, t = task // n_qt, task % n_qt
        i0 = t * tq
        i1 = min(L, i0 + tq)
        nq = i1 - i0
        c = C[n]
        row = n if kb.shape[0] > 1 else 0
        qt = Q[n, i0:i1]
        acc = np.zeros((nq, dv), dtype=np.float32)
        total = np.zeros(nq, dtype=np.float32)
        m = np.full(nq, -np.inf, dtype=np.float32)
        hi = min(S, i1) if causal else S
        for j0 in range(0, hi, tk):
            j1 = min(hi, j0 + tk)
            if skip and _skipped(qbox, kbox, n, t, j0 // tk, c, margin):
                continue
            s = np.dot(qt, K[n, j0:j1].T)
            _scaled_distances(s, Q, K, qn, kn, n, i0, j0, c, causal)
            nk = j1 - j0
            for a in range(nq):
                if logspace:
                    top = -np.inf
                    for b in range(nk):
                        # the maximum of the stored (float32) log-weights: exp(s - top) <= 1 even where
                        # the log-weights are huge (a tiny bandwidth: -1e14, 1e7 per float32 ulp)
                        s[a, b] = _log_weight(code, s[a, b]) + kb[row, j0 + b] if s[a, b] >= 0.0 else -np.inf
                        top = max(top, s[a, b])
                    new = max(m[a], top)
                    if new == -np.inf:
                        for b in range(nk):
                            s[a, b] = 0.0
                        continue
                    alpha = math.exp(m[a] - new)
                    m[a] = new
                    total[a] *= alpha
                    for f in range(dv):
                        acc[a, f] *= alpha
                    row_sum = 0.0
                    for b in range(nk):
                        p = math.exp(s[a, b] - new)
                        s[a, b] = p
                        row_sum += p
                    total[a] += row_sum
                else:
                    row_sum = 0.0
                    for b in range(nk):
                        p = _weight(code, s[a, b]) * kw[row, j0 + b] if s[a, b] >= 0.0 else 0.0
                        s[a, b] = p
                        row_sum += p
                    total[a] += row_sum
            acc += np.dot(s, V[n, j0:j1])
        for a in range(nq):
            if total[a] > 0.0:
                for f in range(dv):
                    out[n, i0 + a, f] = acc[a, f] / total[a]
                lse[n, i0 + a] = math.log(total[a]) + (m[a] if logspace else 0.0)
            else:
                for f in range(dv):
                    out[n, i0 + a, f] = 0.0
                lse[n, i0 + a] = -np.inf


@numba.njit(parallel=True, cache=True)
def attention_backward(Q, K, V, qn, kn, C, kb, kw, code, logspace, causal, qbox, kbox, margin, tq, tk,
                       dO, delta, lse, dQ, dK, dV, dC):
    """Gradients of :func:`attention_forward` (same arguments, ``lse`` as it returned it) for the
    output gradient ``dO`` with ``delta = rowsum(dO * out)``: fills ``dQ``, ``dK``, ``dV`` (zeroed)
    and ``dC`` ``(N,)``, each batch-head by one thread."""
    N, L, d = Q.shape
    S = K.shape[1]
    n_qt = (L + tq - 1) // tq
    skip = qbox.shape[1] > 0
    for task in numba.prange(N):
        n = np.int64(task)  # not the loop's unsigned index: with an int it would unify to float
        c = C[n]
        row = n if kb.shape[0] > 1 else 0
        dc = 0.0
        for t in range(n_qt):
            i0 = t * tq
            i1 = min(L, i0 + tq)
            nq = i1 - i0
            qt, dot = Q[n, i0:i1], dO[n, i0:i1]
            dq = np.zeros((nq, d), dtype=np.float32)
            g_row = np.zeros(nq, dtype=np.float32)
            hi = min(S, i1) if causal else S
            for j0 in range(0, hi, tk):
                j1 = min(hi, j0 + tk)
                nk = j1 - j0
                if skip and _skipped(qbox, kbox, n, t, j0 // tk, c, margin):
                    continue
                kt, vt = K[n, j0:j1], V[n, j0:j1]
                u2 = np.dot(qt, kt.T)
                _scaled_distances(u2, Q, K, qn, kn, n, i0, j0, c, causal)
                p = np.empty((nq, nk), dtype=np.float32)
                for a in range(nq):
                    top = lse[n, i0 + a]
                    for b in range(nk):
                        x = u2[a, b]
                        if x < 0.0 or top == -np.inf:
                            p[a, b] = 0.0
                        elif logspace:
                            p[a, b] = math.exp(np.float32(_log_weight(code, x) + kb[row, j0 + b]) - top)
                        else:
                            p[a, b] = _weight(code, x) * kw[row, j0 + b] * math.exp(-top)
                dV[n, j0:j1] += np.dot(p.T, dot)
                g = np.dot(dot, vt.T)  # dO V^T, then G in place
                g_col = np.zeros(nk, dtype=np.float32)
                for a in range(nq):
                    for b in range(nk):
                        x = p[a, b]
                        if x > 0.0:
                            gab = x * (g[a, b] - delta[n, i0 + a]) * _slope(code, u2[a, b])
                            dc += gab * u2[a, b]
                        else:
                            gab = 0.0
                        g[a, b] = gab
                        g_row[a] += gab
                        g_col[b] += gab
                dq -= np.dot(g, kt)
                gk = np.dot(g.T, qt)
                for b in range(nk):
                    for f in range(d):
                        dK[n, j0 + b, f] += 2.0 * c * (g_col[b] * kt[b, f] - gk[b, f])
            for a in range(nq):
                for f in range(d):
                    dQ[n, i0 + a, f] = 2.0 * c * (dq[a, f] + g_row[a] * qt[a, f])
        dC[n] = dc / c


def supports(kernel, q):
    """Whether this pass takes ``kernel`` on ``q``'s device: CPU tensors, every profile that is
    not a softmax of inner products."""
    return q.device.type == "cpu" and kernel in NAMES


def cpu_kernel_attention(kernel, q, k, v, c, causal, key_bias):
    """``kernel_attention`` of a profile in :data:`NAMES` through the compiled pass, differentiable
    in ``q``, ``k``, ``v`` and ``c`` (custom operators: ``torch.compile`` traces them whole).

    ``q, k, v``: ``(..., L, d)``, ``(..., S, d)``, ``(..., S, dv)`` float32 sharing their batch shape;
    ``c``: ``batch + (1, 1)`` (``1 / h^2``); ``key_bias``: None or key log-weights (``-inf``:
    excluded) broadcasting to ``batch + (1, S)``, no gradient. Rows without a key of positive
    weight give 0.
    """
    batch, L, S, dv = q.shape[:-2], q.shape[-2], k.shape[-2], v.shape[-1]
    N = math.prod(batch)
    flat = lambda t: t.reshape((N,) + t.shape[-2:])
    if key_bias is None:
        key_bias = q.new_zeros(1, S)
    else:
        key_bias = key_bias.to(q.dtype).expand(batch + (1, S)).reshape(N, S)
    out, _ = _attention(flat(q), flat(k), flat(v), c.expand(batch + (1, 1)).reshape(N), key_bias,
                        NAMES.index(kernel), bool(causal))
    return out.reshape(batch + (L, dv))


def _run(compiled, *args):
    """``compiled(*args)`` on PyTorch's thread count, its tiles' products on one BLAS thread each
    inside numba's threads (OpenBLAS threads nested in numba's OpenMP loop serialised on a lock:
    B=1 H=8 L=2048 d=64, 40 s against 0.35 s for SDPA)."""
    with numba_threads(torch.get_num_threads()), threadpools().limit(limits=1, user_api="blas"):
        compiled(*args)


def _boxes(t, tile):
    """Per tile of ``tile`` rows, the bounding box ``(N, tiles, 2, d)`` (min, max) of ``t`` ``(N, L, d)``."""
    N, L, d = t.shape
    n_tiles = -(-L // tile)
    padded = torch.nn.functional.pad(t, (0, 0, 0, n_tiles * tile - L), value=math.nan).view(N, n_tiles, tile, d)
    return torch.stack([padded.nan_to_num(math.inf).amin(2), padded.nan_to_num(-math.inf).amax(2)], 2).contiguous()


def _arguments(q, k, v, c, key_bias, code):
    """The compiled passes' arguments as NumPy views: ``q, k`` centred on the keys' mean (no
    distance changes), their squared norms, the key weights ``exp(b - max b)``, the bounding boxes
    of the tiles (compact profiles; empty otherwise) and the round-off margin of the skip test.
    ``code`` -1: a kernel of inner products (:mod:`localkit.fused.cpu_local_linear`), no boxes."""
    name = NAMES[code] if code >= 0 else None
    contiguous = lambda t: t.detach().to(torch.float32).contiguous()
    q, k, v, C, kb = map(contiguous, (q, k, v, c, key_bias))
    centre = k.mean(1, keepdim=True)
    q, k = (q - centre).contiguous(), (k - centre).contiguous()
    qn, kn = q.square().sum(-1), k.square().sum(-1)
    top = kb.amax(-1, keepdim=True)
    kw = torch.exp(kb - torch.where(torch.isfinite(top), top, 0.0))
    if name is not None and PROFILES[name].compact:
        qbox, kbox = _boxes(q, TILE_Q), _boxes(k, TILE_K)
        # the expansion's round-off in c |q - k|^2: a pair the boxes put outside is computed
        # inside only within it (64 float32 ulps of c (|q|^2 + |k|^2) at most)
        margin = float(64 * 2.0 ** -23 * C.amax() * (qn.amax() + kn.amax()))
    else:
        qbox = kbox = torch.empty(q.shape[0], 0, 2, q.shape[-1])
        margin = 0.0
    arrays = (q, k, v, qn, kn, C, kb, kw)
    return tuple(t.numpy() for t in arrays) + (code, name in LOG_SPACE), (qbox.numpy(), kbox.numpy(), margin)


@torch.library.custom_op("localkit::profile_attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor, key_bias: torch.Tensor,
               code: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of the compiled forward pass on ``(N, L, d)`` tensors (``lse``: the pass's
    own row log-sum-exp, for the backward pass)."""
    arrays, skip = _arguments(q, k, v, c, key_bias, code)
    N, L, dv = q.shape[0], q.shape[1], v.shape[-1]
    out, lse = torch.empty(N, L, dv), torch.empty(N, L)
    _run(attention_forward, *arrays, causal, *skip, TILE_Q, TILE_K, out.numpy(), lse.numpy())
    return out.to(q.dtype), lse


@_attention.register_fake
def _(q, k, v, c, key_bias, code, causal):
    return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("localkit::profile_attention_backward", mutates_args=())
def _attention_backward(dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor, c: torch.Tensor, key_bias: torch.Tensor, code: int,
                        causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv, dc)`` of :func:`_attention` for the output gradient ``dout``."""
    arrays, skip = _arguments(q, k, v, c, key_bias, code)
    dO = dout.to(torch.float32).contiguous()
    delta = (dO * out.to(torch.float32)).sum(-1)
    dq, dk, dv = (torch.zeros(t.shape, dtype=torch.float32) for t in (q, k, v))
    dc = torch.zeros(q.shape[0])
    _run(attention_backward, *arrays, causal, *skip, TILE_Q, TILE_K, dO.numpy(), delta.numpy(),
         lse.contiguous().numpy(), dq.numpy(), dk.numpy(), dv.numpy(), dc.numpy())
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), dc.to(c.dtype)


@_attention_backward.register_fake
def _(dout, out, lse, q, k, v, c, key_bias, code, causal):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape), c.new_empty(c.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, c, key_bias, code, causal = inputs
    ctx.save_for_backward(q, k, v, c, key_bias, *output)
    ctx.code, ctx.causal = code, causal


def _backward(ctx, dout, _):
    q, k, v, c, key_bias, out, lse = ctx.saved_tensors
    dq, dk, dv, dc = _attention_backward(dout, out, lse, q, k, v, c, key_bias, ctx.code, ctx.causal)
    return dq, dk, dv, dc, None, None, None


_attention.register_autograd(_backward, setup_context=_setup_context)
