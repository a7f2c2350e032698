"""The binned pass: kernel sums in 1, 2 or 3 features by linear binning and FFT convolution.

In the engine's coordinates ``x_s = (x - c) / h`` (per-feature bandwidths included) the kernel
is ``k(|q - x|^2)``, the same in every direction. The pass

1. **bins** the samples linearly onto a regular grid ``g_m`` (spacing ``delta`` per feature)
   spanning the samples, and the queries up to the kernel's reach (Wand and Jones 1994; as R's
   KernSmooth and KDEpy): sample ``x_i`` gives each corner ``m`` of its grid cell the share
   ``a_im = prod_f (1 - |t_if - m_f|)`` (``t_i = (x_i - g_0) / delta``), and the grid carries
   ``B_m = sum_i a_im c_i`` and ``B_m v = sum_i a_im c_i v_i``;
2. **convolves** ``B`` with the kernel sampled on the grid's offsets,
   ``S_m = sum_l B_l k(|(m - l) delta|^2)``, by FFT, zero-padded (:func:`scipy.signal.fftconvolve`:
   no wrap-around); the kernel is sampled out to its reach: ``u <= 1`` for a compact profile,
   for a smooth one the ``u`` beyond which ``k(u) < TAIL`` (never farther than the grid's span);
3. **interpolates** multilinearly: a query gets ``sum_m a_qm S_m`` from the corners of its cell
   (the shares ``a_qm`` of step 1), the weight sum and each value sum alike, and its local mean
   is their ratio (a weighted mean of the corners' means: never outside the values' range).

Error. Binning and interpolation each err by ``O((delta / h)^2)`` relative to a smooth kernel
sum (Wand and Jones; Hall and Wand 1996), ``O(delta / h)`` for a profile with a kink or a jump
inside its support (triangular and laplacian at 0, uniform at its edge). The documented bound,
pinned by ``tests/test_binned.py`` on diabetes, iris and wine in 1, 2 and 3 features with sample
weights: where the weight sum exceeds 1e-3 of its largest, its relative error and the local
mean's error (relative to the values' range) stay below ``8 (delta / h)^2`` (``4 delta / h`` for
the rough profiles), ``delta / h`` the largest grid spacing in bandwidths; float32 adds its
round-off (``2e-5``); the pass itself runs in float64. FFT round-off adds about ``1e-15`` of the
total weight, and sums below ``FLOOR`` of it are set to 0 (an empty neighbourhood). The default
grid (:data:`GRID_SIZE`) keeps ``delta / h`` below 1/100 in one feature for a bandwidth above a
650th of the data's range. Queries beyond the kernel's reach of every sample get 0 (empty).

Memory: the grid and the FFT buffers, ``O(grid cells x (n_values + 1))``; the samples are read
once (one compiled pass bins them).
"""
from __future__ import annotations

import itertools

import numpy as np
from numba import njit
from scipy.signal import fftconvolve

#: Default grid points per feature for 1, 2 and 3 features: 2^16, 2^18 and 2^18 cells, whose
#: zero-padded FFTs take milliseconds to tens of milliseconds (3 features: ~0.2 delta / h at a
#: bandwidth of a tenth of the data's range; ask for more points there). In 1-D a fine grid costs
#: little next to binning a million samples, and the error falls as ``(delta / h)^2``.
GRID_SIZE = {1: 2**16, 2: 2**9, 3: 2**6}
#: A smooth profile is sampled out to the ``u`` where ``k(u)`` falls below this (float64 round-off
#: of the largest weight ``k(0) = 1``): the truncated tail is below the sums' round-off
TAIL = 2.0**-52
#: Sums below this fraction of the total weight are FFT round-off (``~ eps log2(cells)``): set to 0
FLOOR = 2.0**-40
#: The binned pass's largest number of features
MAX_FEATURES = 3


def grid_shape(grid_size, d):
    """Grid points per feature: ``grid_size`` (an int, or one per feature) or :data:`GRID_SIZE`."""
    if grid_size is None:
        return (GRID_SIZE[d],) * d
    sizes = (grid_size,) * d if np.isscalar(grid_size) else tuple(grid_size)
    if len(sizes) != d:
        raise ValueError(f"grid_size must be one int or one per feature ({d}), got {grid_size!r}")
    return tuple(int(s) for s in sizes)


def reach(profile):
    """The scaled distance ``u`` beyond which the binned pass takes ``k(u)`` as 0: the support's
    edge 1 for a compact profile, else the first ``u = 2^(e/8)`` where ``k(u) < TAIL`` (profiles
    fall with ``u``; ``inf`` for a tail slower than any of them up to ``2^64``: the grid's span)."""
    if profile.compact:
        return 1.0
    u = 2.0 ** (np.arange(513) / 8)
    below = np.flatnonzero(profile.k(u * u) < TAIL)
    return float(u[below[0]]) if len(below) else np.inf


def _cells(P, lo, delta, shape):
    """Lower corner index and fraction ``t - floor(t)`` of points ``P`` in the grid's cells."""
    t = (P - lo) / delta
    i0 = np.clip(np.floor(t), 0, np.array(shape) - 2).astype(np.intp)
    return i0, t - i0


def _strides(shape):
    """Flat-index steps of a C-ordered grid of ``shape``."""
    return np.cumprod((1,) + shape[:0:-1])[::-1].astype(np.intp)


def _corners(i0, frac, shape):
    """Flat index and multilinear share of each corner of each point's cell: ``2^d`` pairs (the
    lower corner's flat index once, each corner a constant offset from it)."""
    strides = _strides(shape)
    base = i0 @ strides
    sides = [(1.0 - f, f) for f in frac.T]
    for corner in itertools.product((0, 1), repeat=len(shape)):
        share = sides[0][corner[0]]
        for side, c in zip(sides[1:], corner[1:]):
            share = share * side[c]
        yield base + int(np.dot(corner, strides)), share


@njit(cache=True)
def _bin(X, lo, inv_delta, dims, strides, V, B):
    """``B[flat(m), col] += a_im V[i, col]`` over the ``2^d`` corners ``m`` of each sample's cell
    (:func:`_cells`' arithmetic; the samples lie above ``lo``, so ``int`` is ``floor``), in one
    pass over the samples. ``dims`` and ``strides`` are tuples, so that numba compiles one loop
    per ``d`` with its length known: a million samples in 1-D take 14 ms (NumPy's ``bincount``
    per corner and column 50 ms, this loop with ``d`` read at run time 28 ms)."""
    d = len(dims)
    frac = np.empty(d)
    for i in range(X.shape[0]):
        base = 0
        for f in range(d):
            t = (X[i, f] - lo[f]) * inv_delta[f]
            j = min(max(int(t), 0), dims[f] - 2)
            frac[f] = t - j
            base += j * strides[f]
        for corner in range(1 << d):
            share, flat = 1.0, base
            for f in range(d):
                if (corner >> f) & 1:
                    share *= frac[f]
                    flat += strides[f]
                else:
                    share *= 1.0 - frac[f]
            for col in range(V.shape[1]):
                B[flat, col] += share * V[i, col]


def binned_sums(X, Q, V_aug, profile, grid_size=None):
    """Kernel sums ``S[q] = sum_i V_aug[i] k(|Q_q - X_i|^2)`` (columns of ``V_aug`` weighted
    already) by binning, FFT convolution and multilinear interpolation (see the module).

    ``X`` (n, d) samples and ``Q`` (m, d) queries in the engine's scaled coordinates, ``d <= 3``.
    Returns ``(m, p + 1)`` float64 sums.
    """
    d = X.shape[1]
    shape = grid_shape(grid_size, d)
    if min(shape) < 2:
        raise ValueError(f"grid_size needs at least 2 points per feature, got {grid_size!r}")
    X = X.astype(np.float64, copy=False)
    Q = Q.astype(np.float64, copy=False)
    R = reach(profile)
    lo, hi = X.min(axis=0), X.max(axis=0)
    if len(Q):  # the queries within reach of the samples, so that they interpolate inside the grid
        lo = np.minimum(lo, np.maximum(Q.min(axis=0), lo - R))
        hi = np.maximum(hi, np.minimum(Q.max(axis=0), hi + R))
    span = hi - lo
    delta = np.where(span > 0, span, 1.0) / (np.array(shape) - 1)
    # bin: B[m, col] = sum_i a_im V_aug[i, col]
    V = np.asarray(V_aug, dtype=np.float64)
    cells = int(np.prod(shape))
    B = np.zeros((cells, V.shape[1]))
    _bin(X, lo, 1.0 / delta, shape, tuple(int(s) for s in _strides(shape)), V, B)
    B = B.T.reshape((V.shape[1],) + shape)
    # convolve with the kernel at the grid's offsets, out to its reach (at most the grid's span)
    half = [min(n - 1, int(np.ceil(R / dl))) if np.isfinite(R) else n - 1 for n, dl in zip(shape, delta)]
    offsets = np.meshgrid(*[np.arange(-m, m + 1) * dl for m, dl in zip(half, delta)], indexing="ij")
    kern = profile.k(sum(o * o for o in offsets))[None]
    S = fftconvolve(B, kern, mode="same", axes=tuple(range(1, d + 1))).reshape(V.shape[1], cells)
    total = np.sum(np.abs(B[-1]))
    S[:, S[-1] <= FLOOR * total] = 0.0  # FFT round-off where no weight is: an empty neighbourhood
    # interpolate at the queries; queries beyond the grid are beyond every sample's reach: 0
    out = np.zeros((len(Q), V.shape[1]))
    inside = np.all((Q >= lo) & (Q <= hi), axis=1)
    i0, frac = _cells(Q[inside], lo, delta, shape)
    for flat, share in _corners(i0, frac, shape):
        out[inside] += share[:, None] * S[:, flat].T
    return out


def binned_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    S = binned_sums(bound.X, Q, bound.weighted(V_aug), bound.kernel.profile, bound.options.grid_size)
    return S.astype(V_aug.dtype, copy=False), np.zeros(len(Q), dtype=V_aug.dtype)


# -- binned moments: the local polynomial's sums (Fan and Marron 1994; R's KernSmooth::locpoly) -------------------

def moment_grid(X, Q, radius, grid_size=None):
    """``(lo, hi, delta, shape)``: the regular grid of :func:`binned_sums` in the caller's coordinates,
    spanning the samples ``X`` (n, d) and the queries ``Q`` within ``radius`` (d,) of them (the
    kernel's reach in those coordinates, ``reach(profile) h``)."""
    d = X.shape[1]
    shape = grid_shape(grid_size, d)
    if min(shape) < 2:
        raise ValueError(f"grid_size needs at least 2 points per feature, got {grid_size!r}")
    lo, hi = X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
    if len(Q):
        lo = np.minimum(lo, np.maximum(Q.min(axis=0), lo - radius))
        hi = np.maximum(hi, np.minimum(Q.max(axis=0), hi + radius))
    span = hi - lo
    return lo, hi, np.where(span > 0, span, 1.0) / (np.array(shape) - 1), shape


@njit(cache=False)
def _bin_moments(X, lo, inv_delta, dims, strides, weight, Y, B):
    """``B[flat(m), 0] += a_im c_i`` and ``B[flat(m), 1 + u] += a_im c_i y_iu`` over the ``2^d``
    corners ``m`` of each sample's cell (``weight`` empty: ``c_i = 1``), read in the samples' own
    float type and summed in float64: no scaled copy of the samples and no ``c [y, 1]`` product is
    formed, so that a million samples in 1-D bin in a few milliseconds (one pass, two shares)."""
    d, t, n = len(dims), Y.shape[1], X.shape[0]
    weighted = weight.shape[0] > 0
    if d == 1:  # the 1-D bar (KernSmooth's locpoly): two corners, no corner loop
        lo0, inv0, top = lo[0], inv_delta[0], dims[0] - 2
        for i in range(n):
            s = (X[i, 0] - lo0) * inv0
            j = min(max(int(s), 0), top)
            c = weight[i] if weighted else 1.0
            a1 = (s - j) * c
            a0 = c - a1
            B[j, 0] += a0
            B[j + 1, 0] += a1
            for u in range(t):
                yv = Y[i, u]
                B[j, 1 + u] += a0 * yv
                B[j + 1, 1 + u] += a1 * yv
        return
    frac = np.empty(d)
    for i in range(n):
        base = 0
        for f in range(d):
            s = (X[i, f] - lo[f]) * inv_delta[f]
            j = min(max(int(s), 0), dims[f] - 2)
            frac[f] = s - j
            base += j * strides[f]
        c = weight[i] if weighted else 1.0
        for corner in range(1 << d):
            share, flat = c, base
            for f in range(d):
                if (corner >> f) & 1:
                    share *= frac[f]
                    flat += strides[f]
                else:
                    share *= 1.0 - frac[f]
            B[flat, 0] += share
            for u in range(t):
                B[flat, 1 + u] += share * Y[i, u]


def binned_moments(X, Y, weight, profile, h, exponents, n_target, grid, at):
    """Binned local moments about grid points, ``S_a(g) = sum_i c_i k(|(x_i - g) / h|^2) z_i^a`` and
    ``T_a(g) = sum_i c_i k(...) z_i^a y_i`` with ``z_i = (x_i - g) / h`` (per feature) and ``z^a`` the
    monomial of exponents ``a``, at the grid points of flat index ``at``.

    The samples are binned linearly (:func:`_bin_moments`: ``x_i`` -> the corners ``l`` of its cell,
    shares ``a_il``), so ``x_i - g_m`` becomes ``(l - m) delta``, and each moment is one FFT
    convolution (zero-padded: no wrap-around) of the bin counts ``B_l`` (or ``B_l y``) with the
    kernel sampled on the grid's offsets times the monomial, ``kappa_a(o) = k(|o delta / h|^2)
    (-o delta / h)^a``, out to the profile's :func:`reach`: ``S_a(g_m) = sum_l B_l kappa_a(m - l)``.
    This is KernSmooth's ``locpoly`` (Wand 1994; Fan and Marron 1994), which sums the same
    products directly over a kernel truncated at 4 standard deviations.

    ``X`` (n, d) and ``h`` (d,) in the caller's coordinates; ``weight`` (n,) or None; ``Y`` (n, t);
    ``exponents`` (K, d): every monomial wanted for ``S``, its first ``n_target`` rows also for
    ``T``; ``grid`` from :func:`moment_grid`; ``at`` flat grid indices. Returns ``S`` (K, len(at)),
    ``T`` (n_target, t, len(at)) and the total weight ``sum_i c_i`` (FFT round-off is about
    ``1e-15`` of it).
    """
    from scipy import fft

    lo, _, delta, shape = grid
    d, t = X.shape[1], Y.shape[1]
    cells = int(np.prod(shape))
    B = np.zeros((cells, 1 + t))
    w = np.empty(0) if weight is None else np.asarray(weight, dtype=np.float64)
    _bin_moments(X, lo, 1.0 / delta, shape, tuple(int(s) for s in _strides(shape)), w, Y, B)
    total = float(B[:, 0].sum())
    B = B.T.reshape((1 + t,) + shape)
    step = delta / h  # grid spacing in bandwidths, per feature
    R = reach(profile)
    half = [min(n - 1, int(np.ceil(R / s))) if np.isfinite(R) else n - 1 for n, s in zip(shape, step)]
    # circular convolution of length >= n + half leaves the outputs half .. half + n - 1 unaliased
    size = [fft.next_fast_len(n + m, real=True) for n, m in zip(shape, half)]
    axes = tuple(range(1, d + 1))
    FB = fft.rfftn(B, size, axes=axes)
    offsets = np.meshgrid(*[np.arange(-m, m + 1) * s for m, s in zip(half, step)], indexing="ij")
    k = profile.k(sum(o * o for o in offsets))
    crop = (slice(None),) + tuple(slice(m, m + n) for n, m in zip(shape, half))
    S = np.empty((len(exponents), len(at)))
    T = np.empty((n_target, t, len(at)))
    for a, e in enumerate(exponents):
        kern = k
        for f, power in enumerate(e):
            if power:
                kern = kern * (-offsets[f]) ** power
        cols = slice(0, 1 + t) if a < n_target else slice(0, 1)
        full = fft.irfftn(FB[cols] * fft.rfftn(kern, size)[None], size, axes=axes)
        out = full[crop].reshape(-1, cells)[:, at]
        S[a] = out[0]
        if a < n_target:
            T[a] = out[1:]
    return S, T, total
