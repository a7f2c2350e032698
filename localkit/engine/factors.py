"""Product kernels in the engine: a kernel on groups of columns, bound factor by factor.

A product kernel ``K = prod_f K_f`` (:class:`~localkit.kernels.kernel.ProductKernel`; also a
single kernel with ``features``, or a categorical one) has ``log K = sum_f log K_f``, each factor
on its own columns in its own scaled coordinates. Binding it binds each factor once:

* a distance factor is a :class:`~localkit.engine.BoundKernel` of its own columns (its
  bandwidth rule resolved there, its samples centred and scaled as any bound kernel's), so that
  its log-weights for a block are exactly those of that kernel alone;
* a categorical factor keeps its samples' codes as they are (never centred or scaled: levels
  are compared for equality) and its levels ``c``, counted here, at bind time
  (:class:`~localkit.kernels.categorical.CategoricalColumns`).

The bound product keeps the samples raw; a block's log-weights are the sum of the factors'
(:class:`~localkit.engine.query_blocks.ProductBlock`, its parts laid out by
:meth:`BoundKernel.block <localkit.engine.BoundKernel.block>` on the host and by
:class:`~localkit.engine.query_blocks.ArrayBlocks` on a device and for ``algorithm="streamed"``;
:meth:`BoundKernel._bind_factors <localkit.engine.BoundKernel>` binds them).
A kNN factor's per-query bandwidth is its own bound kernel's k-th distance (:func:`knn_scales`).
Where a factor is compact (:func:`candidate_factor`), the neighbour path searches its support
with its own index and forms the product's log-weights on those pairs only
(:func:`pair_log_weights`, :func:`~localkit.engine.passes.neighbors.product_pairs`).
For the empty-neighbourhood policy the nearest sample is taken in
:func:`nearest_points`: each distance factor's columns over its bandwidth, a level apart one unit.
"""
from __future__ import annotations

import numpy as np

from ..kernels.categorical import CategoricalColumns, check_codes, check_smoothing
from ..kernels.distances import rescale

#: why the compiled and binned paths do not take a product kernel (the planner's reasons)
PRODUCT_REASON = ("a kernel on groups of columns (features=, categorical factors, K1 * K2) adds its factors' "
                  "log-weights block by block: the dense path (the streamed pass on devices), or the neighbour "
                  "path where a factor is compact")


class Factor:
    """One factor of a bound product: its kernel, its columns, and either the
    :class:`~localkit.engine.BoundKernel` of its columns or its categorical codes."""

    def __init__(self, kernel, cols, bound=None, categorical=None, codes=None):
        self.kernel, self.cols, self.bound, self.categorical, self.codes = kernel, cols, bound, categorical, codes


def nearest_points(bound, points):
    """``points`` (raw, NumPy) in the coordinates where the nearest sample is sought for a
    product: each distance factor's columns centred and divided by its bandwidth, each
    categorical column a level apart one unit (see
    :meth:`~localkit.kernels.categorical.CategoricalColumns.nearest_coordinates`)."""
    parts = []
    for f in bound.factors:
        P = np.asarray(points[:, f.cols], dtype=np.float64)
        if f.categorical is not None:
            parts.append(f.categorical.nearest_coordinates(P))
        else:
            with np.errstate(over="ignore", under="ignore"):
                parts.append((P - f.bound.centre) / np.asarray(f.bound.h, dtype=np.float64))
    return np.concatenate(parts, axis=1)


def candidate_factor(bound):
    """The factor whose support holds every sample that carries weight, searched by the
    neighbour path: a compact kNN factor (its k nearest samples), else the first compact factor
    (a radius search); None where no factor is compact."""
    compact = [f for f in bound.factors if f.bound is not None and f.kernel.compact]
    knn = [f for f in compact if f.kernel.n_neighbors is not None]
    return (knn or compact or [None])[0]


def knn_scales(bound, Q, exclude_self, row_offset=0, skip=None):
    """Per factor, for a kNN factor (but ``skip``), the balloon bandwidth of each query of ``Q``
    (raw; global rows from ``row_offset``) in that factor's engine units: the distance to its
    k-th nearest sample in the factor's columns, as the kNN kernel of those columns alone computes
    it (:meth:`~localkit.engine.BoundKernel.knn_scale`; with ``exclude_self``, among the other
    observations: the samples not at the query's point of every column, the product's own
    leave-one-out); None for the other factors."""
    return [f.bound.knn_scale(Q[:, f.cols], exclude_self=exclude_self, row_offset=row_offset)
            if f is not skip and f.bound is not None and f.kernel.n_neighbors is not None else None
            for f in bound.factors]


#: the vector norm of each metric of a distance factor (``minkowski``: its ``p``)
_NORM_ORDER = {"manhattan": 1, "chebyshev": np.inf}


def pair_log_weights(bound, Q, owner, idx, scales, skip=None):
    """``log K`` (n,) of the pairs (query ``owner[t]`` of ``Q``, raw; sample ``idx[t]``): the sum
    over the factors but ``skip`` of ``log k_f(u_f^2)``, ``u_f`` from the coordinate differences in
    the factor's engine coordinates (over ``scales[f]`` per query for a kNN factor,
    :func:`knn_scales`), or the categorical factor's levels."""
    L = np.zeros(len(idx), dtype=bound.dtype)
    for f, scale in zip(bound.factors, scales):
        if f is skip:
            continue
        if f.categorical is not None:
            L += f.categorical.pair_log_weights(Q[:, f.cols][owner], f.codes[idx])
            continue
        if f.bound.exact_edge:  # the uniform profile's one jump, decided in the index's coordinates (as the dense path)
            diff = f.bound.index_points(Q[:, f.cols])[owner] - f.bound.index_points(None)[idx]
            inside = np.einsum("ij,ij->i", diff, diff) <= f.bound.index_unit ** 2
            L += np.where(inside, f.kernel.profile.log_k0, -np.inf).astype(L.dtype)
            continue
        diff = f.bound.coordinates(Q[:, f.cols])[owner] - f.bound.coordinates(None)[idx]
        metric = f.kernel.metric
        if metric == "euclidean":
            u2 = np.einsum("ij,ij->i", diff, diff)
        else:
            u2 = np.square(np.linalg.norm(diff, ord=f.kernel.p if metric == "minkowski" else _NORM_ORDER[metric],
                                          axis=1))
        if scale is not None:
            u2 = rescale(u2[:, None], scale[owner])[:, 0]
        Lf, c = f.kernel.profile.log_k_scaled(u2, f.bound.u2_exponent)
        L += Lf + c
    return L


__all__ = ["PRODUCT_REASON", "Factor", "candidate_factor", "knn_scales", "nearest_points", "pair_log_weights"]
