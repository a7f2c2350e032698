"""Leave-one-out with repeated rows: leave out every row at the query's point.

``exclude_self`` is the engine's leave-one-out: the query is a sample, and its own weight is
dropped. A sample that appears twice (two rows with equal coordinates) would leave its twin in,
at distance 0, with the largest weight there is: the leave-one-out prediction is then the
sample's own value, and a bandwidth chosen by it collapses (``LocalPolynomialRegressor(kernel=
"gaussian", bandwidth="cv")`` on 3/4 of diabetes with every row twice chose h = 0.0015, the grid's
smallest, instead of 0.125: a test error of 1.30 var(y) instead of 0.53). For a kernel, rows
at the same point are one observation (its weight counted twice), so the engine leaves out the
whole group of rows at the query's point: ``w_ij = 0`` whenever ``x_j = x_i``. Where every row
differs this is the plain leave-one-out, computed as before (bit for bit). scikit-learn's ``LeaveOneOut`` splits
rows instead; that is the same for distinct rows, and leaks for repeated ones.

A copy is the whole row: where values are averaged (a regression's targets, a classifier's
labels), rows are grouped by their point *and* their values (``twin_groups(points, values)``).
Lattice data, many samples at one ``x`` with distinct ``y``, are distinct observations: each is
left out alone and the others at its point stay in, so that the leave-one-out scores the
estimator that is fitted (leaving out every row at the query's ``x`` scored another one:
``bandwidth="cv"`` chose h = 0.18, whose true leave-one-out error was 0.421 against the
criterion's 0.295). A pass without values (a density) groups by the point. A caller may
give its own groups (``twins=``): the codes of repeated rows, which round-off moves apart, or one
group per row for a graph without self-loops (scikit-learn's ``LabelSpreading``), which zeroes
the diagonal only.

The groups are computed once per set of samples (:func:`twin_groups`: ``np.unique`` of the rows);
each path then drops, at query ``i``, the samples ``j`` with ``groups[j] == groups[i]``
(:func:`mask_twins` for weight blocks, :func:`~localkit.engine.passes.neighbors.kneighbors` for trees).
"""
from __future__ import annotations

import numpy as np
from scipy import sparse


def twin_groups(points, values=None):
    """``groups (n,)``: one id per distinct row of ``points`` (equal rows share it; ``-0.0`` equals
    ``0.0``), or ``None`` when every row differs (the plain leave-one-out). A sparse matrix is
    grouped by its rows' stored entries (:func:`_sparse_twin_groups`), never densified. With
    ``values`` (n,) or (n, p), rows are grouped by the point and the values together
    (:func:`refine_twins`): samples at one point with distinct values are distinct observations."""
    if sparse.issparse(points):
        groups = _sparse_twin_groups(points)
    else:
        P = np.asarray(points)
        if P.ndim != 2 or len(P) < 2:
            return None
        _, groups, counts = np.unique(P + 0.0, axis=0, return_inverse=True, return_counts=True)
        groups = groups.reshape(-1) if counts.max() > 1 else None
    return groups if values is None else refine_twins(groups, values)


def refine_twins(groups, values):
    """The groups ``groups`` (or None) split by ``values`` (n,) or (n, p): two samples share a group
    when they shared one and their values are equal; None when every sample is then alone."""
    if groups is None:
        return None
    V = np.asarray(values, dtype=np.float64).reshape(len(groups), -1)
    _, refined, counts = np.unique(np.column_stack([groups.astype(np.float64), V + 0.0]), axis=0,
                                   return_inverse=True, return_counts=True)
    return refined.reshape(-1) if counts.max() > 1 else None


def _sparse_twin_groups(points):
    """:func:`twin_groups` of a sparse matrix: rows in canonical CSR form (duplicates summed, zeros,
    ``-0.0`` included, dropped, columns sorted) are equal exactly when their columns and values
    are; each row is keyed by those bytes (``O(nnz)`` memory)."""
    X = sparse.csr_matrix(points, copy=True)
    if X.shape[0] < 2:
        return None
    X.sum_duplicates()
    X.eliminate_zeros()
    X.sort_indices()
    data = X.data + 0.0
    seen, groups = {}, np.empty(X.shape[0], dtype=np.intp)
    for i, (a, b) in enumerate(zip(X.indptr[:-1], X.indptr[1:])):
        key = (X.indices[a:b].astype(np.int64).tobytes(), data[a:b].tobytes())
        groups[i] = seen.setdefault(key, len(seen))
    return groups if len(seen) < X.shape[0] else None


def refuse_twins(points, where):
    """Raise where a path cannot leave out repeated rows (``where``: the path, for the message)
    and ``points`` repeat one: a silent plain leave-one-out would predict each row from its copy."""
    if twin_groups(points) is not None:
        raise ValueError(f"exclude_self=True (leave-one-out) leaves out every row at the query's point, which "
                         f"{where} cannot; these samples repeat a row: pass NumPy arrays, or merge the copies "
                         "(np.unique(..., axis=0, return_counts=True) with the counts as sample_weight)")


def check_twins(twins, n):
    """Caller-given group ids: ``n`` integers (None where every group has one sample)."""
    groups = np.asarray(twins)
    if groups.shape != (n,) or not np.issubdtype(groups.dtype, np.integer):
        raise ValueError(f"twins must be {n} integer group ids (one per sample), got {groups.dtype} {groups.shape}")
    _, groups, counts = np.unique(groups, return_inverse=True, return_counts=True)
    return groups.reshape(-1) if counts.max() > 1 else None


def largest_group(groups):
    """The most rows at one point (1 without groups)."""
    return 1 if groups is None else int(np.bincount(groups).max())


def mask_twins(L, rows, cols, groups):
    """``L[i, j] = -inf`` where sample ``cols.start + j`` is query ``rows[i]``'s own sample or, with
    ``groups``, lies at its point (``L`` holds the log-weights of the queries ``rows`` against the
    samples ``cols``, a slice)."""
    if groups is None:
        hits = np.flatnonzero((rows >= cols.start) & (rows < cols.stop))
        L[hits, rows[hits] - cols.start] = -np.inf
    else:
        L[groups[rows][:, None] == groups[cols][None, :]] = -np.inf
    return L
