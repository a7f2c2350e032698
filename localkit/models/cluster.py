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

from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClusterMixin, _fit_context
from sklearn.cluster import estimate_bandwidth

from .._params import N_JOBS_CONSTRAINT, PROFILE_CONSTRAINT, non_negative, positive
from .._progress import warn_max_iter
from .._validation import check_points
from ..engine import EngineOptions, backend_of, bind, iterate, map_queries, row_norm_change
from ..kernels import Kernel
from ..exceptions import LocalkitWarning, warn


def shift_seeds(X, seeds, kernel, max_iter, blurring=False, history=False, *, sample_weight=None,
                verbose=None, n_jobs=None):
    """Move ``seeds`` (all at once) to the fixed points of the local mean of ``X``.

    Each seed stops on its own when its move is at most ``1e-3 * h`` (scikit-learn's rule) or
    after ``max_iter + 1`` updates, or when its neighbourhood is empty. With ``blurring=True`` the
    data moves too (``X_{t+1} = local mean of X_t``, seeds = data) and stops as a whole.
    ``sample_weight`` ``c_i`` multiplies the kernel: ``x <- sum_i c_i K_i x_i / sum_j c_j K_j``.
    ``verbose`` drives the progress bar (:mod:`localkit._progress`). ``X`` and ``sample_weight``
    may live on any backend (a device under array-API dispatch, a dask cluster): every engine pass
    runs there and the driver keeps the seeds on the host (``n_seeds x d`` each way per iteration,
    against ``n_seeds x n_samples`` pairs computed there). Points exactly ``h`` away are decided
    with scikit-learn's arithmetic (``EngineOptions(exact_edge=True)``).

    Returns ``(fixed_point, intensity)``: the driver's result and each seed's weight sum at its
    last update (the number of points within ``h`` for the uniform kernel, their total weight
    with ``sample_weight``; 0 for a seed whose neighbourhood emptied).
    """
    h = float(kernel.bandwidth)
    backend = backend_of(X, sample_weight)
    options = EngineOptions(exact_edge=True, n_jobs=n_jobs)
    intensity = np.zeros(len(seeds))
    tol = 1e-3 * h
    # a flat profile's weights are 0 or 1 (the uniform kernel): its weight sum is a count, and
    # exp(log(count)) is off by an ulp; ties in intensity are broken by the coordinates, so it
    # must be the exact integer
    flat = kernel.profile.compact and not kernel.profile.vanishes_at_edge
    exact = np.rint if flat and sample_weight is None else (lambda w: w)
    if blurring:
        def step(Y):
            points = backend.like(Y, X)
            out = bind(kernel, points, sample_weight=sample_weight, options=options).host_sums(None, points)
            intensity[:] = np.where(out.empty, 0.0, exact(out.weight_sum))
            return np.where(out.empty[:, None], Y, out.mean)

        fp = iterate(step, backend.host(X).astype(np.float64), tol=tol, max_iter=max_iter + 1,
                     change=lambda a, b: row_norm_change(a, b).max(), inclusive=True, history=history,
                     progress=verbose, warn=False, name="blurring mean shift")
        if not fp.converged:
            warn_max_iter("blurring mean shift", max_iter, tol=False)
        return fp, intensity

    # the samples stay put: bound once, so the compiled pass sorts them once for every iteration
    bound = bind(kernel, X, sample_weight=sample_weight, options=options)
    values = bound.prepare(X)

    def step(Y, rows):
        out = bound.host_sums(backend.like(Y, X), values)
        intensity[rows] = np.where(out.empty, 0.0, exact(out.weight_sum))
        return np.where(out.empty[:, None], Y, out.mean)  # an empty neighbourhood stops the seed

    fp = iterate(step, seeds, tol=tol, max_iter=max_iter + 1, change=row_norm_change, per_row=True,
                 inclusive=True, history=history, progress=verbose, warn=False, name="mean shift")
    if not fp.converged.all():  # counted as scikit-learn counts: max_iter beyond the first update
        warn_max_iter("mean shift", max_iter, int(np.sum(~fp.converged)), len(seeds), what="seeds", tol=False)
    return fp, intensity


def bin_seeds(X, bin_size, min_bin_freq=1):
    """scikit-learn's ``get_bin_seeds``: the cells ``round(x / bin_size)`` holding at least
    ``min_bin_freq`` points, in the order of their first point, as float32 cell indices times
    ``bin_size``; the points themselves (with scikit-learn's warning) when every point has a
    cell of its own. ``X`` may be a dask array: the cells are counted chunk by chunk.

    scikit-learn's version is a Python loop over the points (27 ms of a 10,000-point fit in
    benchmarks/bench_mean_shift.py, most of the fit); the engine's cell count sorts the cells once
    (0.9 ms, the same seeds in the same order; tests/test_mean_shift_bins.py).
    """
    if bin_size == 0:
        return X
    backend = backend_of(X)
    cells, _, counts = backend.occupied_cells(X, bin_size)
    seeds = cells[counts >= min_bin_freq].astype(np.float32)
    if len(seeds) == X.shape[0]:
        # scikit-learn's words, figure included (tests/test_mean_shift_bins.py compares them)
        warn(LocalkitWarning(f"Binning data failed with provided bin_size={bin_size:f}, using data points as seeds."))
        return backend.host(X)
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
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy"}, default="uniform"
        A profile of :class:`localkit.Kernel` (not "softmax"); scikit-learn's names "rbf", "tophat",
        "flat", "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform",
        "uniform", "laplacian", "triangular" and "biweight". "uniform" (flat) is scikit-learn's
        ``MeanShift``.
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
        backend = backend_of(X, sample_weight)  # NumPy, a device or a dask cluster: the passes run there
        X = backend.check_fit(self, X)
        self._check_params()
        if self.blurring:
            backend.require_in_memory("blurring=True", "it moves every point each iteration")
        if self.bin_seeding and sample_weight is not None:
            backend.require_in_memory("bin_seeding with sample_weight", "give integer repeats as rows")
        points = backend.working_copy(X)
        if sample_weight is not None:
            sample_weight = backend.sample_weight(sample_weight, points)
        weight = backend.host(sample_weight)  # the seeds, bins and bandwidth estimate are made on the host
        if self.bandwidth is not None:
            h = float(self.bandwidth)
        else:
            backend.require_in_memory("bandwidth=None", "it estimates h from every point's neighbours; give bandwidth")
            h = float(estimate_bandwidth(self._repeated(backend.host(points).astype(np.float64), weight,
                                                        "bandwidth=None"), quantile=0.3))
        self.bandwidth_ = h
        if h == 0:  # estimated from constant or heavily duplicated data
            return self._fit_zero_bandwidth(X, backend, weight)
        self.kernel_ = Kernel(self.kernel, bandwidth=h)
        seeds = self._seeds(X, points, backend, weight)
        fp, intensity = shift_seeds(points, seeds.astype(np.float64), self.kernel_, self.max_iter,
                                    blurring=self.blurring, sample_weight=sample_weight, verbose=self.verbose,
                                    n_jobs=self.n_jobs)
        self.n_iter_ = int(fp.n_iter) - 1
        centers = merge_modes(fp.state, intensity, h)
        if len(centers) == 0:
            raise ValueError(f"No point was within bandwidth={h:f} of any seed; try other seeds or a "
                             "larger bandwidth")
        self.cluster_centers_ = backend.like(centers, X)
        ends = backend.like(fp.state, points) if self.blurring else points  # blurring: where each point ended up
        dist, idx = backend.nearest_point(ends, centers)  # as scikit-learn labels
        self.labels_ = idx if self.cluster_all else backend.xp.where(dist <= h, idx, -1)
        return self

    def _seeds(self, X, points, backend, weight):
        """The starting points: ``seeds``, the bins (counted where the points are) or the points
        of positive weight, on the host."""
        if self.seeds is not None:
            return check_points(backend.host(self.seeds), "seeds", n_features=X.shape[1])
        if self.bin_seeding:
            integral = weight is None or np.all(np.rint(weight) == weight)
            if weight is None:
                return bin_seeds(points, self.bandwidth_, self.min_bin_freq)
            data = backend.host(points).astype(np.float64)
            source = data[weight > 0] if self.min_bin_freq == 1 and not integral else self._repeated(
                data, weight, "bin_seeding with min_bin_freq > 1")
            return bin_seeds(source, self.bandwidth_, self.min_bin_freq)
        data = backend.host(points).astype(np.float64)
        return data if weight is None else data[weight > 0]  # zero weight: not a point of the density

    def _fit_zero_bandwidth(self, X, backend, weight):
        """The limit ``h -> 0``, as scikit-learn clusters constant or duplicated data: a seed's
        neighbourhood is the points exactly at it, whose mean is the seed, so every seed at a
        point is a mode (intensity: the points there, or their weight) and nothing moves
        (``n_iter_ = 0``); modes merge only when equal, each point is labelled by its own."""
        data = backend.host(X).astype(np.float64)
        if self.seeds is not None:
            seeds = check_points(backend.host(self.seeds), "seeds", n_features=X.shape[1]).astype(np.float64)
        else:
            seeds = data if self.bin_seeding or weight is None else data[weight > 0]
        _, inverse = np.unique(np.concatenate([data, seeds]), axis=0, return_inverse=True)
        inverse = inverse.ravel()
        mass = np.bincount(inverse[:len(data)], weights=weight, minlength=inverse.max() + 1)
        intensity = mass[inverse[len(data):]]  # 0 for a seed at no point
        centers = merge_modes(seeds, intensity, 0.0)
        if len(centers) == 0:
            raise ValueError("No point was within bandwidth=0.000000 of any seed; try other seeds or a larger bandwidth")
        self.kernel_ = None
        self.n_iter_ = 0
        dist, idx = backend_of(data).nearest_point(data, centers)  # on the host
        self.cluster_centers_ = backend.like(centers, X)
        self.labels_ = backend.like(idx if self.cluster_all else np.where(dist <= 0, idx, -1), X, dtype=idx.dtype)
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
        backend = backend_of(X, getattr(self, "cluster_centers_", None))  # on the device of X or of the centres
        X = backend.check_queries(self, X)
        return backend.nearest_point(X, self.cluster_centers_)[1]
