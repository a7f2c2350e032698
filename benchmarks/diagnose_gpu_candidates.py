"""Candidate CUDA paths for the attention kernels that missed their bars (a GPU diagnosis).

On an H200 (``benchmarks/RESULTS.md``, section gpu_h200) the Gaussian kernel through SDPA with its
key bias folded into one more head dimension took 1.57-1.84x SDPA's time and 1.6x its memory (bar:
1.25x), and the Laplacian and compact profiles through FlexAttention 5.5x (bar: 3x fwd+bwd). Each
candidate here computes the same kernel another way; every row gives forward and forward+backward
time, peak memory (all next to SDPA's softmax in the same run) and the forward's error against the
float64 formula on the first batch and head:

- Gaussian, folded (``q' = [c q, 1]``, ``k' = [k, -c |k|^2 / 2]``, head dimension 72), under each of
  SDPA's CUDA backends (flash takes its 96-wide template for 72; cuDNN and the memory-efficient
  kernel take 72 as it is);
- Gaussian, the key bias as a ``(B, H, L, S)`` mask expanded from ``(B, H, 1, S)`` (stride 0, never
  materialised), forward with the bias detached (its backward would form the ``(L, S)`` gradient
  of the mask: the row's backward is a lower bound of a custom one);
- Gaussian and Laplacian / Epanechnikov through FlexAttention on the raw ``q, k`` (head dimension
  64, centred by the keys' mean), the squared norms gathered per query and key in ``score_mod``
  (the engine's path multiplies augmented features of width 80 instead), with FlexAttention's
  default tiles and with ``--options`` tiles.

    python benchmarks/diagnose_gpu_candidates.py [--seconds 200] [--smoke]

``--smoke`` runs every candidate that exists on the CPU at a small size, forward only (a check of
the script and of the candidates' formulas, not a measurement). Rows print as they are measured, so a run cut short keeps what it measured.
"""
import argparse
import math
import time

import torch
import torch.nn.functional as F

from bench_attention import _bandwidth, _gpu_time, _qkv, _reference
from localkit.kernels.profiles import PROFILES
from localkit.nn import kernel_attention

TILES = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2}


def _centred(q, k):
    centre = k.mean(-2, keepdim=True)
    return q - centre, k - centre


def gaussian_folded(q, k, v, c):
    """SDPA on the bias folded into a 72-wide head dimension, scale 1 (the path as submitted)."""
    q, k = _centred(q, k)
    dim = -(-(q.shape[-1] + 1) // 8) * 8
    pad = lambda t: F.pad(t, (0, dim - t.shape[-1]))
    qf = pad(torch.cat([q * c, torch.ones_like(q[..., :1])], -1))
    kf = pad(torch.cat([k, -0.5 * c * (k * k).sum(-1, keepdim=True)], -1))
    return F.scaled_dot_product_attention(qf, kf, pad(v), scale=1.0)[..., :v.shape[-1]]


def gaussian_mask(q, k, v, c):
    """SDPA with the key bias as a stride-0 ``(B, H, L, S)`` mask, detached (forward timing only)."""
    q, k = _centred(q, k)
    bias = (-0.5 * c * (k * k).sum(-1)).detach().unsqueeze(-2)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.expand(*q.shape[:-1], k.shape[-2]), scale=c)


def flex_raw(kernel, options=None):
    """FlexAttention on the raw (centred) ``q, k``: ``u^2 = c (|q|^2 + |k|^2 - 2 q . k)`` in ``score_mod``."""
    from torch.nn.attention.flex_attention import flex_attention

    compiled = torch.compile(flex_attention, dynamic=False) if torch.cuda.is_available() else flex_attention
    log_k = None if kernel == "gaussian" else PROFILES[kernel].log_k_for(torch)

    def call(q, k, v, c):
        q, k = _centred(q, k)
        kn = (k.float() * k.float()).sum(-1)
        if log_k is None:  # the row's |q|^2 cancels in the normalisation
            mod = lambda s, b, h, qi, ki: c * s - 0.5 * c * kn[b, h, ki]  # noqa: E731
        else:
            qn = (q.float() * q.float()).sum(-1)
            mod = lambda s, b, h, qi, ki: log_k(torch.clamp(c * (qn[b, h, qi] + kn[b, h, ki] - 2 * s), min=0.0))  # noqa: E731
        return compiled(q, k, v, score_mod=mod, scale=1.0, kernel_options=options)

    return call


def candidates(cuda):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def under(backend, f):
        def call(*args):
            with sdpa_kernel(backend):
                return f(*args)
        return call

    rows = [("gaussian", "SDPA folded, default backend", gaussian_folded)]
    if cuda:
        rows += [("gaussian", f"SDPA folded, {b.name}", under(b, gaussian_folded))
                 for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)]
        rows += [("gaussian", f"SDPA stride-0 bias mask (detached), {b.name}", under(b, gaussian_mask))
                 for b in (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)]
    else:
        rows += [("gaussian", "SDPA stride-0 bias mask (detached)", gaussian_mask)]
    for kernel in ("gaussian", "laplacian", "epanechnikov"):
        if kernel != "gaussian":
            rows.append((kernel, "localkit as submitted (FlexAttention on features of width 80)",
                         lambda q, k, v, c, kernel=kernel: kernel_attention(q, k, v, kernel,
                                                                            bandwidth=1 / math.sqrt(c))))
        rows.append((kernel, "FlexAttention raw q, k, default tiles", flex_raw(kernel)))
        if cuda:
            rows.append((kernel, f"FlexAttention raw q, k, {TILES}", flex_raw(kernel, TILES)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=200.0, help="stop starting new rows after this long")
    parser.add_argument("--smoke", action="store_true", help="a small CPU run that checks the script")
    args = parser.parse_args()
    cuda = torch.cuda.is_available() and not args.smoke
    deadline = time.perf_counter() + args.seconds
    B, H, L, d = (4, 8, 4096, 64) if cuda else (1, 2, 128, 16)
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    q, k, v = _qkv(B, H, L, d, device, dtype, grad=cuda)
    timer = _gpu_time if cuda else (lambda f: (f(), 0.0)[1])
    peak = torch.cuda.max_memory_allocated if cuda else (lambda: 0)
    print(f"B={B} H={H} L={L} d={d} {dtype}, {torch.cuda.get_device_name() if cuda else 'CPU smoke run'}, "
          f"torch {torch.__version__}", flush=True)
    print("| kernel | candidate | fwd | fwd vs SDPA | fwd+bwd | fwd+bwd vs SDPA | peak memory vs SDPA | error |",
          flush=True)
    print("|---|---|---|---|---|---|---|---|", flush=True)
    base = None
    for kernel, name, f in [("softmax", "SDPA", lambda q, k, v, c: F.scaled_dot_product_attention(q, k, v))] \
            + candidates(cuda):
        if time.perf_counter() > deadline:
            print(f"(stopped: --seconds {args.seconds:.0f} spent)", flush=True)
            break
        h = _bandwidth(kernel, d) if kernel != "softmax" else math.sqrt(d)
        c = 1 / h ** 2
        try:
            fwd = lambda: f(q, k, v, c)  # noqa: E731
            both = (lambda: fwd().sum().backward()) if cuda else fwd  # CPU FlexAttention: no backward
            t_fwd, t_both = timer(fwd), timer(both)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated() if cuda else 0
            both()
            mem = peak() - before
            with torch.no_grad():
                out = f(q[:1, :1], k[:1, :1], v[:1, :1], c).double().cpu()
            ref = _reference(*(t[:1, :1].detach().cpu() for t in (q, k, v)), kernel, h if kernel != "softmax" else
                             math.sqrt(d))
            err = ((out - ref).abs().max() / ref.abs().max()).item()
        except Exception as exc:  # a backend that refuses the shape: say why and go on
            print(f"| {kernel} | {name} | refused: {type(exc).__name__}: {str(exc).splitlines()[0][:120]} |",
                  flush=True)
            continue
        base = base or (t_fwd, t_both, mem)
        ratio = lambda a, b: f"{a / b:.2f}x" if b else "-"  # noqa: E731
        print(f"| {kernel} | {name} | {t_fwd * 1e3:.2f} ms | {ratio(t_fwd, base[0])} | {t_both * 1e3:.2f} ms | "
              f"{ratio(t_both, base[1])} | {ratio(mem, base[2])} | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
