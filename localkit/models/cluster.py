"""Mean shift: the iterated local mean of the points themselves.

Each seed moves to the local mean of the data around it,

    x <- sum_i K(x, x_i) x_i / sum_j K(x, x_j),

until it stops moving; the places where seeds stop are the modes of the kernel density estimate
whose normaliser is ``sum_j K(x, x_j)``. Kernel: any profile of :mod:`localkit.kernels`; values:
the points; local model: the constant (the local mean). All seeds still moving go through one
engine pass per iteration, converged seeds are frozen (:func:`localkit.engine.iteration.iterate`).
On tensors under array-API dispatch every engine pass runs on the tensors' device.
"""
from __future__ import annotations

import warnings
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.utils._array_api import _convert_to_numpy, device
from sklearn.cluster import estimate_bandwidth
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import N_JOBS_CONSTRAINT, PROFILE_CONSTRAINT, non_negative, positive
from .._progress import warn_max_iter
from .._validation import check_points
from ..engine import BoundKernel, EngineOptions, local_sums
from ..engine.namespace import _as_float, foreign_namespace, xp_kneighbors, xp_local_sums, xp_nearest
from ..engine.planner import COMPILED_BANDWIDTHS, compiled_applies
from ..engine.results import LocalSums
from ..engine.iteration import iterate, row_norm_change
from ..engine.neighbors import kneighbors, make_index
from ..kernels import Kernel
from ..engine.distributed import is_dask_collection
from ._base import FLOATS, check_sample_weight
from ._dask import map_queries
from ..engine.distributed import as_dask_array, as_dask_points


def shift_seeds(X, seeds, kernel, max_iter, blurring=False, history=False, *, sample_weight=None,
                verbose=None, n_jobs=None, xp=None):
    """Move ``seeds`` (all at once) to the fixed points of the local mean of ``X``.

    Each seed stops on its own when its move is at most ``1e-3 * h`` (scikit-learn's rule) or
    after ``max_iter + 1`` updates, or when its neighbourhood is empty. With ``blurring=True`` the
    data moves too (``X_{t+1} = local mean of X_t``, seeds = data) and stops as a whole.
    ``sample_weight`` ``c_i`` multiplies the kernel: ``x <- sum_i c_i K_i x_i / sum_j c_j K_j``.
    ``verbose`` drives the progress bar (:mod:`localkit._progress`). With ``xp`` (an array
    namespace), ``X`` and ``sample_weight`` are arrays of it and every engine pass runs on their
    device (:func:`~localkit.engine.namespace.xp_local_sums`); the driver keeps the seeds on the
    host (``n_seeds x d`` each way per iteration, against ``n_seeds x n_samples`` pairs computed there).

    Returns ``(fixed_point, intensity)``: the driver's result and each seed's weight sum at its
    last update (the number of points within ``h`` for the uniform kernel, their total weight
    with ``sample_weight``; 0 for a seed whose neighbourhood emptied).
    """
    h = float(kernel.bandwidth)
    if xp is None:
        # the compiled pass decides ties at distance h with scikit-learn's arithmetic
        bound = BoundKernel(kernel, X, sample_weight=sample_weight)
        algorithm = "compiled" if compiled_applies(bound, None, False) else "auto"
        bound.options = EngineOptions(algorithm=algorithm, n_jobs=n_jobs)

        def blur(Y):
            return local_sums(None, Y, Y, kernel, empty="nearest", algorithm=algorithm, sample_weight=sample_weight,
                              n_jobs=n_jobs)

        def shift(Y):  # the samples stay put: bound once, so the compiled pass sorts them once for every iteration
            return bound.sums(Y, X)
    else:
        blur, shift = _device_passes(xp, X, kernel, sample_weight)
    intensity = np.zeros(len(seeds))
    tol = 1e-3 * h
    # the uniform kernel's weight sum is a count; exp(log(count)) is off by an ulp, and ties in
    # intensity are broken by the coordinates, so it must be the exact integer
    exact = np.rint if kernel.profile.name == "uniform" and sample_weight is None else (lambda w: w)
    if blurring:
        def step(Y):
            out = blur(Y)
            intensity[:] = np.where(out.empty, 0.0, exact(out.weight_sum))
            return np.where(out.empty[:, None], Y, out.mean)

        fp = iterate(step, X, tol=tol, max_iter=max_iter + 1, change=lambda a, b: row_norm_change(a, b).max(),
                     inclusive=True, history=history, progress=verbose, warn=False, name="blurring mean shift")
        if not fp.converged:
            warn_max_iter("blurring mean shift", max_iter)
        return fp, intensity

    def step(Y, rows):
        out = shift(Y)
        intensity[rows] = np.where(out.empty, 0.0, exact(out.weight_sum))
        return np.where(out.empty[:, None], Y, out.mean)  # an empty neighbourhood stops the seed

    fp = iterate(step, seeds, tol=tol, max_iter=max_iter + 1, change=row_norm_change, per_row=True,
                 inclusive=True, history=history, progress=verbose, warn=False, name="mean shift")
    if not fp.converged.all():  # counted as scikit-learn counts: max_iter beyond the first update
        warn_max_iter("mean shift", max_iter, f" ({int(np.sum(~fp.converged))} of {len(seeds)} seeds still moving)")
    return fp, intensity


def _device_passes(xp, X, kernel, sample_weight):
    """The two passes of :func:`shift_seeds` (blurring: the points against themselves; else the
    seeds against ``X``) on ``X``'s device, returning NumPy sums. A compact profile takes the
    compiled pass's arithmetic there too (ties at distance ``h`` decided as on the host)."""
    lo, hi = COMPILED_BANDWIDTHS
    options = EngineOptions(algorithm="compiled" if kernel.compact and lo < kernel.bandwidth < hi else "auto")
    on_device = device(X)

    def run(Y, samples):
        out = xp_local_sums(xp, Y, samples, samples, kernel, sample_weight=sample_weight, options=options)
        return LocalSums(*(_convert_to_numpy(a, xp) for a in (out.mean, out.log_weight_sum, out.empty)))

    return (lambda Y: run(None, xp.asarray(Y, dtype=X.dtype, device=on_device)),
            lambda Y: run(xp.asarray(Y, dtype=X.dtype, device=on_device), X))


def bin_seeds(X, bin_size, min_bin_freq=1):
    """scikit-learn's ``get_bin_seeds``, vectorised: the cells ``round(x / bin_size)`` holding at
    least ``min_bin_freq`` points, in the order of their first point, as float32 cell indices
    times ``bin_size``; the points themselves (with scikit-learn's warning) when every point has
    a cell of its own.

    scikit-learn's version is a Python loop over the points (27 ms of a 10,000-point fit in
    benchmarks/bench_mean_shift.py, most of the fit); this one sorts the cells once (0.9 ms,
    the same seeds in the same order; tests/test_mean_shift_bins.py).
    """
    if bin_size == 0:
        return X
    cells = np.round(X / bin_size)
    order = np.lexsort(cells.T[::-1])  # stable: each run of equal cells starts at its first point
    runs = cells[order]
    starts = np.flatnonzero(np.r_[True, np.any(runs[1:] != runs[:-1], axis=1)])
    counts = np.diff(np.r_[starts, len(X)])
    first = np.sort(order[starts][counts >= min_bin_freq])
    seeds = cells[first].astype(np.float32)
    if len(seeds) == len(X):
        warnings.warn(f"Binning data failed with provided bin_size={bin_size:f}, using data points as seeds.",
                      stacklevel=2)
        return X
    return seeds * bin_size


def merge_modes(modes, intensity, bandwidth):
    """scikit-learn's post-processing: drop seeds that found no point, keep one mode per exact
    duplicate (the last seed's intensity, as a dict would), sort by (intensity, coordinates)
    descending, then walk down the list and remove every mode within ``bandwidth`` of a kept one."""
    found = intensity > 0
    modes, intensity = modes[found], intensity[found]
    if len(modes) == 0:
        return modes
    # the last occurrence of each exact duplicate wins
    _, last = np.unique(modes[::-1], axis=0, return_index=True)
    keep = np.sort(len(modes) - 1 - last)
    modes, intensity = modes[keep], intensity[keep]
    order = np.lexsort(tuple(modes[:, ::-1].T) + (intensity,))[::-1]
    modes = modes[order]
    unique = np.ones(len(modes), dtype=bool)
    for i in range(len(modes)):  # few iterations do work: one per kept mode
        if unique[i]:
            unique[np.linalg.norm(modes - modes[i], axis=1) <= bandwidth] = False
            unique[i] = True
    return modes[unique]


def _estimate_bandwidth(xp, X, quantile=0.3):
    """scikit-learn's ``estimate_bandwidth`` on ``X``'s device: the mean over the points of the
    distance to their ``int(quantile n)``-th nearest point (the point itself counted)."""
    k = max(1, int(X.shape[0] * quantile))
    far = [d[:, -1] for d, _ in xp_kneighbors(xp, X, X, k, Kernel("uniform"))]
    return float(xp.sum(xp.concat(far))) / X.shape[0]


class MeanShift(ClusterMixin, BaseEstimator):
    """Mean shift clustering: seeds climb the kernel density by iterated local means.

    .. math::

        x \\leftarrow \\frac{\\sum_i K(x, x_i)\\, x_i}{\\sum_j K(x, x_j)},
        \\qquad K(x, x_i) = k\\big(\\lVert x - x_i \\rVert / h\\big)

    The kernel is any profile of :class:`localkit.Kernel` (uniform: scikit-learn's flat kernel,
    points with ``|x - x_i| <= h``; gaussian: Gaussian mean shift); the values are the points; the
    local model is the constant. With the uniform kernel it reproduces scikit-learn's
    ``MeanShift``: a seed stops when it moves by at most ``1e-3 h`` (or after ``max_iter + 1``
    updates, as scikit-learn counts them), modes closer than ``h`` to a mode found by more points
    are removed, and each point takes the label of its nearest mode. All moving seeds take one
    engine pass per iteration (a compiled pass for compact profiles). Points exactly ``h`` away
    are tested with scikit-learn's arithmetic (``|x - q|^2 <= h^2``); on gridded data a seed's
    mean can still land on such a tie after a few steps, and then the order in which the two
    libraries add up the points (round-off) decides it.

    On PyTorch tensors (or CuPy arrays) under ``sklearn.config_context(array_api_dispatch=True)``
    every engine pass, the estimate of ``bandwidth=None``, the labels and ``predict`` run on
    the tensors' device (compact profiles with the same test ``|x - q|^2 <= h^2``), and the
    fitted attributes are tensors there; the seeds and bins are kept on the host (``n_jobs``
    does not apply).

    Parameters
    ----------
    kernel : str, default="uniform"
        A profile name (not "softmax").
    bandwidth : float or None, default=None
        ``h``. None estimates it as scikit-learn's ``estimate_bandwidth`` (quantile 0.3).
    seeds : array of shape (n_seeds, n_features) or None
        Starting points; None uses the data (or the bins, with ``bin_seeding``).
    bin_seeding : bool, default=False
        Seeds at the centres of grid cells of size ``h`` holding at least ``min_bin_freq`` points.
    min_bin_freq : int, default=1
    cluster_all : bool, default=True
        False labels points farther than ``h`` from every mode as -1.
    max_iter : int, default=300
        Updates per seed beyond the first, as in scikit-learn.
    blurring : bool, default=False
        Blurring mean shift: the data moves to its own local mean every iteration (seeds are
        the data; ``seeds`` and ``bin_seeding`` must stay unset); labels come from where each
        point ends. It stops when no point moves more than ``1e-3 h``: with a compact kernel
        the collapsed clusters then sit still; with the Gaussian they keep attracting each
        other, so a small ``max_iter`` is the usual stopping rule there.
    verbose : None, bool or int, default=None
        A progress bar of the iterations on stderr: True shows it, False never, None on a
        terminal for fits longer than 2 s.
    n_jobs : int, default=None
        Threads of the local means: ``None`` one unless a joblib context says otherwise, ``-1``
        all cores (scikit-learn's convention).

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
    labels_ : ndarray of shape (n_samples,)
    n_iter_ : int
        The most updates any seed took, minus one (scikit-learn's count).
    bandwidth_ : float
    kernel_ : Kernel or None
        The kernel of the shifts (None when the estimated bandwidth is 0: nothing moves).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import MeanShift
    >>> X = np.array([[1, 1], [2, 1], [1, 0], [4, 7], [3, 5], [3, 6]])
    >>> ms = MeanShift(bandwidth=2).fit(X)
    >>> ms.labels_
    array([1, 1, 1, 0, 0, 0])
    >>> ms.predict([[0, 0], [5, 5]])
    array([1, 0])
    """

    def __init__(self, kernel="uniform", bandwidth=None, seeds=None, bin_seeding=False, min_bin_freq=1,
                 cluster_all=True, max_iter=300, blurring=False, verbose=None, n_jobs=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.seeds = seeds
        self.bin_seeding = bin_seeding
        self.min_bin_freq = min_bin_freq
        self.cluster_all = cluster_all
        self.max_iter = max_iter
        self.blurring = blurring
        self.verbose = verbose
        self.n_jobs = n_jobs

    _parameter_constraints: dict = {
        "kernel": PROFILE_CONSTRAINT,  # mean shift needs a profile of a distance, not softmax
        "bandwidth": positive() + [None],
        "seeds": ["array-like", None],
        "bin_seeding": ["boolean"],
        "min_bin_freq": positive(Integral),
        "cluster_all": ["boolean"],
        "max_iter": non_negative(Integral),
        "blurring": ["boolean"],
        "verbose": ["verbose", None],
        "n_jobs": N_JOBS_CONSTRAINT,
    }

    def _check_params(self):
        """What combines parameters (their types are in ``_parameter_constraints``)."""
        if self.blurring and (self.seeds is not None or self.bin_seeding):
            raise ValueError("blurring=True moves the data itself: seeds must be None and bin_seeding False")

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None, sample_weight: ArrayLike | None = None):
        """Find the modes and label the points. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0`` multiplies the kernel,
        ``x <- sum_i c_i K_i x_i / sum_j c_j K_j`` (integer weights act as repeated points). Seeds
        default to the points of positive weight; with ``bin_seeding`` a cell's count is the total
        weight of its points, so ``min_bin_freq > 1`` needs integer weights.
        """
        if is_dask_collection(X, sample_weight):  # the points stay on the cluster
            return fit_mean_shift_dask(self, X, sample_weight)
        xp = foreign_namespace(X, sample_weight)
        if xp is None:
            X = validate_data(self, X, dtype=FLOATS)
            data = X.astype(np.float64)
        else:  # tensors under array-API dispatch: the engine passes run on X's device; the seeds
            # (and the bins, from a host copy of the points: O(n d)) live on the host
            X = _as_float(xp, X, "X", ndim=(2,))
            self.n_features_in_ = X.shape[1]
            data = _convert_to_numpy(X, xp).astype(np.float64)
            if sample_weight is not None:
                sample_weight = _convert_to_numpy(xp.asarray(sample_weight), xp)
        self._check_params()
        weighted = data
        if sample_weight is not None:
            sample_weight = check_sample_weight(sample_weight, data)
            weighted = data[sample_weight > 0]  # zero weight: not a point of the density
        if self.bandwidth is not None:
            h = float(self.bandwidth)
        elif xp is None:
            h = float(estimate_bandwidth(self._repeated(data, sample_weight, "bandwidth=None"), quantile=0.3))
        else:
            rows = self._repeated(np.arange(len(data))[:, None], sample_weight, "bandwidth=None")[:, 0]
            h = _estimate_bandwidth(xp, X if sample_weight is None else xp.take(X, xp.asarray(rows, device=device(X)),
                                                                                   axis=0))
        self.bandwidth_ = h
        if h == 0:  # estimated from constant or heavily duplicated data
            return self._fit_zero_bandwidth(X, data, weighted, sample_weight, xp)
        self.kernel_ = Kernel(self.kernel, bandwidth=h)
        if self.seeds is not None:
            seeds = self.seeds if xp is None or foreign_namespace(self.seeds) is None else _convert_to_numpy(
                self.seeds, xp)
            seeds = check_points(seeds, "seeds", n_features=X.shape[1])
        elif self.bin_seeding:
            integral = sample_weight is None or np.all(np.rint(sample_weight) == sample_weight)
            source = weighted if self.min_bin_freq == 1 and not integral else self._repeated(
                data, sample_weight, "bin_seeding with min_bin_freq > 1")
            seeds = bin_seeds(source, h, self.min_bin_freq)
        else:
            seeds = weighted
        if xp is not None and sample_weight is not None:
            sample_weight = xp.asarray(sample_weight, dtype=X.dtype, device=device(X))
        fp, intensity = shift_seeds(data if xp is None else X, seeds.astype(np.float64), self.kernel_, self.max_iter,
                                    blurring=self.blurring, sample_weight=sample_weight, verbose=self.verbose,
                                    n_jobs=self.n_jobs, xp=xp)
        self.n_iter_ = int(fp.n_iter) - 1
        centers = merge_modes(fp.state, intensity, h)
        if len(centers) == 0:
            raise ValueError(f"No point was within bandwidth={h:f} of any seed; try other seeds or a "
                             "larger bandwidth")
        if xp is not None:  # each point's nearest mode, on X's device
            self.cluster_centers_ = xp.asarray(centers, dtype=X.dtype, device=device(X))
            ends = xp.asarray(fp.state, dtype=X.dtype, device=device(X)) if self.blurring else X
            idx, d2 = xp_nearest(xp, ends, self.cluster_centers_, self.kernel_)
            self.labels_ = idx if self.cluster_all else xp.where(xp.sqrt(d2) <= h, idx, -1)
            return self
        self.cluster_centers_ = centers.astype(X.dtype, copy=False)
        ends = fp.state if self.blurring else data  # blurring: where each point ended up
        dist, idx = kneighbors(make_index(centers, "euclidean"), ends, 1)  # as scikit-learn labels
        self.labels_ = idx[:, 0] if self.cluster_all else np.where(dist[:, 0] <= h, idx[:, 0], -1)
        return self

    def _fit_zero_bandwidth(self, X, data, weighted, sample_weight, xp):
        """The limit ``h -> 0``, as scikit-learn clusters constant or duplicated data: a seed's
        neighbourhood is the points exactly at it, whose mean is the seed, so every seed at a
        point is a mode (intensity: the points there, or their weight) and nothing moves
        (``n_iter_ = 0``); modes merge only when equal, each point is labelled by its own."""
        seeds = data if self.seeds is None else check_points(
            self.seeds if xp is None or foreign_namespace(self.seeds) is None else _convert_to_numpy(self.seeds, xp),
            "seeds", n_features=X.shape[1]).astype(np.float64)
        if self.seeds is None and not self.bin_seeding:
            seeds = weighted
        _, inverse = np.unique(np.concatenate([data, seeds]), axis=0, return_inverse=True)
        inverse = inverse.ravel()
        mass = np.bincount(inverse[:len(data)], weights=sample_weight, minlength=inverse.max() + 1)
        intensity = mass[inverse[len(data):]]  # 0 for a seed at no point
        centers = merge_modes(seeds, intensity, 0.0)
        if len(centers) == 0:
            raise ValueError("No point was within bandwidth=0.000000 of any seed; try other seeds or a larger bandwidth")
        self.kernel_ = None
        self.n_iter_ = 0
        dist, idx = kneighbors(make_index(centers, "euclidean"), data, 1)
        labels = idx[:, 0] if self.cluster_all else np.where(dist[:, 0] <= 0, idx[:, 0], -1)
        if xp is not None:
            self.cluster_centers_ = xp.asarray(centers, dtype=X.dtype, device=device(X))
            self.labels_ = xp.asarray(labels, device=device(X))
            return self
        self.cluster_centers_ = centers.astype(X.dtype, copy=False)
        self.labels_ = labels
        return self

    @staticmethod
    def _repeated(data, sample_weight, purpose):
        """The points, each repeated by its integer weight: scikit-learn's bandwidth estimate and
        bin counts then see the weighted sample (they count points)."""
        if sample_weight is None:
            return data
        if np.any(np.rint(sample_weight) != sample_weight):
            raise ValueError(f"sample_weight must hold integers (repeat counts) for {purpose}, which counts "
                             "points; got non-integer weights")
        return np.repeat(data, sample_weight.astype(np.intp), axis=0)

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """The index of the nearest cluster centre for each row of ``X``."""
        check_is_fitted(self)
        xp = foreign_namespace(X, self.cluster_centers_)
        if xp is not None:  # on the device of X (or of the centres, for NumPy X)
            like = X if foreign_namespace(X) is not None else self.cluster_centers_
            X = _as_float(xp, X, "X", like=like, ndim=(2,))
            if X.shape[1] != self.n_features_in_:
                raise ValueError(f"X has {X.shape[1]} features, but MeanShift is expecting {self.n_features_in_} "
                                 "features as input.")
            centers = xp.asarray(self.cluster_centers_, dtype=X.dtype, device=device(X))
            return xp_nearest(xp, X, centers, Kernel("uniform", bandwidth=1.0))[0]  # euclidean, unscaled
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        return kneighbors(make_index(np.asarray(self.cluster_centers_), "euclidean"), X, 1)[1][:, 0]


# -- mean shift on dask arrays ------------------------------------------------------------------
def fit_mean_shift_dask(est, X, sample_weight):
    """``MeanShift.fit`` on a dask array: the seeds live in memory, every iteration is one
    distributed engine pass over the samples (which stay on the cluster), the fixed-point driver
    is :func:`localkit.engine.iterate` unchanged; ``labels_`` is a dask array."""
    import dask


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
        seeds = dask_bin_seeds(X, h, est.min_bin_freq)
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


def dask_bin_seeds(X, h, min_bin_freq):
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
    dist, idx = kneighbors(make_index(centers, "euclidean"), block, 1)
    return idx[:, 0] if h is None else np.where(dist[:, 0] <= h, idx[:, 0], -1)
