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
in blocks of ``b x n`` log-weights from the engine's bound kernel: memory ``O(b n)``, time ``O(n_q n (d + p))``
per evaluation (``O(n^2)`` for the leave-one-out error).
"""
from __future__ import annotations

import numpy as np
from sklearn.utils._param_validation import validate_params

from ..kernels import Kernel, get_profile
from ..kernels.profiles import PROFILES
from .bound import BoundKernel
from .options import EngineOptions, constraints

#: The profiles whose log is differentiable everywhere (``Profile.smooth``: no kink at 0, no
#: support's edge); their slope ``phi' = d log k / d u^2`` is the one stated beside each profile
#: (``Profile.slope_for``)
SMOOTH_PROFILES = tuple(name for name, profile in PROFILES.items() if profile.smooth)


def check_smooth_kernel(kernel):
    """The profile name, if its log is differentiable (a gradient exists everywhere)."""
    profile = get_profile(kernel)
    if not profile.smooth:
        raise ValueError(
            f"kernel must be one of {sorted(SMOOTH_PROFILES)} (a profile whose log is differentiable "
            f"everywhere, so that the reconstruction error has a gradient), got {kernel!r}"
        )
    return profile.name


def bind_points(points, kernel="gaussian", bandwidth=1.0, twins=None):
    """The decoder's points ``Z`` bound to the kernel ``(kernel, bandwidth)``, in float64: a
    :class:`BoundKernel` to keep where the points stay fixed (a fitted encoder's codes), so that the
    gradients at queries bind nothing. A ``BoundKernel`` given is returned as it is, after checking
    that it is that kernel."""
    name = check_smooth_kernel(kernel)
    if isinstance(points, BoundKernel):
        kern = points.kernel
        if kern.name_ != name or np.ndim(kern.bandwidth) or float(kern.bandwidth) != float(bandwidth):
            raise ValueError(f"points are bound to {kern!r}, not to kernel={name!r} with bandwidth={bandwidth!r}")
        return points
    return BoundKernel(Kernel(name, bandwidth=bandwidth), np.asarray(points, dtype=np.float64), twins=twins)


def _weight_block(bound, Q, rows, exclude_self):
    """``(phi', W)``: the profile's slope at each pair and the normalised weights of the queries
    ``Q[rows]`` against every point, from the engine's bound kernel (query ``i`` drops point ``i``
    when ``exclude_self``). A log-linear profile's slope is one constant: no distances needed."""
    profile = bound.kernel.profile
    u2 = 0.0 if profile.log_linear else bound.squared_distances(Q[rows])
    return profile.slope_for(np)(u2), bound.weights(Q[rows], exclude_self=exclude_self, row_offset=rows.start)


def _row_block(m, n, memory_budget):
    """Rows per block: four ``b x n`` float64 temporaries within the memory budget."""
    return int(max(1, min(m, EngineOptions(memory_budget=memory_budget).budget // (8 * 4 * n))))


@validate_params({"memory_budget": constraints()["memory_budget"], "per_query": ["boolean"]},
                 prefer_skip_nested_validation=True)
def reconstruction_gradient(points, values, queries=None, targets=None, kernel="gaussian", bandwidth=1.0,
                            memory_budget=None, per_query=False, twins=None):
    """``(error, gradient)`` of the local-mean reconstruction (see the module docstring).

    Parameters
    ----------
    points : (n, d) array ``Z``, or the :class:`BoundKernel` of :func:`bind_points` (points kept
        fixed: nothing bound per call); values : (n, p) array ``X``.
    queries, targets : (m, d) and (m, p) arrays, optional
        Without them: the leave-one-out error at the points and its gradient with respect to the
        points (shape (n, d)). With them: the summed error at the queries and its gradient with
        respect to the queries (shape (m, d)).
    kernel : "gaussian" or "cauchy"; bandwidth : float ``h``.
    per_query : bool, default=False
        With queries: return the error of each query, shape (m,), instead of their sum. Row
        ``q`` of the gradient depends on query ``q`` only, so each query can take its own steps.
    twins : array of shape (n,), optional
        Group ids of the leave-one-out: point ``i`` leaves out every point of its group (the
        codes of repeated rows of ``X``, which round-off may move apart); default: the points at
        its point (:mod:`localkit.engine.twins`).
    """
    bound = bind_points(points, kernel, bandwidth, twins)
    Z = bound.samples
    X = np.asarray(values, dtype=np.float64)
    loo = queries is None
    Q = Z if loo else np.asarray(queries, dtype=np.float64)
    T = X if loo else np.asarray(targets, dtype=np.float64)
    n, m = len(Z), len(Q)
    if loo and n < 2:
        raise ValueError(f"the leave-one-out error needs at least 2 points, got {n}")
    scale = (2.0 / n) if loo else 2.0
    block = _row_block(m, n, memory_budget)
    inv_h2 = 1.0 / (bandwidth * bandwidth)
    errors = np.zeros(m)
    grad = np.zeros_like(Q)
    for start in range(0, m, block):
        rows = slice(start, min(start + block, m))
        slope, W = _weight_block(bound, Q, rows, loo)
        F = W @ X
        R = F - T[rows]
        errors[rows] = np.einsum("ij,ij->i", R, R)
        B = R @ X.T
        B -= np.einsum("ij,ij->i", R, F)[:, None]
        B *= W
        B *= slope
        B *= 2.0 * scale * inv_h2
        grad[rows] += B.sum(axis=1)[:, None] * Q[rows] - B @ Z
        if loo:  # each point z_j is also a kernel centre in the other rows
            grad += B.sum(axis=0)[:, None] * Z - B.T @ Q[rows]
    if loo:
        return float(errors.sum() / n), grad
    return (errors if per_query else float(errors.sum())), grad


def local_mean_vjp(queries, points, values, upstream, kernel="gaussian", bandwidth=1.0, exclude_self=False,
                   memory_budget=None):
    """The gradients of ``sum_q g_q . f(q)`` through a local mean, with respect to its three inputs.

    ``f(q) = sum_j W_qj v_j`` with ``W_qj = K(q, z_j) / sum_l K(q, z_l)`` and ``log K = phi(|q - z|^2 /
    h^2)``. With ``B_qj = W_qj (g_q . v_j - g_q . f(q)) 2 phi'(u2_qj) / h^2``:

    .. math::

        \\partial_{q} = \\sum_j B_{qj} (q - z_j), \\qquad
        \\partial_{z_j} = -\\sum_q B_{qj} (q - z_j), \\qquad
        \\partial_{v_j} = \\sum_q W_{qj}\\, g_q

    (the vector-Jacobian product that backpropagation through a stack of local means needs).

    Parameters
    ----------
    queries : (m, d) array; points : (n, d) array, or its :func:`bind_points`; values : (n, p) array
    upstream : (m, p) array ``g``, the gradient of a loss with respect to ``f(queries)``.
    kernel : "gaussian" or "cauchy"; bandwidth : float ``h``.
    exclude_self : bool
        Query ``i`` drops point ``i`` (``m == n``): the leave-one-out local mean.

    Returns
    -------
    (grad_queries, grad_points, grad_values) of shapes (m, d), (n, d), (n, p).
    """
    bound = bind_points(points, kernel, bandwidth)
    Z = bound.samples
    Q, V, G = (np.asarray(a, dtype=np.float64) for a in (queries, values, upstream))
    m, n = len(Q), len(Z)
    if exclude_self and m != n:
        raise ValueError(f"exclude_self drops point i at query i, so it needs as many queries as points; "
                         f"got {m} queries and {n} points")
    inv_h2 = 1.0 / (bandwidth * bandwidth)
    grad_q, grad_z, grad_v = np.zeros_like(Q), np.zeros_like(Z), np.zeros_like(V)
    block = _row_block(m, n, memory_budget)
    for start in range(0, m, block):
        rows = slice(start, min(start + block, m))
        slope, W = _weight_block(bound, Q, rows, exclude_self)
        g = G[rows]
        B = g @ V.T
        B -= np.einsum("ij,ij->i", g, W @ V)[:, None]
        B *= W
        B *= slope
        B *= 2.0 * inv_h2
        grad_q[rows] = B.sum(axis=1)[:, None] * Q[rows] - B @ Z
        grad_z += B.T @ Q[rows]
        grad_z -= B.sum(axis=0)[:, None] * Z
        grad_v += W.T @ g
    return grad_q, -grad_z, grad_v


def _decode_chain(codes, values, queries, exclude_self, lowest):
    """``ys`` with ``ys[L] = queries`` and ``ys[l - 1]`` the local mean of level ``l - 1``'s codes at
    ``ys[l]`` (level 0: the values), for ``l - 1`` down to ``lowest`` (entries below it: None);
    ``codes`` bound (:func:`bind_points`)."""
    levels = [values] + [bound.samples for bound in codes]
    ys = [None] * len(levels)
    ys[-1] = np.asarray(queries, dtype=np.float64)
    for lev in range(len(codes), lowest, -1):
        ys[lev - 1] = codes[lev - 1].sums(ys[lev], levels[lev - 1], exclude_self=exclude_self).mean
    return ys


def _points(level):
    """A level's codes as an array (a bound level: its samples; level 0, the values, as it is)."""
    return level.samples if isinstance(level, BoundKernel) else level


def chained_reconstruction_gradient(codes, values, kernel="gaussian", bandwidth=1.0, memory_budget=None):
    """``(error, gradients)`` of the leave-one-out reconstruction through a stack of local-mean decoders.

    Level ``l`` (codes ``Z_l``, shape (n, q_l)) decodes into level ``l - 1`` (``Z_0 = X``, the values):
    ``f_l(y) = sum_j K(y, z_{l,j}) z_{l-1,j} / sum_j K(y, z_{l,j})``. Sample ``i`` is reconstructed by
    decoding its top code down the stack, every decoder leaving sample ``i`` out:

    .. math::

        y_{L,i} = z_{L,i}, \\quad y_{l-1,i} = f_{l,-i}(y_{l,i}), \\qquad
        E = \\frac{1}{n} \\sum_i |y_{0,i} - x_i|^2

    The gradient is backpropagated with :func:`local_mean_vjp`: each ``Z_l`` is a set of kernel
    centres (level ``l``) and the values of level ``l + 1``; the top codes are also the queries. With
    one level this is :func:`reconstruction_gradient` (to round-off).

    Parameters
    ----------
    codes : list of (n, q_l) arrays ``[Z_1, ..., Z_L]``; values : (n, p) array ``X``.
    kernel : "gaussian" or "cauchy"; bandwidth : float ``h`` (on every level's codes).

    Returns
    -------
    (error, [dE/dZ_1, ..., dE/dZ_L])
    """
    X = np.asarray(values, dtype=np.float64)
    n = len(X)
    if n < 2 or any(len(Z) != n for Z in codes):
        raise ValueError(f"every level needs the same n >= 2 samples as the values, got {[len(Z) for Z in codes]} "
                         f"codes for {n} values")
    codes = [bind_points(Z, kernel, bandwidth) for Z in codes]  # once per evaluation: the codes move
    ys = _decode_chain(codes, X, codes[-1].samples, exclude_self=True, lowest=0)
    levels = [X] + codes
    R = ys[0] - X
    upstream = (2.0 / n) * R
    grads = [np.zeros_like(Z.samples) for Z in codes]
    for lev in range(1, len(codes) + 1):
        gq, gz, gv = local_mean_vjp(ys[lev], levels[lev], _points(levels[lev - 1]), upstream, kernel, bandwidth,
                                    exclude_self=True, memory_budget=memory_budget)
        grads[lev - 1] += gz
        if lev >= 2:
            grads[lev - 2] += gv
        upstream = gq
    grads[-1] += upstream  # the top codes are the queries of the top decoder
    return float(np.mean(np.sum(R * R, axis=1))), grads


def chained_query_gradient(codes, values, queries, targets, kernel="gaussian", bandwidth=1.0,
                           memory_budget=None):
    """``(errors, gradient)`` of ``|t_q - f_1(f_2(... f_L(q)))|^2`` for each query ``q`` (top-level
    codes, shape (m, q_L)) against its target ``t_q`` (shape (m, p)), no sample left out.

    Row ``q`` depends on query ``q`` only (per-query errors, shape (m,)), so every query can take its
    own steps when encoding. ``codes`` may be their :func:`bind_points` (kept from a fit: nothing
    bound per call). The bottom level is :func:`reconstruction_gradient` at queries; the
    levels above backpropagate through :func:`local_mean_vjp`.
    """
    codes = [bind_points(Z, kernel, bandwidth) for Z in codes]
    X = np.asarray(values, dtype=np.float64)
    ys = _decode_chain(codes, X, queries, exclude_self=False, lowest=1)
    errors, upstream = reconstruction_gradient(codes[0], X, ys[1], targets, kernel=kernel, bandwidth=bandwidth,
                                               memory_budget=memory_budget, per_query=True)
    levels = [X] + codes
    for lev in range(2, len(codes) + 1):
        upstream = local_mean_vjp(ys[lev], levels[lev], _points(levels[lev - 1]), upstream, kernel, bandwidth,
                                  memory_budget=memory_budget)[0]
    return errors, upstream
