"""Squared distances of a block of queries against a block of samples, the numbers a kernel's
log-weights are formed from (:meth:`localkit.Kernel.log_weights`), stated once for every array
library: NumPy on the host (``xp`` the ``numpy`` module itself) and any array-API namespace
(PyTorch on a device, NumPy through ``algorithm="streamed"``).

* The euclidean metric by one matrix product, ``|q|^2 + |x|^2 - 2 q.x``, whose absolute error is
  a few units of round-off of ``|q|^2 + |x|^2`` (the engine recentres blocks so that this stays
  small: :mod:`localkit.engine.query_blocks`).
* The profiles with a kink at ``u = 0`` (Laplacian), whose square root would show that error: on
  the host the product with the near pairs formed again from differences
  (:func:`refined_sq_distances`); elsewhere from differences (a scatter into chosen pairs is not
  part of the array API).
* :func:`exact_sq_distances`: from coordinate differences (SciPy's ``cdist`` on the host, a sum
  feature by feature elsewhere), for far blocks, other norms, and a zero per-point bandwidth.
"""
from __future__ import annotations

import numpy as np

#: :func:`refined_sq_distances` forms again from differences the pairs whose expanded squared
#: distance is below this share of ``|q|^2 + |x|^2`` (the expansion's round-off is a few units of
#: it), and takes :func:`exact_sq_distances` for a block where more than ``REFINE_SHARE`` of the
#: pairs are such (points far from their centre)
REFINE, REFINE_SHARE = 2.0 ** -6, 1.0 / 8


def row_sq(A, xp=np):
    """``|a|^2`` of each row of ``A`` (on the host by ``einsum``, as the engine's kept norms)."""
    return np.einsum("ij,ij->i", A, A) if xp is np else xp.sum(A * A, axis=1)


def sq_distances(Q, X, kernel, *, q_sq=None, x_sq=None, exact=False, xp=np):
    """Squared distances of ``kernel``'s metric between the rows of ``Q`` (b_q, d) and ``X``
    (b_s, d): from differences where ``exact``, for metrics other than the euclidean, and (off the
    host) for profiles with a kink at 0; else the matrix product (the near pairs refined on the
    host, :func:`refined_sq_distances`). ``q_sq``, ``x_sq``: the rows' squared norms, if known."""
    kinked = kernel.profile.exact_distance
    if exact or kernel.metric != "euclidean" or (kinked and xp is not np):
        return exact_sq_distances(Q, X, kernel, xp)
    q_sq = row_sq(Q, xp) if q_sq is None else q_sq
    x_sq = row_sq(X, xp) if x_sq is None else x_sq
    if kinked:
        return refined_sq_distances(Q, X, q_sq, x_sq, kernel)
    if xp is not np:  # out of place: autograd keeps what in-place steps would overwrite
        return xp.clip(-2.0 * (Q @ X.T) + q_sq[:, None] + x_sq, min=0.0)
    u2 = Q @ X.T
    u2 *= -2.0
    u2 += q_sq[:, None]
    u2 += x_sq
    return np.maximum(u2, 0.0, out=u2)


def refined_sq_distances(Q, X, q_sq, x_sq, kernel):
    """Squared euclidean distances ``|q|^2 + |x|^2 - 2 q.x`` by one matrix product, the pairs where
    that is below ``REFINE (|q|^2 + |x|^2)`` (near-duplicates, whose expansion is mostly round-off)
    formed again from differences: every pair then has a relative error within a few units of
    round-off over ``REFINE`` (64x those of :func:`exact_sq_distances`; ~1e-14 in float64), at the
    speed of the product. For the profiles with a kink at ``u = 0`` (Laplacian: measured 0.07 G
    pairs/s through SciPy's ``cdist`` against 0.64 for the Gaussian's product, d = 32, float32;
    0.33 with the near pairs found and refined in one compiled pass,
    :func:`~localkit.kernels.near_pairs.refine_near_pairs`); ``kernel`` (euclidean) for the blocks
    left to :func:`exact_sq_distances`. NumPy arrays."""
    from .near_pairs import refine_near_pairs

    u2 = Q @ X.T
    if not refine_near_pairs(u2, Q, X, q_sq.astype(u2.dtype, copy=False), x_sq.astype(u2.dtype, copy=False),
                             REFINE, int(REFINE_SHARE * u2.size)):
        return exact_sq_distances(Q, X, kernel)
    return u2


def exact_sq_distances(Q, X, kernel, xp=np):
    """Squared distances of ``kernel``'s metric from coordinate differences (no cancellation far
    from the origin): on the host by SciPy's ``cdist`` (for "precomputed", ``Q`` holds the
    distances themselves); on other libraries summed feature by feature, in the order of the
    compiled passes, and cosine as ``(1 - <q, x> / (|q| |x|))^2``."""
    if xp is not np:
        return summed_sq_distances(Q, X, kernel, xp)
    from scipy.spatial.distance import cdist  # here: localkit.nn does without it (~0.5 s to import)

    if kernel.metric == "precomputed":
        D = np.asarray(Q, dtype=np.float64)
        return (D * D).astype(Q.dtype, copy=False)
    if kernel.metric == "euclidean":
        u2 = cdist(Q, X, metric="sqeuclidean")
    else:
        metric, kwargs = kernel.scipy_metric
        D = cdist(Q, X, metric=metric, **kwargs)
        u2 = D * D
    with np.errstate(over="ignore"):  # a float32 distance^2 beyond 3.4e38 is inf: a zero weight, as it should
        return u2.astype(Q.dtype, copy=False)


def summed_sq_distances(Q, X, kernel, xp):
    """Squared distances of ``kernel``'s metric from differences summed feature by feature (the
    order of the compiled passes, whose edge tests and neighbour ties they reproduce), on any array
    library; cosine as ``(1 - <q, x> / (|q| |x|))^2``."""
    metric = kernel.metric
    if metric == "cosine":
        norms = xp.sqrt(xp.sum(Q * Q, axis=1))[:, None] * xp.sqrt(xp.sum(X * X, axis=1))[None, :]
        D = xp.clip(1 - (Q @ X.T) / norms, min=0.0, max=2.0)
        return D * D
    if metric == "chebyshev":
        acc = None
        for j in range(Q.shape[1]):
            a = xp.abs(Q[:, j:j + 1] - X[None, :, j])
            acc = a if acc is None else xp.maximum(acc, a)
        return acc * acc
    acc = 0.0  # each term added as an unnamed temporary, which NumPy adds in place (1.25x faster)
    for j in range(Q.shape[1]):
        t = Q[:, j:j + 1] - X[None, :, j]
        if metric == "euclidean":
            acc = acc + t * t
        elif metric == "manhattan" or kernel.p == 1:
            acc = acc + xp.abs(t)
        else:
            acc = acc + xp.abs(t) ** kernel.p
    if metric == "euclidean":
        return acc
    if metric == "minkowski" and kernel.p != 1:
        return acc ** (2.0 / kernel.p)
    return acc * acc


def rescale(u2, q_scale=None, s_scale=None, xp=np):
    """``u^2 / (q_i s_j)^2`` for per-query scales ``q_scale`` (b_q,) and per-sample ones
    ``s_scale`` (b_s,) (NumPy's ``u2`` in place); a zero per-point bandwidth counts distance 0
    fully (``0 / 0``: 0) and every other distance not at all (``inf``)."""
    if q_scale is None and s_scale is None:
        return u2
    with np.errstate(divide="ignore", invalid="ignore"):  # (also for namespaces that wrap NumPy)
        if xp is not np:  # out of place, for autograd
            if q_scale is not None:
                u2 = u2 / (q_scale * q_scale)[:, None]
            if s_scale is not None:
                u2 = u2 / (s_scale * s_scale)
            return xp.where(xp.isnan(u2), 0.0, u2)
        if q_scale is not None:
            u2 /= (q_scale * q_scale)[:, None]
        if s_scale is not None:
            u2 /= s_scale * s_scale
    return np.nan_to_num(u2, copy=False, nan=0.0, posinf=np.inf)


__all__ = ["REFINE", "REFINE_SHARE", "exact_sq_distances", "refined_sq_distances", "rescale", "row_sq", "sq_distances",
           "summed_sq_distances"]
