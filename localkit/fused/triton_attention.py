"""Every localization kernel as one flash-attention kernel in Triton: the CUDA path of
:func:`localkit.nn.kernel_attention` for the distance profiles and for kernels in position
(float32; half inputs are taken but not yet routed here: on an H200 their results were wrong,
see :func:`localkit.nn.functional._cuda_fused`).

A program takes a block of queries and streams over key blocks. For the profiles, with ``q`` and
``k`` centred on the keys' mean inside the kernel (distances do not move; ``|q|^2`` and ``|k|^2``
stay small against ``2 q . k``), the log-weight of a pair is the profile's one statement
(:mod:`localkit.kernels.profiles`, re-bound to Triton by :mod:`.triton_namespace`)

    u2_ij = c max(|q_i|^2 + |k_j|^2 - 2 q_i . k_j, 0),   s_ij = log k(u2_ij) [+ log k_w((i - j)^2 / w^2)]

(softmax: ``s_ij = c q_i . k_j``, uncentred), and the online log-sum-exp (in base 2) accumulates
``out_i = sum_j exp(s_ij - m_i) v_j / sum_j exp(s_ij - m_i)``. ``causal`` and ``window`` bound each
program's loop over key blocks, so that a window of half-width ``w`` costs ``L (2 w + block)``
pairs, not ``L S``. Rows whose kernel vanishes everywhere give zero. In float32 the sums over
blocks are compensated (:func:`_accumulate`), so that their error does not grow with ``S``. Memory:
the inputs, the output and one float per query (the log-sum-exp); nothing ``L x S``.

The backward pass is FlashAttention-2's: with ``P_ij = exp(s_ij - lse_i)``, ``delta_i = dO_i . out_i``,
``dS_ij = P_ij (dO_i . v_j - delta_i)`` and ``G_ij = dS_ij (d log k / d u2)(u2_ij)`` (the profile's
slope, stated beside it),

    dq_i = 2c (q_i sum_j G_ij - sum_j G_ij k_j),   dk_j = 2c (k_j sum_i G_ij - sum_i G_ij q_i),
    dv_j = sum_i P_ij dO_i,   dc = sum_ij G_ij u2_ij / c

(softmax: ``dq = c dS K``, ``dk = c dS^T Q``, ``dc = sum_ij dS_ij q_i . k_j``), in two kernels: one per
key block (``dk, dv``), one per query block (``dq``), each recomputing ``P`` from the saved
log-sum-exp. ``c`` is one float per batch entry (a learned per-head bandwidth gets its gradient).

Written here rather than through FlexAttention because FlexAttention needs the distance as a dot
product of augmented features (``d + 2`` columns, which its template rounds up to the next power
of two: 66 -> 128 for ``d = 64``) and keeps them for the backward pass; on an H200 that made the
profiles 4-28x slower than SDPA (fwd+bwd) at 2.5x its memory (``benchmarks/RESULTS.md``).
"""
from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from ..kernels.profiles import PROFILES
from . import triton_namespace

LOG2E = tl.constexpr(1.4426950408889634)


@functools.cache
def _profile(name):
    """``(log k, slope)`` of the profile ``name`` as Triton JIT functions (compiled once)."""
    profile = PROFILES[name]
    return (profile.log_k_for(triton_namespace, triton.jit),
            profile.slope_for(triton_namespace, triton.jit))


@triton.jit
def _dot(a, b, IEEE: tl.constexpr):
    if IEEE:  # float32 stays float32 (TF32's 10-bit mantissa would cost ~1e-3 in the log-weights)
        return tl.dot(a, b, input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def _accumulate(total, carry, part, IEEE: tl.constexpr):
    """``total + part`` for a sum over blocks, as ``(total, carry)``.

    IEEE float32 products run on the FMA units, and Triton folds ``total + tl.dot(a, b)`` into
    ``tl.dot(a, b, total)``: a chain that adds every single term to the running total, where terms
    below half its ulp vanish (a local mean over 262,144 keys lost 2e-4 on an H200, the weight sum,
    summed per block, did not). So the block's product is formed on its own and added with Kahan's
    compensation (``carry``: the rounding error so far), which the fold does not touch. Half inputs
    keep the fold: their tensor-core products are rounded far more coarsely already."""
    if IEEE:
        y = part - carry
        t = total + y
        return t, (t - total) - y
    return total + part, carry


@triton.jit
def _load_tile(X, MU, rows, dims, n_rows, D, CENTRED: tl.constexpr, TRANSPOSED: tl.constexpr):
    """A block of rows of ``X`` (``n_rows x D``, row-major) as ``(rows, dims)``, or as ``(dims, rows)``
    when ``TRANSPOSED`` (read transposed from memory: on Hopper, Triton 3.6 multiplied a tile
    transposed in registers wrongly, cf. triton-lang/triton#6124), centred on ``MU`` if asked and
    rounded back to the input's dtype, with the rows' squared norms (float32, of the rounded values)."""
    if TRANSPOSED:
        ok = (dims[:, None] < D) & (rows[None, :] < n_rows)
        x = tl.load(X + rows[None, :] * D + dims[:, None], mask=ok, other=0.0)
        if CENTRED:
            mu = tl.load(MU + dims, mask=dims < D, other=0.0)
            x = tl.where(ok, x.to(tl.float32) - mu[:, None], 0.0).to(x.dtype)
        xf = x.to(tl.float32)
        norms = tl.sum(xf * xf, 0)
    else:
        ok = (rows[:, None] < n_rows) & (dims[None, :] < D)
        x = tl.load(X + rows[:, None] * D + dims[None, :], mask=ok, other=0.0)
        if CENTRED:
            mu = tl.load(MU + dims, mask=dims < D, other=0.0)
            x = tl.where(ok, x.to(tl.float32) - mu[None, :], 0.0).to(x.dtype)
        xf = x.to(tl.float32)
        norms = tl.sum(xf * xf, 1)
    return x, norms


@triton.jit
def _log_weights(s, qn, kn, c, i, j, S, inv_w2, LOG_K: tl.constexpr, SOFTMAX: tl.constexpr,
                 CAUSAL: tl.constexpr, REACH: tl.constexpr, POS_LOG_K: tl.constexpr, HAS_POS: tl.constexpr):
    """``(s_ij in log2 units, -inf where the pair is not admissible; r2_ij)`` for a tile ``s = q . k``
    in either orientation: ``qn, kn`` (norms) and ``i, j`` (query and key indices) come broadcast to
    its shape. ``r2 = u2 / c`` for the profiles, ``q . k`` for the softmax (``dc`` is summed against it)."""
    if SOFTMAX:
        r2 = s
        score = c * s
    else:
        r2 = tl.maximum(qn + kn - 2.0 * s, 0.0)  # rounding can make it negative
        score = LOG_K(c * r2)
    ok = j < S
    if CAUSAL:
        ok = ok & (j <= i)
    if REACH >= 0:
        offset = (i - j).to(tl.float32)
        ok = ok & (tl.abs(offset) <= REACH)
        if HAS_POS:
            score = score + POS_LOG_K(offset * offset * inv_w2)
    return tl.where(ok, score * LOG2E, -float("inf")), r2


@triton.jit
def _key_range(start, BLOCK_M: tl.constexpr, S, CAUSAL: tl.constexpr, REACH: tl.constexpr, BLOCK_N: tl.constexpr):
    """The key blocks the queries ``start .. start + BLOCK_M`` can reach (position kernels as sparsity)."""
    lo = start * 0
    hi = start * 0 + S
    if CAUSAL:
        hi = tl.minimum(hi, start + BLOCK_M)
    if REACH >= 0:
        lo = tl.maximum(start - REACH, 0) // BLOCK_N * BLOCK_N
        hi = tl.minimum(hi, start + BLOCK_M + REACH)
    return lo, hi


@triton.jit
def _query_range(first, BLOCK_N: tl.constexpr, L, CAUSAL: tl.constexpr, REACH: tl.constexpr, BLOCK_M: tl.constexpr):
    """The query blocks that can reach the keys ``first .. first + BLOCK_N``."""
    lo = first * 0
    hi = first * 0 + L
    if CAUSAL:
        lo = first // BLOCK_M * BLOCK_M
    if REACH >= 0:
        lo = tl.maximum(lo, tl.maximum(first - REACH, 0) // BLOCK_M * BLOCK_M)
        hi = tl.minimum(hi, first + BLOCK_N + REACH)
    return lo, hi


@triton.jit
def _program(C, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    """This program's first row (of queries, or of keys), batch entry, row / feature / value-column
    indices and scale ``c``."""
    first = tl.program_id(0) * BLOCK
    n = tl.program_id(1).to(tl.int64)
    return first, n, first + tl.arange(0, BLOCK), tl.arange(0, BLOCK_D), tl.arange(0, BLOCK_DV), tl.load(C + n)


@triton.jit
def _forward(Q, K, V, MU, C, O, LSE, L, S, D, DV, inv_w2,
             LOG_K: tl.constexpr, SOFTMAX: tl.constexpr, CAUSAL: tl.constexpr, REACH: tl.constexpr,
             POS_LOG_K: tl.constexpr, HAS_POS: tl.constexpr, IEEE: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    start, n, rows, dims, vdims, c = _program(C, BLOCK_M, BLOCK_D, BLOCK_DV)
    q, qn = _load_tile(Q + n * L * D, MU + n * D, rows, dims, L, D, not SOFTMAX, False)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    l_carry = tl.zeros([BLOCK_M], tl.float32)
    acc_carry = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    lo, hi = _key_range(start, BLOCK_M, S, CAUSAL, REACH, BLOCK_N)
    for first in range(lo, hi, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        kT, kn = _load_tile(K + n * S * D, MU + n * D, cols, dims, S, D, not SOFTMAX, True)
        score, _ = _log_weights(_dot(q, kT, IEEE), qn[:, None], kn[None, :], c, rows[:, None], cols[None, :], S,
                                inv_w2, LOG_K, SOFTMAX, CAUSAL, REACH, POS_LOG_K, HAS_POS)
        m_new = tl.maximum(m_i, tl.max(score, 1))
        base = tl.where(m_new == -float("inf"), 0.0, m_new)  # rows with no admissible key yet
        p = tl.exp2(score - base[:, None])
        alpha = tl.exp2(m_i - base)
        l_i, l_carry = _accumulate(l_i * alpha, l_carry * alpha, tl.sum(p, 1), IEEE)
        v = tl.load(V + n * S * DV + cols[:, None] * DV + vdims[None, :],
                    mask=(cols[:, None] < S) & (vdims[None, :] < DV), other=0.0)
        acc, acc_carry = _accumulate(acc * alpha[:, None], acc_carry * alpha[:, None], _dot(p.to(v.dtype), v, IEEE),
                                     IEEE)
        m_i = m_new
    empty = l_i == 0.0
    out = acc / tl.where(empty, 1.0, l_i)[:, None]
    tl.store(O + n * L * DV + rows[:, None] * DV + vdims[None, :], out.to(O.dtype.element_ty),
             mask=(rows[:, None] < L) & (vdims[None, :] < DV))
    # log2 units; +inf for an empty row, so that the backward pass's P = exp2(s - lse) is 0 there
    tl.store(LSE + n * L + rows, tl.where(empty, float("inf"), m_i + tl.log2(l_i)), mask=rows < L)


@triton.jit
def _delta(O, DO, DELTA, L, DV, BLOCK_M: tl.constexpr, BLOCK_DV: tl.constexpr):
    """``delta_i = dO_i . out_i`` in float32 (no float32 copies of ``dO`` and ``out``)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    n = tl.program_id(1).to(tl.int64)
    vdims = tl.arange(0, BLOCK_DV)
    ok = (rows[:, None] < L) & (vdims[None, :] < DV)
    offsets = n * L * DV + rows[:, None] * DV + vdims[None, :]
    o = tl.load(O + offsets, mask=ok, other=0.0).to(tl.float32)
    do = tl.load(DO + offsets, mask=ok, other=0.0).to(tl.float32)
    tl.store(DELTA + n * L + rows, tl.sum(o * do, 1), mask=rows < L)


@triton.jit
def _gradient_tile(s, dp, qn, kn, lse, delta, c, i, j, S, inv_w2,
                   LOG_K: tl.constexpr, SLOPE: tl.constexpr, SOFTMAX: tl.constexpr, CAUSAL: tl.constexpr,
                   REACH: tl.constexpr, POS_LOG_K: tl.constexpr, HAS_POS: tl.constexpr):
    """``(P, G, r2)`` of a tile of pairs (either orientation, the per-query ``lse, delta`` and the
    norms broadcast to its shape): ``G = dL/ds`` for the softmax, ``dL/du2`` for the profiles."""
    score, r2 = _log_weights(s, qn, kn, c, i, j, S, inv_w2, LOG_K, SOFTMAX, CAUSAL, REACH, POS_LOG_K, HAS_POS)
    p = tl.exp2(score - lse)
    ds = p * (dp - delta)
    if SOFTMAX:
        g = ds
    else:  # p > 0: the slope is not evaluated on a compact support's edge (where it is infinite)
        g = tl.where(p > 0.0, ds * SLOPE(c * r2), 0.0)
    return p, g, r2


@triton.jit
def _backward_kv(Q, K, V, MU, C, DO, LSE, DELTA, DK, DVAL, DC, L, S, D, DV, inv_w2, N_BLOCKS,
                 LOG_K: tl.constexpr, SLOPE: tl.constexpr, SOFTMAX: tl.constexpr, CAUSAL: tl.constexpr,
                 REACH: tl.constexpr, POS_LOG_K: tl.constexpr, HAS_POS: tl.constexpr, IEEE: tl.constexpr,
                 NEED_DC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                 BLOCK_DV: tl.constexpr):
    """One block of keys; the tiles are taken transposed (keys x queries), so that ``P^T`` and
    ``G^T`` come out of the products as they are needed."""
    first, n, cols, dims, vdims, c = _program(C, BLOCK_N, BLOCK_D, BLOCK_DV)
    k, kn = _load_tile(K + n * S * D, MU + n * D, cols, dims, S, D, not SOFTMAX, False)
    v_ok = (cols[:, None] < S) & (vdims[None, :] < DV)
    v = tl.load(V + n * S * DV + cols[:, None] * DV + vdims[None, :], mask=v_ok, other=0.0)
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    dk_carry = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv_carry = tl.zeros([BLOCK_N, BLOCK_DV], tl.float32)
    g_sum = tl.zeros([BLOCK_N], tl.float32)
    dc = tl.zeros([BLOCK_N], tl.float32)
    lo, hi = _query_range(first, BLOCK_N, L, CAUSAL, REACH, BLOCK_M)
    for start in range(lo, hi, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        qT, qn = _load_tile(Q + n * L * D, MU + n * D, rows, dims, L, D, not SOFTMAX, True)
        q, _ = _load_tile(Q + n * L * D, MU + n * D, rows, dims, L, D, not SOFTMAX, False)
        do_offsets = n * L * DV + rows[:, None] * DV + vdims[None, :]
        do = tl.load(DO + do_offsets, mask=(rows[:, None] < L) & (vdims[None, :] < DV), other=0.0)
        doT = tl.load(DO + n * L * DV + rows[None, :] * DV + vdims[:, None],
                      mask=(rows[None, :] < L) & (vdims[:, None] < DV), other=0.0)
        lse = tl.load(LSE + n * L + rows, mask=rows < L, other=float("inf"))
        delta = tl.load(DELTA + n * L + rows, mask=rows < L, other=0.0)
        pT, gT, r2T = _gradient_tile(_dot(k, qT, IEEE), _dot(v, doT, IEEE), qn[None, :], kn[:, None],
                                     lse[None, :], delta[None, :], c, rows[None, :], cols[:, None], S, inv_w2,
                                     LOG_K, SLOPE, SOFTMAX, CAUSAL, REACH, POS_LOG_K, HAS_POS)
        dv, dv_carry = _accumulate(dv, dv_carry, _dot(pT.to(do.dtype), do, IEEE), IEEE)
        dk, dk_carry = _accumulate(dk, dk_carry, _dot(gT.to(q.dtype), q, IEEE), IEEE)
        g_sum += tl.sum(gT, 1)
        if NEED_DC:
            dc += tl.sum(gT * r2T, 1)
    if SOFTMAX:
        dk = c * dk
    else:
        dk = 2.0 * c * (k.to(tl.float32) * g_sum[:, None] - dk)
    k_ok = (cols[:, None] < S) & (dims[None, :] < D)
    tl.store(DK + n * S * D + cols[:, None] * D + dims[None, :], dk.to(DK.dtype.element_ty), mask=k_ok)
    tl.store(DVAL + n * S * DV + cols[:, None] * DV + vdims[None, :], dv.to(DVAL.dtype.element_ty), mask=v_ok)
    if NEED_DC:
        tl.store(DC + n * N_BLOCKS + tl.program_id(0), tl.sum(dc, 0))


@triton.jit
def _backward_q(Q, K, V, MU, C, DO, LSE, DELTA, DQ, L, S, D, DV, inv_w2,
                LOG_K: tl.constexpr, SLOPE: tl.constexpr, SOFTMAX: tl.constexpr, CAUSAL: tl.constexpr,
                REACH: tl.constexpr, POS_LOG_K: tl.constexpr, HAS_POS: tl.constexpr, IEEE: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr):
    start, n, rows, dims, vdims, c = _program(C, BLOCK_M, BLOCK_D, BLOCK_DV)
    q, qn = _load_tile(Q + n * L * D, MU + n * D, rows, dims, L, D, not SOFTMAX, False)
    do = tl.load(DO + n * L * DV + rows[:, None] * DV + vdims[None, :],
                 mask=(rows[:, None] < L) & (vdims[None, :] < DV), other=0.0)
    lse = tl.load(LSE + n * L + rows, mask=rows < L, other=float("inf"))
    delta = tl.load(DELTA + n * L + rows, mask=rows < L, other=0.0)
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    dq_carry = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    g_sum = tl.zeros([BLOCK_M], tl.float32)
    lo, hi = _key_range(start, BLOCK_M, S, CAUSAL, REACH, BLOCK_N)
    for first in range(lo, hi, BLOCK_N):
        cols = first + tl.arange(0, BLOCK_N)
        kT, kn = _load_tile(K + n * S * D, MU + n * D, cols, dims, S, D, not SOFTMAX, True)
        k, _ = _load_tile(K + n * S * D, MU + n * D, cols, dims, S, D, not SOFTMAX, False)
        vT = tl.load(V + n * S * DV + cols[None, :] * DV + vdims[:, None],
                     mask=(cols[None, :] < S) & (vdims[:, None] < DV), other=0.0)
        _, g, _ = _gradient_tile(_dot(q, kT, IEEE), _dot(do, vT, IEEE), qn[:, None], kn[None, :], lse[:, None],
                                 delta[:, None], c, rows[:, None], cols[None, :], S, inv_w2, LOG_K, SLOPE,
                                 SOFTMAX, CAUSAL, REACH, POS_LOG_K, HAS_POS)
        dq, dq_carry = _accumulate(dq, dq_carry, _dot(g.to(k.dtype), k, IEEE), IEEE)
        g_sum += tl.sum(g, 1)
    if SOFTMAX:
        dq = c * dq
    else:
        dq = 2.0 * c * (q.to(tl.float32) * g_sum[:, None] - dq)
    tl.store(DQ + n * L * D + rows[:, None] * D + dims[None, :], dq.to(DQ.dtype.element_ty),
             mask=(rows[:, None] < L) & (dims[None, :] < D))


#: ``(BLOCK_M, BLOCK_N, num_warps, num_stages)`` of the forward kernel and ``(queries per step,
#: keys per program, num_warps, num_stages)`` of the backward ones (the dq kernel swaps the two
#: blocks), for half inputs and for IEEE float32 (whose products run on the FMA units)
FORWARD_BLOCKS = {"half": (128, 64, 8, 3), "ieee": (64, 32, 4, 3)}
BACKWARD_BLOCKS = {"half": (32, 128, 4, 2), "ieee": (16, 64, 4, 2)}


def _pow2(n):
    return max(16, triton.next_power_of_2(n))


def _launch_options(kernel, q, k, v, causal, window):
    """The constexpr arguments shared by the three kernels, and the runtime ``1 / w^2``."""
    softmax = kernel == "softmax"
    log_k, slope = (None, None) if softmax else _profile(kernel)
    reach, pos_log_k, inv_w2 = -1, None, 0.0
    if window is not None:
        name, width = window
        reach = math.floor(width)
        if not PROFILES[name].flat:
            pos_log_k, inv_w2 = _profile(name)[0], 1.0 / (width * width)
    constants = dict(LOG_K=log_k, SOFTMAX=softmax, CAUSAL=bool(causal), REACH=reach, POS_LOG_K=pos_log_k,
                     HAS_POS=pos_log_k is not None, IEEE=q.dtype == torch.float32)
    return constants, slope, inv_w2


class _TritonAttention(torch.autograd.Function):
    """``(q, k, v, c)`` -> ``out``: ``q (N, L, D)``, ``k (N, S, D)``, ``v (N, S, DV)`` contiguous,
    ``c (N,)`` float32; ``spec = (kernel, causal, window)``."""

    @staticmethod
    def forward(ctx, q, k, v, c, spec):
        kernel, causal, window = spec
        N, L, D = q.shape
        S, DV = k.shape[1], v.shape[-1]
        constants, slope, inv_w2 = _launch_options(kernel, q, k, v, causal, window)
        # the keys' mean, accumulated in float32 without a float32 copy of k (profiles only)
        mu = q.new_zeros((N, D), dtype=torch.float32) if kernel == "softmax" else torch.mean(k, 1, dtype=torch.float32)
        out = torch.empty((N, L, DV), dtype=q.dtype, device=q.device)
        lse = torch.empty((N, L), dtype=torch.float32, device=q.device)
        block_m, block_n, warps, stages = FORWARD_BLOCKS["ieee" if constants["IEEE"] else "half"]
        _forward[(triton.cdiv(L, block_m), N)](
            q, k, v, mu, c, out, lse, L, S, D, DV, inv_w2, **constants, BLOCK_M=block_m, BLOCK_N=block_n,
            BLOCK_D=_pow2(D), BLOCK_DV=_pow2(DV), num_warps=warps, num_stages=stages)
        ctx.save_for_backward(q, k, v, c, mu, out, lse)
        ctx.launch = constants, slope, inv_w2
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, c, mu, out, lse = ctx.saved_tensors
        constants, slope, inv_w2 = ctx.launch
        N, L, D = q.shape
        S, DV = k.shape[1], v.shape[-1]
        d_out = d_out.contiguous()
        delta = torch.empty_like(lse)
        _delta[(triton.cdiv(L, 64), N)](out, d_out, delta, L, DV, BLOCK_M=64, BLOCK_DV=_pow2(DV))
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        need_dc = ctx.needs_input_grad[3]
        small, large, warps, stages = BACKWARD_BLOCKS["ieee" if constants["IEEE"] else "half"]
        blocks = triton.cdiv(S, large)
        dc = torch.zeros((N, blocks), dtype=torch.float32, device=q.device)
        sizes = dict(BLOCK_D=_pow2(D), BLOCK_DV=_pow2(DV), num_warps=warps, num_stages=stages)
        _backward_kv[(blocks, N)](q, k, v, mu, c, d_out, lse, delta, dk, dv, dc, L, S, D, DV, inv_w2, blocks,
                                  **constants, SLOPE=slope, NEED_DC=need_dc, BLOCK_M=small, BLOCK_N=large, **sizes)
        _backward_q[(triton.cdiv(L, large), N)](q, k, v, mu, c, d_out, lse, delta, dq, L, S, D, DV, inv_w2,
                                                **constants, SLOPE=slope, BLOCK_M=large, BLOCK_N=small, **sizes)
        return dq, dk, dv, (dc.sum(1) if need_dc else None), None


def triton_kernel_attention(kernel, q, k, v, c, causal=False, window=None):
    """``kernel_attention`` through the Triton kernel; ``q, k, v`` share their batch shape and dtype
    (float32, bfloat16 or float16), ``c`` broadcasts to ``batch + (1, 1)`` (``1/h`` for the softmax,
    ``1/h^2`` for the profiles), ``window`` is ``None`` or ``(profile, width)``."""
    batch, L = q.shape[:-2], q.shape[-2]
    flat = lambda t: t.reshape((-1,) + t.shape[-2:]).contiguous()  # noqa: E731
    c = torch.as_tensor(c, dtype=torch.float32, device=q.device).expand(batch + (1, 1)).reshape(-1)
    out = _TritonAttention.apply(flat(q), flat(k), flat(v), c.contiguous(), (kernel, bool(causal), window))
    return out.reshape(batch + (L, v.shape[-1]))
