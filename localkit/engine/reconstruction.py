"""The reconstruction error of a local mean and its gradient with respect to the kernel's points.

The decoder is the local mean ``f(z) = sum_j K(z, z_j) x_j / sum_j K(z, z_j)`` of values ``x_j``
attached to points ``z_j``, with ``log K = phi(|z - z_j|^2 / h^2)`` from a kernel profile. Two errors:

* leave-one-out, the points themselves move (unsupervised kernel regression):
  ``E(Z) = (1/n) sum_i |x_i - f_{-i}(z_i)|^2``, gradient with respect to every ``z_k``;
* at queries (encoding new data): ``E(Q) = sum_q |t_q - f(q)|^2``, gradient with respect to the queries.

Write ``W`` for the normalised weights, ``r_q = f(q) - t_q`` and
``B_qj = c W_qj (r_q . x_j - r_q . f(q)) 2 phi'(u2_qj) / h^2`` (``c`` = 2/n or 2). Then
``dE/dq = sum_j B_qj (q - z_j)`` and, when the queries are the points, each ``z_j`` also gets
``-sum_q B_qj (z_q - z_j)``. ``B`` needs the weights of a whole row, so rows of queries are taken
in blocks of ``b x n`` log-weights from the kernel profile: memory ``O(b n)``, time ``O(n_q n (d + p))``
per evaluation (``O(n^2)`` for the leave-one-out error).
"""
from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from ..kernels import get_profile
from .blocks import DEFAULT_MEMORY_BUDGET

#: ``d log k / d u^2`` of the profiles whose log is differentiable everywhere.
LOG_PROFILE_SLOPES = {
    "gaussian": lambda u2: -0.5,
    "cauchy": lambda u2: -1.0 / (1.0 + u2),
}


def check_smooth_kernel(kernel):
    """The profile name, if its log is differentiable (a gradient exists everywhere)."""
    name = get_profile(kernel).name
    if name not in LOG_PROFILE_SLOPES:
        raise ValueError(
            f"kernel must be one of {sorted(LOG_PROFILE_SLOPES)} (a profile whose log is differentiable "
            f"everywhere, so that the reconstruction error has a gradient), got {kernel!r}"
        )
    return name


def reconstruction_gradient(points, values, queries=None, targets=None, kernel="gaussian", bandwidth=1.0,
                            memory_budget=None, per_query=False):
    """``(error, gradient)`` of the local-mean reconstruction (see the module docstring).

    Parameters
    ----------
    points : (n, d) array ``Z``; values : (n, p) array ``X``.
    queries, targets : (m, d) and (m, p) arrays, optional
        Without them: the leave-one-out error at the points and its gradient with respect to the
        points (shape (n, d)). With them: the summed error at the queries and its gradient with
        respect to the queries (shape (m, d)).
    kernel : "gaussian" or "cauchy"; bandwidth : float ``h``.
    per_query : bool, default=False
        With queries: return the error of each query, shape (m,), instead of their sum. Row
        ``q`` of the gradient depends on query ``q`` only, so each query can take its own steps.
    """
    name = check_smooth_kernel(kernel)
    profile, slope = get_profile(name), LOG_PROFILE_SLOPES[name]
    Z = np.asarray(points, dtype=np.float64)
    X = np.asarray(values, dtype=np.float64)
    loo = queries is None
    Q = Z if loo else np.asarray(queries, dtype=np.float64)
    T = X if loo else np.asarray(targets, dtype=np.float64)
    n, m = len(Z), len(Q)
    if loo and n < 2:
        raise ValueError(f"the leave-one-out error needs at least 2 points, got {n}")
    scale = (2.0 / n) if loo else 2.0
    budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
    block = int(max(1, min(m, budget // (8 * 4 * n))))  # four b x n temporaries
    inv_h2 = 1.0 / (bandwidth * bandwidth)
    errors = np.zeros(m)
    grad = np.zeros_like(Q)
    for start in range(0, m, block):
        rows = slice(start, min(start + block, m))
        u2 = cdist(Q[rows], Z, "sqeuclidean") * inv_h2
        L = profile.log_k(u2)
        if loo:
            i = np.arange(rows.start, rows.stop)
            L[i - rows.start, i] = -np.inf
        L -= L.max(axis=1, keepdims=True)
        W = np.exp(L)
        W /= W.sum(axis=1, keepdims=True)
        F = W @ X
        R = F - T[rows]
        errors[rows] = np.einsum("ij,ij->i", R, R)
        B = R @ X.T
        B -= np.einsum("ij,ij->i", R, F)[:, None]
        B *= W
        B *= slope(u2) * (2.0 * scale * inv_h2)
        grad[rows] += B.sum(axis=1)[:, None] * Q[rows] - B @ Z
        if loo:  # each point z_j is also a kernel centre in the other rows
            grad += B.sum(axis=0)[:, None] * Z - B.T @ Q[rows]
    if loo:
        return float(errors.sum() / n), grad
    return (errors if per_query else float(errors.sum())), grad
