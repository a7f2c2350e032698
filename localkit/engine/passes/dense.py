"""The dense path: blocks of queries against blocks of samples (sized to stay in cache,
:func:`~localkit.engine.block_sizes`), log-weights from one matrix product, summed by the one
streamed pass (:mod:`localkit.engine.passes.streamed`: distance kernels sum their weights
directly, ``log K <= 0``, and hand rows whose weights underflow to the online log-sum-exp;
threads over query blocks).

Each block's log-weights come from the bound kernel (:meth:`BoundKernel.block
<localkit.engine.BoundKernel.block>`, :mod:`localkit.engine.query_blocks`: recentred on the block's
centre far from the origin, which is why the queries are first sorted along their widest coordinate).
"""
from __future__ import annotations

import math

import numpy as np

from ..blocks import MAX_SAMPLE_BLOCK, block_sizes
from ..factors import candidate_factor
from ..query_blocks import spatial_order
from ..stream import softmax_exponent
from ..twins import mask_twins
from .streamed import sample_log_weights, stream_sums


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
    block = bound.query_blocks(None, Q, exclude_self=exclude_self, row_offset=row_offset)(slice(None))
    L, _ = block.log_weights(slice(0, bound.n_samples))
    if exclude_self:
        mask_twins(L, np.arange(len(Q)) + row_offset, slice(0, bound.n_samples), bound.twins)
    return L


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
    # compact query blocks for the recentring of distances (softmax logits are inner products: none)
    order = (spatial_order(Q) if bound.scaled and bound.kernel.metric == "euclidean" and not bound.kernel.is_softmax
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
    # kNN balloon bandwidths (smooth profiles; a product's kNN factors) found once for all the queries
    block_of = bound.query_blocks(queries, Q, q_scale, exclude_self=exclude_self, logit_exponent=exponent)
    rank = np.arange(n_q) if order is None else order  # the query at each position of the pass

    def column_blocks(idx):
        if pruned:
            return [c for c, keep in zip(leaves, boxes_in_reach(lo, hi, Q[idx])) if keep]
        return [slice(c0, min(c0 + bs, n_s)) for c0 in range(0, n_s, bs)]

    def blocks(pos, fold_offset):
        idx = rank[pos]
        block = block_of(idx)
        for cols in column_blocks(idx):
            L, offset = block.log_weights(cols, fold_offset)
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
    pass does (:meth:`BoundKernel.block <localkit.engine.BoundKernel.block>`)."""

    def __init__(self, bound, V_aug):
        self.bound, self.V_aug, self.cols = bound, V_aug, slice(0, bound.n_samples)
        self.log_weight = None if bound.weight is None else bound.log_weight
        self.logits = None
        X = bound.coordinates(None) if bound.kernel.is_softmax else None
        if X is not None and X.nbytes <= bound.options.budget:
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
                L, offset = self.bound.block(Q).log_weights(self.cols)
            if self.log_weight is not None:
                L += self.log_weight
            m = L.max(axis=1)
            if not math.isfinite(m.sum()):  # a row without weight, or an overflow
                return None
        return np.exp(np.subtract(L, m[:, None], out=L), out=L) @ self.V_aug, m, offset
