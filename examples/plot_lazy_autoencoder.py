"""
The lazy autoencoder: unsupervised kernel regression
====================================================

A lazy autoencoder learns one latent code ``z_i`` per sample; its decoder is the local mean of
the samples in latent space, ``f(z) = sum_i K(z, z_i) x_i / sum_j K(z, z_j)``, and the codes
minimise the leave-one-out reconstruction error. With two codes per point it reconstructs held-out
points of a noisy swiss roll on the roll itself, where PCA's two components can only project them
onto a plane. The panels show the roll's cross-section (features 1 and 3).
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_swiss_roll
from sklearn.decomposition import PCA

from localkit import LazyAutoencoder

X, position = make_swiss_roll(600, noise=0.2, random_state=0)
train, test = X[:400], X[400:]
ukr = LazyAutoencoder(n_components=2, max_iter=100).fit(train)
pca = PCA(2).fit(train)
reconstructions = {
    "held-out points": test,
    "PCA, 2 components": pca.inverse_transform(pca.transform(test)),
    "lazy autoencoder, 2 codes": ukr.inverse_transform(ukr.transform(test)),
}

fig, axes = plt.subplots(1, 3, figsize=(13, 4.2), sharex=True, sharey=True)
for ax, (title, points) in zip(axes, reconstructions.items()):
    ax.scatter(points[:, 0], points[:, 2], c=position[400:], s=10, cmap="viridis")
    if points is not test:
        mse = np.mean(np.sum((points - test) ** 2, axis=1))
        title = f"{title}\nmean squared error {mse:.2f}"
    ax.set_title(title, fontsize=10)
    ax.set_aspect("equal")
fig.tight_layout()
