"""Prototype-centred weights: the eager side of the localization method.

Instead of a kernel centred on every query (lazy), ``R`` kernels are centred on prototypes
``c_r``, each with its own per-feature bandwidth ``h_r``; a sample's normalised weights

    w_r(x) = K_r(x, c_r) / sum_s K_s(x, c_s)

blend ``R`` local models (TSK fuzzy systems, normalised RBF networks, mixtures of experts).
The log-weights come from :class:`localkit.Kernel` and are normalised in log-space, so a point
far from every prototype still gets well-defined weights (those of its nearest prototypes)
instead of ``0 / 0``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from ..kernels import Kernel


def prototype_log_weights(X, centers, bandwidths, kernel="gaussian"):
    """``log K_r(x_i, c_r)`` of shape (n, R), with ``K_r`` the kernel of bandwidth ``bandwidths[r]``.

    ``X`` (n, d) and ``centers`` (R, d) are float arrays, ``bandwidths`` (R, d) positive. With
    the Gaussian profile and per-feature bandwidths this is the log of the product membership
    ``prod_k exp(-(x_k - c_rk)^2 / (2 h_rk^2))``. The loop is over the few prototypes; each
    step is one kernel block, centred on its prototype (no cancellation in the distances).
    """
    L = np.empty((len(X), len(centers)), dtype=X.dtype)
    origin = np.zeros((1, X.shape[1]), dtype=X.dtype)
    for r in range(len(centers)):
        kern = Kernel(kernel, bandwidth=bandwidths[r])
        h = kern.resolve_bandwidth(origin)
        log_k, offset = kern.log_weights(kern.scale(X - centers[r], h), origin)
        L[:, r] = log_k[:, 0] + offset
    return L


def prototype_weights(X, centers, bandwidths, kernel="gaussian"):
    """Normalised weights ``w_r(x_i)`` (n, R) and ``log sum_r K_r(x_i, c_r)`` (n,)."""
    L = prototype_log_weights(X, centers, bandwidths, kernel)
    log_norm = logsumexp(L, axis=1)
    return np.exp(L - log_norm[:, None]), log_norm
