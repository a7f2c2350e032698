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
(:class:`ProductBlock` on the host, :func:`streamed_log_weights` on a device and for
``algorithm="streamed"``). For the empty-neighbourhood policy the nearest sample is taken in
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


def bind_factors(bound, kernel, samples):
    """The :class:`Factor` list of ``kernel`` over ``samples`` (arrays of ``bound.xp``)."""
    from .bound import BoundKernel

    xp = bound.xp
    factors = []
    for factor, cols in kernel.columns(bound.n_features):
        part = samples[:, cols] if xp is np else xp.take(samples, xp.asarray(cols, device=_device(samples)), axis=1)
        if factor.is_categorical:
            codes = bound.host(part)
            check_codes(codes, factor.name)
            columns = CategoricalColumns(factor.name, check_smoothing(factor.bandwidth, factor.name), codes)
            factors.append(Factor(factor, cols, categorical=columns, codes=part))
        else:
            factors.append(Factor(factor, cols, bound=BoundKernel(factor.plain(), part, sample_weight=bound.weight)))
    return factors


def _device(a):
    from sklearn.utils._array_api import device

    return device(a)


class ProductBlock:
    """A block of queries (raw coordinates) of a bound product, for the dense path: one
    :class:`~localkit.engine.passes.dense.QueryBlock` per distance factor (recentred or exact as
    that factor needs), the codes of each categorical one."""

    def __init__(self, bound, Q):
        from .passes.dense import QueryBlock

        self.Q = Q
        self.parts = []
        for f in bound.factors:
            if f.categorical is not None:
                self.parts.append(Q[:, f.cols])
            else:
                self.parts.append(QueryBlock(f.bound, f.bound._transform(Q[:, f.cols])))

    def log_weights(self, bound, cols, fold_offset=False):
        """``(L, offset)`` with ``L = log K`` (the sum of the factors') and a zero offset."""
        L = None
        for f, part in zip(bound.factors, self.parts):
            if f.categorical is not None:
                Lf = f.categorical.log_weights(np, part, f.codes[cols])
            else:
                Lf, offset = part.log_weights(f.bound, cols, fold_offset=True)
                if np.any(offset):
                    Lf = Lf + offset[:, None]
            if L is None:
                L = np.array(Lf, dtype=self.Q.dtype)
            else:
                L += Lf
        return L, np.zeros(len(self.Q), dtype=self.Q.dtype)


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


def streamed_log_weights(xp, bound, Q, X):
    """``block(rows, cols) -> log K`` for the streamed pass (any array namespace): each distance
    factor's coordinates centred on its samples and divided by its bandwidth, its squared
    distances from differences (exact, no cancellation), its profile's statement bound to
    ``xp``; each categorical factor's codes as they are."""
    from .backends.array_api import _h_array, _sq_distances

    parts = []
    for f in bound.factors:
        if f.categorical is not None:
            idx = xp.asarray(f.cols, device=_device(X)) if xp is not np else f.cols
            take = (lambda A, i=idx: xp.take(A, i, axis=1))
            parts.append((f, take(Q), take(X), None))
            continue
        idx = xp.asarray(f.cols, device=_device(X))
        Qf, Xf = xp.take(Q, idx, axis=1), xp.take(X, idx, axis=1)
        centre = xp.mean(Xf, axis=0)
        hh = _h_array(xp, f.bound.h, Xf)
        parts.append((f, (Qf - centre) / hh, (Xf - centre) / hh, f.kernel.plain()))

    def block(rows, cols):
        L = None
        for f, Qf, Xf, kern in parts:
            q, x = Qf[rows, ...], Xf[cols, ...]
            if kern is None:
                Lf = f.categorical.log_weights(xp, q, x)
            else:
                u2 = _sq_distances(xp, q, None, x, True, kern)
                Lf = -0.5 * u2 if kern.profile.log_linear else kern.profile.log_k_for(xp)(u2)
            L = Lf if L is None else L + Lf
        return L

    return block


__all__ = ["PRODUCT_REASON", "Factor", "ProductBlock", "bind_factors", "nearest_points", "streamed_log_weights"]
