"""
Kernel classification: the local mean of one-hot labels
=======================================================

The local mean of one-hot labels gives class probabilities,
``p_c(x*) = sum_i K(x*, x_i) [y_i = c] / sum_j K(x*, x_j)``. Here on the wine data projected on
its two principal components: a Gaussian kernel gives smooth boundaries, a uniform kNN kernel
scikit-learn's ``KNeighborsClassifier``. Lines mark where the winning class has probability 0.5
and 0.8.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_wine
from sklearn.decomposition import PCA
from sklearn.preprocessing import StandardScaler

from localkit import LocalMeanClassifier

X, y = load_wine(return_X_y=True)
Z = PCA(2).fit_transform(StandardScaler().fit_transform(X))
xx, yy = np.meshgrid(np.linspace(Z[:, 0].min() - 1, Z[:, 0].max() + 1, 200),
                     np.linspace(Z[:, 1].min() - 1, Z[:, 1].max() + 1, 200))
grid = np.c_[xx.ravel(), yy.ravel()]

fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
models = [("Gaussian, h=0.6", LocalMeanClassifier(bandwidth=0.6)),
          ("uniform kNN, k=9", LocalMeanClassifier(kernel="uniform", n_neighbors=9))]
for ax, (title, model) in zip(axes, models):
    proba = model.fit(Z, y).predict_proba(grid)
    winner = proba.argmax(1).reshape(xx.shape)
    confidence = proba.max(1).reshape(xx.shape)
    ax.contourf(xx, yy, winner, alpha=0.25, levels=[-0.5, 0.5, 1.5, 2.5],
                cmap="viridis")
    ax.contour(xx, yy, confidence, levels=[0.5, 0.8], colors="k", linewidths=0.5)
    ax.scatter(*Z.T, c=y, s=14, cmap="viridis", edgecolor="k", linewidth=0.3)
    ax.set(title=title, xlabel="PC 1", ylabel="PC 2")
fig.tight_layout()
