"""The dense path: blocks of queries against blocks of samples (sized to stay in cache,
:func:`~localkit.engine.block_sizes`), log-weights from one matrix product, summed by the one
streamed pass (:mod:`localkit.engine.passes.streamed`: distance kernels sum their weights
directly, ``log K <= 0``, and hand rows whose weights underflow to the online log-sum-exp;
threads over query blocks).

Accuracy far from the origin. The matrix-product form ``|q|^2 - 2 q.x + |x|^2`` of a squared
distance carries an absolute error of about ``eps |q|^2`` (``eps`` of the dtype), which for the
samples that carry weight is also the error of the log-weights. A query block whose points sit
farther than ``sqrt(tol / (2 eps))`` bandwidths from the centre is therefore recentred
on its own centre (queries are first sorted along their widest coordinate, so that blocks are
compact), and if that is not enough its distances are formed exactly, as differences.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.spatial.distance import cdist

from ..blocks import MAX_SAMPLE_BLOCK, block_sizes
from ..factors import candidate_factor, knn_scales
from ..twins import mask_twins
from .streamed import sample_log_weights, softmax_exponent, stream_sums

#: Largest error of a log-weight (a relative weight error) that the matrix-product form may carry,
#: per dtype: float32 keeps its fast path up to ~64 bandwidths from a block's centre, float64 to ~1,400
LOG_WEIGHT_TOL = {np.dtype(np.float32): 2.0 ** -10, np.dtype(np.float64): 2.0 ** -30}


def _cancellation_ok(Q):
    """True when the matrix-product form keeps log-weights within ``LOG_WEIGHT_TOL`` for these
    queries (in the engine's coordinates, about the point they are measured from)."""
    if len(Q) == 0:
        return True
    eps = np.finfo(Q.dtype).eps
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(2.0 * eps * float(np.max(np.einsum("ij,ij->i", Q, Q))) <= LOG_WEIGHT_TOL[Q.dtype])


class QueryBlock:
    """A block of queries prepared for the dense path: recentred, or marked for exact distances."""

    def __init__(self, bound, Q, q_scale=None, logit_exponent=0, points=None):
        # the uniform profile's edge from the index's coordinates (BoundKernel.exact_edge)
        self.points = points if q_scale is None else None
        if bound.raw_h is not None:  # a raw distance divided by the (scalar) bandwidth times the query's scale
            q_scale = np.full(len(Q), bound.raw_h, dtype=Q.dtype) if q_scale is None else bound.raw_h * q_scale
        self.X, self.x_sq = bound.X, bound.x_sq
        self.q_scale = q_scale
        self.temperature = bound.h if bound.kernel.is_softmax else 1.0
        if logit_exponent:  # logits / 2^k from queries / 2^k (ldexp: exact, for any k)
            Q = np.ldexp(Q, -logit_exponent)
        self.centre = None
        self.exact = not bound.scaled or bound.kernel.metric != "euclidean"
        # the product form errs by ~eps |q|^2 in u^2 at unit scale; a per-query scale (a kNN
        # bandwidth: the k-th distance) divides u^2, and that error, by its square
        inv = None if q_scale is None else np.where(q_scale > 0, 1.0 / np.where(q_scale > 0, q_scale, 1.0), 1.0)
        ok = _cancellation_ok if inv is None else (lambda P: _cancellation_ok((P * inv[:, None]).astype(P.dtype)))
        if self.exact or bound.kernel.is_softmax or ok(Q):
            self.Q = Q
            return
        with np.errstate(over="ignore", invalid="ignore"):  # inf queries: no centre, exact distances
            centre = 0.5 * (Q.min(axis=0) + Q.max(axis=0))
        if np.all(np.isfinite(centre)) and ok(Q - centre):
            self.Q, self.centre = Q - centre, centre
        else:
            self.Q, self.exact = Q, True

    def log_weights(self, bound, cols, fold_offset=False):
        """``(L, offset)`` of this block against the samples ``cols``: ``log K = L + offset``
        (``fold_offset``: ``L = log K``, see :meth:`localkit.Kernel.log_weights`)."""
        if self.points is not None:  # the compiled pass's test |q - x|^2 <= h^2: ties with the edge kept alike
            inside = cdist(self.points, bound.index_points(None, cols), "sqeuclidean") <= bound.index_unit ** 2
            L = np.where(inside, bound.kernel.profile.log_k(np.zeros(1))[0], -np.inf).astype(self.Q.dtype)
            return L, np.zeros(len(L), dtype=L.dtype)
        if bound.kernel.metric == "precomputed":  # the queries are their distances to the samples
            return bound.kernel.log_weights(self.Q[:, cols], None, q_scale=self.q_scale, s_scale=None
                                            if bound.sample_scale is None else bound.sample_scale[cols])
        X = self.X[cols]
        x_sq = self.x_sq[cols]
        if self.centre is not None:
            X = X - self.centre
            x_sq = np.einsum("ij,ij->i", X, X)
        s_scale = None if bound.sample_scale is None else bound.sample_scale[cols]
        return bound.kernel.log_weights(self.Q, X, x_sq=x_sq, q_scale=self.q_scale, s_scale=s_scale,
                                        temperature=self.temperature,
                                        exact=self.exact, u2_exponent=bound.u2_exponent,
                                        fold_offset=fold_offset)


def log_weight_block(bound, Q, cols, q_scale=None, points=None):
    """``(L, offset)`` of queries ``Q`` (engine coordinates; ``points``: in the index's, for
    :attr:`~localkit.engine.BoundKernel.exact_edge`) against the samples ``cols``."""
    if bound.factors is not None:  # a product: the sum of its factors' log-weights
        return ProductBlock(bound, Q, knn_scales(bound, Q, False)).log_weights(bound, cols)
    return QueryBlock(bound, Q, q_scale, points=points).log_weights(bound, cols)


def product_log_weights(bound, Q, exclude_self, row_offset):
    """``(n_queries, n_samples)`` ``log K`` of a product at ``Q`` (raw): with a compact kNN factor the
    neighbour path's pairs scattered (exactly its k nearest samples carry weight), else the dense
    path's block; with ``exclude_self`` the samples at query ``row_offset + i``'s point left out."""
    c = candidate_factor(bound)
    if c is not None and c.kernel.n_neighbors is not None:
        from .neighbors import product_pairs

        indptr, idx, L = product_pairs(bound, Q, slice(row_offset, row_offset + len(Q)), exclude_self)
        out = np.full((len(Q), bound.n_samples), -np.inf, dtype=bound.dtype)
        out[np.repeat(np.arange(len(Q)), np.diff(indptr)), idx] = L
        return out
    L, _ = ProductBlock(bound, Q, knn_scales(bound, Q, exclude_self, row_offset)).log_weights(
        bound, slice(0, bound.n_samples))
    if exclude_self:
        mask_twins(L, np.arange(len(Q)) + row_offset, slice(0, bound.n_samples), bound.twins)
    return L


def _spatial_order(Q):
    """A permutation that makes query blocks compact (sorted along the widest coordinate), or
    ``None`` when the queries are close enough to the centre not to need it."""
    if _cancellation_ok(Q):
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # an extent beyond the float range is inf
        widest = int(np.argmax(np.ptp(Q, axis=0)))
    return np.argsort(Q[:, widest], kind="stable")


#: Blocks pruned by bounding boxes: a sample block is skipped for a query block when the squared
#: distance between their boxes (engine coordinates, where the support is ``u^2 <= 1``) exceeds
#: ``1 + PRUNE_MARGIN``. The margin is wider than the matrix-product form's error of ``u^2``
#: (``2 LOG_WEIGHT_TOL``: 2^-9 in float32), so every pair skipped has weight 0 on the unpruned path
#: too and adding its exact zeros would change no sum.
PRUNE_MARGIN = 2.0 ** -6
#: Queries per leaf (and block) when pruning: small leaves have tight boxes (in more than 16
#: features a block of 64 queries against 512 samples is still ~2 M multiply-adds)
PRUNE_QUERY_LEAF = 64


def kd_order(P, leaf):
    """A permutation of the rows of ``P`` whose consecutive runs of ``leaf`` rows (the last one
    shorter) are the leaves of a k-d tree: median splits, at a multiple of ``leaf``, along the
    widest coordinate; each leaf's indices sorted, so that gathering it reads memory in order."""
    order = np.arange(len(P))
    stack = [(0, len(P))]
    while stack:
        a, b = stack.pop()
        if b - a <= leaf:
            order[a:b].sort()
            continue
        sub = order[a:b]
        pts = P[sub]
        axis = int(np.argmax(pts.max(axis=0) - pts.min(axis=0)))
        mid = leaf * (-(-(b - a) // leaf) // 2)  # half of the leaves (rounded down) on the left
        order[a:b] = sub[np.argpartition(pts[:, axis], mid - 1)]
        stack += [(a, a + mid), (a + mid, b)]
    return order


def leaf_boxes(P, order, leaf):
    """``(cols, lo, hi)``: the leaves of :func:`kd_order` (index arrays) and their bounding boxes."""
    cols = [order[a:a + leaf] for a in range(0, len(order), leaf)]
    lo = np.array([P[c].min(axis=0) for c in cols])
    hi = np.array([P[c].max(axis=0) for c in cols])
    return cols, lo, hi


def boxes_in_reach(lo, hi, Qb):
    """Which sample boxes (``lo``, ``hi``: (n_boxes, d)) hold a point of the support ``u^2 <= 1`` of
    some query of ``Qb``: the distance between the query block's box and each sample box, with
    the margin ``PRUNE_MARGIN``."""
    q_lo, q_hi = Qb.min(axis=0), Qb.max(axis=0)
    gap = np.maximum(lo - q_hi, 0.0) + np.maximum(q_lo - hi, 0.0)  # one of the two is 0
    return np.einsum("ij,ij->i", gap, gap) <= 1.0 + PRUNE_MARGIN


def prune_leaf(bound, bs):
    """Samples per leaf of the pruned path: the dense path's sample block ``bs``, but not widened past
    ``MAX_SAMPLE_BLOCK`` for few queries (wider leaves have looser boxes, and the leaves are built
    once per size: one size, whatever the number of queries)."""
    return bs if bound.options.block_size is not None else min(bs, MAX_SAMPLE_BLOCK)


def dense_blocks(bound, Q):
    """``(block_q, block_s)`` of the dense path for the queries ``Q`` (:func:`block_sizes`)."""
    return block_sizes(len(Q), bound.n_samples, Q.dtype.itemsize, bound.options,
                       n_features=0 if bound.kernel.metric == "precomputed" else bound.n_features)


#: A compact profile at a fixed bandwidth in more than this many features, on the dense path, runs
#: over the leaves of k-d trees and skips the sample leaves out of reach of a query leaf (their
#: bounding boxes farther apart than the support) where a probe keeps fewer than
#: ``PRUNE_MAX_KEPT`` of the block pairs. In fewer features the compiled pass or the radius path
#: prunes already.
PRUNE_MIN_FEATURES = 16
PRUNE_MAX_KEPT = 0.75


def prune_conditions(bound, q_scale, exclude_self):
    """Whether the dense path may prune blocks by bounding boxes here (before the probe): a compact
    profile at a fixed bandwidth (the support ``u^2 <= 1`` in the engine's coordinates) in more
    than ``PRUNE_MIN_FEATURES`` features, taken by ``algorithm='auto'`` (``'dense'`` keeps the
    plain order of blocks, and its sums bit for bit)."""
    kern = bound.kernel
    return (bound.on_host and not bound.sparse and bound.factors is None and kern.compact
            and kern.n_neighbors is None and kern.metric == "euclidean" and bound.scaled and q_scale is None
            and bound.sample_scale is None and not exclude_self and not bound.options.exact_edge
            and bound.options.algorithm == "auto" and bound.n_features > PRUNE_MIN_FEATURES)


def kept_fraction(bound, Q, probe=4096):
    """The share of (query block, sample block) pairs that the pruned dense path keeps, estimated
    on at most ``probe`` queries (in leaves of proportionally fewer queries, so that their boxes
    span what the full leaves span)."""
    if len(Q) == 0:
        return 0.0
    bq, bs = dense_blocks(bound, Q)
    bq = min(bq, PRUNE_QUERY_LEAF)
    rng = np.random.default_rng(0)
    P = Q[np.sort(rng.choice(len(Q), size=min(probe, len(Q)), replace=False))]
    leaf = max(1, bq * len(P) // len(Q))
    order = kd_order(P, leaf)
    _, lo, hi = bound.sample_leaves(prune_leaf(bound, bs))
    kept = [boxes_in_reach(lo, hi, P[order[a:a + leaf]]).mean() for a in range(0, len(P), leaf)]
    return float(np.mean(kept))


def prune_blocks(bound, Q, q_scale, exclude_self):
    """True when the dense path runs over k-d tree leaves and skips the sample leaves out of reach
    (:func:`prune_conditions` and a probe keeping fewer than ``PRUNE_MAX_KEPT`` of the blocks)."""
    return prune_conditions(bound, q_scale, exclude_self) and kept_fraction(bound, Q) < PRUNE_MAX_KEPT


def dense_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    """The dense pass (see the module's docstring); where :func:`prune_blocks` says so, over the
    leaves of k-d trees of the queries and of the samples, skipping the sample leaves that no
    query of a leaf reaches."""
    n_q, n_s = len(Q), bound.n_samples
    bq, bs = dense_blocks(bound, Q)
    if q_scale is None and bound.kernel.n_neighbors is not None:  # balloon bandwidth, smooth profile
        q_scale = bound.knn_scale(queries, exclude_self=exclude_self)
    if bound.factors is not None:  # a product's kNN factors (smooth profiles): their balloon bandwidths
        scales = knn_scales(bound, Q, exclude_self)
    # compact query blocks for the recentring of distances (softmax logits are inner products: none)
    order = (_spatial_order(Q) if bound.scaled and bound.kernel.metric == "euclidean" and not bound.kernel.is_softmax
             else None)
    pruned = prune_blocks(bound, Q, q_scale, exclude_self)
    if pruned:  # compact leaves of queries (also what the recentring needs) and of samples
        bq = min(bq, PRUNE_QUERY_LEAF)
        order = kd_order(Q, bq)
        leaves, lo, hi = bound.sample_leaves(prune_leaf(bound, bs))
    twins = bound.twins if exclude_self else None
    # softmax logits <q, x> / T beyond the float range are streamed as logits / 2^k
    exponent = softmax_exponent(np, bound, Q) if bound.kernel.is_softmax else 0
    log_weight = sample_log_weights(None if bound.weight is None else bound.log_weight, exponent)
    P = bound.index_points(queries) if bound.exact_edge and q_scale is None else None
    rank = np.arange(n_q) if order is None else order  # the query at each position of the pass

    def block_of(idx):
        if bound.factors is not None:  # a product: the sum of its factors' log-weights
            return ProductBlock(bound, Q[idx], [None if s is None else s[idx] for s in scales])
        return QueryBlock(bound, Q[idx], None if q_scale is None else q_scale[idx],
                          exponent, None if P is None else P[idx])

    def column_blocks(idx):
        if pruned:
            return [c for c, keep in zip(leaves, boxes_in_reach(lo, hi, Q[idx])) if keep]
        return [slice(c0, min(c0 + bs, n_s)) for c0 in range(0, n_s, bs)]

    def blocks(pos, fold_offset):
        idx = rank[pos]
        block = block_of(idx)
        for cols in column_blocks(idx):
            L, offset = block.log_weights(bound, cols, fold_offset)
            if log_weight is not None:
                L += log_weight[cols]
            if exclude_self:
                mask_twins(L, idx, cols, twins)
            yield L, offset, V_aug[cols]

    # a distance kernel has log K <= 0: its weights are summed directly (passes.streamed)
    return stream_sums(np, n_q, bq, blocks, V_aug, order=order, exponent=exponent,
                       bounded=bound.scaled and not bound.kernel.is_softmax, threads=bound.options.threads)


def one_block_conditions(bound, n_queries):
    """Whether :class:`OneBlock` can serve ``n_queries`` queries: a plain kernel (no product
    factors, kNN or per-sample bandwidths, no exact edge test) on dense host samples, the
    ``n_queries x n_samples`` block within the memory budget."""
    kern = bound.kernel
    return (bound.on_host and not bound.sparse and bound.factors is None and kern.n_neighbors is None
            and bound.sample_scale is None and not bound.exact_edge
            and n_queries * bound.n_samples * np.dtype(bound.dtype).itemsize <= bound.options.budget)


class OneBlock:
    """The dense pass's sums at small query blocks, in one block of all the samples, its row maxima
    factored out (what the online log-sum-exp does for one block), without the streaming
    machinery, for the steps of a fixed point (:class:`~localkit.engine.bound.Stepper`), where
    :func:`one_block_conditions` hold. What does not depend on the queries is kept: the values
    with their column of ones and, for the softmax kernel, its logit matrix ``X^T / T`` (the
    samples over the temperature, formed once per binding where it fits the memory budget), so
    that a step is one BLAS product, a stable softmax and one product (the pass forms
    ``(q / T) x^T``: the same logits to round-off). Other kernels form their block as the dense
    pass does (:class:`QueryBlock`)."""

    def __init__(self, bound, V_aug):
        self.bound, self.V_aug, self.cols = bound, V_aug, slice(0, bound.n_samples)
        self.log_weight = None if bound.weight is None else bound.log_weight
        self.logits = None
        X = bound.X
        if bound.kernel.is_softmax and X.nbytes <= bound.options.budget:
            self.logits = bound.memo("softmax logits", lambda: (X / X.dtype.type(bound.h)).T)

    def __call__(self, Q):
        """``(S, m, offset)`` at queries ``Q`` (engine coordinates): ``S = exp(L - m) [V, 1]`` with
        ``L + offset`` the log-weights (``offset`` per query, or None for none) and ``m`` their
        row maxima, so that ``m + offset + log S[:, -1]`` is the log weight sum and every row carries
        weight (``S[:, -1] >= 1``). None where a row has no finite log-weight or a maximum beyond
        the float range: the full pass decides those (softmax logits that overflow, which it
        streams divided by ``2^k``, :func:`~localkit.engine.stream.logit_exponent`; finite ones
        are taken as they are: the pass's weights to round-off)."""
        with np.errstate(over="ignore", invalid="ignore"):  # (~1 us: less than the pass's guard, a scan of Q)
            if self.logits is not None:
                L, offset = Q @ self.logits, None
            else:
                L, offset = QueryBlock(self.bound, Q).log_weights(self.bound, self.cols)
            if self.log_weight is not None:
                L += self.log_weight
            m = L.max(axis=1)
            if not math.isfinite(m.sum()):  # a row without weight, or an overflow
                return None
        return np.exp(np.subtract(L, m[:, None], out=L), out=L) @ self.V_aug, m, offset


class ProductBlock:
    """A block of queries (raw coordinates) of a bound product, for the dense path: one
    :class:`~localkit.engine.passes.dense.QueryBlock` per distance factor (recentred or exact as
    that factor needs; a kNN factor's at the queries' balloon bandwidths ``scales[f]``,
    :func:`~localkit.engine.factors.knn_scales`), the codes of each categorical one."""

    def __init__(self, bound, Q, scales):
        self.Q = Q
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

    def log_weights(self, bound, cols, fold_offset=False):
        """``(L, offset)`` with ``L = log K`` (the sum of the factors') and a zero offset."""
        L = None
        for f, part in zip(bound.factors, self.parts):
            if f.categorical is not None:
                Lf = f.categorical.log_weights(np, part, f.codes[cols])
            else:
                Lf, offset = part.log_weights(f.bound, cols, fold_offset=True)
                if np.any(offset):
                    Lf = Lf + offset[:, None]
            if L is None:
                L = np.array(Lf, dtype=self.Q.dtype)
            else:
                L += Lf
        return L, np.zeros(len(self.Q), dtype=self.Q.dtype)
