"""TSK fuzzy inference against simpful's Sugeno inference and scikit-learn baselines."""

import warnings

import numpy as np
import pytest
from scipy.optimize import approx_fprime
from sklearn.datasets import load_diabetes, load_iris, load_wine
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import cross_val_score
from sklearn.utils.estimator_checks import check_estimator

from localkit import TSKFuzzyClassifier, TSKFuzzyRegressor
from localkit.exceptions import LocalkitConvergenceWarning
from localkit.models.fuzzy import _HybridObjective
from localkit.tour.geometry import simpful_sugeno



@pytest.fixture(scope="module")
def diabetes():
    return load_diabetes(return_X_y=True)


def test_simpful_rule_strings_are_per_rule():
    # guard for the helper above: each rule names its own fuzzy sets
    centers, sigmas = np.array([[0.0], [1.0]]), np.array([[0.3], [0.3]])
    out = simpful_sugeno(centers, sigmas, np.array([[1.0], [5.0]]), np.array([[0.0], [1.0]]))
    assert out[0] < 2 and out[1] > 4


def test_fitted_rules_equal_simpful(diabetes):
    X, y = diabetes
    X = X[:, [2, 3, 8]]  # bmi, bp, s5
    tsk = TSKFuzzyRegressor(n_rules=3, random_state=0).fit(X, y)
    ref = simpful_sugeno(tsk.centers_, tsk.sigmas_, tsk.coefs_, X[:120])
    assert np.all(np.isfinite(ref))
    np.testing.assert_allclose(tsk.predict(X[:120]), ref, rtol=0, atol=1e-9)


@pytest.mark.parametrize("order", [0, 1])
def test_from_rules_equals_simpful(diabetes, order):
    X, _ = diabetes
    X = X[:80, [0, 2, 3, 9]]
    rng = np.random.default_rng(1)
    R, d = 4, X.shape[1]
    centers = X[rng.choice(len(X), R, replace=False)]
    sigmas = rng.uniform(0.02, 0.08, size=(R, d))
    coefs = rng.normal(scale=100.0, size=(R, d + 1) if order == 1 else (R,))
    tsk = TSKFuzzyRegressor.from_rules(centers, sigmas, coefs)
    assert tsk.order == order and tsk.n_rules == R
    ref = simpful_sugeno(centers, sigmas, coefs.reshape(R, -1), X)
    np.testing.assert_allclose(tsk.predict(X), ref, rtol=0, atol=1e-9)


def test_memberships_are_normalised_product_gaussians(diabetes):
    X, _ = diabetes
    X = X[:50, :3]
    centers, sigmas = X[:3], np.full((3, 3), 0.05)
    tsk = TSKFuzzyRegressor.from_rules(centers, sigmas, np.zeros((3, 4)))
    mu = np.prod(np.exp(-(X[:, None, :] - centers[None]) ** 2 / (2 * sigmas[None] ** 2)), axis=2)
    np.testing.assert_allclose(tsk.memberships(X), mu / mu.sum(axis=1, keepdims=True), atol=1e-12)


def test_far_point_blends_its_nearest_rule_instead_of_nan():
    # every firing strength underflows (simpful would print a warning and return 0)
    tsk = TSKFuzzyRegressor.from_rules([[0.0], [1.0]], [[0.01], [0.01]], [[0.0, 3.0], [0.0, 7.0]])
    np.testing.assert_allclose(tsk.predict([[50.0], [-50.0]]), [7.0, 3.0])


def test_memberships_normalise_huge_log_memberships():
    # log-memberships -1.25e17 each: exp(L - logsumexp(L)) rounded to weights [1, 1]
    tsk = TSKFuzzyRegressor.from_rules([[0.0], [1.0]], [[1e-9], [1e-9]], [[0.0], [1.5]])
    x = np.nextafter(0.5, 1.0)  # log w_2 - log w_1 = (2x - 1) / (2 s^2) = 2^-52 / 2e-18 = 111.02...
    d = 2.0 ** -52 / (2 * 1e-9 ** 2)
    np.testing.assert_allclose(tsk.memberships([[0.5], [x]]), [[0.5, 0.5], [1 / (1 + np.exp(d)), 1 / (1 + np.exp(-d))]],
                               rtol=1e-12)
    np.testing.assert_allclose(tsk.predict([[0.5]]), [0.75])


def test_far_memberships_come_from_exact_differences():
    # at x = 1e17, x - 1 rounds to x, but log w_2 - log w_1 = (2x - 1) / (2 s^2) = 10 exactly
    tsk = TSKFuzzyRegressor.from_rules([[0.0], [1.0]], [[1e8], [1e8]], [[0.0], [1.0]])
    np.testing.assert_allclose(tsk.memberships([[1e17]]), [[1 / (1 + np.exp(10)), 1 / (1 + np.exp(-10))]], rtol=1e-12)


@pytest.mark.parametrize("x, expected", [(1e150, -1e150 + 2), (1e154, -1e154), (-1e300, -1e300),
                                         (1.7e308, -1.7e308), (-1.7e308, -1.7e308)])
def test_very_far_query_follows_its_nearest_rule(x, expected):
    # (x - c)^2 / (2 s^2) is finite but equal for both rules at 1e150 and overflows beyond 1e154:
    # once the weights [1, 1], then NaN; the nearest rule in |x - c| / s is the exact answer
    tsk = TSKFuzzyRegressor.from_rules([[0.0], [1.0]], [[0.1], [0.1]], [[1.0, 0.0], [-1.0, 2.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        w, pred = tsk.memberships([[x]]), tsk.predict([[x]])
    np.testing.assert_array_equal(w, [[0.0, 1.0]] if x > 0 else [[1.0, 0.0]])
    np.testing.assert_allclose(pred, [expected], rtol=1e-15)


def test_far_query_with_unequal_widths_follows_the_widest_rule():
    # |x - c_r| / s_r: the rule of width 2 is nearer far away, even where every square overflows
    tsk = TSKFuzzyRegressor.from_rules([[0.0, 0.0], [1.0, -3.0]], [[1.0, 1.0], [2.0, 2.0]], [[5.0], [7.0]])
    np.testing.assert_array_equal(tsk.memberships([[1e100, 1e100], [1e200, -1e250]]), [[0, 1], [0, 1]])
    np.testing.assert_allclose(tsk.predict([[1e200, -1e250]]), [7.0])


def test_memberships_on_a_centre_keep_the_other_rules():
    # a query on a centre (offsets 0 or 1e-300): the other rule at |u| = 1 keeps its e^-1/2
    tsk = TSKFuzzyRegressor.from_rules([[0.0], [1.0]], [[1.0], [1.0]], [[0.0], [1.0]])
    expected = np.exp(-0.5) / (1 + np.exp(-0.5))
    np.testing.assert_allclose(tsk.memberships([[0.0], [1e-300]])[:, 1], [expected, expected], rtol=1e-14)


@pytest.mark.parametrize("shift", [1e6, 1e12])
def test_memberships_do_not_depend_on_the_origin(diabetes, shift):
    X, _ = diabetes
    X = X[:60, :3]
    centers, sigmas = X[:4], np.random.default_rng(0).uniform(0.03, 0.1, size=(4, 3))
    W = TSKFuzzyRegressor.from_rules(centers, sigmas, np.zeros(4)).memberships(X)
    scale = 2.0 ** 20  # exactly representable shifts of the data and centres
    moved = TSKFuzzyRegressor.from_rules(centers * scale + shift, sigmas * scale, np.zeros(4))
    Ws = moved.memberships(X * scale + shift)
    np.testing.assert_allclose(Ws, W, atol=1e-6)


def test_cross_validated_r2_at_least_linear_regression(diabetes):
    X, y = diabetes
    ours = cross_val_score(TSKFuzzyRegressor(random_state=0), X, y, cv=5).mean()
    linear = cross_val_score(LinearRegression(), X, y, cv=5).mean()
    assert ours >= linear


def test_huge_penalty_gives_linear_regression(diabetes):
    X, y = diabetes
    tsk = TSKFuzzyRegressor(n_rules=3, alpha=1e9, random_state=0).fit(X, y)
    lin = LinearRegression().fit(X, y)
    np.testing.assert_allclose(tsk.predict(X), lin.predict(X), rtol=1e-5)
    np.testing.assert_allclose(tsk.coefs_[:, :-1], np.broadcast_to(lin.coef_, (3, 10)), rtol=1e-4)


@pytest.mark.parametrize("order", [0, 1])
def test_premise_gradient_matches_finite_differences(diabetes, order):
    X, y = diabetes
    Z = (X[:, :3] - X[:, :3].mean(0)) / X[:, :3].std(0)
    model = TSKFuzzyRegressor(n_rules=3, order=order)
    model.alpha_ = 1e-2
    objective = _HybridObjective(model, Z, (y - y.mean())[:, None])
    rng = np.random.default_rng(0)
    theta = np.r_[rng.normal(size=9), np.log(rng.uniform(0.5, 1.5, 9))]
    grad = objective(theta)[1]
    numeric = approx_fprime(theta, lambda t: objective(t)[0], 1e-6)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-6 * np.abs(grad).max())


def test_classifier_premise_gradient(rng):
    X, y = load_iris(return_X_y=True)
    Z = (X - X.mean(0)) / X.std(0)
    model = TSKFuzzyClassifier(n_rules=3)
    model.alpha_ = 1e-2
    objective = _HybridObjective(model, Z, np.eye(3)[y])
    theta = np.r_[rng.normal(size=12), np.log(rng.uniform(0.5, 1.5, 12))]

    def loss(t):  # cold start: the loss is then a function of theta alone
        objective.coef = None
        return objective(t)[0]

    eps = 1e-4
    numeric = np.array([(loss(theta + eps * e) - loss(theta - eps * e)) / (2 * eps) for e in np.eye(len(theta))])
    objective.coef = None
    grad = objective(theta)[1]
    # the inner logistic fit is iterative: agreement to its tolerance
    np.testing.assert_allclose(grad, numeric, atol=1e-3 * np.abs(grad).max())


def test_refinement_lowers_training_error(diabetes):
    X, y = diabetes
    X = X[:, [2, 3, 8]]
    plain = TSKFuzzyRegressor(n_rules=3, alpha=1e-3, random_state=0).fit(X, y)
    with pytest.warns(LocalkitConvergenceWarning, match="max_iter=30"):  # 30 steps suffice to show it
        refined = TSKFuzzyRegressor(n_rules=3, alpha=1e-3, max_iter=30, random_state=0).fit(X, y)
    assert refined.n_iter_ >= 1
    assert refined.score(X, y) > plain.score(X, y)


def test_classifier_on_wine():
    X, y = load_wine(return_X_y=True)
    assert cross_val_score(TSKFuzzyClassifier(n_rules=3, random_state=0), X, y, cv=5).mean() > 0.93
    clf = TSKFuzzyClassifier(n_rules=3, random_state=0).fit(X, np.array(["a", "b", "c"])[y])
    proba = clf.predict_proba(X[:10])
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(clf.predict(X)) <= {"a", "b", "c"}
    assert clf.coefs_.shape == (3, X.shape[1] + 1, 3)


@pytest.mark.parametrize("params, match", [
    ({"n_rules": 0}, "'n_rules' parameter of TSKFuzzyRegressor must be an int in the range \\(0, inf\\)"),
    ({"n_rules": 2.5}, "'n_rules' parameter .* must be an int"),
    ({"n_rules": 500}, "n_rules must be <= n_samples=442"),
    ({"order": 2}, "'order' parameter .* must be an? int among {0, 1}"),
    ({"membership": "triangular"}, "'membership' parameter .* must be a str among {'gaussian'}"),
    ({"alpha": -1.0}, "'alpha' parameter .* must be a float in the range \\[0.0, inf\\)"),
    ({"alpha": "gcv"}, "'alpha' parameter .* or a str among {'loo'}"),
    ({"max_iter": -1}, "max_iter"),
])
def test_regressor_bad_parameters(diabetes, params, match):
    X, y = diabetes
    with pytest.raises((ValueError, TypeError), match=match):
        TSKFuzzyRegressor(**params).fit(X, y)


def test_classifier_has_no_loo_alpha():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(TypeError, match="'alpha' parameter of TSKFuzzyClassifier must be a float in the range \\[0.0, inf\\). Got 'loo'"):
        TSKFuzzyClassifier(alpha="loo").fit(X, y)


@pytest.mark.parametrize("kwargs, match", [
    ({"sigmas": [[0.1, 0.0]]}, "sigmas must be > 0"),
    ({"sigmas": [[0.1, -0.2]]}, "sigmas must be > 0"),
    ({"sigmas": [[0.1]]}, "sigmas must have the shape of centers"),
    ({"coefs": [[1.0, 2.0]]}, "coefs must have shape"),
    ({"centers": [[np.nan, 0.0]]}, "centers contains NaN"),
    ({"centers": [0.0, 0.0]}, "centers must be 2-D"),
])
def test_from_rules_bad_input(kwargs, match):
    args = {"centers": [[0.0, 0.0]], "sigmas": [[0.1, 0.1]], "coefs": [[1.0, 2.0, 3.0]]} | kwargs
    with pytest.raises(ValueError, match=match):
        TSKFuzzyRegressor.from_rules(**args)


def test_bad_queries(diabetes):
    X, y = diabetes
    tsk = TSKFuzzyRegressor(n_rules=2, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="NaN|infinity"):
        tsk.predict(np.full((1, 10), np.inf))
    with pytest.raises(ValueError, match="features"):
        tsk.predict(X[:, :3])
    with pytest.raises(ValueError, match="NaN|infinity"):
        TSKFuzzyRegressor().fit(np.where(X > 0.1, np.nan, X), y)


# max_iter=0 (the default) means no gradient refinement, so n_iter_ is honestly 0
EXPECTED = {"check_non_transformer_estimators_n_iter": "max_iter=0 by default: no refinement, n_iter_ = 0"}


@pytest.mark.parametrize("est", [TSKFuzzyRegressor(), TSKFuzzyClassifier()], ids=lambda e: type(e).__name__)
def test_check_estimator(est):
    check_estimator(est, expected_failed_checks=EXPECTED)


@pytest.mark.parametrize("est, other", [(TSKFuzzyRegressor(order=1, alpha=1e-2, random_state=0), {"order": 0}),
                                        (TSKFuzzyRegressor(order=0, alpha=1e-2, random_state=0), {"order": 1}),
                                        (TSKFuzzyRegressor(n_rules=4, alpha=1e-2, random_state=0), {"n_rules": 6}),
                                        (TSKFuzzyClassifier(order=1, random_state=0), {"order": 0})])
def test_set_params_changes_nothing_until_refit(est, other):
    """scikit-learn's semantics: predictions come from what was fitted (order and rules read from
    the fitted coefficients); only a refit gives the new parameters' model."""
    if isinstance(est, TSKFuzzyClassifier):
        X, y = load_iris(return_X_y=True)
        predict = "predict_proba"
    else:
        X, y = load_diabetes(return_X_y=True)
        predict = "predict"
    est = est.fit(X, y)
    before = getattr(est, predict)(X)
    est.set_params(**other)
    np.testing.assert_array_equal(getattr(est, predict)(X), before)
    fresh = type(est)(**est.get_params()).fit(X, y)
    np.testing.assert_array_equal(getattr(est.fit(X, y), predict)(X), getattr(fresh, predict)(X))


def _brute_force_loo(Psi, T, penalty, v, lam):
    """Refit without each sample in turn: ``mean_i v_i |T_i - Psi_i c_(-i)|^2``."""
    errs = []
    for i in range(len(Psi)):
        keep = np.arange(len(Psi)) != i
        A = Psi[keep].T @ (v[keep] * Psi[keep]) + lam * np.diag(penalty)
        c = np.linalg.solve(A, Psi[keep].T @ (v[keep] * T[keep]))
        errs.append(v[i] * (T[i] - Psi[i] @ c) ** 2)
    return np.mean(errs)


@pytest.mark.parametrize("n, d", [(60, 2), (12, 4)])  # 9 and 15 regressors: n > p and n < p
def test_loo_errors_equal_brute_force_refits(n, d):
    """The one-SVD leave-one-out of the partially penalised weighted ridge equals refitting
    without each sample, with more samples than regressors and with fewer."""
    from localkit.models.fuzzy import ridge_loo_errors

    rng = np.random.default_rng(1)
    rules, p = 2, d + 1
    Z1 = np.c_[rng.normal(size=(n, d)), np.ones(n)]
    W = rng.dirichlet(np.ones(rules), size=n)
    Psi = np.c_[Z1, (W[:, :, None] * Z1[:, None, :]).reshape(n, -1)]
    assert (Psi.shape[1] < n) == (n == 60)
    T = rng.normal(size=(n, 1))
    v = rng.uniform(0.5, 2.0, size=(n, 1))
    v *= n / v.sum()
    penalty = np.r_[np.zeros(p), np.ones(rules * p)]
    lambdas = n * np.array([1e-3, 1e-1, 10.0])
    expected = [_brute_force_loo(Psi, T, penalty, v, lam) for lam in lambdas]
    np.testing.assert_allclose(ridge_loo_errors(Psi, T, penalty, v, lambdas), expected, rtol=1e-9)


def test_loo_alpha_with_more_features_than_samples_is_not_round_off():
    """40 x 300: the unpenalised shared linear model interpolates every sample (leverage 1 for
    every alpha), so no alpha has a leave-one-out error and the strongest is taken; the p x p
    solves per alpha took 148 s here and picked 1e-6 from round-off, one SVD takes 2.4 s."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 300))
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    assert TSKFuzzyRegressor(alpha="loo", random_state=0).fit(X, y).alpha_ == 1e4
