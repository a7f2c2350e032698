"""localkit.nn modules dropped into PyTorch's own: nn.MultiheadAttention's call, self_attn inside
nn.TransformerEncoderLayer (eval mode: its native fast path must not bypass our kernel),
nn.TransformerEncoder stacking LocalTransformerLayer, device=/dtype=, CUDA against CPU."""
from contextlib import nullcontext

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
    gauss = nn.TransformerEncoder(LocalTransformerLayer(E, H, 32, batch_first=True, kernel="laplacian", window=3), num_layers=2,
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
    layer = LocalTransformerLayer(E, H, 32, batch_first=True, dtype=torch.bfloat16, kernel="epanechnikov")
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


# nn.MultiheadAttention's masks and unbatched input, against torch in float64 (round-off only)

L_Q, S_KV = 5, 7  # cross-attention: L != S catches a mask laid out the wrong way round


def mha_pair(batch_first=True):
    torch.manual_seed(4)
    mha = nn.MultiheadAttention(E, H, batch_first=batch_first, dtype=torch.float64)
    return mha, LocalMeanAttention.from_torch(mha)


def torch_mask(shape, kind, seed):
    """A bool mask (True = ignored, never a whole row) or a float one (log-weights, some -inf)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.rand(shape, generator=g, dtype=torch.float64) < 0.3
    out[..., 0] = False
    if kind == "float":
        out = torch.randn(shape, generator=g, dtype=torch.float64).masked_fill(out, -torch.inf)
    return out


def close64(a, b):
    close(a, b, atol=1e-12)


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("attn", [None, "2d", "3d"])
@pytest.mark.parametrize("kinds", [("bool", "bool"), ("float", "float"), ("bool", "float"), ("float", "bool")])
@pytest.mark.parametrize("batch_first", [True, False])
def test_masks_and_unbatched_input_like_multihead_attention(batched, attn, kinds, batch_first):
    mha, ours = mha_pair(batch_first)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(L_Q, E, generator=g, dtype=torch.float64)
    kv = torch.randn(S_KV, E, generator=g, dtype=torch.float64)
    padding = torch_mask((S_KV,), kinds[1], 6)
    stacked = (H, L_Q, S_KV)  # unbatched: one batch
    if batched:  # a batch of B sequences laid out as the module expects, the first one (q, kv)
        q = torch.stack([q, torch.randn(L_Q, E, generator=g, dtype=torch.float64)], dim=0 if batch_first else 1)
        kv = torch.stack([kv, torch.randn(S_KV, E, generator=g, dtype=torch.float64)], dim=0 if batch_first else 1)
        padding, stacked = torch_mask((B, S_KV), kinds[1], 6), (B * H, L_Q, S_KV)
    mask = {None: None, "2d": torch_mask((L_Q, S_KV), kinds[0], 7), "3d": torch_mask(stacked, kinds[0], 7)}[attn]
    for average in (True, False):
        kwargs = {"key_padding_mask": padding, "attn_mask": mask, "average_attn_weights": average}
        out, w = ours(q, kv, kv, **kwargs)
        with pytest.warns(UserWarning) if attn and kinds[0] != kinds[1] else nullcontext():  # torch: mismatched
            ref, ref_w = mha(q, kv, kv, **kwargs)
        assert out.shape == ref.shape and w.shape == ref_w.shape
        close64(out, ref)
        close64(w, ref_w)
        close64(ours(q, kv, kv, need_weights=False, **kwargs)[0], ref)


def test_unbatched_is_one_sequence_of_the_batch():
    _, ours = mha_pair()
    x = torch.randn(B, L, E, dtype=torch.float64)
    padding = torch_mask((B, L), "bool", 8)
    out, w = ours(x, key_padding_mask=padding, average_attn_weights=False)
    one, one_w = ours(x[1], key_padding_mask=padding[1], average_attn_weights=False)
    close64(one, out[1])
    close64(one_w, w[1])
    close64(ours.attention_weights(x[1]), ours.attention_weights(x)[1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layer_and_encoder_take_unbatched_input_like_torch(norm_first):
    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0, norm_first=norm_first, dtype=torch.float64).eval()
    ours = LocalTransformerLayer.from_torch(layer).eval()
    x = torch.randn(L, E, dtype=torch.float64)
    padding = torch_mask((L,), "bool", 9)
    causal = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    for kwargs in ({}, {"src_key_padding_mask": padding}, {"src_mask": torch_mask((H, L, L), "float", 10)},
                   {"src_mask": causal, "is_causal": True}):
        out = ours(x, **kwargs)
        assert out.shape == (L, E)
        close64(out, layer(x, **kwargs))
    encoders = [nn.TransformerEncoder(m, num_layers=2, enable_nested_tensor=False) for m in (layer, ours)]
    close64(encoders[1](x, src_key_padding_mask=padding), encoders[0](x, src_key_padding_mask=padding))


# the errors: torch raises AssertionError or RuntimeError; ours name the parameter and what is allowed

@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.complex64])
def test_masks_neither_bool_nor_floating_point_are_refused(batched, dtype):
    _, ours = mha_pair()
    x = torch.randn(*((B,) if batched else ()), L, E, dtype=torch.float64)
    padding = torch.zeros(x.shape[:-1], dtype=dtype)
    padding[..., -2:] = 1  # added as log-weights, these would be silently kept
    with pytest.raises(TypeError, match=r"key_padding_mask must be a bool or floating point tensor"):
        ours(x, key_padding_mask=padding)
    with pytest.raises(TypeError, match=r"attn_mask must be a bool or floating point tensor"):
        ours(x, attn_mask=torch.zeros(L, L, dtype=dtype))
    with pytest.raises(TypeError, match=r"attn_mask must be a bool or floating point tensor"):
        ours(x, attn_mask=torch.zeros(L, L, dtype=dtype), is_causal=True)  # checked even when not read
    with pytest.raises(TypeError, match=r"key_padding_mask must be a torch.Tensor or None, got list"):
        ours(x, key_padding_mask=padding.tolist())
    layer = LocalTransformerLayer(E, H, 32, batch_first=True, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"src_key_padding_mask must be a bool or floating point tensor"):
        layer(x, src_key_padding_mask=padding)
    with pytest.raises(TypeError, match=r"src_mask must be a bool or floating point tensor"):
        layer(x, src_mask=torch.zeros(L, L, dtype=dtype))


@pytest.mark.parametrize("shape", [(L, L + 1), (L + 1, L), (1, L), (L,), (B * H - 1, L, L), (B * H + 1, L, L),
                                   (B, H, L, L), (1, L, L), (H, L, L), (B * H, L, L + 1)])
def test_attn_mask_of_a_wrong_shape_is_refused(shape):
    _, ours = mha_pair()
    x = torch.randn(B, L, E, dtype=torch.float64)
    allowed = rf"\(L, S\) = \({L}, {L}\) or \(batch \* num_heads, L, S\) = \({B * H}, {L}, {L}\)"
    with pytest.raises(ValueError, match="attn_mask must have shape " + allowed):
        ours(x, attn_mask=torch.zeros(shape, dtype=torch.bool))
    if shape != (H, L, L):
        with pytest.raises(ValueError, match=r"attn_mask must have shape \(L, S\) .* or \(num_heads, L, S\)"):
            ours(x[0], attn_mask=torch.zeros(shape, dtype=torch.bool))


@pytest.mark.parametrize("shape", [(B, L + 1), (B, L - 1), (B + 1, L), (1, L), (L,), (B, 1, L), (B, L, 1), ()])
def test_key_padding_mask_of_a_wrong_shape_is_refused(shape):
    _, ours = mha_pair()
    x = torch.randn(B, L, E, dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"key_padding_mask must have shape \(batch, S\) = \({B}, {L}\)"):
        ours(x, key_padding_mask=torch.zeros(shape, dtype=torch.bool))
    if shape != (L,):
        with pytest.raises(ValueError, match=rf"key_padding_mask must have shape \(S,\) = \({L},\)"):
            ours(x[0], key_padding_mask=torch.zeros(shape, dtype=torch.bool))


def test_batched_and_unbatched_inputs_do_not_mix():
    _, ours = mha_pair()
    x = torch.randn(B, L, E, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"key must have shape \(seq, embed_dim\)"):
        ours(x[0], x, x)
    with pytest.raises(ValueError, match=r"value must have shape \(batch, seq, embed_dim\)"):
        ours(x, x, x[0])
    with pytest.raises(ValueError, match=r"query must have shape \(batch, seq, embed_dim\).*unbatched"):
        ours(x[None])



# kdim / vdim, add_bias_kv, add_zero_attn: torch's parameters, outputs, weights and gradients

def extras_pair(kdim, vdim, add_bias_kv, add_zero_attn, batch_first=True, bias=True):
    torch.manual_seed(6)
    mha = nn.MultiheadAttention(E, H, bias=bias, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, kdim=kdim,
                                vdim=vdim, batch_first=batch_first, dtype=torch.float64)
    return mha, LocalMeanAttention.from_torch(mha)


@pytest.mark.parametrize("kdim, vdim", [(None, None), (6, None), (None, 10), (6, 10)])
@pytest.mark.parametrize("add_bias_kv, add_zero_attn", [(False, False), (True, False), (False, True), (True, True)])
def test_extras_have_torchs_parameters(kdim, vdim, add_bias_kv, add_zero_attn):
    mha, ours = extras_pair(kdim, vdim, add_bias_kv, add_zero_attn)
    theirs = {name: p.shape for name, p in mha.named_parameters()}
    assert {name: p.shape for name, p in ours.named_parameters()} == theirs
    assert (ours.in_proj_weight is None) == (mha.in_proj_weight is None)
    assert (ours.bias_k is None) == (mha.bias_k is None) and ours.add_zero_attn == mha.add_zero_attn
    # a fresh module's state loads into torch's module with the same arguments, and back
    fresh = LocalMeanAttention(E, H, add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn, kdim=kdim, vdim=vdim,
                               dtype=torch.float64)
    assert {name: p.shape for name, p in fresh.named_parameters()} == theirs
    mha.load_state_dict(fresh.state_dict())


@pytest.mark.parametrize("kdim, vdim", [(None, None), (6, 10), (6, None)])
@pytest.mark.parametrize("add_bias_kv, add_zero_attn", [(True, False), (False, True), (True, True), (False, False)])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kinds", [("bool", "bool"), ("float", "float")])
@pytest.mark.parametrize("batched", [True, False])
def test_extras_equal_multihead_attention(kdim, vdim, add_bias_kv, add_zero_attn, batch_first, kinds, batched):
    """Outputs, weights (one column per appended key) and the gradients of the input and of
    every parameter, in float64: round-off only (measured <= 1e-14)."""
    mha, ours = extras_pair(kdim, vdim, add_bias_kv, add_zero_attn, batch_first)
    g = torch.Generator().manual_seed(8)
    shape = (B, L_Q) if batch_first else (L_Q, B)
    kv_shape = (B, S_KV) if batch_first else (S_KV, B)
    q = torch.randn(*shape, E, generator=g, dtype=torch.float64)
    k = torch.randn(*kv_shape, kdim or E, generator=g, dtype=torch.float64)
    v = torch.randn(*kv_shape, vdim or E, generator=g, dtype=torch.float64)
    padding, stacked = torch_mask((B, S_KV), kinds[1], 9), (B * H, L_Q, S_KV)
    if not batched:
        q, k, v = (t[0] if batch_first else t[:, 0] for t in (q, k, v))
        padding, stacked = padding[0], (H, L_Q, S_KV)
    q.requires_grad_(True)
    for mask in (None, torch_mask((L_Q, S_KV), kinds[0], 10), torch_mask(stacked, kinds[0], 11)):
        for average in (True, False):
            kwargs = {"key_padding_mask": padding, "attn_mask": mask, "average_attn_weights": average}
            out, w = ours(q, k, v, **kwargs)
            ref, ref_w = mha(q, k, v, **kwargs)
            extra = int(add_bias_kv) + int(add_zero_attn)
            assert out.shape == ref.shape and w.shape == ref_w.shape and w.shape[-1] == S_KV + extra
            close64(out, ref)
            close64(w, ref_w)
            close64(ours(q, k, v, need_weights=False, **kwargs)[0], ref)
        grads = dict(zip(["input"] + [n for n, _ in ours.named_parameters()],
                         torch.autograd.grad((out * out).sum(), [q] + list(ours.parameters()))))
        ref_grads = dict(zip(["input"] + [n for n, _ in mha.named_parameters()],
                             torch.autograd.grad((ref * ref).sum(), [q] + list(mha.parameters()))))
        assert grads.keys() == ref_grads.keys()
        for name in grads:
            close64(grads[name], ref_grads[name])


@pytest.mark.parametrize("add_bias_kv, add_zero_attn", [(True, False), (False, True), (True, True)])
def test_extras_with_a_causal_kernel_stay_visible(add_bias_kv, add_zero_attn):
    """is_causal=True hides j > i among the sequence's own keys; the appended keys stay visible to
    every query: torch's masked path (need_weights=True, or a key_padding_mask). torch's SDPA
    path (need_weights=False and no key_padding_mask) hides them from queries i < S, its
    causal mask being (L, S + 1), 0.42 off for bias_k: ours is the masked path's answer always."""
    mha, ours = extras_pair(None, None, add_bias_kv, add_zero_attn)
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    causal = nn.Transformer.generate_square_subsequent_mask(L, dtype=torch.float64)
    ref, ref_w = mha(x, x, x, attn_mask=causal)
    for need_weights in (True, False):
        out, w = ours(x, x, x, attn_mask=causal, is_causal=True, need_weights=need_weights)
        close64(out, ref)
        close64(ours(x, x, x, is_causal=True, need_weights=need_weights)[0], ref)  # no mask needed
        if need_weights:
            close64(w, ref_w)
    close64(ours.attention_weights(x, causal=True).mean(1), ref_w)
    close64(ours.attention_weights(x).mean(1), mha(x, x, x)[1])


def test_extras_with_other_kernels_and_local_linear_attention():
    from localkit.nn import LocalLinearAttention
    x = torch.randn(B, L, E, generator=torch.Generator().manual_seed(13))
    kv = torch.randn(B, L + 2, 6, generator=torch.Generator().manual_seed(14))
    for cls, kernel in ((LocalMeanAttention, "gaussian"), (LocalLinearAttention, "softmax")):
        attn = cls(E, H, kdim=6, vdim=6, add_bias_kv=True, add_zero_attn=True, batch_first=True, kernel=kernel)
        out, w = attn(x, kv, kv)
        assert out.shape == x.shape and w.shape == (B, L, L + 4) and torch.all(torch.isfinite(out))
        out.sum().backward()
        assert attn.bias_k.grad is not None and torch.all(torch.isfinite(attn.k_proj_weight.grad))
    assert "kdim=6, vdim=6, add_bias_kv=True, add_zero_attn=True" in repr(attn)

@pytest.mark.parametrize("ours,theirs", [(LocalMeanAttention, nn.MultiheadAttention),
                                         (LocalTransformerLayer, nn.TransformerEncoderLayer)])
def test_positional_parameters_and_defaults_are_torchs(ours, theirs):
    """The look-alike classes take torch's positional order and defaults (batch_first=False,
    the layer's dropout=0.1): ``LocalTransformerLayer(64, 4, 128, 0.1)`` means dropout=0.1, as in
    torch (it meant kernel=0.1), and the kernel's parameters are keyword-only."""
    import inspect

    def named(p):  # torch's default activation is F.relu, ours its name
        return p.name, getattr(p.default, "__name__", p.default)

    mine, torchs = inspect.signature(ours).parameters, inspect.signature(theirs).parameters
    assert [named(p) for p in list(mine.values())[:len(torchs)]] == [named(p) for p in torchs.values()]
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in list(mine.values())[len(torchs):])


def test_default_layout_is_sequence_first_like_torch():
    """A module built with defaults and put into a default nn.TransformerEncoderLayer attends
    within each sequence, as torch's (with batch_first=True as the default it attended across
    the batch: 0.90 off)."""
    torch.manual_seed(5)
    ref = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0).eval()
    layer = nn.TransformerEncoderLayer(E, H, 32, dropout=0.0).eval()
    layer.load_state_dict(ref.state_dict())
    mha = layer.self_attn
    layer.self_attn = LocalMeanAttention(E, H, dtype=mha.in_proj_weight.dtype)
    layer.self_attn.load_state_dict(mha.state_dict(), strict=False)
    x = torch.randn(L, B, E)  # (seq, batch, embed): torch's default layout
    close(layer(x), ref(x))
    close(LocalTransformerLayer.from_torch(ref)(x), ref(x))
    ours = LocalTransformerLayer(E, H, 32, dropout=0.0).eval()
    ours.load_state_dict(ref.state_dict(), strict=False)
    close(ours(x), ref(x))
