"""The Gaussian local mean on a CUDA device through array-API dispatch (torch tensors in, torch
tensors out), against a plain blocked-PyTorch baseline in the same run. Skips without CUDA."""

import os
import time

import numpy as np

TITLE = "Gaussian local mean on CUDA, float32, n = m = 262,144, d = 8 (array-API dispatch)"


def blocked_torch(Q, X, y, h, block=8192):
    """The plain PyTorch way: distances by a matrix product, a stable softmax per query block."""
    import torch

    out = torch.empty(len(Q), dtype=Q.dtype, device=Q.device)
    x_sq = (X * X).sum(1)
    for i in range(0, len(Q), block):
        q = Q[i:i + block]
        L = -((q * q).sum(1)[:, None] + x_sq[None, :] - 2 * q @ X.T) / (2 * h * h)
        out[i:i + block] = torch.softmax(L, dim=1) @ y
    return out


def _time(f, repeat, sync):
    times = []
    for _ in range(repeat):
        sync()
        t = time.perf_counter()
        out = f()
        sync()
        times.append(time.perf_counter() - t)
    return out, float(np.median(times))


def run(quick=False):
    import torch

    if not torch.cuda.is_available():
        return "Skipped: no CUDA device on this machine (the benchmark needs one)."
    import sklearn

    from localkit import local_mean

    os.environ.setdefault("SCIPY_ARRAY_API", "1")
    n, d, h, repeat = (32_768, 8, 1.0, 3) if quick else (262_144, 8, 1.0, 5)
    g = torch.Generator(device="cuda").manual_seed(0)
    X = torch.randn(n, d, device="cuda", generator=g)
    Q = torch.randn(n, d, device="cuda", generator=g)
    y = torch.sin(X[:, 0])
    sync = torch.cuda.synchronize
    with sklearn.config_context(array_api_dispatch=True):
        local_mean(Q[:1024], X, y, bandwidth=h)  # warm-up
        ours, t_ours = _time(lambda: local_mean(Q, X, y, bandwidth=h), repeat, sync)
        ref = local_mean(Q[:4096].double(), X.double(), y.double(), bandwidth=h)
    base, t_base = _time(lambda: blocked_torch(Q, X, y, h), repeat, sync)
    rel = float((ours[:4096].double() - ref).abs().max() / ref.abs().max())
    rel_base = float((base[:4096].double() - ref).abs().max() / ref.abs().max())
    pairs = float(n) * n
    return "\n".join([
        f"{torch.cuda.get_device_name()}, n_queries = n_samples = {n:,}, d = {d}, h = {h}, float32, "
        f"medians of {repeat} runs; relative error against float64 on the first 4,096 queries.", "",
        "| implementation | time | G pairs/s | relative error |", "|---|---|---|---|",
        f"| localkit (array-API dispatch, streamed) | {t_ours * 1e3:.1f} ms | {pairs / t_ours / 1e9:.1f} | {rel:.1e} |",
        f"| plain blocked PyTorch (softmax per block) | {t_base * 1e3:.1f} ms | {pairs / t_base / 1e9:.1f} | "
        f"{rel_base:.1e} |",
    ])
