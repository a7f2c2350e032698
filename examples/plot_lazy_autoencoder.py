"""
The lazy autoencoder: unsupervised kernel regression
====================================================

A lazy autoencoder learns one latent code ``z_i`` per sample; its decoder is the local mean of
the samples in latent space, ``f(z) = sum_i K(z, z_i) x_i / sum_j K(z, z_j)``, and the codes
minimise the leave-one-out reconstruction error. On the swiss roll the codes follow the roll,
where PCA's linear projection folds it.
"""
import matplotlib.pyplot as plt
from sklearn.datasets import make_swiss_roll
from sklearn.decomposition import PCA

from localkit import LazyAutoencoder

roll, position = make_swiss_roll(300, noise=0.1, random_state=0)
codes = LazyAutoencoder(n_components=2, max_iter=50).fit(roll).embedding_
pca = PCA(2).fit_transform(roll)

fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
for ax, points, title in zip(axes, [pca, codes], ["PCA scores", "lazy autoencoder"]):
    scatter = ax.scatter(points[:, 0], points[:, 1], c=position, s=10, cmap="viridis")
    ax.set_title(title)
fig.colorbar(scatter, ax=axes, label="position along the roll")
