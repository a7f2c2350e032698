"""Weighted moments at each query, for local polynomial models and local PCA.

For features ``phi_i`` (p,) and optional targets ``y_i`` (t,), one engine pass gives

    M0(x*) = sum_i K(x*, x_i)                       (the weight sum, in log-space)
    M1(x*) = sum_i w_i(x*) phi_i                     (p,)
    M2(x*) = sum_i w_i(x*) phi_i phi_i^T             (p, p)
    MY(x*) = sum_i w_i(x*) phi_i y_i^T               (p, t)

with normalised weights ``w_i = K(x*, x_i) / M0``: the moments are local means of the products
``phi phi^T`` and ``phi y^T`` (only the upper triangle of ``phi phi^T`` is streamed). They are
moments about the features' origin: a covariance ``M2 - M1 M1^T`` from them loses
``(|M1| / local spread)^2`` of the float's digits, so centre the features near the queries, or
take the samples' covariance about each query from :func:`localkit.engine.local_covariance`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import check_array
from .local_mean import local_sums


@dataclass
class LocalMoments:
    M1: np.ndarray
    M2: np.ndarray
    MY: np.ndarray | None
    log_weight_sum: np.ndarray
    empty: np.ndarray

    def covariance(self):
        """The weighted covariance ``M2 - M1 M1^T`` of the features at each query."""
        return self.M2 - self.M1[:, :, None] * self.M1[:, None, :]


def local_moments(queries, samples, features=None, targets=None, kernel="gaussian", bandwidth=1.0,
                  n_neighbors=None, exclude_self=False, **options):
    """Weighted first and second moments of ``features`` (default: the samples) at each query.

    ``options`` are those of :func:`localkit.engine.local_sums`. Returns :class:`LocalMoments`.
    """
    samples = np.asarray(samples)
    phi = samples if features is None else check_array(features, "features", ndim=(2,))
    if len(phi) != len(samples):
        raise ValueError(f"features has {len(phi)} rows but samples has {len(samples)}; they must match")
    n, p = phi.shape
    iu = np.triu_indices(p)
    parts = [phi, (phi[:, :, None] * phi[:, None, :])[:, iu[0], iu[1]]]
    t = 0
    if targets is not None:
        Y = check_array(targets, "targets", ndim=(1, 2))
        Y = Y.reshape(n if len(Y) == n else len(Y), -1)
        if len(Y) != n:
            raise ValueError(f"targets has {len(Y)} rows but samples has {n}; they must match")
        t = Y.shape[1]
        parts.append((phi[:, :, None] * Y[:, None, :]).reshape(n, p * t))
    values = np.concatenate(parts, axis=1)
    out = local_sums(queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self, **options)
    mean = out.mean
    M1 = mean[:, :p]
    n_tri = len(iu[0])
    M2 = np.empty((len(mean), p, p), dtype=mean.dtype)
    M2[:, iu[0], iu[1]] = mean[:, p:p + n_tri]
    M2[:, iu[1], iu[0]] = mean[:, p:p + n_tri]
    MY = mean[:, p + n_tri:].reshape(len(mean), p, t) if targets is not None else None
    return LocalMoments(M1, M2, MY, out.log_weight_sum, out.empty)
