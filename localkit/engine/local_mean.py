"""The local mean ``m(x*) = sum_i w_i(x*) v_i`` with ``w_i = K(x*, x_i) / sum_j K(x*, x_j)``.

This is the one place where kernel weights meet values. Two paths compute it:

* **dense**: blocks of queries against blocks of samples, log-weights from one matrix product
  (BLAS), reduced with an online log-sum-exp (:mod:`localkit.engine.stream`); query blocks run on
  threads. Memory is bounded by a budget, never ``n_queries x n_samples``.
* **neighbors**: a tree finds the k nearest samples (kNN kernels with compact profiles) or the
  samples within the support (compact profiles with a fixed bandwidth); chosen automatically
  when few samples carry weight.

Both give the same numbers to round-off. The weight sum ``sum_j K(x*, x_j)`` (kept in log-space)
is, up to the constant ``n h^d c_d``, a kernel density estimate.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .._validation import check_array, check_choice, check_points
from ..kernels import Kernel
from . import neighbors as nb
from .compact import compact_sums, supports
from .blocks import block_sizes, map_blocks, resolve_n_jobs
from .stream import OnlineLogSumExp, augment

EMPTY_POLICIES = ("nearest", "nan", "raise")
ALGORITHMS = ("auto", "dense", "neighbors", "compiled")
#: "auto" takes the compiled compact pass up to this many features (measured faster than the
#: dense and radius paths at d = 2, 4 and 8 for every bandwidth tried)
COMPILED_MAX_FEATURES = 16


@dataclass
class LocalSums:
    """What one engine pass returns.

    mean : (n_queries, p) or (n_queries,) array, or None when no values were given
        ``sum_i w_i(x*) v_i``.
    log_weight_sum : (n_queries,) array
        ``log sum_j K(x*, x_j)``; ``-inf`` for an empty neighbourhood.
    empty : (n_queries,) bool array
        Queries with no sample in the kernel's support (handled by the ``empty`` policy).
    """

    mean: np.ndarray | None
    log_weight_sum: np.ndarray
    empty: np.ndarray

    @property
    def weight_sum(self):
        return np.exp(self.log_weight_sum)


def make_kernel(kernel="gaussian", bandwidth=1.0, n_neighbors=None, metric="euclidean"):
    """A :class:`~localkit.Kernel` from a name and its parameters, or the instance given."""
    if isinstance(kernel, Kernel):
        return kernel
    return Kernel(kernel, bandwidth=bandwidth, n_neighbors=n_neighbors, metric=metric)


def local_mean(queries, samples, values, kernel="gaussian", bandwidth=1.0, n_neighbors=None,
               exclude_self=False, *, metric="euclidean", sample_weight=None, return_weight_sum=False,
               **options):
    """The local mean of ``values`` at each query: ``m(x*) = sum_i K(x*, x_i) v_i / sum_j K(x*, x_j)``.

    Parameters
    ----------
    queries : array of shape (n_queries, n_features) or None
        Where to evaluate; ``None`` means at the samples themselves.
    samples : array of shape (n_samples, n_features)
    values : array of shape (n_samples,) or (n_samples, p)
    kernel : str or Kernel, default="gaussian"
        A profile name (see :class:`~localkit.Kernel`) or a ``Kernel`` instance (then
        ``bandwidth``, ``n_neighbors`` and ``metric`` are taken from it).
    bandwidth : float, array of shape (n_features,), "scott" or "silverman", default=1.0
    n_neighbors : int or None
        Adaptive kNN bandwidth ``h(x*)`` = distance to the k-th nearest sample.
    exclude_self : bool, default=False
        Leave-one-out: query ``i`` is sample ``i`` and its own weight is dropped.
    sample_weight : array of shape (n_samples,), optional
        Non-negative weights ``c_i`` that multiply the kernel:
        ``m(x*) = sum_i c_i K(x*, x_i) v_i / sum_j c_j K(x*, x_j)``; integer weights equal
        repeated samples, zero weights drop them.
    return_weight_sum : bool, default=False
        Also return ``sum_j c_j K(x*, x_j)``.
    **options
        Engine options: ``empty`` ("nearest", "nan", "raise"), ``algorithm`` ("auto", "dense",
        "neighbors"), ``block_size``, ``memory_budget`` (bytes), ``n_jobs``,
        ``query_scale`` / ``sample_scale`` (per-point bandwidth factors). See :func:`local_sums`.

    Returns
    -------
    mean : array of shape (n_queries,) or (n_queries, p)
    weight_sum : array of shape (n_queries,), only with ``return_weight_sum=True``

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import local_mean
    >>> x = np.linspace(0, 1, 5)[:, None]
    >>> local_mean([[0.5]], x, x.ravel() ** 2, bandwidth=1e-3)  # tiny bandwidth: nearest value
    array([0.25])
    """
    if values is None:
        raise ValueError("values must be an array of shape (n_samples,) or (n_samples, p), got None")
    out = local_sums(queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self,
                     metric=metric, sample_weight=sample_weight, **options)
    return (out.mean, out.weight_sum) if return_weight_sum else out.mean


def local_sums(queries, samples, values=None, kernel="gaussian", bandwidth=1.0, n_neighbors=None,
               exclude_self=False, *, metric="euclidean", sample_weight=None, empty="nearest",
               algorithm="auto", block_size=None, memory_budget=None, n_jobs=None, query_scale=None,
               sample_scale=None):
    """One engine pass: local means of ``values`` (optional) and log weight sums.

    Parameters beyond :func:`local_mean`:

    empty : {"nearest", "nan", "raise"}, default="nearest"
        Policy for a query whose neighbourhood is empty (outside every compact support, or all
        weights zero): "nearest" gives the value of the nearest sample (the limit of growing
        the bandwidth until one sample enters) with a weight sum of 0; "nan" gives NaN and a
        warning; "raise" raises a ``ValueError``.
    algorithm : {"auto", "dense", "neighbors", "compiled"}, default="auto"
        "neighbors" needs a compact profile; compact kNN kernels always take it. "compiled" (a numba pass over samples sorted into
        strips, :mod:`localkit.engine.compact`) needs a compact profile with a fixed bandwidth,
        the Euclidean metric, no per-point scales and no ``exclude_self``; for a scalar
        bandwidth it decides the support by ``|x* - x|^2 <= h^2`` in raw coordinates, as
        scikit-learn's radius queries do. "auto" takes "compiled" where it applies (up to 16
        features), else "neighbors" for kNN kernels with compact profiles and for compact
        profiles whose support holds few samples, else "dense".
    block_size : int or (int, int), optional
        Query and sample block sizes; by default chosen from ``memory_budget``.
    memory_budget : float, optional
        Bytes that kernel blocks may occupy at once (default 128 MiB).
    n_jobs : int, optional
        Threads over query blocks (default: all cores).
    query_scale, sample_scale : arrays of shape (n_queries,) / (n_samples,), optional
        Per-point bandwidth factors: ``u = d(x*, x_j) / (h * query_scale * sample_scale_j)``
        (balloon and sample-point adaptive bandwidths). ``query_scale`` cannot be combined with
        ``n_neighbors``, which sets it.
    """
    from .distributed import dask_local_sums, is_dask_collection  # dask arrays: chunks reduce on the cluster

    if is_dask_collection(queries, samples, values, sample_weight, query_scale, sample_scale):
        return dask_local_sums(queries, samples, values, kernel, bandwidth, n_neighbors, exclude_self, metric=metric,
                               sample_weight=sample_weight, empty=empty, algorithm=algorithm, block_size=block_size,
                               memory_budget=memory_budget, n_jobs=n_jobs, query_scale=query_scale,
                               sample_scale=sample_scale)
    check_choice(empty, "empty", EMPTY_POLICIES)
    check_choice(algorithm, "algorithm", ALGORITHMS)
    if not isinstance(exclude_self, (bool, np.bool_)):
        raise TypeError(f"exclude_self must be True or False, got {exclude_self!r}")
    samples = check_points(samples, "samples")
    dtype = samples.dtype
    if queries is None:
        queries = samples
    else:
        queries = check_points(queries, "queries", n_features=samples.shape[1], dtype=dtype)
    n_q, n_s = len(queries), len(samples)
    if exclude_self and n_q != n_s:
        raise ValueError(
            f"exclude_self=True drops sample i's weight at query i, so queries must be the samples; "
            f"got {n_q} queries for {n_s} samples"
        )
    squeeze = False
    if values is None:
        V = np.zeros((n_s, 0), dtype=dtype)
    else:
        V = check_array(values, "values", ndim=(1, 2))
        squeeze = V.ndim == 1
        V = V.reshape(n_s if len(V) == n_s else len(V), -1)
        if len(V) != n_s:
            raise ValueError(f"values has {len(V)} rows but samples has {n_s}; they must match")
        V = V.astype(np.result_type(dtype, V.dtype), copy=False)
    if exclude_self and n_s < 2:
        raise ValueError("exclude_self=True (leave-one-out) needs at least 2 samples, got 1")
    weight, log_weight_max = _check_sample_weight(sample_weight, n_s, dtype)
    kern = make_kernel(kernel, bandwidth, n_neighbors, metric)
    k = kern.n_neighbors
    if k is not None and k + int(exclude_self) > n_s:
        raise ValueError(
            f"n_neighbors must be <= n_samples{' - 1 (exclude_self)' if exclude_self else ''}"
            f"={n_s - int(exclude_self)}, got {k}"
        )
    q_scale = _check_scale(query_scale, n_q, "query_scale")
    s_scale = _check_scale(sample_scale, n_s, "sample_scale")
    if q_scale is not None and k is not None:
        raise ValueError("query_scale cannot be combined with n_neighbors, which sets it")
    if s_scale is not None and k is not None and kern.compact:
        raise ValueError("sample_scale cannot be combined with a compact kNN kernel")

    compiled = (supports(kern) and q_scale is None and s_scale is None and not exclude_self)
    if algorithm == "compiled" and not compiled:
        raise ValueError("algorithm='compiled' needs a compact profile with a fixed bandwidth, the euclidean "
                         f"metric, no per-point scales and exclude_self=False; got {kern!r}")
    if algorithm == "compiled" or (algorithm == "auto" and compiled
                                   and samples.shape[1] <= COMPILED_MAX_FEATURES):
        # weighted: sums of k [c v, c] (the pass appends its own, unweighted, count column)
        S = compact_sums(queries, samples, V if weight is None else augment(V) * weight[:, None], kern)
        S = S if weight is None else S[:, :-1]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean, log_sum = S[:, :-1] / S[:, -1:], np.log(S[:, -1]) + log_weight_max
        return _finish(mean, log_sum, empty, queries, samples, V, kern, False, values is None, squeeze, dtype,
                       weight)

    # scaled, centred coordinates: distances are translation invariant, and centring keeps the
    # matrix-product form |q|^2 - 2 q.x + |x|^2 accurate
    if kern.is_softmax:
        h = kern.resolve_bandwidth(samples)
        Qs, Xs, temperature = queries, samples, h
    else:
        h = kern.resolve_bandwidth(samples)
        centre = samples.mean(axis=0)
        Qs = kern.scale(queries - centre, h).astype(dtype, copy=False)
        Xs = kern.scale(samples - centre, h).astype(dtype, copy=False)
        temperature = 1.0
    V_aug = augment(V) if weight is None else augment(V) * weight[:, None]
    n_jobs = resolve_n_jobs(n_jobs)

    index = None
    if algorithm == "neighbors" and not kern.compact:
        raise ValueError("algorithm='neighbors' needs a compact profile (or a compact kNN kernel)")
    # a compact kNN kernel's support is exactly the k nearest samples: always the neighbour path,
    # whose tree distances put the k-th neighbour at u = 1 exactly (matrix-product distances
    # could push it past the edge of the uniform profile)
    use_neighbors = kern.compact and (
        k is not None or algorithm == "neighbors" or (algorithm == "auto" and _few_in_support(Qs, Xs, kern, s_scale))
    )
    if k is not None and not (kern.compact and use_neighbors) or use_neighbors:
        index = nb.make_index(Xs, kern.metric)

    if use_neighbors:
        S, shift = _neighbor_path(index, Qs, V_aug, kern, s_scale, exclude_self, n_jobs, block_size)
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = S[:, :-1] / S[:, -1:]
            log_sum = shift + np.log(S[:, -1])
    else:
        if k is not None:  # balloon bandwidth for a non-compact profile
            q_scale = nb.knn_bandwidth(index, Qs, k, exclude_self=exclude_self)
        mean, log_sum = _dense_path(Qs, Xs, V_aug, kern, q_scale, s_scale, temperature, exclude_self,
                                    n_jobs, block_size, memory_budget)
    return _finish(mean, log_sum + log_weight_max, empty, Qs, Xs, V, kern, exclude_self, values is None, squeeze,
                   dtype, weight)


def _check_sample_weight(sample_weight, n_samples, dtype):
    """``(c / max c, log max c)``, or ``(None, 0)`` without weights: the local mean is invariant
    to the scale of the weights, and weights in ``[0, 1]`` never overflow the sums."""
    if sample_weight is None:
        return None, 0.0
    c = check_array(sample_weight, "sample_weight", ndim=(1,))
    if c.shape != (n_samples,):
        raise ValueError(f"sample_weight must have shape (n_samples,) = ({n_samples},), got {c.shape}")
    if np.any(c < 0):
        raise ValueError("sample_weight must be >= 0 everywhere")
    top = c.max()
    if top == 0:
        raise ValueError("sample_weight is zero everywhere; at least one sample must carry weight")
    return (c / top).astype(dtype, copy=False), float(np.log(top))


def _finish(mean, log_sum, empty, Qs, Xs, V, kern, exclude_self, no_values, squeeze, dtype, weight=None):
    """Apply the empty-neighbourhood policy and shape the result (``Qs``, ``Xs``: the points in
    the coordinates the path used, for the nearest-sample fallback)."""
    empty_rows = ~(log_sum > -np.inf)
    log_sum[empty_rows] = -np.inf
    if empty_rows.any():
        mean = _apply_empty_policy(empty, empty_rows, mean, Qs, Xs, V, kern, exclude_self, weight)
    if no_values:
        return LocalSums(None, log_sum.astype(dtype, copy=False), empty_rows)
    mean = mean.astype(V.dtype, copy=False)
    return LocalSums(mean[:, 0] if squeeze else mean, log_sum.astype(dtype, copy=False), empty_rows)


def _check_scale(scale, n, name):
    if scale is None:
        return None
    scale = check_array(scale, name, ndim=(1,))
    if scale.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {scale.shape}")
    if np.any(scale < 0):
        raise ValueError(f"{name} must be >= 0")
    return scale


def _few_in_support(Qs, Xs, kern, s_scale, probe=64, subset=20_000, fraction=0.05):
    """Estimate, from a probe of queries against a subset of samples, whether a radius query
    beats a full pass (few samples inside the support, low dimension)."""
    if Xs.shape[1] > 16 or len(Xs) < 2000:
        return False
    rng = np.random.default_rng(0)
    rows = rng.choice(len(Qs), size=min(probe, len(Qs)), replace=False)
    cols = rng.choice(len(Xs), size=min(subset, len(Xs)), replace=False)
    L, _ = kern.log_weights(Qs[rows], Xs[cols], s_scale=None if s_scale is None else s_scale[cols])
    return np.isfinite(L).mean() < fraction


def _dense_path(Qs, Xs, V_aug, kern, q_scale, s_scale, temperature, exclude_self, n_jobs, block_size,
                memory_budget):
    n_q, n_s = len(Qs), len(Xs)
    itemsize = Qs.dtype.itemsize
    bq, bs = block_sizes(n_q, n_s, itemsize, block_size=block_size, memory_budget=memory_budget,
                         n_workers=n_jobs)
    mean = np.empty((n_q, V_aug.shape[1] - 1), dtype=V_aug.dtype)
    log_sum = np.empty(n_q, dtype=V_aug.dtype)
    q_sq = np.einsum("ij,ij->i", Qs, Qs)
    x_sq = np.einsum("ij,ij->i", Xs, Xs)

    def run(rows):
        acc = OnlineLogSumExp(rows.stop - rows.start, V_aug.shape[1] - 1, V_aug.dtype)
        qsc = None if q_scale is None else q_scale[rows]
        offset = None
        for c0 in range(0, n_s, bs):
            cols = slice(c0, min(c0 + bs, n_s))
            L, offset = kern.log_weights(
                Qs[rows], Xs[cols], q_sq=q_sq[rows], x_sq=x_sq[cols], q_scale=qsc,
                s_scale=None if s_scale is None else s_scale[cols], temperature=temperature)
            if exclude_self:
                _mask_self(L, rows, cols)
            acc.update(L, V_aug[cols])
        m, ls = acc.result()
        mean[rows] = m
        log_sum[rows] = ls + offset

    map_blocks(run, n_q, bq, n_jobs)
    return mean, log_sum


def _mask_self(L, rows, cols):
    lo, hi = max(rows.start, cols.start), min(rows.stop, cols.stop)
    if lo < hi:
        i = np.arange(lo, hi)
        L[i - rows.start, i - cols.start] = -np.inf


def _neighbor_path(index, Qs, V_aug, kern, s_scale, exclude_self, n_jobs, block_size):
    n_q = len(Qs)
    S = np.empty((n_q, V_aug.shape[1]), dtype=V_aug.dtype)
    shift = np.empty(n_q, dtype=V_aug.dtype)
    k = kern.n_neighbors
    width = k if k is not None else 64
    bq = block_size if isinstance(block_size, (int, np.integer)) else (block_size or (0,))[0] or 0
    bq = int(bq) or max(64, int(8 * 2**20 // (8 * width * V_aug.shape[1] + 1)))

    def run(rows):
        if k is not None:
            s, m = nb.knn_block_sums(index, Qs[rows], k, kern.profile, V_aug, exclude_self=exclude_self,
                                     row_offset=rows.start)
        else:
            radius = 1.0 if s_scale is None else float(s_scale.max())
            s, m = nb.radius_block_sums(index, Qs[rows], kern.profile, V_aug, radius=radius,
                                        s_scale=s_scale, exclude_self=exclude_self, row_offset=rows.start)
        S[rows], shift[rows] = s, m

    map_blocks(run, n_q, bq, n_jobs)
    return S, shift


def _apply_empty_policy(policy, rows, mean, Qs, Xs, V, kern, exclude_self, weight=None):
    n = int(rows.sum())
    if policy == "raise":
        raise ValueError(
            f"{n} queries have an empty neighbourhood (no sample inside the kernel's support); "
            "widen the bandwidth, use a non-compact kernel, or pass empty='nearest' or 'nan'"
        )
    mean = np.array(mean, copy=True)
    if policy == "nan":
        warnings.warn(f"{n} queries have an empty neighbourhood; their local means are NaN "
                      "(empty='nan')", RuntimeWarning, stacklevel=3)
        mean[rows] = np.nan
        return mean
    idx = np.flatnonzero(rows)
    # the nearest sample that carries weight (all of them without sample weights)
    live = np.arange(len(Xs)) if weight is None else np.flatnonzero(weight > 0)
    index = nb.make_index(Xs[live], kern.metric)
    if exclude_self:  # the nearest other sample; the query itself is sample i
        _, near = index.kneighbors(Qs[idx], n_neighbors=min(2, len(live)))
        near = live[near]
        nearest = np.where(near[:, 0] == idx, near[:, -1], near[:, 0])
    else:
        nearest = live[index.kneighbors(Qs[idx], n_neighbors=1)[1][:, 0]]
    mean[idx] = V[nearest]
    return mean
