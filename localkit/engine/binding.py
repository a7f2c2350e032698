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

from .bound import BoundKernel, BoundValues
from .distributed import is_dask_collection
from .local_mean import local_sums
from .namespace import foreign_namespace
from .options import EngineOptions


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
        if self.bound is not None and not elsewhere(queries, query_scale):
            return self.bound.sums(queries, values, exclude_self=exclude_self, query_scale=query_scale)
        opts = self.options
        return local_sums(queries, self.samples, values.source if isinstance(values, BoundValues) else values,
                          self.kernel, exclude_self=exclude_self, sample_weight=self.sample_weight,
                          sample_scale=self.sample_scale, query_scale=query_scale, twins=self.twins, empty=opts.empty,
                          algorithm=opts.algorithm, block_size=opts.block_size, memory_budget=opts.memory_budget,
                          n_jobs=opts.n_jobs)
