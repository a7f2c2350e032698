"""Local polynomial regression and LOESS: the localization trick with a polynomial model."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted, validate_data

from .._params import (GRID_PARAMS, KERNEL_PARAMS, N_NEIGHBORS_CONSTRAINT, POLYNOMIAL_ALGORITHM_CONSTRAINT, SAMPLE_WEIGHT_TYPE_CONSTRAINT,
                       non_negative)
from .._validation import check_n_neighbors, check_regression_target
from ..engine import (BoundKernel, KDSurface, LocalPolynomialFit, backend_of, binned_polynomial_refusals,
                      check_design_fits, local_polynomial, map_queries, neighbors as nb, twin_groups)
from ..kernels import Kernel
from ._base import FLOATS, LocalKernelMixin, check_sample_weight
from ._output_adaptive import OUTPUT_ADAPTIVE_PARAMS, OutputAdaptiveMixin
from ..exceptions import FallbackWarning, NearSingularDesignWarning, warn

#: Most features for which ``surface="interpolate"`` builds its k-d tree surface (R's loess limit)
INTERPOLATE_MAX_FEATURES = 4


class LocalPolynomialRegressor(OutputAdaptiveMixin, LocalKernelMixin, RegressorMixin, BaseEstimator):
    """Local polynomial regression (LOESS): a weighted least-squares polynomial at each query.

    .. math::

        \\hat\\beta(x^*) = \\arg\\min_\\beta \\sum_i K(x^*, x_i)\\, r_i
        \\big(y_i - \\beta \\cdot \\psi(x_i - x^*)\\big)^2, \\qquad \\hat f(x^*) = \\hat\\beta_0

    with ``psi`` the monomials of total degree <= ``degree`` (in every feature) and ``r_i`` the
    robustness weights. The kernel is any profile of :class:`localkit.Kernel`, the values are the
    targets, the local model a polynomial: degree 0 is the local mean (Nadaraya–Watson), 1 local
    linear, 2 local quadratic. With ``kernel="tricube", frac=f, robust_iters=it, delta=dl`` and one
    feature it is Cleveland's LOWESS, R's ``lowess(x, y, f, iter=it, delta=dl)`` (see Notes for
    statsmodels' ``lowess(frac=f, it=it, delta=dl)``); with a Gaussian
    kernel and per-feature bandwidths and ``degree=1`` it is statsmodels'
    ``KernelReg(reg_type="ll")``. Fits are batched over queries by the engine (no Python loop
    over queries).

    Parameters
    ----------
    degree : int, default=1
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", \
            "softmax"} or Kernel, default="tricube"
        A profile name (formulas in :class:`localkit.Kernel`; scikit-learn's names "rbf", "tophat",
        "flat", "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform",
        "uniform", "laplacian", "triangular" and "biweight"), or a :class:`localkit.Kernel` that
        carries its own bandwidths (then ``bandwidth``, ``frac`` and ``n_neighbors`` stay None): a
        product over groups of columns with categorical factors gives statsmodels'
        ``KernelReg(var_type=..., reg_type="ll")`` at ``degree=1``, every column in the local
        design, as statsmodels has it (see the user guide's "Composing kernels").
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj", "sj", "cv" or None
        A fixed bandwidth ``h`` (one per feature for an array), or a rule resolved on the
        samples, as in :class:`localkit.LocalMeanRegressor` ("scott", "silverman", "isj",
        "sj"; "cv": exact leave-one-out selection of an isotropic ``h`` for the non-robust fit).
        None: ``frac`` or ``n_neighbors`` sets the span. Cannot be combined with
        ``frac`` or ``n_neighbors``.
    frac : float in (0, 1] or None
        The LOESS span: ``h(x*)`` is the distance to the k-th nearest sample with
        ``k = max(2, int(frac * n + 1e-10))``, exactly as statsmodels' lowess (with a compact
        profile the k-th neighbour itself gets weight 0). When ``bandwidth``, ``frac`` and
        ``n_neighbors`` are all None, ``frac=2/3`` (lowess' default). With ``sample_weight`` and
        ``sample_weight_type="frequency"`` the span is measured in weight (see there).
    n_neighbors : int or None
        The span as a number of neighbours (balloon bandwidth: ``h(x*)`` varies with the query).
        At least 2 with a profile that vanishes at ``u = 1`` (every compact one but the uniform):
        the k-th neighbour gets weight 0, so 1 would leave no weight at all (a ``ValueError``).
    sample_neighbors : int or None
        Sample-point adaptive bandwidth: sample ``i`` gets ``h * h_i``, ``h_i`` the distance of
        ``x_i`` to its k-th nearest other sample, so ``K_i(x*) = k(|x* - x_i| / (h h_i))``;
        ``h`` is ``bandwidth`` (default 1, "cv" selects it with the ``h_i`` fixed).
    robust_iters : int, default=0
        Cleveland's robustness iterations, by R's rule (``lowess`` and ``loess``): with ``e_i``
        the residuals at the samples, ``cmad = 6 median_i |e_i|`` (the plain median, whatever
        ``sample_weight``) and ``u_i = |e_i| / cmad``, refit with ``r_i = 1`` for
        ``u_i <= 0.001``, ``r_i = (1 - u_i^2)^2`` for ``0.001 < u_i <= 0.999``, ``r_i = 0`` beyond.
        The iterations stop early, keeping the current fit and its weights, when
        ``cmad < 1e-7 mean_i |e_i|`` (R's lowess): more than half the residuals are then round-off
        of an exact fit, and the weights would drop exactly fitted samples.
    ridge : float, default=0.0
        Added to the non-constant diagonal of the normalised local Gram matrix, in coordinates
        ``(x - x*) / s`` (``s`` = the neighbourhood radius for a span, the bandwidth otherwise).
        A query whose local design is still near-singular (too few neighbours, collinear
        points) falls back to the local mean, with a ``RuntimeWarning``.
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski"}, default="euclidean"
        The distance of the kernel ("minkowski" is the euclidean one, ``p=2``).
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned"}, default="auto"
        The engine's path, as in :class:`localkit.LocalMeanRegressor` (no "streamed" form); "auto",
        "dense", "neighbors" and "compiled" are exact; "binned" approximates the fit by *binned
        moments*, as R's ``KernSmooth::locpoly`` (Fan and Marron 1994): the samples are binned
        linearly onto a grid (2^16, 2^9, 2^6 points per feature in 1, 2, 3 features), the local
        moments ``S_j(g) = sum_i c_i K((x_i - g) / h) ((x_i - g) / h)^j`` (``j <= 2 degree``) and
        ``T_j(g)`` (times ``y_i``, ``j <= degree``; multi-indices in several features) come from FFT
        convolutions, the local system ``sum_b S_(a+b) beta_b = T_a`` is solved at the grid points
        around the queries, and a query blends the corners of its grid cell (multilinear shares
        times weight sums). It needs a fixed ``bandwidth`` (not ``frac``, ``n_neighbors``,
        ``sample_neighbors`` or ``"cv"``), ``degree <= 2``, 1 to 3 features and the euclidean
        metric; its error is ``O((delta / h)^2)`` of the targets' range. A million samples in 1-D
        take milliseconds.
    n_jobs : int or None, default=None
    surface : {"direct", "interpolate"}, default="direct"
        ``"direct"``: an exact local fit at every query. ``"interpolate"``: Cleveland and
        Grosse's surface, R's ``loess`` default:
        exact fits (values and slopes) only at the vertices of a k-d tree whose cells hold at
        most ``floor(n * frac * cell)`` samples, cubic Hermite blending inside the cells; queries
        outside the tree's box are fitted exactly. Equal to R's ``loess(surface = "interpolate")``
        to round-off (1 to 3 features tested). Needs a span (``frac`` or ``n_neighbors``). Each
        cell has ``2^d`` corners (557k vertex fits for 50 samples in 16 features), so beyond
        ``INTERPOLATE_MAX_FEATURES = 4`` features (R's ``loess`` takes at most 4 predictors) the
        fit is direct, with a ``UserWarning`` (``surface_`` is then None).
    cell : float, default=0.2
        The k-d tree's cell size as a fraction of the span (R's ``loess.control(cell=)``).
    delta : float >= 0, default=0.0
        Cleveland's shortcut in one feature (R's and statsmodels' ``lowess(delta=)``): exact fits
        only at *anchors* ``a_0 < a_1 < ...`` among the sorted samples, linear interpolation
        between them. By R's rule (``clowess``): the smallest sample is an anchor; after an
        anchor ``a``, the next is the last sample ``x_j <= a + delta``, or the first sample
        above ``a`` when none lies in ``(a, a + delta]``; the largest sample is always one.
        Between anchors ``a_l < x < a_r`` the fit is
        ``f(x) = t f(a_r) + (1 - t) f(a_l)``, ``t = (x - a_l) / (a_r - a_l)`` (also at new
        queries; queries outside ``[a_0, a_last]`` are fitted exactly), and the robustness
        iterations take their residuals from these interpolated fits, as R's do. ``delta=0``:
        an exact fit everywhere. R's default is ``0.01 * (max(x) - min(x))``; give it as
        ``delta=0.01 * np.ptp(x)``. Needs one feature and ``surface="direct"``.
    missing : {"raise", "drop"}, default="raise"
        ``"raise"``: NaN in ``X`` or ``y`` is a ``ValueError`` (scikit-learn's convention).
        ``"drop"``: rows with a NaN in ``X`` or in ``y`` (and their ``sample_weight``) are left
        out of the fit, as statsmodels' ``lowess(missing="drop")``; ``predict`` then returns NaN
        at a query row holding a NaN (statsmodels' NaN at NaN ``xvals``) and fits the others.
        Infinite values raise either way (statsmodels drops them too; here they are bad input,
        not missing values).
    value_kernel : Kernel or None, default=None
        Output-adaptive local polynomial: each sample also weighs ``K_y(f_t(x*), y_i)``, iterated
        from the plain fit to a fixed point, as in :class:`localkit.LocalMeanRegressor` (the
        formula there; the targets enter the kernel only, never the local design). Needs a fixed
        bandwidth or a rule (no ``frac``, ``n_neighbors`` or ``sample_neighbors``),
        ``surface="direct"``, ``delta=0``, ``robust_iters=0`` and an exact ``algorithm``.
    max_iter : int, default=100
        The most iterations of the value kernel's fixed point; reaching it warns
        (:class:`~localkit.exceptions.LocalkitConvergenceWarning`).
    tol : float, default=1e-8
        A query stops when its fit moves by less than ``tol``.
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass (``algorithm="binned"``, the binned moments; one int, or one per
        feature); by default 2^16, 2^9 and 2^6 points in 1, 2 and 3 features, or the fewest whose
        error bound meets ``tolerance`` where one is given.
    tolerance : float in (0, 1), optional
        The relative error accepted from the binned pass, against its bound ``8 (delta / h)^2``
        (``4 delta / h`` for the triangular, Laplacian and uniform profiles; ``delta`` the grid
        spacing, see :doc:`/user_guide/binned`). It sets the default grid (``1e-4`` when None);
        given, ``algorithm="auto"`` also takes the binned pass where its bound on that grid meets
        it (never otherwise).
    sample_weight_type : {"frequency", "prior"}, default="frequency"
        What ``sample_weight`` ``c_i`` means. Both multiply the kernel weights,
        ``K(x*, x_i) c_i r_i``. ``"frequency"`` (scikit-learn's meaning): ``c_i`` counts copies of
        row ``i``, and integer weights equal repeated rows. The span is measured in total weight:
        with ``q = max(2, int(frac * sum_i c_i + 1e-10))`` (or ``q = n_neighbors``), ``h(x*)`` is
        the smallest distance ``d`` with ``sum_{i: |x_i - x*| <= d} c_i >= q``; the robustness
        iterations take the weighted median of ``|e_i|`` (the median of the repeated residuals)
        and a bandwidth rule the weighted spread with ``n = sum c`` (see
        :class:`localkit.LocalMeanRegressor`). ``"prior"``: R's ``loess(weights=)``: the span
        counts samples, the median is the plain one over all samples (zero weights included).
        Without ``sample_weight`` both are the same fit.

    Notes
    -----
    R's ``loess(span=f)`` uses ``q = floor(n f)`` neighbours and the tricube profile on
    ``distance / (distance to the q-th neighbour)``, as here with ``frac=f``; with several
    features R first divides each by a 10% trimmed standard deviation (``normalize=TRUE``),
    localkit measures distances in the features as given (scale them first, e.g. with
    :class:`sklearn.preprocessing.StandardScaler`, or compare with ``normalize=FALSE``).
    ``robust_iters=it`` is R's ``loess(family="symmetric", iterations=it + 1)`` (the same clipped
    bisquare; the fits agree to round-off), except on exactly fitted data, where R's ``loess``
    has no stopping rule and localkit stops as R's ``lowess`` does. Without robustness iterations
    the fit equals R's ``lowess`` and statsmodels' ``lowess`` to round-off (1e-12). With them it
    equals R's ``lowess`` (4e-13 on the motorcycle data, ``MASS::mcycle``, that statsmodels' tests
    ship: 133 samples, ``frac`` 0.1 to 2/3, 1 to 3 iterations), while statsmodels' ``lowess``
    applies the bisquare unclipped (no weight 1 below ``u = 0.001``, none 0 above 0.999) and has
    no stopping rule: there it differs from both by up to 1.4e-6 (``frac=0.2, it=1``) and
    3.0e-6 (``frac=0.2, it=3``), on a range of 230. statsmodels' ``delta`` rule also fits one
    extra anchor near the largest sample when every remaining sample lies within ``delta``
    (R interpolates there).
    With ``sample_weight_type="prior"``, ``sample_weight`` are R's prior ``weights``: they
    multiply the kernel weights and the robustness weights, but not the median of the residuals,
    which is the plain median over all samples (zero weights included), as R's; and a span still
    counts samples, not weight. So integer weights equal repeated rows there for a fixed
    bandwidth and ``robust_iters=0`` only; with the default ``"frequency"`` they equal repeated
    rows for every span, bandwidth and ``robust_iters`` (scikit-learn's
    ``check_sample_weight_equivalence``), with two exceptions: the uniform profile, whose k-th
    neighbour keeps its weight, counts ties at the span's edge whole, where repeated rows may be
    split; and ``surface="interpolate"`` builds its k-d tree cells from the distinct samples
    (a repeated row is one point of the tree), so its vertices differ from those of the repeated
    rows. A span in weight pays one engine pass per distinct neighbour count among the queries
    (leave-one-out: over all samples per count).

    Attributes
    ----------
    n_iter_ : int
        With ``value_kernel``: the iterations its fixed point took at the training points; 1
        without.
    value_kernel_ : Kernel
        With ``value_kernel``: the kernel of the targets as used (rule resolved, on the target
        column of the augmented samples ``[X, y]``).
    bandwidth_ : float, ndarray or None (span)
    n_neighbors_ : int, float or None
        The span in neighbours (from ``frac`` or ``n_neighbors``); in total weight with
        ``sample_weight`` and ``sample_weight_type="frequency"``.
    sample_scale_ : ndarray of shape (n_samples,) or None
        The sample-point factors ``h_i``.
    kernel_ : Kernel
    robust_weights_ : ndarray of shape (n_samples,)
        The robustness weights of the final fit (ones without ``robust_iters``).
    sample_weight_ : ndarray of shape (n_samples,) or None
        The prior weights given to ``fit``.
    anchors_ : ndarray of shape (n_anchors,) or None
        The sorted samples where ``delta > 0`` fits exactly; None with ``delta=0``.
    anchor_values_ : ndarray of shape (n_anchors,) or None
        The exact (final, robust) fits there, which ``predict`` interpolates.
    surface_ : KDSurface or None
        The k-d tree of the interpolated surface, with ``vertex_values_`` and ``vertex_slopes_``
        the exact fits at its vertices (``surface="interpolate"``).
    X_fit_, y_fit_ : the training data.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LocalPolynomialRegressor
    >>> x = np.linspace(0, 6, 300)[:, None]
    >>> y = np.sin(x).ravel()
    >>> for degree in (1, 2):  # sin(1.5) = 0.997: the quadratic removes the curvature bias
    ...     loess = LocalPolynomialRegressor(degree=degree, frac=0.2).fit(x, y)
    ...     print(round(float(loess.predict([[1.5]])[0]), 3))
    0.972
    0.997
    >>> fit = LocalPolynomialRegressor(degree=2, kernel="gaussian", bandwidth=0.3).fit(x, y)
    >>> print(round(float(fit.predict_derivative([[1.5]])[0, 0]), 3))  # cos(1.5) = 0.071
    0.068
    >>> binned = LocalPolynomialRegressor(degree=2, kernel="gaussian", bandwidth=0.3, algorithm="binned").fit(x, y)
    >>> print(round(float(binned.predict_derivative([[1.5]])[0, 0]), 3))
    0.068
    """

    #: queries without any weight get the target of their nearest sample
    empty = "nearest"

    def __init__(self, degree=1, kernel="tricube", bandwidth=None, frac=None, n_neighbors=None,
                 sample_neighbors=None, robust_iters=0, ridge=0.0, metric="euclidean", algorithm="auto",
                 n_jobs=None, surface="direct", cell=0.2, sample_weight_type="frequency", delta=0.0,
                 missing="raise", value_kernel=None, max_iter=100, tol=1e-8, grid_size=None, tolerance=None):
        self.value_kernel = value_kernel
        self.max_iter = max_iter
        self.tol = tol
        self.grid_size = grid_size
        self.tolerance = tolerance
        self.degree = degree
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.frac = frac
        self.n_neighbors = n_neighbors
        self.sample_neighbors = sample_neighbors
        self.robust_iters = robust_iters
        self.ridge = ridge
        self.metric = metric
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.surface = surface
        self.cell = cell
        self.sample_weight_type = sample_weight_type
        self.delta = delta
        self.missing = missing

    _parameter_constraints: dict = {
        **{k: v for k, v in KERNEL_PARAMS.items() if k != "empty"},  # empty is always "nearest"
        "kernel": KERNEL_PARAMS["kernel"] + [Kernel],  # a Kernel carries its own bandwidths (_check_params)
        "degree": non_negative(Integral),
        "bandwidth": KERNEL_PARAMS["bandwidth"] + [None],
        "algorithm": POLYNOMIAL_ALGORITHM_CONSTRAINT,
        "frac": [Interval(Real, 0, 1, closed="right"), None],
        "sample_neighbors": N_NEIGHBORS_CONSTRAINT,
        "robust_iters": non_negative(Integral),
        "ridge": non_negative(),
        "surface": [StrOptions({"direct", "interpolate"})],
        "cell": [Interval(Real, 0, None, closed="neither")],
        "sample_weight_type": SAMPLE_WEIGHT_TYPE_CONSTRAINT,
        "delta": non_negative(),
        "missing": [StrOptions({"raise", "drop"})],
        **OUTPUT_ADAPTIVE_PARAMS,
        **GRID_PARAMS,
    }

    def _wide_bandwidth_tends_to_the_mean(self):
        return self.degree == 0

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self.missing == "drop"
        return tags

    def _check_params(self, n, total=None):
        """The span and what depends on the data (the types are in ``_parameter_constraints``);
        ``total``: the samples' total weight, the span's unit (a span in weight), or None."""
        given = [name for name in ("bandwidth", "frac", "n_neighbors") if getattr(self, name) is not None]
        if isinstance(self.kernel, Kernel):  # it carries its own bandwidths: no span
            extra = given + [name for name in ("sample_neighbors",) if getattr(self, name) is not None]
            if extra or self.surface != "direct" or self.algorithm == "binned":
                raise ValueError(f"a Kernel given as kernel={self.kernel!r} carries its own bandwidths: leave "
                                 "bandwidth, frac, n_neighbors and sample_neighbors None, surface='direct', and "
                                 f"algorithm not 'binned' (got {', '.join(extra) or 'surface/algorithm'})")
            return None
        if len(given) > 1:
            raise ValueError(f"give one of bandwidth, frac and n_neighbors, not {' and '.join(given)}")
        if self.surface == "interpolate" and (self.bandwidth is not None or self.sample_neighbors is not None):
            raise ValueError("surface='interpolate' sizes its cells from the span: give frac or n_neighbors, "
                             "not bandwidth or sample_neighbors")
        if self.sample_neighbors is not None:
            check_n_neighbors(self.sample_neighbors, n - 1, "sample_neighbors")
            if self.frac is not None or self.n_neighbors is not None:
                raise ValueError("sample_neighbors scales a fixed bandwidth per sample; it cannot be "
                                 "combined with frac or n_neighbors")
            return None
        if self.bandwidth is not None:
            return None
        if total is not None:  # the span in weight: q units of sample_weight
            if self.n_neighbors is not None:
                check_n_neighbors(self.n_neighbors, max(n, int(total + 1e-10)), kernel=self.kernel)  # k = 1
            q = (self.n_neighbors if self.n_neighbors is not None
                 else max(2, int((2.0 / 3.0 if self.frac is None else self.frac) * total + 1e-10)))
            if q > total * (1 + 1e-12):
                raise ValueError(f"the span of {q} exceeds the total sample weight {total:g} (a span measured in "
                                 "weight, sample_weight_type='frequency'); give a smaller n_neighbors, or "
                                 "sample_weight_type='prior' for a span in samples")
            return q
        if not given:
            return max(2, int(2.0 / 3.0 * n + 1e-10))
        if self.frac is not None:
            return max(2, int(self.frac * n + 1e-10))  # statsmodels' lowess span
        return check_n_neighbors(self.n_neighbors, n, kernel=self.kernel)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Resolve the kernel (and the bandwidth), build the interpolation tree, run the robustness
        iterations. ``sample_weight`` (n_samples,) multiplies every kernel weight. Returns ``self``."""
        backend_of(X, y, sample_weight).require_in_memory(
            "LocalPolynomialRegressor.fit", "its local designs are solved in memory: fit on NumPy arrays, or fit "
            "LocalMeanRegressor (the local constant), which keeps the samples on the cluster; a fitted "
            "LocalPolynomialRegressor predicts dask queries chunk by chunk")
        if self.missing == "drop":
            X, y, sample_weight = self._drop_missing(X, y, sample_weight)
        else:
            X, y = validate_data(self, X, y, dtype=FLOATS, y_numeric=True)
        y = check_regression_target(y, X.dtype)
        self.sample_weight_ = check_sample_weight(sample_weight, X)
        if self.delta > 0 and (X.shape[1] != 1 or self.surface == "interpolate"):
            raise ValueError(f"delta={self.delta!r} interpolates between fits along one feature with "
                             f"surface='direct'; got n_features={X.shape[1]}, surface={self.surface!r} "
                             "(give delta=0)")
        self._weighted_span = self.sample_weight_type == "frequency" and self.sample_weight_ is not None
        span = self._check_params(len(X), float(np.sum(self.sample_weight_, dtype=np.float64))
                                  if self._weighted_span else None)
        self._weighted_span &= span is not None
        check_design_fits(X.shape[1], self.degree, X.dtype.itemsize)
        if self.algorithm == "binned":
            self._check_binned(span, X.shape[1])
        self.X_fit_, self.y_fit_ = X, y.astype(X.dtype, copy=False)
        self._fit_sample_scales(X)
        self.n_neighbors_ = None if span is None else span if self._weighted_span else min(span, len(X))
        if isinstance(self.kernel, Kernel):
            self._fit_kernel(X, y, self.sample_weight_)
        elif span is not None or self.bandwidth is None:  # a span, or sample-point factors alone
            self.bandwidth_ = None if span is not None else 1.0
            # a span in weight: each query's count of neighbours is found at the query (_exact)
            self.kernel_ = Kernel(self.kernel, bandwidth=self.bandwidth_ or 1.0, metric=self.metric,
                                  n_neighbors=None if self.n_neighbors_ is None else
                                  min(len(X), int(np.ceil(self.n_neighbors_))))
        else:
            self._fit_kernel(X, y, self.sample_weight_)
        # the kernel bound to the samples once: every later fit (robustness iterations, predict) reuses it
        self._bound_kernel = BoundKernel(self.kernel_, X, sample_scale=self.sample_scale_)
        self.robust_weights_ = np.ones(len(X), dtype=X.dtype)
        self.surface_ = self._vertex_balls = self._sample_balls = self._anchor_balls = None
        self.anchors_ = self.anchor_values_ = None
        if self.delta > 0:
            self.anchors_ = delta_anchors(X[:, 0], self.delta)
            self._fit_anchors()
        if self.surface == "interpolate" and X.shape[1] > INTERPOLATE_MAX_FEATURES:
            warn(FallbackWarning(f"surface='interpolate' blends the 2^d corners of each cell and pays up to "
                                 f"{INTERPOLATE_MAX_FEATURES} features (R's loess limit); with n_features={X.shape[1]} "
                                 "this fit is surface='direct' (exact local fits)"))
        elif self.surface == "interpolate":
            per_cell = len(X) * self.frac if self.frac is not None else self.n_neighbors_
            self.surface_ = KDSurface(X, max(1, int(np.floor(per_cell * self.cell + 1e-10))))
            self._fit_vertices()
        frequency = self.sample_weight_ if self.sample_weight_type == "frequency" else None
        for _ in range(self.robust_iters):
            residuals = self.y_fit_ - self._fit_at(X, self.kernel_, at_samples=True)
            weights = bisquare_weights(residuals) if frequency is None else bisquare_weights(residuals, frequency)
            if weights is None:  # the fit is exact up to round-off: keep it (R's lowess stops here)
                break
            self.robust_weights_ = weights.astype(X.dtype, copy=False)
            if self.surface_ is not None:
                self._fit_vertices()
            if self.anchors_ is not None:
                self._fit_anchors()
        self.n_iter_ = 1  # the plain fit (robustness iterations are robust_iters)
        if self.value_kernel is not None:
            self._fit_output_adaptive(X)
        return self

    def _fit_output_adaptive(self, X):
        """The value kernel's product over ``[X, y]`` and ``n_iter_`` (see ``value_kernel``)."""
        refused = [name for name, bad in [("surface", self.surface != "direct"), ("delta", self.delta > 0),
                                          ("robust_iters", self.robust_iters > 0),
                                          ("algorithm", self.algorithm == "binned")] if bad]
        if refused:
            raise ValueError(f"value_kernel takes surface='direct', delta=0, robust_iters=0 and an exact algorithm; "
                             f"got {', '.join(f'{name}={getattr(self, name)!r}' for name in refused)}")
        Y = self.y_fit_[:, None]
        self._value_product = self._fit_value_kernel(X, Y)
        self._value_samples = np.concatenate([X, Y], axis=1)
        self._value_bound = BoundKernel(self._value_product, self._value_samples)
        self.n_iter_ = self._value_fixed_point(X).n_iter

    def _value_fixed_point(self, X):
        """The output-adaptive fit's fixed point at the queries ``X``: local polynomials over
        ``[X, y]`` with the targets' column in the kernel, not in the design."""
        def refit(Q):
            return local_polynomial(Q, self._value_samples, self.y_fit_, self.degree, self._value_product,
                                    sample_weight=self._weights(), ridge=self.ridge, design=X.shape[1],
                                    bound=self._value_bound, **self._path_options()).values

        return self._iterate_values(X, self._fit_at(X, self.kernel_)[:, None], refit)

    def _predict_rows(self, X):
        if self.value_kernel is not None:
            return self._value_fixed_point(X).state[:, 0]
        return self._fit_at(X, self.kernel_)

    def _check_binned(self, span, n_features):
        """``algorithm="binned"`` needs binned moments: a fixed bandwidth, degree <= 2, 1 to 3
        features, the euclidean metric (checked in ``fit``, which computes nothing else)."""
        if span is not None:
            raise ValueError("algorithm='binned' needs a fixed bandwidth: frac / n_neighbors give a span (a kNN "
                             "bandwidth that varies with the query); give bandwidth= a number, a per-feature "
                             "array or a rule")
        if self.sample_neighbors is not None:
            raise ValueError("algorithm='binned' needs a fixed bandwidth: sample_neighbors gives each sample "
                             "its own; leave it None")
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            raise ValueError("algorithm='binned' cannot select bandwidth='cv' (exact leave-one-out); give a "
                             "number or a rule, or select it with algorithm='auto' first")
        refused = binned_polynomial_refusals(Kernel(self.kernel, metric=self.metric), n_features, self.degree,
                                             None, False)
        if refused:
            raise ValueError("algorithm='binned' cannot compute this local polynomial: " + "; ".join(refused))

    @map_queries
    def predict_derivative(self, X: ArrayLike) -> np.ndarray:
        """The local slopes: the gradient of the local polynomial fitted at each row of ``X``.

        .. math::

            \\frac{\\partial \\hat f}{\\partial x_m}(x^*) = \\hat\\beta_{e_m}(x^*)

        the coefficient of ``x_m - x*_m`` in the local fit (the design's scale divided out), as
        R's ``KernSmooth::locpoly(drv=1)`` (1-D, its estimate ``1! beta_1``) and the marginal
        effects of statsmodels' ``KernelReg(reg_type="ll").fit()`` (its second output). Needs
        ``degree >= 1``: ``degree=1`` gives the local linear slope, ``degree=2`` the slope with the
        curvature's bias removed (``locpoly(drv=1, degree=2)``, the usual choice: odd
        ``degree - derivative``). Always the direct local fit at the queries, also with
        ``surface="interpolate"``; with ``algorithm="binned"``, the binned moments' slopes blended
        as the values are.

        Returns
        -------
        ndarray of shape (n_queries, n_features)
            ``[:, m]`` is the slope in feature ``m``, in units of the target per unit of ``x_m``;
            a query without weight (beyond every compact support) gets 0, as does a query whose
            local design is singular (it falls back to the local mean, with a ``RuntimeWarning``).
        """
        check_is_fitted(self)
        if self.degree < 1:
            raise ValueError("predict_derivative needs degree >= 1: a local constant (degree=0) has no slope; "
                             "fit with degree=1 (local linear) or degree=2")
        X = self._validate_queries(X)
        return self._exact(X, self.kernel_, slopes=True).slopes[:, :, 0]

    def _drop_missing(self, X, y, sample_weight):
        """``missing="drop"``: the rows of ``X``, ``y`` and ``sample_weight`` without a NaN."""
        X = validate_data(self, X, dtype=FLOATS, ensure_all_finite="allow-nan")
        y = check_array(y, ensure_2d=False, dtype=None, ensure_all_finite="allow-nan", input_name="y")
        check_consistent_length(X, y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D (one target per sample), got shape {y.shape}")
        keep = ~np.isnan(X).any(axis=1)
        if y.dtype.kind == "f":
            keep &= ~np.isnan(y)
        if not keep.any():
            raise ValueError(f"missing='drop' left no sample: every one of the {len(X)} rows has a NaN in X or y")
        if sample_weight is not None and np.ndim(sample_weight) == 1:
            check_consistent_length(X, sample_weight)
            sample_weight = np.asarray(sample_weight)[keep]
        return X[keep], y[keep], sample_weight

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """The local polynomial fit at each row of ``X`` (interpolated inside the tree's box with
        ``surface="interpolate"``, between the anchors with ``delta > 0``). With ``missing="drop"``
        a query row holding a NaN gets NaN."""
        if self.missing == "drop" and backend_of(X).name == "numpy":
            check_is_fitted(self)
            Q = validate_data(self, X, reset=False, dtype=FLOATS, ensure_all_finite="allow-nan")
            rows = ~np.isnan(Q).any(axis=1)
            if not rows.all():
                out = np.full(len(Q), np.nan, dtype=self.X_fit_.dtype)
                if rows.any():
                    out[rows] = self._predict_rows(self._validate_queries(Q[rows]))
                return out
        return self._predict_rows(self._validate_queries(X))

    def _weights(self):
        """Prior times robustness weights."""
        rw = getattr(self, "robust_weights_", None)
        if self.sample_weight_ is None:
            return rw
        return self.sample_weight_ if rw is None else self.sample_weight_ * rw

    def _fit_vertices(self):
        out = self._exact(self.surface_.vertices, self.kernel_, slopes=True, balls=self._vertex_balls)
        self.vertex_values_, self.vertex_slopes_ = out.values[:, 0], out.slopes[:, :, 0]
        self._vertex_balls = out.balls  # robustness iterations change weights, not neighbourhoods

    def _fit_anchors(self):
        """The exact fits at the anchors of ``delta`` (their neighbourhoods kept for the robustness
        iterations, which change weights, not neighbourhoods)."""
        out = self._exact(self.anchors_[:, None], self.kernel_, balls=self._anchor_balls)
        self.anchor_values_, self._anchor_balls = out.values[:, 0], out.balls

    def _fit_at(self, X, kernel, exclude_self=False, at_samples=False):
        if exclude_self:
            return self._exact(None, kernel, exclude_self=True).values[:, 0]
        if getattr(self, "anchors_", None) is not None:
            x = X[:, 0]
            inside = (x >= self.anchors_[0]) & (x <= self.anchors_[-1])
            out = np.empty(len(X), dtype=self.X_fit_.dtype)
            out[inside] = interpolate_anchors(x[inside], self.anchors_, self.anchor_values_)
            if not inside.all():
                out[~inside] = self._exact(X[~inside], kernel).values[:, 0]
            return out
        if self.surface_ is None:
            if not at_samples:
                return self._exact(X, kernel).values[:, 0]
            out = self._exact(X, kernel, balls=self._sample_balls)
            self._sample_balls = out.balls  # the next robustness iteration skips the search
            return out.values[:, 0]
        inside = self.surface_.inside(X)
        out = np.empty(len(X), dtype=self.X_fit_.dtype)
        out[inside] = self.surface_.blend(X[inside], self.vertex_values_, self.vertex_slopes_)
        if not inside.all():  # no extrapolation of the tree: fit outside queries exactly
            out[~inside] = self._exact(X[~inside], kernel).values[:, 0]
        return out

    def _exact(self, X, kernel, exclude_self=False, slopes=False, balls=None):
        fit = self._exact_in_weight if getattr(self, "_weighted_span", False) else self._exact_fit
        out = fit(X, kernel, exclude_self=exclude_self, slopes=slopes, balls=balls)
        if out.singular.any():
            warn(NearSingularDesignWarning(
                f"some queries have a near-singular local design for degree={self.degree} (too few neighbours "
                "or collinear points); they fall back to the local mean (the warning's n_singular and n_queries "
                "say how many). Widen the bandwidth or span, or set ridge > 0.",
                n_singular=int(out.singular.sum()), n_queries=len(out.singular)))
        return out

    def _path_options(self):
        """The engine's path and its settings, as the estimator's parameters give them."""
        return dict(algorithm=self.algorithm, n_jobs=self.n_jobs, grid_size=self.grid_size, tolerance=self.tolerance)

    def _exact_fit(self, X, kernel, exclude_self=False, slopes=False, balls=None):
        # the kernel bound in fit; a span in weight fits each neighbour count with its own kNN kernel, bound here
        return local_polynomial(X, self.X_fit_, self.y_fit_, self.degree, kernel, sample_weight=self._weights(),
                                sample_scale=self.sample_scale_, exclude_self=exclude_self, ridge=self.ridge,
                                slopes=slopes, balls=balls, bound=self._bound_kernel if kernel is self.kernel_ else None,
                                **self._path_options())

    def _exact_in_weight(self, X, kernel, exclude_self=False, slopes=False, balls=None):
        """The fits with a span in weight: each query's count ``k(x*)`` of nearest samples whose
        weights first reach the span (:func:`weighted_span_counts`), then one engine pass per
        distinct count (the k-th neighbour's distance is the span's radius). ``balls``: the
        counts and the engine's radii of an earlier call at the same queries."""
        Q = self.X_fit_ if exclude_self else X
        if balls is None:
            counts = weighted_span_counts(self.X_fit_, Q, self.sample_weight_, self.n_neighbors_, self.metric,
                                          exclude_self=exclude_self, values=self.y_fit_)
            found = {}
        else:
            counts, found = balls
        n_q, t = len(Q), 1
        values = np.empty((n_q, t), dtype=self.X_fit_.dtype)
        singular, empty = np.zeros(n_q, dtype=bool), np.zeros(n_q, dtype=bool)
        grad = np.zeros((n_q, Q.shape[1], t), dtype=self.X_fit_.dtype) if slopes else None
        for k in np.unique(counts):
            rows = np.flatnonzero(counts == k)
            kern = Kernel(kernel.name, bandwidth=1.0, n_neighbors=int(k), metric=kernel.metric)
            if exclude_self:  # leave-one-out needs every sample as a query: keep this count's rows
                out = self._exact_fit(None, kern, exclude_self=True, slopes=slopes)
                pick = rows
            else:
                out = self._exact_fit(Q[rows], kern, slopes=slopes, balls=found.get(int(k)))
                found[int(k)] = out.balls
                pick = slice(None)
            values[rows], singular[rows], empty[rows] = out.values[pick], out.singular[pick], out.empty[pick]
            if slopes:
                grad[rows] = out.slopes[pick]
        return LocalPolynomialFit(values, singular, empty, grad, None if exclude_self else (counts, found))

    def loo_predict(self):
        """Exact leave-one-out fits at the training points (each sample's own weight dropped;
        always direct, whatever ``surface``)."""
        return self._fit_at(self.X_fit_, self.kernel_, exclude_self=True)

    def _loo_loss(self, X, y, bandwidth):
        """Mean squared leave-one-out error of the (non-robust) fit with a fixed ``bandwidth``
        (fits and mean weighted by ``sample_weight_``, if any)."""
        kernel = Kernel(self.kernel, bandwidth=bandwidth, metric=self.metric)
        out = local_polynomial(None, X, y, self.degree, kernel, sample_weight=self.sample_weight_,
                               sample_scale=self.sample_scale_, exclude_self=True, ridge=self.ridge,
                               **self._path_options())
        return float(np.average((out.values[:, 0] - y) ** 2, weights=self.sample_weight_))


def delta_anchors(x, delta):
    """The samples where LOWESS with ``delta`` fits exactly, by R's rule (``clowess`` in R's
    ``lowess.c``), as the sorted array of their (distinct) values.

    With ``x`` sorted: the first sample is an anchor; after an anchor at index ``i`` its ties
    take its fit, and the next anchor is ``max(last tie + 1, k - 1)``, ``k`` the first index with
    ``x_k > x_i + delta`` (``n`` if none), until the last sample is reached. One ``searchsorted``
    per anchor."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    n, i, anchors = len(x), 0, []
    while True:
        anchors.append(i)
        last = int(np.searchsorted(x, x[i], side="right")) - 1  # ties of the anchor copy its fit
        if last >= n - 1:
            break
        k = int(np.searchsorted(x, x[i] + delta, side="right"))  # first sample beyond the cut
        i = max(last + 1, k - 1)
    return x[anchors]


def interpolate_anchors(x, anchors, values):
    """R's interpolation between the anchors ``a_l <= x <= a_r`` around each ``x``:
    ``t f(a_r) + (1 - t) f(a_l)``, ``t = (x - a_l) / (a_r - a_l)``; a single anchor's value where
    there is only one."""
    if len(anchors) == 1:
        return np.full(len(x), values[0], dtype=values.dtype)
    left = np.clip(np.searchsorted(anchors, x, side="right") - 1, 0, len(anchors) - 2)
    a_l, a_r = anchors[left], anchors[left + 1]
    t = (x - a_l) / (a_r - a_l)
    return (t * values[left + 1] + (1.0 - t) * values[left]).astype(values.dtype, copy=False)


def bisquare_weights(residuals, frequency=None):
    """Cleveland's robustness weights by R's rule (``clowess`` in R's ``lowess.c``, ``lowesw`` in
    its ``loessf.f``), or None when the iterations should stop.

    With ``a = |e|``, ``cmad = 6 median(a)`` (the plain median: prior weights play no part) and
    ``u = a / cmad``: weight 1 where ``u <= 0.001``, ``(1 - u^2)^2`` where ``0.001 < u <= 0.999``,
    0 beyond. None when ``cmad < 1e-7 mean(a)``: more than half the residuals are round-off of an
    exact fit, and the rule would drop exactly fitted samples at random (R's lowess stops there).
    With ``frequency`` weights (counts of repeated rows) the median and the mean are weighted
    (:func:`weighted_median`): those of the residuals repeated ``c_i`` times.
    """
    a = np.abs(np.asarray(residuals, dtype=np.float64))
    if frequency is None:
        cmad, mean = 6.0 * np.median(a), np.mean(a)
    else:
        c = np.asarray(frequency, dtype=np.float64)
        cmad, mean = 6.0 * weighted_median(a, c), float(c @ a) / float(c.sum())
    if cmad < 1e-7 * mean:
        return None
    if cmad == 0.0:  # every residual is exactly 0 (mean(a) = 0): nothing to down-weight
        return np.ones_like(a)
    u = a / cmad
    return np.where(u <= 0.001, 1.0, np.where(u <= 0.999, (1.0 - u * u) ** 2, 0.0))


def weighted_median(a, weight):
    """The median of ``a`` with frequency weights: that of ``a_i`` repeated ``c_i`` times for
    integer weights (``np.median``'s mean of the two middle values for an even total).

    With ``a`` sorted, ``C_j`` the running sums of the weights and ``W`` their total, the mean of
    the first ``a_j`` with ``C_j >= W/2`` and the first with ``C_j > W/2``."""
    order = np.argsort(a, kind="stable")
    a, c = np.asarray(a, dtype=np.float64)[order], np.asarray(weight, dtype=np.float64)[order]
    C = np.cumsum(c)
    half = C[-1] / 2.0
    lower = np.searchsorted(C, half, side="left")
    upper = np.searchsorted(C, half, side="right")
    return 0.5 * (a[min(lower, len(a) - 1)] + a[min(upper, len(a) - 1)])


def weighted_span_counts(samples, queries, weight, span, metric="euclidean", *, exclude_self=False, block=None,
                         values=None):
    """For each query, the number ``k`` of its nearest samples (nearest first; leave-one-out:
    other than those at its point) whose weights first sum to ``span``: the k-th neighbour's
    distance is then the smallest ``d`` with ``sum_{|x_i - x*| <= d} c_i >= span``, the radius
    of a span measured in weight (that of the rows repeated ``c_i`` times). Where the weights
    never reach it, every sample (the span's radius is the farthest one's distance). Leave-one-out
    leaves out the copies of a row, its point and its ``values`` (:mod:`localkit.engine.twins`)."""
    c = np.asarray(weight, dtype=np.float64)
    n = len(c)
    groups = twin_groups(samples, values) if exclude_self else None
    available = n - (nb.largest_group(groups) if exclude_self else 0)
    index = nb.make_index(samples, metric, exact=True)
    target = span * (1 - 1e-12)  # a running sum of float weights reaching the span up to round-off
    guess = min(available, max(1, int(np.ceil(2.0 * span * n / max(c.sum(), np.finfo(float).tiny)))))
    counts = np.empty(len(queries), dtype=np.intp)
    step = block or max(1, 2 ** 22 // max(guess, 1))
    for start in range(0, len(queries), step):
        rows = slice(start, min(start + step, len(queries)))
        k = guess
        while True:
            _, idx = nb.kneighbors(index, queries[rows], k, exclude_self=exclude_self, row_offset=start,
                                   groups=groups)
            running = np.cumsum(c[idx], axis=1)
            reached = running[:, -1] >= target
            if reached.all() or k >= available:
                break
            k = min(available, 2 * k)
        counts[rows] = np.where(reached, np.argmax(running >= target, axis=1) + 1, k)
    return counts
