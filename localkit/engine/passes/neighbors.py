"""The neighbour path: k-nearest-neighbour and radius queries for kNN kernels and compact
profiles, where only a few samples carry weight and a tree finds them cheaper than a full pass.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.neighbors import KDTree, NearestNeighbors

from ..blocks import map_blocks
from ..twins import largest_group


#: metrics whose k-d tree measures distances from coordinate differences
TREE_METRICS = ("euclidean", "manhattan", "chebyshev", "minkowski")


def make_index(Xs, metric, p=2, *, exact=False):
    """A neighbour index over the scaled samples (for ``metric="precomputed"``, their distances to
    each other; queries then give theirs to the samples), with scikit-learn's
    ``kneighbors`` / ``radius_neighbors`` interface.

    ``exact``: a k-d tree wherever it can serve (up to 15 features, where scikit-learn's "auto"
    may otherwise take brute force for few samples): its distances come from coordinate
    differences, not ``|q|^2 - 2 q.x + |x|^2``, which far from the origin cancels (a dask chunk of
    37 samples at |x| ~ 300 gave k-th distances of 1e-3 with a relative error of 4e-6)."""
    if exact and not callable(metric) and metric in TREE_METRICS and np.shape(Xs)[1] <= 15:
        return TreeIndex(Xs, metric, p)
    return NearestNeighbors(metric=metric, p=p).fit(Xs)


class TreeIndex:
    """A :class:`sklearn.neighbors.KDTree` queried directly, with the answers of
    ``NearestNeighbors(algorithm="kd_tree")`` to the bit (the same tree, metric and leaf size).

    Why not ``NearestNeighbors`` itself: its queries pass through input validation and a joblib
    dispatch that cost ~1 ms per call, where the tree answers 10 queries against 200,000 samples
    in 3-D in ~0.2 ms; a fitted estimator's prediction of a few points paid that five times over.
    """

    def __init__(self, Xs, metric, p=2):
        if metric == "minkowski":  # as NearestNeighbors: the special cases of p by their own metric
            metric = {1: "manhattan", 2: "euclidean", np.inf: "chebyshev"}.get(p, metric)
        params = {"p": p} if metric == "minkowski" else {}
        self.tree = KDTree(Xs, leaf_size=30, metric=metric, **params)  # NearestNeighbors' leaf size
        self.n_samples_fit_ = len(Xs)  # NearestNeighbors' name

    def kneighbors(self, Q, n_neighbors):
        """``(distances, indices)`` of the ``n_neighbors`` nearest samples, nearest first."""
        return self.tree.query(Q, k=n_neighbors)

    def radius_neighbors(self, Q, radius, return_distance=True, sort_results=False):
        """The samples within ``radius`` of each query, as object arrays: ``(distances,
        indices)``, or the indices alone."""
        if not return_distance:
            return self.tree.query_radius(Q, radius, return_distance=False)
        idx, dist = self.tree.query_radius(Q, radius, return_distance=True, sort_results=sort_results)
        return dist, idx


def kneighbors(index, Q, k, *, exclude_self=False, row_offset=0, groups=None):
    """Distances and indices of the ``k`` nearest samples of each query, nearest first.

    With ``exclude_self`` query ``i`` (global row ``row_offset + i``) is sample ``i`` and is
    dropped from its own neighbours (if a duplicate displaced it, the farthest one is dropped);
    with ``groups`` too (:func:`~localkit.engine.twins.twin_groups`), every sample at its point is.
    """
    if not exclude_self:
        return index.kneighbors(Q, n_neighbors=k)
    rows = np.arange(len(Q)) + row_offset
    if groups is not None:
        n = index.n_samples_fit_
        if k > n - largest_group(groups):
            raise ValueError(f"n_neighbors must be <= n_samples - (rows at the same point)="
                             f"{n - largest_group(groups)} for leave-one-out, got {k}")
        dist, idx = index.kneighbors(Q, n_neighbors=min(n, k + largest_group(groups)))
        other = groups[idx] != groups[rows][:, None]
        first = np.argsort(~other, axis=1, kind="stable")[:, :k]  # the k nearest others, in order
        return np.take_along_axis(dist, first, axis=1), np.take_along_axis(idx, first, axis=1)
    dist, idx = index.kneighbors(Q, n_neighbors=k + 1)
    is_self = idx == rows[:, None]
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True
    keep = ~is_self
    return dist[keep].reshape(len(Q), k), idx[keep].reshape(len(Q), k)


def knn_bandwidth(index, Q, k, *, exclude_self=False, row_offset=0, groups=None):
    """The balloon bandwidth ``h(x*)``: distance to the k-th nearest sample (with
    ``exclude_self``, at another point than the query's: see :func:`kneighbors`)."""
    dist, _ = kneighbors(index, Q, k, exclude_self=exclude_self, row_offset=row_offset, groups=groups)
    return dist[:, -1]


def nearest_other(index, Q, self_rows, groups=None, live=None, return_distance=False):
    """The nearest sample of each query other than sample ``self_rows[i]`` (the query itself,
    leave-one-out) and, with ``groups``, than every sample at its point (where there is no other,
    the query's own); ``live`` maps the index's samples to the caller's (default: the same).
    ``return_distance``: ``(distance, index)``."""
    dist, near = index.kneighbors(Q, n_neighbors=min(1 + largest_group(groups), index.n_samples_fit_))
    if live is not None:
        near = live[near]
    other = near != self_rows[:, None] if groups is None else groups[near] != groups[self_rows][:, None]
    rows, col = np.arange(len(near)), np.argmax(other, axis=1)
    return (dist[rows, col], near[rows, col]) if return_distance else near[rows, col]


def scaled_sq_distances(dist, h):
    """``(d / h)^2`` row-wise; a zero ``h`` (k duplicates) counts distance 0 fully, others not."""
    with np.errstate(divide="ignore", invalid="ignore"):
        u2 = (dist / h[:, None]) ** 2
    return np.nan_to_num(u2, nan=0.0, posinf=np.inf)


def coincident(index, Q, dist, profile, *, exclude_self=False, row_offset=0, groups=None):
    """``(rows, samples)``: the queries whose k nearest samples all lie at distance 0 and, for
    each, every sample at distance 0 (itself, and with ``groups`` every sample at its point, left
    out with ``exclude_self``); none unless
    ``profile`` vanishes at the edge of its support.

    There ``d_k = 0`` and ``k(d / d_k)`` is the limit ``h -> 0`` of the kernel: every sample at the
    query's point weighs ``k(0)`` and no other does, however many there are (the k a search
    returns are an arbitrary pick among them, dependent on the sample order and the path; R's
    lowess takes all of them too). The uniform profile keeps the k the search returns (see
    :attr:`~localkit.kernels.profiles.Profile.vanishes_at_edge`)."""
    rows = np.flatnonzero(dist[:, -1] == 0) if profile.vanishes_at_edge else np.zeros(0, dtype=np.intp)
    if len(rows) == 0:
        return rows, []
    found = index.radius_neighbors(Q[rows], radius=0.0, return_distance=False)
    if exclude_self:
        found = [f[f != r + row_offset] if groups is None else f[groups[f] != groups[r + row_offset]]
                 for f, r in zip(found, rows)]
    return rows, found


def knn_block_sums(index, Q, k, profile, V_aug, *, exclude_self=False, row_offset=0, groups=None):
    """Weighted sums over exactly the k nearest samples (compact profile, kNN bandwidth).

    ``w_ij = k(d_ij / d_ik)``; returns ``(sums, log_scale)`` with the true sums equal to
    ``sums * exp(log_scale)`` (the row maximum is factored out, as in the dense path). A query
    with ``d_k = 0`` sums every sample at its point (:func:`coincident`).
    """
    dist, idx = kneighbors(index, Q, k, exclude_self=exclude_self, row_offset=row_offset, groups=groups)
    L = profile.log_k(scaled_sq_distances(dist, dist[:, -1]))
    sums, shift = _gathered_sums(L, idx, V_aug)
    rows, found = coincident(index, Q, dist, profile, exclude_self=exclude_self, row_offset=row_offset,
                             groups=groups)
    for r, f in zip(rows, found):  # their weights are all k(0): the shift is log k(0)
        sums[r] = V_aug[f].sum(axis=0)
        shift[r] = profile.log_k0
    return sums, shift


def radius_block_sums(index, Q, profile, V_aug, *, unit=1.0, s_scale=None, exclude_self=False, row_offset=0,
                      groups=None):
    """Weighted sums over the samples in each query's support, ``u = d / (unit s_j) <= 1`` (``d``
    the index's distance, ``s_j`` the per-sample scales, 1 without them). The index decides the
    support (``d^2 <= unit^2``, the compiled pass's test); ``u^2`` then only shapes the weights."""
    radius = unit * (1.0 if s_scale is None else float(s_scale.max()))
    dist, idx = index.radius_neighbors(Q, radius=radius, sort_results=False)
    lengths = np.fromiter((len(r) for r in idx), dtype=np.intp, count=len(idx))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    flat_idx = np.concatenate(idx) if len(idx) else np.zeros(0, dtype=np.intp)
    flat_d = np.concatenate(dist) if len(dist) else np.zeros(0)
    rows = np.repeat(np.arange(len(Q)), lengths)
    u2 = (flat_d / unit) ** 2
    if s_scale is None:  # inside by the index's test: sqrt and division must not push u past 1
        np.minimum(u2, 1.0, out=u2)
    else:
        u2 = u2 / s_scale[flat_idx] ** 2
    w = np.exp(profile.log_k(u2))
    if exclude_self:
        w[flat_idx == rows + row_offset if groups is None else groups[flat_idx] == groups[rows + row_offset]] = 0.0
    W = sparse.csr_matrix((w.astype(V_aug.dtype), flat_idx, indptr), shape=(len(Q), len(V_aug)))
    sums = np.asarray(W @ V_aug)
    return sums, np.zeros(len(Q), dtype=V_aug.dtype)


def _gathered_sums(L, idx, V_aug):
    m = L.max(axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(L - m[:, None]).astype(V_aug.dtype, copy=False)
    sums = np.einsum("qk,qkp->qp", w, V_aug[idx])
    return sums, m.astype(V_aug.dtype, copy=False)


# -- the neighbour path ------------------------------------------------------------------------
def neighbor_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    kern, opts = bound.kernel, bound.options
    n_q = len(Q)
    V_aug = bound.weighted(V_aug)
    S = np.empty((n_q, V_aug.shape[1]), dtype=V_aug.dtype)
    shift = np.empty(n_q, dtype=V_aug.dtype)
    k = kern.n_neighbors
    width = k if k is not None else 64
    bq = opts.block_size if np.isscalar(opts.block_size) else (opts.block_size or (0,))[0]
    bq = int(bq or 0) or max(64, int(8 * 2**20 // (8 * width * V_aug.shape[1] + 1)))

    P = bound.index_points(queries)
    twins = bound.twins if exclude_self else None

    def run(rows):
        if k is not None:
            s, m = knn_block_sums(bound.index, P[rows], k, kern.profile, V_aug, exclude_self=exclude_self,
                                     row_offset=rows.start, groups=twins)
        else:
            s, m = radius_block_sums(bound.index, P[rows], kern.profile, V_aug, unit=bound.index_unit,
                                        s_scale=bound.sample_scale, exclude_self=exclude_self,
                                        row_offset=rows.start, groups=twins)
        S[rows], shift[rows] = s, m

    # trees, gathers and sparse products: no BLAS call to hold to one thread
    map_blocks(run, n_q, bq, opts.threads, blas=False)
    return S, shift


def knn_log_weights(bound, Q, exclude_self, row_offset):
    """Log-weights of a compact kNN kernel: exactly the k nearest samples (every sample at the
    query's point when the k-th is there too, :func:`~localkit.engine.passes.neighbors.coincident`),
    with the tree's distances (a matrix-product distance could push the k-th neighbour past ``u = 1``)."""
    twins = bound.twins if exclude_self else None
    dist, idx = kneighbors(bound.index, Q, bound.kernel.n_neighbors, exclude_self=exclude_self,
                              row_offset=row_offset, groups=twins)
    log_k = bound.kernel.profile.log_k
    L = np.full((len(Q), bound.n_samples), -np.inf, dtype=bound.dtype)
    L[np.arange(len(Q))[:, None], idx] = log_k(scaled_sq_distances(dist, dist[:, -1]))
    rows, found = coincident(bound.index, Q, dist, bound.kernel.profile, exclude_self=exclude_self,
                                row_offset=row_offset, groups=twins)
    for r, f in zip(rows, found):  # d_k = 0: every sample at the query's point
        L[r, f] = log_k(np.zeros(1))[0]
    return L
