"""Local polynomial least squares, batched over queries.

At a query ``x*`` the local polynomial of degree ``p`` solves

    beta(x*) = argmin_beta  sum_i K(x*, x_i) r_i (y_i - beta . psi(z_i))^2  +  ridge |beta_1:|^2

with ``psi`` the monomials of total degree <= p (the constant first) of the *query-centred*
coordinates ``z_i = (x_i - x*) / s``, and predicts ``f(x*) = beta_0`` (every other monomial
vanishes at ``z = 0``). ``r_i`` are optional sample weights (LOESS robustness weights). The
normal equations are ``(G + ridge D) beta = b`` with the normalised Gram ``G = sum_i w_i psi psi^T``
and ``b = sum_i w_i psi y_i`` (``w_i = K r_i / sum_j K r_j``, ``D = diag(0, 1, ..., 1)``).

Two paths, both through the engine:

* **gathered** (compact profile with a kNN span, i.e. LOESS): the ``k`` nearest samples of each
  query are gathered (a sorted window in 1-D, a tree otherwise), and the centred design is built
  directly with ``s`` the query's own radius (the distance to its k-th neighbour), so that ``G``
  is well conditioned whatever the position of ``x*``.
* **moments** (every other kernel): one pass of :func:`localkit.engine.local_moments` gives the
  uncentred moments of the monomials of ``(x - c) / s`` (``c`` the sample mean, ``s`` the
  bandwidth); they are moved to the query exactly by the binomial map ``T(z*)``
  (``phi(z) = T(z*) psi(z - z*)``). Its conditioning degrades like ``(spread / h)^(2p)``, so very
  small bandwidths with degree >= 2 are better served by the gathered path.

A query whose local design is (near) singular, ``lambda_min(G) <= rcond lambda_max(G)`` (too few
neighbours, collinear points), falls back to the local weighted mean (the degree-0 fit) and is
flagged in ``singular``; a query without any weight gets the target of its nearest sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np
from numba import njit
from scipy.special import comb

from .._validation import check_array, check_points
from ..kernels import PROFILES
from . import neighbors as nb
from .blocks import map_blocks, resolve_n_jobs
from .local_mean import make_kernel
from .moments import local_moments


@dataclass
class LocalPolynomialFit:
    """values (n_queries, t): the fits at the queries; singular (n_queries,) bool: queries that
    fell back to the local mean; empty (n_queries,) bool: queries without weight (nearest target)."""

    values: np.ndarray
    singular: np.ndarray
    empty: np.ndarray


def monomial_exponents(n_features, degree):
    """Exponents ``(P, d)`` of the monomials of total degree <= ``degree``, graded (constant first)."""
    rows = [e for e in product(range(degree + 1), repeat=n_features) if sum(e) <= degree]
    rows.sort(key=lambda e: (sum(e), [-v for v in e]))
    return np.array(rows, dtype=np.intp).reshape(len(rows), n_features)


def design(Z, exponents):
    """Monomials ``psi(Z)`` of shape ``Z.shape[:-1] + (P,)``."""
    out = np.ones(Z.shape[:-1] + (len(exponents),), dtype=Z.dtype)
    for k in range(Z.shape[-1]):
        powers = Z[..., k, None] ** np.arange(exponents[:, k].max() + 1, dtype=Z.dtype)
        out *= powers[..., exponents[:, k]]
    return out


def local_polynomial(queries, samples, targets, degree=1, kernel="tricube", bandwidth=1.0,
                     n_neighbors=None, *, sample_weight=None, sample_scale=None, exclude_self=False,
                     ridge=0.0, rcond=1e-10, algorithm="auto", block_size=None, n_jobs=None):
    """Local polynomial fits of ``targets`` at ``queries`` (None: at the samples).

    ``kernel``, ``bandwidth``, ``n_neighbors``, ``exclude_self`` (leave-one-out) and the engine
    options are those of :func:`localkit.engine.local_sums`; ``sample_weight`` (n_samples,)
    multiplies the kernel weights; ``sample_scale`` (n_samples,) gives each sample its own
    bandwidth factor (sample-point adaptive kernel, moments path). Returns
    :class:`LocalPolynomialFit`.
    """
    samples = check_points(samples, "samples")
    queries = samples if queries is None else check_points(queries, "queries", n_features=samples.shape[1],
                                                           dtype=samples.dtype)
    Y = check_array(targets, "targets", ndim=(1, 2)).reshape(len(samples), -1)
    sw = None if sample_weight is None else check_array(sample_weight, "sample_weight", ndim=(1,))
    if sw is not None and (len(sw) != len(samples) or np.any(sw < 0)):
        raise ValueError(f"sample_weight must be {len(samples)} non-negative numbers")
    kern = make_kernel(kernel, bandwidth, n_neighbors)
    E = monomial_exponents(samples.shape[1], degree)
    if kern.n_neighbors is not None and kern.compact and algorithm != "dense" and sample_scale is None:
        G, b, empty, nearest = _gathered(queries, samples, Y, sw, kern, E, exclude_self, block_size, n_jobs)
    else:
        G, b, empty, nearest = _moments(queries, samples, Y, sw, kern, E, exclude_self, algorithm,
                                        block_size, n_jobs, sample_scale)
    values, singular = _solve(G, b, ridge, rcond)
    if nearest is not None and empty.any():
        values[empty] = nearest[empty]
    singular &= ~empty
    return LocalPolynomialFit(values.astype(Y.dtype, copy=False), singular, empty)


def _solve(G, b, ridge, rcond):
    """``beta_0`` of ``(G + ridge D) beta = b`` per query; the local mean where G is singular."""
    P = G.shape[1]
    if ridge and P > 1:
        G = G.copy()
        idx = np.arange(1, P)
        G[:, idx, idx] += ridge
    with np.errstate(invalid="ignore", divide="ignore"):
        lam = np.linalg.eigvalsh(G) if P > 1 else G[:, :, 0]
        ok = np.isfinite(lam).all(axis=1) & (lam[:, 0] > rcond * lam[:, -1]) & (lam[:, -1] > 0)
        values = b[:, 0, :] / G[:, 0, :1]  # the local weighted mean: psi_0 = 1
    if ok.any():
        values[ok] = np.linalg.solve(G[ok], b[ok])[:, 0, :]
    return values, ~ok


#: compact profiles ``(1 - u^a)^b`` (see :mod:`localkit.kernels.profiles`) whose weights the fused
#: 1-D kernel evaluates inline; a test checks it against ``Profile.log_k``
POLY_PROFILES = {name: p.poly for name, p in PROFILES.items() if p.poly is not None}


def _gathered(queries, samples, Y, sw, kern, E, exclude_self, block_size, n_jobs):
    """Normalised Gram and moments from the k nearest samples, design centred at each query."""
    k = kern.n_neighbors
    if k + int(exclude_self) > len(samples):
        raise ValueError(f"n_neighbors must be <= n_samples{' - 1' if exclude_self else ''}"
                         f"={len(samples) - int(exclude_self)}, got {k}")
    h = kern.resolve_bandwidth(samples)
    Qs, Xs = kern.scale(queries, h), kern.scale(samples, h)
    weights = np.ones(len(Xs)) if sw is None else sw.astype(np.float64)
    Yf = np.ascontiguousarray(Y, dtype=np.float64)
    one_d = Xs.shape[1] == 1 and kern.metric == "euclidean"
    if one_d:  # work in sorted order: every neighbourhood is a contiguous window
        order = np.argsort(Xs[:, 0], kind="stable")
        Xs, Yf, weights = Xs[order], Yf[order], weights[order]
    else:
        index = nb.make_index(Xs, kern.metric)
    fused = one_d and not exclude_self and kern.profile.name in POLY_PROFILES
    a, p = POLY_PROFILES.get(kern.profile.name, (0, 0))
    n_q, P, t = len(Qs), E.shape[0], Y.shape[1]
    G = np.empty((n_q, P, P))
    b = np.empty((n_q, P, t))
    total = np.empty(n_q)
    nearest = np.empty(n_q, dtype=np.intp)
    # a block of weights stays in cache; the fused kernel holds no weights, only per-query sums
    bq = int(block_size or (1024 if fused else max(8, 2**16 // k)))

    def run(rows):
        if fused:
            lo = _window_starts(Xs[:, 0], Qs[rows, 0], k)
            S, T = _window_accumulate(Xs[:, 0], Yf, weights, lo, Qs[rows, 0], k, E.shape[0] - 1, a, p)
            G[rows], b[rows], total[rows] = S[:, E[:, 0, None] + E[None, :, 0]], T, S[:, 0]
            nearest[rows] = 0
            for i in np.flatnonzero(~(S[:, 0] > 0)):  # empty: the nearest sample of the window
                pos = lo[i] + np.arange(k)
                nearest[rows.start + i] = order[pos[np.abs(Xs[pos, 0] - Qs[rows.start + i, 0]).argmin()]]
            return
        if one_d:
            dist, idx = _window_neighbors(Xs[:, 0], order, Qs[rows, 0], k, exclude_self, rows.start)
        else:
            dist, idx = nb.kneighbors(index, Qs[rows], k, exclude_self=exclude_self, row_offset=rows.start)
        radius = dist.max(axis=1)
        w = np.exp(kern.profile.log_k(nb.scaled_sq_distances(dist, radius)))
        G[rows], b[rows], total[rows] = _accumulate(Xs, Qs[rows], Yf, weights, idx, w, radius, E)
        near = idx[np.arange(len(idx)), dist.argmin(axis=1)]
        nearest[rows] = order[near] if one_d else near

    map_blocks(run, n_q, bq, resolve_n_jobs(n_jobs))
    empty = ~(total > 0)
    scale = 1.0 / np.where(empty, 1.0, total)
    return G * scale[:, None, None], b * scale[:, None, None], empty, Y[nearest]


def _window_starts(x_sorted, q, width):
    """Start ``l`` of the window of ``width`` nearest sorted samples, by bisection over queries.

    ``l`` moves right while ``x[l + width]`` is closer than ``x[l]``, as in Cleveland's lowess.
    """
    n = len(x_sorted)
    lo = np.zeros(len(q), dtype=np.intp)
    hi = np.full(len(q), n - width, dtype=np.intp)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        right = q - x_sorted[mid] > x_sorted[np.minimum(mid + width, n - 1)] - q
        lo = np.where(right & (lo < hi), mid + 1, lo)
        hi = np.where(~right & (lo < hi), mid, hi)
    return lo


def _window_neighbors(x_sorted, order, q, k, exclude_self, row_offset):
    """The k nearest samples of 1-D queries (positions in sorted order) and their distances.

    With ``exclude_self`` the window holds ``k + 1`` samples and the query's own sample
    (``order[pos] == row``) is dropped.
    """
    width = k + int(exclude_self)
    pos = _window_starts(x_sorted, q, width)[:, None] + np.arange(width)
    dist = np.abs(x_sorted[pos] - q[:, None])
    if exclude_self:
        rows = np.arange(len(q)) + row_offset
        is_self = order[pos] == rows[:, None]
        is_self[~is_self.any(axis=1), -1] = True  # a duplicate displaced it: drop the farthest
        keep = ~is_self
        pos, dist = pos[keep].reshape(len(q), k), dist[keep].reshape(len(q), k)
    return dist, pos


@njit(nogil=True, cache=True, inline="always")
def _add(G, b, i, wj, dz, Y, s, E, pw, psi):
    """Add sample ``s`` with weight ``wj`` and centred, scaled offset ``dz`` (d,) to query ``i``'s sums."""
    P, d = E.shape
    for m in range(d):
        for e in range(1, pw.shape[1]):
            pw[m, e] = pw[m, e - 1] * dz[m]
    for a in range(P):
        v = 1.0
        for m in range(d):
            v *= pw[m, E[a, m]]
        psi[a] = v
    for a in range(P):
        wa = wj * psi[a]
        for c in range(a, P):
            G[i, a, c] += wa * psi[c]
        for u in range(Y.shape[1]):
            b[i, a, u] += wa * Y[s, u]


@njit(nogil=True, cache=True, inline="always")
def _ipow(x, n):
    r = 1.0
    for _ in range(n):
        r *= x
    return r


@njit(nogil=True, cache=True)
def _symmetrise(G):
    for i in range(G.shape[0]):
        for a in range(G.shape[1]):
            for c in range(a):
                G[i, a, c] = G[i, c, a]


@njit(nogil=True, cache=True)
def _accumulate(X, Q, Y, sw, idx, w, radius, E):
    """Unnormalised ``G = sum_j w_j r_j psi psi^T``, ``b = sum_j w_j r_j psi y_j^T`` and the
    weight sums, ``psi`` the monomials of ``(x_j - x*) / radius``; one fused pass."""
    bq, k = idx.shape
    P, d = E.shape
    G = np.zeros((bq, P, P))
    b = np.zeros((bq, P, Y.shape[1]))
    total = np.zeros(bq)
    psi = np.empty(P)
    pw = np.ones((d, E.max() + 1))
    dz = np.empty(d)
    for i in range(bq):
        inv = 1.0 / radius[i] if radius[i] > 0 else 0.0
        for j in range(k):
            s = idx[i, j]
            wj = w[i, j] * sw[s]
            if wj == 0.0:
                continue
            total[i] += wj
            for m in range(d):
                dz[m] = (X[s, m] - Q[i, m]) * inv
            _add(G, b, i, wj, dz, Y, s, E, pw, psi)
    _symmetrise(G)
    return G, b, total


@njit(nogil=True, cache=True)
def _window_accumulate(x, Y, sw, lo, q, k, degree, a, p):
    """1-D windows ``[lo, lo + k)`` of sorted samples: the power sums ``S_m = sum_j w_j dz_j^m``
    (m <= 2 degree) and ``T_m = sum_j w_j dz_j^m y_j`` (m <= degree), ``dz = (x_j - x*) / radius``,
    with the weights ``(1 - |dz|^a)^p r_j`` computed in the same pass (every window sample has
    ``|dz| <= 1``; the farthest gets weight 0). The Gram matrix is the Hankel matrix
    ``G_ac = S_(a+c)``."""
    bq, t = len(q), Y.shape[1]
    S = np.zeros((bq, 2 * degree + 1))
    T = np.zeros((bq, degree + 1, t))
    for i in range(bq):
        l = lo[i]
        radius = max(q[i] - x[l], x[l + k - 1] - q[i])
        inv = 1.0 / radius if radius > 0 else 0.0
        if degree == 1 and t == 1:  # LOESS: five running sums in registers
            s0 = s1 = s2 = t0 = t1 = 0.0
            for j in range(l, l + k):
                dz = (x[j] - q[i]) * inv
                w = _ipow(1.0 - _ipow(abs(dz), a), p) * sw[j]
                wd = w * dz
                s0 += w
                s1 += wd
                s2 += wd * dz
                t0 += w * Y[j, 0]
                t1 += wd * Y[j, 0]
            S[i, 0], S[i, 1], S[i, 2], T[i, 0, 0], T[i, 1, 0] = s0, s1, s2, t0, t1
            continue
        for j in range(l, l + k):
            dz = (x[j] - q[i]) * inv
            w = _ipow(1.0 - _ipow(abs(dz), a), p) * sw[j]
            for m in range(2 * degree + 1):
                S[i, m] += w
                if m <= degree:
                    for c in range(t):
                        T[i, m, c] += w * Y[j, c]
                w *= dz
    return S, T


def _moments(queries, samples, Y, sw, kern, E, exclude_self, algorithm, block_size, n_jobs, sample_scale):
    """Uncentred moments from one engine pass, moved to each query by the binomial map."""
    centre = samples.mean(axis=0)
    if kern.n_neighbors is None and not kern.is_softmax:
        scale = np.broadcast_to(np.asarray(kern.resolve_bandwidth(samples), dtype=samples.dtype),
                                (samples.shape[1],))
    else:
        scale = samples.std(axis=0)
        scale = np.where(scale > 0, scale, 1.0)
    Zs, Zq = (samples - centre) / scale, (queries - centre) / scale
    F = design(Zs, E)
    root = None if sw is None else np.sqrt(sw)[:, None]
    if algorithm == "neighbors" and not kern.compact:
        algorithm = "auto"  # a non-compact kernel has no neighbour path: every sample counts
    mom = local_moments(queries, samples, F if root is None else F * root, Y if root is None else Y * root,
                        kern, exclude_self=exclude_self, algorithm=algorithm, block_size=block_size,
                        n_jobs=n_jobs, sample_scale=sample_scale)
    T = _binomial_map(Zq, E)
    Gc = np.linalg.solve(T, mom.M2)
    Gc = np.linalg.solve(T, Gc.transpose(0, 2, 1))
    bc = np.linalg.solve(T, mom.MY)
    # normalise by the (robustness-weighted) weight sum, as on the gathered path; an empty
    # neighbourhood got the nearest sample's moments from the engine, hence its target
    total = np.where(Gc[:, 0, 0] > 0, Gc[:, 0, 0], 1.0)[:, None, None]
    return Gc / total, bc / total, mom.empty, None


def _binomial_map(Zq, E):
    """``T[q, a, b] = prod_k C(a_k, b_k) z*_qk^(a_k - b_k)`` for ``b <= a``, else 0."""
    diff = E[:, None, :] - E[None, :, :]  # (P, P, d)
    below = np.all(diff >= 0, axis=2)
    coef = np.prod(comb(E[:, None, :], E[None, :, :]), axis=2) * below
    powers = np.ones((len(Zq),) + diff.shape[:2], dtype=Zq.dtype)
    for k in range(E.shape[1]):
        powers *= Zq[:, k, None, None] ** np.maximum(diff[:, :, k], 0)
    return coef * powers
