"""The neighbour path: k-nearest-neighbour and radius queries for kNN kernels and compact
profiles, where only a few samples carry weight and a tree finds them cheaper than a full pass.

It is also the one path of sparse (CSR) samples: their index is scikit-learn's brute-force
``NearestNeighbors`` fitted on the CSR matrix (:func:`make_index`), which measures distances from
sparse matrix products, and the queries here may be CSR rows (counted by ``Q.shape[0]``).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import sparse
from sklearn.neighbors import KDTree, NearestNeighbors

from ..blocks import map_blocks
from ..stream import OnlineLogSumExp
from ..factors import candidate_factor, knn_scales, pair_log_weights
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
    37 samples at |x| ~ 300 gave k-th distances of 1e-3 with a relative error of 4e-6).

    Sparse samples get brute force on the CSR matrix, as scikit-learn's neighbour estimators
    fitted on it do (the same search, so the same distances and the same order of ties)."""
    if sparse.issparse(Xs):
        return NearestNeighbors(algorithm="brute", metric=metric, p=p).fit(Xs)
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
    rows = np.arange(Q.shape[0]) + row_offset
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
    return dist[keep].reshape(Q.shape[0], k), idx[keep].reshape(Q.shape[0], k)


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
    rows = np.repeat(np.arange(Q.shape[0]), lengths)
    u2 = (flat_d / unit) ** 2
    if s_scale is None:  # inside by the index's test: sqrt and division must not push u past 1
        np.minimum(u2, 1.0, out=u2)
    else:
        u2 = u2 / s_scale[flat_idx] ** 2
    w = np.exp(profile.log_k(u2))
    if exclude_self:
        w[flat_idx == rows + row_offset if groups is None else groups[flat_idx] == groups[rows + row_offset]] = 0.0
    W = sparse.csr_matrix((w.astype(V_aug.dtype), flat_idx, indptr), shape=(Q.shape[0], len(V_aug)))
    sums = np.asarray(W @ V_aug)
    return sums, np.zeros(Q.shape[0], dtype=V_aug.dtype)


#: candidate pairs of one block of :func:`truncated_sums` (and the most one query takes there)
TRUNCATED_PAIRS = 2**21


def truncated_sums(bound, P, V_aug, tolerance, fallback):
    """Exact sums at queries ``P`` (as given) over the samples that carry them, for an unweighted
    profile without a support: the nearest sample at ``u_0`` (the index's search), then every
    sample within ``u_r``, where ``n k(u_r^2) = tolerance k(u_0^2)``. The weight left out is at
    most ``(n - kept) k(u_r^2) <= tolerance k(u_0^2)``, below ``tolerance`` of the weight kept (the
    nearest sample's alone), so the local means and weight sums are exact to ``tolerance``
    relative, however far the queries are from the samples (a binned pass's far queries,
    :func:`~localkit.engine.passes.binned.unresolved`). A query whose radius holds more than
    ``TRUNCATED_PAIRS`` samples takes ``fallback(rows)`` instead (an exact pass of bounded memory).
    ``(sums, shift)`` as the paths return them."""
    profile, unit, n = bound.kernel.profile, bound.index_unit, bound.n_samples
    Pi = bound.index_points(P)
    u0 = bound.index.kneighbors(Pi, n_neighbors=1)[0][:, 0] / unit
    radius = np.sqrt(profile.truncation_radius(u0, math.log(tolerance) - math.log(n))) * unit
    counts = bound.index.tree.query_radius(Pi, radius, count_only=True)
    S = np.empty((len(P), V_aug.shape[1]), dtype=V_aug.dtype)
    shift = np.empty(len(P), dtype=V_aug.dtype)
    # queries whose radius holds many samples: the dense pass (its memory bounded by blocks); the
    # others in blocks of at most TRUNCATED_PAIRS candidate pairs
    heavy = counts > TRUNCATED_PAIRS
    if heavy.any():
        rows = np.flatnonzero(heavy)
        S[rows], shift[rows] = fallback(rows)
    light = np.flatnonzero(~heavy)
    cuts = np.searchsorted(np.cumsum(counts[light]), np.arange(1, len(light) + 1) * TRUNCATED_PAIRS)
    for rows in np.split(light, np.unique(cuts[cuts < len(light)])):
        if not len(rows):
            continue
        idx, dist = bound.index.tree.query_radius(Pi[rows], radius[rows], return_distance=True)
        indptr = np.concatenate([[0], np.cumsum(counts[rows])])
        u2 = (np.concatenate(dist) / unit) ** 2
        S[rows], shift[rows] = csr_sums(profile.log_k(u2), np.concatenate(idx), indptr, V_aug)
    return S, shift


def csr_sums(L, idx, indptr, V_aug, g=None):
    """``(sums, shift)`` over flat neighbourhoods (query ``i``'s samples ``idx[indptr[i]:indptr[i + 1]]``
    with log-weights ``L``, times the factors ``g`` where given), each row's maximum factored out:
    the true sums are ``sums * exp(shift)``."""
    counts = np.diff(indptr)
    owner = np.repeat(np.arange(len(counts)), counts)
    m = np.full(len(counts), -np.inf)
    np.maximum.at(m, owner, L)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(L - m[owner])
    if g is not None:
        w = w * g
    W = sparse.csr_matrix((w.astype(V_aug.dtype), idx, indptr), shape=(len(counts), len(V_aug)))
    return np.asarray(W @ V_aug), m.astype(V_aug.dtype)


def product_pairs(bound, Q, rows, exclude_self):
    """The neighbour path of a product kernel with a compact factor ``c``
    (:func:`~localkit.engine.factors.candidate_factor`): ``(indptr, idx, L)``, each query's
    candidates (``Q`` raw, global rows ``rows``) found in c's support by c's own index as the
    plain kernel of c's columns finds them (:func:`_neighborhoods`: its k nearest samples for a kNN
    factor, else a radius search), and ``L`` the whole product's log-weights on those pairs only
    (c's from the index's distances, the others' from coordinate differences,
    :func:`~localkit.engine.factors.pair_log_weights`). Pairs of zero weight are dropped, and with
    ``exclude_self`` the samples at the query's point (a kNN factor's k nearest are taken among
    the others, as the product's leave-one-out defines them)."""
    c = candidate_factor(bound)
    knn_loo = exclude_self and c.kernel.n_neighbors is not None  # a kNN factor's twins are the product's
    indptr, idx, _, u2, _ = _neighborhoods(c.bound, c.bound.index_points(Q[:, c.cols]), rows, knn_loo,
                                           c.bound.twins if knn_loo else None)
    owner = np.repeat(np.arange(Q.shape[0]), np.diff(indptr))
    scales = knn_scales(bound, Q, exclude_self, rows.start, skip=c)
    L = c.kernel.profile.log_k(u2).astype(bound.dtype) + pair_log_weights(bound, Q, owner, idx, scales, skip=c)
    keep = np.isfinite(L)
    if exclude_self:
        at = owner + rows.start
        keep &= idx != at if bound.twins is None else bound.twins[idx] != bound.twins[at]
    if not keep.all():
        indptr = np.concatenate([[0], np.cumsum(np.bincount(owner[keep], minlength=Q.shape[0]))])
        idx, L = idx[keep], L[keep]
    return indptr, idx, L


def _gathered_sums(L, idx, V_aug):
    m = L.max(axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(L - m[:, None]).astype(V_aug.dtype, copy=False)
    sums = np.einsum("qk,qkp->qp", w, V_aug[idx])
    return sums, m.astype(V_aug.dtype, copy=False)


# -- the neighbour path ------------------------------------------------------------------------
def neighbor_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    kern, opts = bound.kernel, bound.options
    n_q = Q.shape[0]
    V_aug = bound.weighted(V_aug)
    S = np.empty((n_q, V_aug.shape[1]), dtype=V_aug.dtype)
    shift = np.empty(n_q, dtype=V_aug.dtype)
    k = kern.n_neighbors
    width = k if k is not None else 64
    bq = opts.block_size if np.isscalar(opts.block_size) else (opts.block_size or (0,))[0]
    bq = int(bq or 0) or max(64, int(8 * 2**20 // (8 * width * V_aug.shape[1] + 1)))

    product = bound.factors is not None
    P = None if product else bound.index_points(queries)
    twins = bound.twins if exclude_self and not product else None

    def run(rows):
        if product:  # candidates from the compact factor's support, the product's log-weights on them
            indptr, idx, L = product_pairs(bound, Q[rows], rows, exclude_self)
            s, m = csr_sums(L, idx, indptr, V_aug)
        elif k is not None:
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
    L = np.full((Q.shape[0], bound.n_samples), -np.inf, dtype=bound.dtype)
    L[np.arange(Q.shape[0])[:, None], idx] = log_k(scaled_sq_distances(dist, dist[:, -1]))
    rows, found = coincident(bound.index, Q, dist, bound.kernel.profile, exclude_self=exclude_self,
                                row_offset=row_offset, groups=twins)
    for r, f in zip(rows, found):  # d_k = 0: every sample at the query's point
        L[r, f] = log_k(np.zeros(1))[0]
    return L


# -- neighbourhoods as scikit-learn's neighbours see them, and caller-weighted sums --------------
# (scikit-learn's ``kneighbors`` / ``radius_neighbors`` and ``weights="distance"`` or a callable;
# separate functions, so that the planner's paths above stay as they are)
def _neighborhoods(bound, P, rows, exclude_self, twins):
    """Each query's neighbourhood, flat: ``(indptr, idx, dist, u2, grid)``, ``dist`` in the
    index's units, ``u2`` the kernel's squared scaled distance, ``grid`` True where every query
    has the same count (a kNN kernel: the caller's function sees an ``(n_queries, k)`` array)."""
    kern, n = bound.kernel, bound.n_samples
    k = kern.n_neighbors
    if k is not None:
        dist, idx = kneighbors(bound.index, P, k, exclude_self=exclude_self, row_offset=rows.start, groups=twins)
        u2 = scaled_sq_distances(dist, dist[:, -1])
        at_point, found = coincident(bound.index, P, dist, kern.profile, exclude_self=exclude_self,
                                     row_offset=rows.start, groups=twins)
        if len(at_point) == 0:
            indptr = np.arange(0, (P.shape[0] + 1) * k, k)
            return indptr, idx.ravel(), dist.ravel(), u2.ravel(), True
        lists = [(idx[r], dist[r], u2[r]) for r in range(P.shape[0])]
        for r, f in zip(at_point, found):  # d_k = 0: every sample at the query's point, at u = 0
            lists[r] = (f, np.zeros(len(f)), np.zeros(len(f)))
        flat = [np.concatenate([x[c] for x in lists]) for c in range(3)]
        indptr = np.concatenate([[0], np.cumsum([len(x[0]) for x in lists])])
        return indptr, flat[0], flat[1], flat[2], False
    unit = bound.index_unit
    if kern.compact:
        radius = unit * (1.0 if bound.sample_scale is None else float(bound.sample_scale.max()))
        dist, idx = bound.index.radius_neighbors(P, radius=radius, sort_results=True)
    else:  # every sample carries weight: all of them, nearest first
        dist, idx = bound.index.kneighbors(P, n_neighbors=n)
    lengths = np.fromiter((len(r) for r in idx), dtype=np.intp, count=len(idx))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    flat_idx = np.concatenate(list(idx)).astype(np.intp) if len(idx) else np.zeros(0, dtype=np.intp)
    flat_d = np.concatenate(list(dist)).astype(np.float64) if len(dist) else np.zeros(0)
    u2 = (flat_d / unit) ** 2
    if bound.sample_scale is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            u2 = np.nan_to_num(u2 / bound.sample_scale[flat_idx] ** 2, nan=0.0, posinf=np.inf)
    elif kern.compact:
        np.minimum(u2, 1.0, out=u2)  # inside by the index's test (see radius_block_sums)
    keep = np.isfinite(kern.profile.log_k(u2))
    owner = np.repeat(np.arange(P.shape[0]), lengths)
    if exclude_self:
        at = owner + rows.start
        keep &= flat_idx != at if twins is None else twins[flat_idx] != twins[at]
    if not keep.all():
        indptr = np.concatenate([[0], np.cumsum(np.bincount(owner[keep], minlength=P.shape[0]))])
        flat_idx, flat_d, u2 = flat_idx[keep], flat_d[keep], u2[keep]
    return indptr, flat_idx, flat_d, u2, False


def distance_weights(dist):
    """scikit-learn's ``weights="distance"``: ``1 / d`` and, in a neighbourhood holding a sample
    at distance 0, 1 for those samples and 0 for the others (``dist``: a 2-D array or an object
    array of 1-D arrays, as scikit-learn passes them)."""
    def one(d):
        d = np.asarray(d, dtype=np.float64)
        zero = d == 0
        if zero.any():
            return zero.astype(np.float64)
        return 1.0 / d
    if dist.dtype == object:
        out = np.empty(len(dist), dtype=object)
        for i, d in enumerate(dist):
            out[i] = one(d)
        return out
    return np.stack([one(d) for d in dist]) if len(dist) else np.zeros_like(dist, dtype=np.float64)


def _caller_weights(weights, dist, indptr, grid):
    """The caller's factors ``g`` of the flat distances, given to ``weights`` as scikit-learn
    gives them: an ``(n_queries, k)`` array for kNN kernels, an object array otherwise."""
    n_q = len(indptr) - 1
    if grid:
        shaped = dist.reshape(n_q, -1) if n_q else dist.reshape(0, 0)
    else:
        shaped = np.empty(n_q, dtype=object)
        for i in range(n_q):
            shaped[i] = dist[indptr[i]:indptr[i + 1]]
    g = distance_weights(shaped) if isinstance(weights, str) else weights(shaped)
    if isinstance(g, np.ndarray) and g.dtype == object:
        g = [np.asarray(r, dtype=np.float64).ravel() for r in g]
        ok = len(g) == n_q and all(len(r) == indptr[i + 1] - indptr[i] for i, r in enumerate(g))
        g = np.concatenate(g) if ok and g else np.zeros(0)
    else:
        g = np.asarray(g, dtype=np.float64)
        ok = g.shape == shaped.shape
        g = g.ravel()
    if not ok:
        raise ValueError(f"weights (a callable) must return an array shaped as the distances it is given, "
                         f"{'(n_queries, n_neighbors)' if grid else 'one array per query'}")
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        raise ValueError("weights (a callable) must return finite weights >= 0")
    return g


def caller_weighted_sums(bound, queries, values, weights, *, exclude_self=False):
    """Local means whose kernel weights are multiplied by a factor of each sample's distance,
    ``w_ij = c_j K(x*_i, x_j) g_ij``: scikit-learn's ``weights="distance"`` (``g = 1 / d``, and
    where the neighbourhood holds samples at distance 0, those alone) or a callable ``weights``
    of the neighbourhood's distances (an ``(n_queries, k)`` array with a kNN kernel, an object
    array of one array per query otherwise, as scikit-learn's kNN and radius estimators give).

    The neighbourhood is the kernel's support: the k nearest samples (kNN kernels), the samples
    within the support (compact profiles), or every sample; distances are those of
    :meth:`BoundKernel.metric_distances <localkit.engine.BoundKernel.metric_distances>`.
    ``exclude_self`` is the engine's leave-one-out (every sample at the query's point left out).
    ``values`` as for :meth:`~localkit.engine.BoundKernel.sums` (a
    :class:`~localkit.engine.BoundValues` or an array). Returns a :class:`~localkit.engine.LocalSums`
    (the empty-neighbourhood policy applied where the factors leave no weight)."""
    from ..results import finish

    if not callable(weights) and weights != "distance":
        raise ValueError(f"weights must be 'uniform', 'distance' or a callable, got {weights!r}")
    if not bound.on_host:
        raise ValueError(f"weights={weights!r} needs NumPy arrays (a neighbour search on the host); "
                         f"got arrays of {bound.xp.__name__}")
    if bound.kernel.is_softmax:
        raise ValueError(f"weights={weights!r} multiplies a distance kernel; the softmax kernel has no distance")
    prepared = values if hasattr(values, "V_aug") else bound.prepare(values)
    V_aug = bound.weighted(prepared.V_aug)
    P = bound.index_points(queries)
    n_q = P.shape[0]
    twins = bound.twins if exclude_self else None
    S = np.zeros((n_q, V_aug.shape[1]), dtype=V_aug.dtype)
    shift = np.zeros(n_q, dtype=V_aug.dtype)
    width = bound.kernel.n_neighbors or (64 if bound.kernel.compact else bound.n_samples)
    block = max(1, int(4 * 2**20 // (8 * width * max(V_aug.shape[1], 4))))

    def run(rows):
        indptr, idx, dist, u2, grid = _neighborhoods(bound, P[rows], rows, exclude_self, twins)
        d = bound.metric_distances(dist)
        if isinstance(weights, str) and bound.weight is not None:
            # a zero-weight sample at the query's point must not take the neighbourhood (1 / d = inf):
            # it counts as absent, as if it were not there
            d = np.where(bound.weight[idx] > 0, d, np.inf)
        g = _caller_weights(weights, d, indptr, grid)
        S[rows], shift[rows] = csr_sums(bound.kernel.profile.log_k(u2), idx, indptr, V_aug, g)

    map_blocks(run, n_q, block, bound.options.threads, blas=False)
    return finish(bound, queries, S, shift, prepared, exclude_self)


# -- the truncated pass: a smooth profile summed over the clusters that carry it, the weight left out bounded --
#: the truncated pass's tolerance where none is given (``algorithm="approximate"``)
TRUNCATED_TOLERANCE = 1e-6
#: (query, cluster) bounds of one block of queries of the truncated pass
TRUNCATED_BLOCK_PAIRS = 2**20


def truncated_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    """Sums of a profile that never grows with the distance over the clusters of samples that carry
    each query's weight, with a bound on the weight left out: ``(S, shift, omitted)`` (``Q`` in the
    engine's coordinates).

    The samples are partitioned once (:attr:`~localkit.engine.BoundKernel.clusters`, a
    :class:`~localkit.engine.retrieval.ClusterIndex`: centres ``c``, radii ``r_c``, weights ``W_c =
    sum c_j`` with ``c_j <= 1``). A cluster weighs at most ``U_c = W_c k(max(0, |q - c| - r_c) / h)``
    (triangle inequality); each query visits its clusters in the order of ``U_c``, largest first,
    summing each one exactly (its members' log-weights about its centre, an online log-sum-exp),
    1, then 1, 2, 4, ... more at a time, until the bound on what the clusters not visited hold is at
    most ``tolerance`` (``options.tolerance``, else ``TRUNCATED_TOLERANCE``) of the weight kept:

        omitted = sum_(c not visited) U_c / sum_(j visited) c_j k(|q - x_j| / h) <= tolerance.

    ``omitted`` is reported per query (0 where every cluster was visited: the exact sums). The
    local mean's error is then at most ``tolerance`` times the spread of the values, and the log
    weight sum's at most ``log(1 + tolerance)``, for any data: where the clusters do not separate
    (uniform data, a wide bandwidth) a query visits them all and its sums are the dense pass's.
    Memory: ``TRUNCATED_BLOCK_PAIRS`` bounds per block of queries, and one cluster's log-weights."""
    tol = bound.options.tolerance or TRUNCATED_TOLERANCE
    clusters = bound.clusters
    n_q = Q.shape[0]
    S = np.zeros((n_q, V_aug.shape[1]), dtype=V_aug.dtype)
    shift = np.zeros(n_q, dtype=V_aug.dtype)
    omitted = np.zeros(n_q)
    threads = max(1, bound.options.threads)
    block = max(1, min(TRUNCATED_BLOCK_PAIRS // clusters.n_clusters, -(-n_q // threads)))

    def run(rows):
        S[rows], shift[rows], omitted[rows], _ = cluster_sums(bound, Q[rows], V_aug, tol)

    map_blocks(run, n_q, block, bound.options.threads)
    return S, shift, omitted


def cluster_sums(bound, Q, V_aug, tol):
    """The truncated pass on one block of queries ``Q`` (engine coordinates; see
    :func:`truncated_path`): ``(S, shift, omitted, visited)``, ``visited`` the samples each query
    summed."""
    clusters, kern = bound.clusters, bound.kernel
    n_b, n_c, width = Q.shape[0], clusters.n_clusters, V_aug.shape[1]
    with np.errstate(over="ignore"):
        log_bound = clusters.log_mass + kern.profile.log_k(np.ldexp(clusters.lower_sq(Q), bound.u2_exponent))
    order = np.argsort(-log_bound, axis=1, kind="stable")
    # rest[:, r]: the log of the most weight the clusters after the first r (in that order) can hold
    rest = np.full((n_b, n_c + 1), -np.inf)
    rest[:, :n_c] = np.logaddexp.accumulate(np.take_along_axis(log_bound, order, axis=1)[:, ::-1], axis=1)[:, ::-1]
    acc = OnlineLogSumExp(n_b, width - 1, V_aug.dtype)
    omitted = np.zeros(n_b)
    visited = np.zeros(n_b, dtype=np.intp)
    todo, lo, hi = np.arange(n_b), 0, 1
    while len(todo):
        # the pairs (query, cluster) of this round, grouped by cluster: one matrix product per cluster
        rows = np.repeat(todo, hi - lo)
        cols = order[todo, lo:hi].ravel()
        by = np.argsort(cols, kind="stable")
        rows, cols = rows[by], cols[by]
        cuts = np.flatnonzero(np.diff(cols)) + 1
        for qs, c in zip(np.split(rows, cuts), cols[np.concatenate([[0], cuts])] if len(cols) else []):
            members = clusters.members(c)
            # about the cluster's centre: the matrix product's round-off is that of |q - c| and r_c, not |q|
            L, offset = bound.block(Q[qs], centre=clusters.centres[c]).log_weights(members, fold_offset=True)
            L += offset[:, None]
            if bound.weight is not None:
                L += bound.log_weight[members]
            part = OnlineLogSumExp(len(qs), width - 1, V_aug.dtype)
            part.m, part.S = acc.m[qs], acc.S[qs]
            part.update(L, V_aug[members])
            acc.m[qs], acc.S[qs] = part.m, part.S
            visited[qs] += len(members)
        left = rest[todo, hi]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            rel = np.where(left == -np.inf, 0.0, np.exp(left - (acc.m[todo] + np.log(acc.S[todo, -1]))))
        done = (rel <= tol) | (hi >= n_c)
        omitted[todo[done]] = rel[done]
        todo, lo, hi = todo[~done], hi, min(n_c, 2 * hi)
    return acc.S, acc.m, omitted, visited
