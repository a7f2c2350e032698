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

The result is :class:`~localkit.engine.LocalSums`, equal to :func:`~localkit.engine.local_sums`
to round-off (the weights of a compact profile need no log-space shift: they lie in ``[0, 1]``).
"""
from __future__ import annotations

import numba
import numpy as np

from ..kernels import PROFILES

#: profile -> (form, a, b): form 0 is ``(1 - u^a)^b`` (``b = 0``: uniform), form 1 ``cos(pi u / 2)``
FORMS = {name: (0, *p.poly) for name, p in PROFILES.items() if p.poly is not None}
FORMS["cosine"] = (1, 0, 0)


def supports(kernel):
    """True when the compiled pass can evaluate ``kernel`` (a Kernel instance)."""
    return (kernel.compact and kernel.n_neighbors is None and kernel.metric == "euclidean"
            and kernel.profile.name in FORMS)


@numba.njit(inline="always")
def _weight(u2, form, a, b):
    if form == 1:
        return np.cos(0.5 * np.pi * np.sqrt(u2))
    ua = u2 if a == 2 else np.sqrt(u2) ** a
    return (1.0 - ua) ** b


#: Candidate pairs above which a pass runs on all of numba's threads; smaller passes run on one
#: (a parallel region costs milliseconds on a busy machine). One compiled function serves both:
#: numba's cache keys a function by its code, not its flags, so a serial twin would share its entry.
PARALLEL_PAIRS = 2_000_000


@numba.njit(parallel=True, cache=True)
def _window_sums(Q, Xt, Vt, seg_lo, seg_hi, r2, form, a, b):
    """Sums ``[sum_j k(u_ij) v_j, sum_j k(u_ij)]`` over each query's segments
    ``[seg_lo[i, s], seg_hi[i, s])``, with ``u^2 = |q - x|^2 / r2`` and the support ``|q - x|^2 <= r2``;
    samples and values are stored feature-major (``Xt`` (d, n), ``Vt`` (p, n)) so that the loops
    along a segment run over contiguous memory."""
    n_q, d = Q.shape
    p = Vt.shape[0]
    S = np.zeros((n_q, p + 1), dtype=Vt.dtype)
    for i in numba.prange(n_q):
        acc = np.zeros(p + 1, dtype=Vt.dtype)
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
            w = np.zeros(m)
            if form == 0 and b == 0:  # uniform: a branch-free loop the compiler vectorises
                for j in range(m):
                    w[j] = 1.0 if u2[j] <= r2 else 0.0
            else:
                for j in range(m):
                    if u2[j] <= r2:
                        w[j] = _weight(u2[j] / r2, form, a, b)
            acc[p] += w.sum()
            for c in range(p):
                vc = Vt[c, start:start + m]
                total = 0.0
                for j in range(m):
                    total += w[j] * vc[j]
                acc[c] += total
        S[i] = acc
    return S


class CompactIndex:
    """Samples (and their values) sorted once into strips for the compiled pass; query it many
    times with :meth:`sums` (an iterated local mean over fixed samples sorts them only once).

    The samples are sorted into strips of width ``h / 2`` along the scaled coordinate with the
    widest spread, and by the second widest inside a strip, so that each query's candidate
    samples (``|dx_a| <= h`` and ``|dx_b| <= h``) are a few contiguous segments.
    """

    def __init__(self, samples, V, kern):
        if not supports(kern):
            raise ValueError(f"the compiled pass needs one of the compact profiles {sorted(FORMS)} with a "
                             f"fixed bandwidth and the euclidean metric, got {kern!r}")
        self.kern = kern
        self.h = kern.resolve_bandwidth(samples)
        Xs = self._coordinates(samples)
        self.r2 = float(self.h) ** 2 if np.ndim(self.h) == 0 else 1.0
        width = self.width = 0.5 * np.sqrt(self.r2)
        spread = np.ptp(Xs, axis=0)
        by_spread = np.argsort(spread)[::-1]
        self.ax_a = by_spread[0]
        self.ax_b = by_spread[1] if Xs.shape[1] > 1 else self.ax_a
        self.lo_a, self.lo_b, self.range_b = Xs[:, self.ax_a].min(), Xs[:, self.ax_b].min(), spread[self.ax_b]
        self.n_strips = int(spread[self.ax_a] // width) + 1 if self.ax_b != self.ax_a else 1
        self.span = self.range_b + 2.0  # strips' keys never overlap: key = strip * span + (x_b - lo_b)
        key = self._strip_of(Xs[:, self.ax_a]) * self.span + (Xs[:, self.ax_b] - self.lo_b)
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        self.Xt = np.ascontiguousarray(Xs[order].T)
        self.Vt = np.ascontiguousarray(V[order].T, dtype=np.float64)

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

    def sums(self, queries):
        """Unnormalised sums ``[sum_j k(u_ij) v_j, sum_j k(u_ij)]`` (n_queries, p + 1), in float64."""
        Qs = np.ascontiguousarray(self._coordinates(queries))
        # widen the search by a hair: the exact test inside decides
        seg_lo, seg_hi = self._segments(Qs, pad=np.sqrt(self.r2) * (1.0 + 1e-9))
        threads = numba.get_num_threads()
        numba.set_num_threads(threads if (seg_hi - seg_lo).sum() > PARALLEL_PAIRS else 1)
        try:
            return _window_sums(Qs, self.Xt, self.Vt, seg_lo, seg_hi, self.r2, *FORMS[self.kern.profile.name])
        finally:
            numba.set_num_threads(threads)


def compact_sums(queries, samples, V, kern):
    """Unnormalised sums ``[sum_j k(u_ij) v_j, sum_j k(u_ij)]`` (n_queries, p + 1), in float64.

    ``queries`` and ``samples`` are the raw (validated) points and ``kern`` a kernel for which
    :func:`supports` holds; :func:`localkit.engine.local_sums` calls this for
    ``algorithm="compiled"``. The weights of a compact profile lie in ``[0, 1]``: no log-space
    shift is needed.
    """
    return CompactIndex(samples, V, kern).sums(queries)
