"""Local means whose weights are given: an affinity matrix in place of a kernel.

Some users hold the weights already: a graph, a similarity computed elsewhere, or a function
``kernel(A, B)`` returning the ``(len(A), len(B))`` affinities, as scikit-learn's label propagation
takes. The local mean is then the same normalised sum,

    m(x*_q) = sum_j A_qj v_j / sum_j A_qj,

with ``A_qj >= 0`` the weight of sample ``j`` at query ``q``, rows of queries, columns of samples.
:class:`BoundAffinity` offers it with :class:`~localkit.engine.BoundKernel`'s ``sums`` signature,
so that a model written against a bound kernel takes affinities unchanged. The matrix may be
dense or scipy-sparse; it is formed whole (``n_queries x n_samples``), by whoever supplies it.
A query whose row sums to 0 has an empty neighbourhood: its mean is 0 and ``empty`` says so.
"""
from __future__ import annotations

import numpy as np
from scipy import sparse

from .results import LocalSums


def check_affinity(A, shape, name, dtype=np.float64):
    """``A`` as a float array (or CSR matrix) of ``shape``, finite and non-negative; else a
    ``ValueError`` that names ``name`` (the parameter that produced it)."""
    if sparse.issparse(A):
        A = sparse.csr_matrix(A, dtype=dtype)
        data = A.data
    else:
        try:
            A = np.asarray(A, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be a numeric (n_queries, n_samples) affinity matrix: {exc}") from None
        data = A
    if A.shape != shape:
        raise ValueError(f"{name} must give an affinity matrix of shape (n_queries, n_samples) = {shape}, "
                         f"got shape {A.shape}")
    if not np.all(np.isfinite(data)):
        raise ValueError(f"{name} gave affinities that are NaN or infinite; they must be finite and >= 0")
    if np.any(data < 0):
        raise ValueError(f"{name} gave negative affinities (min {data.min():.3g}); weights must be >= 0")
    return A


class BoundAffinity:
    """Given weights bound to their samples: ``affinity(Q, samples)`` at queries ``Q``.

    Parameters
    ----------
    samples : array of shape (n_samples, n_features)
        What ``affinity`` receives as its second argument; for precomputed affinities, the
        (n_samples, n_samples) matrix itself (the queries are then rows of affinities too).
    affinity : callable or None
        ``affinity(Q, samples) -> (n_queries, n_samples)``; None: the queries *are* the rows of
        affinities to the samples (precomputed), and ``queries=None`` is ``samples``.
    name : str
        The parameter named in errors.
    """

    def __init__(self, samples, affinity=None, name="kernel"):
        self.samples, self.affinity, self.name = samples, affinity, name
        self.n_samples = samples.shape[0]
        self._train = None  # the samples' own affinities, formed once

    def matrix(self, queries=None):
        """The checked affinities of ``queries`` (None: the samples) to the samples."""
        if queries is None and self._train is not None:
            return self._train
        Q = self.samples if queries is None else queries
        A = Q if self.affinity is None else self.affinity(Q, self.samples)
        A = check_affinity(A, (Q.shape[0], self.n_samples), self.name, dtype=np.result_type(self.samples.dtype,
                                                                                          np.float32))
        if queries is None:
            self._train = A
        return A

    def operator(self, *, exclude_self=False):
        """``V -> M V`` at the samples (:class:`~localkit.engine.bound.WeightOperator` over :meth:`sums`:
        the matrix is formed once and kept)."""
        from .bound import WeightOperator

        return WeightOperator(self, exclude_self)

    def sums(self, queries=None, values=None, *, exclude_self=False):
        """:meth:`BoundKernel.sums <localkit.engine.BoundKernel.sums>` with the given weights:
        ``exclude_self`` (queries = the samples) drops the diagonal."""
        A = self.matrix(queries)
        if exclude_self:
            if queries is not None:
                raise ValueError("exclude_self drops sample i at query i: it needs queries=None (the samples)")
            A = A - sparse.diags(A.diagonal()) if sparse.issparse(A) else A - np.diag(np.diag(A))
        s = np.asarray(A.sum(axis=1)).ravel()
        empty = s <= 0
        with np.errstate(divide="ignore"):
            log_s = np.log(s)
        mean = None
        if values is not None:
            V = np.asarray(values)
            mean = np.asarray(A @ V) / np.where(empty, 1.0, s).reshape((-1,) + (1,) * (V.ndim - 1))
        return LocalSums(mean, log_s, empty)
