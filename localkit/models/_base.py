"""What every local estimator shares: the kernel parameters, their validation, and the engine
options (empty-neighbourhood policy, algorithm, threads)."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.sparse import issparse
from sklearn.utils._array_api import get_namespace
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted


from .._params import (GRID_PARAMS, KERNEL_PARAMS, LOCAL_MEAN_METRIC_CONSTRAINT, N_NEIGHBORS_CONSTRAINT,
                       SAMPLE_WEIGHT_TYPE_CONSTRAINT, WEIGHTS_CONSTRAINT)
from .._validation import check_n_neighbors
from ..engine import EngineOptions, backend_of, bind, sparse_refusals
from ..engine import neighbors as nb
from ..kernels import Kernel
from ..kernels.bandwidth import RULES, spread
from ..kernels.bandwidth_matrix import full_bandwidth, is_full_bandwidth, matrix_map
from ..kernels.kernel import LINEAR_METRICS, NORM_METRICS, effective_metric, metric_map
from ..exceptions import BandwidthWarning, warn

FLOATS = [np.float64, np.float32]


def float_dtypes(*arrays):
    """``[float64, float32]`` of the arrays' namespace: NumPy's, or (under scikit-learn's
    ``array_api_dispatch``) PyTorch's or CuPy's, so that tensors stay on their device."""
    return backend_of(*arrays).floats(*arrays)


def check_sample_weight(sample_weight, X):
    """``sample_weight`` as a float array of shape ``(n_samples,)`` (a scalar: the same for all),
    finite, ``>= 0`` and not all zero; ``None`` stays ``None`` (unweighted)."""
    return backend_of(X).sample_weight(sample_weight, X)


def check_fit_in_memory(est, X, y="no_validation", **kwargs):
    """``fit``'s checks (:meth:`NumPyBackend.check_fit <localkit.engine.backends.NumPyBackend.check_fit>`)
    for an estimator that computes in memory: dask arrays are computed first, as scikit-learn's
    ``validate_data`` computes them. Returns ``X``, or ``(X, y)`` where ``y`` is given."""
    given = not isinstance(y, str)
    backend = backend_of(X, y) if given else backend_of(X)
    if backend.name == "dask":
        X, y = backend.host(X, y) if given else (backend.host(X), y)
        backend = backend_of(X)
    return backend.check_fit(est, X, y, **kwargs)


def check_precomputed(X, *, fit=True):
    """With ``metric="precomputed"``, ``X`` holds distances: ``>= 0``, and at ``fit`` the samples'
    distances to each other, a square matrix (queries have one column per training sample, which
    ``validate_data`` checks against ``n_features_in_``). scikit-learn refuses the same
    (``NearestNeighbors(metric="precomputed")``); a negative distance would otherwise be taken as
    its absolute value by the profiles of ``u^2``, a silent wrong answer."""
    if fit and X.shape[0] != X.shape[1]:
        raise ValueError(f"X must be the square (n_samples, n_samples) matrix of the samples' distances to each "
                         f"other with metric='precomputed'; got shape {tuple(X.shape)}")
    xp, _ = get_namespace(X)
    if X.shape[0] and bool(xp.any(X < 0)):
        raise ValueError(f"X holds negative distances (min {float(xp.min(X)):.3g}); metric='precomputed' takes "
                         "distances, every entry >= 0")
    return X


def frequency_rule(h, backend, d, sample_weight, rule="scott"):
    """A rule's bandwidth ``h`` for weights read as counts of repeated samples (scikit-learn's
    meaning): the rules' weighted form (``gaussian_kde``'s, ``n = (sum c)^2 / sum c^2`` and
    ``sigma^2 = sum c (x - m)^2 / (sum c - sum c^2 / sum c)``) rescaled to ``n = sum c`` and
    ``sigma^2 = sum c (x - m)^2 / (sum c - 1)``, the values on the rows repeated ``c_i`` times."""
    total, squares = backend.total(sample_weight), backend.total(sample_weight * sample_weight)
    if not total > 1:
        raise ValueError(f"bandwidth={rule!r} with sample_weight_type='frequency' reads sample_weight as counts of "
                         f"repeated samples, which must sum to more than 1 (got {total:g}); pass "
                         "sample_weight_type='prior' for weights of relative importance")
    effective = total * total / squares
    factor = (total / effective) ** (-1.0 / (d + 4)) * np.sqrt((total - squares / total) / (total - 1.0))
    return h * factor


def _is_default(given, default):
    """``given`` is the parameter's default (a number or a rule; arrays never are)."""
    return (isinstance(given, (str, Real)) and isinstance(default, (str, Real)) and not isinstance(given, bool)
            and type(given) is not np.ndarray and given == default)


#: a bandwidth more than this many times the data's spread weighs every sample about the same
WIDE = 3.0


def default_bandwidth(estimator):
    """The default of ``estimator``'s ``bandwidth`` parameter (its ``__init__``'s)."""
    import inspect

    parameter = inspect.signature(type(estimator).__init__).parameters.get("bandwidth")
    return None if parameter is None else parameter.default


def warn_far_bandwidth(h, X, sample_weight=None, *, tends_to="the global mean", default=False):
    """Warn (``UserWarning``) when a given bandwidth is far beyond the data's spread.

    With ``sigma_k`` the features' (weighted) standard deviations, ``r = sqrt(sum_k (sigma_k /
    h_k)^2)`` is the root mean square scaled distance ``u`` of the samples from their mean
    (``sqrt(2) r`` between two samples). Where ``r < 1 / WIDE`` (``h > 3 s`` for a scalar ``h``,
    ``s = sqrt(sum_k sigma_k^2)``), two samples lie on average within ``u = 0.47`` of each other,
    their Gaussian weights within ``exp(-1/9)`` of one another, and the fit is close to the global
    mean (diabetes, scaled, 5-fold R^2: 0.445 at ``h = 0.3 s``, 0.18 at ``s``, 0.004 at ``3 s``,
    -0.02 at ``h = 1`` = ``6.6 s``). A small bandwidth is not warned about: the spread cannot tell
    it from tight clusters far apart (data 1e4 apart with a bandwidth of 0.05 is a sound fit).
    ``tends_to`` names what the fit becomes (a local model: the global one); ``default``: the
    bandwidth is the estimator's default, not the caller's choice (the warning says so)."""
    with np.errstate(all="ignore"):
        sigma = spread(X, None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64))
        r = float(np.sqrt(np.sum((sigma / np.asarray(h, dtype=np.float64)) ** 2)))
    if np.isfinite(r) and 0 < r < 1.0 / WIDE:
        given = h if np.ndim(h) == 0 else np.asarray(h).tolist()
        which = " (the default)" if default else ""
        warn(BandwidthWarning(f"bandwidth={given}{which} is more than {WIDE:g} times the data's spread (the root mean "
                              "square distance of the samples to their mean: the warning's spread): every sample weighs "
                              f"about the same and the fit is close to {tends_to}; give a bandwidth on the data's "
                              "scale or a rule: bandwidth='scott' (from the data's spread) or 'cv'",
                              spread=float(np.sqrt(np.sum(sigma ** 2)))))


class KeptBindings:
    """Estimators that bind their training samples once, in ``fit``, and keep them (issue 36).

    ``_keep(name, binding, values)`` keeps a :class:`~localkit.engine.Binding` (from
    :func:`~localkit.engine.bind`) with ``values`` laid out for it once; ``_kept_sums(name,
    queries)`` is one engine pass over it, so that a ``predict`` or ``transform`` pays only for its
    queries. A pickle holds each kept binding and the array its values came from (stored once,
    beside the fitted attribute that holds the same array); their layout is rebuilt on load.
    Points that move during ``fit`` (codes being learned, blurring mean shift) are bound per step
    by design; what is fixed once ``fit`` returns is kept.
    """

    def _keep(self, name, binding, values=None):
        if "_kept" not in self.__dict__:
            self._kept = {}
        self._kept[name] = (binding, binding.prepare(values))
        return binding

    def _kept_sums(self, name, queries=None, *, options=None, **kwargs):
        """One pass of the binding ``name`` at ``queries`` (its samples for None), with other
        :class:`~localkit.engine.EngineOptions` if given (nothing rebuilt)."""
        binding, values = self._kept[name]
        if options is not None:
            binding = binding.using(options)
        return binding.sums(queries, values, **kwargs)

    def __getstate__(self):
        state = dict(super().__getstate__())  # object.__getstate__ returns the instance's own __dict__
        if "_kept" in state:
            state["_kept"] = {name: (binding, values.source) for name, (binding, values) in state["_kept"].items()}
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if "_kept" in self.__dict__:
            self._kept = {name: (binding, binding.prepare(values)) for name, (binding, values) in self._kept.items()}


class LocalKernelMixin(KeptBindings):
    """Kernel parameters ``kernel``, ``bandwidth``, ``n_neighbors``, ``metric`` and the engine
    options ``empty``, ``algorithm`` and ``n_jobs``; fitted: ``bandwidth_``, ``kernel_``.

    Subclasses call :meth:`_fit_kernel` in ``fit`` and :meth:`_local_sums` to evaluate.
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # X holds distances to the samples: cross-validation slices both axes (scikit-learn's tag)
        tags.input_tags.pairwise = getattr(self, "metric", None) == "precomputed"
        return tags

    def _fit_data(self, X, y, sample_weight, **kwargs):
        """``fit``'s checks on any backend (NumPy, tensors on a device, dask arrays on a cluster):
        ``(X, y, backend)``: the data validated (``kwargs``: those of scikit-learn's ``validate_data``),
        ``sample_weight_`` stored, and the backend, for the encoders of the targets."""
        backend = backend_of(X, y, sample_weight)
        X, y = backend.check_fit(self, X, y, **kwargs)
        self.sample_weight_ = backend.sample_weight(sample_weight, X)
        return X, y, backend

    def _fit_kernel(self, X, y=None, sample_weight=None):
        """Validate the kernel parameters on the training data and store ``kernel_`` (bandwidth
        rules weighted by ``sample_weight``, checked, as ``gaussian_kde(weights=...)`` weighs them)."""
        if isinstance(self.kernel, list):  # kernels to mix, weights learned (localkit.models.kernel_learning)
            return self._fit_kernel_mixture(X, y, sample_weight)
        if isinstance(self.kernel, Kernel):  # a Kernel instance carries its own bandwidths (the algebra)
            return self._fit_kernel_instance(X, sample_weight, y)
        check_n_neighbors(self.n_neighbors, X.shape[0], kernel=self.kernel)  # types: _parameter_constraints
        if self.metric == "precomputed":
            check_precomputed(X)
        metric, p = self._kernel_metric()
        self.bandwidth_ = self._choose_bandwidth(X, y, sample_weight)
        self.kernel_ = Kernel(self.kernel, bandwidth=self.bandwidth_, n_neighbors=self.n_neighbors,
                              metric=metric, p=p)
        return self.kernel_

    def _fit_kernel_instance(self, X, sample_weight=None, y=None):
        """``kernel_`` from a :class:`~localkit.Kernel` given as ``kernel`` (a product, a kernel on
        a group of columns, a categorical kernel, or a plain one): its ``features`` given by name
        mapped through ``feature_names_in_``, its rules resolved on its own columns of the samples
        (weighted by ``sample_weight``, as ``gaussian_kde(weights=...)``). It carries its own
        bandwidths and metric, so the estimator's ``bandwidth``, ``n_neighbors``,
        ``sample_neighbors``, ``metric`` and ``weights`` are refused unless left at their defaults
        (``bandwidth`` is then ignored). Its ``"cv"`` bandwidths are chosen jointly by leave-one-out
        (:func:`~localkit.models.kernel_learning.select_cv_bandwidths`; the search in ``cv_results_``)."""
        kern = self.kernel.with_feature_names(getattr(self, "feature_names_in_", None))
        backend = self._check_kernel_instance(kern, X, sample_weight)
        from .kernel_learning import has_cv

        if has_cv(kern):
            backend.require_in_memory("bandwidth='cv' inside a Kernel", "it leaves out every sample in turn; give "
                                      "numbers or rules")
        self.kernel_ = backend.resolved(kern, X, sample_weight)
        if has_cv(self.kernel_):
            self.kernel_ = self._select_kernel_cv(backend.host(X), y, sample_weight)
        self.bandwidth_ = self.kernel_.bandwidth
        return self.kernel_

    def _select_kernel_cv(self, X, y, sample_weight):
        """``kernel_`` with its ``"cv"`` bandwidths chosen jointly by the leave-one-out loss of the
        local mean (squared error; the Brier score of the one-hot labels for a classifier)."""
        from .kernel_learning import select_cv_bandwidths, squared_loss, values_of

        if not getattr(self, "_kernel_cv", False):
            raise ValueError(f"bandwidth='cv' inside kernel={self.kernel_!r} is chosen by the local means' exact "
                             f"leave-one-out (LocalMeanRegressor, LocalMeanClassifier, KernelDensity); give "
                             f"{type(self).__name__} numbers or rules in the kernel")
        if y is None:
            raise ValueError("bandwidth='cv' inside the kernel needs the targets y (leave-one-out error)")
        if len(X) < 3:
            raise ValueError(f"bandwidth='cv' needs at least 3 samples, got n_samples={len(X)}")
        values = values_of(self, y, X.dtype)
        options = EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs)
        weight = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        from .cv_scale import cell_squared_loss, takes_cells

        if takes_cells(self.kernel_, X.shape[1], getattr(self, "tolerance", None)):  # at scale (models.cv_scale)
            kernel, self.cv_results_ = select_cv_bandwidths(
                self.kernel_, X, cell_squared_loss(X, values, weight, self.tolerance), weight)
            return kernel
        kernel, self.cv_results_ = select_cv_bandwidths(
            self.kernel_, X, lambda K: squared_loss(K, X, values, weight, options), weight, kind="squared",
            values=values, options=options)
        return kernel

    def _fit_kernel_mixture(self, X, y, sample_weight):
        """``kernel_ = sum_k w_k K_k`` from ``kernel=[K_1, ..., K_K]``, with ``kernel_weights_ = w``
        on the simplex minimising the leave-one-out loss of the local mean (squared error; the
        log-loss for a classifier): :func:`~localkit.models.kernel_learning.learn_mixture`."""
        from sklearn.base import is_classifier

        from .kernel_learning import check_kernel_list, learn_mixture, mixture_kernel, values_of

        kernels = check_kernel_list(self.kernel)  # lists reach here from the estimators whose constraints take them
        if y is None:
            raise ValueError("kernel: a list of kernels learns its weights from the targets y (leave-one-out)")
        names = getattr(self, "feature_names_in_", None)
        kernels = [k.with_feature_names(names) for k in kernels]
        backend = None
        for k in kernels:
            backend = self._check_kernel_instance(k, X, sample_weight)
        host = backend.host(X)
        weight = None if sample_weight is None else np.asarray(backend.host(sample_weight), dtype=np.float64)
        kernels = [k.resolved(host, weight) for k in kernels]
        options = EngineOptions(algorithm=self.algorithm, n_jobs=self.n_jobs)
        kind = "log" if is_classifier(self) else "squared"
        self.kernel_weights_, self.loo_loss_ = learn_mixture(kernels, host, values_of(self, y, host.dtype), kind,
                                                             weight, options)
        self.kernel_ = mixture_kernel(kernels, self.kernel_weights_)
        self.bandwidth_ = self.kernel_.bandwidth
        return self.kernel_

    def _check_kernel_instance(self, kern, X, sample_weight):
        """A Kernel given as ``kernel`` carries its own bandwidths and metric: the estimator's
        overrides refused; arrays in memory for kernels on groups of columns. Returns the backend."""
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            raise ValueError("bandwidth='cv' selects one bandwidth; a Kernel given as kernel carries its own "
                             "(give numbers, rules or 'cv' in it: Kernel(..., bandwidth='cv'))")
        for name, default in (("n_neighbors", None), ("sample_neighbors", None), ("metric", "euclidean"),
                              ("metric_params", None), ("weights", "uniform")):
            value = getattr(self, name, default)
            if not (value is default or (isinstance(value, str) and value == default)):
                raise ValueError(f"{name}={value!r} cannot be combined with a Kernel given as kernel={kern!r}, which "
                                 f"carries its own bandwidths and metric; leave {name} at {default!r}")
        return backend_of(X, sample_weight)

    def _kernel_metric(self):
        """``(metric, p)`` of ``kernel_``: the estimator's metric, or the norm it reduces to on the
        coordinates that :meth:`_fit_metric` maps (:func:`~localkit.kernels.kernel.effective_metric`)."""
        return effective_metric(self.metric, getattr(self, "p", 2), getattr(self, "metric_params", None))

    def _fit_metric(self, X):
        """``X`` in the coordinates where the metric is a plain norm, and the map kept for the
        queries (``_metric_map``; None for the metrics the engine measures as they are).

        "seuclidean", "mahalanobis" and weighted "minkowski" are norms of a linear map of
        ``x* - x`` (:class:`~localkit.kernels.kernel.MetricMap`): mapping the samples once here,
        and each query on its way in, lets every path of the engine (dense, tree, compiled,
        device) measure them as the euclidean or minkowski norm it already has, instead of a
        new distance in each path."""
        self._kernel_metric()  # metric_params checked against the metric
        self.__dict__.pop("bandwidth_matrix_", None)
        if isinstance(self.kernel, str) and is_full_bandwidth(self.bandwidth):
            return self._fit_bandwidth_matrix(X)
        self._metric_map = metric_map(self.metric, getattr(self, "p", 2), getattr(self, "metric_params", None), X,
                                      getattr(self, "sample_weight_", None))
        if self._metric_map is None:
            return X
        if not isinstance(X, np.ndarray):
            raise ValueError(f"metric={self.metric!r} with these metric_params maps the coordinates at fit and "
                             "needs NumPy arrays")
        return self._metric_map.transform(X)

    def _fit_bandwidth_matrix(self, X):
        """A full bandwidth matrix ``H`` (``bandwidth`` "hpi", "hscv" or a (d, d) array):
        ``bandwidth_matrix_ = H``, and the samples mapped once by ``H^-1/2`` (each query on its way
        in), where the kernel has bandwidth 1: ``u^2 = dx^T H^-1 dx`` on every path of the engine."""
        for name, default in (("metric", "euclidean"), ("metric_params", None), ("n_neighbors", None),
                              ("sample_neighbors", None)):
            value = getattr(self, name, default)
            if not (value is default or (isinstance(value, str) and value == default)):
                raise ValueError(f"bandwidth={self.bandwidth!r} is a full bandwidth matrix (u^2 = dx^T H^-1 dx); it "
                                 f"cannot be combined with {name}={value!r} (leave it at {default!r})")
        if self.kernel == "softmax":
            raise ValueError(f"bandwidth={self.bandwidth!r} is a full bandwidth matrix of a distance kernel; "
                             "kernel='softmax' takes a temperature")
        if not isinstance(X, np.ndarray):
            raise ValueError(f"bandwidth={self.bandwidth!r} maps the coordinates at fit and needs NumPy arrays")
        self.bandwidth_matrix_ = full_bandwidth(self.bandwidth, X, sample_weight=getattr(self, "sample_weight_", None))
        self._metric_map = matrix_map(self.bandwidth_matrix_)
        return self._metric_map.transform(X)

    def _choose_bandwidth(self, X, y, sample_weight=None):
        """The bandwidth for ``kernel_``: a number, a per-feature array, a rule resolved on X, or
        ``"cv"``: chosen by leave-one-out (:mod:`localkit.models.selection`)."""
        if self.kernel == "softmax":
            Kernel("softmax", bandwidth=self.bandwidth)  # validates the temperature
            return float(self.bandwidth)
        if is_full_bandwidth(self.bandwidth):
            return 1.0  # the samples come mapped by H^-1/2 (_fit_bandwidth_matrix)
        backend = backend_of(X, sample_weight)
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            from .selection import select_bandwidth  # exact leave-one-out; sets cv_results_

            backend.require_in_memory("bandwidth='cv'", "it leaves out every sample in turn; give a number or a rule")
            return select_bandwidth(self, X, y)
        rule = isinstance(self.bandwidth, str) and self.bandwidth in RULES
        if rule and getattr(self, "n_neighbors", None) is not None:
            return 1.0  # the span is the k-th neighbour's distance: the rule would go unused
        metric = self._kernel_metric()[0]
        if rule and not (isinstance(metric, str) and metric in NORM_METRICS):
            raise ValueError(f"bandwidth={self.bandwidth!r} is a per-feature rule and needs coordinates; with "
                             f"metric={self.metric!r} give a scalar bandwidth or n_neighbors")
        h = backend.bandwidth(Kernel(self.kernel, bandwidth=self.bandwidth), X, sample_weight)
        if rule and sample_weight is not None and getattr(self, "sample_weight_type", "prior") == "frequency":
            return frequency_rule(h, backend, X.shape[1], sample_weight, self.bandwidth)
        # a bandwidth far beyond the data's spread: warned where the fit tends to the global mean, and
        # wherever it is the estimator's default (a local model then silently becomes the global one);
        # not with n_neighbors (the span is the k-th neighbour's distance), nor sample_neighbors (h multiplies h_i)
        default = _is_default(self.bandwidth, default_bandwidth(self))
        if (not rule and isinstance(X, np.ndarray) and X.shape[0] > 1 and metric in NORM_METRICS
                and getattr(self, "sample_scale_", None) is None and getattr(self, "n_neighbors", None) is None
                and (default or self._wide_bandwidth_tends_to_the_mean())):
            warn_far_bandwidth(h, X, sample_weight, default=default, tends_to="the global mean"
                               if self._wide_bandwidth_tends_to_the_mean() else "the global model")
        return h

    def _wide_bandwidth_tends_to_the_mean(self):
        """True where a bandwidth far beyond the data's spread turns the fit into the global mean
        (local means; :func:`warn_far_bandwidth` warns then). A local polynomial of degree >= 1
        tends to the global polynomial fit, local PCA to the global PCA: sound fits, no warning
        (statsmodels' ``KernelReg(bw="cv_ls")`` picks h ~ 1e5 on diabetes' bmi, a straight line)."""
        return True

    def _fit_sample_scales(self, X):
        """``sample_scale_``: the sample-point factors ``h_i`` (distance of sample ``i`` to its
        ``sample_neighbors``-th nearest other sample), or None. Call before :meth:`_fit_kernel`,
        whose ``bandwidth="cv"`` search keeps them fixed."""
        k = getattr(self, "sample_neighbors", None)
        if k is None:
            self.sample_scale_ = None
            return None
        from .selection import sample_point_scales

        backend_of(X).require_in_memory("sample_neighbors", "it needs every sample's own neighbours; fit on NumPy "
                                        "arrays or use a fixed bandwidth or n_neighbors")
        check_n_neighbors(k, len(X) - 1, "sample_neighbors")
        if self.metric == "precomputed":
            check_precomputed(X)
        if self.n_neighbors is not None:
            raise ValueError("sample_neighbors scales a fixed bandwidth per sample; it cannot be combined "
                             "with n_neighbors")
        self.sample_scale_ = sample_point_scales(X, k)
        return self.sample_scale_

    def _bind(self, X, values):
        """Bind ``kernel_`` to the training samples ``X`` and lay out their ``values`` once
        (centring, scaling, sample weights; indexes on first use): every later pass pays only for
        its queries. Call at the end of ``fit``. The engine options are read at each pass, so
        ``set_params(empty=..., n_jobs=...)`` after ``fit`` applies, as scikit-learn's neighbours
        read theirs at query time."""
        from .kernel_learning import loo_groups  # rows sharing levels are distinct observations

        self._keep("samples", bind(self.kernel_, X, sample_weight=getattr(self, "sample_weight_", None),
                                   sample_scale=self.sample_scale_, options=self._engine_options(),
                                   twins=loo_groups(self.kernel_, X.shape[0]) if self.kernel_.composite else None),
                   values)

    @property
    def _bound(self):
        """The :class:`~localkit.engine.Binding` of the training samples, kept from ``fit``."""
        return self._kept["samples"][0]

    @property
    def _bound_values(self):
        return self._kept["samples"][1]

    def _engine_options(self):
        return EngineOptions(empty=self.empty, algorithm=self.algorithm, n_jobs=self.n_jobs,
                             grid_size=getattr(self, "grid_size", None), tolerance=getattr(self, "tolerance", None))

    def _local_sums(self, X, *, exclude_self=False, queries_are_samples=False):
        """One engine pass at the queries ``X`` over the training samples (weighted by
        ``sample_weight_``, which multiplies the kernel) and their values, bound in ``fit``."""
        binding = self._bound.using(self._engine_options())
        queries = None if queries_are_samples else X
        weights = getattr(self, "weights", "uniform")
        if isinstance(weights, str) and weights == "uniform":
            return binding.sums(queries, self._bound_values, exclude_self=exclude_self)
        # the kernel times a factor of the distance (scikit-learn's weights): the engine's neighbourhoods
        return nb.caller_weighted_sums(self._host_bound(f"weights={weights!r}", binding), queries,
                                       self._bound_values, weights, exclude_self=exclude_self)

    def _host_bound(self, what, binding=None):
        """The :class:`~localkit.engine.BoundKernel` of samples in host memory, for the neighbour
        searches that scikit-learn's neighbours offer (``ValueError`` on dask or device arrays)."""
        bound = (self._bound if binding is None else binding).bound
        if bound is None or not bound.on_host:
            raise ValueError(f"{what} searches neighbours on the host: fit on NumPy arrays")
        return bound

    def _fitted_sparse(self):
        """True when ``fit`` bound sparse samples (its queries may then be sparse too)."""
        return bool(getattr(getattr(getattr(self, "_bound", None), "bound", None), "sparse", False))

    def _validate_queries(self, X):
        X = backend_of(X).check_queries(self, X, accept_sparse="csr" if self._fitted_sparse() else False)
        if getattr(self, "metric", None) == "precomputed":
            check_precomputed(X, fit=False)
        if getattr(self, "_metric_map", None) is not None:  # the coordinates of the fit (_fit_metric)
            X = self._metric_map.transform(X)
        return X


#: ``kernel`` of the local mean estimators: a name, a Kernel, or a list of Kernels to mix
MIXABLE_KERNEL = KERNEL_PARAMS["kernel"] + [Kernel, list]


class LocalMeanParams(LocalKernelMixin):
    """The parameters of the local-mean estimators (regression and classification alike), and
    scikit-learn's neighbour queries on them (:meth:`kneighbors`, :meth:`radius_neighbors`)."""

    _parameter_constraints: dict = {**KERNEL_PARAMS, "kernel": KERNEL_PARAMS["kernel"] + [Kernel],
                                    "sample_neighbors": N_NEIGHBORS_CONSTRAINT,
                                    "metric": LOCAL_MEAN_METRIC_CONSTRAINT,
                                    "p": [Interval(Real, 1, None, closed="both")],  # inf: chebyshev
                                    "sample_weight_type": SAMPLE_WEIGHT_TYPE_CONSTRAINT,
                                    "weights": WEIGHTS_CONSTRAINT, "metric_params": [dict, None], **GRID_PARAMS}

    def __init__(self, kernel="gaussian", bandwidth="scott", n_neighbors=None, sample_neighbors=None,
                 metric="euclidean", p=2, empty="nearest", algorithm="auto", n_jobs=None,
                 sample_weight_type="frequency", weights="uniform", metric_params=None, grid_size=None,
                 tolerance=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.sample_neighbors = sample_neighbors
        self.metric = metric
        self.p = p
        self.empty = empty
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.sample_weight_type = sample_weight_type
        self.weights = weights
        self.metric_params = metric_params
        self.grid_size = grid_size
        self.tolerance = tolerance

    def _sparse_refusals(self):
        """Why these parameters cannot take sparse ``X``: reasons naming the parameters (empty: they can).

        Sparse samples take the engine's neighbour path only
        (:func:`~localkit.engine.planner.sparse_refusals`): a compact profile with ``n_neighbors``
        or with a number ``bandwidth`` (a radius), a metric that scikit-learn's brute-force search
        measures on CSR matrices; what maps, scales or resolves dense coordinates is refused."""
        if isinstance(self.kernel, (Kernel, list)):
            return ["kernel: a Kernel instance (or a list of them) resolves its bandwidths on dense columns; give the "
                    "profile's name"]
        reasons = []
        if self.metric in LINEAR_METRICS or self.metric_params is not None:
            reasons.append(f"metric={self.metric!r} with metric_params={self.metric_params!r}: maps dense "
                           "coordinates at fit")
        if self.sample_neighbors is not None:
            reasons.append(f"sample_neighbors={self.sample_neighbors}: per-sample bandwidths are not taken on "
                           "sparse X")
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            reasons.append("bandwidth='cv': the leave-one-out search takes dense X")
        if reasons:
            return reasons
        metric, p = self._kernel_metric()
        rule = isinstance(self.bandwidth, str)
        bandwidth = 1.0 if rule and self.n_neighbors is not None else self.bandwidth
        kern = Kernel(self.kernel, bandwidth=bandwidth, n_neighbors=self.n_neighbors, metric=metric, p=p)
        return sparse_refusals(kern, self.algorithm)

    def _check_sparse_fit(self, X):
        """The parameters checked for sparse ``X`` before anything is computed: a ``ValueError``
        naming each one that needs dense ``X``."""
        if not issparse(X):
            return
        refused = self._sparse_refusals()
        if refused:
            raise ValueError(f"X is a sparse matrix, which {type(self).__name__} takes on the engine's neighbour "
                             "path only (a compact kernel with n_neighbors or a number bandwidth): "
                             + "; ".join(refused) + ". Or pass X.toarray() where the dense array fits in memory")

    #: whether ``fit`` takes sparse X (where the parameters allow: :meth:`_sparse_refusals`)
    _takes_sparse = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        try:  # sparse X where the parameters take it (scikit-learn's tag; its checks then fit sparse X)
            tags.input_tags.sparse = self._takes_sparse and not self._sparse_refusals()
        except (TypeError, ValueError):  # parameters not validated yet: fit says what is wrong
            tags.input_tags.sparse = False
        return tags

    def _check_weights(self):
        """What ``weights`` other than "uniform" needs, checked at fit: a distance kernel, samples
        in host memory, and no leave-one-out bandwidth search (which scores the kernel alone)."""
        if isinstance(self.weights, str) and self.weights == "uniform":
            return
        if self.kernel == "softmax":
            raise ValueError(f"weights={self.weights!r} multiplies a distance kernel; kernel='softmax' has none")
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            raise ValueError(f"bandwidth='cv' scores the kernel alone; it cannot be combined with "
                             f"weights={self.weights!r} (give a bandwidth, a rule or n_neighbors)")
        self._host_bound(f"weights={self.weights!r}")

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The ``n_neighbors`` nearest training samples of each query, as scikit-learn's
        ``KNeighborsMixin.kneighbors``.

        Parameters
        ----------
        X : array or sparse matrix of shape (n_queries, n_features), or None
            The queries (distances to the training samples with ``metric="precomputed"``; sparse
            only for an estimator fitted on sparse ``X``, whose search is brute force on CSR). None:
            the training samples, each without itself (where more samples than ``n_neighbors``
            share its point, the first neighbour is dropped instead, as scikit-learn does).
        n_neighbors : int or None
            How many; None takes the estimator's ``n_neighbors`` (which must then be set).
        return_distance : bool, default=True

        Returns
        -------
        neigh_dist : ndarray of shape (n_queries, n_neighbors)
            Distances ``d(x*, x_i)`` in the estimator's metric, nearest first (with a per-feature
            ``bandwidth_`` array, measured on the features divided by it).
        neigh_ind : ndarray of shape (n_queries, n_neighbors)
            Indices into the training samples.
        """
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if k is None:
            raise ValueError("n_neighbors must be given: this estimator has a fixed bandwidth (n_neighbors=None)")
        if isinstance(k, bool) or not isinstance(k, Integral):
            raise TypeError(f"n_neighbors must be an integer, got {k!r}")
        if k < 1:
            raise ValueError(f"n_neighbors must be >= 1, got {k}")
        bound = self._host_bound("kneighbors")
        queries = None if X is None else self._validate_queries(X)
        n_fit = bound.n_samples
        limit = n_fit - 1 if X is None else n_fit
        if k > limit:
            raise ValueError(f"Expected n_neighbors <= n_samples_fit{' - 1 with X=None' if X is None else ''}, but "
                             f"n_neighbors = {k}, n_samples_fit = {n_fit}")
        dist, idx = bound.kneighbors(queries, k, exclude_self=X is None)
        return (dist, idx) if return_distance else idx

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """The graph of :meth:`kneighbors`, as scikit-learn's ``KNeighborsMixin.kneighbors_graph``:
        a CSR matrix of shape ``(n_queries, n_samples_fit)`` with 1 (``mode="connectivity"``) or
        the distance (``mode="distance"``) at each query's ``n_neighbors`` nearest training samples
        (``X=None``: the training samples, each without itself)."""
        from .graph import GRAPH_MODES, neighbors_csr

        if not (isinstance(mode, str) and mode in GRAPH_MODES):
            raise ValueError(f"mode must be one of {sorted(GRAPH_MODES)}, got {mode!r}")
        dist, idx = self.kneighbors(X, n_neighbors, return_distance=True)
        return neighbors_csr(dist, idx, self._host_bound("kneighbors_graph").n_samples, mode)

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """The training samples within ``radius`` of each query (``d <= radius``), as
        scikit-learn's ``RadiusNeighborsMixin.radius_neighbors``.

        Parameters
        ----------
        X : array or sparse matrix of shape (n_queries, n_features), or None
            The queries (sparse only for an estimator fitted on sparse ``X``); None: the
            training samples, each without itself.
        radius : float or None
            ``>= 0``; None takes the estimator's scalar ``bandwidth_`` (the support of a compact
            kernel, the radius of ``kernel="uniform"``).
        return_distance : bool, default=True
        sort_results : bool, default=False
            Nearest first within each query (needs ``return_distance=True``).

        Returns
        -------
        neigh_dist : ndarray of shape (n_queries,) of arrays
            The distances (as in :meth:`kneighbors`).
        neigh_ind : ndarray of shape (n_queries,) of arrays
            Their indices into the training samples.
        """
        check_is_fitted(self)
        if radius is None:
            if self.n_neighbors is not None or np.ndim(self.bandwidth_) != 0:
                raise ValueError("radius must be given: this estimator has no scalar radius "
                                 f"(n_neighbors={self.n_neighbors}, bandwidth_ of shape {np.shape(self.bandwidth_)})")
            radius = float(self.bandwidth_)
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True")
        bound = self._host_bound("radius_neighbors")
        queries = None if X is None else self._validate_queries(X)
        dist, idx = bound.radius_neighbors(queries, radius, exclude_self=X is None, sort_results=sort_results)
        return (dist, idx) if return_distance else idx
