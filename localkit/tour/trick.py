"""The localization trick: LOESS, local linear regression, localized logistic regression,
bandwidth selection by leave-one-out, and metric learning."""
import warnings

import numpy as np

from ._core import Row, iteration_budget

ORDER = 20
TITLE = "The localization trick: LOESS, local linear, localized estimators, bandwidth selection, MLKR"


def _r2(y, p):
    return 1.0 - np.mean((y - p) ** 2) / np.var(y)


def run(ctx):
    return _loess(ctx) + _local_linear(ctx) + _localized(ctx) + _selection(ctx) + _metric_learning(ctx)


def _noisy_sine(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 2 * np.pi, n)
    return x, np.sin(x) + 0.3 * rng.standard_t(3, size=n)


def _loess(ctx):
    from statsmodels.nonparametric.smoothers_lowess import lowess

    from .. import LocalPolynomialRegressor

    x, y = _noisy_sine()
    ref, t_ref = ctx.timed(lambda: lowess(y, x, frac=0.2, it=2, delta=0, return_sorted=False), repeat=3)
    ours, t = ctx.timed(lambda: LocalPolynomialRegressor(frac=0.2, robust_iters=2).fit(x[:, None], y)
                        .predict(x[:, None]), repeat=3)
    return [Row("LOESS frac=0.2, 2 robustness iterations (noisy sine, n=2000)",
                f"RMSE to sin={np.sqrt(np.mean((ours - np.sin(x)) ** 2)):.4f}",
                f"statsmodels lowess RMSE={np.sqrt(np.mean((ref - np.sin(x)) ** 2)):.4f}",
                np.abs(ours - ref).max(), t, t_ref, 1e-8)]


def _local_linear(ctx):
    from sklearn.datasets import load_diabetes
    from statsmodels.nonparametric.kernel_regression import KernelReg

    from .. import LocalPolynomialRegressor

    X, y = load_diabetes(return_X_y=True)
    X, y = X[:300, [0, 2, 3, 8]], y[:300]
    bw = 0.8 * X.std(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # statsmodels' own deprecation notice
        ref, t_ref = ctx.timed(lambda: KernelReg(y, X, var_type="cccc", reg_type="ll", bw=bw).fit()[0])
    ours, t = ctx.timed(lambda: LocalPolynomialRegressor(kernel="gaussian", bandwidth=bw).fit(X, y).predict(X),
                        repeat=3)
    return [Row("local linear, Gaussian, per-feature h (diabetes, d=4)", f"R^2={_r2(y, ours):.4f}",
                f"statsmodels KernelReg ll R^2={_r2(y, ref):.4f}", np.abs(ours - ref).max(), t, t_ref, 1e-6)]


def _localized(ctx):
    from sklearn.datasets import load_diabetes, load_iris
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.preprocessing import StandardScaler

    from .. import Kernel, Localized, LocalPolynomialRegressor

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    Xq = X[::5] + 0.05
    est = LogisticRegression(tol=1e-10, max_iter=5000)

    def hand_loop():
        return np.array([LogisticRegression(tol=1e-10, max_iter=5000)
                         .fit(X, y, sample_weight=Kernel("gaussian", bandwidth=1.2)(q[None], X)[0])
                         .predict_proba(q[None])[0] for q in Xq])

    ref, t_ref = ctx.timed(hand_loop)
    ours, t = ctx.timed(lambda: Localized(est, bandwidth=1.2).fit(X, y).predict_proba(Xq))
    rows = [Row("localized logistic regression (iris, 30 queries)",
                f"acc={np.mean(ours.argmax(1) == y[::5]):.3f}",
                f"hand loop of weighted LogisticRegression acc={np.mean(ref.argmax(1) == y[::5]):.3f}",
                np.abs(ours - ref).max(), t, t_ref, 1e-8)]
    Xd, yd = load_diabetes(return_X_y=True)
    ref, t_ref = ctx.timed(lambda: LocalPolynomialRegressor(kernel="gaussian", bandwidth=0.08).fit(Xd, yd)
                           .predict(Xd[:100]))
    ours, t = ctx.timed(lambda: Localized(LinearRegression(), bandwidth=0.08).fit(Xd, yd).predict(Xd[:100]))
    rows.append(Row("Localized(LinearRegression) = local linear (diabetes, d=10)", f"R^2={_r2(yd[:100], ours):.4f}",
                    f"LocalPolynomialRegressor(degree=1) R^2={_r2(yd[:100], ref):.4f}",
                    np.abs(ours - ref).max(), t, t_ref, 1e-8))
    return rows


def _selection(ctx):
    import matplotlib.pyplot as plt
    from scipy.spatial.distance import cdist
    from scipy.special import softmax
    from sklearn.datasets import load_diabetes

    from .. import LocalMeanRegressor, LocalPolynomialRegressor

    X, y = load_diabetes(return_X_y=True)
    D2 = cdist(X, X, "sqeuclidean")

    def brute_loo(h):  # dense leave-one-out Nadaraya–Watson, self-weights removed
        L = -D2 / (2 * h * h)
        np.fill_diagonal(L, -np.inf)
        return np.mean((softmax(L, axis=1) @ y - y) ** 2)

    s = np.sqrt(np.var(X, axis=0).sum())
    grid = np.geomspace(s / 50, 5 * s, 200)
    curve, t_ref = ctx.timed(lambda: np.array([brute_loo(h) for h in grid]))
    model, t = ctx.timed(lambda: LocalMeanRegressor(bandwidth="cv").fit(X, y))
    excess = max(0.0, brute_loo(model.bandwidth_) - curve.min()) / curve.min()
    rows = [Row("bandwidth='cv', exact leave-one-out (diabetes)", f"h={model.bandwidth_:.4f}, "
                f"LOO MSE={brute_loo(model.bandwidth_):.1f}", f"brute-force 200-point grid min={curve.min():.1f}",
                excess, t, t_ref, 0.0)]

    x, yy = _noisy_sine(300, seed=3)
    loess = LocalPolynomialRegressor(bandwidth="cv").fit(x[:, None], yy)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    xs = np.linspace(0, 2 * np.pi, 400)
    a.scatter(x, yy, s=6, c="0.6", label="samples")
    a.plot(xs, np.sin(xs), "k--", lw=1, label="sin x")
    a.plot(xs, loess.predict(xs[:, None]), "C3", lw=2, label=f"LOESS (tricube), h={loess.bandwidth_:.2f} by LOO")
    a.set_ylim(-2.5, 2.5)
    a.legend(loc="lower left")
    a.set_title("local linear fit, bandwidth chosen by leave-one-out")
    res = loess.cv_results_
    b.semilogx(res["bandwidth"], res["loo_loss"], "o-", ms=3)
    b.axvline(loess.bandwidth_, color="C3")
    b.set_ylim(0, 3 * np.nanmin(res["loo_loss"]))
    b.set_xlabel("bandwidth h")
    b.set_ylabel("leave-one-out MSE")
    b.set_title("the leave-one-out curve")
    fig.tight_layout()
    fig.savefig(ctx.figure_path("trick_loess_cv"), dpi=110)
    plt.close(fig)
    return rows


def _metric_learning(ctx):
    from sklearn.datasets import load_diabetes, make_friedman1
    from sklearn.model_selection import KFold, cross_val_score, train_test_split

    from .. import LocalMeanRegressor, MetricLearningKernelRegressor

    X, y = make_friedman1(n_samples=800, noise=1.0, random_state=0)
    cv = KFold(5, shuffle=True, random_state=0)
    iso, t_ref = ctx.timed(lambda: cross_val_score(LocalMeanRegressor(bandwidth="cv"), X, y, cv=cv).mean())
    mlkr, t = ctx.timed(lambda: cross_val_score(MetricLearningKernelRegressor(), X, y, cv=cv).mean())
    rows = [Row("MLKR (friedman1 n=800, 5 of 10 features relevant), 5-fold CV", f"R^2={mlkr:.3f}",
                f"isotropic LocalMeanRegressor(cv) R^2={iso:.3f} (gain must be >= 0.15)",
                mlkr - iso, t, t_ref)]
    Xd, yd = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(Xd, yd, test_size=0.3, random_state=0)
    iso = LocalMeanRegressor(bandwidth="cv").fit(Xtr, ytr).score(Xte, yte)
    with iteration_budget():  # unregularised, it overfits for thousands of iterations: the point of the row
        plain = MetricLearningKernelRegressor(max_iter=150).fit(Xtr, ytr).score(Xte, yte)
    pulled, t = ctx.timed(lambda: MetricLearningKernelRegressor(alpha=1.0, max_iter=150).fit(Xtr, ytr)
                          .score(Xte, yte))
    rows.append(Row("MLKR on few samples: alpha=1 vs plain (diabetes, held-out R^2)",
                    f"alpha=1 R^2={pulled:.3f}, plain R^2={plain:.3f}", f"isotropic cv R^2={iso:.3f}",
                    pulled - plain, t, np.nan))
    return rows
