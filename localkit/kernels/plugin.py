"""Plug-in bandwidth selectors for one feature: the improved Sheather-Jones rule (``"isj"``) and
the Sheather-Jones solve-the-equation rule (``"sj"``).

Both aim at the bandwidth of a Gaussian kernel (its standard deviation) that minimises the
asymptotic mean integrated squared error of a density estimate,

    ``h_AMISE = (2 sqrt(pi) n ||f''||^2)^(-1/5)``,  ``||f''||^2 = int f''(x)^2 dx``,

and estimate the unknown ``||f''||^2`` from the data on a grid of bins, so that a million
samples take milliseconds. Each reproduces a reference that users of 1-D smoothing know, to
round-off (the tests hold both to 1e-6 relative on bundled data and see 1e-14 or better):

* :func:`improved_sheather_jones` is KDEpy's ``bw="ISJ"`` (Botev, Grotowski & Kroese, 2010);
* :func:`sheather_jones` is R's ``bw.SJ(x)`` (Sheather & Jones, 1991; method ``"ste"``,
  ``nb = 1000``, as in R 4.2).

They are the rules ``bandwidth="isj"`` and ``bandwidth="sj"`` of
:func:`localkit.kernels.bandwidth.resolve_bandwidth`, which applies them feature by feature.

References
----------
Botev, Z. I., Grotowski, J. F. and Kroese, D. P. (2010). Kernel density estimation via
diffusion. *Annals of Statistics* 38(5), 2916-2957.

Sheather, S. J. and Jones, M. C. (1991). A reliable data-based bandwidth selection method for
kernel density estimation. *Journal of the Royal Statistical Society B* 53(3), 683-690.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .._jit import njit
from ..exceptions import LocalkitConvergenceWarning, warn

#: the ISJ grid: 2^10 points over the data range padded by max(range / 2, ISJ_PAD) each side
ISJ_GRID = 1024
ISJ_PAD = 6.0
#: the number of stages l of the ISJ functional gamma^[l] (derivative orders 7 down to 2)
ISJ_STAGES = 5
#: R's bw.SJ: bins of the pair differences, and the cut-off (k d / g)^2 < SJ_DELMAX of its sums
SJ_BINS = 1000
SJ_DELMAX = 1000.0
_1_SQRT_2PI = 0.398942280401432677939946059934  # R's M_1_SQRT_2PI


def _checked(x, sample_weight, name, rule):
    """``x`` as a finite float64 vector of at least two values (and the weights, if given)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name}={rule!r} selects the bandwidth of one feature: x must be 1-D, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name}={rule!r} needs finite samples; these contain NaN or inf")
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != x.shape:
            raise ValueError(f"sample_weight must have shape {x.shape}, got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("sample_weight must be finite and >= 0")
        x, sample_weight = x[w > 0], w[w > 0]
    if x.size < 2:
        raise ValueError(f"{name}={rule!r} needs at least 2 samples (of positive weight), got {x.size}")
    lo, hi = float(np.min(x)), float(np.max(x))
    if lo == hi:
        raise ValueError(f"{name}={rule!r}: the samples are constant (zero spread), so there is no bandwidth to "
                         "select; give the bandwidth explicitly")
    return x, sample_weight, lo, hi


def _range_exponent(lo, hi):
    """``e`` with ``2^e <= hi - lo < 2^(e+1)``, computed without overflow."""
    return math.frexp(hi * 0.5 - lo * 0.5)[1]


# -- the improved Sheather-Jones rule (KDEpy's ISJ) ---------------------------------------------
def _isj_binned(x, w, lo, hi):
    """Linear binning on KDEpy's ISJ grid: the weights (summing to 1) at its ``ISJ_GRID`` points.

    The grid runs from ``lo - pad`` to ``hi + pad``, ``pad = max((hi - lo) / 2, ISJ_PAD)``; a
    sample at ``u`` grid steps from its start puts ``1 - frac(u)`` on point ``floor(u)`` and
    ``frac(u)`` on the next, accumulated sample by sample in KDEpy's order (one compiled pass:
    2.4 ms for a million samples, 44 ms as an interleaved ``bincount``), so that the sums round
    as KDEpy's do.
    """
    pad = max(0.5 * (hi - lo), ISJ_PAD)
    start, stop = lo - pad, hi + pad
    dx = (stop - start) / (ISJ_GRID - 1)
    if w is None:
        return _linear_binning(x, np.empty(0), start, dx, ISJ_GRID) / x.size
    return _linear_binning(x, w / np.sum(w), start, dx, ISJ_GRID)


@njit(cache=True, nogil=True)
def _linear_binning(x, w, start, dx, m):  # pragma: no cover (compiled)
    """KDEpy's loops: unweighted, the left share then the right; weighted, the right then the left."""
    out = np.zeros(m + 1)
    for i in range(x.size):
        u = (x[i] - start) / dx
        j = int(np.floor(u))
        frac = u - j
        if w.size == 0:
            out[j] += 1.0 - frac
            out[j + 1] += frac
        else:
            right = frac * w[i]
            out[j + 1] += right
            out[j] += w[i] - right
    return out[:m]


def _isj_gamma(a2, k2, N):
    """The map ``t -> t - gamma^[l](t)`` whose root is ISJ's ``t*`` (see
    :func:`improved_sheather_jones`), with the DCT power ``k^(2s) a_k^2`` of each stage computed once."""
    top = ISJ_STAGES + 2  # the first functional estimated is ||f^(7)||^2
    powered = {s: np.power(k2, s) * a2 for s in range(2, top + 1)}
    decay = -k2 * np.pi ** 2

    def norm(s, t):  # ||f^(s)||^2 of the data smoothed for a time t, by Parseval on the DCT
        return 0.5 * np.pi ** (2 * s) * np.sum(powered[s] * np.exp(decay * t))

    def gap(t):
        f = norm(top, t)
        if f <= 0:
            return -1.0
        for s in range(top - 1, 1, -1):
            k_s = np.prod(np.arange(1, 2 * s + 1, 2, dtype=np.float64)) / np.sqrt(2 * np.pi)  # (2s-1)!! phi(0)
            c_s = (1 + 0.5 ** (s + 0.5)) / 3
            t_s = (2 * c_s * k_s / (N * f)) ** (2.0 / (3.0 + 2.0 * s))
            f = norm(s, t_s)
        return t - (2 * N * np.sqrt(np.pi) * f) ** (-2.0 / 5)

    return gap


def improved_sheather_jones(x, sample_weight=None, *, name="bandwidth"):
    r"""The improved Sheather-Jones bandwidth of one feature (Botev, Grotowski & Kroese, 2010),
    equal to KDEpy's ``bw="ISJ"``.

    The data are binned linearly on ``m = 1024`` equispaced points spanning
    ``[min - p, max + p]``, ``p = max((max - min) / 2, 6)`` (KDEpy's grid), that interval taken as
    ``[0, 1]``; ``a_k`` is the type-II discrete cosine transform of the bin weights (which sum to 1).
    Smoothing the binned density for a time ``t`` (a Gaussian of variance ``t`` in grid units)
    gives its ``s``-th derivative's squared norm by Parseval,

    .. math:: \|f^{(s)}_t\|^2 = \tfrac12 \pi^{2s} \sum_{k=1}^{m-1} k^{2s} a_k^2 e^{-k^2 \pi^2 t}.

    The functional :math:`\gamma^{[l]}` (``l = 5`` stages) starts from
    :math:`F_7 = \|f^{(7)}_t\|^2` and for ``s = 6, ..., 2`` sets
    :math:`t_s = \big(2 c_s K_s / (N F_{s+1})\big)^{2/(3+2s)}`,
    :math:`F_s = \|f^{(s)}_{t_s}\|^2`, with :math:`K_s = (2s-1)!!/\sqrt{2\pi}` and
    :math:`c_s = (1 + 2^{-(s+1/2)})/3`; then :math:`\gamma^{[l]}(t) = (2 N \sqrt{\pi} F_2)^{-2/5}`,
    the AMISE-optimal ``t`` given :math:`\|f''\|^2 \approx F_2`. ``t*`` is the fixed point that
    the paper writes ``t = xi * gamma^[l](t)``, solved in the form of Botev's reference code and
    KDEpy, ``t - gamma^[l](t) = 0`` with the stages above (no separate factor ``xi``); the
    bandwidth is ``h = sqrt(t*) (max - min)``.

    ``N`` is the number of *distinct* sample values (of positive weight), as in KDEpy. The root is
    found as KDEpy finds it: Brent's method (:func:`scipy.optimize.brentq`, its default
    tolerances, so ``t*`` to about 2e-12) on ``[0, tau]``,
    ``tau = 1e-11 + 0.01 (min(max(N, 50), 1050) - 50) / 1000``, doubling ``tau`` until the ends
    differ in sign; none below ``tau = 1`` is an error (too few distinct values).

    **Two departures of KDEpy's from the paper, kept here because this rule is KDEpy's.**
    ``t*`` is in units of the grid's span ``max - min + 2p``, and Botev et al.'s own code returns
    ``sqrt(t*)`` times that span; KDEpy multiplies by the data range ``max - min`` instead, so its
    ``h`` is at most half of theirs (a third on the example below; KDEpy issue #199, pull request
    #200, open; ArviZ scales by the span). And the padding of 6 in the data's units makes the
    rule scale-dependent when ``max - min < 12``: rescaling such data changes ``h`` by more than
    the scale (KDEpy issue #201). Beyond a range of 12 the rule is scale-equivariant, and data
    with a range beyond ``2^100`` are rescaled by a power of two internally (exactly), so they
    do not overflow.

    Parameters
    ----------
    x : array of shape (n_samples,)
        Finite values, at least two distinct ones.
    sample_weight : array of shape (n_samples,), optional
        Non-negative weights: samples of weight 0 are dropped, the others binned with their
        normalised weights (KDEpy's ``weights``); ``N`` counts the distinct values left.
    name : str, default="bandwidth"
        The parameter named in error messages.

    Returns
    -------
    h : float
        The standard deviation of the Gaussian kernel.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit.kernels.plugin import improved_sheather_jones
    >>> x = np.random.default_rng(0).normal(size=1000)
    >>> round(improved_sheather_jones(x), 4)  # KDEpy: FFTKDE(bw="ISJ").fit(x).bw
    0.1025
    """
    x, w, lo, hi = _checked(x, sample_weight, name, "isj")
    scale = 0
    if hi * 0.5 - lo * 0.5 >= 2.0 ** 99:  # beyond 12 the pad is relative: work on x / 2^k, exactly
        scale = _range_exponent(lo, hi) - 4
        x, lo, hi = np.ldexp(x, -scale), math.ldexp(lo, -scale), math.ldexp(hi, -scale)
    ordered = np.sort(x)
    N = 1 + np.count_nonzero(ordered[1:] != ordered[:-1])  # distinct values (np.unique's count, 2x faster)
    a = _dct2(_isj_binned(x, w, lo, hi))
    k2 = np.power(np.arange(1, ISJ_GRID, dtype=np.float64), 2)
    gap = _isj_gamma(a[1:] ** 2, k2, N)
    t = _isj_root(gap, N, name)
    h = math.ldexp(math.sqrt(t) * (hi - lo), scale)
    if not (math.isfinite(h) and h > 0):
        raise ValueError(f"{name}='isj' gave a bandwidth of {h!r} for these samples; give the bandwidth explicitly")
    return h


def _dct2(v):
    from scipy.fft import dct

    return dct(v, type=2)


def _isj_root(gap, N, name):
    """KDEpy's search for the root of ``gap`` (see :func:`improved_sheather_jones`)."""
    from scipy.optimize import brentq

    tau = 1e-11 + 0.01 * (max(min(1050, N), 50) - 50) / 1000
    while tau < 1:
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            try:
                t, info = brentq(gap, 0.0, tau, full_output=True, disp=False)
            except ValueError:  # no sign change on [0, tau]
                tau *= 2.0
                continue
        if info.converged and t > 0:
            return t
        break
    raise ValueError(f"{name}='isj': the ISJ fixed-point equation has no root for these samples ({N} distinct "
                     "values; KDEpy: 'Root finding did not converge. Need more data.'); give the bandwidth "
                     "explicitly or use 'sj', 'scott' or 'silverman'")


# -- the Sheather-Jones rule (R's bw.SJ) ----------------------------------------------------------
def _sj_pair_counts(x, lo, hi):
    """R's binned pair differences: ``(d, cnt)``, ``cnt[k]`` the number of pairs ``i < j`` whose
    bins ``trunc(x / d)`` (towards zero, R's C cast) are ``k`` apart, ``d = 1.01 (hi - lo) / SJ_BINS``.

    R counts pairs directly for ``n <= 500`` and from the bin counts beyond; both give these
    integers, here from the autocorrelation of the bin counts (exact below 2^53 pairs). Bins past
    ``SJ_BINS`` (only data so far from 0 that ``x / d`` loses integer precision) are dropped, as
    R's ``tabulate`` drops them.
    """
    d = (hi - lo) * 1.01 / SJ_BINS
    counts, kept = _bin_counts(x, d, np.trunc(lo / d), SJ_BINS)  # trunc is monotone: lo has the lowest bin
    pairs = np.correlate(counts, counts, mode="full")[SJ_BINS - 1:]
    pairs[0] = (pairs[0] - kept) / 2.0  # each bin with itself, less each sample with itself
    return d, pairs


@njit(cache=True, nogil=True)
def _bin_counts(x, d, lowest, nb):  # pragma: no cover (compiled)
    """The counts of the bins ``trunc(x / d) - lowest`` below ``nb``, and how many samples they hold."""
    counts = np.zeros(nb)
    kept = 0
    for i in range(x.size):
        k = np.trunc(x[i] / d) - lowest
        if k < nb:
            counts[int(k)] += 1.0
            kept += 1
    return counts, kept


def _sj_functional(n, d, cnt, order):
    """R's ``bw_phi4`` (``order=4``: ``S_D``) or ``-bw_phi6`` (``order=6``: ``T_D``) as a function of
    the pilot bandwidth ``g``, summed over the bins in R's order (a sequential cumulative sum)."""
    lags = np.arange(cnt.size, dtype=np.float64)

    def functional(g):
        g = np.float64(g)
        delta = lags * d / g
        delta *= delta
        past = np.flatnonzero(delta >= SJ_DELMAX)  # R stops at the first bin past the cut-off
        delta = delta[:past[0]] if past.size else delta
        if order == 4:
            term = np.exp(-delta / 2.0) * (delta * delta - 6.0 * delta + 3.0)
        else:
            term = np.exp(-delta / 2.0) * (delta * delta * delta - 15 * delta * delta + 45 * delta - 15)
        total = np.cumsum(term * cnt[:delta.size])[-1] if delta.size else np.float64(0.0)
        if order == 4:
            return (2.0 * total + n * 3.0) / (float(n) * (n - 1) * g ** 5.0) * _1_SQRT_2PI
        return -((2.0 * total - 15.0 * n) / (float(n) * (n - 1) * g ** 7.0) * _1_SQRT_2PI)

    return functional


def _r_sd(x):
    """R's ``sd(x)``: the mean corrected by a second pass, then the sum of squares about it. R
    accumulates in long double; compensated (Neumaier) sums here come as close (one compiled
    pass each: 2 ms for a million samples, 26 ms in NumPy's long double)."""
    return math.sqrt(_sum_of_squares(x) / (x.size - 1))


@njit(cache=True, nogil=True)
def _sum_of_squares(x):  # pragma: no cover (compiled)
    n = x.size
    total, carry = 0.0, 0.0
    for i in range(n):  # Neumaier's compensated sum of x
        v = x[i]
        t = total + v
        carry += (total - t) + v if abs(total) >= abs(v) else (v - t) + total
        total = t
    mean = (total + carry) / n
    total, carry = 0.0, 0.0
    for i in range(n):  # R's correction: the mean of the deviations from the first mean
        v = x[i] - mean
        t = total + v
        carry += (total - t) + v if abs(total) >= abs(v) else (v - t) + total
        total = t
    mean += (total + carry) / n
    total, carry = 0.0, 0.0
    for i in range(n):
        v = (x[i] - mean) * (x[i] - mean)
        t = total + v
        carry += (total - t) + v  # total >= v >= 0 but for the first terms: exact either way
        total = t
    return total + carry


def _r_iqr(sorted_x):
    """R's ``IQR(x)`` of the sorted samples: quantiles of type 7, ``(1 - h) x_(lo) + h x_(hi)``
    at the rank ``1 + (n - 1) p``."""
    n = sorted_x.size
    q = []
    for p in (0.25, 0.75):
        index = 1 + (n - 1) * p
        lo, hi = math.floor(index), math.ceil(index)
        qs, above = float(sorted_x[lo - 1]), float(sorted_x[hi - 1])
        if index > lo and above != qs:
            h = index - lo
            qs = (1 - h) * qs + h * above
        q.append(qs)
    return q[1] - q[0]


def zeroin(f, lower, upper, f_lower, f_upper, tol, maxiter=1000):
    """R's ``uniroot`` (its C routine ``R_zeroin2``, Brent's 1973 zeroin): a root of ``f`` in
    ``[lower, upper]`` given ``f`` at both ends (of opposite signs), to within about ``tol``.

    Each step takes the inverse quadratic (or secant) interpolation step when it falls well
    inside the bracket and bisects otherwise; it stops when half the bracket is within
    ``2 eps |b| + tol / 2`` of the best point ``b``, and returns ``b``. R's ``bw.SJ`` stops at
    ``tol = 0.1 * lower``, so its answer is the root only to about 1% of ``h``; taking the same
    steps gives the same answer.

    Examples
    --------
    >>> from localkit.kernels.plugin import zeroin
    >>> round(zeroin(lambda x: x**3 - 2, 0.0, 3.0, -2.0, 25.0, tol=1e-3), 6)  # R: uniroot(..., tol=1e-3)
    1.259904
    """
    eps = sys.float_info.epsilon
    a, b, fa, fb = lower, upper, f_lower, f_upper
    c, fc = a, fa
    if fa == 0.0:
        return a
    if fb == 0.0:
        return b
    for _ in range(maxiter + 1):
        prev_step = b - a
        if abs(fc) < abs(fb):  # b the best approximation so far
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol_act = 2 * eps * abs(b) + tol / 2
        new_step = (c - b) / 2
        if abs(new_step) <= tol_act or fb == 0.0:
            return b
        if abs(prev_step) >= tol_act and abs(fa) > abs(fb):  # interpolation may be tried
            cb = c - b
            if a == c:  # two distinct points: the secant
                t1 = fb / fa
                p = cb * t1
                q = 1.0 - t1
            else:  # inverse quadratic interpolation
                q, t1, t2 = fa / fc, fb / fc, fb / fa
                p = t2 * (cb * q * (q - t1) - (b - a) * (t1 - 1.0))
                q = (q - 1.0) * (t1 - 1.0) * (t2 - 1.0)
            if p > 0:
                q = -q
            else:
                p = -p
            if p < (0.75 * cb * q - abs(tol_act * q) / 2) and p < abs(prev_step * q / 2):
                new_step = p / q
        if abs(new_step) < tol_act:  # never a step below the tolerance
            new_step = tol_act if new_step > 0 else -tol_act
        a, fa = b, fb
        b += new_step
        fb = f(b)
        if (fb > 0 and fc > 0) or (fb < 0 and fc < 0):  # keep c on the other side of the root from b
            c, fc = a, fa
    warn(LocalkitConvergenceWarning(f"zeroin did not converge in {maxiter} iterations"))
    return b


def sheather_jones(x, *, name="bandwidth"):
    r"""The Sheather-Jones "solve-the-equation" bandwidth of one feature, equal to R's
    ``bw.SJ(x)`` (its defaults: ``method = "ste"``, ``nb = 1000``).

    ``h`` solves

    .. math:: h = \left(\frac{1}{2\sqrt{\pi}\, n\, S_D(\alpha_2(h))}\right)^{1/5},
              \qquad \alpha_2(h) = 1.357 \left(\frac{S_D(a)}{T_D(b)}\right)^{1/7} h^{5/7},

    where :math:`S_D(g) = \frac{1}{n(n-1) g^5} \sum_{i,j} \phi^{(4)}\big(\frac{x_i - x_j}{g}\big)`
    and :math:`T_D(g) = -\frac{1}{n(n-1) g^7} \sum_{i,j} \phi^{(6)}\big(\frac{x_i - x_j}{g}\big)`
    estimate :math:`\|f''\|^2` and :math:`\|f'''\|^2` (``phi`` the standard normal density; the
    sums include ``i = j``), with the pilots ``a = 1.24 s n^(-1/7)``, ``b = 1.23 s n^(-1/9)`` and
    ``s = min(sd(x), IQR(x) / 1.349)``. As in R, the differences are binned: ``x_i - x_j`` is
    taken as ``d (k_i - k_j)``, ``k_i = trunc(x_i / d)``, ``d = 1.01 (max - min) / 1000``, and pairs
    with ``((k_i - k_j) d / g)^2 >= 1000`` are left out. The root is R's: Brent's zeroin (R's
    ``uniroot``, :func:`zeroin`) on ``[0.1 hmax, hmax]``, ``hmax = 1.144 s n^(-1/5)``, the ends
    widened (the upper times 1.2, then the lower over 1.2, in turn, at most 99 times) until they
    bracket a root, with ``tol = 0.1 * lower``. That tolerance makes R's ``h`` the root only to
    about 1%; this takes R's steps, so that it returns R's number, not a more exact root.

    Differences from R 4.2, where R has no answer: data with a range beyond ``2^100`` or below
    ``2^-100`` are rescaled by a power of two (R overflows to "sample is too sparse"), and for
    ``n <= 500`` bins beyond a C ``int`` (data far from 0: ``|x| / d > 2^31``, where R's cast is
    undefined) are counted in floating point as R's binned path (``n > 500``) counts them.

    Parameters
    ----------
    x : array of shape (n_samples,)
        Finite values, not all equal.
    name : str, default="bandwidth"
        The parameter named in error messages.

    Returns
    -------
    h : float
        The standard deviation of the Gaussian kernel.

    Raises
    ------
    ValueError
        Where R's ``bw.SJ`` stops: fewer than 2 samples, constant samples, or "sample is too
        sparse" (``T_D(b) <= 0``: e.g. more than half the samples tied, so that ``s = 0``).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit.kernels.plugin import sheather_jones
    >>> round(sheather_jones(np.array([1.0, 2.0, 4.0, 7.0])), 6)  # R: bw.SJ(c(1, 2, 4, 7))
    1.618465
    """
    x, _, lo, hi = _checked(x, None, name, "sj")
    scale = 0
    e = _range_exponent(lo, hi)
    if not -100 <= e <= 100:  # beyond R's range (h^7 would overflow or underflow): x / 2^e, exactly
        scale = e
        x, lo, hi = np.ldexp(x, -scale), math.ldexp(lo, -scale), math.ldexp(hi, -scale)
    n = x.size
    d, cnt = _sj_pair_counts(x, lo, hi)
    SD, TD = _sj_functional(n, d, cnt, 4), _sj_functional(n, d, cnt, 6)
    s = min(_r_sd(x), _r_iqr(np.sort(x)) / 1.349)
    a = 1.24 * s * n ** (-1 / 7)
    b = 1.23 * s * n ** (-1 / 9)
    c1 = 1 / (2 * math.sqrt(math.pi) * n)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        td = TD(b)
        if not (math.isfinite(td) and td > 0):
            raise ValueError(f"{name}='sj': sample is too sparse to find TD (R's bw.SJ stops here too: s = "
                             f"min(sd, IQR / 1.349) = {s:.6g}); give the bandwidth explicitly or use 'isj'")
        hmax = 1.144 * s * n ** (-1 / 5)
        lower, upper = 0.1 * hmax, hmax
        alph2 = 1.357 * (SD(a) / td) ** (1 / 7)
        if not math.isfinite(alph2):
            raise ValueError(f"{name}='sj': sample is too sparse to find alph2 (as R's bw.SJ); give the bandwidth "
                             "explicitly")

        def fSD(h):
            sd = SD(alph2 * h ** (5 / 7))
            return (c1 / sd) ** (1 / 5) - h if sd >= 0 else math.nan  # R: NaN from a negative base

        for itry in range(1, 101):
            product = fSD(lower) * fSD(upper)
            if not product > 0:
                break
            if itry > 99:
                raise ValueError(f"{name}='sj': no solution in the specified range of bandwidths (R's bw.SJ)")
            if itry % 2:
                upper *= 1.2
            else:
                lower /= 1.2
        f_lower, f_upper = fSD(lower), fSD(upper)
        if math.isnan(f_lower) or math.isnan(f_upper):
            raise ValueError(f"{name}='sj': the equation is undefined for these samples (R's bw.SJ stops here too); "
                             "give the bandwidth explicitly")
        h = zeroin(fSD, lower, upper, f_lower, f_upper, tol=0.1 * lower)
    h = math.ldexp(h, scale)
    if not (math.isfinite(h) and h > 0):
        raise ValueError(f"{name}='sj' gave a bandwidth of {h!r} for these samples; give the bandwidth explicitly")
    return h
