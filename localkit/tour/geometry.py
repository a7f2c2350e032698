"""Local geometry and rules: locally linear embedding against scikit-learn, local PCA against
global PCA, TSK fuzzy inference against simpful's Sugeno inference and linear regression."""
import contextlib
import io
import warnings

import numpy as np

from ..exceptions import BandwidthWarning
from ._core import Row

ORDER = 40
TITLE = "Local geometry and rule-based local models: LLE, local PCA, TSK fuzzy inference"


def run(ctx):
    import matplotlib.pyplot as plt

    return _lle_rows(ctx, plt) + _local_pca_rows(ctx) + _tsk_rows(ctx, plt)


def _lle_rows(ctx, plt):
    from scipy.spatial import procrustes
    from sklearn.datasets import make_swiss_roll
    from sklearn.manifold import LocallyLinearEmbedding as SkLLE

    from .. import LocallyLinearEmbedding

    rows = []
    for n, solver in ((1000, "dense"), (5000, "arpack")):
        X, t = make_swiss_roll(n, random_state=0)
        params = dict(n_neighbors=12, n_components=2, reg=1e-3, eigen_solver=solver, random_state=0)
        ref, t_ref = ctx.timed(lambda: SkLLE(**params).fit(X))
        ours, t_ours = ctx.timed(lambda: LocallyLinearEmbedding(**params).fit(X))
        rows.append(Row(f"LLE, swiss roll {n} x 3, k=12, {solver} solver (Procrustes disparity)",
                        f"reconstruction error {ours.reconstruction_error_:.3e}",
                        f"sklearn LocallyLinearEmbedding({solver}) {ref.reconstruction_error_:.3e}",
                        procrustes(ours.embedding_, ref.embedding_)[2], t_ours, t_ref, 1e-6))
        if solver == "dense":
            fig = plt.figure(figsize=(13, 4.2))
            ax = fig.add_subplot(1, 3, 1, projection="3d")
            ax.scatter(*X.T, c=t, s=4, cmap="viridis")
            ax.set_title(f"swiss roll, n={n}")
            for i, (Y, name) in enumerate(((ours.embedding_, "localkit"), (ref.embedding_, "scikit-learn")), 2):
                ax = fig.add_subplot(1, 3, i)
                ax.scatter(Y[:, 0], Y[:, 1], c=t, s=4, cmap="viridis")
                ax.set_title(f"{name} LLE (k=12, dense)")
                ax.set_xticks([]), ax.set_yticks([])
            fig.tight_layout()
            fig.savefig(ctx.figure_path("lle_swiss_roll"), dpi=110)
            plt.close(fig)
    return rows


def _local_pca_rows(ctx):
    from sklearn.datasets import load_iris
    from sklearn.decomposition import PCA

    from .. import LocalPCA

    X = load_iris().data
    ref, t_ref = ctx.timed(lambda: PCA(n_components=2).fit(X))
    with warnings.catch_warnings():  # h = 1e6 on purpose: an infinitely wide kernel is global PCA,
        warnings.simplefilter("ignore", BandwidthWarning)  # which the BandwidthWarning says
        res, t_ours = ctx.timed(lambda: LocalPCA(n_components=2, bandwidth=1e6).fit(X).local_pca(X))
    diff = max(np.abs(res.components - ref.components_).max(),
               np.abs(res.explained_variance_ratio - ref.explained_variance_ratio_).max())
    return [Row("local PCA, iris, Gaussian h=1e6 at all 150 points (components, variance ratios)",
                f"ratio {res.explained_variance_ratio[0].round(4).tolist()}",
                f"sklearn PCA {ref.explained_variance_ratio_.round(4).tolist()}",
                float(diff), t_ours, t_ref, 1e-8)]


def simpful_sugeno(centers, sigmas, coefs, X):
    """The reference: the same rule base in simpful (Gaussian sets, product AND, linear outputs
    ``coefs[r] = [a_1 .. a_d, b]`` or crisp ones ``coefs[r] = [b]``), evaluated by its Sugeno
    inference at each row of ``X``. The tests compare against this too."""
    import simpful as sf

    centers, sigmas, coefs = (np.asarray(a, dtype=float) for a in (centers, sigmas, coefs))
    R, d = centers.shape
    names = [f"x{k}" for k in range(d)]
    with contextlib.redirect_stdout(io.StringIO()):  # simpful prints its model type
        fs = sf.FuzzySystem(operators=["AND_PRODUCT"], show_banner=False, verbose=False)
        for k, name in enumerate(names):
            sets = [sf.GaussianFuzzySet(mu=float(centers[r, k]), sigma=float(sigmas[r, k]), term=f"r{r}")
                    for r in range(R)]
            fs.add_linguistic_variable(name, sf.LinguisticVariable(sets, concept=name))
        for r in range(R):
            if coefs.shape[1] == d + 1:
                terms = [f"{float(a)!r}*{name}" for a, name in zip(coefs[r, :d], names)]
                fs.set_output_function(f"f{r}", " + ".join(terms + [repr(float(coefs[r, d]))]))
            else:
                fs.set_crisp_output_value(f"f{r}", float(coefs[r, 0]))
        fs.add_rules([f"IF {' AND '.join(f'({name} IS r{r})' for name in names)} THEN (y IS f{r})"
                      for r in range(R)])
        out = []
        for x in X:
            for name, v in zip(names, x):
                fs.set_variable(name, float(v))
            out.append(fs.Sugeno_inference(["y"])["y"])
    return np.array(out, dtype=float)


def _tsk_rows(ctx, plt):
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import LinearRegression
    from sklearn.model_selection import cross_val_score

    from .. import TSKFuzzyRegressor

    X, y = load_diabetes(return_X_y=True)
    rows = []
    Xs = X[:, [2, 3, 8]]  # bmi, bp, s5
    tsk = TSKFuzzyRegressor(n_rules=3, random_state=0).fit(Xs, y)
    ref, t_ref = ctx.timed(lambda: simpful_sugeno(tsk.centers_, tsk.sigmas_, tsk.coefs_, Xs))
    ours, t_ours = ctx.timed(lambda: tsk.predict(Xs), repeat=3)
    rows.append(Row("TSK from fitted rules, diabetes (bmi, bp, s5), 3 rules, product AND",
                    f"mean prediction {ours.mean():.4f}", f"simpful Sugeno {ref.mean():.4f}",
                    float(np.abs(ours - ref).max()), t_ours, t_ref, 1e-9))

    lin, t_lin = ctx.timed(lambda: cross_val_score(LinearRegression(), X, y, cv=5).mean())
    cv, t_cv = ctx.timed(lambda: cross_val_score(TSKFuzzyRegressor(random_state=0), X, y, cv=5).mean())
    rows.append(Row("TSK regressor, diabetes 5-fold CV R^2 (value: shortfall vs linear, must be 0)",
                    f"R^2={cv:.4f}", f"sklearn LinearRegression R^2={lin:.4f}",
                    float(max(0.0, lin - cv)), t_cv, t_lin, 0.0))

    # figure: one input (bmi), memberships and the blended fit
    x = X[:, [2]]
    one = TSKFuzzyRegressor(n_rules=3, random_state=0).fit(x, y)
    grid = np.linspace(x.min(), x.max(), 300)[:, None]
    W = one.memberships(grid)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.5, 6.5), sharex=True, height_ratios=[1, 2])
    for r in range(one.n_rules):
        mu = np.exp(-(grid[:, 0] - one.centers_[r, 0]) ** 2 / (2 * one.sigmas_[r, 0] ** 2))
        line, = ax1.plot(grid, W[:, r], lw=2, label=f"rule {r + 1}: normalised $w_r$")
        ax1.plot(grid, mu, "--", color=line.get_color(), lw=1)
        a, b = one.coefs_[r]
        ax2.plot(grid, a * grid[:, 0] + b, ":", color=line.get_color(), lw=1.2)
    ax1.set_ylabel("membership")
    ax1.set_title("TSK on diabetes (bmi): Gaussian memberships (dashed) and normalised weights")
    ax1.legend(fontsize=8, loc="upper right")
    ax2.scatter(x, y, s=6, color="0.6", label="data")
    ax2.plot(grid, one.predict(grid), "k", lw=2, label="TSK blend $\\sum_r w_r(x) f_r(x)$")
    ax2.set_ylim(y.min() - 20, y.max() + 20)
    ax2.set_xlabel("bmi (scaled)")
    ax2.set_ylabel("disease progression")
    ax2.legend(fontsize=8, loc="upper left", title="dotted: rule consequents $f_r$", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(ctx.figure_path("tsk_memberships_fit"), dpi=110)
    plt.close(fig)
    return rows
