"""``bind``: a kernel bound to its samples, whichever array library holds them.

Estimators bind once, in ``fit``, and keep the :class:`Binding` that :func:`bind` returns: every
``predict`` then pays only for its queries. NumPy samples are bound into a
:class:`~localkit.engine.BoundKernel`, whose centring, scaling and indexes are built once.
Samples on a device (PyTorch, CuPy under scikit-learn's array-API dispatch) or on a dask cluster
are kept as they are, and each pass runs on that backend (:func:`~localkit.engine.local_sums`),
as does a pass whose queries live there.
"""
from __future__ import annotations

import copy

import numpy as np

from .backend import backend_of
from .bound import BoundKernel, BoundValues
from .distributed import dask_local_sums, is_dask_collection
from .namespace import foreign_namespace, xp_local_sums
from .options import EngineOptions
from .results import LocalSums


def elsewhere(*arrays):
    """True when any of ``arrays`` lives outside NumPy: a dask collection, or an array of another
    namespace under array-API dispatch."""
    present = [a for a in arrays if a is not None and not isinstance(a, np.ndarray)]
    return bool(present) and (is_dask_collection(*present) or foreign_namespace(*present) is not None)


def bind(kernel, samples, *, sample_weight=None, sample_scale=None, options=None, twins=None):
    """The :class:`~localkit.Kernel` ``kernel`` bound to ``samples`` (weighted by
    ``sample_weight``, with per-sample bandwidth factors ``sample_scale``, leave-one-out groups
    ``twins``, see :mod:`localkit.engine.twins`): a :class:`Binding`."""
    return Binding(kernel, samples, sample_weight, sample_scale, EngineOptions() if options is None else options,
                   twins)


class Binding:
    """A kernel bound to its samples, for passes at any queries.

    ``bound`` is the :class:`~localkit.engine.BoundKernel` of NumPy samples (``None`` for samples
    on a device or a cluster). :meth:`prepare` lays out values once for repeated passes,
    :meth:`using` gives other :class:`~localkit.engine.EngineOptions` (nothing rebuilt),
    :meth:`sums` is one pass (:meth:`BoundKernel.sums <localkit.engine.BoundKernel.sums>`).
    """

    def __init__(self, kernel, samples, sample_weight, sample_scale, options, twins=None):
        self.kernel, self.samples, self.options = kernel, samples, options
        self.sample_weight, self.sample_scale, self.twins = sample_weight, sample_scale, twins
        self.bound = None if elsewhere(samples, sample_weight, sample_scale) else BoundKernel(
            kernel, samples, sample_weight=sample_weight, sample_scale=sample_scale, options=options, twins=twins)

    def prepare(self, values):
        return values if self.bound is None else self.bound.prepare(values)

    def using(self, options):
        if options == self.options:
            return self
        other = copy.copy(self)
        other.options = options
        other.bound = None if self.bound is None else self.bound.using(options)
        return other

    def sums(self, queries=None, values=None, *, exclude_self=False, query_scale=None):
        """One pass at ``queries`` (the samples for None) on the backend of the arrays: the kept
        :class:`~localkit.engine.BoundKernel` for NumPy, the arrays' device under array-API
        dispatch (:func:`~localkit.engine.namespace.xp_local_sums`), or the dask cluster
        (:func:`~localkit.engine.distributed.dask_local_sums`)."""
        if self.bound is not None and not elsewhere(queries, query_scale):
            return self.bound.sums(queries, values, exclude_self=exclude_self, query_scale=query_scale)
        values = values.source if isinstance(values, BoundValues) else values
        arrays = (queries, self.samples, values, self.sample_weight, query_scale, self.sample_scale)
        opts = self.options
        if is_dask_collection(*arrays):  # query chunks map, sample chunks reduce on the cluster
            return dask_local_sums(queries, self.samples, values, self.kernel, exclude_self=exclude_self,
                                   sample_weight=self.sample_weight, empty=opts.empty, algorithm=opts.algorithm,
                                   block_size=opts.block_size, memory_budget=opts.memory_budget, n_jobs=opts.n_jobs,
                                   query_scale=query_scale, sample_scale=self.sample_scale,
                                   exact_edge=opts.exact_edge)
        return xp_local_sums(foreign_namespace(*arrays), queries, self.samples, values, self.kernel,
                             exclude_self=exclude_self, sample_weight=self.sample_weight, options=opts,
                             query_scale=query_scale, sample_scale=self.sample_scale)

    def host_sums(self, queries=None, values=None):
        """:meth:`sums` with NumPy results on the host, computed together (one distributed pass on
        dask): for drivers that iterate in memory (mean shift's seeds)."""
        out = self.sums(queries, values)
        return LocalSums(*backend_of(out.mean, out.log_weight_sum).host(out.mean, out.log_weight_sum, out.empty))
