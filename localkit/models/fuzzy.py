"""TSK (Takagi–Sugeno–Kang) fuzzy inference: prototype-centred local models.

A TSK system with ``R`` rules "IF x_1 IS A_r1 AND ... AND x_d IS A_rd THEN y = f_r(x)" is the
eager side of the localization method: a Gaussian kernel with per-feature bandwidth ``s_r``
is centred on each rule's prototype ``c_r`` (the product of the Gaussian memberships),

.. math::

    \\mu_r(x) = \\prod_k \\exp\\Big(-\\frac{(x_k - c_{rk})^2}{2 s_{rk}^2}\\Big), \\qquad
    w_r(x) = \\frac{\\mu_r(x)}{\\sum_s \\mu_s(x)}, \\qquad
    \\hat y(x) = \\sum_r w_r(x)\\, f_r(x),

and the consequents ``f_r(x) = a_r^T x + b_r`` (order 1) or ``b_r`` (order 0) are local
models. Since ``f_r`` is linear in its coefficients, ``y(x) = [x, 1]^T sum_r w_r(x) [a_r, b_r]``:
the prediction is the local mean of the rules' coefficient vectors, taken with
prototype-centred weights. The weights come from :mod:`localkit.engine.prototypes`
(a softmax of the differences of the log-memberships, exact at any distance from the rules).
"""
from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from scipy.special import log_softmax
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Options, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from .._params import non_negative, positive
from .._progress import optimizer_progress, warn_optimizer
from ._base import check_sample_weight
from .._validation import check_array, check_class_labels, check_regression_target
from ..engine import DEFAULT_MEMORY_BUDGET, map_queries, prototype_weights
from ..kernels.profiles import PROFILES

#: the memberships whose product over features the prototype weights are: ``log k = -u^2 / 2``
MEMBERSHIPS = tuple(name for name, profile in PROFILES.items() if profile.log_linear)
#: Width floor, in units of each feature's standard deviation (singleton clusters, flat features).
_MIN_WIDTH = 0.1
#: Iterations of the inner L-BFGS that fits logistic consequents (classifier).
_INNER_MAX_ITER = 500


def _inputs(Z, order):
    """The consequents' inputs ``[z, 1]`` (order 1) or ``[1]`` (order 0)."""
    ones = np.ones((len(Z), 1), dtype=Z.dtype)
    return np.c_[Z, ones] if order == 1 else ones


#: The penalties ``alpha="loo"`` chooses from.
ALPHAS = np.logspace(-6, 4, 21)


def ridge_loo_errors(Psi, T, penalty, v, lambdas):
    """Leave-one-out errors ``mean_i v_i (r_i / (1 - H_ii))^2`` of the weighted penalised least
    squares ``min_c sum_i v_i |T_i - Psi_i c|^2 + lam sum_j penalty_j c_j^2``, one per ``lam``.

    Exact for a linear smoother ``H = Psi A^-1 Psi^T V`` (``r_i`` the residuals of the full fit),
    and every ``lam`` from one SVD: in the rows scaled by ``sqrt(v)``, split ``Psi`` into the
    unpenalised columns ``G`` (``penalty_j = 0``) and the penalised ones ``R`` (divided by
    ``sqrt(penalty_j)``); with ``P_G`` the projection on ``G``'s span and ``(I - P_G) R = U S W^T``,

        H = P_G + U diag(s^2 / (s^2 + lam)) U^T.

    The thin SVD costs ``O(min(n, p)^2 max(n, p))``: with fewer samples than columns it works
    in the ``n x n`` space, where solving the ``p x p`` normal equations per ``lam`` was cubic in
    the features. A sample whose leverage is 1 to within ``sqrt(eps)`` (its own fit is forced:
    the residual is round-off) has no leave-one-out error: that ``lam`` gets ``inf``.
    """
    w = np.sqrt(v)
    Pw, Tw = w * Psi, w * T
    free = penalty == 0
    G, R = Pw[:, free], Pw[:, ~free] / np.sqrt(penalty[~free])
    Ug, sg, _ = np.linalg.svd(G, full_matrices=False)
    Ug = Ug[:, sg > sg[:1] * max(G.shape) * np.finfo(G.dtype).eps]
    R = R - Ug @ (Ug.T @ R)
    U, s, _ = np.linalg.svd(R, full_matrices=False)
    h_free, fit_free = np.sum(Ug * Ug, axis=1), Ug @ (Ug.T @ Tw)
    UT, U2, s2 = U.T @ Tw, U * U, s * s
    errors = np.empty(len(lambdas))
    for k, lam in enumerate(lambdas):
        f = s2 / (s2 + lam)
        h = h_free + U2 @ f
        r = Tw - fit_free - U @ (f[:, None] * UT)
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.where((1.0 - h > np.sqrt(np.finfo(h.dtype).eps))[:, None], r / (1.0 - h)[:, None], np.inf)
        errors[k] = np.mean(e * e)
    return errors


class _TSKBase(BaseEstimator):
    """Shared fitting, in standardised features ``z``.

    Prototypes by k-means, widths from the clusters' standard deviations. The consequents are
    written ``beta_r = g + delta_r``: a shared linear model ``g`` plus per-rule deviations, so
    that the regressors are ``[z1, w_1(z) z1, ..., w_R(z) z1]`` with ``z1 = [z, 1]`` and the
    penalty ``alpha/2 |delta|^2`` shrinks the rules towards one global linear model (the limit
    ``alpha -> inf``). Then ``max_iter`` L-BFGS iterations refine centres and log-widths with the
    consequents re-solved at every step (ANFIS-style hybrid learning; the consequents are the
    exact inner optimum, so the gradient in the premise parameters is the partial one).
    """

    _parameter_constraints: dict = {
        "n_rules": positive(Integral),
        "order": [Options(Integral, {0, 1})],
        "membership": [StrOptions(set(MEMBERSHIPS))],
        "alpha": non_negative(),
        "max_iter": non_negative(Integral),
        "random_state": ["random_state"],
        "verbose": ["verbose", None],
    }

    def _check_params(self, n):
        """What depends on the data (the rest is in ``_parameter_constraints``)."""
        if self.n_rules > n:
            raise ValueError(f"n_rules must be <= n_samples={n}, got {self.n_rules}")

    def _fit_rules(self, X, T, w=None):
        """Fit on ``X`` with targets ``T`` (n, t) and sample weights ``w`` (or None); returns the
        coefficients in input units, shape (n_rules, d + 1, t) or (n_rules, 1, t)."""
        # small dense problems: BLAS and OpenMP threads only wait on a shared machine
        with threadpool_limits(limits=1):
            return self._fit_rules_single_thread(X, T, w)

    def _fit_rules_single_thread(self, X, T, w):
        n, d = X.shape
        self._check_params(n)
        # weights scaled to mean 1 multiply each sample's term, so every "/ n" below becomes a
        # weighted mean (integer weights: the mean over repeated rows)
        v = np.ones((n, 1)) if w is None else (w * (n / w.sum()))[:, None]
        mu = np.average(X, axis=0, weights=w)
        # the spread of (X - mu) / m, times m: (X - mu)^2 itself overflows for features near 1e300
        m = np.max(np.abs(X - mu), axis=0)
        m[m == 0] = 1.0
        sd = m * np.sqrt(np.average(((X - mu) / m) ** 2, axis=0, weights=w))
        sd[sd == 0] = 1.0
        Z = (X - mu) / sd
        with warnings.catch_warnings():  # fewer distinct points than rules: rules share a centre (a
            # rule of their own each, identical), not a failure of a KMeans the user never called
            warnings.filterwarnings("ignore", "Number of distinct clusters", ConvergenceWarning)
            km = KMeans(self.n_rules, n_init=10, random_state=check_random_state(self.random_state)).fit(
                Z, sample_weight=w)
        C = km.cluster_centers_
        S = np.full_like(C, _MIN_WIDTH)
        for r in range(self.n_rules):
            members, mw = Z[km.labels_ == r], None if w is None else w[km.labels_ == r]
            if len(members) > 1 and (mw is None or mw.sum() > 0):
                spread = np.sqrt(np.average((members - np.average(members, axis=0, weights=mw)) ** 2, axis=0,
                                            weights=mw))
                S[r] = np.maximum(spread, _MIN_WIDTH)
        theta = np.concatenate([C.ravel(), np.log(S).ravel()])
        objective = _HybridObjective(self, Z, T, v)
        self.alpha_ = self._choose_alpha(objective.regressors(theta)[1], T, objective.penalty, v)
        self.n_iter_ = 0
        if self.max_iter > 0:
            bar, callback = optimizer_progress(f"{type(self).__name__} refinement", self.max_iter, self.verbose)
            with bar:
                res = optimize.minimize(objective, theta, jac=True, method="L-BFGS-B", callback=callback,
                                        options={"maxiter": self.max_iter})
            warn_optimizer(res, type(self).__name__, self.max_iter)
            theta, self.n_iter_ = res.x, res.nit
        objective(theta)  # consequents at the final premises
        C, S = objective.premises(theta)
        # back to input units: z = (x - mu) / sd
        self.centers_, self.sigmas_ = mu + sd * C, sd * S
        beta = objective.rule_coefs(objective.coef)
        if self.order == 1:
            a = beta[:, :d] / sd[None, :, None]
            b = beta[:, d:] - np.einsum("rkt,k->rt", a, mu)[:, None]
            beta = np.concatenate([a, b], axis=1)
        return beta

    def _choose_alpha(self, Psi, T, penalty, v):
        return float(self.alpha)

    # -- prediction in input units --------------------------------------------------------
    def _validate_queries(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=np.float64)

    def memberships(self, X):
        """Normalised firing strengths ``w_r(x)`` of the rules, shape (n_samples, n_rules)."""
        X = self._validate_queries(X)
        return prototype_weights(X, self.centers_, self.sigmas_)

    def _blend(self, X):
        """``sum_r w_r(x) f_r(x)``: the local mean of the coefficients, applied to ``[x, 1]``
        (computed in float64, returned in float32 for float32 input). The rules and their order
        are read from the fitted attributes (``d + 1`` coefficients: order 1), so that
        ``set_params`` changes nothing until the next ``fit``, as in scikit-learn."""
        dtype = np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64
        X = self._validate_queries(X)
        W = prototype_weights(X, self.centers_, self.sigmas_)
        coefs = self.coefs_.reshape(len(self.centers_), -1, self._n_out)
        coef = np.einsum("nr,rpt->npt", W, coefs)
        order = 1 if coefs.shape[1] == X.shape[1] + 1 else 0
        return np.einsum("np,npt->nt", _inputs(X, order), coef).astype(dtype, copy=False)


class _HybridObjective:
    """The training loss as a function of the premises ``theta = [centres, log-widths]``, with
    the consequents solved exactly for each ``theta``; returns the loss and its gradient."""

    def __init__(self, model, Z, T, v=None):
        self.model, self.Z, self.T = model, Z, T
        self.v = np.ones((len(Z), 1)) if v is None else v  # sample weights of mean 1, (n, 1)
        self.Z1 = _inputs(Z, model.order)
        self.R, self.p = model.n_rules, self.Z1.shape[1]
        self.penalty = np.r_[np.full(self.p, model._global_penalty), np.ones(self.R * self.p)]
        self.coef = None  # warm start of the consequents

    def premises(self, theta):
        half = len(theta) // 2
        shape = (self.R, self.Z.shape[1])
        return theta[:half].reshape(shape), np.exp(theta[half:]).reshape(shape)

    def regressors(self, theta):
        """Memberships (n, R) and the regressors ``[z1, w_1 z1, ..., w_R z1]``."""
        W = prototype_weights(self.Z, *self.premises(theta))
        rules = (W[:, :, None] * self.Z1[:, None, :]).reshape(len(W), -1)
        return W, np.c_[self.Z1, rules]

    def rule_coefs(self, coef):
        """``beta_r = g + delta_r``, shape (R, p, t)."""
        return coef[:self.p][None] + coef[self.p:].reshape(self.R, self.p, -1)

    def __call__(self, theta):
        m = self.model
        C, S = self.premises(theta)
        W, Psi = self.regressors(theta)
        coef = self.coef = m._solve_consequents(Psi, self.T, self.penalty, self.coef, self.v)
        out = Psi @ coef
        loss, E = m._loss(out, self.T, self.v)
        loss += 0.5 * m.alpha_ * np.sum(self.penalty[:, None] * coef * coef)
        # d loss / d log mu_ir = w_ir E_i . (f_r(z_i) - out_i); chain rule to c and log s
        F = np.einsum("np,rpt->nrt", self.Z1, self.rule_coefs(coef))
        G = W * np.einsum("nt,nrt->nr", E, F - out[:, None, :])
        Z = self.Z
        g_sum, gZ, gZ2 = G.sum(axis=0)[:, None], G.T @ Z, G.T @ (Z * Z)
        inv = 1.0 / (S * S)
        grad_c = (gZ - C * g_sum) * inv
        grad_s = (gZ2 - 2 * C * gZ + C * C * g_sum) * inv
        return loss, np.concatenate([grad_c.ravel(), grad_s.ravel()])


class TSKFuzzyRegressor(RegressorMixin, _TSKBase):
    """TSK fuzzy regression: Gaussian rules centred on prototypes, linear consequents.

    **Kernel:** one Gaussian kernel per rule, centred on its prototype ``c_r`` with per-feature
    bandwidth ``s_r`` (the product of the Gaussian memberships), normalised over the rules.
    **Values:** the rules' coefficient vectors ``[a_r, b_r]``. **Local model:** ``a_r^T x + b_r``
    (order 1) or ``b_r`` (order 0); ``y(x) = sum_r w_r(x) (a_r^T x + b_r)``.

    Fitting: k-means prototypes, cluster widths, consequents by
    penalised least squares on the regressors ``w_r(x) [x, 1]`` (the LSE step of ANFIS), with
    the rules shrunk towards a shared linear model, then optional refinement of centres and
    widths by gradient (L-BFGS).

    Parameters
    ----------
    n_rules : int, default=5
    order : {0, 1}, default=1
    membership : {"gaussian"}, default="gaussian"
    alpha : float >= 0 or "loo", default="loo"
        Penalty ``alpha/2 |delta|^2`` on the rules' deviations from the shared linear model
        (standardised features, loss averaged over samples). "loo" picks it from
        ``logspace(-6, 4, 21)`` by exact leave-one-out error of the penalised least squares
        (the hat-matrix formula), at the k-means premises.
    max_iter : int, default=0
        L-BFGS iterations of the joint refinement of centres and widths (0: none).
    random_state : int, RandomState or None
        Seeds k-means.
    verbose : None, bool or int, default=None
        A progress bar of the refinement's L-BFGS iterations on stderr: True shows it, False
        never, None on a terminal for fits longer than 2 s.

    Attributes
    ----------
    centers_, sigmas_ : ndarray of shape (n_rules, n_features)
        Prototypes and Gaussian widths, in input units.
    coefs_ : ndarray of shape (n_rules, n_features + 1) or (n_rules, 1)
        ``[a_1 .. a_d, b]`` per rule (order 1), ``[b]`` (order 0).
    alpha_ : float
        The penalty used.
    n_iter_ : int
        Iterations of the refinement.

    Notes
    -----
    Equals simpful's Sugeno inference (product AND, Gaussian sets) wherever some rule fires;
    where every firing strength underflows to 0 simpful returns 0, this model the exact
    normalised weights, which far away single out its nearest rule(s) in the scaled distance
    ``|(x - c_r) / s_r|`` (computed from differences of log-memberships: weights summing to 1
    at any finite distance, never ``0 / 0``).

    Examples
    --------
    >>> from localkit import TSKFuzzyRegressor
    >>> tsk = TSKFuzzyRegressor.from_rules(centers=[[0.0], [1.0]], sigmas=[[0.5], [0.5]],
    ...                                    coefs=[[1.0, 0.0], [-1.0, 2.0]])
    >>> tsk.predict([[0.0], [0.5], [1.0]]).round(3)  # at 0: w_2 = e^-2 / (1 + e^-2), f_1 = 0, f_2 = 2
    array([0.238, 1.   , 1.   ])
    """

    _parameter_constraints: dict = {**_TSKBase._parameter_constraints,
                                    "alpha": non_negative() + [StrOptions({"loo"})]}
    _global_penalty = 0.0  # the shared linear model is not shrunk

    def __init__(self, n_rules=5, order=1, membership="gaussian", alpha="loo", max_iter=0,
                 random_state=None, verbose=None):
        self.n_rules = n_rules
        self.order = order
        self.membership = membership
        self.alpha = alpha
        self.max_iter = max_iter
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Fit prototypes, widths and consequents. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0`` weighs each sample's term in the
        standardisation, k-means, the cluster widths and the loss
        ``sum_i c_i (y_i - f(x_i))^2 / sum_i c_i`` (integer weights act as repeated rows, up to
        k-means' random starts; ``alpha="loo"`` then uses the weighted leave-one-out error,
        which leaves a whole weighted sample out).
        """
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=True)
        y = check_regression_target(y, np.float64)
        # the consequents' normal equations: the shared model's and each rule's coefficients, 3 P^2
        # floats held (Gram, a copy, the solver's workspace); n_features = 300 already took 11 s
        self._check_params(len(X))
        P = (self.n_rules + 1) * (X.shape[1] + 1 if self.order == 1 else 1)
        if 24.0 * P * P > DEFAULT_MEMORY_BUDGET:
            raise ValueError(f"n_rules={self.n_rules} with n_features={X.shape[1]} gives {P:,} consequent coefficients, "
                             f"whose normal equations need {24.0 * P * P / 2**20:,.0f} MiB, more than the memory budget "
                             f"of {DEFAULT_MEMORY_BUDGET / 2**20:,.0f} MiB; use fewer rules or features, or order=0")
        w = check_sample_weight(sample_weight, X)
        self._n_out = 1
        # the consequents are linear in the targets, so fitting y / scale and scaling back changes
        # nothing but keeps squared errors finite for targets up to the float range (at 1e300 the
        # leave-one-out errors of every alpha overflowed and no alpha was chosen)
        scale = float(np.max(np.abs(y))) or 1.0
        t = y / scale
        t_mean = np.average(t, weights=w)  # centred targets: no penalty ever pulls the level of y
        beta = self._fit_rules(X, (t - t_mean)[:, None], w)
        beta[:, -1] += t_mean  # sum_r w_r = 1: a shift of every intercept shifts y
        self.coefs_ = beta[:, :, 0] * scale
        return self

    @classmethod
    def from_rules(cls, centers, sigmas, coefs):
        """An explicit TSK system: rule ``r`` is ``IF x IS N(centers[r], sigmas[r]^2) THEN
        y = coefs[r] . [x, 1]``. ``coefs`` of shape (n_rules, n_features + 1) gives order 1,
        (n_rules,) or (n_rules, 1) order 0."""
        centers = check_array(centers, "centers", ndim=(2,), dtype=np.float64)
        R, d = centers.shape
        sigmas = check_array(sigmas, "sigmas", ndim=(2,), dtype=np.float64)
        if sigmas.shape != (R, d):
            raise ValueError(f"sigmas must have the shape of centers {(R, d)}, got {sigmas.shape}")
        if np.any(sigmas <= 0):
            raise ValueError("sigmas must be > 0 (Gaussian widths)")
        coefs = check_array(coefs, "coefs", ndim=(1, 2), dtype=np.float64)
        if coefs.shape not in ((R, d + 1), (R, 1), (R,)):
            raise ValueError(f"coefs must have shape (n_rules, n_features + 1) = {(R, d + 1)} or "
                             f"(n_rules,) = ({R},), got {coefs.shape}")
        coefs = coefs.reshape(R, -1)
        model = cls(n_rules=R, order=1 if coefs.shape[1] == d + 1 else 0)
        model.centers_, model.sigmas_, model.coefs_ = centers, sigmas, coefs
        model.n_features_in_, model._n_out = d, 1
        return model

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """``sum_r w_r(x) f_r(x)``."""
        return self._blend(X)[:, 0]

    def _solve_consequents(self, Psi, T, penalty, _, v):
        n = len(Psi)
        A = Psi.T @ (v * Psi) / n
        A[np.diag_indices_from(A)] += self.alpha_ * penalty
        return np.linalg.lstsq(A, Psi.T @ (v * T) / n, rcond=None)[0]

    def _choose_alpha(self, Psi, T, penalty, v):
        """The alpha of ``ALPHAS`` with the least leave-one-out error (see :func:`ridge_loo_errors`)."""
        if self.alpha != "loo":
            return float(self.alpha)
        errors = ridge_loo_errors(Psi, T, penalty, v, len(Psi) * ALPHAS)
        # the strongest penalty if no error is finite
        return float(ALPHAS[np.argmin(errors)]) if np.any(np.isfinite(errors)) else float(ALPHAS[-1])

    @staticmethod
    def _loss(out, T, v):
        E = v * (out - T) / len(T)
        return 0.5 * np.sum((out - T) * E), E


class TSKFuzzyClassifier(ClassifierMixin, _TSKBase):
    """TSK fuzzy classification: the rules' local models are multinomial logistic models,
    blended in the logits, ``p(c | x) = softmax_c(sum_r w_r(x) (A_r x + b_r)_c)``.

    Kernel and values as in :class:`TSKFuzzyRegressor`; the local model at each prototype is a
    linear (order 1) or constant (order 0) logit model. Consequents are fitted by penalised
    cross-entropy (L-BFGS), then centres and widths are optionally refined as in the regressor.

    Parameters
    ----------
    n_rules, order, membership, max_iter, random_state, verbose :
        As in :class:`TSKFuzzyRegressor`.
    alpha : float >= 0, default=1e-3
        Penalty ``alpha/2 |beta|^2`` on the shared logit model and the rules' deviations from
        it (keeps separable classes finite).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    centers_, sigmas_ : ndarray of shape (n_rules, n_features)
    coefs_ : ndarray of shape (n_rules, n_features + 1, n_classes) or (n_rules, 1, n_classes)
    alpha_, n_iter_ : as in :class:`TSKFuzzyRegressor`.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from localkit import TSKFuzzyClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = TSKFuzzyClassifier(n_rules=3, random_state=0).fit(X, y)
    >>> bool(clf.score(X, y) > 0.95)
    True
    """

    _global_penalty = 1.0

    def __init__(self, n_rules=5, order=1, membership="gaussian", alpha=1e-3, max_iter=0,
                 random_state=None, verbose=None):
        self.n_rules = n_rules
        self.order = order
        self.membership = membership
        self.alpha = alpha
        self.max_iter = max_iter
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Fit prototypes, widths and logistic consequents. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: as in :meth:`TSKFuzzyRegressor.fit`, with the
        weighted cross-entropy ``-sum_i c_i log p(y_i | x_i) / sum_i c_i``.
        """
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_class_labels(y)
        w = check_sample_weight(sample_weight, X)
        self.classes_, codes = np.unique(y, return_inverse=True)
        self._n_out = len(self.classes_)
        self.coefs_ = self._fit_rules(X, np.eye(self._n_out)[codes], w)
        return self

    def decision_function(self, X):
        """The blended logits, shape (n_samples, n_classes); for two classes the logit of the
        second against the first, shape (n_samples,), as scikit-learn expects."""
        Z = self._blend(X)
        return Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z

    @map_queries
    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """``softmax`` of the blended logits."""
        return np.exp(log_softmax(self._blend(X), axis=1))

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        codes = np.argmax(self._blend(X), axis=1)
        return self.classes_[codes]

    def _solve_consequents(self, Psi, T, penalty, coef0, v):
        shape = (Psi.shape[1], T.shape[1])
        pen = np.repeat(penalty, T.shape[1]) * self.alpha_

        def fun(b):
            loss, E = self._loss(Psi @ b.reshape(shape), T, v)
            return loss + 0.5 * b @ (pen * b), (Psi.T @ E).ravel() + pen * b

        x0 = np.zeros(np.prod(shape)) if coef0 is None else coef0.ravel()
        res = optimize.minimize(fun, x0, jac=True, method="L-BFGS-B",
                                options={"maxiter": _INNER_MAX_ITER, "gtol": 1e-10})
        return res.x.reshape(shape)

    @staticmethod
    def _loss(out, T, v):
        logp = log_softmax(out, axis=1)
        return -np.sum(v * T * logp) / len(T), v * (np.exp(logp) - T) / len(T)
