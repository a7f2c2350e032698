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
        Engine options (see :func:`local_sums`): ``empty`` ("nearest", "nan", "raise"),
        ``algorithm`` ("auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"),
        ``grid_size``, ``tolerance``, ``block_size``, ``memory_budget`` (bytes), ``n_jobs``, ``query_scale`` /
        ``sample_scale`` (per-point bandwidth factors). See :func:`local_sums`.

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
    out = local_sums(queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self,
                     metric=metric, p=p, sample_weight=sample_weight, **options)
    return (out.mean, out.weight_sum) if return_weight_sum else out.mean


def local_sums(queries: ArrayLike | None, samples: ArrayLike, values: ArrayLike | None = None,
               kernel: str | Kernel = "gaussian", bandwidth: float | str | ArrayLike = 1.0,
               n_neighbors: int | None = None, exclude_self: bool = False, *, metric: str | Callable = "euclidean",
               p: float = 2, sample_weight: ArrayLike | None = None, empty: str = "nearest", algorithm: str = "auto",
               block_size: int | tuple[int, int] | None = None, memory_budget: float | None = None,
               n_jobs: int | None = None, query_scale: ArrayLike | None = None,
               sample_scale: ArrayLike | None = None, twins: ArrayLike | None = None,
               grid_size: int | tuple | None = None, tolerance: float | None = None) -> LocalSums:
    """One engine pass: local means of ``values`` (optional) and log weight sums.

    Parameters
    ----------
    queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self, metric, p, sample_weight
        As in :func:`local_mean` (``values`` may be None: weight sums only).
    empty : {"nearest", "nan", "raise"}, default="nearest"
        A query whose neighbourhood is empty (outside every compact support): "nearest" gives
        the value of the nearest sample with a weight sum of 0; "nan" gives NaN and a warning;
        "raise" raises a ``ValueError``.
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
        The path, as in :class:`~localkit.LocalMeanRegressor`: "auto" (the engine chooses; "binned"
        only under a ``tolerance`` its bound meets), "dense", "neighbors", "compiled" and "streamed" (exact, equal to round-off),
        "binned" (linear binning and FFT convolution in 1 to 3 features, an approximation).
    block_size : int or (int, int), optional
        Query and sample block sizes; by default chosen from ``memory_budget``.
    memory_budget : float, optional
        Bytes that kernel blocks may occupy at once (default 128 MiB).
    n_jobs : int or None, default=None
        Threads over query blocks and the binned pass's FFTs (``None``: one unless a joblib
        context says otherwise; ``-1``: all cores).
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass; by default the fewest whose error bound meets
        ``tolerance`` (:func:`localkit.engine.passes.binned.grid_shape`).
    tolerance : float, optional
        The relative error accepted from the binned pass (its bound: ``8 (delta / h)^2``,
        ``4 delta / h`` for the triangular, laplacian and uniform profiles, where the weight sum
        exceeds 1e-3 of its largest; :mod:`localkit.engine.passes.binned`). It sizes the default
        grid (``1e-4`` when None); given, "auto" takes the binned pass where its bound meets it.
    query_scale, sample_scale : arrays of shape (n_queries,) / (n_samples,), optional
        Per-point bandwidth factors: ``u = d(x*, x_j) / (h * query_scale * sample_scale_j)``
        (balloon and sample-point adaptive bandwidths). ``query_scale`` cannot be combined with
        ``n_neighbors``, which sets it.
    twins : array of shape (n_samples,), optional
        Group ids for ``exclude_self``: query ``i`` leaves out every sample of its group
        (default: every sample at its point; NumPy arrays only).

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
    options = EngineOptions(empty=empty, algorithm=algorithm, block_size=block_size,
                            memory_budget=memory_budget, n_jobs=n_jobs, grid_size=grid_size,
                            tolerance=tolerance)
    return bind(make_kernel(kernel, bandwidth, n_neighbors, metric, p), samples, sample_weight=sample_weight,
                sample_scale=sample_scale, options=options, twins=twins).sums(queries, values,
                                                                              exclude_self=exclude_self,
                                                                              query_scale=query_scale)
