"""``bind``: a kernel bound to its samples, whichever array library holds them.

Estimators bind once, in ``fit``, and keep the :class:`Binding` that :func:`bind` returns: every
``predict`` then pays only for its queries. Samples in memory, NumPy's or on a device
(PyTorch, CuPy under scikit-learn's array-API dispatch), are bound into a
:class:`~localkit.engine.BoundKernel`, whose checks, bandwidth, centring, scaling and indexes are
built once; its passes run where the arrays live. Samples on a dask cluster are kept as they
are, and each pass is a reduction over their chunks.
"""
from __future__ import annotations

import copy


from .backends import backend_of
from .bound import BoundKernel, BoundValues, Stepper, WeightOperator
from .backends.dask import dask_local_sums, is_dask_collection
from .options import EngineOptions
from .results import LocalSums


def bind(kernel, samples, *, sample_weight=None, sample_scale=None, options=None, twins=None):
    """The :class:`~localkit.Kernel` ``kernel`` bound to ``samples`` (weighted by
    ``sample_weight``, with per-sample bandwidth factors ``sample_scale``, leave-one-out groups
    ``twins``, see :mod:`localkit.engine.twins`): a :class:`Binding`."""
    return Binding(kernel, samples, sample_weight, sample_scale, EngineOptions() if options is None else options,
                   twins)


class Binding:
    """A kernel bound to its samples, for passes at any queries.

    ``bound`` is the :class:`~localkit.engine.BoundKernel` of samples in memory, NumPy's or on a
    device (``None`` for samples on a dask cluster). :meth:`prepare` lays out values once for
    repeated passes, :meth:`using` gives other :class:`~localkit.engine.EngineOptions` (nothing
    rebuilt), :meth:`sums` is one pass (:meth:`BoundKernel.sums <localkit.engine.BoundKernel.sums>`).
    """

    def __init__(self, kernel, samples, sample_weight, sample_scale, options, twins=None):
        self.kernel, self.samples, self.options = kernel, samples, options
        self.sample_weight, self.sample_scale, self.twins = sample_weight, sample_scale, twins
        on_dask = is_dask_collection(samples, sample_weight, sample_scale)
        self.bound = None if on_dask else BoundKernel(
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
        """One pass at ``queries`` (the samples for None): the kept
        :class:`~localkit.engine.BoundKernel` (on the host or on the arrays' device), or on the dask
        cluster when any array is a dask collection
        (:func:`~localkit.engine.backends.dask.dask_local_sums`: query chunks map, sample chunks reduce)."""
        if self.bound is not None and not is_dask_collection(queries, values, query_scale):
            return self.bound.sums(queries, values, exclude_self=exclude_self, query_scale=query_scale)
        values = values.source if isinstance(values, BoundValues) else values
        return dask_local_sums(queries, self.samples, values, self.kernel, exclude_self=exclude_self,
                               sample_weight=self.sample_weight, sample_scale=self.sample_scale,
                               query_scale=query_scale, options=self.options)

    def stepper(self, values, start, *, checked=False):
        """:meth:`BoundKernel.stepper <localkit.engine.BoundKernel.stepper>` (one pass per step on dask)."""
        if self.bound is not None and not is_dask_collection(start):
            return self.bound.stepper(values, start, checked=checked)
        return Stepper(self, values, start)

    def operator(self, *, exclude_self=False):
        """The local mean at the samples as a linear map: :meth:`BoundKernel.operator
        <localkit.engine.BoundKernel.operator>` (a pass per call on dask)."""
        return WeightOperator(self, exclude_self) if self.bound is None else self.bound.operator(
            exclude_self=exclude_self)

    def host_sums(self, queries=None, values=None):
        """:meth:`sums` with NumPy results on the host, computed together (one distributed pass on
        dask): for drivers that iterate in memory (mean shift's seeds)."""
        out = self.sums(queries, values)
        return LocalSums(*backend_of(out.mean, out.log_weight_sum).host(out.mean, out.log_weight_sum, out.empty))
