"""Nadaraya–Watson prediction: localkit's engine against KeOps (CPU), plain blocked numpy and
statsmodels, in one process, on the same data. Throughput in kernel pairs per second."""

import os

import numpy as np
from localkit._timing import interleaved, machine_rates, median_time, rates_line

TITLE = "Nadaraya-Watson prediction, Gaussian, float64 and float32 (engine throughput)"


def numpy_blocked(Q, X, y, h, block=1000):
    """The plain numpy way: squared distances by a matrix product, exp, weighted sums."""
    out = np.empty(len(Q))
    x_sq = (X * X).sum(1)
    for i in range(0, len(Q), block):
        q = Q[i:i + block]
        D2 = (q * q).sum(1)[:, None] + x_sq[None, :] - 2 * q @ X.T
        K = np.exp(-D2 / (2 * h * h))
        out[i:i + block] = K @ y / K.sum(1)
    return out


def keops_nw(Q, X, y, h):
    from pykeops.numpy import LazyTensor

    q, x = LazyTensor(Q[:, None, :] / h), LazyTensor(X[None, :, :] / h)
    v = LazyTensor(y[None, :, None])
    return (-((q - x) ** 2).sum(-1) / 2).sumsoftmaxweight(v, axis=1)[:, 0]


def run(quick=False):
    from statsmodels.nonparametric.kernel_regression import KernelReg
    from threadpoolctl import threadpool_info

    from localkit import local_mean

    n, d, h, repeat = (4000, 8, 1.0, 2) if quick else (20_000, 8, 1.0, 5)
    rng = np.random.default_rng(0)
    X, Q = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    pairs = float(n) * n

    keops_nw(Q[:200], X[:200], y[:200], h)  # compile outside the timing
    Q32, X32, y32 = Q.astype(np.float32), X.astype(np.float32), y.astype(np.float32)
    # run alternately, so that a shared machine's load falls on the three alike
    (t_ours, t_ours32, t_keops), (ours, ours32, keops) = interleaved(
        [lambda: local_mean(Q, X, y, bandwidth=h, n_jobs=-1),
         lambda: local_mean(Q32, X32, y32, bandwidth=h, n_jobs=-1),
         lambda: keops_nw(Q, X, y, h)], repeat, warmup=True)
    rel32 = np.abs(ours32 - ours).max() / np.abs(ours).max()
    plain, t_plain = median_time(lambda: numpy_blocked(Q, X, y, h), min(repeat, 3))
    m = 1000 if quick else 2000
    sm, t_sm = median_time(lambda: KernelReg(y[:m], X[:m], var_type="c" * d, reg_type="lc", bw=[h] * d)
                            .fit(Q[:m])[0], 1)
    ours_small = local_mean(Q[:m], X[:m], y[:m], bandwidth=h)

    blas = ", ".join(f"{i['internal_api']} {i.get('version')} ({i.get('architecture')})" for i in threadpool_info()
                     if i["user_api"] == "blas")
    rows = [
        ("localkit (engine, 2 threads)", n, t_ours, pairs, 0.0),
        ("localkit float32 (engine, 2 threads)", n, t_ours32, pairs, np.abs(ours32 - ours).max()),
        ("KeOps CPU (pykeops)", n, t_keops, pairs, np.abs(keops - ours).max()),
        ("plain blocked numpy", n, t_plain, pairs, np.abs(plain - ours).max()),
        ("statsmodels KernelReg lc", m, t_sm, float(m) * m, np.abs(sm - ours_small).max()),
    ]
    lines = [f"n_queries = n_samples = {n:,}, d = {d}, h = {h}; localkit and KeOps: medians of {repeat} "
             f"interleaved runs; plain numpy: median of {min(repeat, 3)}; statsmodels: one run at n = {m:,}. "
             f"BLAS: {blas}. The machine has 2 cores and was shared with other work while this ran (load "
             f"average {os.getloadavg()[0]:.1f} at the end): compare ratios within the table, not times across runs.",
             "",
             "| implementation | n | time | G pairs/s | localkit speed-up | max abs diff vs localkit |",
             "|---|---|---|---|---|---|"]
    g_ours = pairs / t_ours / 1e9
    for name, size, t, p, diff in rows:
        g = p / t / 1e9
        lines.append(f"| {name} | {size:,} | {t:.3f} s | {g:.3f} | {g_ours / g:.1f}x | {diff:.1e} |")
    lines += ["", f"float32 against float64: {t_ours / t_ours32:.2f}x faster, relative error {rel32:.1e} "
              "(max |diff| / max |mean|).", "", rates_line(machine_rates())]
    return "\n".join(lines)
