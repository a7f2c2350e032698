"""A kernel bound to its samples: the one object every model computes through.

:class:`BoundKernel` does, once per set of samples, everything that does not depend on the
queries: it resolves the bandwidth (rules, per-feature arrays), centres and scales the samples,
checks the sample weights and per-sample bandwidth factors, and builds the neighbour index and
the compiled compact index on first use. It then offers the few operations every model needs:

* :meth:`~BoundKernel.sums` — local means and log weight sums, streamed (the planner picks the
  path; :mod:`localkit.engine.passes`);
* :meth:`~BoundKernel.log_weights` / :meth:`~BoundKernel.weights` — blocks of (normalised)
  weights, for models that fit per query (the localization trick, metric learning);
* :meth:`~BoundKernel.nearest` — the nearest sample of each query.

Coordinates. Distance kernels work on ``x_s = (x - c) / h`` with ``c`` the samples' centre. The
samples are stored as ``x_n = x_s / 2^E``, with ``2^E`` the power of two just above
``max |x_s|``, so that ``|x_n| <= 1`` whatever the bandwidth: for ``1e-300 <= h <= 1e300`` nothing
overflows, and ``u^2 = 2^(2E) |q_n - x_n|^2`` is formed exactly by :func:`numpy.ldexp` (``inf``
for a tiny bandwidth, ``0`` for a huge one — the nearest sample's value and the global mean).
When ``2^E`` is moderate the engine works on ``x_s`` directly (the usual case).

Sparse samples. A scipy sparse matrix (converted to CSR) is bound as it is: not centred (that
would make it dense), not scaled (the bandwidth is one number, so ``u = d / h`` is formed from
the distances of the neighbour search), never copied into a dense array. Its one path is the
neighbour path over scikit-learn's brute-force search on the CSR matrix, for the kernels that
:func:`~localkit.engine.planner.sparse_refusals` admits (compact profiles, with ``n_neighbors`` or
a fixed bandwidth); queries become CSR rows too. What forms dense coordinates (weight blocks,
squared distances) is refused by name.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from functools import cached_property
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from scipy.sparse import issparse

from ..kernels import Kernel
from ..kernels.bandwidth import column_extremes, resolve_bandwidth, safe_mean
from ..kernels.categorical import CategoricalColumns, check_codes, check_smoothing
from ..kernels.distances import exact_sq_distances
from ..kernels.kernel import SumKernel
from .._validation import check_sparse_points
from .passes import neighbors as nb
from .checks import (as_floats, as_points, check_exclude_self, check_pass, check_sample_weight, check_scale,
                     log_of_weights)
from .backends.array_api import (device_kw, device_of, first_foreign, namespace_of, refuse_on_device, streamed_path,
                                 to_host)
from .factors import Factor, knn_scales, nearest_points
from .sums import sum_sums
from .options import EngineOptions
from .results import LocalSums
from .stream import augment
from .twins import check_twins, mask_twins, refine_twins, twin_groups

#: Largest ``E`` (``max |x_s| <= 2^E``) for which the engine works on ``x_s`` itself: the squared
#: norms of the matrix-product form then stay far from overflow (float32 reaches 2^128).
SAFE_EXPONENT = {np.dtype(np.float32): 48, np.dtype(np.float64): 480}


def make_kernel(kernel="gaussian", bandwidth=1.0, n_neighbors=None, metric="euclidean", p=2):
    """A :class:`~localkit.Kernel` from a name and its parameters, or the instance given."""
    if isinstance(kernel, Kernel):
        return kernel
    return Kernel(kernel, bandwidth=bandwidth, n_neighbors=n_neighbors, metric=metric, p=p)


class BoundValues:
    """Values laid out for :meth:`BoundKernel.sums` (see :meth:`BoundKernel.prepare`): ``V`` the
    values (n_samples, p), ``centred`` the same less ``offset``, the per-column reference the paths
    sum about (:func:`~localkit.engine.results.value_offset`), ``squeeze`` whether they came as one
    column, ``no_values`` whether none were given, ``source`` the array given; ``V_aug`` is
    ``centred`` with a column of ones, built on first use (the binned pass bins the weights itself
    and never needs it: for a million samples it is an 8 MB array written for nothing, ~0.4 ms)."""

    def __init__(self, V, centred, offset, squeeze, no_values, source):
        self.V, self.centred, self.offset = V, centred, offset
        self.squeeze, self.no_values, self.source = squeeze, no_values, source

    @cached_property
    def V_aug(self):
        return augment(self.centred, namespace_of(self.centred))


class _Layout:
    """An attribute of :class:`BoundKernel` built on first use by ``build(bound)`` and kept in its
    :meth:`BoundKernel.memo` (shared by the copies of :meth:`BoundKernel.using`, left out of pickles); a value
    assigned on the instance (another layout: softmax, sparse, product kernels) takes precedence."""

    def __init__(self, build):
        self.build = build

    def __set_name__(self, owner, name):
        self.key = ("layout", name)

    def __get__(self, bound, owner=None):
        if bound is None:
            return self
        return bound.memo(self.key, lambda: self.build(bound))


def _centring(bound):
    """``(centre, exponent, factor, scaled)`` of a norm metric's samples (see the module's Coordinates)."""
    X = bound.samples
    lo, hi = bound._extremes
    centre = safe_mean(X, (lo, hi))
    # max |x - c| per feature from the columns' extremes (x - c rounds monotonically in x): no copy
    ends = np.stack([hi - centre, lo - centre])
    exponent, factor = _exponent(ends, bound.h)
    # ``scaled``: the engine works on x_s = (x - c) / h; otherwise on x_n = x_s / 2^E
    return centre, exponent, factor, exponent <= SAFE_EXPONENT[bound.dtype]


def _raw_index(bound):
    """Raw coordinates for the index where no squared difference can overflow or underflow (the
    compiled pass's range): ``|x / h|`` and ``h`` within 1e-100 .. 1e100."""
    h64 = np.asarray(bound.h, dtype=np.float64)
    # max |x| per feature from the columns' extremes (no copy of the samples: the division by a
    # positive h is monotone, so max(|x| / h) is max |x| / h to the bit)
    lo, hi = bound._extremes
    extent = np.maximum(np.abs(hi), np.abs(lo)).astype(np.float64)
    # a norm metric's layout (its centre is None only where __init__ says so), and the centred one
    # ``scaled``: in float64 the test below implies it (|x - c| / h < 2^334 < 2^SAFE_EXPONENT), so
    # that a kNN prediction never computes the centring it does not use
    centred = bound.__dict__.get("centre", True) is not None
    return bool(centred and np.all((h64 > 1e-100) & (h64 < 1e100))
                and np.max(extent, initial=0.0) < 1e100 and np.max(extent / h64, initial=0.0) < 1e100
                and (bound.dtype == np.float64 or bound.scaled))


class BoundKernel:
    """A localization kernel bound to its samples.

    ``samples`` may be a scipy sparse matrix (kept as CSR, never densified): see the module's
    "Sparse samples"; ``sparse`` then says so.

    Parameters
    ----------
    kernel : Kernel
        The kernel (see :func:`make_kernel` to build one from a name).
    samples : array of shape (n_samples, n_features)
    sample_weight : array of shape (n_samples,), optional
        Non-negative weights ``c_j`` that multiply the kernel: the local mean becomes
        ``sum_j c_j K(x*, x_j) v_j / sum_j c_j K(x*, x_j)`` (integer weights = repeated samples).
    sample_scale : array of shape (n_samples,), optional
        Per-sample bandwidth factors (sample-point adaptive bandwidths):
        ``u = d(x*, x_j) / (h s_j)``.
    options : EngineOptions, optional
    twins : array of shape (n_samples,), optional
        Group ids for leave-one-out (``exclude_self`` leaves out every sample of the query's
        group); default: the samples at the same point (:func:`~localkit.engine.twins.twin_groups`).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import Kernel
    >>> from localkit.engine import BoundKernel
    >>> x = np.linspace(0, 1, 5)[:, None]
    >>> bound = BoundKernel(Kernel("epanechnikov", bandwidth=0.3), x)
    >>> bound.sums([[0.5]], x.ravel() ** 2).mean.round(4)  # (0.0625 k + 0.25 + 0.5625 k) / (1 + 2k), k = 1 - (0.25/0.3)^2
    array([0.2737])
    """

    def __init__(self, kernel: Kernel, samples: ArrayLike, *, sample_weight: ArrayLike | None = None,
                 sample_scale: ArrayLike | None = None, options: EngineOptions | None = None,
                 twins: ArrayLike | None = None):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"kernel must be a localkit.Kernel (see make_kernel), got {type(kernel).__name__}")
        self.kernel = kernel
        self.options = EngineOptions() if options is None else options
        if isinstance(kernel, SumKernel):
            self._bind_sum(samples, sample_weight, sample_scale, twins)
            return
        if issparse(samples):
            self._bind_sparse(samples, sample_weight, sample_scale, twins)
            return
        # the namespace the passes run in: NumPy, or the device of a foreign array (array-API dispatch)
        xp = namespace_of(samples, sample_weight, sample_scale)
        self.xp, self.on_host = xp, xp is np
        if not self.on_host:
            refuse_on_device(kernel)
        samples = as_points(xp, samples, "samples", like=first_foreign(samples, sample_weight, sample_scale))
        self.samples = samples
        self.dtype = samples.dtype
        self.n_samples, self.n_features = samples.shape
        self._given_twins = twins
        if twins is not None:  # the caller's groups (the samples are codes of data with repeated rows)
            self.twins = check_twins(twins, self.n_samples)
        k = kernel.n_neighbors
        check_pass(kernel, self.n_samples, self.n_samples, sample_scale=sample_scale)
        self.weight, self.log_weight_max = check_sample_weight(xp, sample_weight, self.n_samples, samples)
        self.log_weight = log_of_weights(xp, self.weight)
        self.sample_scale = check_scale(xp, sample_scale, self.n_samples, "sample_scale", like=samples)
        self.factors = None  # a product kernel's bound factors (localkit.engine.factors)
        if kernel.composite:
            self._bind_product(samples)
            return
        self.h = resolve_bandwidth(kernel.bandwidth, samples, sample_weight=self.weight, xp=xp,
                                   host=np.asarray if self.on_host else self.host)
        if not np.all(np.isfinite(self.h)):
            raise ValueError(f"the bandwidth rule {kernel.bandwidth!r} gave a non-finite bandwidth {self.h!r} "
                             "for these samples; give the bandwidth explicitly")
        self._cache = {}  # indexes and derived samples built on first use; shared by the copies of :meth:`using`
        if self.options.algorithm == "approximate":
            from .planner import approximate_refusals

            refused = approximate_refusals(self, sample_scale)
            if refused:
                raise ValueError("algorithm='approximate' cannot serve this kernel: " + "; ".join(refused))
        if not self.on_host:  # the streamed pass lays out its own coordinates (localkit.engine.backends.array_api)
            self.centre, self.scaled, self.X = None, True, samples
            return
        if kernel.metric == "precomputed" and samples.shape[0] != samples.shape[1]:
            raise ValueError(f"metric='precomputed' takes the samples' distances to each other, a square "
                             f"(n_samples, n_samples) array; got shape {samples.shape}")
        # ``raw_h``: a distance that is not a norm of x* - x is taken as it is, then divided by h
        self.raw_h = None if kernel.norm_metric or k is not None else float(self.h)
        if kernel.is_softmax or not kernel.norm_metric:  # inner products / raw distances: no centring
            self.centre, self.exponent, self.scaled = None, 0, True
            self.X = samples
        # else the centred, scaled layout (centre, exponent, scaled, X, x_sq, the index's coordinates) is
        # built on first use (the attributes of the same names below) and kept in the shared cache: the
        # binned pass bins the raw samples and never needs it (1,000,000 samples: 6 passes, ~10 ms)
        if self.options.algorithm == "approximate":  # the lists are built with the binding (in an estimator's fit)
            self.index

    #: True for samples bound as a sparse (CSR) matrix (see the module's "Sparse samples")
    sparse = False
    #: a sum of kernels' ``[(log w_k, BoundKernel of K_k)]`` (:mod:`localkit.engine.sums`), else None
    terms = None

    def _bind_sum(self, samples, sample_weight, sample_scale, twins):
        """A sum of kernels: each term bound to the samples on its own (its bandwidths, coordinates, indexes);
        :meth:`sums` adds their sums, :meth:`log_weights` their log-weights."""
        if issparse(samples):
            raise ValueError("samples are a sparse matrix, which a sum of kernels does not take (its terms weigh "
                             "dense coordinates); pass samples.toarray() where it fits in memory")
        # the terms run with the "nearest" policy: the sum applies its own where every term is empty
        options = dataclasses.replace(self.options, empty="nearest")
        self.terms = [(math.log(w), BoundKernel(k, samples, sample_weight=sample_weight, sample_scale=sample_scale,
                                                options=options, twins=twins))
                      for w, k in self.kernel.terms if w > 0]
        first = self.terms[0][1]
        for name in ("xp", "on_host", "samples", "dtype", "n_samples", "n_features", "weight", "log_weight_max",
                     "log_weight", "sample_scale", "_given_twins"):
            setattr(self, name, getattr(first, name))
        self.factors, self._cache = None, {}

    # the layout of a norm metric's samples, built on first use (see _Layout)
    _extremes = _Layout(lambda bound: column_extremes(bound.samples))  # per feature
    _centring = _Layout(_centring)
    centre = _Layout(lambda bound: bound._centring[0])
    exponent = _Layout(lambda bound: bound._centring[1])
    _factor = _Layout(lambda bound: bound._centring[2])
    scaled = _Layout(lambda bound: bound._centring[3])
    X = _Layout(lambda bound: bound._transform(bound.samples))
    x_sq = _Layout(lambda bound: np.einsum("ij,ij->i", bound.X, bound.X))
    raw_index = _Layout(_raw_index)
    _index_centre = _Layout(lambda bound: _index_centre(bound.samples) if bound.raw_index else 0.0)

    def _bind_sparse(self, samples, sample_weight, sample_scale, twins):
        """Sparse samples, kept as CSR: no centring, no scaling, no dense copy (the neighbour path only)."""
        from .planner import sparse_refusals

        kernel = self.kernel
        refused = sparse_refusals(kernel, self.options.algorithm, sample_scale)
        if refused:
            raise ValueError("samples are a sparse matrix, which the engine takes on the neighbour path only: "
                             + "; ".join(refused) + ". Or pass samples.toarray() where the dense array fits in memory")
        self.xp, self.on_host, self.sparse = np, True, True
        samples = check_sparse_points(samples, "samples")
        self.samples, self.dtype = samples, samples.dtype
        self.n_samples, self.n_features = samples.shape
        self._given_twins = twins
        if twins is not None:
            self.twins = check_twins(twins, self.n_samples)
        check_pass(kernel, self.n_samples, self.n_samples)
        self.weight, self.log_weight_max = check_sample_weight(np, sample_weight, self.n_samples, samples)
        self.log_weight = log_of_weights(np, self.weight)
        self.sample_scale, self.factors, self._cache = None, None, {}
        # one number (sparse_refusals); with n_neighbors it cancels in u = d / d_k and a rule goes unused
        self.h = 1.0 if isinstance(kernel.bandwidth, str) else float(kernel.bandwidth)
        self.centre, self.exponent, self.scaled, self.raw_h, self.X, self.x_sq = None, 0, True, None, samples, None
        # the index takes the samples as they are, and u = d / h (index_unit)
        self.raw_index, self._index_centre = True, 0.0

    def _require_dense(self, what):
        if self.sparse:
            raise ValueError(f"{what} forms dense (n_queries, n_samples) blocks from the coordinates; these samples "
                             "are a sparse matrix, which takes the neighbour path only (sums, nearest)")

    def _bind_product(self, samples):
        """A kernel on groups of columns (``features``, categorical, ``K1 * K2``): each factor
        bound on its own columns (:mod:`localkit.engine.factors`); the samples stay raw."""
        self._cache = {}
        self.h, self.centre, self.exponent, self.scaled, self.raw_h, self.X = None, None, 0, True, None, samples
        self.factors = bind_factors(self, self.kernel, samples)
        if self.on_host:
            self.raw_index, self._index_centre = False, 0.0

    def host(self, a):
        """A NumPy copy of an array of this kernel's namespace."""
        return np.asarray(a) if self.on_host else to_host(self.xp, a)

    def on(self, xp, like):
        """This kernel bound to the same samples in the namespace ``xp`` on ``like``'s device
        (queries that live there: the pass runs there), built once and kept."""
        def build():
            move = (lambda a: None if a is None else xp.asarray(a, device=device_of(like)))
            other = BoundKernel(self.kernel, move(self.samples), sample_weight=move(self.weight),
                                sample_scale=move(self.sample_scale), options=self.options, twins=self._given_twins)
            other.log_weight_max = self.log_weight_max  # the weights moved are c / max c
            return other

        return self.memo(("on", xp.__name__, str(device_of(like)), self.options), build)

    def memo(self, key, build):
        """``build()``, built on first use and kept under ``key`` for the life of this binding (shared
        by the copies of :meth:`using`; left out of pickles, except the approximate lists): indexes, layouts
        of the samples, and the facts of the binding that passes and the planner derive from it."""
        cache = self._cache
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def built(self, key):
        """What :meth:`memo` keeps under ``key``, or None where it has not been built."""
        return self._cache.get(key)

    # -- pickling: the samples and the resolved kernel travel; what derives from them is rebuilt
    def __getstate__(self):
        state = self.__dict__.copy()
        # indexes are rebuilt on first use, except the approximate lists: their order, centres and the
        # recall measured travel (their float32 copy is gathered again, localkit.engine.retrieval)
        state["_cache"] = {key: value for key, value in self._cache.items() if key == ("index", "lists")}
        state["xp"] = None  # a module: found again from the samples
        return state  # the layout built on first use (X, x_sq...) lives in the cache: rebuilt bit for bit

    def __setstate__(self, state):
        state.setdefault("factors", None)  # pickled before the kernel algebra
        self.__dict__.update(state)
        if self.terms is not None:  # a sum: its terms restored themselves
            self.xp = self.terms[0][1].xp
            return
        if not self.on_host:
            from sklearn.externals.array_api_compat import array_namespace

            self.xp = array_namespace(self.samples)
            return
        self.xp = np
        if not self.sparse:  # pickled when the layout was built at binding: rebuilt on first use
            if self.__dict__.get("X", 0) is None:
                del self.__dict__["X"]
            self.__dict__.pop("x_sq", None)

    # -- coordinates ---------------------------------------------------------------------
    @property
    def u2_exponent(self):
        """``u^2 = 2^u2_exponent |q - x|^2`` in the engine's coordinates."""
        return 0 if self.scaled else 2 * self.exponent

    def coordinates(self, queries, name="queries"):
        """Validated queries in the engine's coordinates (``None``: the samples)."""
        if self.terms is not None:
            raise ValueError(f"{self.kernel!r} is a sum of kernels, each term with its own coordinates: it offers "
                             "sums, log_weights, weights and nearest, not the coordinates of one kernel")
        return self.X if queries is None else self.engine_points(self.points(queries, name))

    def points(self, queries, name="queries"):
        """Validated queries as given (``None``: the samples), for :meth:`engine_points` (or the
        binned pass, which works in the caller's coordinates)."""
        if queries is None:
            return self.samples
        if self.sparse:  # CSR rows, as the samples (dense queries are stored as CSR)
            return check_sparse_points(queries, name, n_features=self.n_features, dtype=self.dtype)
        return as_points(self.xp, queries, name, like=self.samples, n_features=self.n_features, dtype=self.dtype)

    def engine_points(self, P):
        """Points of :meth:`points` in the engine's coordinates."""
        if P is self.samples:
            return self.X
        return P if self.centre is None else self._transform(P)

    def _transform(self, points):
        centred = points - self.centre
        if self.scaled:
            return self.kernel.scale(centred, self.h, overwrite=True).astype(self.dtype, copy=False)
        with np.errstate(over="ignore", under="ignore"):  # far queries may leave the range: inf, no NaN
            return (centred.astype(np.float64) * self._factor).astype(self.dtype)

    @property
    def index(self):
        """A neighbour index over the samples (kNN bandwidths, the neighbour path, nearest), in the
        coordinates of :meth:`index_points`: the one :func:`~localkit.engine.planner.index_kind`
        names (a k-d tree, the exact scan of many features, the inverted lists of
        ``algorithm="approximate"``, or scikit-learn's search), built once and kept."""
        from .planner import index_kind

        kind = index_kind(self)
        index = self.memo(("index", kind), lambda: self._build_index(kind))
        if kind in ("faiss", "tiled", "small", "lists"):
            index.threads = self.options.threads
        if kind == "lists":
            index.tolerance = self.options.tolerance  # the share of the k nearest a search may miss
        return index

    def _build_index(self, kind):
        from . import retrieval

        args = (self._index_rows, self.n_samples, self.n_features)
        if kind == "lists":
            return retrieval.ListIndex(*args, threads=self.options.threads)
        if kind in ("faiss", "tiled", "small"):
            faiss = retrieval.faiss_module() if kind == "faiss" else None
            return retrieval.FlatIndex(*args, faiss, reference="tree" if kind == "small" else "brute")
        return nb.make_index(self.index_points(None), self.kernel.metric, self.kernel.p, exact=True)

    def _index_rows(self, rows):
        """Rows ``rows`` of :meth:`index_points` (``None``), formed from the samples without the whole
        copy (the exact scan's re-ranking gathers its candidates' rows: the same bits)."""
        if self.raw_index:
            P = self.samples[rows]  # a copy for the integer arrays the indexes pass, shifted in place
            return self._to_index(P, fresh=not np.may_share_memory(P, self.samples))
        return np.asarray(self.coordinates(None)[rows], dtype=np.float64)

    def index_points(self, queries, rows=None):
        """Points (the samples for ``None``; ``rows`` of them, if given) in the neighbour index's
        coordinates: where it is safe, the compiled pass's (:mod:`localkit.engine.passes.compiled`): the
        raw coordinates for a scalar bandwidth, each feature divided by its bandwidth otherwise
        (above 15 features shifted by :func:`_index_centre`), so that distances ``/ index_unit``
        are ``u``. Their differences are exact for points on a lattice: a tie between two
        distances, or with the edge of a support, is a tie on every path (the engine's centred,
        scaled coordinates round them apart). Data or bandwidths whose squared differences could
        leave the float range keep the engine's coordinates. A product kernel's are those of
        :func:`localkit.engine.factors.nearest_points`."""
        if self.sparse:
            P = self.samples if queries is None else self.coordinates(queries)
        elif self.factors is not None:
            if queries is None:
                P = self.memo("index_samples", lambda: nearest_points(self, self.samples))
            else:
                P = nearest_points(self, self.coordinates(queries))
        elif not self.raw_index:
            P = self.coordinates(queries)
        elif queries is None:
            P = self.memo("index_samples", lambda: self._to_index(self.samples))
        else:
            P = self._to_index(as_points(np, queries, "queries", n_features=self.n_features, dtype=self.dtype))
        return P if rows is None else P[rows]

    def _to_index(self, points, fresh=False):
        """``points`` in the index's coordinates (``fresh``: a copy of the caller's, shifted in place:
        the re-ranking gathers its candidates' rows on every search)."""
        points = np.asarray(points, dtype=np.float64)
        if fresh:
            points -= self._index_centre
        else:
            points = points - self._index_centre
        return points if np.ndim(self.h) == 0 else self.kernel.scale(points, self.h)

    @property
    def exact_edge(self):
        """True when the dense path decides the uniform profile's edge in the index's coordinates
        (its one jump: rounded distances would move samples at exactly ``h`` in or out, where the
        compiled and radius paths keep them)."""
        kern = self.kernel
        return (self.factors is None and kern.compact and kern.profile.flat
                and kern.n_neighbors is None and self.raw_index
                and kern.metric == "euclidean" and self.sample_scale is None)

    def metric_distances(self, dist):
        """Distances of the neighbour index (:meth:`index_points`) in the kernel's metric: raw units
        for a scalar bandwidth (the index's own coordinates are raw where that is safe,
        ``raw_index``), the coordinates divided by the bandwidth per feature for an array of
        bandwidths; distances that are not norms (cosine, callables, precomputed) are the index's
        as they are."""
        if not self.kernel.norm_metric or self.raw_index:
            return dist
        u = dist if self.scaled else np.ldexp(dist, self.exponent)  # the engine's coordinates: u = d / h
        return u * float(self.h) if np.ndim(self.h) == 0 else u

    def kneighbors(self, queries, k, *, exclude_self=False):
        """``(distances, indices)`` of the ``k`` nearest samples of each query (``None``: the
        samples), nearest first, as scikit-learn's ``kneighbors`` returns them (distances in the
        kernel's metric, :meth:`metric_distances`).

        ``exclude_self`` (``queries=None``, scikit-learn's ``X=None``): query ``i`` is sample ``i``
        and is not its own neighbour; where more than ``k`` samples share its point and the search
        missed it, the first neighbour is dropped instead (scikit-learn's rule; the engine's
        leave-one-out drops every sample at the point,
        :func:`~localkit.engine.passes.neighbors.kneighbors`)."""
        self._require_index("kneighbors")
        check_exclude_self(exclude_self)
        limit = self.n_samples - 1 if exclude_self else self.n_samples
        if isinstance(k, bool) or not isinstance(k, Integral):
            raise TypeError(f"k must be an integer, got {k!r}")
        if not 1 <= k <= limit:
            less = ", less the query itself" if exclude_self else ""
            raise ValueError(f"k must be between 1 and {limit} (the samples{less}), got {k}")
        P = self.index_points(queries)
        if not exclude_self:
            dist, idx = self.index.kneighbors(P, n_neighbors=k)
            return self.metric_distances(dist), idx
        dist, idx = self.index.kneighbors(P, n_neighbors=k + 1)
        drop = idx == np.arange(P.shape[0])[:, None]
        drop[~drop.any(axis=1), 0] = True
        keep = ~drop
        return self.metric_distances(dist[keep].reshape(P.shape[0], k)), idx[keep].reshape(P.shape[0], k)

    def radius_neighbors(self, queries, radius, *, exclude_self=False, sort_results=False):
        """``(distances, indices)``, object arrays of one array per query: the samples within
        ``radius`` (``d <= radius``, in the units of :meth:`metric_distances`), as scikit-learn's
        ``radius_neighbors``; ``exclude_self`` leaves sample ``i`` out of query ``i``'s."""
        self._require_index("radius_neighbors")
        check_exclude_self(exclude_self)
        if isinstance(radius, bool) or not isinstance(radius, Real):
            raise TypeError(f"radius must be a number, got {radius!r}")
        if not (math.isfinite(radius) and radius >= 0):
            raise ValueError(f"radius must be a finite number >= 0, got {radius!r}")
        P = self.index_points(queries)
        dist, idx = self.index.radius_neighbors(P, radius=self.index_radius(radius), sort_results=sort_results)
        out_d, out_i = np.empty(P.shape[0], dtype=object), np.empty(P.shape[0], dtype=object)
        for i, (d, j) in enumerate(zip(dist, idx)):
            keep = j != i if exclude_self else slice(None)
            out_d[i], out_i[i] = self.metric_distances(np.asarray(d, dtype=np.float64)[keep]), np.asarray(j)[keep]
        return out_d, out_i

    def index_radius(self, radius):
        """``radius`` (in the units of :meth:`metric_distances`) in the neighbour index's units."""
        if not self.kernel.norm_metric or self.raw_index:
            return radius
        u = radius / float(self.h) if np.ndim(self.h) == 0 else radius
        return u if self.scaled else np.ldexp(u, -self.exponent)

    @property
    def index_unit(self):
        """Distances in the index's coordinates divided by this are the engine's distances."""
        return float(self.h) if self.raw_index and np.ndim(self.h) == 0 else 1.0

    @property
    def compact_index(self):
        """The samples sorted into strips for the compiled pass, built on first use."""
        from .passes.compiled import CompactIndex

        return self.memo("compact", lambda: CompactIndex(self.samples, self.kernel, self.h))

    @property
    def clusters(self):
        """The samples partitioned into clusters in the engine's coordinates, for the truncated pass
        (:class:`~localkit.engine.retrieval.ClusterIndex`), built on first use and kept."""
        from .retrieval import ClusterIndex

        return self.memo("clusters", lambda: ClusterIndex(self.X, self.weight, threads=self.options.threads))

    def sample_leaves(self, leaf):
        """``(cols, lo, hi)``: the samples as leaves of ``leaf`` samples of a k-d tree in the
        engine's coordinates, with their bounding boxes, for the dense path's pruned blocks
        (:func:`~localkit.engine.passes.dense.kd_order`), built once per leaf size."""
        from .passes.dense import kd_order, leaf_boxes

        return self.memo(("leaves", leaf), lambda: leaf_boxes(self.X, kd_order(self.X, leaf), leaf))

    @cached_property
    def twins(self):
        """Group ids of the samples at one point, or None where all differ: leave-one-out
        (``exclude_self``) leaves out every sample at the query's point (:mod:`localkit.engine.twins`)."""
        return twin_groups(self.samples if self.sparse else self.host(self.samples))

    def knn_scale(self, queries, *, exclude_self=False, row_offset=0):
        """The balloon bandwidth of each query: distance to its k-th nearest sample (engine units)."""
        d = nb.knn_bandwidth(self.index, self.index_points(queries), self.kernel.n_neighbors,
                             exclude_self=exclude_self, row_offset=row_offset,
                             groups=self.twins if exclude_self else None)
        return (d / self.index_unit).astype(self.dtype, copy=False)

    # -- operations ------------------------------------------------------------------------
    def prepare(self, values: ArrayLike | None) -> BoundValues:
        """``values`` checked and laid out for :meth:`sums` once: models that query the same
        values repeatedly (a fitted estimator's targets) keep the result and pass it instead of
        the array, so that a prediction pays only for its queries."""
        from .results import value_offset

        if values is None and "no_values" in self._cache:  # a density's passes: laid out once
            return self._cache["no_values"]
        V, squeeze = self._values(values)
        offset = value_offset(self.xp, V)
        # the paths apply the sample weights (see localkit.engine.passes)
        prepared = BoundValues(V, V - offset, offset, squeeze, values is None, values)
        if values is None:
            self._cache["no_values"] = prepared
        return prepared

    def using(self, options: EngineOptions) -> BoundKernel:
        """This kernel with other engine options (none changes a result beyond round-off); the
        samples and every index built so far are shared, not copied."""
        if options == self.options:
            return self
        other = copy.copy(self)
        other.options = options
        return other

    def _with_twins(self, groups):
        """This kernel with the leave-one-out groups ``groups`` (None: one per sample), those of its
        kNN factors too (they leave out what the product leaves out, :func:`bind_factors`); the
        samples and indexes are shared."""
        other = copy.copy(self)
        other._given_twins = np.arange(self.n_samples) if groups is None else groups
        other.twins = groups
        if self.factors is not None:
            other.factors = [Factor(f.kernel, f.cols, bound=f.bound._with_twins(groups)) if
                             f.bound is not None and f.kernel.n_neighbors is not None else f for f in self.factors]
        return other

    def sums(self, queries: ArrayLike | None = None, values: ArrayLike | BoundValues | None = None, *,
             exclude_self: bool = False, query_scale: ArrayLike | None = None) -> LocalSums:
        """Local means of ``values`` (optional) and log weight sums at ``queries``.

        ``queries=None`` evaluates at the samples; ``exclude_self`` drops sample ``i``'s weight
        at query ``i`` (leave-one-out), and that of every copy of its row, at its point with its
        values (a repeated row is the same observation; samples at one point with distinct values
        are not: :mod:`localkit.engine.twins`). ``query_scale`` (n_queries,) are
        per-query bandwidth factors (``u = d / (h q_i)``). ``values`` may be the :meth:`prepare`-d
        form. Returns :class:`~localkit.engine.LocalSums`.
        """
        from .planner import plan

        check_exclude_self(exclude_self)
        if self.terms is not None:
            prepared = values if isinstance(values, BoundValues) else self.prepare(values)
            return sum_sums(self, queries, prepared, exclude_self, query_scale)
        if exclude_self and self.on_host and self._given_twins is None and self.twins is not None:
            # leave-one-out leaves out the copies of a row, x and value (localkit.engine.twins)
            prepared = values if isinstance(values, BoundValues) else self.prepare(values)
            groups = refine_twins(self.twins, prepared.V)
            return self._with_twins(groups).sums(queries, prepared, exclude_self=True, query_scale=query_scale)
        xp = namespace_of(queries, query_scale)
        if self.on_host and xp is not np:  # queries on a device beside host samples: the pass runs on that device
            if isinstance(values, BoundValues):
                values = values.source
            return self.on(xp, first_foreign(queries, query_scale)).sums(queries, values, exclude_self=exclude_self,
                                                                          query_scale=query_scale)
        P = self.points(queries)
        n_q = P.shape[0]
        check_pass(self.kernel, n_q, self.n_samples, exclude_self=exclude_self, query_scale=query_scale)
        q_scale = check_scale(self.xp, query_scale, n_q, "query_scale", like=self.samples)
        prepared = values if isinstance(values, BoundValues) else self.prepare(values)
        if prepared.V.shape[0] != self.n_samples:
            raise ValueError(f"values were prepared for {len(prepared.V)} samples, not these {self.n_samples}")
        return self._run(plan(self, P, q_scale, exclude_self), queries, P, prepared, q_scale, exclude_self)

    def _run(self, path, queries, P, prepared, q_scale, exclude_self):
        """The pass ``path`` at the checked points ``P`` (the ``queries`` given), its sums finished."""
        from .passes import PATHS
        from .results import finish

        run = streamed_path if path == "streamed" else PATHS[path]  # on a device / on the host
        if path == "binned":  # it bins the points as given, and the weights itself (no column of ones)
            S, shift = run(self, queries, P, prepared.centred, q_scale, exclude_self)
        elif path == "neighbors":  # the index's own coordinates (a product's engine points are the raw ones)
            S, shift = run(self, queries, P, prepared.V_aug, q_scale, exclude_self)
        elif path == "truncated":  # the clusters that carry the weight, the weight left out bounded
            S, shift, omitted = run(self, queries, self.engine_points(P), prepared.V_aug, q_scale, exclude_self)
            result = finish(self, queries, S, shift, prepared, exclude_self)
            result.omitted = omitted
            return result
        else:
            S, shift = run(self, queries, self.engine_points(P), prepared.V_aug, q_scale, exclude_self)
        return finish(self, queries, S, shift, prepared, exclude_self)

    def stepper(self, values: ArrayLike | None, start: ArrayLike, *, checked: bool = False) -> "Stepper":
        """:meth:`sums` prepared for a fixed point whose states are the queries: the values laid
        out, the threads resolved and the path planned once, at the ``start`` states (checked
        here, unless ``checked`` says an estimator's ``check_queries`` did: finite, 2-D, the
        samples' features); each step then takes states the iteration made (points of the
        samples' dtype, no second check). See :class:`Stepper`."""
        return Stepper(self, values, start, checked)

    def explain(self, queries: ArrayLike | None = None, *, exclude_self: bool = False,
                query_scale: ArrayLike | None = None):
        """The path :meth:`sums` would take at ``queries`` and why each other was not taken: a
        :class:`~localkit.engine.planner.Plan` (``str()`` of it is a table). Computes nothing else.

        >>> import numpy as np
        >>> from localkit import Kernel
        >>> bound = BoundKernel(Kernel("epanechnikov", bandwidth=0.3), np.linspace(0, 1, 50)[:, None])
        >>> bound.explain().path
        'compiled'
        """
        from .planner import explain

        P = self.points(queries)
        return explain(self, P, check_scale(self.xp, query_scale, P.shape[0], "query_scale", like=self.samples),
                       exclude_self)

    def log_weights(self, queries: ArrayLike | None = None, *, exclude_self: bool = False,
                    row_offset: int = 0) -> np.ndarray:
        """``(n_queries, n_samples)`` log-weights ``log(c_j K(x*, x_j))`` (``K(x, x) = 1``).

        ``exclude_self`` sets the weight of sample ``row_offset + i`` at query ``i`` to zero, and
        that of every sample at its point.
        Memory is ``n_queries x n_samples``: callers walk blocks of queries.
        """
        from .passes.dense import product_log_weights
        from .passes.neighbors import knn_log_weights

        if self.terms is not None:  # log sum_k w_k c_j K_k = logsumexp_k (log w_k + log c_j K_k)
            return np.logaddexp.reduce([log_w + term.log_weights(queries, exclude_self=exclude_self,
                                                                 row_offset=row_offset)
                                        for log_w, term in self.terms], axis=0)
        self._require_host("log_weights")
        self._require_dense("log_weights")
        Q = self.coordinates(queries)
        k = self.kernel.n_neighbors
        if self.factors is not None:
            L = product_log_weights(self, Q, exclude_self, row_offset)
        elif k is not None and self.kernel.compact:
            L = knn_log_weights(self, self.index_points(queries), exclude_self, row_offset)
        else:
            block = self.query_blocks(queries, Q, exclude_self=exclude_self, row_offset=row_offset)(slice(None))
            L, offset = block.log_weights(slice(0, self.n_samples))
            L += offset[:, None]
            if exclude_self:
                mask_twins(L, np.arange(len(Q)) + row_offset, slice(0, self.n_samples), self.twins)
        if self.weight is not None:
            L += self.log_weight
        return L

    def block(self, Q, scale=None, *, logit_exponent=0, points=None, centre=None):
        """The log-weights of the queries ``Q`` (engine coordinates, :meth:`coordinates`) as a pass
        asks for them: an object whose ``log_weights(cols, fold_offset=False)`` gives ``(L, offset)``,
        ``log(K(x*, x_j)) = L + offset`` against the samples ``cols`` (no sample weights, no
        leave-one-out: the pass adds those), the block recentred or its distances exact as its
        place needs (:mod:`localkit.engine.query_blocks`). ``scale``: per-query bandwidth factors
        (``u = d / (h scale_i)``); for a product, its factors' balloon bandwidths
        (:func:`~localkit.engine.factors.knn_scales`, found here when None). ``logit_exponent``:
        softmax logits divided by ``2^k``. ``points``: the queries in the index's coordinates, for
        :attr:`exact_edge`. ``centre``: the point the block is measured from (a cluster's centre),
        in place of the one chosen for it. NumPy samples."""
        from .query_blocks import ProductBlock, QueryBlock, Samples

        if self.factors is not None:
            return ProductBlock(np, self._factor_blocks(Q, knn_scales(self, Q, False) if scale is None else scale),
                                Q.dtype)
        kern, q_scale = self.kernel, scale
        if self.raw_h is not None:  # a raw distance divided by the (scalar) bandwidth times the query's scale
            q_scale = np.full(len(Q), self.raw_h, dtype=Q.dtype) if scale is None else self.raw_h * scale
        if logit_exponent:  # logits / 2^k from queries / 2^k (ldexp: exact, for any k)
            Q = np.ldexp(Q, -logit_exponent)
        edge = None if points is None or scale is not None else (points, self.index_points(None), self.index_unit ** 2)
        samples = Samples(np, kern, self.X, self.x_sq, self.sample_scale, self.h if kern.is_softmax else 1.0,
                          self.u2_exponent)
        return QueryBlock(samples, Q, q_scale=q_scale, exact=not self.scaled or kern.metric != "euclidean",
                          measure=not kern.is_softmax, centre=centre, edge=edge)

    def _factor_blocks(self, Q, scales):
        """A product's parts of :meth:`block`: each distance factor's block of its columns of ``Q``
        (raw; at the balloon bandwidths ``scales[f]`` of a kNN factor), each categorical factor's
        ``(categorical, query codes, sample codes)``."""
        parts = []
        for f, scale in zip(self.factors, scales):
            if f.categorical is not None:
                parts.append((f.categorical, Q[:, f.cols], f.codes))
                continue
            if scale is None and f.kernel.n_neighbors is not None:
                raise ValueError(f"the kNN factor {f.kernel!r} needs the balloon bandwidths of the queries")
            # the uniform profile's edge decided as the neighbour path's index decides it (exact_edge)
            points = f.bound.index_points(Q[:, f.cols]) if f.bound.exact_edge and scale is None else None
            parts.append(f.bound.block(f.bound.engine_points(Q[:, f.cols]), scale, points=points))
        return parts

    def query_blocks(self, queries, Q, q_scale=None, *, exclude_self=False, row_offset=0, logit_exponent=0):
        """``block_of(rows)``: the :meth:`block` of the queries ``Q[rows]`` (``Q`` their engine
        coordinates), with what depends on every query found once here: a kNN kernel's balloon
        bandwidths (``q_scale`` when not given; ``exclude_self`` leaves query ``row_offset + i``'s
        own point out of its neighbours), a product's factors' ones, the queries in the index's
        coordinates for :attr:`exact_edge`."""
        if self.factors is not None:
            scales = knn_scales(self, Q, exclude_self, row_offset)
            return lambda rows: self.block(Q[rows], [None if s is None else s[rows] for s in scales])
        if q_scale is None and self.kernel.n_neighbors is not None:
            q_scale = self.knn_scale(queries, exclude_self=exclude_self, row_offset=row_offset)
        P = self.index_points(queries) if self.exact_edge and q_scale is None else None
        return lambda rows: self.block(Q[rows], None if q_scale is None else q_scale[rows],
                                       logit_exponent=logit_exponent, points=None if P is None else P[rows])

    def squared_distances(self, queries: ArrayLike | None = None) -> np.ndarray:
        """``(n_queries, n_samples)`` squared scaled distances ``u^2 = d(x*, x_j)^2 / h^2``, the
        profiles' argument, from coordinate differences (for derivatives of the log-weights:
        ``d log k / d u^2`` is the profile's :meth:`~localkit.kernels.profiles.Profile.slope_for`).
        A fixed bandwidth and no per-sample scale; memory ``n_queries x n_samples``: callers walk
        blocks of queries."""
        self._require_host("squared_distances")
        self._require_dense("squared_distances")
        if (self.kernel.is_softmax or self.kernel.n_neighbors is not None or self.sample_scale is not None
                or self.factors is not None):
            raise ValueError("squared_distances needs a distance kernel with a fixed bandwidth and no "
                             f"sample_scale, on every column (not a kernel on groups of columns), got {self.kernel!r}")
        u2 = exact_sq_distances(self.coordinates(queries), self.X, self.kernel)
        with np.errstate(over="ignore"):  # beyond the float range: inf, a zero weight
            if self.raw_h is not None:  # a raw distance (cosine), divided by h here
                u2 = np.square(np.sqrt(u2) / self.dtype.type(self.raw_h))
            return np.ldexp(u2, self.u2_exponent) if self.u2_exponent else u2

    def weights(self, queries=None, *, exclude_self=False, row_offset=0, return_log_weights=False):
        """Normalised weights ``w_ij = c_j K(x*_i, x_j) / sum_l c_l K(x*_i, x_l)`` of a block of
        queries; rows with an empty neighbourhood are all zero. ``return_log_weights`` also
        returns the block of :meth:`log_weights` they came from."""
        L = self.log_weights(queries, exclude_self=exclude_self, row_offset=row_offset)
        W, _ = normalise(L)
        return (W, L) if return_log_weights else W

    def operator(self, *, exclude_self: bool = False) -> "WeightOperator":
        """The local mean at the samples as a linear map ``V -> M V``, ``M`` the normalised weights
        of the samples against themselves: what a fixed point over fixed points applies every
        iteration (relaxation labeling's propagation). ``M`` is formed once where its
        ``n_samples^2`` entries fit the memory budget (as scikit-learn forms its affinity), its
        empty rows already holding the empty policy's answer; else each call is one pass of
        :meth:`sums`. See :class:`WeightOperator`."""
        check_exclude_self(exclude_self)
        return WeightOperator(self, exclude_self)

    def nearest(self, queries=None, *, rows=None, self_rows=None, return_distance=False):
        """Index of the nearest sample that carries weight, in the kernel's metric and scaling,
        for ``queries`` (the samples for None; ``rows`` of them, if given).

        ``self_rows`` (one per query) excludes sample ``self_rows[i]`` at query ``i`` (the query
        is that sample: leave-one-out), and every sample at its point; where no other sample
        carries weight, the query's own is its nearest. ``return_distance``: ``(u, index)``, with
        ``u`` the scaled distance ``d / h`` (NumPy samples).
        """
        if self.terms is not None:  # a sum: its first term's nearest sample (the empty policy's)
            return self.terms[0][1].nearest(queries, rows=rows, self_rows=self_rows, return_distance=return_distance)
        if not self.on_host:  # exact distances streamed on the device
            from .backends.array_api import device_nearest

            return device_nearest(self, queries, rows, self_rows)
        P = self.index_points(queries, rows)
        live = np.arange(self.n_samples) if self.weight is None else np.flatnonzero(self.weight > 0)
        index = self.index
        if len(live) < self.n_samples:  # precomputed: the distances to the live samples only
            precomputed = self.kernel.metric == "precomputed"
            X = self.index_points(None)
            X = X[np.ix_(live, live)] if precomputed else X[live]
            P = P[:, live] if precomputed else P
            index = nb.make_index(X, self.kernel.metric, self.kernel.p, exact=True)
        if self_rows is None:
            dist, idx = index.kneighbors(P, n_neighbors=1)
            dist, idx = dist[:, 0], live[idx[:, 0]]
        else:
            dist, idx = nb.nearest_other(index, P, np.asarray(self_rows), self.twins, live, return_distance=True)
        if not return_distance:
            return idx
        if self.raw_h is not None:  # a raw distance (cosine), divided by h
            return dist / self.raw_h, idx
        return (dist / self.index_unit if self.scaled else np.ldexp(dist, self.exponent)), idx

    # -- helpers ---------------------------------------------------------------------------
    def weighted(self, V_aug):
        """``c_j [v_j, 1]``: the values times the sample weights (the paths that multiply them in)."""
        return V_aug if self.weight is None else V_aug * self.weight[:, None]

    def _require_index(self, what):
        if not self.on_host:
            raise ValueError(f"{what} searches a neighbour index on the host: it needs NumPy samples, got arrays of "
                             f"{self.xp.__name__}")

    def _require_host(self, what):
        if not self.on_host:
            raise ValueError(f"{what} forms (n_queries, n_samples) blocks on the host: it needs NumPy samples, "
                             f"got arrays of {self.xp.__name__}; sums() runs on their device")

    def _values(self, values):
        xp = self.xp
        if values is None:
            return xp.zeros((self.n_samples, 0), dtype=self.dtype, **device_kw(self.samples)), False
        V = as_floats(xp, values, "values", like=self.samples)
        squeeze = V.ndim == 1
        V = xp.reshape(V, (V.shape[0], -1))
        if V.shape[0] != self.n_samples:
            raise ValueError(f"values has {V.shape[0]} rows but samples has {self.n_samples}; they must match")
        # in the samples' dtype: float32 samples keep float32 arithmetic (float64 values would promote every block)
        return (V.astype(self.dtype, copy=False) if self.on_host else xp.astype(V, self.dtype)), squeeze


class Stepper:
    """``step(states) -> LocalSums``: :meth:`BoundKernel.sums` at the states of a fixed point,
    with what does not depend on them paid once (:meth:`BoundKernel.stepper`): the values laid
    out, the path planned at the start (a plan read off the start's states, as the binned pass's
    grid, is kept while they move: every path gives the same sums to round-off), ``n_jobs``
    resolved for the passes that use threads. States are taken as the iteration made them,
    without a second check. :meth:`means` gives the local means alone, for a fixed point of means
    (no weight sums, no result object per step). Small states on the dense path take one block of
    log-weights (:class:`~localkit.engine.passes.dense.OneBlock`: the steps' fixed cost was
    10x their sums in the streamed pass). Sums of kernels and dask arrays
    (:meth:`~localkit.engine.Binding.stepper`) take a pass at each step."""

    def __init__(self, bound, values, start, checked=False):
        from .passes.dense import OneBlock, one_block_conditions
        from .planner import plan
        from .results import finish

        self.values = values if isinstance(values, BoundValues) else bound.prepare(values)
        self.direct = isinstance(bound, BoundKernel) and bound.terms is None and bound.on_host and not bound.sparse
        self.one_block = None
        if self.direct:
            P = np.asarray(start, dtype=bound.dtype) if checked else bound.points(start)
            check_pass(bound.kernel, len(P), bound.n_samples)
            self.path = plan(bound, P, None, False)
            self.dtype = bound.dtype
            # (per-row fixed points step fewer rows, never more)
            if self.path == "dense" and one_block_conditions(bound, len(P)):
                self.one_block = OneBlock(bound, self.values.V_aug)
            else:  # joblib's lookup of n_jobs=None costs ~10 us a pass
                bound = bound.using(dataclasses.replace(bound.options, n_jobs=bound.options.threads))
            offset = self.values.offset
            self._offset = offset if offset.any() else None  # (float64 values are summed as they are)
        self.bound = bound
        self._finish = finish  # (imported once: a step is ~20 us)

    def __call__(self, states):
        if self.one_block is not None:
            P = np.asarray(states, dtype=self.dtype)
            out = self.one_block(self.bound.engine_points(P))
            if out is not None:
                S, m, offset = out
                return self._finish(self.bound, P, S, m if offset is None else m + offset, self.values, False,
                                    live=True)
        return self._pass(states)

    def means(self, states):
        """The local means of the values at ``states`` alone: ``self(states).mean``."""
        if self.one_block is not None:
            out = self.one_block(self.bound.engine_points(np.asarray(states, dtype=self.dtype)))
            if out is not None:
                S = out[0]
                mean = S[:, :-1] / S[:, -1:]  # every row carries weight (S[:, -1] >= 1)
                if self._offset is not None:
                    mean += self._offset
                return mean[:, 0] if self.values.squeeze else mean
        return self._pass(states).mean

    def _pass(self, states):
        if not self.direct:
            return self.bound.sums(states, self.values)
        P = np.asarray(states, dtype=self.dtype)
        return self.bound._run(self.path, P, P, self.values, None, False)


def normalise(L, overwrite=False):
    """``(W, log_sum)`` of a block of log-weights: ``W = exp(L) / sum_j exp(L_j)`` per row (rows
    without weight all zero) and ``log_sum = log sum_j exp(L_j)`` (``-inf`` there); ``overwrite``:
    ``W`` in ``L``'s memory (a temporary of the caller's: no second n x m block)."""
    top = L.max(axis=1, keepdims=True)
    W = np.subtract(L, np.where(np.isfinite(top), top, 0.0), out=L if overwrite else None)
    np.exp(W, out=W)  # a row without weight: all exp(-inf) = 0
    total = W.sum(axis=1, keepdims=True)
    live = total > 0
    W /= np.where(live, total, 1.0)
    with np.errstate(divide="ignore"):
        log_sum = np.where(live, top + np.log(total), -np.inf)[:, 0]
    return W, log_sum


class WeightOperator:
    """``V -> M V`` for the samples' normalised weights ``M_ij = c_j K(x_i, x_j) / sum_l c_l K(x_i, x_l)``
    (:meth:`BoundKernel.operator`), equal to ``bound.sums(None, V, exclude_self=...).mean`` to round-off
    (``bound``: anything with that ``sums``: a :class:`~localkit.engine.Binding` on dask, given affinities).

    Where the ``n x n`` block fits ``options.memory_budget`` on the host (dense samples), ``M`` is
    formed once from :meth:`BoundKernel.weights`; a row with no weight (an empty neighbourhood)
    holds the empty policy's answer: 1 at the nearest sample under "nearest" (its value, as a
    pass gives it), NaN under "nan", and "raise" raises when the operator is built. Elsewhere
    (sparse samples, a device, a budget too small) each call is one streamed pass.
    ``weight_sum`` is ``sum_j c_j K(x_i, x_j)`` (the degree of relaxation labeling's graph).
    ``exclude_self`` leaves out the groups the samples were bound with (the samples at each point,
    or the caller's ``twins``): the operator does not look at ``V``, so it does not refine them
    by the values as a pass does (:mod:`localkit.engine.twins`).
    """

    def __init__(self, bound, exclude_self):
        from .options import DEFERRED
        from .results import check_empty

        if isinstance(bound, BoundKernel) and bound._given_twins is None:  # the groups as bound, not refined
            bound = bound._with_twins(bound.twins)
        self.bound, self.exclude_self = bound, exclude_self
        self.matrix = None
        if (isinstance(bound, BoundKernel) and bound.on_host and not bound.sparse
                and 2 * bound.n_samples ** 2 * np.dtype(bound.dtype).itemsize <= bound.options.budget):
            W, log_sum = normalise(bound.log_weights(None, exclude_self=exclude_self), overwrite=True)
            empty = ~(log_sum > -np.inf)
            if empty.any():
                rows = np.flatnonzero(empty)
                check_empty(bound.options.empty, len(rows), stacklevel=3)
                if bound.options.empty in ("nan", DEFERRED):
                    W[rows] = np.nan
                else:
                    W[rows, bound.nearest(None, rows=rows, self_rows=rows if exclude_self else None)] = 1.0
            self.matrix = W.astype(bound.dtype, copy=False)
            self.log_weight_sum = np.where(empty, -np.inf, log_sum + bound.log_weight_max).astype(bound.dtype)
        else:
            self.log_weight_sum = bound.sums(None, None, exclude_self=exclude_self).log_weight_sum

    @property
    def weight_sum(self):
        return np.exp(self.log_weight_sum)

    def __call__(self, V):
        if self.matrix is None:
            return self.bound.sums(None, V, exclude_self=self.exclude_self).mean
        return self.matrix @ np.asarray(V, dtype=self.matrix.dtype)


#: scikit-learn's neighbour search is brute force (matrix-product distances) above this many features
BRUTE_FEATURES = 15


def _index_centre(samples):
    """Where brute force measures distances as ``|q|^2 - 2 q.x + |x|^2`` (more than
    ``BRUTE_FEATURES`` features) the index's points are shifted by ``c``, the samples' mean
    rounded to a multiple of the largest power of two below their range (per feature): far from
    the origin the products would cancel (digits + 1e6: 3e-4 in the log-weights), and a shift that
    coarse keeps differences exact where they were (an integer lattice stays integer; a value
    within a factor 2 of ``c`` subtracts exactly). Trees take differences of raw coordinates:
    no shift."""
    if samples.shape[1] <= BRUTE_FEATURES:
        return 0.0
    lo, hi = samples.min(axis=0).astype(np.float64), samples.max(axis=0).astype(np.float64)
    span = hi - lo
    step = np.exp2(np.floor(np.log2(np.where(span > 0, span, 1.0))))
    # the column means in slices of rows (no float64 copy of the samples: the mean is rounded to ``step``)
    scale = np.maximum(np.abs(lo), np.abs(hi))
    scale = np.where(scale > 0, scale, 1.0)
    total = np.zeros(samples.shape[1])
    for a in range(0, len(samples), 65536):
        total += (samples[a:a + 65536].astype(np.float64) / scale).sum(axis=0)
    return np.round(total / max(len(samples), 1) * scale / step) * step


def _exponent(Xc, h):
    """``(E, factor)``: ``max |x - c| / h <= 2^E`` per feature, and ``factor = 2^-E / h`` so that
    ``x_n = (x - c) * factor`` lies in ``[-1, 1]``.

    Both come from the extents in log2, so that neither ``max |x - c| / h`` nor its square needs
    to be representable.
    """
    extent = np.max(np.abs(Xc), axis=0).astype(np.float64)
    log2_h = np.broadcast_to(np.log2(np.asarray(h, dtype=np.float64)), extent.shape)
    with np.errstate(divide="ignore"):
        log2 = np.log2(extent) - log2_h
    exponent = int(np.ceil(np.max(log2))) if np.any(np.isfinite(log2)) else 0
    return exponent, np.exp2(-exponent - log2_h)


def bind_factors(bound, kernel, samples):
    """The :class:`Factor` list of ``kernel`` over ``samples`` (arrays of ``bound.xp``)."""
    xp = bound.xp
    factors = []
    for factor, cols in kernel.columns(bound.n_features):
        part = samples[:, cols] if xp is np else xp.take(samples, xp.asarray(cols, device=device_of(samples)), axis=1)
        if factor.is_categorical:
            codes = bound.host(part)
            check_codes(codes, factor.name)
            columns = CategoricalColumns(factor.name, check_smoothing(factor.bandwidth, factor.name), codes,
                                         factor.level_codes)
            factors.append(Factor(factor, cols, categorical=columns, codes=part))
        else:
            if factor.n_neighbors is not None and not bound.on_host:
                raise ValueError(f"{factor!r}: a kNN factor of a product kernel takes its balloon bandwidths from "
                                 "a neighbour search on the host; pass NumPy arrays")
            # a kNN factor's leave-one-out leaves out the same observations as the product's: the samples at
            # the query's point of every column (or the caller's groups), not of the factor's columns only
            twins = None
            if factor.n_neighbors is not None:
                twins = bound.twins if bound.twins is not None else np.arange(bound.n_samples)
            factors.append(Factor(factor, cols, bound=BoundKernel(factor.plain(), part, sample_weight=bound.weight,
                                                                  twins=twins)))
    return factors
