"""The engine against the machine's arithmetic limit (issue 28): pairs per second of the Gaussian
dense pass in float32 and float64, of the compiled compact pass against scikit-learn's
``RadiusNeighborsRegressor`` and a direct ``(1 - u^2)`` loop, and the interpolated LOESS surface
at a million samples; next to the measured ``exp`` and FMA rates."""

import importlib.util
import os
import time
from pathlib import Path

import numba
import numpy as np
from localkit._timing import interleaved, machine_rates, median_time, rates_line

TITLE = "Arithmetic limits: Gaussian float32 vs float64, compact kernels without exp, LOESS surface"


@numba.njit(cache=False)
def direct_epanechnikov_sums(Q, X, y, h2):
    """The direct loop: every pair, ``w = 1 - |q - x|^2 / h^2`` inside the support, two sums."""
    out = np.empty(len(Q))
    for i in range(len(Q)):
        s = t = 0.0
        for j in range(len(X)):
            u2 = 0.0
            for k in range(X.shape[1]):
                d = Q[i, k] - X[j, k]
                u2 += d * d
            if u2 <= h2:
                w = 1.0 - u2 / h2
                s += w * y[j]
                t += w
        out[i] = s / t if t > 0 else np.nan
    return out


def _keops():
    """``keops_nw`` of ``bench_local_mean`` (KeOps-CPU's stabilised Gaussian local mean), or ``None``
    where pykeops is not installed."""
    try:
        import pykeops  # noqa: F401
    except ImportError:
        return None
    path = Path(__file__).with_name("bench_local_mean.py")
    spec = importlib.util.spec_from_file_location("localkit_bench_local_mean", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.keops_nw


def _gaussian(quick, repeat):
    from localkit import local_mean

    n, d = (4000, 3) if quick else (20_000, 3)
    rng = np.random.default_rng(0)
    X, Q = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    X32, Q32, y32 = (a.astype(np.float32) for a in (X, Q, y))
    keops = _keops()
    if keops is not None:
        keops(Q32[:200], X32[:200], y32[:200], 1.0)  # compile outside the timing
    rows = []
    for h in (0.25, 1.0):
        funcs = [lambda: local_mean(Q, X, y, bandwidth=h, n_jobs=-1),
                 lambda: local_mean(Q32, X32, y32, bandwidth=h, n_jobs=-1)]
        if keops is not None:
            funcs.append(lambda: keops(Q32, X32, y32, np.float32(h)))
        times, results = interleaved(funcs, repeat, warmup=True)
        a, b = results[:2]
        rel = np.abs(b - a).max() / np.abs(a).max()
        t64, t32 = times[:2]
        row = (f"| {h} | {t64:.3f} s | {n * n / t64 / 1e6:.0f} | {t32:.3f} s | {n * n / t32 / 1e6:.0f} | "
               f"{t64 / t32:.2f}x | {rel:.1e} |")
        if keops is not None:
            rel_k = np.abs(results[2] - a).max() / np.abs(a).max()
            row += f" {times[2]:.3f} s | {n * n / times[2] / 1e6:.0f} | {times[2] / t32:.2f}x | {rel_k:.1e} |"
        rows.append(row)
    head = "| h | float64 | M pairs/s | float32 | M pairs/s | float32 speed-up | rel. error |"
    rule = "|---|---|---|---|---|---|---|"
    if keops is not None:
        head += " KeOps-CPU float32 | M pairs/s | localkit float32 speed-up over KeOps | KeOps rel. error |"
        rule += "---|---|---|---|"
    peer = ("KeOps-CPU's float32 (pykeops, its stabilised `sumsoftmaxweight`) interleaved in the same run"
            if keops is not None else "KeOps is not installed here, so its float32 is not in this run")
    return [f"Gaussian local mean, n_queries = n_samples = {n:,}, d = {d} (normal data), both dtypes on 2 "
            f"threads, medians of {repeat} interleaved runs; {peer}. Errors relative to localkit's float64.", "",
            head, rule, *rows]


def _compact(quick, repeat):
    from sklearn.neighbors import RadiusNeighborsRegressor

    from localkit import LocalMeanRegressor

    n, m, h = (20_000, 2_000, 0.05) if quick else (200_000, 20_000, 0.05)
    rng = np.random.default_rng(0)
    X, Q = rng.uniform(size=(n, 2)), rng.uniform(size=(m, 2))
    y = np.sin(6 * X[:, 0]) + X[:, 1] + 0.1 * rng.normal(size=n)
    ours = LocalMeanRegressor(kernel="epanechnikov", bandwidth=h).fit(X, y)
    theirs = RadiusNeighborsRegressor(radius=h, weights=lambda dist: 1 - (dist / h) ** 2).fit(X, y)
    (t_ours, t_sk), (a, b) = interleaved([lambda: ours.predict(Q), lambda: theirs.predict(Q)], repeat, warmup=True)
    sub = slice(0, max(1, m // 20))  # the direct loop visits every pair: a share of the queries
    direct_epanechnikov_sums(Q[:2], X[:100], y[:100], h * h)  # compile outside the timing
    c, t_direct = median_time(lambda: direct_epanechnikov_sums(Q[sub], X, y, h * h), 1)
    support = np.pi * h * h * n * m  # pairs inside the support (uniform data, away from the edges)
    return [f"Epanechnikov local mean at h = {h}, n = {n:,} uniform samples in the unit square, {m:,} queries; "
            f"medians of {repeat} interleaved runs (scikit-learn: the same weights, its tree). The direct loop "
            f"visits every pair ({len(Q[sub]):,} queries x {n:,} samples, one thread).", "",
            "| implementation | time | M pairs in support/s | M pairs visited/s | ratio to scikit-learn | max abs diff |",
            "|---|---|---|---|---|---|",
            f"| localkit LocalMeanRegressor (compiled pass) | {t_ours:.3f} s | {support / t_ours / 1e6:.0f} | | "
            f"{t_sk / t_ours:.1f}x | 0 |",
            f"| scikit-learn RadiusNeighborsRegressor | {t_sk:.3f} s | {support / t_sk / 1e6:.0f} | | 1.0x | "
            f"{np.nanmax(np.abs(b - a)):.1e} |",
            f"| direct numba loop over all pairs | | | {len(Q[sub]) * n / t_direct / 1e6:.0f} | | "
            f"{np.nanmax(np.abs(c - a[sub])):.1e} |"]


def _pruned(quick, repeat):
    """A compact kernel at a fixed bandwidth in 64 features: the dense path's pruned blocks (the
    planner's choice) against the plain dense path and the radius (tree) path."""
    from localkit import LocalMeanRegressor
    from localkit.engine import BoundKernel
    from localkit.kernels import Kernel

    n, m, d, h = (20_000, 1_000, 64, 4.0) if quick else (100_000, 2_000, 64, 4.0)
    rng = np.random.default_rng(0)
    centres = 3.0 * rng.normal(size=(50, d))
    X = centres[rng.integers(0, 50, n)] + 0.3 * rng.normal(size=(n, d))
    Q = centres[rng.integers(0, 50, m)] + 0.3 * rng.normal(size=(m, d))
    y = np.sin(X[:, 0]) + X[:, 1]
    models = {alg: LocalMeanRegressor(kernel="epanechnikov", bandwidth=h, algorithm=alg, n_jobs=-1).fit(X, y)
              for alg in ("auto", "dense", "neighbors")}
    times, results = interleaved([lambda mod=mod: mod.predict(Q) for mod in models.values()], repeat, warmup=True)
    why = BoundKernel(Kernel("epanechnikov", bandwidth=h), X).explain(Q).reasons["dense"]
    rows = [f"| {name} | {t:.2f} s | {n * m / t / 1e6:.0f} | {times[1] / t:.2f}x | {np.abs(r - results[1]).max():.1e} |"
            for name, t, r in zip(("auto (the planner)", "dense, every block", "radius path (tree)"), times, results)]
    return [f"Epanechnikov local mean at h = {h} in {d} features: {n:,} samples and {m:,} queries around 50 "
            f"centres (N(0, 9) centres, N(0, 0.09) spread), medians of {repeat} interleaved runs. The planner: "
            f"\"{why}\".", "",
            "| path | time | M pairs/s (all pairs) | speed-up over dense | max abs diff to dense |",
            "|---|---|---|---|---|", *rows]


def _loess(quick):
    from localkit import LocalPolynomialRegressor
    from localkit.engine import KDSurface

    n = 100_000 if quick else 1_000_000
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, n)
    y = np.sin(x) + 0.3 * rng.normal(size=n)
    X = x[:, None]
    model = LocalPolynomialRegressor(frac=0.01, surface="interpolate")
    model.fit(X[:2000], y[:2000]).predict(X[:2000])  # compile outside the timing
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        model.fit(X, y)
        t1 = time.perf_counter()
        model.predict(X)
        t2 = time.perf_counter()
        KDSurface(X, int(n * 0.01 * model.cell))  # the tree alone (the fit's first step)
        t3 = time.perf_counter()
        model.surface_.blend(X, model.vertex_values_, model.vertex_slopes_)  # the blend alone (the prediction)
        times.append((t1 - t0, t2 - t1, t3 - t2, time.perf_counter() - t3))
    fit, pred, tree, blend = np.median(times, axis=0)
    return [f"Interpolated 1-D LOESS (degree 1, tricube, frac = 0.01, R's default surface), n = {n:,}, fit then "
            f"predict at the samples, one thread (n_jobs=None): fit {fit:.2f} s (the tree {tree:.3f} s, the rest the "
            f"{len(model.vertex_values_):,} vertex fits) + predict {pred:.2f} s (the blend {blend:.3f} s) = "
            f"{fit + pred:.2f} s (medians of 5)."]


def run(quick=False):
    repeat = 2 if quick else 3
    rates = machine_rates()
    lines = ["Issue 28: the engine at the arithmetic limit.", "",
             f"The machine has 2 cores and was shared with other work while this ran (load average "
             f"{os.getloadavg()[0]:.1f} at the start): compare ratios within a table, not times across runs.", "",
             rates_line(rates), ""]
    lines += (_gaussian(quick, repeat) + [""] + _compact(quick, repeat) + [""] + _pruned(quick, repeat) + [""]
              + _loess(quick))
    lines += ["", f"Load average at the end: {os.getloadavg()[0]:.1f}."]
    return "\n".join(lines)
