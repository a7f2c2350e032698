"""Kernels learned by exact leave-one-out: the ``"cv"`` bandwidths of a kernel's factors, chosen
jointly, and the weights of a mixture of kernels on the simplex.

**Joint "cv" bandwidths.** In ``Kernel("gaussian", bandwidth="cv", features=[0]) *
Kernel("aitchison_aitken", bandwidth="cv", features=[1])`` every ``"cv"`` is a free parameter:
one bandwidth ``h_c`` per continuous column of a factor (on ``log h_c``) and one smoothing
``lam_c`` in ``[0, 1]`` per categorical column. They are chosen together by minimising the
estimator's leave-one-out loss ``L(theta)`` (:func:`select_cv_bandwidths`):

* local mean regression: ``L = sum_i c_i |y_i - m_{-i}(x_i)|^2 / sum_i c_i`` (statsmodels'
  ``KernelReg(bw="cv_ls")`` objective, divided by ``n``);
* classification: the Brier score of the one-hot labels (as ``bandwidth="cv"``);
* density: ``-sum_i c_i log p_{-i}(x_i)`` (statsmodels' ``KDEMultivariate(bw="cv_ml")``).

``m_{-i}`` is exact and costs one engine pass (``exclude_self``). The search: the starts ``t``
times the normal reference ``1.06 sigma_c n^(-1/(q+4))`` (``q`` the continuous columns) for every
continuous column, ``t`` in ``{1/3, 1, 3}``, with every ``lam`` in ``{0.05, 0.3}``; from the
best two, scipy's bounded quasi-Newton L-BFGS-B (``log h`` within ``1e-4`` to ``1e4`` times the
reference, ``lam`` in ``[0, 1]``) on the exact objective and its analytic gradient, both from one
streamed pass (:class:`LooGradient`: ``d m_{-i} / d theta`` from weighted sums over the same
pairs); a factor whose profile states no slope (a user's callable) or measures several columns
by a non-euclidean metric falls back to finite differences (one pass per parameter). The best
point evaluated is kept (``cv_results_``).

**Mixtures.** A list ``kernel=[K_1, ..., K_K]`` is the sum ``sum_k w_k K_k`` with ``w`` on the
simplex minimising the leave-one-out loss (:func:`learn_mixture`). Each kernel's leave-one-out
sums ``S_k(1)`` and means ``m_k`` at the samples are computed once; for any ``w``,
``m_{-i}(w) = sum_k w_k S_ik m_ik / sum_k w_k S_ik`` exactly (``exclude_self`` is linear in the
kernel), so the loss and its analytic gradient cost ``O(n K)``. Losses: squared error
(regression), log-loss ``-sum_i c_i log p_{-i}(y_i)`` (classification, probabilities clipped
at machine epsilon, as scikit-learn's ``log_loss``) and the leave-one-out log-likelihood of the
density mixture ``sum_k w_k p_k`` (concave in ``w``). SLSQP on the simplex from the barycentre
and every vertex; the best point is kept.

Leave-one-out groups: a kernel with a categorical factor leaves out each row alone (a level
shared by rows is not one observation; Li & Racine and statsmodels do the same); a kernel of
continuous columns only leaves out every copy of the query's row, at its point with its target
or label (a density: every row at its point), as everywhere in localkit (:mod:`localkit.engine.twins`).
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy import optimize

from ..engine import BoundKernel, EngineOptions, bind, twin_groups
from ..exceptions import BandwidthWarning, warn
from ..kernels import Kernel
from ..kernels.categorical import level_tables
from ..kernels.kernel import ProductKernel
from ..kernels.kernel import SumKernel

#: the common factors of the normal reference tried as starts, and the categorical smoothings
STARTS_SCALE = (1 / 3, 1.0, 3.0)
STARTS_LAMBDA = (0.05, 0.3)
#: Wang-van Ryzin's ``lam`` stops short of 1, where the kernel is 0 at every level (its local
#: mean tends to the weights ``1`` and ``lam^|d| / 2`` as ``lam -> 1``, and is undefined at 1)
WANG_RYZIN_TOP = 1.0 - 1e-6
#: log-bandwidths are bounded to this factor either side of the normal reference
LOG_RANGE = np.log(1e4)


def is_cv(bandwidth):
    return isinstance(bandwidth, str) and bandwidth == "cv"


def has_cv(kernel):
    """True when some factor of ``kernel`` has ``bandwidth="cv"``."""
    if isinstance(kernel, SumKernel):
        return any(has_cv(k) for k in kernel.kernels)
    return any(is_cv(f.bandwidth) for f in kernel.factors)


def loo_groups(kernel, n):
    """The ``twins`` of a leave-one-out with ``kernel``: one group per row where a factor is
    categorical, else None (the engine's default: rows at one point leave together)."""
    kernels = kernel.kernels if isinstance(kernel, SumKernel) else (kernel,)
    if any(f.is_categorical for k in kernels for f in k.factors):
        return np.arange(n)
    return None


# -- the objectives: a leave-one-out loss of a resolved kernel -----------------------------------
def values_of(estimator, y, dtype):
    """The values an estimator's local mean averages: one-hot labels (a classifier; several
    outputs side by side) or the targets, as (n, p)."""
    from sklearn.base import is_classifier

    if is_classifier(estimator):
        columns = np.asarray(y).reshape(len(y), -1)
        return np.hstack([np.eye(codes.max() + 1, dtype=dtype)[codes] for codes in
                          (np.unique(col, return_inverse=True)[1].ravel() for col in columns.T)])
    return np.asarray(y, dtype=dtype).reshape(len(y), -1)


def loo_sums(kernel, X, values, sample_weight, options):
    """Leave-one-out :class:`~localkit.engine.LocalSums` of ``values`` at the samples."""
    return bind(kernel, X, sample_weight=sample_weight, options=options,
                twins=loo_groups(kernel, len(X))).sums(None, values, exclude_self=True)


def squared_loss(kernel, X, values, sample_weight, options):
    """``sum_i c_i |v_i - m_{-i}|^2 / sum_i c_i``."""
    m = loo_sums(kernel, X, values, sample_weight, options).mean
    return float(np.average(np.sum((m - values) ** 2, axis=1), weights=sample_weight))


# -- the leave-one-out loss and its gradient in theta, streamed by query blocks ------------------
class LooGradient:
    """``fun(theta) -> (L, dL/dtheta)``: the exact leave-one-out loss of the kernel
    ``slots.kernel(theta)`` and its analytic gradient, in one pass over blocks of queries.

    With ``K_ij = prod_f K_f`` (the ``"cv"`` factors times the fixed ones) and the weights
    ``w_ij = c_j K_ij`` (zero for ``j`` left out with ``i``), ``S0_i = sum_j w_ij``,
    ``S1_i = sum_j w_ij v_j`` and ``m_i = S1_i / S0_i``::

        d m_i / d theta_p = (sum_j w'_ijp v_j - m_i sum_j w'_ijp) / S0_i,   w'_ijp = d w_ij / d theta_p

    * a continuous column ``c`` of a factor with profile ``k(u2)``, ``u2 = sum_c d_c^2 / h_c^2``,
      ``theta = log h_c``: ``w' = w * d log k / d u2 * (-2 d_c^2 / h_c^2)`` (the profile's slope);
    * a categorical column with smoothing ``lam = theta`` (bounded in ``[0, 1]``, no logit):
      ``w' = c_j K_ij^(-c) dk_c / d lam``, the other factors times the column's own derivative,
      finite at ``lam = 0`` and ``1`` where ``log k_c = -inf``: Aitchison-Aitken ``-1`` at equal
      levels, ``1 / (c - 1)`` otherwise; Wang-van Ryzin ``-1`` at equal levels, otherwise
      ``(d lam^(d-1) (1 - lam) - lam^d) / 2`` at ``d = |x - x'|``.

    Losses (``kind``): ``"squared"``, ``sum_i c_i |v_i - m_i|^2 / sum_i c_i`` (gradient
    ``2 sum_i c_i (m_i - v_i) . dm_i / sum c``); ``"density"``, ``-sum_i c_i log p_{-i}(x_i)`` with
    ``p_{-i} = S0_i / (left_i Z)`` and ``log Z`` the continuous factors' ``sum log h + const``
    (gradient ``-sum_i c_i dS0_i / S0_i + sum_i c_i`` for each continuous ``log h``).

    The pairs come from the engine: each ``"cv"`` column bound once (its squared differences
    through a unit Gaussian; a categorical column's level distances are their roots), the fixed
    factors bound once, all read block by block with ``BoundKernel.log_weights`` (``exclude_self``
    with the leave-one-out groups); no ``(n, n)`` array outlives a block. The categorical kernels
    are tables over the level distance (Li & Racine's formulas), ``dK = K dk / k`` where every
    level weighs, ``K^(-c) dk`` at ``lam = 0`` or ``1``. Rows with no weight
    (a compact kernel's empty neighbourhood) take the engine's value (``loss``), with no gradient.
    """

    def __init__(self, slots, X, kind, values, sample_weight, options, loss):
        self.slots, self.kind, self.loss, self.sample_weight = slots, kind, loss, sample_weight
        n = len(X)
        self.c = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        self.values = None if values is None else np.asarray(values, dtype=np.float64).reshape(n, -1)
        groups = loo_groups(slots.base, n)
        if groups is None and self.values is not None:  # the copies of a row, x and its values, leave together
            groups = twin_groups(X, self.values)
            groups = np.arange(n) if groups is None else groups
        self.X = X = np.asarray(X)
        self.parts = []  # per "cv" factor: (kind, profile or name, bound column kernels, slot positions, levels)
        at = 0
        for i, cols, categorical in slots.slots:
            f = slots.base.factors[i]
            positions = np.arange(at, at + len(cols))
            at += len(cols)
            # each column's squared differences d^2, through a unit Gaussian on it: log w = -d^2 / 2
            bound = [BoundKernel(Kernel("gaussian", bandwidth=1.0, features=[int(col)]), X, twins=groups)
                     for col in cols]
            if categorical:  # Aitchison-Aitken: the levels c; Wang-van Ryzin: the largest level distance
                levels = [int(np.ptp(X[:, col])) if f.name == "wang_ryzin" else np.unique(X[:, col]).size
                          for col in cols]
                self.parts.append(("categorical", f.name, bound, positions, levels))
            else:
                self.parts.append(("continuous", f.profile, bound, positions, None))
        fixed = [f for j, f in enumerate(slots.base.factors) if j not in {i for i, _, _ in slots.slots}]
        self.fixed = None
        if fixed:
            K = fixed[0]
            for f in fixed[1:]:
                K = K * f
            self.fixed = BoundKernel(K, X, twins=groups)
        n_params = slots.size
        p = 1 if self.values is None else self.values.shape[1]
        budget = (options or EngineOptions()).budget
        per_row = 8 * n * (2 * n_params + 6 + p)  # the blocks of one query row, their temporaries
        self.block = int(max(1, min(n, budget // per_row)))
        if kind == "density":
            g = groups if groups is not None else twin_groups(X)
            total = self.c.sum()
            self.left = total - (self.c if g is None else np.bincount(g, self.c)[g])

    @staticmethod
    def supports(slots):
        """True where every ``"cv"`` factor has a stated gradient: categorical, or a profile with a
        slope on euclidean distances (or one column)."""
        for i, cols, categorical in slots.slots:
            f = slots.base.factors[i]
            if categorical:
                continue
            if f.profile is None or f.profile.slope is None or f.n_neighbors is not None:
                return False
            if len(cols) > 1 and f.metric != "euclidean":
                return False
            if callable(f.metric) or f.metric not in ("euclidean", "manhattan", "minkowski", "chebyshev"):
                return False
        return True

    def _block_logs(self, theta, rows):
        """``(logs, derivs)``: the log-weights of each part of the kernel on the block (left-out
        pairs ``-inf``) and per parameter ``(position, form, part, g)``: ``form`` "log" with
        ``g = d log K_part / d theta``, or "rest" with ``g = dk_c / dlam`` (to be multiplied by
        the other parts' weights)."""
        start, stop = rows.start, rows.stop
        Q = self.X[start:stop]
        logs, derivs = [], []  # per part: log K_part (b, n); per parameter: its derivative spec
        for kind, profile, bound, positions, levels in self.parts:
            if kind == "continuous":
                h2 = np.exp(2.0 * theta[positions])
                u2c = [-2.0 * b.log_weights(Q, exclude_self=True, row_offset=start) / s for b, s in zip(bound, h2)]
                u2 = u2c[0] if len(u2c) == 1 else np.sum(u2c, axis=0)
                excluded = np.isinf(u2)
                with np.errstate(invalid="ignore", divide="ignore"):
                    L = profile.log_k(np.where(excluded, 0.0, u2))
                    slope = profile.slope_for(np)(np.where(excluded, 0.0, u2))
                L = np.where(excluded, -np.inf, L)
                logs.append(L)
                for pos, u in zip(positions, u2c):
                    with np.errstate(invalid="ignore"):
                        g = np.where((u > 0) & ~excluded, -2.0 * slope * u, 0.0)
                    derivs.append((pos, "log", len(logs) - 1, g))
                continue
            ordered = profile == "wang_ryzin"
            for b, pos, c_levels in zip(bound, positions, levels):
                lam = float(np.clip(theta[pos], 0.0, 1.0))
                R = b.log_weights(Q, exclude_self=True, row_offset=start)
                # each pair's level distance d = |x - x'| (integer codes), 0 at equal levels; the pairs left
                # out (R = -inf) get the last entry of the tables (k = 0, dk = 0)
                excluded = np.isneginf(R)
                code = np.rint(np.sqrt(np.maximum(-2.0 * np.where(excluded, 0.0, R), 0.0))).astype(np.intp)
                if not ordered:
                    code = np.minimum(code, 1)  # 0 equal levels, 1 otherwise
                L_of, dk_of = level_tables(profile, lam, c_levels)  # c_levels: levels, or the largest distance
                L_of, dk_of = np.append(L_of, -np.inf), np.append(dk_of, 0.0)
                code[excluded] = len(L_of) - 1
                logs.append(L_of[code])
                if np.all(np.isfinite(L_of[:-1])):  # every level weighs: dK = K dk / k
                    derivs.append((pos, "log", len(logs) - 1, (dk_of / np.exp(np.append(L_of[:-1], 0.0)))[code]))
                else:  # lam at 0 or 1: dK = K^(-c) dk, the other parts' weights
                    derivs.append((pos, "rest", len(logs) - 1, dk_of[code]))
        if self.fixed is not None:
            logs.append(self.fixed.log_weights(Q, exclude_self=True, row_offset=start))
        return logs, derivs

    def __call__(self, theta):
        theta = np.asarray(theta, dtype=np.float64)
        n, P = len(self.X), self.slots.size
        p = 1 if self.values is None else self.values.shape[1]
        # [c | c v]: one product gives the weights' sum and the weighted values' sums
        cv = np.column_stack([self.c, self.c if self.values is None else self.c[:, None] * self.values])
        S, dS, tops = np.empty((n, 1 + p)), np.empty((n, P, 1 + p)), np.empty(n)
        for start in range(0, n, self.block):
            rows = slice(start, min(n, start + self.block))
            logs, derivs = self._block_logs(theta, rows)
            L = logs[0].copy()
            for part in logs[1:]:
                L += part
            top = np.max(L, axis=1, keepdims=True)
            top = np.where(np.isfinite(top), top, 0.0)
            tops[rows] = top[:, 0]
            E = np.exp(L - top)  # the block's weights K_ij, each row scaled by its largest
            S[rows] = E @ cv
            for pos, form, part, g in derivs:
                if form == "log":
                    g *= E
                else:  # K^(-c) dk: the other parts' log-weights, without this column's
                    rest = np.zeros_like(L)
                    for q, other in enumerate(logs):
                        if q != part:
                            rest += other
                    g *= np.exp(rest - top)  # g = 0 at the pairs left out
                dS[rows, pos] = g @ cv
        S0, S1, dS0, dS1 = S[:, 0], S[:, 1:], dS[:, :, 0], dS[:, :, 1:]
        live = S0 > 0
        safe = np.where(live, S0, 1.0)
        if self.kind == "density":
            keep = self.c > 0
            if np.any(~live & keep):
                return np.inf, np.zeros(P)
            # each row's sums are scaled by exp(-top): log S0 + top is the true log-sum
            c = self.c[keep]
            log_z = self.slots.kernel(theta).log_density_normalizer(self.X, self.sample_weight)
            value = -float(np.sum(c * (np.log(S0[keep]) + tops[keep] - np.log(self.left[keep]) - log_z)))
            grad = -(c / S0[keep]) @ dS0[keep] + np.where(self.slots.categorical, 0.0, c.sum())
            return value, grad
        M = S1 / safe[:, None]
        dM = (dS1 - M[:, None, :] * dS0[:, :, None]) / safe[:, None, None]
        dM[~live] = 0.0
        r = M - self.values
        w = self.c / self.c.sum()
        if np.all(live):
            value = float(np.sum(w * np.sum(r * r, axis=1)))
        else:  # the engine's empty-neighbourhood policy for the rows with no weight
            value = self.loss(self.slots.kernel(theta))
        return value, 2.0 * np.einsum("n,np,nkp->k", w, r, dM)


# -- joint "cv" bandwidths ---------------------------------------------------------------------
class CVSlots:
    """The free parameters of a kernel's ``"cv"`` factors: ``theta`` holds ``log h`` for each
    continuous column and ``lam`` for each categorical one; :meth:`kernel` builds the kernel."""

    def __init__(self, kernel, X, sample_weight=None):
        if isinstance(kernel, SumKernel):
            raise ValueError("bandwidth='cv' inside a sum of kernels is not chosen; give the terms numbers or rules, "
                             "or give the kernels as a list to learn their weights")
        self.base = kernel
        self.slots = []  # (factor index, columns, categorical)
        n = len(X)
        continuous = sum(len(cols) for f, cols in kernel.columns(X.shape[1]) if is_cv(f.bandwidth)
                         and not f.is_categorical)
        c = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        starts_h, lows, highs = [], [], []
        for i, (f, cols) in enumerate(kernel.columns(X.shape[1])):
            if not is_cv(f.bandwidth):
                continue
            self.slots.append((i, cols, f.is_categorical))
            if f.is_categorical:
                lows += [0.0] * len(cols)
                highs += [WANG_RYZIN_TOP if f.name == "wang_ryzin" else 1.0] * len(cols)
                starts_h += [None] * len(cols)
                continue
            part = X[:, cols].astype(np.float64)
            sigma = np.sqrt(np.average((part - np.average(part, axis=0, weights=c)) ** 2, axis=0, weights=c))
            if not np.all(sigma > 0):
                raise ValueError(f"bandwidth='cv' in {f!r}: column(s) {cols[~(sigma > 0)].tolist()} take one value, "
                                 "so no bandwidth can be selected for them")
            ref = np.log(1.06 * sigma * n ** (-1.0 / (continuous + 4)))
            starts_h += list(ref)
            lows += list(ref - LOG_RANGE)
            highs += list(ref + LOG_RANGE)
        self.reference = starts_h
        self.bounds = list(zip(lows, highs))
        self.categorical = np.array([h is None for h in starts_h])

    @property
    def size(self):
        return len(self.bounds)

    def starts(self):
        """The joint starts: every continuous ``log h`` at ``log t`` plus its reference, every
        ``lam`` at one value."""
        out = {}
        for t in STARTS_SCALE if not self.categorical.all() else (1.0,):
            for lam in (STARTS_LAMBDA if self.categorical.any() else (None,)):
                start = np.array([lam if r is None else r + np.log(t) for r in self.reference])
                out[tuple(start)] = start
        return list(out.values())

    def kernel(self, theta):
        """The kernel with ``theta`` in its ``"cv"`` factors (rules elsewhere as given)."""
        factors = list(self.base.factors)
        at = 0
        for i, cols, categorical in self.slots:
            values = np.asarray(theta[at:at + len(cols)], dtype=np.float64)
            at += len(cols)
            if categorical:
                values = np.clip(values, 0.0, 1.0)
            else:
                values = np.exp(values)
            bandwidth = float(values[0]) if len(cols) == 1 else values
            factors[i] = factors[i]._with(bandwidth=bandwidth)
        if len(factors) == 1 and not isinstance(self.base, ProductKernel):
            return factors[0]
        out = factors[0]
        for f in factors[1:]:
            out = out * f
        return out

    def bandwidths(self, theta):
        """``theta`` as the bandwidths of the ``"cv"`` columns (``h`` and ``lam``)."""
        theta = np.asarray(theta, dtype=np.float64)
        return np.where(self.categorical, np.clip(theta, 0.0, 1.0), np.exp(theta))


def select_cv_bandwidths(kernel, X, loss, sample_weight=None, kind=None, values=None, options=None):
    """``(kernel, cv_results)``: ``kernel`` with its ``"cv"`` bandwidths minimising ``loss(K)``
    (a leave-one-out loss of a kernel without "cv"; see the module's docstring for the search).
    With ``kind`` (``"squared"`` of ``values``, or ``"density"``: ``loss``'s own objective) the
    search runs on :class:`LooGradient`'s value and analytic gradient where every ``"cv"`` factor
    states one, else on ``loss`` with finite differences.
    ``cv_results`` holds ``"bandwidths"`` (one row per point evaluated, the ``"cv"`` columns in
    the order of the factors) and ``"loo_loss"``."""
    slots = CVSlots(kernel, X, sample_weight)
    tried = {}
    analytic = None
    if kind is not None and LooGradient.supports(slots):
        analytic = LooGradient(slots, X, kind, values, sample_weight, options, loss)

    def value_of(key):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            value = loss(slots.kernel(np.asarray(key)))
        return value if np.isfinite(value) else np.inf

    def objective(theta):
        key = tuple(np.round(theta, 12))
        if key not in tried:
            tried[key] = value_of(key)
        return tried[key]

    def with_gradient(theta):
        key = tuple(np.round(theta, 12))
        value, grad = analytic(np.asarray(key))
        tried[key] = value if np.isfinite(value) else np.inf
        if not np.isfinite(value):  # no finite loss (a row without weight): a value above every one seen, so
            # that the line search steps back instead of stopping (L-BFGS-B stops at an infinite value)
            top = max((v for v in tried.values() if np.isfinite(v)), default=0.0)
            return top + abs(top) + 1.0, np.zeros_like(grad)
        if not np.all(np.isfinite(grad)):  # a derivative beyond float range: differences
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                grad = optimize.approx_fprime(np.asarray(key), lambda t: analytic(t)[0], 1.5e-8)
        return value, np.where(np.isfinite(grad), grad, 0.0)

    starts = sorted(slots.starts(), key=objective if analytic is None else (lambda t: with_gradient(t)[0]))
    for start in starts[:2]:
        with warnings.catch_warnings():  # inf - inf in a finite difference where a point has no finite loss
            warnings.simplefilter("ignore", RuntimeWarning)
            optimize.minimize(objective if analytic is None else with_gradient, start, method="L-BFGS-B",
                              jac=analytic is not None, bounds=slots.bounds,
                              options={"ftol": 1e-12, "gtol": 1e-9, "maxiter": 200})
    keys = list(tried)
    values = np.array([tried[k] for k in keys])
    best = np.asarray(keys[int(np.argmin(values))])
    if not np.isfinite(values.min()):
        raise ValueError("bandwidth='cv': no bandwidth tried gives a finite leave-one-out loss")
    results = {"bandwidths": np.array([slots.bandwidths(k) for k in keys]), "loo_loss": values}
    low = np.array([lo for lo, _ in slots.bounds])
    at_floor = ~slots.categorical & (best <= low + 1e-6)
    if np.any(at_floor):
        # the bandwidths reached are in cv_results_; the message stays the same, shown once per line
        warn(BandwidthWarning("bandwidth='cv' stopped at the smallest bandwidth of its search (1e-4 times the normal "
                              "reference) for some continuous column(s): the leave-one-out objective still improves "
                              "as h -> 0, as it does where many rows repeat a value (a density's leave-one-out "
                              "likelihood is then unbounded); treat such a column as categorical, or give its "
                              "bandwidth"))
    return slots.kernel(best), results


# -- mixtures on the simplex -----------------------------------------------------------------
def check_kernel_list(kernels, name="kernel"):
    """A non-empty list of :class:`~localkit.Kernel` instances without ``"cv"`` bandwidths."""
    if len(kernels) == 0:
        raise ValueError(f"{name}: a list of kernels to mix needs at least one Kernel, got an empty list")
    for k in kernels:
        if not isinstance(k, Kernel):
            raise TypeError(f"{name}: a list of kernels to mix holds localkit.Kernel instances only, got "
                            f"{type(k).__name__} {k!r}")
        if k.is_softmax:
            raise ValueError(f"{name}: kernel 'softmax' cannot be mixed with distance kernels")
        if k.n_neighbors is not None:
            raise ValueError(f"{name}: the kernels of a mixture take fixed bandwidths or rules, got {k!r}")
        if has_cv(k):
            raise ValueError(f"{name}: the kernels of a mixture carry numbers or rules; 'cv' in {k!r} is chosen by a "
                             "kernel given alone")
    return list(kernels)


def simplex_minimum(fun, K):
    """``w`` on the simplex minimising ``fun(w) -> (value, gradient)``: SLSQP from the
    barycentre and each vertex; the best point evaluated."""
    best_w, best = None, np.inf
    starts = [np.full(K, 1.0 / K)] + [np.eye(K)[k] for k in range(K)]
    constraint = {"type": "eq", "fun": lambda w: np.sum(w) - 1.0, "jac": lambda w: np.ones_like(w)}
    for start in starts:
        value = fun(start)[0]
        if value < best:
            best_w, best = start, value
        if K == 1:
            break
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            res = optimize.minimize(fun, start, jac=True, method="SLSQP", bounds=[(0.0, 1.0)] * K,
                                    constraints=[constraint], options={"ftol": 1e-14, "maxiter": 500})
        w = np.clip(res.x, 0.0, None)
        w = w / w.sum() if w.sum() > 0 else start
        value = fun(w)[0]
        if value < best:
            best_w, best = w, value
    return best_w, best


def mixture_means(w, log_sums, means):
    """``(M, share, D)``: the mixture's leave-one-out means ``M`` (n, p), the terms' relative sums
    ``share = S_ik / max_k S_ik`` and ``D_i = sum_k w_k share_ik``. Rows where ``D = 0`` (no term
    of positive weight reaches the sample) take the first such term's mean, as the engine's
    sum does (the nearest sample)."""
    top = np.max(log_sums, axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    share = np.exp(log_sums - top)  # (n, K)
    D = share @ w
    safe = np.where(D > 0, D, 1.0)
    M = np.einsum("nk,nkp->np", share * w, means) / safe[:, None]
    first = means[:, int(np.flatnonzero(w > 0)[0]) if np.any(w > 0) else 0]
    M = np.where((D > 0)[:, None], M, first)
    return M, share, D


def mixture_loss(kind, log_sums, means, values, sample_weight):
    """``fun(w) -> (loss, gradient)`` of the leave-one-out mixture (``kind``: "squared" or "log")
    from each kernel's leave-one-out ``log_sums`` (n, K) and ``means`` (n, K, p)."""
    c = np.ones(len(values)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    c = c / c.sum()
    tiny = np.finfo(np.float64).eps

    def fun(w):
        M, share, D = mixture_means(w, log_sums, means)
        live = D > 0
        safe = np.where(live, D, 1.0)
        dM = share[:, :, None] * (means - M[:, None, :]) / safe[:, None, None]  # dM_ip / dw_k: (n, K, p)
        dM[~live] = 0.0
        if kind == "squared":
            r = M - values
            value = float(np.sum(c * np.sum(r * r, axis=1)))
            grad = 2.0 * np.einsum("n,np,nkp->k", c, r, dM)
        else:  # log-loss of the true classes: values one-hot (several outputs side by side)
            P = np.maximum(M, tiny)
            value = float(-np.sum(c[:, None] * values * np.log(P)))
            grad = -np.einsum("n,np,nkp->k", c, values / P * (M > tiny), dM)
        return value, grad

    return fun


def density_mixture_loss(log_p, sample_weight):
    """``fun(pi) -> (-sum_i c_i log sum_k pi_k p_{-i,k}, gradient)`` / ``sum c`` from the terms'
    leave-one-out log-densities ``log_p`` (n, K)."""
    c = np.ones(len(log_p)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    keep = c > 0
    c, log_p = c[keep] / c[keep].sum(), log_p[keep]
    top = np.max(log_p, axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    P = np.exp(log_p - top)

    def fun(w):
        f = P @ w
        with np.errstate(divide="ignore"):
            value = float(-np.sum(c * (np.log(f) + top[:, 0])))
        if not np.isfinite(value):
            return np.inf, np.zeros_like(w)
        return value, -(c / f) @ P

    return fun


def learn_mixture(kernels, X, values, kind, sample_weight, options):
    """``(w, loss)``: the weights on the simplex of ``sum_k w_k K_k`` minimising the
    leave-one-out loss ``kind`` ("squared" or "log") of the local mean of ``values``."""
    outs = [loo_sums(k, X, values, sample_weight, options) for k in kernels]
    log_sums = np.stack([np.asarray(o.log_weight_sum, dtype=np.float64) for o in outs], axis=1)
    means = np.stack([np.asarray(o.mean, dtype=np.float64).reshape(len(X), -1) for o in outs], axis=1)
    return simplex_minimum(mixture_loss(kind, log_sums, means, np.asarray(values, dtype=np.float64),
                                        sample_weight), len(kernels))


def mixture_kernel(kernels, w):
    """``sum_k w_k K_k`` (a single kernel for one term)."""
    return SumKernel(list(zip(w, kernels)))


__all__ = ["CVSlots", "LooGradient", "check_kernel_list", "density_mixture_loss", "has_cv", "learn_mixture",
           "loo_groups", "loo_sums", "mixture_kernel", "mixture_loss", "select_cv_bandwidths", "simplex_minimum",
           "squared_loss", "values_of"]
