"""
Output-adaptive regression keeps an edge
========================================

The local mean weighs each sample by how close its input is to the query, so across a jump it
averages both sides and blurs the edge over a few bandwidths. Weighing each sample *also* by how
close its target is to the current estimate, ``K(x*, x_i) K_y(f(x*), y_i)``, and iterating from
the plain local mean to a fixed point (``value_kernel=``) lets the samples on the other side of
the jump drop out: the bilateral filter's idea, for regression. Below, a noisy step: the plain
local mean, and the output-adaptive local mean and local linear fit, with the number of
iterations their fixed point took.
"""
import matplotlib.pyplot as plt
import numpy as np

from localkit import Kernel, LocalMeanRegressor, LocalPolynomialRegressor

rng = np.random.default_rng(0)
x = np.sort(rng.uniform(0, 1, 400))
truth = np.where(x > 0.5, 1.0, 0.0) + 0.6 * x
y = truth + 0.12 * rng.standard_normal(x.size)
X, grid = x[:, None], np.linspace(0, 1, 500)[:, None]

value = Kernel("gaussian", bandwidth=0.25)  # in the targets' units: about twice the noise
plain = LocalMeanRegressor(bandwidth=0.04).fit(X, y)
adaptive = LocalMeanRegressor(bandwidth=0.04, value_kernel=value).fit(X, y)
linear = LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.04, value_kernel=value).fit(X, y)

fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(x, y, ".", color="0.7", ms=3, label="samples")
ax.plot(grid[:, 0], np.where(grid[:, 0] > 0.5, 1.0, 0.0) + 0.6 * grid[:, 0], "k:", lw=1, label="truth")
ax.plot(grid[:, 0], plain.predict(grid), label="local mean")
ax.plot(grid[:, 0], adaptive.predict(grid), label=f"with value_kernel ({adaptive.n_iter_} iterations)")
ax.plot(grid[:, 0], linear.predict(grid), "--", label=f"local linear with value_kernel ({linear.n_iter_} iterations)")
ax.set(xlabel="x", ylabel="y")
ax.legend(loc="upper left", fontsize=8)
fig.tight_layout()

# %%
# The error near the edge (within 0.1 of it):
near = np.abs(grid[:, 0] - 0.5) < 0.1
target = np.where(grid[:, 0] > 0.5, 1.0, 0.0) + 0.6 * grid[:, 0]
for name, model in [("local mean", plain), ("with value_kernel", adaptive), ("local linear, value_kernel", linear)]:
    print(f"{name:28s} mean |error| near the edge: {np.abs(model.predict(grid) - target)[near].mean():.3f}")
