"""
TSK fuzzy rules: prototype-centred local linear models
======================================================

A Takagi–Sugeno–Kang system is the *eager* side of the localization trick: a few Gaussian
memberships centred on prototypes, one linear model per rule, blended by the normalised
memberships ``w_r(x) = mu_r(x) / sum_s mu_s(x)``. The prediction ``sum_r w_r(x) f_r(x)``
equals simpful's Sugeno inference with the same rules.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes

from localkit import TSKFuzzyRegressor

X, y = load_diabetes(return_X_y=True)
x = X[:, [2]]  # body-mass index
model = TSKFuzzyRegressor(n_rules=3, random_state=0).fit(x, y)
grid = np.linspace(x.min(), x.max(), 300)[:, None]
weights = model.memberships(grid)

fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True,
                                  height_ratios=[1, 2])
for r in range(model.n_rules):
    (line,) = top.plot(grid, weights[:, r], lw=2, label=f"rule {r + 1}")
    slope, intercept = model.coefs_[r]
    bottom.plot(grid, slope * grid[:, 0] + intercept, ":", color=line.get_color())
top.set(ylabel="normalised weight", title="normalised memberships w_r(x)")
top.legend(fontsize=8)
bottom.scatter(x, y, s=6, color="0.6", label="samples")
bottom.plot(grid, model.predict(grid), "k", lw=2, label="blend (dotted: the rules)")
bottom.set(xlabel="BMI (scaled)", ylabel="disease progression",
           ylim=(y.min() - 20, y.max() + 20))
bottom.legend(fontsize=8, loc="upper left")
fig.tight_layout()
