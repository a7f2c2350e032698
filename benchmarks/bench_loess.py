"""Local polynomial regression: LOESS in 1-D against statsmodels' lowess (delta=0, the exact
algorithm), and local linear regression in d=4 against statsmodels' KernelReg(reg_type='ll'),
in one process, on the same data; fits at the samples."""
import warnings

import numpy as np
from localkit._timing import median_time

TITLE = "LOESS (1-D) vs statsmodels lowess, local linear (d=4) vs KernelReg ll"


def run(quick=False):
    from statsmodels.nonparametric.kernel_regression import KernelReg
    from statsmodels.nonparametric.smoothers_lowess import lowess

    from localkit import LocalPolynomialRegressor

    n, m, repeat = (2000, 500, 2) if quick else (10_000, 2000, 3)
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 2 * np.pi, n)
    y = np.sin(x) + 0.3 * rng.standard_t(3, size=n)
    X = x[:, None]
    LocalPolynomialRegressor(frac=0.1).fit(X[:200], y[:200]).predict(X[:200])  # compile outside the timing

    rows = []
    for frac, it in [(0.05, 0), (0.3, 0), (0.3, 3)]:
        ref, t_ref = median_time(lambda: lowess(y, x, frac=frac, it=it, delta=0, return_sorted=False), repeat)
        ours, t = median_time(lambda: LocalPolynomialRegressor(frac=frac, robust_iters=it).fit(X, y).predict(X),
                               repeat)
        rows.append((f"LOESS 1-D, frac={frac}, it={it}", f"n={n:,}", "statsmodels lowess", t_ref, t,
                     np.abs(ours - ref).max()))

    Z = rng.normal(size=(m, 4))
    yz = np.sin(Z[:, 0]) + Z[:, 1] * Z[:, 2] + 0.1 * rng.normal(size=m)
    bw = 0.5 * Z.std(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        ref, t_ref = median_time(lambda: KernelReg(yz, Z, var_type="cccc", reg_type="ll", bw=bw).fit()[0], 1)
    ours, t = median_time(lambda: LocalPolynomialRegressor(kernel="gaussian", bandwidth=bw).fit(Z, yz).predict(Z),
                           repeat)
    rows.append(("local linear, Gaussian, d=4", f"n={m:,}", "statsmodels KernelReg ll", t_ref, t,
                 np.abs(ours - ref).max()))

    lines = [f"Fits at the n training points; medians of {repeat} runs (KernelReg: one run). "
             "Noisy sine with t(3) noise for LOESS, x without ties; Gaussian inputs for local linear. "
             "The machine has 2 cores and was shared with other work while this ran.", "",
             "| task | size | peer | peer time | localkit time | speed-up | max abs diff |",
             "|---|---|---|---|---|---|---|"]
    for task, size, peer, t_ref, t, diff in rows:
        lines.append(f"| {task} | {size} | {peer} | {t_ref:.3f} s | {t:.3f} s | {t_ref / t:.1f}x | {diff:.1e} |")
    return "\n".join(lines)
