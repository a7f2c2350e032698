"""The localization kernel: a profile of a scaled distance, or the softmax similarity kernel.

``K(x*, x) = k(u)`` with ``u = d(x*, x) / h`` for a profile ``k`` (see
:mod:`localkit.kernels.profiles`), or ``K(x*, x) = exp(<x*, x> / h)`` for ``name="softmax"``
(the kernel of attention and of modern Hopfield networks, ``h`` the temperature).

A kernel produces *log-weights* for a block of queries against a block of samples; the engine
streams those blocks. ``Kernel(...)(X, Y)`` gives the dense matrix for small inputs and plots.
"""
from __future__ import annotations

import numbers

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial.distance import cdist

from .._validation import check_points
from .bandwidth import resolve_bandwidth
from .profiles import get_profile

#: Norms of ``x* - x`` (translation invariant, homogeneous: the engine centres and scales by ``h``)
NORM_METRICS = ("euclidean", "manhattan", "chebyshev", "minkowski")
#: Also accepted (besides a callable ``metric(a, b) -> float``): distances the engine takes as
#: they are, ``u = d(x*, x) / h`` with a scalar ``h`` ("precomputed": the inputs are distances)
METRICS = NORM_METRICS + ("cosine", "precomputed")
#: Metrics that are the euclidean norm of a linear map of ``x* - x`` (scikit-learn's names, their
#: matrices in ``metric_params``): the estimators map the coordinates once, at fit, and measure
#: euclidean distances there (:func:`metric_map`), so that every path of the engine takes them
LINEAR_METRICS = ("seuclidean", "mahalanobis")


class Kernel:
    """A localization kernel ``K(x*, x) = k(d(x*, x) / h)``.

    Parameters
    ----------
    name : str, default="gaussian"
        A profile of :mod:`localkit.kernels.profiles` (gaussian, epanechnikov, tricube,
        biweight, triweight, triangular, uniform, cosine, laplacian, cauchy) or ``"softmax"``
        for ``exp(<x*, x> / h)``.
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
        ``h``. An array gives a diagonal metric ``u^2 = sum_k (dx_k / h_k)^2``; a rule name
        is resolved on the samples (see :mod:`localkit.kernels.bandwidth`): the normal-reference
        rules "scott" and "silverman", the plug-in rules "isj" (KDEpy's improved Sheather-Jones)
        and "sj" (R's ``bw.SJ``), the last two per feature. For the Gaussian
        profile ``h`` is the standard deviation. Ignored when ``n_neighbors`` is set.
    n_neighbors : int or None, default=None
        Adaptive (balloon) bandwidth: ``h(x*)`` is the distance from ``x*`` to its k-th
        nearest sample. With the uniform profile this is exactly k-nearest-neighbours.
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski", "cosine", "precomputed"} or callable, \
            default="euclidean"
        The distance ``d``. Norms (the first four; "minkowski" with ``p``) take any bandwidth;
        "cosine" (``1 - cos`` of the angle), a callable ``metric(a, b) -> float`` and
        "precomputed" (queries and samples given as distances to the samples, as in
        scikit-learn) take a scalar bandwidth, or ``n_neighbors``.
    p : float, default=2
        The power of the "minkowski" metric, ``d = (sum_k |dx_k|^p)^(1/p)``, ``p >= 1``;
        ``p=inf`` is its limit ``max_k |dx_k|``, the "chebyshev" metric (``metric`` becomes that).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import Kernel
    >>> K = Kernel("epanechnikov", bandwidth=2.0)
    >>> K(np.zeros((1, 1)), np.array([[0.0], [1.0], [3.0]])).round(3)
    array([[1.  , 0.75, 0.  ]])
    """

    def __init__(self, name: str = "gaussian", bandwidth: float | str | np.ndarray = 1.0,
                 n_neighbors: int | None = None, metric: str | Callable = "euclidean", p: float = 2):
        self.name = name
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.p = p
        self._validate()

    # -- description ---------------------------------------------------------------------
    def _validate(self):
        self.is_softmax = self.name == "softmax"
        self.profile = None if self.is_softmax else get_profile(self.name)
        if not callable(self.metric) and self.metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)} or a callable, got {self.metric!r}")
        if isinstance(self.p, bool) or not isinstance(self.p, numbers.Real) or not (1 <= self.p <= np.inf):
            raise ValueError(f"p (the power of the minkowski metric) must be a number >= 1 (inf: chebyshev), "
                             f"got {self.p!r}")
        if self.metric == "minkowski" and self.p == np.inf:  # the limit p -> inf, by its own name (one path)
            self.metric = "chebyshev"
        if not self.norm_metric and not isinstance(self.bandwidth, numbers.Real) and self.n_neighbors is None:
            raise ValueError(f"metric={self.metric!r} takes a scalar bandwidth (distances are not scaled per "
                             f"feature, and rules need coordinates), got bandwidth={self.bandwidth!r}")
        if self.n_neighbors is not None:
            if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral):
                raise TypeError(f"n_neighbors must be an integer or None, got {self.n_neighbors!r}")
            if self.n_neighbors < 1:
                raise ValueError(f"n_neighbors must be >= 1, got {self.n_neighbors}")
            if self.is_softmax:
                raise ValueError("n_neighbors is a distance-based bandwidth; the softmax kernel has none")
        if self.is_softmax:
            if self.metric != "euclidean":
                raise ValueError("the softmax kernel uses the inner product; metric must stay 'euclidean'")
            if isinstance(self.bandwidth, np.ndarray) and self.bandwidth.ndim == 0:  # a 0-d array is a number
                self.bandwidth = self.bandwidth.item()
            if not isinstance(self.bandwidth, numbers.Real) or isinstance(self.bandwidth, bool):
                raise ValueError(
                    f"bandwidth of the softmax kernel is a positive temperature, got {self.bandwidth!r}"
                )
        if isinstance(self.bandwidth, numbers.Real) and not isinstance(self.bandwidth, bool):
            if not np.isfinite(self.bandwidth) or self.bandwidth <= 0:
                raise ValueError(f"bandwidth must be finite and > 0, got {self.bandwidth!r}")

    @property
    def norm_metric(self):
        """True for the norms of ``x* - x``; False for cosine, callables and precomputed distances."""
        return not callable(self.metric) and self.metric in NORM_METRICS

    @property
    def scipy_metric(self):
        """``(metric, kwargs)`` for :func:`scipy.spatial.distance.cdist` (and scikit-learn)."""
        if self.metric == "minkowski":
            return "minkowski", {"p": float(self.p)}
        return {"manhattan": "cityblock"}.get(self.metric, self.metric) if not callable(self.metric) else self.metric, {}

    @property
    def compact(self):
        """True when the profile vanishes outside ``u <= 1``."""
        return self.profile is not None and self.profile.compact

    @property
    def name_(self):
        return self.name if self.is_softmax else self.profile.name

    def __repr__(self):
        args = [repr(self.name_), f"bandwidth={self.bandwidth!r}"]
        if self.n_neighbors is not None:
            args.append(f"n_neighbors={self.n_neighbors}")
        if self.metric != "euclidean":
            args.append(f"metric={self.metric!r}")
        if self.metric == "minkowski":
            args.append(f"p={self.p!r}")
        return f"Kernel({', '.join(args)})"

    # -- binding to samples ------------------------------------------------------------
    def resolve_bandwidth(self, samples, sample_weight=None):
        """The bandwidth as a float or per-feature array, rules resolved on ``samples`` (weighted
        by ``sample_weight`` if given)."""
        return resolve_bandwidth(self.bandwidth, samples, sample_weight=sample_weight)

    def scale(self, points, h):
        """Points in the kernel's coordinates: divided by ``h`` (distance kernels)."""
        if self.is_softmax:
            return points
        # in float64: a bandwidth beyond float32's range must not become 0 or inf first
        with np.errstate(over="ignore", under="ignore"):
            return (points / np.asarray(h, dtype=np.float64)).astype(points.dtype, copy=False)

    def log_weights(self, Q, X, *, q_sq=None, x_sq=None, q_scale=None, s_scale=None, temperature=1.0,
                    exact=False, u2_exponent=0, fold_offset=False):
        """Log-weights of a block, ``L`` and a per-query offset ``c`` with ``log K = L + c``.

        ``Q`` (b_q, d) and ``X`` (b_s, d) are in scaled coordinates (see :meth:`scale`);
        ``q_sq`` and ``x_sq`` their squared norms (computed if not given). ``q_scale`` (b_q,)
        and ``s_scale`` (b_s,) are extra per-query / per-sample bandwidth factors
        (``u = d / (h q_scale_i s_scale_j)``). The offset ``c`` collects terms that are
        constant along a row, so that the engine's normalisation never computes them: for
        the Gaussian, ``-|q|^2 / 2`` cancels from ``exp(q.x - |x|^2 / 2)`` after
        normalisation, which turns the whole block into one matrix product.

        ``exact=True`` forms ``u^2`` from differences instead of the matrix product (no
        cancellation far from the origin), scaled by ``2^u2_exponent`` (coordinates stored
        divided by ``2^(u2_exponent / 2)``, for extreme bandwidths). ``fold_offset=True`` puts
        the Gaussian's row term into the same matrix product (one more column), so that ``L``
        is ``log K`` itself (at most 0 for every distance kernel) and the offset is 0.
        """
        zero = np.zeros(len(Q), dtype=Q.dtype)
        if self.is_softmax:
            L = (Q / Q.dtype.type(temperature)) @ X.T
            return L, zero
        # a zero per-point bandwidth (duplicates) needs distance 0 exactly: differences, not products
        degenerate = any(s is not None and not np.all(s > 0) for s in (q_scale, s_scale))
        if exact or degenerate or self.metric != "euclidean" or self.profile.exact_distance:
            u2 = exact_sq_distances(Q, X, self)
            self._rescale(u2, q_scale, s_scale)
            L, c = self.profile.log_k_scaled(u2, u2_exponent)
            return L, zero + Q.dtype.type(c)
        if q_sq is None:
            q_sq = np.einsum("ij,ij->i", Q, Q)
        if x_sq is None:
            x_sq = np.einsum("ij,ij->i", X, X)
        if self.profile.log_linear and s_scale is None and (q_scale is None or np.all(q_scale > 0)):
            # one matrix product: [q, -1/2] / h_q^2 . [x, |x|^2]  =  (q.x - |x|^2 / 2) / h_q^2
            # (folded: [q, -1/2, -|q|^2/2] / h_q^2 . [x, |x|^2, 1] = -|q - x|^2 / (2 h_q^2))
            d = Q.shape[1]
            width = d + 2 if fold_offset else d + 1
            Qa = np.empty((len(Q), width), dtype=Q.dtype)
            Qa[:, :d], Qa[:, d] = Q, -0.5
            Xa = np.empty((len(X), width), dtype=Q.dtype)
            Xa[:, :d], Xa[:, d] = X, x_sq
            offset = -0.5 * q_sq
            if fold_offset:
                Qa[:, d + 1], Xa[:, d + 1] = offset, 1.0
            if q_scale is not None:
                inv = (1.0 / (q_scale * q_scale)).astype(Q.dtype, copy=False)
                Qa *= inv[:, None]
                offset = offset * inv
            return Qa @ Xa.T, (zero if fold_offset else offset)
        u2 = Q @ X.T
        u2 *= -2.0
        u2 += q_sq[:, None]
        u2 += x_sq
        np.maximum(u2, 0.0, out=u2)
        self._rescale(u2, q_scale, s_scale)
        return self.profile.log_k(u2), zero

    @staticmethod
    def _rescale(u2, q_scale, s_scale):
        if q_scale is None and s_scale is None:
            return
        with np.errstate(divide="ignore", invalid="ignore"):
            if q_scale is not None:
                u2 /= (q_scale * q_scale)[:, None]
            if s_scale is not None:
                u2 /= s_scale * s_scale
        # a zero per-point bandwidth (duplicates): distance 0 counts fully, others not at all
        np.nan_to_num(u2, copy=False, nan=0.0, posinf=np.inf)

    # -- dense evaluation --------------------------------------------------------------
    def __call__(self, X: ArrayLike, Y: ArrayLike | None = None) -> np.ndarray:
        """The dense kernel matrix ``K[i, j] = K(X_i, Y_j)`` (``Y`` defaults to ``X``).

        Rules and kNN bandwidths are resolved on ``Y``, the samples. Meant for small inputs
        and plots; the engine never forms this matrix for large ones.
        """
        X = check_points(X, "X")
        Y = X if Y is None else check_points(Y, "Y", n_features=X.shape[1])
        h = self.resolve_bandwidth(Y)
        if self.is_softmax:
            return np.exp(X @ Y.T / h)
        # exact distances (small inputs): the k-th neighbour then sits exactly at u = 1
        metric, kwargs = self.scipy_metric
        if self.metric == "precomputed":
            D = X / (1.0 if self.n_neighbors is not None else h)
        elif self.norm_metric:
            D = cdist(self.scale(X, h), self.scale(Y, h), metric=metric, **kwargs)
        else:
            D = cdist(X, Y, metric=metric, **kwargs) / (1.0 if self.n_neighbors is not None else h)
        u2 = D * D
        if self.n_neighbors is not None:
            if self.n_neighbors > len(Y):
                raise ValueError(f"n_neighbors must be <= n_samples={len(Y)}, got {self.n_neighbors}")
            self._rescale(u2, np.partition(D, self.n_neighbors - 1, axis=1)[:, self.n_neighbors - 1], None)
        return np.exp(self.profile.log_k(u2))


def exact_sq_distances(Q, X, kernel):
    """Squared distances of ``kernel``'s metric from coordinate differences (no cancellation far
    from the origin); for "precomputed", ``Q`` holds the distances themselves."""
    if kernel.metric == "precomputed":
        D = np.asarray(Q, dtype=np.float64)
        return (D * D).astype(Q.dtype, copy=False)
    if kernel.metric == "euclidean":
        u2 = cdist(Q, X, metric="sqeuclidean")
    else:
        metric, kwargs = kernel.scipy_metric
        D = cdist(Q, X, metric=metric, **kwargs)
        u2 = D * D
    with np.errstate(over="ignore"):  # a float32 distance^2 beyond 3.4e38 is inf: a zero weight, as it should
        return u2.astype(Q.dtype, copy=False)


# -- metrics that are norms of a linear map: reduced to a norm on mapped coordinates, once -----------
#: the parameters each metric takes in ``metric_params`` (scikit-learn's names)
METRIC_PARAMS = {"seuclidean": ("V",), "mahalanobis": ("VI",), "minkowski": ("w",)}


def effective_metric(metric, p=2, metric_params=None):
    """``(metric, p)`` of the :class:`Kernel` that measures ``metric`` on the coordinates that
    :func:`metric_map` gives: "seuclidean" and "mahalanobis" are the euclidean norm of a linear
    map of ``x* - x``, weighted "minkowski" is the plain one of a diagonal map, and "minkowski"
    with ``p=inf`` is "chebyshev"; a callable gets ``metric_params`` as keyword arguments, as
    scikit-learn passes them."""
    params = dict(metric_params or {})
    if callable(metric):
        if params:
            import functools

            return functools.partial(metric, **params), p
        return metric, p
    allowed = METRIC_PARAMS.get(metric, ())
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"metric_params for metric={metric!r} takes "
                         f"{'the keys ' + str(list(allowed)) if allowed else 'no parameters'}, got {unknown}")
    if metric in LINEAR_METRICS:
        return "euclidean", 2
    if metric == "minkowski" and p == np.inf:
        if "w" in params:
            raise ValueError("metric_params={'w': ...} weighs a minkowski metric of finite p; with p=inf give "
                             "the weights as a scaling of the features")
        return "chebyshev", 2
    return metric, p


class MetricMap:
    """The linear map ``x -> x A`` under which a metric is a plain norm: ``A`` diagonal
    (``scale``, one factor per feature) or a full matrix.

    * "seuclidean" (``V``: the variances): ``d^2 = sum_k (a_k - b_k)^2 / V_k``, so ``A = diag(V^-1/2)``;
    * "mahalanobis" (``VI``: the inverse covariance): ``d^2 = (a - b)^T VI (a - b) = |A^T (a - b)|^2``
      with ``VI = A A^T``, ``A = Q diag(lam)^(1/2)`` from its eigendecomposition (positive
      semi-definite ``VI``, such as the pseudo-inverse of a singular covariance, too: the
      directions of ``lam = 0`` are dropped, so ``A`` may have fewer columns than features);
    * weighted "minkowski" (``w``): ``d^p = sum_k w_k |a_k - b_k|^p``, so ``A = diag(w^(1/p))``.
    """

    def __init__(self, scale=None, matrix=None):
        self.scale, self.matrix = scale, matrix

    def transform(self, X):
        """``X A`` in ``X``'s dtype."""
        Y = X * self.scale if self.matrix is None else X @ self.matrix
        return np.asarray(Y, dtype=X.dtype)


def _param_array(params, key, shape, metric):
    a = np.asarray(params[key], dtype=np.float64)
    if a.shape != shape:
        raise ValueError(f"metric_params[{key!r}] for metric={metric!r} must have shape {shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"metric_params[{key!r}] for metric={metric!r} must be finite")
    return a


def _frequency_covariance(X, sample_weight):
    """The samples' covariance with ``sample_weight`` read as counts of repeated rows,
    ``sum_i c_i (x_i - m)(x_i - m)^T / (sum c - 1)`` (``np.cov`` with ddof=1 without weights)."""
    c = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = c.sum()
    Xc = X - (c @ X) / total
    return (Xc * c[:, None]).T @ Xc / (total - 1.0), total


def metric_map(metric, p, metric_params, samples, sample_weight=None):
    """The :class:`MetricMap` under which ``metric`` (with ``metric_params``) is the norm of
    :func:`effective_metric`, or None where no map is needed.

    Without ``V`` (``VI``) the samples' variances, ddof=1 (the pseudo-inverse of their covariance)
    are taken, with ``sample_weight`` as counts of repeated rows, fixed at fit, so that the
    metric does not depend on the queries (scikit-learn's brute-force search pools the queries
    with the samples; give ``V`` or ``VI`` to match it)."""
    params = dict(metric_params or {})
    if callable(metric) or metric not in METRIC_PARAMS:
        return None
    if metric == "minkowski" and "w" not in params:
        return None
    X = np.asarray(samples, dtype=np.float64)
    d = X.shape[1]
    cov = None
    if metric in LINEAR_METRICS and not params:
        cov, total = _frequency_covariance(X, sample_weight)
        if not total > 1:
            raise ValueError(f"metric={metric!r} without metric_params takes the samples' (co)variances, which need "
                             f"more than one sample (a total sample_weight > 1), got n_samples={X.shape[0]}")
    if metric == "seuclidean":
        V = _param_array(params, "V", (d,), metric) if "V" in params else np.diag(cov).copy()
        if not np.all(V > 0):
            raise ValueError(f"metric='seuclidean' divides by the variances V, which must all be > 0 "
                             f"(metric_params['V'], or the samples' own when not given), got {V}")
        return MetricMap(scale=1.0 / np.sqrt(V))
    if metric == "mahalanobis":
        # VI = Q diag(lam) Q^T = A A^T with A = Q diag(sqrt(lam)): d^2 = |A^T dx|^2, any VI >= 0
        # (the default, the pseudo-inverse of a singular covariance, is positive semi-definite)
        VI = (_param_array(params, "VI", (d, d), metric) if "VI" in params
              else np.linalg.pinv(cov, hermitian=True))
        scale = np.max(np.abs(VI), initial=0.0)
        if not np.allclose(VI, VI.T, rtol=1e-10, atol=1e-12 * scale):
            raise ValueError("metric_params['VI'] for metric='mahalanobis' must be symmetric")
        lam, Q = np.linalg.eigh(0.5 * (VI + VI.T))
        if np.any(lam < -1e-10 * scale):
            raise ValueError("metric_params['VI'] for metric='mahalanobis' must be positive semi-definite (the "
                             f"inverse of a covariance matrix); its smallest eigenvalue is {lam.min():.3g}")
        # directions VI ignores (lam = 0: the null space of a singular covariance) carry no
        # distance: dropped, so that no mapped feature is constant (a rule's bandwidth would be 0)
        keep = lam > 1e-12 * max(float(lam.max(initial=0.0)), np.finfo(np.float64).tiny)
        keep[np.argmax(lam)] = True
        return MetricMap(matrix=Q[:, keep] * np.sqrt(lam[keep]))
    w = _param_array(params, "w", (d,), metric)
    if not np.all(w >= 0):
        raise ValueError(f"metric_params['w'] for metric='minkowski' must be >= 0, got {w}")
    return MetricMap(scale=w ** (1.0 / p))
