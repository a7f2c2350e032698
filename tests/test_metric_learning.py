"""Metric learning for kernel regression: the analytic gradient against finite differences, the
point of it (finding the relevant directions of make_friedman1), and its regularisation."""
import warnings

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from sklearn.datasets import load_diabetes, make_friedman1
from sklearn.model_selection import KFold, cross_val_score, train_test_split
from sklearn.utils.estimator_checks import check_estimator

from localkit import LocalMeanRegressor, MetricLearningKernelRegressor, local_mean
from localkit.models import metric_learning
from localkit.models.metric_learning import loo_objective
from localkit.exceptions import LocalkitConvergenceWarning


@pytest.mark.parametrize("shape", [(10, 10), (3, 10), (10,)], ids=["full", "low-rank", "diagonal"])
def test_gradient_matches_finite_differences(shape):
    X, y = make_friedman1(n_samples=80, noise=1.0, random_state=0)
    X = X - X.mean(axis=0)
    A = np.random.default_rng(0).normal(scale=0.8, size=shape)
    loss = lambda a: loo_objective(X, y, a.reshape(shape), y.var(), gradient=False)[0]
    _, grad = loo_objective(X, y, A, y.var())
    num = approx_fprime(A.ravel(), loss, 1e-7)
    np.testing.assert_allclose(grad.ravel(), num, rtol=1e-4, atol=1e-6 * np.abs(num).max())


@pytest.mark.parametrize("shape", [(10, 10), (3, 10), (10,)], ids=["full", "low-rank", "diagonal"])
def test_gradient_matches_autograd(shape):
    """The engine's reconstruction gradient, chained through ``Z = X A^T``, is autograd's gradient
    of the leave-one-out objective written out densely."""
    import torch

    X, y = make_friedman1(n_samples=80, noise=1.0, random_state=0)
    X = X - X.mean(axis=0)
    A = np.random.default_rng(0).normal(scale=0.8, size=shape)
    loss, grad = loo_objective(X, y, A, y.var())
    a = torch.tensor(A, requires_grad=True)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    Z = Xt * a if len(shape) == 1 else Xt @ a.T
    L = -0.5 * ((Z[:, None, :] - Z[None]) ** 2).sum(axis=2)
    L = L.masked_fill(torch.eye(len(X), dtype=torch.bool), -torch.inf)  # leave one out
    f = torch.softmax(L, dim=1) @ yt
    want = ((f - yt) ** 2).mean() / y.var()
    want.backward()
    np.testing.assert_allclose(loss, want.item(), rtol=1e-12)
    np.testing.assert_allclose(grad, a.grad.numpy(), rtol=1e-9, atol=1e-12 * np.abs(grad).max())


def test_objective_is_the_leave_one_out_error():
    X, y = make_friedman1(n_samples=60, noise=1.0, random_state=1)
    A = np.random.default_rng(1).normal(size=(4, 10))
    Z = X @ A.T
    loo = []
    for i in range(len(X)):  # refit the local mean without sample i
        keep = np.arange(len(X)) != i
        loo.append(local_mean(Z[i:i + 1], Z[keep], y[keep], "gaussian", 1.0)[0])
    want = np.mean((np.array(loo) - y) ** 2) / y.var()
    np.testing.assert_allclose(loo_objective(X - X.mean(axis=0), y, A, y.var(), gradient=False)[0], want, rtol=1e-10)


def test_finds_the_relevant_directions_of_friedman1():
    # 5 relevant and 5 irrelevant features; an isotropic bandwidth cannot tell them apart
    X, y = make_friedman1(n_samples=800, noise=1.0, random_state=0)
    cv = KFold(5, shuffle=True, random_state=0)
    iso = cross_val_score(LocalMeanRegressor(bandwidth="cv"), X, y, cv=cv).mean()
    mlkr = cross_val_score(MetricLearningKernelRegressor(), X, y, cv=cv).mean()
    assert mlkr >= iso + 0.15, (iso, mlkr)
    # the learned metric stretches the relevant features and shrinks the irrelevant ones
    model = MetricLearningKernelRegressor(form="diagonal", max_iter=100).fit(X, y)
    scales = np.abs(np.diag(model.components_))
    assert scales[:5].min() > 2 * scales[5:].max()


def test_penalty_keeps_it_from_overfitting_few_samples():
    X, y = load_diabetes(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0)
    iso = LocalMeanRegressor(bandwidth="cv").fit(Xtr, ytr).score(Xte, yte)
    with pytest.warns(LocalkitConvergenceWarning, match="max_iter=150"):  # the unpenalised fit keeps going
        plain = MetricLearningKernelRegressor(max_iter=150).fit(Xtr, ytr)
    pulled = MetricLearningKernelRegressor(alpha=1.0, max_iter=150).fit(Xtr, ytr)
    # the plain fit drives its training objective far below the penalised one, and pays for it
    assert plain.loo_loss_ < pulled.loo_loss_
    assert plain.score(Xte, yte) < iso
    assert pulled.score(Xte, yte) > plain.score(Xte, yte) + 0.1
    assert pulled.score(Xte, yte) > iso - 0.02
    # alpha -> infinity keeps the isotropic leave-one-out metric
    stiff = MetricLearningKernelRegressor(alpha=1e8, max_iter=20).fit(Xtr, ytr)
    np.testing.assert_allclose(stiff.components_, stiff.init_components_, rtol=0,
                               atol=1e-6 * np.abs(stiff.init_components_).max())


def test_predict_is_the_local_mean_in_the_learned_metric():
    X, y = make_friedman1(n_samples=150, noise=1.0, random_state=2)
    with pytest.warns(LocalkitConvergenceWarning, match="max_iter=30"):  # a quick fit is enough here
        model = MetricLearningKernelRegressor(n_components=3, max_iter=30).fit(X, y)
    assert model.components_.shape == (3, 10) and model.transform(X).shape == (150, 3)
    Z = X @ model.components_.T
    D2 = ((Z[:20, None, :] - Z[None]) ** 2).sum(axis=2)
    K = np.exp(-D2 / 2)
    np.testing.assert_allclose(model.predict(X[:20]), K @ y / K.sum(axis=1), rtol=1e-9)


@pytest.mark.parametrize("params, match", [
    (dict(form="cholesky"), "form"),
    (dict(kernel="tricube"), "kernel"),
    (dict(n_components=0), "n_components"),
    (dict(n_components=11), "n_components"),
    (dict(form="diagonal", n_components=3), "n_components"),
    (dict(alpha=-1.0), "alpha"),
    (dict(max_iter=0), "max_iter"),
    (dict(tol=np.nan), "tol"),
])
def test_bad_parameters(params, match):
    X, y = make_friedman1(n_samples=40, random_state=0)
    with pytest.raises((ValueError, TypeError), match=match):
        MetricLearningKernelRegressor(**params).fit(X, y)


def test_bad_data(monkeypatch):
    X, y = make_friedman1(n_samples=40, random_state=0)
    with pytest.raises(ValueError, match="constant"):
        MetricLearningKernelRegressor().fit(X, np.ones(40))
    with pytest.raises(ValueError, match="NaN"):
        MetricLearningKernelRegressor().fit(np.where(X > 0.5, np.nan, X), y)
    monkeypatch.setattr(metric_learning, "MAX_SAMPLES", 30)
    with pytest.raises(ValueError, match="n_samples must be <= 30"):
        MetricLearningKernelRegressor().fit(X, y)


def test_check_estimator():
    # On the check's two tight blobs the cross-validated isotropic start already has zero
    # leave-one-out error, so L-BFGS converges without an iteration: n_iter_ is honestly 0.
    # max_iter=5 keeps the checks quick: the fits that stop there say so, all with the same warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LocalkitConvergenceWarning)
        check_estimator(MetricLearningKernelRegressor(max_iter=5), expected_failed_checks={
            "check_transformer_n_iter": "the objective is already 0 at the start on that data"})
    assert {str(w.message) for w in caught} <= {
        "MetricLearningKernelRegressor did not converge within max_iter=5 iterations; increase max_iter or tol"}
