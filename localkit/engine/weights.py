"""Dense blocks of kernel weights, for local models without a closed form.

The localization trick fits one model per query with ``sample_weight = K(x*, x_i)``; those fits
need the raw weights themselves, not a reduction. :class:`KernelWeights` binds a kernel to the
samples once (bandwidth rule, centred and scaled coordinates, squared norms, the kNN index) and
then gives the log-weights of a whole block of queries against every sample from one call of
:meth:`localkit.Kernel.log_weights`. Memory is ``block x n_samples``; callers walk query blocks.
"""
from __future__ import annotations

import numpy as np

from .._validation import check_points
from . import neighbors as nb
from .local_mean import make_kernel


class KernelWeights:
    """``log K(x*, x_i)`` for blocks of queries against fixed samples (``K(x, x) = 1``)."""

    def __init__(self, samples, kernel="gaussian", bandwidth=1.0, n_neighbors=None, metric="euclidean"):
        samples = check_points(samples, "samples")
        self.kernel = make_kernel(kernel, bandwidth, n_neighbors, metric)
        if self.kernel.is_softmax:
            raise ValueError("KernelWeights needs a distance kernel, not 'softmax'")
        k = self.kernel.n_neighbors
        if k is not None and k > len(samples):
            raise ValueError(f"n_neighbors must be <= n_samples={len(samples)}, got {k}")
        self.h = self.kernel.resolve_bandwidth(samples)
        self.centre = samples.mean(axis=0)
        self.Xs = self.kernel.scale(samples - self.centre, self.h)
        self.x_sq = np.einsum("ij,ij->i", self.Xs, self.Xs)
        self._index = None

    @property
    def index(self):
        """The neighbour index over the scaled samples, built on first use (kNN, nearest)."""
        if self._index is None:
            self._index = nb.make_index(self.Xs, self.kernel.metric)
        return self._index

    def _scaled(self, queries):
        return self.kernel.scale(np.asarray(queries, dtype=self.Xs.dtype) - self.centre, self.h)

    def nearest(self, queries):
        """Index of the nearest sample of each query (for empty neighbourhoods)."""
        return self.index.kneighbors(self._scaled(queries), n_neighbors=1)[1][:, 0]

    def log_weights(self, queries, *, exclude_self=False, row_offset=0):
        """``(b_q, n_samples)`` log-weights; ``exclude_self`` sets ``log K = -inf`` for sample
        ``row_offset + i`` at query ``i`` (queries are then the samples)."""
        Qs = self._scaled(queries)
        k = self.kernel.n_neighbors
        if k is not None and self.kernel.compact:
            # exactly the k nearest, with the tree's distances (as the engine's neighbour path):
            # matrix-product distances could push the k-th neighbour past u = 1
            dist, idx = nb.kneighbors(self.index, Qs, k, exclude_self=exclude_self, row_offset=row_offset)
            L = np.full((len(Qs), len(self.Xs)), -np.inf, dtype=self.Xs.dtype)
            L[np.arange(len(Qs))[:, None], idx] = self.kernel.profile.log_k(nb.scaled_sq_distances(dist, dist[:, -1]))
            return L
        q_scale = None
        if k is not None:
            q_scale = nb.knn_bandwidth(self.index, Qs, self.kernel.n_neighbors, exclude_self=exclude_self,
                                       row_offset=row_offset)
        L, offset = self.kernel.log_weights(Qs, self.Xs, x_sq=self.x_sq, q_scale=q_scale)
        L += offset[:, None]
        if exclude_self:
            rows = np.arange(len(Qs))
            L[rows, rows + row_offset] = -np.inf
        return L
