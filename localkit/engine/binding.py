"""``bind``: a kernel bound to its samples, whichever array library holds them.

Estimators bind once, in ``fit``, and keep what :func:`bind` returns: every ``predict`` then pays
only for its queries. NumPy samples give a :class:`~localkit.engine.BoundKernel`, whose
centring, scaling and indexes are built once. Samples on a device (PyTorch, CuPy under
scikit-learn's array-API dispatch) or on a dask cluster give a :class:`DeferredBound` with the
same three methods, whose passes run on that backend (:func:`~localkit.engine.local_sums`).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .bound import BoundKernel
from .distributed import is_dask_collection
from .namespace import foreign_namespace
from .options import EngineOptions


def elsewhere(*arrays):
    """True when any of ``arrays`` lives outside NumPy: a dask collection, or an array of another
    namespace under array-API dispatch (their passes run on that backend)."""
    present = [a for a in arrays if a is not None and not isinstance(a, np.ndarray)]
    return bool(present) and (is_dask_collection(*present) or foreign_namespace(*present) is not None)


def bind(kernel, samples, *, sample_weight=None, sample_scale=None, options=None):
    """The :class:`~localkit.Kernel` ``kernel`` bound to ``samples``: a
    :class:`~localkit.engine.BoundKernel` for NumPy samples, else a :class:`DeferredBound`.

    Both offer ``prepare(values)`` (values laid out once for repeated passes),
    ``using(options)`` (other :class:`~localkit.engine.EngineOptions`, nothing rebuilt) and
    ``sums(queries, values, exclude_self=..., query_scale=...)``.
    """
    options = EngineOptions() if options is None else options
    if elsewhere(samples, sample_weight, sample_scale):
        return DeferredBound(kernel, samples, sample_weight, sample_scale, options)
    return BoundKernel(kernel, samples, sample_weight=sample_weight, sample_scale=sample_scale, options=options)


@dataclasses.dataclass(frozen=True)
class DeferredBound:
    """Samples kept as they are, for backends that take them at each pass (array-API devices,
    dask): each :meth:`sums` is one :func:`~localkit.engine.local_sums` on that backend."""

    kernel: object
    samples: object
    sample_weight: object
    sample_scale: object
    options: EngineOptions

    def prepare(self, values):
        return values

    def using(self, options):
        return self if options == self.options else dataclasses.replace(self, options=options)

    def sums(self, queries=None, values=None, *, exclude_self=False, query_scale=None):
        from .local_mean import local_sums

        return local_sums(queries, self.samples, values, self.kernel, exclude_self=exclude_self,
                          sample_weight=self.sample_weight, sample_scale=self.sample_scale,
                          query_scale=query_scale, **dataclasses.asdict(self.options))
