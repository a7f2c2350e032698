"""The engine on dask arrays: query chunks map, sample chunks reduce.

A local mean is a reduction over samples. For each pair (query chunk ``a``, sample chunk ``b``)
the in-memory engine (:func:`~localkit.engine.local_sums`) returns a *partial state*: the local
mean ``m_ab`` over the chunk and its log weight sum ``l_ab = log sum_{j in b} K(x*, x_j)``. Two
states combine exactly as the online log-sum-exp of :mod:`localkit.engine.stream` combines blocks:

.. math::

    l = \\log(e^{l_1} + e^{l_2}), \\qquad m = (e^{l_1 - l} m_1 + e^{l_2 - l} m_2)

so merging a query chunk's states over the sample chunks (one task: a state is a row per query)
gives the in-memory result to round-off, and no kernel loop is written twice. Every layer of a
dask graph is a task per chunk, each costing milliseconds on a distributed scheduler, so a pair's
task also checks its chunks (:func:`_checked_pair`) and the merge is one contraction. Query
chunks are independent. A state also carries, for queries whose neighbourhood is empty in its chunk, the distance to and
the value of the chunk's nearest sample that carries weight (with ``exclude_self``, another than
the query's own), so the empty-neighbourhood policy merges to the global nearest such sample.

kNN kernels first merge per-chunk k nearest into the global k nearest (sorted by distance):

* compact profiles carry the k nearest samples' values through that merge and weigh exactly
  those k, ``k(d_j / d_k)``, as the in-memory neighbour path does (so the k-th neighbour sits at
  ``u = 1`` exactly, and ties at the k-th distance keep exactly k samples), and each chunk's
  nearest sample that carries weight, for the empty-neighbourhood policy (all k may weigh 0);
* other profiles take ``h(x*) = d_k`` from the merge and run a fixed-bandwidth pass with
  ``query_scale=h(x*)``, as the in-memory dense path does.

Bandwidth rules ("scott", "silverman") take the standard deviations from one dask reduction.
A kernel on groups of columns (``features``, categorical factors, ``K1 * K2``) is fixed on all
the samples first (:func:`dask_resolved`: each factor's rule on its columns, each categorical
column's levels), so that every chunk's pass weighs as one pass over all the samples would. A
sum ``sum_k w_k K_k`` runs each term's reduction and combines the terms per query chunk as in
memory (:func:`~localkit.engine.sums.combine_terms`).
Nothing here imports dask at module level: ``import localkit`` never imports it.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import threading
from collections import OrderedDict
from contextlib import contextmanager
from functools import partial
from typing import NamedTuple

import numpy as np

from ..._extras import install_extra
from ..._threads import numba_threads, threadpools
from ..._validation import (FLOAT_DTYPES, all_finite, empty_input, not_finite, not_numbers, wrong_features,
                           wrong_ndim)
from ...kernels.bandwidth import resolve_bandwidth
from ...kernels.categorical import check_codes, check_smoothing
from ...kernels.kernel import ProductKernel, SumKernel
from ..options import DEFERRED, EngineOptions
from ..results import LocalSums, apply_empty
from ..passes import neighbors as nb
from ..blocks import resolve_n_jobs
from ..checks import check_exclude_self, check_pass
from ..stream import augment, merge_states
from ..twins import refuse_twins


def is_dask_collection(*objects):
    """True when any of ``objects`` is a dask collection (False, without importing dask, when
    dask was never imported: then no object can be one)."""
    if "dask" not in sys.modules:
        return False
    from dask.base import is_dask_collection as _is

    return any(_is(o) for o in objects)


def _require_dask():
    try:
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - the extra is installed with the tests
        raise ImportError(f"dask arrays need the 'dask' extra: {install_extra('dask')}") from exc
    return da


# -- validation of dask inputs (lazy: values are checked inside the tasks) -------------------
def _check_finite(block, param):
    if not all_finite(block):
        raise ValueError(not_finite(param))
    return block


def _check_nonnegative(block, param):
    if np.any(block < 0):
        raise ValueError(f"{param} must be >= 0 everywhere")
    return block


def as_dask_array(x, name, *, ndim=(1, 2), dtype=None, n_rows=None, rows=None, checked=True):
    """``x`` as a dask float array (float32 kept, anything else float64), shape checked now
    (``n_rows`` rows, if given) and finiteness checked lazily in every chunk (``checked=False``:
    by the caller's tasks, see :func:`_checked_pair`); ``rows`` re-chunks axis 0, columns form
    one chunk."""
    da = _require_dask()
    if x is None:
        raise ValueError(f"{name} must be an array, got None")
    frame, x = hasattr(x, "to_dask_array"), da.asarray(x)  # a dask DataFrame/Series: its values, lengths unknown
    if x.dtype == object or not (np.issubdtype(x.dtype, np.number) or x.dtype == bool):
        raise ValueError(not_numbers(name, x.dtype))
    if np.issubdtype(x.dtype, np.complexfloating):
        raise ValueError(f"{name} must be real, got a complex array")
    if x.ndim not in ndim:
        raise ValueError(wrong_ndim(name, ndim, x.shape))
    if any(np.isnan(c) for axis in x.chunks for c in axis):
        call = "to_dask_array(lengths=True)" if frame else "compute_chunk_sizes()"
        raise ValueError(f"{name} has unknown chunk sizes; pass {name}.{call}")
    if x.size == 0:
        raise ValueError(empty_input(name, x.shape))
    if n_rows is not None and x.shape[0] != n_rows:
        raise ValueError(f"{name} has {x.shape[0]} rows, but {n_rows} are needed (one per point)")
    dtype = dtype or (x.dtype if x.dtype in FLOAT_DTYPES else np.float64)
    x = x.astype(dtype).rechunk((rows or x.chunks[0],) + (-1,) * (x.ndim - 1))
    return _finite(x, name) if checked else x


def _finite(x, name):
    return x.map_blocks(partial(_check_finite, param=name), dtype=x.dtype)


def as_dask_points(x, name, *, n_features=None, dtype=None, rows=None, checked=True):
    """A 2-D ``(n, d)`` dask float array of points (1-D input: ``n`` points in 1-D)."""
    x = as_dask_array(x, name, dtype=dtype, rows=rows, checked=checked)
    if x.ndim == 1:
        x = x[:, None]
    if n_features is not None and x.shape[1] != n_features:
        raise ValueError(wrong_features(name, x.shape[1], n_features))
    return x


def dask_bandwidth(bandwidth, samples, name="bandwidth", sample_weight=None):
    """A bandwidth resolved on dask ``samples``: a rule ("scott", "silverman") from the (weighted)
    spread of :func:`localkit.kernels.bandwidth.spread` computed by dask reductions, its ``d``
    numbers gathered; numbers and per-feature arrays checked as in memory (only the shape is read)."""
    import dask.array as da

    return resolve_bandwidth(bandwidth, samples, name, sample_weight, xp=da, host=lambda a: np.asarray(a.compute()))


def dask_resolved(kernel, samples, sample_weight=None):
    """``kernel``, on groups of columns, fixed on all the dask ``samples``: each distance factor's
    bandwidth (a rule resolved on its columns by :func:`dask_bandwidth`, weighted by
    ``sample_weight``) and each categorical factor's levels (the codes each of its columns shows,
    one dask reduction for all of them: :meth:`Kernel.with_levels <localkit.Kernel.with_levels>`),
    as binding it to all the samples in memory would fix them."""
    import dask
    import dask.array as da

    parts = kernel.columns(samples.shape[1])
    seen = iter(dask.compute(*[da.unique(samples[:, j]) for factor, cols in parts if factor.is_categorical
                               for j in cols]))
    factors = []
    for factor, cols in parts:
        if factor.n_neighbors is not None:  # its k-th distance: that of all the samples, in one chunk only
            if len(samples.chunks[0]) > 1:
                raise ValueError(f"kernel: the factor {factor!r} takes its bandwidth from the k nearest samples, which "
                                 "a reduction over sample chunks does not find; give it a bandwidth, or the samples "
                                 "in one chunk (or in memory)")
            factors.append(factor)
        elif factor.is_categorical:
            check_smoothing(factor.bandwidth, factor.name)
            levels = [next(seen) for _ in cols]
            check_codes(np.concatenate(levels), factor.name)
            factors.append(factor.with_levels(levels))
        else:
            factors.append(factor._with(bandwidth=dask_bandwidth(factor.bandwidth, samples[:, cols],
                                                                 sample_weight=sample_weight)))
    return ProductKernel(factors)


# -- what a worker keeps between tasks ------------------------------------------------------------
#: The bytes of sample chunks under the bindings that one process keeps (least recently used
#: dropped first): each query chunk after the first, and each later call on persisted samples,
#: passes over a sample chunk with the binding (and neighbour index) made for it once, per chunk and
#: worker. On a dask worker with a memory limit, at most ``KEPT_SHARE`` of it, and nothing while the
#: process holds more than ``KEPT_ROOM`` of it (its spilling and pausing count this memory too).
INDEX_CACHE_BYTES = 256 * 2**20
KEPT_SHARE, KEPT_ROOM = 0.125, 0.5
_kept, _kept_lock = OrderedDict(), threading.Lock()


def _kept_bytes():
    """What :func:`_kept_index` may hold now (see ``INDEX_CACHE_BYTES``): 0 on a worker short of
    memory (a sample set larger than the workers, streamed through them, must not be held back)."""
    try:
        from distributed import get_worker

        worker = get_worker()
        limit = worker.memory_manager.memory_limit
    except (ImportError, ValueError, AttributeError):  # not on a worker (or no distributed)
        return INDEX_CACHE_BYTES
    if not limit:
        return INDEX_CACHE_BYTES
    if worker.monitor.get_process_memory() > KEPT_ROOM * limit:
        return 0
    return min(INDEX_CACHE_BYTES, int(KEPT_SHARE * limit))


def _kept_index(key, build, nbytes):
    """``build()``'s binding or index, kept under ``key`` (a tuple of arrays and settings) by this
    process. The key is dask's ``tokenize``, which hashes the arrays' contents, so that changed
    samples never meet a stale binding: for a chunk of 250,000 x 3 ~1 ms with xxhash (~6 ms with its
    sha1 fallback), against ~300 ms to build its k-d tree and ~12 ms to bind it for a dense pass (its
    centred, scaled copy and squared norms; a kept binding made a 2-query Gaussian pass over it
    24 -> 9 ms)."""
    from dask.base import tokenize

    token = tokenize(*key)
    with _kept_lock:
        if token in _kept:
            _kept.move_to_end(token)
            return _kept[token][0]
    index = build()  # outside the lock: two tasks may build one twice, never wait on each other
    budget = _kept_bytes()
    with _kept_lock:
        if budget:
            _kept[token] = (index, nbytes)
        # beyond the budget the oldest go; the newest stays (a chunk's index may be larger than it),
        # unless the worker is short of memory: then nothing stays
        while _kept and sum(b for _, b in _kept.values()) > budget and (len(_kept) > 1 or not budget):
            _kept.popitem(last=False)
    return index


# -- per-task settings ----------------------------------------------------------------------------
@contextmanager
def _native_threads(n):
    """One task uses ``n`` native threads (BLAS, OpenMP, numba): a worker runs
    ``threads_per_worker`` tasks at once, so its cores are not oversubscribed."""
    with numba_threads(n), threadpools().limit(limits=n):
        yield


def _offsets(chunks):
    """The first row of each chunk, one chunk per block (to recognise diagonal blocks)."""
    da = _require_dask()
    return da.from_array(np.cumsum((0,) + tuple(chunks[:-1])), chunks=1)


# -- partial states ---------------------------------------------------------------------------
# A fixed-bandwidth state row is [mean (p), log weight sum, nearest distance, nearest value (p)].
# The nearest is the chunk's nearest sample that carries weight, for the queries whose
# neighbourhood is empty in the chunk (distance inf: none). With exclude_self a query's own
# sample is its nearest only as a last resort (the in-memory engine's fallback when no other
# sample carries weight): it then stands at the distance ``_SELF_ONLY``, beyond every real
# distance, so any other chunk's live sample wins the merge.
def _self_only(dtype):
    return np.finfo(dtype).max


class _Pass(NamedTuple):
    """What the pair tasks of one reduction share: the kernel (its bandwidth fixed), the number of
    value columns ``p``, ``exclude_self``, the native threads of a task, and the engine options of
    a pair's pass (:func:`_pair_state`) or the ``k`` of a kNN kernel (:func:`_knn_state`; with
    ``nearest``, also each chunk's nearest sample that carries weight)."""

    kernel: object
    p: int
    exclude_self: bool
    threads: int
    options: dict | None = None
    k: int | None = None
    nearest: bool = False


def _pair_state(q, s, v, q_off, s_off, qsc, c, ssc, *, spec):
    """The partial state of one (query chunk, sample chunk) pair, from the in-memory engine
    (:class:`_Pass` ``spec``)."""
    kernel, p, exclude_self, threads, options = spec.kernel, spec.p, spec.exclude_self, spec.threads, spec.options
    exclude = bool(exclude_self and q_off[0] == s_off[0])  # aligned chunks: only diagonal pairs overlap
    if exclude_self:
        refuse_twins(s if exclude else np.concatenate([q, s]), "the dask path")
    state = np.zeros((len(q), 1, 2 * p + 2), dtype=q.dtype if v is None else v.dtype)
    state[:, 0, p], state[:, 0, p + 1] = -np.inf, np.inf
    if c is not None and not np.any(c > 0):  # nothing can carry weight in this chunk
        return state
    if exclude and len(s) == 1:  # the query's own sample only (the engine needs 2 for leave-one-out)
        state[:, 0, p + 1], state[:, 0, p + 2:] = _nearest(q, np.arange(len(q)), s, v, c, kernel, exclude, p,
                                                           state.dtype)
        return state
    # A chunk whose only live sample is one query's own still weighs for every other query:
    # the engine excludes it at that query alone (its row comes back empty).
    from ..bound import BoundKernel, make_kernel  # here: engine.bound imports this package (a cycle)

    # the policy deferred: a chunk's empty rows are flagged, unfilled and unwarned (their means weigh
    # 0 in the merge, which decides; their nearest sample is taken below). No catch_warnings here:
    # dask runs chunks on threads, and it restores the warning filters of every thread
    kern = make_kernel(kernel)

    def bind():
        return BoundKernel(kern, s, sample_weight=c, sample_scale=ssc,
                           options=EngineOptions(empty=DEFERRED, n_jobs=threads, **options))

    with _native_threads(threads):
        bound = _kept_index(("binding", kern, s, c, ssc, threads, sorted(options.items())), bind, 3 * s.nbytes)
        out = bound.sums(q, v, exclude_self=exclude, query_scale=qsc)
    if p:
        state[:, 0, :p] = out.mean.reshape(len(q), p)
    state[:, 0, p] = out.log_weight_sum
    rows = np.flatnonzero(out.empty)
    if len(rows):
        state[rows, 0, p + 1], state[rows, 0, p + 2:] = _nearest(q[rows], rows, s, v, c, kernel, exclude, p,
                                                                 state.dtype)
    return state


def _nearest(q, rows, s, v, c, kernel, exclude, p, dtype):
    """Distance to and value of the chunk's nearest sample that carries weight for the queries
    ``q`` (chunk rows ``rows``), found by the engine
    (:meth:`BoundKernel.nearest <localkit.engine.BoundKernel.nearest>`); with ``exclude`` another
    than the query's own sample, which counts only where it is the one live sample, at the
    distance ``_self_only(dtype)``; inf where no sample is live."""
    dist = np.full(len(q), np.inf, dtype=dtype)
    values = np.zeros((len(q), p), dtype=dtype)
    if len(q) == 0 or (c is not None and not np.any(c > 0)):
        return dist, values
    from ..bound import BoundKernel, make_kernel

    def bind():
        return BoundKernel(kernel, s, sample_weight=c)

    bound = _kept_index(("nearest", kernel, s, c), bind, 3 * s.nbytes)
    u, near = bound.nearest(q, self_rows=rows if exclude else None, return_distance=True)
    dist[:] = u
    if exclude:
        dist[near == rows] = _self_only(dtype)
    if p:
        values[:] = v.reshape(len(s), p)[near]
    return dist, values


def _merge_states(x, p):
    """Combine states ``x`` (n, m, 2p + 2) along axis 1 (:func:`~localkit.engine.stream.merge_states`;
    the nearest sample: the nearest of the chunks')."""
    out = np.empty((len(x), 1, x.shape[2]), dtype=x.dtype)
    out[:, 0, p], out[:, 0, :p] = merge_states(x[:, :, p], x[:, :, :p])  # an empty state (l = -inf) weighs 0
    best = np.argmin(x[:, :, p + 1], axis=1)
    out[:, 0, p + 1:] = x[np.arange(len(x)), best, p + 1:]
    return out


def _finish_states(x, *, p, empty):
    """``[mean, log weight sum]`` from merged states, the empty-neighbourhood policy applied."""
    def nearest(rows):
        if np.isinf(x[rows, p + 1]).any():
            raise ValueError("sample_weight is zero everywhere; at least one sample must carry weight")
        return x[rows, p + 2:]

    # (the warning is raised where the chunk is computed: a worker, on a cluster)
    mean, ls = x[:, :p], x[:, p]
    mean = apply_empty(np, empty, mean, ~(ls > -np.inf), nearest, stacklevel=2)
    return np.concatenate([mean, ls[:, None]], axis=1)


# A kNN state row is [k distances, k rows of (c v, c)], nearest first, and for a profile that
# vanishes at the edge the sum of (c v, c) over the samples at the query's point (nb.coincident);
# with ``nearest`` (compact profiles) then [nearest distance, nearest value (p)]: the chunk's
# nearest sample that carries weight (another than the query's own with exclude_self, which
# counts only as a last resort, as in _nearest), for the empty-neighbourhood policy, since all
# k nearest may have zero weight.
def _knn_state(q, s, v, q_off, s_off, c, *, spec):
    """The ``k`` nearest samples of each query within one sample chunk (padded with ``inf``;
    :class:`_Pass` ``spec``)."""
    kernel, k, p, exclude_self, threads, nearest = (spec.kernel, spec.k, spec.p, spec.exclude_self, spec.threads,
                                                    spec.nearest)
    exclude = bool(exclude_self and q_off[0] == s_off[0])
    if exclude_self:
        refuse_twins(s if exclude else np.concatenate([q, s]), "the dask path")
    dtype = q.dtype if v is None else v.dtype
    dist = np.full((len(q), k), np.inf, dtype=dtype)
    vals = np.zeros((len(q), k, p + 1), dtype=dtype)
    at_point = np.zeros((len(q), p + 1 if kernel.profile.vanishes_at_edge else 0), dtype=dtype)
    near = np.zeros((len(q), p + 1 if nearest else 0), dtype=dtype)
    near[:, :1] = np.inf
    kk = min(k, len(s) - int(exclude))
    if kk > 0:
        h = kernel.bandwidth
        aug = augment(np.zeros((len(s), 0), dtype=dtype) if v is None else v.reshape(len(s), p))
        aug = aug if c is None else aug * c[:, None]
        with _native_threads(threads):
            index = _kept_index(("kNN index", s, h, kernel.metric, kernel.p),
                                lambda: nb.make_index(kernel.scale(s, h), kernel.metric, kernel.p, exact=True),
                                2 * s.nbytes)
            dist[:, :kk], idx = nb.kneighbors(index, kernel.scale(q, h), kk, exclude_self=exclude)
            # the nearest at distance 0: this chunk's samples at the query's point
            rows, found = nb.coincident(index, kernel.scale(q, h), dist[:, :1], kernel.profile, exclude_self=exclude)
        vals[:, :kk] = aug[idx]
        for r, f in zip(rows, found):
            at_point[r] = aug[f].sum(axis=0)
        if nearest and c is None:  # every sample is live: the first of the k nearest
            near[:, 0] = dist[:, 0]
            if p:
                near[:, 1:] = v.reshape(len(s), p)[idx[:, 0]]
    if nearest and (c is not None or kk == 0):
        with _native_threads(threads):
            near[:, 0], near[:, 1:] = _nearest(q, np.arange(len(q)), s, v, c, kernel, exclude, p, dtype)
    return np.concatenate([dist, vals.reshape(len(q), -1), at_point, near], axis=1)[:, None, :]


def _merge_knn(x, k, p, nearest=False):
    """The global ``k`` nearest from per-chunk ``k`` nearest (a stable sort keeps chunk order on
    ties), the sums at the queries' points added up and (``nearest``) the nearest sample that
    carries weight (the smallest distance; ties: the earlier chunk)."""
    n, m = x.shape[:2]
    dist = x[:, :, :k].reshape(n, m * k)
    width = p + 1
    vals = x[:, :, k:k + k * width].reshape(n, m * k, -1)
    order = np.argsort(dist, axis=1, kind="stable")[:, :k]
    r = np.arange(n)[:, None]
    tail = p + 1 if nearest else 0
    at_point = x[:, :, k + k * width:x.shape[2] - tail].sum(axis=1)
    best = np.argmin(x[:, :, x.shape[2] - tail], axis=1) if nearest else np.zeros(n, dtype=np.intp)
    near = x[np.arange(n), best, x.shape[2] - tail:]
    return np.concatenate([dist[r, order], vals[r, order].reshape(n, -1), at_point, near], axis=1)[:, None, :]


def _finish_knn(x, *, k, p, profile, empty):
    """``[mean, log weight sum]`` over exactly the k nearest, ``w_j = k(d_j / d_k)`` (as in memory;
    ``d_k = 0``: every sample at the query's point, for a profile that vanishes at the edge), the
    empty-neighbourhood policy applied (the nearest: the nearest sample that carries weight, merged
    over the chunks, which need not be one of the k)."""
    n = len(x)
    dist, aug = x[:, :k], x[:, k:k + k * (p + 1)].reshape(n, k, p + 1)
    L = profile.log_k(nb.scaled_sq_distances(dist, dist[:, -1]))
    S, shift = nb._gathered_sums(L, np.arange(n * k).reshape(n, k), aug.reshape(n * k, p + 1))
    end = k + k * (p + 1)
    if profile.vanishes_at_edge:
        there = dist[:, -1] == 0
        S[there], shift[there] = x[there, end:end + p + 1], profile.log_k0
        end += p + 1

    def nearest(rows):
        if np.isinf(x[rows, end]).any():
            raise ValueError("sample_weight is zero everywhere; at least one sample must carry weight")
        return x[rows, end + 1:end + 1 + p]

    with np.errstate(divide="ignore", invalid="ignore"):
        mean, ls = S[:, :-1] / S[:, -1:], shift + np.log(S[:, -1])
    mean = apply_empty(np, empty, mean, ~(ls > -np.inf), nearest, stacklevel=2)
    return np.concatenate([mean, ls[:, None]], axis=1)


def _kth_distance(x, *, k):
    return np.ascontiguousarray(x[:, k - 1])


# -- the reduction ----------------------------------------------------------------------------
def _merged(x, merge):
    """The states ``x`` (n, m, w) of a query chunk's m pairs merged into (n, w)."""
    return merge(x)[:, 0, :]


def _checked_pair(block, q, s, v, *rest):
    """``block`` of one (query chunk, sample chunk) pair, on the chunks as given: their finiteness
    checked here and 1-D values made a column, not by layers of their own (on a distributed
    scheduler every layer costs a task per chunk, ~3 ms each: 2 queries against 8 sample chunks
    were 72 tasks, 28 now)."""
    for x, name in ((q, "queries"), (s, "samples"), (v, "values")):
        if x is not None:
            _check_finite(x, name)
    return block(q, s, v if v is None or v.ndim == 2 else v[:, None], *rest)


def _reduce(block, merge, width, dtype, Q, S, V, per_point, exclude_self):
    """States of every (query chunk, sample chunk) pair by ``block`` (on unchecked chunks,
    :func:`_checked_pair`), merged along sample chunks by ``merge``: a dask array
    (n_queries, width). ``per_point``: ``(array or None, "i" or "j")`` pairs, the arrays a pair
    also takes, one value per query (``"i"``) or per sample (``"j"``). The chunks' first rows go
    with ``exclude_self`` only (to recognise diagonal pairs)."""
    da = _require_dask()
    args = [Q, "iz", S, "jz", V, None if V is None else ("jp" if V.ndim == 2 else "j")]
    args += [_offsets(Q.chunks[0]), "i", _offsets(S.chunks[0]), "j"] if exclude_self else [None, None, None, None]
    for arr, ind in per_point:
        args += [arr, None if arr is None else ind]
    pairs = da.blockwise(partial(_checked_pair, block), "ijw", *args, new_axes={"w": width}, adjust_chunks={"j": 1},
                         align_arrays=False, concatenate=True, dtype=dtype, meta=np.empty((0, 0, 0), dtype))
    # one merge of a query chunk's states (small: a row per query and sample chunk), contracting j:
    # dask.array.reduction's tree adds an identity task per pair and a task per level
    return da.blockwise(partial(_merged, merge=merge), "iw", pairs, "ijw", concatenate=True,
                        dtype=dtype, meta=np.empty((0, 0), dtype))


def dask_local_sums(queries, samples, values, kernel, *, exclude_self=False, sample_weight=None,
                    sample_scale=None, query_scale=None, options=None):
    """:func:`~localkit.engine.local_sums` on dask arrays (any mix with NumPy), lazily: what
    :meth:`Binding.sums <localkit.engine.Binding.sums>` runs when an array is a dask collection.

    ``kernel`` a :class:`~localkit.Kernel`; the arrays as :func:`~localkit.engine.local_sums` takes
    them; ``options`` an :class:`~localkit.engine.EngineOptions` for every chunk's pass (default
    ``EngineOptions()``), whose ``n_jobs`` is the number of native threads of one task (default
    1: a worker runs ``threads_per_worker`` tasks at once). Sample chunks define the reduction
    (each query chunk's states merged by one task); ``values``, ``sample_weight`` and ``sample_scale`` are
    re-chunked to them, and with ``exclude_self`` so are the queries (only diagonal pairs then
    drop a weight).

    Returns
    -------
    LocalSums
        With dask arrays: ``mean`` (n_queries, p) or (n_queries,) (None without values),
        ``log_weight_sum`` and ``empty`` (n_queries,). Errors that depend on the values (NaN,
        an empty neighbourhood with ``empty="raise"``) are raised when they are computed.
    """
    from ..bound import make_kernel  # here: engine.bound imports this package (a cycle)

    check_exclude_self(exclude_self)
    kern, options = make_kernel(kernel), EngineOptions() if options is None else options
    empty = options.empty
    if isinstance(kern, SumKernel):
        return _dask_sum(kern, queries, samples, values, exclude_self, options,
                         dict(sample_weight=sample_weight, query_scale=query_scale, sample_scale=sample_scale))
    threads = 1 if options.n_jobs is None else resolve_n_jobs(options.n_jobs)
    # the pairs' chunks are checked in their tasks (_checked_pair), the rules' by a layer
    S = as_dask_points(samples, "samples", checked=False)
    dtype, (n_s, d), rows = S.dtype, S.shape, S.chunks[0]
    if queries is None:
        Q = S
    else:
        Q = as_dask_points(queries, "queries", n_features=d, dtype=dtype, checked=False)
    p, squeeze, V = 0, False, None
    if values is not None:
        V = as_dask_array(values, "values", n_rows=n_s, rows=rows, checked=False)
        squeeze = V.ndim == 1
        V = V.astype(np.result_type(dtype, V.dtype))
        p = 1 if squeeze else V.shape[1]
    out_dtype = dtype if V is None else V.dtype
    c = _per_point(sample_weight, "sample_weight", n_s, rows)
    if callable(kern.metric) or kern.metric == "precomputed":
        raise ValueError(f"metric={kern.metric!r} is not available on dask arrays (chunks need coordinates); "
                         "use a named metric of coordinates")
    k = kern.n_neighbors
    check_pass(kern, Q.shape[0], n_s, exclude_self=exclude_self, query_scale=query_scale, sample_scale=sample_scale)
    if exclude_self:
        Q = Q.rechunk((rows, -1))  # aligned with the samples: only diagonal pairs hold a query's own sample
    q_scale = _per_point(query_scale, "query_scale", Q.shape[0], Q.chunks[0])
    s_scale = _per_point(sample_scale, "sample_scale", n_s, rows)
    if kern.composite:  # rules and levels of all the samples, not of each chunk
        bound = dask_resolved(kern, _finite(S, "samples"), c)
    else:
        # fixed from here on
        bound = kern.at_bandwidth(dask_bandwidth(kern.bandwidth, _finite(S, "samples"), sample_weight=c))
    if k is not None:
        knn = partial(_knn_state, spec=_Pass(bound, p if kern.compact else 0, exclude_self, threads, k=k,
                                             nearest=kern.compact))
        width = k * (p + 2) + (p + 1) * kern.profile.vanishes_at_edge + (p + 1) if kern.compact else 2 * k
        nearest = _reduce(knn, partial(_merge_knn, k=k, p=p if kern.compact else 0, nearest=kern.compact), width,
                          out_dtype, Q, S, V if kern.compact else None, [(c if kern.compact else None, "j")],
                          exclude_self)
        if kern.compact:
            final = nearest.map_blocks(partial(_finish_knn, k=k, p=p, profile=kern.profile, empty=empty),
                                       chunks=(Q.chunks[0], (p + 1,)), dtype=out_dtype)
            return _result(final, p, values is None, squeeze, dtype, out_dtype)
        q_scale = nearest.map_blocks(partial(_kth_distance, k=k), drop_axis=1, dtype=out_dtype)
    block = partial(_pair_state, spec=_Pass(bound, p, exclude_self, threads,
                                            options=dict(algorithm=options.algorithm, block_size=options.block_size,
                                                         memory_budget=options.memory_budget,
                                                         exact_edge=options.exact_edge)))
    merged = _reduce(block, partial(_merge_states, p=p), 2 * p + 2, out_dtype, Q, S, V,
                     [(q_scale, "i"), (c, "j"), (s_scale, "j")], exclude_self)
    final = merged.map_blocks(partial(_finish_states, p=p, empty=empty),
                              chunks=(Q.chunks[0], (p + 1,)), dtype=out_dtype)
    return _result(final, p, values is None, squeeze, dtype, out_dtype)


def _dask_sum(kern, queries, samples, values, exclude_self, options, arrays):
    """:func:`dask_local_sums` of a sum of kernels: each term's own reduction (its rules, levels
    and kNN bandwidths on all the samples), with the "nearest" policy, combined per query chunk
    by :func:`~localkit.engine.sums.combine_terms` (the sum's ``empty`` policy applied there)."""
    da = _require_dask()
    empty, nearest = options.empty, dataclasses.replace(options, empty="nearest")
    terms = [(math.log(w), dask_local_sums(queries, samples, values, k, exclude_self=exclude_self, options=nearest,
                                           **arrays))
             for w, k in kern.terms if w > 0]
    first = terms[0][1]
    no_values, squeeze = first.mean is None, first.mean is not None and first.mean.ndim == 1
    p = 0 if no_values else (1 if squeeze else first.mean.shape[1])
    dtype, out_dtype = first.log_weight_sum.dtype, first.log_weight_sum.dtype if no_values else first.mean.dtype
    stacks = [out.log_weight_sum[:, None].astype(out_dtype) if no_values else
              da.concatenate([out.mean.reshape(-1, p), out.log_weight_sum[:, None].astype(out_dtype)],
                             axis=1).rechunk({1: -1})
              for _, out in terms]
    final = da.map_blocks(partial(_combine_sum, log_w=[log_w for log_w, _ in terms], p=p, empty=empty,
                                  no_values=no_values), *stacks, chunks=(stacks[0].chunks[0], (p + 1,)),
                          dtype=out_dtype)
    return _result(final, p, no_values, squeeze, dtype, out_dtype)


def _combine_sum(*blocks, log_w, p, empty, no_values):
    """``[mean, log weight sum]`` of a sum from its terms' (n, p + 1) blocks."""
    outs = [(lw, LocalSums(None if no_values else b[:, :p], b[:, p], ~(b[:, p] > -np.inf)))
            for lw, b in zip(log_w, blocks)]
    from ..sums import combine_terms  # here: engine.sums imports this package (a cycle)

    out = combine_terms(outs, empty, no_values)
    return out.log_weight_sum[:, None] if no_values else np.concatenate([out.mean, out.log_weight_sum[:, None]],
                                                                          axis=1)


def _per_point(x, name, n, rows):
    """An optional per-point array (weights, scales): 1-D, ``n`` long, finite, ``>= 0``."""
    if x is None:
        return None
    x = as_dask_array(x, name, ndim=(1,), n_rows=n, rows=rows)
    return x.map_blocks(partial(_check_nonnegative, param=name), dtype=x.dtype)


def _result(final, p, no_values, squeeze, dtype, out_dtype):
    log_sum = final[:, p].astype(dtype)
    empty = ~(log_sum > -np.inf)
    if no_values:
        return LocalSums(None, log_sum, empty)
    mean = final[:, 0] if squeeze else final[:, :p]
    return LocalSums(mean.astype(out_dtype), log_sum, empty)
