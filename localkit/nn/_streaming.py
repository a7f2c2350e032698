"""Attention kernels streamed over key blocks: O(L x block) memory, forward and backward.

The algorithm is the engine's, with its update rule (:meth:`localkit.engine.OnlineLogSumExp.step`):
for each block of queries we walk over blocks of keys keeping the running maximum ``m`` of the
log-weights and the sums rescaled by ``exp(m_old - m_new)``, so no ``(L, S)`` tensor is formed
and a tiny bandwidth gives the nearest key's value instead of ``0 / 0``. Kernels in position are
block sparsity: ``causal`` and ``window`` bound the key range of each query block, and a mask
skips the key blocks where it admits nothing, so a window of width ``w`` costs about
``L (w + block)`` kernel evaluations.

The backward pass is flash attention's: the forward pass keeps only the output and the row
log-sum-exp ``lse``; each block's weights ``P = exp(logits - lse)`` are recomputed and

    dV += P^T dO,   dlogits = P * (dO V^T - rowsum(dO * O)),

and ``dlogits`` is sent back through that block's log-kernel by autograd, so every kernel (and a
learned bandwidth) gets its gradient from the one formula that defines its forward pass.
Blocks are computed in float32 (float64 kept) whatever the input precision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from ..engine import OnlineLogSumExp
from ..kernels.profiles import inner_product
from ._profiles import LOG_PROFILES, log_profile

#: elements of one block of log-weights (4 MiB in float32): bounds the memory of a call (the
#: profiles keep ~10 block-sized temporaries: 1 << 22 grew a Laplacian call at L=16384 by 265 MiB)
BLOCK_BUDGET = 1 << 20
#: key block width: 256 columns keep the products BLAS-sized
KEY_BLOCK = 256
#: query block width when a window bounds the key range of each query block (window 64 at
#: L=16384, one thread: 64 -> 0.16 s, 128 -> 0.21 s, 256 -> 0.23 s; full SDPA 1.18 s)
POSITION_QUERY_BLOCK = 64


def compute_dtype(dtype):
    """float64 stays float64; float32, bfloat16 and float16 are computed in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def block_scores(kernel, q, k, c, twice_differentiable=False):
    """Log-kernel of a block, ``(..., Lb, Sb)``, with the scale ``c`` (``1/h`` or ``1/h^2``).

    softmax: ``c <q, k>``; the Gaussian (the inner-product form,
    :attr:`~localkit.kernels.profiles.Profile.log_linear`): ``c (<q, k> - |k|^2 / 2)`` (the row
    constant ``-c |q|^2 / 2`` cancels in the normalisation); other profiles: ``log k(c |q - k|^2)``,
    with distances taken from differences (not ``|q|^2 - 2 <q, k> + |k|^2``, which loses all
    accuracy near zero distance).
    ``twice_differentiable``: the profiles' ``|q - k|^2`` summed from a ``(..., Lb, Sb, d)`` tensor
    of differences instead of ``cdist``, whose backward has no derivative (for gradients of
    gradients).
    """
    if kernel == "softmax":
        return (q @ k.transpose(-2, -1)) * c
    if inner_product(kernel):
        return (q @ k.transpose(-2, -1) - 0.5 * (k * k).sum(-1).unsqueeze(-2)) * c
    if twice_differentiable:
        return log_profile(kernel)((q.unsqueeze(-2) - k.unsqueeze(-3)).square().sum(-1) * c)
    dist = torch.cdist(q, k, compute_mode="donot_use_mm_for_euclid_dist")
    return log_profile(kernel)(dist * dist * c)


def _slice_mask(mask, i0, i1, j0, j1):
    rows = slice(i0, i1) if mask.shape[-2] > 1 else slice(None)
    cols = slice(j0, j1) if mask.shape[-1] > 1 else slice(None)
    return mask[..., rows, cols]


@dataclass
class Plan:
    """Which key blocks each query block visits, and the kernels in position.

    ``mask``: None, bool (True takes part) or float (added to the log-weights), broadcasting to
    ``(..., L, S)``; ``window``: None or ``(profile, width)`` of ``|i - j|``; ``causal``: ``j <= i``;
    ``shrink``: logits beyond the float range arrive as ``logits / 4^shrink`` (see :func:`grow`);
    ``kth``: None or, per query ``(..., L)``, the threshold of a kNN kernel on :meth:`closeness`
    (see :func:`knn_threshold`).
    """

    kernel: str
    L: int
    S: int
    causal: bool = False
    window: tuple | None = None
    mask: torch.Tensor | None = None
    q_block: int = 0
    k_block: int = KEY_BLOCK
    shrink: int = 0
    kth: torch.Tensor | None = None

    def __post_init__(self):
        self._table = None
        if self.mask is not None and not torch.compiler.is_compiling():
            # which (query block, key block) pairs some batch element admits: masked-out blocks
            # are skipped (the table is one bool per block pair; not read inside torch.compile,
            # where every block in the causal and window range is visited and masked)
            admits = self.mask if self.mask.dtype == torch.bool else self.mask > -math.inf
            admits = admits.reshape(-1, *admits.shape[-2:]).any(0)
            rows, cols = admits.shape
            r, c = (self.q_block if rows > 1 else 1), (self.k_block if cols > 1 else 1)
            admits = torch.nn.functional.pad(admits, (0, -cols % c, 0, -rows % r))
            self._table = admits.unflatten(1, (-1, c)).unflatten(0, (-1, r)).any(3).any(1).tolist()

    def _visits(self, i0, j0):
        if self._table is None:
            return True
        row = self._table[i0 // self.q_block if len(self._table) > 1 else 0]
        return row[j0 // self.k_block if len(row) > 1 else 0]

    def key_range(self, i0, i1):
        """Keys ``[lo, hi)`` that the position kernels admit for queries ``[i0, i1)``."""
        lo, hi = 0, self.S
        if self.causal:
            hi = min(hi, i1)
        if self.window is not None:
            reach = math.floor(self.window[1])  # |i - j| <= width at most
            lo, hi = max(lo, i0 - reach), min(hi, i1 + reach)
        return lo, hi

    def rows(self):
        """``(i0, i1, [(j0, j1), ...])`` for every query block."""
        for i0 in range(0, self.L, self.q_block):
            i1 = min(i0 + self.q_block, self.L)
            lo, hi = self.key_range(i0, i1)
            # with a mask, key blocks on its table's grid, cut to [lo, hi)
            grid = range(lo - lo % self.k_block if self._table else lo, hi, self.k_block)
            yield i0, i1, [(max(j0, lo), min(j0 + self.k_block, hi)) for j0 in grid if self._visits(i0, j0)]

    def logits(self, q, k, c, i0, i1, j0, j1):
        """Log-weights of queries ``[i0, i1)`` against keys ``[j0, j1)``, position kernels included
        (divided by ``4^shrink``: the scores of ``2^-shrink q`` and ``2^-shrink k``), and the kNN
        kernel's zeros where :meth:`closeness` is below ``kth``."""
        s = self._position(block_scores(self.kernel, *self._shrunk(q, k), c), i0, i1, j0, j1)
        if self.kth is not None:
            near = s if inner_product(self.kernel) else self.closeness(q, k, c, i0, i1, j0, j1)
            s = s.masked_fill(near.detach() < self.kth[..., i0:i1, None], -math.inf)
        return s

    def closeness(self, q, k, c, i0, i1, j0, j1):
        """What a kNN kernel ranks, ``-inf`` where the position kernels and the mask exclude a key:
        the log-weights for the inner-product kernels (softmax, Gaussian), ``-|q - k|`` for the other
        profiles (as :func:`localkit.nn.functional.attention_weights` ranks them)."""
        if inner_product(self.kernel):
            return self._position(block_scores(self.kernel, *self._shrunk(q, k), c), i0, i1, j0, j1)
        dist = torch.cdist(q, k, compute_mode="donot_use_mm_for_euclid_dist")
        return (-dist).masked_fill(torch.isneginf(self._position(torch.zeros_like(dist), i0, i1, j0, j1)), -math.inf)

    def _shrunk(self, q, k):
        return (q * 2.0 ** -self.shrink, k * 2.0 ** -self.shrink) if self.shrink else (q, k)

    def _position(self, s, i0, i1, j0, j1):
        """``s`` with the position kernels and the mask of queries ``[i0, i1)``, keys ``[j0, j1)``."""
        if self.causal or self.window is not None:
            offset = (torch.arange(i0, i1, device=s.device)[:, None]
                      - torch.arange(j0, j1, device=s.device)[None, :])
            if self.causal and j1 - 1 > i0:
                s = s.masked_fill(offset < 0, -math.inf)
            if self.window is not None:
                name, width = self.window
                s = s + grow(LOG_PROFILES[name]((offset.to(s.dtype) / width) ** 2), -self.shrink)
        if self.mask is not None:
            m = _slice_mask(self.mask, i0, i1, j0, j1)
            s = s.masked_fill(~m, -math.inf) if m.dtype == torch.bool else s + grow(m.to(s.dtype), -self.shrink)
        return s


def make_plan(kernel, q, k, causal, window, mask, state_width, shrink=0, top_k=None):
    """A :class:`Plan` whose blocks of ``(batch, q_block, k_block)`` fit :data:`BLOCK_BUDGET`.

    ``state_width``: floats kept per query row (``d_v`` for the local mean, ``d (d + d_v)`` for
    the local linear model; ``top_k + k_block`` more for :func:`knn_threshold`), which also
    bounds the query block.
    """
    L, S = q.shape[-2], k.shape[-2]
    batch = max(1, math.prod(torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])))
    k_block = min(KEY_BLOCK, S)
    state_width = state_width if top_k is None else max(state_width, top_k + k_block)
    q_block = max(16, BLOCK_BUDGET // (batch * max(k_block, state_width)))
    if window is not None:
        q_block = min(q_block, POSITION_QUERY_BLOCK)
    return Plan(kernel, L, S, bool(causal), window, mask, min(q_block, L), k_block, shrink)


def grow(x, shrink):
    """``x * 4^shrink`` as two products by ``2^shrink`` (``4^shrink`` alone may leave the float range).

    Logits beyond the float range are computed as ``logits / 4^shrink`` (the engine's idea,
    :mod:`localkit.engine.stream`) and only their differences from the row maximum, which are
    ``<= 0``, are grown back before ``exp``: the weights are exact, those far below the maximum
    go to ``exp(-inf) = 0``, and no ``inf - inf`` arises.
    """
    return x * 2.0 ** shrink * 2.0 ** shrink if shrink else x


def knn_threshold(plan, q, k, c, top_k):
    """A kNN kernel streamed: per query the ``top_k``-th largest :meth:`Plan.closeness` over its
    admissible keys (``-inf`` if it has fewer), ``(..., L)``, from a running top-k over key blocks
    (memory ``O(L (top_k + block))``). With it as ``plan.kth``, keys below it get weight zero
    and ties are kept, as in the dense ranking."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    kth = q.new_full(batch + (plan.L,), -math.inf)
    with torch.no_grad():
        for i0, i1, keys in plan.rows():
            best = q.new_full(batch + (i1 - i0, 0), -math.inf)
            for j0, j1 in keys:
                best = torch.cat([best, plan.closeness(q[..., i0:i1, :], k[..., j0:j1, :], c, i0, i1, j0, j1)], -1)
                if best.shape[-1] > top_k:
                    best = best.topk(top_k, dim=-1).values
            if best.shape[-1] == top_k:
                kth[..., i0:i1] = best.amin(-1)
    return kth


def online_step(m, logits, shrink=0):
    """One step of the engine's online log-sum-exp (:meth:`localkit.engine.OnlineLogSumExp.step`):
    ``(m_new, alpha, p)``.

    ``alpha = exp(m - s)`` rescales what was summed so far; ``p = exp(logits - s)``, with the
    shift ``s = m_new`` (0 where not finite) and differences grown by ``4^shrink = 2^(2 shrink)``
    (see :func:`grow`). The shift is taken from detached logits: the result does not depend on
    it, so neither does its gradient.
    """
    m_new, shift, alpha = OnlineLogSumExp.step(m, logits.detach().amax(-1), 2 * shrink, torch)
    return m_new, alpha, torch.exp(grow(logits - shift.unsqueeze(-1), shrink))


def _forward(plan, q, k, v, c):
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = q.new_zeros(batch + (plan.L, v.shape[-1]))
    lse = q.new_full(batch + (plan.L,), -math.inf)
    for i0, i1, keys in plan.rows():
        qb = q[..., i0:i1, :]
        m = q.new_full(batch + (i1 - i0,), -math.inf)
        acc, total = q.new_zeros(batch + (i1 - i0, v.shape[-1])), q.new_zeros(batch + (i1 - i0,))
        for j0, j1 in keys:
            m, alpha, p = online_step(m, plan.logits(qb, k[..., j0:j1, :], c, i0, i1, j0, j1), plan.shrink)
            acc = acc * alpha.unsqueeze(-1) + p @ v[..., j0:j1, :]
            total = total * alpha + p.sum(-1)
        # a row whose kernel vanishes everywhere: zero output and lse = -inf (no 0/0)
        out[..., i0:i1, :] = acc / torch.where(total > 0, total, 1.0).unsqueeze(-1)
        lse[..., i0:i1] = torch.where(total > 0, m + grow(total.log(), -plan.shrink), -math.inf)
    return out, lse


class StreamedAttention(torch.autograd.Function):
    """``out = softmax(logits) V`` over key blocks; ``c`` (the kernel's scale) may need a gradient.

    ``q, k, v`` share their batch shape and ``c`` is ``batch + (1, 1)``, all in the compute dtype.
    """

    @staticmethod
    def forward(ctx, q, k, v, c, plan):
        out, lse = _forward(plan, q, k, v, c)
        ctx.save_for_backward(q, k, v, c, out, lse)
        ctx.plan = plan
        ctx.set_materialize_grads(False)
        return out

    @staticmethod
    def backward(ctx, dout):
        if dout is None:  # no gradient reaches the output (kernel_attention's create_graph=True path)
            return None, None, None, None, None
        q, k, v, c, out, lse = ctx.saved_tensors
        plan, need = ctx.plan, ctx.needs_input_grad
        dout = dout.to(out.dtype)
        delta = (dout * out).sum(-1)
        lse = torch.where(torch.isfinite(lse), lse, math.inf)  # empty rows: P = 0
        dq, dk, dv, dc = (torch.zeros_like(t) for t in (q, k, v, c))
        for i0, i1, keys in plan.rows():
            q_i = q[..., i0:i1, :]
            do_i, lse_i, delta_i = dout[..., i0:i1, :], lse[..., i0:i1, None], delta[..., i0:i1, None]
            for j0, j1 in keys:
                # the block's log-kernel and its vector-Jacobian product (torch.func: traceable by
                # torch.compile, where torch.autograd.grad is not)
                logits, vjp = torch.func.vjp(lambda q_, k_, c_: plan.logits(q_, k_, c_, i0, i1, j0, j1),
                                             q_i, k[..., j0:j1, :], c)
                p = torch.exp(grow(logits - lse_i, plan.shrink))
                if need[2]:
                    dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_i
                dlogits = p * (do_i @ v[..., j0:j1, :].transpose(-2, -1) - delta_i)
                g_q, g_k, g_c = vjp(grow(dlogits, plan.shrink))
                dq[..., i0:i1, :] += g_q
                dk[..., j0:j1, :] += g_k
                dc += g_c
        return (dq if need[0] else None, dk if need[1] else None, dv if need[2] else None,
                dc if need[3] else None, None)



def _local_linear_block(plan, i0, i1, keys, ridge, q, k, v, c):
    """Intercepts ``a_i`` of the local linear model for queries ``[i0, i1)``, moments streamed."""
    ck, cv = k[..., :1, :], v[..., :1, :]  # centre: see local_linear_attention
    d, dv = k.shape[-1], v.shape[-1]
    m = q.new_full(q.shape[:-1], -math.inf)
    total = q.new_zeros(q.shape[:-1])
    sums = [q.new_zeros(q.shape[:-1] + (n,)) for n in (d, dv, d * d, dv * d)]
    for j0, j1 in keys:
        kc, vc = k[..., j0:j1, :] - ck, v[..., j0:j1, :] - cv
        m, alpha, p = online_step(m, plan.logits(q, k[..., j0:j1, :], c, i0, i1, j0, j1), plan.shrink)
        total = total * alpha + p.sum(-1)
        blocks = (kc, vc, (kc.unsqueeze(-1) * kc.unsqueeze(-2)).flatten(-2),
                  (vc.unsqueeze(-1) * kc.unsqueeze(-2)).flatten(-2))
        sums = [s * alpha.unsqueeze(-1) + p @ b for s, b in zip(sums, blocks)]
    empty = (total == 0).unsqueeze(-1)
    kbar, vbar, s_kk, s_vk = (s / torch.where(empty, 1.0, total.unsqueeze(-1)) for s in sums)
    c_kk = s_kk.unflatten(-1, (d, d)) - kbar.unsqueeze(-1) * kbar.unsqueeze(-2)
    c_vk = s_vk.unflatten(-1, (dv, d)) - vbar.unsqueeze(-1) * kbar.unsqueeze(-2)
    eye = torch.eye(d, dtype=q.dtype, device=q.device)
    x = torch.linalg.solve(c_kk + ridge * eye, (kbar - (q - ck)).unsqueeze(-1))
    return (cv + vbar - (c_vk @ x).squeeze(-1)).masked_fill(empty, 0.0)


def streamed_local_linear(plan, q, k, v, c, ridge):
    """Local linear attention over key blocks: per query the moments ``sum w [1, k, v, k k^T, v k^T]``.

    Memory ``O(L d (d + d_v))``; with gradients each query block is checkpointed, so backward
    holds one query block's graph at a time.
    """
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, c))
    parts = []
    for i0, i1, keys in plan.rows():
        args = (plan, i0, i1, keys, ridge, q[..., i0:i1, :], k, v, c)
        parts.append(checkpoint(_local_linear_block, *args, use_reentrant=False) if grad
                     else _local_linear_block(*args))
    return torch.cat(parts, -2)


def banded_attention(kernel, q, k, v, c, window, causal, keep):
    """Windowed attention without a loop over blocks: each block of ``b`` queries sees the band
    of ``b + 2 r`` keys around it (``r``: the window's reach), taken as a strided view
    (``unfold``), so one batched product covers every block and a window costs ``L (b + 2 r)``.

    ``keep``: None or a key mask (bool True = takes part, or float log-weights) of shape
    ``(..., 1, S)``. Chunks of blocks bound the memory; with gradients each chunk is
    checkpointed. Rows without an admissible key give zero.
    """
    L, S = q.shape[-2], k.shape[-2]
    name, width = window
    reach = math.floor(width)
    b = min(POSITION_QUERY_BLOCK, L)
    n_blocks = -(-L // b)
    band = b + 2 * reach
    pad = lambda t, value=0.0: torch.nn.functional.pad(t, (0, 0, reach, n_blocks * b + reach - S), value=value)
    if torch.compiler.is_compiling():
        # a gather (a copy): inductor's gradient through a matmul on the overlapping unfold view is
        # wrong (torch 2.13, CPU: dk off by O(1), a smaller repro corrupted the heap)
        index = (torch.arange(n_blocks, device=q.device)[:, None] * b + torch.arange(band, device=q.device)).flatten()
        k_band, v_band = (pad(t).index_select(-2, index).unflatten(-2, (n_blocks, band)) for t in (k, v))
    else:
        k_band, v_band = (pad(t).unfold(-2, band, b).transpose(-2, -1) for t in (k, v))  # (..., n, band, d)
    q_blocks = torch.nn.functional.pad(q, (0, 0, 0, n_blocks * b - L)).unflatten(-2, (n_blocks, b))
    # key j = n b - r + t of block n against query i = n b + a: i - j = a - t + r in every block
    offset = torch.arange(b, device=q.device)[:, None] - torch.arange(band, device=q.device)[None, :] + reach
    log_pos = LOG_PROFILES[name]((offset.to(q.dtype) / width) ** 2)
    if causal:
        log_pos = log_pos.masked_fill(offset < 0, -math.inf)
    key = torch.arange(n_blocks, device=q.device)[:, None] * b - reach + torch.arange(band, device=q.device)
    log_key = torch.zeros(key.shape, dtype=q.dtype, device=q.device).masked_fill((key < 0) | (key >= S), -math.inf)
    if keep is not None:
        keep = keep if keep.dtype != torch.bool else torch.zeros(keep.shape, dtype=q.dtype,
                                                                 device=q.device).masked_fill(~keep, -math.inf)
        keep = torch.nn.functional.pad(keep.squeeze(-2).to(q.dtype), (reach, n_blocks * b + reach - S),
                                       value=-math.inf)
        log_key = log_key + keep.unfold(-1, band, b)  # (..., n, band)
    log_key = log_key.unsqueeze(-2)  # (..., n, 1, band)
    c = c.unsqueeze(-1)
    per_block = 4 * max(1, q_blocks[..., 0, 0, 0].numel()) * b * band
    step = max(1, BLOCK_BUDGET // per_block)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, c))
    parts = []
    for n0 in range(0, n_blocks, step):
        sl = slice(n0, n0 + step)
        args = (kernel, q_blocks[..., sl, :, :], k_band[..., sl, :, :], v_band[..., sl, :, :], c, log_pos,
                log_key[..., sl, :, :])
        parts.append(checkpoint(_band_chunk, *args, use_reentrant=False) if grad else _band_chunk(*args))
    return torch.cat(parts, -3).flatten(-3, -2)[..., :L, :]


def _band_chunk(kernel, q, k, v, c, log_pos, log_key):
    logits = block_scores(kernel, q, k, c) + log_pos + log_key
    top = logits.detach().amax(-1, keepdim=True)
    p = torch.exp(logits - torch.where(torch.isfinite(top), top, 0.0))
    total = p.sum(-1, keepdim=True)
    return (p @ v) / torch.where(total > 0, total, 1.0)
