"""A compiled path for compact profiles with a fixed bandwidth in few dimensions.

When most queries see a large share of the samples (mean shift with a bandwidth of the size of a
cluster), the dense path spends its time writing and re-reading ``n_queries x n_samples`` blocks
and the radius path materialises every neighbour list. Here one compiled loop does it all per
query, without storing any block:

1. the samples are cut into strips of width ``h / 2`` along the coordinate with the widest
   spread and sorted inside each strip along the second widest, so that the samples that can lie
   in a query's support form a few contiguous segments (one per strip within ``|dx_a| <= h``,
   ``|dx_b| <= h`` inside it), found by binary search;
2. along those segments, ``u^2 = |q - x|^2 / h^2``, and the samples with ``|q - x|^2 <= h^2``
   add ``k(u) [v, 1]`` to the query's sums, in one fixed order (so that two queries with the same
   samples in their support get bit-identical sums). With a scalar bandwidth this runs in the raw
   coordinates, with the arithmetic of a tree's radius query; a per-feature bandwidth rescales.

The weights of a compact profile need no log-space shift (they lie in ``[0, 1]``), so ``k`` is
evaluated directly (:attr:`~localkit.kernels.profiles.Profile.compiled_k`: ``(1 - u^a)^b`` is a
few products, no ``log``/``exp``), and the sums equal the dense path's to round-off.
"""
from __future__ import annotations

import functools

import numpy as np

from ..._jit import njit
from ...kernels import PROFILES
from ..blocks import map_blocks

# The compact profiles' compiled weights (:attr:`localkit.kernels.profiles.Profile.compiled_k`)
# under fixed names, chosen by a code inside the compiled pass: numba caches the pass on disk
# only when it calls module-level functions (a function passed as an argument is compiled anew
# in every process, ~20 s).
COMPACT = tuple(name for name, p in PROFILES.items() if p.compact)
(_k0, _k1, _k2, _k3, _k4, _k5, _k6, _k7) = (PROFILES[name].compiled_k for name in COMPACT)


@njit(inline="always")
def _k(code, u2):
    if code == 0:
        return _k0(u2)
    if code == 1:
        return _k1(u2)
    if code == 2:
        return _k2(u2)
    if code == 3:
        return _k3(u2)
    if code == 4:
        return _k4(u2)
    if code == 5:
        return _k5(u2)
    if code == 6:
        return _k6(u2)
    return _k7(u2)


#: At most this many strips (a tiny bandwidth would otherwise ask for astronomically many; wider
#: strips only lengthen the segments, the exact test inside decides)
MAX_STRIPS = 1 << 20


#: Candidate pairs above which a pass runs on ``threads`` threads; smaller passes run on one
#: (starting threads costs more than they save).
PARALLEL_PAIRS = 2_000_000
#: Candidate pairs per compiled call: a pass is a loop of such chunks of queries, so that Python
#: sees Ctrl-C between them (a compiled call cannot be interrupted); each query's sums are the
#: same bits whatever the chunking. Measured on the busy 2-core machine (2-D, epanechnikov,
#: h = 0.2): a chunk takes ~0.4 s (26 ns a pair), so a call's fixed cost is lost in it.
CHUNK_PAIRS = 1 << 24


@functools.cache
def _window_sums(code):
    """The compiled pass for the profile ``COMPACT[code]``, compiled on its first call for that
    profile only (a constant of the closure: numba prunes the other profiles' branches of
    :func:`_k`, and caches each on disk by it; measured: 3.2 s to compile against 4.8 s with the
    eight profiles).

    A serial function that releases the GIL, run on chunks of queries by a thread pool, not a
    numba ``parallel=True`` loop: parallel lowering made the first call on a cold cache compile
    for ~15 s (measured 14.5 s against 4.8 s serial, the eight profiles inlined in both)."""

    @njit(nogil=True, cache=True)
    def window_sums(Q, Xt, Vt, seg_lo, seg_hi, r2):
        """Sums ``sum_j k(u_ij) v_j`` over each query's segments ``[seg_lo[i, s], seg_hi[i, s])``,
        with ``u^2 = |q - x|^2 / r2``, the support ``|q - x|^2 <= r2`` and the profile's compiled
        weight ``k(u2)``;
        samples and values are stored feature-major (``Xt`` (d, n), ``Vt`` (p, n)) so that the loops
        along a segment run over contiguous memory."""
        n_q, d = Q.shape
        p = Vt.shape[0]
        S = np.zeros((n_q, p), dtype=Vt.dtype)
        for i in range(n_q):
            acc = np.zeros(p, dtype=Vt.dtype)
            for s in range(seg_lo.shape[1]):
                start, m = seg_lo[i, s], seg_hi[i, s] - seg_lo[i, s]
                if m <= 0:
                    continue
                u2 = np.zeros(m)
                for k in range(d):
                    qk = Q[i, k]
                    xk = Xt[k, start:start + m]
                    for j in range(m):
                        t = qk - xk[j]
                        u2[j] += t * t
                w = np.empty(m)
                for j in range(m):  # the test in raw units (ties with the edge decided as a tree does)
                    w[j] = _k(code, u2[j] / r2) if u2[j] <= r2 else 0.0
                for c in range(p):
                    vc = Vt[c, start:start + m]
                    total = 0.0
                    for j in range(m):
                        total += w[j] * vc[j]
                    acc[c] += total
            for c in range(p):  # a loop: numba compiles a costly error path for an array assignment
                S[i, c] = acc[c]
        return S

    return window_sums


class CompactIndex:
    """Samples sorted once into strips for the compiled pass; query it many times with
    :meth:`sums` (an iterated local mean over fixed samples sorts them only once).

    The samples are sorted into strips of width ``h / 2`` along the scaled coordinate with the
    widest spread, and by the second widest inside a strip, so that each query's candidate
    samples (``|dx_a| <= h`` and ``|dx_b| <= h``) are a few contiguous segments. Built by
    :class:`~localkit.engine.BoundKernel` (``compact_index``) for the kernels the planner sends here.
    """

    def __init__(self, samples, kern, h):
        self.kern = kern
        self.code = COMPACT.index(kern.profile.name)
        self.h = h
        Xs = self._coordinates(samples)
        self.r2 = float(self.h) ** 2 if np.ndim(self.h) == 0 else 1.0
        spread = np.ptp(Xs, axis=0)
        by_spread = np.argsort(spread)[::-1]
        self.ax_a = by_spread[0]
        self.ax_b = by_spread[1] if Xs.shape[1] > 1 else self.ax_a
        self.width = max(0.5 * np.sqrt(self.r2), spread[self.ax_a] / MAX_STRIPS)
        self.lo_a, self.lo_b, self.range_b = Xs[:, self.ax_a].min(), Xs[:, self.ax_b].min(), spread[self.ax_b]
        self.n_strips = int(spread[self.ax_a] // self.width) + 1 if self.ax_b != self.ax_a else 1
        self.span = self.range_b + 2.0  # strips' keys never overlap: key = strip * span + (x_b - lo_b)
        key = self._strip_of(Xs[:, self.ax_a]) * self.span + (Xs[:, self.ax_b] - self.lo_b)
        self.order = np.argsort(key, kind="stable")
        self.key = key[self.order]
        self.Xt = np.ascontiguousarray(Xs[self.order].T)
        self._laid_out = (None, None, None)  # the last values laid out: (V, weight, Vt)

    def _coordinates(self, points):
        if np.ndim(self.h) == 0:
            # a scalar bandwidth: raw coordinates and the test |q - x|^2 <= h^2, the very arithmetic
            # of scikit-learn's tree radius queries, so that points at distance h (ties) are decided alike
            return np.asarray(points, dtype=np.float64)
        return self.kern.scale(points, self.h).astype(np.float64)

    def _strip_of(self, x):
        if self.n_strips == 1:
            return np.zeros(len(x), dtype=np.intp)
        return np.clip((x - self.lo_a) // self.width, 0, self.n_strips - 1).astype(np.intp)

    def _segments(self, Qs, pad):
        """``(seg_lo, seg_hi)``: each query's candidates are the sorted samples in
        ``[seg_lo[i, s], seg_hi[i, s])`` (a superset of its support)."""
        first, last = self._strip_of(Qs[:, self.ax_a] - pad), self._strip_of(Qs[:, self.ax_a] + pad)
        strips = first[:, None] + np.arange(int((last - first).max(initial=0)) + 1)
        inside = strips <= last[:, None]
        strips = np.minimum(strips, self.n_strips - 1)
        low = np.clip(Qs[:, self.ax_b] - pad - self.lo_b, 0.0, self.range_b)[:, None]
        high = np.clip(Qs[:, self.ax_b] + pad - self.lo_b, 0.0, self.range_b)[:, None]
        seg_lo = np.searchsorted(self.key, strips * self.span + low, side="left")
        seg_hi = np.searchsorted(self.key, strips * self.span + high, side="right")
        return seg_lo, np.where(inside, seg_hi, seg_lo)

    def values(self, V, weight=None):
        """``c_j V_j`` (``weight`` None: ``V``) in float64, in the strips' order, feature-major: laid
        out once for the values of repeated passes (a fitted estimator's, a density's: the same
        arrays every call; at 200,000 samples the layout cost as much as a 10-query pass)."""
        last_V, last_weight, Vt = self._laid_out
        if V is not last_V or weight is not last_weight:
            W = V[self.order] if weight is None else V[self.order] * weight[self.order, None]  # in V's dtype
            Vt = np.ascontiguousarray(np.asarray(W, dtype=np.float64).T)
            self._laid_out = (V, weight, Vt)
        return Vt

    def sums(self, queries, V, weight=None, threads=1):
        """Unnormalised sums ``sum_j c_j k(u_ij) V_j`` (n_queries, V.shape[1]), in float64, on at
        most ``threads`` threads (``weight``: the ``c_j``, None for 1)."""
        Qs = np.ascontiguousarray(self._coordinates(queries))
        Vt = self.values(V, weight)
        # widen the search by a hair: the exact test inside decides
        seg_lo, seg_hi = self._segments(Qs, pad=np.sqrt(self.r2) * (1.0 + 1e-9))
        pairs = np.cumsum((seg_hi - seg_lo).sum(axis=1))
        total = int(pairs[-1]) if len(pairs) else 0
        workers = max(1, int(threads)) if total > PARALLEL_PAIRS else 1
        n_chunks = max(-(-total // CHUNK_PAIRS), workers if total > PARALLEL_PAIRS else 1)
        bounds = np.unique(np.r_[0, np.searchsorted(pairs, np.linspace(0, total, n_chunks + 1)[1:-1]), len(Qs)])
        chunks = list(zip(bounds[:-1], bounds[1:]))
        parts = [None] * len(chunks)

        def run(c):  # chunks of queries: Ctrl-C is seen between them
            for i in range(c.start, c.stop):
                a, b = chunks[i]
                parts[i] = _window_sums(self.code)(Qs[a:b], self.Xt, Vt, seg_lo[a:b], seg_hi[a:b], self.r2)

        map_blocks(run, len(chunks), 1, workers, blas=False)
        return np.concatenate(parts) if parts else np.zeros((0, len(Vt)))


def compiled_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    raw = bound.samples if queries is None else np.asarray(queries, dtype=bound.dtype).reshape(len(Q), -1)
    S = bound.compact_index.sums(raw, V_aug, bound.weight, threads=bound.options.threads)
    return S.astype(V_aug.dtype, copy=False), np.zeros(len(Q), dtype=V_aug.dtype)
