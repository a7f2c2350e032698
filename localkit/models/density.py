"""Kernel density: the local mean's normaliser, made a density."""
from __future__ import annotations


import functools
import math
import warnings
from numbers import Real

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions, validate_params
from sklearn.utils.validation import check_is_fitted

from .._params import (GRID_PARAMS, ALGORITHM_CONSTRAINT, BANDWIDTH_CONSTRAINT, BANDWIDTH_CV_CONSTRAINT, KERNEL_CONSTRAINT,
                       N_JOBS_CONSTRAINT, PROFILE_CONSTRAINT)
from .._validation import check_positive
from ..engine import (BINNED_TOLERANCE, BinnedDistribution, EngineOptions, backend_of, bind, local_sums, make_kernel,
                      twin_groups)
from ..kernels import Kernel
from ..kernels.bandwidth_matrix import full_bandwidth, is_full_bandwidth, log_det, matrix_map
from ..kernels.kernel import LINEAR_METRICS, NORM_METRICS, effective_metric, metric_map
from ..kernels.bandwidth import resolve_bandwidth
from ..kernels.kernel import SumKernel
from .kernel_learning import loo_groups

#: the engine options of a density (an empty neighbourhood is a density of 0: no policy to choose)
_DENSITY_OPTIONS = ("algorithm", "block_size", "memory_budget", "n_jobs", "grid_size", "tolerance", "exact_edge")


@validate_params(
    {
        "queries": ["array-like"],
        "samples": ["array-like"],
        "kernel": KERNEL_CONSTRAINT + [Kernel],
        "bandwidth": BANDWIDTH_CONSTRAINT,
        # the norms of x* - x; the normaliser c_d below is the Euclidean one whatever the metric
        # (scikit-learn's convention); n_neighbors is named so that a caller learns why it cannot apply
        "metric": [StrOptions(set(NORM_METRICS))],
        "p": [Interval(Real, 1, None, closed="both")],
        "n_neighbors": [None],
        "log": ["boolean"],
        "sample_weight": ["array-like", None],
    },
    prefer_skip_nested_validation=True,
)
def kernel_density(queries, samples, kernel="gaussian", bandwidth=1.0, *, metric="euclidean", p=2,
                   n_neighbors=None, log=False, sample_weight=None, **options):
    """The kernel density estimate at each query.

    .. math::

        \\hat p(x^*) = \\frac{1}{n \\, c_d \\prod_k h_k} \\sum_i k\\big(|x^* - x_i|_h\\big),
        \\qquad c_d = \\int_{\\mathbb{R}^d} k(|u|)\\, du

    With sample weights ``c_i`` the sum is ``sum_i c_i k(...)`` and ``n`` becomes ``sum_i c_i``.

    The sum is the local mean's normaliser ``sum_j K(x*, x_j)``, computed by the engine in
    log-space (so it never underflows); ``c_d`` makes the estimate integrate to one in ``d``
    dimensions. For scikit-learn's kernels (gaussian, tophat = uniform, epanechnikov,
    exponential = laplacian, linear = triangular, cosine in odd dimensions) it equals
    ``sklearn.neighbors.KernelDensity(kernel=..., bandwidth=h)`` (to 1e-14 in log p on iris),
    with two exceptions:

    * **tophat at distance h.** The uniform profile here has a closed support, ``u <= 1``: a
      sample at distance exactly ``h`` counts, as it does in scikit-learn's ``RadiusNeighbors``
      and ``MeanShift`` (and as the kNN kernel needs, to keep its k-th neighbour).
      scikit-learn's tophat density is open, ``u < 1``. The two differ only at queries with a
      sample exactly at distance ``h`` (decided by ``|q - x|^2 <= h^2`` in the raw coordinates on
      every engine path, scikit-learn's radius arithmetic, so lattice data are exact); e.g. samples ``[[0], [3]]``,
      ``h = 1``, query ``[1]``: scikit-learn gives ``log p = -inf``, this ``log(1/4)``.
    * **cosine in even dimensions.** scikit-learn's cosine normaliser is wrong there: on iris its
      2-D densities are 0.363 times these (which integrate to one), its 4-D ones NaN.

    With ``bandwidth="scott"`` or ``"silverman"`` in 1-D it equals ``scipy.stats.gaussian_kde``
    (with ``sample_weight``, ``gaussian_kde(weights=...)``: the rules take the weighted spread and
    the effective size ``(sum c)^2 / sum c^2``). In ``d > 1`` the rules give one bandwidth per
    feature, ``h_k = sigma_k n^{-1/(d+4)}`` times a constant: that is ``gaussian_kde`` with the
    off-diagonal entries of its covariance set to zero (equal to 1e-14). ``gaussian_kde`` itself
    uses the full covariance, so on correlated features the two differ (iris, the first 2, 3, 4
    features: densities up to 5%, 56%, 88% apart).

    The plug-in rules ``bandwidth="isj"`` (the improved Sheather-Jones rule, equal to KDEpy's
    ``bw="ISJ"``, weighted as KDEpy weighs it) and ``bandwidth="sj"`` (Sheather-Jones, equal to
    R's ``bw.SJ``) are 1-D selectors, applied to each feature on its own.

    Parameters
    ----------
    queries : array of shape (n_queries, n_features)
    samples : array of shape (n_samples, n_features)
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", "parzen"} or Kernel, default="gaussian"
        A profile of :class:`localkit.Kernel` (scikit-learn's names "rbf", "tophat", "flat",
        "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform", "uniform",
        "laplacian", "triangular" and "biweight") that is integrable in ``d`` dimensions (not
        "softmax"; "cauchy" only in 1-D), or a ``Kernel`` with a fixed bandwidth. A kernel on groups
        of columns (``features``, categorical factors, ``K1 * K2``) normalises each continuous
        factor on its own columns and takes the categorical factors as they are: statsmodels'
        ``KDEMultivariate(var_type=..., bw=...).pdf`` (see the user guide's "Composing kernels").
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski"}, default="euclidean"
        The norm in ``|x^* - x_i|_h``. The normaliser ``c_d`` stays the Euclidean one whatever the
        metric, as in ``sklearn.neighbors.KernelDensity(metric=...)`` (equal to it, see
        :class:`KernelDensity`): in 1-D every norm is ``|dx|`` and the density integrates to one;
        in ``d > 1`` with the ``p``-norm it integrates to ``V_p(d) / V_2(d)``, the ratio of the
        unit balls' volumes, ``V_p(d) = (2 Gamma(1 + 1/p))^d / Gamma(1 + d/p)`` (manhattan in 2-D:
        ``2 / pi``; chebyshev: ``4 / pi``).
    p : float >= 1, default=2
        The power of the "minkowski" metric (``inf``: chebyshev).
    n_neighbors : None
        kNN bandwidths give no normalised density here; anything but None is an error.
    log : bool, default=False
        Return ``log p`` (exact even where ``p`` underflows).
    sample_weight : array of shape (n_samples,), optional
        Non-negative weights of the samples (integer weights act as repeated samples).
    **options
        Engine options of :func:`localkit.local_sums`, the fields of
        :class:`~localkit.engine.EngineOptions` but ``empty`` (a density has no empty neighbourhood):
        ``algorithm`` ("auto", "dense", "neighbors", "compiled", "binned", "streamed" or
        "approximate"), ``grid_size`` and ``tolerance`` (the binned pass's grid and the relative
        error accepted from it), ``block_size``, ``memory_budget``, ``n_jobs`` and ``exact_edge``.

    Returns
    -------
    density : array of shape (n_queries,)
        In the samples' floating dtype (float32 samples give float32, NumPy and tensors alike;
        the normaliser is computed in float64), of the queries' array type and device.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import kernel_density
    >>> round(float(kernel_density([[0.0]], [[0.0]], bandwidth=1.0)[0]), 12)  # 1 / sqrt(2 pi)
    0.398942280401
    """
    options = EngineOptions.of("kernel_density", options, _DENSITY_OPTIONS)
    kern = make_kernel(kernel, bandwidth, None, metric, p)
    for term in (kern.kernels if isinstance(kern, SumKernel) else ()):
        _check_density_kernel(term)
    if kern.is_softmax:
        raise ValueError("kernel='softmax' is a similarity kernel, not a density; choose a profile")
    if kern.n_neighbors is not None or not kern.norm_metric:
        raise ValueError("kernel_density needs a fixed bandwidth and a norm metric (euclidean, manhattan, "
                         f"chebyshev, minkowski), got n_neighbors={kern.n_neighbors!r}, metric={kern.metric!r}")
    backend = backend_of(queries, samples, sample_weight)  # NumPy, a device or a dask cluster
    # the engine scans the samples for NaN and infinity when it binds them (bind below); only a
    # bandwidth rule or a composite kernel's levels read them before, and are scanned here first
    # (a million samples: one scan of ~0.3 ms, not two)
    samples = backend.points(samples, "samples", finite=kern.composite or isinstance(kern.bandwidth, str))
    queries = backend.points(queries, "queries", like=samples)
    kern = density_kernel(kern, samples, sample_weight, backend)
    out = bind(kern, samples, sample_weight=sample_weight, options=options).sums(queries)  # checks sample_weight
    total = samples.shape[0] if sample_weight is None else backend.total(sample_weight)
    log_p = out.log_weight_sum - density_log_normalizer(kern, samples.shape[1], total)
    return log_p if log else backend.xp.exp(log_p)


def density_kernel(kern, samples, sample_weight, backend):
    """``kern`` fixed on the samples for a density: a composite kernel's rules and levels resolved
    on all the samples (dask too), a profile's bandwidth checked against the features and a rule
    resolved once, for the sums and the normaliser alike."""
    if kern.composite:  # groups of columns: the continuous factors normalised, the categorical as they are
        return backend.resolved(kern, samples, sample_weight)
    h = backend.bandwidth(kern, samples, sample_weight)
    return kern.at_bandwidth(h) if isinstance(kern.bandwidth, str) else kern


def density_log_normalizer(kern, d, total):
    """``log(W c_d prod_k h_k)``, ``W = sum_j c_j`` the samples' total weight: the log of what
    divides the weight sum of a :func:`density_kernel` in ``d`` features (a composite kernel: its
    continuous factors' normalisers, :meth:`Kernel.log_density_normalizer`). A Python float: the
    normaliser in float64, subtracted without promoting float32 sums (a float64 scalar would)."""
    if kern.composite:
        return float(np.log(total) + kern.resolved_log_density_normalizer(d))
    # a scalar h is the same h in every one of the d features: prod_k h_k = h^d
    h = np.broadcast_to(np.asarray(kern.bandwidth, dtype=np.float64), (d,))
    return float(np.log(total) + np.sum(np.log(h)) + kern.profile.log_normalizer(d))


def _check_density_kernel(kern):
    """A kernel with a density: a fixed bandwidth (or rule, or "cv"), a norm metric, no softmax."""
    for k in (kern.kernels if isinstance(kern, SumKernel) else (kern,)):
        if k.is_softmax:
            raise ValueError("kernel='softmax' is a similarity kernel, not a density; choose a profile")
        if k.n_neighbors is not None or not k.norm_metric:
            raise ValueError("kernel: a density needs a fixed bandwidth and a norm metric (euclidean, manhattan, "
                             f"chebyshev, minkowski), got {k!r}")


class KernelDensity(BaseEstimator):
    """Kernel density estimation with scikit-learn's interface, for every profile.

    .. math::

        \\hat p(x) = \\frac{1}{c_d \\prod_k h_k \\sum_j c_j} \\sum_i c_i\\, k\\big(|x - x_i|_h\\big)

    the local mean's normaliser made a density (:func:`kernel_density`, through the engine in
    log-space), with sample weights ``c_i`` (1 without ``sample_weight``). For scikit-learn's
    kernels (gaussian, tophat, epanechnikov, exponential, linear, cosine in odd dimensions) it
    equals ``sklearn.neighbors.KernelDensity`` with the same bandwidth and weights, and so do the
    draws of :meth:`sample` for "gaussian" and "tophat" with the same ``random_state``; except
    that the tophat support here is closed (``u <= 1``) and scikit-learn's open (``u < 1``), so
    at a query with a sample exactly at distance ``h`` this counts it and scikit-learn does not
    (see :func:`kernel_density`).

    Parameters
    ----------
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", "parzen"}, Kernel or list of Kernel, default="gaussian"
        A profile of :class:`localkit.Kernel` (scikit-learn's names "rbf", "tophat", "flat",
        "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform", "uniform",
        "laplacian", "triangular" and "biweight"), integrable in ``d`` dimensions ("cauchy" only in
        1-D); not "softmax". Or a ``Kernel``, which carries its own bandwidths (``bandwidth`` is then
        ignored; ``metric`` stays "euclidean"): a product over groups of columns with categorical
        factors (statsmodels' ``KDEMultivariate``), a sum (the normalised sum kernel), with
        ``bandwidth="cv"`` in any factor chosen jointly by the leave-one-out log-likelihood. A list
        ``[K1, K2, ...]``: the mixture ``sum_k pi_k p_k`` of their densities, ``pi =
        kernel_weights_`` on the simplex maximising the leave-one-out log-likelihood. See the user
        guide's "Composing kernels". :meth:`sample`, :meth:`cdf` and the other 1-D methods need a
        profile of every column.
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj", "sj" or "cv", default=1.0
        ``h``, a rule resolved on the samples, or "cv" (see below).
        "scott" and "silverman": per feature, ``h_k = sigma_k n^{-1/(d+4)}`` times a constant,
        ``sigma_k`` the feature's standard deviation (scikit-learn's rules leave out ``sigma``),
        weighted by ``sample_weight`` as ``gaussian_kde(weights=...)`` weighs them. In 1-D this is
        scipy's ``gaussian_kde``; in ``d > 1`` it is ``gaussian_kde`` with a diagonal covariance,
        while ``gaussian_kde`` itself scales by the full covariance (they differ on correlated
        features; see :func:`kernel_density`). "isj": KDEpy's ``bw="ISJ"`` (weighted as KDEpy);
        "sj": R's ``bw.SJ`` (equal weights only); both 1-D selectors, applied per feature.
        A full bandwidth matrix ``H`` (2 to 6 features, a symmetric positive definite (d, d)
        array, or "hpi" / "hscv": R's ``ks::Hpi`` / ``ks::Hscv`` on the samples): the kernel
        ``k(sqrt(dx^T H^-1 dx))``, the samples mapped once by ``H^-1/2``; ``bandwidth_matrix_ = H``
        (see :doc:`/user_guide/conditional`); the density is normalised by ``|H|^-1/2``.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
        The engine's path, as in :class:`localkit.LocalMeanRegressor`: "auto" (the engine
        chooses; never "binned"), "dense", "neighbors", "compiled" and "streamed" (exact paths,
        equal to round-off), "binned" (linear binning and FFT convolution in 1 to 3 features,
        an approximation, taken only when asked for).
    n_jobs : int or None, default=None
        Engine threads.
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski", "seuclidean", "mahalanobis"}, default="euclidean"
        The distance in ``k(d(x, x_i) / h)``, with the normaliser of the Euclidean metric whatever
        the metric, as ``sklearn.neighbors.KernelDensity(metric=...)`` (equal to it to 1e-13 in
        ``log p`` on iris and wine): in 1-D every norm is ``|dx|`` and the density integrates to
        one; in ``d > 1`` the ``p``-norm's integrates to ``V_p(d) / V_2(d)`` (the unit balls'
        volumes; manhattan in 2-D: ``2 / pi``), and the mapped metrics to the determinant of their map,
        as scikit-learn's. "seuclidean" and "mahalanobis"
        take one positive number as ``bandwidth``. :meth:`sample` needs the Euclidean metric in
        ``d > 1`` (scikit-learn draws Euclidean noise whatever the metric).
    metric_params : dict or None, default=None
        scikit-learn's: ``{"p": ...}`` for "minkowski" (and ``"w"``, weights), ``{"V": ...}`` for
        "seuclidean", ``{"VI": ...}`` for "mahalanobis" (without them the samples' own variances,
        resp. inverse covariance).
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass (``algorithm="binned"``; one int, or one per
        feature); by default the fewest whose error bound meets ``tolerance``.
    tolerance : float in (0, 1), optional
        The relative error accepted from the binned pass, against its bound ``8 (delta / h)^2``
        (``4 delta / h`` for the triangular, Laplacian and uniform profiles; ``delta`` the grid
        spacing, see :doc:`/user_guide/binned`). It sets the default grid (``1e-4`` when None);
        given, ``algorithm="auto"`` also takes the binned pass where its bound on that grid meets
        it (never otherwise).

    With ``bandwidth="cv"`` the bandwidth maximises the leave-one-out log-likelihood
    ``sum_i c_i log p_{-i}(x_i)`` (:meth:`loo_log_likelihood`; one bandwidth per feature in
    ``d > 1``), the objective of statsmodels' ``KDEMultivariate(bw="cv_ml")`` (up to the constant
    ``n log(n - 1)``) on data without repeated rows; its optimum is at least as good there.

    Attributes
    ----------
    bandwidth_ : float or ndarray of shape (n_features,)
    kernel_ : Kernel
    kernel_weights_ : ndarray of shape (n_kernels,)
        With a list ``kernel``: the mixture weights ``pi`` of the densities (``kernel_`` is the
        sum kernel ``sum_k (pi_k / Z_k) K_k`` normalised, ``Z_k`` the integral of ``K_k``).
    X_fit_ : ndarray of shape (n_samples, n_features)
    sample_weight_ : ndarray of shape (n_samples,) or None
    cv_results_ : dict
        With ``bandwidth="cv"``: ``"bandwidth"`` and ``"loo_log_likelihood"`` of every bandwidth
        evaluated.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import KernelDensity
    >>> kde = KernelDensity(kernel="epanechnikov", bandwidth=0.5).fit([[0.0], [1.0]])
    >>> np.exp(kde.score_samples([[0.0], [0.5], [3.0]])).round(4)  # 3/4 (1 - u^2) / h, averaged
    array([0.75, 0.  , 0.  ])
    >>> kde.sample(3, random_state=0).shape
    (3, 1)
    """

    _parameter_constraints: dict = {
        "kernel": PROFILE_CONSTRAINT + [Kernel, list],
        "bandwidth": BANDWIDTH_CV_CONSTRAINT,
        "algorithm": ALGORITHM_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
        "metric": [StrOptions(set(NORM_METRICS) | set(LINEAR_METRICS))],
        "metric_params": [dict, None],
        **GRID_PARAMS,
    }

    def __init__(self, kernel="gaussian", bandwidth=1.0, algorithm="auto", n_jobs=None, metric="euclidean",
                 metric_params=None, grid_size=None, tolerance=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.metric = metric
        self.metric_params = metric_params
        self.grid_size = grid_size
        self.tolerance = tolerance

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None, sample_weight: ArrayLike | None = None):
        """Store the samples and their weights, resolve the bandwidth. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0``; integer weights act as repeated
        samples and zero weights drop them in the density; the rules "scott" and "silverman" take
        the weighted spread and the effective size ``(sum c)^2 / sum c^2``, as
        ``gaussian_kde(weights=...)``; "isj" bins with the weights, as KDEpy's ISJ; "sj" (R's
        ``bw.SJ``, unweighted) takes equal weights only.
        """
        backend = backend_of(X, sample_weight)  # NumPy, a device, or a dask cluster (the samples stay there)
        X = backend.check_fit(self, X)
        self.sample_weight_ = backend.sample_weight(sample_weight, X)
        self.__dict__.pop("bandwidth_matrix_", None)
        if isinstance(self.kernel, (Kernel, list)):
            return self._fit_kernel_object(X, backend)
        if is_full_bandwidth(self.bandwidth):
            return self._fit_bandwidth_matrix(X, backend)
        if self.metric in LINEAR_METRICS:
            backend.require_in_memory(f"metric={self.metric!r}", "its map is fitted on the samples in memory; give "
                                      "a norm metric")
        params = dict(self.metric_params or {})
        power = params.pop("p", 2)  # scikit-learn's minkowski power comes in metric_params
        if "p" in (self.metric_params or {}) and self.metric != "minkowski":
            raise ValueError(f"metric_params={{'p': ...}} is the power of metric='minkowski', not of "
                             f"metric={self.metric!r}")
        metric, power = effective_metric(self.metric, power, params)
        Kernel("gaussian", metric=metric, p=power)  # checks p
        self._metric_map = metric_map(self.metric, power, params, X, self.sample_weight_)
        Z = X if self._metric_map is None else self._metric_map.transform(X)
        scalar = isinstance(self.bandwidth, Real) and not isinstance(self.bandwidth, bool)
        if self._metric_map is not None and not scalar:
            raise ValueError(f"metric={self.metric!r} with metric_params={self.metric_params!r} measures distances in "
                             "mapped coordinates: give bandwidth as one positive number (scikit-learn's h), got "
                             f"bandwidth={self.bandwidth!r}")
        get_profile_kernel = Kernel(self.kernel, metric=metric, p=power)
        get_profile_kernel.profile.log_normalizer(X.shape[1])  # a profile without a density in d dims raises
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            backend.require_in_memory("bandwidth='cv'", "it leaves out every sample in turn; give a number or a rule")
            self.bandwidth_ = self._select_bandwidth(Z, metric, power)
        else:
            self.bandwidth_ = backend.bandwidth(get_profile_kernel._with(bandwidth=self.bandwidth), Z,
                                                self.sample_weight_)
        self.kernel_ = Kernel(self.kernel, bandwidth=self.bandwidth_, metric=metric, p=power)
        self.X_fit_ = X
        return self._bind(Z, backend)

    def _fit_bandwidth_matrix(self, X, backend):
        """A full bandwidth matrix ``H`` ("hpi", "hscv" or a (d, d) array): the density
        ``p(x) = |H|^-1/2 sum_i c_i k(|H^-1/2 (x - x_i)|) / (c_d sum_j c_j)``, computed on the
        samples mapped once by ``H^-1/2`` with bandwidth 1 there, plus ``-log|H| / 2``."""
        if self.metric != "euclidean" or self.metric_params is not None:
            raise ValueError(f"bandwidth={self.bandwidth!r} is a full bandwidth matrix (u^2 = dx^T H^-1 dx); it cannot "
                             f"be combined with metric={self.metric!r}, metric_params={self.metric_params!r}")
        backend.require_in_memory(f"bandwidth={self.bandwidth!r}", "the bandwidth matrix maps the samples in memory")
        Kernel(self.kernel).profile.log_normalizer(X.shape[1])  # a profile without a density in d dims raises
        self.bandwidth_matrix_ = full_bandwidth(self.bandwidth, X, sample_weight=self.sample_weight_)
        self._metric_map = matrix_map(self.bandwidth_matrix_)
        self.bandwidth_ = 1.0
        self.kernel_ = Kernel(self.kernel, bandwidth=1.0)
        self.X_fit_ = X
        self._bind(self._metric_map.transform(X), backend)
        self._log_shift = -0.5 * log_det(self.bandwidth_matrix_)
        return self

    def _engine_options(self):
        return EngineOptions(empty="nearest", algorithm=self.algorithm, n_jobs=self.n_jobs, grid_size=self.grid_size,
                             tolerance=self.tolerance)

    def _bind(self, Z, backend):
        """Bind ``kernel_`` to the samples ``Z`` (in the metric's coordinates) once, with the
        normaliser of :func:`kernel_density`: every later :meth:`score_samples` pays only for its
        queries (on dask the samples stay on the cluster). Returns ``self``."""
        self._Z_fit = Z
        self._bound = bind(self.kernel_, Z, sample_weight=self.sample_weight_, options=self._engine_options())
        d, d_mapped = self.n_features_in_, Z.shape[1]
        total = Z.shape[0] if self.sample_weight_ is None else backend.total(self.sample_weight_)
        self._log_norm = density_log_normalizer(self.kernel_, d_mapped, total)
        self._log_shift = 0.0
        if d_mapped != d:  # a mapping dropped directions: the normaliser restated in the data's d dimensions
            h, profile = float(np.ravel(self.kernel_.bandwidth)[0]), self.kernel_.profile
            self._log_shift = (profile.log_normalizer(d_mapped) + d_mapped * np.log(h)
                               - profile.log_normalizer(d) - d * np.log(h))
        return self

    def _fit_kernel_object(self, X, backend):
        """``kernel`` a :class:`~localkit.Kernel` (any product or sum; its ``"cv"`` bandwidths
        chosen jointly by the leave-one-out log-likelihood) or a list of kernels, mixed as
        ``sum_k pi_k p_k`` with ``pi = kernel_weights_`` on the simplex maximising the
        leave-one-out log-likelihood (:mod:`localkit.models.kernel_learning`)."""
        from .kernel_learning import (check_kernel_list, density_mixture_loss, has_cv, select_cv_bandwidths,
                                      simplex_minimum)

        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            raise ValueError("bandwidth='cv' selects one bandwidth; a Kernel given as kernel carries its own (give "
                             "numbers, rules or 'cv' in it: Kernel(..., bandwidth='cv'))")
        if self.metric != "euclidean" or self.metric_params is not None:
            raise ValueError(f"metric={self.metric!r}, metric_params={self.metric_params!r}: a Kernel given as kernel "
                             "carries its own metric; leave metric='euclidean' and metric_params=None")
        names = getattr(self, "feature_names_in_", None)
        given = check_kernel_list(self.kernel) if isinstance(self.kernel, list) else [self.kernel]
        if isinstance(self.kernel, list):
            backend.require_in_memory("kernel=[...] (a mixture)", "its weights maximise the leave-one-out "
                                      "log-likelihood; give one Kernel")
        c = self.sample_weight_
        kernels = []
        for k in given:
            k = k.with_feature_names(names)
            _check_density_kernel(k)
            if has_cv(k):
                backend.require_in_memory("bandwidth='cv' inside a Kernel", "it leaves out every sample in turn; "
                                          "give numbers or rules")
            k = backend.resolved(k, X, c)
            if has_cv(k):
                if len(X) < 3:
                    raise ValueError(f"bandwidth='cv' needs at least 3 samples, got n_samples={len(X)}")
                k, self.cv_results_ = select_cv_bandwidths(
                    k, X, lambda K: -self._loo_objective(X, K), c, kind="density")
            kernels.append(k)
        self._metric_map, self.X_fit_ = None, X
        if isinstance(self.kernel, list):
            log_p = np.stack([self._loo_log_density(X, k, c) for k in kernels], axis=1)
            self.kernel_weights_, _ = simplex_minimum(density_mixture_loss(log_p, c), len(kernels))
            # sum_k pi_k p_k is the density of the kernel sum_k (pi_k / Z_k) K_k, Z_k its integral
            log_z = np.array([k.log_density_normalizer(X, c) for k in kernels])
            w = self.kernel_weights_ * np.exp(-(log_z - log_z.max()))
            self.kernel_ = SumKernel(list(zip(w / w.sum(), kernels)))
        else:
            self.kernel_ = kernels[0]
        self.bandwidth_ = self.kernel_.bandwidth
        return self._bind(X, backend)

    def _loo_log_density(self, Z, kernel, sample_weight):
        """Leave-one-out ``log p_{-i}(x_i)`` at the samples ``Z`` (in the coordinates where the
        metric is a norm)."""
        # leave-one-out: every sample at x_i's point (its twins) leaves with it; the rest of the
        # weight, W - W_G(i), normalises what is left
        # (a kernel with categorical factors leaves out each row alone: kernel_learning.loo_groups)
        rows = loo_groups(kernel, len(Z)) if kernel.composite else None
        sums = local_sums(None, Z, None, kernel, exclude_self=True, sample_weight=sample_weight,
                          algorithm="auto" if self.algorithm == "binned" else self.algorithm,
                          n_jobs=self.n_jobs, twins=rows).log_weight_sum
        c = np.ones(len(Z)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        groups = twin_groups(Z) if rows is None else None
        left = c.sum() - (c if groups is None else np.bincount(groups, c)[groups])
        if kernel.composite:
            log_norm = kernel.log_density_normalizer(Z, sample_weight)
        else:
            h = np.broadcast_to(np.asarray(kernel.bandwidth, dtype=np.float64), (Z.shape[1],))
            log_norm = np.sum(np.log(h)) + kernel.profile.log_normalizer(Z.shape[1])
        with np.errstate(divide="ignore"):
            return np.asarray(sums, dtype=np.float64) - np.log(left) - log_norm

    def loo_log_likelihood(self, bandwidth=None):
        """The leave-one-out log-likelihood ``sum_i c_i log p_{-i}(x_i)`` of the training samples
        at ``bandwidth`` (default: ``bandwidth_``), the objective of ``bandwidth="cv"``.

        ``p_{-i}`` is the density of the samples other than those at ``x_i``'s point (repeated
        rows leave together, as in every leave-one-out of localkit, so that a twin at distance 0
        cannot make the likelihood unbounded as ``h -> 0``), normalised by their weight
        ``W - W_{G(i)}``; through the engine's ``exclude_self``. ``-inf`` where a compact kernel
        leaves some sample without another within reach."""
        check_is_fitted(self)
        backend_of(self.X_fit_).require_in_memory("loo_log_likelihood", "it leaves out every sample in turn")
        if bandwidth is None and self.kernel_.composite:  # a Kernel given as kernel, as fitted
            return self._loo_objective(self._Z_fit, self.kernel_)
        self._plain("loo_log_likelihood(bandwidth=...)")
        h = self.bandwidth_ if bandwidth is None else resolve_bandwidth(bandwidth, self._Z_fit)
        kernel = self.kernel_.at_bandwidth(h)
        return self._loo_objective(self._Z_fit, kernel)

    def _loo_objective(self, Z, kernel):
        log_p = self._loo_log_density(Z, kernel, self.sample_weight_)
        c = self.sample_weight_
        if np.any(np.isneginf(log_p) & (True if c is None else c > 0)):
            return -np.inf
        return float(np.sum(log_p) if c is None else np.sum(c[c > 0] * log_p[c > 0]))

    def _select_bandwidth(self, Z, metric, power):
        """``bandwidth="cv"``: the bandwidth maximising :meth:`loo_log_likelihood`.

        First one factor ``t`` on the normal-reference scale ``h_k = t sigma_k n^{-1/(d+4)}``
        (a grid of 24 from 0.02 to 20, then a bounded search of ``log t`` between the best grid
        point's neighbours, to ``1e-7``); in ``d > 1`` then one bandwidth per feature, by
        Nelder-Mead on ``log h`` from there (as statsmodels' ``KDEMultivariate(bw="cv_ml")``
        searches with ``fmin`` from its normal reference). The best bandwidth evaluated is kept;
        every evaluation is in ``cv_results_``."""
        n, d = Z.shape
        if n < 3:
            raise ValueError(f"bandwidth='cv' needs at least 3 samples, got n_samples={n}")
        c = self.sample_weight_
        mean = np.average(Z, axis=0, weights=c)
        sigma = np.sqrt(np.average((Z - mean) ** 2, axis=0, weights=c))
        if not np.all(sigma > 0):
            raise ValueError(f"bandwidth='cv': feature(s) {np.flatnonzero(~(sigma > 0)).tolist()} take one value, so "
                             "no bandwidth can be selected for them")
        total = n if c is None else float(np.sum(c))
        base = sigma * total ** (-1.0 / (d + 4))
        tried = {}

        def loss(log_h):
            key = tuple(np.round(np.atleast_1d(log_h), 15))
            if key not in tried:
                h = np.exp(np.asarray(key))
                kernel = Kernel(self.kernel, bandwidth=float(h[0]) if d == 1 else h, metric=metric, p=power)
                tried[key] = self._loo_objective(Z, kernel)
            value = -tried[key]
            return value if np.isfinite(value) else np.inf

        log_base = np.log(base)
        logs = np.linspace(np.log(0.02), np.log(20.0), 24)
        values = [loss(log_base + t) for t in logs]
        best = int(np.argmin(values))
        if not np.isfinite(values[best]):
            raise ValueError("bandwidth='cv': no bandwidth from 0.02 to 20 times the normal reference gives every "
                             "sample a positive leave-one-out density")
        lo, hi = logs[max(best - 1, 0)], logs[min(best + 1, len(logs) - 1)]
        t = optimize.minimize_scalar(lambda t: loss(log_base + t), bounds=(lo, hi), method="bounded",
                                     options={"xatol": 1e-7}).x
        if d > 1:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                optimize.minimize(loss, log_base + t, method="Nelder-Mead",
                                  options={"xatol": 1e-7, "fatol": 1e-10, "maxiter": 400 * d})
        keys = list(tried)
        values = np.array([tried[k] for k in keys])
        hs = np.exp(np.array(keys))
        self.cv_results_ = {"bandwidth": hs[:, 0] if d == 1 else hs, "loo_log_likelihood": values}
        h = hs[int(np.argmax(values))]
        return float(h[0]) if d == 1 else h

    def score_samples(self, X: ArrayLike) -> np.ndarray:
        """``log p(x)`` at each row of ``X`` (``-inf`` outside every compact support).

        Always float64, as scikit-learn's ``KernelDensity.score_samples`` (which returns float64
        for float32 input too): the estimator is a drop-in replacement for it. The sums are
        computed in the data's precision (float32 data: float32 sums, as :func:`kernel_density`,
        which keeps float32).
        """
        backend = backend_of(X)
        X = backend.check_queries(self, X)
        if self._metric_map is not None:
            X = self._metric_map.transform(X)
        log_p = self._bound.using(self._engine_options()).sums(X).log_weight_sum - self._log_norm
        return backend_of(log_p).float64(log_p) + self._log_shift

    def score(self, X, y=None):
        """The total log-likelihood of ``X``, ``sum_i log p(x_i)``."""
        return float(np.sum(self.score_samples(X)))

    # -- one feature: distribution function, quantiles, entropy --------------------------------
    def _plain(self, what):
        """Refuse ``what`` for a kernel given as a Kernel on groups of columns, a product or a sum,
        and for samples on a dask cluster (``what`` reads every sample in memory)."""
        backend_of(self.X_fit_).require_in_memory(what, "it reads every sample in memory; fit on a NumPy array")
        if self.kernel_.composite:
            raise ValueError(f"{what} needs one profile of every column (kernel given by name or as a plain Kernel); "
                             f"this density's kernel is {self.kernel_!r}")

    def _one_feature(self, what):
        """``(x, c, h, profile)`` of a fitted 1-D density that integrates to one."""
        check_is_fitted(self)
        self._plain(what)
        if self.n_features_in_ != 1 or self._metric_map is not None:
            raise ValueError(f"{what} is defined for a density of one feature with a norm metric; this one has "
                             f"n_features_in_={self.n_features_in_}, metric={self.metric!r}")
        x = np.asarray(self.X_fit_[:, 0], dtype=np.float64)
        c = np.ones(len(x)) if self.sample_weight_ is None else np.asarray(self.sample_weight_, dtype=np.float64)
        keep = c > 0
        return x[keep], c[keep] / c[keep].sum(), float(np.ravel(self.bandwidth_)[0]), self.kernel_.profile

    def _points(self, X, name):
        X = np.asarray(X, dtype=np.float64)
        if X.ndim == 2 and X.shape[1] == 1:
            X = X[:, 0]
        if X.ndim > 1:
            raise ValueError(f"{name} must be a 1-D array of points or of shape (n, 1), got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise ValueError(f"{name} contains NaN or infinity")
        return np.atleast_1d(X)

    def _mixture_cdf(self, t, x, c, h, profile):
        """``sum_i c_i F((t - x_i) / h)``, blocked over ``t`` (the engine has no pass for the
        kernel's integral, which is not a function of ``|u|``)."""
        out = np.empty(len(t))
        step = max(1, 2 ** 22 // max(len(x), 1))
        for start in range(0, len(t), step):
            block = slice(start, start + step)
            out[block] = kernel_cdf(profile, (t[block, None] - x) / h) @ c
        return np.clip(out, 0.0, 1.0)

    def _distribution(self, what, exact):
        """``(binned, parts)``: the density's :class:`~localkit.engine.passes.binned.BinnedDistribution`
        (built on first use and kept, for the fitted samples and the grid options), or None for the
        exact sums, and ``parts = (x, c, h, profile)`` of :meth:`_one_feature`. ``exact=None`` takes the
        binned grid above :data:`EXACT_SAMPLES` samples."""
        if exact is not None and not isinstance(exact, (bool, np.bool_)):
            raise TypeError(f"exact must be True, False or None, got {exact!r}")
        parts = self._one_feature(what)
        x, c, h, profile = parts
        if exact or (exact is None and len(x) <= EXACT_SAMPLES):
            return None, parts
        key = (self.grid_size, self.tolerance)
        kept = getattr(self, "_binned_distribution", None)
        if kept is None or kept[0] != key:
            binned = BinnedDistribution(x, c, profile, h, functools.partial(kernel_cdf, profile),
                                        profile.log_normalizer(1), self.grid_size, self.tolerance,
                                        workers=EngineOptions(n_jobs=self.n_jobs).threads)
            self._binned_distribution = kept = (key, binned)
        grid = kept[1].grid
        if exact is None and (grid.bound > (BINNED_TOLERANCE if self.tolerance is None else self.tolerance)
                              or not np.isfinite(grid.reach)):
            return None, parts  # the grid's bound misses the tolerance (a capped grid), or the kernel's tail
            # reaches beyond every grid (the Cauchy's): the exact sums
        return kept[1], parts

    def cdf(self, X, exact=None):
        """The distribution function of a 1-D density,
        ``F(x) = sum_i c_i K((x - x_i) / h) / sum_i c_i``, with ``K`` the kernel's own
        (:func:`kernel_cdf`: ``Phi`` for the Gaussian, the integrated polynomials of the compact
        profiles). statsmodels' ``KDEUnivariate.cdf`` is ``quad`` of the density between the
        points of its grid (equal to 1e-9 on its grid).

        Parameters
        ----------
        X : array of shape (n,) or (n, 1)
        exact : bool or None, default=None
            True: the exact sums, ``O(n_samples)`` per point. False: the binned grid
            (:class:`~localkit.engine.passes.binned.BinnedDistribution`: the samples binned once,
            in ``O(n_samples)``, two FFTs over the grid of ``grid_size`` points, or the fewest whose
            bound meets ``tolerance``; then ``O(log M)`` per point), whose absolute error is at most
            the binned pass's bound (``8 (delta / h)^2``, 1e-4 by default) times ``h`` times the
            density's largest value (measured: 5e-9 on a million samples). None: exact up to
            :data:`EXACT_SAMPLES` samples, binned beyond where the grid's bound meets ``tolerance``
            (1e-4 by default; a grid capped at its largest size, as for the profiles with a kink
            or a heavy tail, stays exact).

        Returns
        -------
        cdf : ndarray of shape (n,)
        """
        binned, parts = self._distribution("cdf", exact)
        t = self._points(X, "X")
        return self._mixture_cdf(t, *parts) if binned is None else binned.cdf(t)

    def sf(self, X, exact=None):
        """The survival function ``1 - F(x)`` of a 1-D density, computed as
        ``sum_i c_i K((x_i - x) / h)`` (the kernels are symmetric), so that it keeps its
        precision in the right tail where ``1 - F`` would cancel (the binned grid sums it from
        the right alike). ``exact`` and the costs as in :meth:`cdf`."""
        binned, (x, c, h, profile) = self._distribution("sf", exact)
        t = self._points(X, "X")
        return self._mixture_cdf(-t, -x, c, h, profile) if binned is None else binned.sf(t)

    def icdf(self, q, exact=None):
        """The quantile function of a 1-D density: the smallest ``x`` with ``F(x) >= q``.

        Exact (``exact=True``, or None up to :data:`EXACT_SAMPLES` samples): bisection to
        round-off on the exact :meth:`cdf` inside the bracket
        ``[min_i x_i + h K^{-1}(q), max_i x_i + h K^{-1}(q)]`` (where every term of ``F`` is
        below, resp. above, ``q``): ``O(n_samples)`` per probability and halving, up to 200
        halvings. Binned (``exact=False``, or None beyond): the grid cell of ``q`` in the binned
        ``F`` (:meth:`cdf`), then 60 halvings on its interpolant, ``O(log M)`` each; its error in
        ``x`` is the binned ``F``'s over the density at the quantile. ``q = 0`` and ``1`` give the
        ends of the support (``-inf``, ``inf`` for a kernel without compact support).
        statsmodels' ``KDEUnivariate.icdf`` is a different quantity: the *samples'* quantiles
        (``scipy.stats.mstats.mquantiles``), not the density's.

        Parameters
        ----------
        q : array of probabilities in [0, 1]
        exact : bool or None, default=None
        """
        binned, (x, c, h, profile) = self._distribution("icdf", exact)
        q = np.asarray(q, dtype=np.float64)
        shape = q.shape
        q = q.ravel()
        if not np.all((q >= 0) & (q <= 1)):
            raise ValueError("q must hold probabilities in [0, 1] (NaN is not one)")
        z = kernel_quantile(profile, q)
        lo, hi = x.min() + h * z, x.max() + h * z
        inner = np.isfinite(lo) & np.isfinite(hi) & (q > 0) & (q < 1)
        out = np.where(q <= 0, lo, hi)
        if inner.any() and binned is not None:
            out[inner] = binned.quantile(q[inner])
        elif inner.any():
            a, b, target = lo[inner].copy(), hi[inner].copy(), q[inner]
            for _ in range(200):
                mid = 0.5 * (a + b)
                done = (mid <= a) | (mid >= b)
                if done.all():
                    break
                below = self._mixture_cdf(mid, x, c, h, profile) < target
                a, b = np.where(below, mid, a), np.where(below, b, mid)
            out[inner] = b
        return out.reshape(shape)

    def entropy(self, exact=None):
        """The differential entropy ``-int f log f`` of a 1-D density.

        Binned (``exact=False``, or None beyond :data:`EXACT_SAMPLES` samples): the trapezoidal
        rule of ``-f log f`` on the binned grid's density (see :meth:`cdf`): ``O(n_samples)`` to
        bin, ``O(M log M)`` on the grid; its error is the binned density's relative bound times
        ``|int f log f|`` plus the rule's ``O(delta^2)``.

        Exact (``exact=True``, or None up to :data:`EXACT_SAMPLES` samples), ``O(n_samples^2)``:
        Gauss-Legendre quadrature (48 nodes per half piece) on the pieces between the points
        where ``f`` may have a kink (``x_i`` and, for a compact kernel, ``x_i +- h``), each at
        most ``h / 4`` long; a half piece that ends where ``f`` vanishes (the edge of a compact
        support) takes its nodes through ``x = e + L t^6``, which smooths the ``f log f`` of the
        edge; beyond ``8 h`` of the extreme samples a kernel without compact support is
        integrated through ``x = e + h tan(theta)``, ``theta = pi/2 (1 - (1 - s)^4)``. ``f`` comes
        from the engine in log space.
        Equal to ``scipy.integrate.quad`` of the same density to 1e-10 (tested). statsmodels'
        ``KDEUnivariate.entropy`` is ``quad`` of ``f log(f + 1e-12)``.
        """
        binned, (x, c, h, profile) = self._distribution("entropy", exact)
        if binned is not None:
            return binned.entropy()
        xs = np.unique(x)
        if profile.compact:
            breaks = np.unique(np.r_[xs - h, xs, xs + h])
        else:
            breaks = np.unique(np.r_[xs[0] - 8 * h, xs, xs[-1] + 8 * h])
        pieces = []
        for a, b in zip(breaks[:-1], breaks[1:]):
            k = max(1, int(np.ceil((b - a) / (0.25 * h))))
            edges = np.linspace(a, b, k + 1)
            pieces.append(np.c_[edges[:-1], edges[1:]])
        pieces = np.vstack(pieces)
        ends = np.unique(pieces)
        zero = ~np.isfinite(self.score_samples(ends[:, None]))  # where f vanishes
        t, w = np.polynomial.legendre.leggauss(NODES)
        t, w = 0.5 * (t + 1.0), 0.5 * w
        a, b = pieces[:, 0], pieces[:, 1]
        m = 0.5 * (a + b)
        nodes, weights = [], []
        for start, stop in ((a, m), (b, m)):  # each half graded toward its outer end where f vanishes there
            graded = zero[np.searchsorted(ends, start)] & profile.compact
            power = np.where(graded, GRADING, 1.0)[:, None]
            length = (stop - start)[:, None]
            nodes.append(start[:, None] + length * t ** power)
            weights.append(np.abs(length) * power * t ** (power - 1) * w)
        nodes, weights = np.concatenate(nodes).ravel(), np.concatenate(weights).ravel()
        if not profile.compact:  # the tails, x = e -+ h tan(theta)
            t64, w64 = np.polynomial.legendre.leggauss(64)
            s64 = 0.5 * (t64 + 1.0)  # theta = pi/2 (1 - (1 - s)^4): f log f has a log singularity at pi/2
            theta = 0.5 * np.pi * (1.0 - (1.0 - s64) ** 4)
            w_theta = 0.5 * w64 * 2.0 * np.pi * (1.0 - s64) ** 3
            for edge, sign in ((breaks[0], -1.0), (breaks[-1], 1.0)):
                nodes = np.r_[nodes, edge + sign * h * np.tan(theta)]
                weights = np.r_[weights, h * w_theta / np.cos(theta) ** 2]
        log_f = self.score_samples(nodes[:, None])
        with np.errstate(invalid="ignore"):
            integrand = np.where(np.isfinite(log_f), np.exp(log_f) * log_f, 0.0)
        return float(-(weights @ integrand))

    def sample(self, n_samples=1, random_state=None):
        """Draw from the estimated density: a training sample chosen with probability
        ``c_i / sum_j c_j``, plus kernel noise ``h u``.

        ``u`` has density ``k(|u|) / c_d``: a uniform direction times a radius ``r`` of density
        proportional to ``r^{d-1} k(r)``. It is drawn from a standard normal vector ``z`` (the
        direction ``z / |z|``) whose chi-square ``|z|^2`` is a uniform variate ``U`` through its CDF,
        then ``r = F^{-1}(U)`` (:func:`radius_quantile`); the Gaussian keeps ``u = z``. The random
        numbers are consumed as scikit-learn's ``KernelDensity.sample`` consumes them.

        Parameters
        ----------
        n_samples : int, default=1
        random_state : int, RandomState or None

        Returns
        -------
        X : ndarray of shape (n_samples, n_features)
        """
        check_is_fitted(self)
        self._plain("sample")
        check_positive(n_samples, "n_samples", integer=True, allow_zero=True)  # 0: an empty draw, as scikit-learn
        if self.metric != "euclidean" and (self.n_features_in_ > 1 or self._metric_map is not None):
            # scikit-learn draws Euclidean noise whatever the metric: draws that do not follow its score_samples
            raise ValueError(f"sample() draws from the Euclidean kernel; with metric={self.metric!r} in "
                             f"{self.n_features_in_} features the density is another one (give metric='euclidean')")
        rng = check_random_state(random_state)
        data = self.X_fit_
        n, d = data.shape
        u = rng.uniform(0, 1, size=n_samples)
        if self.sample_weight_ is None:
            rows = (u * n).astype(np.int64)
        else:
            cumulative = np.cumsum(self.sample_weight_, dtype=np.float64)
            rows = np.searchsorted(cumulative, u * cumulative[-1])
        z = rng.normal(size=(n_samples, d))
        if not self.kernel_.profile.log_linear:
            s2 = np.einsum("ij,ij->i", z, z)
            r = radius_quantile(self.kernel_.profile, d, special.gammainc(0.5 * d, 0.5 * s2))
            z *= (r / np.sqrt(s2))[:, None]
        if getattr(self, "bandwidth_matrix_", None) is not None:  # x_i + H^1/2 z
            lam, Q = np.linalg.eigh(self.bandwidth_matrix_)
            return (data[rows] + z @ ((Q * np.sqrt(lam)) @ Q.T)).astype(data.dtype, copy=False)
        return (data[rows] + z * self.bandwidth_).astype(data.dtype, copy=False)


def radius_quantile(profile, d, U):
    """The quantile function of the radius ``r >= 0`` with density proportional to
    ``r^{d-1} k(r)``, at the probabilities ``U``.

    Closed forms: for ``k = (1 - r^a)^b`` (uniform, epanechnikov, biweight, triweight, tricube,
    triangular) ``r^a`` is ``Beta(d/a, b + 1)``; the Gaussian's is ``sqrt(2 P^{-1}(d/2, U))``;
    others are the profile's own (the Laplacian's ``r`` is ``Gamma(d)``, the Cauchy's (``d = 1``)
    ``r = tan(pi U / 2)``). Any other compact profile (the cosine) is inverted numerically: its CDF
    is a 64-point Gauss-Legendre rule (exact to round-off for a smooth ``k`` on ``[0, 1]``),
    tabulated to bracket each root, then Newton steps inside the bracket.
    """
    U = np.asarray(U, dtype=np.float64)
    if profile.poly is not None:
        a, b = profile.poly
        t = U ** (a / d) if b == 0 else special.betaincinv(d / a, b + 1, U)
        return t ** (1.0 / a)
    if profile.log_linear:
        return np.sqrt(2.0 * special.gammaincinv(0.5 * d, U))
    closed = None if profile.radius_quantile is None else profile.radius_quantile(d, U)
    if closed is not None:  # the profile's own closed form (the Laplacian's Gamma, the Cauchy's tangent)
        return closed
    if not profile.compact:
        raise ValueError(f"no radius sampler for the {profile.name!r} profile in {d} dimensions")
    nodes, weights = np.polynomial.legendre.leggauss(64)
    nodes, weights = 0.5 * (nodes + 1.0), 0.5 * weights  # on [0, 1]

    def cdf(r):  # int_0^r k(s) s^(d-1) ds = r^d int_0^1 k(r t) t^(d-1) dt
        return r ** d * ((profile(r[:, None] * nodes) * nodes ** (d - 1)) @ weights)

    # a table brackets each root; Newton steps inside the bracket then reach round-off
    grid = np.linspace(0.0, 1.0, 4097)
    table = cdf(grid)
    target = U * table[-1]
    cell = np.clip(np.searchsorted(table, target), 1, len(grid) - 1)
    lo, hi = grid[cell - 1], grid[cell]
    r = np.interp(target, table, grid)
    for _ in range(4):
        with np.errstate(divide="ignore", invalid="ignore"):
            step = (cdf(r) - target) / (profile(r) * r ** (d - 1))
        r = np.clip(np.where(np.isfinite(step), r - step, r), lo, hi)
    return r


NODES, GRADING = 48, 6.0
#: Up to this many samples (of positive weight) the 1-D methods (``cdf``, ``sf``, ``icdf``,
#: ``entropy``) sum exactly by default; beyond, they read the binned grid (``exact=None``)
EXACT_SAMPLES = 2000


def kernel_cdf(profile, z):
    """``K(z) = int_{-inf}^z k(|u|) du / int k``, the distribution function of a profile in 1-D, in
    closed form: the Gaussian's ``Phi``; for ``k = (1 - |u|^a)^b`` on ``|u| <= 1`` (uniform,
    epanechnikov, biweight, triweight, tricube, triangular)
    ``K = 1/2 + sign(z) G(min(|z|, 1)) / (2 G(1))`` with
    ``G(s) = sum_j C(b, j) (-1)^j s^(a j + 1) / (a j + 1)``;
    the cosine's ``1/2 + sign(z) sin(pi min(|z|, 1) / 2) / 2``; the Laplacian's
    ``1 - exp(-z) / 2`` (``z >= 0``); the Cauchy's ``1/2 + arctan(z) / pi``; the Parzen's
    ``1/2 + sign(z) G(|z|)`` with ``G(s) = 4/3 (s - 2 s^3 + 3 s^4 / 2)`` to ``s = 1/2`` and
    ``11/24 + 2/3 (1/16 - (1 - s)^4)`` beyond (``1/2`` from ``s = 1``)."""
    z = np.asarray(z, dtype=np.float64)
    if profile.log_linear:
        return special.ndtr(z)
    if profile.name == "laplacian":
        return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0.0)), 1.0 - 0.5 * np.exp(-np.maximum(z, 0.0)))
    if profile.name == "cauchy":
        return 0.5 + np.arctan(z) / np.pi
    s = np.minimum(np.abs(z), 1.0)
    if profile.name == "cosine":
        half = 0.5 * np.sin(0.5 * np.pi * s)
    elif profile.name == "parzen":  # (4/3) int_0^s k: s - 2 s^3 + 3 s^4 / 2 to 1/2, then 2 (1 - r)^3 integrated
        near = np.minimum(s, 0.5)
        half = (4.0 / 3.0) * (near - 2.0 * near ** 3 + 1.5 * near ** 4) + np.where(
            s > 0.5, (2.0 / 3.0) * (1.0 / 16.0 - (1.0 - s) ** 4), 0.0)
    elif profile.poly is not None:
        a, b = profile.poly
        terms = [(-1) ** j * math.comb(b, j) / (a * j + 1) for j in range(b + 1)]
        G = sum(coef * s ** (a * j + 1) for j, coef in enumerate(terms))
        half = 0.5 * G / sum(terms)
    else:
        raise ValueError(f"no distribution function for the {profile.name!r} profile")
    return 0.5 + np.sign(z) * half


def kernel_quantile(profile, q):
    """The inverse of :func:`kernel_cdf` at the probabilities ``q`` (closed forms; the
    polynomial profiles by bisection on ``[-1, 1]``)."""
    q = np.asarray(q, dtype=np.float64)
    if profile.log_linear:
        return special.ndtri(q)
    if profile.name == "laplacian":
        with np.errstate(divide="ignore"):
            return np.where(q < 0.5, np.log(2 * q), -np.log(2 * (1 - q)))
    if profile.name == "cauchy":
        with np.errstate(divide="ignore"):
            return np.where(q <= 0, -np.inf, np.where(q >= 1, np.inf, np.tan(np.pi * (q - 0.5))))
    lo, hi = -np.ones_like(q), np.ones_like(q)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = kernel_cdf(profile, mid) < q
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.where(q <= 0, -1.0, np.where(q >= 1, 1.0, hi))
