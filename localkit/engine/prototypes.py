"""Prototype-centred weights: the eager side of the localization method.

Instead of a kernel centred on every query (lazy), ``R`` Gaussian kernels are centred on
prototypes ``c_r``, each with its own per-feature bandwidth ``s_r``; a sample's normalised weights

    w_r(x) = K_r(x) / sum_t K_t(x),    log K_r(x) = -|u_r|^2 / 2,    u_rk = (x_k - c_rk) / s_rk,

blend ``R`` local models (TSK fuzzy systems, normalised RBF networks, mixtures of experts).
The weights depend only on the differences ``log K_r - log K_q``, so they are computed from
those differences, for queries at any distance: far from every prototype each ``|u_r|^2`` is
huge (or overflows, and every ``K_r`` underflows to 0) while the differences still single out
the nearest prototype(s), whose blend is then the answer, never ``0 / 0``.
"""
from __future__ import annotations

import numpy as np


def _ratio(a, b, shift):
    """``a / b * 2^shift`` without overflow or underflow on the way (the mantissas' ratio lies
    in (1/2, 2); only the final power of two can leave the float range)."""
    ma, ea = np.frexp(a)
    mb, eb = np.frexp(b)
    return np.ldexp(ma / mb, ea - eb + shift)


def prototype_weights(X, centers, bandwidths):
    """Normalised Gaussian weights ``w_r(x_i)``, shape (n, R).

    ``X`` (n, d) and ``centers`` (R, d) are finite float arrays, ``bandwidths`` (R, d) positive;
    ``K_r(x) = prod_k exp(-(x_k - c_rk)^2 / (2 s_rk^2))``, the product of per-feature Gaussians.

    With ``q`` the nearest prototype (smallest ``|u_q|``), ``w_r = exp(-D_r / 2) / sum_t
    exp(-D_t / 2)`` where ``D_r = |u_r|^2 - |u_q|^2 = sum_k (u_rk - u_qk)(u_rk + u_qk) >= 0``:
    a softmax that holds whatever the size of ``|u|^2``. ``u`` is computed times ``2^-F`` per
    query, ``F >= 0`` bringing the nearest prototype's offsets to order 1, so that no square
    overflows. Where two prototypes share a width ``s_k``, ``u_rk - u_qk = (c_qk - c_rk) / s_k``
    comes from the centres, exact even where ``x_k - c_rk`` and ``x_k - c_qk`` round to the same
    number (``|x| >> |c_r - c_q|``, where the nearest rule would otherwise tie with the others),
    and ``u_rk + u_qk = ((x_k - c_rk) + (x_k - c_qk)) / s_k`` with one rounding (near the
    midpoint of two narrow rules, where ``u_rk`` and ``-u_qk`` are huge and nearly equal).
    """
    with np.errstate(over="ignore", under="ignore"):
        half = X[:, None, :] / 2 - centers / 2  # (x - c) / 2: cannot overflow
        mx, ex = np.frexp(half)
        es = np.frexp(bandwidths)[1]
        # |u_rk| < 2^(ex - es + 2): F is the nearest prototype's largest such exponent, or 0, so
        # that prototypes at |u| of order 1 keep finite squares next to a query on a centre
        F = np.maximum(np.where(mx != 0, ex - es, 0).max(axis=2).min(axis=1), 0)[:, None, None]
        U = _ratio(half, bandwidths, 1 - F)  # u 2^-F: order 1 for the nearest, inf for the hopelessly far
        q = np.argmin(np.sum(U * U, axis=2), axis=1)
        rows = np.arange(len(X))
        Uq, hq = U[rows, q][:, None], half[rows, q][:, None]
        same = bandwidths[q][:, None] == bandwidths
        du = np.where(same, _ratio(centers[q][:, None] / 2 - centers / 2, bandwidths, 1 - F), U - Uq)
        su = np.where(same, _ratio(half / 2 + hq / 2, bandwidths, 2 - F), U + Uq)
        D = np.sum(du * su, axis=2)  # (|u_r|^2 - |u_q|^2) 2^-2F, +inf for the far ones
        D -= D.min(axis=1, keepdims=True)  # q came from rounded norms: a tie may hide a nearer one
        W = np.exp(-0.5 * np.ldexp(D, 2 * F[:, :, 0]))  # K_r / max_t K_t = exp(-D_r / 2)
    return W / W.sum(axis=1, keepdims=True)
