"""The engine on any array library: PyTorch tensors (CPU or CUDA), CuPy, through the array API.

scikit-learn's convention: with ``sklearn.config_context(array_api_dispatch=True)`` (and
``SCIPY_ARRAY_API=1``), arrays that are not NumPy's are computed on their own device and the
result comes back in the same library on the same device. NumPy input keeps the NumPy passes
(and their compiled CPU forms).

What is specific to a namespace lives here: detection and coercion (:func:`namespace_of`,
:func:`first_foreign`, :func:`to_host`) and the one pass the planner takes on a device,
:func:`streamed_path`. Everything else (the checks, bandwidth rules, sample weights, the
empty-neighbourhood policy, the result) is the :class:`~localkit.engine.BoundKernel`'s, written
once for every namespace.

The streamed pass is the engine's streaming local mean: blocks of queries against blocks of
samples, the log-weights of each block formed by the :class:`~localkit.engine.query_blocks.QueryBlock`
that the host's pass forms too, over coordinates that :class:`~localkit.engine.query_blocks.ArrayBlocks`
lays out on the device (one matrix product, queries recentred per block, so that float32 keeps its
digits far from the origin), summed across sample blocks by the
online log-sum-exp (as flash attention does) of the loop that the host's dense path runs too
(:func:`~localkit.engine.passes.streamed.stream_sums`). Memory is one block, never
``n_queries x n_samples``. The kernel's profile is the very statement of
:mod:`localkit.kernels.profiles`, bound to the namespace.
kNN bandwidths sort whole rows of distances (the array API has no partial sort), a block of
queries at a time.
"""
from __future__ import annotations

import math
import numpy as np

from ..blocks import block_sizes
from ..checks import as_points
from ...kernels.distances import rescale, summed_sq_distances
from ..query_blocks import ACCELERATOR_BLOCK_CELLS, LOG_WEIGHT_TOL, ArrayBlocks, h_array, k_smallest, sq_distance_rows
from ..planner import COMPILED_BANDWIDTHS
from ..stream import merge_states
from ..twins import refuse_twins


def foreign_namespace(*arrays):
    """The array namespace of ``arrays`` when array-API dispatch is on and they are not NumPy's;
    ``None`` otherwise (then the NumPy engine runs)."""
    from sklearn.utils._array_api import _is_numpy_namespace, get_namespace

    present = [a for a in arrays if a is not None and not isinstance(a, (int, float, str, list, tuple))]
    if not present or all(isinstance(a, np.ndarray) for a in present):
        return None
    foreign = [a for a in present if not isinstance(a, np.ndarray)]
    xp, is_array_api = get_namespace(*foreign)
    return None if not is_array_api or _is_numpy_namespace(xp) else xp


def namespace_of(*arrays):
    """The namespace a pass over ``arrays`` runs in: :func:`foreign_namespace`, else NumPy."""
    xp = foreign_namespace(*arrays)
    return np if xp is None else xp


def first_foreign(*arrays):
    """The first of ``arrays`` that is not NumPy's (whose device the others move to), or None."""
    return next((a for a in arrays if a is not None and not isinstance(a, (np.ndarray, int, float, str, list, tuple))),
                None)


def device_of(a):
    from sklearn.utils._array_api import device

    return device(a)


def device_kw(like):
    """``{"device": ...}`` for creating arrays beside ``like`` (nothing for NumPy arrays)."""
    return {} if isinstance(like, np.ndarray) else {"device": device_of(like)}


def to_host(xp, a):
    """A NumPy copy of the array ``a`` of the namespace ``xp``."""
    from sklearn.utils._array_api import _convert_to_numpy

    return _convert_to_numpy(xp.asarray(a), xp)


def refuse_on_device(kernel):
    """Raise for what the array-API pass cannot compute: callables and precomputed distances."""
    if callable(kernel.metric) or kernel.metric == "precomputed":
        raise ValueError(f"metric={kernel.metric!r} is not available for array-API inputs; use a named metric "
                         f"({', '.join(XP_METRICS)}), or pass NumPy arrays")


def streamed_path(bound, queries, Q, V_aug, q_scale, exclude_self):
    """The engine's pass on arrays of another namespace, on their device: ``(S, shift)`` as every
    path returns them (:mod:`localkit.engine.passes.dense`), for every profile and the softmax kernel
    (logits beyond the float range streamed as ``logits / 2^k``), fixed, per-feature and rule
    bandwidths, kNN bandwidths, per-point scales (``u = d / (h q_i s_j)``), the norm metrics and
    "cosine", ``exclude_self`` and sample weights: the blocks of
    :class:`~localkit.engine.query_blocks.ArrayBlocks`, summed by :func:`_stream`; a compact kNN
    kernel over exactly its k nearest; FlexAttention where it fuses the whole pass.

    ``options.algorithm="compiled"`` (or ``exact_edge``) takes the compiled compact pass's
    arithmetic: raw coordinates, the support ``|q - x|^2 <= h^2`` summed feature by feature, so
    that points at distance ``h`` are decided as on the host (and as scikit-learn's radius
    queries decide them).
    """
    # NumPy arrays (algorithm="streamed") through the array API's NumPy namespace: the same code
    xp, kernel, options = array_namespace(bound), bound.kernel, bound.options
    X = bound.samples
    if bound.on_host and queries is not None:  # the pass lays out its own coordinates from the raw points
        Q = as_points(np, queries, "queries", n_features=bound.n_features, dtype=bound.dtype)
    elif bound.on_host:
        Q = X
    if exclude_self and bound.twins is not None:
        refuse_twins(bound.host(X), "the array-API path")
    edge = _exact_edge(xp, bound, Q, q_scale, exclude_self)
    blocks = ArrayBlocks(xp, bound, Q, q_scale, exclude_self, exact_edge=edge)
    if kernel.n_neighbors is not None and kernel.compact:
        weight = bound.weight
        return _knn_sums(xp, *_index_coordinates(xp, Q, X, bound.h, blocks.Qs, blocks.Xs, kernel),
                         V_aug if weight is None else V_aug * weight[:, None], kernel, exclude_self)
    fused = None
    if blocks.fusable and _flex_fits(xp, blocks.Qs, blocks.Xs, kernel, options):
        from ...fused.flex import fused_or_none

        weight = bound.weight
        fused = fused_or_none(("local sums", kernel.name, exclude_self, weight is not None),
                              lambda: flex_sums(blocks.Qs, blocks.Xs, V_aug[:, :-1], weight, kernel, exclude_self))
    return fused if fused is not None else _stream(xp, blocks, V_aug, bound.log_weight, exclude_self, options)


def array_namespace(bound):
    """The namespace the streamed pass computes in: the samples' (NumPy's through array-api-compat)."""
    if bound.on_host:
        from sklearn.externals.array_api_compat import numpy as compat_numpy

        return compat_numpy
    return bound.xp


def device_nearest(bound, queries, rows=None, self_rows=None):
    """:meth:`BoundKernel.nearest <localkit.engine.BoundKernel.nearest>` on a device: the nearest
    sample that carries weight, from exact distances in the kernel's metric (each feature over its
    bandwidth for a norm), streamed over blocks."""
    xp, kernel, X = bound.xp, bound.kernel, bound.samples
    Q = bound.coordinates(queries)
    if rows is not None:
        Q = xp.take(Q, rows, axis=0)
    if kernel.norm_metric:
        hh = h_array(xp, bound.h, X)
        Q, X = Q / hh, X / hh
    dead = None if bound.weight is None else bound.weight == 0
    return xp_nearest(xp, Q, X, kernel, rows=self_rows, dead=dead)[0]


#: Metrics of the array-API path (callables and precomputed distances need NumPy arrays)
XP_METRICS = ("euclidean", "manhattan", "chebyshev", "minkowski", "cosine")


def _flex_fits(xp, Qs, Xs, kernel, options):
    """FlexAttention fuses the whole local mean on CUDA in float32 (one kernel per
    :data:`FLEX_KEYS` samples, no ``n x m`` block in memory; 5.4x the streamed blocks on an H200,
    see benchmarks/RESULTS.md) when its
    features keep the engine's error budget: the matrix-product form of ``u^2`` errs by about
    ``eps (|q|^2 + |x|^2)`` (no per-block recentring there), and the kinked profiles want exact
    differences."""
    if options.block_size is not None or Qs.dtype != xp.float32 or not getattr(Qs, "is_cuda", False):
        return False  # torch (an optional dependency) is imported for CUDA tensors only
    from ...fused.flex import flex_available

    if not flex_available(Qs):
        return False
    if kernel.is_softmax:  # the logits q . x / h must stay finite in float32
        return float(xp.max(xp.abs(Qs))) * float(xp.max(xp.abs(Xs))) * Qs.shape[1] < 1e37
    if kernel.profile.exact_distance:
        return False
    reach = float(xp.max(xp.sum(Qs * Qs, axis=1))) + float(xp.max(xp.sum(Xs * Xs, axis=1)))
    return 2 * float(xp.finfo(Qs.dtype).eps) * reach <= LOG_WEIGHT_TOL[np.dtype(np.float32)]


#: Samples per FlexAttention call of :func:`flex_sums`. Its IEEE float32 product of the weights with
#: the values is one FMA chain per query that adds each sample's term to the running sum (Triton
#: folds ``acc + dot`` into ``dot(..., acc)``), so that terms below half its ulp vanish from the
#: means, not from the weight sums: over 262,144 samples that cost 2.0e-4 on an H200. Emulated on
#: the CPU (``benchmarks/RESULTS.md``), chunks of 8,192 samples merged by their log-sum-exp bring
#: that case to 3.3e-6 (16,384: 7.6e-6, 65,536: 3.6e-5).
FLEX_KEYS = 8192


def flex_sums(Qs, Xs, V, weight, kernel, exclude_self, compiled=True):
    """``(S, shift)`` as :func:`_stream` returns them (the last column of ``S`` the weight sum), from
    FlexAttention calls over chunks of :data:`FLEX_KEYS` samples: each gives the chunk's normalised
    means and log-sum-exp, merged here as the streamed path merges its blocks; sample weights enter
    as log weights added to the scores. Torch tensors, scaled coordinates."""
    import torch
    from sklearn.externals import array_api_compat

    from ...fused.flex import flex_kernel_attention

    xp = array_api_compat.array_namespace(Qs)
    one = torch.ones((1, 1, 1), dtype=Qs.dtype, device=Qs.device)
    log_weight = None if weight is None else torch.log(weight)
    name = "softmax" if kernel.is_softmax else kernel.profile.name
    mean = lse = None
    for start in range(0, Xs.shape[0], FLEX_KEYS):
        keys = slice(start, start + FLEX_KEYS)
        out, part = flex_kernel_attention(name, Qs[None], Xs[None, keys], V[None, keys], one, False, None, compiled,
                                          self_offset=start if exclude_self else None, return_lse=True,
                                          log_weight=None if log_weight is None else log_weight[keys])
        out, part = out[0], part[0]
        if mean is None:
            mean, lse = out, part
            continue
        # the engine's one merge of two states (a row without weight in both: lse -inf, its mean unread)
        lse, mean = merge_states(torch.stack([lse, part], dim=1), torch.stack([mean, out], dim=1), xp)
    return torch.cat([mean, torch.ones_like(mean[:, :1])], dim=1), lse.to(Qs.dtype)


def _stream(xp, blocks, V_aug, log_weight, exclude_self, options):
    """``(S, shift)``: the one streamed pass (:func:`~localkit.engine.passes.streamed.stream_sums`)
    over the :class:`~localkit.engine.query_blocks.ArrayBlocks` ``blocks``, in the namespace ``xp``;
    ``log_weight`` (n_samples,): ``log c_j`` added to the log-weights (the values are unweighted),
    divided by ``2^k`` with softmax logits that arrive so (``blocks.logit_exponent``)."""
    from ..passes.streamed import sample_log_weights, stream_sums

    n_q, n_s = blocks.Qs.shape[0], blocks.Xs.shape[0]
    dev = device_of(blocks.Qs)
    if options.block_size is not None or "cpu" in str(dev):
        bq, bs = block_sizes(n_q, n_s, 4 if blocks.dtype == xp.float32 else 8, options, n_features=blocks.Qs.shape[1])
    else:
        bs = min(n_s, 8192)
        bq = max(1, min(n_q, ACCELERATOR_BLOCK_CELLS // bs))
    order = blocks.order
    log_weight = sample_log_weights(log_weight, blocks.logit_exponent)

    def block_sums(rows, fold_offset):
        block = blocks.block(rows)
        for c0 in range(0, n_s, bs):
            cols = slice(c0, min(c0 + bs, n_s))
            L, _ = block.log_weights(cols, fold_offset=True)
            if log_weight is not None:  # log c_j inside the shift's maximum (see localkit.engine.passes.streamed)
                L = L + log_weight[None, cols]
            if exclude_self:
                ids = xp.arange(rows.start, rows.stop, device=dev) if order is None else order[rows]
                L = xp.where(ids[:, None] == xp.arange(c0, cols.stop, device=dev)[None, :], -math.inf, L)
            yield L, None, V_aug[cols, ...]

    return stream_sums(xp, n_q, bq, block_sums, V_aug, order=order, exponent=blocks.logit_exponent,
                       threads=options.threads)


def _exact_edge(xp, bound, Q, q_scale, exclude_self):
    """True where the uniform profile's edge (its one jump) is decided by the compiled pass's test
    ``|q - x|^2 <= h^2``, as the host decides it (:attr:`localkit.engine.BoundKernel.exact_edge`):
    where ``options.algorithm="compiled"`` or ``options.exact_edge`` asks for the compiled
    arithmetic, and for the uniform profile at a fixed bandwidth (scalar or per feature) whose
    squared differences stay in the float range."""
    from ..planner import device_compiled_fits

    kernel, options, X, h = bound.kernel, bound.options, bound.samples, bound.h
    if bound.factors is not None:
        return False
    if device_compiled_fits(bound, q_scale, exclude_self) and (options.algorithm == "compiled" or options.exact_edge):
        return True
    lo, hi = COMPILED_BANDWIDTHS
    widths = np.atleast_1d(np.asarray(h, dtype=np.float64))
    if not (kernel.compact and kernel.profile.flat and kernel.n_neighbors is None
            and kernel.metric == "euclidean" and q_scale is None and bound.sample_scale is None
            and np.all((widths > lo) & (widths < hi))):
        return False
    limit = float(xp.finfo(X.dtype).max) ** 0.25 * float(widths.min())  # the scaled points stay below the root
    return max(float(xp.max(xp.abs(t))) if t.shape[0] else 0.0 for t in (Q, X)) < min(limit, 1e100)


def _index_coordinates(xp, Q, X, h, Qs, Xs, kernel):
    """Queries and samples for a neighbour search in the NumPy engine's index coordinates
    (:meth:`localkit.engine.BoundKernel.index_points`): raw for a scalar bandwidth, each feature
    divided by its bandwidth otherwise, so that ties of distances on a lattice stay ties; the
    engine's ``(Qs, Xs)`` where a squared difference could overflow."""
    if not kernel.norm_metric:
        return Qs, Xs
    scaled = Q, X
    if np.ndim(h) != 0:
        hh = h_array(xp, h, X)
        scaled = Q / hh, X / hh
    limit = float(xp.finfo(X.dtype).max) ** 0.25
    big = max(float(xp.max(xp.abs(t))) if t.shape[0] else 0.0 for t in scaled)
    return scaled if big < limit else (Qs, Xs)


def _knn_sums(xp, Qs, Xs, V_aug, kernel, exclude_self):
    """``(S, shift)`` over exactly the k nearest samples of each query, ``u = d / d_k``, as the
    NumPy engine's neighbour path: where ``d_k = 0`` every sample at the query's point, each of
    weight ``k(0)``, for a profile that vanishes at the edge (:func:`localkit.engine.passes.neighbors.coincident`)."""
    log_k, k = kernel.profile.log_k_for(xp), kernel.n_neighbors
    parts = []
    for D in sq_distance_rows(xp, Qs, Xs, kernel, exclude_self):
        dist, idx = k_smallest(xp, D, k)
        W = xp.exp(log_k(rescale(dist * dist, dist[:, -1], None, xp)))
        gathered = xp.reshape(xp.take(V_aug, xp.reshape(idx, (-1,)), axis=0), (*idx.shape, V_aug.shape[1]))
        S = xp.sum(W[:, :, None] * gathered, axis=1)
        if kernel.profile.vanishes_at_edge:
            at_point = xp.astype(D == 0, V_aug.dtype) @ V_aug * xp.exp(log_k(xp.zeros_like(dist[:, :1])))
            S = xp.where(dist[:, -1:] == 0, at_point, S)
        parts.append(S)
    S = xp.concat(parts, axis=0)
    return S, xp.zeros((S.shape[0],), dtype=S.dtype, device=device_of(S))


def xp_nearest(xp, Q, X, kernel, *, rows=None, dead=None):
    """``(index, sq_distance)`` of the nearest sample of each query in ``kernel``'s metric, an
    argmin of exact distances streamed over blocks (first index on ties); ``rows[i]`` is not a
    neighbour of query ``i`` (leave-one-out), nor are the ``dead`` samples (zero weight)."""
    parts, dists = [], []
    for r0 in range(0, Q.shape[0], 256):
        q = Q[r0:min(r0 + 256, Q.shape[0]), ...]
        best = xp.full((q.shape[0],), math.inf, dtype=Q.dtype, device=device_of(Q))
        arg = xp.zeros((q.shape[0],), dtype=xp.int64, device=device_of(Q))
        for c0 in range(0, X.shape[0], 1024):
            x = X[c0:min(c0 + 1024, X.shape[0]), ...]
            D = summed_sq_distances(q, x, kernel, xp)
            if rows is not None:
                cols = xp.arange(c0, c0 + x.shape[0], device=device_of(Q))
                D = xp.where(rows[r0:r0 + q.shape[0], None] == cols[None, :], math.inf, D)
            if dead is not None:
                D = xp.where(dead[None, c0:c0 + x.shape[0]], math.inf, D)
            d = xp.min(D, axis=1)
            better = d < best
            best = xp.where(better, d, best)
            arg = xp.where(better, xp.argmin(D, axis=1) + c0, arg)
        parts.append(arg)
        dists.append(best)
    return xp.concat(parts, axis=0), xp.concat(dists, axis=0)
