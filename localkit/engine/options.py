"""Engine options, stated once: what every engine call accepts besides the kernel and the data."""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .._validation import check_choice
from .blocks import resolve_n_jobs

EMPTY_POLICIES = ("nearest", "nan", "raise")
#: the policy of engine callers that apply the public one themselves (a dask chunk, whose merge
#: decides): empty rows are flagged in ``LocalSums.empty``, their means left NaN, nothing warned
DEFERRED = "defer"
ALGORITHMS = ("auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate")
#: the paths of local polynomials (binned through binned moments; no streamed form) and of local
#: covariances (exact paths only)
POLYNOMIAL_ALGORITHMS = ("auto", "dense", "neighbors", "compiled", "binned")
EXACT_ALGORITHMS = POLYNOMIAL_ALGORITHMS[:-1]


@dataclass(frozen=True)
class EngineOptions:
    """How an engine pass runs; none of these change the result beyond round-off.

    empty : {"nearest", "nan", "raise"}, default="nearest"
        Policy for a query whose neighbourhood is empty (outside every compact support, or all
        weights zero): "nearest" gives the value of the nearest sample (the limit of growing
        the bandwidth until one sample enters) with a weight sum of 0; "nan" gives NaN and a
        warning; "raise" raises a ``ValueError``. (Internally also ``DEFERRED``: the rows
        flagged and left NaN, for callers that apply the policy themselves.)
    algorithm : {"auto", "dense", "neighbors", "compiled", "binned", "streamed", "approximate"}, default="auto"
        The path (see :mod:`localkit.engine.planner`); "auto" lets the planner choose, and takes
        "binned", the one path that approximates (:mod:`localkit.engine.passes.binned`), only
        where a ``tolerance`` is given and its error bound meets it. "streamed" is the pass written against the array API, the one that runs on a
        device, taken on NumPy arrays when asked for (the same code on every array library; on
        the host the dense path is its faster form). "approximate" (never taken by "auto") searches
        neighbours in an HNSW graph (faiss ``IndexHNSWFlat``, M = 32) built once with the bound
        kernel, the k nearest of a search of breadth ``2k + 1`` (or the least meeting ``tolerance``)
        re-ranked exactly, its recall@k measured on a sample of its first queries
        (:mod:`localkit.engine.retrieval`): kNN kernels take its k nearest, compact profiles
        its radius searches (k doubled until the k-th distance passes the support), smooth profiles
        the truncated pass (clusters of samples, visited until the omitted weight meets ``tolerance``).
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass (one int, or one per feature); by default the
        fewest whose error bound meets ``tolerance`` (:func:`localkit.engine.passes.binned.grid_shape`).
    tolerance : float, optional
        The relative error the caller accepts from the binned pass, against its documented bound
        (:mod:`localkit.engine.passes.binned`: ``8 (delta / h)^2``, ``4 delta / h`` for a profile with
        a kink or a jump). It sets the default grid (``1e-4`` when None); given, it also lets
        "auto" take the binned pass where it applies and its bound on the grid it would use is at
        most ``tolerance`` (never otherwise). It is also the guarantee of the truncated pass of a
        smooth profile (:func:`~localkit.engine.passes.neighbors.truncated_path`): the weight left
        out of each query's sums is at most ``tolerance`` of the weight kept, ``sum_(c left out)
        W_c k(max(0, |q - c| - r_c) / h) <= tolerance sum_(j kept) c_j k(d_j / h)`` over clusters of
        centre ``c``, radius ``r_c`` and weight ``W_c`` (default ``1e-6`` there). On the HNSW graph
        of "approximate" (kNN kernels, compact profiles) it is the share of the true k nearest a
        search may miss: the breadth is the least whose recall, measured on a sample of the first
        queries against the exact scan, less two standard errors, is at least ``1 - tolerance``
        (:class:`~localkit.engine.retrieval.HNSWIndex`; default: breadth ``2k + 1``, its recall
        measured and reported).
    block_size : int or (int, int), optional
        Query and sample block sizes; by default chosen from ``memory_budget``.
    memory_budget : float, optional
        Bytes that kernel blocks may occupy at once (default 128 MiB).
    n_jobs : int, optional
        Threads over query blocks (and the binned pass's FFTs, scipy.fft's ``workers``); ``None``
        means one unless a joblib context says otherwise, ``-1`` all cores (scikit-learn's convention).
    exact_edge : bool, default=False
        Decide the samples at distance exactly ``h`` of a compact support by
        ``|q - x|^2 <= h^2`` in the raw coordinates, the arithmetic of scikit-learn's radius
        queries: the planner then takes the compiled compact pass wherever it applies, at any
        number of features (mean shift, whose seeds land on such ties on gridded data).
    """

    empty: str = "nearest"
    algorithm: str = "auto"
    block_size: int | tuple | None = None
    memory_budget: float | None = None
    n_jobs: int | None = None
    exact_edge: bool = False
    grid_size: int | tuple | None = None
    tolerance: float | None = None

    def __post_init__(self):
        if self.empty != DEFERRED:  # internal; the message names the public policies
            check_choice(self.empty, "empty", EMPTY_POLICIES)
        check_choice(self.algorithm, "algorithm", ALGORITHMS)
        if self.block_size is not None:
            sizes = (self.block_size,) if np.isscalar(self.block_size) else tuple(self.block_size)
            if len(sizes) not in (1, 2) or not all(
                    isinstance(b, numbers.Integral) and not isinstance(b, bool) and b >= 1 for b in sizes):
                raise ValueError(f"block_size must be a positive integer or a pair of them, got {self.block_size!r}")
        if self.memory_budget is not None and (
                isinstance(self.memory_budget, bool) or not isinstance(self.memory_budget, numbers.Real)
                or not np.isfinite(self.memory_budget) or self.memory_budget <= 0):
            raise ValueError(f"memory_budget must be a positive number of bytes, got {self.memory_budget!r}")
        if self.grid_size is not None:
            sizes = (self.grid_size,) if np.isscalar(self.grid_size) else tuple(self.grid_size)
            if not sizes or not all(isinstance(g, numbers.Integral) and not isinstance(g, bool) and g >= 2
                                    for g in sizes):
                raise ValueError(f"grid_size must be an integer >= 2 or one per feature, got {self.grid_size!r}")
        if self.tolerance is not None and (isinstance(self.tolerance, bool) or not isinstance(self.tolerance, numbers.Real)
                                           or not 0 < self.tolerance < 1):
            raise ValueError(f"tolerance must be a number in (0, 1), got {self.tolerance!r}")
        resolve_n_jobs(self.n_jobs)  # raises on 0, floats, strings

    @property
    def threads(self):
        return resolve_n_jobs(self.n_jobs)
