"""The planner: which path computes an engine pass (see :mod:`localkit.engine.passes`).

* a compact kNN kernel always takes the neighbour path, whose tree distances put the k-th
  neighbour at ``u = 1`` exactly (matrix-product distances could push it past the edge of the
  uniform profile);
* "auto" takes the compiled compact pass where it applies, up to ``COMPILED_MAX_FEATURES``
  features (measured faster than the dense and radius paths at d = 2, 4 and 8 for every
  bandwidth tried, and than the dense path at d = 32), else the radius path for compact
  profiles whose support holds few samples, else the dense path; a compact profile at a fixed
  bandwidth in more than 16 features there runs over k-d tree leaves and
  skips the sample leaves out of reach by their bounding boxes where a probe finds that cheaper
  (:func:`~localkit.engine.passes.dense.prune_blocks`);
* "binned" (:mod:`localkit.engine.passes.binned`) approximates, so it is taken when asked for
  (refused with a ``ValueError`` naming the parameter where it cannot apply), or by "auto" first
  where its error bound on the grid it would use meets the caller's ``tolerance``, or, without
  one, the default ``1e-4`` where the samples are many (``AUTO_BINNED_SAMPLES``) and the grid
  costs less than the exact pass; ``algorithm="dense"`` (or another exact path) gives the exact sums;
* a product kernel (:mod:`localkit.engine.factors`) takes the neighbour path where a factor is
  compact, as a plain kernel of that factor's columns would (always for a compact kNN factor;
  for a fixed bandwidth where the probe finds few samples in its support): candidates from that
  factor's index, the product's log-weights on them only; else the dense path;
* sparse (CSR) samples take the neighbour path only (:func:`sparse_refusals`): scikit-learn's
  brute-force search on the CSR matrix finds the k nearest samples or those within the support,
  and their values are gathered; the other paths need dense coordinates.

The decision is one table, :data:`ROWS`: each path a row of ``(condition, reason)`` pairs, in
the order tried. :func:`plan` takes the first row that applies; :func:`explain` reads the same
rows to say which path a pass takes and why each other one was not taken, so the explanation is
the decision, and a new path is one row.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, NamedTuple

import numpy as np

from .options import ALGORITHMS

#: The compiled pass, weighing k(u) directly, against the dense path (epanechnikov, 20,000 samples,
#: 2,000 queries, 0-97% of them in the support; busy 2-core machine): 44-49 ns a pair against
#: 87-144 at d = 32, 80-143 against 89-125 at d = 64, 213-219 against 104-131 at d = 128
COMPILED_MAX_FEATURES = 32
#: "auto" takes the binned pass without a tolerance given (its default one, binned.TOLERANCE = 1e-4,
#: met on the grid it would use) from this many samples, as the field's smoothing tools bin by default
#: (KDEpy's FFTKDE, statsmodels' KDEUnivariate): 1,000,000 samples at 8,192 points in 1-D took 113 s
#: exact and under a second binned
AUTO_BINNED_SAMPLES = 100_000
#: ... where the grid's cells times this stay below the exact pass's pairs (a cell's FFT and
#: interpolation taken as this many kernel evaluations: a rule of thumb, not measured per machine)
AUTO_BINNED_CELL_COST = 64
#: ... and each sample binned as this many (so that a pass of fewer queries stays exact)
AUTO_BINNED_SAMPLE_COST = 16
#: the binned pass's most features (``passes.binned.MAX_FEATURES``, restated: the planner imports it lazily)
BINNED_FEATURES = 3
#: "auto" takes the truncated pass under a tolerance from this many samples, where a probe of
#: ``TRUNCATED_PROBES`` queries visits at most this fraction of them
TRUNCATED_MIN_SAMPLES = 20_000
TRUNCATED_AUTO_FRACTION = 1 / 8
TRUNCATED_PROBES = 16
#: "auto" builds the truncated pass's clusters (:class:`~localkit.engine.retrieval.ClusterIndex`)
#: only for at least this many queries per ``sqrt(n_samples)``: labelling the samples alone costs
#: a dense pass of ``CLUSTER_SCALE sqrt(n)`` queries (200,000 x 16 uniform samples, 100 queries and
#: a tolerance: 1.25 s to find the clusters useless, against 0.09 s for the dense pass). Clusters a
#: binding already holds are probed at any count; ``algorithm="approximate"`` builds them always.
TRUNCATED_BUILD_QUERIES = 4.0
#: bandwidths inside this range keep ``h^2`` a normal float for the compiled pass's raw coordinates
COMPILED_BANDWIDTHS = (1e-100, 1e100)


#: metrics that scikit-learn's brute-force neighbour search measures on CSR samples
#: (``sklearn.neighbors.VALID_METRICS_SPARSE["brute"]``); "minkowski" with ``p`` 1 or 2 is one of them
SPARSE_METRICS = ("euclidean", "manhattan", "cosine")


def sparse_refusals(kernel, algorithm="auto", sample_scale=None):
    """Why ``kernel`` cannot be bound to sparse (CSR) samples: reasons, each naming its parameter
    (empty: it can).

    Sparse samples take one path, the neighbour path: scikit-learn's brute-force search on the
    CSR matrix (the matrix product of sparse rows, never a dense copy) gives each query its k
    nearest samples (a kNN kernel) or the samples within the support (a compact profile at a
    fixed bandwidth: a radius query), and the values of those samples are gathered. What needs
    every sample's weight is refused rather than densified: a profile that never vanishes
    (Gaussian, Laplacian, Cauchy, softmax) gives every sample a weight, which the dense path
    computes from centred, scaled coordinates; centring a sparse matrix makes it dense, and
    uncentred matrix-product distances ``|q|^2 - 2 q.x + |x|^2`` lose the digits of a small
    bandwidth (``u^2`` is their difference divided by ``h^2``). Densifying blocks of queries would
    bound memory, but each block still needs every sample in dense form or those imprecise
    distances, so it is refused with advice (a compact profile, or ``.toarray()`` where the
    dense matrix fits in memory)."""
    if kernel.composite:
        return ["kernel: a kernel on groups of columns (a product, categorical factors) selects and scales "
                "columns of dense samples"]
    reasons = []
    if kernel.is_softmax or not kernel.compact:
        name = "softmax" if kernel.is_softmax else kernel.name_
        reasons.append(f"kernel={name!r} gives every sample a weight: that is the dense path, which centres the "
                       "samples (a sparse matrix would become dense); use a compact profile ('uniform', "
                       "'epanechnikov', 'tricube', ...) with n_neighbors or a number bandwidth")
    metric, p = kernel.metric, kernel.p
    if callable(metric) or not (metric in SPARSE_METRICS or (metric == "minkowski" and p in (1, 2))):
        shown = getattr(metric, "__name__", metric) if callable(metric) else metric
        reasons.append(f"metric={shown!r}: scikit-learn's brute-force search on sparse samples measures "
                       f"{', '.join(map(repr, SPARSE_METRICS))} (or 'minkowski' with p=1 or 2)")
    h = kernel.bandwidth
    if np.ndim(h) != 0 or (isinstance(h, str) and kernel.n_neighbors is None):
        reasons.append(f"bandwidth={h if isinstance(h, str) else np.asarray(h).tolist()!r}: on sparse samples the "
                       "bandwidth is one number (a radius), or unused with n_neighbors; rules and per-feature "
                       "bandwidths scale dense coordinates")
    if sample_scale is not None:
        reasons.append("sample_scale: per-sample bandwidths are not taken on sparse samples")
    if algorithm not in ("auto", "neighbors"):
        reasons.append(f"algorithm={algorithm!r}: sparse samples take the neighbour path only "
                       "(algorithm='auto' or 'neighbors')")
    return reasons


def compiled_refusals(bound, q_scale, exclude_self):
    """Why the compiled compact pass cannot compute this pass: a list of reasons (empty: it can)."""
    kern = bound.kernel
    if bound.factors is not None:
        return [_product_reason()]
    lo, hi = COMPILED_BANDWIDTHS
    checks = [
        (kern.compact, "needs a compact profile"),
        (kern.profile is None or not kern.profile.is_user, "needs a built-in profile: a user profile (a callable log_k) has no compiled form"),
        (kern.n_neighbors is None, "needs a fixed bandwidth, not n_neighbors"),
        (kern.metric == "euclidean", f"needs the euclidean metric, not {kern.metric!r}"),
        (bound.scaled, "needs data within the float range of the bandwidth"),
        (q_scale is None, "takes no per-query scales"),
        (bound.sample_scale is None, "takes no per-sample scales"),
        (not exclude_self, "cannot leave one out (exclude_self=True)"),
        (bool(np.all((bound.h > lo) & (bound.h < hi))), f"needs bandwidths between {lo:g} and {hi:g}"),
    ]
    return [reason for ok, reason in checks if not ok]


def binned_refusals(bound, q_scale, exclude_self):
    """Why the binned pass cannot compute this pass, each reason naming its parameter (empty: it can)."""
    from .passes.binned import MAX_FEATURES

    kern = bound.kernel
    if bound.factors is not None:
        return [f"kernel: {_product_reason()}"]
    checks = [
        (not kern.is_softmax, "kernel='softmax' is not a profile of a distance"),
        (bound.n_features <= MAX_FEATURES, f"n_features={bound.n_features} > {MAX_FEATURES}"),
        (kern.n_neighbors is None, "n_neighbors: needs a fixed bandwidth"),
        (kern.metric == "euclidean", f"metric={kern.metric!r}: needs the euclidean metric"),
        (q_scale is None, "query_scale: takes no per-query scales"),
        (bound.sample_scale is None, "sample_scale: takes no per-sample scales"),
        (not exclude_self, "exclude_self=True: cannot leave one out"),
    ]
    return [reason for ok, reason in checks if not ok]


def truncated_refusals(bound, q_scale, exclude_self):
    """Why the truncated pass (:func:`~localkit.engine.passes.neighbors.truncated_path`) cannot compute
    this pass: its bound needs a profile that never grows with the distance at a fixed bandwidth."""
    kern = bound.kernel
    if bound.factors is not None:
        return [f"kernel: {_product_reason()}"]
    checks = [
        (not kern.is_softmax, "kernel='softmax' is not a profile of a distance"),
        (not kern.compact, "a compact profile takes the neighbour path (its support is exact)"),
        (kern.profile is None or not kern.profile.is_user,
         "a user profile (a callable log_k) is not known to fall with the distance"),
        (kern.n_neighbors is None, "n_neighbors: needs a fixed bandwidth"),
        (kern.metric in ("euclidean", "minkowski") and kern.p == 2 if kern.metric == "minkowski"
         else kern.metric == "euclidean", f"metric={kern.metric!r}: needs the euclidean metric"),
        (q_scale is None, "query_scale: takes no per-query scales"),
        (bound.sample_scale is None, "sample_scale: takes no per-sample scales"),
        (not exclude_self, "exclude_self=True: cannot leave one out"),
    ]
    return [reason for ok, reason in checks if not ok]


def approximate_refusals(bound, sample_scale=None):
    """Why ``algorithm="approximate"`` cannot serve a kernel bound to these samples, each reason
    naming its parameter (empty: it can): the inverted lists measure euclidean distances of dense
    samples on the host."""
    kern = bound.kernel
    metric = getattr(kern.metric, "__name__", kern.metric)
    checks = [
        (not kern.is_softmax, "kernel='softmax' is not a profile of a distance"),
        (not kern.composite, "kernel: a kernel on groups of columns has no single index"),
        (kern.metric == "euclidean" or (kern.metric == "minkowski" and kern.p == 2),
         f"metric={metric!r}: the inverted lists measure euclidean distances (metric='euclidean')"),
        (bound.on_host, "samples: the lists are built on the host (NumPy arrays)"),
        (sample_scale is None, "sample_scale: per-sample bandwidths are not taken"),
    ]
    return [reason for ok, reason in checks if not ok]


class IndexPlan(NamedTuple):
    """The neighbour index a bound kernel keeps (:func:`index_plan`): ``kind`` and why."""

    kind: str
    why: str

    def __str__(self):
        return f"{self.kind}: {self.why}"


def _faiss_installed(bound):
    from .retrieval import faiss_module

    return faiss_module() is not None


def _scan_applies(bound, few=False):
    """Whether the exact scan serves ``bound``'s samples: many (:func:`~localkit.engine.retrieval.scan_applies`),
    or ``few``, the k-d tree its reference (:func:`~localkit.engine.retrieval.small_scan_applies`)."""
    from .retrieval import scan_applies, small_scan_applies

    applies = small_scan_applies if few else scan_applies
    return (not bound.sparse and bound.factors is None and bound.terms is None
            and applies((bound.n_samples, bound.n_features), bound.kernel.metric, bound.kernel.p))


def _scan_with_faiss():
    from .retrieval import SCAN_WITH_FAISS

    return SCAN_WITH_FAISS


def _lists_why(bound):
    from .retrieval import DEFAULT_PROBES

    index = bound.built(("index", "lists"))
    measured = ("; recall measured on the first queries it answers" if index is None or index.recall_ is None else
                f"; recall@{index.recall_k_} {index.recall_:.3f} +- {index.recall_error_:.3f} measured on "
                "a sample of the first queries against the exact scan")
    tolerance = bound.options.tolerance
    if tolerance is None:
        probes = f"in the {DEFAULT_PROBES} lists of nearest centres"
    else:
        chosen = [] if index is None else [f"k={k}: {p}" for (k, t), p in index.breadths_.items() if t == tolerance]
        probes = ("in the fewest lists of nearest centres whose recall, less two standard errors, is at least "
                  f"1 - tolerance = {1 - tolerance:g}" + (f" ({', '.join(chosen)})" if chosen else ""))
    return ("algorithm='approximate': our inverted lists (k-means, about 2 sqrt(n); one matrix product per list "
            "for all the queries that probe it; measured faster than faiss's HNSW graph on one thread) built once, "
            f"the k nearest {probes} re-ranked exactly" + measured)


def _scan_why(own):
    from .retrieval import CANDIDATES, SCAN_MIN_FEATURES, SCAN_MIN_SAMPLES

    scan = ("our tiled float32 scan (one matrix product per tile, a compiled top-k heap; measured faster than "
            "faiss IndexFlatL2)" if own else "faiss IndexFlatL2's float32 scan")
    return (f"exact: {scan}, {CANDIDATES}k + 1 candidates re-ranked in float64; a query not certified by the "
            f"scan's error bound, or with a near tie, answered by scikit-learn's brute force (>= "
            f"{SCAN_MIN_FEATURES} features and >= {SCAN_MIN_SAMPLES:,} samples, euclidean)")


def _small_scan_why():
    from .retrieval import SMALL_SCAN_FEATURES, SMALL_SCAN_MAX_SAMPLES

    lo, hi = SMALL_SCAN_FEATURES
    return (f"exact: our float32 scan of few samples (<= {SMALL_SCAN_MAX_SAMPLES:,}, {lo} to {hi} features, "
            "euclidean; measured faster than the k-d tree, and nothing to build), candidates re-ranked in "
            "float64 in the tree's order of the sum; a query not certified, or with a near tie, answered by the "
            "k-d tree")


#: The neighbour index of a bound kernel, first row that holds: ``(kind, condition(bound), why(bound))``
#: (:func:`index_plan`; the bound kernel builds what it names, :attr:`BoundKernel.index`).
INDEX_ROWS = (
    ("lists", lambda b: b.options.algorithm == "approximate", _lists_why),
    ("faiss", lambda b: _scan_applies(b) and _scan_with_faiss() and _faiss_installed(b), lambda b: _scan_why(False)),
    ("tiled", _scan_applies, lambda b: _scan_why(True)),
    ("small", lambda b: _scan_applies(b, few=True), lambda b: _small_scan_why()),
    ("tree", lambda b: not b.sparse and b.n_features <= 15 and not callable(b.kernel.metric)
     and b.kernel.metric in ("euclidean", "manhattan", "chebyshev", "minkowski"),
     lambda b: "a k-d tree (<= 15 features): distances from coordinate differences"),
    ("brute", lambda b: True,
     lambda b: "scikit-learn's NearestNeighbors (brute force: sparse samples, other metrics, or fewer samples "
               "than the scan needs)"),
)


def index_kind(bound):
    """The kind of neighbour index ``bound`` keeps: the first row of :data:`INDEX_ROWS` that holds."""
    return next(kind for kind, holds, _ in INDEX_ROWS if holds(bound))


def index_plan(bound):
    """:class:`IndexPlan`: the neighbour index ``bound`` keeps, from :data:`INDEX_ROWS`, and why."""
    return next(IndexPlan(kind, why(bound)) for kind, holds, why in INDEX_ROWS if holds(bound))


def _product_reason():
    from .factors import PRODUCT_REASON

    return PRODUCT_REASON


def compiled_applies(bound, q_scale, exclude_self):
    """True when the compiled compact pass can compute this pass."""
    return not compiled_refusals(bound, q_scale, exclude_self)


def device_compiled_fits(bound, q_scale, exclude_self):
    """Whether the streamed pass can take the compiled compact pass's arithmetic (raw coordinates,
    ``|q - x|^2 <= h^2``) on a device: the compiled pass's conditions, a scalar bandwidth."""
    return np.ndim(bound.h) == 0 and compiled_applies(bound, q_scale, exclude_self)


def streamed_refusals(bound):
    """Why the streamed pass (the array-API pass) cannot compute a pass over these samples."""
    kern = bound.kernel
    knn_factor = bound.factors is not None and any(f.kernel.n_neighbors is not None for f in bound.factors)
    checks = [(not callable(kern.metric), "metric: a callable needs the host's paths"),
              (kern.metric != "precomputed", "metric='precomputed' needs the host's paths"),
              (not knn_factor, "n_neighbors: a kNN factor of a product needs the host's neighbour search (the "
                               "dense or neighbour path)")]
    return [reason for ok, reason in checks if not ok]


@dataclass(frozen=True)
class Plan:
    """The planner's choice for one pass and, for each path, why it was or was not taken (as
    torch's ``why_not_fast_path``); ``str(plan)`` is a table. See :meth:`BoundKernel.explain
    <localkit.engine.BoundKernel.explain>`."""

    path: str
    reasons: dict
    #: the neighbour index of the bound kernel (:func:`index_plan`), for the paths that search one
    index: "IndexPlan | None" = None

    def __str__(self):
        width = max(map(len, self.reasons))
        table = "\n".join(f"{'->' if p == self.path else '  '} {p:<{width}}  {why}" for p, why in self.reasons.items())
        return table if self.index is None else f"{table}\n   index: {self.index}"


class Pass:
    """What the planner reads of one pass: the bound kernel, the queries ``P`` (as given), the
    per-query scales and ``exclude_self``; each fact derived once, on first use, for the rows of
    :data:`ROWS` (a probe of the support, a binned pass's grid)."""

    def __init__(self, bound, P, q_scale, exclude_self):
        self.bound, self.P, self.q_scale, self.exclude_self = bound, P, q_scale, exclude_self
        self.kernel, self.algorithm, self.d = bound.kernel, bound.options.algorithm, bound.n_features

    @property
    def where(self):
        """Where the arrays are, in words (for the reasons of the host's paths on a device)."""
        return f"arrays of {self.bound.xp.__name__.rsplit('.', 1)[-1]}"

    @cached_property
    def candidate(self):
        """A product's compact factor whose support holds the candidates (None: none, or not a product)."""
        from .factors import candidate_factor

        return None if self.bound.factors is None else candidate_factor(self.bound)

    @cached_property
    def compact_knn(self):
        """A compact kNN kernel, or a product whose candidate factor is one."""
        if self.bound.factors is not None:
            return self.candidate is not None and self.candidate.kernel.n_neighbors is not None
        return self.kernel.compact and self.kernel.n_neighbors is not None

    @property
    def compiled_refusals(self):
        return self._refusals(compiled_refusals)

    @property
    def binned_refusals(self):
        return self._refusals(binned_refusals)

    def _refusals(self, refusals):
        """``refusals(bound, q_scale, exclude_self)``, facts of the binding (of the queries' scales,
        only whether they are given), derived once per binding and kept in its cache: formed
        anew they were a third of a small pass's plan."""
        key = ("refusals", refusals.__name__, self.q_scale is None, self.exclude_self)
        return self.bound.memo(key, lambda: tuple(refusals(self.bound, self.q_scale, self.exclude_self)))

    @cached_property
    def grid(self):
        """The binned pass's grid for this pass (:class:`~localkit.engine.passes.binned.Grid`), or
        why it has none (a str)."""
        from .passes.binned import Grid

        try:
            return Grid(self.bound.samples, self.P, self.bound.h, self.kernel.profile, self.bound.options.grid_size,
                        self.bound.options.tolerance)
        except ValueError as error:
            return str(error)

    @property
    def binned_bound(self):
        """The binned pass's error bound on its grid (a float), or why it has none (a str)."""
        return self.grid if isinstance(self.grid, str) else self.grid.bound

    @property
    def tolerance(self):
        """The tolerance the binned pass must meet under "auto": the caller's, else the default."""
        from .passes.binned import TOLERANCE

        return TOLERANCE if self.bound.options.tolerance is None else self.bound.options.tolerance

    def binned_by_default(self):
        """Whether "auto" takes the binned pass without a tolerance given: many samples
        (``AUTO_BINNED_SAMPLES``), and binning them and convolving the grid cost less than the
        exact pass's pairs (a sample binned taken as ``AUTO_BINNED_SAMPLE_COST`` pairs, a cell as
        ``AUTO_BINNED_CELL_COST``): a few queries keep the exact pass."""
        n = self.bound.n_samples
        # binning alone costs as much as the exact pass of this few queries: no grid to build (the
        # extent of every sample, ~1 ms at 200,000 in 3-D, was most of a 10-query pass)
        if n < AUTO_BINNED_SAMPLES or len(self.P) <= AUTO_BINNED_SAMPLE_COST or isinstance(self.grid, str):
            return False
        return self.grid.cells * AUTO_BINNED_CELL_COST + n * AUTO_BINNED_SAMPLE_COST < n * len(self.P)

    @cached_property
    def few_in_support(self):
        """A probe: fewer than 5% of the samples in the support (of the candidate factor, for a product)."""
        c = self.candidate
        if self.bound.factors is not None:
            return c is not None and _few_in_support(c.bound, self.P[:, c.cols])
        return _few_in_support(self.bound, self.P)

    @cached_property
    def truncated_visits(self):
        """The share of the samples the truncated pass sums for ``TRUNCATED_PROBES`` of the queries
        (evenly spaced), run on them (:func:`~localkit.engine.passes.neighbors.cluster_sums`)."""
        from .passes.neighbors import TRUNCATED_TOLERANCE, cluster_sums

        b = self.bound
        if len(self.P) == 0:
            return 0.0
        rows = np.unique(np.linspace(0, len(self.P) - 1, min(TRUNCATED_PROBES, len(self.P))).astype(np.intp))
        ones = np.ones((b.n_samples, 1), dtype=b.dtype)
        visited = cluster_sums(b, b.engine_points(self.P[rows]), ones, b.options.tolerance or TRUNCATED_TOLERANCE)[3]
        return float(visited.mean()) / b.n_samples

    @property
    def truncated_refusals(self):
        return self._refusals(truncated_refusals)

    def radius_ok(self):
        return self.kernel.compact and self.bound.scaled and self.q_scale is None and self.kernel.norm_metric


def _binned_bound_ok(a):
    bound = a.binned_bound
    return not isinstance(bound, str) and bound <= a.tolerance


def _binned_bound_reason(a):
    bound = a.binned_bound
    return bound if isinstance(bound, str) else f"its error bound {bound:.2g} exceeds tolerance={a.tolerance:g}"


def _binned_what(a):
    if a.algorithm == "binned":
        return "algorithm='binned'"
    given = a.bound.options.tolerance is not None
    return (f"its error bound {a.binned_bound:.2g} meets tolerance={a.tolerance:g}"
            + ("" if given else f" (the default: {a.bound.n_samples:,} samples, a grid of {a.grid.shape} points; "
                                "algorithm='dense' or another exact path for the exact sums)")
            + " (:mod:`localkit.engine.passes.binned`)")


def bounded_off_samples(profile):
    from .passes.binned import bounded_off_samples

    return bounded_off_samples(profile)


def _dense_what(a):
    """The dense path, and whether it prunes blocks by bounding boxes (:func:`~localkit.engine.passes.dense.prune_blocks`)."""
    from .passes.dense import PRUNE_MAX_KEPT, PRUNE_MIN_FEATURES, kept_fraction, prune_conditions

    what = "algorithm='dense'" if a.algorithm == "dense" else "the general path"
    if prune_conditions(a.bound, a.q_scale, a.exclude_self):
        kept = kept_fraction(a.bound, a.bound.engine_points(a.P))
        what += (f"; a compact profile in {a.d} > {PRUNE_MIN_FEATURES} features: "
                 + (f"blocks pruned by bounding boxes (k-d tree leaves; the probe keeps {kept:.0%} of the block "
                    "pairs)" if kept < PRUNE_MAX_KEPT else
                    f"no blocks pruned (the probe keeps {kept:.0%} of the block pairs by bounding boxes, "
                    f">= {PRUNE_MAX_KEPT:.0%})"))
    return what


def _knn_what(a):
    if a.bound.factors is not None:
        return (f"the compact kNN factor {a.candidate.kernel!r}: its k nearest samples (tree distances), the "
                "product's log-weights on them")
    return "a compact kNN kernel: the index's distances put the k-th neighbour at u = 1 exactly"


def _radius_what(a):
    why = ("algorithm='neighbors'" if a.algorithm == "neighbors" else
           "fewer than 5% of the samples in the support" + (" of the compact factor" if a.bound.factors is not None
                                                            else "") + " (probed)")
    if a.bound.factors is not None:
        return f"{why}: a radius search in the support of {a.candidate.kernel!r}, the product's log-weights on its candidates"
    return f"{why}: a radius query is cheaper"


def _compiled_what(a):
    if a.algorithm == "compiled":
        return "algorithm='compiled'"
    if a.d <= COMPILED_MAX_FEATURES:
        return f"a compact profile at a fixed bandwidth in {a.d} <= {COMPILED_MAX_FEATURES} features: measured fastest"
    return "exact_edge=True: points at distance h decided as scikit-learn's radius queries do"


def _truncated_what(a):
    from .passes.neighbors import TRUNCATED_TOLERANCE

    tol = a.bound.options.tolerance or TRUNCATED_TOLERANCE
    why = "algorithm='approximate'" if a.algorithm == "approximate" else f"tolerance={tol:g} given"
    return (f"{why}: the samples' {a.bound.clusters.n_clusters:,} k-means clusters (built once) visited in the order "
            "of their bound W_c k(max(0, |q - c| - r_c) / h), each summed exactly, until the bound on the clusters "
            f"left out is <= {tol:g} of the weight kept (reported per query: LocalSums.omitted); a probe of the "
            f"queries visits {a.truncated_visits:.1%} of the samples")


def _sparse(reason):
    """A host path's refusal of sparse (CSR) samples."""
    return (lambda a: not a.bound.sparse, f"{reason}; these samples are sparse (CSR)")


#: Where a row runs: the host (NumPy), dense samples there, sparse (CSR) samples, a device.
_HOST = (lambda a: a.bound.on_host, lambda a: f"NumPy arrays only; these are {a.where}")
_DEVICE = (lambda a: not a.bound.on_host, "")
_SPARSE = (lambda a: a.bound.sparse, "")


class Row(NamedTuple):
    """A path of the planner, taken for an ``algorithm`` in ``asked`` where the arrays are as
    ``where`` says, when every ``(condition(pass), reason)`` of ``conditions`` holds and, under
    ``"auto"``, every one of ``preferred`` (where it is measured faster, or meets the tolerance);
    else the first that fails says why not (a reason is a string or a function of the
    :class:`Pass`). ``what(pass)`` says why it is taken; ``not_asked`` why not, where the
    algorithm asked for is not in ``asked`` (default: that algorithm was asked for)."""

    path: str
    asked: tuple
    where: tuple
    conditions: tuple
    what: Callable
    preferred: tuple = ()
    not_asked: str | None = None



#: The engine's paths in the order they are tried; :func:`plan` takes the first row that applies,
#: :func:`explain` reads the same rows (the explanation is the decision). A requested algorithm
#: that no row takes is refused with the reasons of the rows it could have taken.
ROWS = (
    Row("streamed", tuple(a for a in ALGORITHMS if a not in ("binned", "approximate")), (_DEVICE,),
        ((lambda a: a.algorithm != "compiled" or device_compiled_fits(a.bound, a.q_scale, a.exclude_self),
          lambda a: "; ".join(a.compiled_refusals) or "needs a scalar bandwidth"),),
        lambda a: f"{a.where}: blocks on their device, online log-sum-exp"),
    Row("neighbors", ALGORITHMS, (_HOST, _SPARSE),
        ((lambda a: not sparse_refusals(a.kernel, a.algorithm, a.bound.sample_scale),
          lambda a: "; ".join(sparse_refusals(a.kernel, a.algorithm, a.bound.sample_scale))),
         (lambda a: a.q_scale is None, "query_scale: per-query bandwidths are not taken on sparse samples")),
        lambda a: "sparse samples: scikit-learn's brute-force search on the CSR matrix (kNN or radius queries), the "
                  "only path for them"),
    Row("streamed", ("streamed",), (_HOST, _sparse("needs dense arrays (of NumPy or of a device)")),
        ((lambda a: not streamed_refusals(a.bound), lambda a: "; ".join(streamed_refusals(a.bound))),),
        lambda a: "algorithm='streamed'",
        not_asked="the array-API pass of devices: on NumPy arrays taken only when asked for (the dense path is its "
                  "faster form on the host)"),
    Row("binned", ("binned", "auto"), (_HOST, _sparse("needs dense coordinates in 1 to 3 features")),
        ((lambda a: not a.binned_refusals, lambda a: "; ".join(a.binned_refusals)),),
        _binned_what,
        preferred=((lambda a: a.bound.options.tolerance is not None or a.binned_by_default(),
                    lambda a: "approximate: taken when asked for, under a tolerance its error bound meets, or by "
                              f"default from {AUTO_BINNED_SAMPLES:,} samples where its grid costs less than the "
                              "exact pass"),
                   (lambda a: bounded_off_samples(a.kernel.profile),
                    lambda a: f"the {a.kernel.profile.name!r} profile has no error bound off the samples (a jump at its "
                              "edge, or a profile stated by the user): taken when asked for"),
                   (_binned_bound_ok, _binned_bound_reason))),
    Row("neighbors", ("auto", "dense", "neighbors", "approximate"), (_HOST, _sparse("needs dense coordinates")),
        ((lambda a: a.compact_knn, "a compact kNN kernel (or a product with a compact kNN factor) takes it"),),
        _knn_what),
    Row("compiled", ("compiled", "auto"), (_HOST, _sparse("needs dense coordinates (numba strips)")),
        ((lambda a: not a.compiled_refusals, lambda a: "; ".join(a.compiled_refusals)),),
        _compiled_what,
        preferred=((lambda a: a.d <= COMPILED_MAX_FEATURES or a.bound.options.exact_edge,
                    lambda a: f"{a.d} features > {COMPILED_MAX_FEATURES}: no faster than the dense path there "
                              "(measured)"),)),
    Row("truncated", ("approximate", "auto"), (_HOST, _sparse("needs dense coordinates")),
        ((lambda a: not a.truncated_refusals, lambda a: "; ".join(a.truncated_refusals)),),
        _truncated_what,
        preferred=((lambda a: a.bound.options.tolerance is not None,
                    "leaves weight out (bounded): taken under 'auto' where a tolerance is given"),
                   (lambda a: a.d > BINNED_FEATURES,
                    lambda a: f"{a.d} features: the binned pass serves a tolerance in 1 to {BINNED_FEATURES} features"),
                   (lambda a: a.bound.n_samples >= TRUNCATED_MIN_SAMPLES,
                    lambda a: f"{a.bound.n_samples:,} samples < {TRUNCATED_MIN_SAMPLES:,}: the dense pass costs as little"),
                   (lambda a: a.bound.built("clusters") is not None
                    or len(a.P) >= TRUNCATED_BUILD_QUERIES * math.sqrt(a.bound.n_samples),
                    lambda a: f"{len(a.P):,} queries < {TRUNCATED_BUILD_QUERIES:g} sqrt(n_samples): building the "
                              "clusters would cost more than the dense pass (algorithm='approximate' builds them)"),
                   (lambda a: a.truncated_visits <= TRUNCATED_AUTO_FRACTION,
                    lambda a: f"a probe of the queries visits {a.truncated_visits:.0%} of the samples to meet the "
                              f"tolerance, more than {TRUNCATED_AUTO_FRACTION:.0%}: the clusters do not separate "
                              "the weight, the dense pass is cheaper"))),
    Row("neighbors", ("neighbors", "auto", "approximate"), (_HOST, _sparse("needs dense coordinates")),
        ((lambda a: a.candidate is not None if a.bound.factors is not None else a.kernel.compact,
          lambda a: "needs a compact factor (its support holds the candidates)" if a.bound.factors is not None
          else "needs a compact profile (or a compact kNN kernel)"),
         (lambda a: a.bound.factors is not None or a.radius_ok(),
          "needs a norm metric, no per-query scales and data within the float range")),
        _radius_what,
        preferred=((lambda a: a.few_in_support,
                    lambda a: "too many samples in the support" + (f" of the compact factor {a.candidate.kernel!r}"
                                                                  if a.bound.factors is not None else "")
                              + " (probed): a full pass is cheaper"),)),
    Row("dense", ("dense", "auto"), (_HOST, _sparse("centres the samples, which would make them dense")), (),
        _dense_what),
)

#: the paths' names, in the order :class:`Plan` lists them
PATH_NAMES = ("dense", "neighbors", "compiled", "binned", "streamed", "truncated")


def _refusal(conditions, a):
    """The reason of the first condition that fails, or None."""
    for holds, why in conditions:  # (a loop: a generator per row was most of a small pass's plan)
        if not holds(a):
            return why(a) if callable(why) else why
    return None


def _verdict(row, a):
    """``(placed, why)``: whether the arrays are where ``row`` runs, and why it is not taken for
    this pass (None: it is taken, when no row before it is)."""
    where = _refusal(row.where, a)
    if where is not None:
        return False, where
    why = _refusal(row.conditions, a)
    if why is None and a.algorithm not in row.asked:
        why = row.not_asked or f"algorithm={a.algorithm!r} asked for"
    if why is None and a.algorithm == "auto":
        why = _refusal(row.preferred, a)
    return True, why


def _choose(a):
    """The first row of :data:`ROWS` taken for the pass ``a``, or None (a row not asked for is
    never taken: its conditions are not evaluated)."""
    for row in ROWS:
        if a.algorithm in row.asked and _verdict(row, a)[1] is None:
            return row
    return None


def plan(bound, P, q_scale, exclude_self):
    """The path of a pass at the queries ``P`` (as given: :meth:`~localkit.engine.BoundKernel.points`):
    the first row of :data:`ROWS` taken; a ``ValueError`` naming the parameters where the requested
    algorithm cannot compute it."""
    a = Pass(bound, P, q_scale, exclude_self)
    row = _choose(a)
    if row is None:
        # the verdict of the last row of that path that runs where the arrays are (else of any row asked)
        verdicts = [(r.path == a.algorithm, *_verdict(r, a)) for r in ROWS if a.algorithm in r.asked]
        why = max(((own and ok, ok, i), why) for i, (own, ok, why) in enumerate(verdicts) if why)[1]
        raise ValueError(f"algorithm={a.algorithm!r} cannot compute this pass: {why}")
    return row.path


def explain(bound, P, q_scale, exclude_self):
    """:class:`Plan`: the path :func:`plan` takes for this pass and, for every other path, why not:
    the verdict of its last row that runs where the arrays are (the rows of :data:`ROWS`)."""
    a = Pass(bound, P, q_scale, exclude_self)
    taken = _choose(a)
    if taken is None:
        plan(bound, P, q_scale, exclude_self)  # raises, with the reasons
    reasons, placed = {taken.path: taken.what(a)}, set()
    for row in ROWS:
        if row.path == taken.path:
            continue
        ok, why = _verdict(row, a)
        if why is None:  # it applies, after the row taken
            why = f"applies, but the {taken.path} path comes first"
        if ok or row.path not in placed:  # where the arrays are, the last row's verdict
            reasons[row.path] = why
            placed |= {row.path} if ok else set()
    searches = taken.path == "neighbors" and not a.bound.sparse and a.bound.factors is None
    return Plan(taken.path, {name: reasons[name] for name in PATH_NAMES}, index_plan(bound) if searches else None)


def _few_in_support(bound, P, probe=64, subset=20_000, fraction=0.05):
    """Estimate, from a probe of queries against a subset of samples, whether a radius query
    beats a full pass (few samples inside the support, low dimension)."""
    if bound.n_features > 16 or bound.n_samples < 2000:
        return False
    rng = np.random.default_rng(0)
    rows = rng.choice(len(P), size=min(probe, len(P)), replace=False)
    cols = np.sort(rng.choice(bound.n_samples, size=min(subset, bound.n_samples), replace=False))
    L, _ = bound.block(bound.engine_points(P[rows])).log_weights(cols)
    return np.isfinite(L).mean() < fraction
