"""Sums of kernels in the engine: each term's own streamed sums, added in log-space.

For ``K = sum_k w_k K_k`` (:class:`~localkit.kernels.sums.SumKernel`) a pass runs each term's
:meth:`~localkit.engine.BoundKernel.sums` (its own path, bandwidths, indexes) and combines

.. math::

    \\log S(1) = \\operatorname{logsumexp}_k (\\log w_k + \\log S_k(1)), \\qquad
    m = \\sum_k \\frac{w_k S_k(1)}{S(1)} m_k

with ``m_k = S_k(v) / S_k(1)`` the term's local mean: memory stays that of one term's pass,
never ``n_queries x n_samples``. Leave-one-out is each term's (``exclude_self`` is linear in the
kernel). A query is empty when every term's neighbourhood is; the sum's policy then applies
("nearest": the first term's nearest sample, in that term's coordinates).
"""
from __future__ import annotations

import dataclasses
import math

from .backends.array_api import namespace_of
from .results import LocalSums, apply_empty
from .stream import merge_states


def sum_sums(bound, queries, prepared, exclude_self, query_scale):
    """:meth:`BoundKernel.sums <localkit.engine.BoundKernel.sums>` of a bound sum (``prepared``:
    its :meth:`~localkit.engine.BoundKernel.prepare`-d values, shared by the terms)."""
    options = dataclasses.replace(bound.options, empty="nearest")
    outs = [(log_w, term.using(options).sums(queries, prepared, exclude_self=exclude_self, query_scale=query_scale))
            for log_w, term in bound.terms]
    return combine_terms(outs, bound.options.empty, prepared.no_values)


def combine_terms(outs, empty_policy, no_values):
    """The sums of ``sum_k w_k K_k`` from its terms' ``outs``, ``[(log w_k, LocalSums of K_k)]``,
    each computed with the "nearest" policy; ``empty_policy`` applied where every term is empty
    (the dask path combines its terms' chunks here too)."""
    xp = namespace_of(outs[0][1].log_weight_sum)  # the queries' device, where the terms ran
    log_sums = xp.stack([log_w + out.log_weight_sum for log_w, out in outs], axis=1)
    if no_values:
        means = xp.zeros((log_sums.shape[0], len(outs), 0), dtype=log_sums.dtype)
    else:
        means = xp.stack([out.mean if out.mean.ndim == 2 else out.mean[:, None] for _, out in outs], axis=1)
    log_sum, mean = merge_states(log_sums, means, xp)
    empty = ~(log_sum > -math.inf)
    log_sum = xp.where(empty, -math.inf, log_sum)
    # empty everywhere: the first term's mean (its nearest sample's value, by the "nearest" policy)
    mean = apply_empty(xp, empty_policy, mean, empty, lambda idx: xp.take(means[:, 0, :], idx, axis=0),
                       stacklevel=3)
    if no_values:
        return LocalSums(None, log_sum, empty)
    return LocalSums(mean if outs[0][1].mean.ndim == 2 else mean[:, 0], log_sum, empty)


__all__ = ["combine_terms", "sum_sums"]
