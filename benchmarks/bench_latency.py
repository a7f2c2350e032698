"""Latency of a fitted estimator: a few queries against many samples, where the per-call work
(validation, binding, indexes) rather than the pairs decides the time. localkit's estimators
bind their kernel once in ``fit``; the peers are scikit-learn's ``KNeighborsRegressor`` and one
plain NumPy expression of the same Gaussian sums on arrays prepared beforehand. Then whole fits
that query one set of samples many times: relaxation labeling and a grid search."""

import os

import numpy as np
from localkit._timing import interleaved, median_time

TITLE = "Latency: fitted estimators on a few queries, relaxation labeling, grid search"


def run(quick=False):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import GridSearchCV
    from sklearn.neighbors import KNeighborsRegressor

    from localkit import LocalMeanRegressor, RelaxationLabeling

    n, m, d, h = (20_000, 10, 3, 0.3) if quick else (200_000, 10, 3, 0.3)
    repeat = 7 if quick else 31
    rng = np.random.default_rng(0)
    X, Q = rng.normal(size=(n, d)), rng.normal(size=(m, d))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)

    knn_ours = LocalMeanRegressor(kernel="uniform", n_neighbors=10).fit(X, y)
    knn_sk = KNeighborsRegressor(n_neighbors=10).fit(X, y)
    gauss = LocalMeanRegressor(kernel="gaussian", bandwidth=h).fit(X, y)
    x_sq, scale = np.einsum("ij,ij->i", X, X), -0.5 / h**2  # the expression's arrays, prepared once

    def numpy_expression():
        K = np.exp(scale * (np.einsum("ij,ij->i", Q, Q)[:, None] - 2.0 * Q @ X.T + x_sq))
        return K @ y / K.sum(axis=1)

    # each pair alternates on its own: a Gaussian pass between two kNN calls would leave the
    # caches cold for whichever kNN call came next
    (t_knn, t_sk), (r_knn, r_sk) = interleaved([lambda: knn_ours.predict(Q), lambda: knn_sk.predict(Q)], repeat,
                                               warmup=True)
    (t_gauss, t_np), (r_gauss, r_np) = interleaved([lambda: gauss.predict(Q), numpy_expression], repeat, warmup=True)

    digits_X, digits_y = load_digits(return_X_y=True)
    digits_X = digits_X / 16.0
    partial = np.where(np.random.default_rng(1).random(len(digits_y)) < 0.9, -1, digits_y)
    relax = RelaxationLabeling(kernel="gaussian", bandwidth=1.0)
    _, t_relax = median_time(lambda: relax.fit(digits_X, partial), 1 if quick else 3)
    grid = GridSearchCV(LocalMeanRegressor(kernel="gaussian"), {"bandwidth": [0.5, 1.0, 2.0, 4.0]}, cv=5)
    _, t_grid = median_time(lambda: grid.fit(digits_X, digits_y.astype(float)), 1 if quick else 3)

    lines = [f"{m} queries against n = {n:,} samples in {d}-D; medians of {repeat} interleaved calls of a fitted "
             f"estimator's predict (localkit binds its kernel in fit). The machine has 2 cores and was shared "
             f"(load average {os.getloadavg()[0]:.1f} at the end): compare ratios within a row.",
             "",
             "| job | localkit | peer | peer time | localkit / peer | max abs diff |",
             "|---|---|---|---|---|---|",
             f"| kNN regression, k = 10 | {t_knn * 1e3:.2f} ms | scikit-learn KNeighborsRegressor | "
             f"{t_sk * 1e3:.2f} ms | {t_knn / t_sk:.2f} | {np.abs(r_knn - r_sk).max():.1e} |",
             f"| Gaussian kernel regression, h = {h} | {t_gauss * 1e3:.2f} ms | one NumPy expression, prepared "
             f"arrays | {t_np * 1e3:.2f} ms | {t_gauss / t_np:.2f} | {np.abs(r_gauss - r_np).max():.1e} |",
             "",
             "Whole fits on digits (1,797 x 64, scaled to [0, 1]), medians of "
             f"{1 if quick else 3}: RelaxationLabeling (Gaussian, h = 1, 10% labelled, {relax.n_iter_} "
             f"iterations) **{t_relax:.2f} s**; GridSearchCV over LocalMeanRegressor (4 bandwidths x 5 folds) "
             f"**{t_grid:.2f} s**."]
    return "\n".join(lines)
