"""The log-weights of a block of queries against blocks of samples, as a bound kernel forms them:
what a pass asks for instead of reading the binding's layout (its coordinates, squared norms,
exponent, raw bandwidth and index unit stay behind this module). On the host,
:meth:`BoundKernel.block <localkit.engine.BoundKernel.block>` (:class:`QueryBlock`,
:class:`ProductBlock`); on any array library (a device, or NumPy's ``algorithm="streamed"``),
:class:`ArrayBlocks`, written against the array API. Both answer ``block(rows).log_weights(cols)``.
The host keeps its own formation because NumPy is faster with it: the Gaussian's
``-|q - x|^2 / 2`` folded into one BLAS product, kinked profiles' distances refined only where
the product cancels (:func:`~localkit.kernels.kernel.refined_sq_distances`), blocks that the
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
    (as it is, recentred on its own centre, or its distances exact).

    A log-linear profile (the Gaussian) measured by the matrix product takes its log-weights from
    that one product, as the host does (:meth:`localkit.Kernel.log_weights`, ``fold_offset``):
    ``[q, -1/2, -|q|^2 / 2] / s_q^2 . [x, |x|^2, 1] = -|q - x|^2 / (2 s_q^2)``, not distances and then
    ``-u^2 / 2`` (a local mean on PyTorch CPU tensors, 2,000 x 20,000 x 16, one thread: 0.75-0.9x the
    time in float64, the same in float32; the blocks alone on NumPy arrays: a seventh of the time)."""

    def __init__(self, blocks, Q, q_scale, exact):
        xp, kernel = blocks.xp, blocks.kernel
        self.xp, self.kernel, self.Xs, self.support = xp, kernel, blocks.Xs, blocks.support
        self.q_scale, self.s_scale, self.centre = q_scale, blocks.s_scale, None
        if blocks._recentre and not exact:
            Q, self.centre, exact = measured_from(Q, q_scale, xp)
        self.Q, self.exact = Q, exact
        self.q_sq = xp.sum(Q * Q, axis=1)
        self.log_k = None if kernel.is_softmax else kernel.profile.log_k_for(xp)
        self.folded = None
        if (not exact and not kernel.is_softmax and kernel.profile.log_linear and kernel.metric == "euclidean"
                and self.support is None and self.s_scale is None and (q_scale is None or bool(xp.all(q_scale > 0)))):
            half = xp.full((Q.shape[0], 1), -0.5, dtype=Q.dtype, device=_device(Q))
            folded = xp.concat([Q, half, -0.5 * self.q_sq[:, None]], axis=1)
            self.folded = folded if q_scale is None else folded / (q_scale * q_scale)[:, None]

    def log_weights(self, cols):
        xp, kernel, Q = self.xp, self.kernel, self.Q
        X = self.Xs[cols, ...]
        if kernel.is_softmax:
            return Q @ xp.permute_dims(X, (1, 0))
        if self.centre is not None:
            X = X - self.centre
        if self.folded is not None:
            ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=_device(X))
            return self.folded @ xp.permute_dims(xp.concat([X, xp.sum(X * X, axis=1)[:, None], ones], axis=1), (1, 0))
        u2 = sq_distances(xp, Q, self.q_sq, X, self.exact, kernel)
        if self.support is not None:
            inside = u2 <= self.support
            return xp.where(inside, self.log_k(xp.where(inside, u2, 0.0) / self.support), -math.inf)
        u2 = rescale(xp, u2, None if self.q_scale is None else self.q_scale[:, None],
                     None if self.s_scale is None else self.s_scale[None, cols])
        return -0.5 * u2 if kernel.profile.log_linear else self.log_k(u2)


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
                u2 = sq_distances(xp, q, None, x, True, kern)
                Lf = -0.5 * u2 if kern.profile.log_linear else kern.profile.log_k_for(xp)(u2)
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


def rescale(xp, u2, q_scale, s_scale):
    """``u^2 / (q_i s_j)^2``; a zero per-point bandwidth counts distance 0 fully, others not at all."""
    if q_scale is None and s_scale is None:
        return u2
    if q_scale is not None:
        u2 = u2 / (q_scale * q_scale)
    if s_scale is not None:
        u2 = u2 / (s_scale * s_scale)
    return xp.where(xp.isnan(u2), 0.0, u2)


def sq_distances(xp, Q, q_sq, X, exact, kernel):
    """Squared distances of ``kernel``'s metric for a block: for the euclidean metric one matrix
    product, or (``exact``: profiles with a kink at 0, whose square root would show the
    product's ~1e-8 error, far blocks, the compiled pass's ties) differences summed feature by
    feature, in the order of the compiled pass; the other norms from differences; cosine
    ``(1 - <q, x> / (|q| |x|))^2``."""
    metric = kernel.metric
    if metric == "cosine":
        norms = xp.sqrt(xp.sum(Q * Q, axis=1))[:, None] * xp.sqrt(xp.sum(X * X, axis=1))[None, :]
        D = xp.clip(1 - (Q @ xp.permute_dims(X, (1, 0))) / norms, min=0.0, max=2.0)
        return D * D
    if metric == "euclidean" and not exact:
        inner = Q @ xp.permute_dims(X, (1, 0))
        return xp.clip(q_sq[:, None] + xp.sum(X * X, axis=1)[None, :] - 2 * inner, min=0)
    acc = xp.zeros((Q.shape[0], X.shape[0]), dtype=Q.dtype, device=_device(Q))
    for j in range(Q.shape[1]):
        t = Q[:, j:j + 1] - X[None, :, j]
        if metric == "euclidean":
            acc = acc + t * t
        elif metric == "chebyshev":
            acc = xp.maximum(acc, xp.abs(t))
        elif metric == "manhattan" or kernel.p == 1:
            acc = acc + xp.abs(t)
        else:
            acc = acc + xp.abs(t) ** kernel.p
    if metric == "euclidean":
        return acc
    if metric == "minkowski" and kernel.p != 1:
        return acc ** (2.0 / kernel.p)
    return acc * acc


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
        D = sq_distances(xp, Q[r0:min(r0 + step, n_q), ...], None, X, True, kernel)
        if exclude_self:
            rows = xp.arange(r0, r0 + D.shape[0], device=_device(Q))
            D = xp.where(rows[:, None] == xp.arange(n_s, device=_device(Q))[None, :], math.inf, D)
        yield D
