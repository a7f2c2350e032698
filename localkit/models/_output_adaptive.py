"""Output-adaptive ("self-localized") regression, shared by the local mean and the local
polynomial: each sample is also weighed by a kernel ``K_y`` of its target against the estimate at
the query, iterated from the plain estimate ``f_0`` to a fixed point,

    w_i(x*) = K(x*, x_i) K_y(f_t(x*), y_i),   f_{t+1}(x*) = the local model fitted with w,

which is the local model with the product kernel ``K * K_y`` of the points ``(x, y)`` queried at
``(x*, f_t(x*))``: one engine pass per iteration over the augmented samples ``[X, y]``, each query
frozen once it moves less than ``tol`` (:func:`localkit.engine.iterate`, per row).
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval

from ..engine import backend_of, iterate
from ..kernels import Kernel
from ..kernels.kernel import SumKernel

#: the parameters the estimators add
OUTPUT_ADAPTIVE_PARAMS = {"value_kernel": [Kernel, None], "max_iter": [Interval(Integral, 1, None, closed="left")],
                          "tol": [Interval(Real, 0, None, closed="left")]}


class OutputAdaptiveMixin:
    """``value_kernel``, ``max_iter``, ``tol``; fitted: ``value_kernel_``, ``n_iter_``.

    In ``fit``, :meth:`_fit_value_kernel` checks the kernels and gives the product kernel of the
    points ``[x, y]`` to bind; in ``fit`` (``n_iter_``) and ``predict``, :meth:`_iterate_values`
    runs the fixed point from ``start(X)`` (the plain fit) with ``refit(Q)`` (the fit with the
    product kernel at the augmented queries ``Q = [X, f]``)."""

    def _fit_value_kernel(self, X, Y):
        """Check the kernels, store ``value_kernel_`` (its rule resolved on the targets ``Y``
        (n, p)), and return the kernel of ``[x, y]``: ``kernel_`` on the input columns times
        ``value_kernel_`` on the target columns."""
        vk, kern = self.value_kernel, self.kernel_
        if backend_of(X).name != "numpy":
            raise ValueError("value_kernel: the output-adaptive iteration runs on NumPy arrays")
        if vk.composite or vk.is_softmax or vk.n_neighbors is not None:
            raise ValueError(f"value_kernel must be a distance Kernel of the targets (a profile with a bandwidth or "
                             f"a rule; no features, n_neighbors or softmax), got {vk!r}")
        if kern.is_softmax or kern.n_neighbors is not None or getattr(self, "sample_scale_", None) is not None:
            raise ValueError("value_kernel multiplies the kernel of the inputs, which must then have a fixed bandwidth "
                             "or a rule (no n_neighbors, frac, sample_neighbors or softmax kernel)")
        d, p = X.shape[1], Y.shape[1]
        self.value_kernel_ = vk.resolved(Y, getattr(self, "sample_weight_", None))._with(
            features=list(range(d, d + p)))
        return _on_columns(kern, list(range(d))) * self.value_kernel_

    def _iterate_values(self, X, start, refit):
        """:class:`~localkit.engine.FixedPoint` of the output-adaptive fit at the queries ``X``."""
        def step(state, rows):
            return refit(np.concatenate([X[rows], state], axis=1)).reshape(state.shape)

        return iterate(step, start, tol=self.tol, max_iter=self.max_iter, per_row=True,
                       name="the value kernel's fixed point")


def _on_columns(kernel, columns):
    """``kernel`` looking at ``columns`` where it does not name its own (a sum, such as a learned
    mixture, term by term)."""
    if isinstance(kernel, SumKernel):
        return kernel.map_terms(lambda k: _on_columns(k, columns))
    return kernel if kernel.features is not None else kernel._with(features=columns)
