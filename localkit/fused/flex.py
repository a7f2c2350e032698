"""Every localization kernel through PyTorch's FlexAttention (the CUDA path; compiled once, cached).

Used by :func:`localkit.nn.kernel_attention` (attention heads) and by the engine's array-API path
(:mod:`localkit.engine.backends.array_api`: local means of torch CUDA tensors), so that a local mean on a
GPU is one fused kernel that never forms the ``n x m`` weights.

FlexAttention fuses ``softmax(score_mod(q . k)) V`` with a block mask that skips whole tiles. Each
kernel's log-weight is made a *dot product* of augmented features, so that the only tensors it
reads are its inputs (gradients, a learned bandwidth included, flow through them):

* softmax: ``q' = c q``, ``k' = k``;
* Gaussian: ``q' = [c q, -c/2]``, ``k' = [k, |k|^2]``: ``q' . k' = c (q . k - |k|^2 / 2)``;
* profiles: ``q' = [-2c q, c |q|^2, c]``, ``k' = [k, 1, |k|^2]``: ``q' . k' = c |q - k|^2 = u^2``,
  and ``score_mod`` applies ``log k(u^2)``.

For the Gaussian and the profiles ``q`` and ``k`` are first centred on the keys' mean, which
changes no weight (distances are translation-invariant; the Gaussian's score moves by a per-row
constant) and keeps ``|q|^2``,
``|k|^2`` small against ``2 q . k``. Causal and window kernels are the block mask (built from the
blocks' bounds, never from ``L x S`` pairs); a compact window's profile is added by ``score_mod``. Rows whose kernel vanishes
everywhere give zero (from the returned log-sum-exp).

The engine also asks for the log-sum-exp itself (``log sum_j k_ij``, the local sums' log weight
sum), for the exclusion of ``j = i`` (leave-one-out, in ``score_mod``) and for log sample
weights added to every score.
"""
from __future__ import annotations

import math

import torch

from ..kernels.profiles import PROFILES, inner_product
from ..exceptions import FallbackWarning, warn

#: Distinct ``score_mod``s (ten profiles, windows) and shapes each compile once; torch's default
#: recompile limit (8 per function) would silently send the rest to the eager, dense fallback
RECOMPILE_LIMIT = 256
_COMPILED = {}
_FAILED = set()
_BLOCK_MASKS = {}
#: FlexAttention's default tile of queries and of keys (its block masks' granularity)
BLOCK_SIZE = 128


def fused_or_none(key, call):
    """``call()`` (a FlexAttention call, or our Triton kernel's when ``key[0] == "triton"``), or
    ``None`` when it failed to compile for ``key`` (now, with one warning, or earlier in the
    process): the caller then takes its streamed path, which is exact. Compilation belongs to torch
    and Triton, whose failures vary with their versions (torch 2.11 on an H200 failed on
    key-padding masks); a wrong answer is never the price."""
    if torch.compiler.is_compiling():  # inside the caller's torch.compile: no Python-level fallback
        return call()
    if key in _FAILED:
        return None
    try:
        return call()
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as exc:  # inductor's and Triton's compile errors have no common base class
        _FAILED.add(key)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        fused = "The Triton attention kernel" if key[0] == "triton" else "FlexAttention"
        warn(FallbackWarning(f"{fused} failed to compile for {key} ({type(exc).__name__}: {first}); the streamed "
                             "path is used instead (exact, slower)"))
        return None


def _lse_request():
    """FlexAttention's keyword for the log-sum-exp: ``return_aux=AuxRequest(lse=True)`` where torch
    has it (2.9 on; ``return_lse`` warns there, and its warning-once state recompiles the kernel)."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest
    except ImportError:
        return {"return_lse": True}
    return {"return_aux": AuxRequest(lse=True)}


_LSE_REQUEST = _lse_request()


def flex_available(q):
    """FlexAttention fuses on CUDA when Triton can compile it; elsewhere (and as the always-correct
    eager fallback) the streamed path is the fused one."""
    if not getattr(q, "is_cuda", False):  # CPU tensors, and arrays of other libraries (CuPy)
        return False
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    return has_triton()


def _flex(compiled):
    from torch.nn.attention.flex_attention import flex_attention

    if not compiled:
        return flex_attention
    if "flex" not in _COMPILED:  # compiled once per process; recompiles only for new shapes/kernels
        config = torch._dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):  # renamed in torch 2.6
            if hasattr(config, name):
                setattr(config, name, max(getattr(config, name), RECOMPILE_LIMIT))
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


def _features(kernel, q, k, c):
    """Augmented ``(q', k')`` with ``q' . k'`` the kernel's score, padded to a multiple of 16."""
    c = c.expand(q.shape[:-2] + (1, 1))
    if kernel == "softmax":  # not translation-invariant: no centring
        return _pad16(q * c), _pad16(k)
    centre = k.mean(-2, keepdim=True)
    q, k = q - centre, k - centre
    if inner_product(kernel):
        qf = torch.cat([q * c, (-0.5 * c).expand(q.shape[:-1] + (1,))], -1)
        kf = torch.cat([k, (k * k).sum(-1, keepdim=True)], -1)
    else:
        qf = torch.cat([-2 * c * q, c * (q * q).sum(-1, keepdim=True), c.expand(q.shape[:-1] + (1,))], -1)
        kf = torch.cat([k, torch.ones_like(k[..., :1]), (k * k).sum(-1, keepdim=True)], -1)
    return _pad16(qf), _pad16(kf)


def _pad16(t):
    return torch.nn.functional.pad(t, (0, -t.shape[-1] % 16))


def _block_mask(L, S, causal, window, device):
    """FlexAttention's block mask of a causal and/or window kernel, built from the blocks' bounds.

    The kernels admit the offsets ``i - j`` of an interval (causal: ``>= 0``; a window of reach
    ``r``: ``|i - j| <= r``). A block of queries ``[q0, q1)`` and keys ``[k0, k1)`` spans the offsets
    ``[q0 - k1 + 1, q1 - k0 - 1]``: it is skipped when that range misses the interval, taken whole
    (no ``mask_mod`` calls) when it lies inside and the block is not cut by the end of the queries
    or keys, masked element-wise otherwise. Memory: one entry per pair of blocks (torch's
    ``create_block_mask`` first evaluates ``mask_mod`` on all ``L x S`` pairs)."""
    from torch.nn.attention.flex_attention import BlockMask

    key = (L, S, causal, window, str(device))
    if key in _BLOCK_MASKS:
        return _BLOCK_MASKS[key]
    reach = None if window is None else math.floor(window[1])
    low = 0 if causal else -reach  # called for causal and window kernels only
    high = math.inf if reach is None else reach

    def mask_mod(b, h, qi, ki):
        ok = qi - ki >= low
        if reach is not None:
            ok = ok & (qi - ki <= reach)
        return ok

    block = BLOCK_SIZE
    q0 = torch.arange(0, L, block, device=device)[:, None]
    k0 = torch.arange(0, S, block, device=device)[None, :]
    first, last = q0 - torch.clamp(k0 + block, max=S) + 1, torch.clamp(q0 + block, max=L) - k0 - 1
    # a block cut by the end of the queries or keys is never full (as torch builds them)
    whole = (q0 + block <= L) & (k0 + block <= S)
    full = (first >= low) & (last <= high) & whole
    partial = (last >= low) & (first <= high) & ~full

    def listed(blocks):  # the kept key blocks of each query block, first, in ascending order
        order = torch.argsort((~blocks).to(torch.int8), dim=-1, stable=True)
        return blocks.sum(-1, dtype=torch.int32)[None, None], order.to(torch.int32)[None, None]

    _BLOCK_MASKS[key] = BlockMask.from_kv_blocks(*listed(partial), *listed(full), BLOCK_SIZE=block,
                                                 mask_mod=mask_mod, seq_lengths=(L, S))
    return _BLOCK_MASKS[key]


def flex_kernel_attention(kernel, q, k, v, c, causal, window, compiled=True, *, self_offset=None,
                          log_weight=None, return_lse=False):
    """``kernel_attention`` through FlexAttention; ``q, k, v`` share their batch shape, ``c`` is
    ``batch + (1, 1)``. Key-padding masks are not taken: torch 2.11's Triton failed to compile a
    captured ``(B, S)`` key mask in ``mask_mod`` (H200), so such calls stream instead.

    ``self_offset`` (an int) removes the pairs ``i = j + self_offset`` (leave-one-out, when the keys
    are the queries' ``self_offset``-th onwards); ``log_weight`` (shape ``(S,)``) is added to every
    score (log sample weights); ``return_lse`` also returns ``log sum_j exp(score_ij)`` in float32
    (``-inf`` for rows without any admissible key) with the rows' scores as the kernel's log
    weights: for the Gaussian, ``-c |q - k|^2 / 2`` exactly (the row constant added back)."""
    batch, L, S, dtype = q.shape[:-2], q.shape[-2], k.shape[-2], q.dtype
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    q, k = q.to(compute), k.to(compute)
    qf, kf = _features(kernel, q, k, c.to(compute))
    flat = lambda t: t.reshape(-1, 1, *t.shape[-2:]).to(dtype)  # (N, 1, length, dim)
    profile = None if inner_product(kernel) else PROFILES[kernel].log_k_for(torch)
    position = None if window is None or PROFILES[window[0]].flat else window
    position_profile = None if position is None else PROFILES[position[0]].log_k_for(torch)

    # a tensor, not a constant of the closure: a new offset must not recompile the kernel
    offset = None if self_offset is None else torch.tensor(self_offset, device=q.device)

    def score_mod(score, b, h, qi, ki):
        if profile is not None:
            score = profile(torch.clamp(score, min=0.0))  # rounding can make u^2 slightly negative
        if position is not None:
            score = score + position_profile(((qi - ki).to(torch.float32) / position[1]) ** 2)
        if log_weight is not None:
            score = score + log_weight[ki]
        if offset is not None:
            score = torch.where(qi == ki + offset, -math.inf, score)
        return score

    plain = profile is None and position is None and log_weight is None and offset is None
    mod = None if plain else score_mod
    block_mask = None if not causal and window is None else _block_mask(L, S, causal, window, q.device)
    width = v.shape[-1]
    values = torch.nn.functional.pad(v, (0, max(0, 16 - width)))  # Triton's tiles: 16 columns at least
    # float32 stays IEEE float32 in both products (TF32's 10-bit mantissa would cost ~1e-3 in the
    # log weights, far beyond the engine's float32 budget)
    options = {"FLOAT32_PRECISION": "'ieee'"} if compute == torch.float32 and q.is_cuda else None
    out, lse = _flex(compiled)(flat(qf), flat(kf), flat(values), score_mod=mod, block_mask=block_mask, scale=1.0,
                               kernel_options=options, **_LSE_REQUEST)
    if not isinstance(lse, torch.Tensor):  # torch >= 2.9: an AuxOutput
        lse = lse.lse
    out = out[..., :width].masked_fill(~torch.isfinite(lse).unsqueeze(-1), 0.0).reshape(batch + (L, width))
    if not return_lse:
        return out
    lse = lse.reshape(batch + (L,))
    if kernel != "softmax" and PROFILES[kernel].log_linear:  # the score is -c |q - k|^2 / 2 + c |q|^2 / 2
        centred = q - k.mean(-2, keepdim=True)
        lse = lse - 0.5 * c.reshape(batch + (1,)) * (centred * centred).sum(-1)
    return out, lse
