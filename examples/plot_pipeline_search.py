"""
localkit in a scikit-learn Pipeline and search
==============================================

localkit's estimators are scikit-learn estimators: they go into a
:class:`~sklearn.pipeline.Pipeline`, their parameters into a
:class:`~sklearn.model_selection.GridSearchCV`, and their scores into
:func:`~sklearn.model_selection.cross_val_score`. Here a kernel regression
(:class:`localkit.LocalMeanRegressor`, Nadaraya–Watson) on the diabetes data that ships with
scikit-learn is tuned over its kernel and bandwidth, and compared with scikit-learn's
k-nearest-neighbour regression tuned over its number of neighbours.
"""
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from localkit import LocalMeanRegressor

X, y = load_diabetes(return_X_y=True)
cv = KFold(5, shuffle=True, random_state=0)

# %%
# The pipeline and the grid
# -------------------------
# Standardising first puts the ten features on one scale, so that one bandwidth ``h`` (a
# distance in standard deviations) fits them all. The step's parameters are reached as
# ``<step name>__<parameter>``; the grid mixes numbers with the rule ``"scott"`` (one bandwidth
# per feature from the data's spread, the default), and a smooth kernel with two compactly
# supported ones, which need a wider ``h`` in ten dimensions (a query whose neighbourhood is empty
# takes its nearest sample's target, ``empty="nearest"``).
pipe = make_pipeline(StandardScaler(), LocalMeanRegressor())
bandwidths = [0.7, 1.0, 1.4, 2.0, 3.0, 4.0]
kernels = ["gaussian", "epanechnikov", "tricube"]
grid = {"localmeanregressor__kernel": kernels,
        "localmeanregressor__bandwidth": ["scott", *bandwidths]}
search = GridSearchCV(pipe, grid, cv=cv, scoring="r2").fit(X, y)
print(search.best_params_, f"R^2 = {search.best_score_:.3f}")

# %%
# The same for k-nearest neighbours:
knn_pipe = make_pipeline(StandardScaler(), KNeighborsRegressor())
knn_grid = {"kneighborsregressor__n_neighbors": [5, 10, 20, 30, 50]}
knn = GridSearchCV(knn_pipe, knn_grid, cv=cv, scoring="r2").fit(X, y)
print(knn.best_params_, f"R^2 = {knn.best_score_:.3f}")

# %%
# Scores the search did not see
# -----------------------------
# The best score of a search is optimistic: it was picked among many. Nested cross-validation
# gives an honest comparison: each outer fold runs the whole search on its training part and
# scores the chosen model on its held-out part. ``bandwidth="cv"`` is localkit's own,
# cheaper alternative to a grid: it picks ``h`` by exact leave-one-out inside ``fit``.
outer = KFold(5, shuffle=True, random_state=1)
loo = make_pipeline(StandardScaler(), LocalMeanRegressor(bandwidth="cv"))
models = {
    "LocalMeanRegressor\n(grid search)": search,
    'LocalMeanRegressor\n(bandwidth="cv")': loo,
    "KNeighborsRegressor\n(grid search)": knn,
}
scores = {name: cross_val_score(model, X, y, cv=outer)
          for name, model in models.items()}
for name, s in scores.items():
    name = name.replace("\n", " ")
    print(f"{name:38s} R^2 = {s.mean():.3f} +- {s.std():.3f}")

# %%
# The figure: on the left, the search's cross-validated R^2 against the bandwidth for each
# kernel (the dotted lines: the Scott rule); on the right, the nested scores, one line per outer
# fold.
res = search.cv_results_
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2),
                                  width_ratios=[1.3, 1])
for kernel, color in zip(kernels, ["C0", "C1", "C2"]):
    rows = res["param_localmeanregressor__kernel"] == kernel
    h = res["param_localmeanregressor__bandwidth"][rows]
    r2 = res["mean_test_score"][rows]
    numeric = np.array([not isinstance(v, str) for v in h])
    left.plot(h[numeric].astype(float), r2[numeric], "o-", color=color,
              label=kernel)
    left.axhline(r2[~numeric][0], color=color, ls=":")
left.axhline(knn.best_score_, color="k", ls="--", label="best kNN")
left.set(xscale="log", xlabel="bandwidth h (standard deviations)",
         ylabel="5-fold R^2", title="GridSearchCV over kernel and bandwidth")
left.set_xticks(bandwidths, [f"{b:g}" for b in bandwidths], minor=False)
left.minorticks_off()
left.legend()
table = np.array(list(scores.values()))  # (method, outer fold)
right.plot(table, color="grey", alpha=0.6, marker="o")
right.plot(table.mean(axis=1), "kD-", lw=2, label="mean")
right.set_xticks(range(len(scores)), list(scores), fontsize=8)
right.legend()
right.set(ylabel="R^2 on the outer folds",
          title="Nested cross-validation")
fig.tight_layout()
