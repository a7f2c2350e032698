"""
Kernel density estimation
=========================

The normaliser of a local mean, ``sum_j K(x*, x_j)``, is a kernel density estimate once divided
by ``n h^d`` and the kernel's integral. :func:`localkit.kernel_density` computes it for every
profile and agrees with scikit-learn's ``KernelDensity`` and SciPy's ``gaussian_kde``.
"""
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import gaussian_kde
from sklearn.datasets import load_iris
from sklearn.neighbors import KernelDensity

from localkit import kernel_density

petal = load_iris().data[:, 2]
grid = np.linspace(0, 8, 400)

fig, ax = plt.subplots(figsize=(8, 4))
ax.hist(petal, bins=30, density=True, color="0.85", label="histogram")
for name in ["gaussian", "epanechnikov", "tophat"]:
    sk = KernelDensity(kernel=name, bandwidth=0.3).fit(petal[:, None])
    ref = np.exp(sk.score_samples(grid[:, None]))
    profile = "uniform" if name == "tophat" else name  # scikit-learn's name for it
    ours = kernel_density(grid, petal, kernel=profile, bandwidth=0.3)
    diff = np.abs(ours - ref).max()
    ax.plot(grid, ours, label=f"{profile}, h=0.3 (max diff vs scikit-learn {diff:.1e})")
scott = kernel_density(grid, petal, bandwidth="scott")
diff = np.abs(scott - gaussian_kde(petal)(grid)).max()
ax.plot(grid, scott, "k--", label=f"Scott's rule (max diff vs gaussian_kde {diff:.1e})")
ax.set(xlabel="petal length (cm)", ylabel="density", title="Iris petal length")
ax.legend(fontsize=8)
fig.tight_layout()

# %%
# :class:`localkit.KernelDensity` has scikit-learn's interface: ``fit`` (with optional
# ``sample_weight``), ``score_samples`` (log-density), ``score`` and ``sample``. Here in two
# dimensions, on the iris sepals, with draws from the fitted density.
from localkit import KernelDensity as LocalKernelDensity

sepals = load_iris().data[:, :2]
kde = LocalKernelDensity(kernel="epanechnikov", bandwidth=0.5).fit(sepals)
xx, yy = np.meshgrid(np.linspace(4, 8.2, 150), np.linspace(1.8, 4.6, 150))
log_density = kde.score_samples(np.c_[xx.ravel(), yy.ravel()]).reshape(xx.shape)
draws = kde.sample(200, random_state=0)

fig, ax = plt.subplots(figsize=(6, 4.5))
ax.contourf(xx, yy, np.exp(log_density), levels=12, cmap="Blues")
ax.scatter(*sepals.T, s=8, c="k", label="iris sepals")
ax.scatter(*draws.T, s=8, c="C1", marker="x", label="200 draws from the estimate")
ax.set(xlabel="sepal length (cm)", ylabel="sepal width (cm)", title="Epanechnikov KDE, h=0.5")
ax.legend(fontsize=8, loc="upper right")
fig.tight_layout()
