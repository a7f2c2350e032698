"""
Relaxation labeling: label propagation as iterated local means
==============================================================

Label propagation repeats a local mean of the label distributions of the neighbours, with the
labelled points clamped to their labels; it equals scikit-learn's ``LabelPropagation``. The
Rosenfeld–Hummel–Zucker rule adds a compatibility matrix between labels. Eight labelled points
(stars) label the two moons.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_moons

from localkit import RelaxationLabeling

X, y = make_moons(400, noise=0.1, random_state=0)
rng = np.random.default_rng(0)
first_of_each = [np.flatnonzero(y == c)[0] for c in (0, 1)]
labelled = np.concatenate([first_of_each, rng.choice(len(y), 6, replace=False)])
partial = np.full_like(y, -1)
partial[labelled] = y[labelled]

models = {
    "clamped (= LabelPropagation)": RelaxationLabeling(bandwidth=0.2),
    "Rosenfeld-Hummel-Zucker": RelaxationLabeling(bandwidth=0.2,
                                                  compatibility=2 * np.eye(2) - 1),
}
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, (title, model) in zip(axes, models.items()):
    model.fit(X, partial)
    p_upper = model.label_distributions_[:, 1]
    ax.scatter(*X.T, c=p_upper, cmap="coolwarm", s=12, vmin=0, vmax=1)
    ax.scatter(*X[labelled].T, c=y[labelled], cmap="coolwarm", s=160, marker="*",
               edgecolors="k")
    ax.set_title(f"{title}: accuracy {np.mean(model.transduction_ == y):.3f}")
fig.tight_layout()
