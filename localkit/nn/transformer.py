"""The Transformer as a hierarchical local model.

A block is two local models in sequence, each blended with its input by a residual connection:
a local-mean layer over tokens (attention, with a learned localization kernel), then a pointwise
model (the feed-forward network, the same at every token). Stacking blocks feeds each layer's
local means to the next: a hierarchy of local models.
"""
from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from .attention import LocalLinearAttention, LocalMeanAttention, check_mask_dtype

#: the local model over tokens: the local mean (constant model) or the local linear model
LOCAL_MODELS = {"mean": LocalMeanAttention, "linear": LocalLinearAttention}
ACTIVATIONS = {"relu": nn.functional.relu, "gelu": nn.functional.gelu}


class LocalTransformerLayer(nn.Module):
    """One Transformer block: local means over tokens, then a pointwise model, with residuals.

    ``norm_first=False`` (post-norm): ``x = LN1(x + A(x)); x = LN2(x + F(x))``;
    ``norm_first=True`` (pre-norm): ``x = x + A(LN1(x)); x = x + F(LN2(x))``, where ``A`` is the
    local-mean (or local linear) attention and ``F(x) = W_2 act(W_1 x + b_1) + b_2``. Submodules
    are named as in ``nn.TransformerEncoderLayer``, so ``from_torch`` copies one and, with the
    softmax kernel, reproduces it.

    The positional parameters and their defaults are ``nn.TransformerEncoderLayer``'s; the
    kernel's are keyword-only.

    Parameters
    ----------
    d_model : int
        The width of the tokens' features.
    nhead : int
        Attention heads; ``d_model`` must be divisible by ``nhead``.
    dim_feedforward : int, default=2048
        The hidden width of the pointwise model ``F``.
    dropout : float, default=0.1
        Dropout on the attention weights and in the pointwise model, in training mode.
    activation : {"relu", "gelu"} or callable, default="relu"
        The activation ``act`` of the pointwise model.
    layer_norm_eps : float, default=1e-5
        The ``eps`` of both layer norms.
    batch_first : bool, default=False
        Inputs are ``(batch, seq, d_model)``; otherwise ``(seq, batch, d_model)``, as torch.
    norm_first : bool, default=False
        Pre-norm (True) or post-norm (False) blocks, as above.
    bias : bool, default=True
        Biases of the linear layers and the layer norms.
    device, dtype : optional
        Where and in which precision the parameters are created, as for torch's modules.
    kernel : {"softmax", "gaussian", "laplacian", "cauchy", "epanechnikov", "tricube", "biweight", \
            "triweight", "triangular", "uniform", "cosine"}, default="softmax"
        The localization kernel of the attention (see :class:`LocalMeanAttention`).
    local_model : {"mean", "linear"}, default="mean"
        :class:`LocalMeanAttention` or :class:`LocalLinearAttention` over tokens.
    **attention_options
        ``bandwidth``, ``learn_bandwidth``, ``window``, ``top_k`` (and ``ridge`` for "linear"),
        as in :class:`LocalMeanAttention`.

    Notes
    -----
    ``forward(src, src_mask, src_key_padding_mask, is_causal)`` is ``nn.TransformerEncoderLayer``'s,
    so ``nn.TransformerEncoder`` stacks this layer like its own.

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import LocalTransformerLayer
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> ref = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    >>> ours = LocalTransformerLayer.from_torch(ref)
    >>> x = torch.randn(2, 6, 16)
    >>> bool(torch.allclose(ours(x), ref(x), atol=1e-5))
    True
    """

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True, device=None, dtype=None, *, kernel="softmax",
                 local_model="mean", **attention_options):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        if local_model not in LOCAL_MODELS:
            raise ValueError(f"local_model must be one of {sorted(LOCAL_MODELS)}, got {local_model!r}")
        # checked here, under the layer's own names (the attention would report d_model as embed_dim)
        for name, value in (("d_model", d_model), ("nhead", nhead), ("dim_feedforward", dim_feedforward)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(activation, str):
            if activation not in ACTIVATIONS:
                raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or a callable, got {activation!r}")
            activation = ACTIVATIONS[activation]
        elif not callable(activation):
            raise TypeError(f"activation must be a string or a callable, got {activation!r}")
        self.self_attn = LOCAL_MODELS[local_model](d_model, nhead, kernel=kernel, bias=bias, dropout=dropout,
                                                   batch_first=batch_first, **factory, **attention_options)
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias, **factory)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout, self.dropout1, self.dropout2 = (nn.Dropout(dropout) for _ in range(3))
        self.activation, self.norm_first = activation, bool(norm_first)

    @classmethod
    def from_torch(cls, layer, **kwargs):
        """A copy of ``nn.TransformerEncoderLayer`` ``layer``; ``kwargs`` choose the kernel or local model."""
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(f"from_torch expects an nn.TransformerEncoderLayer, got {type(layer).__name__}")
        attn = layer.self_attn
        module = cls(attn.embed_dim, attn.num_heads, layer.linear1.out_features, norm_first=layer.norm_first,
                     dropout=layer.dropout.p, activation=layer.activation, layer_norm_eps=layer.norm1.eps,
                     batch_first=attn.batch_first, bias=layer.linear1.bias is not None, **kwargs)
        module = module.to(device=attn.in_proj_weight.device, dtype=attn.in_proj_weight.dtype)
        result = module.load_state_dict(layer.state_dict(), strict=False)
        if result.unexpected_keys or set(result.missing_keys) - {"self_attn.log_bandwidth"}:
            raise ValueError(f"could not copy nn.TransformerEncoderLayer: {result}")
        return module

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        """``src`` (batch, seq, d_model) (or (seq, batch, d_model) if not batch_first), or one
        unbatched sequence (seq, d_model).

        As ``nn.TransformerEncoderLayer``: ``src_mask`` (L, S) or (batch * heads, L, S) and
        ``src_key_padding_mask`` (batch, S) (unbatched: (heads, L, S) and (S,)), bool or floating
        point tensors, bool True = ignore, float = added to the log-weights;
        ``is_causal=True`` multiplies the attention kernel by ``[j <= i]`` (``src_mask``, if
        given, is then taken to be the causal mask and not read).
        """
        if self.norm_first:
            src = src + self._attention(self.norm1(src), src_mask, src_key_padding_mask, is_causal)
            return src + self._pointwise(self.norm2(src))
        src = self.norm1(src + self._attention(src, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(src + self._pointwise(src))

    def _attention(self, x, mask, key_padding_mask, is_causal):
        check_mask_dtype("src_mask", mask)  # under the layer's own names (shapes: by self_attn)
        check_mask_dtype("src_key_padding_mask", key_padding_mask)
        out, _ = self.self_attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False, attn_mask=mask,
                                is_causal=is_causal)
        return self.dropout1(out)

    def _pointwise(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class LocalTransformer(nn.Module):
    """A causal language model: token and position embeddings, a stack of local layers, an LM head.

    Pre-norm blocks (:class:`LocalTransformerLayer` with ``norm_first=True``), a final layer norm,
    and a head tied to the token embedding (as in GPT-2 / nanoGPT). ``forward(idx)`` maps token ids
    ``(batch, T)`` (``T <= max_len``) to next-token logits ``(batch, T, vocab_size)``.

    Parameters
    ----------
    vocab_size : int
        The number of token ids (the embedding's rows and the head's outputs).
    max_len : int
        The longest sequence (rows of the position embedding).
    d_model : int, default=128
    nhead : int, default=4
    num_layers : int, default=4
        The width, heads and depth of the stack.
    dim_feedforward : int or None, default=None
        The pointwise model's hidden width; None: ``4 * d_model``.
    kernel, local_model, dropout, device, dtype, **attention_options
        Passed to every :class:`LocalTransformerLayer` (``kernel`` one of "softmax", "gaussian",
        "laplacian", "cauchy", "epanechnikov", "tricube", "biweight", "triweight", "triangular",
        "uniform", "cosine"; ``local_model`` "mean" or "linear").

    Examples
    --------
    >>> import torch
    >>> from localkit.nn import LocalTransformer
    >>> model = LocalTransformer(vocab_size=128, max_len=32, d_model=32, nhead=2, num_layers=2, kernel="gaussian")
    >>> model(torch.randint(0, 128, (3, 32))).shape
    torch.Size([3, 32, 128])
    """

    def __init__(self, vocab_size, max_len, d_model=128, nhead=4, num_layers=4, dim_feedforward=None,
                 kernel="softmax", local_model="mean", dropout=0.0, device=None, dtype=None, **attention_options):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("max_len", max_len), ("num_layers", num_layers)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.max_len = max_len
        factory = {"device": device, "dtype": dtype}
        self.token = nn.Embedding(vocab_size, d_model, **factory)
        self.position = nn.Embedding(max_len, d_model, **factory)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            LocalTransformerLayer(d_model, nhead, dim_feedforward or 4 * d_model, kernel=kernel, norm_first=True,
                                  dropout=dropout, activation="gelu", batch_first=True, local_model=local_model,
                                  **factory, **attention_options)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, **factory)
        self.head = nn.Linear(d_model, vocab_size, bias=False, **factory)
        self.head.weight = self.token.weight  # tied
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2: scale the residual projections by depth
            if name.endswith(("linear2.weight", "out_proj.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * num_layers))

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx, causal=True):
        if idx.dim() != 2 or idx.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"idx must be an integer tensor of shape (batch, T), got {idx.dtype} {tuple(idx.shape)}")
        T = idx.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence length {T} exceeds max_len={self.max_len}")
        x = self.drop(self.token(idx) + self.position(torch.arange(T, device=idx.device)))
        for layer in self.layers:
            x = layer(x, is_causal=causal)
        return self.head(self.norm(x))
