"""Every attention kernel through PyTorch's FlexAttention (the CUDA path; compiled once, cached).

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
``|k|^2`` small against ``2 q . k``. Causal, window and padding kernels are the block mask
(``mask_mod``); a compact window's profile is added by ``score_mod``. Rows whose kernel vanishes
everywhere give zero (from the returned log-sum-exp).
"""
from __future__ import annotations

import math

import torch

from ._profiles import LOG_PROFILES

_COMPILED = {}
_BLOCK_MASKS = {}


def flex_available(q):
    """FlexAttention fuses on CUDA when Triton can compile it; elsewhere (and as the always-correct
    eager fallback) the streamed path is the fused one."""
    if not q.is_cuda:
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
    if "flex" not in _COMPILED:  # compiled once per process; recompiles only for new shapes
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]


def _features(kernel, q, k, c):
    """Augmented ``(q', k')`` with ``q' . k'`` the kernel's score, padded to a multiple of 16."""
    c = c.expand(q.shape[:-2] + (1, 1))
    if kernel == "softmax":  # not translation-invariant: no centring
        return _pad16(q * c), _pad16(k)
    centre = k.mean(-2, keepdim=True)
    q, k = q - centre, k - centre
    if kernel == "gaussian":
        qf = torch.cat([q * c, (-0.5 * c).expand(q.shape[:-1] + (1,))], -1)
        kf = torch.cat([k, (k * k).sum(-1, keepdim=True)], -1)
    else:
        qf = torch.cat([-2 * c * q, c * (q * q).sum(-1, keepdim=True), c.expand(q.shape[:-1] + (1,))], -1)
        kf = torch.cat([k, torch.ones_like(k[..., :1]), (k * k).sum(-1, keepdim=True)], -1)
    return _pad16(qf), _pad16(kf)


def _pad16(t):
    return torch.nn.functional.pad(t, (0, -t.shape[-1] % 16))


def _block_mask(L, S, causal, window, keep, device):
    from torch.nn.attention.flex_attention import create_block_mask

    key = (L, S, causal, window, str(device))
    if keep is None and key in _BLOCK_MASKS:
        return _BLOCK_MASKS[key]
    reach = None if window is None else math.floor(window[1])

    def mask_mod(b, h, qi, ki):
        ok = ki >= 0
        if causal:
            ok = ok & (qi >= ki)
        if reach is not None:
            ok = ok & ((qi - ki).abs() <= reach)
        if keep is not None:
            ok = ok & keep[b, ki]
        return ok

    mask = create_block_mask(mask_mod, B=None if keep is None else keep.shape[0], H=None, Q_LEN=L, KV_LEN=S,
                             device=device)
    if keep is None:
        _BLOCK_MASKS[key] = mask
    return mask


def flex_kernel_attention(kernel, q, k, v, c, causal, window, keep, compiled=True):
    """``kernel_attention`` through FlexAttention; ``q, k, v`` share their batch shape, ``c`` is
    ``batch + (1, 1)``, ``keep`` None or a bool key mask ``(..., 1, S)`` (True takes part)."""
    batch, L, S = q.shape[:-2], q.shape[-2], k.shape[-2]
    qf, kf = _features(kernel, q.float(), k.float(), c.float())
    flat = lambda t: t.reshape(-1, 1, *t.shape[-2:]).to(q.dtype)  # (N, 1, length, dim)
    if keep is not None:
        keep = keep.expand(batch + (1, S)).reshape(-1, S)
    profile = None if kernel in ("softmax", "gaussian") else LOG_PROFILES[kernel]
    position = None if window is None or window[0] == "uniform" else window

    def score_mod(score, b, h, qi, ki):
        if profile is not None:
            score = profile(torch.clamp(score, min=0.0))  # rounding can make u^2 slightly negative
        if position is not None:
            score = score + LOG_PROFILES[position[0]](((qi - ki).to(torch.float32) / position[1]) ** 2)
        return score

    mod = None if profile is None and position is None else score_mod
    block_mask = None
    if causal or window is not None or keep is not None:
        block_mask = _block_mask(L, S, causal, window, keep, q.device)
    out, lse = _flex(compiled)(flat(qf), flat(kf), flat(v), score_mod=mod, block_mask=block_mask, scale=1.0,
                               return_lse=True)
    out = out.masked_fill(~torch.isfinite(lse).unsqueeze(-1), 0.0)
    return out.reshape(batch + (L, v.shape[-1]))
