"""Bandwidth selection by exact leave-one-out cross-validation (``bandwidth="cv"``).

The leave-one-out prediction at sample ``i`` is the local estimate with sample ``i``'s own
weight dropped (``exclude_self`` in the engine): exact, and as cheap as one fit. For a local
polynomial this equals the smoother-diagonal identity ``(f_i - S_ii y_i) / (1 - S_ii)``.
Repeated rows: every copy of sample ``i``'s row (its point and its target) is left out with it;
samples at one point with distinct targets (lattice data) are distinct observations, left out one
at a time (:mod:`localkit.engine.twins`).
scikit-learn's ``LeaveOneOut`` splits rows, but for a kernel a twin at distance 0 is the same
observation: left in, it predicts its own target and the selected bandwidth collapses
(``LocalMeanRegressor(kernel="gaussian")`` on diabetes with every row twice chose h = 0.0015,
the grid's smallest, instead of the 0.046 of the rows as given; now 0.046 with or without the
copies). A query whose neighbourhood is empty takes the target of its nearest sample at another
point, never its own.
The scores:

* regression: the mean squared error ``mean_i (y_i - f_{-i}(x_i))^2``;
* classification: the Brier score ``mean_i |onehot(y_i) - p_{-i}(x_i)|^2`` (a proper score
  that, unlike the log-loss, stays finite when a class gets probability 0);
* with the estimator's ``sample_weight_`` ``c``: the fits weighted as the estimator's own and
  the means ``sum_i c_i (...) / sum_i c_i`` about a grid from the weighted spread, so that
  integer weights choose the bandwidth of the repeated rows (whose copies leave out together);
* an estimator that defines ``_loo_loss(X, y, bandwidth)`` (the local polynomial) scores itself.

The search: a log-spaced grid of ``GRID`` isotropic bandwidths from ``s / 100`` to ``10 s``
(``s`` the root total variance of the features), then a bounded scalar search of ``log h``
between the neighbours of the best grid point; the best bandwidth evaluated is returned, so it
is never worse than the grid. The bandwidth is isotropic: standardise features of different
units first, or learn per-feature bandwidths with
``MetricLearningKernelRegressor(form="diagonal")``.

Adaptive bandwidths: a *balloon* bandwidth varies with the query (``n_neighbors=k``: ``h(x*)``
is the distance to the k-th nearest sample); a *sample-point* bandwidth varies with the sample,
``h_i`` = the distance of sample ``i`` to its k-th nearest sample at another point
(:func:`sample_point_scales`, passed to the engine as ``sample_scale``:
``K_i(x*) = k(|x* - x_i| / (h h_i))``).
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import minimize_scalar

from ..engine import local_sums
from ..engine import neighbors as nb
from ..engine import twin_groups
from .._validation import check_n_neighbors, check_points
from .kernel_learning import values_of

GRID = 24


def loo_loss(estimator, X, y, bandwidth):
    """The leave-one-out score of ``estimator``'s kernel with a fixed ``bandwidth`` (weighted by
    its ``sample_weight_``, if any)."""
    if hasattr(estimator, "_loo_loss"):
        return estimator._loo_loss(X, y, bandwidth)
    values = values_of(estimator, y, X.dtype)  # one-hot labels (several outputs side by side) or the targets
    c = getattr(estimator, "sample_weight_", None)
    # the metric the kernel measures on X (X comes mapped by the estimator's _fit_metric)
    metric, power = (estimator._kernel_metric() if hasattr(estimator, "_kernel_metric")
                     else (estimator.metric, getattr(estimator, "p", 2)))
    p = local_sums(None, X, values, estimator.kernel, bandwidth, None, True, metric=metric, p=power,
                   algorithm=estimator.algorithm, n_jobs=estimator.n_jobs, sample_weight=c,
                   sample_scale=getattr(estimator, "sample_scale_", None)).mean
    return float(np.average(np.sum((p - values).reshape(len(X), -1) ** 2, axis=1), weights=c))


def spread(X, weight=None):
    """``sqrt(sum_k var X_k)`` (variances weighted by ``weight``, ddof 0: those of the rows
    repeated), computed on ``(X - mean) / m`` and scaled back by ``m``, so that it neither
    underflows (data near 1e-301) nor overflows (near 1e299); 0 when all samples coincide."""
    Xc = X - np.average(X, axis=0, weights=weight)
    m = float(np.max(np.abs(Xc)))
    if not m > 0:
        return 0.0
    U = Xc / m
    var = np.average((U - np.average(U, axis=0, weights=weight)) ** 2, axis=0, weights=weight)
    return m * float(np.sqrt(np.sum(var)))


def select_bandwidth(estimator, X, y, grid=GRID):
    """The isotropic bandwidth minimising ``loo_loss``; the curve is kept in ``cv_results_``."""
    if estimator.n_neighbors is not None:
        raise ValueError("bandwidth='cv' selects a fixed bandwidth; it cannot be combined with n_neighbors")
    if y is None:
        raise ValueError("bandwidth='cv' needs the targets y (leave-one-out error)")
    if len(X) < 3:
        raise ValueError(f"bandwidth='cv' needs at least 3 samples, got n_samples={len(X)}")
    s = spread(X, getattr(estimator, "sample_weight_", None))
    if not s > 0:
        raise ValueError("bandwidth='cv': all samples coincide, so no bandwidth can be selected")
    tried = {}

    def score(log_h):
        h = float(np.exp(log_h))
        if h not in tried:
            with warnings.catch_warnings():  # singular local designs at tiny h are expected here
                warnings.simplefilter("ignore", RuntimeWarning)
                tried[h] = loo_loss(estimator, X, y, h)
        value = tried[h]
        return value if np.isfinite(value) else np.inf

    logs = np.linspace(np.log(s / 100), np.log(10 * s), grid)
    values = [score(v) for v in logs]
    best = int(np.argmin(values))
    lo, hi = logs[max(best - 1, 0)], logs[min(best + 1, grid - 1)]
    minimize_scalar(score, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3})
    hs = np.array(sorted(tried))
    estimator.cv_results_ = {"bandwidth": hs, "loo_loss": np.array([tried[h] for h in hs])}
    return float(hs[np.argmin(estimator.cv_results_["loo_loss"])])


def sample_point_scales(X, n_neighbors):
    """``h_i``: the distance of each sample to its ``n_neighbors``-th nearest sample at another point
    (a repeated row is not a neighbour of its copies: at distance 0 it would make ``h_i = 0``).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import local_mean
    >>> from localkit.models.selection import sample_point_scales
    >>> X = np.array([[0.0], [1.0], [3.0], [7.0]])
    >>> sample_point_scales(X, 1)
    array([1., 1., 2., 4.])
    >>> local_mean([[2.0]], X, [0.0, 1.0, 2.0, 3.0], sample_scale=sample_point_scales(X, 1)).round(3)
    array([1.799])
    """
    X = check_points(X, "X")
    k = check_n_neighbors(n_neighbors, len(X) - 1)
    return nb.knn_bandwidth(nb.make_index(X, "euclidean"), X, k, exclude_self=True, groups=twin_groups(X))
