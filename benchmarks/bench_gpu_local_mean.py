"""The Gaussian local mean on a CUDA device through array-API dispatch (torch tensors in, torch
tensors out), against plain PyTorch baselines in the same run. Skips without CUDA.

Rows: localkit's default (FlexAttention calls over chunks of 8,192 samples,
:func:`localkit.engine.backends.array_api.flex_sums`), localkit's streamed blocks (the path taken when the
fused one does not fit: ``block_size`` given), the same mean as one call of our Triton attention
kernel (:mod:`localkit.fused.triton_attention`, float32 sums Kahan-compensated per block), a plain
blocked PyTorch softmax, and PyTorch's fused ``scaled_dot_product_attention`` with the Gaussian's
key bias folded into one more head dimension (what one fused call reaches without a log-sum-exp).
"""

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


def folded_sdpa(Q, X, y, h):
    """``softmax(q . x / h^2 - |x|^2 / 2h^2) y`` as one SDPA call: ``q' = [q / h^2, 1]``,
    ``x' = [x, -|x|^2 / 2h^2]`` (padded to 16 features), values padded to 16 columns."""
    import torch
    import torch.nn.functional as F

    centre = X.mean(0)
    Q, X = Q - centre, X - centre
    pad = lambda t: F.pad(t, (0, 16 - t.shape[1]))  # noqa: E731
    q = pad(torch.cat([Q / h ** 2, torch.ones_like(Q[:, :1])], 1))
    k = pad(torch.cat([X, -0.5 * (X * X).sum(1, keepdim=True) / h ** 2], 1))
    v = pad(y[:, None])
    return F.scaled_dot_product_attention(q[None, None], k[None, None], v[None, None], scale=1.0)[0, 0, :, 0]


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
        return None  # the runner keeps the section a GPU machine wrote
    import sklearn

    from localkit import local_mean
    from localkit.nn import kernel_attention

    os.environ.setdefault("SCIPY_ARRAY_API", "1")
    n, d, h, repeat = (32_768, 8, 1.0, 3) if quick else (262_144, 8, 1.0, 5)
    g = torch.Generator(device="cuda").manual_seed(0)
    X = torch.randn(n, d, device="cuda", generator=g)
    Q = torch.randn(n, d, device="cuda", generator=g)
    y = torch.sin(X[:, 0])
    sync = torch.cuda.synchronize
    check = 4096
    with sklearn.config_context(array_api_dispatch=True):
        sync()
        t0 = time.perf_counter()
        local_mean(Q[:1024], X, y, bandwidth=h)  # the first call compiles the fused kernel
        sync()
        first = time.perf_counter() - t0
        cases = [("localkit (array-API dispatch: FlexAttention per 8,192 samples)", lambda: local_mean(Q, X, y, bandwidth=h)),
                 ("localkit streamed blocks (block_size=8192)",
                  lambda: local_mean(Q, X, y, bandwidth=h, block_size=8192)),
                 ("localkit.nn.kernel_attention (our Triton kernel, compensated sums)",
                  lambda: kernel_attention(Q[None], X[None], y[None, :, None], "gaussian", bandwidth=h)[0, :, 0]),
                 ("plain blocked PyTorch (softmax per block)", lambda: blocked_torch(Q, X, y, h)),
                 ("PyTorch SDPA, key bias folded into d + 1 (no log-sum-exp)", lambda: folded_sdpa(Q, X, y, h))]
        ref = local_mean(Q[:check].double(), X.double(), y.double(), bandwidth=h)
        rows = []
        for name, f in cases:
            f()  # warm-up
            out, t = _time(f, repeat, sync)
            rel = float((out[:check].double() - ref).abs().max() / ref.abs().max())
            rows.append(f"| {name} | {t * 1e3:.1f} ms | {float(n) * n / t / 1e9:.1f} | {rel:.1e} |")
    return "\n".join([
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, n_queries = n_samples = {n:,}, d = {d}, "
        f"h = {h}, float32, medians of {repeat} runs after a warm-up; relative error against float64 on the "
        f"first {check:,} queries. First call (FlexAttention compiles once per process): {first:.1f} s.", "",
        "| implementation | time | G pairs/s | relative error |", "|---|---|---|---|", *rows])


if __name__ == "__main__":
    print(run())
