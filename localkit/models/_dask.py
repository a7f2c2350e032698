"""Estimators on dask arrays: fit keeps the samples distributed, predict maps query chunks (mean
shift's dask fit lives with mean shift, in :mod:`localkit.models.cluster`).

The local-mean estimators store dask training data as it is (``X_fit_`` stays a dask array, on
the cluster) and every prediction is one distributed engine pass
(:mod:`localkit.engine.distributed`). Other estimators, fitted in memory, predict or transform a
dask array of queries chunk by chunk (:func:`map_queries`).
"""
from __future__ import annotations

import functools
import warnings

import numpy as np
from sklearn.utils.validation import check_is_fitted

from .._validation import check_n_neighbors
from ..engine.distributed import as_dask_array, as_dask_points, dask_bandwidth, is_dask_collection
from ..kernels import Kernel


def fit_local_mean(est, X, y, sample_weight, *, classify):
    """``fit`` of :class:`LocalMeanRegressor` / :class:`LocalMeanClassifier` on dask arrays,
    without gathering the samples: only the bandwidth rule's standard deviations (and, to
    classify, the distinct labels) are computed."""
    import dask.array as da

    if est.sample_neighbors is not None:
        raise ValueError("sample_neighbors is not available on dask arrays (it needs every sample's own "
                         "neighbours); fit on NumPy arrays or use a fixed bandwidth or n_neighbors")
    if isinstance(est.bandwidth, str) and est.bandwidth == "cv":
        raise ValueError("bandwidth='cv' is not available on dask arrays; give a number or a rule")
    X = as_dask_points(X, "X")
    rows = X.chunks[0]
    if y is None:
        raise ValueError("y must be an array of shape (n_samples,), got None")
    if classify:
        y = da.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        est.classes_ = np.unique(da.unique(y.rechunk((rows,))).compute())
        codes = y.rechunk((rows,)).map_blocks(est.classes_.searchsorted, dtype=np.intp)
        eye = np.eye(len(est.classes_), dtype=X.dtype)
        est.onehot_ = codes.map_blocks(eye.take, axis=0, new_axis=1, chunks=(rows, (len(eye),)), dtype=X.dtype)
    else:
        est.y_fit_ = as_dask_array(y, "y", dtype=X.dtype, n_rows=X.shape[0], rows=rows)
    est.n_features_in_ = X.shape[1]
    est.sample_weight_ = None if sample_weight is None else as_dask_array(sample_weight, "sample_weight", ndim=(1,),
                                                                        dtype=X.dtype, n_rows=X.shape[0], rows=rows)
    est.sample_scale_ = None
    check_n_neighbors(est.n_neighbors, X.shape[0], kernel=est.kernel)
    est.bandwidth_ = dask_bandwidth(est.bandwidth, X, sample_weight=est.sample_weight_)  # a rule: dask reductions
    est.kernel_ = Kernel(est.kernel, bandwidth=est.bandwidth_, n_neighbors=est.n_neighbors, metric=est.metric,
                         p=getattr(est, "p", 2))
    est.X_fit_ = X
    est._bind(X, est.onehot_ if classify else est.y_fit_)
    return est


def dask_queries(est, X):
    """Checked dask queries for a fitted estimator (values are checked lazily, per chunk)."""
    check_is_fitted(est)
    return as_dask_points(X, "X", n_features=est.n_features_in_)


def labels_of(classes, proba):
    """``classes[argmax proba]`` for a dask array of probabilities, lazily."""
    return proba.argmax(axis=1).map_blocks(classes.take, dtype=classes.dtype)


def map_queries(method):
    """Decorate ``predict``/``transform``: a dask array of queries is mapped chunk by chunk with
    the fitted (in-memory) estimator; anything else goes straight to ``method``."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if not is_dask_collection(X):
            return method(self, X, *args, **kwargs)
        X = dask_queries(self, X)
        call = functools.partial(_call, method, self, args=args, kwargs=kwargs)
        with warnings.catch_warnings():  # the output's width and type, from one row: its warnings are not the call's
            warnings.simplefilter("ignore")
            probe = np.asarray(call(X[:1].compute()))
        if probe.ndim == 1:
            return X.map_blocks(call, drop_axis=1, dtype=probe.dtype, meta=probe[:0])
        return X.map_blocks(call, chunks=(X.chunks[0], probe.shape[1:]), dtype=probe.dtype, meta=probe[:0])

    return wrapper


def _call(method, est, block, args, kwargs, block_info=None):
    """``method`` on one chunk; its warnings say which chunk (the rows they name count from its first)."""
    if block_info is None:
        return method(est, block, *args, **kwargs)
    start, stop = block_info[0]["array-location"][0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = method(est, block, *args, **kwargs)
    for w in caught:  # re-emitted: the caller's warning filters apply
        warnings.warn(f"{w.message} [dask chunk of rows {start}:{stop}; rows named here count from {start}]",
                      w.category, stacklevel=2)
    return out
