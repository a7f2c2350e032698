"""The log-weights of a block of queries against blocks of samples, as a bound kernel forms them:
what a pass asks for instead of reading the binding's layout (its coordinates, squared norms,
exponent, raw bandwidth and index unit stay behind this module).

One formation, two layouts. A :class:`QueryBlock` (a :class:`ProductBlock` for a product kernel)
answers ``log_weights(cols, fold_offset)`` on any array library through
:meth:`localkit.Kernel.log_weights` (the Gaussian's ``-|q - x|^2 / 2`` folded into one matrix
product, kinked profiles' distances refined where the product cancels on the host,
:mod:`localkit.kernels.distances`). What differs is where its coordinates come from: on the host,
:meth:`BoundKernel.block <localkit.engine.BoundKernel.block>` hands it the binding's kept engine
coordinates and squared norms (bound once, in ``fit``); on a device, or for NumPy's
``algorithm="streamed"``, :class:`ArrayBlocks` lays the queries and samples out once per pass, in
the array's namespace and on its device.

Accuracy far from the origin. The matrix-product form ``|q|^2 - 2 q.x + |x|^2`` of a squared
distance carries an absolute error of about ``eps |q|^2`` (``eps`` of the dtype), which for the
samples that carry weight is also the error of the log-weights. A query block whose points sit
farther than ``sqrt(tol / (2 eps))`` bandwidths from the centre is therefore recentred on its own
centre (the dense pass first sorts the queries along their widest coordinate, so that blocks are
compact), and if that is not enough its distances are formed exactly, as differences
(:func:`measured_from`, on the host and on any array library).
"""
from __future__ import annotations

import math
from functools import cached_property
from typing import NamedTuple

import numpy as np

from ..kernels.distances import exact_sq_distances, row_sq, summed_sq_distances
from .stream import softmax_exponent, times_power_of_two

#: Cells of one block of distances on an accelerator (float32: 256 MiB); on a CPU the engine's budget rules
ACCELERATOR_BLOCK_CELLS = 2**26

#: Largest error of a log-weight (a relative weight error) that the matrix-product form may carry,
#: per dtype: float32 keeps its fast path up to ~64 bandwidths from a block's centre, float64 to ~1,400
LOG_WEIGHT_TOL = {np.dtype(np.float32): 2.0 ** -10, np.dtype(np.float64): 2.0 ** -30}


def cancellation_ok(Q, q_scale=None, xp=np):
    """True when the matrix-product form keeps log-weights within ``LOG_WEIGHT_TOL`` for these
    queries (in the engine's coordinates, about the point they are measured from; arrays of
    ``xp``). A per-query scale (a kNN bandwidth: the k-th distance) divides ``u^2``, and the
    form's error ``~eps |q|^2``, by its square."""
    if Q.shape[0] == 0:
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        size = xp.sum(Q * Q, axis=1)
        if q_scale is not None:
            size = size / xp.where(q_scale > 0, q_scale * q_scale, xp.ones_like(q_scale))
        largest = float(xp.max(size))
    tol = LOG_WEIGHT_TOL[np.dtype(np.float32 if Q.dtype == xp.float32 else np.float64)]
    return 2.0 * float(xp.finfo(Q.dtype).eps) * largest <= tol


def measured_from(Q, q_scale=None, xp=np):
    """``(Q', centre, exact)``: a block of queries as the matrix-product form measures it within
    ``LOG_WEIGHT_TOL`` (:func:`cancellation_ok`): as it is where that holds, else recentred on its
    centre ``(min + max) / 2`` (``Q' = Q - centre``), else (still too far, or not finite) as it is,
    its distances to be formed exactly."""
    if cancellation_ok(Q, q_scale, xp):
        return Q, None, False
    with np.errstate(over="ignore", invalid="ignore"):  # inf queries: no centre, exact distances
        centre = 0.5 * (xp.min(Q, axis=0) + xp.max(Q, axis=0))
    if bool(xp.all(xp.isfinite(centre))):
        P = Q - centre
        if cancellation_ok(P, q_scale, xp):
            return P, centre, False
    return Q, None, True


def spatial_order(Q, xp=np):
    """A permutation that makes blocks of the queries ``Q`` compact (sorted along their widest
    coordinate), so that :func:`measured_from` recentres each on a centre near all its points;
    ``None`` where the queries are near enough the origin not to need it."""
    if cancellation_ok(Q, xp=xp):
        return None
    with np.errstate(over="ignore", invalid="ignore"):  # an extent beyond the float range is inf
        widest = int(xp.argmax(xp.max(Q, axis=0) - xp.min(Q, axis=0)))
    return xp.argsort(Q[:, widest], stable=True) if xp is not np else np.argsort(Q[:, widest], kind="stable")


class Samples(NamedTuple):
    """The side of a pass that its query blocks share: the samples' coordinates ``X`` (n, d) in
    the namespace ``xp`` (None for "precomputed", whose queries are their distances to every
    sample), their kept squared norms ``x_sq`` (or None), per-sample scales ``s_scale`` that divide
    ``u``, and the kernel with the softmax kernel's ``temperature`` and the ``u2_exponent`` of
    :meth:`localkit.Kernel.log_weights`."""

    xp: object
    kernel: object
    X: object
    x_sq: object = None
    s_scale: object = None
    temperature: float = 1.0
    u2_exponent: int = 0


class QueryBlock:
    """A block of queries ``Q`` (b_q, d) against :class:`Samples`, in the coordinates the kernel
    measures in: what a pass asks for, ``log_weights(cols, fold_offset=False)`` -> ``(L, offset)``,
    ``log K = L + offset`` against the samples ``cols`` (no sample weights, no leave-one-out: the
    pass adds those; ``fold_offset``: ``L = log K``, see :meth:`localkit.Kernel.log_weights`).
    Laid out by :meth:`BoundKernel.block <localkit.engine.BoundKernel.block>` on the host (the
    binding's kept coordinates) and by :class:`ArrayBlocks` on any array library (coordinates laid
    out per pass).

    ``q_scale`` divides ``u`` per query. ``exact``: distances from differences. ``measure``: the
    block measured from where :func:`measured_from` says (as it is, recentred on its own centre,
    or exact); a given ``centre`` (a cluster's, in the truncated pass) is the point it is measured
    from, whatever its size: the product form's error is then that of the distances to it.
    ``edge``: ``(points, samples, support)``, the compact profile's edge decided by ``|p - s|^2 <=
    support`` in those coordinates (the index's on the host, the raw ones on a device), so that
    samples at exactly the edge stay in or out as on the compiled and radius paths."""

    def __init__(self, samples, Q, *, q_scale=None, exact=False, measure=False, centre=None, edge=None):
        xp = samples.xp
        self.samples, self.q_scale, self.edge, self.centre = samples, q_scale, edge, centre
        if centre is not None:
            Q = xp.astype(Q - centre, Q.dtype, copy=False)
        elif measure and not exact:
            Q, self.centre, exact = measured_from(Q, q_scale, xp)
        self.Q, self.exact = Q, exact
        self.q_sq = None if exact else row_sq(Q, xp)

    def log_weights(self, cols, fold_offset=False):
        xp, kernel, X, x_sq, s_scale, temperature, u2_exponent = self.samples
        Q = self.Q
        if self.edge is not None:
            points, edge_samples, support = self.edge
            u2 = exact_sq_distances(points, edge_samples[cols, ...], kernel, xp)
            inside = u2 <= support
            log_k = kernel.profile.log_k if xp is np else kernel.profile.log_k_for(xp)
            L = xp.where(inside, log_k(xp.where(inside, u2, 0.0) / support), -math.inf)
            return xp.astype(L, Q.dtype, copy=False), xp.zeros_like(Q[:, 0])
        s_scale = None if s_scale is None else s_scale[cols]
        if kernel.metric == "precomputed":  # the queries are their distances to the samples
            return kernel.log_weights(Q[:, cols], None, q_scale=self.q_scale, s_scale=s_scale)
        X = X[cols, ...]
        if self.centre is not None:
            X, x_sq = xp.astype(X - self.centre, Q.dtype, copy=False), None
        elif x_sq is not None:
            x_sq = x_sq[cols]
        return kernel.log_weights(Q, X, q_sq=self.q_sq, x_sq=x_sq, q_scale=self.q_scale, s_scale=s_scale,
                                  temperature=temperature, exact=self.exact, u2_exponent=u2_exponent,
                                  fold_offset=fold_offset, xp=xp)


class ProductBlock:
    """A block of a product's queries: the sum of its factors' log-weights (``offset`` 0), each
    distance factor's a :class:`QueryBlock` of its own coordinates, each categorical factor's
    ``(categorical, query codes, sample codes)``; ``dtype`` the queries'."""

    def __init__(self, xp, parts, dtype):
        self.xp, self.parts, self.dtype = xp, parts, dtype

    def log_weights(self, cols, fold_offset=False):
        xp, L = self.xp, None
        for part in self.parts:
            if isinstance(part, QueryBlock):
                Lf, offset = part.log_weights(cols, fold_offset=True)
                if bool(xp.any(offset != 0)):  # log k at extreme bandwidths (u2_exponent)
                    Lf = Lf + offset[:, None]
            else:
                categorical, q, x = part
                Lf = categorical.log_weights(xp, q, x[cols, ...])
            # each sum rounded to the block's dtype, as an in-place sum would round it
            L = xp.astype(Lf if L is None else L + Lf, self.dtype, copy=False)
        return L, xp.zeros_like(L[:, 0])


class ArrayBlocks:
    """The queries ``Q`` (raw coordinates) of a pass against ``bound``'s samples on any array
    library ``xp``, laid out once for all of them: :meth:`block` gives the log-weights of a block
    of them, as :meth:`BoundKernel.block <localkit.engine.BoundKernel.block>` does on the host.

    The coordinates ``Qs``, ``Xs`` the blocks measure in, as the kernel needs them:

    * ``exact_edge``, the uniform profile's edge decided as on the host: raw coordinates (each
      feature over its bandwidth, for per-feature ones) and the compiled pass's test
      ``|q - x|^2 <= support``, summed feature by feature;
    * the softmax kernel: the queries times ``2^-k / h``, ``k = logit_exponent`` (logits beyond the
      float range, :func:`~localkit.engine.stream.softmax_exponent`);
    * a norm: centred on the samples' mean, each feature over its bandwidth; the queries taken in
      ``order`` (sorted along their widest coordinate), each block recentred on its own centre;
    * cosine: the distance as it is, the bandwidth a per-query scale;
    * a product: each distance factor centred on its samples and over its bandwidth, its squared
      distances from differences; each categorical factor's codes.

    ``q_scale`` / ``s_scale`` divide ``u`` per query / per sample; a kNN kernel's ``q_scale`` is its
    balloon bandwidth, the distance of each query to its k-th nearest sample (``exclude_self``:
    not itself). :attr:`fusable`: nothing beyond a plain kernel of ``|q - x| / h``, what a fused
    pass can take in place of the blocks."""

    def __init__(self, xp, bound, Q, q_scale=None, exclude_self=False, exact_edge=False):
        kernel, X, h = bound.kernel, bound.samples, bound.h
        self.xp, self.kernel, self.dtype = xp, kernel, Q.dtype
        self.s_scale, self.support, self.logit_exponent, self.factors = bound.sample_scale, None, 0, None
        if bound.factors is not None:
            self.Qs, self.Xs, self.q_scale, self.s_scale = Q, X, None, None
            self.factors = _factor_coordinates(xp, bound, Q, X)
            return
        if kernel.is_softmax:
            self.logit_exponent = softmax_exponent(xp, bound, Q)
        if exact_edge:
            if np.ndim(h) == 0:
                self.Qs, self.Xs, self.support = Q, X, float(h) ** 2
            else:  # each feature over its bandwidth, the support u^2 <= 1 (the compiled pass's per-feature form)
                hh = h_array(xp, h, X)
                self.Qs, self.Xs, self.support = Q / hh, X / hh, 1.0
        elif kernel.is_softmax:  # 2^-k first: Q / h alone may overflow
            self.Qs, self.Xs = times_power_of_two(Q, -self.logit_exponent) / float(h), X
        elif kernel.norm_metric:
            centre = xp.mean(X, axis=0)
            hh = h_array(xp, h, X)
            self.Qs, self.Xs = (Q - centre) / hh, (X - centre) / hh
        else:  # cosine: a distance taken as it is, divided by the (scalar) bandwidth
            self.Qs, self.Xs = Q, X
            if kernel.n_neighbors is None:
                q_scale = float(h) * (xp.ones(Q.shape[0], dtype=Q.dtype, device=_device(X)) if q_scale is None
                                      else q_scale)
        if kernel.n_neighbors is not None and not kernel.compact:  # the balloon bandwidth: the k-th distance
            q_scale = xp.concat([d[:, -1] for d, _ in xp_kneighbors(xp, self.Qs, self.Xs, kernel.n_neighbors,
                                                                      kernel, exclude_self)])
        self.q_scale = q_scale

    @property
    def fusable(self):
        """True where the blocks are a plain kernel of ``|q - x| / h`` (no support, scales, logit
        exponent or factors): what FlexAttention can fuse in their place."""
        return self.factors is None and not (
            self.support is not None or self.kernel.n_neighbors is not None or self.kernel.metric != "euclidean"
            or self.q_scale is not None or self.s_scale is not None or self.logit_exponent > 0)

    @cached_property
    def _recentre(self):
        kernel = self.kernel
        return self.factors is None and not kernel.is_softmax and kernel.norm_metric and self.support is None

    @cached_property
    def order(self):
        """The queries' positions in the blocks' order (:func:`spatial_order`), None where they keep
        their order."""
        return spatial_order(self.Qs, self.xp) if self._recentre else None

    @cached_property
    def _in_order(self):
        """``(Q, q_scale)`` in :attr:`order`, and whether every block's distances are exact."""
        xp, kernel, order = self.xp, self.kernel, self.order
        Q, q_scale = self.Qs, self.q_scale
        if order is not None:
            Q = xp.take(Q, order, axis=0)
            q_scale = None if q_scale is None else xp.take(q_scale, order)
        # a zero per-point bandwidth (duplicates) needs distance 0 exactly: differences, not products
        degenerate = any(c is not None and not bool(xp.all(c > 0)) for c in (q_scale, self.s_scale))
        always_exact = (self.factors is None and not kernel.is_softmax
                        and (kernel.metric != "euclidean" or self.support is not None or degenerate))
        return Q, q_scale, always_exact

    def block(self, rows):
        """The :class:`QueryBlock` (:class:`ProductBlock`) of the queries at positions ``rows`` (a
        slice) of :attr:`order`."""
        xp = self.xp
        if self.factors is not None:
            return ProductBlock(xp, [(f.categorical, Qf[rows, ...], Xf) if kern is None
                                     else QueryBlock(Samples(xp, kern, Xf), Qf[rows, ...], exact=True)
                                     for f, Qf, Xf, kern in self.factors], self.dtype)
        Q, q_scale, exact = self._in_order
        Q = Q[rows, ...]
        return QueryBlock(Samples(xp, self.kernel, self.Xs, s_scale=self.s_scale), Q,
                          q_scale=None if q_scale is None else q_scale[rows], exact=exact, measure=self._recentre,
                          edge=None if self.support is None else (Q, self.Xs, self.support))


def _factor_coordinates(xp, bound, Q, X):
    """``(factor, queries, samples, kernel)`` per factor of a product, for its blocks: each distance
    factor's coordinates centred on its samples and divided by its bandwidth (its kernel on them),
    each categorical factor's codes as they are (kernel None)."""
    parts = []
    for f in bound.factors:
        if f.categorical is not None:
            idx = xp.asarray(f.cols, device=_device(X)) if xp is not np else f.cols
            parts.append((f, xp.take(Q, idx, axis=1), xp.take(X, idx, axis=1), None))
            continue
        idx = xp.asarray(f.cols, device=_device(X))
        Qf, Xf = xp.take(Q, idx, axis=1), xp.take(X, idx, axis=1)
        centre = xp.mean(Xf, axis=0)
        hh = h_array(xp, f.bound.h, Xf)
        parts.append((f, (Qf - centre) / hh, (Xf - centre) / hh, f.kernel.plain()))
    return parts


def _device(a):
    from sklearn.utils._array_api import device

    return device(a)


def h_array(xp, h, like):
    """The bandwidth (a float or per-feature floats) as an array beside ``like``."""
    return xp.asarray(np.asarray(h, dtype=np.float64).tolist(), dtype=like.dtype, device=_device(like))


def xp_kneighbors(xp, Q, X, k, kernel, exclude_self=False):
    """``(dist, idx)`` of the ``k`` nearest samples of a block of queries at a time (nearest
    first, ties in sample order), by whole rows of exact distances sorted on the device;
    ``exclude_self``: query ``i`` is sample ``i`` and is not its own neighbour."""
    for D in sq_distance_rows(xp, Q, X, kernel, exclude_self):
        yield k_smallest(xp, D, k)


def k_smallest(xp, D, k):
    """``(dist, idx)``: the ``k`` smallest of each row of squared distances ``D``, their square roots."""
    idx = xp.argsort(D, axis=1, stable=True)[:, :k]
    return xp.sqrt(xp.take_along_axis(D, idx, axis=1)), idx


def sq_distance_rows(xp, Q, X, kernel, exclude_self):
    """Blocks of whole rows of exact squared distances (``inf`` on a query's own sample with
    ``exclude_self``), as many rows at a time as a block of cells holds."""
    n_q, n_s = Q.shape[0], X.shape[0]
    cells = 2**22 if "cpu" in str(_device(Q)) else ACCELERATOR_BLOCK_CELLS
    step = max(1, min(n_q, cells // max(1, n_s)))
    for r0 in range(0, n_q, step):
        D = summed_sq_distances(Q[r0:min(r0 + step, n_q), ...], X, kernel, xp)
        if exclude_self:
            rows = xp.arange(r0, r0 + D.shape[0], device=_device(Q))
            D = xp.where(rows[:, None] == xp.arange(n_s, device=_device(Q))[None, :], math.inf, D)
        yield D
