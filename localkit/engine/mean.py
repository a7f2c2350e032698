"""The local mean ``m(x*) = sum_i w_i(x*) v_i`` with ``w_i = K(x*, x_i) / sum_j K(x*, x_j)``.

:func:`local_mean` and :func:`local_sums` are thin calls on a
:class:`~localkit.engine.BoundKernel` (the kernel bound to the samples), whose planner picks
the path (:mod:`localkit.engine.planner`, :mod:`localkit.engine.passes`): a dense blocked pass
with an online log-sum-exp, a neighbour-tree path, or a compiled pass for compact profiles. All
give the same numbers to round-off; memory is bounded by a budget, never
``n_queries x n_samples``. The weight sum ``sum_j K(x*, x_j)`` (kept in log-space) is, up to the
constant ``n h^d c_d``, a kernel density estimate.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import ArrayLike

from ..kernels import Kernel
from .._validation import refuse_sparse
from .binding import bind
from .bound import make_kernel
from .options import ALGORITHMS, EMPTY_POLICIES, EngineOptions
from .results import LocalSums

__all__ = ["ALGORITHMS", "EMPTY_POLICIES", "LocalSums", "local_mean", "local_sums", "make_kernel"]


def local_mean(queries: ArrayLike | None, samples: ArrayLike, values: ArrayLike, kernel: str | Kernel = "gaussian",
               bandwidth: float | str | ArrayLike = 1.0, n_neighbors: int | None = None, exclude_self: bool = False,
               *, metric: str | Callable = "euclidean", p: float = 2, sample_weight: ArrayLike | None = None,
               return_weight_sum: bool = False, **options) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """The local mean of ``values`` at each query: ``m(x*) = sum_i K(x*, x_i) v_i / sum_j K(x*, x_j)``.

    Parameters
    ----------
    queries : array of shape (n_queries, n_features) or None
        Where to evaluate; ``None`` means at the samples themselves.
    samples : array of shape (n_samples, n_features)
    values : array of shape (n_samples,) or (n_samples, p)
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", \
            "softmax"} or Kernel, default="gaussian"
        A profile name (formulas in :class:`~localkit.Kernel`; scikit-learn's names "rbf", "tophat",
        "flat", "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform",
        "uniform", "laplacian", "triangular" and "biweight"), "softmax", or a ``Kernel`` instance
        (then ``bandwidth``, ``n_neighbors`` and ``metric`` are taken from it).
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
        ``h``, one per feature for an array, or a rule resolved on the samples (see
        :class:`~localkit.Kernel`).
    n_neighbors : int or None
        Adaptive kNN bandwidth ``h(x*)`` = distance to the k-th nearest sample.
    exclude_self : bool, default=False
        Leave-one-out: query ``i`` is sample ``i`` and its own weight is dropped, with that of
        every copy of its row, at its point with its values (a repeated row is the same
        observation for a kernel; scikit-learn's ``LeaveOneOut`` splits rows instead; samples at
        one point with distinct values are distinct observations, each left out alone).
    metric, p : the distance (see :class:`~localkit.Kernel`), default "euclidean"
        Also "manhattan", "chebyshev", "minkowski" (with ``p``), "cosine", a callable, or
        "precomputed" (``queries`` and ``samples`` are then distances to the samples).
    sample_weight : array of shape (n_samples,), optional
        Non-negative weights ``c_i`` that multiply the kernel:
        ``m(x*) = sum_i c_i K(x*, x_i) v_i / sum_j c_j K(x*, x_j)``; integer weights equal
        repeated samples, zero weights drop them.
    return_weight_sum : bool, default=False
        Also return ``sum_j c_j K(x*, x_j)``.
    **options
        The engine options of :func:`local_sums` (the fields of :class:`~localkit.engine.EngineOptions`:
        ``empty``, ``algorithm``, ``grid_size``, ``tolerance``, ``block_size``, ``memory_budget``,
        ``n_jobs``, ``exact_edge``) and its ``query_scale``, ``sample_scale`` and ``twins``.

    Returns
    -------
    mean : array of shape (n_queries,) or (n_queries, p)
    weight_sum : array of shape (n_queries,), only with ``return_weight_sum=True``

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import local_mean
    >>> x = np.linspace(0, 1, 5)[:, None]
    >>> local_mean([[0.5]], x, x.ravel() ** 2, bandwidth=1e-3)  # tiny bandwidth: nearest value
    array([0.25])
    """
    if values is None:
        raise ValueError("values must be an array of shape (n_samples,) or (n_samples, p), got None")
    # the engine options checked in this function's name (a misspelt keyword is local_mean's, not local_sums')
    EngineOptions.of("local_mean", {key: value for key, value in options.items() if key not in _POINT_KEYWORDS})
    out = local_sums(queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self,
                     metric=metric, p=p, sample_weight=sample_weight, **options)
    return (out.mean, out.weight_sum) if return_weight_sum else out.mean


#: the keywords local_mean passes to local_sums beside its engine options
_POINT_KEYWORDS = ("query_scale", "sample_scale", "twins")


def local_sums(queries: ArrayLike | None, samples: ArrayLike, values: ArrayLike | None = None,
               kernel: str | Kernel = "gaussian", bandwidth: float | str | ArrayLike = 1.0,
               n_neighbors: int | None = None, exclude_self: bool = False, *, metric: str | Callable = "euclidean",
               p: float = 2, sample_weight: ArrayLike | None = None, query_scale: ArrayLike | None = None,
               sample_scale: ArrayLike | None = None, twins: ArrayLike | None = None, **options) -> LocalSums:
    """One engine pass: local means of ``values`` (optional) and log weight sums.

    Parameters
    ----------
    queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self, metric, p, sample_weight
        As in :func:`local_mean` (``values`` may be None: weight sums only).
    query_scale, sample_scale : arrays of shape (n_queries,) / (n_samples,), optional
        Per-point bandwidth factors: ``u = d(x*, x_j) / (h * query_scale * sample_scale_j)``
        (balloon and sample-point adaptive bandwidths). ``query_scale`` cannot be combined with
        ``n_neighbors``, which sets it.
    twins : array of shape (n_samples,), optional
        Group ids for ``exclude_self``: query ``i`` leaves out every sample of its group
        (default: every sample at its point; NumPy arrays only).
    **options
        How the pass runs, the fields of :class:`~localkit.engine.EngineOptions` (each documented
        there): ``empty`` ("nearest", "nan", "raise": the policy for a query whose neighbourhood is
        empty), ``algorithm`` ("auto", "dense", "neighbors", "compiled", "binned", "streamed",
        "approximate"), ``grid_size`` and ``tolerance`` (the binned pass's grid and the relative
        error accepted), ``block_size``, ``memory_budget`` (bytes), ``n_jobs`` (threads) and
        ``exact_edge``. Any other keyword is a ``TypeError``.

    Returns
    -------
    LocalSums
        ``mean`` (the local means, or None without values), ``log_weight_sum``
        (``log sum_j c_j K(x*, x_j)``, ``-inf`` for an empty neighbourhood), ``weight_sum`` and
        ``empty`` (the queries with an empty neighbourhood).

    Notes
    -----
    The kernel is bound to the samples once (centred and scaled, indexes built), then the pass
    runs on the samples' own array library and device (NumPy on the host, a GPU, a dask
    cluster); the estimators keep that bound kernel from ``fit``, so a prediction pays only for
    its queries.
    """
    refuse_sparse(samples, "samples")  # dense arrays here; sparse samples: the estimators (neighbour path)
    bound = bind(make_kernel(kernel, bandwidth, n_neighbors, metric, p), samples, sample_weight=sample_weight,
                 sample_scale=sample_scale, options=EngineOptions.of("local_sums", options), twins=twins)
    return bound.sums(queries, values, exclude_self=exclude_self, query_scale=query_scale)
