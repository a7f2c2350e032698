"""What an engine pass returns, and the empty-neighbourhood policy applied to it."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np


@dataclass
class LocalSums:
    """What one engine pass returns.

    mean : (n_queries, p) or (n_queries,) array, or None when no values were given
        ``sum_i w_i(x*) v_i``.
    log_weight_sum : (n_queries,) array
        ``log sum_j c_j K(x*, x_j)``; ``-inf`` for an empty neighbourhood.
    empty : (n_queries,) bool array
        Queries with no sample in the kernel's support (handled by the ``empty`` policy).
    """

    mean: np.ndarray | None
    log_weight_sum: np.ndarray
    empty: np.ndarray

    @property
    def weight_sum(self):
        return np.exp(self.log_weight_sum)


def finish(bound, queries, S, shift, V, exclude_self, no_values, squeeze):
    """Normalise the sums ``S * exp(shift)`` of a path, apply the empty-neighbourhood policy and
    shape the result."""
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = S[:, :-1] / S[:, -1:]
        log_sum = shift + np.log(S[:, -1]) + bound.log_weight_max
    empty = ~(log_sum > -np.inf)  # NaN (0 / 0) counts as empty too
    log_sum[empty] = -np.inf
    if empty.any():
        mean = _apply_empty_policy(bound, queries, mean, V, empty, exclude_self)
    dtype = bound.dtype
    if no_values:
        return LocalSums(None, log_sum.astype(dtype, copy=False), empty)
    mean = mean.astype(V.dtype, copy=False)
    return LocalSums(mean[:, 0] if squeeze else mean, log_sum.astype(dtype, copy=False), empty)


def _apply_empty_policy(bound, queries, mean, V, rows, exclude_self):
    policy = bound.options.empty
    n = int(rows.sum())
    if policy == "raise":
        raise ValueError(
            f"{n} queries have an empty neighbourhood (no sample inside the kernel's support); "
            "widen the bandwidth, use a non-compact kernel, or pass empty='nearest' or 'nan'"
        )
    mean = np.array(mean, copy=True)
    if policy == "nan":
        warnings.warn(f"{n} queries have an empty neighbourhood; their local means are NaN "
                      "(empty='nan')", RuntimeWarning, stacklevel=4)
        mean[rows] = np.nan
        return mean
    idx = np.flatnonzero(rows)
    mean[idx] = V[bound.nearest(queries, rows=idx, self_rows=idx if exclude_self else None)]
    return mean
