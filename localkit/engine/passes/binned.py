"""The binned pass: kernel sums in 1, 2 or 3 features by linear binning and FFT convolution.

With the bandwidths ``h`` (one per feature) the kernel is ``k(|(q - x) / h|^2)``. The pass works
in the caller's coordinates (no centred, scaled copy of the samples is made) and

1. **bins** the samples linearly onto a regular grid ``g_m`` (spacing ``delta`` per feature)
   spanning the samples, and the queries up to the kernel's reach (Wand and Jones 1994; as R's
   KernSmooth and KDEpy): sample ``x_i`` gives each corner ``m`` of its grid cell the share
   ``a_im = prod_f (1 - |t_if - m_f|)`` (``t_i = (x_i - g_0) / delta``), and the grid carries
   ``B_m = sum_i a_im c_i`` and ``B_m v = sum_i a_im c_i v_i`` (:func:`_bin`: one compiled pass
   over the samples, shared with the binned local polynomial's moments);
2. **convolves** ``B`` with the kernel sampled on the grid's offsets,
   ``S_m = sum_l B_l k(|(m - l) delta / h|^2)``, by zero-padded real FFTs (no wrap-around; the
   Gaussian's transform is the outer product of its 1-D ones); the kernel is sampled out to its
   reach: ``u <= 1`` for a compact profile, for a smooth one the ``u`` beyond which
   ``k(u) < TAIL`` (never farther than the grid's span);
3. **interpolates** multilinearly: a query gets ``sum_m a_qm S_m`` from the corners of its cell
   (the shares ``a_qm`` of step 1), the weight sum and each value sum alike, and its local mean
   is their ratio (a weighted mean of the corners' means: never outside the values' range).
   Multilinear, because it keeps weights non-negative and means inside the values' range, and
   its error is of the binning's order; for the profiles of :func:`smooth` (gaussian, cauchy)
   both leading errors are removed: the kernel is sampled less ``1/12`` of its second
   difference (:func:`_binning_corrected`: the average spread that linear binning adds) and the
   weight sum less the interpolation's curvature term (:func:`_interpolate`); on a
   million-sample 2-D Gaussian mixture that took the error on a 1,536-point grid from ~7e-4 to
   ~5e-5.

Error. Binning and interpolation each err by ``O((delta / h)^2)`` relative to a smooth kernel
sum (Wand and Jones; Hall and Wand 1996), ``O(delta / h)`` for a profile with a kink or a jump
inside its support (:func:`rough`: triangular and laplacian at 0, uniform at its edge). The
documented bound ``B`` (:func:`error_bound`: ``8 (delta / h)^2``, ``4 delta / h`` for the rough
profiles, ``delta / h`` the largest grid spacing in bandwidths) is pinned by
``tests/test_binned.py`` on diabetes, iris and wine in 1, 2 and 3 features with sample weights,
float32 and float64:

* at the samples, where the weight sum exceeds 1e-3 of its largest, its relative error and the
  local mean's error (relative to the values' range) stay below ``B``;
* at arbitrary queries (in the data's box and half a bandwidth beyond), the weight sum's error
  and the local mean's error times its weight sum stay below ``B`` relative to the largest
  weight sum, and for the smooth profiles (gaussian, cauchy) the weight sum's relative error
  stays below ``B`` wherever it exceeds 1e-3 of its largest;
* the uniform profile has no bound off the samples (:func:`bounded_off_samples`): the jump at
  its edge falls inside a grid cell, whose samples are then counted in part, so a query's weight
  sum can miss a share of order one of the samples within a cell of its sphere; "auto" never
  takes the binned pass for it, nor for a profile stated by the user.

float32 adds its round-off (``2e-5``); the pass itself runs in float64. It is a worst case (data
sitting at one place in their cells); measured errors are far below it (the tables of
``benchmarks/RESULTS.md``, section *binned*). FFT round-off adds about ``1e-15`` of the total
weight, and sums below ``FLOOR`` of it are set to 0 (an empty neighbourhood). Queries beyond a
compact kernel's reach of every sample get 0 (empty); for a profile without a support no query is
empty, and the queries whose binned weight sum is too small to carry the tolerance against that
round-off (:func:`unresolved`: beyond ~6 bandwidths of a Gaussian's samples at ``1e-4``) are
computed by the dense pass (the binned local polynomial: by the exact fit), not set to the empty
policy's value.

Grid. ``grid_size`` points per feature if given; else the rule of :func:`grid_shape`: the fewest
points whose bound meets ``tolerance`` (:data:`TOLERANCE`, ``1e-4``, by default), at most
:data:`GRID_LIMIT` per feature (2^18 in 1-D, 1,536 in 2-D, 128 in 3-D). In 1-D the rule is met
(smooth profiles) while the grid spans fewer than ~900 bandwidths; in 2 features the worst-case
bound asks for more points than the limit beyond ~5 bandwidths, in 3 beyond half a bandwidth,
and the limit decides (:attr:`Grid.bound` says what bound the grid gives; "auto"
takes the binned pass only where it meets the tolerance the caller asked for). A ``tolerance``
asked for is met or refused (:meth:`Grid.refusal`, a ValueError saying the bound the grid gives);
without one, a grid whose bound is not even below 1 is refused (one sample far from the others
stretches the grid until a cell holds many bandwidths); ``grid_size`` alone is taken as given.
With a ``tolerance``, the uniform profile and the user's, which have no bound off the samples,
are refused at other queries.

Memory: the grid and the FFT buffers, ``O(grid cells x (n_values + 1))``; the samples are read
twice (their extent, then one compiled pass bins them).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from scipy import fft

from ..._jit import njit

#: The default grid's rule (:func:`grid_shape`): the fewest points per feature whose spacing in
#: bandwidths keeps :func:`error_bound` below the ``tolerance`` asked for (this one by default) ...
TOLERANCE = 1e-4
#: ... and at most this many points per feature for 1, 2 and 3 features (2^18, 2.4e6 and 2.1e6
#: cells, whose zero-padded FFTs take milliseconds, ~0.1 s and ~0.2 s): a grid capped there may
#: miss the tolerance (:attr:`Grid.bound` says by how much; "auto" then keeps the exact path, and
#: ``algorithm="binned"`` refuses: :meth:`Grid.refusal`)
GRID_LIMIT = {1: 2**18, 2: 3 * 2**9, 3: 2**7}
#: The binned local polynomial's default grid points per feature for 1, 2 and 3 features, where no
#: ``tolerance`` is given (its moments take up to 15 convolutions: 2^16, 2^18 and 2^18 cells)
MOMENT_GRID_SIZE = {1: 2**16, 2: 2**9, 3: 2**6}
#: A smooth profile is sampled out to the ``u`` where ``k(u)`` falls below this (float64 round-off
#: of the largest weight ``k(0) = 1``): the truncated tail is below the sums' round-off
TAIL = 2.0**-52
#: Sums below this fraction of the total weight are FFT round-off (``~ eps log2(cells)``): set to 0
FLOOR = 2.0**-40
#: The binned pass's largest number of features
MAX_FEATURES = 3


def rough(profile):
    """True for a profile with a kink or a jump inside its support (triangular and laplacian at 0,
    uniform at its edge; a profile stated by the user is assumed rough): binning errs by
    ``O(delta / h)`` there, ``O((delta / h)^2)`` for the others."""
    from ...kernels.profiles import PROFILES

    return (profile.exact_distance or (profile.poly is not None and profile.poly[1] == 0)
            or PROFILES.get(profile.name) is not profile)


def bounded_off_samples(profile):
    """False for a profile whose binned sums have no error bound at queries off the samples: the
    uniform profile (a jump at its edge) and a profile stated by the user (its shape is not
    known); "auto" does not take the binned pass for them (see the module's error notes)."""
    from ...kernels.profiles import PROFILES

    return PROFILES.get(profile.name) is profile and not (profile.poly is not None and profile.poly[1] == 0)


def smooth(profile):
    """True for a profile smooth everywhere and without a support's edge (gaussian, cauchy): the
    binned pass then removes the leading ``delta^2`` terms of binning and interpolation
    (:func:`_binning_corrected`, :func:`_interpolate`). Measured, the corrections made the
    weight sum's error 7 to 8 times smaller for cauchy and 3 to 4 times for the compact profiles
    flat at their edge (biweight, triweight, tricube) on diabetes in 1-D, 13 times for the Gaussian
    on a million-sample 2-D mixture, and 3 to 4 times larger where the slope jumps (epanechnikov,
    cosine); on a coarse 3-D grid they left the local polynomials' moment matrices of
    compact profiles indefinite where few samples fall in the support, and on KernSmooth's 401-point
    grid the Gaussian local linear fit's error 1.5 times larger. So compact profiles and the local
    polynomials' moments are binned as they are (a Gaussian binned local mean is then not exactly
    the degree-0 binned local polynomial, which reads the uncorrected moments)."""
    return not profile.compact and not rough(profile)


def error_bound(profile, spacing):
    """The documented bound on the binned pass's relative error (see the module): ``8 s^2`` for a
    smooth profile, ``4 s`` for a :func:`rough` one, ``s = delta / h`` the largest grid spacing in
    bandwidths."""
    s = float(np.max(spacing))
    return 4.0 * s if rough(profile) else 8.0 * s * s


def grid_shape(grid_size, extent, profile, tolerance=None):
    """Grid points per feature: ``grid_size`` (an int, or one per feature) if given; else the rule,
    the fewest points ``n_f`` with ``error_bound(profile, extent_f / (n_f - 1)) <= tolerance``
    (:data:`TOLERANCE` for None), ``extent`` the grid's span in bandwidths per feature, at least 2 and
    at most :data:`GRID_LIMIT`."""
    d = len(extent)
    if grid_size is None:
        tol = TOLERANCE if tolerance is None else tolerance
        spacing = tol / 4.0 if rough(profile) else np.sqrt(tol / 8.0)
        need = np.ceil(np.asarray(extent, dtype=np.float64) / spacing) + 1  # finite: Grid checks the extent
        return tuple(int(n) for n in np.clip(need, 2, GRID_LIMIT[d]))
    sizes = (grid_size,) * d if np.isscalar(grid_size) else tuple(grid_size)
    if len(sizes) != d:
        raise ValueError(f"grid_size must be one int or one per feature ({d}), got {grid_size!r}")
    if min(sizes) < 2:
        raise ValueError(f"grid_size needs at least 2 points per feature, got {grid_size!r}")
    return tuple(int(n) for n in sizes)


def reach(profile):
    """The scaled distance ``u`` beyond which the binned pass takes ``k(u)`` as 0: the support's
    edge 1 for a compact profile, else the first ``u = 2^(e/8)`` where ``k(u) < TAIL`` (profiles
    fall with ``u``; ``inf`` for a tail slower than any of them up to ``2^64``: the grid's span)."""
    if profile.compact:
        return 1.0
    u = 2.0 ** (np.arange(513) / 8)
    below = np.flatnonzero(profile.k(u * u) < TAIL)
    return float(u[below[0]]) if len(below) else np.inf


class Grid:
    """The regular grid of a binned pass, in the caller's coordinates: it spans the samples ``X``
    (n, d) and the queries ``Q`` within the kernel's reach of them (``reach h``, :func:`reach`), with
    ``shape`` points per feature (:func:`grid_shape`), lowest point ``lo``, spacing ``delta``;
    ``spacing`` is ``delta / h`` and ``bound`` its :func:`error_bound`. Raises where the data's extent
    in bandwidths leaves the float range."""

    def __init__(self, X, Q, h, profile, grid_size=None, tolerance=None):
        d = X.shape[1]
        h = np.broadcast_to(np.asarray(h, dtype=np.float64), (d,))
        lo, hi = _extent(X)
        extent = (hi - lo) / h
        if not np.all(np.isfinite(h) & (extent < 1e100) & ((extent == 0) | (extent > 1e-100))):
            raise ValueError("algorithm='binned' cannot compute this pass: bandwidth: the data's extent in "
                             f"bandwidths leaves the float range (bandwidth {h.min():g}..{h.max():g})")
        self.reach = reach(profile)  # (55 us: evaluated once)
        if len(Q):  # the queries within reach of the samples, so that they interpolate inside the grid
            radius = self.reach * h
            q_lo, q_hi = _extent(Q)
            lo = np.minimum(lo, np.maximum(q_lo, lo - radius))
            hi = np.maximum(hi, np.minimum(q_hi, hi + radius))
        span = np.where(hi > lo, hi - lo, h)  # one point: a span of one bandwidth
        self.shape = grid_shape(grid_size, span / h, profile, tolerance)
        self.lo, self.hi, self.h, self.profile = lo, hi, h, profile
        self.delta = span / (np.array(self.shape) - 1)
        self.spacing = self.delta / h
        self.bound = error_bound(profile, self.spacing)
        self.cells = int(np.prod(self.shape))
        self.strides = tuple(int(s) for s in np.cumprod((1,) + self.shape[:0:-1])[::-1])

    def bin(self, X, weight, Y, half):
        """``B`` (1 + t, *size): the samples' weights ``c_i`` (``weight`` None: 1) and ``c_i Y[i]``
        binned linearly (:func:`_bin`), summed in float64, in the first ``shape`` points of an array
        already zero-padded to the FFT's size for a kernel of half-width ``half`` (:meth:`convolve`;
        no padded copy is made: 2.9 million cells in 2-D, ~15 ms)."""
        size = tuple(fft.next_fast_len(n + m, real=True) for n, m in zip(self.shape, half))
        strides = tuple(int(s) for s in np.cumprod((1,) + size[:0:-1])[::-1])
        B = np.zeros((1 + Y.shape[1], int(np.prod(size))))
        w = np.empty(0) if weight is None else weight
        _bin(X, self.lo, 1.0 / self.delta, self.shape, strides, w, Y, B)
        return B.reshape((B.shape[0],) + size)

    def offsets(self, extra=0):
        """``(half, o)``: the kernel's half-width in grid steps per feature (its reach, at most the
        grid's span) and the offsets (in bandwidths) of the grid points within it along each feature,
        one 1-D array per feature (``extra`` more steps on each side)."""
        R = self.reach
        half = [min(n - 1, int(np.ceil(R / s))) if np.isfinite(R) else n - 1 for n, s in zip(self.shape, self.spacing)]
        return half, [np.arange(-m - extra, m + extra + 1) * s for m, s in zip(half, self.spacing)]

    def convolve(self, B, kernels, half, workers=1):
        """``sum_l B[:, l] kernel(m - l)`` at every grid point ``m`` for each of ``kernels`` (a list of
        ``(kernel, columns)``; a kernel given as a list of one 1-D array per feature is their outer
        product, whose transform is the outer product of theirs, multiplied in one feature at a
        time): one real FFT of ``B`` (zero-padded by :meth:`bin`) and one of each kernel, on
        ``workers`` threads (scipy.fft's). A circular convolution of length at least ``n + half``
        per feature leaves the outputs ``half .. half + n - 1`` unaliased. The inverse runs one
        feature at a time, each cropped to those outputs before the next (on 1,728^2 cells, 22 ms
        against 36 ms for scipy's ``irfftn``). Yields ``(columns, cells)`` arrays."""
        d = len(self.shape)
        size = list(B.shape[1:])
        FB = fft.rfftn(B, axes=tuple(range(1, d + 1)), workers=workers)
        along = [(1,) * f + (-1,) + (1,) * (d - 1 - f) for f in range(d)]  # a 1-D factor broadcast along feature f
        for a, (kern, cols) in enumerate(kernels):
            F = FB[cols] if a == len(kernels) - 1 else FB[cols].copy()  # the last kernel's product overwrites FB
            if isinstance(kern, list):  # separable: fft along each feature, rfft along the last
                factors = [fft.fft(k, n) for k, n in zip(kern[:-1], size[:-1])] + [fft.rfft(kern[-1], size[-1])]
                for factor, shape in zip(factors, along):
                    F *= factor.reshape(shape)
            else:
                F *= fft.rfftn(kern, size)
            for f in range(d - 1):
                F = fft.ifft(F, axis=1 + f, overwrite_x=True, workers=workers)
                F = F[(slice(None),) * (1 + f) + (slice(half[f], half[f] + self.shape[f]),)]
            full = fft.irfft(F, size[-1], axis=d, workers=workers)
            yield full[..., half[-1]:half[-1] + self.shape[-1]].reshape(-1, self.cells)

    def corners(self, P):
        """Flat index and multilinear share of each corner of the cell of each point of ``P``
        (inside the grid): ``2^d`` pairs (the lower corner's flat index once, each corner a
        constant offset from it)."""
        t = (P - self.lo) / self.delta
        i0 = np.clip(np.floor(t), 0, np.array(self.shape) - 2).astype(np.intp)
        frac = t - i0
        base = i0 @ np.array(self.strides, dtype=np.intp)
        sides = [(1.0 - f, f) for f in frac.T]
        for corner in itertools.product((0, 1), repeat=len(self.shape)):
            share = sides[0][corner[0]]
            for side, c in zip(sides[1:], corner[1:]):
                share = share * side[c]
            yield base + int(np.dot(corner, self.strides)), share

    def refusal(self, tolerance, grid_size=None):
        """Why this grid cannot give the accuracy asked for (None: it can): with a ``tolerance``,
        its :func:`error_bound` must meet it; without one (and no ``grid_size``), the default rule's
        grid, capped at :data:`GRID_LIMIT`, must at least bound the error below 1 (an outlier far
        from the other samples stretches the grid until a cell holds many bandwidths)."""
        if tolerance is None and (grid_size is not None or self.bound <= 1.0):
            return None
        if tolerance is not None and self.bound <= tolerance:
            return None
        asked = f"tolerance={tolerance:g}" if tolerance is not None else "an error bound below 1 (tolerance=None)"
        capped = " (the most points it takes)" if grid_size is None and max(self.shape) >= GRID_LIMIT[len(self.shape)] else ""
        span = float(np.max((self.hi - self.lo) / self.h))
        return (f"tolerance: its error bound on a grid of {self.shape} points{capped} is {self.bound:.3g}, not "
                f"{asked}: the samples and queries span {span:.3g} bandwidths; take an exact path "
                "(algorithm='auto' or 'dense'), a larger bandwidth, or drop the points far from the others")

    def inside(self, P):
        """Which points of ``P`` lie on the grid (the others are beyond every sample's reach)."""
        return np.all((P >= self.lo) & (P <= self.hi), axis=1)


@njit(cache=True)
def _extent_loop(X, lo, hi):
    for i in range(X.shape[0]):
        for f in range(X.shape[1]):
            x = X[i, f]
            if x < lo[f]:
                lo[f] = x
            if x > hi[f]:
                hi[f] = x


def _extent(X):
    """``(lo, hi)``: the points' least and largest value per feature, in float64: NumPy's in one
    feature, else one compiled pass (NumPy's ``min(axis=0)`` on a million rows of 2 features takes
    ~40 ms, a row at a time)."""
    if X.shape[1] == 1:
        return X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64)
    lo, hi = np.full(X.shape[1], np.inf), np.full(X.shape[1], -np.inf)
    _extent_loop(X, lo, hi)
    return lo, hi


def _second_differences(A, axis):
    """``A[m + 1] - 2 A[m] + A[m - 1]`` along ``axis`` (0 at the two ends)."""
    D = np.zeros_like(A)
    inner = [slice(None)] * A.ndim
    inner[axis] = slice(1, -1)
    up, down = list(inner), list(inner)
    up[axis], down[axis] = slice(2, None), slice(None, -2)
    D[tuple(inner)] = A[tuple(up)] - 2.0 * A[tuple(inner)] + A[tuple(down)]
    return D


def _binning_corrected(kern):
    """The kernel sampled on the grid, less ``1/12`` of its second difference along each feature
    (``kern`` sampled one step wider than needed on each side; returned without that rim): linear
    binning spreads a sample at fraction ``t`` of its cell over its two corners, which adds
    ``t (1 - t) delta^2 / 2`` times the kernel's curvature to its sum, ``delta^2 / 12`` on average
    over ``t``; this removes that average, leaving ``(t (1 - t) / 2 - 1 / 12) delta^2 k''``
    (between ``-1/12`` and ``+1/24`` of ``delta^2 k''`` for any sample, against ``0`` to ``1/8``
    uncorrected; it averages out over samples spread within their cells)."""
    for axis in range(kern.ndim):
        kern = kern - _second_differences(kern, axis) / 12.0
    return kern[(slice(1, -1),) * kern.ndim]


@njit(cache=True)
def _bin(X, lo, inv_delta, dims, strides, weight, Y, B):
    """``B[0, flat(m)] += a_im c_i`` and ``B[1 + u, flat(m)] += a_im c_i y_iu`` over the ``2^d``
    corners ``m`` of each sample's cell, ``a_im = prod_f (1 - |t_if - m_f|)`` with
    ``t_i = (x_i - lo) / delta`` (``weight`` empty: ``c_i = 1``; the samples lie above ``lo``, so
    ``int`` is ``floor``), in one pass over the samples, read in their own float type and summed
    in float64: no scaled copy of the samples and no ``c [y, 1]`` product is formed. ``dims`` and
    ``strides`` are tuples, so that numba compiles one loop per ``d`` with its length known; 1-D
    takes its own loop (two corners, no corner loop): a million samples bin in ~1.4 ms (~1.8 ms
    with ``B`` laid out a cell per row)."""
    d, t, n = len(dims), Y.shape[1], X.shape[0]
    weighted = weight.shape[0] > 0
    if d == 1:
        lo0, inv0, top = lo[0], inv_delta[0], dims[0] - 2
        for i in range(n):
            s = (X[i, 0] - lo0) * inv0
            j = min(max(int(s), 0), top)
            c = weight[i] if weighted else 1.0
            a1 = (s - j) * c
            a0 = c - a1
            B[0, j] += a0
            B[0, j + 1] += a1
            for u in range(t):
                yv = Y[i, u]
                B[1 + u, j] += a0 * yv
                B[1 + u, j + 1] += a1 * yv
        return
    if d == 2:  # four corners, written out (the generic loop below: ~2x slower here)
        lo0, lo1, inv0, inv1, top0, top1, st0 = lo[0], lo[1], inv_delta[0], inv_delta[1], dims[0] - 2, dims[1] - 2, strides[0]
        for i in range(n):
            s0 = (X[i, 0] - lo0) * inv0
            s1 = (X[i, 1] - lo1) * inv1
            j0 = min(max(int(s0), 0), top0)
            j1 = min(max(int(s1), 0), top1)
            f0, f1 = s0 - j0, s1 - j1
            c = weight[i] if weighted else 1.0
            a1 = f0 * c
            a0 = c - a1
            base = j0 * st0 + j1
            for flat, share in ((base, a0 * (1.0 - f1)), (base + 1, a0 * f1),
                                (base + st0, a1 * (1.0 - f1)), (base + st0 + 1, a1 * f1)):
                B[0, flat] += share
                for u in range(t):
                    B[1 + u, flat] += share * Y[i, u]
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
            B[0, flat] += share
            for u in range(t):
                B[1 + u, flat] += share * Y[i, u]


def binned_sums(X, Q, weight, Y, profile, h, grid_size=None, tolerance=None, workers=1):
    """Kernel sums ``S[q] = sum_i c_i [y_i, 1] k(|(Q_q - X_i) / h|^2)`` by binning, FFT convolution
    and multilinear interpolation (see the module).

    ``X`` (n, d) samples and ``Q`` (m, d) queries in the caller's coordinates, ``d <= 3``, ``h`` (d,)
    the bandwidths, ``weight`` (n,) the ``c_i`` or None, ``Y`` (n, p) the values. Returns
    ``(m, p + 1)`` float64 sums and the :class:`Grid`. ``workers``: the FFTs' threads.
    """
    grid = Grid(X, Q, h, profile, grid_size, tolerance)
    refused = grid.refusal(tolerance, grid_size)
    if refused:
        raise ValueError("algorithm='binned' cannot compute this pass: " + refused)
    corrected = smooth(profile)
    half, axes = grid.offsets(extra=1 if corrected else 0)
    B = grid.bin(X, weight, Y, half)
    if profile.log_linear:  # the Gaussian: a product of one 1-D kernel per feature
        kern = [_binning_corrected(profile.k(o * o)) for o in axes]
    else:
        kern = profile.k(sum(o * o for o in np.meshgrid(*axes, indexing="ij")))
        kern = _binning_corrected(kern) if corrected else kern
    S = next(grid.convolve(B, [(kern, slice(None))], half, workers))
    total = len(X) if weight is None else float(np.sum(weight, dtype=np.float64))  # binning keeps each c_i
    # interpolate at the queries; queries beyond the grid are beyond every sample's reach: 0
    out = np.zeros((len(Q), S.shape[0]))
    _interpolate(S, Q, grid.lo, grid.hi, 1.0 / grid.delta, grid.shape, grid.strides, FLOOR * total, corrected, out)
    return np.roll(out, -1, axis=1), grid  # the weight sum last


@njit(cache=True)
def _interpolate(S, P, lo, hi, inv_delta, dims, strides, floor, corrected, out):
    """``out[q] = sum_m a_qm S[:, m]`` over the ``2^d`` corners ``m`` of the cell of each point
    ``P[q]`` on the grid (the shares ``a_qm`` of :func:`_bin`; points off the grid keep 0), in one
    compiled pass (65,536 queries in 2-D: ~1 ms, against ~12 ms in NumPy). A corner whose weight
    sum ``S[0, m]`` is at most ``floor`` (FFT round-off where no weight is) counts as 0.

    ``corrected``: the weight sum less the interpolation's leading error: along each feature,
    interpolating between grid points at fraction ``s`` overshoots by ``s (1 - s) delta^2 S'' / 2``,
    and ``delta^2 S''`` is read from the second differences of ``S[0]`` at the same corners (0 at
    the grid's ends); where the result would not be positive the interpolation is kept. The
    value sums are scaled alike, so that a local mean stays the ratio of the multilinear
    interpolations, a weighted mean of its corners' means, never outside the values' range."""
    d, p = P.shape[1], S.shape[0]
    i0 = np.empty(d, dtype=np.int64)
    frac = np.empty(d)
    curvature = np.empty(d)
    for q in range(P.shape[0]):
        base, off = 0, False
        for f in range(d):
            x = np.float64(P[q, f])
            off = off or x < lo[f] or x > hi[f]
            t = (x - lo[f]) * inv_delta[f]
            j = min(max(int(np.floor(t)), 0), dims[f] - 2)
            i0[f], frac[f] = j, t - j
            base += j * strides[f]
        if off:
            continue
        curvature[:] = 0.0
        for corner in range(1 << d):
            share, flat = 1.0, base
            for f in range(d):
                if (corner >> f) & 1:
                    share *= frac[f]
                    flat += strides[f]
                else:
                    share *= 1.0 - frac[f]
            if S[0, flat] > floor:
                for u in range(p):
                    out[q, u] += share * S[u, flat]
            if corrected:
                for f in range(d):
                    i = i0[f] + ((corner >> f) & 1)
                    if 0 < i < dims[f] - 1:
                        curvature[f] += share * (S[0, flat + strides[f]] - 2.0 * S[0, flat] + S[0, flat - strides[f]])
        if corrected:
            W = out[q, 0]
            fixed = W
            for f in range(d):
                fixed -= 0.5 * frac[f] * (1.0 - frac[f]) * curvature[f]
            if fixed > 0:
                scale = fixed / W if W > 0 else fixed
                for u in range(p):
                    out[q, u] *= scale


def unresolved(weight_sums, total, profile, tolerance):
    """The queries whose binned weight sum (``weight_sums``, of a total sample weight ``total``) is
    too small to carry ``tolerance`` (:data:`TOLERANCE` for None) against the FFT's round-off
    (``FLOOR`` of the total): for a profile without a support a query far from the samples (beyond
    ~6 bandwidths of a Gaussian's at 1e-4) is never empty, but its binned sums are round-off or
    floored to 0, so that its local mean would be the nearest corner's or the empty policy's. A
    compact profile's zero sums are its empty neighbourhoods: none is unresolved."""
    if profile.compact:
        return np.zeros(len(weight_sums), dtype=bool)
    return weight_sums <= FLOOR * total / (TOLERANCE if tolerance is None else tolerance)


def binned_path(bound, queries, P, V, q_scale, exclude_self):
    """The engine's binned pass: ``P`` the queries as given (the samples' coordinates, not the
    engine's: :meth:`~localkit.engine.BoundKernel.points`), ``V`` the values less their offset,
    without the other paths' column of ones (the pass bins the weights itself). The queries whose
    sums it cannot resolve (:func:`unresolved`: far from every sample, for a profile without a
    support) are computed exactly: over the samples that carry them, the weight left out bounded
    by the tolerance (:func:`~localkit.engine.passes.neighbors.truncated_sums`; weighted samples:
    the dense pass)."""
    opts = bound.options
    if opts.tolerance is not None and queries is not None and not bounded_off_samples(bound.kernel.profile):
        raise ValueError(f"algorithm='binned' cannot compute this pass: tolerance={opts.tolerance:g}: the "
                         f"{bound.kernel.profile.name!r} profile has no error bound off the samples (a jump at its "
                         "edge, or a profile stated by the user); take an exact path (algorithm='auto' or 'dense')")
    S, grid = binned_sums(bound.samples, P, bound.weight, V, bound.kernel.profile, bound.h, opts.grid_size,
                          opts.tolerance, workers=opts.threads)
    S, shift = S.astype(V.dtype, copy=False), np.zeros(len(P), dtype=V.dtype)
    total = bound.n_samples if bound.weight is None else float(np.sum(bound.weight, dtype=np.float64))
    rows = np.flatnonzero(unresolved(S[:, -1], total, bound.kernel.profile, opts.tolerance))
    if len(rows):
        from .dense import dense_path
        from .neighbors import truncated_sums

        V_aug = np.column_stack([V, np.ones(len(V), V.dtype)])
        Pr = P[rows]

        def exact(r):  # the dense pass: every sample, memory bounded by its blocks
            return dense_path(bound, Pr[r], bound.engine_points(Pr[r]), V_aug, None, False)

        tol = TOLERANCE if opts.tolerance is None else opts.tolerance
        far = None
        if bound.weight is None:  # no index over every sample to build: coarse cells find theirs
            far = far_sums(bound.samples, Pr, grid.h, bound.kernel.profile, V_aug, tol)
        if far is not None:
            S[rows], shift[rows] = far
        elif bound.weight is None and bound.raw_index:  # the samples that carry them, the rest bounded
            S[rows], shift[rows] = truncated_sums(bound, Pr, V_aug, tol, exact)
        else:
            S[rows], shift[rows] = exact(slice(None))
    return S, shift


def far_sums(X, Q, h, profile, V_aug, tolerance):
    """Exact sums ``(sums, shift)`` at queries ``Q`` far from the samples ``X`` (the binned pass's
    :func:`unresolved` ones, caller's coordinates, bandwidths ``h`` per feature), over the samples
    that carry them, found through coarse cells rather than a tree over all ``n`` samples (whose
    build, 0.28 s at n = 10^6 in 1-D and 0.67 s in 2-D, was most of a default density's time).

    The samples are put in cells of side ``s_f >= h_f`` (coarser where more than ``4 n`` cells would
    span them). In the scaled coordinates ``x / h`` a sample lies within ``r_c`` (half the cell's
    diagonal) of its cell's centre, so the nearest sample of a query lies within ``u_0 = g + r_c``,
    ``g`` the distance to the nearest occupied cell's centre. The samples within ``u_r``
    (:meth:`~localkit.kernels.profiles.Profile.truncation_radius`, ``n k(u_r^2) = tolerance
    k(u_0^2)``) are kept: the weight left out is below ``tolerance`` of the weight kept, as in
    :func:`~localkit.engine.passes.neighbors.truncated_sums`. They are found among the samples of
    the cells within ``u_r + r_c`` of the query, by a tree over those alone. None where the
    candidate pairs pass ``TRUNCATED_PAIRS`` (the caller's exact pass then)."""
    from sklearn.neighbors import KDTree

    from .neighbors import TRUNCATED_PAIRS, csr_sums

    n, d = X.shape
    lo, hi = _extent(X)
    lo, hi = lo / h, hi / h
    side = np.ones(d)
    while True:  # cells of at least a bandwidth, at most ~4n of them
        shape = np.floor((hi - lo) / side).astype(np.int64) + 1
        if np.prod(shape.astype(np.float64)) <= 4 * n + 16:
            break
        side *= 2.0
    strides = np.concatenate([np.cumprod(shape[::-1])[::-1][1:], [1]]).astype(np.int64)
    cell = np.empty(n, dtype=np.int64)
    _cells(X, 1.0 / (h * side), lo / side, shape, strides, cell)
    occupied = np.flatnonzero(np.bincount(cell, minlength=int(np.prod(shape))))
    centres = lo + side * (np.stack(np.unravel_index(occupied, tuple(shape)), axis=1) + 0.5)
    r_c = 0.5 * float(np.sqrt(np.sum(side * side)))
    Qs = Q / h
    g = KDTree(centres).query(Qs, k=1)[0][:, 0]
    radius = np.sqrt(profile.truncation_radius(g + r_c, math.log(tolerance) - math.log(n)))
    # the cells within reach of some query: the queries in groups of radii within a factor 1.25,
    # each group's nearest to every occupied cell against its largest radius (a superset, searched
    # exactly below; one search per cell and group, not one per query and cell)
    group = np.floor(np.log(radius / radius.min()) / math.log(1.25)).astype(np.intp)
    near_cells = np.zeros(len(occupied), dtype=bool)
    for j in np.unique(group):
        members = group == j
        near_cells |= KDTree(Qs[members]).query(centres, k=1)[0][:, 0] <= radius[members].max() + r_c
    needed = np.zeros(int(np.prod(shape)), dtype=bool)
    needed[occupied[near_cells]] = True
    keep = np.flatnonzero(needed[cell])
    if len(keep) > n // 4:  # a tree over most samples: the caller's index serves as well
        return None
    idx, dist = KDTree(X[keep] / h).query_radius(Qs, radius, return_distance=True)
    counts = np.array([len(i) for i in idx])
    if counts.sum() > TRUNCATED_PAIRS:
        return None
    indptr = np.concatenate([[0], np.cumsum(counts)])
    return csr_sums(profile.log_k(np.concatenate(dist) ** 2), keep[np.concatenate(idx)], indptr, V_aug)


@njit(cache=True)
def _cells(X, inv_side, origin, shape, strides, out):
    """``out[i]``: the flat index of sample ``i``'s cell, ``floor(x_f inv_side_f - origin_f)`` per
    feature clipped to ``[0, shape_f)``, in one pass (NumPy's took 67 ms on a million 2-D samples)."""
    for i in range(X.shape[0]):
        flat = 0
        for f in range(X.shape[1]):
            j = min(max(int(np.floor(X[i, f] * inv_side[f] - origin[f])), 0), shape[f] - 1)
            flat += j * strides[f]
        out[i] = flat


# -- binned moments: the local polynomial's sums (Fan and Marron 1994; R's KernSmooth::locpoly) -------------------

def binned_moments(X, Y, weight, h, exponents, n_target, grid, at):
    """Binned local moments about grid points, ``S_a(g) = sum_i c_i k(|(x_i - g) / h|^2) z_i^a`` and
    ``T_a(g) = sum_i c_i k(...) z_i^a y_i`` with ``z_i = (x_i - g) / h`` (per feature) and ``z^a`` the
    monomial of exponents ``a``, at the grid points of flat index ``at``.

    The samples are binned linearly (:meth:`Grid.bin`: ``x_i`` -> the corners ``l`` of its cell,
    shares ``a_il``), so ``x_i - g_m`` becomes ``(l - m) delta``, and each moment is one FFT
    convolution (:meth:`Grid.convolve`) of the bin counts ``B_l`` (or ``B_l y``) with the kernel
    sampled on the grid's offsets times the monomial, ``kappa_a(o) = k(|o delta / h|^2)
    (-o delta / h)^a``, out to the profile's :func:`reach`: ``S_a(g_m) = sum_l B_l kappa_a(m - l)``.
    This is KernSmooth's ``locpoly`` (Wand 1994; Fan and Marron 1994), which sums the same
    products directly over a kernel truncated at 4 standard deviations.

    ``X`` (n, d) and ``h`` (d,) in the caller's coordinates; ``weight`` (n,) or None; ``Y`` (n, t);
    ``exponents`` (K, d): every monomial wanted for ``S``, its first ``n_target`` rows also for
    ``T``; ``grid`` a :class:`Grid` of ``X``; ``at`` flat grid indices. Returns ``S`` (K, len(at)),
    ``T`` (n_target, t, len(at)) and the total weight ``sum_i c_i`` (FFT round-off is about
    ``1e-15`` of it).
    """
    t = Y.shape[1]
    half, axes = grid.offsets()  # binned as they are: the corrections of binned_sums made local linear fits worse
    B = grid.bin(X, None if weight is None else np.asarray(weight, dtype=np.float64), Y, half)
    total = float(B[0].sum())
    offsets = np.meshgrid(*axes, indexing="ij")
    k = grid.profile.k(sum(o * o for o in offsets))
    kernels = []
    for a, e in enumerate(exponents):
        kern = k
        for f, power in enumerate(e):
            if power:
                kern = kern * (-offsets[f]) ** power
        kernels.append((kern, slice(0, 1 + t) if a < n_target else slice(0, 1)))
    S = np.empty((len(exponents), len(at)))
    T = np.empty((n_target, t, len(at)))
    for a, out in enumerate(grid.convolve(B, kernels, half)):
        out = out[:, at]
        S[a] = out[0]
        if a < n_target:
            T[a] = out[1:]
    return S, T, total


# -- a 1-D density's distribution function on the grid: cdf, sf, quantiles, entropy --------------------------------

class BinnedDistribution:
    """A weighted 1-D kernel density ``f(t) = sum_i c_i k(|t - x_i| / h) / (W c_1 h)`` and its
    distribution function ``F(t) = sum_i c_i K((t - x_i) / h) / W`` (``K`` the profile's own,
    ``cdf``; ``W = sum_i c_i``) on the binned pass's grid: one linear binning of the samples and
    two FFT convolutions, then every call costs only its points.

    The grid (:class:`Grid`, ``grid_size`` / ``tolerance`` as for the binned sums) spans the samples
    and the profile's :func:`reach` beyond them. At its points ``g_m``, with the bin weights
    ``B_l``: ``F(g_m) W = sum_(l<m) B_l + B_m / 2 + sum_l B_l D((m - l) delta / h)`` and
    ``(1 - F(g_m)) W = sum_(l>m) B_l + B_m / 2 - sum_l B_l D(...)``, ``D(z) = K(z) - H(z)`` the
    kernel's distribution function less the step ``H`` (``1/2`` at 0), which vanishes beyond the
    reach: running sums and one convolution, the survival function summed from the right so that
    it keeps its precision in the right tail; the density is the binned sum of :func:`binned_sums`
    (smooth profiles corrected alike). Between grid points ``F`` is the cubic Hermite interpolant
    of ``F`` and ``f = F'`` (its error ``delta^4 max|f'''| / 384``, far below the binning's);
    beyond the grid ``F`` is 0 or 1 (no sample within reach).

    Error: linear binning moves each sample by less than ``delta``, and ``F`` errs by at most the
    binned sums' bound ``B`` (:attr:`Grid.bound`, :func:`error_bound`) times the density's largest
    value times ``h``, in absolute terms; quantiles by that over the density at the quantile.
    :meth:`entropy` is the trapezoidal rule of ``-f log f`` on the grid (``O(delta^2)``, plus the
    density's relative error ``B``). Cost: ``O(n)`` to bin, ``O(M log M)`` for the ``M`` grid points,
    then ``O(log M)`` per point of :meth:`cdf` and :meth:`sf`, ``O(log M)`` plus 60 halvings per
    quantile, ``O(M)`` for :meth:`entropy`.
    """

    def __init__(self, x, weight, profile, h, cdf, log_normalizer, grid_size=None, tolerance=None, workers=1):
        X = np.asarray(x, dtype=np.float64).reshape(-1, 1)
        h = float(h)
        R = reach(profile)
        ends = np.array([[X.min() - R * h], [X.max() + R * h]]) if np.isfinite(R) else np.empty((0, 1))
        grid = Grid(X, ends, h, profile, grid_size, tolerance)
        corrected = smooth(profile)
        half, axes = grid.offsets(extra=1 if corrected else 0)
        B = grid.bin(X, None if weight is None else np.asarray(weight, dtype=np.float64), np.empty((len(X), 0)), half)
        kern = profile.k(axes[0] ** 2)
        kern = _binning_corrected(kern) if corrected else kern
        o = axes[0][1:-1] if corrected else axes[0]
        step = np.where(o > 0, 1.0, np.where(o < 0, 0.0, 0.5))
        dens, spread = grid.convolve(B, [(kern, slice(0, 1)), (cdf(o) - step, slice(0, 1))], half, workers)
        counts = B[0, :grid.shape[0]]
        total = float(counts.sum())
        below = np.cumsum(counts) - counts  # sum_(l<m) B_l
        above = total - below - counts  # sum_(l>m) B_l (the cumulative sums are exact for the few bins that matter)
        self.points = grid.lo[0] + grid.delta[0] * np.arange(grid.shape[0])
        self.F = np.clip((below + 0.5 * counts + spread[0]) / total, 0.0, 1.0)
        self.S = np.clip((above + 0.5 * counts - spread[0]) / total, 0.0, 1.0)
        self.f = np.maximum(dens[0], 0.0) / (total * h * math.exp(log_normalizer))
        self.grid, self.h = grid, h

    def _hermite(self, t, values, slope_sign, left, right):
        """The cubic Hermite interpolant of ``values`` (slopes ``slope_sign f``) at ``t``; ``left``
        and ``right`` beyond the grid."""
        g, f = self.points, self.f
        t = np.asarray(t, dtype=np.float64)
        j = np.clip(np.searchsorted(g, t, side="right") - 1, 0, len(g) - 2)
        delta = g[1] - g[0]
        s = (t - g[j]) / delta
        s2, s3 = s * s, s * s * s
        out = ((2 * s3 - 3 * s2 + 1) * values[j] + (-2 * s3 + 3 * s2) * values[j + 1]
               + slope_sign * delta * ((s3 - 2 * s2 + s) * f[j] + (s3 - s2) * f[j + 1]))
        return np.clip(np.where(t < g[0], left, np.where(t > g[-1], right, out)), 0.0, 1.0)

    def cdf(self, t):
        """``F(t)``."""
        return self._hermite(t, self.F, 1.0, 0.0, 1.0)

    def sf(self, t):
        """``1 - F(t)``, interpolated from the right-hand sums."""
        return self._hermite(t, self.S, -1.0, 1.0, 0.0)

    def quantile(self, q):
        """The smallest ``t`` with ``F(t) >= q`` for ``q`` in ``(0, 1)``: the grid cell by
        ``searchsorted``, then 60 halvings of the cell on the interpolant (monotone there up to
        its error)."""
        q = np.asarray(q, dtype=np.float64)
        j = np.clip(np.searchsorted(self.F, q, side="left") - 1, 0, len(self.F) - 2)
        a, b = self.points[j], self.points[j + 1]
        for _ in range(60):
            mid = 0.5 * (a + b)
            below = self.cdf(mid) < q
            a, b = np.where(below, mid, a), np.where(below, b, mid)
        return b

    def entropy(self):
        """``-int f log f``, the trapezoidal rule on the grid."""
        f = self.f
        with np.errstate(divide="ignore", invalid="ignore"):
            integrand = np.where(f > 0, -f * np.log(f), 0.0)
        return float((integrand.sum() - 0.5 * (integrand[0] + integrand[-1])) * (self.points[1] - self.points[0]))
