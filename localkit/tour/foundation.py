"""Local means: Nadaraya–Watson, kNN and kernel density against statsmodels, scikit-learn and scipy."""
import numpy as np

from ._core import Row

ORDER = 10
TITLE = "Local means: kernel regression, kNN, kernel density"


def run(ctx):
    from scipy.stats import gaussian_kde
    from sklearn.datasets import load_diabetes, load_iris, load_wine
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KernelDensity, KNeighborsClassifier, KNeighborsRegressor
    from sklearn.preprocessing import StandardScaler
    from statsmodels.nonparametric.kernel_regression import KernelReg

    from .. import LocalMeanClassifier, LocalMeanRegressor, kernel_density

    rows = []
    X, y = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)
    cols, bw = [2, 3, 8], [0.02, 0.05, 0.04]
    ref, t_ref = ctx.timed(lambda: KernelReg(ytr, Xtr[:, cols], var_type="ccc", reg_type="lc", bw=bw)
                           .fit(Xte[:, cols])[0])
    ours, t = ctx.timed(lambda: LocalMeanRegressor(bandwidth=np.array(bw)).fit(Xtr[:, cols], ytr)
                        .predict(Xte[:, cols]), repeat=3)
    rows.append(Row("Nadaraya-Watson (diabetes, d=3)", f"R^2={_r2(yte, ours):.4f}",
                    f"statsmodels KernelReg lc R^2={_r2(yte, ref):.4f}", np.abs(ours - ref).max(), t, t_ref, 1e-8))

    ref, t_ref = ctx.timed(lambda: KNeighborsRegressor(7).fit(Xtr, ytr).predict(Xte), repeat=3)
    ours, t = ctx.timed(lambda: LocalMeanRegressor(kernel="uniform", n_neighbors=7).fit(Xtr, ytr).predict(Xte),
                        repeat=3)
    rows.append(Row("kNN regression k=7 (diabetes)", f"R^2={_r2(yte, ours):.4f}",
                    f"sklearn KNeighborsRegressor R^2={_r2(yte, ref):.4f}", np.abs(ours - ref).max(), t, t_ref, 1e-9))

    Xw, yw = load_wine(return_X_y=True)
    Xw = StandardScaler().fit_transform(Xw)
    Wtr, Wte, wtr, wte = train_test_split(Xw, yw, test_size=0.3, random_state=1)
    ref, t_ref = ctx.timed(lambda: KNeighborsClassifier(5).fit(Wtr, wtr).predict_proba(Wte), repeat=3)
    ours, t = ctx.timed(lambda: LocalMeanClassifier(kernel="uniform", n_neighbors=5).fit(Wtr, wtr)
                        .predict_proba(Wte), repeat=3)
    rows.append(Row("kNN classification k=5 (wine)", f"acc={np.mean(ours.argmax(1) == wte):.3f}",
                    f"sklearn KNeighborsClassifier acc={np.mean(ref.argmax(1) == wte):.3f}",
                    np.abs(ours - ref).max(), t, t_ref, 1e-9))

    Xi = load_iris().data[:, :2]
    Q = Xi + 0.05
    ref, t_ref = ctx.timed(lambda: KernelDensity(kernel="epanechnikov", bandwidth=0.73).fit(Xi).score_samples(Q),
                           repeat=3)
    ours, t = ctx.timed(lambda: kernel_density(Q, Xi, kernel="epanechnikov", bandwidth=0.73, log=True), repeat=3)
    rows.append(Row("kernel density, Epanechnikov (iris, d=2)", f"mean log p={ours.mean():.4f}",
                    f"sklearn KernelDensity {ref.mean():.4f}", np.abs(ours - ref).max(), t, t_ref, 1e-12))
    x = load_iris().data[:, 2]
    q = np.linspace(0, 8, 200)
    ref, t_ref = ctx.timed(lambda: gaussian_kde(x)(q), repeat=3)
    ours, t = ctx.timed(lambda: kernel_density(q, x, bandwidth="scott"), repeat=3)
    rows.append(Row("kernel density, Scott rule (iris petal length)", f"max p={ours.max():.4f}",
                    f"scipy gaussian_kde {ref.max():.4f}", np.abs(ours - ref).max(), t, t_ref, 1e-12))

    _plot_profiles(ctx)
    _plot_regression(ctx, X, y)
    _plot_decision_surface(ctx, Xw, yw)
    return rows


def _r2(y, p):
    return 1 - np.sum((y - p) ** 2) / np.sum((y - y.mean()) ** 2)


def _plot_profiles(ctx):
    import matplotlib.pyplot as plt

    from ..plot import kernel_profiles

    ax = kernel_profiles()
    ax.figure.tight_layout()
    ax.figure.savefig(ctx.figure_path("kernel_profiles"), dpi=110)
    plt.close(ax.figure)


def _plot_regression(ctx, X, y):
    import matplotlib.pyplot as plt

    from ..plot import local_mean_fit

    bmi = X[:, 2]
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, h in enumerate([0.003, 0.01, 0.03]):  # the band once, on the middle bandwidth
        local_mean_fit(bmi, y, bandwidth=h, band=1.0 if h == 0.01 else 0, scatter=i == 0,
                       label=f"Gaussian, h={h}", ax=ax)
    local_mean_fit(bmi, y, kernel="uniform", n_neighbors=40, band=0, scatter=False, label="kNN, k=40", ax=ax)
    ax.lines[-1].set_linestyle("--")
    ax.set(xlabel="BMI (scaled)", ylabel="disease progression", title="Nadaraya-Watson: the local mean of y")
    fig.tight_layout()
    fig.savefig(ctx.figure_path("regression_1d"), dpi=110)
    plt.close(fig)


def _plot_decision_surface(ctx, X, y):
    import matplotlib.pyplot as plt
    from sklearn.decomposition import PCA

    from .. import LocalMeanClassifier

    Z = PCA(2).fit_transform(X)
    xx, yy = np.meshgrid(np.linspace(Z[:, 0].min() - 1, Z[:, 0].max() + 1, 200),
                         np.linspace(Z[:, 1].min() - 1, Z[:, 1].max() + 1, 200))
    G = np.c_[xx.ravel(), yy.ravel()]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (title, clf) in zip(axes, [("Gaussian, h=0.6", LocalMeanClassifier(bandwidth=0.6)),
                                       ("uniform kNN, k=9", LocalMeanClassifier(kernel="uniform", n_neighbors=9))]):
        P = clf.fit(Z, y).predict_proba(G)
        ax.contourf(xx, yy, P.argmax(1).reshape(xx.shape), alpha=0.25, levels=[-0.5, 0.5, 1.5, 2.5], cmap="viridis")
        ax.contour(xx, yy, P.max(1).reshape(xx.shape), levels=[0.5, 0.8], colors="k", linewidths=0.5)
        ax.scatter(Z[:, 0], Z[:, 1], c=y, s=12, cmap="viridis", edgecolor="k", linewidth=0.3)
        ax.set(title=f"Local mean of one-hot labels: {title}", xlabel="PC 1", ylabel="PC 2")
    fig.tight_layout()
    fig.savefig(ctx.figure_path("decision_surface"), dpi=110)
    plt.close(fig)
