"""The checks of one engine pass, worded once for every backend (NumPy, array-API, dask)."""
from __future__ import annotations

import math

import numpy as np

from .._validation import check_array, empty_input, not_finite, wrong_features, wrong_ndim


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
    if kernel.composite and (query_scale is not None or sample_scale is not None):
        name = "query_scale" if query_scale is not None else "sample_scale"
        raise ValueError(f"{name}: per-point bandwidth factors scale one bandwidth; {kernel!r} has one per factor "
                         "(a kernel on groups of columns)")
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


# -- arrays of any namespace ----------------------------------------------------------------------
def as_floats(xp, a, name, *, like=None, ndim=(1, 2), dtype=None, finite=True):
    """``a`` as a finite, non-empty floating array of the namespace ``xp`` with ``ndim``
    dimensions: NumPy's :func:`~localkit._validation.check_array` (float32 kept, anything else
    float64, or ``dtype``); on another namespace the same checks on the array's device (host
    input moved to ``like``'s device), integers and booleans as floats. ``finite=False``: the
    values are not scanned for NaN or infinity (a caller whose next step checks them)."""
    if xp is np:
        return check_array(a, name, ndim=ndim, dtype=dtype, finite=finite)
    from sklearn.utils._array_api import device

    if like is not None:
        a = xp.asarray(np.asarray(a) if isinstance(a, (list, tuple)) else a, device=device(like))
    if not xp.isdtype(a.dtype, "real floating"):
        if not xp.isdtype(a.dtype, ("integral", "bool")):
            raise ValueError(f"{name} must hold real numbers, got dtype {a.dtype}")
        a = xp.astype(a, xp.float32 if like is not None and like.dtype == xp.float32 else xp.float64)
    if a.ndim not in ndim:
        raise ValueError(wrong_ndim(name, ndim, a.shape))
    if a.shape[0] == 0:
        raise ValueError(empty_input(name, a.shape))
    if finite and not bool(xp.all(xp.isfinite(a))):
        raise ValueError(not_finite(name))
    return a if dtype is None else xp.astype(a, dtype)


def as_points(xp, a, name, *, like=None, n_features=None, dtype=None, finite=True):
    """A 2-D ``(n, d)`` array of points of the namespace ``xp`` (1-D input: ``n`` points in 1-D),
    checked by :func:`as_floats`, with ``n_features`` features if given."""
    P = as_floats(xp, a, name, like=like, dtype=dtype, finite=finite)
    if P.ndim == 1:
        P = xp.reshape(P, (-1, 1))
    if P.shape[1] == 0:
        raise ValueError(f"{name} has no features (shape {tuple(P.shape)})")
    if n_features is not None and P.shape[1] != n_features:
        raise ValueError(wrong_features(name, P.shape[1], n_features))
    return P


def check_scale(xp, scale, n, name, like=None):
    """``None`` or a non-negative array of shape ``(n,)`` (per-point bandwidth factors); on a
    device in ``like``'s dtype."""
    if scale is None:
        return None
    scale = as_floats(xp, scale, name, like=like, ndim=(1,))
    if tuple(scale.shape) != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {tuple(scale.shape)}")
    if bool(xp.any(scale < 0)):
        raise ValueError(f"{name} must be >= 0")
    return scale if xp is np or like is None else xp.astype(scale, like.dtype)


def check_sample_weight(xp, sample_weight, n_samples, like):
    """``(c / max c, log max c)`` in ``like``'s dtype, or ``(None, 0)`` without weights: the local
    mean is invariant to the scale of the weights, and weights in ``[0, 1]`` never overflow the sums."""
    if sample_weight is None:
        return None, 0.0
    c = as_floats(xp, sample_weight, "sample_weight", like=like, ndim=(1,))
    top = float(check_weight_values(xp, c, n_samples))
    c = (c / top).astype(like.dtype, copy=False) if xp is np else xp.astype(c / top, like.dtype)
    return c, float(np.log(top))


def log_of_weights(xp, weight):
    """``log c`` of sample weights (``-inf`` where zero: never a sample's share), or None."""
    if weight is None:
        return None
    if xp is np:
        with np.errstate(divide="ignore"):
            return np.log(weight)
    return xp.where(weight > 0, xp.log(xp.where(weight > 0, weight, xp.ones_like(weight))), -math.inf)
