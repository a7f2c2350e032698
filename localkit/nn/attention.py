"""Multi-head attention as a local mean (or a local linear model) over tokens.

The projections ``W_q, W_k, W_v`` learn the space in which the localization kernel is taken; the
kernel is a choice (:mod:`localkit.nn.functional`). Parameters are laid out exactly as in
``torch.nn.MultiheadAttention`` (``in_proj_weight``, or ``q_proj_weight``, ``k_proj_weight``,
``v_proj_weight`` when keys or values have their own widths; ``in_proj_bias``, ``bias_k``,
``bias_v``, ``out_proj``), so that ``from_torch`` copies a trained PyTorch module and, with the
softmax kernel, reproduces it.
"""
from __future__ import annotations

import functools
import math
import numbers

import torch
from torch import nn

from .functional import (attention_weights, check_bandwidth, default_bandwidth, kernel_attention,
                         local_linear_attention, resolve_kernel)


def _batched(query):
    """Whether ``query`` is batched: torch's modules take a 2-D (seq, embed_dim) query as unbatched."""
    return not (isinstance(query, torch.Tensor) and query.dim() == 2)


def check_mask_dtype(name, mask):
    """``mask`` if it is None or, as torch requires, a bool or floating point tensor."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and not torch.is_floating_point(mask):
        raise TypeError(f"{name} must be a bool or floating point tensor, got dtype {mask.dtype}")
    return mask


def _check_module_mask(name, mask, allowed):
    """``mask`` if it is None or a bool or floating point tensor of an allowed shape.

    ``allowed`` maps each layout, as the error names it, to its size.
    """
    if check_mask_dtype(name, mask) is None:
        return None
    if tuple(mask.shape) not in allowed.values():
        shapes = " or ".join(f"{layout} = {size}" for layout, size in allowed.items())
        raise ValueError(f"{name} must have shape {shapes}, got {tuple(mask.shape)}")
    return mask


def _module_mask(attn_mask, key_padding_mask, q, k, batched, causal):
    """PyTorch's masks (True = masked out; float = added) as one functional mask (True = takes part).

    With ``q`` (batch, heads, L, d) and ``k`` (batch, heads, S, d): ``attn_mask`` (L, S) or
    (batch * heads, L, S) and ``key_padding_mask`` (batch, S); unbatched input (batch = 1) has
    ``key_padding_mask`` (S,) and a 3-D ``attn_mask`` (heads, L, S). As in torch, a bool mask's
    True is ``-inf`` and the masks add; two bool masks stay one bool mask. ``causal``:
    ``attn_mask`` is the causal mask (``is_causal``), checked but not read.
    """
    (batch, heads, L, _), S = q.shape, k.shape[-2]
    stacked = "(batch * num_heads, L, S)" if batched else "(num_heads, L, S)"
    attn_mask = _check_module_mask("attn_mask", attn_mask, {"(L, S)": (L, S), stacked: (batch * heads, L, S)})
    padding = {"(batch, S)": (batch, S)} if batched else {"(S,)": (S,)}
    key_padding_mask = _check_module_mask("key_padding_mask", key_padding_mask, padding)
    masks = []  # laid out as the weights (batch, heads, L, S), with broadcasting
    if attn_mask is not None and not causal:
        masks.append(attn_mask.unflatten(0, (batch, heads)) if attn_mask.dim() == 3 else attn_mask)
    if key_padding_mask is not None:
        masks.append(key_padding_mask.reshape(batch, 1, 1, S))
    if not masks:
        return None
    if all(m.dtype == torch.bool for m in masks):  # stays a bool mask
        return ~functools.reduce(torch.logical_or, masks)
    zero = q.new_zeros(())
    return sum(zero.masked_fill(m, -math.inf) if m.dtype == torch.bool else m.to(q.dtype) for m in masks)


class LocalMeanAttention(nn.Module):
    """Multi-head self- or cross-attention as a local mean of value vectors.

    For each head, ``out_i = sum_j K(q_i, k_j) v_j / sum_l K(q_i, k_l)`` with ``q = W_q x``,
    ``k = W_k x'``, ``v = W_v x'``; the heads are concatenated and projected by ``W_o``. With
    ``kernel="softmax"`` (``K = exp(<q, k> / sqrt(d_head))``) this is ``nn.MultiheadAttention``.

    The positional parameters and their defaults are ``nn.MultiheadAttention``'s; the kernel's
    are keyword-only.

    Parameters
    ----------
    embed_dim, num_heads : int
        ``embed_dim`` must be divisible by ``num_heads``.
    dropout : float, default=0.0
        Dropout on the attention weights, in training mode.
    bias : bool, default=True
        Biases of the input and output projections.
    add_bias_kv : bool, default=False
        As torch: two learned vectors ``bias_k``, ``bias_v`` (shape ``(1, 1, embed_dim)``, in the
        projected space) appended to every sequence's keys and values, a sample that every query
        may weigh: ``out_i = (sum_j K(q_i, k_j) v_j + K(q_i, b_k) b_v) / (sum_j K(q_i, k_j) +
        K(q_i, b_k))``.
    add_zero_attn : bool, default=False
        As torch: a key and a value of zeros appended per head after the projections (after
        ``bias_k``); with the softmax kernel it adds ``exp(0) = 1`` to the normaliser, so a query
        may attend to "nothing".
    kdim, vdim : int or None, default=None
        The widths of ``key`` and ``value`` (None: ``embed_dim``). When either differs from
        ``embed_dim`` the projections are three parameters, as in torch: ``q_proj_weight``
        ``(embed_dim, embed_dim)``, ``k_proj_weight`` ``(embed_dim, kdim)``, ``v_proj_weight``
        ``(embed_dim, vdim)``, and ``in_proj_weight`` is None.
    batch_first : bool, default=False
        Inputs are ``(batch, seq, embed_dim)``; otherwise ``(seq, batch, embed_dim)``, as torch.
    device, dtype : optional
        Where and in which precision the parameters are created, as for torch's modules.
    kernel : {"softmax", "gaussian", "laplacian", "cauchy", "epanechnikov", "tricube", "biweight", \
            "triweight", "triangular", "uniform", "cosine"}, default="softmax"
        The localization kernel of the queries and keys: "softmax" is ``exp(<q, k> / h)``
        (torch's attention); the others are profiles of ``u = |q - k| / h``, as in
        :func:`localkit.nn.kernel_attention`.
    bandwidth : float or None, default=None
        ``h`` (None: ``sqrt(d_head)`` for the softmax, ``d_head^(1/4)`` otherwise).
    learn_bandwidth : bool, default=False
        Learn one bandwidth per head (as ``log h``, initialised at ``bandwidth``).
    window : int, (profile, width) or None, default=None
        A kernel in position: an int ``w`` keeps ``|i - j| <= w``; ``("tricube", 16.0)``
        multiplies the weights by ``k(|i - j| / 16)`` (see :func:`localkit.nn.kernel_attention`).
    top_k : int or None, default=None
        A kNN kernel: only the ``top_k`` closest admissible keys of each query take part.

    Notes
    -----
    The call follows ``nn.MultiheadAttention`` (masks, ``need_weights``, ``is_causal``) and
    returns its ``(output, weights or None)`` pair (the weights have a column for each appended
    key, ``bias_k`` then the zero key, which no mask hides, as in torch), so an instance can replace the ``self_attn``
    of an existing model, ``nn.TransformerEncoderLayer`` included: ``_qkv_same_embed_dim`` is
    False so that the layer's native fast path (which would run torch's own softmax kernel on
    our weights) is never taken in eval mode.

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import LocalMeanAttention
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> mha = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    >>> x = torch.randn(2, 5, 16)
    >>> ours = LocalMeanAttention.from_torch(mha)
    >>> bool(torch.allclose(ours(x, x, x)[0], mha(x, x, x)[0], atol=1e-6))
    True
    """

    #: read by nn.TransformerEncoderLayer / nn.TransformerEncoder: False disables their native fast
    #: path, which calls torch's fused softmax attention on our projections and bypasses the kernel
    _qkv_same_embed_dim = False

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None, *, kernel="softmax",
                 bandwidth=None, learn_bandwidth=False, window=None, top_k=None):
        super().__init__()
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        for name, value in (("embed_dim", embed_dim), ("num_heads", num_heads), ("kdim", kdim), ("vdim", vdim)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a positive integer{' or None' if name in ('kdim', 'vdim') else ''}, "
                                 f"got {value!r}")
        for name, value in (("add_bias_kv", add_bias_kv), ("add_zero_attn", add_zero_attn)):
            if not isinstance(value, (bool, int)) or value not in (0, 1):
                raise ValueError(f"{name} must be True or False, got {value!r}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} must be divisible by num_heads={num_heads}")
        if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim, self.vdim, self.add_zero_attn = int(kdim), int(vdim), bool(add_zero_attn)
        self.kernel = resolve_kernel(kernel)
        self.bandwidth = check_bandwidth(bandwidth)
        self.dropout, self.batch_first = float(dropout), bool(batch_first)
        self.options = {"window": window, "top_k": top_k}
        factory = {"device": device, "dtype": dtype}
        if self.kdim == embed_dim and self.vdim == embed_dim:  # one stacked projection, as torch
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **factory))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
            nn.init.xavier_uniform_(self.in_proj_weight)  # as nn.MultiheadAttention
        else:  # keys and values of their own widths: three projections, as torch
            self.register_parameter("in_proj_weight", None)
            for name, width in (("q_proj_weight", embed_dim), ("k_proj_weight", self.kdim),
                                ("v_proj_weight", self.vdim)):
                setattr(self, name, nn.Parameter(torch.empty(embed_dim, width, **factory)))
                nn.init.xavier_uniform_(getattr(self, name))
        self.in_proj_bias = nn.Parameter(torch.zeros(3 * embed_dim, **factory)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        if bias:
            nn.init.zeros_(self.out_proj.bias)
        if add_bias_kv:
            self.bias_k = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
            self.bias_v = nn.Parameter(torch.empty(1, 1, embed_dim, **factory))
            nn.init.xavier_normal_(self.bias_k)
            nn.init.xavier_normal_(self.bias_v)
        else:
            self.bias_k = self.bias_v = None
        h0 = self.bandwidth or default_bandwidth(self.kernel, self.head_dim)
        self.log_bandwidth = (nn.Parameter(torch.full((num_heads, 1, 1), math.log(h0), **factory))
                              if learn_bandwidth else None)

    @classmethod
    def from_torch(cls, mha, **kwargs):
        """A copy of ``nn.MultiheadAttention`` ``mha`` (weights, dropout, layout, ``kdim``/``vdim``,
        ``bias_k``/``bias_v``, ``add_zero_attn``); ``kwargs`` choose the kernel."""
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"from_torch expects an nn.MultiheadAttention, got {type(mha).__name__}")
        module = cls(mha.embed_dim, mha.num_heads, bias=mha.in_proj_bias is not None, dropout=mha.dropout,
                     add_bias_kv=mha.bias_k is not None, add_zero_attn=mha.add_zero_attn, kdim=mha.kdim,
                     vdim=mha.vdim, batch_first=mha.batch_first, **kwargs)
        weight = mha.out_proj.weight
        module = module.to(device=weight.device, dtype=weight.dtype)
        result = module.load_state_dict(mha.state_dict(), strict=False)
        if result.unexpected_keys or set(result.missing_keys) - {"log_bandwidth"}:
            raise ValueError(f"could not copy nn.MultiheadAttention: {result}")
        return module

    @property
    def current_bandwidth(self):
        """The bandwidth in use: per head ``(H, 1, 1)`` if learned, else a float or None (default)."""
        return self.log_bandwidth.exp() if self.log_bandwidth is not None else self.bandwidth

    def _heads(self, x, i):
        if self.in_proj_weight is not None:
            w = self.in_proj_weight[i * self.embed_dim:(i + 1) * self.embed_dim]
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        b = None if self.in_proj_bias is None else self.in_proj_bias[i * self.embed_dim:(i + 1) * self.embed_dim]
        y = nn.functional.linear(x, w, b)
        return y.unflatten(-1, (self.num_heads, self.head_dim)).transpose(1, 2)  # (B, H, n, d_head)

    def _check_input(self, name, x, batched):
        """``x`` as (batch, seq, width); unbatched (seq, width) input is a batch of one. The width is
        ``embed_dim`` for the query, ``kdim`` for the key, ``vdim`` for the value."""
        dim_name = {"key": "kdim", "value": "vdim"}.get(name, "embed_dim")
        width = getattr(self, dim_name)
        dim_name = dim_name if width != self.embed_dim else "embed_dim"
        if not isinstance(x, torch.Tensor) or x.dim() != (3 if batched else 2) or x.shape[-1] != width:
            layout = f"(seq, {dim_name})" if not batched else (
                f"(batch, seq, {dim_name})" if self.batch_first else f"(seq, batch, {dim_name})")
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{name} must have shape {layout} with {dim_name}={width}, got {shape} "
                             f"(query, key and value are all batched or all unbatched (seq, embed_dim))")
        if not batched:
            return x[None]
        return x if self.batch_first else x.transpose(0, 1)

    def _append_keys(self, k, v, mask, causal, L):
        """torch's ``add_bias_kv`` and ``add_zero_attn``: ``bias_k``/``bias_v``, then a zero key and
        value, appended to each sequence's keys and values (per head, after the projections).

        No mask hides them: ``mask`` gains a column that lets them take part for each; a causal
        kernel becomes an explicit ``j <= i`` mask over the original keys (the appended ones stay
        visible to every query, as in torch's masked path), so ``causal`` comes back False.
        """
        extra_k, extra_v = [], []
        batch, heads, _, d = k.shape
        if self.bias_k is not None:
            extra_k.append(self.bias_k.reshape(1, heads, 1, d).expand(batch, heads, 1, d).to(k.dtype))
            extra_v.append(self.bias_v.reshape(1, heads, 1, d).expand(batch, heads, 1, d).to(v.dtype))
        if self.add_zero_attn:
            extra_k.append(k.new_zeros(batch, heads, 1, d))
            extra_v.append(v.new_zeros(batch, heads, 1, v.shape[-1]))
        if not extra_k:
            return k, v, mask, causal
        if causal:
            keep = torch.ones(L, k.shape[-2], dtype=torch.bool, device=k.device).tril()
            if mask is None:
                mask = keep
            elif mask.dtype == torch.bool:
                mask = mask & keep
            else:
                mask = mask.masked_fill(~keep, -math.inf)
        if mask is not None:
            mask = nn.functional.pad(mask, (0, len(extra_k)), value=True if mask.dtype == torch.bool else 0.0)
        return torch.cat([k] + extra_k, dim=-2), torch.cat([v] + extra_v, dim=-2), mask, False

    def attend(self, q, k, v, mask, causal):
        """The local model over tokens, per head: here the local mean."""
        return kernel_attention(q, k, v, self.kernel, self.current_bandwidth, mask=mask, causal=causal,
                                dropout_p=self.dropout if self.training else 0.0, **self.options)

    def forward(self, query, key=None, value=None, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        """``(output, weights)`` as ``nn.MultiheadAttention`` returns them.

        ``key`` and ``value`` default to ``query`` (self-attention). As in ``nn.MultiheadAttention``,
        a 2-D ``query`` (L, embed_dim), with key and value (S, embed_dim), is one unbatched sequence
        (``batch_first`` is then not read). Masks follow ``nn.MultiheadAttention``:
        ``key_padding_mask`` (batch, S), or (S,) unbatched, and ``attn_mask`` (L, S) or
        (batch * heads, L, S), or (heads, L, S) unbatched, are bool (True where a key must be
        ignored) or floating point (added to the log-weights). ``is_causal=True`` multiplies the
        kernel by ``[j <= i]`` (as in torch, it says that ``attn_mask``, if given, is the causal
        mask, which is then checked but not read; unlike torch, no mask is needed with it); keys
        appended by ``add_bias_kv`` and ``add_zero_attn`` stay visible to every query, as in
        torch's masked path (torch's fused path, taken when ``need_weights=False`` and there is
        no ``key_padding_mask``, hides them from the first queries).
        ``output`` is shaped like ``query``; ``weights`` is None unless ``need_weights``: then the
        localization weights ``(batch, L, S)``, averaged over heads, or ``(batch, heads, L, S)`` if
        not ``average_attn_weights`` (before dropout), without the batch axis for unbatched input.
        Asking for them forms the ``(L, S)`` matrix; the output never does.
        """
        key = query if key is None else key
        value = key if value is None else value
        batched = _batched(query)
        q_in = self._check_input("query", query, batched)
        k_in, v_in = self._check_input("key", key, batched), self._check_input("value", value, batched)
        if k_in.shape[:2] != v_in.shape[:2] or k_in.shape[0] != q_in.shape[0]:
            raise ValueError(f"query, key and value must share the batch size and key/value the length, got "
                             f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        q, k, v = self._heads(q_in, 0), self._heads(k_in, 1), self._heads(v_in, 2)
        causal = bool(is_causal)
        mask = _module_mask(attn_mask, key_padding_mask, q, k, batched, causal)
        k, v, mask, causal = self._append_keys(k, v, mask, causal, q.shape[-2])
        out = self.attend(q, k, v, mask, causal)
        out = self.out_proj(out.transpose(1, 2).flatten(-2))
        if not batched:
            out = out[0]
        elif not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        weights = attention_weights(q, k, self.kernel, self.current_bandwidth, mask=mask, causal=causal,
                                    **self.options)
        weights = weights.mean(1) if average_attn_weights else weights
        return out, weights if batched else weights[0]

    @torch.no_grad()
    def attention_weights(self, query, key=None, causal=False):
        """The localization weights per head, ``(batch, heads, L, S)`` (``(heads, L, S)`` unbatched), for figures."""
        key = query if key is None else key
        batched = _batched(query)
        q = self._heads(self._check_input("query", query, batched), 0)
        k = self._heads(self._check_input("key", key, batched), 1)
        k, _, mask, causal = self._append_keys(k, k, None, bool(causal), q.shape[-2])
        weights = attention_weights(q, k, self.kernel, self.current_bandwidth, mask=mask, causal=causal,
                                    **self.options)
        return weights if batched else weights[0]

    def extra_repr(self):
        extra = "".join(f", {name}={value}" for name, value, default in
                        (("kdim", self.kdim, self.embed_dim), ("vdim", self.vdim, self.embed_dim),
                         ("add_bias_kv", self.bias_k is not None, False),
                         ("add_zero_attn", self.add_zero_attn, False)) if value != default)
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{extra}, kernel={self.kernel!r}, "
                f"bandwidth={self.bandwidth}, learn_bandwidth={self.log_bandwidth is not None}")


class LocalLinearAttention(LocalMeanAttention):
    """Multi-head local linear attention: per head, the intercept of a weighted linear fit.

    Same interface as :class:`LocalMeanAttention` plus ``ridge``; each head returns
    ``a_i = vbar_i - C_vk (C_kk + ridge I)^{-1} (kbar_i - q_i)``, the value at ``q_i`` of the
    linear model of ``v`` on ``k`` fitted with the localization weights ``w_ij`` (see
    :func:`localkit.nn.local_linear_attention`). Costs ``O(L^2 d_head^2)`` per head.

    Parameters
    ----------
    embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first, device, dtype
        As in :class:`LocalMeanAttention` (and ``nn.MultiheadAttention``), with the same defaults
        (``batch_first=False``: inputs ``(seq, batch, embed_dim)``).
    kernel, bandwidth, learn_bandwidth, window, top_k
        The localization kernel, as in :class:`LocalMeanAttention` (``kernel`` one of
        "softmax", "gaussian", "laplacian", "cauchy", "epanechnikov", "tricube", "biweight",
        "triweight", "triangular", "uniform", "cosine"; default "softmax").
    ridge : float, default=1e-3
        The ridge penalty ``ridge |B|_F^2`` on the local slopes; a large ``ridge`` returns to
        :class:`LocalMeanAttention`.

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import LocalLinearAttention
    >>> attn = LocalLinearAttention(16, 4, ridge=1e-2)
    >>> attn(torch.randn(2, 5, 16), need_weights=False, is_causal=True)[0].shape
    torch.Size([2, 5, 16])
    """

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None, *, kernel="softmax",
                 bandwidth=None, learn_bandwidth=False, window=None, top_k=None, ridge=1e-3):
        super().__init__(embed_dim, num_heads, dropout, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first,
                         device, dtype, kernel=kernel, bandwidth=bandwidth, learn_bandwidth=learn_bandwidth,
                         window=window, top_k=top_k)
        if isinstance(ridge, bool) or not isinstance(ridge, numbers.Real) or not (math.isfinite(ridge) and ridge > 0):
            raise ValueError(f"ridge must be a finite number > 0, got {ridge!r}")
        self.ridge = float(ridge)

    def attend(self, q, k, v, mask, causal):
        return local_linear_attention(q, k, v, self.kernel, self.ridge, self.current_bandwidth, mask=mask,
                                      causal=causal, dropout_p=self.dropout if self.training else 0.0,
                                      **self.options)

    def extra_repr(self):
        return super().extra_repr() + f", ridge={self.ridge}"
