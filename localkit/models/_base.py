"""What every local estimator shares: the kernel parameters, their validation, and the engine
options (empty-neighbourhood policy, algorithm, threads)."""
from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils.validation import check_is_fitted, validate_data

from .._validation import check_choice, check_n_neighbors
from ..engine import local_sums
from ..engine.local_mean import ALGORITHMS, EMPTY_POLICIES
from ..kernels import Kernel
from ..kernels.bandwidth import resolve_bandwidth

FLOATS = [np.float64, np.float32]


class LocalKernelMixin:
    """Kernel parameters ``kernel``, ``bandwidth``, ``n_neighbors``, ``metric`` and the engine
    options ``empty``, ``algorithm`` and ``n_jobs``; fitted: ``bandwidth_``, ``kernel_``.

    Subclasses call :meth:`_fit_kernel` in ``fit`` and :meth:`_local_sums` to evaluate.
    """

    def _fit_kernel(self, X, y=None):
        """Validate the kernel parameters on the training data and store ``kernel_``."""
        if self.n_neighbors is not None:
            if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, numbers.Integral):
                raise TypeError(f"n_neighbors must be an integer or None, got {self.n_neighbors!r}")
            if not 1 <= self.n_neighbors <= len(X):
                raise ValueError(f"n_neighbors must be between 1 and n_samples={len(X)}, got {self.n_neighbors}")
        check_choice(self.empty, "empty", EMPTY_POLICIES)
        check_choice(self.algorithm, "algorithm", ALGORITHMS)
        self.bandwidth_ = self._choose_bandwidth(X, y)
        self.kernel_ = Kernel(self.kernel, bandwidth=self.bandwidth_, n_neighbors=self.n_neighbors,
                              metric=self.metric)
        return self.kernel_

    def _choose_bandwidth(self, X, y):
        """The bandwidth for ``kernel_``: a number, a per-feature array, a rule resolved on X, or
        ``"cv"``: chosen by leave-one-out (:mod:`localkit.models.selection`)."""
        if self.kernel == "softmax":
            Kernel("softmax", bandwidth=self.bandwidth)  # validates the temperature
            return float(self.bandwidth)
        if isinstance(self.bandwidth, str) and self.bandwidth == "cv":
            from .selection import select_bandwidth  # exact leave-one-out; sets cv_results_

            return select_bandwidth(self, X, y)
        return resolve_bandwidth(self.bandwidth, X)

    def _fit_sample_scales(self, X):
        """``sample_scale_``: the sample-point factors ``h_i`` (distance of sample ``i`` to its
        ``sample_neighbors``-th nearest other sample), or None. Call before :meth:`_fit_kernel`,
        whose ``bandwidth="cv"`` search keeps them fixed."""
        k = getattr(self, "sample_neighbors", None)
        if k is None:
            self.sample_scale_ = None
            return None
        from .selection import sample_point_scales

        check_n_neighbors(k, len(X) - 1, "sample_neighbors")
        if self.n_neighbors is not None:
            raise ValueError("sample_neighbors scales a fixed bandwidth per sample; it cannot be combined "
                             "with n_neighbors")
        self.sample_scale_ = sample_point_scales(X, k)
        return self.sample_scale_

    def _local_sums(self, X, values, *, exclude_self=False, queries_are_samples=False):
        """One engine pass at the queries ``X`` over the training samples ``X_fit_``."""
        return local_sums(None if queries_are_samples else X, self.X_fit_, values, self.kernel_,
                          exclude_self=exclude_self, empty=self.empty, algorithm=self.algorithm,
                          n_jobs=self.n_jobs, sample_scale=self.sample_scale_)

    def _validate_queries(self, X):
        check_is_fitted(self)
        return validate_data(self, X, reset=False, dtype=FLOATS)


class LocalMeanParams(LocalKernelMixin):
    """The parameters of the local-mean estimators (regression and classification alike)."""

    def __init__(self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, sample_neighbors=None,
                 metric="euclidean", empty="nearest", algorithm="auto", n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.sample_neighbors = sample_neighbors
        self.metric = metric
        self.empty = empty
        self.algorithm = algorithm
        self.n_jobs = n_jobs
