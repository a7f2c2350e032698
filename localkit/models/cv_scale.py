"""Bandwidth searches at scale: the leave-one-out objectives of :mod:`localkit.models.kernel_learning`
evaluated by categorical cells and binned continuous sums (:func:`~localkit.engine.cells.cell_loo_sums`).

For a product of Gaussian factors on at most three continuous columns and categorical factors,
one evaluation of the leave-one-out loss costs ``O(C (G log G + n))`` (``C`` cells, a grid of
``G`` points) instead of ``O(n^2)``. The grid is fixed for the whole search (a grid that changed
with the bandwidth would make the objective jump under the search's finite differences): per
continuous column, ``ceil(sqrt(0.05 / tolerance))`` points per bandwidth of the first kernel
evaluated (the smallest start), the spacing at which the Gaussian's binned sums (with their
binning corrections) erred by about ``0.05 (delta / h)^2 <= tolerance`` relative, measured on
3,000 normal samples (``delta / h = 1/8``: 7.8e-4; ``1/16``: 2.0e-4; ``1/32``: 5.0e-5); larger
bandwidths are resolved finer, smaller ones coarser. The search itself (starts, bounded quasi-Newton on ``log h`` and ``lam``, ``cv_results_``) is
:func:`~localkit.models.kernel_learning.select_cv_bandwidths`'s. An estimator takes it when given
a ``tolerance`` (the error it accepts from binned sums) and its kernel qualifies; its
predictions stay exact.
"""
from __future__ import annotations

import numpy as np

from ..engine import cell_grid, cell_loo_sums, cell_refusals, twin_groups
from ..kernels.kernel import product_of


class FixedGrid:
    """The grid shape of a search, fixed at the first kernel it is asked for (see the module)."""

    def __init__(self, X, tolerance):
        self.X, self.tolerance, self.shape, self.fixed = X, tolerance, None, False

    def __call__(self, kernel):
        if not self.fixed:
            self.shape, self.fixed = cell_grid(kernel, self.X, np.ceil(np.sqrt(0.05 / self.tolerance))), True
        return self.shape


def takes_cells(kernel, n_features, tolerance):
    """True where a search of ``kernel``'s "cv" bandwidths runs on cell sums: a ``tolerance`` is
    given and :func:`~localkit.engine.cells.cell_refusals` has no reason against the kernel."""
    return tolerance is not None and not cell_refusals(kernel, n_features)


def cell_squared_loss(X, values, sample_weight, tolerance):
    """``loss(K) = sum_i c_i |v_i - m_{-i}(x_i)|^2 / sum_i c_i`` from cell sums (``inf`` where a
    sample keeps no weight)."""
    V = np.asarray(values, dtype=np.float64).reshape(len(X), -1)
    p = V.shape[1]
    grid = FixedGrid(X, tolerance)

    def loss(kernel):
        S = cell_loo_sums(kernel, X, V, sample_weight, grid_size=grid(kernel))
        if not np.all(S[:, p] > 0):
            return np.inf
        M = S[:, :p] / S[:, p:]
        return float(np.average(np.sum((M - V) ** 2, axis=1), weights=sample_weight))

    return loss


def cell_density_loss(X, sample_weight, tolerance):
    """``loss(K) = -sum_i c_i log p_{-i}(x_i)`` from cell sums, ``p_{-i} = S_i / ((W - W_G(i)) Z)``
    (each row its own group where the kernel has a categorical factor, else the rows at its point)."""
    c = np.ones(len(X)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    keep = c > 0
    grid = FixedGrid(X, tolerance)

    def loss(kernel):
        categorical = any(f.is_categorical for f in kernel.factors)
        groups = None if categorical else twin_groups(X)
        left = c.sum() - (c if groups is None else np.bincount(groups, c)[groups])
        S0 = cell_loo_sums(kernel, X, np.zeros((len(X), 0)), sample_weight, grid_size=grid(kernel))[:, 0]
        if not np.all(S0[keep] > 0):
            return np.inf
        log_z = kernel.log_density_normalizer(X, sample_weight)
        return -float(np.sum(c[keep] * (np.log(S0[keep]) - np.log(left[keep]) - log_z)))

    return loss


def cell_conditional_loss(XY, d, groups, tolerance):
    """``loss(J) = -sum_i log f_{-i}(y_i | x_i)`` of the joint kernel ``J = K_x K_y`` on
    ``XY = [X, Y]`` (``d`` columns of ``X``) from cell sums: the joint and the ``x`` sums without
    ``groups``' rows (:meth:`~localkit.ConditionalDensity._select_cv`)."""

    grid_joint, grid_x = FixedGrid(XY, tolerance), FixedGrid(XY[:, :d], tolerance)
    empty = np.zeros((len(XY), 0))

    def loss(J):
        x_part = product_of([f for f in J.factors if max(f.features) < d])
        num = cell_loo_sums(J, XY, empty, grid_size=grid_joint(J), groups=groups)[:, 0]
        den = cell_loo_sums(x_part, XY[:, :d], empty, grid_size=grid_x(x_part), groups=groups)[:, 0]
        if not (np.all(num > 0) and np.all(den > 0)):
            return np.inf
        log_z = sum(f.resolved_log_density_normalizer(XY.shape[1]) for f in J.factors if min(f.features) >= d)
        return -float(np.sum(np.log(num) - np.log(den) - log_z))

    return loss


__all__ = ["FixedGrid", "cell_conditional_loss", "cell_density_loss", "cell_squared_loss", "takes_cells"]
