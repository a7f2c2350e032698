"""Learned localization kernels for tables (issue 38): the untrained identity embedding is the
plain local mean, and a trained embedding against the isotropic local mean on a bundled table."""
import numpy as np

from ._core import Row

ORDER = 25
TITLE = "Learned kernels for tables: a local mean whose kernel is learned by leave-one-out"


def run(ctx):
    return _identity(ctx) + _trained(ctx)


def _identity(ctx):
    from sklearn.datasets import load_diabetes

    from .. import LearnedKernelRegressor, LocalMeanRegressor

    X, y = load_diabetes(return_X_y=True)
    ref, t_ref = ctx.timed(lambda: LocalMeanRegressor(kernel="laplacian", bandwidth=0.1).fit(X[:300], y[:300])
                           .predict(X[300:]), repeat=3)
    ours, t = ctx.timed(lambda: LearnedKernelRegressor(kernel="laplacian", embedding="identity", scaling=None,
                                                       bandwidth=0.1, max_epochs=0).fit(X[:300], y[:300])
                        .predict(X[300:]), repeat=3)
    return [Row("learned kernel, identity embedding untrained (diabetes)", f"mean={ours.mean():.4f}",
                "LocalMeanRegressor(laplacian, h=0.1)", float(np.max(np.abs(ours - ref))), t, t_ref, 1e-9)]


def _trained(ctx):
    from sklearn.datasets import load_breast_cancer
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from .. import LearnedKernelClassifier, LocalMeanClassifier

    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
    scaler = StandardScaler().fit(Xtr)
    plain, t_ref = ctx.timed(lambda: LocalMeanClassifier(bandwidth="cv").fit(scaler.transform(Xtr), ytr)
                             .predict_proba(scaler.transform(Xte))[:, 1])
    ours, t = ctx.timed(lambda: LearnedKernelClassifier(max_epochs=40, n_ensembles=1, random_state=0).fit(Xtr, ytr)
                        .predict_proba(Xte)[:, 1])
    a_ours, a_plain = roc_auc_score(yte, ours), roc_auc_score(yte, plain)
    return [Row("LearnedKernelClassifier (breast cancer, held-out ROC-AUC)", f"AUC={a_ours:.4f}",
                f"LocalMeanClassifier(bandwidth='cv'), scaled AUC={a_plain:.4f}", a_ours - a_plain, t, t_ref)]
