"""The one streamed pass: blocks of queries against blocks of samples, summed by the online
log-sum-exp (:class:`~localkit.engine.stream.OnlineLogSumExp`), for every array library.

A path says how to form a block of log-weights, the pass does the rest. The host's dense path
(:mod:`localkit.engine.passes.dense`) and the pass on a device
(:func:`localkit.engine.backends.array_api.streamed_path`) both run :func:`stream_sums` over
blocks that one class forms (:class:`~localkit.engine.query_blocks.QueryBlock`); what differs
between them is where the blocks' coordinates come from and which blocks they visit (the host
skips sample leaves out of reach), not how the blocks are formed or summed.

``blocks(pos, fold_offset)`` yields ``(L, offset, V)`` for the queries at positions ``pos`` (a
slice, or an index array on the host) of the pass's order: ``log K = L + offset`` against one
block of samples (``offset`` per query, or None for 0; ``fold_offset``: ``offset`` already in
``L``), ``V`` those samples' rows of the values with a column of ones. ``L`` is the path's own
temporary: the pass overwrites it. The log-weights include the sample weights' ``log c_j``, so
that the running maximum is taken over ``log c_j K`` (a zero-weight sample nearest a far query
must not set it: every live sample would underflow against it).

Options of the pass (each a flag, not a second loop):

* ``exponent`` ``k``: softmax logits beyond the float range arrive divided by ``2^k``
  (:func:`~localkit.engine.stream.logit_exponent`) and are multiplied back before ``exp``;
* ``bounded`` (NumPy): a distance kernel has ``log K <= 0``, so its weights are summed directly,
  ``exp(log K) @ V`` per block (no row maximum, no rescaling); the rows whose weight sum falls
  below ``BOUNDED_FLOOR`` (where the weights that carry them may be subnormal) are summed again by
  the log-sum-exp. Weights below ``tiny`` (relative to ``k(0) = 1``) are flushed to 0 first
  (:data:`~localkit.engine.stream.UNDERFLOW`): a row kept has a sum of at least ``BOUNDED_FLOOR``,
  so that they change it by less than ``n tiny / BOUNDED_FLOOR`` (2^-46 in float32 at n = 2^20);
* ``threads``: threads over query blocks (NumPy and BLAS release the GIL).
"""
from __future__ import annotations

import numpy as np

from ..blocks import map_blocks
from ..stream import UNDERFLOW, OnlineLogSumExp, flush_underflow, times_power_of_two

#: Weight sums below which the bounded pass hands a row to the log-sum-exp pass (the weights
#: that carry it may be subnormal there); above it, subnormal weights matter < 2^-36 relatively
BOUNDED_FLOOR = {np.dtype(np.float32): 2.0 ** -60, np.dtype(np.float64): 2.0 ** -600}


def sample_log_weights(log_weight, exponent):
    """The samples' ``log c_j`` as a path adds them to a block of log-weights: divided by ``2^exponent``
    with the logits (the pass multiplies both back before ``exp``); None for unweighted samples."""
    return None if log_weight is None else times_power_of_two(log_weight, -exponent)


def stream_sums(xp, n_queries, block_rows, blocks, V_aug, *, order=None, exponent=0, bounded=False, threads=1):
    """``(S, shift)`` as every path returns them (:mod:`localkit.engine.passes`): the weighted sums
    ``S * exp(shift[:, None])`` of the ``n_queries`` queries, in their given order, from the
    ``blocks`` of ``block_rows`` queries at a time (see the module's docstring). ``order``: the
    permutation of the queries that the blocks follow (compact blocks), or None; arrays of the
    namespace ``xp``, on the device of ``V_aug``."""
    width = V_aug.shape[1]
    dtype = V_aug.dtype
    host = isinstance(V_aug, np.ndarray)
    if host:  # written block by block, by the threads, at the queries' own rows
        device = None
        S = np.empty((n_queries, width), dtype=dtype)
        shift = np.empty(n_queries, dtype=dtype)
    else:  # gathered, then put in the queries' order (scikit-learn's device(): the backends import this module)
        from sklearn.utils._array_api import device as device_of

        device, parts = device_of(V_aug), {}

    def store(rows, S_block, shift_block):
        if host:
            at = rows if order is None else order[rows]
            S[at], shift[at] = S_block, shift_block
        else:
            parts[rows.start] = S_block, shift_block

    def run(rows):
        need = None
        if bounded:  # log K <= 0: the direct sum, the rows it cannot carry handed on
            sums = np.zeros((rows.stop - rows.start, width), dtype=dtype)
            for L, _, V in blocks(rows, True):
                sums += np.exp(flush_underflow(L, UNDERFLOW[np.dtype(dtype)]), out=L) @ V
            need = ~(sums[:, -1] >= BOUNDED_FLOOR[np.dtype(dtype)])
            if not need.any():
                store(rows, sums, np.zeros(len(sums), dtype=dtype))
                return
        pos = rows if need is None else np.arange(rows.start, rows.stop)[need]
        n = (rows.stop - rows.start) if need is None else len(pos)
        acc = OnlineLogSumExp(n, width - 1, dtype, exponent, xp=xp, device=device)
        offset = None
        for L, offset, V in blocks(pos, False):
            acc.update(L, V)
        if need is None:
            store(rows, acc.S, acc.log_shift(offset))
            return
        shift_block = np.zeros(len(sums), dtype=dtype)
        sums[need], shift_block[need] = acc.S, acc.log_shift(offset)
        store(rows, sums, shift_block)

    map_blocks(run, n_queries, block_rows, threads if host else 1, blas=host)
    if host:
        return S, shift
    starts = sorted(parts)
    if not starts:
        return xp.zeros((0, width), dtype=dtype, device=device), xp.zeros((0,), dtype=dtype, device=device)
    S = xp.concat([parts[a][0] for a in starts], axis=0)
    shift = xp.concat([parts[a][1] for a in starts], axis=0)
    if order is None:
        return S, shift
    inverse = xp.argsort(order)
    return xp.take(S, inverse, axis=0), xp.take(shift, inverse)
