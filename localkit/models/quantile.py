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
``y_i``, from ``F(-inf) = 0``; the quantile is the smallest ``y_(k)`` where it reaches ``tau``
(``interpolation="hazen"``: where the line through the middles of its steps does,
:func:`step_quantiles`). A query whose window does not determine a slope (``C`` singular to
round-off, ``COVARIANCE_DIGITS``) takes the weights of degree 0. One engine pass of weights per
block of queries, as degree 0.

**Local quadratic distribution function** (``method="quadratic_weights"``): the same with the
local quadratic smoother's weights, ``l_i = w_i phi(z*)^T M^-1 phi(z_i)``, ``phi(z) = (1, z,
z z^T's upper triangle)`` and ``M = sum_j w_j phi(z_j) phi(z_j)^T / sum_j w_j``: the fit of a
quadratic in ``z`` at ``z*`` (the basis in the samples' standardised coordinates, which leaves the
fit unchanged and ``M`` well scaled), so that a location that bends across the window (log wages
over experience) widens ``F`` neither; ``sum_i l_i phi(z_i) = phi(z*)``. Its bias is of a higher
order in ``h``, so it takes wider continuous bandwidths than the local linear weights: with
``"cv"``, the criterion's (local linear) continuous bandwidths, each times its own factor, and
its categorical smoothings times one more, chosen by the leave-one-out pinball loss
(:meth:`KernelQuantileRegressor._select_level_scales`): the fit bends along some columns more
than along others (experience against education). A query
whose ``M`` is singular takes the local linear weights.

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
from ..engine import BoundKernel, EngineOptions, cell_loo_sums
from ..kernels import Kernel
from .conditional import (ConditionalDensity, categorical_levels, check_levels, check_probabilities, fit_x_kernel,
                          mapped_x, weight_blocks)
from ._base import FLOATS
from .kernel_learning import has_cv
from .smoother_quantiles import smoother_quantiles


#: the local linear fits leave out the samples whose weight is below this fraction of the largest: their
#: share of the weighted loss is below round-off, and the linear program stays well scaled
NEGLIGIBLE = 1e-14
#: the levels of ``y``'s quantiles that are the thresholds of the ``"cv"`` criterion (the deciles)
#: (:meth:`KernelQuantileRegressor._select_cv`), as R's ``npcdistbw`` takes a grid of ``y``'s quantiles
CV_LEVELS = np.arange(1, 10) / 10
#: ``cv_target="quantile"`` (:meth:`KernelQuantileRegressor._select_level_scales`): the steps of its
#: search on each ``log2 s`` (the factors of the ``"cv"`` bandwidths), the largest ``|log2 s|`` it goes to, and
#: the most samples at which its leave-one-out criterion is evaluated
LEVEL_STEPS = (0.5, 0.25, 0.125)
LEVEL_RANGE = 4.0
LEVEL_QUERIES = 8192
#: ``C = M2 - M1 M1^T`` of :func:`linear_correction` is a difference, ``C_jk`` exact to about
#: ``eps sqrt(M2_jj M2_kk)``: where the least eigenvalue of ``C`` so scaled is below ``sqrt(eps)``,
#: more than half its digits in that direction are round-off (weights nearly all on one sample, or on
#: a line: ``C`` of ~1e-13 gave ``v`` of ~1e15 and weights summing to 0.88), and the row's fit is
#: degree 0. The scaling leaves the test, as the weights, unchanged by the units of each column.
COVARIANCE_DIGITS = float(np.sqrt(np.finfo(np.float64).eps))


def pinball_loss(y, q, tau):
    """The mean pinball loss ``mean_i rho_tau(y_i - q_i)``, ``rho_tau(r) = r (tau - [r < 0])``."""
    r = np.asarray(y, dtype=np.float64) - np.asarray(q, dtype=np.float64)
    return float(np.mean(r * (tau - (r < 0))))


def weighted_quantile(y_sorted, W_sorted, tau):
    """Per row of ``W_sorted`` (weights in the order of ``y_sorted``): the smallest ``y_(k)`` whose
    cumulative weight reaches ``tau`` times the row's total, the lower end of the argmin of
    ``sum_i w_i rho_tau(y_i - b)``."""
    C = np.cumsum(W_sorted, axis=1)
    return step_quantiles(C / C[:, -1:], y_sorted, [tau])[:, 0]


#: the least rise of a distribution function (of total 1) that ``interpolation="hazen"`` takes for a
#: step: smaller rises are the round-off of the cumulative sums (a local linear F back at its running
#: maximum after a negative weight), or samples whose weight is as negligible
LEAST_STEP = 1e-12


def step_quantiles(F, y_sorted, taus, interpolation="lower"):
    """Quantiles (n_rows, len(taus)) of the step distribution functions ``F`` (n_rows, n): row
    ``r`` is ``F_r(y_(k))`` at the sorted samples ``y_sorted`` (non-decreasing along the row).

    ``"lower"``: the smallest ``y_(k)`` where ``F`` reaches ``tau``. ``"hazen"``: the inverse of
    the piecewise linear function through the middles of the steps, ``(u_k, (F(u_k-) + F(u_k)) /
    2)`` at the values ``u_k`` of ``y`` where ``F`` steps up (by more than ``LEAST_STEP``; ties
    one step; samples of no weight none), flat beyond the first and last: a step's mass split evenly either side of its value
    (Parzen's mid-distribution function of discrete data; for equal weights and distinct values
    Hazen's plotting positions ``(k - 1/2) / n``, numpy's ``quantile(method="hazen")``, R's
    ``type = 5``), so that the level ``tau`` lies below the quantile, not ``tau`` less up to a
    step."""
    n = len(y_sorted)
    out = np.empty((len(F), len(taus)))
    if interpolation == "lower":
        for j, tau in enumerate(taus):
            out[:, j] = y_sorted[np.minimum(np.sum(F < tau * (1 - 1e-13), axis=1), n - 1)]
        return out
    last = np.flatnonzero(np.r_[np.diff(y_sorted) > 0, True])  # the last sample of each distinct value
    u, G = y_sorted[last], F[:, last]
    before = np.hstack([np.zeros((len(G), 1)), G[:, :-1]])
    steps = G > before + LEAST_STEP
    P = 0.5 * (G + before)
    rows, m = np.arange(len(P)), len(u)
    first, final = np.argmax(steps, axis=1), m - 1 - np.argmax(steps[:, ::-1], axis=1)
    for j, tau in enumerate(taus):
        above = steps & (P >= tau)
        below = steps & (P < tau)
        hi = np.where(above.any(axis=1), np.argmax(above, axis=1), final)  # the first knot at or above tau
        lo = np.where(below.any(axis=1), m - 1 - np.argmax(below[:, ::-1], axis=1), first)  # the last below
        gap = P[rows, hi] - P[rows, lo]
        frac = np.divide(tau - P[rows, lo], gap, out=np.zeros(len(P)), where=gap > 0)
        frac = np.clip(frac, 0.0, 1.0)
        out[:, j] = (1.0 - frac) * u[lo] + frac * u[hi]  # (no difference of values near the float range)
    return out


def linear_correction(M1, M2, D):
    """``(a, v, well)`` of the local linear weights ``l_i = L_i (a - v^T (z_i - z*))`` from the
    normalised moments of the kernel's weights ``L`` about a common centre: ``M1`` (q, p) the means
    of ``z``, ``M2`` (q, p, p) of ``z z^T``, ``D = M1 - z*`` (q, p) (``S_1 / S_0``): ``v = C^-1 D``
    with ``C = M2 - M1 M1^T`` (``(S_2 - S_1 S_1^T / S_0) / S_0``), ``a = 1 + D^T v``, on the rows
    where the least eigenvalue of ``C_jk / sqrt(M2_jj M2_kk)`` is above ``COVARIANCE_DIGITS``
    (``well``); elsewhere ``a = 1, v = 0`` (degree 0)."""
    C = M2 - np.einsum("qi,qj->qij", M1, M1)
    a, v = np.ones(len(D)), np.zeros_like(D)
    root = np.sqrt(np.maximum(np.einsum("qii->qi", M2), np.finfo(np.float64).tiny))
    well = np.linalg.eigvalsh(C / (root[:, :, None] * root[:, None, :]))[:, 0] > COVARIANCE_DIGITS if len(C) \
        else np.zeros(0, dtype=bool)
    if np.any(well):
        v[well] = np.linalg.solve(C[well], D[well][:, :, None])[:, :, 0]
        a[well] = 1.0 + np.einsum("qi,qi->q", D[well], v[well])
    return a, v, well


def normalised(W):
    """The kernel weights ``W`` (n_queries, n_samples) over their row sums, in float64."""
    W = np.asarray(W, dtype=np.float64)
    return W / W.sum(axis=1)[:, None]


def local_linear_coefficients(L, Z, Zq):
    """``(B, C)`` of the local linear smoother's weights ``l_i = L_i C_q^T B_i`` (rows summing to 1)
    from the normalised kernel weights ``L`` (n_queries, n_samples) in the columns ``Z``
    (n_samples, p) at the queries ``Zq`` (n_queries, p): ``B = (1, z - zbar)`` and
    ``l_i = L_i (a - v^T (z_i - z*))`` with ``v = C^-1 D``, ``a = 1 + D^T v`` (see the module
    docstring; :func:`linear_correction`); ``L_i`` where the moments are singular. Moments about
    the samples' mean ``zbar``, so that far-off coordinates lose no precision."""
    centre = Z.mean(axis=0)
    Zc, Qc = Z - centre, Zq - centre
    n, p = Zc.shape
    M1 = L @ Zc  # weighted means of z and of z z^T (products of BLAS)
    M2 = (L @ (Zc[:, :, None] * Zc[:, None, :]).reshape(n, p * p)).reshape(len(L), p, p)
    a, v, _ = linear_correction(M1, M2, M1 - Qc)
    return np.hstack([np.ones((n, 1)), Zc]), np.hstack([(a + np.einsum("qi,qi->q", v, Qc))[:, None], -v])


def local_linear_weights(W, Z, Zq):
    """The local linear smoother's weights ``l_i`` (rows summing to 1) from the kernel weights
    ``W`` (n_queries, n_samples) in the columns ``Z`` (n_samples, p) at the queries ``Zq``
    (n_queries, p): :func:`local_linear_coefficients`; ``w_i / S_0`` without columns."""
    L = normalised(W)
    if Z.shape[1] == 0:
        return L
    B, C = local_linear_coefficients(L, Z, Zq)
    return L * (C @ B.T)


def quadratic_basis(Z):
    """``phi(z) = (1, z, z z^T's upper triangle)`` per row of ``Z`` (n, p): (n, 1 + p + p (p + 1) / 2)."""
    upper = np.triu_indices(Z.shape[1])
    return np.hstack([np.ones((len(Z), 1)), Z, (Z[:, :, None] * Z[:, None, :])[:, upper[0], upper[1]]])


def local_quadratic_coefficients(L, Z, Zq):
    """``(Phi, C)`` of the local quadratic smoother's weights ``l_i = L_i C_q^T Phi_i`` from the
    normalised kernel weights ``L`` in the columns ``Z`` (n_samples, p) at the queries ``Zq``:
    ``C_q = M^-1 phi(z*)`` (:func:`quadratic_basis` in the samples' standardised coordinates,
    ``M`` the normalised moments ``sum_j L_j phi_j phi_j^T``); where ``M`` is ill conditioned, the
    local linear coefficients (:func:`local_linear_coefficients`, about the same mean) on
    ``Phi``'s linear terms."""
    centre, scale = Z.mean(axis=0), Z.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    Phi, phi_q = quadratic_basis((Z - centre) / scale), quadratic_basis((Zq - centre) / scale)
    n, m = Phi.shape
    p = Z.shape[1]
    M = (L @ (Phi[:, :, None] * Phi[:, None, :]).reshape(n, m * m)).reshape(len(L), m, m)
    well = np.linalg.cond(M) < 1e10 if len(M) else np.zeros(0, dtype=bool)
    C = np.zeros((len(L), m))
    if np.any(well):
        C[well] = np.linalg.solve(M[well], phi_q[well][:, :, None])[:, :, 0]
    if not np.all(well):
        _, linear = local_linear_coefficients(L[~well], Z, Zq[~well])
        C[~well, :1 + p] = linear * np.r_[1.0, scale]  # v^T (z - zbar) = (v scale)^T (z - zbar) / scale
    return Phi, C


def local_quadratic_weights(W, Z, Zq):
    """The local quadratic smoother's weights (rows summing to 1) from the kernel weights ``W``
    (n_queries, n_samples) in the columns ``Z`` (n_samples, p) at the queries ``Zq``:
    ``l_i = w_i phi(z*)^T M^-1 phi(z_i) / S_0`` (:func:`local_quadratic_coefficients`); the local
    linear weights where ``M`` is ill conditioned."""
    L = normalised(W)
    if Z.shape[1] == 0:
        return L
    Phi, C = local_quadratic_coefficients(L, Z, Zq)
    return L * (C @ Phi.T)


def cdf_cv_design(I, Zc):
    """The values whose leave-one-out local means give ``F_{-i}(t | x_i)`` (see
    :meth:`KernelQuantileRegressor._select_cv`): the indicators ``I`` (n, m), ``I_it = [y_i <= t]``,
    and with continuous columns ``Zc`` (n, p, centred) ``z I_t`` (p m), ``z`` (p) and the upper
    triangle of ``z z^T``."""
    n, p = Zc.shape
    if p == 0:
        return I
    upper = np.triu_indices(p)
    return np.hstack([I, (Zc[:, :, None] * I[:, None, :]).reshape(n, -1), Zc,
                      (Zc[:, :, None] * Zc[:, None, :])[:, upper[0], upper[1]]])


def cdf_cv_loss(M, I, Zc):
    """``mean_i sum_t (I_it - F_{-i}(t | x_i))^2`` from the leave-one-out local means ``M`` of
    :func:`cdf_cv_design`'s values: ``F_{-i} = M_I`` (local constant, ``Zc`` of no column) or the
    local linear ``F_{-i}(t) = a M_I(t) - v^T (M_zI(t) - z_i M_I(t))`` (:func:`linear_correction`)."""
    n, m = I.shape
    p = Zc.shape[1]
    F = M[:, :m]
    if p:
        MzI = M[:, m:m + p * m].reshape(n, p, m)
        M1 = M[:, m + p * m:m + p * m + p]
        M2 = np.empty((n, p, p))
        upper = np.triu_indices(p)
        M2[:, upper[0], upper[1]] = M[:, m + p * m + p:]
        M2[:, upper[1], upper[0]] = M[:, m + p * m + p:]
        a, v, _ = linear_correction(M1, M2, M1 - Zc)
        F = a[:, None] * F - np.einsum("np,npm->nm", v, MzI - Zc[:, :, None] * F[:, None, :])
    return float(np.mean(np.sum((I - F) ** 2, axis=1)))


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
        function of ``x - x*``. Ignored with ``method="inversion"``, ``"linear_weights"`` and
        ``"quadratic_weights"``.
    kernel : str or Kernel, default="gaussian"
        The kernel in ``x``: a profile name (with ``bandwidth``) or a :class:`~localkit.Kernel`
        (a product with categorical factors; degree 1 fits the slope on every column of ``X``, so
        products with categorical factors take ``degree=0`` or the inversion).
    bandwidth : float, array of shape (n_features,), rule or "cv", default="scott"
        ``h`` of a profile given by name (a rule resolved on ``X``). ``"cv"`` (or ``"cv"`` inside a
        ``Kernel``: the continuous bandwidths and the categorical smoothings of a product, jointly):
        with ``method="inversion"`` chosen with ``y_kernel``'s by the leave-one-out likelihood of
        :class:`~localkit.ConditionalDensity`; otherwise by the leave-one-out integrated squared
        error of the fit's own estimate of ``F(y | x)`` over 9 thresholds at ``y``'s deciles
        (R's ``npcdistbw``; local constant for ``degree=0``, local linear for ``degree=1`` and
        ``"linear_weights"``; see :meth:`_select_cv`); for ``"quadratic_weights"`` the local linear
        criterion's bandwidths with the continuous ones times a factor chosen by the leave-one-out
        pinball loss (one for every level, or one per level with ``cv_target="quantile"``).
        A full bandwidth matrix ``H`` (2 to 6 features, a symmetric positive definite (d, d)
        array, or "hpi" / "hscv": R's ``ks::Hpi`` / ``ks::Hscv`` on the samples): the kernel
        ``k(sqrt(dx^T H^-1 dx))``, the samples mapped once by ``H^-1/2``; ``bandwidth_matrix_ = H``
        (see :doc:`/user_guide/conditional`).
    method : {"check", "inversion", "linear_weights", "quadratic_weights"}, default="check"
        The local check-loss fit, the inversion of ``F(y | x)`` (R's ``npqreg``), or the quantile
        of the local linear (local quadratic) estimate of ``F(y | x)`` with an indicator in ``y``,
        linear (quadratic) in the continuous columns (see :mod:`localkit.models.quantile`;
        ``degree`` ignored).
    y_kernel : Kernel or None, default=None
        The kernel in ``y`` of the inversion (:class:`~localkit.ConditionalDensity`'s); None:
        Gaussian, Scott's rule.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed"}, default="auto"
        The engine's path for the weights.
    n_jobs : int or None, default=None
        Engine threads.
    tolerance : float in (0, 1) or None, default=None
        With ``"cv"`` bandwidths: the relative error accepted from binned sums, which makes the
        search evaluate its criterion by categorical cells and binned Gaussian sums
        (:mod:`localkit.models.cv_scale`; Gaussian factors on at most three continuous columns);
        None: the exact engine passes. The quantiles themselves are always exact.
    cv_target : {"distribution", "quantile"}, default="distribution"
        With ``"cv"`` bandwidths: ``"distribution"``, one set for every level, chosen for the
        whole of ``F(y | x)`` (above); ``"quantile"``, then one set per level of ``quantile``:
        those bandwidths times a factor ``s`` (``h s``, categorical ``lam s^2``; with
        ``"quadratic_weights"`` a factor per continuous bandwidth, ``h_c s_c``, and one for the
        categorical smoothings, ``lam t``) chosen for the
        level by the leave-one-out pinball loss ``(1/n) sum_i rho_tau(y_i - q_{-i}(tau | x_i))``
        of the fit's own quantile (see :meth:`_select_level_scales`; ``method="check"``,
        ``"linear_weights"`` or ``"quadratic_weights"``; one exact engine pass per factor tried,
        on at most ``LEVEL_QUERIES`` of the samples). Levels outside ``quantile`` (:meth:`predict_quantiles`)
        take ``kernel_``; crossing levels are rearranged.
    interpolation : {"lower", "hazen"}, default="lower"
        The quantile of the step function ``F(y | x)`` of degree 0, ``"linear_weights"`` and
        ``"quadratic_weights"``:
        ``"lower"``, the smallest ``y_i`` where it reaches ``tau``; ``"hazen"``, the inverse of
        the line through the middles of its steps (numpy's ``quantile(method="hazen")`` for equal
        weights; see :func:`step_quantiles`), a value between the ``y_i`` that leaves ``tau``
        below it rather than up to ``tau`` less one step. Ignored by the check-loss fit of
        degree 1 and the inversion.

    Attributes
    ----------
    kernel_ : Kernel
        The kernel in ``x`` as used (rules resolved).
    quantiles_ : ndarray of shape (n_quantiles,)
        The levels ``tau``.
    conditional_ : ConditionalDensity
        With ``method="inversion"``: the conditional distribution inverted.
    cv_results_ : dict
        With ``"cv"`` bandwidths: every point of the search, ``"bandwidths"`` (one row per point,
        the ``"cv"`` columns in the order of the factors) and ``"loo_loss"`` (the criterion; with
        ``method="inversion"`` the negative leave-one-out log-likelihood). With
        ``cv_target="quantile"`` (or ``method="quadratic_weights"``) also ``"level_scales"`` (n_scales,
        n_factors: the factors ``s`` tried, in increasing order of their first column; one
        column, or with ``"quadratic_weights"`` one per continuous ``"cv"`` bandwidth and a last
        one ``t`` for the categorical smoothings where there are any),
        ``"level_loo_loss"`` (n_scales, n_quantiles: the
        leave-one-out pinball loss of each level) and ``"level_bandwidths"`` (n_quantiles, n_cv:
        each level's chosen bandwidths; one row, that of ``kernel_``, with
        ``cv_target="distribution"``).
    level_kernels_ : list of Kernel
        With ``cv_target="quantile"``: the kernel of each level of ``quantiles_``.
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
        "method": [StrOptions({"check", "inversion", "linear_weights", "quadratic_weights"})],
        "y_kernel": [Kernel, None],
        "algorithm": ALGORITHM_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
        "tolerance": [Interval(Real, 0, 1, closed="neither"), None],
        "cv_target": [StrOptions({"distribution", "quantile"})],
        "interpolation": [StrOptions({"lower", "hazen"})],
    }

    #: "cv" bandwidths are chosen by the leave-one-out error of F(y | x) (:meth:`_select_cv`)
    _takes_cv = True

    def __init__(self, quantile=0.5, degree=1, kernel="gaussian", bandwidth="scott", method="check", y_kernel=None,
                 algorithm="auto", n_jobs=None, tolerance=None, cv_target="distribution",
                 interpolation="lower"):
        self.quantile = quantile
        self.degree = degree
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.method = method
        self.y_kernel = y_kernel
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.tolerance = tolerance
        self.cv_target = cv_target
        self.interpolation = interpolation

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Resolve the kernel on ``X`` and bind it to the training samples once. Returns ``self``."""
        X, y = validate_data(self, X, y, dtype=FLOATS, y_numeric=True)
        self.quantiles_ = np.atleast_1d(check_probabilities(self.quantile, "quantile"))
        self.X_fit_, self.y_fit_ = X, np.asarray(y, dtype=np.float64)
        if self.method == "inversion":
            if self.cv_target == "quantile":
                raise ValueError("cv_target='quantile' chooses the bandwidths of method='check', 'linear_weights' or "
                                 "'quadratic_weights' "
                                 "by their leave-one-out pinball loss; method='inversion' takes "
                                 "cv_target='distribution'")
            self.conditional_ = ConditionalDensity(kernel=self.kernel, bandwidth=self.bandwidth,
                                                   y_kernel=self.y_kernel, algorithm=self.algorithm,
                                                   n_jobs=self.n_jobs, tolerance=self.tolerance).fit(X, y)
            self.kernel_ = self.conditional_.kernel_
            for name in ("bandwidth_matrix_", "cv_results_"):
                self.__dict__.pop(name, None)
                if hasattr(self.conditional_, name):
                    setattr(self, name, getattr(self.conditional_, name))
            return self
        for name in ("cv_results_", "level_kernels_", "_level_bounds"):
            self.__dict__.pop(name, None)
        self.kernel_ = base = fit_x_kernel(self, X)
        if self.degree == 1 and self.method == "check" and any(f.is_categorical for f in self.kernel_.factors):
            raise ValueError(f"degree=1 fits a slope on every column of X, which kernel={self.kernel_!r} holds as "
                             "levels; take degree=0 or method='inversion'")
        if self.cv_target == "quantile" and not has_cv(base):
            raise ValueError("cv_target='quantile' scales the bandwidths of bandwidth='cv' per level, and "
                             f"kernel={base!r} has no 'cv' bandwidth; give bandwidth='cv' or cv_target='distribution'")
        if has_cv(base):
            self.kernel_ = self._select_cv(X, self.y_fit_)
        self._levels = categorical_levels(self.kernel_, X)
        order = np.argsort(self.y_fit_, kind="stable")
        # the samples in the order of y, so that a row of weights cumulates to F(y | x) as it stands;
        # the coordinates those of the x kernel (H^-1/2 under a bandwidth matrix)
        self._X_sorted, self._y_sorted = mapped_x(self, X)[order], self.y_fit_[order]
        if has_cv(base) and self.method == "quadratic_weights" and self.cv_target == "distribution":
            # the criterion's bandwidths are the local linear fit's: one factor on the continuous ones
            (self.kernel_,) = self._select_level_scales(base, X, common=True)
        self._bound = self._bind(self.kernel_)
        if self.cv_target == "quantile":
            self.level_kernels_ = self._select_level_scales(base, X)
            bounds = {}
            self._level_bounds = [bounds.setdefault(repr(k), self._bind(k)) for k in self.level_kernels_]
        return self

    def _bind(self, kernel, twins=None):
        """``kernel`` bound to the samples in the order of ``y``."""
        return BoundKernel(kernel, self._X_sorted, options=EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs),
                           twins=twins)

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
        for bound, columns in self._bounds_of(taus):
            for rows, W in weight_blocks(bound, X):
                out[rows, columns] = self._quantiles_of(W, X[rows], taus[columns])
        order = np.argsort(taus, kind="stable")
        out[:, order] = np.sort(out[:, order], axis=1)  # rearrangement: no crossing
        return out

    def _bounds_of(self, taus):
        """``(bound kernel, indices into taus)``: with ``cv_target="quantile"`` a level of
        ``quantile`` takes its own bandwidths (``level_kernels_``), any other ``kernel_``'s."""
        groups = {}
        for j, tau in enumerate(taus):
            hit = np.flatnonzero(self.quantiles_ == tau) if hasattr(self, "level_kernels_") else ()
            bound = self._level_bounds[hit[0]] if len(hit) else self._bound
            groups.setdefault(id(bound), (bound, []))[1].append(j)
        return [(bound, np.array(columns)) for bound, columns in groups.values()]

    def _quantiles_of(self, W, Q, taus):
        """The fitted quantiles (len(W), len(taus)) at the (mapped) queries ``Q`` from their
        normalised weights ``W`` on the samples in the order of ``y`` (``_X_sorted``)."""
        y = self._y_sorted
        if self.method in ("linear_weights", "quadratic_weights"):
            # l_i = L_i C^T B_i, F its running maximum and F's quantiles in one compiled scan
            cols = self._continuous_columns()
            L = normalised(W)
            if len(cols):
                coefficients = local_linear_coefficients if self.method == "linear_weights" \
                    else local_quadratic_coefficients
                B, C = coefficients(L, self._X_sorted[:, cols], Q[:, cols])
            else:
                B, C = np.ones((L.shape[1], 1)), np.ones((len(L), 1))
            return smoother_quantiles(L, B, C, y, taus, self.interpolation, LEAST_STEP)
        if self.degree == 0:
            F = np.cumsum(W, axis=1)
            return step_quantiles(F / F[:, -1:], y, taus, self.interpolation)
        out = np.empty((len(W), len(taus)))
        for t, w in enumerate(W):
            keep = np.flatnonzero(w > NEGLIGIBLE * w.max())
            D = np.column_stack([np.ones(len(keep)), self._X_sorted[keep] - Q[t]]).astype(np.float64)
            for j, tau in enumerate(taus):
                out[t, j] = self._local_linear(D, y[keep], w[keep], tau)
        return out

    def _select_cv(self, X, y):
        """``kernel_`` with its ``"cv"`` bandwidths chosen by the leave-one-out integrated squared
        error of the conditional distribution function (Li, Lin and Racine, 2013; R's
        ``np::npcdistbw(bwmethod = "cv.ls")`` with an indicator in ``y``)::

            CV(h) = (1 / n) sum_i sum_t ([y_i <= t] - F_{-i}(t | x_i))^2

        over the thresholds ``t`` at ``y``'s quantiles of levels ``CV_LEVELS``, ``F_{-i}`` the
        estimate of the fit without sample ``i`` (and its twins, as
        :func:`~localkit.models.kernel_learning.loo_sums` leaves out): the local mean of
        ``[y <= t]`` for ``degree=0`` (the squared leave-one-out error of a local mean of the
        indicators), the local linear one in the continuous columns for ``method="linear_weights"``
        (and, as the pilot of :meth:`_select_level_scales`, ``"quadratic_weights"``) and
        ``degree=1`` (from the local means of :func:`cdf_cv_design`'s values). The sum over
        thresholds stands for the integral over ``t`` under ``y``'s distribution; over all ``t``
        the summand is the continuous ranked probability score, twice the pinball loss integrated
        over the levels, so the bandwidths are chosen for the quantiles, not for the conditional
        mean. The search is
        :func:`~localkit.models.kernel_learning.select_cv_bandwidths`' (kept in ``cv_results_``),
        on exact engine passes or, with ``tolerance``, on cell sums
        (:mod:`localkit.models.cv_scale`)."""
        from .cv_scale import FixedGrid, takes_cells
        from .kernel_learning import loo_sums, select_cv_bandwidths

        if len(X) < 3:
            raise ValueError(f"bandwidth='cv' needs at least 3 samples, got n_samples={len(X)}")
        X = np.asarray(X, dtype=np.float64)
        linear = self.method in ("linear_weights", "quadratic_weights") or self.degree == 1
        Z = X[:, self._continuous_columns()] if linear else X[:, :0]
        Zc = Z - Z.mean(axis=0)
        I = (y[:, None] <= np.unique(np.quantile(y, CV_LEVELS))[None, :]).astype(np.float64)
        V = cdf_cv_design(I, Zc)
        if takes_cells(self.kernel_, X.shape[1], self.tolerance):
            grid = FixedGrid(X, self.tolerance)

            def means(kernel):
                S = cell_loo_sums(kernel, X, V, grid_size=grid(kernel))
                return S[:, :-1] / S[:, -1:] if np.all(S[:, -1] > 0) else None
        else:
            options = EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs)

            def means(kernel):
                sums = loo_sums(kernel, X, V, None, options)
                return None if np.any(sums.empty) else sums.mean.reshape(len(X), -1)

        def loss(kernel):
            M = means(kernel)
            return np.inf if M is None else cdf_cv_loss(M, I, Zc)

        kernel, self.cv_results_ = select_cv_bandwidths(self.kernel_, X, loss)
        return kernel

    def _select_level_scales(self, base, X, common=False):
        """One kernel per level ``tau`` of ``quantile`` (``common``: one for all, by the loss summed
        over the levels): the ``"cv"`` bandwidths ``h*, lam*`` of
        :meth:`_select_cv` moved along ``h_c = s h*_c``, ``lam_c = s^2 lam*_c`` (clipped to the
        search's bounds; the rates ``h ~ n^(-1/(q+4))``, ``lam ~ h^2`` of Li and Racine, 2007). With
        ``method="quadratic_weights"`` each continuous bandwidth has its own factor,
        ``h_c = s_c h*_c``, and the categorical smoothings one of their own, ``lam_c = t lam*_c``:
        the criterion's bandwidths are the local linear fit's, and the quadratic fit's lower bias
        asks for wider continuous bandwidths, by how much its column bends the fit, while how
        much a level borrows across categories is a question of the level's own tail (measured on
        CPS1988: tying ``lam`` to the continuous factors lost 1% at every level; one factor for
        both continuous columns 0.1-0.3% at the lower decile; a factor of its own for ``lam``
        lowered the lower decile's pinball loss on every fold). The
        factors are chosen per level by the leave-one-out pinball loss of the fit's own quantile::

            CV_tau(s) = (1 / m) sum_(i in I) rho_tau(y_i - q_{-i}(tau | x_i; s))

        ``q_{-i}`` the prediction (``method``, ``degree``, ``interpolation``) from the samples
        without sample ``i`` (and its twins, as :func:`~localkit.models.kernel_learning.loo_groups`
        leaves out), ``I`` every sample, or ``LEVEL_QUERIES`` of them evenly spaced in the order of
        ``y`` where there are more (each still weighs all the others). The F(y | x) criterion of
        :meth:`_select_cv` weighs every threshold alike; a tail level is decided by the thresholds
        near its own quantile, where the best smoothing may differ (Yu and Jones, 1998, give
        ``h_tau`` as ``h`` times a factor of ``tau`` for one feature; here the factor is chosen by
        the criterion itself). The search is a compass search on the ``log2 s`` with steps
        ``LEVEL_STEPS``, level after level from the best factors evaluated so far (0 first): a level
        moves to the best of its neighbours ``+-step`` along each coordinate while that is better,
        else takes the next step; one pass of the engine per point gives every level's loss, and
        each level keeps the best point evaluated (ties: the least ``sum |log2 s|``). Kept in
        ``cv_results_``: ``"level_scales"``, ``"level_loo_loss"`` (one column per level) and
        ``"level_bandwidths"`` (one row per kernel returned)."""
        from .kernel_learning import CVSlots, loo_groups

        slots = CVSlots(base, X)
        best = self.cv_results_["bandwidths"][np.argmin(self.cv_results_["loo_loss"])]
        theta = np.where(slots.categorical, best, np.log(best))
        low, high = np.array(slots.bounds).T
        taus = self.quantiles_
        n = len(X)
        queries = np.unique(np.linspace(0, n - 1, min(n, LEVEL_QUERIES)).round().astype(np.intp))
        # the queries first among the samples, so that each one's own row is its position
        perm = np.r_[queries, np.setdiff1d(np.arange(n), queries)]
        back = np.argsort(perm)  # the columns of a weight row back to the order of y
        y_q = self._y_sorted[queries]

        # the search's coordinates: log2 of one factor for every bandwidth or, for the quadratic
        # weights, of one per continuous column and one for all the categorical smoothings
        quadratic = self.method == "quadratic_weights"
        continuous = np.flatnonzero(~slots.categorical)
        levels = quadratic and bool(slots.categorical.any())
        size = len(continuous) + levels if quadratic else 1

        def theta_at(e):
            log_s = np.zeros(len(theta))
            log_s[continuous] = np.asarray(e[:len(continuous)]) * np.log(2.0)
            lam = theta * (2.0 ** e[-1] if levels else 1.0) if quadratic else theta * 4.0 ** e[0]
            return np.clip(np.where(slots.categorical, lam, theta + log_s), low, high)

        losses = {}  # the exponents (log2 s) -> the loss of each level

        def loss(e, j):
            if e not in losses:
                kernel = slots.kernel(theta_at(e))
                bound = BoundKernel(kernel, self._X_sorted[perm], twins=loo_groups(kernel, n),
                                    options=EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs))
                Q = np.empty((len(queries), len(taus)))
                for rows, W in weight_blocks(bound, self._X_sorted[queries], exclude_self=True):
                    Q[rows] = self._quantiles_of(W[:, back], self._X_sorted[queries[rows]], taus)
                losses[e] = [pinball_loss(y_q, Q[:, j], tau) for j, tau in enumerate(taus)]
            # ties: the factors nearest 1
            return (sum(losses[e]) if j is None else losses[e][j], float(np.abs(e).sum()))

        def moves(e, step):
            """``e`` and its neighbours one ``step`` along each coordinate, within the range."""
            out = [e]
            for k in range(size):
                for sign in (-1.0, 1.0):
                    f = e[:k] + (e[k] + sign * step,) + e[k + 1:]
                    if abs(f[k]) <= LEVEL_RANGE:
                        out.append(f)
            return out

        loss((0.0,) * size, 0)

        def best(j):
            return min(losses, key=lambda e: loss(e, j))

        objectives = [None] if common else range(len(taus))
        for j in objectives:
            e = best(j)
            for step in LEVEL_STEPS:
                while True:
                    e_next = min(moves(e, step), key=lambda f: loss(f, j))
                    if e_next == e:
                        break
                    e = e_next
        picks = [best(j) for j in objectives]
        exponents = sorted(losses)
        self.cv_results_.update(level_scales=2.0 ** np.array(exponents),
                                level_loo_loss=np.array([losses[e] for e in exponents]),
                                level_bandwidths=np.array([slots.bandwidths(theta_at(e)) for e in picks]))
        return [slots.kernel(theta_at(e)) for e in picks]

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
