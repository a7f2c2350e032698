"""
A million points in a second: binned density and trend
======================================================

In one to three features, ``algorithm="binned"`` replaces the sum over every sample by a sum over
a regular grid (as R's KernSmooth and KDEpy do): the samples are binned linearly, the kernel sums
become FFT convolutions, and a query reads them back from the corners of its grid cell. A
million samples then cost milliseconds, against minutes for the exact sums, at a relative error
the pass states and bounds (``tolerance``, :mod:`localkit.engine.passes.binned`).

Here a million noisy observations ``y = f(x) + noise``: the density of ``x`` (Gaussian kernel,
bandwidth by the Improved Sheather-Jones rule, KDEpy's ``bw="ISJ"``) and the trend ``f`` by a
binned local linear fit (``KernSmooth::locpoly``'s method), with its slope. The exact density at
a few points checks the binned one.
"""
import time

import matplotlib.pyplot as plt
import numpy as np

from localkit import LocalPolynomialRegressor, kernel_density
from localkit.kernels import resolve_bandwidth

rng = np.random.default_rng(0)
n = 1_000_000
x = np.concatenate([rng.normal(-1.0, 0.6, n // 2), rng.gamma(4.0, 0.5, n - n // 2)])
trend = np.sin(2.0 * x) + 0.3 * x
y = trend + rng.normal(0.0, 0.5, n)
grid = np.linspace(*np.quantile(x, [0.0005, 0.9995]), 1_000)  # where the data are

t0 = time.perf_counter()
h = float(resolve_bandwidth("isj", x[:, None]))
t1 = time.perf_counter()
density = kernel_density(grid[:, None], x[:, None], bandwidth=h, algorithm="binned")
t2 = time.perf_counter()
fit = LocalPolynomialRegressor(degree=1, kernel="gaussian", bandwidth=0.05, algorithm="binned").fit(x[:, None], y)
line = fit.predict(grid[:, None])
slope = fit.predict_derivative(grid[:, None])[:, 0]
t3 = time.perf_counter()
print(f"{n:,} samples: ISJ bandwidth {1e3 * (t1 - t0):.0f} ms, binned density {1e3 * (t2 - t1):.0f} ms, "
      f"binned local linear fit and slope {1e3 * (t3 - t2):.0f} ms")

# the exact density at every 100th grid point (a full pass over the million samples for each)
check = grid[::100, None]
exact = kernel_density(check, x[:, None], bandwidth=h, algorithm="dense")
print(f"largest relative error of the binned density at {len(check)} points: "
      f"{np.max(np.abs(density[::100] / exact - 1)):.1e}")

fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
a.hist(x, bins=400, density=True, color="0.8", label="histogram of the samples")
a.plot(grid, density, "C3", lw=1.5, label=f"binned KDE, ISJ bandwidth {h:.3f}")
a.plot(check[:, 0], exact, "k.", ms=6, label="exact KDE (a few points)")
a.set(xlabel="x", ylabel="density", title=f"density of {n:,} samples", xlim=(grid[0], grid[-1]))
a.legend(fontsize=8)
counts, xe, ye = np.histogram2d(x, y, bins=(300, 200))
b.pcolormesh(xe, ye, np.log1p(counts.T), cmap="Greys", shading="auto")
b.plot(grid, line, "C3", lw=2.5, label="binned local linear fit")
b.plot(grid, np.sin(2.0 * grid) + 0.3 * grid, "k--", lw=1, label="true trend")
b.plot(grid, slope / 4.0 - 2.5, "C2", lw=1, label="its slope / 4 - 2.5")
b.set(xlabel="x", ylabel="y", title="trend through a million points", xlim=(grid[0], grid[-1]), ylim=(-4, 3.5))
b.legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()
