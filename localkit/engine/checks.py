"""The checks of one engine pass, worded once for every backend (NumPy, array-API, dask)."""
from __future__ import annotations

import numpy as np


def check_exclude_self(exclude_self):
    """``exclude_self`` must be a bool (a string such as ``"yes"`` would be truthy)."""
    if not isinstance(exclude_self, (bool, np.bool_)):
        raise TypeError(f"exclude_self must be True or False, got {exclude_self!r}")


def check_pass(kernel, n_queries, n_samples, *, exclude_self=False, query_scale=None, sample_scale=None):
    """What a pass of ``kernel`` over ``n_samples`` samples at ``n_queries`` queries needs:
    leave-one-out queries that are the samples (at least 2), ``n_neighbors`` within the samples
    (one fewer when the query's own is left out), per-query scales only without ``n_neighbors``
    (which sets them) and per-sample scales not with a compact kNN kernel."""
    check_exclude_self(exclude_self)
    if exclude_self and n_queries != n_samples:
        raise ValueError(f"exclude_self=True drops sample i's weight at query i, so queries must be the samples; "
                         f"got {n_queries} queries for {n_samples} samples")
    if exclude_self and n_samples < 2:
        raise ValueError("exclude_self=True (leave-one-out) needs at least 2 samples, got 1")
    k = kernel.n_neighbors
    if k is not None and k + int(exclude_self) > n_samples:
        raise ValueError(f"n_neighbors must be <= n_samples{' - 1 (exclude_self)' if exclude_self else ''}="
                         f"{n_samples - int(exclude_self)}, got {k}")
    if query_scale is not None and k is not None:
        raise ValueError("query_scale cannot be combined with n_neighbors, which sets it")
    if sample_scale is not None and k is not None and kernel.compact:
        raise ValueError("sample_scale cannot be combined with a compact kNN kernel")


def check_weight_values(xp, c, n_samples):
    """``max c`` of finite sample weights ``c`` (an array of the namespace ``xp``), after
    checking their shape ``(n_samples,)``, that none is negative and that one is positive."""
    if tuple(c.shape) != (n_samples,):
        raise ValueError(f"sample_weight must have shape (n_samples,) = ({n_samples},), got {tuple(c.shape)}")
    if bool(xp.any(c < 0)):
        raise ValueError("sample_weight must be >= 0 everywhere")
    top = xp.max(c)
    if float(top) == 0:
        raise ValueError("sample_weight is zero everywhere; at least one sample must carry weight")
    return top
