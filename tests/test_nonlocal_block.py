"""NonLocalBlock (Wang et al., CVPR 2018): identity at initialisation, its formula, non-locality,
gradients for every kernel, and memory far below one dense map at 16,384 positions."""
import subprocess
import sys
import textwrap

import pytest
import torch

from localkit.kernels.profiles import PROFILES
from localkit.nn import NonLocalBlock

KERNELS = ["softmax"] + sorted(PROFILES)
SHAPES = {1: (2, 6, 17), 2: (2, 6, 7, 9), 3: (2, 6, 4, 5, 6)}


def _perturbed(block, seed=0):
    """Move ``W`` (and its batch norm) away from the zero start, so the attention path shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in block.W.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return block


@pytest.mark.parametrize("dim", [1, 2, 3])
@pytest.mark.parametrize("sub_sample", [False, True])
@pytest.mark.parametrize("bn_layer", [False, True])
def test_fresh_block_is_the_identity_and_keeps_shapes(dim, sub_sample, bn_layer):
    torch.manual_seed(0)
    block = NonLocalBlock(6, dim=dim, sub_sample=sub_sample, bn_layer=bn_layer)
    x = torch.randn(SHAPES[dim])
    assert torch.equal(block(x), x)
    out = _perturbed(block)(x)
    assert out.shape == x.shape and not torch.allclose(out, x)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_matches_the_formula(kernel):
    torch.manual_seed(0)
    block = _perturbed(NonLocalBlock(6, dim=2, kernel=kernel, inter_channels=4, bn_layer=False, bandwidth=1.5))
    block = block.double()
    x = torch.randn(2, 6, 5, 7, dtype=torch.float64)
    flat = x.flatten(2)  # (N, C, L)
    emb = lambda conv: torch.einsum("oc,ncl->nlo", conv.weight[:, :, 0, 0], flat) + conv.bias
    th, ph, g = emb(block.theta), emb(block.phi), emb(block.g)
    if kernel == "softmax":
        log_k = th @ ph.transpose(1, 2) / 1.5                      # exp(<theta, phi> / h)
    else:
        log_k = -torch.cdist(th, ph) ** 2 / (2 * 1.5 ** 2)         # exp(-|theta - phi|^2 / 2h^2)
    y = torch.softmax(log_k, dim=-1) @ g                            # the local mean over all positions
    z = torch.einsum("oc,nlc->nol", block.W.weight[:, :, 0, 0], y) + block.W.bias[:, None] + flat
    torch.testing.assert_close(block(x), z.reshape(x.shape), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_a_change_at_one_corner_reaches_the_opposite_corner(kernel):
    torch.manual_seed(0)
    block = _perturbed(NonLocalBlock(4, dim=2, kernel=kernel, bn_layer=False))
    x = torch.randn(1, 4, 16, 16)
    moved = x.clone()
    moved[..., 0, 0] += 3.0
    with torch.no_grad():
        change = (block(moved) - block(x))[..., -1, -1].abs().max()
    assert change > 1e-4  # a 1x1 convolution network would leave (15, 15) untouched


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradients_are_finite_for_every_kernel(kernel):
    torch.manual_seed(0)
    block = _perturbed(NonLocalBlock(6, dim=2, kernel=kernel))
    x = torch.randn(2, 6, 6, 5, requires_grad=True)
    block(x).square().sum().backward()
    grads = [x.grad] + [p.grad for p in block.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert x.grad.abs().sum() > 0


@pytest.mark.parametrize("kernel", ["softmax", "gaussian"])
def test_memory_at_16384_positions_is_far_below_one_dense_map(kernel):
    """Peak resident memory of one forward pass on a 128 x 128 map, in a fresh process; one dense
    float32 weight map would take 16,384^2 x 4 B = 1,024 MiB."""
    script = textwrap.dedent(f"""
        import resource, torch
        from localkit.nn import NonLocalBlock
        torch.manual_seed(0)
        block = NonLocalBlock(4, dim=2, kernel={kernel!r}, inter_channels=2, bn_layer=False)
        torch.nn.init.normal_(block.W.weight)
        x = torch.randn(1, 4, 128, 128)
        with torch.no_grad():
            block(torch.randn(1, 4, 8, 8))  # load the kernels before the baseline
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            out = block(x)
            after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        assert torch.isfinite(out).all()
        print((after - before) / 1024)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout.split()[-1]) < 64  # MiB; measured ~10 MiB, the dense map is 1,024 MiB


@pytest.mark.parametrize("kwargs, error, match", [
    ({"in_channels": 0}, ValueError, "in_channels"), ({"in_channels": 2.5}, ValueError, "in_channels"),
    ({"in_channels": True}, ValueError, "in_channels"), ({"dim": 4}, ValueError, "dim"),
    ({"dim": True}, ValueError, "dim"), ({"kernel": "nope"}, ValueError, "kernel|profile"),
    ({"inter_channels": 0}, ValueError, "inter_channels"), ({"sub_sample": "yes"}, TypeError, "sub_sample"),
    ({"bn_layer": 1}, TypeError, "bn_layer"), ({"bandwidth": -1.0}, ValueError, "bandwidth"),
    ({"bandwidth": float("nan")}, ValueError, "bandwidth"),
])
def test_bad_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        NonLocalBlock(**{"in_channels": 4, **kwargs})


def test_bad_inputs():
    block = NonLocalBlock(4, dim=2)
    with pytest.raises(ValueError, match="shape"):
        block(torch.randn(1, 3, 5, 5))
    with pytest.raises(ValueError, match="shape"):
        block(torch.randn(1, 4, 5))
    with pytest.raises(TypeError, match="floating"):
        block(torch.ones(1, 4, 5, 5, dtype=torch.long))
    with pytest.raises(TypeError, match="Tensor"):
        block([[0.0]])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu_and_stays_far_below_one_dense_map():
    torch.manual_seed(0)
    block = _perturbed(NonLocalBlock(16, dim=2, inter_channels=8, bn_layer=False))
    x = torch.randn(1, 16, 128, 128)
    # cuDNN runs float32 convolutions in TF32 by default (a 10-bit mantissa); compare IEEE float32
    tf32, torch.backends.cudnn.allow_tf32 = torch.backends.cudnn.allow_tf32, False
    with torch.no_grad():
        expected = block(x)
        gpu = block.cuda()
        xc = x.cuda()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = gpu(xc)
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    torch.backends.cudnn.allow_tf32 = tf32
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)
    assert peak < 64  # MiB; one dense float32 map of 16,384^2 weights is 1,024 MiB
