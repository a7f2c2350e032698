"""Sums of kernels, mixtures learned on the simplex and joint "cv" bandwidths (issue 23).

References: the sums' formula ``m = sum_k w_k S_k(v) / sum_k w_k S_k(1)`` from dense kernel
matrices; statsmodels' ``KernelReg(bw="cv_ls")`` and ``KDEMultivariate(bw="cv_ml")`` on its own
``fair`` data set and on generated mixed data, their objective evaluated at both bandwidths
(statsmodels' ``cv_loo`` and its leave-one-out likelihood); learned mixture weights against a
grid over the simplex of step 1/50, the objective itself checked against the leave-one-out
predictions of the fitted sum kernel and scikit-learn's ``log_loss``.
"""
from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest
from sklearn.metrics import log_loss
from statsmodels.nonparametric.kernel_density import KDEMultivariate
from statsmodels.nonparametric.kernel_regression import KernelReg

from localkit import Kernel, KernelDensity, LocalMeanClassifier, LocalMeanRegressor, LocalPolynomialRegressor
from localkit import kernel_density, local_sums
from localkit.engine import BoundKernel

PROFILE = {"c": "gaussian", "u": "aitchison_aitken", "o": "wang_ryzin"}


def product(var_type, bw):
    K = None
    for j, (t, b) in enumerate(zip(var_type, bw)):
        factor = Kernel(PROFILE[t], bandwidth=b, features=[j])
        K = factor if K is None else K * factor
    return K


def _mixed(seed=0, n=250):
    rng = np.random.default_rng(seed)
    X = np.c_[rng.normal(size=n) * 2.0 + 5.0, rng.integers(0, 4, n), rng.integers(1, 6, n), rng.integers(0, 3, n)]
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] - 0.3 * X[:, 2] + rng.normal(size=n) * 0.2
    return X, y


# -- sums ----------------------------------------------------------------------------------------
TERMS = [Kernel("gaussian", bandwidth=0.4),
         Kernel("epanechnikov", bandwidth=[0.8, 1.2]),
         Kernel("gaussian", bandwidth=0.3, features=[0]) * Kernel("laplacian", bandwidth=1.0, features=[1])]
WEIGHTS = [0.2, 0.5, 0.3]


def _sum(weights=WEIGHTS, terms=TERMS):
    S = None
    for w, K in zip(weights, terms):
        S = w * K if S is None else S + w * K
    return S


@pytest.mark.parametrize("algorithm", ["auto", "dense", "streamed"])
def test_sum_equals_its_formula(algorithm):
    rng = np.random.default_rng(0)
    X, Q = rng.normal(size=(300, 2)), rng.normal(size=(50, 2)) * 1.5
    V = np.c_[np.sin(X[:, 0]), X[:, 1] ** 2]
    c = rng.uniform(0.2, 2.0, 300)
    S = _sum()
    for queries, exclude in ((Q, False), (None, True)):
        P = X if queries is None else Q
        W = sum(w * K(P, X) for w, K in zip(WEIGHTS, TERMS)) * c
        if exclude:
            np.fill_diagonal(W, 0.0)
        out = local_sums(queries, X, V, S, exclude_self=exclude, sample_weight=c, algorithm=algorithm)
        np.testing.assert_allclose(out.mean, W @ V / W.sum(1)[:, None], rtol=1e-12)
        np.testing.assert_allclose(out.log_weight_sum, np.log(W.sum(1)), rtol=1e-12)
    # the estimator through the bound sum; its weight blocks
    reg = LocalMeanRegressor(kernel=S).fit(X, V[:, 0])
    W = sum(w * K(Q, X) for w, K in zip(WEIGHTS, TERMS))
    np.testing.assert_allclose(reg.predict(Q), W @ V[:, 0] / W.sum(1), rtol=1e-12)
    np.testing.assert_allclose(np.exp(BoundKernel(S, X).log_weights(Q)), W, rtol=1e-12)


def test_sum_of_compact_kernels_empty_policy():
    X = np.array([[0.0], [1.0], [2.0]])
    y = np.array([1.0, 2.0, 4.0])
    S = 0.5 * Kernel("epanechnikov", bandwidth=0.5) + 2.0 * Kernel("uniform", bandwidth=0.3)
    assert S.compact
    Q = np.array([[0.1], [10.0]])
    out = local_sums(Q, X, y, S)
    assert out.empty.tolist() == [False, True] and out.mean[1] == 4.0  # the nearest sample's value
    assert out.mean[0] == pytest.approx(1.0)
    with pytest.warns(UserWarning, match="empty neighbourhood"):
        assert np.isnan(local_sums(Q, X, y, S, empty="nan").mean[1])
    with pytest.raises(ValueError, match="empty neighbourhood"):
        local_sums(Q, X, y, S, empty="raise")


def test_density_of_a_sum_is_the_normalised_sum_kernel():
    rng = np.random.default_rng(1)
    X, Q = rng.normal(size=(200, 2)), rng.normal(size=(30, 2))
    K1, K2 = Kernel("gaussian", bandwidth=0.3), Kernel("epanechnikov", bandwidth=[1.0, 0.5])
    f1, f2 = kernel_density(Q, X, kernel=K1), kernel_density(Q, X, kernel=K2)
    z1 = 2 * np.pi * 0.3 ** 2  # the integrals of the unnormalised kernels
    z2 = np.pi / 2 * 1.0 * 0.5
    expected = (0.4 * z1 * f1 + 0.6 * z2 * f2) / (0.4 * z1 + 0.6 * z2)
    np.testing.assert_allclose(kernel_density(Q, X, kernel=0.4 * K1 + 0.6 * K2), expected, rtol=1e-12)
    kde = KernelDensity(kernel=0.4 * K1 + 0.6 * K2).fit(X)
    np.testing.assert_allclose(np.exp(kde.score_samples(Q)), expected, rtol=1e-12)


def test_sum_algebra_repr_and_pickle():
    K1 = Kernel("gaussian", bandwidth=0.5, features=[0])
    K2 = Kernel("laplacian", bandwidth=2.0, features=[0])
    K3 = Kernel("aitchison_aitken", bandwidth=0.2, features=[1])
    S = 0.3 * K1 + 0.7 * K2
    assert repr(S) == ("0.3 * Kernel('gaussian', bandwidth=0.5, features=[0]) + "
                       "0.7 * Kernel('laplacian', bandwidth=2.0, features=[0])")
    assert repr(2 * S) == repr(0.6 * K1 + 1.4 * K2)
    assert repr(S * K3) == ("0.3 * (Kernel('gaussian', bandwidth=0.5, features=[0]) * Kernel('aitchison_aitken', "
                            "bandwidth=0.2, features=[1])) + 0.7 * (Kernel('laplacian', bandwidth=2.0, features=[0]) "
                            "* Kernel('aitchison_aitken', bandwidth=0.2, features=[1]))")
    assert repr(K1 + K2) == "1 * " + repr(K1) + " + 1 * " + repr(K2)
    assert repr(pickle.loads(pickle.dumps(S))) == repr(S)
    X = np.c_[np.linspace(0, 3, 40), np.arange(40) % 3]
    y = np.sin(X[:, 0]) + X[:, 1]
    reg = pickle.loads(pickle.dumps(LocalMeanRegressor(kernel=S * K3).fit(X, y)))
    W = 0.3 * (K1 * K3)(X, X) + 0.7 * (K2 * K3)(X, X)
    np.testing.assert_allclose(reg.predict(X), W @ y / W.sum(1), rtol=1e-12)


@pytest.mark.parametrize("make, error, match", [
    (lambda: -0.5 * Kernel("gaussian"), ValueError, "weight"),
    (lambda: np.nan * Kernel("gaussian"), ValueError, "weight"),
    (lambda: True * Kernel("gaussian"), TypeError, "weight"),
    (lambda: 0.0 * Kernel("gaussian") + 0.0 * Kernel("laplacian"), ValueError, "weight > 0"),
    (lambda: Kernel("gaussian") + Kernel("softmax"), ValueError, "softmax"),
    (lambda: Kernel("gaussian") + 1.0, TypeError, "unsupported"),
    (lambda: LocalMeanRegressor(kernel=[]).fit([[0.0], [1.0], [2.0]], [0, 1, 2]), ValueError, "kernel.*empty"),
    (lambda: LocalMeanRegressor(kernel=[Kernel("gaussian"), "gaussian"]).fit([[0.0], [1.0], [2.0]], [0, 1, 2]),
     TypeError, "kernel.*Kernel instances"),
    (lambda: LocalMeanRegressor(kernel=[Kernel("gaussian", bandwidth="cv")]).fit([[0.0], [1.0], [2.0]], [0, 1, 2]),
     ValueError, "kernel.*'cv'"),
    (lambda: LocalMeanRegressor(kernel=[Kernel("gaussian", n_neighbors=2)]).fit([[0.0], [1.0], [2.0]], [0, 1, 2]),
     ValueError, "kernel.*fixed bandwidths"),
    (lambda: LocalMeanRegressor(kernel=0.5 * Kernel("gaussian", bandwidth="cv")).fit([[0.0], [1.0], [2.0]],
                                                                                      [0, 1, 2]),
     ValueError, "'cv' inside a sum"),
    (lambda: LocalMeanRegressor(kernel=Kernel("gaussian", bandwidth="cv"), bandwidth="cv").fit(
        [[0.0], [1.0], [2.0]], [0, 1, 2]), ValueError, "bandwidth='cv' selects one"),
    (lambda: LocalPolynomialRegressor(kernel=[Kernel("gaussian")]).fit([[0.0], [1.0], [2.0]], [0, 1, 2]),
     ValueError, "kernel"),
    (lambda: LocalPolynomialRegressor(kernel=Kernel("gaussian", bandwidth="cv")).fit([[0.0], [1.0], [2.0]],
                                                                                     [0, 1, 2]),
     ValueError, "bandwidth='cv' inside"),
    (lambda: local_sums(None, [[0.0, 1.0]], None, Kernel("aitchison_aitken", bandwidth="cv", features=[1])),
     ValueError, "bandwidth='cv'.*estimator's fit"),
    (lambda: local_sums(None, [[0.0]], None, Kernel("gaussian", bandwidth="cv")), ValueError, "'cv'"),
    (lambda: KernelDensity(kernel=[Kernel("gaussian"), Kernel("gaussian", n_neighbors=1)]).fit([[0.0], [1.0]]),
     ValueError, "kernel"),
    (lambda: KernelDensity(kernel=Kernel("gaussian", bandwidth=0.5), metric="manhattan").fit([[0.0], [1.0]]),
     ValueError, "metric"),
    (lambda: KernelDensity(kernel=Kernel("gaussian", features=[0]) * Kernel("gaussian", features=[1])).fit(
        [[0.0, 1.0], [1.0, 2.0]]).sample(2), ValueError, "sample needs one profile"),
])
def test_bad_sums_and_lists(make, error, match):
    with pytest.raises(error, match=match):
        make()


# -- joint "cv" bandwidths against statsmodels ----------------------------------------------------
def _fair(n=100):
    from statsmodels.datasets import fair

    return fair.load_pandas().data.iloc[:n]


FAIR = {"cu": ["yrs_married", "occupation"], "co": ["age", "rate_marriage"],
        "cuo": ["yrs_married", "occupation", "religious"], "uuo": ["occupation", "occupation_husb", "rate_marriage"]}
MIXED = {"cu": [0, 1], "co": [0, 2], "cuo": [0, 1, 2], "uuo": [1, 3, 2]}


def _data(source, var_type):
    if source == "fair":
        data = _fair()
        return data[FAIR[var_type]].to_numpy(float), data["affairs"].to_numpy()
    X, y = _mixed(n=100)
    return X[:, MIXED[var_type]], y


def _bandwidths(kernel):
    return np.concatenate([np.atleast_1d(f.bandwidth) for f in kernel.factors]).astype(float)


@pytest.mark.parametrize("source, var_type", [(s, v) for s in ("fair", "mixed") for v in ("cu", "co", "cuo", "uuo")])
def test_joint_cv_at_least_as_good_as_statsmodels_cv_ls(source, var_type):
    X, y = _data(source, var_type)
    reg = LocalMeanRegressor(kernel=product(var_type, ["cv"] * len(var_type))).fit(X, y)
    ours = _bandwidths(reg.kernel_)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels' random-state notice, its 0 / 0 at lam = 1
        sm = KernelReg(y, X, var_type=var_type, reg_type="lc", bw="cv_ls")
        # statsmodels' bandwidth within the kernels' domain, as statsmodels bounds it (_set_bw_bounds):
        # KernelReg's fmin is unbounded and may return lam > 1, where the weights turn negative
        theirs = sm._set_bw_bounds(np.array(sm.bw, dtype=float))

        def objective(bw):  # statsmodels' cv_loo: n^-1 sum_i (y_i - g_{-i}(x_i))^2
            return float(np.ravel(sm.cv_loo(bw, sm._est_loc_constant))[0])

        at_ours, at_theirs = objective(ours), objective(theirs)
    loo = np.mean((reg.loo_predict() - y) ** 2)
    assert loo == pytest.approx(at_ours, rel=1e-10)  # one objective: ours is statsmodels' at our bandwidth
    assert np.min(reg.cv_results_["loo_loss"]) == pytest.approx(loo, rel=1e-12)
    assert np.isfinite(at_ours)
    if np.isfinite(at_theirs):  # NaN where statsmodels' bound lam = 1 zeroes a Wang-van Ryzin factor
        assert at_ours <= at_theirs * (1 + 1e-12), (ours, theirs, at_ours, at_theirs)


def test_joint_cv_density_at_least_as_good_as_statsmodels_cv_ml():
    X, _ = _mixed(n=120)
    X = X[:, :3]
    kde = KernelDensity(kernel=product("cuo", ["cv"] * 3)).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # statsmodels' random-state notice; its fmin tries negative bandwidths
        sm = KDEMultivariate(X, var_type="cuo", bw="cv_ml")
    theirs = KernelDensity(kernel=product("cuo", list(sm.bw))).fit(X).loo_log_likelihood()
    # statsmodels' loo_likelihood(bw, log) is -sum_i log f_{-i}(x_i), f_{-i} normalised by n instead of n - 1
    at_theirs_sm = -sm.loo_likelihood(sm.bw, np.log)
    at_ours_sm = -sm.loo_likelihood(_bandwidths(kde.kernel_), np.log)
    n = len(X)
    assert kde.loo_log_likelihood() == pytest.approx(at_ours_sm - n * np.log(n - 1), rel=1e-10)
    assert theirs == pytest.approx(at_theirs_sm - n * np.log(n - 1), rel=1e-10)
    assert kde.loo_log_likelihood() >= theirs


def test_joint_cv_classifier_and_plain_kernel():
    X, y = _mixed(3, n=150)
    labels = (y > np.median(y)).astype(int)
    K = Kernel("gaussian", bandwidth="cv", features=[0]) * Kernel("aitchison_aitken", bandwidth=0.1, features=[1])
    clf = LocalMeanClassifier(kernel=K).fit(X[:, :2], labels)
    assert clf.kernel_.factors[1].bandwidth == 0.1  # only "cv" is chosen
    brier = np.mean(np.sum((clf.loo_predict_proba() - np.eye(2)[labels]) ** 2, axis=1))
    assert brier == pytest.approx(np.min(clf.cv_results_["loo_loss"]), rel=1e-12)
    # a plain kernel with "cv": one bandwidth per column, no worse than the estimator's isotropic "cv"
    Xc = np.c_[X[:, 0], X[:, 0] * 0.1 + np.random.default_rng(0).normal(size=150)]
    joint = LocalMeanRegressor(kernel=Kernel("gaussian", bandwidth="cv")).fit(Xc, y)
    iso = LocalMeanRegressor(bandwidth="cv").fit(Xc, y)
    assert np.shape(joint.bandwidth_) == (2,)
    assert np.mean((joint.loo_predict() - y) ** 2) <= np.mean((iso.loo_predict() - y) ** 2)


# -- mixtures on the simplex ----------------------------------------------------------------------
def _simplex_grid(step=50):
    return np.array([(i / step, j / step, (step - i - j) / step) for i in range(step + 1)
                     for j in range(step + 1 - i)])


MIX = [Kernel("gaussian", bandwidth=0.3, features=[0]) * Kernel("aitchison_aitken", bandwidth=0.1, features=[1]),
       Kernel("gaussian", bandwidth=[1.5, 2.0]),
       Kernel("epanechnikov", bandwidth=[2.0, 3.0])]


def test_mixture_regressor_no_worse_than_a_grid():
    from localkit.models.kernel_learning import learn_mixture, loo_sums, mixture_loss

    X, y = _mixed(2, n=200)
    X = X[:, :2]
    reg = LocalMeanRegressor(kernel=MIX).fit(X, y)
    w = reg.kernel_weights_
    assert w.shape == (3,) and np.all(w >= 0) and w.sum() == pytest.approx(1.0, abs=1e-12)
    # the objective is the leave-one-out error of the fitted sum kernel, explicitly
    W = sum(wk * K(X, X) for wk, K in zip(w, MIX))
    np.fill_diagonal(W, 0.0)
    explicit = np.mean((W @ y / W.sum(1) - y) ** 2)
    assert np.mean((reg.loo_predict() - y) ** 2) == pytest.approx(explicit, rel=1e-12)
    assert reg.loo_loss_ == pytest.approx(explicit, rel=1e-12)
    # against a grid of step 1/50 over the simplex (the objective at each point, from the terms' sums)
    outs = [loo_sums(K, X, y[:, None], None, reg._engine_options()) for K in MIX]
    fun = mixture_loss("squared", np.stack([o.log_weight_sum for o in outs], 1),
                       np.stack([o.mean for o in outs], 1), y[:, None], None)
    grid = min(fun(g)[0] for g in _simplex_grid())
    assert reg.loo_loss_ <= grid
    assert learn_mixture(MIX, X, y[:, None], "squared", None, reg._engine_options())[1] == reg.loo_loss_


def test_mixture_classifier_log_loss_no_worse_than_a_grid():
    from localkit.models.kernel_learning import loo_sums, mixture_loss

    X, y = _mixed(4, n=200)
    X = X[:, :2]
    labels = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
    clf = LocalMeanClassifier(kernel=MIX).fit(X, labels)
    eps = np.finfo(float).eps

    def loss(proba):  # scikit-learn's log-loss, probabilities clipped at machine epsilon
        return log_loss(labels, np.clip(proba, eps, 1), labels=[0, 1, 2])

    assert clf.loo_loss_ == pytest.approx(loss(clf.loo_predict_proba()), rel=1e-10)
    onehot = np.eye(3)[labels]
    outs = [loo_sums(K, X, onehot, None, clf._engine_options()) for K in MIX]
    fun = mixture_loss("log", np.stack([o.log_weight_sum for o in outs], 1), np.stack([o.mean for o in outs], 1),
                       onehot, None)
    for g in ([0.2, 0.3, 0.5], [0.0, 0.6, 0.4]):  # the objective is that of the fitted sum kernel
        S = sum((gk * K for gk, K in zip(g[1:], MIX[1:])), g[0] * MIX[0]) if g[0] else g[1] * MIX[1] + g[2] * MIX[2]
        assert fun(np.array(g))[0] == pytest.approx(loss(LocalMeanClassifier(kernel=S).fit(X, labels)
                                                         .loo_predict_proba()), rel=1e-10)
    assert clf.loo_loss_ <= min(fun(g)[0] for g in _simplex_grid())


def test_mixture_density_no_worse_than_a_grid():
    rng = np.random.default_rng(5)
    X = np.r_[rng.normal(size=(150, 1)) * 0.1, rng.normal(size=(150, 1)) * 2.0 + 3.0]
    kernels = [Kernel("gaussian", bandwidth=0.03), Kernel("gaussian", bandwidth=0.6),
               Kernel("epanechnikov", bandwidth=2.0)]
    kde = KernelDensity(kernel=kernels).fit(X)
    pi = kde.kernel_weights_
    # sum_k pi_k p_{-i,k}, each term's leave-one-out density explicit
    n = len(X)
    terms = []
    for K in kernels:
        W = K(X, X)
        np.fill_diagonal(W, 0.0)
        z = kernel_density([[0.0]], [[0.0]], kernel=K)[0]  # k(0) / Z = 1 / Z
        terms.append(W.sum(1) * z / (n - 1))
    P = np.stack(terms, 1)
    assert kde.loo_log_likelihood() == pytest.approx(np.sum(np.log(P @ pi)), rel=1e-12)
    grid = max(np.sum(np.log(P @ g)) for g in _simplex_grid(100) if np.all(P @ g > 0))
    assert kde.loo_log_likelihood() >= grid
    # the fitted density is that mixture
    Q = np.linspace(-1, 6, 9)[:, None]
    mixture = sum(p * kernel_density(Q, X, kernel=K) for p, K in zip(pi, kernels))
    np.testing.assert_allclose(np.exp(kde.score_samples(Q)), mixture, rtol=1e-12)


def test_kernel_density_with_a_product_kernel_equals_statsmodels():
    data = _fair(300)
    cols = ["yrs_married", "occupation", "religious"]
    X = data[cols].to_numpy(float)
    Q = _fair(340).iloc[300:][cols].to_numpy(float) + [0.25, 0, 0]
    K = product("cuo", [3.0, 0.2, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        pdf = KDEMultivariate(X, var_type="cuo", bw=[3.0, 0.2, 0.5]).pdf(Q)
    kde = KernelDensity(kernel=K).fit(X)
    np.testing.assert_allclose(np.exp(kde.score_samples(Q)), pdf, rtol=1e-10)
    assert repr(kde.kernel_) == repr(K)


@pytest.mark.parametrize("dtype, atol", [("float64", 1e-12), ("float32", 2e-5)])
def test_sum_on_tensors_equals_numpy(dispatch, dtype, atol):
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    X, y = _mixed(11, n=200)
    Q = X[:40] + 0.3
    S = (0.4 * Kernel("gaussian", bandwidth=0.6)
         + 0.6 * (Kernel("epanechnikov", bandwidth=1.5, features=[0]) * Kernel("wang_ryzin", bandwidth=0.3,
                                                                                 features=[2])))
    ref = local_sums(Q, X, y, S)
    loo = local_sums(None, X, y, S, exclude_self=True)
    t = getattr(torch, dtype)
    for device in devices:
        Xt, yt, Qt = (torch.tensor(a, dtype=t, device=device) for a in (X, y, Q))
        out = local_sums(Qt, Xt, yt, S)
        assert isinstance(out.mean, torch.Tensor) and out.mean.device.type == device
        np.testing.assert_allclose(out.mean.cpu().numpy(), ref.mean, rtol=0, atol=atol)
        np.testing.assert_allclose(out.log_weight_sum.cpu().numpy(), ref.log_weight_sum, rtol=0, atol=atol)
        out = local_sums(None, Xt, yt, S, exclude_self=True)
        np.testing.assert_allclose(out.mean.cpu().numpy(), loo.mean, rtol=0, atol=atol)


def test_cv_warns_where_it_stops_at_the_smallest_bandwidth():
    from localkit.exceptions import BandwidthWarning

    # fair's yrs_married repeats 7 values over 300 rows: the leave-one-out likelihood grows without
    # bound as h -> 0 (statsmodels' cv_ml returns h = 1e-10 there)
    X = _fair(300)[["yrs_married", "occupation"]].to_numpy(float)
    with pytest.warns(BandwidthWarning, match="smallest bandwidth"):
        kde = KernelDensity(kernel=product("cu", ["cv", "cv"])).fit(X)
    reference = 1.06 * np.std(X[:, 0]) * 300 ** (-1 / 5)
    assert kde.kernel_.factors[0].bandwidth == pytest.approx(1e-4 * reference, rel=1e-9)


def test_kernel_density_with_a_plain_kernel_object():
    from sklearn.neighbors import KernelDensity as SklearnKernelDensity

    X = np.random.default_rng(0).normal(size=(100, 1))
    kde = KernelDensity(kernel=Kernel("epanechnikov", bandwidth=0.5)).fit(X)
    reference = SklearnKernelDensity(kernel="epanechnikov", bandwidth=0.5).fit(X).score_samples(X[:20])
    np.testing.assert_allclose(kde.score_samples(X[:20]), reference, rtol=1e-13)
    assert kde.sample(3, random_state=0).shape == (3, 1)
    # "cv" inside the kernel: the likelihood of the estimator's own bandwidth="cv" (a grid, then a
    # bounded scalar search)
    # bounded scalar search); both stop at a smooth optimum, L-BFGS-B at a relative change of 1e-12 (ftol)
    joint = KernelDensity(kernel=Kernel("gaussian", bandwidth="cv")).fit(X)
    alone = KernelDensity(bandwidth="cv").fit(X)
    assert joint.loo_log_likelihood() >= alone.loo_log_likelihood() * (1 + 1e-12)  # both negative
    assert joint.kernel_.bandwidth == pytest.approx(alone.bandwidth_, rel=1e-5)


# -- the analytic gradient of the leave-one-out loss ------------------------------------------------
GRADIENT_KERNELS = {
    "gaussian*aa*wr*fixed": (Kernel("gaussian", bandwidth="cv", features=[0])
                             * Kernel("aitchison_aitken", bandwidth="cv", features=[1])
                             * Kernel("wang_ryzin", bandwidth="cv", features=[2])
                             * Kernel("epanechnikov", bandwidth=4.0, features=[3])),
    "laplacian2*wr": (Kernel("laplacian", bandwidth="cv", features=[0, 3])
                      * Kernel("wang_ryzin", bandwidth="cv", features=[2])),
    "epanechnikov*aa": (Kernel("epanechnikov", bandwidth="cv", features=[0])
                        * Kernel("aitchison_aitken", bandwidth="cv", features=[1])),
    "wr alone": Kernel("wang_ryzin", bandwidth="cv", features=[2]),
}


def _gradient_case(kind, name, weighted):
    """``(slots, fun, loss)``: the streamed loss and gradient, and the engine's own loss of a kernel
    (the estimators' leave-one-out: ``loo_predict``'s squared error / Brier score, ``KernelDensity``'s
    ``loo_log_likelihood``)."""
    from localkit.engine import EngineOptions
    from localkit.models.kernel_learning import CVSlots, LooGradient, squared_loss, values_of

    rng = np.random.default_rng(5)
    X, y = _mixed(6, n=140)
    X[:, 3] = rng.normal(size=140)
    X[:, 2] **= 2  # ordered codes 1, 4, 9, 16, 25: level distances up to 24
    c = rng.uniform(0.3, 2.0, 140) if weighted else None
    K = GRADIENT_KERNELS[name]
    slots = CVSlots(K, X, c)
    if kind == "density":
        def loss(k):
            return -KernelDensity(kernel=k).fit(X, sample_weight=c).loo_log_likelihood()
        values = None
    else:
        model = LocalMeanClassifier() if kind == "brier" else LocalMeanRegressor()
        target = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3])) if kind == "brier" else y
        values = values_of(model, target, np.float64)

        def loss(k):
            return squared_loss(k, X, values, c, EngineOptions())
    fun = LooGradient(slots, X, "density" if kind == "density" else "squared", values, c,
                      EngineOptions(memory_budget=2e5), loss)
    return slots, fun, loss


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("name", list(GRADIENT_KERNELS))
@pytest.mark.parametrize("kind", ["squared", "brier", "density"])
def test_cv_gradient_equals_finite_differences_of_the_engines_loss(kind, name, weighted):
    slots, fun, loss = _gradient_case(kind, name, weighted)
    # an interior point: log h at 1.5 times the normal reference, lam = 0.2 + 0.1 per column
    theta = np.array([0.3 + 0.1 * k if cat else ref + np.log(1.5)
                      for k, (cat, ref) in enumerate(zip(slots.categorical, slots.reference))])
    assert fun.block < 140  # several query blocks (a budget of 200 kB)
    value, grad = fun(theta)
    assert value == pytest.approx(loss(slots.kernel(theta)), rel=1e-12)
    eps = 1e-5  # central differences: truncation ~ eps^2, rounding ~ 1e-16 / eps
    fd = np.array([(loss(slots.kernel(theta + eps * e)) - loss(slots.kernel(theta - eps * e))) / (2 * eps)
                   for e in np.eye(slots.size)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


@pytest.mark.parametrize("lam", [0.0, 1.0])
def test_cv_gradient_at_the_ends_of_lambda(lam):
    slots, fun, loss = _gradient_case("squared", "epanechnikov*aa", False)
    theta = np.array([slots.reference[0] + 1.0, lam])  # a wide window: every level within reach
    value, grad = fun(theta)
    assert np.isfinite(value) and value == pytest.approx(loss(slots.kernel(theta)), rel=1e-12)
    # one-sided differences into [0, 1], second order: (-3 f(0) + 4 f(s) - f(2 s)) / 2 s
    s = 1e-5 if lam == 0.0 else -1e-5
    step = np.array([0.0, s])
    fd = (-3 * loss(slots.kernel(theta)) + 4 * loss(slots.kernel(theta + step))
          - loss(slots.kernel(theta + 2 * step))) / (2 * s)
    assert grad[1] == pytest.approx(fd, rel=1e-6)


def test_cv_without_a_stated_slope_searches_on_finite_differences():
    from localkit.models.kernel_learning import CVSlots, LooGradient

    def log_epanechnikov(u2, xp):  # a user's profile: no slope stated
        return xp.log(xp.clip(1.0 - u2, 0.0, None))

    X, y = _mixed(7, n=150)
    X = X[:, :2]
    user = Kernel(log_epanechnikov, bandwidth="cv", support=1.0, features=[0]) * Kernel(
        "aitchison_aitken", bandwidth="cv", features=[1])
    builtin = Kernel("epanechnikov", bandwidth="cv", features=[0]) * Kernel("aitchison_aitken", bandwidth="cv",
                                                                             features=[1])
    assert not LooGradient.supports(CVSlots(user, X)) and LooGradient.supports(CVSlots(builtin, X))
    fd = LocalMeanRegressor(kernel=user).fit(X, y)
    analytic = LocalMeanRegressor(kernel=builtin).fit(X, y)
    # the same objective, searched with and without the gradient: the same minimum
    loss_fd, loss_analytic = (np.mean((r.loo_predict() - y) ** 2) for r in (fd, analytic))
    assert loss_fd == pytest.approx(np.min(fd.cv_results_["loo_loss"]), rel=1e-12)
    assert loss_analytic == pytest.approx(loss_fd, rel=1e-8)
