"""Kernel quantile regression: the localization trick with the pinball (check) loss, or the
inversion of the conditional distribution function.

**Check-loss fits.** At a query ``x*``, with the kernel's weights ``w_i = K(x*, x_i)`` and the
pinball loss ``rho_tau(r) = r (tau - [r < 0])``,

.. math::

    \\hat\\beta(x^*) = \\arg\\min_{\\beta} \\sum_i w_i\\, \\rho_\\tau\\big(y_i - \\beta_0
        - \\beta_1^\\top (x_i - x^*)\\big), \\qquad \\hat q_\\tau(x^*) = \\hat\\beta_0

(degree 1; degree 0 keeps ``beta_0`` alone: the weighted ``tau``-quantile of the ``y_i``).
Degree 1 is R's ``quantreg::lprq`` (``rq(y ~ z, weights = dnorm(z / h), tau)``, ``z = x - x*``)
for a Gaussian kernel of one feature. Degree 0 is exact by sorting: the smallest ``y_(k)`` whose
cumulative weight reaches ``tau sum_i w_i``. Degree 1 is the linear program
``min tau w.u+ + (1 - tau) w.u-`` subject to ``D beta + u+ - u- = y`` (scipy's HiGHS dual
simplex; samples of weight below ``1e-14`` of the largest left out, their share of the loss below
round-off), whose solution is a vertex interpolating ``p = 1 + n_features`` samples; the vertex's
samples are read off the residuals and ``beta`` solved from them exactly, kept where its loss
is not above the solver's.

**Inversion** (``method="inversion"``, R's ``np::npqreg``): ``q_tau(x) = inf {y : F(y | x) >=
tau}`` with ``F`` the kernel conditional distribution function of
:class:`~localkit.ConditionalDensity` (a kernel ``y_kernel`` in ``y``).

**Local linear distribution function** (``method="linear_weights"``): the quantile of

.. math::

    \\hat F(y \\mid x^*) = \\sum_i l_i(x^*)\\, [y_i \\le y], \\qquad
    l_i = w_i \\big(a - b^\\top (z_i - z^*)\\big) \\Big/ \\sum_j w_j,

the local linear smoother's weights in the continuous columns ``z`` of ``x`` (categorical columns
enter through the kernel only, as in R's ``np`` with ``regtype = "ll"``): ``sum_i l_i = 1`` and
``sum_i l_i (z_i - z*) = 0``, so that a distribution whose location moves linearly across the
window is not widened by it, as the weighted quantile of degree 0 is (Yu and Jones, 1998,
with an indicator in ``y``). With ``S_0 = sum w``, ``S_1 = sum w (z - z*)``, ``S_2 = sum w (z -
z*)(z - z*)^T`` and ``C = S_2 - S_1 S_1^T / S_0``: ``b = C^-1 S_1`` and ``a = 1 + S_1^T b / S_0``.
Some ``l_i`` are negative, so ``F`` is made non-decreasing by its running maximum along the sorted
``y_i``; the quantile is the smallest ``y_(k)`` where it reaches ``tau``. A query whose window does
not determine a slope (``C`` singular) takes the weights of degree 0. One engine pass of weights
per block of queries, as degree 0.

**Several quantiles** (``quantile`` an array): inversion and degree 0 are monotone in ``tau``
by construction; degree-1 fits may cross, and are repaired by rearrangement (Chernozhukov,
Fernandez-Val and Galichon, 2010: the fitted quantiles of each query sorted, which never
increases their pinball loss summed over the levels).
"""
from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, sparse
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import ALGORITHM_CONSTRAINT, BANDWIDTH_CV_CONSTRAINT, N_JOBS_CONSTRAINT, PROFILE_CONSTRAINT
from ..engine import BoundKernel, EngineOptions
from ..kernels import Kernel
from .conditional import (ConditionalDensity, categorical_levels, check_levels, check_probabilities, fit_x_kernel,
                          mapped_x, weight_blocks)
from ._base import FLOATS
from .kernel_learning import has_cv


#: the local linear fits leave out the samples whose weight is below this fraction of the largest: their
#: share of the weighted loss is below round-off, and the linear program stays well scaled
NEGLIGIBLE = 1e-14


def pinball_loss(y, q, tau):
    """The mean pinball loss ``mean_i rho_tau(y_i - q_i)``, ``rho_tau(r) = r (tau - [r < 0])``."""
    r = np.asarray(y, dtype=np.float64) - np.asarray(q, dtype=np.float64)
    return float(np.mean(r * (tau - (r < 0))))


def weighted_quantile(y_sorted, W_sorted, tau):
    """Per row of ``W_sorted`` (weights in the order of ``y_sorted``): the smallest ``y_(k)`` whose
    cumulative weight reaches ``tau`` times the row's total, the lower end of the argmin of
    ``sum_i w_i rho_tau(y_i - b)``."""
    C = np.cumsum(W_sorted, axis=1)
    k = np.sum(C < tau * C[:, -1:] * (1 - 1e-13), axis=1)
    return y_sorted[np.minimum(k, len(y_sorted) - 1)]


def local_linear_weights(W, Z, Zq):
    """The local linear smoother's weights ``l_i`` (rows summing to 1) from the kernel weights
    ``W`` (n_queries, n_samples) in the columns ``Z`` (n_samples, p) at the queries ``Zq``
    (n_queries, p): ``l_i = w_i (a - b^T (z_i - z*)) / S_0`` with ``b = C^-1 S_1``,
    ``a = 1 + S_1^T b / S_0`` (see the module docstring); ``w_i / S_0`` where ``C`` is singular.
    Moments about the samples' mean, so that far-off coordinates lose no precision."""
    W = np.asarray(W, dtype=np.float64)
    S0 = W.sum(axis=1)
    L = W / S0[:, None]
    if Z.shape[1] == 0:
        return L
    centre = Z.mean(axis=0)
    Zc, Qc = Z - centre, Zq - centre
    M1 = L @ Zc  # weighted means of z
    D = M1 - Qc  # S_1 / S_0
    M2 = np.einsum("qn,ni,nj->qij", L, Zc, Zc)
    C = M2 - np.einsum("qi,qj->qij", M1, M1)  # the weighted covariance: (S_2 - S_1 S_1^T / S_0) / S_0
    out = L.copy()
    scale = np.maximum(np.einsum("qii->q", C), np.finfo(np.float64).tiny)
    well = np.linalg.cond(C / scale[:, None, None]) < 1e10 if len(C) else np.zeros(0, dtype=bool)
    if np.any(well):
        v = np.linalg.solve(C[well], D[well][:, :, None])[:, :, 0]  # C^-1 S_1 / S_0 * S_0
        a = 1.0 + np.einsum("qi,qi->q", D[well], v)
        out[well] = L[well] * (a[:, None] - (Zc @ v.T).T + np.einsum("qi,qi->q", v, Qc[well])[:, None])
    return out


def check_loss_fit(D, y, w, tau):
    """``beta = argmin_b sum_i w_i rho_tau(y_i - D_i b)`` for a design ``D`` (m, p) of full
    column rank on the samples of positive weight: the linear program in ``(b, u+, u-)``, then
    its vertex solved exactly from the ``p`` samples it interpolates (see the module)."""
    m, p = D.shape
    w = w / np.max(w)  # the same argmin; costs of order 1 keep the simplex well scaled
    cost = np.concatenate([np.zeros(p), tau * w, (1 - tau) * w])
    eye = sparse.identity(m, format="csr")
    A = sparse.hstack([sparse.csr_matrix(D), eye, -eye], format="csr")
    bounds = [(None, None)] * p + [(0, None)] * (2 * m)
    for method in ("highs-ds", "highs-ipm"):  # the interior point where the simplex stalls
        res = optimize.linprog(cost, A_eq=A, b_eq=y, bounds=bounds, method=method)
        if res.status == 0:
            break
    else:
        raise RuntimeError(f"the check-loss linear program did not solve: {res.message}")
    beta = res.x[:p]

    def loss(b):
        r = y - D @ b
        return float(w @ (r * (tau - (r < 0))))

    order = np.argsort(np.abs(y - D @ beta), kind="stable")
    basis = []
    for i in order:  # the p samples nearest the fit (residual 0 at the vertex) with independent rows
        if np.linalg.matrix_rank(D[basis + [i]]) == len(basis) + 1:
            basis.append(i)
        if len(basis) == p:
            break
    if len(basis) == p:
        exact = np.linalg.solve(D[basis], y[basis])
        if loss(exact) <= loss(beta) + 1e-14 * max(1.0, abs(loss(beta))):
            return exact
    return beta


class KernelQuantileRegressor(RegressorMixin, BaseEstimator):
    """Kernel quantile regression: local check-loss fits (degree 0 or 1) or the inversion of the
    kernel conditional distribution function; quantiles at several levels without crossing, and
    prediction intervals from them.

    See :mod:`localkit.models.quantile` for the estimators. ``degree=1`` with a Gaussian kernel
    of one feature equals R's ``quantreg::lprq`` (to 1e-8 on its own example, ``MASS::mcycle``).

    Parameters
    ----------
    quantile : float in (0, 1) or array of them, default=0.5
        ``tau``. An array gives :meth:`predict` one column per level.
    degree : {0, 1}, default=1
        The local model of the check-loss fit: a constant (the weighted quantile) or a linear
        function of ``x - x*``. Ignored with ``method="inversion"`` and ``"linear_weights"``.
    kernel : str or Kernel, default="gaussian"
        The kernel in ``x``: a profile name (with ``bandwidth``) or a :class:`~localkit.Kernel`
        (a product with categorical factors; degree 1 fits the slope on every column of ``X``, so
        products with categorical factors take ``degree=0`` or the inversion).
    bandwidth : float, array of shape (n_features,), rule or "cv", default="scott"
        ``h`` of a profile given by name (a rule resolved on ``X``). ``"cv"`` (or ``"cv"`` inside a
        ``Kernel``) with ``method="inversion"``: chosen with ``y_kernel``'s by the leave-one-out
        likelihood of :class:`~localkit.ConditionalDensity`.
        A full bandwidth matrix ``H`` (2 to 6 features, a symmetric positive definite (d, d)
        array, or "hpi" / "hscv": R's ``ks::Hpi`` / ``ks::Hscv`` on the samples): the kernel
        ``k(sqrt(dx^T H^-1 dx))``, the samples mapped once by ``H^-1/2``; ``bandwidth_matrix_ = H``
        (see :doc:`/user_guide/conditional`).
    method : {"check", "inversion", "linear_weights"}, default="check"
        The local check-loss fit, the inversion of ``F(y | x)`` (R's ``npqreg``), or the quantile
        of the local linear estimate of ``F(y | x)`` with an indicator in ``y`` (see
        :mod:`localkit.models.quantile`; ``degree`` ignored).
    y_kernel : Kernel or None, default=None
        The kernel in ``y`` of the inversion (:class:`~localkit.ConditionalDensity`'s); None:
        Gaussian, Scott's rule.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed"}, default="auto"
        The engine's path for the weights.
    n_jobs : int or None, default=None
        Engine threads.

    Attributes
    ----------
    kernel_ : Kernel
        The kernel in ``x`` as used (rules resolved).
    quantiles_ : ndarray of shape (n_quantiles,)
        The levels ``tau``.
    conditional_ : ConditionalDensity
        With ``method="inversion"``: the conditional distribution inverted.
    X_fit_, y_fit_ : the training data.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import KernelQuantileRegressor
    >>> X = np.linspace(0, 1, 201)[:, None]
    >>> y = np.tile([-1.0, 0.0, 1.0], 67)
    >>> reg = KernelQuantileRegressor(quantile=[0.1, 0.5, 0.9], degree=0, bandwidth=0.2).fit(X, y)
    >>> reg.predict([[0.5]])
    array([[-1.,  0.,  1.]])
    """

    _parameter_constraints: dict = {
        "quantile": ["array-like", Interval(Real, 0, 1, closed="neither")],
        "degree": [Interval(Integral, 0, 1, closed="both")],
        "kernel": PROFILE_CONSTRAINT + [Kernel],
        "bandwidth": BANDWIDTH_CV_CONSTRAINT,
        "method": [StrOptions({"check", "inversion", "linear_weights"})],
        "y_kernel": [Kernel, None],
        "algorithm": ALGORITHM_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
    }

    def __init__(self, quantile=0.5, degree=1, kernel="gaussian", bandwidth="scott", method="check", y_kernel=None,
                 algorithm="auto", n_jobs=None):
        self.quantile = quantile
        self.degree = degree
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.method = method
        self.y_kernel = y_kernel
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Resolve the kernel on ``X`` and bind it to the training samples once. Returns ``self``."""
        X, y = validate_data(self, X, y, dtype=FLOATS, y_numeric=True)
        self.quantiles_ = np.atleast_1d(check_probabilities(self.quantile, "quantile"))
        self.X_fit_, self.y_fit_ = X, np.asarray(y, dtype=np.float64)
        if self.method == "inversion":
            self.conditional_ = ConditionalDensity(kernel=self.kernel, bandwidth=self.bandwidth,
                                                   y_kernel=self.y_kernel, algorithm=self.algorithm,
                                                   n_jobs=self.n_jobs).fit(X, y)
            self.kernel_ = self.conditional_.kernel_
            self.__dict__.pop("bandwidth_matrix_", None)
            if hasattr(self.conditional_, "bandwidth_matrix_"):
                self.bandwidth_matrix_ = self.conditional_.bandwidth_matrix_
            return self
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv" and not isinstance(self.kernel, Kernel):
            raise ValueError("bandwidth='cv' is chosen for method='inversion' (the leave-one-out likelihood of the "
                             "conditional density); the check-loss fits take numbers or a rule")
        self.kernel_ = fit_x_kernel(self, X)
        if has_cv(self.kernel_):
            raise ValueError(f"bandwidth='cv' inside kernel={self.kernel_!r} is chosen for method='inversion' (the "
                             "leave-one-out likelihood of the conditional density); the check-loss fits take numbers "
                             "or rules")
        if self.degree == 1 and self.method == "check" and any(f.is_categorical for f in self.kernel_.factors):
            raise ValueError(f"degree=1 fits a slope on every column of X, which kernel={self.kernel_!r} holds as "
                             "levels; take degree=0 or method='inversion'")
        self._levels = categorical_levels(self.kernel_, X)
        self._X_bound = mapped_x(self, X)  # the coordinates of the x kernel (H^-1/2 under a bandwidth matrix)
        self._bound = BoundKernel(self.kernel_, self._X_bound,
                                  options=EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs))
        self._order = np.argsort(self.y_fit_, kind="stable")
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The fitted quantiles at ``quantile``: (n_queries,) for one level, else
        (n_queries, n_quantiles), non-decreasing along the levels."""
        check_is_fitted(self)
        out = self.predict_quantiles(X, self.quantiles_)
        return out[:, 0] if np.ndim(self.quantile) == 0 else out

    def predict_quantiles(self, X: ArrayLike, quantiles) -> np.ndarray:
        """The fitted quantiles at the levels ``quantiles`` (any, not only those of ``fit``: the
        fits are local, made at the queries): (n_queries, n_quantiles), sorted along the levels
        (degree 1: the rearrangement that repairs crossing)."""
        check_is_fitted(self)
        taus = np.atleast_1d(check_probabilities(quantiles, "quantiles"))
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        if self.method == "inversion":
            return self.conditional_.quantile(X, taus)
        check_levels(X, self._levels, "X")
        X = mapped_x(self, X)
        out = np.empty((len(X), len(taus)))
        y_sorted = self.y_fit_[self._order]
        linear = self.method == "linear_weights"
        if linear:
            Z = self._X_bound[:, self._continuous_columns()]
        for rows, W in weight_blocks(self._bound, X):
            if linear:
                Ws = local_linear_weights(W, Z, X[rows][:, self._continuous_columns()])[:, self._order]
                F = np.maximum.accumulate(np.cumsum(Ws, axis=1), axis=1)
                for j, tau in enumerate(taus):
                    k = np.sum(F < tau * (1 - 1e-13), axis=1)
                    out[rows, j] = y_sorted[np.minimum(k, len(y_sorted) - 1)]
                continue
            if self.degree == 0:
                Ws = W[:, self._order]
                for j, tau in enumerate(taus):
                    out[rows, j] = weighted_quantile(y_sorted, Ws, tau)
                continue
            for t, w in zip(range(rows.start, rows.stop), W):
                keep = np.flatnonzero(w > NEGLIGIBLE * w.max())
                D = np.column_stack([np.ones(len(keep)), self._X_bound[keep] - X[t]]).astype(np.float64)
                for j, tau in enumerate(taus):
                    out[t, j] = self._local_linear(D, self.y_fit_[keep], w[keep], tau)
        order = np.argsort(taus, kind="stable")
        out[:, order] = np.sort(out[:, order], axis=1)  # rearrangement: no crossing
        return out

    def _continuous_columns(self):
        """The columns of ``X`` under continuous factors of ``kernel_`` (every column for a kernel
        given by name)."""
        d = self.n_features_in_
        cols = set()
        for f in self.kernel_.factors:
            if not f.is_categorical:
                cols.update(range(d) if f.features is None else (int(c) for c in f.features))
        return np.array(sorted(cols), dtype=np.intp)

    @staticmethod
    def _local_linear(D, y, w, tau):
        """``beta_0`` of the local linear check-loss fit; where the samples of positive weight do
        not determine a slope (fewer than ``p`` of them in general position), the weighted
        quantile (degree 0)."""
        if len(y) < D.shape[1] or np.linalg.matrix_rank(D) < D.shape[1]:
            order = np.argsort(y, kind="stable")
            return float(weighted_quantile(y[order], w[order][None, :], tau)[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optimize.OptimizeWarning)
            return float(check_loss_fit(D, y, w, tau)[0])

    def predict_interval(self, X: ArrayLike, coverage: float = 0.9) -> np.ndarray:
        """Prediction intervals ``[q_a(x), q_(1-a)(x)]``, ``a = (1 - coverage) / 2``, from the
        fitted quantiles at those levels: (n_queries, 2)."""
        if isinstance(coverage, bool) or not np.isscalar(coverage):
            raise TypeError(f"coverage must be a number in (0, 1), got {coverage!r}")
        level = check_probabilities(coverage, "coverage")
        a = (1.0 - float(level)) / 2.0
        return self.predict_quantiles(X, [a, 1.0 - a])

    def score(self, X, y, sample_weight=None):
        """``R^2`` of the first level's fit (scikit-learn's regressor score)."""
        pred = self.predict_quantiles(X, self.quantiles_[:1])[:, 0]
        from sklearn.metrics import r2_score

        return r2_score(y, pred, sample_weight=sample_weight)


__all__ = ["KernelQuantileRegressor", "check_loss_fit", "pinball_loss", "weighted_quantile"]
