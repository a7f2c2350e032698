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

    kde_rows = _kernel_density_rows(X, Q, repeat)
    kept_rows = _kept_binding_rows(X, Q, y, repeat)
    small_rows = _small_data_rows(repeat)

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
             *kde_rows,
             "",
             "Every estimator's post-fit call against one pass of the binding it kept from fit (the "
             "engine call alone: what the estimator adds is its validation and result):",
             "",
             "| estimator call | estimator | kept binding's pass | ratio |",
             "|---|---|---|---|",
             *kept_rows,
             "",
             "Small data, fit + predict in one process, one thread (BLAS too), against the scikit-learn twin "
             "(or a NumPy loop), medians of interleaved runs:",
             "",
             "| job | localkit | peer | peer time | localkit / peer | max abs diff |",
             "|---|---|---|---|---|---|",
             *small_rows,
             "",
             "Whole fits on digits (1,797 x 64, scaled to [0, 1]), medians of "
             f"{1 if quick else 3}: RelaxationLabeling (Gaussian, h = 1, 10% labelled, {relax.n_iter_} "
             f"iterations) **{t_relax:.2f} s**; GridSearchCV over LocalMeanRegressor (4 bandwidths x 5 folds) "
             f"**{t_grid:.2f} s**."]
    return "\n".join(lines)


def _kernel_density_rows(X, Q, repeat):
    """``KernelDensity.score_samples`` of the queries against scikit-learn's, Epanechnikov and Gaussian."""
    from sklearn.neighbors import KernelDensity as SkKernelDensity

    from localkit import KernelDensity

    rows = []
    for kernel in ("epanechnikov", "gaussian"):
        ours, ref = KernelDensity(kernel=kernel, bandwidth=0.3).fit(X), SkKernelDensity(kernel=kernel, bandwidth=0.3).fit(X)
        (t, t_ref), (r, r_ref) = interleaved([lambda: ours.score_samples(Q), lambda: ref.score_samples(Q)], repeat,
                                             warmup=True)
        # a query with no sample in the support: log 0 = -inf here, a round-off residue (~ -36) in scikit-learn's tree
        both = np.isfinite(r) & np.isfinite(r_ref)
        empty = f" ({int(np.sum(~np.isfinite(r)))} empty)" if not both.all() else ""
        rows.append(f"| KernelDensity.score_samples, {kernel}, h = 0.3 | {t * 1e3:.2f} ms | scikit-learn KernelDensity | "
                    f"{t_ref * 1e3:.2f} ms | {t / t_ref:.2f} | {np.abs(r - r_ref)[both].max():.1e}{empty} |")
    return rows


def _kept_binding_rows(X, Q, y, repeat):
    """A fitted estimator's call against the pass of the binding it kept (the estimator's own cost)."""
    from localkit import KernelDensity, LocalMeanClassifier, LocalMeanRegressor

    labels = (y > 0).astype(int)
    cases = [("LocalMeanRegressor(kNN, k = 10).predict", LocalMeanRegressor(kernel="uniform", n_neighbors=10).fit(X, y),
              "predict"),
             ("LocalMeanRegressor(gaussian, h = 0.3).predict", LocalMeanRegressor(bandwidth=0.3).fit(X, y), "predict"),
             ("LocalMeanClassifier(kNN, k = 10).predict_proba",
              LocalMeanClassifier(kernel="uniform", n_neighbors=10).fit(X, labels), "predict_proba"),
             ("KernelDensity(epanechnikov, h = 0.3).score_samples",
              KernelDensity(kernel="epanechnikov", bandwidth=0.3).fit(X), "score_samples")]
    rows = []
    for name, est, method in cases:
        binding, values = est._kept["samples"] if hasattr(est, "_kept") else (est._bound, None)  # a density: no values
        (t, t_pass), _ = interleaved([lambda: getattr(est, method)(Q), lambda: binding.sums(Q, values)], repeat,
                                     warmup=True)
        rows.append(f"| {name} | {t * 1e3:.2f} ms | {t_pass * 1e3:.2f} ms | {t / t_pass:.2f} |")
    return rows


def _small_data_rows(repeat):
    """Fit + predict on the tour's small data sets, one thread, against the scikit-learn twin."""
    from sklearn.datasets import load_diabetes, load_digits, load_iris, load_wine, make_moons
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
    from sklearn.preprocessing import StandardScaler
    from sklearn.semi_supervised import LabelPropagation, LabelSpreading
    from threadpoolctl import threadpool_limits

    from localkit import HopfieldNetwork, LocalMeanClassifier, LocalMeanRegressor, RelaxationLabeling

    rows = []

    def row(name, ours, peer_name, peer):
        (t, t_ref), (r, r_ref) = interleaved([ours, peer], repeat, warmup=True)
        rows.append(f"| {name} | {t * 1e3:.2f} ms | {peer_name} | {t_ref * 1e3:.2f} ms | {t / t_ref:.2f} | "
                    f"{np.abs(np.asarray(r, dtype=float) - np.asarray(r_ref, dtype=float)).max():.1e} |")

    with threadpool_limits(limits=1):
        X, y = load_diabetes(return_X_y=True)
        Xtr, Xte, ytr, _ = train_test_split(X, y, test_size=0.25, random_state=0)  # the tour's split
        row("kNN regression, k = 7, diabetes (fit + predict)",
            lambda: LocalMeanRegressor(kernel="uniform", n_neighbors=7).fit(Xtr, ytr).predict(Xte),
            "KNeighborsRegressor", lambda: KNeighborsRegressor(7).fit(Xtr, ytr).predict(Xte))
        W, w = load_wine(return_X_y=True)
        Wtr, Wte, wtr, _ = train_test_split(StandardScaler().fit_transform(W), w, test_size=0.3, random_state=1)
        row("kNN classification, k = 5, wine (fit + predict_proba)",
            lambda: LocalMeanClassifier(kernel="uniform", n_neighbors=5).fit(Wtr, wtr).predict_proba(Wte),
            "KNeighborsClassifier", lambda: KNeighborsClassifier(5).fit(Wtr, wtr).predict_proba(Wte))
        rng = np.random.default_rng(0)
        gamma = 20.0
        h = 1.0 / np.sqrt(2.0 * gamma)
        for data, (D, labels) in (("two moons", make_moons(400, noise=0.1, random_state=0)),
                                  ("iris", load_iris(return_X_y=True))):
            partial = np.where(rng.random(len(labels)) < 0.9, -1, labels)
            row(f"label propagation, {data}",
                lambda: RelaxationLabeling(bandwidth=h, max_iter=1000).fit(D, partial).label_distributions_,
                "LabelPropagation", lambda: LabelPropagation(gamma=gamma, max_iter=1000).fit(D, partial)
                .label_distributions_)
            row(f"label spreading (alpha = 0.2), {data}",
                lambda: RelaxationLabeling(bandwidth=h, alpha=0.2, normalization="symmetric").fit(D, partial)
                .label_distributions_,
                "LabelSpreading", lambda: LabelSpreading(gamma=gamma, alpha=0.2).fit(D, partial).label_distributions_)
        patterns = np.where(load_digits().data[:20] > 7, 1.0, -1.0)
        probes = np.where(rng.random(patterns.shape) < 0.2, -patterns, patterns)
        beta = 0.1
        net = HopfieldNetwork(beta=beta).fit(patterns)

        def numpy_retrieval():  # the update X^T softmax(beta X xi) until it moves by at most 1e-8
            S = probes.copy()
            for _ in range(100):
                L = beta * S @ patterns.T
                L -= L.max(axis=1, keepdims=True)
                W_ = np.exp(L)
                new = (W_ / W_.sum(axis=1, keepdims=True)) @ patterns
                done = np.max(np.abs(new - S)) <= 1e-8
                S = new
                if done:
                    break
            return S

        row("modern Hopfield retrieval, 20 binarised digits, 20% of bits flipped (predict)",
            lambda: net.predict(probes), "NumPy softmax iteration", numpy_retrieval)
    return rows
