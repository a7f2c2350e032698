"""Attention as a local mean over tokens, with the localization kernel as a choice.

For queries ``q_i``, keys ``k_j`` and values ``v_j`` (tensors ``(..., L, d)``, ``(..., S, d)``,
``(..., S, d_v)``), attention is the local mean

    out_i = sum_j w_ij v_j,   w_ij = K(q_i, k_j) / sum_l K(q_i, k_l),

and the kernel ``K`` is what changes:

* ``"softmax"``: ``exp(<q, k> / h)`` with ``h = sqrt(d)`` unless a bandwidth is given;
* ``"gaussian"``: ``exp(-|q - k|^2 / (2 h^2))``; ``|q|^2`` cancels in the normalisation, so this is
  the softmax of ``<q, k> / h^2`` plus the bias ``-|k|^2 / (2 h^2)``;
* any profile of :mod:`localkit.kernels.profiles` (``"laplacian"``: ``exp(-|q - k| / h)``,
  compact ones such as ``"epanechnikov"``...) of ``u = |q - k| / h``, with ``h = d^(1/4)`` by
  default (so that the Gaussian's scores are scaled by ``1/sqrt(d)`` like the softmax's).

Kernels multiply with kernels in position: ``causal`` (``j <= i``), ``window`` (a compact kernel of
``|i - j|``), a ``mask`` (bool: True takes part, as in ``scaled_dot_product_attention``; float: added
to the log-weights), and ``top_k`` (a kNN kernel: only the ``k`` closest keys of each row).
Kernels that are a softmax of a score plus a bias (softmax, Gaussian) run through PyTorch's fused
``scaled_dot_product_attention`` where that needs no ``(L, S)`` mask; on the CPU every other
profile runs as one compiled pass over tiles of queries and keys (:mod:`localkit.fused.cpu_attention`,
float32 and half inputs, ``causal`` and key masks); windows take a banded path; the rest (float64,
masks by query, ``top_k``) streams over key blocks with the online log-sum-exp (memory
``O(L x block)``, forward and backward, position kernels as block sparsity). A row whose kernel is zero
everywhere (all masked, or outside a compact support) gives a zero output, never NaN.

:func:`local_linear_attention` replaces the local mean (the constant local model) with a local
linear model: the localization trick inside attention.
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F

from ..engine import Plan
from ..kernels import Kernel
from ..kernels.profiles import PROFILES, UserProfile, get_profile
from ..fused.flex import flex_available, flex_kernel_attention, fused_or_none
from ..kernels.profiles import inner_product
from ._profiles import LOG_PROFILES
from ._streaming import (StreamedAttention, banded_attention, block_scores, compute_dtype, grow, knn_threshold,
                         make_plan, streamed_local_linear)


def eager():
    """Whether data-dependent checks and shortcuts run: not inside ``torch.compile``, where reading
    a tensor's values into Python would break the graph (there the path taken is the general one)."""
    return not torch.compiler.is_compiling()


def resolve_kernel(kernel):
    """The canonical form of ``kernel``: ``"softmax"``, a profile name (aliases accepted), or the
    user profile (:class:`~localkit.kernels.profiles.UserProfile`) of ``Kernel(log_k, support=...)``."""
    if isinstance(kernel, UserProfile):
        return kernel
    if isinstance(kernel, Kernel):
        if kernel.composite or kernel.n_neighbors is not None or kernel.metric != "euclidean":
            raise ValueError(f"kernel={kernel!r}: attention takes a profile of |q - k| (no features, n_neighbors or "
                             "metric); position kernels are causal=, window= and mask=")
        if not (isinstance(kernel.bandwidth, numbers.Real) and kernel.bandwidth == 1.0):
            raise ValueError(f"kernel={kernel!r}: attention takes the bandwidth as its own argument (bandwidth=, or "
                             "a module's learned one); build the kernel without one, e.g. Kernel(log_k, support=1.0)")
        return kernel.name if kernel.is_softmax else kernel.profile if kernel.profile.is_user else kernel.profile.name
    if kernel == "softmax":
        return kernel
    return get_profile(kernel).name  # raises naming the allowed kernels


def default_bandwidth(kernel, d):
    """``sqrt(d)`` (the softmax temperature) or ``d^(1/4)`` for distance kernels."""
    return math.sqrt(d) if resolve_kernel(kernel) == "softmax" else d ** 0.25


def check_bandwidth(bandwidth, name="bandwidth"):
    """None, a finite positive number, or a tensor of them (e.g. one per head, ``(H, 1, 1)``)."""
    if bandwidth is None:
        return None
    if isinstance(bandwidth, torch.Tensor):
        if not torch.is_floating_point(bandwidth):
            raise TypeError(f"{name} must be a float tensor, got dtype {bandwidth.dtype}")
        if eager() and not bool(torch.all(torch.isfinite(bandwidth) & (bandwidth > 0))):
            raise ValueError(f"{name} must be finite and > 0 everywhere")
        return bandwidth
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, numbers.Real):
        raise TypeError(f"{name} must be None, a positive number or a tensor, got {bandwidth!r}")
    if not math.isfinite(bandwidth) or bandwidth <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {bandwidth!r}")
    return float(bandwidth)


def _check_qkv(q, k, v):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() < 2:
            raise ValueError(f"{name} must have shape (..., length, dim), got {tuple(t.shape)}")
        if not torch.is_floating_point(t):
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last dimension, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if q.shape[-1] == 0:
        raise ValueError(f"q and k need at least one feature (dim -1), got q {tuple(q.shape)}")
    for name, t in (("q", q), ("k", k)):  # a local mean at no query, or over no key, is undefined
        if t.shape[-2] == 0:
            raise ValueError(f"{name} needs at least one {'query' if name == 'q' else 'key'} (dim -2), "
                             f"got {name} {tuple(t.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same length (dim -2), got k {tuple(k.shape)} and v {tuple(v.shape)}")
    try:
        torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not broadcast"
        ) from None


def _check_window(window):
    """``(profile, width)``: an int ``w`` is the uniform window ``|i - j| <= w``."""
    if window is None:
        return None
    if isinstance(window, numbers.Integral) and not isinstance(window, bool):
        if window < 0:
            raise ValueError(f"window must be >= 0, got {window}")
        return "uniform", float(window) if window > 0 else 0.5  # width 0.5: the diagonal only
    if isinstance(window, tuple) and len(window) == 2:
        name, width = window
        name = get_profile(name).name
        if not PROFILES[name].compact:
            raise ValueError(f"window must use a compact profile, got {name!r}")
        if isinstance(width, bool) or not isinstance(width, numbers.Real) or not width > 0:
            raise ValueError(f"window width must be > 0, got {width!r}")
        return name, float(width)
    raise TypeError(f"window must be None, an int, or (profile, width), got {window!r}")


def _check_top_k(top_k):
    if top_k is None:
        return None
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"top_k must be None or an integer >= 1, got {top_k!r}")
    return int(top_k)


def _position_terms(q, k, mask, causal, window):
    """The kernels in position and the user mask, as (allowed bool or None, bias float or None).

    Hard zeros (causal, masks, outside a compact window) go to ``allowed``; finite log-weights
    to ``bias``; both broadcast to ``(..., L, S)``.
    """
    L, S, device = q.shape[-2], k.shape[-2], q.device
    allowed = bias = None
    if causal or window is not None:
        offset = torch.arange(L, device=device)[:, None] - torch.arange(S, device=device)[None, :]
        if causal:
            allowed = offset >= 0
        if window is not None:
            name, width = window
            log_k = LOG_PROFILES[name]((offset.to(compute_dtype(q.dtype)) / width) ** 2)
            inside = torch.isfinite(log_k)
            allowed = inside if allowed is None else allowed & inside
            if not PROFILES[name].flat:
                bias = torch.where(inside, log_k, 0.0)
    if mask is not None:
        if mask.dtype == torch.bool:
            hard = mask
        else:
            hard = mask > -math.inf
            soft = torch.where(hard, mask, 0.0).to(compute_dtype(q.dtype))
            bias = soft if bias is None else bias + soft
        allowed = hard if allowed is None else allowed & hard
    return allowed, bias


def _check_mask(mask, q, S):
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dim() < 2:
        raise ValueError(f"mask must broadcast to (..., L, S), got shape {tuple(mask.shape)}")
    try:
        torch.broadcast_shapes(mask.shape, q.shape[:-1] + (S,))
    except RuntimeError:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to (..., L={q.shape[-2]}, S={S})"
        ) from None
    if mask.dtype != torch.bool:
        if not torch.is_floating_point(mask):
            raise TypeError(f"mask must be a bool or float tensor, got dtype {mask.dtype}")
        if eager() and bool(torch.any(torch.isnan(mask) | (mask == math.inf))):
            raise ValueError("a float mask holds log-weights: NaN and +inf are not allowed")
    return mask


def _check_pair_bias(pair_bias, q, k):
    """``pair_bias`` checked: None, or ``(a, b)``, float tensors of shapes ``(..., L, r)`` and
    ``(..., S, r)`` broadcasting to the batch of ``q`` and ``k``, finite."""
    if pair_bias is None:
        return None
    if not (isinstance(pair_bias, (tuple, list)) and len(pair_bias) == 2
            and all(isinstance(t, torch.Tensor) for t in pair_bias)):
        raise TypeError(f"pair_bias must be None or a pair (a, b) of tensors, got {type(pair_bias).__name__}")
    a, b = pair_bias
    if not (torch.is_floating_point(a) and torch.is_floating_point(b)):
        raise TypeError(f"pair_bias's tensors must be floating point, got {a.dtype} and {b.dtype}")
    L, S = q.shape[-2], k.shape[-2]
    if a.dim() < 2 or b.dim() < 2 or a.shape[-2] != L or b.shape[-2] != S or a.shape[-1] != b.shape[-1]:
        raise ValueError(f"pair_bias must be (a, b) of shapes (..., L={L}, r) and (..., S={S}, r), got "
                         f"{tuple(a.shape)} and {tuple(b.shape)}")
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    try:
        fits = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2], batch) == batch
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"pair_bias's batch shapes {tuple(a.shape[:-2])} and {tuple(b.shape[:-2])} must "
                         f"broadcast to the batch shape of q and k, {tuple(batch)}")
    if eager() and not bool(torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("pair_bias holds NaN or inf: its log-weights <a_i, b_j> must be finite")
    return a, b


def _with_pair_bias(mask, pair_bias):
    """``mask`` with the pair bias ``<a_i, b_j>`` added, as an ``(..., L, S)`` float mask (a bool
    mask's False as ``-inf``)."""
    a, b = pair_bias
    bias = a @ b.transpose(-1, -2)
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return bias.masked_fill(~mask, -math.inf)
    return bias + mask


def _scale(kernel, h, q, k):
    """The kernel's scale ``c`` (``1/h`` for the softmax, ``1/h^2`` otherwise) and whether it was capped.

    A bandwidth so small that ``c * score`` would overflow (1e-20 in float32) is capped at
    ``c * max|score| = finfo.max * 1e-8``: the weights are then already one-hot on the best key
    to the input's precision, which is the limit ``h -> 0`` (the nearest key's value), and the
    online log-sum-exp stays finite. Compact profiles are only kept finite (their limit is an
    empty support, i.e. a zero output).
    """
    power = 1 if kernel == "softmax" else 2
    c = h.to(compute_dtype(q.dtype)) ** -power if isinstance(h, torch.Tensor) else h ** -power
    finfo = torch.finfo(compute_dtype(q.dtype))
    if kernel != "softmax" and (kernel if isinstance(kernel, UserProfile) else PROFILES[kernel]).compact:
        return (c.clamp_max(finfo.max) if isinstance(c, torch.Tensor) else min(c, finfo.max)), False
    if not isinstance(c, torch.Tensor) and c <= 1e3:  # the usual case: nothing to check
        return c, False
    with torch.no_grad():
        qn, kn = (t.detach().abs().amax().to(compute_dtype(q.dtype)) for t in (q, k))
        if kernel == "softmax":
            bound = qn * kn * q.shape[-1]
        elif inner_product(kernel):  # the key bias adds |k|^2 / 2
            bound = qn * kn * q.shape[-1] + 0.5 * kn * kn * k.shape[-1]
        else:
            bound = (qn + kn) ** 2 * q.shape[-1]
        bound = bound + finfo.tiny
        cap = finfo.max * 1e-8 / bound
    if isinstance(c, torch.Tensor):
        return torch.minimum(c, cap), False
    return min(c, float(cap)), c > float(cap)


def _prepare(q, k, v, kernel, bandwidth, mask, window, top_k):
    _check_qkv(q, k, v)
    kernel = resolve_kernel(kernel)
    bandwidth = check_bandwidth(bandwidth)
    if isinstance(bandwidth, torch.Tensor):
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        target = batch + (1, 1)
        try:
            fits = torch.broadcast_shapes(bandwidth.shape, target) == target
        except RuntimeError:
            fits = False
        if not fits:
            raise ValueError(f"a bandwidth tensor must broadcast to {tuple(target)} (batch dimensions, then 1, 1), "
                             f"got shape {tuple(bandwidth.shape)}")
    h = default_bandwidth(kernel, q.shape[-1]) if bandwidth is None else bandwidth
    c, capped = _scale(kernel, h, q, k)
    return kernel, c, capped, _check_mask(mask, q, k.shape[-2]), _check_window(window), _check_top_k(top_k)


def _logit_shrink(kernel, q, k, c):
    """``e >= 0`` such that the logits of ``2^-e q`` and ``2^-e k`` (those of ``q, k`` over ``4^e``)
    and every partial sum on the way stay below ``2^(maxexp - 4)`` of the compute dtype.

    Only the inner-product kernels (:func:`~localkit.kernels.profiles.inner_product`: softmax, Gaussian)
    take products ``<q, k>`` and ``|k|^2``, which overflow for
    ``|q|, |k| ~ 1e20`` in float32 (the profiles take differences). Their bound,
    ``d |k| max(|q|, |k|) max(c, 1)`` with ``|.|`` the largest entry, is taken in ``log2`` so that
    it cannot overflow itself; ``e > 0`` sends the call to the streamed path (:func:`grow`). Calls
    on the CPU flash kernel skip this pass (two reads of ``q`` and ``k``, 3-7 ms at B=1 H=8
    L=4096 d=64): that kernel reports an overflow itself, by a non-finite log-sum-exp.
    Entries below ``2^e`` times the smallest subnormal are lost by the halving: their share of a
    logit is then below the rounding of the largest ones. Checked on the CPU only, and not inside
    ``torch.compile`` (see :func:`eager`): on other devices reading the bound would stall the
    stream once per call, so there such logits still give NaN.
    """
    if not inner_product(kernel) or q.dtype == torch.float16 or q.device.type != "cpu" or not eager():
        return 0  # float16 products fit float32
    with torch.no_grad():  # aminmax: one pass, no |t| copy (0.8 ms for 2M floats; abs().amax() 1.9 ms)
        q_lo, q_hi, k_lo, k_hi = torch.stack([*torch.aminmax(q.detach()), *torch.aminmax(k.detach())]).tolist()
        qn, kn = max(-q_lo, q_hi), max(-k_lo, k_hi)
        cn = float(c.detach().amax()) if isinstance(c, torch.Tensor) else c
    if not (0 < qn < math.inf and 0 < kn < math.inf):  # zeros cannot overflow; inf and NaN stay
        return 0
    # max(c, 1) before the log: a bandwidth of 1e20 or more gives c = h^-2 = 0 in float32
    top = (math.log2(q.shape[-1]) + math.log2(kn) + math.log2(qn if kernel == "softmax" else max(qn, kn))
           + 1 + math.log2(max(cn, 1.0)))
    return max(0, math.ceil((top - math.log2(torch.finfo(compute_dtype(q.dtype)).max) + 4) / 2))


def _dense_path(mask, dropout_p):
    """Paths that need every weight: dropout draws every weight, and a float mask that requires
    grad wants its own (L, S) gradient. (A kNN kernel streams: :func:`_streamed_plan`.)"""
    return dropout_p > 0 or (mask is not None and mask.requires_grad)


def _streamed_plan(a, q, k, c, state_width):
    """The streamed path's :class:`~localkit.nn._streaming.Plan` of the :class:`_Call` ``a`` (``q, k, c``
    in the compute dtype), with a kNN kernel's per-query threshold from a first streamed pass when
    ``top_k`` is given."""
    plan = make_plan(a.kernel, q, k, a.causal, a.window, a.mask, state_width, a.shrink, a.top_k)
    if a.top_k is not None:
        plan.kth = knn_threshold(plan, q, k, c, a.top_k)
    return plan


def _weights(q, k, kernel, c, allowed, bias, top_k, shrink=0, twice_differentiable=False):
    """Normalised weights ``(..., L, S)`` and the rows whose kernel is zero everywhere
    (``shrink``: logits computed over ``4^shrink``, see :func:`_logit_shrink`;
    ``twice_differentiable``: see :func:`~localkit.nn._streaming.block_scores`)."""
    qc, kc = (t.to(compute_dtype(q.dtype)) * 2.0 ** -shrink for t in (q, k))
    logits = block_scores(kernel, qc, kc, c, twice_differentiable)
    if bias is not None:
        logits = logits + grow(bias, -shrink)
    if allowed is not None:
        logits = logits.masked_fill(~allowed, -math.inf)
    if top_k is not None and top_k < logits.shape[-1]:  # the top_k closest admissible keys
        closeness = (logits if inner_product(kernel)
                     else -torch.cdist(qc, kc, compute_mode="donot_use_mm_for_euclid_dist"))
        if allowed is not None:
            closeness = closeness.masked_fill(~allowed, -math.inf)
        kth = closeness.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(closeness < kth, -math.inf)
    top = logits.detach().amax(dim=-1, keepdim=True)
    empty = torch.isneginf(top)
    if shrink:  # differences from the row maximum grown back (<= 0: nothing overflows)
        logits = grow(logits - top.masked_fill(empty, 0.0), shrink)
    weights = torch.softmax(logits.masked_fill(empty, 0.0), dim=-1)
    return weights.masked_fill(empty, 0.0).to(q.dtype), empty


def attention_weights(q, k, kernel="softmax", bandwidth=None, mask=None, causal=False, window=None, top_k=None):
    """The normalised localization weights ``w_ij = K(q_i, k_j) / sum_l K(q_i, k_l)``, ``(..., L, S)``.

    Rows whose kernel vanishes everywhere are zero. Meant for local models built on the
    weights and for figures: this is the one function that forms the ``(L, S)`` matrix.

    Parameters
    ----------
    q, k : tensors of shape (..., L, d), (..., S, d)
        Queries and keys.
    kernel, bandwidth, mask, causal, window, top_k
        As in :func:`kernel_attention` (``kernel`` one of "softmax", "gaussian", "laplacian",
        "cauchy", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform",
        "cosine"; default "softmax").

    Returns
    -------
    tensor of shape (..., L, S)

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import attention_weights
    >>> q = k = torch.tensor([[0.0], [1.0], [3.0]])
    >>> attention_weights(q, k, "epanechnikov", bandwidth=2.0)[0]
    tensor([0.5714, 0.4286, 0.0000])
    """
    kernel, c, _, mask, window, top_k = _prepare(q, k, k, kernel, bandwidth, mask, window, top_k)
    allowed, bias = _position_terms(q, k, mask, bool(causal), window)
    return _weights(q, k, kernel, c, allowed, bias, top_k, _logit_shrink(kernel, q, k, c))[0]


def kernel_attention(q, k, v, kernel="softmax", bandwidth=None, mask=None, causal=False, window=None,
                     top_k=None, dropout_p=0.0, pair_bias=None):
    """Attention as a local mean: ``out_i = sum_j K(q_i, k_j) v_j / sum_l K(q_i, k_l)``.

    Parameters
    ----------
    q, k, v : tensors of shape (..., L, d), (..., S, d), (..., S, d_v)
        float64, float32, bfloat16 or float16 (the last two accumulate in float32).
    kernel : {"softmax", "gaussian", "laplacian", "cauchy", "epanechnikov", "tricube", "biweight", \
            "triweight", "triangular", "uniform", "cosine"} or Kernel, default="softmax"
        ``"softmax"`` (``exp(<q, k> / h)``) or a profile ``k(u)`` of ``u = |q - k| / h`` (the
        profiles of :class:`localkit.Kernel`: gaussian ``exp(-u^2 / 2)``, laplacian
        ``exp(-u)``, cauchy ``1 / (1 + u^2)``, and the compactly supported epanechnikov,
        tricube, biweight, triweight, triangular, uniform and cosine, zero for ``u > 1``).
        A :class:`localkit.Kernel` built from a callable, ``Kernel(log_k, support=...)``, is your
        own profile ``log_k(u2, xp)``, handed ``torch`` here (autograd differentiates it): it
        streams (FlexAttention and the Triton kernel need a compiled form); its bandwidth is
        this function's ``bandwidth``.
    bandwidth : float, tensor or None
        ``h``: default ``sqrt(d)`` for the softmax, ``d^(1/4)`` for the profiles. A tensor
        broadcasting to ``(..., 1, 1)`` gives, e.g., one (learnable) bandwidth per head. Any
        finite ``h > 0`` works: as ``h -> 0`` the Gaussian and Laplacian return the nearest key's
        value.
    mask : bool or float tensor broadcasting to (..., L, S), optional
        bool: True where ``k_j`` may take part (``scaled_dot_product_attention``'s convention);
        float: added to the log-weights (``-inf`` removes a pair).
    causal : bool, default=False
        Multiply by the causal kernel ``[j <= i]`` (top-left aligned, as in PyTorch).
    window : int or (profile, width), optional
        A compact kernel in position: an int ``w`` keeps ``|i - j| <= w``; ``("tricube", 16.0)``
        multiplies by ``k(|i - j| / 16)``.
    top_k : int, optional
        A kNN kernel: only the ``top_k`` closest admissible keys of each row take part (largest
        ``<q, k>`` for the softmax, smallest ``|q - k|`` for the profiles; ties are kept).
    dropout_p : float, default=0.0
        Dropout on the weights (training only; pass 0 at evaluation).
    pair_bias : (a, b) of tensors (..., L, r) and (..., S, r), optional
        A low-rank float mask: ``<a_i, b_j>`` is added to the log-weight of each pair (the weight
        multiplied by ``exp(<a_i, b_j>)``), differentiable in ``a`` and ``b``. With one-hot codes it
        is a product with a kernel on categories: ``a_i = -log r`` at query ``i``'s level, ``b_j``
        the one-hot of key ``j``'s and a constant column give ``r^[levels differ]`` (Li and
        Racine's). The compiled CPU pass adds it tile by tile (one more product of rank ``r``), so
        no ``(L, S)`` array is formed, and its gradient flows without forming the weights; every
        other path takes ``a @ b^T`` as a float mask.

    Returns
    -------
    tensor of shape (..., L, d_v), of the dtype of ``q``

    Notes
    -----
    Paths: one table chooses how a call runs, and :func:`explain_attention` prints
    it for a call (the path taken, and why each other one is not). In short: the kernels that
    are a softmax of inner products (softmax; the Gaussian, whose key bias ``-|k|^2 / 2h^2`` goes
    in as a ``(..., 1, S)`` mask) run through PyTorch's fused ``scaled_dot_product_attention`` or
    its CPU flash kernel when no ``(L, S)`` mask would have to be built; every other case runs,
    on CUDA when there is no mask, through our flash kernel in Triton for float32 or
    FlexAttention for the other dtypes and inside ``torch.compile`` (a kernel that fails to
    compile falls back, with one warning); on the CPU, in float32, bfloat16 and float16 without
    a window or a mask by query, through one compiled pass over tiles
    (:mod:`localkit.fused.cpu_attention`: BLAS products per tile, the profile's weights formed in
    place, flash-style backward; compact profiles skip key tiles beyond every query's support);
    and otherwise streams over key blocks (float64: the reference): memory ``O(L x block)`` in forward and backward, ``causal``,
    ``window`` and masks skipping whole key blocks. ``top_k`` streams too, in two passes: a
    running top-k of each query's closeness over key blocks (memory ``O(L (top_k + block))``),
    then its threshold as a kernel in position. Only ``dropout_p > 0`` (the weights' dropout mask
    would have to be drawn again, block by block, in the backward pass) and a float mask that
    requires grad (its gradient is ``(L, S)`` itself) form the ``(L, S)`` weights.
    On the CPU, softmax and Gaussian logits beyond the float range (``|q|, |k| ~ 1e20`` in
    float32) are streamed as ``logits / 4^e`` with their differences grown back before ``exp``:
    the weights are exact (one-hot on the best key where the spread is that large), never NaN.

    ``torch.compile(fullgraph=True)`` traces the fused, banded and streamed paths (``causal``,
    ``window``, bool and float padding masks, learned bandwidths), forward and backward, without
    graph breaks (tested on the CPU). Inside a compiled graph the checks that read tensor values
    are skipped: a bandwidth tensor's positivity and a float mask's NaN/+inf
    are not validated, logits beyond the float range give NaN, and a mask no longer skips key
    blocks (they are visited and masked: same result, more work on sparse masks). A scalar
    bandwidth whose scale ``1/h`` (softmax) or ``1/h^2`` exceeds ``1e3`` still reads the data to
    cap the scale: a graph break. ``top_k``, dropout and the CUDA paths are not covered by the
    compile tests.

    Gradients of gradients (``torch.autograd.grad(..., create_graph=True)``, then a second
    backward pass) are those of the same local mean with its ``(L, S)`` weights formed from
    differentiable operations (the fused and streamed paths have a first derivative only); with
    ``dropout_p > 0`` they are supported for the softmax and the Gaussian on the CPU only. Not
    inside ``torch.compile``.

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import kernel_attention
    >>> q = k = torch.tensor([[0.0], [1.0], [3.0]])
    >>> v = torch.tensor([[0.0], [1.0], [2.0]])
    >>> kernel_attention(q, k, v, "uniform", bandwidth=1.5).squeeze(-1)  # neighbours within 1.5
    tensor([0.5000, 0.5000, 2.0000])
    """
    call = _checked_call(q, k, v, kernel, bandwidth, mask, causal, window, top_k, dropout_p, pair_bias)
    kernel, c, mask, causal, window, top_k = call.kernel, call.c, call.mask, call.causal, call.window, call.top_k
    a, b = call.pair_bias or (None, None)
    out = _attention(call)
    if not (eager() and torch.is_grad_enabled()
            and any(isinstance(t, torch.Tensor) and t.requires_grad for t in (q, k, v, c, mask, a, b))):
        return out
    if dropout_p > 0 and inner_product(kernel) and q.device.type == "cpu":
        return out  # SDPA's dropout path on the CPU (its math kernel) is differentiable twice itself

    def reference(q, k, v, c, mask, a, b):
        """The same local mean from differentiable operations only, the weights formed."""
        mask = mask if a is None else _with_pair_bias(mask, (a, b))
        if dropout_p > 0:
            raise RuntimeError("kernel_attention: gradients of gradients (create_graph=True) with dropout_p > 0 are "
                               "supported only for kernel='softmax' or 'gaussian' on the CPU (the dropout draws of "
                               f"kernel={kernel!r} cannot be repeated); pass dropout_p=0")
        allowed, bias = _position_terms(q, k, mask, causal, window)
        weights, _ = _weights(q, k, kernel, c, allowed, bias, top_k, _logit_shrink(kernel, q, k, c),
                              twice_differentiable=True)
        return weights @ v

    c = c if isinstance(c, torch.Tensor) else torch.tensor(c, dtype=compute_dtype(q.dtype), device=q.device)
    return _TwiceDifferentiable.apply(reference, out, q, k, v, c, mask, a, b)


class _TwiceDifferentiable(torch.autograd.Function):
    """``out`` as it is, forward and in the usual backward pass (through the fast path that made
    it). Under ``create_graph=True`` (gradients of gradients: gradient penalties, meta-learning,
    Hessian-vector products) the gradients of ``inputs`` are instead those of
    ``reference(*inputs)``, the same function from differentiable operations only, so that they
    can be differentiated again: PyTorch's flash kernels, ``cdist`` and the streamed pass
    (:class:`~localkit.nn._streaming.StreamedAttention`) have a first derivative only. That
    backward pass forms the ``(L, S)`` weights (``(L, S, d)`` differences for distance kernels);
    the usual one pays a copy of the output.
    """

    @staticmethod
    def forward(ctx, reference, out, *inputs):
        ctx.reference = reference
        ctx.save_for_backward(*inputs)
        return out.clone()  # not a view: the caller may modify it in place

    @staticmethod
    def backward(ctx, dout):
        n = len(ctx.saved_tensors)
        if not torch.is_grad_enabled():  # the usual backward pass: through the fast path
            return (None, dout) + (None,) * n
        inputs, need = ctx.saved_tensors, ctx.needs_input_grad[2:]
        wanted = [t for t, needed in zip(inputs, need) if needed]
        grads = iter(torch.autograd.grad(ctx.reference(*inputs), wanted, dout, create_graph=True,
                                         allow_unused=True))
        return (None, None) + tuple(next(grads) if needed else None for needed in need)


class _Call:
    """One :func:`kernel_attention` call on checked arguments, with the facts its path is chosen
    on; ``shrink`` (:func:`_logit_shrink`, which reads ``q`` and ``k``) is computed only when a path
    asks for it, so that a call taken by the CPU flash kernel does not pay for it."""

    def __init__(self, q, k, v, kernel, c, capped, mask, causal, window, top_k, dropout_p, pair_bias=None):
        self.q, self.k, self.v, self.kernel, self.c, self.capped = q, k, v, kernel, c, capped
        self.mask, self.causal, self.window, self.top_k, self.dropout_p = mask, causal, window, top_k, dropout_p
        self.pair_bias = pair_bias
        self.dense = _dense_path(mask, dropout_p)
        self.inner = inner_product(kernel)
        self._shrink = None

    @property
    def shrink(self):  # not a cached_property: torch.compile cannot enter its lock
        if self._shrink is None:
            self._shrink = _logit_shrink(self.kernel, self.q, self.k, self.c)
        return self._shrink


#: Conditions of the paths, ``(condition(call), why not)``, shared by the rows of :data:`PATHS`.
_DENSE = (lambda a: a.dense, "no dropout and no float mask that requires grad: no weights to form")
_INNER = (lambda a: a.inner, "the kernel is not a softmax of inner products (softmax, Gaussian)")
_NOT_DENSE = (lambda a: not a.dense, "dropout or a float mask that requires grad: the weights are formed")
_NO_TOP_K = (lambda a: a.top_k is None, "top_k (a kNN kernel) streams")
_FITS = (lambda a: not a.shrink, "logits beyond the float range: streamed as logits / 4^e")
#: what SDPA takes without an (L, S) mask of ours
_SDPA = (
    _NOT_DENSE, _NO_TOP_K, _INNER,
    (lambda a: a.window is None, "a window would be an (L, S) mask"),
    (lambda a: not a.capped, "the bandwidth's scale was capped (a tiny bandwidth): streamed"),
    (lambda a: not (a.causal and a.mask is not None), "causal with a mask would be an (L, S) mask"),
    (lambda a: not (isinstance(a.c, torch.Tensor) and a.q.dtype == torch.float16),
     "float16 cannot hold q / h for a tiny per-head bandwidth: streamed in float32"),
)
_CPU_FLASH = (lambda a: a.mask is None and _cpu_flash_fits(a.q, a.k, a.v, 0.0),
              "needs CPU tensors with d_v = d and no mask")
#: what the fused CUDA kernels take
_CUDA = (_NOT_DENSE, _NO_TOP_K,
         (lambda a: a.mask is None, "masks stream: torch 2.11's Triton failed to compile a captured key mask (H200)"),
         (lambda a: flex_available(a.q), "needs CUDA tensors and Triton"),
         (lambda a: isinstance(a.kernel, str), "a user profile (a callable log_k) has no compiled form: streamed"),
         _FITS)
#: half inputs stay on FlexAttention until our kernel's half path is fixed: on an H200 it returned
#: wrong rows in bfloat16 and float16 (and an illegal memory access with BLOCK_M = 64), while its
#: float32 path matched the float64 reference in every CUDA test; inside torch.compile,
#: FlexAttention is traced
_TRITON = (lambda a: eager() and a.q.dtype == torch.float32,
           "our Triton kernel takes float32 outside torch.compile (its half path returned wrong rows on an H200)")


def _dense_sdpa(a):
    allowed, bias = _position_terms(a.q, a.k, a.mask, a.causal, a.window)
    return _sdpa(a.q, a.k, a.v, a.kernel, a.c, allowed, bias, a.dropout_p, False)


def _dense_weights(a):
    allowed, bias = _position_terms(a.q, a.k, a.mask, a.causal, a.window)
    weights, _ = _weights(a.q, a.k, a.kernel, a.c, allowed, bias, a.top_k, a.shrink)
    return F.dropout(weights, a.dropout_p) @ a.v if a.dropout_p > 0 else weights @ a.v


def _public_sdpa(a):
    allowed, bias = _position_terms(a.q, a.k, a.mask, False, None)
    return _sdpa(a.q, a.k, a.v, a.kernel, a.c, allowed, bias, 0.0, a.causal)


def _triton(a):
    from ..fused.triton_attention import triton_kernel_attention

    q, k, v = _broadcast(a.q, a.k, a.v)
    return fused_or_none(("triton", a.kernel, q.dtype, a.causal, a.window),
                         lambda: triton_kernel_attention(a.kernel, q, k, v, a.c, a.causal, a.window))


def _flex(a):
    q, k, v = _broadcast(a.q, a.k, a.v)
    c = _scale_tensor(a.c, compute_dtype(q.dtype), q.device, q.shape[:-2])
    return fused_or_none((a.kernel, q.dtype, a.causal, a.window is not None),
                         lambda: flex_kernel_attention(a.kernel, q, k, v, c, a.causal, a.window))


def _banded(a):
    q, k, v, c = _to_compute(a.q, a.k, a.v, a.c)
    return banded_attention(a.kernel, q, k, v, c, a.window, a.causal, a.mask).to(a.q.dtype)


def _compiled(a):
    from ..fused.cpu_attention import cpu_kernel_attention

    q, k, v, c = _to_compute(a.q, a.k, a.v, a.c)
    pair = None if a.pair_bias is None else tuple(t.to(q.dtype) for t in a.pair_bias)
    return cpu_kernel_attention(a.kernel, q, k, v, c, a.causal, _key_log_weights(a.mask, q.dtype), pair).to(a.q.dtype)


def _key_log_weights(mask, dtype):
    """A key mask ``(..., 1, S)`` as the compiled passes take it: None, or log-weights of ``dtype``
    (a bool mask's False as ``-inf``)."""
    if mask is not None and mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, -math.inf)
    return mask


def _compiled_fits(a):
    return a.q.device.type == "cpu" and a.q.dtype != torch.float64


def _compiled_profile(a):
    from ..fused.cpu_attention import ROUTED

    return a.kernel in ROUTED


def _streamed(a):
    q, k, v, c = _to_compute(a.q, a.k, a.v, a.c)
    plan = _streamed_plan(a, q, k, c, a.v.shape[-1])
    return StreamedAttention.apply(q, k, v, c, plan).to(a.q.dtype)


class _Path(NamedTuple):
    """A path of :func:`kernel_attention`: taken when every ``(condition(call), reason)`` of
    ``conditions`` holds (else the first that fails says why not); ``run(call)`` gives the output,
    or None where ``hands_over`` (a fused kernel that failed to compile, the CPU flash kernel's
    overflowed log-sum-exp): the call then goes to the next path that applies."""

    name: str
    what: str
    conditions: tuple
    run: Callable
    hands_over: bool = False


#: The compiled CPU pass's conditions: a call with a ``pair_bias`` that it refuses takes ``a @ b^T``
#: as a float mask on the other paths
_COMPILED = (_NOT_DENSE, _NO_TOP_K,
             (_compiled_fits, "needs CPU tensors in float32, bfloat16 or float16 (float64 streams: the reference)"),
             (_compiled_profile, "needs a built-in profile that is not a softmax of inner products (a profile given "
                                 "as a callable has no compiled form: it streams)"),
             (lambda a: a.window is None, "a window takes the banded path"),
             (lambda a: a.mask is None or a.mask.shape[-2] == 1, "the mask varies by query (the pass takes key masks)"))
#: The paths of :func:`kernel_attention` in the order tried; the streamed one takes every call.
PATHS = (
    _Path("dense SDPA", "the (L, S) weights through scaled_dot_product_attention (its dropout, a mask's gradient)",
          (_DENSE, _INNER, _NO_TOP_K, _FITS), _dense_sdpa),
    _Path("dense weights", "the (L, S) weights formed (dropout, a mask's gradient)", (_DENSE,), _dense_weights),
    _Path("CPU flash kernel", "PyTorch's CPU flash kernel with is_causal and the Gaussian's key bias as its mask",
          (*_SDPA, _CPU_FLASH), lambda a: _cpu_flash(a.q, a.k, a.v, a.kernel, a.c, a.causal), hands_over=True),
    _Path("SDPA", "scaled_dot_product_attention, the Gaussian's key bias as a (..., 1, S) mask or folded",
          (*_SDPA, (lambda a: not _CPU_FLASH[0](a), "the CPU flash kernel takes it"), _FITS), _public_sdpa),
    _Path("Triton", "our flash kernel in Triton (localkit.fused.triton_attention)", (*_CUDA, _TRITON), _triton,
          hands_over=True),
    _Path("FlexAttention", "FlexAttention (localkit.fused.flex), compiled once",
          (*_CUDA, (lambda a: not _TRITON[0](a), "our Triton kernel takes it")), _flex, hands_over=True),
    _Path("compiled CPU pass", "tiles of queries and keys in one compiled pass (localkit.fused.cpu_attention), "
          "forward and backward, a pair bias added tile by tile; compact profiles skip key tiles outside every "
          "query's support", _COMPILED, _compiled),
    _Path("banded", "each block of queries against the band of keys around it, one batched product",
          (_NOT_DENSE, _NO_TOP_K, (lambda a: a.window is not None, "no window"),
           (lambda a: a.mask is None or a.mask.shape[-2] == 1, "the mask varies by query (the band takes key masks)"),
           _FITS), _banded),
    _Path("streamed", "over key blocks with the online log-sum-exp (top_k: a first pass finds each row's threshold)",
          (), _streamed),
)


def _refusal(conditions, call):
    """The reason of the first condition that fails, or None."""
    return next((why for holds, why in conditions if not holds(call)), None)


def _checked_call(q, k, v, kernel, bandwidth, mask, causal, window, top_k, dropout_p, pair_bias=None):
    """The :class:`_Call` of :func:`kernel_attention`'s arguments, checked; a ``pair_bias`` that the
    compiled CPU pass does not take folded into ``mask``."""
    _check_dropout(dropout_p)
    kernel, c, capped, mask, window, top_k = _prepare(q, k, v, kernel, bandwidth, mask, window, top_k)
    pair_bias = _check_pair_bias(pair_bias, q, k)
    if top_k is not None and top_k >= k.shape[-2]:  # keeps every key
        top_k = None
    call = _Call(q, k, v, kernel, c, capped, mask, bool(causal), window, top_k, dropout_p, pair_bias)
    if pair_bias is not None and _refusal(_COMPILED, call) is not None:
        call = _Call(q, k, v, kernel, c, capped, _with_pair_bias(mask, pair_bias), bool(causal), window, top_k,
                     dropout_p)
    return call


def _attention(call):
    """:func:`kernel_attention` of a checked call: the first of :data:`PATHS` that applies and
    returns a result."""
    for path in PATHS:
        if _refusal(path.conditions, call) is None:
            out = path.run(call)
            if out is not None:
                return out
    raise AssertionError("the streamed path takes every call")  # pragma: no cover


class AttentionPlan(Plan):
    """The path a :func:`kernel_attention` call takes and, for every path in the order tried,
    what it is and why it was or was not taken (as torch's ``why_not_fast_path``); ``str(plan)``
    is a table. See :func:`explain_attention`.

    Parameters
    ----------
    path : str
        The path taken: "dense SDPA", "dense weights", "CPU flash kernel", "SDPA", "Triton",
        "FlexAttention", "compiled CPU pass", "banded" or "streamed".
    reasons : dict
        For every path, in the order tried, what it is or why it was not taken.
    """


def explain_attention(q, k, v, kernel="softmax", bandwidth=None, mask=None, causal=False, window=None, top_k=None,
                      dropout_p=0.0, pair_bias=None):
    """Which path :func:`kernel_attention` takes for these arguments, and why each other one is
    not taken: an :class:`AttentionPlan` (``.path``, ``.reasons``; ``str`` is a table).

    The dispatch reads the same table, so the explanation is the decision. Paths after the one
    taken that also apply are listed as the fallback of a path that can hand a call over (a
    fused kernel that fails to compile, the CPU flash kernel whose log-sum-exp overflows): those
    are known only by running the call.

    Parameters
    ----------
    q, k, v, kernel, bandwidth, mask, causal, window, top_k, dropout_p, pair_bias
        As in :func:`kernel_attention`; nothing is computed.

    Returns
    -------
    AttentionPlan

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import explain_attention
    >>> q = k = v = torch.randn(1, 2, 16, 8)
    >>> explain_attention(q, k, v, "laplacian").path
    'compiled CPU pass'
    >>> explain_attention(q.double(), k.double(), v.double(), "laplacian").path
    'streamed'
    >>> explain_attention(q, k, v, "gaussian", causal=True).path
    'CPU flash kernel'
    """
    call = _checked_call(q, k, v, kernel, bandwidth, mask, causal, window, top_k, dropout_p, pair_bias)
    taken, last, reasons = None, None, {}
    for path in PATHS:
        why = _refusal(path.conditions, call)
        if why is not None:
            reasons[path.name] = why
            continue
        if taken is None:
            taken, reasons[path.name] = path.name, path.what
        elif last is not None:
            reasons[path.name] = f"applies: takes the call if {last} hands it over"
        else:
            reasons[path.name] = f"applies, but {taken} takes the call first"
            continue
        last = path.name if path.hands_over else None
    return AttentionPlan(taken, reasons)


def _broadcast(q, k, v):
    """``q, k, v`` expanded to one batch shape (views)."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return (t.expand(batch + t.shape[-2:]) for t in (q, k, v))


def _scale_tensor(c, dtype, device, batch):
    """The scale ``c`` (a number or a tensor) as a ``batch + (1, 1)`` tensor of ``dtype``."""
    c = c.to(dtype) if isinstance(c, torch.Tensor) else torch.tensor(c, dtype=dtype, device=device)
    return c.expand(batch + (1, 1))


def _to_compute(q, k, v, c):
    """``q, k, v`` broadcast to one batch shape in the compute dtype, and ``c`` as ``batch + (1, 1)``."""
    dtype = compute_dtype(q.dtype)
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    q, k, v = (t.to(dtype).expand(batch + t.shape[-2:]) for t in (q, k, v))
    return q, k, v, _scale_tensor(c, dtype, q.device, batch)


def _check_dropout(dropout_p):
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, numbers.Real) or not 0 <= dropout_p < 1:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p!r}")


def _scaled(q, c):
    """``(q, scale)`` for a softmax kernel of scale ``c``: a per-head tensor is folded into ``q``."""
    return (q * c.to(q.dtype), 1.0) if isinstance(c, torch.Tensor) else (q, c)


def _cpu_flash(q, k, v, kernel, c, is_causal):
    """An inner-product kernel as one call of PyTorch's CPU flash kernel (the softmax's is what
    SDPA calls there), with the Gaussian's key bias ``-c |k|^2 / 2`` as its ``(..., 1, S)`` mask
    (:class:`_KeyBiasAttention`), which it takes together with ``is_causal`` (public SDPA does
    not: B=1, H=8, L=4096, d=64, one thread: 0.93x of causal SDPA, folded 0.82x). None when the
    logits overflowed, for the caller to stream instead: the log-sum-exp is not finite, or, where
    every logit of a row overflowed to ``-inf``, the kernel returns that row as 0 with a
    log-sum-exp of 0 (a row of ``lse == 0`` is then checked against :func:`_logit_shrink`)."""
    if kernel == "gaussian" and q.dtype != torch.float64 and eager() and _gaussian_backward_compiled():
        out, lse = _GaussianAttention.apply(q, k, v, c, is_causal)
    else:
        scaled, scale = _scaled(q, c)
        out, lse = _key_bias_attention(scaled, k, v, scale, _key_bias(kernel, k, c), is_causal)
    if eager() and not (bool(torch.isfinite(lse).all())
                        and not (bool((lse == 0).any()) and _logit_shrink(kernel, q, k, c))):
        return None
    return out


def _sdpa(q, k, v, kernel, c, allowed, bias, dropout_p, is_causal):
    """An inner-product kernel through ``scaled_dot_product_attention`` with scale ``c``.

    The Gaussian's key bias ``-c |k|^2 / 2`` goes in as a ``(..., 1, S)`` float mask. Folding it
    into one more head dimension (``q' = [c q, 1]``, ``k' = [k, -c |k|^2 / 2]``, scale 1) was
    slower on CPU (B=2, H=4, L=1024, d=64, one thread: SDPA 43 ms, key-bias mask 49 ms, folded
    63 ms with ``v`` padded to the same head dimension; with ``v`` left at ``d`` SDPA leaves its
    flash kernel and takes 4-5x longer). The fold remains for ``is_causal`` (on the CPU, where
    :func:`_cpu_flash` does not fit: ``d_v != d``); on CUDA the Gaussian always folds
    (:func:`_fold_key_bias`).
    """
    q, scale = _scaled(q, c)
    width = v.shape[-1]
    if kernel != "softmax" and (is_causal or q.is_cuda):
        # public SDPA's is_causal takes no mask; and on CUDA a key bias that needs grad, passed as
        # a mask, makes SDPA's backward form the (L, S) gradient of the mask (H200, B=4 H=8 L=4096
        # d=64 bf16: 11x SDPA's memory, 4.7x its time): fold the bias into the head dimension
        q, k, v, scale = *_fold_key_bias(q * scale, k, v, c), 1.0
    elif kernel != "softmax":
        key_bias = torch.linalg.vecdot(k, k).unsqueeze(-2) * (-0.5 * c)
        bias = key_bias if bias is None else bias + key_bias
    empty = None
    if allowed is not None:
        # a row with no admissible key: let it see every key, then zero its output (no NaN,
        # and no NaN sent back through the softmax's gradient)
        empty = ~allowed.any(dim=-1, keepdim=True)
        if not eager() or bool(empty.any()):
            allowed = allowed | empty
        else:
            empty = None
    if bias is None:
        attn_mask = allowed
    elif allowed is None:
        attn_mask = bias.to(q.dtype)
    else:
        attn_mask = bias.to(q.dtype).masked_fill(~allowed, -math.inf)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                                         scale=scale)[..., :width]
    return out if empty is None else out.masked_fill(empty, 0.0)


def _fold_key_bias(cq, k, v, c):
    """The Gaussian's key bias folded into one more head dimension, for plain SDPA with scale 1:
    ``q' = [c q, 1]`` (``cq`` is ``c q``), ``k' = [k, -c |k|^2 / 2]`` give
    ``q' . k' = c (q . k - |k|^2 / 2)``; q, k and v are zero-padded to one head dimension, a
    multiple of 8, which the flash kernels need (v's padding is cut from the output)."""
    dim = -(-max(cq.shape[-1] + 1, v.shape[-1]) // 8) * 8
    pad = lambda t: F.pad(t, (0, dim - t.shape[-1]))
    q = pad(torch.cat([cq, torch.ones_like(cq[..., :1])], -1))
    k = pad(torch.cat([k, (torch.linalg.vecdot(k, k).unsqueeze(-1) * (-0.5 * c)).to(k.dtype)], -1))
    return q, k, pad(v)


def _cpu_flash_fits(q, k, v, dropout_p):
    """The CPU flash kernel (which takes ``is_causal`` and a mask together) needs CPU tensors with
    one head dimension; dropout stays with public SDPA."""
    return (q.device.type == "cpu" and q.shape[-1] == v.shape[-1] and dropout_p == 0
            and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"))


def _key_bias(kernel, k, c):
    """The Gaussian's key bias ``-c |k|^2 / 2`` ``(..., 1, S)`` (None for the softmax), in float32
    for half inputs (the CPU flash kernel takes it); ``|k|^2`` from the norm, one pass without the
    ``k * k`` temporary (0.4 ms against vecdot's 1.1 ms at 2M entries)."""
    if kernel == "softmax":
        return None
    norm = torch.linalg.vector_norm(k, dim=-1, dtype=compute_dtype(k.dtype))
    return norm.square().unsqueeze(-2) * (-0.5 * c)


def _gaussian_backward_compiled():
    """Whether the Gaussian's backward pass (float32 and half inputs, eager: float64 and
    ``torch.compile`` keep the flash kernel's, whose graph traces without asking the CPU's make)
    is the compiled pass's rather than the CPU flash kernel's: on AMD CPUs, where the pass's
    products are OpenBLAS's and the flash kernel's MKL's (:mod:`localkit.fused.blas`)."""
    from ..fused import blas

    return blas.amd_cpu()


class _GaussianAttention(torch.autograd.Function):
    """``(out, lse)`` of the Gaussian kernel, ``exp(-c |q - k|^2 / 2)``: the forward pass is
    PyTorch's CPU flash kernel with the key bias ``-c |k|^2 / 2`` (:func:`_key_bias_attention`),
    the backward pass the compiled pass's (:mod:`localkit.fused.cpu_attention`, flash-style
    recomputation from the row log-sum-exp, ``lse - c |q|^2 / 2`` in its terms), which gives
    ``dq, dk, dv, dc`` without the folded head dimension the flash kernel's backward needs for the
    bias's gradient. Taken on AMD CPUs (:func:`_gaussian_backward_compiled`): on a Zen 5 core, one
    thread, B=1 H=8 L=4096 d=64, the backward took 0.74 s against the folded flash backward's
    1.23 s (SDPA's whole forward and backward: 1.46 s). ``c``: a float or a tensor broadcasting to
    the batch shape + ``(1, 1)``; ``lse`` has no gradient.
    """

    @staticmethod
    def forward(ctx, q, k, v, c, is_causal):
        scaled, scale = _scaled(q, c)
        out, lse = _key_bias_attention(scaled, k, v, scale, _key_bias("gaussian", k, c), is_causal)
        ctx.save_for_backward(q, k, v, c if isinstance(c, torch.Tensor) else None, out, lse)
        ctx.c, ctx.is_causal = None if isinstance(c, torch.Tensor) else c, is_causal  # a float's value
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _):
        if dout is None:
            return None, None, None, None, None
        from ..fused.cpu_attention import NAMES, _attention_backward

        q, k, v, c, out, lse = ctx.saved_tensors
        batch = out.shape[:-2]
        N, L, S = math.prod(batch), q.shape[-2], k.shape[-2]
        flat = lambda t: t.expand(batch + t.shape[-2:]).reshape((N,) + t.shape[-2:])
        cf = (torch.tensor(ctx.c) if c is None else c).to(torch.float32).expand(batch + (1, 1)).reshape(N)
        q32 = flat(q).to(torch.float32)
        lse = lse.reshape(N, L) - 0.5 * cf[:, None] * q32.square().sum(-1)
        dq, dk, dv, dc, _, _ = _attention_backward(flat(dout), flat(out), lse, q32, flat(k), flat(v), cf,
                                                   q32.new_zeros(1, S), q32.new_zeros(N, L, 0), q32.new_zeros(N, S, 0),
                                                   NAMES.index("gaussian"), ctx.is_causal)
        grad = lambda g, t: g.reshape(batch + g.shape[-2:]).sum_to_size(t.shape).to(t.dtype)
        dc = grad(dc.reshape(batch + (1, 1)), c) if ctx.needs_input_grad[3] else None
        return grad(dq, q), grad(dk, k), grad(dv, v), dc, None


def _key_bias_attention(q, k, v, scale, bias, is_causal):
    """``(out, lse)``: softmax attention of ``scale <q, k> + b_j`` (``bias``: ``(..., 1, S)`` or
    None) on the CPU, batch dimensions flattened to the kernel's ``(B, H)``, and its log-sum-exp."""
    batch = torch.broadcast_shapes(*(t.shape[:-2] for t in (q, k, v, bias) if t is not None))
    if len(batch) == 2:
        as4d = lambda t: _unit_last_stride(t.expand(batch + t.shape[-2:]))
    else:
        as4d = lambda t: _unit_last_stride(t.expand(batch + t.shape[-2:]).reshape((1, -1) + t.shape[-2:]))
    if bias is None:  # no mask: the kernel's own autograd
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(*map(as4d, (q, k, v)), 0.0, is_causal,
                                                                              scale=scale)
    else:
        out, lse = _KeyBiasAttention.apply(*map(as4d, (q, k, v, bias)), scale, is_causal)
    return out.reshape(batch + out.shape[-2:]), lse


def _unit_last_stride(t):
    """``t``, copied only if its last dimension is not dense: the CPU flash kernel reads any
    batch and row strides (expanded and transposed heads included) but assumes a unit stride in
    the last dimension (a ``(B, d, L)`` tensor transposed gave outputs 1.7e38 off in float32;
    public SDPA leaves its flash kernel for such inputs)."""
    return t if t.stride(-1) == 1 else t.contiguous()


class _KeyBiasAttention(torch.autograd.Function):
    """``(out, lse)``: ``out = softmax(scale <q, k> + b_j) v`` (causal if ``is_causal``) as one call
    of PyTorch's CPU flash kernel, with the ``(B, H, 1, S)`` bias as its mask: no ``(L, S)``
    tensor and no extra head dimension (public SDPA refuses a mask with ``is_causal``); ``lse``,
    the row log-sum-exp, has no gradient.

    The kernel's own autograd has no gradient for a mask, so the backward pass is the kernel's
    backward on the bias folded into one more head dimension, ``q' = [scale q, 1]``,
    ``k' = [k, b]``, ``v' = [v, 0]`` (scale 1: the same logits), given the forward's output and
    log-sum-exp: ``dq``, ``dk``, ``dv`` and ``db`` (the last column of ``dk'``) from one call, in
    float32 for bfloat16 and float16 inputs.
    """

    @staticmethod
    def forward(ctx, q, k, v, bias, scale, is_causal):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, is_causal,
                                                                              attn_mask=bias, scale=scale)
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale, ctx.is_causal = scale, is_causal
        ctx.mark_non_differentiable(lse)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, _):
        if dout is None:  # no gradient reaches the output (kernel_attention's create_graph=True path)
            return None, None, None, None, None, None
        q, k, v, bias, out, lse = ctx.saved_tensors
        dtype, d = compute_dtype(q.dtype), q.shape[-1]
        fold = lambda t, last: torch.cat([t.to(dtype), torch.full_like(t[..., :1], last, dtype=dtype)
                                          if isinstance(last, float) else last.to(dtype)], -1)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            fold(dout, 0.0), fold(q.to(dtype) * ctx.scale, 1.0), fold(k, bias.transpose(-2, -1)), fold(v, 0.0),
            fold(out, 0.0), lse, 0.0, ctx.is_causal, scale=1.0)
        return ((dq[..., :d] * ctx.scale).to(q.dtype), dk[..., :d].to(k.dtype), dv[..., :d].to(v.dtype),
                dk[..., d:].transpose(-2, -1).to(bias.dtype), None, None)


def local_linear_attention(q, k, v, kernel="softmax", ridge=1e-3, bandwidth=None, mask=None, causal=False,
                           window=None, top_k=None, dropout_p=0.0):
    """Local linear attention: a weighted linear model of the values around each query.

    With the localization weights ``w_ij`` of ``kernel`` (as in :func:`kernel_attention`), the
    output is the intercept ``a_i`` of ::

        (a_i, B_i) = argmin_{a, B} sum_j w_ij |v_j - a - B (k_j - q_i)|^2 + ridge |B|_F^2,

    that is ``a_i = vbar_i - C_vk (C_kk + ridge I)^{-1} (kbar_i - q_i)`` with the weighted means
    ``kbar_i, vbar_i`` and covariances ``C_kk, C_vk``. The local mean (:func:`kernel_attention`)
    is the constant model of the same fit; a large ``ridge`` returns to it. Values that are a
    linear function of the keys are reproduced exactly at every query.

    Moments are taken about the first key and value (covariances do not depend on that centre),
    which keeps ``sum w k k^T - kbar kbar^T`` accurate in float32; they are streamed over key
    blocks with the online log-sum-exp, so memory is ``O(L d (d + d_v))``, not ``O(L S)``;
    bfloat16 and float16 inputs are accumulated and solved in float32. Cost
    ``O(L S d (d + d_v))``: keep heads small. ``top_k`` streams (see :func:`kernel_attention`);
    ``dropout_p > 0`` and a float mask that requires grad form the weights.

    Inference on the CPU (no input requires grad, or under ``torch.no_grad()``) in float32,
    bfloat16 or float16, with the softmax, the Gaussian or a built-in profile, ``causal`` and key
    masks ``(..., 1, S)``, runs as one compiled pass over tiles instead
    (:mod:`localkit.fused.cpu_local_linear`): the same intercepts as the local mean of the
    equivalent kernel ``w_ij (1 + (kbar_i - k_j) . z_i)``, ``z_i = (C_kk + ridge I)^{-1} (kbar_i - q_i)``,
    in ``d (d + 1) / 2 + 3 d + d_v + 1`` multiply-adds per pair (keys centred on their mean), memory
    ``O(S d^2)`` plus 64 weights per key and thread. It has no backward pass: training
    (gradients), float64, windows, masks by query, ``top_k``, dropout and logits beyond the float
    range stream as above.

    Parameters
    ----------
    q, k, v, kernel, bandwidth, mask, causal, window, top_k, dropout_p
        As in :func:`kernel_attention` (``kernel`` one of "softmax", "gaussian", "laplacian",
        "cauchy", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform",
        "cosine"; default "softmax").
    ridge : float, default=1e-3
        The penalty on the local slopes ``B``; ``ridge -> inf`` gives :func:`kernel_attention`.

    Returns
    -------
    tensor of shape (..., L, d_v), of the dtype of ``q``

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import local_linear_attention
    >>> k = torch.linspace(-1, 1, 9)[:, None]
    >>> v = 3 * k + 1                              # linear in the keys
    >>> q = torch.tensor([[0.25], [2.0]])          # the second query lies outside the keys
    >>> local_linear_attention(q, k, v, "gaussian", ridge=1e-6, bandwidth=0.5).squeeze(-1).round(decimals=3)
    tensor([1.7500, 7.0000])
    """
    if isinstance(ridge, bool) or not isinstance(ridge, numbers.Real) or not (math.isfinite(ridge) and ridge > 0):
        raise ValueError(f"ridge must be a finite number > 0, got {ridge!r}")
    a = _checked_call(q, k, v, kernel, bandwidth, mask, causal, window, top_k, dropout_p)
    q_, k_, v_, c_ = _to_compute(q, k, v, a.c)
    if _compiled_local_linear_fits(a):
        from ..fused.cpu_local_linear import cpu_local_linear

        return cpu_local_linear(a.kernel, q_, k_, v_, c_, a.causal, _key_log_weights(a.mask, q_.dtype),
                                ridge).to(q.dtype)
    if not a.dense:
        d, dv = k.shape[-1], v.shape[-1]
        plan = _streamed_plan(a, q_, k_, c_, d * (d + dv))
        return streamed_local_linear(plan, q_, k_, v_, c_, float(ridge)).to(q.dtype)
    allowed, bias = _position_terms(q, k, a.mask, a.causal, a.window)
    w, empty = _weights(q_, k_, a.kernel, c_, allowed, bias, a.top_k, a.shrink)
    if dropout_p > 0:  # a random kernel: drop weights, then renormalise
        w = F.dropout(w, dropout_p)
        w = w / w.sum(-1, keepdim=True).clamp_min(torch.finfo(w.dtype).tiny)
    # moments about the first key and value: inside the data cloud (no cancellation), and seen by
    # every causal query, so that later tokens do not even change the rounding of earlier ones
    ck, cv = k_[..., :1, :], v_[..., :1, :]
    kc, vc, qc = k_ - ck, v_ - cv, q_ - ck
    kbar, vbar = w @ kc, w @ vc
    d, dv = k.shape[-1], v.shape[-1]
    # weighted second moments as one matrix product each: w (L, S) @ (S, d*d)
    s_kk = (w @ (kc.unsqueeze(-1) * kc.unsqueeze(-2)).flatten(-2)).unflatten(-1, (d, d))
    s_vk = (w @ (vc.unsqueeze(-1) * kc.unsqueeze(-2)).flatten(-2)).unflatten(-1, (dv, d))
    c_kk = s_kk - kbar.unsqueeze(-1) * kbar.unsqueeze(-2)
    c_vk = s_vk - vbar.unsqueeze(-1) * kbar.unsqueeze(-2)
    eye = torch.eye(d, dtype=q_.dtype, device=q.device)
    x = torch.linalg.solve(c_kk + ridge * eye, (kbar - qc).unsqueeze(-1))
    out = cv + vbar - (c_vk @ x).squeeze(-1)
    return out.masked_fill(empty, 0.0).to(q.dtype)


def _compiled_local_linear_fits(a):
    """Whether :func:`local_linear_attention` takes the compiled forward pass
    (:mod:`localkit.fused.cpu_local_linear`) for the :class:`_Call` ``a``: CPU tensors in float32,
    bfloat16 or float16, a built-in kernel, no window, ``top_k`` or dropout, at most a key mask
    (no gradient), logits in the float range, and no gradient asked of any input (the pass has no
    backward pass)."""
    from ..fused.cpu_local_linear import supports

    wants_grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad
                                                 for t in (a.q, a.k, a.v, a.c))
    mask = a.mask
    return (a.q.device.type == "cpu" and a.q.dtype != torch.float64 and supports(a.kernel) and a.window is None
            and a.top_k is None and a.dropout_p == 0 and not wants_grad
            and (mask is None or (mask.shape[-2] == 1 and not mask.requires_grad)) and not a.shrink)
