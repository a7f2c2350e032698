"""Dense blocks of kernel weights, for local models without a closed form.

The localization trick fits one model per query with ``sample_weight = K(x*, x_i)``; those fits
need the weights themselves, not a reduction. :class:`KernelWeights` is a
:class:`~localkit.engine.BoundKernel` built from a kernel's name and parameters; its
:meth:`~localkit.engine.BoundKernel.log_weights` gives a whole block of queries against every
sample. Memory is ``block x n_samples``; callers walk query blocks.
"""
from __future__ import annotations

from .bound import BoundKernel, make_kernel


class KernelWeights(BoundKernel):
    """``log K(x*, x_i)`` for blocks of queries against fixed samples (``K(x, x) = 1``)."""

    def __init__(self, samples, kernel="gaussian", bandwidth=1.0, n_neighbors=None, metric="euclidean", *,
                 sample_weight=None):
        kern = make_kernel(kernel, bandwidth, n_neighbors, metric)
        if kern.is_softmax:
            raise ValueError("KernelWeights needs a distance kernel, not 'softmax'")
        super().__init__(kern, samples, sample_weight=sample_weight)
