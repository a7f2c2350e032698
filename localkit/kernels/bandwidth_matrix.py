"""Full bandwidth matrices for 2 to 6 continuous features: R ``ks``'s plug-in ``Hpi`` and
smoothed cross-validation ``Hscv`` selectors, with ``ks``'s default arguments.

A Gaussian kernel with bandwidth matrix ``H`` (``d x d``, symmetric positive definite) is

    K_H(x) = (2 pi)^(-d/2) |H|^(-1/2) exp(-x^T H^-1 x / 2),

the kernel density ``f_H(x) = n^-1 sum_i K_H(x - x_i)``. Both selectors minimise an estimate of
its asymptotic mean integrated squared error over ``H``, as in ``ks`` 1.14 (Duong & Hazelton,
2003; Chacon & Duong, 2010):

* ``hpi`` (``ks::Hpi(x)``, ``nstage = 2``, ``pre = "sphere"``):
  ``PI(H) = n^-1 |H|^(-1/2) (4 pi)^(-d/2) + 1/4 sum_ijkl psi_ijkl H_ij H_kl``, with the fourth-order
  density-derivative functionals ``psi_ijkl = n^-2 sum_a sum_b d^4 phi_G / dx_i dx_j dx_k dx_l
  (x_a - x_b)`` estimated with a pilot ``G = g^2 I`` on the sphered data ``x S^-1/2``: in 2-D
  ``ks``'s "samse" pilot (one ``g`` for all, from sixth-order functionals that a first pilot
  estimates), in ``d >= 3`` its "dscalar" pilot.
* ``hscv`` (``ks::Hscv(x)``): ``SCV(H) = n^-1 |H|^(-1/2) (4 pi)^(-d/2) + max(0,
  Q(2H + 2G) - 2 Q(H + 2G) + Q(2G))`` with ``Q(S) = n^-2 sum_a sum_b phi_S(x_a - x_b)``; its
  pilot ``G = g^2 I`` in 2-D from ``ks``'s "samse" rule (through a one-stage ``Hpi`` on a binned
  grid, as ``ks`` computes it), in ``d >= 3`` the "dscalar" rule.

Both are minimised as ``ks`` minimises them: over ``vech(M)`` with ``H = M M`` (M symmetric),
from the normal-scale ``H`` of the sphered data, by R's ``optim(method="BFGS")`` with its
defaults (ported here, :func:`r_bfgs`: central differences with step 1e-3 for the gradient, the
relative stop ``sqrt(eps)`` on the objective), and mapped back as ``S^1/2 H S^1/2``. Where
``ks`` bins by default (``n > 500`` in 2-D, ``n > 1000`` in 3 and 4 features) the functionals are
computed on ``ks``'s linear-binning grid the same way; above 4 features they are exact sums over
all pairs, ``O(n^2)``.

The objectives are the same functions as ``ks``'s to round-off, so the optimiser takes ``ks``'s
path and stops where it stops: equal to ``ks`` to 1e-11 relative on R's ``faithful``, ``quakes``
(binned), ``iris`` and ``mtcars`` (3 to 6 features; ``tests/test_bandwidth_matrix.py``).
``optim``'s stop (a relative change of the objective below 1.5e-8) leaves ``H`` short of the
exact minimiser by more than that (on ``faithful``'s ``Hpi``: 2.5e-5 of its largest entry, found by
Nelder-Mead to 1e-14 from there); it is ``ks``'s answer that these return, not a more precise
minimum.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

#: the full-matrix rules
MATRIX_RULES = ("hpi", "hscv")


# -- R's optim(method="BFGS"): vmmin of R's optim.c, with optim's finite-difference gradient --------
def r_bfgs(fn, x0, *, maxit=100, reltol=np.sqrt(np.finfo(float).eps), ndeps=1e-3):
    """Minimise ``fn`` from ``x0`` as R's ``optim(x0, fn, method="BFGS")`` does with its default
    control (``maxit=100``, ``reltol=sqrt(.Machine$double.eps)``, ``abstol=-Inf``, ``ndeps=1e-3``,
    no gradient given: central differences ``(f(x + e_i eps) - f(x - e_i eps)) / (2 eps)``).
    Returns ``(x, f)``: R's ``par`` and ``value``."""
    stepredn, acctol, reltest = 0.2, 1e-4, 10.0
    b = np.array(x0, dtype=np.float64)
    n = b.size

    def grad(p):
        g = np.empty(n)
        for i in range(n):
            q = p.copy()
            q[i] = p[i] + ndeps
            v1 = fn(q)
            q[i] = p[i] - ndeps
            v2 = fn(q)
            g[i] = (v1 - v2) / (2 * ndeps)
            if not np.isfinite(g[i]):
                raise ValueError(f"non-finite finite-difference value [{i + 1}]")
        return g

    f = fn(b)
    if not np.isfinite(f):
        raise ValueError("initial value in 'vmmin' is not finite")
    fmin = f
    g = grad(b)
    gradcount, iteration = 1, 1
    ilast = gradcount
    B = np.eye(n)
    t = np.zeros(n)
    while True:
        if ilast == gradcount:
            B = np.eye(n)
        X = b.copy()
        c = g.copy()
        t = np.empty(n)
        gradproj = 0.0
        for i in range(n):  # B is symmetric: R keeps its lower triangle
            s = 0.0
            for j in range(n):
                s -= B[max(i, j), min(i, j)] * g[j]
            t[i] = s
            gradproj += s * g[i]
        if gradproj < 0.0:
            steplength = 1.0
            accpoint = False
            while True:
                count = 0
                for i in range(n):
                    b[i] = X[i] + steplength * t[i]
                    if reltest + X[i] == reltest + b[i]:
                        count += 1
                if count < n:
                    f = fn(b.copy())
                    accpoint = bool(np.isfinite(f)) and f <= fmin + gradproj * steplength * acctol
                    if not accpoint:
                        steplength *= stepredn
                if count == n or accpoint:
                    break
            enough = abs(f - fmin) > reltol * (abs(fmin) + reltol)  # abstol = -Inf
            if not enough:
                count = n
                fmin = f
            if count < n:
                fmin = f
                g = grad(b.copy())
                gradcount += 1
                iteration += 1
                t = steplength * t
                c = g - c
                D1 = sum(t[i] * c[i] for i in range(n))
                if D1 > 0:
                    Xn = np.empty(n)
                    D2 = 0.0
                    for i in range(n):
                        s = 0.0
                        for j in range(n):
                            s += B[max(i, j), min(i, j)] * c[j]
                        Xn[i] = s
                        D2 += s * c[i]
                    D2 = 1.0 + D2 / D1
                    for i in range(n):
                        for j in range(i + 1):
                            B[i, j] += (D2 * t[i] * t[j] - Xn[i] * t[j] - t[i] * Xn[j]) / D1
                else:
                    ilast = gradcount
            else:
                if ilast < gradcount:
                    count = 0
                    ilast = gradcount
        else:
            count = 0
            if ilast == gradcount:
                count = n
            else:
                ilast = gradcount
        if iteration >= maxit:
            break
        if gradcount - ilast > 2 * n:
            ilast = gradcount
        if count == n and ilast == gradcount:
            break
    return b, fmin


# -- the matrix algebra of ks ------------------------------------------------------------------------
def _vech(M):
    d = M.shape[0]
    return np.concatenate([M[j:, j] for j in range(d)])


def _invvech(v):
    d = int(round((math.sqrt(8 * len(v) + 1) - 1) / 2))
    M = np.zeros((d, d))
    k = 0
    for j in range(d):
        M[j:, j] = v[k:k + d - j]
        k += d - j
    return M + M.T - np.diag(np.diag(M))


def _sqrtm(A):
    """``ks::matrix.sqrt``: the symmetric square root of a positive semi-definite matrix."""
    lam, Q = np.linalg.eigh(0.5 * (A + A.T))
    return (Q * np.sqrt(np.clip(lam, 0.0, None))) @ Q.T


def _odd_factorial(m):
    return math.factorial(m) / (2 ** (m / 2) * math.factorial(m // 2))


def _nu(r, A):
    """``ks:::nu(r, A)``: ``r! 2^r`` times the ``r``-th coefficient of the recursion on the power
    sums of ``A``'s eigenvalues (the moments ``E[(z^T A z)^r]`` of a standard normal ``z``)."""
    ev = np.linalg.eigvalsh(0.5 * (A + A.T))
    tr = [float(np.sum(ev ** p)) for p in range(1, r + 1)]
    nu = [1.0]
    for p in range(1, r + 1):
        nu.append(sum(tr[k] * nu[p - 1 - k] for k in range(p)) / (2 * p))
    return math.factorial(r) * 2 ** r * nu[r]


def _pairing_tensor(A, order):
    """``sum over pairings of {1..order} of prod A[i_a, i_b]``: the symmetric tensor of Isserlis'
    theorem (``order`` even), shape ``(d,) * order``."""
    if order == 0:
        return np.ones(())
    if order == 2:
        return A.copy()
    prev = _pairing_tensor(A, order - 2)
    out = np.zeros((A.shape[0],) * order)
    for j in range(1, order):
        # A[i_0, i_j] * prev[the other indices]: built as A (x) prev, then i_j moved to place j
        term = np.multiply.outer(A, prev)
        out += np.moveaxis(term, 1, j)
    return out


def _normal_derivative_at_zero(order, Sigma):
    """``D^{(x) order} phi_Sigma(0)``, the full tensor of the order-th derivatives of the normal
    density at its mean (``ks:::psins`` takes it with ``2 Sigma``)."""
    d = Sigma.shape[0]
    Sinv = np.linalg.inv(Sigma)
    phi0 = (2 * np.pi) ** (-d / 2) / math.sqrt(np.linalg.det(Sigma))
    return phi0 * _pairing_tensor(-Sinv, order)


# -- density-derivative functionals of a Gaussian pilot G = g^2 I ----------------------------------
def _multi_indices(d, order):
    """``ks``'s unique multi-indices of derivatives of ``order`` in ``d`` variables, in its order
    (reverse lexicographic: ``(order, 0, ...)`` first)."""
    out = []

    def rec(prefix, left, k):
        if k == d - 1:
            out.append(tuple(prefix + [left]))
            return
        for a in range(left, -1, -1):
            rec(prefix + [a], left - a, k + 1)

    rec([], order, 0)
    return out


def _hermite(m, u):
    """Probabilists' Hermite polynomial ``He_m(u)``."""
    h0, h1 = np.ones_like(u), u
    if m == 0:
        return h0
    for k in range(1, m):
        h0, h1 = h1, u * h1 - k * h0
    return h1


class _PairSums:
    """``psi_alpha = n^-2 sum_a sum_b d^alpha phi_{g^2 I}(x_a - x_b)`` over all ordered pairs
    (``ks``'s ``kfe(inc=1)``, exact: ``binned=FALSE``), or over the linear-binning grid of ``ks``
    (``binned=TRUE``: counts ``c`` on the grid, ``n^-2 sum_g sum_g' c_g c_g' d^alpha
    phi(delta (g - g'))`` over the offsets ``ks`` keeps)."""

    def __init__(self, X, binned, gridsize=None, grid_h=None):
        self.X, self.n, self.d = X, X.shape[0], X.shape[1]
        self.binned = binned
        if binned:
            self.counts, self.delta = _linear_binning(X, grid_h, gridsize)

    def offsets(self, sd_max, r):
        """The offsets (in grid units, per axis) of ``ks:::kdde.binned.nd`` and the
        autocorrelation of the counts there."""
        from scipy.signal import fftconvolve

        M = np.array(self.counts.shape)
        span = self.delta * (M - 1)
        L = np.minimum(np.ceil((4 + r) * sd_max * (M - 1) / span), M - 1).astype(int)
        if np.any(L <= 0):
            raise ValueError("the binning grid is too coarse for this (small) pilot bandwidth")
        auto = fftconvolve(self.counts, self.counts[(slice(None, None, -1),) * self.d], mode="full")
        centre = M - 1
        sl = tuple(slice(c - (l - 1), c + l) for c, l in zip(centre, L))
        grids = np.meshgrid(*[np.arange(-(l - 1), l) * dl for l, dl in zip(L, self.delta)], indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1), auto[sl].ravel()

    def _pairs(self, block=2 ** 20):
        """Blocks of ``(differences, multiplicity)`` covering every ordered pair: the pairs
        ``a < b`` twice (the summands are even in ``x_a - x_b``) and the ``n`` pairs ``a = b``
        once; kept after the first call where they take at most 2^25 numbers (an objective
        evaluates them at every step of the search)."""
        cached = getattr(self, "_cached_pairs", None)
        if cached is not None:
            yield from cached
            return
        n, d = self.n, self.d
        keep = n * (n - 1) // 2 * d <= 2 ** 25
        blocks = [(np.zeros((1, d)), float(n))]
        yield blocks[0]
        step = max(1, block // n)
        for s in range(0, n - 1, step):
            rows = np.arange(s, min(n - 1, s + step))
            a, b = np.nonzero(rows[:, None] < np.arange(n)[None, :])
            part = (self.X[rows[a]] - self.X[b], 2.0)
            if keep:
                blocks.append(part)
            yield part
        if keep:
            self._cached_pairs = blocks

    def functionals(self, g, alphas):
        """``psi_alpha`` for each multi-index in ``alphas`` (a list of tuples), pilot ``g^2 I``."""
        alphas = list(alphas)
        r = sum(alphas[0])
        out = np.zeros(len(alphas))
        orders = sorted({a for al in alphas for a in al})

        def accumulate(D, w):
            U = D / g
            base = np.exp(-0.5 * np.sum(U * U, axis=1)) * (2 * np.pi) ** (-self.d / 2) / g ** self.d
            base = base * w
            He = {(k, m): _hermite(m, U[:, k]) for k in range(self.d) for m in orders}
            for i, al in enumerate(alphas):
                term = base
                for k, m in enumerate(al):
                    if m:
                        term = term * He[(k, m)]
                out[i] += np.sum(term)

        if self.binned:
            D, w = self.offsets(g, r)
            accumulate(D, w)
        else:
            for D, w in self._pairs():
                accumulate(D, w)
        sign = np.array([(-1.0 / g) ** sum(al) for al in alphas])
        return sign * out / self.n ** 2

    def tensor(self, g, order):
        """The full symmetric tensor ``D^{(x) order}`` of the functionals, shape ``(d,) * order``."""
        alphas = _multi_indices(self.d, order)
        values = dict(zip(alphas, self.functionals(g, alphas)))
        T = np.empty((self.d,) * order)
        for idx in itertools.product(range(self.d), repeat=order):
            T[idx] = values[tuple(idx.count(k) for k in range(self.d))]
        return T

    def normal_pair_mean(self, Sigma, binning=None):
        """``Q(Sigma) = n^-2 sum_a sum_b phi_Sigma(x_a - x_b)`` (``ks:::Qr``, ``deriv.order=0``)."""
        d = self.d
        Sinv = np.linalg.inv(Sigma)
        c = (2 * np.pi) ** (-d / 2) / math.sqrt(np.linalg.det(Sigma))
        if self.binned:
            D, w = self.offsets(math.sqrt(np.max(np.abs(np.diag(Sigma)))), 0)
            return c * float(np.sum(w * np.exp(-0.5 * np.einsum("ij,jk,ik->i", D, Sinv, D)))) / self.n ** 2
        total = 0.0
        for D, mult in self._pairs():
            total += mult * float(np.sum(np.exp(-0.5 * np.sum((D @ Sinv) * D, axis=1))))
        return c * total / self.n ** 2


def _linear_binning(X, h, gridsize):
    """``ks:::binning(x, h=h, bgridsize=gridsize)``: the grid from ``min - 3.7 h`` to ``max + 3.7 h``
    per feature, and the multilinear binning weights of the samples on it (``massdist``)."""
    n, d = X.shape
    M = np.asarray(gridsize, dtype=int)
    a = X.min(axis=0) - 3.7 * h
    b = X.max(axis=0) + 3.7 * h
    delta = (b - a) / (M - 1)
    pos = (X - a) / delta
    ix = np.floor(pos).astype(int)
    fx = pos - ix
    counts = np.zeros(tuple(M))
    for corner in itertools.product((0, 1), repeat=d):
        w = np.ones(n)
        for k, c in enumerate(corner):
            w = w * (fx[:, k] if c else 1 - fx[:, k])
        np.add.at(counts, tuple(ix[:, k] + corner[k] for k in range(d)), w)
    return counts, delta


def _default_binned(d, n):
    """``ks:::default.bflag``: binned estimation above 500 samples in 2-D, 1000 in 3 and 4."""
    return d <= 4 and n > (500 if d == 2 else 1000)


def _default_gridsize(d):
    """``ks:::default.bgridsize``."""
    return {2: (151, 151), 3: (31,) * 3, 4: (15,) * 4}[d]


def _max_smoothing(d, n):
    """The maximal-smoothing factor of ``ks``'s ``H.max`` (times the covariance)."""
    RK = (4 * np.pi) ** (-d / 2)
    return (((d + 8) ** ((d + 6) / 2) * np.pi ** (d / 2) * RK)
            / (16 * (d + 2) * n * math.gamma(d / 2 + 4))) ** (2 / (d + 4))


# -- the pilots ---------------------------------------------------------------------------------------
def _gsamse(S, n, modr, psihat_vec=None):
    """``ks:::gsamse``: the SAMSE pilot ``g`` for the ``modr``-th order functionals. With
    ``psihat_vec`` (the two-stage rule) ``ks`` reads the sixth-order estimates at the positions
    of the unique multi-indices in the full Kronecker-ordered vector, and so do we."""
    d = S.shape[0]
    even = [al for al in _multi_indices(d, modr) if all(a % 2 == 0 for a in al)]
    DK = _normal_derivative_at_zero(modr, np.eye(d))
    K = np.array([DK[_tensor_index(al)] for al in even])
    psi = []
    if psihat_vec is None:
        order = modr + 2
        T = _normal_derivative_at_zero(order, 2 * S)
        for al in even:
            psi.append(sum(T[_tensor_index(tuple(a + 2 * (k == j) for k, a in enumerate(al)))] for j in range(d)))
    else:
        derivt6 = _multi_indices(d, modr + 2)
        for al in even:
            total = 0.0
            for j in range(d):
                target = tuple(a + 2 * (k == j) for k, a in enumerate(al))
                total += psihat_vec[derivt6.index(target)]
            psi.append(total)
    psi = np.array(psi)
    A1, A2, A3 = float(np.sum(K * K)), float(np.sum(K * psi)), float(np.sum(psi * psi))
    B1 = (2 * modr + 2 * d) * A1
    B2 = (modr + d - 2) * A2
    gamma1 = (-B2 + math.sqrt(B2 * B2 + 4 * B1 * A3)) / (2 * B1)
    return (gamma1 * n) ** (-1 / (modr + d + 2))


def _tensor_index(alpha):
    """A tensor index with multiplicities ``alpha``."""
    return tuple(k for k, a in enumerate(alpha) for _ in range(a))


def _gdscalar(sums, S, n, d, scv):
    """``ks:::gdscalar(nstage=2)``: the scalar pilot ``g`` of the fourth-order functionals."""
    cf = (2.0 ** (-d), 2.0 ** (-d / 2 + 1), 4.0) if scv else (1.0, 1.0, 1.0)
    Sinv = np.linalg.inv(S)
    psi8 = _normal_derivative_at_zero(8, 2 * S)
    B3 = float(np.sum(np.einsum("ii...->...", psi8) ** 2))
    if not scv:
        B1 = 2 * (2 * np.pi) ** (-d) * _odd_factorial(6) * np.prod([d + 2 * k for k in range(4)])
        B2 = (-(d + 4) * 2 ** (-d / 2 + 2) * (2 * np.pi) ** (-d) * np.linalg.det(S) ** -0.5 * _odd_factorial(6)
              * _nu(4, Sinv))
    else:
        B1 = 2.0 ** -5 * (4 * np.pi) ** (-d) * _odd_factorial(6) * np.prod([d + 2 * k for k in range(4)])
        B2 = (-(d + 4) * 2.0 ** -6 * (4 * np.pi) ** (-d) * np.linalg.det(S) ** -0.5 * _odd_factorial(6)
              * _nu(4, Sinv))
        B3 = 4 * B3
    g6 = (2 * B1 / (-B2 + math.sqrt(B2 * B2 + 4 * B1 * B3))) ** (1 / (d + 8)) * n ** (-1 / (d + 8))
    L0 = (2 * np.pi) ** (-d / 2)
    # eta = n^-2 sum_ab (vec I)^{(x)3} . D^6 phi_{g6^2 I}(x_a - x_b)
    triples = {}
    for i, j, k in itertools.product(range(d), repeat=3):
        al = [0] * d
        al[i] += 2
        al[j] += 2
        al[k] += 2
        triples[tuple(al)] = triples.get(tuple(al), 0) + 1
    alphas = list(triples)
    eta = float(np.dot(sums.functionals(g6, alphas), [triples[a] for a in alphas]))
    A1 = cf[0] * (2 * d + 8) * L0 ** 2 * _odd_factorial(4) * _nu(2, np.eye(d))
    A2 = cf[1] * (d + 2) * L0 * _odd_factorial(4) * eta
    A3 = cf[2] * eta ** 2
    return (2 * A1 / ((-A2 + math.sqrt(A2 * A2 + 4 * A1 * A3)) * n)) ** (1 / (d + 6))


# -- the selectors ------------------------------------------------------------------------------------
def _var(X):
    return np.cov(X, rowvar=False, ddof=1)


def _sphere(X):
    """``ks:::pre.sphere``: ``x S^-1/2`` (not centred), and ``S^1/2``."""
    S = _var(X)
    S12 = _sqrtm(S)
    return X @ _sqrtm(np.linalg.inv(S)), S12


def _normal_scale_sqrt(X):
    """``matrix.sqrt(Hns(x))``: the start of ``ks``'s search, ``vech`` of it."""
    n, d = X.shape
    H = (4 / (n * (d + 2))) ** (2 / (d + 4)) * _var(X)
    return _vech(_sqrtm(H))


def _h_of(v):
    M = _invvech(v)
    return M @ M


def _integrated_variance(H, n, d):
    return 1.0 / (math.sqrt(np.linalg.det(H)) * n) * 2.0 ** (-d) * np.pi ** (-d / 2)


def _minimise_pi(psi4, Xs, n, d):
    """The plug-in objective ``PI(H)`` minimised as ``ks::Hpi`` does, on the sphered data."""

    def objective(v):
        H = _h_of(v)
        return _integrated_variance(H, n, d) + 0.25 * float(np.einsum("ijkl,ij,kl->", psi4, H, H))

    v, _ = r_bfgs(objective, _normal_scale_sqrt(Xs))
    return _h_of(v)


def _hpi_samse(X, nstage, binned):
    """``ks::Hpi(x, nstage, pilot="samse", pre="sphere", binned)``."""
    n, d = X.shape
    Xs, S12 = _sphere(X)
    S = _var(Xs)
    if nstage == 2:
        g6 = _gsamse(S, n, 6)
        sums6 = _PairSums(Xs, binned, _default_gridsize(d), np.full(d, g6)) if binned else _PairSums(Xs, False)
        psi6 = sums6.tensor(g6, 6).ravel()
        g4 = _gsamse(S, n, 4, psihat_vec=psi6)
    else:
        g4 = _gsamse(S, n, 4)
    sums4 = _PairSums(Xs, binned, _default_gridsize(d), np.full(d, g4)) if binned else _PairSums(Xs, False)
    H = _minimise_pi(sums4.tensor(g4, 4), Xs, n, d)
    return S12 @ H @ S12


def _hpi_dscalar(X, binned):
    """``ks::Hpi(x)`` for ``d >= 3`` (``pilot="dscalar"``, ``nstage=2``)."""
    n, d = X.shape
    Xs, S12 = _sphere(X)
    S = _var(Xs)
    if binned:  # gdscalar bins on its own grid (h from its pilot); the functionals on ks's H.max grid
        grid = _default_gridsize(d)
        hmax = np.sqrt(np.diag(_max_smoothing(d, n) * S))
        g4 = _gdscalar(_LazyBinned(Xs, grid), S, n, d, scv=False)
        sums = _PairSums(Xs, True, grid, hmax)
    else:
        sums = _PairSums(Xs, False)
        g4 = _gdscalar(sums, S, n, d, scv=False)
    H = _minimise_pi(sums.tensor(g4, 4), Xs, n, d)
    return S12 @ H @ S12


class _LazyBinned:
    """Functionals binned on a grid whose span follows the pilot asked for (``kfe`` without a
    ``bin.par``: ``ks`` bins with ``h = g`` then)."""

    def __init__(self, X, gridsize):
        self.X, self.gridsize = X, gridsize

    def functionals(self, g, alphas):
        return _PairSums(self.X, True, self.gridsize, np.full(self.X.shape[1], g)).functionals(g, alphas)


def hpi(X):
    """``ks::Hpi(X)`` with its default arguments: the two-stage plug-in bandwidth matrix (see the
    module docstring). ``X`` (n_samples, d) with ``2 <= d <= 6``, float64. Returns ``H`` (d, d)."""
    X = _checked(X, "hpi")
    n, d = X.shape
    binned = _default_binned(d, n)
    return _hpi_samse(X, 2, binned) if d == 2 else _hpi_dscalar(X, binned)


def _gamse_scv(Xs, S, Hamise, n, sums6):
    """``ks:::gamse.scv(nstage=1)``: the scalar SCV pilot from a one-stage ``Hpi``."""
    d = Xs.shape[1]
    g6 = _gsamse(S, n, 6)
    P = sums6(g6).tensor(g6, 6)
    H = Hamise
    c11 = 0.25 * float(np.einsum("amb,ac,bd,cmd->", P.reshape(d, d ** 4, d), H, H, P.reshape(d, d ** 4, d)))
    c12 = 0.75 * (4 * np.pi) ** (-d / 2) * float(np.einsum("abcejj,ab,ce->", P.reshape((d,) * 6), H, H))
    c22 = 1 / 64 * (4 * np.pi) ** (-d) * (4 * np.trace(H @ H) + (d + 8) * np.trace(H) ** 2)
    num = 2 * (d + 4) * c22
    den = -(d + 2) * c12 + math.sqrt((d + 2) ** 2 * c12 ** 2 + 8 * (d + 4) * c11 * c22)
    return (num / (den * n)) ** (1 / (d + 6))


def _minimise_scv(sums, Xs, g, n, d):
    G = g * g * np.eye(d)
    q3 = sums.normal_pair_mean(2 * G)

    def objective(v):
        H = _h_of(v)
        bias2 = sums.normal_pair_mean(2 * H + 2 * G) - 2 * sums.normal_pair_mean(H + 2 * G) + q3
        return _integrated_variance(H, n, d) + max(bias2, 0.0)

    v, _ = r_bfgs(objective, _normal_scale_sqrt(Xs))
    return _h_of(v)


def hscv(X):
    """``ks::Hscv(X)`` with its default arguments: the smoothed cross-validation bandwidth matrix
    (see the module docstring). ``X`` (n_samples, d) with ``2 <= d <= 6``. Returns ``H`` (d, d)."""
    X = _checked(X, "hscv")
    n, d = X.shape
    binned = _default_binned(d, n)
    Xs, S12 = _sphere(X)
    S = _var(Xs)
    if binned:
        grid = _default_gridsize(d)
        hmax = np.sqrt(np.diag(_sqrtm(_max_smoothing(d, n) * S)))  # ks: binning(H = matrix.sqrt(H.max))
        sums = _PairSums(Xs, True, grid, hmax)
    else:
        sums = _PairSums(Xs, False)
    if d == 2:
        Hamise = _hpi_samse(Xs, 1, binned=True)  # ks: Hpi(x.star, nstage=1, binned=TRUE)
        # ks's gamse.scv bins (where it bins) on a grid spanned by its own pilot g6
        g = _gamse_scv(Xs, S, Hamise, n, (lambda g6: _PairSums(Xs, True, _default_gridsize(d), np.full(d, g6)))
                       if binned else (lambda g6: sums))
    else:
        g = _gdscalar(_LazyBinned(Xs, _default_gridsize(d)) if binned else sums, S, n, d, scv=True)
    H = _minimise_scv(sums, Xs, g, n, d)
    return S12 @ H @ S12


def _checked(X, rule):
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or not 2 <= X.shape[1] <= 6:
        raise ValueError(f"bandwidth={rule!r} selects a full bandwidth matrix for 2 to 6 continuous features "
                         f"(R's ks::{'Hpi' if rule == 'hpi' else 'Hscv'}), got samples of shape {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError(f"bandwidth={rule!r} needs finite samples; these contain NaN or inf")
    n, d = X.shape
    if n <= d + 1:
        raise ValueError(f"bandwidth={rule!r} needs more samples than features + 1 (a covariance to sphere "
                         f"with), got n_samples={n} for {d} features")
    if np.linalg.matrix_rank(_var(X)) < d:
        raise ValueError(f"bandwidth={rule!r}: the samples' covariance is singular (a feature constant or a "
                         "linear combination of others); there is no full bandwidth matrix to select")
    return X


# -- a full bandwidth matrix as the estimators take it ------------------------------------------------
def is_full_bandwidth(bandwidth):
    """True for ``bandwidth`` "hpi", "hscv" or a 2-D array (a full bandwidth matrix ``H``)."""
    if isinstance(bandwidth, str):
        return bandwidth in MATRIX_RULES
    if bandwidth is None or np.isscalar(bandwidth) or hasattr(bandwidth, "factors"):
        return False
    try:
        return np.ndim(bandwidth) == 2
    except Exception:  # noqa: BLE001 - not array-like: the estimator's own checks name it
        return False


def full_bandwidth(bandwidth, X, name="bandwidth", sample_weight=None):
    """The bandwidth matrix ``H`` (d, d) that ``bandwidth`` states for the samples ``X``: a rule
    ("hpi": ``ks::Hpi``, "hscv": ``ks::Hscv``, on ``X``) or a given symmetric positive definite
    matrix (checked). ``ks``'s selectors take no weights: equal ``sample_weight`` (rows of zero
    weight dropped) is accepted with a rule, unequal weights refused."""
    d = X.shape[1]
    if isinstance(bandwidth, str):
        X = np.asarray(X, dtype=np.float64)
        if sample_weight is not None:
            w = np.asarray(sample_weight, dtype=np.float64)
            X, w = X[w > 0], w[w > 0]
            if w.size and np.max(w) > np.min(w):
                raise ValueError(f"{name}={bandwidth!r} is R's ks::{'Hpi' if bandwidth == 'hpi' else 'Hscv'}, which "
                                 "takes no sample weights: unequal sample_weight cannot be honoured; give the matrix")
        return hpi(X) if bandwidth == "hpi" else hscv(X)
    H = np.asarray(bandwidth, dtype=np.float64)
    if H.shape != (d, d):
        raise ValueError(f"{name} as a matrix (a full bandwidth matrix H, the kernel's covariance) must have shape "
                         f"(n_features, n_features) = ({d}, {d}), got {H.shape}")
    if not np.all(np.isfinite(H)):
        raise ValueError(f"{name} as a matrix must be finite, got {H.tolist()}")
    scale = np.max(np.abs(H))
    if not np.allclose(H, H.T, rtol=1e-10, atol=1e-12 * scale):
        raise ValueError(f"{name} as a matrix (a full bandwidth matrix H) must be symmetric, got {H.tolist()}")
    lam = np.linalg.eigvalsh(0.5 * (H + H.T))
    if not lam.min() > 1e-12 * max(lam.max(), 0.0):
        raise ValueError(f"{name} as a matrix (a full bandwidth matrix H) must be positive definite; its smallest "
                         f"eigenvalue is {lam.min():.3g}")
    return 0.5 * (H + H.T)


def matrix_map(H):
    """The :class:`~localkit.kernels.kernel.MetricMap` ``x -> x H^-1/2``: Euclidean distances of
    the mapped points are ``sqrt(dx^T H^-1 dx)``, so a kernel of bandwidth 1 there is ``K_H``
    (up to its normaliser, ``|H|^-1/2``)."""
    from .kernel import MetricMap

    lam, Q = np.linalg.eigh(H)
    return MetricMap(matrix=(Q / np.sqrt(lam)) @ Q.T)


def log_det(H):
    """``log |H|``."""
    return float(np.sum(np.log(np.linalg.eigvalsh(H))))
