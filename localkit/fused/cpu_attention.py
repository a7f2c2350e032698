"""Every distance profile's attention as one compiled pass on the CPU, forward and backward.

``out_i = sum_j k(u_ij) v_j / sum_j k(u_ij)`` with ``u_ij^2 = c |q_i - k_j|^2`` (``c = 1 / h^2``) for
every profile of :mod:`localkit.kernels.profiles` (softmax and the Gaussian's forward pass run on
PyTorch's CPU flash kernel; on AMD CPUs the Gaussian's backward pass is this one's). Flash attention's tiling, compiled by
numba: each task (a batch-head ``n`` and a tile of ``TILE_Q`` queries) walks over tiles of
``TILE_K`` keys, takes ``<q, k>`` of the tile from one BLAS product (:mod:`~localkit.fused.blas`, cache-sized),
forms the weights in place and adds ``P V`` with a second product. Nothing ``(L, S)``-sized is
ever stored: memory is the output, the row log-sum-exp and one tile per thread.

Measured before choosing (CPU, float32, B=1 H=8 L=4096 d=64, 2 cores shared with other work, load
3-10; SDPA 0.6-1.1 s there, 0.29 s on a quiet machine): FlexAttention under ``torch.compile``
(torch 2.13) compiles on the CPU (49 s the first call) but runs the Laplacian forward at 2.1 s,
~2.5-3x SDPA, and has neither a backward pass nor a log-sum-exp on the CPU
("torch.compile on CPU only supports inference"); whole-row chunks (256 queries x every key)
under ``torch.compile`` took 3.5-4.2 s (the two products alone, out of cache, cost 2x SDPA); this
pass: see ``benchmarks/RESULTS.md`` (issue 27's section) for its ratios to SDPA.

* **Compiled per profile, run on threads.** :func:`passes` compiles the forward and backward
  passes of one profile on their first call (only that profile's loops: 2-3 s each on a cold
  cache), each a serial function that releases the GIL, run over blocks of tasks on PyTorch's
  thread count (:func:`_run_tasks`); numba caches them on disk.
* **Vectorised tiles.** Each profile's weights, and in the backward pass its slopes, are formed
  by a loop compiled for that profile alone (:func:`_tile_loops`, chosen once per tile by
  :func:`_switch`), from the profiles' own statements bound to
  :mod:`localkit.fused.vector_math` (an ``exp``, ``sin`` and ``cos`` that LLVM vectorises;
  ``math.exp`` is a C call per pair) and compiled with fast-math flags, so that LLVM vectorises
  the loop: the Laplacian's weights went from 3.0 to 0.3 ns a pair, one core (AVX-512). A tile's
  row and column sums are BLAS products with a column of ones, not sums in those loops, so that
  every copy of a loop gives the same bits (see the comment at :data:`_loop`).
* **Distances** come from ``|q|^2 + |k|^2 - 2 <q, k>`` on ``q`` and ``k`` centred on the keys'
  mean (the BLAS product); where that is below ``REFINE (|q|^2 + |k|^2)`` (near-duplicate
  points, whose expanded distance is mostly round-off) the pair's distance is recomputed from
  differences, so that the profiles with a kink at ``u = 0`` (Laplacian, triangular) keep
  float32 accuracy there (self-attention with ``q = k``).
* **Weights** are summed directly, ``k(u) exp(b_j - max b)`` with the key biases ``b``: every
  profile has ``k <= k(0) = 1``, so no running maximum is needed, and only the Laplacian's can all
  underflow (``exp(-u)`` beyond ``u ~ 87``); a row whose sum falls below :data:`TINY` (a query far
  from every key) is summed again in log space with the running maximum
  (:func:`_log_space_row`), so that a tiny bandwidth still gives the nearest key's value.
* **Block sparsity**: ``causal`` ends each query tile's keys at its last query; for a compact
  profile a key tile whose bounding box lies farther than the bandwidth from the query tile's
  bounding box is skipped (``c * gap^2 > 1``, with a round-off margin), so a small bandwidth on
  data with locality costs less than dense attention. A key bias (padding masks, ``(..., 1, S)``)
  multiplies the weights.
* **Pair bias** (``kernel_attention``'s ``pair_bias``, a low-rank float mask): each tile's
  ``<a_i, b_j>`` comes from one more BLAS product of rank ``r`` and multiplies the weights by
  ``exp(<a_i, b_j> - t_i)``, ``t_i`` a bound of row ``i``'s maximum (:func:`_pair_bound`), so they
  stay at most 1; rows whose weights then all underflow (a loose bound) are summed in log space,
  whatever the profile. Its gradient, ``B = P * (dO V^T - rowsum(dO * O))``: ``da += B b``,
  ``db += B^T a``, two more products.
* **Backward** (flash attention's recomputation): per batch-head, each tile's weights are formed
  again from the saved row log-sum-exp, ``P = k exp(b - lse)``, and with
  ``G = P * (dO V^T - rowsum(dO * O)) * (d log k / d u^2)``:
  ``dV += P^T dO``, ``dQ = 2c (rowsum(G) Q - G K)``, ``dK += 2c (colsum(G) K - G^T Q)``,
  ``dc += sum(G u^2) / c``. Parallel over batch-heads (each owns its ``dK``, ``dV``).
"""
from __future__ import annotations

import functools
import inspect
import math

import numpy as np
import torch

from .._jit import njit
from ..engine.blocks import map_blocks
from ..kernels.distances import REFINE  # the engine's dense pass refines the same near pairs
from ..kernels.profiles import PROFILES
from . import blas, vector_math
from .vector_math import FAST

#: the profiles this pass computes: every one of :mod:`localkit.kernels.profiles`
NAMES = tuple(PROFILES)
#: those :func:`localkit.nn.kernel_attention` sends to it: all but the Gaussian, whose forward is
#: PyTorch's CPU flash kernel with a key bias (its backward is this pass's on AMD CPUs:
#: ``localkit.nn.functional._GaussianAttention``)
ROUTED = tuple(name for name in NAMES if not PROFILES[name].log_linear)
#: those whose weights can all underflow: a row of them far from every key is summed again in log space
LOG_SPACE = tuple(name for name in NAMES if not (PROFILES[name].compact or PROFILES[name].polynomial_tail))
#: queries and keys per tile: a tile of weights is 128 KiB (L2-sized), the key tile 512 x d
TILE_Q, TILE_K = 64, 512
#: a row's weight sum (in units of ``k(0) = 1``) below this is summed again in log space: above it,
#: the weights flushed to 0 (below float32's smallest normal number) weigh less than
#: ``S^2 1e-26`` of the sum
TINY = 2.0 ** -40
LOG_TINY = math.log(TINY)
# float32 constants: a Python float would promote the tiles' float32 arithmetic to float64
_0, _1, _2, _REFINE = np.float32(0.0), np.float32(1.0), np.float32(2.0), np.float32(REFINE)
#: float32's smallest normal number: weights and gradient terms below it are flushed to 0. They
#: weigh nothing beside a row's sum, but as subnormal operands they made the tile loops and BLAS
#: products 4-5x slower (a trained embedding's peaked weights: the backward pass 20 -> 90 ms)
_NORMAL = np.float32(np.finfo(np.float32).tiny)

# the statements are inlined into the tile loops in numba's IR, taking the loops' fast-math flags;
# the loops themselves are compiled apart with theirs (an inlined loop would take its caller's,
# the pass's: none). A process that compiled a pass calls each loop's own machine code, one that
# loaded the pass from numba's disk cache calls the loop's copy linked into it and optimised
# again: so the loops neither reassociate nor sum (a vectorised sum's order differed between the
# copies on an AVX-512 CPU). A tile's row and column sums are BLAS products with a column of ones.
_fast = njit(inline="always", fastmath=FAST, error_model="numpy")
_loop = njit(fastmath=FAST, error_model="numpy")
_XP = vector_math.namespace()


def _switch(functions):
    """A compiled ``switch(code, ...)`` calling ``functions[code](...)`` (they share their
    parameters): one branch per profile (chosen once per tile, not per pair). It is inlined into
    its caller: in a pass compiled for one profile (:func:`passes`, ``code`` a constant of the
    closure) numba prunes the other branches, so only that profile's loops are compiled."""
    params = ", ".join(inspect.signature(functions[0].py_func).parameters)
    env = {f"f{i}": f for i, f in enumerate(functions)}
    call = lambda i: f"return f{i}({params})\n"
    branches = "".join(f"    if code == {i}:\n        {call(i)}" for i in range(len(functions) - 1))
    exec(f"def switch(code, {params}):\n{branches}    {call(len(functions) - 1)}", env)
    return njit(inline="always")(env["switch"])


def _tile_loops(profile):
    """The loops over a tile for one profile, compiled with its statements bound to
    :mod:`~localkit.fused.vector_math` so that LLVM vectorises them: ``weigh`` (forward),
    ``reweigh`` (the backward pass's weights from the saved log-sum-exp), ``gradient`` (``G``), and
    ``log_k`` of one pair (the log-space rows)."""
    k, log_k, slope = profile.k_for(_XP, _fast), profile.log_k_for(_XP, _fast), profile.slope_for(_XP, _fast)

    @_loop
    def weigh(s, kw):
        """``s`` (``u^2``; negative: excluded) overwritten with ``k(u) kw_j`` (``kw``: the tile's keys';
        0 below float32's smallest normal number)."""
        nq, nk = s.shape
        for a in range(nq):
            for b in range(nk):  # k(u) rounded to float32 at once: LLVM then narrows the statement's
                x = s[a, b]  # float64 arithmetic (Python constants) where exact (epanechnikov 2x)
                w = np.float32(k(x if x > _0 else _0)) * kw[b]
                s[a, b] = w if x >= _0 and w >= _NORMAL else _0

    @_loop
    def reweigh(u2, p, kb, kw, lse, shift, log_space, bt, btop):
        """``p`` = the weights over their row sums, ``k(u) kw_j exp(shift - lse)``, or for rows
        summed in log space ``exp(log k(u) + kb_j + bt_ab - btop_a - lse)`` (``bt``: the tile's pair
        log-weights and ``btop`` their row bounds, or ``(nq, 0)``: none); 0 where excluded, the row is
        empty or the weight is below float32's smallest normal number."""
        nq, nk = u2.shape
        biased = bt.shape[1] > 0
        for a in range(nq):
            top = lse[a]
            if top == -np.inf:
                p[a, :] = 0.0
            elif log_space and top - shift < LOG_TINY:
                for b in range(nk):
                    x = u2[a, b]
                    lw = np.float32(log_k(x if x > _0 else _0)) + kb[b] - top
                    w = vector_math.exp(lw + (bt[a, b] - btop[a]) if biased else lw)
                    p[a, b] = w if x >= _0 else _0
            else:
                scale = math.exp(shift - top)
                for b in range(nk):
                    x = u2[a, b]
                    w = np.float32(k(x if x > _0 else _0)) * kw[b] * scale
                    p[a, b] = w if x >= _0 and w >= _NORMAL else _0

    @_loop
    def gradient(u2, p, g, delta):
        """``g`` (``dO V^T``) overwritten with ``G = P (g - delta) d log k / d u^2`` (terms below
        float32's smallest normal number flushed to 0) and ``u2`` with ``G u^2``."""
        nq, nk = u2.shape
        for a in range(nq):
            for b in range(nk):
                x, y = p[a, b], u2[a, b]
                gab = x * (g[a, b] - delta[a]) * np.float32(slope(y if y > _0 else _0))
                gab = gab if x > _0 and (gab >= _NORMAL or gab <= -_NORMAL) else _0
                g[a, b] = gab
                u2[a, b] = gab * y

    return weigh, reweigh, gradient, log_k


_LOOPS = [_tile_loops(PROFILES[name]) for name in NAMES]
# module-level names, chosen by a code inside the compiled passes: numba caches a pass on disk
# only when it calls module-level functions (see localkit.engine.passes.compiled)
_weigh, _reweigh, _gradient, _log_k = (_switch(loops) for loops in zip(*_LOOPS))


@_loop
def _distances(s, Q, K, qn, kn, i0, j0, c, causal):
    """``s`` (the tile's ``<q, k>``) overwritten with ``u^2 = c |q - k|^2``; ``-1`` where causal
    excludes the pair; near-duplicate pairs recomputed from differences. ``Q, K``: one batch-head's
    ``(L, d)``, ``(S, d)``; ``qn, kn``: the tile's squared norms (float32 throughout)."""
    nq, nk = s.shape
    d = Q.shape[1]
    for a in range(nq):
        i = i0 + a
        top = max(0, min(nk, i - j0 + 1)) if causal else nk
        qi = qn[a]
        near = 0
        for b in range(top):
            full = qi + kn[b]
            d2 = full - _2 * s[a, b]
            near += d2 < _REFINE * full
            s[a, b] = c * (d2 if d2 > _0 else _0)
        for b in range(top, nk):
            s[a, b] = -_1
        if near:
            for b in range(top):
                if s[a, b] < c * _REFINE * (qi + kn[b]):
                    s[a, b] = c * _squared_distance(Q, K, i, j0 + b)


@njit(error_model="numpy")
def _squared_distance(Q, K, i, j):
    """``|Q_i - K_j|^2`` summed in order (no fast-math: a vectorised sum's order may differ
    between copies of the code, see :data:`_loop`)."""
    d2 = _0
    for f in range(Q.shape[1]):
        t = Q[i, f] - K[j, f]
        d2 += t * t
    return d2


@_loop
def _add_pair_bias(w, bt, top, lse, shift, log_rows):
    """``w`` (a tile's weights) multiplied by ``exp(bt - top_a)`` (``bt``: the tile's pair log-weights,
    ``top``: their row bounds), 0 below float32's smallest normal number; rows summed in log space
    (``log_rows`` and ``lse_a - shift < LOG_TINY``: their bias is inside their weights) left as they are."""
    nq, nk = w.shape
    for a in range(nq):
        if log_rows and lse[a] - shift < LOG_TINY:
            continue
        for b in range(nk):
            x = w[a, b] * vector_math.exp(bt[a, b] - top[a])
            w[a, b] = x if x >= _NORMAL else _0


@_loop
def _pair_bias_gradient(p, g, delta, gb):
    """``gb = P (g - delta)``: the gradient of the pair log-weights (``g``: ``dO V^T``), terms below
    float32's smallest normal number flushed to 0."""
    nq, nk = p.shape
    for a in range(nq):
        for b in range(nk):
            x = p[a, b] * (g[a, b] - delta[a])
            gb[a, b] = x if x >= _NORMAL or x <= -_NORMAL else _0


@_loop
def _add_key_gradient(dk, g_col, kt, gk, scale):
    """``dk += scale (colsum(G) K - G^T Q)`` for a key tile (``gk = G^T Q``)."""
    for b in range(dk.shape[0]):
        for f in range(dk.shape[1]):
            dk[b, f] += scale * (g_col[b, 0] * kt[b, f] - gk[b, f])


@njit(inline="always")
def _skipped(qbox, kbox, n, t, jt, c, margin):
    """Whether every pair of query tile ``t`` and key tile ``jt`` lies beyond a compact support:
    the gap between their bounding boxes, ``c gap^2 > 1 + margin``."""
    gap2 = 0.0
    for f in range(qbox.shape[3]):
        g = max(qbox[n, t, 0, f] - kbox[n, jt, 1, f], kbox[n, jt, 0, f] - qbox[n, t, 1, f], 0.0)
        gap2 += g * g
    return c * gap2 > 1.0 + margin


@njit(inline="always")
def _log_space_row(Q, K, V, n, i, hi, c, kb, PQ, PK, ptop, code, out, lse):
    """``out[n, i]`` and ``lse[n, i]`` over keys ``0 .. hi - 1`` summed in log space with the
    running maximum, distances from differences, the pair log-weights ``<PQ_i, PK_j> - ptop_i``
    added: a row whose weights all underflow (loops, not array expressions: numba compiles a
    costly error path for each broadcast)."""
    d, dv, r = Q.shape[2], V.shape[2], PQ.shape[2]
    top, total = -np.inf, 0.0
    acc = np.zeros(dv)
    for j in range(hi):
        d2 = 0.0
        for f in range(d):
            t = Q[n, i, f] - K[n, j, f]
            d2 += t * t
        lw = _log_k(code, np.float32(c * d2)) + kb[j]
        if r > 0:
            bias = -ptop[n, i]
            for f in range(r):
                bias += PQ[n, i, f] * PK[n, j, f]
            lw += bias
        if lw == -np.inf:
            continue
        scale = 1.0
        if lw > top:
            scale = math.exp(top - lw)
            top = lw
        w = math.exp(lw - top)
        total = total * scale + w
        for f in range(dv):
            acc[f] = acc[f] * scale + w * V[n, j, f]
    for f in range(dv):
        out[n, i, f] = acc[f] / total if total > 0.0 else 0.0
    lse[n, i] = top + math.log(total) + (ptop[n, i] if r > 0 else 0.0) if total > 0.0 else -np.inf


@functools.cache
def passes(code):
    """``(forward, backward)``: the compiled passes for the profile ``NAMES[code]``, compiled on
    their first call for that profile only (the profile's code is a constant of the closures, so
    numba prunes the other profiles' branches; numba caches each on disk by that constant).
    Rows of a profile in :data:`LOG_SPACE` whose sum falls below :data:`TINY` are summed again in
    log space."""
    log_space = NAMES[code] in LOG_SPACE

    @njit(nogil=True, cache=True)
    def forward(Q, K, V, qn, kn, C, kb, kw, shift, PQ, PK, ptop, causal, qbox, kbox, margin, tq, tk, gemm_at, out, lse,
                first, last):
        """Fill ``out`` ``(N, L, dv)`` and ``lse`` ``(N, L)`` (``-inf``: no key with weight).

        ``Q, K, V``: ``(N, L, d)``, ``(N, S, d)``, ``(N, S, dv)`` float32, C-contiguous, ``Q`` and ``K``
        centred alike; ``qn, kn``: their squared norms; ``C``: ``(N,)`` scales; ``kb``: ``(1 or N, S)``
        key log-weights (0, ``-inf`` for padding), ``shift`` their row maxima (0 where ``-inf``) and
        ``kw = exp(kb - shift)``; ``PQ, PK``: ``(N, L, r)``, ``(N, S, r)``, the pair log-weights
        ``<PQ_i, PK_j>`` (``r = 0``: none), ``ptop`` ``(N, L)`` a bound of each row's maximum (the
        weights' factors ``exp(<PQ_i, PK_j> - ptop_i) <= 1``); ``qbox, kbox``: ``(N, tiles, 2, d)`` bounding boxes
        for skipping (compact profiles; empty otherwise); ``first, last``: the range of tasks (a
        batch-head and a tile of ``tq`` queries, ``(N, L / tq)`` in C order) to fill."""
        N, L, d = Q.shape
        S, dv = K.shape[1], V.shape[2]
        n_qt = (L + tq - 1) // tq
        skip = qbox.shape[1] > 0
        biased = PQ.shape[2] > 0
        for task in range(first, last):
            n, t = task // n_qt, task % n_qt
            i0 = t * tq
            i1 = min(L, i0 + tq)
            nq = i1 - i0
            c = C[n]
            row = n if kb.shape[0] > 1 else 0
            qt = Q[n, i0:i1]
            acc = np.zeros((nq, dv), dtype=np.float32)
            total = np.zeros((nq, 1), dtype=np.float32)
            cell, tile, ones = blas.cells(), np.empty((nq, tk), dtype=np.float32), np.ones((tk, 1), dtype=np.float32)
            bias_tile = np.empty((nq, tk if biased else 0), dtype=np.float32)
            hi = min(S, i1) if causal else S
            for j0 in range(0, hi, tk):
                j1 = min(hi, j0 + tk)
                if skip and _skipped(qbox, kbox, n, t, j0 // tk, c, margin):
                    continue
                s = tile if j1 - j0 == tk else np.empty((nq, j1 - j0), dtype=np.float32)
                blas.gemm(gemm_at, cell, qt, K[n, j0:j1], s, False, True, 1.0, 0.0)
                _distances(s, Q[n], K[n], qn[n, i0:i1], kn[n, j0:j1], i0, j0, c, causal)
                _weigh(code, s, kw[row, j0:j1])
                if biased:
                    bt = bias_tile if j1 - j0 == tk else np.empty((nq, j1 - j0), dtype=np.float32)
                    blas.gemm(gemm_at, cell, PQ[n, i0:i1], PK[n, j0:j1], bt, False, True, 1.0, 0.0)
                    _add_pair_bias(s, bt, ptop[n, i0:i1], ptop[n, i0:i1], 0.0, False)
                blas.gemm(gemm_at, cell, s, ones[:j1 - j0], total, False, False, 1.0, 1.0)
                blas.gemm(gemm_at, cell, s, V[n, j0:j1], acc, False, False, 1.0, 1.0)
            for a in range(nq):
                i = i0 + a
                if (log_space or biased) and total[a, 0] < TINY:
                    _log_space_row(Q, K, V, n, i, min(S, i + 1) if causal else S, c, kb[row], PQ, PK, ptop, code,
                                   out, lse)
                elif total[a, 0] > 0.0:
                    for f in range(dv):
                        out[n, i, f] = acc[a, f] / total[a, 0]
                    lse[n, i] = math.log(total[a, 0]) + shift[row] + (ptop[n, i] if biased else 0.0)
                else:
                    for f in range(dv):
                        out[n, i, f] = 0.0
                    lse[n, i] = -np.inf


    @njit(nogil=True, cache=True)
    def backward(Q, K, V, qn, kn, C, kb, kw, shift, PQ, PK, ptop, causal, qbox, kbox, margin, tq, tk, gemm_at, dO,
                 delta, lse, dQ, dK, dV, dC, dPQ, dPK, first, last):
        """Gradients of ``forward`` (same arguments, ``lse`` as it returned it less ``ptop``) for the
        output gradient ``dO`` with ``delta = rowsum(dO * out)``: fills ``dQ``, ``dK``, ``dV``, ``dPQ``,
        ``dPK`` (zeroed) and ``dC`` ``(N,)`` for the batch-heads ``first .. last - 1`` (each owns its
        ``dK``, ``dV``, ``dPK``)."""
        N, L, d = Q.shape
        S = K.shape[1]
        n_qt = (L + tq - 1) // tq
        skip = qbox.shape[1] > 0
        biased = PQ.shape[2] > 0
        for n in range(first, last):
            c = C[n]
            row = n if kb.shape[0] > 1 else 0
            dc = 0.0
            cell = blas.cells()
            tiles = np.empty((3, tq, tk), dtype=np.float32)  # u^2 (then G u^2), P and G of a full tile
            bias_tiles = np.empty((2, tq, tk if biased else 0), dtype=np.float32)  # pair log-weights, their gradient
            gk = np.empty((tk, d), dtype=np.float32)
            ones, g_col, dc_rows = (np.ones((max(tq, tk), 1), dtype=np.float32), np.empty((tk, 1), dtype=np.float32),
                                    np.empty((tq, 1), dtype=np.float32))
            for t in range(n_qt):
                i0 = t * tq
                i1 = min(L, i0 + tq)
                nq = i1 - i0
                qt, dot = Q[n, i0:i1], dO[n, i0:i1]
                dq = np.zeros((nq, d), dtype=np.float32)
                g_row = np.zeros((nq, 1), dtype=np.float32)
                hi = min(S, i1) if causal else S
                for j0 in range(0, hi, tk):
                    j1 = min(hi, j0 + tk)
                    nk = j1 - j0
                    if skip and _skipped(qbox, kbox, n, t, j0 // tk, c, margin):
                        continue
                    kt, vt = K[n, j0:j1], V[n, j0:j1]
                    bt, gb = bias_tiles[0], bias_tiles[1]
                    if nq == tq and nk == tk:
                        u2, p, g = tiles[0], tiles[1], tiles[2]
                    else:  # a partial tile (fresh arrays: numba's reshape compiles a costly error path)
                        u2, p, g = (np.empty((nq, nk), dtype=np.float32), np.empty((nq, nk), dtype=np.float32),
                                    np.empty((nq, nk), dtype=np.float32))
                        if biased:
                            bt, gb = np.empty((nq, nk), dtype=np.float32), np.empty((nq, nk), dtype=np.float32)
                    blas.gemm(gemm_at, cell, qt, kt, u2, False, True, 1.0, 0.0)
                    _distances(u2, Q[n], K[n], qn[n, i0:i1], kn[n, j0:j1], i0, j0, c, causal)
                    if biased:
                        blas.gemm(gemm_at, cell, PQ[n, i0:i1], PK[n, j0:j1], bt, False, True, 1.0, 0.0)
                    _reweigh(code, u2, p, kb[row, j0:j1], kw[row, j0:j1], lse[n, i0:i1], shift[row],
                             log_space or biased, bt, ptop[n, i0:i1])
                    if biased:
                        _add_pair_bias(p, bt, ptop[n, i0:i1], lse[n, i0:i1], shift[row], True)
                    blas.gemm(gemm_at, cell, p, dot, dV[n, j0:j1], True, False, 1.0, 1.0)
                    blas.gemm(gemm_at, cell, dot, vt, g, False, True, 1.0, 0.0)  # dO V^T, then G in place
                    if biased:
                        _pair_bias_gradient(p, g, delta[n, i0:i1], gb)
                        blas.gemm(gemm_at, cell, gb, PK[n, j0:j1], dPQ[n, i0:i1], False, False, 1.0, 1.0)
                        blas.gemm(gemm_at, cell, gb, PQ[n, i0:i1], dPK[n, j0:j1], True, False, 1.0, 1.0)
                    _gradient(code, u2, p, g, delta[n, i0:i1])
                    blas.gemm(gemm_at, cell, g, ones[:nk], g_row, False, False, 1.0, 1.0)
                    blas.gemm(gemm_at, cell, g, ones[:nq], g_col[:nk], True, False, 1.0, 0.0)
                    blas.gemm(gemm_at, cell, u2, ones[:nk], dc_rows[:nq], False, False, 1.0, 0.0)
                    for a in range(nq):
                        dc += dc_rows[a, 0]
                    blas.gemm(gemm_at, cell, g, kt, dq, False, False, -1.0, 1.0)
                    blas.gemm(gemm_at, cell, g, qt, gk[:nk], True, False, 1.0, 0.0)
                    _add_key_gradient(dK[n, j0:j1], g_col[:nk], kt, gk[:nk], 2.0 * c)
                for a in range(nq):
                    for f in range(d):
                        dQ[n, i0 + a, f] = 2.0 * c * (dq[a, f] + g_row[a, 0] * qt[a, f])
            dC[n] = dc / c

    return forward, backward


def cpu_kernel_attention(kernel, q, k, v, c, causal, key_bias, pair_bias=None):
    """``kernel_attention`` of a profile in :data:`NAMES` through the compiled pass, differentiable
    in ``q``, ``k``, ``v``, ``c`` and the pair bias (custom operators: ``torch.compile`` traces them whole).

    ``q, k, v``: ``(..., L, d)``, ``(..., S, d)``, ``(..., S, dv)`` float32 sharing their batch shape;
    ``c``: ``batch + (1, 1)`` (``1 / h^2``); ``key_bias``: None or key log-weights (``-inf``:
    excluded) broadcasting to ``batch + (1, S)``, no gradient; ``pair_bias``: None or ``(a, b)``
    broadcasting to ``batch + (L, r)``, ``batch + (S, r)``, the log-weight ``<a_i, b_j>`` added to each
    pair. Rows without a key of positive weight give 0.
    """
    batch, L, S, dv = q.shape[:-2], q.shape[-2], k.shape[-2], v.shape[-1]
    N = math.prod(batch)
    flat = lambda t: t.reshape((N,) + t.shape[-2:])
    if key_bias is None:
        key_bias = q.new_zeros(1, S)
    else:
        key_bias = key_bias.to(q.dtype).expand(batch + (1, S)).reshape(N, S)
    if pair_bias is None:
        a, b = q.new_zeros(N, L, 0), q.new_zeros(N, S, 0)
    else:
        r = pair_bias[0].shape[-1]
        a, b = (flat(t.to(q.dtype).expand(batch + (n, r))) for t, n in zip(pair_bias, (L, S)))
    out, _ = _attention(flat(q), flat(k), flat(v), c.expand(batch + (1, 1)).reshape(N), key_bias, a, b,
                        NAMES.index(kernel), bool(causal))
    return out.reshape(batch + (L, dv))


def _run_tasks(compiled, n_tasks, *args):
    """``compiled(*args, first, last)`` over blocks of ``range(n_tasks)`` on PyTorch's thread
    count, each block's tile products on one BLAS thread. Python's threads over a serial pass
    that releases the GIL, not numba's parallel loop: numba's parallel lowering was most of a
    cold first call (Epanechnikov, one profile: forward 6.3 s to compile against 2.4 s serial,
    backward 9.4 s against 3.0 s)."""
    workers = torch.get_num_threads()

    def run(tasks):
        with blas.one_mkl_thread():
            compiled(*args, tasks.start, tasks.stop)

    # a few blocks per thread, handed out as threads free up: tiles skipped by causality or
    # compact support make tasks uneven
    map_blocks(run, n_tasks, max(1, -(-n_tasks // (4 * workers))), workers)


def _boxes(t, tile):
    """Per tile of ``tile`` rows, the bounding box ``(N, tiles, 2, d)`` (min, max) of ``t`` ``(N, L, d)``."""
    N, L, d = t.shape
    n_tiles = -(-L // tile)
    padded = torch.nn.functional.pad(t, (0, 0, 0, n_tiles * tile - L), value=math.nan).view(N, n_tiles, tile, d)
    return torch.stack([padded.nan_to_num(math.inf).amin(2), padded.nan_to_num(-math.inf).amax(2)], 2).contiguous()


def _pair_bound(a, b):
    """``(N, L)``: a bound of ``max_j <a_i, b_j>`` for each row (``a``: ``(N, L, r)``, ``b``:
    ``(N, S, r)``), ``sum_f max(a_if max_j b_jf, a_if min_j b_jf)``; the maximum itself where each
    of ``a_i``'s terms peaks at the same key (a one-hot ``b``: Li-Racine mismatches)."""
    if a.shape[-1] == 0 or b.shape[-2] == 0:
        return a.new_zeros(a.shape[:2])
    return torch.maximum(a * b.amax(1, keepdim=True), a * b.amin(1, keepdim=True)).sum(-1)


def _arguments(q, k, v, c, key_bias, code, tiles=None, a=None, b=None):
    """The compiled passes' arguments as NumPy views: ``q, k`` centred on the keys' mean (no
    distance changes), their squared norms, the key weights ``exp(b - max b)`` and ``max b``, the
    pair bias's factors ``a, b`` (``(N, L, r)``, ``(N, S, r)``; None: ``r = 0``) and its rows' bounds
    (:func:`_pair_bound`), the bounding boxes of the tiles (``tiles``: queries and keys a tile,
    ``(TILE_Q, TILE_K)`` unless given; compact profiles only, empty otherwise) and the round-off
    margin of the skip test.
    ``code`` -1: a kernel of inner products (:mod:`localkit.fused.cpu_local_linear`), no boxes."""
    name = NAMES[code] if code >= 0 else None
    contiguous = lambda t: t.detach().to(torch.float32).contiguous()
    if a is None:
        a, b = q.new_zeros(q.shape[:2] + (0,)), q.new_zeros(k.shape[:2] + (0,))
    q, k, v, C, kb, a, b = map(contiguous, (q, k, v, c, key_bias, a, b))
    centre = k.mean(1, keepdim=True)
    q, k = (q - centre).contiguous(), (k - centre).contiguous()
    qn, kn = q.square().sum(-1), k.square().sum(-1)
    top = kb.amax(-1)
    shift = torch.where(torch.isfinite(top), top, 0.0)
    kw = torch.exp(kb - shift[:, None])
    if name is not None and PROFILES[name].compact:
        tq, tk = tiles or (TILE_Q, TILE_K)
        qbox, kbox = _boxes(q, tq), _boxes(k, tk)
        # the expansion's round-off in c |q - k|^2: a pair the boxes put outside is computed
        # inside only within it (64 float32 ulps of c (|q|^2 + |k|^2) at most)
        margin = float(64 * 2.0 ** -23 * C.amax() * (qn.amax() + kn.amax()))
    else:
        qbox = kbox = torch.empty(q.shape[0], 0, 2, q.shape[-1])
        margin = 0.0
    arrays = (q, k, v, qn, kn, C, kb, kw, shift, a, b, _pair_bound(a, b))
    return tuple(t.numpy() for t in arrays), (qbox.numpy(), kbox.numpy(), margin)


@torch.library.custom_op("localkit::profile_attention", mutates_args=())
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, c: torch.Tensor, key_bias: torch.Tensor,
               a: torch.Tensor, b: torch.Tensor, code: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(out, lse)`` of the compiled forward pass on ``(N, L, d)`` tensors, the pair bias
    ``<a_i, b_j>`` (``(N, L, r)``, ``(N, S, r)``; ``r = 0``: none) added (``lse``: the pass's own row
    log-sum-exp, for the backward pass)."""
    arrays, skip = _arguments(q, k, v, c, key_bias, code, a=a, b=b)
    N, L, dv = q.shape[0], q.shape[1], v.shape[-1]
    out, lse = torch.empty(N, L, dv), torch.empty(N, L)
    _run_tasks(passes(code)[0], N * -(-L // TILE_Q), *arrays, causal, *skip, TILE_Q, TILE_K, blas.sgemm_address(),
               out.numpy(), lse.numpy())
    return out.to(q.dtype), lse


@_attention.register_fake
def _(q, k, v, c, key_bias, a, b, code, causal):
    return q.new_empty(q.shape[:-1] + v.shape[-1:]), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("localkit::profile_attention_backward", mutates_args=())
def _attention_backward(dout: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor, c: torch.Tensor, key_bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                        code: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                         torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv, dc, da, db)`` of :func:`_attention` for the output gradient ``dout``."""
    arrays, skip = _arguments(q, k, v, c, key_bias, code, a=a, b=b)
    dO = dout.to(torch.float32).contiguous()
    delta = (dO * out.to(torch.float32)).sum(-1)
    grads = [torch.zeros(t.shape, dtype=torch.float32) for t in (q, k, v)]
    dc = torch.zeros(q.shape[0])
    da, db = (torch.zeros(t.shape, dtype=torch.float32) for t in (a, b))
    # the pass reweighs from the log-sum-exp less each row's bound of the pair bias (0 without one)
    lse = (lse - torch.from_numpy(arrays[-1]) if a.shape[-1] else lse).contiguous()
    _run_tasks(passes(code)[1], q.shape[0], *arrays, causal, *skip, TILE_Q, TILE_K, blas.sgemm_address(), dO.numpy(),
               delta.numpy(), lse.numpy(), *(t.numpy() for t in grads), dc.numpy(), da.numpy(), db.numpy())
    return (*(t.to(s.dtype) for t, s in zip(grads + [dc, da, db], (q, k, v, c, a, b))),)


@_attention_backward.register_fake
def _(dout, out, lse, q, k, v, c, key_bias, a, b, code, causal):
    return tuple(t.new_empty(t.shape) for t in (q, k, v, c, a, b))


def _setup_context(ctx, inputs, output):
    q, k, v, c, key_bias, a, b, code, causal = inputs
    ctx.save_for_backward(q, k, v, c, key_bias, a, b, *output)
    ctx.code, ctx.causal = code, causal
    # no output gradient (create_graph=True through kernel_attention, whose twice-differentiable
    # wrapper passes none here): no call of the backward operator, which has no derivative itself
    ctx.set_materialize_grads(False)


def _backward(ctx, dout, _):
    if dout is None:
        return (None,) * 9
    q, k, v, c, key_bias, a, b, out, lse = ctx.saved_tensors
    dq, dk, dv, dc, da, db = _attention_backward(dout, out, lse, q, k, v, c, key_bias, a, b, ctx.code, ctx.causal)
    return dq, dk, dv, dc, None, da, db, None, None


_attention.register_autograd(_backward, setup_context=_setup_context)
