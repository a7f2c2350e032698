"""localkit.nn modules against nn.MultiheadAttention and nn.TransformerEncoderLayer (1e-5, float32)."""
import math

import numpy as np
import pytest

import torch
from torch import nn  # noqa: E402

from localkit.nn import (LocalLinearAttention, LocalMeanAttention, LocalTransformer,  # noqa: E402
                         LocalTransformerLayer)

TOL = 1e-5
B, L, E, H = 3, 11, 32, 4


def inputs(seed=0, batch_first=True):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, L, E, generator=g)
    padding = torch.zeros(B, L, dtype=torch.bool)
    padding[0, 8:] = True
    padding[2, 5:] = True
    return (x if batch_first else x.transpose(0, 1)), padding


def causal_mask(n=L):
    return nn.Transformer.generate_square_subsequent_mask(n)


def close(a, b):
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), atol=TOL, rtol=0)


# --- LocalMeanAttention = nn.MultiheadAttention ------------------------------------------------
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_attention_equals_multihead_attention(batch_first, bias):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first)
    ours = LocalMeanAttention.from_torch(mha)
    x, padding = inputs(batch_first=batch_first)
    for kwargs in ({}, {"attn_mask": causal_mask(), "is_causal": True}, {"key_padding_mask": padding},
                   {"key_padding_mask": padding, "attn_mask": causal_mask() < 0}):
        for need_weights in (False, True):  # the same call, the same (output, weights) pair
            out, w = ours(x, x, x, need_weights=need_weights, **kwargs)
            ref, ref_w = mha(x, x, x, need_weights=need_weights, **kwargs)
            close(out, ref)
            assert (w is None) == (ref_w is None)
            if w is not None:
                close(w, ref_w)


def test_attention_cross_float_and_per_head_masks():
    torch.manual_seed(1)
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    ours = LocalMeanAttention.from_torch(mha)
    x, _ = inputs()
    memory = torch.randn(B, 7, E)
    float_mask = torch.randn(L, 7)
    close(ours(x, memory, memory, attn_mask=float_mask)[0], mha(x, memory, memory, attn_mask=float_mask)[0])
    per_head = torch.rand(B * H, L, 7) > 0.5
    per_head[..., 0] = False
    close(ours(x, memory, memory, attn_mask=per_head)[0], mha(x, memory, memory, attn_mask=per_head)[0])
    # gradients flow to the same parameters with the same values
    ours(x, memory, memory)[0].sum().backward()
    mha(x, memory, memory)[0].sum().backward()
    close(ours.in_proj_weight.grad, mha.in_proj_weight.grad)


def test_attention_weights_equal_multihead_attention_weights():
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    x, _ = inputs()
    w = LocalMeanAttention.from_torch(mha).attention_weights(x)
    close(w, mha(x, x, x, average_attn_weights=False)[1])


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian", "epanechnikov"])
def test_other_kernels_run_and_learn_bandwidth(kernel):
    torch.manual_seed(3)
    attn = LocalMeanAttention(E, H, batch_first=True, kernel=kernel, learn_bandwidth=True)
    x, padding = inputs()
    out, _ = attn(x, key_padding_mask=padding, need_weights=False, is_causal=True)
    assert out.shape == x.shape and torch.all(torch.isfinite(out))
    out.square().sum().backward()
    assert attn.log_bandwidth.grad is not None and torch.all(torch.isfinite(attn.log_bandwidth.grad))
    assert attn.log_bandwidth.grad.abs().sum() > 0


def test_local_linear_attention_module():
    torch.manual_seed(4)
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    lin = LocalLinearAttention.from_torch(mha, ridge=1e6)  # huge ridge: back to the local mean
    x, padding = inputs()
    close(lin(x, x, x, key_padding_mask=padding, need_weights=False, is_causal=True)[0],
          mha(x, x, x, key_padding_mask=padding, attn_mask=causal_mask() < 0, is_causal=True)[0])
    lin = LocalLinearAttention.from_torch(mha, ridge=1e-2)
    out = lin(x, x, x, need_weights=False, is_causal=True)[0]
    assert torch.all(torch.isfinite(out)) and (out - mha(x, x, x)[0]).abs().max() > 1e-3


# --- LocalTransformerLayer = nn.TransformerEncoderLayer ----------------------------------------
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_layer_equals_transformer_encoder_layer(norm_first, mode, activation):
    torch.manual_seed(5)
    ref = nn.TransformerEncoderLayer(E, H, 64, dropout=0.0, activation=activation, batch_first=True,
                                     norm_first=norm_first)
    ours = LocalTransformerLayer.from_torch(ref)
    getattr(ref, mode)()
    getattr(ours, mode)()
    x, padding = inputs()
    with torch.set_grad_enabled(mode == "train"):
        for kwargs in ({}, {"src_mask": causal_mask(), "is_causal": True}, {"src_key_padding_mask": padding},
                       {"src_mask": causal_mask() < 0, "src_key_padding_mask": padding, "is_causal": True}):
            close(ours(x, **kwargs), ref(x, **kwargs))


def test_layer_not_batch_first_and_kernel_choice():
    torch.manual_seed(6)
    ref = nn.TransformerEncoderLayer(E, H, 64, dropout=0.0, norm_first=True)
    ours = LocalTransformerLayer.from_torch(ref)
    x, _ = inputs(batch_first=False)
    close(ours(x, src_mask=causal_mask(), is_causal=True), ref(x, src_mask=causal_mask(), is_causal=True))
    gauss = LocalTransformerLayer.from_torch(ref, kernel="gaussian")
    assert gauss.self_attn.kernel == "gaussian"
    assert torch.allclose(gauss.linear1.weight, ref.linear1.weight)
    lin = LocalTransformerLayer.from_torch(ref, local_model="linear", ridge=1e-2)
    assert isinstance(lin.self_attn, LocalLinearAttention) and torch.all(torch.isfinite(lin(x)))


# --- LocalTransformer -------------------------------------------------------------------------
@pytest.mark.parametrize("kernel,local_model", [("softmax", "mean"), ("gaussian", "mean"), ("softmax", "linear")])
def test_language_model_is_causal(kernel, local_model):
    torch.manual_seed(7)
    model = LocalTransformer(50, 16, d_model=16, nhead=2, num_layers=2, kernel=kernel, local_model=local_model)
    idx = torch.randint(0, 50, (2, 16))
    later = idx.clone()
    later[:, 10:] = (later[:, 10:] + 1) % 50
    a, b = model(idx), model(later)
    assert a.shape == (2, 16, 50)
    close(a[:, :10], b[:, :10])  # changing the future leaves the past untouched
    assert (a[:, 10:] - b[:, 10:]).abs().max() > 1e-4


# --- bad input ----------------------------------------------------------------------------------
def test_bad_input():
    with pytest.raises(ValueError, match="divisible"):
        LocalMeanAttention(30, 4)
    with pytest.raises(ValueError, match="num_heads"):
        LocalMeanAttention(32, 0)
    with pytest.raises(ValueError, match="kernel must be one of"):
        LocalMeanAttention(32, 4, kernel="sigmoid")
    for bad in (0.0, -2.0, math.inf):
        with pytest.raises(ValueError, match="bandwidth"):
            LocalMeanAttention(32, 4, bandwidth=bad)
    with pytest.raises(ValueError, match="dropout"):
        LocalMeanAttention(32, 4, dropout=1.5)
    with pytest.raises(ValueError, match="ridge"):
        LocalLinearAttention(32, 4, ridge=0.0)
    attn = LocalMeanAttention(32, 4, batch_first=True)
    with pytest.raises(ValueError, match="embed_dim=32"):
        attn(torch.randn(2, 5, 31))
    with pytest.raises(ValueError, match="embed_dim=32"):
        attn(torch.randn(1, 2, 5, 32))
    with pytest.raises(ValueError, match="batch size"):
        attn(torch.randn(2, 5, 32), torch.randn(3, 5, 32))
    with pytest.raises(ValueError, match="key_padding_mask"):
        attn(torch.randn(2, 5, 32), key_padding_mask=torch.zeros(3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        attn(torch.randn(2, 5, 32), attn_mask=torch.zeros(4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="MultiheadAttention"):
        LocalMeanAttention.from_torch(nn.Linear(3, 3))
    for bad in ({"kdim": 0}, {"vdim": 2.5}, {"kdim": True}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a positive integer or None"):
            LocalMeanAttention(32, 4, **bad)
    for bad in ({"add_bias_kv": 2}, {"add_zero_attn": "yes"}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be True or False"):
            LocalMeanAttention(32, 4, **bad)
    with pytest.raises(ValueError, match=r"key must have shape \(batch, seq, kdim\) with kdim=8"):
        LocalMeanAttention(32, 4, kdim=8, batch_first=True)(torch.randn(2, 5, 32), torch.randn(2, 5, 32))
    with pytest.raises(ValueError, match="local_model"):
        LocalTransformerLayer(32, 4, 64, local_model="quadratic")
    with pytest.raises(ValueError, match="activation"):
        LocalTransformerLayer(32, 4, 64, activation="tanh")
    with pytest.raises(ValueError, match="dim_feedforward"):
        LocalTransformerLayer(32, 4, 0)
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        LocalTransformerLayer.from_torch(nn.MultiheadAttention(32, 4))
    model = LocalTransformer(10, 8, d_model=16, nhead=2, num_layers=1)
    with pytest.raises(ValueError, match="max_len"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        model(torch.zeros(1, 4))
