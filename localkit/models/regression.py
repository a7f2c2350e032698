"""Nadaraya–Watson regression: the local mean of the targets (optionally output-adaptive: the
kernel also weighs each sample's target against the estimate, iterated to a fixed point)."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils.validation import check_is_fitted

from ..engine import bind
from ._base import MIXABLE_KERNEL, LocalMeanParams
from ._output_adaptive import OUTPUT_ADAPTIVE_PARAMS, OutputAdaptiveMixin


class LocalMeanRegressor(OutputAdaptiveMixin, LocalMeanParams, RegressorMixin, BaseEstimator):
    """Nadaraya–Watson kernel regression, the local mean of ``y``.

    .. math::

        \\hat f(x^*) = \\frac{\\sum_i K(x^*, x_i)\\, y_i}{\\sum_j K(x^*, x_j)},
        \\qquad K(x^*, x) = k\\big(d(x^*, x) / h\\big)

    With ``kernel="uniform", n_neighbors=k`` this is k-nearest-neighbour regression
    (scikit-learn's ``KNeighborsRegressor(k)``, except that where several samples tie at the k-th
    distance each keeps a valid set of k, not necessarily the same); with ``kernel="uniform"``
    and a number ``bandwidth=r`` it is ``RadiusNeighborsRegressor(r)``; with a Gaussian kernel it
    is statsmodels' ``KernelReg(reg_type="lc")``. ``weights`` multiplies the kernel by a factor
    of the distance, as scikit-learn's ``weights`` do, and :meth:`kneighbors` and
    :meth:`radius_neighbors` answer as scikit-learn's neighbours do.

    Sparse input: ``X`` may be a scipy sparse matrix (converted to CSR, never densified: the
    bound kernel keeps the CSR matrix) with a compact profile and ``n_neighbors``, or a compact
    profile at a number ``bandwidth`` (radius queries), and the metrics "euclidean",
    "manhattan", "cosine" (or "minkowski" with ``p`` 1 or 2): the neighbours come from
    scikit-learn's brute-force search on the CSR matrix, so predictions, :meth:`kneighbors` and
    :meth:`radius_neighbors` equal those of scikit-learn's neighbour estimators fitted on the
    same sparse ``X``; ``weights``, ``sample_weight``, :meth:`loo_predict` and the ``empty``
    policy work as on dense ``X``, and queries may be sparse or dense. What needs dense
    coordinates is refused with a ``ValueError`` naming it: profiles that weigh every sample
    (the default Gaussian: the dense path centres the samples, which would densify them),
    bandwidth rules, "cv" and per-feature bandwidths, ``sample_neighbors``, metrics mapped by
    ``metric_params``, a ``Kernel`` instance, and ``algorithm`` other than "auto" or "neighbors".

    Parameters
    ----------
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", "softmax"}, Kernel or list of Kernel, default="gaussian"
        A profile ``k`` of ``u = d(x*, x) / h`` (formulas in :class:`localkit.Kernel`; also
        scikit-learn's names "rbf", "tophat", "flat", "exponential", "linear" and "quartic"
        for "gaussian", "uniform", "uniform", "laplacian", "triangular" and "biweight"),
        "softmax" (``exp(<x*, x> / h)``), or a ``Kernel``, which carries
        its own bandwidths: a product over groups of columns, with categorical factors
        (``Kernel("gaussian", bandwidth=0.5, features=[0]) * Kernel("aitchison_aitken",
        bandwidth=0.2, features=[1])``; statsmodels' ``KernelReg(var_type="cu", reg_type="lc")``,
        see the user guide's "Composing kernels"), a sum ``w1 * K1 + w2 * K2``, with
        ``bandwidth="cv"`` in any factor: those bandwidths chosen jointly by the exact
        leave-one-out error (the search in ``cv_results_``). A list ``[K1, K2, ...]`` learns the
        weights ``w`` on the simplex of ``sum_k w_k K_k`` by the leave-one-out error
        (``kernel_weights_``). ``bandwidth`` is then ignored and
        ``n_neighbors``, ``sample_neighbors``, ``metric`` and ``weights`` stay at their defaults.
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj", "sj" or "cv", default="scott"
        ``h``; an array gives one bandwidth per feature; a rule is resolved on the samples:
        "scott" and "silverman" (normal reference rules), "isj" (Botev's improved
        Sheather–Jones, as KDEpy) and "sj" (Sheather–Jones, R's ``bw.SJ``), the last two per
        feature. Ignored with ``n_neighbors``. The
        default, Scott's rule, is one bandwidth per feature, ``h_k = sigma_k n^(-1/(d+4))``
        (``sigma_k`` the feature's standard deviation, ddof=1; scipy's
        ``gaussian_kde(bw_method="scott")``), so the fit does not depend on the features' units
        (diabetes: 5-fold R^2 0.397 scaled or raw; ``bandwidth=1.0``, the default in
        0.1.0, gave -0.02 and -0.23). Rules, like the kernel, see the coordinates mapped by
        ``metric_params`` ("seuclidean", "mahalanobis", weighted "minkowski").
        A full bandwidth matrix ``H`` (2 to 6 features, a symmetric positive definite (d, d)
        array, or "hpi" / "hscv": R's ``ks::Hpi`` / ``ks::Hscv`` on the samples): the kernel
        ``k(sqrt(dx^T H^-1 dx))``, the samples mapped once by ``H^-1/2``; ``bandwidth_matrix_ = H``
        (see :doc:`/user_guide/conditional`).
        Rules need coordinates: with ``metric`` "cosine", a callable
        or "precomputed", give a number or ``n_neighbors``. "cv": exact leave-one-out selection
        of an isotropic ``h`` (the squared error of :meth:`loo_predict` minimised over ``h``;
        the search is kept in ``cv_results_``). A number more than 3 times the
        data's spread (the root mean square distance of the samples to their mean) gives about
        the global mean and is warned about (``UserWarning``).
    n_neighbors : int or None, default=None
        Balloon (per-query) adaptive bandwidth: ``h(x*)`` is the distance from the query to its
        k-th nearest training sample.
    sample_neighbors : int or None, default=None
        Sample-point adaptive bandwidth: sample ``i`` gets ``h * h_i``, ``h_i`` the distance of
        ``x_i`` to its k-th nearest other sample, so ``K_i(x*) = k(|x* - x_i| / (h h_i))``
        (``bandwidth="cv"`` then selects ``h`` with the ``h_i`` fixed).
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski", "seuclidean", "mahalanobis", "cosine", \
            "precomputed"} or callable, default="euclidean"
        The distance (see :class:`localkit.Kernel`). "seuclidean" (``d^2 = sum_k dx_k^2 / V_k``)
        and "mahalanobis" (``d^2 = dx^T VI dx``) are the euclidean norm of a linear map of
        ``dx = x* - x``; they are measured as that, on coordinates mapped once at fit
        (``metric_params``). "cosine", callables and "precomputed"
        (``X`` holds distances to the training samples, as in scikit-learn) take a scalar
        bandwidth or ``n_neighbors``. Precomputed distances are checked as scikit-learn checks
        them: ``fit`` takes the square (n_samples, n_samples) matrix, and every distance given to
        ``fit`` or ``predict`` must be ``>= 0`` (``ValueError`` otherwise).
    p : float, default=2
        The power of the "minkowski" metric, ``d = (sum_k w_k |dx_k|^p)^(1/p)`` (``w_k = 1``
        unless ``metric_params={"w": w}``); ``p=inf`` is ``max_k |dx_k|``, "chebyshev".
    empty : {"nearest", "nan", "raise"}, default="nearest"
        What to predict where no training sample lies in the support of a compact kernel:
        "nearest": the target of the nearest training sample (the limit of growing the
        bandwidth until one sample enters); "nan": NaN, with a warning; "raise": a
        ``ValueError``.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
        How the engine computes the weighted sums; every path but "binned" gives the same result
        to round-off. "auto": the engine chooses (the compiled pass for compact kernels in a
        few features, the neighbour path where a compact support holds few samples, the dense
        path otherwise; never "binned"). "dense": blocks of queries against blocks of samples,
        distances by matrix products (BLAS). "neighbors": a neighbour tree finds the samples in
        each compact support or the k nearest (always taken by a compact kNN kernel).
        "compiled": a compiled (numba) pass over the samples within compact supports.
        "binned": linear binning and FFT convolution, in 1 to 3 features, an approximation
        whose error falls as ``(grid spacing / h)^2``, taken only when asked for. "streamed":
        the pass that runs on a GPU or other array library, taken on NumPy arrays too.
        "approximate": neighbours from k-means inverted lists built in ``fit``, the k nearest
        in the 12 lists of nearest centres re-ranked exactly, its recall measured on its first
        queries and shown by
        ``explain()``; never taken by "auto" (:doc:`/user_guide/retrieval`). In more than 15
        features and from 20,000 samples the exact neighbour index is a tiled scan whose indices
        equal scikit-learn's brute force. A path asked for where it cannot apply raises a
        ``ValueError`` saying why.
    n_jobs : int or None, default=None
        Threads for the engine: None means 1 unless a ``joblib.parallel_config`` says otherwise,
        -1 all cores (scikit-learn's convention).
    sample_weight_type : {"frequency", "prior"}, default="frequency"
        What ``sample_weight`` means to a bandwidth rule (the weights multiply the kernel
        either way). "frequency" (scikit-learn's meaning: integer weights are repeated rows):
        ``n = sum c`` and ``sigma_k^2 = sum_i c_i (x_ik - m_k)^2 / (sum c - 1)``, so the weights
        must sum to more than 1. "prior" (scipy's ``gaussian_kde(weights=c)``): Kish's effective
        size ``n = (sum c)^2 / sum c^2`` and ``sigma_k^2 = sum_i c_i (x_ik - m_k)^2 /
        (sum c - sum c^2 / sum c)``, unchanged when every weight is scaled.
    weights : {"uniform", "distance"} or callable, default="uniform"
        A factor ``g_i`` of the distance that multiplies the kernel, as scikit-learn's neighbour
        estimators' ``weights``: ``w_i(x*) = c_i K(x*, x_i) g_i / sum_j c_j K(x*, x_j) g_j``.
        "uniform": ``g = 1`` (the kernel alone). "distance": ``g_i = 1 / d(x*, x_i)``; where
        the query's neighbourhood holds samples at distance 0, those alone count, each with its
        kernel weight ``c_i K(0)`` (scikit-learn's rule: the limit of ``1 / d``). With the
        uniform kernel this is ``KNeighborsRegressor(weights="distance")`` (``n_neighbors``) or
        ``RadiusNeighborsRegressor(weights="distance")`` (a number ``bandwidth``); with another
        profile ``K_i / d_i`` multiplies the profile by the inverse distance (a kNN Epanechnikov
        kernel then weighs ``(1 - u_i^2) / d_i``). A callable takes the distances of each
        neighbourhood, as scikit-learn gives them (an array of shape (n_queries, n_neighbors)
        with ``n_neighbors``, otherwise an object array of one array per query), and returns
        ``g`` of the same shape, finite and ``>= 0``. The neighbourhood is the kernel's support:
        the k nearest samples, the samples within a compact profile's support, or every sample;
        distances as :meth:`kneighbors` gives them. Not with ``kernel="softmax"`` or
        ``bandwidth="cv"``; NumPy arrays only.
    metric_params : dict or None, default=None
        The metric's parameters (scikit-learn's name): ``{"V": (n_features,)}`` for
        "seuclidean" (the variances; default the training samples', ddof=1),
        ``{"VI": (n_features, n_features)}`` for "mahalanobis" (the inverse covariance,
        symmetric positive definite; default the training samples'), ``{"w": (n_features,)}``
        for "minkowski" (weights ``>= 0``, finite ``p``), keyword arguments for a callable
        metric. The defaults are fixed at fit, so the metric does not depend on the queries
        (scikit-learn's brute-force search pools queries and samples: give ``V``/``VI`` to
        match it).

    value_kernel : Kernel or None, default=None
        Output-adaptive ("self-localized") regression: each sample is also weighed by a kernel
        ``K_y`` of its target against the estimate at the query, iterated from the plain local
        mean ``f_0`` to a fixed point,

        .. math::

            f_{t+1}(x^*) = \\frac{\\sum_i K(x^*, x_i)\\, K_y(f_t(x^*), y_i)\\, y_i}
                                {\\sum_j K(x^*, x_j)\\, K_y(f_t(x^*), y_j)},

        a local mean with the product kernel ``K * K_y`` of the points ``(x, y)`` whose query is
        ``(x*, f_t(x*))`` (one engine pass per iteration, each query frozen once it moves less
        than ``tol``; :func:`localkit.engine.iterate`). It keeps edges that the plain local mean
        blurs (samples across a jump in ``y`` weigh little) and resists outliers, as the bilateral
        filter does for images. A distance ``Kernel`` of the targets (``bandwidth`` in the
        targets' units, or a rule resolved on them; several targets share it), e.g.
        ``Kernel("gaussian", bandwidth=0.3)``. Needs a fixed bandwidth or a rule for ``kernel``
        (no ``n_neighbors``, ``sample_neighbors``, ``weights`` or softmax), NumPy arrays.
        ``bandwidth="cv"`` selects the bandwidth of the plain local mean.
    max_iter : int, default=100
        The most iterations of the value kernel's fixed point; reaching it warns
        (:class:`~localkit.exceptions.LocalkitConvergenceWarning`, a ``ConvergenceWarning``).
    tol : float, default=1e-8
        A query stops when its estimate moves by less than ``tol`` (largest change over targets).
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass (``algorithm="binned"``; one int, or one per
        feature); by default the fewest whose error bound meets ``tolerance``.
    tolerance : float in (0, 1), optional
        The relative error accepted from the binned pass, against its bound ``8 (delta / h)^2``
        (``4 delta / h`` for the triangular, Laplacian and uniform profiles; ``delta`` the grid
        spacing, see :doc:`/user_guide/binned`). It sets the default grid (``1e-4`` when None);
        given, ``algorithm="auto"`` also takes the binned pass where its bound on that grid meets
        it (never otherwise). With ``bandwidth="cv"`` inside a ``Kernel`` of Gaussian factors (at
        most three continuous columns) and categorical factors, the search evaluates its
        leave-one-out loss on cell sums within it (:mod:`localkit.models.cv_scale`). With
        ``algorithm="approximate"`` and a kNN or compact kernel: the share of the true nearest
        samples the graph's search may miss, its breadth the least whose recall measured on the
        first queries, less two standard errors, is at least ``1 - tolerance``.

    Attributes
    ----------
    bandwidth_ : float or ndarray
        The bandwidth used (rules resolved).
    n_iter_ : int
        With ``value_kernel``: the iterations its fixed point took at the training points (in
        ``fit``; ``predict`` iterates at its queries alike); 1 without (one pass).
    value_kernel_ : Kernel
        With ``value_kernel``: the kernel of the targets as used (rule resolved, on the target
        columns of the augmented samples ``[X, y]``).
    sample_scale_ : ndarray of shape (n_samples,) or None
        The sample-point factors ``h_i`` (with ``sample_neighbors``).
    sample_weight_ : ndarray of shape (n_samples,) or None
        The weights ``c_i`` given to ``fit``.
    kernel_ : Kernel
        Its metric is the norm measured on the mapped coordinates ("euclidean" for
        "seuclidean" and "mahalanobis", "chebyshev" for ``p=inf``).
    X_fit_, y_fit_ : the training data.
    kernel_weights_ : ndarray of shape (n_kernels,)
        With a list ``kernel``: the mixture weights on the simplex (``kernel_`` is the sum), and
        ``loo_loss_`` their leave-one-out mean squared error.
    cv_results_ : dict
        With ``bandwidth="cv"``: ``"bandwidth"`` and ``"loo_loss"`` of the isotropic search; with
        ``"cv"`` inside a ``Kernel``: ``"bandwidths"`` (one row per point evaluated, the ``"cv"``
        columns in the order of the factors) and ``"loo_loss"``.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LocalMeanRegressor
    >>> X = np.linspace(0, 6, 200)[:, None]
    >>> reg = LocalMeanRegressor(bandwidth=0.3).fit(X, np.sin(X).ravel())
    >>> round(float(reg.predict([[1.5]])[0]), 2)
    0.95
    """

    _takes_sparse = True  # CSR X on the neighbour path (see "Sparse input")
    _parameter_constraints: dict = {**LocalMeanParams._parameter_constraints, "kernel": MIXABLE_KERNEL,
                                    **OUTPUT_ADAPTIVE_PARAMS}
    #: "cv" inside a Kernel and lists of kernels are learned by the leave-one-out of the local mean
    _kernel_cv = True

    def __init__(self, kernel="gaussian", bandwidth="scott", n_neighbors=None, sample_neighbors=None,
                 metric="euclidean", p=2, empty="nearest", algorithm="auto", n_jobs=None,
                 sample_weight_type="frequency", weights="uniform", metric_params=None, value_kernel=None,
                 max_iter=100, tol=1e-8, grid_size=None, tolerance=None):
        super().__init__(kernel=kernel, bandwidth=bandwidth, n_neighbors=n_neighbors,
                         sample_neighbors=sample_neighbors, metric=metric, p=p, empty=empty, algorithm=algorithm,
                         n_jobs=n_jobs, sample_weight_type=sample_weight_type, weights=weights,
                         metric_params=metric_params, grid_size=grid_size, tolerance=tolerance)
        self.value_kernel = value_kernel
        self.max_iter = max_iter
        self.tol = tol

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Store the training data and resolve the kernel. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0`` multiplies the kernel,
        ``f(x*) = sum_i c_i K_i y_i / sum_j c_j K_j`` (integer weights act as repeated samples,
        zero weights drop them). The rules "scott" and "silverman" take the weighted spread
        and size as ``sample_weight_type`` says (by default those of the repeated rows);
        "isj" bins with the weights, as KDEpy; "sj" (R's ``bw.SJ``) takes equal weights only;
        "cv" and the ``n_neighbors`` / ``sample_neighbors`` distances are taken unweighted.
        """
        X, y, backend = self._fit_data(X, y, sample_weight, multi_output=True, y_numeric=True, accept_sparse="csr")
        self._check_sparse_fit(X)
        y = backend.regression_target(y, X)  # finite floats of X's dtype
        Xm = self._fit_metric(X)  # the coordinates where the metric is a plain norm
        self._fit_sample_scales(Xm)
        self._fit_kernel(Xm, y, self.sample_weight_)
        self.X_fit_, self.y_fit_ = X, y
        self._bind(Xm, y)
        self._check_weights()
        self.n_iter_ = 1  # the plain local mean: one pass
        if self.value_kernel is not None:
            if not (isinstance(self.weights, str) and self.weights == "uniform"):
                raise ValueError(f"value_kernel multiplies the kernel; weights={self.weights!r} is not taken with it")
            Y = y.reshape(len(y), -1)
            self._keep("values", bind(self._fit_value_kernel(Xm, Y), np.concatenate([Xm, Y], axis=1),
                                      sample_weight=self.sample_weight_, options=self._engine_options()), Y)
            self.n_iter_ = self._value_fixed_point(Xm).n_iter
        return self

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The local mean of the training targets at each row of ``X`` (with ``value_kernel``,
        its fixed point)."""
        X = self._validate_queries(X)
        if self.value_kernel is not None:
            return self._value_fixed_point(X).state.reshape(len(X), *self.y_fit_.shape[1:])
        return self._local_sums(X).mean

    def loo_predict(self):
        """Leave-one-out predictions at the training points (each point's own weight dropped,
        and that of every other sample at the same point)."""
        check_is_fitted(self)
        if self.value_kernel is not None:
            raise ValueError("loo_predict: the leave-one-out of the plain local mean; with value_kernel the fixed "
                             "point is not left out sample by sample (set value_kernel=None)")
        return self._local_sums(None, exclude_self=True, queries_are_samples=True).mean

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.single_output = False
        return tags

    def _value_fixed_point(self, X):
        """The output-adaptive local mean's fixed point at the queries ``X`` (mapped coordinates)."""
        options = self._engine_options()
        return self._iterate_values(X, self._local_sums(X).mean.reshape(len(X), -1),
                                    lambda Q: self._kept_sums("values", Q, options=options).mean)
