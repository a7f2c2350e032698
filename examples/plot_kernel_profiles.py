"""
Kernel profiles
===============

A localization kernel weighs a sample by a *profile* of its scaled distance to the target,
``K(x*, x) = k(d(x*, x) / h)``. Compact profiles vanish beyond ``u = 1``; unbounded ones
(dashed) give every sample some weight.
"""
import matplotlib.pyplot as plt
import numpy as np

from localkit import Kernel
from localkit.plot import kernel_profiles

kernel_profiles()
plt.tight_layout()

# %%
# The same profiles as weights in two dimensions: the weight of every point of a grid for a
# target at the origin, with bandwidth 1. A kernel object evaluates the dense matrix directly.
grid = np.linspace(-1.5, 1.5, 121)
points = np.stack(np.meshgrid(grid, grid), axis=-1).reshape(-1, 2)
fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
for ax, name in zip(axes, ["gaussian", "epanechnikov", "tricube", "laplacian"]):
    weights = Kernel(name, bandwidth=1.0)(np.zeros((1, 2)), points)
    ax.imshow(weights.reshape(len(grid), len(grid)), extent=[-1.5, 1.5, -1.5, 1.5],
              cmap="viridis", vmin=0, vmax=1)
    ax.set_title(name)
fig.tight_layout()
