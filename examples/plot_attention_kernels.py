"""
Attention weights as localization kernels
=========================================

Self-attention is the local mean of value vectors over tokens,
``out_i = sum_j K(q_i, k_j) v_j / sum_l K(q_i, k_l)``, with the softmax kernel
``K(q, k) = exp(<q, k> / sqrt(d))``. :mod:`localkit.nn` swaps that kernel for any profile of the
distance ``|q - k| / h``. Below, queries and keys follow a slowly turning direction plus noise (a
stand-in for the features of a sequence), and each kernel's causal weights are drawn: the
Gaussian and compact kernels attend to the nearby, similar tokens; the softmax kernel favours keys
with large inner products.
"""
import numpy as np
import torch

from localkit.nn import attention_weights, kernel_attention
from localkit.plot import attention_maps

torch.manual_seed(0)
L, d = 24, 8
angle = torch.linspace(0, 3.0, L)[:, None]
base = torch.cat([torch.cos(angle), torch.sin(angle), torch.zeros(L, d - 2)], dim=1)
q = 2.0 * base + 0.3 * torch.randn(L, d)
k = 2.0 * base + 0.3 * torch.randn(L, d)

kernels = [("softmax", None), ("gaussian", 1.0), ("laplacian", 1.0),
           ("epanechnikov", 2.0)]
maps = {}
for name, h in kernels:
    title = name if h is None else f"{name}, h={h}"
    maps[title] = attention_weights(q, k, name, bandwidth=h, causal=True)
axes = attention_maps(maps, tokens=[str(j) for j in range(L)])
axes[0, 0].figure.set_size_inches(14, 6)
axes[0, 0].figure.tight_layout()

# %%
# The softmax kernel is PyTorch's scaled dot-product attention:
v = torch.randn(L, 16)
ours = kernel_attention(q[None], k[None], v[None], kernel="softmax", causal=True)
sdpa = torch.nn.functional.scaled_dot_product_attention
ref = sdpa(q[None], k[None], v[None], is_causal=True)
print("max |localkit - PyTorch SDPA| =", float((ours - ref).abs().max()))
