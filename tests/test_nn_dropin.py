"""localkit.nn modules dropped into PyTorch's own: nn.MultiheadAttention's call, self_attn inside
nn.TransformerEncoderLayer (eval mode: its native fast path must not bypass our kernel),
nn.TransformerEncoder stacking LocalTransformerLayer, device=/dtype=, CUDA against CPU."""
import numpy as np
import pytest

import torch
from torch import nn

from localkit.nn import LocalMeanAttention, LocalTransformerLayer, kernel_attention

B, L, E, H = 2, 9, 16, 4


def close(a, b, atol=1e-5):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=atol, rtol=0)


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, E, generator=g)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[1, 6:] = True
    return x, padding


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_self_attn_replaced_inside_transformer_encoder_layer(mode):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True)
    reference = LocalTransformerLayer.from_torch(layer, kernel="gaussian")
    softmax = LocalTransformerLayer.from_torch(layer)
    original = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True)
    original.load_state_dict(layer.state_dict())
    layer.self_attn = LocalMeanAttention.from_torch(layer.self_attn, kernel="gaussian")
    for m in (layer, reference, softmax, original):
        getattr(m, mode)()
    x, padding = data()
    with torch.set_grad_enabled(mode == "train"):
        out = layer(x, src_key_padding_mask=padding)
        # the Gaussian kernel ran (eval mode's fused path would have given the softmax layer)
        close(out, reference(x, src_key_padding_mask=padding))
        assert (out - original(x, src_key_padding_mask=padding)).abs().max() > 1e-3
        close(softmax(x, src_key_padding_mask=padding), original(x, src_key_padding_mask=padding))
        causal = nn.Transformer.generate_square_subsequent_mask(L)
        close(layer(x, src_mask=causal, is_causal=True), reference(x, src_mask=causal, is_causal=True))


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_transformer_encoder_stacks_local_layers(mode):
    torch.manual_seed(1)
    torch_layer = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, batch_first=True)
    ref = nn.TransformerEncoder(torch_layer, num_layers=2, enable_nested_tensor=False)
    ours = nn.TransformerEncoder(LocalTransformerLayer.from_torch(torch_layer), num_layers=2,
                                 enable_nested_tensor=False)
    getattr(ref, mode)()
    getattr(ours, mode)()
    x, padding = data(1)
    causal = nn.Transformer.generate_square_subsequent_mask(L)
    with torch.set_grad_enabled(mode == "train"):
        for kwargs in ({}, {"src_key_padding_mask": padding}, {"mask": causal, "is_causal": True},
                       {"mask": torch.isinf(causal), "src_key_padding_mask": padding}):
            close(ours(x, **kwargs), ref(x, **kwargs))
    gauss = nn.TransformerEncoder(LocalTransformerLayer(E, H, 32, kernel="laplacian", window=3), num_layers=2,
                                  enable_nested_tensor=False).eval()
    out = gauss(x, src_key_padding_mask=padding)
    assert out.shape == x.shape and torch.all(torch.isfinite(out))


def test_need_weights_and_average_like_multihead_attention():
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    ours = LocalMeanAttention.from_torch(mha)
    x, padding = data(2)
    for average in (True, False):
        out, w = ours(x, x, x, key_padding_mask=padding, average_attn_weights=average)
        ref, ref_w = mha(x, x, x, key_padding_mask=padding, average_attn_weights=average)
        close(out, ref)
        close(w, ref_w)
    assert ours(x, x, x, need_weights=False)[1] is None


def test_device_and_dtype_like_torch_modules():
    attn = LocalMeanAttention(E, H, kernel="laplacian", learn_bandwidth=True, device="cpu", dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in attn.parameters())
    layer = LocalTransformerLayer(E, H, 32, kernel="epanechnikov", dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in layer.parameters())
    x, padding = data(3)
    out = layer(x.bfloat16(), src_key_padding_mask=padding)
    assert out.dtype == torch.bfloat16 and torch.all(torch.isfinite(out))
    out.float().sum().backward()
    assert all(torch.all(torch.isfinite(p.grad)) for p in layer.parameters() if p.grad is not None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel", ["softmax", "gaussian", "laplacian", "epanechnikov"])
def test_cuda_matches_cpu(kernel):
    q, k, v = (torch.randn(2, 2, 64, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    cpu = kernel_attention(q, k, v, kernel, bandwidth=None if kernel == "softmax" else 4.0, causal=True)
    gpu = kernel_attention(q.cuda(), k.cuda(), v.cuda(), kernel, bandwidth=None if kernel == "softmax" else 4.0,
                           causal=True)
    close(gpu.cpu(), cpu, atol=1e-4)
