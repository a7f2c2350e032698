"""Leave-one-out sums of a mixed product kernel by categorical cells and binned continuous sums.

A product ``K = G(x_c) prod_f k_f(x_f)`` of Gaussian factors on at most three continuous
columns ``x_c`` and categorical factors (Aitchison-Aitken, Wang-van Ryzin) is constant in its
categorical part between two *cells* (the distinct rows of the categorical columns): with
``cell(i)`` the cell of sample ``i`` and ``T_b(x) = sum_{j in b} c_j G(x - x_cj) [v_j, 1]`` the
Gaussian sums of the samples of cell ``b``,

.. math::

    S_i = \\sum_{j \\ne i} c_j K(x_i, x_j) [v_j, 1]
        = \\sum_b K_{cat}(cell(i), b)\\, T_b(x_{ci}) - c_i K_{cat}(cell(i), cell(i)) [v_i, 1]

(``K(x, x) = 1`` for the Gaussian; a kernel without a categorical factor leaves out every copy
of row ``i``, at ``x_i``'s point with its values, as the engine's twins do). Each ``T_b`` at all ``n`` samples is one
binned pass (:func:`~localkit.engine.passes.binned.binned_sums`: linear binning and FFT
convolution, relative error within ``tolerance``), so that a leave-one-out evaluation costs
``O(C (G log G + n))`` for ``C`` cells on a grid of ``G`` points instead of the ``O(n^2)`` pairs of
the exact pass: the objective of a bandwidth search at scale
(:func:`~localkit.models.cv_scale.cell_loss`).
"""
from __future__ import annotations

import numpy as np

from ..kernels.categorical import CategoricalColumns, check_codes, check_smoothing
from .passes.binned import GRID_LIMIT, MAX_FEATURES, binned_sums
from .twins import twin_groups


def cell_refusals(kernel, n_features):
    """Why :func:`cell_loo_sums` cannot take ``kernel`` (empty: it can)."""
    from ..kernels.kernel import SumKernel

    if isinstance(kernel, SumKernel):
        return ["a sum of kernels has no cells"]
    reasons, continuous = [], 0
    for factor, cols in kernel.columns(n_features):
        if factor.is_categorical:
            continue
        continuous += len(cols)
        if not factor.profile.log_linear or factor.n_neighbors is not None or factor.metric != "euclidean":
            reasons.append(f"{factor!r}: the cells take Gaussian factors of fixed bandwidth (a product over columns)")
    if continuous > MAX_FEATURES:
        reasons.append(f"{continuous} continuous columns: the binned sums take at most {MAX_FEATURES}")
    return reasons


def continuous_part(kernel, n_features):
    """``(columns, h)``: the continuous columns of ``kernel`` and their bandwidths (one per column)."""
    cols_out, h = [], []
    for factor, cols in kernel.columns(n_features):
        if not factor.is_categorical:
            cols_out.extend(int(col) for col in cols)
            h.extend(np.broadcast_to(np.asarray(factor.bandwidth, dtype=np.float64), (len(cols),)))
    return cols_out, np.array(h)


def cell_grid(kernel, X, points_per_bandwidth):
    """The grid shape of :func:`cell_loo_sums` with ``points_per_bandwidth`` points per bandwidth
    of ``kernel`` along each continuous column's span (at most the binned pass's
    ``GRID_LIMIT``); None without a continuous column."""
    cols, h = continuous_part(kernel, X.shape[1])
    if not cols:
        return None
    span = np.ptp(np.asarray(X, dtype=np.float64)[:, cols], axis=0)
    limit = GRID_LIMIT[len(cols)]
    return tuple(int(min(limit, max(2, np.ceil(points_per_bandwidth * s / b) + 1))) for s, b in zip(span, h))


def cell_loo_sums(kernel, X, V, sample_weight=None, grid_size=None, tolerance=None, groups=None):
    """``(n, p + 1)`` leave-one-out sums ``S_i = sum_{j != i} c_j K(x_i, x_j) [v_j, 1]`` at the
    samples (weight sum last; see the module), for a resolved ``kernel`` that
    :func:`cell_refusals` admits; ``V`` (n, p) the values; ``grid_size`` and ``tolerance`` those
    of :func:`~localkit.engine.passes.binned.binned_sums` (every cell on a grid of the same shape).
    ``groups`` (n,): the rows that leave together, each group's rows equal in the kernel's
    columns (``K = 1`` between them); default each row alone where a factor is categorical, else
    the copies of a row, point and values (:func:`~localkit.engine.twins.twin_groups`)."""
    X = np.asarray(X, dtype=np.float64)
    n, d = X.shape
    V = np.asarray(V, dtype=np.float64).reshape(n, -1)
    c = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    cont_cols, h = continuous_part(kernel, d)
    cat = []
    for factor, cols in kernel.columns(d):
        if factor.is_categorical:
            codes = X[:, cols]
            check_codes(codes, factor.name)
            cat.append((cols, CategoricalColumns(factor.name, check_smoothing(factor.bandwidth, factor.name), codes,
                                                 factor.level_codes)))
    if cat:
        cat_cols = np.concatenate([cols for cols, _ in cat])
        cells, cell_of = np.unique(X[:, cat_cols], axis=0, return_inverse=True)
        cell_of = cell_of.ravel()
        L = np.zeros((len(cells), len(cells)))
        at = 0
        for cols, columns in cat:
            part = cells[:, at:at + len(cols)]
            at += len(cols)
            L += columns.log_weights(np, part, part)
        K_cat = np.exp(L)  # (C, C)
    else:
        cell_of, K_cat = np.zeros(n, dtype=np.intp), np.ones((1, 1))
    cw = np.ones(n) if c is None else c
    Xc = X[:, cont_cols]
    # the sums are the same for the rows of one cell at one continuous point (rows repeat them: a
    # column of integers, a survey's ages): each cell's sums are interpolated once per distinct point
    # and combined once per distinct (cell, point), then read off for every row
    points, at = np.unique(Xc + 0.0, axis=0, return_inverse=True) if cont_cols else (None, np.zeros(n, np.intp))
    pairs, pair_of = np.unique(np.column_stack([cell_of, at.ravel()]), axis=0, return_inverse=True)
    S = np.zeros((len(pairs), V.shape[1] + 1))
    from ..kernels.profiles import get_profile

    gaussian = get_profile("gaussian")
    for b in range(K_cat.shape[0]):
        members = np.flatnonzero(cell_of == b)
        if not members.size:
            continue
        if cont_cols:
            T, _ = binned_sums(Xc[members], points, None if c is None else c[members], V[members], gaussian, h,
                               grid_size=grid_size, tolerance=tolerance)
        else:  # no continuous column: each cell's sums are constants
            T = np.r_[cw[members] @ V[members], cw[members].sum()][None, :]
        S += K_cat[pairs[:, 0], b][:, None] * T[pairs[:, 1]]
    S = S[pair_of.ravel()]
    own = np.column_stack([V, np.ones(n)]) * cw[:, None] * K_cat[cell_of, cell_of][:, None]
    if groups is None and not cat:  # every copy of row i (x_i and its values) leaves with it (the engine's twins)
        groups = twin_groups(X, V if V.shape[1] else None)
    # (with a categorical factor each row leaves alone: a level shared by rows is not one observation)
    S -= own if groups is None else np.stack([np.bincount(groups, own[:, k], minlength=n)[groups]
                                              for k in range(own.shape[1])], axis=1)
    return S


__all__ = ["cell_grid", "cell_loo_sums", "cell_refusals", "continuous_part"]
