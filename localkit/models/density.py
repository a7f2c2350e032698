"""Kernel density: the local mean's normaliser, made a density."""
from __future__ import annotations


from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from scipy import special
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions, validate_params
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import (ALGORITHM_CONSTRAINT, BANDWIDTH_CONSTRAINT, KERNEL_CONSTRAINT, N_JOBS_CONSTRAINT,
                       PROFILE_CONSTRAINT, positive)
from .._validation import check_positive
from ..engine import backend_of, local_sums, make_kernel
from ..kernels import Kernel
from ..kernels.bandwidth import resolve_bandwidth
from ._base import FLOATS, check_sample_weight


@validate_params(
    {
        "queries": ["array-like"],
        "samples": ["array-like"],
        "kernel": KERNEL_CONSTRAINT + [Kernel],
        "bandwidth": BANDWIDTH_CONSTRAINT,
        # named so that a caller who passes them learns why they cannot apply, instead of having
        # them ignored: the normaliser c_d below is the Euclidean one, for one fixed bandwidth
        "metric": [StrOptions({"euclidean"})],
        "n_neighbors": [None],
        "log": ["boolean"],
        "sample_weight": ["array-like", None],
        "algorithm": ALGORITHM_CONSTRAINT,
        "block_size": [Interval(Integral, 1, None, closed="left"), tuple, None],
        "memory_budget": positive() + [None],
        "n_jobs": N_JOBS_CONSTRAINT,
    },
    prefer_skip_nested_validation=True,
)
def kernel_density(queries, samples, kernel="gaussian", bandwidth=1.0, *, metric="euclidean", n_neighbors=None,
                   log=False, sample_weight=None, algorithm="auto", block_size=None, memory_budget=None,
                   n_jobs=None):
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
            "cosine", "laplacian", "cauchy"} or Kernel, default="gaussian"
        A profile of :class:`localkit.Kernel` (scikit-learn's names "rbf", "tophat", "flat",
        "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform", "uniform",
        "laplacian", "triangular" and "biweight") that is integrable in ``d`` dimensions (not
        "softmax"; "cauchy" only in 1-D), or a ``Kernel`` with a fixed bandwidth. A kernel on groups
        of columns (``features``, categorical factors, ``K1 * K2``) normalises each continuous
        factor on its own columns and takes the categorical factors as they are: statsmodels'
        ``KDEMultivariate(var_type=..., bw=...).pdf`` (see the user guide's "Composing kernels").
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
    metric : {"euclidean"}, default="euclidean"
        The only metric whose normaliser ``c_d`` is implemented; any other is an error.
    n_neighbors : None
        kNN bandwidths give no normalised density here; anything but None is an error.
    log : bool, default=False
        Return ``log p`` (exact even where ``p`` underflows).
    sample_weight : array of shape (n_samples,), optional
        Non-negative weights of the samples (integer weights act as repeated samples).
    algorithm, block_size, memory_budget, n_jobs
        Engine options of :func:`localkit.local_sums` (``algorithm``: "auto", "dense",
        "neighbors", "compiled", "binned" or "streamed", as in
        :class:`localkit.LocalMeanRegressor`).

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
    kern = make_kernel(kernel, bandwidth)
    if kern.is_softmax:
        raise ValueError("kernel='softmax' is a similarity kernel, not a density; choose a profile")
    if kern.n_neighbors is not None or kern.metric != "euclidean":
        raise ValueError("kernel_density needs a fixed bandwidth and the Euclidean metric")
    backend = backend_of(queries, samples, sample_weight)  # NumPy, a device or a dask cluster
    samples = backend.points(samples, "samples")
    queries = backend.points(queries, "queries", like=samples)
    n, d = samples.shape
    log_norm = None
    if kern.composite:  # groups of columns: the continuous factors normalised, the categorical as they are
        backend.require_in_memory("a kernel on groups of columns", "its rules and levels are resolved on every sample")
        host, weight = backend.host(samples), None if sample_weight is None else backend.host(sample_weight)
        kern = kern.resolved(host, weight)
        log_norm = kern.log_density_normalizer(host, weight)
    else:
        h = backend.bandwidth(kern, samples, sample_weight)
        if isinstance(kern.bandwidth, str):  # the rule resolved once, for the sums and the normaliser
            kern = Kernel(kern.name_, bandwidth=h)
    out = local_sums(queries, samples, None, kern, empty="nearest", algorithm=algorithm, block_size=block_size,
                     memory_budget=memory_budget, n_jobs=n_jobs, sample_weight=sample_weight)  # checks sample_weight
    total = n if sample_weight is None else backend.total(sample_weight)
    if log_norm is not None:  # Kernel.log_density_normalizer
        log_p = out.log_weight_sum - float(np.log(total) + log_norm)
        return log_p if log else backend.xp.exp(log_p)
    # a scalar h is the same h in every one of the d features: prod_k h_k = h^d
    h = np.broadcast_to(np.asarray(h, dtype=np.float64), (d,))
    # the normaliser in float64, subtracted as a Python float: a float64 scalar would promote float32 sums to
    # float64; a Python float keeps the samples' precision on every backend
    log_p = out.log_weight_sum - float(np.log(total) + np.sum(np.log(h)) + kern.profile.log_normalizer(d))
    return log_p if log else backend.xp.exp(log_p)


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
            "cosine", "laplacian", "cauchy"}, default="gaussian"
        A profile of :class:`localkit.Kernel` (scikit-learn's names "rbf", "tophat", "flat",
        "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform", "uniform",
        "laplacian", "triangular" and "biweight"), integrable in ``d`` dimensions ("cauchy" only in
        1-D); not "softmax".
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
        ``h``, or a rule resolved on the samples.
        "scott" and "silverman": per feature, ``h_k = sigma_k n^{-1/(d+4)}`` times a constant,
        ``sigma_k`` the feature's standard deviation (scikit-learn's rules leave out ``sigma``),
        weighted by ``sample_weight`` as ``gaussian_kde(weights=...)`` weighs them. In 1-D this is
        scipy's ``gaussian_kde``; in ``d > 1`` it is ``gaussian_kde`` with a diagonal covariance,
        while ``gaussian_kde`` itself scales by the full covariance (they differ on correlated
        features; see :func:`kernel_density`). "isj": KDEpy's ``bw="ISJ"`` (weighted as KDEpy);
        "sj": R's ``bw.SJ`` (equal weights only); both 1-D selectors, applied per feature.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed"}, default="auto"
        The engine's path, as in :class:`localkit.LocalMeanRegressor`: "auto" (the engine
        chooses; never "binned"), "dense", "neighbors", "compiled" and "streamed" (exact paths,
        equal to round-off), "binned" (linear binning and FFT convolution in 1 to 3 features,
        an approximation, taken only when asked for).
    n_jobs : int or None, default=None
        Engine threads.

    Attributes
    ----------
    bandwidth_ : float or ndarray of shape (n_features,)
    kernel_ : Kernel
    X_fit_ : ndarray of shape (n_samples, n_features)
    sample_weight_ : ndarray of shape (n_samples,) or None

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
        "kernel": PROFILE_CONSTRAINT,
        "bandwidth": BANDWIDTH_CONSTRAINT,
        "algorithm": ALGORITHM_CONSTRAINT,
        "n_jobs": N_JOBS_CONSTRAINT,
    }

    def __init__(self, kernel="gaussian", bandwidth=1.0, algorithm="auto", n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None, sample_weight: ArrayLike | None = None):
        """Store the samples and their weights, resolve the bandwidth. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0``; integer weights act as repeated
        samples and zero weights drop them in the density; the rules "scott" and "silverman" take
        the weighted spread and the effective size ``(sum c)^2 / sum c^2``, as
        ``gaussian_kde(weights=...)``; "isj" bins with the weights, as KDEpy's ISJ; "sj" (R's
        ``bw.SJ``, unweighted) takes equal weights only.
        """
        X = validate_data(self, X, dtype=FLOATS)
        self.sample_weight_ = check_sample_weight(sample_weight, X)
        self.bandwidth_ = resolve_bandwidth(self.bandwidth, X, sample_weight=self.sample_weight_)
        self.kernel_ = Kernel(self.kernel, bandwidth=self.bandwidth_)
        self.kernel_.profile.log_normalizer(X.shape[1])  # a profile without a density in d dims raises
        self.X_fit_ = X
        return self

    def score_samples(self, X: ArrayLike) -> np.ndarray:
        """``log p(x)`` at each row of ``X`` (``-inf`` outside every compact support).

        Always float64, as scikit-learn's ``KernelDensity.score_samples`` (which returns float64
        for float32 input too): the estimator is a drop-in replacement for it. The sums are
        computed in the data's precision (float32 data: float32 sums, as :func:`kernel_density`,
        which keeps float32).
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        log_p = kernel_density(X, self.X_fit_, self.kernel_, log=True, sample_weight=self.sample_weight_,
                               algorithm=self.algorithm, n_jobs=self.n_jobs)
        return np.asarray(log_p, dtype=np.float64)

    def score(self, X, y=None):
        """The total log-likelihood of ``X``, ``sum_i log p(x_i)``."""
        return float(np.sum(self.score_samples(X)))

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
        check_positive(n_samples, "n_samples", integer=True, allow_zero=True)  # 0: an empty draw, as scikit-learn
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
