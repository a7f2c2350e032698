"""The neighbour path: k-nearest-neighbour and radius queries for kNN kernels and compact
profiles, where only a few samples carry weight and a tree finds them cheaper than a full pass.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse
from sklearn.neighbors import NearestNeighbors


def make_index(Xs, metric, p=2):
    """A scikit-learn neighbour index over the scaled samples (for ``metric="precomputed"``,
    their distances to each other; queries then give theirs to the samples)."""
    return NearestNeighbors(metric=metric, p=p, algorithm="auto").fit(Xs)


def kneighbors(index, Q, k, *, exclude_self=False, row_offset=0):
    """Distances and indices of the ``k`` nearest samples of each query, nearest first.

    With ``exclude_self`` query ``i`` (global row ``row_offset + i``) is sample ``i`` and is
    dropped from its own neighbours (if a duplicate displaced it, the farthest one is dropped).
    """
    if not exclude_self:
        return index.kneighbors(Q, n_neighbors=k)
    dist, idx = index.kneighbors(Q, n_neighbors=k + 1)
    rows = np.arange(len(Q)) + row_offset
    is_self = idx == rows[:, None]
    missing = ~is_self.any(axis=1)
    is_self[missing, -1] = True
    keep = ~is_self
    return dist[keep].reshape(len(Q), k), idx[keep].reshape(len(Q), k)


def knn_bandwidth(index, Q, k, *, exclude_self=False, row_offset=0):
    """The balloon bandwidth ``h(x*)``: distance to the k-th nearest sample."""
    dist, _ = kneighbors(index, Q, k, exclude_self=exclude_self, row_offset=row_offset)
    return dist[:, -1]


def scaled_sq_distances(dist, h):
    """``(d / h)^2`` row-wise; a zero ``h`` (k duplicates) counts distance 0 fully, others not."""
    with np.errstate(divide="ignore", invalid="ignore"):
        u2 = (dist / h[:, None]) ** 2
    return np.nan_to_num(u2, nan=0.0, posinf=np.inf)


def knn_block_sums(index, Q, k, profile, V_aug, *, exclude_self=False, row_offset=0):
    """Weighted sums over exactly the k nearest samples (compact profile, kNN bandwidth).

    ``w_ij = k(d_ij / d_ik)``; returns ``(sums, log_scale)`` with the true sums equal to
    ``sums * exp(log_scale)`` (the row maximum is factored out, as in the dense path).
    """
    dist, idx = kneighbors(index, Q, k, exclude_self=exclude_self, row_offset=row_offset)
    L = profile.log_k(scaled_sq_distances(dist, dist[:, -1]))
    return _gathered_sums(L, idx, V_aug)


def radius_block_sums(index, Q, profile, V_aug, *, radius=1.0, s_scale=None, exclude_self=False,
                      row_offset=0):
    """Weighted sums over the samples within ``radius`` (scaled coordinates) of each query."""
    dist, idx = index.radius_neighbors(Q, radius=radius, sort_results=False)
    lengths = np.fromiter((len(r) for r in idx), dtype=np.intp, count=len(idx))
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    flat_idx = np.concatenate(idx) if len(idx) else np.zeros(0, dtype=np.intp)
    flat_d = np.concatenate(dist) if len(dist) else np.zeros(0)
    rows = np.repeat(np.arange(len(Q)), lengths)
    u2 = flat_d * flat_d
    if s_scale is not None:
        u2 = u2 / s_scale[flat_idx] ** 2
    w = np.exp(profile.log_k(u2))
    if exclude_self:
        w[flat_idx == rows + row_offset] = 0.0
    W = sparse.csr_matrix((w.astype(V_aug.dtype), flat_idx, indptr), shape=(len(Q), len(V_aug)))
    sums = np.asarray(W @ V_aug)
    return sums, np.zeros(len(Q), dtype=V_aug.dtype)


def _gathered_sums(L, idx, V_aug):
    m = L.max(axis=1)
    m = np.where(np.isfinite(m), m, 0.0)
    w = np.exp(L - m[:, None]).astype(V_aug.dtype, copy=False)
    sums = np.einsum("qk,qkp->qp", w, V_aug[idx])
    return sums, m.astype(V_aug.dtype, copy=False)
