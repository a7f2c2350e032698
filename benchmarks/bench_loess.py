"""Local polynomial regression: LOESS in 1-D against statsmodels' lowess (delta=0, the exact
algorithm), local linear regression in d=4 against statsmodels' KernelReg(reg_type='ll'), in one
process, on the same data; and 2-D LOESS against R's loess (direct and interpolated surfaces,
R through Rscript, timed inside R; skipped where R is not installed). Fits at the samples."""
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from localkit._timing import median_time

TITLE = "LOESS vs statsmodels lowess (1-D) and R loess (2-D, direct/interpolate), local linear vs KernelReg ll"


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

    lines = r_tables(quick) + [""]
    lines += [f"Fits at the n training points; medians of {repeat} runs (KernelReg: one run). "
             "Noisy sine with t(3) noise for LOESS, x without ties; Gaussian inputs for local linear. "
             "The machine has 2 cores and was shared with other work while this ran.", "",
             "| task | size | peer | peer time | localkit time | speed-up | max abs diff |",
             "|---|---|---|---|---|---|---|"]
    for task, size, peer, t_ref, t, diff in rows:
        lines.append(f"| {task} | {size} | {peer} | {t_ref:.3f} s | {t:.3f} s | {t_ref / t:.1f}x | {diff:.1e} |")
    return "\n".join(lines)


def r_tables(quick=False):
    """Exact fits against R's ``surface="direct"``, interpolated surfaces against R's default
    ``surface="interpolate"``: 2-D, degree 1 and 2, fits at the samples; R and localkit runs
    alternate within each repeat (medians), R timed inside R (``loess()`` + ``fitted()``)."""
    from localkit import LocalPolynomialRegressor
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # R's reference lives with the tests
    from r_reference import have_r, r_loess

    if not have_r():
        return ["2-D LOESS against R: skipped (Rscript not found; install Debian's r-base-core)."]
    cases = [(2000, 1, 0.1), (2000, 2, 0.05)] if quick else [
        (10_000, 1, 0.1), (10_000, 2, 0.05), (20_000, 1, 0.05), (20_000, 2, 0.05)]
    repeat = 1 if quick else 3
    rng = np.random.default_rng(0)
    warm = rng.uniform(size=(300, 2))
    for degree in (1, 2):  # compile outside the timing
        for surface in ("direct", "interpolate"):
            LocalPolynomialRegressor(degree=degree, frac=0.3, surface=surface).fit(warm, warm[:, 0]).predict(warm)
    exact_rows, interp_rows = [], []
    for n, degree, span in cases:
        X = rng.uniform(size=(n, 2))
        y = np.sin(6 * X[:, 0]) * np.cos(4 * X[:, 1]) + 0.1 * rng.normal(size=n)
        times = {key: [] for key in ("R direct", "R interp", "1", "2", "interp")}
        for _ in range(repeat):
            r_exact, _, t = r_loess(X, y, span=span, degree=degree, surface="direct")
            times["R direct"].append(t)
            r_interp, _, t = r_loess(X, y, span=span, degree=degree, surface="interpolate")
            times["R interp"].append(t)
            for jobs in (1, 2):
                t0 = time.perf_counter()
                ours = LocalPolynomialRegressor(degree=degree, frac=span, n_jobs=jobs).fit(X, y).predict(X)
                times[str(jobs)].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            interp = LocalPolynomialRegressor(degree=degree, frac=span, surface="interpolate").fit(X, y).predict(X)
            times["interp"].append(time.perf_counter() - t0)
        t = {key: float(np.median(v)) for key, v in times.items()}
        case = f"| {n:,} | {degree} | {span} |"
        exact_rows.append(f"{case} {t['R direct']:.2f} s | {t['1']:.2f} s ({t['R direct'] / t['1']:.1f}x) | "
                          f"{t['2']:.2f} s ({t['R direct'] / t['2']:.1f}x) | {np.abs(ours - r_exact).max():.1e} |")
        dev_r, dev = np.abs(r_interp - r_exact).max(), np.abs(interp - ours).max()
        interp_rows.append(f"{case} {t['R interp']:.3f} s | {t['interp']:.3f} s ({t['R interp'] / t['interp']:.1f}x) | "
                           f"{dev_r:.2e} | {dev:.2e} ({dev / dev_r:.2f}x R's) |")
    return [
        f"2-D LOESS (tricube, span in samples, `normalize=FALSE` in R), noisy sin(6x) cos(4y) on the unit "
        f"square, fitted at the n samples; medians of {repeat} runs, R and localkit alternating. R "
        "(single-threaded Fortran) is timed inside R (`loess()` + `fitted()`); localkit is `fit().predict(X)` "
        f"in wall-clock time. The machine has {os.cpu_count()} cores; 1-minute load average "
        f"{os.getloadavg()[0]:.0f} when this ended (other work shares the machine: a load above the core "
        "count inflates absolute times, and a second thread gains little).", "",
        "Exact fits, R `surface=\"direct\"` vs localkit `surface=\"direct\"` "
        "(max abs diff: between the two exact fits):", "",
        "| n | degree | span | R direct | localkit, 1 thread | localkit, 2 threads | max abs diff |",
        "|---|---|---|---|---|---|---|", *exact_rows, "",
        "Interpolated surfaces, R's default `surface=\"interpolate\"` vs localkit `surface=\"interpolate\"`; "
        "deviation = max |interpolated - exact| over the samples, each against its own exact fit:", "",
        "| n | degree | span | R interpolate | localkit interpolate | R's deviation | localkit's deviation |",
        "|---|---|---|---|---|---|---|", *interp_rows]
