"""Product kernels in the engine: a kernel on groups of columns, bound factor by factor.

A product kernel ``K = prod_f K_f`` (:class:`~localkit.kernels.kernel.ProductKernel`; also a
single kernel with ``features``, or a categorical one) has ``log K = sum_f log K_f``, each factor
on its own columns in its own scaled coordinates. Binding it binds each factor once:

* a distance factor is a :class:`~localkit.engine.BoundKernel` of its own columns (its
  bandwidth rule resolved there, its samples centred and scaled as any bound kernel's), so that
  its log-weights for a block are exactly those of that kernel alone;
* a categorical factor keeps its samples' codes as they are (never centred or scaled: levels
  are compared for equality) and its levels ``c``, counted here, at bind time
  (:class:`~localkit.kernels.categorical.CategoricalColumns`).

The bound product keeps the samples raw; a block's log-weights are the sum of the factors'
(:class:`~localkit.engine.passes.dense.ProductBlock` on the host,
:func:`~localkit.engine.backends.array_api.streamed_log_weights` on a device and for
``algorithm="streamed"``; :meth:`BoundKernel._bind_factors <localkit.engine.BoundKernel>` binds them). For the empty-neighbourhood policy the nearest sample is taken in
:func:`nearest_points`: each distance factor's columns over its bandwidth, a level apart one unit.
"""
from __future__ import annotations

import numpy as np

from ..kernels.categorical import CategoricalColumns, check_codes, check_smoothing

#: why the compiled, neighbour and binned paths do not take a product kernel (the planner's reasons)
PRODUCT_REASON = ("a kernel on groups of columns (features=, categorical factors, K1 * K2) adds its factors' "
                  "log-weights block by block: the dense path (the streamed pass on devices)")


class Factor:
    """One factor of a bound product: its kernel, its columns, and either the
    :class:`~localkit.engine.BoundKernel` of its columns or its categorical codes."""

    def __init__(self, kernel, cols, bound=None, categorical=None, codes=None):
        self.kernel, self.cols, self.bound, self.categorical, self.codes = kernel, cols, bound, categorical, codes


def nearest_points(bound, points):
    """``points`` (raw, NumPy) in the coordinates where the nearest sample is sought for a
    product: each distance factor's columns centred and divided by its bandwidth, each
    categorical column a level apart one unit (see
    :meth:`~localkit.kernels.categorical.CategoricalColumns.nearest_coordinates`)."""
    parts = []
    for f in bound.factors:
        P = np.asarray(points[:, f.cols], dtype=np.float64)
        if f.categorical is not None:
            parts.append(f.categorical.nearest_coordinates(P))
        else:
            with np.errstate(over="ignore", under="ignore"):
                parts.append((P - f.bound.centre) / np.asarray(f.bound.h, dtype=np.float64))
    return np.concatenate(parts, axis=1)


__all__ = ["PRODUCT_REASON", "Factor", "nearest_points"]
