"""
Mean shift: iterated local means climb to the modes
===================================================

Mean shift moves each seed to the local mean of the data around it,
``x <- sum_i K(x, x_i) x_i / sum_j K(x, x_j)``, until it stops: the seeds climb the kernel
density to its modes, and the modes are the clusters. With the uniform kernel this is
scikit-learn's ``MeanShift`` (same centres, same labels).
"""
import matplotlib.pyplot as plt
import numpy as np
import sklearn.cluster
from sklearn.datasets import make_blobs

from localkit import MeanShift
from localkit.plot import mean_shift_trajectories

centres = [[1, 1], [-1, -1], [1, -1]]
X, _ = make_blobs(n_samples=1000, centers=centres, cluster_std=0.6, random_state=0)
h = float(sklearn.cluster.estimate_bandwidth(X, quantile=0.2, n_samples=500))

fig, axes = plt.subplots(1, 2, figsize=(11, 5))
for ax, (kernel, bandwidth) in zip(axes, [("uniform", h), ("gaussian", h / 2)]):
    model = MeanShift(kernel=kernel, bandwidth=bandwidth).fit(X)
    mean_shift_trajectories(model, X, X[::40], ax=ax)
fig.tight_layout()

# %%
# The uniform kernel against scikit-learn, seeds on a grid of bins (``bin_seeding=True``) to keep
# scikit-learn's run short:
ours = MeanShift(bandwidth=h, bin_seeding=True).fit(X)
ref = sklearn.cluster.MeanShift(bandwidth=h, bin_seeding=True).fit(X)
print("labels identical:", np.array_equal(ours.labels_, ref.labels_))
print("max |centre difference| =",
      np.abs(ours.cluster_centers_ - ref.cluster_centers_).max())
