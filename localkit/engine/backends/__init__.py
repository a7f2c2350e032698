"""Where the arrays live: detection and coercion, once for every model.

An engine pass runs where its arrays are: in NumPy (with the compiled CPU paths), in another
array library under scikit-learn's array-API dispatch (PyTorch on CPU or CUDA, CuPy; the passes
run on the arrays' device, :mod:`localkit.engine.backends.array_api`), or on a dask cluster (query chunks
map, sample chunks reduce, :mod:`localkit.engine.backends.dask`). A model asks :func:`backend_of`
for the backend of its inputs and calls its methods (check the data, encode labels, resolve a
bandwidth rule, copy to the host); it never tests which backend it got, so it is written once.

What a backend cannot do is refused by name, with :meth:`NumPyBackend.require_in_memory`
(leave-one-out bandwidth search on a cluster gathers every sample, for instance).
"""
from __future__ import annotations

import copy
import functools
import warnings

import numpy as np
from sklearn.utils._array_api import _convert_to_numpy, device, get_namespace
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from ..._validation import (FLOAT_DTYPES, all_finite, check_class_labels, check_points,
                            check_regression_target, refuse_text_columns)
from ...kernels import Kernel
from ...kernels.kernel import SumKernel
from ...kernels.bandwidth import resolve_bandwidth
from ..passes import neighbors as nb
from .dask import as_dask_array, as_dask_points, dask_bandwidth, dask_resolved, is_dask_collection
from ..checks import as_points
from .array_api import foreign_namespace, to_host, xp_nearest
from ...exceptions import LocalkitWarning, warn


def backend_of(*arrays):
    """The backend of ``arrays`` (``None`` entries ignored): :data:`DASK` if any is a dask
    collection, an :class:`ArrayAPIBackend` if any belongs to another array namespace under
    array-API dispatch, else :data:`NUMPY`."""
    if is_dask_collection(*arrays):
        return DASK
    xp = foreign_namespace(*arrays)
    return NUMPY if xp is None else ArrayAPIBackend(xp)


def _plain_floats(X):
    """Whether ``X`` is a finite 2-D float ndarray with a row and a column: an array that
    scikit-learn's ``validate_data(..., dtype=[float64, float32])`` returns as it is, without a
    warning. The checks of a fitted estimator's few queries, or of a small fit, were mostly that
    function's generic ones (~80 us of a 280 us kNN pass); anything else takes it, and its messages."""
    return (type(X) is np.ndarray and X.dtype in FLOAT_DTYPES and X.ndim == 2 and X.shape[0] > 0
            and X.shape[1] > 0 and all_finite(X))


def _plain_target(y, X):
    """Whether ``y`` is a finite 1-D ndarray of numbers with ``X``'s rows, which ``validate_data``
    returns as it is with the arguments of :data:`_NO_EFFECT`."""
    return (type(y) is np.ndarray and y.ndim == 1 and len(y) == len(X) and y.dtype.kind in "biuf"
            and (y.dtype.kind != "f" or all_finite(y)))


#: ``validate_data`` arguments that change nothing for the arrays of :func:`_plain_floats` and
#: :func:`_plain_target` (a 1-D target is multi-output or not alike; a numeric one stays as it is)
_NO_EFFECT = {"multi_output", "y_numeric", "accept_sparse"}


class NumPyBackend:
    """Arrays in memory, computed by NumPy and the compiled CPU paths."""

    name = "numpy"
    xp = np

    def floats(self, *arrays):
        """The floating dtypes data may keep, float64 first (``validate_data``'s ``dtype``)."""
        xp, _ = get_namespace(*arrays)
        return [xp.float64, xp.float32]

    def check_fit(self, est, X, y="no_validation", **kwargs):
        """scikit-learn's ``validate_data(est, X, y, ...)`` with the floats kept (sets
        ``n_features_in_``); ``X`` alone without ``y``. Columns of strings are refused naming
        them and the fix (:func:`~localkit._validation.refuse_text_columns`)."""
        if _plain_floats(X) and (isinstance(y, str) or _plain_target(y, X)) and set(kwargs) <= _NO_EFFECT:
            # what validate_data does with such arrays, without its generic checks (~150 us of a
            # 331-sample kNN fit): X (and y) returned as they are, the features counted, no names
            est.__dict__.pop("feature_names_in_", None)
            est.n_features_in_ = X.shape[1]
            return X if isinstance(y, str) else (X, y)
        refuse_text_columns(X, "X")
        return validate_data(est, X, y, dtype=self.floats(X), **kwargs)

    def check_queries(self, est, X, accept_sparse=False):
        """Queries for the fitted ``est``: checked against ``n_features_in_`` (``accept_sparse``:
        scikit-learn's, for an estimator fitted on sparse samples)."""
        check_is_fitted(est)
        if (_plain_floats(X) and X.shape[1] == getattr(est, "n_features_in_", None)
                and not hasattr(est, "feature_names_in_")):
            return X
        refuse_text_columns(X, "X")
        return validate_data(est, X, reset=False, dtype=self.floats(X), accept_sparse=accept_sparse)

    def points(self, x, name, *, like=None, finite=True):
        """A 2-D ``(n, d)`` float array of points (1-D input: ``n`` points in 1-D), finite, not
        empty; with ``like``, in its dtype with its number of features. ``finite=False`` leaves
        the scan for NaN and infinity to the engine, which binds the points next (on dask, the
        chunks are checked where a pass reads them, whatever ``finite`` says)."""
        return check_points(x, name, n_features=None if like is None else like.shape[1],
                            dtype=None if like is None else like.dtype, finite=finite)

    def regression_target(self, y, X):
        """``y`` as finite floats of ``X``'s dtype."""
        return check_regression_target(y, X.dtype)

    def sample_weight(self, sample_weight, X):
        """``sample_weight`` as floats of shape ``(n_samples,)`` (a scalar: the same for all),
        finite, ``>= 0`` and not all zero; ``None`` stays ``None``."""
        if sample_weight is None:
            return None
        try:  # scikit-learn's own checks (shape, NaN/inf, negative, all zero), its messages prefixed
            return _check_sample_weight(sample_weight, X, dtype=X.dtype, ensure_non_negative=True)
        except ValueError as exc:
            raise ValueError(f"sample_weight is invalid: {exc}") from exc

    def total(self, sample_weight):
        """``sum_i c_i`` of checked weights, a Python float (in float64)."""
        return float(np.sum(np.asarray(sample_weight, dtype=np.float64)))

    def encode(self, y, X):
        """``(classes, onehot)``: the sorted distinct labels and the one-hot rows of ``y`` in
        ``X``'s dtype (and on its device)."""
        check_class_labels(y)
        xp, _ = get_namespace(X)
        classes, codes = xp.unique_inverse(y)
        return classes, xp.take(xp.eye(classes.shape[0], dtype=X.dtype, device=device(X)), codes, axis=0)

    def decode(self, classes, proba):
        """``classes[argmax proba]`` row by row (the first class on ties)."""
        xp, _ = get_namespace(proba)
        return xp.take(classes, xp.argmax(proba, axis=1), axis=0)

    def bandwidth(self, kernel, X, sample_weight=None):
        """``kernel``'s bandwidth resolved on the samples ``X`` (a rule from their weighted spread)."""
        return resolve_bandwidth(kernel.bandwidth, X, sample_weight=sample_weight)

    def resolved(self, kernel, X, sample_weight=None):
        """A :class:`~localkit.Kernel` on groups of columns (a product, categorical factors, a sum)
        fixed on the samples ``X``: its rules resolved on its columns, its levels counted."""
        return kernel.resolved(*self.host(X, sample_weight))

    def require_in_memory(self, what, why):
        """Refuse ``what`` where the samples are not in memory (nothing to refuse here)."""

    def host(self, *arrays):
        """NumPy copies of ``arrays`` (one array: that copy), computed together."""
        out = tuple(None if a is None else np.asarray(a) for a in arrays)
        return out[0] if len(out) == 1 else out

    def float64(self, a):
        """``a`` as float64 in host memory (scikit-learn's float64 scores, whatever the input); on a
        dask cluster a lazy float64 dask array, nothing computed."""
        return np.asarray(self.host(a), dtype=np.float64)

    def like(self, a, X, dtype=None):
        """The host array ``a`` as an array of ``X``'s backend and device, in ``X``'s dtype (or ``dtype``)."""
        return np.asarray(a, dtype=X.dtype if dtype is None else dtype)

    def working_copy(self, X):
        """The points an iterated fit computes against: float64 in memory and on a cluster (the
        arithmetic of scikit-learn's iterations), the tensors themselves on a device (their own
        precision there)."""
        return X.astype(np.float64)

    def occupied_cells(self, X, size):
        """``(cells, first, counts)``: the distinct grid cells ``round(x / size)`` holding points
        of ``X``, in the order of their first point, that point's row and the number of points
        in each (the cells counted in float64, on the host)."""
        cells = np.round(np.asarray(self.host(X), dtype=np.float64) / size)
        order = np.lexsort(cells.T[::-1])  # stable: each run of equal cells starts at its first point
        runs = cells[order]
        starts = np.flatnonzero(np.r_[True, np.any(runs[1:] != runs[:-1], axis=1)])
        counts = np.diff(np.r_[starts, len(cells)])
        by_first = np.argsort(order[starts], kind="stable")
        first = order[starts][by_first]
        return cells[first], first, counts[by_first]

    def nearest_point(self, Q, points):
        """``(distance, index)`` of the nearest of ``points`` to each row of ``Q`` in the
        Euclidean metric, as scikit-learn's nearest-neighbour queries compute them."""
        dist, idx = nb.kneighbors(nb.make_index(self.host(points), "euclidean"), Q, 1)
        return dist[:, 0], idx[:, 0]


class ArrayAPIBackend(NumPyBackend):
    """Arrays of the namespace ``xp`` (PyTorch, CuPy) under array-API dispatch, on their device."""

    name = "array_api"

    def __init__(self, xp):
        self.xp = xp

    def points(self, x, name, *, like=None, finite=True):
        return as_points(self.xp, x, name, like=like, n_features=None if like is None else like.shape[1],
                         dtype=None if like is None else like.dtype, finite=finite)

    def regression_target(self, y, X):  # finite already: validate_data checked the tensor
        return self.xp.astype(y, X.dtype)

    def total(self, sample_weight):  # in the weights' own precision, on their device
        return float(self.xp.sum(self.xp.asarray(sample_weight)))

    def bandwidth(self, kernel, X, sample_weight=None):
        if not isinstance(kernel.bandwidth, str):
            return super().bandwidth(kernel, X, sample_weight)
        if sample_weight is not None:
            sample_weight = self.xp.asarray(sample_weight, dtype=X.dtype, device=device(X))
        # a rule, its spread computed on the tensors' device
        return resolve_bandwidth(kernel.bandwidth, X, sample_weight=sample_weight, xp=self.xp,
                                 host=functools.partial(to_host, self.xp))

    def host(self, *arrays):
        out = tuple(None if a is None else np.asarray(a) if isinstance(a, (np.ndarray, list, tuple))
                    else _convert_to_numpy(a, self.xp) for a in arrays)
        return out[0] if len(out) == 1 else out

    def like(self, a, X, dtype=None):
        return self.xp.asarray(a, dtype=X.dtype if dtype is None else dtype, device=device(X))

    def working_copy(self, X):
        return X

    def nearest_point(self, Q, points):
        """On the device of ``points`` (or of ``Q``, for host points)."""
        if isinstance(Q, np.ndarray):
            Q = self.like(Q, points)
        elif isinstance(points, np.ndarray):
            points = self.like(points, Q)
        idx, d2 = xp_nearest(self.xp, Q, self.xp.astype(points, Q.dtype), Kernel("uniform", bandwidth=1.0))
        return self.xp.sqrt(d2), idx


class DaskBackend(NumPyBackend):
    """dask arrays: the samples stay on the cluster, values are checked lazily chunk by chunk."""

    name = "dask"

    def check_fit(self, est, X, y="no_validation", **kwargs):
        X = as_dask_points(X, "X", dtype=kwargs.get("dtype"))
        est.n_features_in_ = X.shape[1]
        if isinstance(y, str) and y == "no_validation":
            return X
        if y is None:
            raise ValueError("y must be an array of shape (n_samples,), got None")
        return X, y

    def check_queries(self, est, X, accept_sparse=False):
        check_is_fitted(est)
        return as_dask_points(X, "X", n_features=est.n_features_in_)

    def points(self, x, name, *, like=None, finite=True):
        if like is None:
            return as_dask_points(x, name)
        if not is_dask_collection(x):  # queries in memory beside samples on the cluster
            return NUMPY.points(x, name, like=like, finite=finite)
        return as_dask_points(x, name, n_features=like.shape[1], dtype=like.dtype)

    def regression_target(self, y, X):
        return as_dask_array(y, "y", dtype=X.dtype, n_rows=X.shape[0], rows=X.chunks[0])

    def total(self, sample_weight):
        return float(self.host(sample_weight.sum(dtype=np.float64)))

    def sample_weight(self, sample_weight, X):
        if sample_weight is None:
            return None
        return as_dask_array(sample_weight, "sample_weight", ndim=(1,), dtype=X.dtype, n_rows=X.shape[0],
                             rows=X.chunks[0])

    def encode(self, y, X):
        import dask.array as da

        rows = X.chunks[0]
        y = da.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        classes = np.unique(da.unique(y.rechunk((rows,))).compute())  # the labels are few: in memory
        codes = y.rechunk((rows,)).map_blocks(classes.searchsorted, dtype=np.intp)
        eye = np.eye(len(classes), dtype=X.dtype)
        return classes, codes.map_blocks(eye.take, axis=0, new_axis=1, chunks=(rows, (len(eye),)), dtype=X.dtype)

    def decode(self, classes, proba):
        return proba.argmax(axis=1).map_blocks(classes.take, dtype=classes.dtype)

    def bandwidth(self, kernel, X, sample_weight=None):
        return dask_bandwidth(kernel.bandwidth, X, sample_weight=sample_weight)  # a rule: dask reductions

    def resolved(self, kernel, X, sample_weight=None):
        """Rules and levels by dask reductions over all the samples (:func:`dask_resolved`); a sum
        term by term."""
        if isinstance(kernel, SumKernel):
            return kernel.map_terms(lambda k: self.resolved(k, X, sample_weight))
        if not kernel.composite:  # a kNN kernel keeps its k: the pass merges each chunk's k nearest
            return kernel if kernel.n_neighbors is not None else kernel.at_bandwidth(
                self.bandwidth(kernel, X, sample_weight))
        return dask_resolved(kernel, X, sample_weight)

    def require_in_memory(self, what, why):
        raise ValueError(f"{what} is not available on dask arrays ({why})")

    def host(self, *arrays):
        import dask

        out = tuple(None if a is None else np.asarray(a) for a in dask.compute(*arrays))
        return out[0] if len(out) == 1 else out

    def float64(self, a):
        return a.astype(np.float64) if is_dask_collection(a) else NUMPY.float64(a)

    def like(self, a, X, dtype=None):
        return np.asarray(a, dtype=X.dtype if dtype is None else dtype)  # small arrays (seeds, centres) stay in memory

    def occupied_cells(self, X, size):
        """Counted chunk by chunk, merged in memory (one entry per occupied cell)."""
        import dask

        parts = dask.compute(*[dask.delayed(NUMPY.occupied_cells)(block, size) for block in X.to_delayed().ravel()])
        offsets = np.cumsum((0,) + X.chunks[0][:-1])
        cells = np.concatenate([p[0] for p in parts])
        first = np.concatenate([p[1] + o for p, o in zip(parts, offsets)])
        counts = np.concatenate([p[2] for p in parts])
        unique, inverse = np.unique(cells, axis=0, return_inverse=True)
        inverse = inverse.ravel()
        total = np.bincount(inverse, weights=counts).astype(np.intp)
        earliest = np.full(len(unique), X.shape[0])
        np.minimum.at(earliest, inverse, first)
        order = np.argsort(earliest, kind="stable")  # in order of first appearance
        return unique[order], earliest[order], total[order]

    def nearest_point(self, Q, points):
        """Lazily, chunk by chunk of ``Q``."""
        points = np.asarray(points)
        nearest = functools.partial(_nearest_block, points=points)
        return (Q.map_blocks(nearest, 0, drop_axis=1, dtype=np.float64),
                Q.map_blocks(nearest, 1, drop_axis=1, dtype=np.intp))


def _nearest_block(block, which, points):
    return NUMPY.nearest_point(block, points)[which]


NUMPY = NumPyBackend()
DASK = DaskBackend()


def map_queries(method):
    """Decorate ``predict``/``transform`` of an estimator fitted in memory: a dask array of
    queries is mapped chunk by chunk with the fitted estimator; anything else goes straight to
    ``method``."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if not is_dask_collection(X):
            return method(self, X, *args, **kwargs)
        X = DASK.check_queries(self, X)
        call = functools.partial(_call, method, self, args=args, kwargs=kwargs)
        with warnings.catch_warnings():  # the output's width and type, from one row: its warnings are not the call's
            warnings.simplefilter("ignore")
            probe = np.asarray(call(X[:1].compute()))
        if probe.ndim == 1:
            return X.map_blocks(call, drop_axis=1, dtype=probe.dtype, meta=probe[:0])
        return X.map_blocks(call, chunks=(X.chunks[0], probe.shape[1:]), dtype=probe.dtype, meta=probe[:0])

    return wrapper


def _call(method, est, block, args, kwargs, block_info=None):
    """``method`` on one chunk; its warnings say which chunk (a localkit warning's ``chunk``, and its
    ``rows`` counted from the array's first row)."""
    if block_info is None:
        return method(est, block, *args, **kwargs)
    start, stop = block_info[0]["array-location"][0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = method(est, block, *args, **kwargs)
    for w in caught:  # re-emitted: the caller's warning filters apply
        message = w.message
        if isinstance(message, LocalkitWarning):
            message = copy.copy(message)
            message.chunk = (start, stop)
            if getattr(message, "rows", None) is not None:
                message.rows = message.rows + start
        warn(message)
    return out
