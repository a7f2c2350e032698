"""PyTorch modules where attention is a local mean with a choice of localization kernel.

Self-attention is the local mean of value vectors over tokens, with the learned localization
kernel ``K(x_i, x_j) = exp(<W_q x_i, W_k x_j> / sqrt(d))``; swapping that kernel for a Gaussian,
a Laplacian or a compact profile of :mod:`localkit.kernels.profiles` gives other attentions, and
replacing the local mean (the constant local model) by a local linear model gives local linear
attention. A Transformer block is a hierarchical local model: a local-mean layer over tokens, then
a pointwise model, each with a residual blend.

torch is imported only in this package; ``import localkit`` never needs it.
"""
from .._extras import install_extra

try:
    import torch  # noqa: F401
except ImportError as exc:  # torch missing, or blocked
    raise ImportError(
        f"localkit.nn needs PyTorch, an optional extra: {install_extra('nn')}"
    ) from exc

from .attention import LocalLinearAttention, LocalMeanAttention
from .functional import AttentionPlan, attention_weights, explain_attention, kernel_attention, local_linear_attention
from .nonlocal_block import NonLocalBlock
from .transformer import LocalTransformer, LocalTransformerLayer

__all__ = ["AttentionPlan", "LocalLinearAttention", "LocalMeanAttention", "LocalTransformer", "LocalTransformerLayer",
           "NonLocalBlock", "attention_weights", "explain_attention", "kernel_attention", "local_linear_attention"]
