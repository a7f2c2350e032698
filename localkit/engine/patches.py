"""Patch-similarity local means: the non-local kernel, streamed over shifts with a compiled loop.

For an image ``P`` with ``C`` channels, reflect-padded by the patch radius, and pixels ``x``, ``y``:

    E(a, b)    = (1/C) sum_c (P_c(a) - P_c(b))^2                 squared difference, channel mean
    D(x, y)    = sum_p g(p) E(x + p, y + p)                      patch distance, sum_p g(p) = 1
    log K(x, y) = -max(D(x, y) - offset, 0) / h^2 + log K_pos(y - x)
    m(x)       = sum_y K(x, y) P(y) / sum_y K(x, y),  |y - x|_inf <= d per axis, y inside the image

``g`` is a separable patch weight (a product of normalised 1-D weights, one per axis). This is a
local mean whose kernel comes from the similarity of patches rather than from closeness of
``x`` and ``y`` (a non-local kernel); ``K_pos`` (optional, 1 by default) is a kernel in position,
a distance kernel of the shift ``t = y - x``, which makes it a product kernel of space and value:
with patches of one pixel, the bilateral filter.

The loop runs over shifts ``t = y - x``, not over pixels: for one shift, ``D_t(x) = (g * E_t)(x)``
is a separable filter of the squared-difference image ``E_t(a) = E(a, a + t)``. Each thread takes
strips of rows and runs every shift over its strip, so memory is a few strips per thread plus one
accumulator per thread: it never grows with image size x window size. The symmetry
``D_t(x) = D_{-t}(x + t)`` halves the shifts: each weight is added at ``x`` (value ``P(x + t)``)
and at ``x + t`` (value ``P(x)``). ``exp`` is a table and a polynomial, so the loops vectorise.

Streaming is the engine's online log-sum-exp (:class:`localkit.engine.OnlineLogSumExp`) with the
running maximum known in advance: every log-weight is ``<= 0`` and the centre pixel (``t = 0``)
has log-weight exactly 0, so after the centre's update the running maximum is 0 and never moves;
its rescaling step is the identity and is left out. Hence a tiny ``h`` gives the noisy pixel back
(weight 1 at the centre, the others underflow to 0) and never ``0 / 0``.
"""
from __future__ import annotations

import math

import numpy as np
from sklearn.utils._param_validation import validate_params

from .._jit import njit
from .._constraints import positive
from ..kernels import Kernel
from .blocks import map_blocks, resolve_n_jobs

#: Output rows (planes for 3-D) per strip: the strip buffers stay in cache.
STRIP = 32

#: ``exp(-n)`` for ``n = 0 .. 708``: the integer part of :func:`_exp_neg` (below ``exp(-708)``, the
#: smallest normal float64 is near; such weights are < 1e-307 of the centre pixel's).
EXP_NEG_INT = np.exp(-np.arange(709, dtype=np.float64))


def gaussian_patch_weights(patch_size, n_axes):
    """Per-axis 1-D weights of scikit-image's patch kernel ``exp(-|p|^2 / (2 A^2))``, ``A = (s-1)/4``.

    Their product over the axes is the normalised ``n_axes``-D Gaussian of skimage's slow mode.
    A patch of size 1 gets the single weight 1.
    """
    r = patch_size // 2
    p = np.arange(-r, r + 1, dtype=np.float64)
    if r == 0:
        g = np.ones(1)
    else:
        a = (patch_size - 1) / 4.0
        g = np.exp(-p * p / (2 * a * a))
    g /= g.sum()
    return [g] * n_axes


def half_shifts(window):
    """Shifts ``t != 0`` with ``|t_k| <= window[k]`` that are lexicographically positive."""
    grids = np.meshgrid(*[np.arange(-d, d + 1) for d in window], indexing="ij")
    t = np.stack([gr.ravel() for gr in grids], axis=1)
    first = np.argmax(t != 0, axis=1)
    lead = t[np.arange(len(t)), first]
    return np.ascontiguousarray(t[lead > 0], dtype=np.int64)


def position_log_weights(position, shifts):
    """``log K_pos(t) - log K_pos(0)`` of each shift ``t`` (rows of ``shifts``, pixels) for a
    distance :class:`~localkit.Kernel` ``position`` (zeros for None): ``<= 0``, and symmetric in
    ``t`` (a norm of ``t``), as the streamed sums need (each weight is added at ``x`` and ``x + t``)."""
    if position is None:
        return np.zeros(len(shifts))
    if not isinstance(position, Kernel) or position.is_softmax or position.composite or not position.norm_metric \
            or position.n_neighbors is not None or isinstance(position.bandwidth, str):
        raise ValueError(f"position must be a distance Kernel of the shift y - x (a profile, a fixed bandwidth, "
                         f"a norm metric), got {position!r}")
    zero = np.zeros((1, shifts.shape[1]))
    with np.errstate(divide="ignore"):
        L = np.log(position(zero, np.vstack([zero, shifts.astype(np.float64)])))[0]
    L = L[1:] - L[0]
    if np.any(L > 0):
        raise ValueError(f"position: the kernel {position!r} weighs some shift above the centre pixel; a kernel in "
                         "position must peak at t = 0")
    return L


#: The compiled loop's number of spatial axes: images of fewer get size-1 axes after their first
#: (the first keeps the strips that the threads share, the last the long contiguous rows)
AXES = 4


def uniform_patch_weights(patch_size, n_axes):
    """Per-axis 1-D weights ``1 / s`` of a uniform (box) patch: their product is Froment's and
    scikit-image's ``fast_mode`` patch distance, the mean squared difference over the patch. The
    compiled loop sums such a patch by running sums (the integral image's differences), ``O(1)`` per
    pixel and axis whatever ``s``."""
    return [np.full(patch_size, 1.0 / patch_size)] * n_axes


@validate_params({"h": positive()}, prefer_skip_nested_validation=True)
def patch_local_mean(image, axis_weights, window, h, offset=0.0, n_jobs=None, position=None):
    """The patch-similarity local mean ``m(x)`` at every pixel (see the module docstring).

    Parameters
    ----------
    image : array of shape (n_0, ..., n_(k-1), C)
        ``k`` spatial axes, 1 to 4, and channels.
    axis_weights : ``k`` 1-D arrays of odd lengths ``2 r_j + 1``, each summing to 1
        The separable patch weight ``g``. Where every axis' weights are uniform (``1 / s``: the box
        patch, :func:`uniform_patch_weights`) the patch sums are running sums, ``O(1)`` per pixel
        and axis; otherwise ``O(s)``.
    window : ``k`` ints
        Search radius per axis: ``y`` ranges over ``(2 d_j + 1)`` pixels per axis, clipped to the image.
    h : float
        Kernel width.
    offset : float
        Subtracted from the patch distance before the clip at 0 (``2 sigma^2`` for known noise).
    n_jobs : int, optional
        Threads (default: all cores); each holds its own accumulator.
    position : Kernel, optional
        ``K_pos``, a distance kernel of the shift ``t = y - x`` in pixels (e.g.
        ``Kernel("gaussian", bandwidth=sigma_spatial)``), normalised to 1 at ``t = 0``; shifts where it
        vanishes are skipped. None: 1 (a flat window).

    Returns
    -------
    mean : array of the image's shape, float64
    log_weight_sum : array of the image's spatial shape
        ``log sum_y K(x, y)`` (``>= 0``: the centre pixel contributes 1).

    Cost: ``image.size (2 d + 1)^k / 2`` shifts-times-pixels, each ``O(k)`` for a box patch and
    ``O(sum_j s_j)`` for another separable one.
    """
    img = np.asarray(image, dtype=np.float64)
    k = img.ndim - 1
    if not 1 <= k <= AXES or len(axis_weights) != k or len(window) != k:
        raise ValueError(f"patch_local_mean takes 1 to {AXES} spatial axes and one patch weight and window radius "
                         f"per axis; got an image of shape {img.shape}, {len(axis_weights)} weights, window {window}")
    spatial = img.shape[:-1]
    missing = AXES - k  # size-1 axes after the first, with a 1-point weight and no search
    img = img.reshape(spatial[:1] + (1,) * missing + spatial[1:] + img.shape[-1:])
    axis_weights = list(axis_weights[:1]) + [np.ones(1)] * missing + list(axis_weights[1:])
    window = tuple(window[:1]) + (0,) * missing + tuple(window[1:])
    radii = [len(g) // 2 for g in axis_weights]
    uniform = all(np.all(np.asarray(g) == g[0]) for g in axis_weights)
    padded = np.pad(img, [(r, r) for r in radii] + [(0, 0)], mode="reflect")
    padded = np.ascontiguousarray(np.moveaxis(padded, -1, 0))  # channels first: rows stay contiguous
    shifts = half_shifts(window)
    log_pos = position_log_weights(position, shifts[:, [0] + list(range(1 + missing, AXES))])
    shifts, log_pos = shifts[np.isfinite(log_pos)], np.ascontiguousarray(log_pos[np.isfinite(log_pos)])
    n_threads = max(1, min(resolve_n_jobs(n_jobs), len(shifts)))
    g = tuple(np.ascontiguousarray(w, dtype=np.float64) for w in axis_weights)
    dims = img.shape[:AXES]
    inv_h2 = min(1.0 / max(h * h, 1e-300), 1e300)  # h^2 may underflow; identical patches keep weight 1
    acc = np.zeros((n_threads, padded.shape[0] + 1) + dims)

    def run(threads):
        for k in range(threads.start, threads.stop):
            _shift_sums(padded, dims, g, shifts, log_pos, inv_h2, float(offset), k, n_threads, uniform, acc[k])

    map_blocks(run, n_threads, 1, n_threads, blas=False)
    sums = acc.sum(axis=0)
    centre = padded[(slice(None),) + tuple(slice(r, r + n) for r, n in zip(radii, dims))]
    weight = sums[-1] + 1.0  # the centre pixel: D = 0, weight 1
    mean = (sums[:-1] + centre) / weight
    return np.moveaxis(mean, 0, -1).reshape(spatial + img.shape[-1:]), np.log(weight).reshape(spatial)


@njit(inline="always", fastmath=True)
def _exp_neg(x):
    """``exp(x)`` for ``x <= 0`` as ``exp(-n) * exp(r)``, ``|r| <= 1/2``: a table and a degree-13
    Taylor polynomial (relative error < 2e-15). Unlike libm's ``exp`` the loop vectorises."""
    x = max(x, -708.0)
    n = math.floor(0.5 - x)
    r = x + n
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p * EXP_NEG_INT[int(n)]


# Serial and releasing the GIL, one call per thread from a thread pool, not a numba
# ``parallel=True`` loop: parallel lowering made the first call on a cold cache compile for ~20 s
# (measured 20.2 s against 6.0 s serial, 64 x 64 image).
@njit(cache=True, nogil=True, fastmath=True)
def _shift_sums(P, dims, g, shifts, log_pos, inv_h2, offset, k, n_threads, uniform, acc):
    """Add to ``acc`` thread ``k``'s (of ``n_threads``) ``[sum_t K v, sum_t K]`` over the shifts
    ``shifts`` and their mirrors, on four spatial axes ``dims``: the strips ``k, k + n_threads, ...``.

    Strips of axis-0 rows are the outer loop and shifts the inner one, so that the accumulator rows a
    strip touches (the strip and its mirrors, ``d`` rows either side) stay in cache.
    """
    n0, n1, n2, n3 = dims
    o0, o1, o2, o3 = len(g[0]) // 2, len(g[1]) // 2, len(g[2]) // 2, len(g[3]) // 2
    E = np.empty((STRIP + 2 * o0, n1 + 2 * o1, n2 + 2 * o2, n3 + 2 * o3))
    F = np.empty_like(E)
    w = np.empty(n3)
    for strip in range(k, (n0 + STRIP - 1) // STRIP, n_threads):
        for s in range(shifts.shape[0]):
            t = (shifts[s, 0], shifts[s, 1], shifts[s, 2], shifts[s, 3])
            a = max(strip * STRIP, -t[0])  # rows x of the strip whose mirror x + t is inside
            b = min(strip * STRIP + STRIP, n0 - t[0], n0)
            lo = (max(0, -t[1]), max(0, -t[2]), max(0, -t[3]))
            hi = (min(n1, n1 - t[1]), min(n2, n2 - t[2]), min(n3, n3 - t[3]))
            if a < b and lo[0] < hi[0] and lo[1] < hi[1] and lo[2] < hi[2]:
                _strip_shift(P, acc, E, F, w, a, b, t, lo, hi, g, inv_h2, offset, log_pos[s], uniform)


@njit(inline="always", fastmath=True)
def _filter_last(src, dst, rows, m1, m2, m3, weights, uniform):
    """``dst[i, j, k, l] = sum_u g[u] src[i, j, k, l + u]`` over the last axis (a running sum for a box)."""
    o = len(weights) // 2
    for i in range(rows):
        for j in range(m1):
            for k in range(m2):
                e = src[i, j, k]
                f = dst[i, j, k]
                if uniform:
                    run = 0.0
                    for u in range(2 * o + 1):
                        run += e[u]
                    f[0] = run
                    for l in range(1, m3):
                        run += e[l + 2 * o] - e[l - 1]
                        f[l] = run
                    for l in range(m3):
                        f[l] *= weights[0]
                else:
                    for l in range(m3):
                        f[l] = 0.0
                    for u in range(2 * o + 1):
                        gu = weights[u]
                        for l in range(m3):
                            f[l] += gu * e[l + u]


@njit(inline="always", fastmath=True)
def _filter_axis1(src, dst, rows, m1, m2, m3, weights, uniform):
    """``dst[i, j] = sum_u g[u] src[i, j + u]`` (rows of the last axes, vectorised along it)."""
    o = len(weights) // 2
    for i in range(rows):
        for j in range(m1):
            for k in range(m2):
                f = dst[i, j, k]
                if uniform and j > 0:  # the running sum from the row before
                    before, gone, come = dst[i, j - 1, k], src[i, j - 1, k], src[i, j + 2 * o, k]
                    for l in range(m3):
                        f[l] = before[l] + (come[l] - gone[l]) * weights[0]
                    continue
                for l in range(m3):
                    f[l] = 0.0
                for u in range(2 * o + 1):
                    gu = weights[u]
                    e = src[i, j + u, k]
                    for l in range(m3):
                        f[l] += gu * e[l]


@njit(inline="always", fastmath=True)
def _filter_axis2(src, dst, rows, m1, m2, m3, weights, uniform):
    """``dst[i, j, k] = sum_u g[u] src[i, j, k + u]`` (vectorised along the last axis)."""
    o = len(weights) // 2
    for i in range(rows):
        for j in range(m1):
            for k in range(m2):
                f = dst[i, j, k]
                if uniform and k > 0:
                    before, gone, come = dst[i, j, k - 1], src[i, j, k - 1], src[i, j, k + 2 * o]
                    for l in range(m3):
                        f[l] = before[l] + (come[l] - gone[l]) * weights[0]
                    continue
                for l in range(m3):
                    f[l] = 0.0
                for u in range(2 * o + 1):
                    gu = weights[u]
                    e = src[i, j, k + u]
                    for l in range(m3):
                        f[l] += gu * e[l]


@njit(inline="always", fastmath=True)
def _strip_shift(P, acc, E, F, w, a, b, t, lo, hi, g, inv_h2, offset, log_pos, uniform):
    """Add the weights of shift ``t`` for the rows ``a <= x0 < b`` at ``x`` and at ``x + t``
    (``log_pos <= 0``: the shift's log-weight in position)."""
    C = P.shape[0]
    g0, g1, g2, g3 = g
    o0, o1, o2, o3 = len(g0) // 2, len(g1) // 2, len(g2) // 2, len(g3) // 2
    t0, t1, t2, t3 = t
    lo1, lo2, lo3 = lo
    inv_c = 1.0 / C
    m1, m2, m3 = hi[0] - lo1, hi[1] - lo2, hi[2] - lo3
    rows = b - a + 2 * o0
    # squared differences over the strip and its patch margins (padded coordinates)
    for i in range(rows):
        for j in range(m1 + 2 * o1):
            for k in range(m2 + 2 * o2):
                e = E[i, j, k]
                for l in range(m3 + 2 * o3):
                    e[l] = 0.0
                for c in range(C):
                    p = P[c, a + i, lo1 + j, lo2 + k]
                    q = P[c, a + i + t0, lo1 + j + t1, lo2 + k + t2]
                    for l in range(m3 + 2 * o3):
                        diff = p[lo3 + l] - q[lo3 + l + t3]
                        e[l] += diff * diff
    # the separable patch filter, the last axis first, each pass into the other buffer (a 1-point
    # weight leaves its axis as it is)
    _filter_last(E, F, rows, m1 + 2 * o1, m2 + 2 * o2, m3, g3, uniform)
    src, dst = F, E
    if o2 > 0:
        _filter_axis2(src, dst, rows, m1 + 2 * o1, m2, m3, g2, uniform)
        src, dst = dst, src
    if o1 > 0:
        _filter_axis1(src, dst, rows, m1, m2, m3, g1, uniform)
        src, dst = dst, src
    # axis 0, then the weights; each is added at x and at its mirror x + t
    for i in range(b - a):
        x0 = a + i
        for j in range(m1):
            x1 = lo1 + j
            for k in range(m2):
                x2 = lo2 + k
                for l in range(m3):
                    w[l] = 0.0
                for u in range(2 * o0 + 1):
                    gu = g0[u]
                    d = src[i + u, j, k]
                    for l in range(m3):
                        w[l] += gu * d[l]
                for l in range(m3):
                    dist = w[l] * inv_c - offset
                    w[l] = _exp_neg(log_pos - max(dist, 0.0) * inv_h2)
                # separate loops for x and x + t: in one loop the two rows may overlap
                # (shifts along the last axis), which would keep it from vectorising
                here = acc[C, x0, x1, x2, lo3:hi[2]]
                for l in range(m3):
                    here[l] += w[l]
                there = acc[C, x0 + t0, x1 + t1, x2 + t2, lo3 + t3:hi[2] + t3]
                for l in range(m3):
                    there[l] += w[l]
                for c in range(C):
                    here = acc[c, x0, x1, x2, lo3:hi[2]]
                    v_there = P[c, x0 + t0 + o0, x1 + t1 + o1, x2 + t2 + o2, lo3 + t3 + o3:hi[2] + t3 + o3]
                    for l in range(m3):
                        here[l] += w[l] * v_there[l]
                    there = acc[c, x0 + t0, x1 + t1, x2 + t2, lo3 + t3:hi[2] + t3]
                    v_here = P[c, x0 + o0, x1 + o1, x2 + o2, lo3 + o3:hi[2] + o3]
                    for l in range(m3):
                        there[l] += w[l] * v_here[l]
