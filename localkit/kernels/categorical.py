"""Kernels of categorical columns (Li & Racine's mixed-data kernels), in log-space.

A categorical kernel compares levels, integer codes, column by column, with a smoothing
parameter ``0 <= lam <= 1`` (the ``bandwidth``); on several columns it is the product of the
columns' kernels, ``log K = sum_j log k_j(x*_j, x_j)``:

================  =====================  ==========================================  ===========
name              ``x* = x``             ``x* != x``                                 levels
================  =====================  ==========================================  ===========
aitchison_aitken  ``1 - lam``            ``lam / (c - 1)``                           unordered
wang_ryzin        ``1 - lam``            ``(1 - lam) / 2 * lam^|x* - x|``            ordered
================  =====================  ==========================================  ===========

``c`` is the number of levels the column shows in the samples the kernel is bound to (resolved
at bind time, as a bandwidth rule is; statsmodels' ``aitchison_aitken`` counts the same,
``np.unique(data[:, j]).size``), unless the kernel fixes its levels
(:meth:`Kernel.with_levels <localkit.Kernel.with_levels>`: those of all the samples of a dask
array, whose chunks are bound one by one). ``lam = 0`` weighs only equal levels (the cell means of the
frequency estimator); ``lam = 1`` gives the Aitchison-Aitken kernel ``0`` at equal levels and
the Wang-van Ryzin kernel ``0`` everywhere (an empty neighbourhood, handled by the engine's
policy): ``log 0 = -inf`` is a zero weight, as everywhere in the engine.

Neither kernel is a density in a continuous sense: a product kernel's density normalises its
continuous factors only and takes the categorical ones as they are, as statsmodels'
``KDEMultivariate`` does (the Aitchison-Aitken weights of one query sum to 1 over the ``c``
levels; the Wang-van Ryzin weights do not, by Wang and van Ryzin's definition).
"""
from __future__ import annotations

import math

import numpy as np

#: the categorical profiles: name -> ordered levels
CATEGORICAL_PROFILES = {"aitchison_aitken": False, "wang_ryzin": True}


def check_smoothing(bandwidth, name):
    """``bandwidth`` of a categorical kernel: a number or per-column array in ``[0, 1]``."""
    if isinstance(bandwidth, str) and bandwidth == "cv":
        raise ValueError(f"bandwidth='cv' of the {name!r} kernel is chosen by an estimator's fit (leave-one-out, "
                         "e.g. LocalMeanRegressor(kernel=K)); a bare kernel needs a number in [0, 1]")
    if isinstance(bandwidth, bool) or isinstance(bandwidth, str):
        raise ValueError(f"bandwidth of the {name!r} kernel is a smoothing parameter 0 <= lam <= 1 (a number or one "
                         f"per column), got {bandwidth!r}")
    try:
        lam = np.asarray(bandwidth, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"bandwidth of the {name!r} kernel must be a number or an array of numbers in [0, 1], "
                         f"got {bandwidth!r}") from None
    if lam.ndim > 1 or lam.size == 0 or not np.all((lam >= 0) & (lam <= 1)):
        raise ValueError(f"bandwidth of the {name!r} kernel must be in [0, 1] (a number or one per column), "
                         f"got {bandwidth!r}")
    return lam


def check_codes(codes, name, what="samples"):
    """Categorical columns hold integer codes (levels); anything else is refused."""
    if not np.all(np.isfinite(codes)) or not np.all(codes == np.round(codes)):
        raise ValueError(f"the {name!r} kernel compares levels: its columns (features) of the {what} must hold "
                         "integer codes, e.g. from sklearn.preprocessing.OrdinalEncoder")


class CategoricalColumns:
    """A categorical kernel bound to its columns: the smoothing ``lam`` and the levels ``c`` per
    column, and the constants of its log-weights, computed once.

    ``codes`` (n_samples, k) are the samples' integer codes on the kernel's columns (NumPy);
    ``seen``, if given, the codes of each column's levels (one array per column), fixed instead
    of those ``codes`` show.
    """

    def __init__(self, name, lam, codes, seen=None):
        self.name, self.ordered = name, CATEGORICAL_PROFILES[name]
        k = codes.shape[1]
        lam = np.broadcast_to(np.asarray(lam, dtype=np.float64), (k,)) if np.ndim(lam) == 0 or np.size(lam) == 1 \
            else np.asarray(lam, dtype=np.float64)
        if lam.shape != (k,):
            raise ValueError(f"bandwidth of the {name!r} kernel has {lam.size} entries for {k} columns (features); "
                             "give one number, or one per column")
        self.lam = lam
        self._seen = [np.unique(codes[:, j]) for j in range(k)] if seen is None else [np.unique(s) for s in seen]
        if len(self._seen) != k:
            raise ValueError(f"the {name!r} kernel fixes the levels of {len(self._seen)} columns for {k} columns")
        self.levels = np.array([seen.size for seen in self._seen])
        if not self.ordered and np.any(self.levels < 2):
            raise ValueError(f"the 'aitchison_aitken' kernel weighs another level lam / (c - 1), c the number of "
                             f"levels in the samples; column(s) {np.flatnonzero(self.levels < 2).tolist()} of its "
                             "features show a single level")

        def log(x):
            return math.log(x) if x > 0 else -math.inf

        self.log_same = [log(1.0 - v) for v in lam]
        if self.ordered:  # log((1 - lam) / 2) + |x* - x| log lam
            self.log_other = [log((1.0 - v) / 2.0) for v in lam]
            self.log_step = [log(v) for v in lam]
        else:  # log(lam / (c - 1))
            self.log_other = [log(v) - math.log(c - 1.0) for v, c in zip(lam, self.levels)]

    def log_weights(self, xp, Q, X):
        """``log K`` (b_q, b_s) of codes ``Q`` (b_q, k) against ``X`` (b_s, k), arrays of the
        namespace ``xp``, in ``Q``'s dtype (NumPy's float arrays in one compiled pass,
        :func:`~localkit.kernels.level_weights.level_log_weights`, the same arithmetic)."""
        if xp is np and isinstance(Q, np.ndarray) and isinstance(X, np.ndarray) and Q.dtype == X.dtype \
                and Q.dtype in (np.float32, np.float64):
            from .level_weights import level_log_weights

            k = Q.shape[1]
            step = self.log_step if self.ordered else [0.0] * k
            return level_log_weights(Q, np.ascontiguousarray(X.T), np.array(self.log_same, dtype=Q.dtype),
                                     np.array(self.log_other, dtype=Q.dtype), np.array(step, dtype=Q.dtype),
                                     self.ordered)
        return self._log_k(xp, [(Q[:, j:j + 1], X[None, :, j]) for j in range(Q.shape[1])], Q)

    def pair_log_weights(self, Q, X):
        """``log K`` (n,) of the pairs ``(Q[t], X[t])`` of codes (NumPy, (n, k) each), in ``Q``'s dtype."""
        return self._log_k(np, [(Q[:, j], X[:, j]) for j in range(Q.shape[1])], Q)

    def _log_k(self, xp, columns, Q):
        """The sum over the columns ``j`` of the log-weights of ``columns[j] = (q, x)``, arrays that broadcast."""
        L = None
        for j, (q, x) in enumerate(columns):
            same = q == x
            if self.ordered:
                with np.errstate(invalid="ignore"):  # 0 * -inf at equal levels (lam = 0): replaced below
                    other = xp.abs(q - x) * self.log_step[j] + self.log_other[j]
            else:
                other = xp.zeros(same.shape, dtype=Q.dtype, **_device(xp, Q)) + self.log_other[j]
            Lj = xp.where(same, xp.asarray(self.log_same[j], dtype=Q.dtype, **_device(xp, Q)), other)
            L = Lj if L is None else L + Lj
        return L

    def nearest_coordinates(self, codes):
        """Points whose euclidean distances rank the samples for the empty-neighbourhood policy:
        a level apart counts as one unit (unordered: one-hot codes over the levels seen, over
        ``sqrt 2``; ordered: the codes themselves)."""
        codes = np.asarray(codes, dtype=np.float64)
        if self.ordered:
            return codes
        parts = []
        for j, seen in enumerate(self._seen):
            parts.append((codes[:, j:j + 1] == seen[None, :]) / math.sqrt(2.0))
        return np.concatenate(parts, axis=1)


def level_tables(name, lam, levels):
    """``(log_k, dk)``: the kernel ``name`` at smoothing ``lam`` by level distance, and its
    derivative ``dk / dlam``, as arrays indexed by the distance ``d`` (an unordered kernel: 0 equal
    levels, 1 another; an ordered one: ``d = |x* - x|`` up to ``levels``, the largest distance;
    an unordered one: ``levels`` the number of levels ``c``):

    ================  ============  ==================================  ===================================
    name              ``d = 0``     ``d > 0``                           ``dk / dlam`` at ``d > 0``
    ================  ============  ==================================  ===================================
    aitchison_aitken  ``1 - lam``   ``lam / (c - 1)``                   ``1 / (c - 1)``
    wang_ryzin        ``1 - lam``   ``(1 - lam) / 2 lam^d``             ``(d lam^(d-1) (1 - lam) - lam^d) / 2``
    ================  ============  ==================================  ===================================

    and ``dk / dlam = -1`` at ``d = 0`` (the leave-one-out search's gradient,
    :class:`~localkit.models.kernel_learning.LooGradient`)."""
    if CATEGORICAL_PROFILES[name]:
        d = np.arange(levels + 1.0)
        with np.errstate(divide="ignore"):
            log_k = np.log((1 - lam) / 2) + d * np.log(lam)
        dk = (d * lam ** np.maximum(d - 1, 0) * (1 - lam) - lam ** d) / 2
    else:
        with np.errstate(divide="ignore"):
            log_k = np.array([0.0, np.log(lam) - np.log(levels - 1.0)])
        dk = np.array([0.0, 1.0 / (levels - 1.0)])
    with np.errstate(divide="ignore"):
        log_k[0], dk[0] = np.log1p(-lam), -1.0
    return log_k, dk


def _device(xp, a):
    if xp is np or isinstance(a, np.ndarray):
        return {}
    from sklearn.utils._array_api import device

    return {"device": device(a)}
