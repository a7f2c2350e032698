"""What an engine pass returns, and the empty-neighbourhood policy applied to it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..exceptions import EmptyNeighbourhoodWarning, warn
from .options import DEFERRED


@dataclass
class LocalSums:
    """What one engine pass returns.

    mean : (n_queries, p) or (n_queries,) array, or None when no values were given
        ``sum_i w_i(x*) v_i``.
    log_weight_sum : (n_queries,) array
        ``log sum_j c_j K(x*, x_j)``; ``-inf`` for an empty neighbourhood.
    empty : (n_queries,) bool array
        Queries with no sample in the kernel's support (handled by the ``empty`` policy).
    omitted : (n_queries,) array or None
        Of a truncated pass (:func:`~localkit.engine.passes.neighbors.truncated_path`), per query a
        bound on the weight it left out relative to the weight it kept,
        ``(n - k) k(d_k / h) / sum_(j <= k) c_j k(d_j / h)``; None for the passes that leave nothing out.
    """

    mean: np.ndarray | None
    log_weight_sum: np.ndarray
    empty: np.ndarray
    omitted: np.ndarray | None = None

    @property
    def weight_sum(self):
        return np.exp(self.log_weight_sum)


def value_offset(xp, V):
    """A reference ``c`` per column of the values ``V`` (n, p): the paths sum ``V - c`` and the
    mean gets ``c`` back. A weighted sum of values far from 0 keeps only the digits of their
    size, not of their spread (float32 values near 1e5 lost 8% of their spread); about their
    mean it keeps the spread's. ``c`` is the column mean where it exceeds the spread about it
    (elsewhere centring gains nothing, and costs the round trip ``(v - c) + c`` its exactness),
    in float32 and narrower types; float64 keeps its sums as they were (16 digits spare the
    centring at any ordinary offset, and results stay bit for bit those of the references'
    arithmetic, e.g. mean shift's modes, whose ties scikit-learn breaks by their coordinates);
    zero where ``V - c`` would leave the float range."""
    if V.shape[0] == 0 or V.shape[1] == 0 or xp.finfo(V.dtype).bits >= 64:
        return xp.zeros((V.shape[1],), dtype=V.dtype)
    scale = xp.max(xp.abs(V), axis=0)
    scale = xp.where(scale > 0, scale, xp.ones_like(scale))
    c = xp.mean(V / scale, axis=0) * scale  # no overflow of the sum
    centred = V - c
    if not bool(xp.all(xp.isfinite(centred))):
        return xp.zeros_like(c)
    return xp.where(xp.abs(c) > xp.max(xp.abs(centred), axis=0), c, xp.zeros_like(c))


def finish(bound, queries, S, shift, values, exclude_self, live=False):
    """Normalise the sums ``S * exp(shift)`` of a path (of ``values``, a
    :class:`~localkit.engine.bound.BoundValues`, less its ``offset``), apply the
    empty-neighbourhood policy and shape the result, in the bound kernel's namespace. ``live``:
    the path knows every row carries weight (``S[:, -1] >= 1``: one block, its row maxima
    factored out), so that no row is looked for empty ones (a small fixed point's steps)."""
    xp = bound.xp
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = S[:, :-1] / S[:, -1:] + values.offset
        log_sum = shift + xp.log(S[:, -1]) + bound.log_weight_max
    empty = np.zeros(len(log_sum), dtype=bool) if live else ~(log_sum > -math.inf)  # NaN (0 / 0) counts as empty
    if not live and bool(xp.any(empty)):
        log_sum = xp.where(empty, -math.inf, log_sum)
        if bound.options.empty != DEFERRED:
            def nearest(idx):  # the values of the nearest samples that carry weight
                return xp.take(values.V, bound.nearest(queries, rows=idx, self_rows=idx if exclude_self else None),
                               axis=0)

            mean = apply_empty(xp, bound.options.empty, mean, empty, nearest, stacklevel=3)
    cast = (lambda a, t: a.astype(t, copy=False)) if xp is np else xp.astype
    if values.no_values:
        return LocalSums(None, cast(log_sum, bound.dtype), empty)
    mean = cast(mean, values.V.dtype)
    return LocalSums(mean[:, 0] if values.squeeze else mean, cast(log_sum, bound.dtype), empty)


def check_empty(policy, count, stacklevel, what="local means", n_queries=None):
    """The empty-neighbourhood policy's verdict on ``count`` empty queries, worded once for every
    backend and model: ``"raise"`` raises, ``"nan"`` warns that their ``what`` are NaN (the caller
    then writes NaN), ``"nearest"`` passes (the caller writes the nearest sample's value)."""
    if policy == "raise":
        raise ValueError(
            f"{count} queries have an empty neighbourhood (no sample inside the kernel's support); "
            "widen the bandwidth, use a non-compact kernel, or pass empty='nearest' or 'nan'"
        )
    if policy == "nan":
        extra = {} if n_queries is None else {"n_queries": n_queries}
        warn(EmptyNeighbourhoodWarning(f"some queries have an empty neighbourhood; their {what} are NaN "
                                       "(empty='nan'); the warning's n_empty says how many", n_empty=count, **extra))


def apply_empty(xp, policy, mean, rows, nearest, stacklevel):
    """The empty-neighbourhood policy on the empty ``rows`` (booleans) of ``mean`` (n, p), for every
    path and backend: :func:`check_empty`'s verdict, then NaN there (``"nan"``) or ``nearest(idx)``,
    the values of the nearest samples that carry weight for the empty rows ``idx`` (``"nearest"``).
    ``mean`` is not changed; arrays of the namespace ``xp``."""
    count = int(rows.sum()) if xp is np else int(xp.sum(xp.astype(rows, xp.int64)))
    if count == 0:
        return mean
    check_empty(policy, count, stacklevel=stacklevel + 1)
    if mean.shape[1] == 0:  # no values (a density): nothing to fill, no nearest sample to look for
        return mean
    if policy == "nan":
        return xp.where(rows[:, None], math.nan, mean)
    idx = xp.nonzero(rows)[0]
    values = nearest(idx)
    if xp is np:
        mean = mean.copy()
        mean[idx] = values
        return mean
    at = xp.cumulative_sum(xp.astype(rows, xp.int64)) - 1  # row i's place among the empty ones
    return xp.where(rows[:, None], xp.take(values, xp.clip(at, min=0), axis=0), mean)
