"""The log-weights of a block of queries against blocks of samples, as a bound kernel forms them:
what a pass asks for instead of reading the binding's layout (its coordinates, squared norms,
exponent, raw bandwidth and index unit stay behind this module). On the host,
:meth:`BoundKernel.block <localkit.engine.BoundKernel.block>` (:class:`QueryBlock`,
:class:`ProductBlock`); on any array library (a device, or NumPy's ``algorithm="streamed"``),
:class:`ArrayBlocks`, written against the array API. Both answer ``block(rows).log_weights(cols)``.
The host keeps its own formation because NumPy is faster with it: the Gaussian's
``-|q - x|^2 / 2`` folded into one BLAS product, kinked profiles' distances refined only where
the product cancels (:func:`~localkit.kernels.distances.refined_sq_distances`), blocks that the
bounded direct sum can take. The array-API pass over NumPy arrays (``algorithm="streamed"``) took
7-9x the dense path's time for the Gaussian and the Laplacian, 2.6-3.8x for the Epanechnikov
(2,000 x 20,000 x 16, float64 and float32, one thread, 2026-12-06).

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

import numpy as np
from scipy.spatial.distance import cdist

from ..kernels.distances import row_sq, summed_sq_distances
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
        if self.exact or bound.kernel.is_softmax:
            self.Q = Q
            return
        self.Q, self.centre, self.exact = measured_from(Q, q_scale)

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
                        and (kernel.profile.exact_distance or kernel.metric != "euclidean" or self.support is not None
                             or degenerate))
        return Q, q_scale, always_exact

    def block(self, rows):
        """The block of the queries at positions ``rows`` (a slice) of :attr:`order`: an object whose
        ``log_weights(cols)`` is ``log K`` against the samples ``cols`` (a slice; no sample weights,
        no leave-one-out: the pass adds those)."""
        if self.factors is not None:
            return _ArrayProductBlock(self.xp, self.factors, rows)
        Q, q_scale, exact = self._in_order
        return _ArrayBlock(self, Q[rows, ...], None if q_scale is None else q_scale[rows], exact)


class _ArrayBlock:
    """One block of :class:`ArrayBlocks`: a norm's measured from where :func:`measured_from` says
    (as it is, recentred on its own centre, or its distances exact), its log-weights those of
    :meth:`localkit.Kernel.log_weights` on the array library, as the host forms them (a log-linear
    profile, the Gaussian, from one matrix product with the row term folded in)."""

    def __init__(self, blocks, Q, q_scale, exact):
        xp = blocks.xp
        self.xp, self.kernel, self.Xs, self.support = xp, blocks.kernel, blocks.Xs, blocks.support
        self.q_scale, self.s_scale, self.centre = q_scale, blocks.s_scale, None
        if blocks._recentre and not exact:
            Q, self.centre, exact = measured_from(Q, q_scale, xp)
        self.Q, self.exact = Q, exact
        self.q_sq = row_sq(Q, xp)

    def log_weights(self, cols):
        xp, kernel = self.xp, self.kernel
        X = self.Xs[cols, ...]
        if self.centre is not None:
            X = X - self.centre
        if self.support is not None:  # the uniform profile's edge, tested as the compiled pass tests it
            u2 = summed_sq_distances(self.Q, X, kernel, xp)
            inside = u2 <= self.support
            return xp.where(inside, kernel.profile.log_k_for(xp)(xp.where(inside, u2, 0.0) / self.support), -math.inf)
        return kernel.log_weights(self.Q, X, q_sq=self.q_sq, q_scale=self.q_scale,
                                  s_scale=None if self.s_scale is None else self.s_scale[cols],
                                  exact=self.exact, fold_offset=True, xp=xp)[0]


class _ArrayProductBlock:
    """One block of a product's :class:`ArrayBlocks`: the sum of its factors' log-weights."""

    def __init__(self, xp, factors, rows):
        self.xp, self.factors, self.rows = xp, factors, rows

    def log_weights(self, cols):
        xp, L = self.xp, None
        for f, Qf, Xf, kern in self.factors:
            q, x = Qf[self.rows, ...], Xf[cols, ...]
            if kern is None:
                Lf = f.categorical.log_weights(xp, q, x)
            else:
                Lf = kern.log_weights(q, x, exact=True, fold_offset=True, xp=xp)[0]
            L = Lf if L is None else L + Lf
        return L


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
