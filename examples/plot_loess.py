"""
LOESS and a bandwidth chosen by leave-one-out
=============================================

The localization trick makes a linear model local: at each query, a least-squares line weighted
by the kernel, ``argmin_theta sum_i K(x*, x_i) (y_i - theta_0 - theta_1 (x_i - x*))^2``. With
the tricube kernel and a span this is LOESS (statsmodels' ``lowess``); with
``bandwidth="cv"`` the bandwidth minimises the exact leave-one-out error, whose whole curve is
kept in ``cv_results_``. Robustness iterations downweight outliers.
"""
import matplotlib.pyplot as plt
import numpy as np

from localkit import LocalMeanRegressor, LocalPolynomialRegressor

rng = np.random.default_rng(3)
x = np.sort(rng.uniform(0, 2 * np.pi, 300))
y = np.sin(x) + 0.3 * rng.standard_t(3, size=300)
xs = np.linspace(0, 2 * np.pi, 400)[:, None]

loess = LocalPolynomialRegressor(bandwidth="cv").fit(x[:, None], y)
robust = LocalPolynomialRegressor(frac=0.3, robust_iters=3).fit(x[:, None], y)
nw = LocalMeanRegressor(bandwidth="cv").fit(x[:, None], y)

fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
a.scatter(x, y, s=6, c="0.6", label="samples (t(3) noise)")
a.plot(xs, np.sin(xs), "k--", lw=1, label="sin x")
a.plot(xs, loess.predict(xs), "C3", lw=2, label=f"local linear, h={loess.bandwidth_:.2f}")
a.plot(xs, robust.predict(xs), "C0", lw=1.5, label="LOESS frac=0.3, 3 robustness steps")
a.plot(xs, nw.predict(xs), "C2", lw=1, label=f"local mean, h={nw.bandwidth_:.2f}")
a.set_ylim(-2.5, 2.5)
a.legend(loc="lower left", fontsize=8)
a.set_title("local polynomial fits")
res = loess.cv_results_
b.semilogx(res["bandwidth"], res["loo_loss"], "o-", ms=3)
b.axvline(loess.bandwidth_, color="C3")
b.set_ylim(0, 3 * np.nanmin(res["loo_loss"]))
b.set(xlabel="bandwidth h", ylabel="leave-one-out MSE", title="leave-one-out curve")
fig.tight_layout()
