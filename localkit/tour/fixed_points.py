"""Fixed points of local means: mean shift against scikit-learn's MeanShift, relaxation labeling
against LabelPropagation / LabelSpreading, Hopfield retrieval against its formulas."""
import warnings

import numpy as np

from ._core import Row

ORDER = 30
TITLE = "Fixed points of local means: mean shift, relaxation labeling, Hopfield networks"


def run(ctx):
    import matplotlib.pyplot as plt

    rows = _mean_shift_rows(ctx, plt)
    rows += _labeling_rows(ctx, plt)
    rows += _hopfield_rows(ctx, plt)
    return rows


def _centre_diff(a, b):
    return float(np.abs(a - b).max()) if a.shape == b.shape else np.inf


def _mean_shift_rows(ctx, plt):
    import sklearn.cluster as skc
    from sklearn.datasets import load_iris, make_blobs

    from .. import MeanShift
    from ..plot import mean_shift_trajectories

    rows = []
    X, _ = make_blobs(n_samples=1000, centers=[[1, 1], [-1, -1], [1, -1]], cluster_std=0.6, random_state=0)
    h = float(skc.estimate_bandwidth(X, quantile=0.2, n_samples=500))
    cases = [("blobs 1000 x 2", X, dict(bandwidth=h)),
             ("blobs 1000 x 2, bin seeding", X, dict(bandwidth=h, bin_seeding=True)),
             ("iris, estimated bandwidth", load_iris().data, dict(bandwidth=None))]
    for name, data, params in cases:
        ref, t_ref = ctx.timed(lambda: skc.MeanShift(**params).fit(data))
        ours, t = ctx.timed(lambda: MeanShift(**params).fit(data), repeat=3)
        same = np.array_equal(ours.labels_, ref.labels_)
        rows.append(Row(f"mean shift (uniform), {name}",
                        f"{len(ours.cluster_centers_)} modes, labels {'identical' if same else 'DIFFER'}",
                        f"sklearn MeanShift {len(ref.cluster_centers_)} modes",
                        _centre_diff(ours.cluster_centers_, ref.cluster_centers_) if same else np.inf,
                        t, t_ref, 1e-6))

    # trajectories of a few seeds, uniform and Gaussian kernels
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    for ax, kernel in zip(axes, ("uniform", "gaussian")):
        ms = MeanShift(kernel=kernel, bandwidth=h if kernel == "uniform" else h / 2).fit(X)
        mean_shift_trajectories(ms, X, X[::40], ax=ax)
    axes[1].get_legend().remove()
    fig.tight_layout()
    fig.savefig(ctx.figure_path("mean_shift_trajectories"), dpi=110)
    plt.close(fig)
    return rows


def _partial(y, n, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.unique(np.concatenate([[np.flatnonzero(y == c)[0] for c in np.unique(y)],
                                    rng.choice(len(y), n, replace=False)]))
    y_partial = np.full_like(y, -1)
    y_partial[idx] = y[idx]
    return y_partial


def _labeling_rows(ctx, plt):
    from sklearn.datasets import load_iris, make_moons
    from sklearn.semi_supervised import LabelPropagation, LabelSpreading

    from .. import RelaxationLabeling

    rows = []
    X, y = make_moons(400, noise=0.1, random_state=0)
    Xi, yi = load_iris(return_X_y=True)
    data = {"two moons 400": (X, y, _partial(y, 8), 0.2), "iris": (Xi, yi, _partial(yi, 12), 0.5)}
    for name, (D, truth, yp, h) in data.items():
        g = 1 / (2 * h * h)
        cases = [("label propagation (clamped)", lambda: LabelPropagation(kernel="rbf", gamma=g, max_iter=1000),
                  dict(bandwidth=h), "LabelPropagation(rbf)"),
                 ("label spreading (alpha=0.2, symmetric)", lambda: LabelSpreading(kernel="rbf", gamma=g, alpha=0.2),
                  dict(bandwidth=h, alpha=0.2, normalization="symmetric"), "LabelSpreading(rbf)")]
        for method, make_ref, params, ref_name in cases:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ref, t_ref = ctx.timed(lambda: make_ref().fit(D, yp))
                ours, t = ctx.timed(lambda: RelaxationLabeling(**params).fit(D, yp), repeat=3)
            rows.append(Row(f"relaxation labeling: {method}, {name}",
                            f"acc={np.mean(ours.transduction_ == truth):.3f}, {ours.n_iter_} it",
                            f"sklearn {ref_name} acc={np.mean(ref.transduction_ == truth):.3f}, {ref.n_iter_} it",
                            float(np.abs(ours.label_distributions_ - ref.label_distributions_).max()),
                            t, t_ref, 1e-6))

    # soft clamping with the plain local mean and the Rosenfeld-Hummel-Zucker rule: informative rows
    D, truth, yp, h = data["two moons 400"]
    ref = LabelSpreading(kernel="rbf", gamma=1 / (2 * h * h), alpha=0.2).fit(D, yp)
    variants = {"soft clamping, local-mean graph": dict(bandwidth=h, alpha=0.2),
                "Rosenfeld-Hummel-Zucker (r = 2I - 1)": dict(bandwidth=h, compatibility=2 * np.eye(2) - 1)}
    fitted = {}
    for method, params in variants.items():
        fitted[method], t = ctx.timed(lambda: RelaxationLabeling(**params).fit(D, yp))
        m = fitted[method]
        rows.append(Row(f"relaxation labeling: {method}, two moons", f"acc={np.mean(m.transduction_ == truth):.3f}",
                        f"sklearn LabelSpreading acc={np.mean(ref.transduction_ == truth):.3f} (other graph)",
                        float(np.abs(m.label_distributions_ - ref.label_distributions_).max()), t, np.nan))

    lp = RelaxationLabeling(bandwidth=h).fit(D, yp)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, (title, model) in zip(axes, [("clamped (= LabelPropagation)", lp),
                                         ("Rosenfeld-Hummel-Zucker", fitted["Rosenfeld-Hummel-Zucker (r = 2I - 1)"])]):
        ax.scatter(D[:, 0], D[:, 1], c=model.label_distributions_[:, 1], cmap="coolwarm", s=12, vmin=0, vmax=1)
        lab = yp != -1
        ax.scatter(D[lab, 0], D[lab, 1], c=yp[lab], cmap="coolwarm", s=120, marker="*", edgecolors="k")
        ax.set_title(f"{title}: acc {np.mean(model.transduction_ == truth):.3f} from {lab.sum()} labels")
    fig.tight_layout()
    fig.savefig(ctx.figure_path("label_propagation_moons"), dpi=110)
    plt.close(fig)
    return rows


def _flip(rng, X, rate):
    return X * np.where(rng.random(X.shape) < rate, -1.0, 1.0)


def _hopfield_rows(ctx, plt):
    from scipy.special import softmax
    from sklearn.datasets import load_digits

    from .. import HopfieldNetwork

    rows = []
    rng = np.random.default_rng(0)
    digits = load_digits().data
    B = np.where(digits > digits.mean(axis=0), 1.0, -1.0)  # binarised digits, 64 bipolar units
    stored, probes = B[:500], _flip(rng, B[:100], 0.1)
    beta = 0.5
    net = HopfieldNetwork(beta=beta, max_iter=1).fit(stored)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        one, t = ctx.timed(lambda: net.predict(probes), repeat=3)
    ref, t_ref = ctx.timed(lambda: np.stack([stored.T @ softmax(beta * stored @ xi) for xi in probes]))
    rows.append(Row("modern Hopfield: one update (500 digits stored)", "local mean, softmax kernel, h=1/beta",
                    "X^T softmax(beta X xi)", float(np.abs(one - ref).max()), t, t_ref, 1e-10))

    classical = HopfieldNetwork(kind="classical", max_iter=1).fit(stored[:8])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s, t = ctx.timed(lambda: classical.predict(probes))
    field = probes @ classical.weights_
    ref, t_ref = ctx.timed(lambda: np.where(field > 0, 1.0, np.where(field < 0, -1.0, probes)))
    rows.append(Row("classical Hopfield: one synchronous update", "sign of Hebbian sum", "Hopfield 1982 sign(W s)",
                    float(np.abs(s - ref).max()), t, t_ref, 0.0))

    # capacity: retrieval accuracy against the number of stored patterns
    loads = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    order = rng.permutation(len(B))
    curves = {"modern (beta=1)": [], "classical, synchronous": [], "classical, asynchronous": []}
    rand_curve = []
    R = rng.choice([-1.0, 1.0], size=(512, 64))
    for P in loads:
        patterns = B[order[:P]]
        noisy = _flip(rng, patterns, 0.1)
        nets = {"modern (beta=1)": HopfieldNetwork(beta=1.0),
                "classical, synchronous": HopfieldNetwork(kind="classical"),
                "classical, asynchronous": HopfieldNetwork(kind="classical", update="asynchronous", random_state=0)}
        for name, net in nets.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out = np.sign(net.fit(patterns).predict(noisy))
            curves[name].append(np.mean(np.all(out == patterns, axis=1)))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = HopfieldNetwork(kind="classical").fit(R[:P]).predict(_flip(rng, R[:P], 0.1))
        rand_curve.append(np.mean(np.all(out == R[:P], axis=1)))
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, acc in curves.items():
        ax.semilogx(loads, acc, "o-", label=f"{name}, digits")
    ax.semilogx(loads, rand_curve, "s--", color="0.5", label="classical, random patterns")
    ax.axvline(0.14 * 64, color="k", lw=0.8, ls=":", label="0.14 N (N = 64)")
    ax.set_xlabel("stored patterns")
    ax.set_ylabel("exact recall (10% of bits flipped)")
    ax.set_title("Hopfield capacity on binarised digits")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.figure_path("hopfield_capacity"), dpi=110)
    plt.close(fig)
    modern_at_512 = curves["modern (beta=1)"][-1]
    rows.append(Row("Hopfield capacity, 512 digits stored (N=64)",
                    f"modern exact recall {modern_at_512:.2f}",
                    f"classical {curves['classical, synchronous'][-1]:.2f}; random patterns "
                    f"{rand_curve[loads.index(4)]:.2f} at 4, {rand_curve[loads.index(32)]:.2f} at 32",
                    np.nan, np.nan, np.nan))
    return rows
