"""Streaming weighted sums with an online log-sum-exp, as flash attention does.

For each query row we keep the running maximum ``m`` of the log-weights seen so far and the
sums ``S = sum_j exp(L_j - m) [v_j, 1]``. A new block with maximum ``m'`` rescales the old sums
by ``exp(m - max(m, m'))``. The last column of ``S`` is the weight sum, so the local mean is
``S[:, :-1] / S[:, -1]`` and ``log sum_j K = m + log S[:, -1]``. A tiny bandwidth therefore gives
the nearest sample's value instead of ``0 / 0``, and memory is one block, whatever ``n``.
"""
from __future__ import annotations

import functools
import math

import numpy as np


#: Log-weights this far below the row's largest (``log`` of the dtype's smallest normal number,
#: -87.3 in float32, -708.4 in float64) are flushed to weight 0 (``-inf``) before ``exp``: each
#: such weight is below ``tiny`` relative to the largest term, so all of them together (fewer than
#: 2^100 samples) change a sum by less than an ulp of that term, while the weights handed to BLAS
#: are then never subnormal and ``exp`` never returns one. What that saves depends on the kernel
#: (NumPy 2.4, AVX-512 core, ns per value in cache): float64 ``exp`` costs 0.6 on arguments with
#: a normal result, 8-9 where results are subnormal or about ``tiny``, 2-5 on ``-inf``; float32
#: ``exp`` 0.35 on any of them (its SIMD kernel takes every special case), float32 ``exp2`` 0.4,
#: 5 on ``-inf`` and 63 on subnormal results (the dense path therefore sums with ``exp``, never
#: ``exp2``). The sweep itself costs 0.05 (float32) to 0.08 ns (float64) a value.
UNDERFLOW = {np.dtype(t): math.log(float(np.finfo(t).tiny)) for t in (np.float32, np.float64)}


def flush_underflow(L, floor):
    """``L[L < floor] = -inf`` in place (one compiled sweep; returns ``L``)."""
    return _flush_compiled()(L, floor)


@functools.cache
def _flush_compiled():  # compiled on first use: localkit.nn takes this module's state without numba (~1 s)
    from .._jit import njit

    return njit(nogil=True, cache=True)(_flush)


def _flush(L, floor):
    for i in range(L.shape[0]):
        for j in range(L.shape[1]):
            if L[i, j] < floor:
                L[i, j] = -np.inf
    return L


def times_power_of_two(x, k):
    """``x * 2^k`` for an integer ``k``, exact up to overflow (to ``+-inf``) or underflow (to 0),
    as it should be, on arrays of any library: in factors of at most ``2^64`` or ``2^-64``,
    which float32 holds (the factor takes the array's dtype: a float32 array times ``2.0 ** 200``
    takes it as ``inf``)."""
    while k != 0:
        step = max(-64, min(64, k))
        x = x * 2.0 ** step
        k -= step
    return x


def merge_states(log_sums, means, xp=np):
    """Local means over disjoint parts of the samples (sample chunks, the terms of a sum of
    kernels) combined into one: ``log_sums`` (n, m) the parts' log weight sums, ``means``
    (n, m, p) their local means,

        log S = logsumexp_j l_j,    m = sum_j exp(l_j - log S) m_j

    (the online log-sum-exp's merge of two states, for ``m`` of them at once). A part without
    weight (``l = -inf``) weighs 0 and its mean is not read; a row without any has ``log S = -inf``
    and a NaN mean, for the empty-neighbourhood policy. Arrays of the namespace ``xp``."""
    top = xp.max(log_sums, axis=1)
    shift = xp.where(top > -math.inf, top, xp.zeros_like(top))
    w = xp.exp(log_sums - shift[:, None])
    total = xp.sum(w, axis=1)
    weighed = xp.where(w[:, :, None] > 0, means, xp.zeros_like(means)) * w[:, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        return shift + xp.log(total), xp.sum(weighed, axis=1) / total[:, None]


def logit_exponent(top_q, top_x, n_features, temperature, maxexp):
    """``k >= 0`` with ``|<q, x>| / (T 2^k) <= 2^(maxexp / 2)`` for every pair of queries and
    samples whose largest entries are ``top_q`` and ``top_x`` (``n_features`` of them, temperature
    ``T``; ``maxexp`` the dtype's, 1024 in float64, 128 in float32): softmax logits beyond the
    float range are streamed as ``logits / 2^k`` (:class:`OnlineLogSumExp`). Taken in log2, so that
    the bound cannot overflow itself; 0 where an entry is 0 or not finite (nothing to scale)."""
    if not (0 < top_q < math.inf and 0 < top_x < math.inf):
        return 0
    top = math.log2(top_q) + math.log2(top_x) + math.log2(n_features) - math.log2(temperature)
    return max(0, math.ceil(top - maxexp // 2))


def softmax_exponent(xp, bound, Q):
    """The ``exponent`` of the softmax kernel's pass over the queries ``Q`` (raw coordinates, arrays
    of ``xp``) against ``bound``'s samples: :func:`logit_exponent` at the
    largest entries of both (the samples' kept with the binding), the temperature ``h`` and the
    float range of ``Q``'s dtype (``maxexp``, from the array API's ``finfo``)."""
    if Q.shape[0] == 0:
        return 0
    top_x = bound.memo("abs_max", lambda: float(xp.max(xp.abs(bound.samples))))
    maxexp = math.ceil(math.log2(float(xp.finfo(Q.dtype).max)))  # 128 (float32, bfloat16), 1024 (float64)
    return logit_exponent(float(xp.max(xp.abs(Q))), top_x, bound.n_features, float(bound.h), maxexp)


def augment(values, xp=np):
    """``[values, 1]``: one matrix product then gives the weighted sums and the weight sum
    (``values`` an array of the namespace ``xp``, on its device)."""
    if xp is np:  # one array written once (a concatenation writes the column of ones twice)
        out = np.empty((values.shape[0], values.shape[1] + 1), dtype=values.dtype)
        out[:, :-1] = values
        out[:, -1] = 1.0
        return out
    from sklearn.utils._array_api import device

    return xp.concat([values, xp.ones((values.shape[0], 1), dtype=values.dtype, device=device(values))], axis=1)


class OnlineLogSumExp:
    """Running ``max`` and rescaled weighted sums for ``n_rows`` rows of width ``width + 1``, on
    arrays of the namespace ``xp`` (on ``device``): NumPy's in place, any other library's as new
    arrays, with the same arithmetic.

    ``exponent``: the log-weights arrive divided by ``2^exponent`` (logits that would overflow the
    float range are streamed as ``L / 2^k``); differences from the running maximum are multiplied
    back (exactly, for any ``k``) before ``exp``, so that the weights are exact and the sum's
    logarithm is ``2^k m + log S``.
    """

    def __init__(self, n_rows, width, dtype=np.float64, exponent=0, xp=np, device=None):
        kw = {} if device is None else {"device": device}
        self.xp, self.exponent = xp, exponent
        self.m = xp.full((n_rows,), -math.inf, dtype=dtype, **kw)
        self.S = xp.zeros((n_rows, width + 1), dtype=dtype, **kw)
        self.in_place = isinstance(self.S, np.ndarray)

    @staticmethod
    def step(m, block_max, exponent=0, xp=np):
        """The update rule, on arrays of any library with ``maximum``, ``where``, ``isfinite`` and
        ``exp`` (``xp``: NumPy, torch): for the running maxima ``m`` and a new block's row maxima,
        ``(m_new, s, alpha)`` with

            m_new = max(m, block_max),   s = m_new where finite, else 0,   alpha = exp(2^e (m - s)),

        after which the sums are ``alpha S + sum_j exp(2^e (L_j - s)) [v_j, 1]`` (``e``:
        ``exponent``). ``s = 0`` keeps a row that has seen no weight (``m_new = -inf``: ``alpha =
        0``, nothing to rescale) free of ``-inf - (-inf)``.
        """
        new = xp.maximum(m, block_max)
        shift = xp.where(xp.isfinite(new), new, 0.0)
        return new, shift, xp.exp(times_power_of_two(m - shift, exponent))

    def update(self, L, V_aug):
        """Add a block: ``L`` (rows, b) log-weights (overwritten on NumPy), ``V_aug`` (b, width + 1)."""
        if not self.in_place:
            self.m, shift, alpha = self.step(self.m, self.xp.max(L, axis=1), self.exponent, xp=self.xp)
            D = times_power_of_two(L - shift[:, None], self.exponent)
            floor = math.log(float(self.xp.finfo(D.dtype).smallest_normal))  # UNDERFLOW, of any float type
            D = self.xp.where(D < floor, -math.inf, D)
            self.S = self.S * alpha[:, None] + self.xp.exp(D) @ V_aug
            return
        with np.errstate(invalid="ignore", over="ignore"):
            self.m, shift, alpha = self.step(self.m, L.max(axis=1), self.exponent)
        self.S *= alpha[:, None]
        L -= shift[:, None]
        if self.exponent:
            with np.errstate(over="ignore", invalid="ignore"):
                np.ldexp(L, self.exponent, out=L)
        if L.dtype in UNDERFLOW:  # the engine's dtypes (a caller's float16 is summed as it comes)
            flush_underflow(L, UNDERFLOW[L.dtype])
        np.exp(L, out=L)
        self.S += L @ V_aug

    def log_shift(self, offset=None):
        """The rows' ``log`` scale of ``S``: ``2^k m`` (plus a per-row ``offset`` of the log-weights,
        ``log K = L + offset``), ``-inf`` (or beyond the float range, ``+-inf``) where a row has none."""
        with np.errstate(over="ignore", invalid="ignore"):
            shift = times_power_of_two(self.m, self.exponent)
            return shift if offset is None else shift + offset

    def result(self):
        """``(mean, log_weight_sum)``; rows without weight get NaN means and ``-inf`` sums."""
        w = self.S[:, -1]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = self.S[:, :-1] / w[:, None]
            log_sum = self.m + np.log(w)
        log_sum[~np.isfinite(self.m)] = -np.inf
        return mean, log_sum
