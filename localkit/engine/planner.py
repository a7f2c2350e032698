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
  where the caller gave a ``tolerance`` and the pass's error bound on the grid it would use meets
  it (never otherwise);
* a product kernel (:mod:`localkit.engine.factors`) takes the neighbour path where a factor is
  compact, as a plain kernel of that factor's columns would (always for a compact kNN factor;
  for a fixed bandwidth where the probe finds few samples in its support): candidates from that
  factor's index, the product's log-weights on them only; else the dense path;
* sparse (CSR) samples take the neighbour path only (:func:`sparse_refusals`): scikit-learn's
  brute-force search on the CSR matrix finds the k nearest samples or those within the support,
  and their values are gathered; the other paths need dense coordinates.

:func:`explain` says which path a pass takes and why each other one was not taken.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The compiled pass, weighing k(u) directly, against the dense path (epanechnikov, 20,000 samples,
#: 2,000 queries, 0-97% of them in the support; busy 2-core machine): 44-49 ns a pair against
#: 87-144 at d = 32, 80-143 against 89-125 at d = 64, 213-219 against 104-131 at d = 128
COMPILED_MAX_FEATURES = 32
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


def _binned_meets(bound, P, q_scale, exclude_self):
    """True where "auto" takes the binned pass: it applies, a ``tolerance`` was given and the
    error bound on the grid it would use meets it; else why not (a sentence)."""
    from .passes.binned import Grid, bounded_off_samples

    tol = bound.options.tolerance
    if tol is None:
        return "approximate: taken when asked for, or under a tolerance its error bound meets"
    if binned_refusals(bound, q_scale, exclude_self):
        return "; ".join(binned_refusals(bound, q_scale, exclude_self))
    if not bounded_off_samples(bound.kernel.profile):
        return (f"the {bound.kernel.profile.name!r} profile has no error bound off the samples (a jump at its edge, or a "
                "profile stated by the user): taken when asked for")
    try:
        grid = Grid(bound.samples, P, bound.h, bound.kernel.profile, bound.options.grid_size, tol)
    except ValueError as error:
        return str(error)
    if grid.bound > tol:
        return (f"its error bound {grid.bound:.2g} on a grid of {grid.shape} points exceeds tolerance={tol:g}")
    return True


def _product_reason():
    from .factors import PRODUCT_REASON

    return PRODUCT_REASON


def compiled_applies(bound, q_scale, exclude_self):
    """True when the compiled compact pass can compute this pass."""
    return not compiled_refusals(bound, q_scale, exclude_self)


@dataclass(frozen=True)
class Plan:
    """The planner's choice for one pass and, for each path, why it was or was not taken (as
    torch's ``why_not_fast_path``); ``str(plan)`` is a table. See :meth:`BoundKernel.explain
    <localkit.engine.BoundKernel.explain>`."""

    path: str
    reasons: dict

    def __str__(self):
        width = max(map(len, self.reasons))
        return "\n".join(f"{'->' if p == self.path else '  '} {p:<{width}}  {why}" for p, why in self.reasons.items())


def explain(bound, P, q_scale, exclude_self):
    """:class:`Plan`: the path :func:`plan` takes for this pass, with the reason for every path."""
    path = plan(bound, P, q_scale, exclude_self)
    if not bound.on_host:
        where = f"arrays of {bound.xp.__name__.rsplit('.', 1)[-1]}"
        host_only = f"NumPy arrays only; these are {where}"
        return Plan(path, {"dense": f"{host_only} (the streamed pass is its form on a device)",
                           "neighbors": f"{host_only} (a tree on the host)",
                           "compiled": f"{host_only} (numba; the streamed pass takes its arithmetic where asked)",
                           "binned": host_only,
                           "streamed": f"{where}: blocks on their device, online log-sum-exp"})
    if bound.sparse:
        sparse = "; these samples are sparse (CSR)"
        return Plan(path, {"dense": f"centres the samples, which would make them dense{sparse}",
                           "neighbors": "sparse samples: scikit-learn's brute-force search on the CSR matrix "
                                        "(kNN or radius queries), the only path for them",
                           "compiled": f"needs dense coordinates (numba strips){sparse}",
                           "binned": f"needs dense coordinates in 1 to 3 features{sparse}",
                           "streamed": f"needs dense arrays (of NumPy or of a device){sparse}"})
    kern, algorithm, d = bound.kernel, bound.options.algorithm, bound.n_features
    refused = compiled_refusals(bound, q_scale, exclude_self)
    knn_compact = kern.compact and kern.n_neighbors is not None
    if bound.factors is not None:
        from .factors import candidate_factor

        c = candidate_factor(bound)
        knn_compact = c is not None and c.kernel.n_neighbors is not None
    if path == "compiled":
        why_compiled = ("algorithm='compiled'" if algorithm == "compiled"
                        else f"a compact profile at a fixed bandwidth in {d} <= {COMPILED_MAX_FEATURES} features: "
                             "measured fastest" if d <= COMPILED_MAX_FEATURES
                        else "exact_edge=True: points at distance h decided as scikit-learn's radius queries do")
    elif refused:
        why_compiled = "; ".join(refused)
    elif algorithm != "auto":
        why_compiled = f"algorithm={algorithm!r} asked for"
    else:
        why_compiled = f"{d} features > {COMPILED_MAX_FEATURES}: no faster than the dense path there (measured)"
    if bound.factors is not None:
        why_neighbors = _product_neighbors_reason(bound, path)
    elif path == "neighbors":
        why_neighbors = ("a compact kNN kernel: the tree's distances put the k-th neighbour at u = 1 exactly"
                         if knn_compact else "algorithm='neighbors'" if algorithm == "neighbors"
                         else "fewer than 5% of the samples in the support (probed): a radius query is cheaper")
    elif not kern.compact:
        why_neighbors = "needs a compact profile"
    elif not _radius_ok(bound, q_scale):
        why_neighbors = "needs a norm metric, no per-query scales and data within the float range"
    elif algorithm != "auto":
        why_neighbors = f"algorithm={algorithm!r} asked for"
    elif path == "compiled":
        why_neighbors = "the compiled pass comes first where it applies (measured faster)"
    else:
        why_neighbors = "too many samples in the support (probed): a full pass is cheaper"
    if path == "dense":
        why_dense = "algorithm='dense'" if algorithm == "dense" else "the general path"
        from .passes.dense import PRUNE_MAX_KEPT, PRUNE_MIN_FEATURES, kept_fraction, prune_conditions

        if prune_conditions(bound, q_scale, exclude_self):
            kept = kept_fraction(bound, bound.engine_points(P))
            why_dense += (f"; a compact profile in {d} > {PRUNE_MIN_FEATURES} features: "
                          + (f"blocks pruned by bounding boxes (k-d tree leaves; the probe keeps {kept:.0%} of "
                             "the block pairs)" if kept < PRUNE_MAX_KEPT else
                             f"no blocks pruned (the probe keeps {kept:.0%} of the block pairs by bounding boxes, "
                             f">= {PRUNE_MAX_KEPT:.0%})"))
    elif knn_compact:
        why_dense = "a compact kNN kernel takes the tree's distances (the edge of the support is exact there)"
    else:
        why_dense = {"compiled": "the compiled pass applies", "neighbors": "the neighbour path applies",
                     "binned": "algorithm='binned' asked for", "streamed": "algorithm='streamed' asked for"}[path]
    if path == "binned":
        why_binned = ("algorithm='binned'" if algorithm == "binned" else
                      f"its error bound meets tolerance={bound.options.tolerance:g} (:mod:`localkit.engine.passes.binned`)")
    elif binned_refusals(bound, q_scale, exclude_self):
        why_binned = "; ".join(binned_refusals(bound, q_scale, exclude_self))
    elif algorithm != "auto":
        why_binned = f"algorithm={algorithm!r} asked for"
    else:
        why_binned = _binned_meets(bound, P, q_scale, exclude_self)
    if path == "streamed":
        why_streamed = "algorithm='streamed'"
    else:
        why_streamed = ("; ".join(streamed_refusals(bound))
                        or "the array-API pass of devices: on NumPy arrays taken only when asked for (the dense "
                           "path is its faster form on the host)")
    return Plan(path, {"dense": why_dense, "neighbors": why_neighbors, "compiled": why_compiled,
                       "binned": why_binned, "streamed": why_streamed})


def _radius_ok(bound, q_scale):
    kern = bound.kernel
    return kern.compact and bound.scaled and q_scale is None and kern.norm_metric


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


def _device_plan(bound, q_scale, exclude_self):
    """The streamed pass, the one path on a device; raises where the requested algorithm cannot be had."""
    algorithm = bound.options.algorithm
    if algorithm == "binned":
        raise ValueError("algorithm='binned' runs on NumPy arrays only (localkit.engine.passes.binned)")
    if algorithm == "compiled" and not device_compiled_fits(bound, q_scale, exclude_self):
        raise ValueError("algorithm='compiled' needs a compact profile with a fixed bandwidth (between "
                         f"{COMPILED_BANDWIDTHS[0]:g} and {COMPILED_BANDWIDTHS[1]:g}), the euclidean metric, no "
                         f"per-point scales and exclude_self=False; got {bound.kernel!r}")
    return "streamed"


def plan(bound, P, q_scale, exclude_self):
    """``"dense"``, ``"neighbors"``, ``"compiled"`` or ``"binned"`` for a pass at the queries ``P``
    (as given: :meth:`~localkit.engine.BoundKernel.points`) over NumPy arrays, ``"streamed"`` on a
    device; raises when the requested algorithm cannot compute it."""
    if not bound.on_host:
        return _device_plan(bound, q_scale, exclude_self)
    kern, algorithm = bound.kernel, bound.options.algorithm
    if bound.sparse:  # the options may have changed since the samples were bound (BoundKernel.using)
        refused = sparse_refusals(kern, algorithm, bound.sample_scale)
        if q_scale is not None:
            refused.append("query_scale: per-query bandwidths are not taken on sparse samples")
        if refused:
            raise ValueError("sparse (CSR) samples take the neighbour path only, which cannot compute this pass: "
                             + "; ".join(refused))
        return "neighbors"
    if algorithm == "streamed":
        if streamed_refusals(bound):
            raise ValueError("algorithm='streamed' cannot compute this pass: " + "; ".join(streamed_refusals(bound)))
        return "streamed"
    if algorithm == "binned":
        refused = binned_refusals(bound, q_scale, exclude_self)
        if refused:
            raise ValueError("algorithm='binned' cannot compute this pass: " + "; ".join(refused))
        return "binned"
    if algorithm == "auto" and _binned_meets(bound, P, q_scale, exclude_self) is True:
        return "binned"
    if bound.factors is not None:
        return _product_plan(bound, P, algorithm)
    compiled = compiled_applies(bound, q_scale, exclude_self)
    if algorithm == "compiled":
        if not compiled:
            raise ValueError("algorithm='compiled' needs a compact profile with a fixed bandwidth (between "
                             f"{COMPILED_BANDWIDTHS[0]:g} and {COMPILED_BANDWIDTHS[1]:g}), the euclidean metric, "
                             f"no per-point scales and exclude_self=False; got {kern!r}: it "
                             + "; ".join(compiled_refusals(bound, q_scale, exclude_self)))
        return "compiled"
    if algorithm == "neighbors" and not kern.compact:
        raise ValueError("algorithm='neighbors' needs a compact profile (or a compact kNN kernel)")
    if kern.compact and kern.n_neighbors is not None:
        return "neighbors"
    radius_ok = _radius_ok(bound, q_scale)
    if algorithm == "neighbors":
        if not radius_ok:
            raise ValueError("algorithm='neighbors' with a fixed bandwidth cannot take per-query scales "
                             "or bandwidths beyond the float range; use algorithm='dense'")
        return "neighbors"
    if algorithm == "dense":
        return "dense"
    if compiled and (bound.n_features <= COMPILED_MAX_FEATURES or bound.options.exact_edge):
        return "compiled"
    if radius_ok and _few_in_support(bound, P):
        return "neighbors"
    return "dense"


def _product_plan(bound, P, algorithm):
    """A product kernel's path on the host: the neighbour path where a factor is compact (always
    for a compact kNN factor, whose k nearest are the tree's, as for a plain compact kNN kernel;
    for a fixed bandwidth where asked or where the probe finds few samples in that factor's
    support), else the dense path."""
    from .factors import candidate_factor

    if algorithm == "compiled":
        raise ValueError(f"algorithm='compiled' cannot compute this pass: {_product_reason()}")
    c = candidate_factor(bound)
    if c is not None and c.kernel.n_neighbors is not None:
        return "neighbors"
    if algorithm == "neighbors":
        if c is None:
            raise ValueError(f"algorithm='neighbors' needs a compact factor (its support holds the candidates); "
                             f"{bound.kernel!r} has none")
        return "neighbors"
    if algorithm == "dense" or c is None:
        return "dense"
    return "neighbors" if _few_in_support(c.bound, P[:, c.cols]) else "dense"


def _product_neighbors_reason(bound, path):
    """Why the neighbour path was or was not taken for a product kernel (:func:`explain`)."""
    from .factors import candidate_factor

    c = candidate_factor(bound)
    if c is None:
        return "needs a compact factor (its support holds the candidates)"
    if path == "neighbors":
        if c.kernel.n_neighbors is not None:
            return (f"the compact kNN factor {c.kernel!r}: its k nearest samples (tree distances), the product's "
                    "log-weights on them")
        return (("algorithm='neighbors'" if bound.options.algorithm == "neighbors" else
                 "fewer than 5% of the samples in the support of the compact factor (probed)")
                + f": a radius search in the support of {c.kernel!r}, the product's log-weights on its candidates")
    if bound.options.algorithm != "auto":
        return f"algorithm={bound.options.algorithm!r} asked for"
    return f"too many samples in the support of the compact factor {c.kernel!r} (probed): a full pass is cheaper"


def _few_in_support(bound, P, probe=64, subset=20_000, fraction=0.05):
    """Estimate, from a probe of queries against a subset of samples, whether a radius query
    beats a full pass (few samples inside the support, low dimension)."""
    if bound.n_features > 16 or bound.n_samples < 2000:
        return False
    from .passes.dense import log_weight_block

    rng = np.random.default_rng(0)
    rows = rng.choice(len(P), size=min(probe, len(P)), replace=False)
    cols = np.sort(rng.choice(bound.n_samples, size=min(subset, bound.n_samples), replace=False))
    L, _ = log_weight_block(bound, bound.engine_points(P[rows]), cols)
    return np.isfinite(L).mean() < fraction
