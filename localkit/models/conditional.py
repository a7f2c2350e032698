"""Conditional distributions: the density, distribution function, quantiles and mode of ``y``
given ``x``, as local means of a kernel in ``y`` under a kernel in ``x``.

With ``K_x`` a localization kernel on the columns of ``X`` (any kernel of the algebra: products
with Aitchison-Aitken and Wang-van Ryzin factors) and the local-mean weights
``w_i(x) = K_x(x, x_i) / sum_j K_x(x, x_j)``,

.. math::

    \\hat f(y \\mid x) = \\sum_i w_i(x)\\, \\frac{K_y(y, y_i)}{Z_y}, \\qquad
    \\hat F(y \\mid x) = \\sum_i w_i(x)\\, G_y(y, y_i),

``K_y`` a kernel on the columns of ``y`` (``Z_y`` its integral: ``c_d prod h`` over its continuous
factors; a categorical factor's weights are probabilities of levels, taken as they are) and
``G_y`` its integral up to ``y``: per continuous column the profile's distribution function
``K((y - y_i) / h)`` (:func:`~localkit.models.density.kernel_cdf`), per categorical column the
sum of its weights over the levels seen at fit that are ``<= y``. This is the estimator of Hall,
Racine and Li (R's ``np::npcdens`` / ``npcdist``) and statsmodels'
``KDEMultivariateConditional``, which computes ``f(x, y) / f(x)``: the same quantity, since the
joint kernel is ``K_x K_y``.

The engine computes ``f`` as the ratio of two streamed sums in log-space, that of the product
kernel ``K_x K_y`` on the joint samples ``[x_i, y_i]`` and that of ``K_x``, each bound once at
fit; ``F`` from blocks of the normalised weights ``w_i(x)``.
"""
from __future__ import annotations

import math
from numbers import Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import ALGORITHM_CONSTRAINT, BANDWIDTH_CV_CONSTRAINT, N_JOBS_CONSTRAINT, PROFILE_CONSTRAINT
from ..engine import DEFAULT_MEMORY_BUDGET, BoundKernel, EngineOptions, twin_groups
from ..kernels import Kernel
from ..kernels.bandwidth import resolve_bandwidth
from ..kernels.bandwidth_matrix import full_bandwidth, is_full_bandwidth, matrix_map
from ..kernels.categorical import CategoricalColumns, check_smoothing
from ..kernels.kernel import ProductKernel, SumKernel, product_of
from .._validation import check_class_labels
from ._base import FLOATS
from .density import _check_density_kernel, kernel_cdf, kernel_quantile
from .kernel_learning import has_cv


def on_columns(kernel, n_columns, offset=0):
    """``kernel`` as a product whose factors name their columns, shifted by ``offset``: the
    factors of a kernel on ``n_columns`` columns placed at ``offset .. offset + n_columns - 1``
    of a wider array (a plain kernel looks at all of them)."""
    return [factor._with(features=[int(c) + offset for c in cols]) for factor, cols in kernel.columns(n_columns)]


def check_probabilities(q, name="q"):
    """``q`` as a float array of probabilities strictly inside ``(0, 1)``."""
    if isinstance(q, bool):
        raise TypeError(f"{name} must be a probability in (0, 1) or an array of them, got {q!r}")
    try:
        p = np.asarray(q, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a probability in (0, 1) or an array of them, got {q!r}") from None
    if p.ndim > 1 or p.size == 0:
        raise ValueError(f"{name} must be a probability in (0, 1) or a 1-D array of them, got shape {p.shape}")
    if not np.all((p > 0) & (p < 1)):
        raise ValueError(f"{name} must hold probabilities strictly between 0 and 1 (NaN is not one), got {q!r}")
    return p


def fit_x_kernel(estimator, X):
    """The kernel ``K_x`` of ``estimator`` (its ``kernel`` and ``bandwidth``) resolved on ``X``:
    a :class:`~localkit.Kernel` given carries its own bandwidths (names of features mapped
    through ``feature_names_in_``); a profile name takes ``bandwidth``, a rule resolved on ``X``.
    A full bandwidth matrix ``H`` ("hpi", "hscv", a (d, d) array) sets ``bandwidth_matrix_`` and
    ``_x_map`` (``x -> x H^-1/2``, applied by :func:`mapped_x` to the samples and the queries) and
    gives the kernel of bandwidth 1 on the mapped columns."""
    estimator.__dict__.pop("bandwidth_matrix_", None)
    estimator._x_map = None
    if isinstance(estimator.kernel, Kernel):
        kern = estimator.kernel.with_feature_names(getattr(estimator, "feature_names_in_", None))
        if isinstance(kern, SumKernel) or kern.is_softmax:
            raise ValueError(f"kernel={kern!r}: a kernel of the columns of X is taken (a profile, a product over groups "
                             "of columns), not a sum or the softmax kernel")
        return kern.resolved(X)
    if is_full_bandwidth(estimator.bandwidth):  # K_H: the columns of X mapped by H^-1/2, bandwidth 1 there
        estimator.bandwidth_matrix_ = full_bandwidth(estimator.bandwidth, X)
        estimator._x_map = matrix_map(estimator.bandwidth_matrix_)
        return Kernel(estimator.kernel, bandwidth=1.0)
    if isinstance(estimator.bandwidth, str) and estimator.bandwidth == "cv":
        if not getattr(estimator, "_takes_cv", False):
            raise ValueError(f"bandwidth='cv' is not chosen by {type(estimator).__name__}; give numbers or a rule")
        return Kernel(estimator.kernel, bandwidth="cv")
    h = resolve_bandwidth(estimator.bandwidth, X)
    if not np.all(np.isfinite(h)) or not np.all(np.asarray(h) > 0):
        raise ValueError(f"bandwidth={estimator.bandwidth!r} gave {h!r} on these X (a feature with one value?); give "
                         "the bandwidth as positive numbers")
    return Kernel(estimator.kernel, bandwidth=h)


def mapped_x(estimator, X):
    """``X`` in the coordinates of the x kernel (mapped by ``H^-1/2`` under a full bandwidth matrix)."""
    x_map = getattr(estimator, "_x_map", None)
    return X if x_map is None else x_map.transform(X)


def _restore(given, factors):
    """``factors`` (each naming its columns) as the kernel ``given`` was stated: a plain kernel
    (no ``features``) stays plain."""
    if len(factors) == 1 and given.features is None and not isinstance(given, ProductKernel):
        return factors[0]._with(features=None)
    return product_of(factors)


def block_rows(n_samples):
    """Queries per ``(n_queries, n_samples)`` weight block within the engine's memory budget
    (a few float64 blocks of that size live at once)."""
    return int(max(1, DEFAULT_MEMORY_BUDGET // (8 * 4 * max(1, n_samples))))


def weight_blocks(bound, X, exclude_self=False):
    """``(rows, W)`` over blocks of the queries ``X``: the normalised weights ``w_i(x)`` of the
    bound kernel (an empty neighbourhood: all on the nearest sample, the engine's "nearest"
    policy, the limit of a growing bandwidth). ``exclude_self``: ``X`` are the bound samples, each
    query's own weight (and its twins') left out (the leave-one-out weights; an empty one on the
    nearest other sample)."""
    step = block_rows(bound.n_samples)
    for start in range(0, len(X), step):
        rows = slice(start, min(start + step, len(X)))
        W = bound.weights(X[rows], exclude_self=exclude_self, row_offset=start)
        empty = ~(W.sum(axis=1) > 0)
        if np.any(empty):
            self_rows = np.flatnonzero(empty) + start if exclude_self else None
            W[np.flatnonzero(empty), bound.nearest(X[rows][empty], self_rows=self_rows)] = 1.0
        yield rows, W


class ConditionalDensity(BaseEstimator):
    """The conditional density, distribution function, quantiles and mode of ``y`` given ``x``.

    .. math::

        \\hat f(y \\mid x) = \\frac{\\sum_i K_x(x, x_i) K_y(y, y_i)}{Z_y \\sum_j K_x(x, x_j)}, \\qquad
        \\hat F(y \\mid x) = \\frac{\\sum_i K_x(x, x_i) G_y(y, y_i)}{\\sum_j K_x(x, x_j)}

    (see :mod:`localkit.models.conditional`). With Gaussian factors for continuous columns,
    Aitchison-Aitken for unordered and Wang-van Ryzin for ordered ones, it equals statsmodels'
    ``KDEMultivariateConditional(dep_type, indep_type, bw=[h_y..., h_x...])`` ``pdf`` and ``cdf``
    at the same bandwidths (to 1e-10, tested for ``c|c``, ``c|cu``, ``c|co``, ``u|cc``).

    Parameters
    ----------
    kernel : str or Kernel, default="gaussian"
        The kernel ``K_x`` on the columns of ``X``: a profile name (with ``bandwidth``) or a
        :class:`~localkit.Kernel`, which carries its own bandwidths (a product over groups of
        columns with categorical factors, e.g. ``Kernel("gaussian", bandwidth=1.0, features=[0]) *
        Kernel("aitchison_aitken", bandwidth=0.2, features=[1])``). Not "softmax".
    bandwidth : float, array of shape (n_features,), rule or "cv", default="scott"
        ``h`` of ``K_x`` when ``kernel`` is a name (a rule is resolved on ``X``); ignored for a
        ``Kernel`` given as ``kernel``. ``"cv"`` (here or inside ``kernel`` and ``y_kernel``, e.g.
        ``Kernel("gaussian", bandwidth="cv")``): every such bandwidth chosen jointly by the
        leave-one-out likelihood ``sum_i log f_{-i}(y_i | x_i)`` (statsmodels' ``bw="cv_ml"``;
        the search in ``cv_results_``).
        A full bandwidth matrix ``H`` (2 to 6 features, a symmetric positive definite (d, d)
        array, or "hpi" / "hscv": R's ``ks::Hpi`` / ``ks::Hscv`` on the samples): the kernel
        ``k(sqrt(dx^T H^-1 dx))``, the samples mapped once by ``H^-1/2``; ``bandwidth_matrix_ = H``
        (see :doc:`/user_guide/conditional`).
    y_kernel : Kernel or None, default=None
        The kernel ``K_y`` on the columns of ``y`` (its ``features`` index those columns): a
        kernel with a density (a fixed bandwidth or a rule, a norm metric) or categorical
        factors for discrete columns (integer codes). None: ``Kernel("gaussian",
        bandwidth="scott")`` on every column of ``y``.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
        The engine's path for the sums (as in :class:`localkit.LocalMeanRegressor`).
    n_jobs : int or None, default=None
        Engine threads.
    tolerance : float in (0, 1) or None, default=None
        With ``"cv"`` bandwidths: the relative error accepted from binned sums, which makes the
        search evaluate its objective by categorical cells and binned Gaussian sums
        (:mod:`localkit.models.cv_scale`; Gaussian factors on at most three continuous columns of
        ``[X, y]``); None: the exact passes. The densities themselves are always exact.

    Attributes
    ----------
    kernel_ : Kernel
        ``K_x`` as used (rules resolved).
    y_kernel_ : Kernel
        ``K_y`` as used (rules resolved).
    n_outputs_ : int
        The columns of ``y``.
    cv_results_ : dict
        With ``"cv"`` bandwidths: ``"bandwidths"`` (one row per point evaluated, the ``"cv"``
        columns of ``K_x`` then ``K_y``) and ``"loo_loss"`` (minus the leave-one-out log-likelihood).
    X_fit_, y_fit_ : the training data (``y_fit_`` of shape ``(n_samples, n_outputs_)``).

    Notes
    -----
    A query whose neighbourhood in ``x`` is empty (outside every compact support of ``K_x``)
    takes the weights of the limit of a growing bandwidth: all on its nearest training sample
    (the engine's ``empty="nearest"`` policy). Categorical columns, of ``X`` and of ``y``, take
    only the levels seen at fit (another level is refused: its kernel weight is not defined by
    the data).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import ConditionalDensity, Kernel
    >>> X = np.linspace(0, 1, 50)[:, None]
    >>> y = np.r_[np.zeros(25), np.ones(25)]
    >>> cd = ConditionalDensity(bandwidth=0.1, y_kernel=Kernel("gaussian", bandwidth=0.2)).fit(X, y)
    >>> cd.cdf([[0.0], [1.0]], [0.5, 0.5]).round(3)
    array([0.994, 0.006])
    """

    _parameter_constraints: dict = {
        "kernel": PROFILE_CONSTRAINT + [Kernel],
        "bandwidth": BANDWIDTH_CV_CONSTRAINT,
        "y_kernel": [Kernel, None],
        "algorithm": ALGORITHM_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
        "tolerance": [Interval(Real, 0, 1, closed="neither"), None],
    }

    #: "cv" bandwidths are chosen by the leave-one-out likelihood (:meth:`_select_cv`)
    _takes_cv = True

    def __init__(self, kernel="gaussian", bandwidth="scott", y_kernel=None, algorithm="auto", n_jobs=None,
                 tolerance=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.y_kernel = y_kernel
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.tolerance = tolerance

    # -- fit ----------------------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Resolve the kernels on the training data and bind them to it once. Returns ``self``.

        ``y`` of shape (n_samples,) or (n_samples, n_outputs), finite numbers (integer codes in
        the columns of a categorical factor of ``y_kernel``)."""
        X, y = validate_data(self, X, y, dtype=FLOATS, multi_output=True, y_numeric=True)
        Y = np.asarray(y, dtype=X.dtype).reshape(len(y), -1)
        self.n_outputs_ = Y.shape[1]
        self.kernel_ = fit_x_kernel(self, X)
        self.y_kernel_ = self._fit_y_kernel(Y)
        if has_cv(self.kernel_) or has_cv(self.y_kernel_):
            self.kernel_, self.y_kernel_ = self._select_cv(mapped_x(self, X), Y)
        self.X_fit_, self.y_fit_ = X, Y
        self._bind()
        return self

    def _select_cv(self, X, Y):
        """``(K_x, K_y)`` with their ``"cv"`` bandwidths chosen jointly by the leave-one-out
        likelihood ``sum_i log f_{-i}(y_i | x_i)``, ``f_{-i}`` the ratio of the joint and the ``x``
        sums without the samples of ``i``'s group (each row alone where a factor is categorical,
        else the rows at ``(x_i, y_i)``): the search of
        :func:`~localkit.models.kernel_learning.select_cv_bandwidths` on the joint kernel
        ``K_x K_y`` (R's ``npcdensbw(bwmethod = "cv.ml")``, statsmodels'
        ``KDEMultivariateConditional(bw="cv_ml")``), on the exact engine passes (two per
        evaluation), or with ``tolerance`` on cell sums (:mod:`localkit.models.cv_scale`); the
        search is kept in ``cv_results_``."""
        from .kernel_learning import select_cv_bandwidths

        d, k = X.shape[1], Y.shape[1]
        if len(X) < 3:
            raise ValueError(f"bandwidth='cv' needs at least 3 samples, got n_samples={len(X)}")
        joint = product_of(on_columns(self.kernel_, d) + on_columns(self.y_kernel_, k, offset=d))
        XY = np.concatenate([X, Y], axis=1).astype(np.float64)
        categorical = any(f.is_categorical for f in joint.factors)
        groups = np.arange(len(X)) if categorical else twin_groups(XY)
        options = EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs)

        def loss(J):
            x_part = product_of([f for f in J.factors if max(f.features) < d])
            num = BoundKernel(J, XY, twins=groups, options=options).sums(None, exclude_self=True).log_weight_sum
            den = BoundKernel(x_part, XY[:, :d], twins=groups, options=options).sums(None,
                                                                                    exclude_self=True).log_weight_sum
            with np.errstate(invalid="ignore"):
                log_f = num - den - sum(f.resolved_log_density_normalizer(d + k) for f in J.factors
                                        if min(f.features) >= d)
            return -float(np.sum(log_f)) if np.all(np.isfinite(log_f)) else np.inf

        from .cv_scale import cell_conditional_loss, takes_cells

        if takes_cells(joint, d + k, self.tolerance):  # at scale: cell sums (models.cv_scale)
            loss = cell_conditional_loss(XY, d, groups, self.tolerance)
        J, self.cv_results_ = select_cv_bandwidths(joint, XY, loss)
        x_factors = [f for f in J.factors if max(f.features) < d]
        y_factors = [f._with(features=[int(c) - d for c in f.features]) for f in J.factors if min(f.features) >= d]
        return _restore(self.kernel_, x_factors), _restore(self.y_kernel_, y_factors)

    def _fit_y_kernel(self, Y):
        """``K_y`` resolved on ``Y`` and checked: it has a density."""
        kern = Kernel("gaussian", bandwidth="scott") if self.y_kernel is None else self.y_kernel
        if isinstance(kern, SumKernel):
            raise ValueError(f"y_kernel={kern!r}: a sum of kernels is not taken; give a profile or a product")
        _check_density_kernel(kern)
        kern.columns(Y.shape[1])  # features within the columns of y
        kern = kern.resolved(Y)
        for factor, cols in kern.columns(Y.shape[1]):
            if not factor.is_categorical and not has_cv(factor) and not np.all(np.asarray(factor.bandwidth) > 0):
                raise ValueError(f"y_kernel: the bandwidth rule of {factor!r} gave a zero bandwidth on these y (a "
                                 "column with one value?); give the bandwidth as a positive number")
        return kern

    def _bind(self):
        """Bind ``K_x`` to ``X`` and ``K_x K_y`` to ``[X, Y]``, once; lay out the levels and
        tables of the categorical columns."""
        X, Y = mapped_x(self, self.X_fit_), self.y_fit_
        d, k = X.shape[1], Y.shape[1]
        options = EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs, empty="nearest")
        self._x_factors = on_columns(self.kernel_, d)
        self._y_factors = self.y_kernel_.columns(k)
        self._bound_x = BoundKernel(self.kernel_, X, options=options)
        self._bound_joint = BoundKernel(product_of(self._x_factors + on_columns(self.y_kernel_, k, offset=d)),
                                        np.concatenate([X, Y], axis=1), options=options)
        self._bound_y = BoundKernel(self.y_kernel_, Y, options=options)
        self._log_z = self.y_kernel_.resolved_log_density_normalizer(k)
        # the levels seen at fit of every categorical column, of X and of y (queries are checked against them)
        self._levels_x = categorical_levels(self.kernel_, X)
        self._levels_y = categorical_levels(self.y_kernel_, Y)

    # -- checks of the queries -------------------------------------------------------------------
    def _queries(self, X, y=None):
        """``(X, Y)``: the queries checked (finite, shapes, levels seen at fit)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        Y = None
        if y is not None:
            Y = np.asarray(y, dtype=np.float64)
            if Y.ndim == 1 and self.n_outputs_ == 1:
                Y = Y[:, None]
            if Y.ndim != 2 or Y.shape != (len(X), self.n_outputs_):
                raise ValueError(f"y must have shape ({len(X)},) or ({len(X)}, {self.n_outputs_}) (one row per row of "
                                 f"X, {self.n_outputs_} column(s) as at fit), got {np.shape(y)}")
            if not np.all(np.isfinite(Y)):
                raise ValueError("y contains NaN or infinity")
            check_levels(Y, self._levels_y, "y")
        check_levels(X, self._levels_x, "X")
        return mapped_x(self, X), Y

    # -- the density -------------------------------------------------------------------------------
    def _log_pdf(self, X, Y):
        """``log f(y | x)`` at the paired rows."""
        if len(X) == 0:
            return np.zeros(0)
        x_sums = self._bound_x.sums(X)
        joint = self._bound_joint.sums(np.concatenate([X, Y.astype(X.dtype)], axis=1)).log_weight_sum
        with np.errstate(invalid="ignore"):
            log_f = np.asarray(joint, dtype=np.float64) - np.asarray(x_sums.log_weight_sum, dtype=np.float64)
        empty = np.asarray(x_sums.empty)
        if np.any(empty):  # the weights of the empty neighbourhoods: all on the nearest sample
            nearest = self._bound_x.nearest(X[empty])
            log_f[empty] = self._log_ky(Y[empty], nearest)
        return log_f - self._log_z

    def _log_ky(self, Y, rows):
        """``log K_y(y_t, y_rows[t])`` of the pairs (unnormalised), from blocks of the bound ``K_y``."""
        out = np.empty(len(rows))
        step = block_rows(len(self.X_fit_))
        for start in range(0, len(rows), step):
            block = slice(start, start + step)
            L = self._bound_y.log_weights(Y[block].astype(self.y_fit_.dtype))
            out[block] = L[np.arange(L.shape[0]), rows[block]]
        return out

    def _weight_blocks(self, X):
        return weight_blocks(self._bound_x, X)

    def pdf(self, X: ArrayLike, y: ArrayLike) -> np.ndarray:
        """``f(y_t | x_t)`` at the paired rows of ``X`` and ``y`` (n_queries,)."""
        X, Y = self._queries(X, y)
        with np.errstate(under="ignore"):
            return np.exp(self._log_pdf(X, Y))

    def log_pdf(self, X: ArrayLike, y: ArrayLike) -> np.ndarray:
        """``log f(y_t | x_t)`` (exact where ``f`` underflows)."""
        X, Y = self._queries(X, y)
        return self._log_pdf(X, Y)

    def score(self, X: ArrayLike, y: ArrayLike) -> float:
        """The mean log-likelihood ``sum_t log f(y_t | x_t) / n``."""
        X, Y = self._queries(X, y)
        return float(np.mean(self._log_pdf(X, Y)))

    # -- the distribution function and quantiles ---------------------------------------------------
    def _cdf_tables(self):
        """Per column of ``y``: ``("continuous", profile, h)``, or ``("categorical", levels, C)``
        with ``C[m, i] = sum_{l <= levels[m]} k(l, y_i)`` over the levels seen at fit (built once)."""
        if getattr(self, "_tables", None) is not None:
            return self._tables
        Y = np.asarray(self.y_fit_, dtype=np.float64)
        tables = {}
        for factor, cols in self._y_factors:
            if factor.is_categorical:
                lam = np.broadcast_to(check_smoothing(factor.bandwidth, factor.name), (len(cols),))
                for j, c in enumerate(cols):
                    levels = self._levels_y[int(c)]
                    columns = CategoricalColumns(factor.name, lam[j], Y[:, [c]], factor.level_codes)
                    with np.errstate(under="ignore"):
                        k = np.exp(columns.log_weights(np, levels[:, None], Y[:, [c]]))  # (levels, n)
                    tables[int(c)] = ("categorical", levels, np.cumsum(k, axis=0), k)
                continue
            h = np.broadcast_to(np.asarray(factor.bandwidth, dtype=np.float64), (len(cols),))
            for j, c in enumerate(cols):
                tables[int(c)] = ("continuous", factor, float(h[j]), len(cols))
        self._tables = tables
        return tables

    def _check_cdf(self, what):
        """``G_y`` exists in closed form: a continuous factor of several columns must be Gaussian
        (the only radial profile whose integral over a box is a product of 1-D ones)."""
        for kind, factor, *rest in self._cdf_tables().values():
            if kind == "continuous" and rest[1] > 1 and not factor.profile.log_linear:
                raise ValueError(f"{what} integrates K_y over a box; the {factor.name_!r} profile on {rest[1]} columns "
                                 "of y is not a product over them: give one factor per column (K1 * K2) or 'gaussian'")

    def _g_block(self, Yq):
        """``G_y(y_t, y_i)`` (b, n) of the query rows ``Yq`` against every training sample."""
        G = None
        for c, (kind, a, b, *_rest) in self._cdf_tables().items():
            if kind == "continuous":
                part = kernel_cdf(a.profile, (Yq[:, c, None] - self.y_fit_[None, :, c].astype(np.float64)) / b)
            else:
                m = np.searchsorted(a, Yq[:, c], side="right") - 1  # the last level <= y (-1: none)
                part = np.where((m >= 0)[:, None], b[np.maximum(m, 0)], 0.0)
            G = part if G is None else G * part
        return G

    def cdf(self, X: ArrayLike, y: ArrayLike) -> np.ndarray:
        """``F(y_t | x_t) = sum_i w_i(x_t) G_y(y_t, y_i)`` at the paired rows (n_queries,): per
        continuous column of ``y`` the profile's distribution function
        ``K((y - y_i) / h)`` (several columns: the product), per categorical column the sum of its
        weights over the levels seen at fit that are ``<= y`` (statsmodels' convention; the
        Wang-van Ryzin weights do not sum to 1 over the levels, so neither does ``F`` at the top)."""
        X, Y = self._queries(X, y)
        self._check_cdf("cdf")
        out = np.empty(len(X))
        for rows, W in self._weight_blocks(X):
            out[rows] = np.einsum("ij,ij->i", W, self._g_block(Y[rows]))
        return out

    def _one_output(self, what):
        if self.n_outputs_ != 1:
            raise ValueError(f"{what} is defined for one column of y; this density has n_outputs_={self.n_outputs_}")

    def quantile(self, X: ArrayLike, q=0.5) -> np.ndarray:
        """The conditional quantiles ``Q(q | x) = inf {y : F(y | x) >= q}`` of one column of ``y``.

        Continuous ``y``: the root of ``F(t | x) = q`` by Newton steps on ``f``, safeguarded by
        bisection inside the bracket ``[min_i y_i + h K^{-1}(q), max_i y_i + h K^{-1}(q)]`` (every
        term of ``F`` below, resp. above, ``q`` there), to round-off. Discrete ``y``: the
        smallest level seen at fit with ``F >= q F(top level)`` (``F`` normalised over the
        levels). ``q``: a probability in (0, 1) or a 1-D array of them; returns (n_queries,) or
        (n_queries, len(q)), monotone in ``q`` (``F`` is non-decreasing in ``y``).
        """
        check_is_fitted(self)
        self._one_output("quantile")
        scalar = np.ndim(q) == 0
        p = np.atleast_1d(check_probabilities(q))
        X, _ = self._queries(X)
        kind, a, b, *_rest = self._cdf_tables()[0]
        out = np.empty((len(X), len(p)))
        for rows, W in self._weight_blocks(X):
            if kind == "categorical":
                F = W @ b.T  # (rows, levels)
                F = F / F[:, -1:]
                for j, pj in enumerate(p):
                    out[rows, j] = a[np.minimum(np.sum(F < pj * (1 - 1e-12), axis=1), len(a) - 1)]
            else:
                for j, pj in enumerate(p):
                    out[rows, j] = self._invert(W, a.profile, b, pj)
        return out[:, 0] if scalar else out

    def _invert(self, W, profile, h, q):
        """The root ``t`` of ``sum_i W_ti K((t - y_i) / h) = q`` per row of ``W``: Newton steps
        kept inside the bracket (bisection otherwise), each row until its step is below ``1e-13``
        of its scale ``max(|t|, h)``."""
        y = self.y_fit_[:, 0].astype(np.float64)
        z = float(kernel_quantile(profile, q))
        lo = np.full(len(W), y.min() + h * z)
        hi = np.full(len(W), y.max() + h * z)
        t = np.clip(W @ y + h * z, lo, hi)  # the weighted mean, shifted: a start inside the bracket
        scale = math.exp(-profile.log_normalizer(1)) / h
        live = np.arange(len(W))
        for _ in range(200):
            Wl, tl = W[live], t[live]
            U = (tl[:, None] - y) / h
            F = np.einsum("ij,ij->i", Wl, kernel_cdf(profile, U)) - q
            f = np.einsum("ij,ij->i", Wl, np.exp(profile.log_k(U * U))) * scale
            lo[live], hi[live] = np.where(F < 0, tl, lo[live]), np.where(F < 0, hi[live], tl)
            with np.errstate(divide="ignore", invalid="ignore"):
                new = tl - np.where(f > 0, F / f, np.inf)
            new = np.where((new > lo[live]) & (new < hi[live]), new, 0.5 * (lo[live] + hi[live]))
            new = np.where(F == 0, tl, new)  # the root itself
            t[live] = new
            live = live[(np.abs(new - tl) > 1e-13 * np.maximum(np.abs(tl), h)) & (F != 0)]
            if len(live) == 0:
                break
        return t

    # -- the mode and draws -------------------------------------------------------------------------
    def mode(self, X: ArrayLike, *, max_iter: int = 500, tol: float = 1e-10) -> np.ndarray:
        """The conditional mode ``argmax_y f(y | x)`` at each row of ``X``: (n_queries,) for one
        column of ``y``, else ``(n_queries, n_outputs_)``.

        Categorical ``y`` (every factor of ``y_kernel`` categorical): the combination of levels
        seen at fit with the largest ``f`` (R's ``npconmode``). Continuous ``y`` (Gaussian
        factors): the largest ``f`` over 128 training values of ``y`` (spread over their order
        along the first column), then mean shift to the mode above it,
        ``t <- sum_i K_x(x, x_i) K_y(t, y_i) y_i / sum_i K_x(x, x_i) K_y(t, y_i)``, the local mean
        of ``y`` under the joint kernel at ``(x, t)`` (each step climbs ``f``), until a step is
        below ``tol`` times the bandwidth or ``max_iter`` steps.
        """
        X, _ = self._queries(X)
        if any(f.is_categorical for f, _ in self._y_factors):
            if not all(f.is_categorical for f, _ in self._y_factors):
                raise ValueError("mode: y_kernel mixes categorical and continuous factors; give one kind")
            out = self._categorical_mode(X)
        else:
            if not all(f.profile.log_linear for f, _ in self._y_factors):
                raise ValueError("mode climbs f by mean shift, exact for Gaussian factors of y_kernel; got "
                                 f"{self.y_kernel_!r}")
            out = self._continuous_mode(X, max_iter, tol)
        return out[:, 0] if self.n_outputs_ == 1 else out

    def _candidates(self, points):
        """``(points, K)``: candidate values of ``y`` and ``K_y(candidate, y_i)`` (n_samples, n_candidates)."""
        with np.errstate(under="ignore"):
            K = np.exp(self._bound_y.log_weights(points.astype(self.y_fit_.dtype))).T
        return points, K

    def _level_pdf(self, X):
        """``(grid, P)``: every combination of the levels of ``y`` seen at fit (categorical ``y``)
        and ``P[t, g] = f(grid_g | x_t)`` (n_queries, n_combinations)."""
        levels = [self._levels_y[c] for c in range(self.n_outputs_)]
        count = math.prod(len(a) for a in levels)
        if count > 100_000:
            raise ValueError(f"the levels of y make {count} combinations (more than 100000) to compare")
        grid = np.stack(np.meshgrid(*levels, indexing="ij"), axis=-1).reshape(-1, self.n_outputs_)
        points, K = self._candidates(grid)
        P = np.empty((len(X), len(points)))
        for rows, W in self._weight_blocks(X):
            P[rows] = W @ K
        return points, P * math.exp(-self._log_z)

    def _categorical_mode(self, X):
        points, P = self._level_pdf(X)
        return points[np.argmax(P, axis=1)]

    def _continuous_mode(self, X, max_iter, tol):
        Y = np.asarray(self.y_fit_, dtype=np.float64)
        order = np.argsort(Y[:, 0], kind="stable")
        points, K = self._candidates(Y[order[np.unique(np.linspace(0, len(Y) - 1, 128).round().astype(int))]])
        t = np.empty((len(X), self.n_outputs_))
        for rows, W in self._weight_blocks(X):
            t[rows] = points[np.argmax(W @ K, axis=1)]
        h = np.concatenate([np.broadcast_to(np.asarray(f.bandwidth, dtype=np.float64), (len(cols),))
                            for f, cols in self._y_factors])
        live = np.arange(len(X))
        for _ in range(max_iter):
            if len(live) == 0:
                break
            new = self._bound_joint.sums(np.concatenate([X[live], t[live].astype(X.dtype)], axis=1),
                                         self.y_fit_).mean.reshape(len(live), -1)
            moved = np.max(np.abs(new - t[live]) / h, axis=1)
            t[live] = new
            live = live[moved > tol]
        return t

    def sample(self, X: ArrayLike, random_state=None) -> np.ndarray:
        """One draw of ``y`` from ``f(y | x)`` per row of ``X``: a training sample ``i`` chosen
        with probability ``w_i(x)``, then each factor of ``K_y`` drawn about ``y_i``: a continuous
        column ``y_i + h u``, ``u`` of density ``k(|u|) / c_1`` (Gaussian factors of several
        columns: a normal vector), a categorical one a level seen at fit with probability
        ``k(l, y_i)`` normalised over those levels (exact for Aitchison-Aitken, whose weights sum
        to 1; Wang-van Ryzin's are normalised over the levels seen).

        Returns an array of shape (n_queries,) for one column of ``y``, else ``(n_queries, n_outputs_)``.
        """
        X, _ = self._queries(X)
        tables = self._cdf_tables()
        self._check_cdf("sample")
        rng = check_random_state(random_state)
        Y = np.asarray(self.y_fit_, dtype=np.float64)
        out = np.empty((len(X), self.n_outputs_))
        for rows, W in self._weight_blocks(X):
            cumulative = np.cumsum(W, axis=1)
            u = rng.uniform(size=len(cumulative)) * cumulative[:, -1]
            pick = np.minimum(np.sum(cumulative <= u[:, None], axis=1), len(Y) - 1)
            for c, (kind, a, b, *rest) in tables.items():
                if kind == "continuous":
                    z = rng.normal(size=len(pick)) if a.profile.log_linear else \
                        kernel_quantile(a.profile, rng.uniform(size=len(pick)))
                    out[rows, c] = Y[pick, c] + b * z
                else:
                    probs = rest[0][:, pick].T  # (rows, levels)
                    levels = np.cumsum(probs, axis=1)
                    v = rng.uniform(size=len(pick)) * levels[:, -1]
                    out[rows, c] = a[np.minimum(np.sum(levels <= v[:, None], axis=1), len(a) - 1)]
        return out[:, 0] if self.n_outputs_ == 1 else out


class ConditionalModeClassifier(ClassifierMixin, BaseEstimator):
    """Classification by the conditional mode (R's ``np::npconmode``): the class ``l`` with the
    largest kernel conditional probability

    .. math::

        \\hat p(l \\mid x) = \\sum_i w_i(x)\\, k_\\lambda(l, y_i), \\qquad
        k_\\lambda(l, y) = 1 - \\lambda \\text{ if } l = y, \\text{ else } \\lambda / (c - 1)

    (:class:`ConditionalDensity` with an Aitchison-Aitken kernel of smoothing ``lambda`` on the
    ``c`` classes: ``p(l | x) = (1 - lambda) m_l(x) + lambda (1 - m_l(x)) / (c - 1)``, ``m_l`` the
    local mean of the class indicator; ``lambda = 0`` is :class:`~localkit.LocalMeanClassifier`).
    The probabilities sum to one over the classes.

    Parameters
    ----------
    kernel : str or Kernel, default="gaussian"
        The kernel in ``x`` (a profile name with ``bandwidth``, or a :class:`~localkit.Kernel`,
        e.g. a product with categorical factors).
    bandwidth : float, array of shape (n_features,) or rule, default="scott"
        ``h`` of a profile given by name, or a full bandwidth matrix ("hpi", "hscv", a (d, d)
        array; as :class:`~localkit.ConditionalDensity`).
    y_smoothing : float in [0, 1), default=0.0
        ``lambda`` of the Aitchison-Aitken kernel on the classes.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
    n_jobs : int or None, default=None

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    conditional_ : ConditionalDensity
        The conditional distribution of the class codes.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import ConditionalModeClassifier
    >>> X = np.linspace(0, 1, 40)[:, None]
    >>> clf = ConditionalModeClassifier(bandwidth=0.1).fit(X, np.where(X[:, 0] < 0.5, "a", "b"))
    >>> clf.predict([[0.1], [0.9]])
    array(['a', 'b'], dtype='<U1')
    """

    _parameter_constraints: dict = {
        "kernel": PROFILE_CONSTRAINT + [Kernel],
        "bandwidth": BANDWIDTH_CV_CONSTRAINT,
        "y_smoothing": [Interval(Real, 0, 1, closed="left")],
        "algorithm": ALGORITHM_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
    }

    def __init__(self, kernel="gaussian", bandwidth="scott", y_smoothing=0.0, algorithm="auto", n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.y_smoothing = y_smoothing
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Encode the classes and fit their conditional distribution. Returns ``self``."""
        X, y = validate_data(self, X, y, dtype=FLOATS)
        check_class_labels(y)
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y holds one class ({self.classes_[0]!r}); a classifier needs at least 2")
        names = getattr(self, "feature_names_in_", None)
        kernel = self.kernel.with_feature_names(names) if isinstance(self.kernel, Kernel) else self.kernel
        self.conditional_ = ConditionalDensity(kernel=kernel, bandwidth=self.bandwidth,
                                               y_kernel=Kernel("aitchison_aitken", bandwidth=float(self.y_smoothing)),
                                               algorithm=self.algorithm, n_jobs=self.n_jobs).fit(X, codes.astype(float))
        return self

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """``p(l | x)`` for each class (n_queries, n_classes)."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        return self.conditional_._level_pdf(self.conditional_._queries(X)[0])[1]

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The conditional mode: the class of largest ``p(l | x)``."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self.predict_proba(X), axis=1)]


def categorical_levels(kernel, A):
    """``{column: levels}``: the levels of ``A`` in each column of a categorical factor of ``kernel``."""
    return {int(c): np.unique(A[:, c]) for f, cols in kernel.columns(A.shape[1]) if f.is_categorical for c in cols}


def check_levels(A, levels, name):
    """The categorical columns of ``A`` hold levels seen at fit."""
    for c, seen in levels.items():
        unseen = np.setdiff1d(np.unique(A[:, c]), seen)
        if unseen.size:
            raise ValueError(f"{name} column {c} holds level(s) {unseen.tolist()[:5]} not seen at fit (a categorical "
                             f"column takes the levels {seen.tolist()[:10]}{'...' if seen.size > 10 else ''})")


__all__ = ["ConditionalDensity", "ConditionalModeClassifier", "block_rows", "categorical_levels", "check_levels", "check_probabilities", "fit_x_kernel", "on_columns", "product_of",
           "weight_blocks"]
