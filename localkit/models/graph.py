"""The k-nearest-neighbours graph: the kNN kernel's support as a sparse matrix."""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from scipy.sparse import csr_matrix
from sklearn.utils._param_validation import Interval, StrOptions, validate_params

from .._params import N_JOBS_CONSTRAINT
from ..engine import BoundKernel
from ..kernels import Kernel
from ..kernels.kernel import NORM_METRICS

#: ``mode`` of :func:`kneighbors_graph`: the entries of the graph
GRAPH_MODES = {"connectivity", "distance"}


def neighbors_csr(dist, idx, n_samples_fit, mode):
    """The ``(n_queries, n_samples_fit)`` CSR matrix of ``k`` neighbours per query (``idx``,
    ``dist`` of shape ``(n_queries, k)``): ones (``mode="connectivity"``) or the distances
    (``"distance"``), as scikit-learn's ``kneighbors_graph``."""
    n_queries, k = idx.shape
    data = np.ones(n_queries * k) if mode == "connectivity" else np.asarray(dist, dtype=np.float64).ravel()
    return csr_matrix((data, idx.ravel(), np.arange(0, n_queries * k + 1, k)), shape=(n_queries, n_samples_fit))


@validate_params(
    {
        "X": ["array-like"],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        "mode": [StrOptions(GRAPH_MODES)],
        "metric": [StrOptions(set(NORM_METRICS))],
        "p": [Interval(Real, 1, None, closed="both")],
        "include_self": ["boolean"],
        "n_jobs": N_JOBS_CONSTRAINT,
    },
    prefer_skip_nested_validation=True,
)
def kneighbors_graph(X, n_neighbors, mode="connectivity", *, metric="euclidean", p=2, include_self=False,
                     n_jobs=None):
    """The graph of the ``n_neighbors`` nearest samples of every sample, as scikit-learn's
    ``sklearn.neighbors.kneighbors_graph``.

    ``A[i, j]`` is 1 (``mode="connectivity"``) or ``d(x_i, x_j)`` (``mode="distance"``) where
    ``x_j`` is one of the ``k`` nearest samples of ``x_i``, else absent: the support of the kNN
    kernel ``Kernel("uniform", n_neighbors=k)`` (the k-th neighbour included), from the engine's
    neighbour index (built once). Cost: the index, ``O(n log n)`` for a tree in few features, then
    ``O(k log n)`` per sample (brute force, ``O(n)`` per sample, in many features).

    Parameters
    ----------
    X : array of shape (n_samples, n_features)
    n_neighbors : int
        ``k``, at most ``n_samples - 1`` (``n_samples`` with ``include_self``).
    mode : {"connectivity", "distance"}, default="connectivity"
    metric : {"euclidean", "manhattan", "chebyshev", "minkowski"}, default="euclidean"
    p : float >= 1, default=2
        The power of the "minkowski" metric.
    include_self : bool, default=False
        Whether each sample is its own first neighbour (scikit-learn's default: not).
    n_jobs : int or None, default=None
        Accepted for scikit-learn's signature; the search runs on the index's own threads.

    Returns
    -------
    A : scipy.sparse.csr_matrix of shape (n_samples, n_samples)

    Examples
    --------
    >>> from localkit import kneighbors_graph
    >>> kneighbors_graph([[0.0], [1.0], [3.0]], 1).toarray()
    array([[0., 1., 0.],
           [1., 0., 0.],
           [0., 1., 0.]])
    """
    bound = BoundKernel(Kernel("uniform", bandwidth=1.0, metric=metric, p=p), X)
    n = bound.n_samples
    limit = n if include_self else n - 1
    if n_neighbors > limit:
        raise ValueError(f"n_neighbors={n_neighbors} must be at most n_samples{'' if include_self else ' - 1'} "
                         f"= {limit}")
    dist, idx = bound.kneighbors(X if include_self else None, n_neighbors, exclude_self=not include_self)
    return neighbors_csr(dist, idx, n, mode)
