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
