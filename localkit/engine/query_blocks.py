"""The log-weights of a block of queries against blocks of samples, as a bound kernel forms them
on the host: what a pass asks of :meth:`BoundKernel.block <localkit.engine.BoundKernel.block>`
instead of reading the binding's layout (its coordinates, squared norms, exponent, raw bandwidth
and index unit stay behind this module).

Accuracy far from the origin. The matrix-product form ``|q|^2 - 2 q.x + |x|^2`` of a squared
distance carries an absolute error of about ``eps |q|^2`` (``eps`` of the dtype), which for the
samples that carry weight is also the error of the log-weights. A query block whose points sit
farther than ``sqrt(tol / (2 eps))`` bandwidths from the centre is therefore recentred on its own
centre (the dense pass first sorts the queries along their widest coordinate, so that blocks are
compact), and if that is not enough its distances are formed exactly, as differences.
"""
from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

#: Largest error of a log-weight (a relative weight error) that the matrix-product form may carry,
#: per dtype: float32 keeps its fast path up to ~64 bandwidths from a block's centre, float64 to ~1,400
LOG_WEIGHT_TOL = {np.dtype(np.float32): 2.0 ** -10, np.dtype(np.float64): 2.0 ** -30}


def cancellation_ok(Q):
    """True when the matrix-product form keeps log-weights within ``LOG_WEIGHT_TOL`` for these
    queries (in the engine's coordinates, about the point they are measured from)."""
    if len(Q) == 0:
        return True
    eps = np.finfo(Q.dtype).eps
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(2.0 * eps * float(np.max(np.einsum("ij,ij->i", Q, Q))) <= LOG_WEIGHT_TOL[Q.dtype])


class QueryBlock:
    """A block of queries of a bound kernel (engine coordinates): recentred, or marked for exact
    distances. ``q_scale`` (per query) divides ``u``; softmax logits arrive divided by
    ``2^logit_exponent``; ``points`` (the queries in the index's coordinates) decide the uniform
    profile's edge as the index does (:attr:`BoundKernel.exact_edge <localkit.engine.BoundKernel.exact_edge>`);
    a given ``centre`` (a cluster's, in the truncated pass) is the point the block is measured from,
    whatever its size: the product form's error is then that of the distances to it."""

    def __init__(self, bound, Q, q_scale=None, logit_exponent=0, points=None, centre=None):
        # what every column block reads, looked up once per query block (the layout's are memoised lookups)
        self.bound, self.X, self.x_sq, self.u2_exponent = bound, bound.X, bound.x_sq, bound.u2_exponent
        self.points = points if q_scale is None else None
        if bound.raw_h is not None:  # a raw distance divided by the (scalar) bandwidth times the query's scale
            q_scale = np.full(len(Q), bound.raw_h, dtype=Q.dtype) if q_scale is None else bound.raw_h * q_scale
        self.q_scale = q_scale
        self.temperature = bound.h if bound.kernel.is_softmax else 1.0
        if logit_exponent:  # logits / 2^k from queries / 2^k (ldexp: exact, for any k)
            Q = np.ldexp(Q, -logit_exponent)
        self.centre = None
        self.exact = not bound.scaled or bound.kernel.metric != "euclidean"
        if centre is not None:
            self.Q, self.centre = (Q - centre).astype(Q.dtype, copy=False), centre
            return
        # the product form errs by ~eps |q|^2 in u^2 at unit scale; a per-query scale (a kNN
        # bandwidth: the k-th distance) divides u^2, and that error, by its square
        inv = None if q_scale is None else np.where(q_scale > 0, 1.0 / np.where(q_scale > 0, q_scale, 1.0), 1.0)
        ok = cancellation_ok if inv is None else (lambda P: cancellation_ok((P * inv[:, None]).astype(P.dtype)))
        if self.exact or bound.kernel.is_softmax or ok(Q):
            self.Q = Q
            return
        with np.errstate(over="ignore", invalid="ignore"):  # inf queries: no centre, exact distances
            centre = 0.5 * (Q.min(axis=0) + Q.max(axis=0))
        if np.all(np.isfinite(centre)) and ok(Q - centre):
            self.Q, self.centre = Q - centre, centre
        else:
            self.Q, self.exact = Q, True

    def log_weights(self, cols, fold_offset=False):
        """``(L, offset)`` of this block against the samples ``cols``: ``log K = L + offset``
        (``fold_offset``: ``L = log K``, see :meth:`localkit.Kernel.log_weights`)."""
        bound = self.bound
        if self.points is not None:  # the compiled pass's test |q - x|^2 <= h^2: ties with the edge kept alike
            inside = cdist(self.points, bound.index_points(None, cols), "sqeuclidean") <= bound.index_unit ** 2
            L = np.where(inside, bound.kernel.profile.log_k(np.zeros(1))[0], -np.inf).astype(self.Q.dtype)
            return L, np.zeros(len(L), dtype=L.dtype)
        s_scale = None if bound.sample_scale is None else bound.sample_scale[cols]
        if bound.kernel.metric == "precomputed":  # the queries are their distances to the samples
            return bound.kernel.log_weights(self.Q[:, cols], None, q_scale=self.q_scale, s_scale=s_scale)
        X = self.X[cols]
        x_sq = self.x_sq[cols]
        if self.centre is not None:
            X = (X - self.centre).astype(self.Q.dtype, copy=False)
            x_sq = np.einsum("ij,ij->i", X, X)
        return bound.kernel.log_weights(self.Q, X, x_sq=x_sq, q_scale=self.q_scale, s_scale=s_scale,
                                        temperature=self.temperature, exact=self.exact,
                                        u2_exponent=self.u2_exponent, fold_offset=fold_offset)


class ProductBlock:
    """A block of queries (raw coordinates) of a bound product: one :class:`QueryBlock` per
    distance factor (recentred or exact as that factor needs; a kNN factor's at the queries'
    balloon bandwidths ``scales[f]``, :func:`~localkit.engine.factors.knn_scales`), the codes of
    each categorical one."""

    def __init__(self, bound, Q, scales):
        self.bound, self.Q = bound, Q
        self.parts = []
        for f, scale in zip(bound.factors, scales):
            if f.categorical is not None:
                self.parts.append(Q[:, f.cols])
            else:
                if scale is None and f.kernel.n_neighbors is not None:
                    raise ValueError(f"the kNN factor {f.kernel!r} needs the balloon bandwidths of the queries")
                # the uniform profile's edge decided as the neighbour path's index decides it (exact_edge)
                points = f.bound.index_points(Q[:, f.cols]) if f.bound.exact_edge and scale is None else None
                self.parts.append(QueryBlock(f.bound, f.bound.engine_points(Q[:, f.cols]), scale, points=points))

    def log_weights(self, cols, fold_offset=False):
        """``(L, offset)`` with ``L = log K`` (the sum of the factors') and a zero offset."""
        L = None
        for f, part in zip(self.bound.factors, self.parts):
            if f.categorical is not None:
                Lf = f.categorical.log_weights(np, part, f.codes[cols])
            else:
                Lf, offset = part.log_weights(cols, fold_offset=True)
                if np.any(offset):
                    Lf = Lf + offset[:, None]
            if L is None:
                L = np.array(Lf, dtype=self.Q.dtype)
            else:
                L += Lf
        return L, np.zeros(len(self.Q), dtype=self.Q.dtype)
