"""Kernel density: the local mean's normaliser, made a density."""
from __future__ import annotations

from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from .._params import ALGORITHM_CONSTRAINT, BANDWIDTH_CONSTRAINT, KERNEL_CONSTRAINT, N_JOBS_CONSTRAINT, positive
from .._validation import check_points
from ..engine import local_sums, make_kernel
from ..kernels import Kernel


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
        "algorithm": ALGORITHM_CONSTRAINT,
        "block_size": [Interval(Integral, 1, None, closed="left"), tuple, None],
        "memory_budget": positive() + [None],
        "n_jobs": N_JOBS_CONSTRAINT,
    },
    prefer_skip_nested_validation=True,
)
def kernel_density(queries, samples, kernel="gaussian", bandwidth=1.0, *, metric="euclidean", n_neighbors=None,
                   log=False, algorithm="auto", block_size=None, memory_budget=None, n_jobs=None):
    """The kernel density estimate at each query.

    .. math::

        \\hat p(x^*) = \\frac{1}{n \\, c_d \\prod_k h_k} \\sum_i k\\big(|x^* - x_i|_h\\big),
        \\qquad c_d = \\int_{\\mathbb{R}^d} k(|u|)\\, du

    The sum is the local mean's normaliser ``sum_j K(x*, x_j)``, computed by the engine in
    log-space (so it never underflows); ``c_d`` makes the estimate integrate to one in ``d``
    dimensions. For scikit-learn's kernels (gaussian, tophat = uniform, epanechnikov,
    exponential = laplacian, linear = triangular, cosine) it equals
    ``sklearn.neighbors.KernelDensity(kernel=..., bandwidth=h)``; with ``bandwidth="scott"``
    in 1-D it equals ``scipy.stats.gaussian_kde``.

    Parameters
    ----------
    queries : array of shape (n_queries, n_features)
    samples : array of shape (n_samples, n_features)
    kernel : str or Kernel, default="gaussian"
        A profile of :class:`localkit.Kernel` that is integrable in ``d`` dimensions (not
        "softmax"; "cauchy" only in 1-D), or a ``Kernel`` with a fixed bandwidth.
    bandwidth : float, array of shape (n_features,), "scott" or "silverman", default=1.0
    metric : {"euclidean"}, default="euclidean"
        The only metric whose normaliser ``c_d`` is implemented; any other is an error.
    n_neighbors : None
        kNN bandwidths give no normalised density here; anything but None is an error.
    log : bool, default=False
        Return ``log p`` (exact even where ``p`` underflows).
    algorithm, block_size, memory_budget, n_jobs
        Engine options of :func:`localkit.local_sums`.

    Returns
    -------
    density : array of shape (n_queries,)

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
    from ..engine.distributed import dask_kernel_density, is_dask_collection

    if is_dask_collection(queries, samples):  # lazily, on the cluster
        return dask_kernel_density(queries, samples, kern, log=log, algorithm=algorithm, block_size=block_size,
                                   memory_budget=memory_budget, n_jobs=n_jobs)
    samples = check_points(samples, "samples")
    queries = check_points(queries, "queries", n_features=samples.shape[1], dtype=samples.dtype)
    n, d = samples.shape
    h = np.broadcast_to(kern.resolve_bandwidth(samples), (d,))
    log_c = kern.profile.log_normalizer(d)
    out = local_sums(queries, samples, None, kern, empty="nearest", algorithm=algorithm, block_size=block_size,
                     memory_budget=memory_budget, n_jobs=n_jobs)
    log_p = out.log_weight_sum - np.log(n) - np.sum(np.log(h)) - log_c
    return log_p if log else np.exp(log_p)
