"""Estimators on dask arrays: fit keeps the samples distributed, predict maps query chunks.

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

from .._validation import check_n_neighbors, check_points
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


def fit_mean_shift(est, X, sample_weight):
    """``MeanShift.fit`` on a dask array: the seeds live in memory, every iteration is one
    distributed engine pass over the samples (which stay on the cluster), the fixed-point driver
    is :func:`localkit.engine.iterate` unchanged; ``labels_`` is a dask array."""
    import dask

    from .._progress import warn_max_iter
    from ..engine import iterate, local_sums
    from ..engine.iteration import row_norm_change
    from .cluster import merge_modes

    est._check_params()
    if est.bandwidth is None:
        raise ValueError("bandwidth=None estimates h from every point's neighbours; on dask arrays give bandwidth")
    if est.blurring:
        raise ValueError("blurring=True moves every point each iteration; it is not available on dask arrays")
    if est.bin_seeding and sample_weight is not None:
        raise ValueError("bin_seeding with sample_weight is not available on dask arrays")
    X = as_dask_points(X, "X", dtype=np.float64)
    c = None if sample_weight is None else as_dask_array(sample_weight, "sample_weight", ndim=(1,),
                                                         n_rows=X.shape[0], rows=X.chunks[0])
    h = est.bandwidth_ = float(est.bandwidth)
    kernel = est.kernel_ = Kernel(est.kernel, bandwidth=h)
    est.n_features_in_ = X.shape[1]
    if est.seeds is not None:
        seeds = check_points(est.seeds, "seeds", n_features=X.shape[1])
    elif est.bin_seeding:
        seeds = bin_seeds(X, h, est.min_bin_freq)
    else:
        seeds = (X if c is None else X[c > 0]).compute()  # the seeds are the points themselves
    intensity = np.zeros(len(seeds))
    # the uniform kernel's weight sum is a count: the exact integer, as in memory
    exact = np.rint if kernel.profile.name == "uniform" and c is None else (lambda w: w)

    def step(Y, rows):
        out = local_sums(Y, X, X, kernel, empty="nearest", sample_weight=c)
        mean, weight_sum, empty = dask.compute(out.mean, out.weight_sum, out.empty)  # one distributed pass
        intensity[rows] = np.where(empty, 0.0, exact(weight_sum))
        return np.where(empty[:, None], Y, mean)

    fp = iterate(step, seeds.astype(np.float64), tol=1e-3 * h, max_iter=est.max_iter + 1, change=row_norm_change,
                 per_row=True, inclusive=True, progress=est.verbose, warn=False, name="mean shift")
    if not fp.converged.all():
        warn_max_iter("mean shift", est.max_iter, f" ({int(np.sum(~fp.converged))} of {len(seeds)} seeds still moving)")
    est.n_iter_ = int(fp.n_iter) - 1
    centers = merge_modes(fp.state, intensity, h)
    if len(centers) == 0:
        raise ValueError(f"No point was within bandwidth={h:f} of any seed; try other seeds or a larger bandwidth")
    est.cluster_centers_ = centers
    est.labels_ = X.map_blocks(_nearest_centre, centers, h if not est.cluster_all else None, drop_axis=1,
                               dtype=np.intp)
    return est


def bin_seeds(X, h, min_bin_freq):
    """scikit-learn's ``get_bin_seeds`` on a dask array: the cells ``round(x / h)`` of each chunk
    with their counts and first rows, merged in memory (one entry per occupied cell)."""
    import dask

    parts = dask.compute(*[dask.delayed(_chunk_cells)(block, h) for block in X.to_delayed().ravel()])
    offsets = np.cumsum((0,) + X.chunks[0][:-1])
    cells = np.concatenate([p[0] for p in parts])
    first = np.concatenate([p[1] + o for p, o in zip(parts, offsets)])
    counts = np.concatenate([p[2] for p in parts])
    unique, inverse = np.unique(cells, axis=0, return_inverse=True)
    total = np.bincount(inverse.ravel(), weights=counts)
    earliest = np.full(len(unique), len(first))
    np.minimum.at(earliest, inverse.ravel(), first)
    order = np.argsort(earliest, kind="stable")  # scikit-learn keeps the cells in order of first appearance
    seeds = unique[order][total[order] >= min_bin_freq].astype(np.float32)
    if len(seeds) == X.shape[0]:
        warnings.warn(f"Binning data failed with provided bin_size={h:f}, using data points as seeds.", stacklevel=3)
        return X.compute()
    return seeds * h


def _chunk_cells(block, h):
    return np.unique(np.round(block / h), axis=0, return_index=True, return_counts=True)


def _nearest_centre(block, centers, h):
    """The index of the nearest centre (as scikit-learn labels); -1 beyond ``h`` if given."""
    from ..engine.neighbors import kneighbors, make_index

    dist, idx = kneighbors(make_index(centers, "euclidean"), block, 1)
    return idx[:, 0] if h is None else np.where(dist[:, 0] <= h, idx[:, 0], -1)
