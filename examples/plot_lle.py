"""
Locally linear embedding and local PCA
======================================

Locally linear embedding reconstructs each point from its neighbours with local least-squares
weights, then finds low-dimensional coordinates that keep those weights; the colour (the
position along the roll) runs smoothly across the embedding.
It agrees with scikit-learn's ``LocallyLinearEmbedding`` up to an orthogonal map (Procrustes
disparity below 1e-6). Local PCA, the principal axes of the kernel-weighted sample around a
point, gives the roll's tangent directions.
"""
import matplotlib.pyplot as plt
import numpy as np
from scipy.spatial import procrustes
from sklearn.datasets import make_swiss_roll
from sklearn.manifold import LocallyLinearEmbedding as SkLLE

from localkit import LocalPCA, LocallyLinearEmbedding

X, t = make_swiss_roll(1000, random_state=0)
params = dict(n_neighbors=12, n_components=2, reg=1e-3, eigen_solver="dense")
ours = LocallyLinearEmbedding(**params).fit_transform(X)
ref = SkLLE(**params).fit_transform(X)
print(f"Procrustes disparity to scikit-learn: {procrustes(ours, ref)[2]:.1e}")

fig = plt.figure(figsize=(13, 4.2))
ax = fig.add_subplot(1, 3, 1, projection="3d")
ax.scatter(*X.T, c=t, s=4, cmap="viridis")
anchors = X[::100]
local_pca = LocalPCA(n_components=1, bandwidth=2.0).fit(X)
tangents = local_pca.local_components(anchors)[:, 0]
ax.quiver(*anchors.T, *(3 * tangents).T, color="k")
ax.set_title("swiss roll and local PCA tangents")
for i, (Y, name) in enumerate([(ours, "localkit"), (ref, "scikit-learn")], 2):
    ax = fig.add_subplot(1, 3, i)
    ax.scatter(Y[:, 0], Y[:, 1], c=t, s=4, cmap="viridis")
    ax.set(title=f"{name} LLE (k=12)", xticks=[], yticks=[])
fig.tight_layout()
