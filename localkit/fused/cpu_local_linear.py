"""Local linear attention's forward pass compiled on the CPU: two walks over tiles of keys.

With the weights ``w_ij`` of the kernel, ``S0_i = sum_j w_ij``, the weighted means ``kbar_i`` and
covariance ``C_kk`` of the keys (:func:`localkit.nn.local_linear_attention`), and
``z_i = (C_kk + ridge I)^{-1} (kbar_i - q_i)``, the intercept of the local linear model is
``a_i = vbar_i - C_vk z_i``. Because ``sum_j w_ij (k_j - kbar_i) = 0``,
``C_vk z_i = sum_j w_ij v_j (k_j - kbar_i) . z_i / S0_i``, so ::

    a_i = sum_j w_ij (1 + kbar_i . z_i - k_j . z_i) v_j / S0_i,

the local mean with the equivalent kernel of local linear regression. Two walks over the key
tiles of each query tile (flash attention's tiling, as :mod:`localkit.fused.cpu_attention`, whose
distances, profiles, arguments and tile skipping this pass calls):

1. the tile's weights ``P`` with the online maximum (kept), then one product
   ``P [1, k, sym(k k^T)]`` (``1 + d + d (d + 1) / 2`` columns, keys centred on their mean):
   ``S0``, ``kbar`` and ``C_kk``; then ``z_i`` per query (a ``d x d`` solve in float64,
   :func:`_solve`);
2. the kept weights rescaled to the final maximum, ``R = Z K^T`` (one product, in float64: see
   :func:`_times_lift`) and ``(P * (1 + kbar . z - R)) V`` (one more; values centred on their mean).

That is ``d (d + 1) / 2 + 3 d + d_v + 1`` multiply-adds per pair (201 at ``d = d_v = 16``; the
moments of ``v`` and ``v k^T`` in the first walk instead of a second would be 441) and one
``exp`` (:mod:`localkit.fused.vector_math`'s, which LLVM vectorises). Products are
:mod:`localkit.fused.blas`'s, on tiles of ``TILE_Q x TILE_K`` (256 x 256) queries x keys.

Measured before choosing (B=1 H=8 L=4096 d=16, softmax, float32, one thread, against SDPA at
d=16): keeping the first walk's weights of a query tile (``TILE_Q x S`` floats per thread, fewer
than the streamed path's ``d (d + d_v)`` per query) took 7.6x SDPA's time against 8.7-8.9x for
forming them again in the second walk (one more ``<q, k>`` product and ``exp``; 64 x 512 tiles,
MKL, load 3-4). The product of the moments, 153 of the 201 multiply-adds, is the floor: ~20
GFMA a call, 0.23-0.32 s at the 65-90 GFMA/s of float32 BLAS on one core (Zen 5), ~2x SDPA's
whole call alone. On a Zen 5 core, in the pass: 256 x 256 tiles 0.57 s against 0.59-0.62 s for
64 x 512 (the moments' product 0.25 s against 0.31 s; 128 x 128 and 256 x 128 were slower); then
Cholesky's solve (elimination only where it fails) and the moment features built in a compiled
loop (3 ms against NumPy's gathers' 26 ms): 0.51 s.

Memory: the moment features, ``S (1 + d + d (d + 1) / 2)`` floats a batch-head, and the kept
weights, ``TILE_Q x S`` floats a thread (B=1 H=1 L=S=16384 d=32: 76 MiB at the peak), never
``L x S``.

Forward only: gradients keep the streamed path (:func:`localkit.nn._streaming.streamed_local_linear`).
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

from .._jit import njit
from . import blas, vector_math
from .cpu_attention import LOG_SPACE, NAMES, _arguments, _distances, _log_k, _loop, _run_tasks, _skipped, _weigh

#: the kernels of inner products (codes below 0 in the pass): ``c <q, k>`` and the Gaussian's
#: ``c (<q, k> - |k|^2 / 2)``; the other profiles take their index in ``cpu_attention.NAMES``
INNER = ("softmax", "gaussian")
SOFTMAX, GAUSSIAN = -1, -2
#: queries and keys per tile: the moments' product of 256 x 256 by 256 x 153 ran at ~90 GFMA/s on
#: one core against ~65 for cpu_attention's 64 x 512 (its weights, 256 x S floats, then sit in L3)
TILE_Q, TILE_K = 256, 256



@_loop
def _exp_row(x, shift):
    """``x = exp(x - shift)`` for a float32 row with entries ``<= shift`` (``-inf`` gives 0), by
    :func:`localkit.fused.vector_math.exp`, which LLVM vectorises."""
    for i in range(x.size):
        x[i] = vector_math.exp(x[i] - shift)


@_loop
def _inner_logits(row, kb, c):
    """A row of log-weights ``c <q, k> + kb`` of a kernel of inner products from its ``<q, k>``,
    in place, and its maximum."""
    for b in range(row.size):
        row[b] = c * row[b] + kb[b]
    return _row_max(row)


@_loop
def _row_max(row):
    """The maximum of a float32 row, over eight running maxima (one chain of ``max`` is bound by
    its latency: 27 us for a 64 x 512 tile against 7 us)."""
    full = row.size - row.size % 8
    t0 = t1 = t2 = t3 = t4 = t5 = t6 = t7 = np.float32(-np.inf)
    for b in range(0, full, 8):
        t0, t1, t2, t3 = max(t0, row[b]), max(t1, row[b + 1]), max(t2, row[b + 2]), max(t3, row[b + 3])
        t4, t5, t6, t7 = max(t4, row[b + 4]), max(t5, row[b + 5]), max(t6, row[b + 6]), max(t7, row[b + 7])
    for b in range(full, row.size):
        t0 = max(t0, row[b])
    return max(max(max(t0, t1), max(t2, t3)), max(max(t4, t5), max(t6, t7)))


@_loop
def _times_lift(row, r, lift, scale):
    """``row *= scale (lift - r)``: the weights of a row times ``1 + kbar . z - k_j . z`` (``r``,
    ``lift``: float64, where the difference of those two products, each ~``|k| |z|``, is exact
    enough: in float32 a row with few keys, ``|z| ~ |kbar - q| / ridge``, lost ``1e-4`` of its
    value, where the moments' formula gives the nearest key's value exactly)."""
    for b in range(row.size):
        # 0 where the weight is 0: the factor may overflow float32 where round-off made z huge
        row[b] = row[b] * np.float32(scale * (lift - r[b])) if row[b] > 0.0 else np.float32(0.0)


@njit(inline="always")
def _tile_weights(s, Q, K, qn, kn, n, i0, j0, c, kb, kw, code, logspace, causal, m, alpha):
    """``s`` (the tile's ``<q, k>``) overwritten with the weights, ``exp(log w - m_i)`` in log space,
    the running row maxima ``m`` raised to the tile's and ``alpha = exp(m_old - m_new)``. Direct
    profiles (not log space) give ``k(u^2) kw_j`` (``m`` stays 0, ``alpha`` 1). ``kb, kw``: the
    tile's keys' (for the Gaussian, the keys' bias less ``c |k|^2 / 2``)."""
    nq, nk = s.shape
    if code >= 0:
        _distances(s, Q[n], K[n], qn[n, i0:i0 + nq], kn[n, j0:j0 + nk], i0, j0, c, causal)
        if not logspace:
            _weigh(code, s, kw)
            return
        for a in range(nq):
            for b in range(nk):
                x = s[a, b]
                s[a, b] = _log_k(code, x) + kb[b] if x >= 0.0 else -np.inf
    for a in range(nq):
        # causal: keys j <= i only (the rest of the row is -inf)
        lim = max(0, min(nk, i0 + a - j0 + 1)) if causal else nk
        if code < 0:
            top = _inner_logits(s[a, :lim], kb[:lim], c)
            for b in range(lim, nk):
                s[a, b] = -np.inf
        else:
            top = _row_max(s[a, :lim])
        new = max(m[a], top)
        alpha[a] = math.exp(m[a] - new) if new > -np.inf else 1.0
        m[a] = new
        _exp_row(s[a], m[a] if m[a] > -np.inf else 0.0)


@functools.cache
def local_linear_pass(code):
    """The compiled pass for ``code`` (:data:`SOFTMAX`, :data:`GAUSSIAN` or the index of a profile
    in ``NAMES``), compiled on its first call for that kernel only (a constant of the closure:
    numba prunes the other kernels' branches, and caches each on disk by it)."""
    logspace = code < 0 or NAMES[code] in LOG_SPACE

    @njit(nogil=True, cache=True)
    def forward(Q, K, K64, V, v_mean, M, mu, qn, kn, C, kb, kw, causal, qbox, kbox, margin, ridge, tq, tk, sgemm_at,
                dgemm_at, out, first, last):
        """Fill ``out`` ``(N, L, dv)`` with the intercepts (0 for a query without a key of weight).

        ``Q, K, qn, kn, C, kb, kw, qbox, kbox, margin``: as
        :func:`localkit.fused.cpu_attention.passes` take them (``Q, K`` centred on the
        keys' mean ``mu`` ``(N, d)``; ``K64``: ``K`` in float64); ``V``: ``(N, S, dv)`` centred on
        its mean ``v_mean`` ``(N, dv)``; ``M``: ``(N, S, 1 + d + d (d + 1) / 2)``, per key
        ``[1, k, k_f k_g for f <= g]``; ``sgemm_at, dgemm_at``: :func:`~localkit.fused.blas.sgemm_address`'s and
        :func:`~localkit.fused.blas.dgemm_address`'s; ``first, last``: the range of tasks (a batch-head and a
        tile of ``tq`` queries, ``(N, L / tq)`` in C order) to fill."""
        N, L, d = Q.shape
        S, dv, width = K.shape[1], V.shape[2], M.shape[2]
        n_qt = (L + tq - 1) // tq
        skip = qbox.shape[1] > 0
        for task in range(first, last):
            n, t = task // n_qt, task % n_qt
            i0 = t * tq
            i1 = min(L, i0 + tq)
            nq = i1 - i0
            c = C[n]
            row = n if kb.shape[0] > 1 else 0
            qt = Q[n, i0:i1].copy()
            if code == SOFTMAX:  # <q, k - mu>: <q, k> less a constant of the row
                for a in range(nq):
                    for f in range(d):
                        qt[a, f] += mu[n, f]
            hi = min(S, i1) if causal else S
            m = np.full(nq, -np.inf if logspace else 0.0, dtype=np.float32)
            alpha = np.ones(nq, dtype=np.float32)
            cell = blas.cells()
            acc = np.zeros((nq, width), dtype=np.float32)
            # the first walk's weights, formed in place and kept for the second (tile by tile) with the
            # row maxima they were taken at: nq x S floats, less than the streamed path's d (d + dv)
            # per query; the full tiles and the last, partial one apart (numba's reshape would
            # compile a costly error path)
            full = hi // tk
            kept = np.empty((full, nq, tk), dtype=np.float32)
            partial = np.empty((nq, hi - full * tk), dtype=np.float32)
            m_at = np.empty(((hi + tk - 1) // tk, nq), dtype=np.float32)
            for j0 in range(0, hi, tk):  # the first walk: the moments
                j1 = min(hi, j0 + tk)
                jt = j0 // tk
                if skip and _skipped(qbox, kbox, n, t, jt, c, margin):
                    continue
                s = kept[jt] if jt < full else partial
                blas.gemm(sgemm_at, cell, qt, K[n, j0:j1], s, False, True, 1.0, 0.0)
                _tile_weights(s, Q, K, qn, kn, n, i0, j0, c, kb[row, j0:j1], kw[row, j0:j1], code, logspace, causal, m,
                              alpha)
                for a in range(nq):
                    m_at[jt, a] = m[a]
                if logspace:
                    for a in range(nq):
                        for f in range(width):
                            acc[a, f] *= alpha[a]
                blas.gemm(sgemm_at, cell, s, M[n, j0:j1], acc, False, False, 1.0, 1.0)
            Z = np.zeros((nq, d))
            lift = np.zeros(nq)  # 1 + kbar . z
            total = acc[:, 0].copy()
            cov, mean = np.empty((d, d)), np.empty(d)
            for a in range(nq):
                if not total[a] > 0.0:
                    continue
                # C_kk + ridge I from the moments (M's columns: the upper triangle), in float64
                inv = 1.0 / np.float64(total[a])
                for f in range(d):
                    mean[f] = acc[a, 1 + f] * inv
                col = 1 + d
                for f in range(d):
                    for g in range(f, d):
                        cov[f, g] = acc[a, col] * inv - mean[f] * mean[g]
                        col += 1
                    cov[f, f] += ridge
                    Z[a, f] = mean[f] - Q[n, i0 + a, f]
                _solve(cov, Z[a], ridge)
                beta = 0.0
                for f in range(d):
                    beta += mean[f] * Z[a, f]
                lift[a] = 1.0 + beta
            acc2 = np.zeros((nq, dv), dtype=np.float32)
            r, r_partial = np.empty((nq, tk)), np.empty((nq, hi - full * tk))
            for j0 in range(0, hi, tk):  # the second walk: the equivalent kernel's local mean
                j1 = min(hi, j0 + tk)
                jt = j0 // tk
                if skip and _skipped(qbox, kbox, n, t, jt, c, margin):
                    continue
                p, R = (kept[jt], r) if jt < full else (partial, r_partial)
                blas.gemm(dgemm_at, cell, Z, K64[n, j0:j1], R, False, True, 1.0, 0.0)
                for a in range(nq):
                    # weights taken at the maximum of their tile, rescaled to the final one
                    _times_lift(p[a], R[a], lift[a], math.exp(m_at[jt, a] - m[a]) if m[a] > -np.inf else 0.0)
                blas.gemm(sgemm_at, cell, p, V[n, j0:j1], acc2, False, False, 1.0, 1.0)
            for a in range(nq):
                for f in range(dv):
                    out[n, i0 + a, f] = v_mean[n, f] + acc2[a, f] / total[a] if total[a] > 0.0 else 0.0

    return forward


@njit(inline="always")
def _solve(A, b, ridge):
    """``b = A^{-1} b`` for ``A = C + ridge I`` (``C`` positive semi-definite; its upper triangle
    given, ``A`` overwritten): Cholesky's ``A = U^T U``, where every pivot ``U_ff^2`` stays above
    ``ridge / 2`` as it does in exact arithmetic; else Gaussian elimination with partial
    pivoting (:func:`_eliminate`), as ``torch.linalg.solve`` in the streamed path: where the
    moments' round-off leaves ``A`` indefinite (keys ~1e8 in float32) its pivots stay bounded."""
    d = b.shape[0]
    for f in range(d):
        for g in range(f, d):
            A[g, f] = A[f, g]  # the lower triangle, kept for the fallback
    for f in range(d):  # U in the upper triangle, row by row
        pivot = A[f, f]
        for h in range(f):
            pivot -= A[h, f] * A[h, f]
        if not pivot > 0.5 * ridge:
            for g in range(d):
                for h in range(g + 1, d):
                    A[g, h] = A[h, g]
            _eliminate(A, b)
            return
        pivot = math.sqrt(pivot)
        A[f, f] = pivot
        for g in range(f + 1, d):
            x = A[f, g]
            for h in range(f):
                x -= A[h, f] * A[h, g]
            A[f, g] = x / pivot
    for f in range(d):  # U^T y = b
        x = b[f]
        for h in range(f):
            x -= A[h, f] * b[h]
        b[f] = x / A[f, f]
    for f in range(d - 1, -1, -1):  # U x = y
        x = b[f]
        for h in range(f + 1, d):
            x -= A[f, h] * b[h]
        b[f] = x / A[f, f]


@njit(inline="always")
def _eliminate(A, b):
    """``b = A^{-1} b`` by Gaussian elimination with partial pivoting (``A`` overwritten); a zero
    pivot is taken as the smallest positive float."""
    d = b.shape[0]
    for f in range(d):
        best = f
        for g in range(f + 1, d):
            if abs(A[g, f]) > abs(A[best, f]):
                best = g
        if best != f:
            for h in range(d):
                A[f, h], A[best, h] = A[best, h], A[f, h]
            b[f], b[best] = b[best], b[f]
        if A[f, f] == 0.0:
            A[f, f] = 2.2250738585072014e-308
        for g in range(f + 1, d):
            factor = A[g, f] / A[f, f]
            for h in range(f + 1, d):
                A[g, h] -= factor * A[f, h]
            b[g] -= factor * b[f]
    for f in range(d - 1, -1, -1):
        x = b[f]
        for h in range(f + 1, d):
            x -= A[f, h] * b[h]
        b[f] = x / A[f, f]


@njit(nogil=True, cache=True)
def _moment_features(K, M, first, last):
    """``M[n, j] = [1, k, k_f k_g for f <= g]`` of the keys ``K[n, j]`` (the upper triangle row by
    row) for the batch-heads ``first .. last - 1``."""
    S, d = K.shape[1], K.shape[2]
    for n in range(first, last):
        for j in range(S):
            M[n, j, 0] = 1.0
            col = 1 + d
            for f in range(d):
                M[n, j, 1 + f] = K[n, j, f]
                for g in range(f, d):
                    M[n, j, col] = K[n, j, f] * K[n, j, g]
                    col += 1


def supports(kernel):
    """Whether this pass takes ``kernel``: the softmax, the Gaussian and the profiles of
    :mod:`localkit.fused.cpu_attention`."""
    return isinstance(kernel, str) and (kernel in INNER or kernel in NAMES)


def cpu_local_linear(kernel, q, k, v, c, causal, key_bias, ridge):
    """:func:`localkit.nn.local_linear_attention` through the compiled pass, without gradients.

    ``q, k, v``: ``(..., L, d)``, ``(..., S, d)``, ``(..., S, dv)`` float32 sharing their batch
    shape; ``c``: ``batch + (1, 1)``; ``key_bias``: None or key log-weights (``-inf``: excluded)
    broadcasting to ``batch + (1, S)``. Rows without a key of positive weight give 0.
    """
    batch, L, S, dv = q.shape[:-2], q.shape[-2], k.shape[-2], v.shape[-1]
    N = math.prod(batch)
    flat = lambda t: t.reshape((N,) + t.shape[-2:])
    if key_bias is None:
        key_bias = q.new_zeros(1, S)
    else:
        key_bias = key_bias.to(q.dtype).expand(batch + (1, S)).reshape(N, S)
    return _local_linear(flat(q), flat(k), flat(v), c.expand(batch + (1, 1)).reshape(N), key_bias, kernel,
                         bool(causal), float(ridge)).reshape(batch + (L, dv))


@torch.library.custom_op("localkit::local_linear_attention", mutates_args=())
def _local_linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor, key_bias: torch.Tensor,
                  kernel: str, causal: bool, ridge: float) -> torch.Tensor:
    """The intercepts ``(N, L, dv)`` of the compiled pass on ``(N, L, d)`` tensors."""
    code = SOFTMAX if kernel == "softmax" else GAUSSIAN if kernel == "gaussian" else NAMES.index(kernel)
    # cpu_attention's arguments (code -1 there: a kernel of inner products, no bounding boxes)
    arrays, skip = _arguments(q, k, v, c, key_bias, max(code, -1), (TILE_Q, TILE_K))
    Q, K, V, qn, kn, C, kb, kw = arrays[:8]  # the pass keeps log space: no shift (arrays[8])
    if code == GAUSSIAN:  # c (<q, k> - |k|^2 / 2): the key norms join the keys' bias
        kb = kb - 0.5 * C[:, None] * kn
    mu = k.detach().to(torch.float32).mean(1).numpy()  # the centre of Q and K
    v_mean = V.mean(1)
    d = K.shape[-1]
    M = np.empty(K.shape[:2] + (1 + d + d * (d + 1) // 2,), np.float32)
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1])
    _run_tasks(_moment_features, len(K), K, M)
    _run_tasks(local_linear_pass(code), len(Q) * -(-Q.shape[1] // TILE_Q), Q, K, K.astype(np.float64), V - v_mean[:, None], v_mean, M, mu, qn, kn, C, kb, kw,
         causal, *skip, ridge, TILE_Q, TILE_K, blas.sgemm_address(),
         blas.dgemm_address(), out.numpy())
    return out.to(q.dtype)


@_local_linear.register_fake
def _(q, k, v, c, key_bias, kernel, causal, ridge):
    return q.new_empty(q.shape[:-1] + v.shape[-1:])
