"""Local polynomial least squares, batched over queries, every moment taken about the query.

At a query ``x*`` the local polynomial of degree ``p`` solves

    beta(x*) = argmin_beta  sum_i K(x*, x_i) r_i (y_i - beta . psi(z_i))^2  +  ridge |beta_1:|^2

with ``psi`` the monomials of total degree <= p (the constant first) of the *query-centred*
coordinates ``z_i = (x_i - x*) / s``, and predicts ``f(x*) = beta_0`` (every other monomial
vanishes at ``z = 0``); the slopes are ``df/dx_m = beta_(e_m) / s_m``. ``r_i`` are optional
sample weights (prior weights times LOESS robustness weights). The normal equations are
``(G + ridge D) beta = b`` with the normalised Gram ``G = sum_i w_i psi psi^T`` and
``b = sum_i w_i psi y_i`` (``w_i = K r_i / sum_j K r_j``, ``D = diag(0, 1, ..., 1)``).

Because ``z`` is centred at each query, the precision does not depend on how far the data sit
from the origin (float64 and float32 alike). Queries are walked in blocks whose Gram matrices fit
``memory_budget``; a degree whose single normal-equation system cannot fit is refused up front.

Paths, all through the engine's weights:

* **grid** (compact profile with a kNN span, euclidean, >= 2 features): the exact k-th-neighbour
  radius and the moments in one compiled pass per query (:mod:`localkit.engine.local_models.loess_grid`).
* **window** (the same in 1-D): the k nearest samples are a window of the sorted samples.
* **gathered** (a kNN span with another metric, or leave-one-out): a tree's k nearest samples.
  These three use ``s`` = the query's own radius (the distance to its k-th neighbour).
* **dense** (every other kernel): blocks of the engine's log-weights
  (:meth:`localkit.engine.BoundKernel.log_weights`) against all samples, ``s`` = the bandwidth (the samples'
  standard deviations where the bandwidth is beyond the float type's range and ``ridge = 0``,
  where ``s`` does not change the fit).

A query whose local design is (near) singular, ``lambda_min(C) <= rcond lambda_max(C)`` for ``G``
equilibrated to a unit diagonal ``C`` (too few neighbours, collinear points), falls back to the local weighted mean (the degree-0 fit) and is
flagged in ``singular``; a query without any weight gets the target of its nearest sample.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations_with_replacement
from numbers import Integral
from typing import NamedTuple

import numpy as np
from scipy.special import comb
from sklearn.utils._param_validation import validate_params

from ..._jit import njit
from ..._constraints import non_negative
from ..._validation import check_array, check_points
from ...kernels import Kernel
from ..passes import neighbors as nb
from ..blocks import DEFAULT_MEMORY_BUDGET, map_blocks
from ..bound import BoundKernel
from ..bound import make_kernel
from ..options import EXACT_ALGORITHMS, POLYNOMIAL_ALGORITHMS, EngineOptions
from ..passes.binned import FLOOR, MAX_FEATURES, MOMENT_GRID_SIZE, Grid, binned_moments, unresolved
from .loess_grid import GridIndex, _poly, column_buffers, column_moments, grid_moments, monomial_parents
from ..stream import UNDERFLOW, flush_underflow
from ..twins import twin_groups


@dataclass
class LocalPolynomialFit:
    """values (n_queries, t): the fits at the queries; singular (n_queries,) bool: queries that
    fell back to the local mean; empty (n_queries,) bool: queries without weight (nearest target);
    slopes (n_queries, n_features, t) or None: the fitted gradient ``df/dx`` at the queries;
    balls (n_queries,) or None: the squared kNN radii found by the grid path (give them back as
    ``balls=`` for the same queries, samples and span to skip the neighbour search)."""

    values: np.ndarray
    singular: np.ndarray
    empty: np.ndarray
    slopes: np.ndarray | None = None
    balls: np.ndarray | None = None


def n_monomials(n_features, degree):
    """``P = C(n_features + degree, degree)``, the number of monomials of total degree <= degree."""
    return int(comb(n_features + degree, degree, exact=True))


def check_design_fits(n_features, degree, itemsize=8, budget=DEFAULT_MEMORY_BUDGET):
    """``P``, after checking that one query's normal equations (Gram, a copy and the solver's
    workspace: ``3 P^2`` numbers) fit ``budget`` bytes (default: the engine's budget)."""
    P = n_monomials(n_features, degree)
    _check_budget(P, itemsize, budget,
                  f"degree={degree} with n_features={n_features} has {P:,} monomials: one query's normal equations need",
                  "lower the degree or the number of features")
    return P


def _check_budget(P, itemsize, budget, what, remedy):
    """Raise when ``3 P^2`` numbers (a ``P x P`` system, a copy and a workspace) exceed ``budget`` bytes."""
    need = 3.0 * P * P * itemsize
    if need > budget:
        raise ValueError(f"{what} {need / 2**20:,.0f} MiB, more than the memory budget of "
                         f"{budget / 2**20:,.0f} MiB; {remedy}")


def monomial_exponents(n_features, degree):
    """Exponents ``(P, d)`` of the monomials of total degree <= ``degree``, graded (constant first)
    and, within a degree, in decreasing lexicographic order of the exponents.

    A monomial of degree ``t`` is a multiset of ``t`` variables: ``combinations_with_replacement``
    lists them in increasing order of their sorted variable indices, which is decreasing order of
    their exponent vectors (no recursion over the features: d = 2,500 is as cheap as d = 2)."""
    blocks = [np.zeros((1, n_features), dtype=np.intp)]
    for t in range(1, degree + 1):
        picks = np.array(list(combinations_with_replacement(range(n_features), t)), dtype=np.intp)
        E = np.zeros((len(picks), n_features), dtype=np.intp)
        for c in range(t):
            np.add.at(E, (np.arange(len(picks)), picks[:, c]), 1)
        blocks.append(E)
    return np.concatenate(blocks)


#: the engine options of a local covariance (a local polynomial adds the binned pass's grid_size and tolerance)
_COVARIANCE_OPTIONS = ("algorithm", "block_size", "memory_budget", "n_jobs")
#: the binned local polynomial's largest degree: its moments go to ``2 degree`` (15 monomials in 3 features)
BINNED_MAX_DEGREE = 2


@validate_params({"exclude_self": ["boolean"], "degree": non_negative(Integral), "ridge": non_negative(),
                  "rcond": non_negative(), "slopes": ["boolean"]}, prefer_skip_nested_validation=True)
def local_polynomial(queries, samples, targets, degree=1, kernel="tricube", bandwidth=1.0,
                     n_neighbors=None, *, sample_weight=None, sample_scale=None, exclude_self=False,
                     ridge=0.0, rcond=1e-10, slopes=False, balls=None, design=None, bound=None, **options):
    """Local polynomial fits of ``targets`` at ``queries`` (None: at the samples), and their
    derivatives.

    ``bound``: a :class:`~localkit.engine.BoundKernel` of ``kernel`` on ``samples`` (unweighted; with
    ``sample_scale`` when one is given), bound once by the caller (an estimator's ``fit``); the dense
    path takes its weights from it instead of binding the samples again, and the samples are not
    checked again. None: bound here.

    ``design`` (an int ``m``): only the first ``m`` columns form the local design; the others
    enter the kernel only (the targets' columns of an output-adaptive fit, whose queries carry
    the current estimate there). None: every column. Taken on the dense path.

    ``kernel``, ``bandwidth``, ``n_neighbors`` and ``exclude_self`` (leave-one-out) are those of
    :func:`localkit.engine.local_sums`; ``**options`` the engine's (:class:`~localkit.engine.EngineOptions`):
    ``algorithm`` ("auto", "dense", "neighbors", "compiled", "binned"), ``block_size`` (queries per
    block; the first of a pair), ``memory_budget``, ``n_jobs``, ``grid_size`` and ``tolerance``;
    ``sample_weight`` (n_samples,) multiplies the kernel weights; ``sample_scale`` (n_samples,) gives
    each sample its own bandwidth factor (sample-point adaptive kernel, dense path); ``balls`` are the
    squared radii of an earlier fit at the same queries (only the weights changed, as in robustness
    iterations: the search is skipped). The computation runs in the samples' float type (float32 kept).
    Returns :class:`LocalPolynomialFit`.

    ``slopes=True`` also returns the local derivatives, the gradient of the fitted polynomial at
    the query: with the design ``z = (x - x*) / s``, ``df/dx_m (x*) = beta_(e_m)(x*) / s_m``, the
    coefficient of ``z_m`` in units of ``x_m`` (KernSmooth's ``locpoly(drv=1)``, statsmodels'
    ``KernelReg(reg_type="ll")`` marginal effects); it needs ``degree >= 1`` (a local constant has
    no slope), and ``degree = 2`` gives the slope with the curvature's bias removed, as
    ``locpoly(drv=1, degree=2)``.

    ``algorithm="binned"`` approximates the fit by binned moments (Fan and Marron 1994; R's
    ``KernSmooth::locpoly``) in 1 to 3 features, ``degree`` 0 to 2, a fixed bandwidth and the
    euclidean metric: the samples ``c_i``, ``c_i y_i`` are binned linearly onto a regular grid
    (``grid_size`` points per feature; by default 2^16, 2^9, 2^6 in 1, 2, 3 features,
    :data:`~localkit.engine.passes.binned.MOMENT_GRID_SIZE`, or with a ``tolerance`` the fewest
    whose bound meets it, :func:`localkit.engine.passes.binned.grid_shape`),
    the moments ``S_a(g) = sum_i c_i K_h(x_i - g) z_i^a`` (``|a| <= 2 degree``) and
    ``T_a(g) = sum_i c_i K_h(x_i - g) z_i^a y_i`` (``|a| <= degree``, ``z = (x - g) / h``) come
    from FFT convolutions (:func:`localkit.engine.passes.binned.binned_moments`), the normal
    equations ``G_ab = S_(a+b)``, ``b_a = T_a`` are solved at the grid points around the queries,
    and each query blends the ``2^d`` corners of its cell by their multilinear shares times
    their weight sums, ``f(x*) = sum_m a_m S_0(g_m) beta_0(g_m) / sum_m a_m S_0(g_m)`` (slopes
    alike): degree 0 is then exactly the binned local mean, and a corner without weight takes no
    part. Its error is that of the binned pass, ``O((delta / h)^2)`` relative to the targets'
    range for a smooth profile (``tests/test_binned_polynomial.py`` pins the bound).
    """
    opts = EngineOptions.of("local_polynomial", options, _COVARIANCE_OPTIONS + ("grid_size", "tolerance"),
                            POLYNOMIAL_ALGORITHMS)
    _check_bound(bound, kernel, bandwidth, n_neighbors, sample_weight, sample_scale)
    data = _prepare(queries, samples if bound is None else bound, targets, sample_weight, kernel, bandwidth,
                    n_neighbors, exclude_self)
    queries, samples, Y, sw, kern = data
    dtype = samples.dtype
    n_q, d, t = len(queries), samples.shape[1] if design is None else int(design), Y.shape[1]
    if not 1 <= d <= samples.shape[1]:
        raise ValueError(f"design={design!r} must be between 1 and the {samples.shape[1]} columns of the samples")
    if slopes and degree < 1:
        raise ValueError("slopes=True (the local derivative) needs degree >= 1: a local constant "
                         f"(degree=0) has no slope, got degree={degree}")
    P = check_design_fits(d, degree, dtype.itemsize, opts.budget)
    if opts.algorithm == "binned":
        refused = binned_polynomial_refusals(kern, samples.shape[1], degree, sample_scale, exclude_self)
        if design is not None:
            refused.append("design: columns outside the local design are taken on the dense path")
        if refused:
            raise ValueError("algorithm='binned' cannot compute this local polynomial: " + "; ".join(refused))
        fit, far = _binned(data if sample_weight is not None else data._replace(sw=None), degree, ridge,
                           max(rcond, 100 * np.finfo(dtype).eps), slopes, opts.grid_size, opts.tolerance)
        if far.any():  # beyond the binned sums' resolution (a profile without a support): the exact fit there
            exact = local_polynomial(queries[far], samples, Y, degree, kern, sample_weight=sample_weight, ridge=ridge,
                                     rcond=rcond, slopes=slopes, **{**options, "algorithm": "dense"})
            fit.values[far], fit.singular[far], fit.empty[far] = exact.values, exact.singular, exact.empty
            if slopes:
                fit.slopes[far] = exact.slopes
        return fit
    block, row_bytes, found = _blocks(data, degree, exclude_self, sample_scale, ridge, balls, opts.algorithm, d, bound)
    # float32 eigenvalues carry ~1e-7 relative error: a tighter rcond would pass singular designs
    rcond = max(rcond, 100 * np.finfo(dtype).eps)
    bq = _query_block(opts, (3 * P * P + 2 * P * t) * dtype.itemsize + row_bytes)
    values = np.empty((n_q, t), dtype=dtype)
    singular = np.zeros(n_q, dtype=bool)
    empty = np.zeros(n_q, dtype=bool)
    grad = np.zeros((n_q, d, t), dtype=dtype) if slopes else None

    def run(rows):
        G, b, total, scale, nearest = block(rows)
        none = ~(total > 0)
        norm = np.where(none, 1.0, total).astype(dtype)[:, None, None]
        beta, bad = _solve(G / norm, b / norm, ridge, rcond)
        beta[none] = 0.0
        beta[none, 0] = Y[nearest[none]]
        values[rows], singular[rows], empty[rows] = beta[:, 0], bad & ~none, none
        if slopes:  # zero where the fit fell back to the local mean
            grad[rows] = beta[:, 1:d + 1] / scale

    map_blocks(run, n_q, bq, opts.threads)
    return LocalPolynomialFit(values, singular, empty, grad, found)


def binned_polynomial_refusals(kern, n_features, degree, sample_scale, exclude_self):
    """Why the binned local polynomial cannot compute this fit, each reason naming its parameter
    (empty: it can); the binned pass's own (:func:`localkit.engine.planner.binned_refusals`) and
    the degree."""
    checks = [
        (not kern.composite, "kernel: a kernel on groups of columns adds its factors' log-weights (the dense path)"),
        (degree <= BINNED_MAX_DEGREE, f"degree={degree} > {BINNED_MAX_DEGREE} (binned moments go to 2 degree)"),
        (not kern.is_softmax, "kernel='softmax' is not a profile of a distance"),
        (n_features <= MAX_FEATURES, f"n_features={n_features} > {MAX_FEATURES}"),
        (kern.n_neighbors is None, "n_neighbors (a span): needs a fixed bandwidth"),
        (kern.metric == "euclidean", f"metric={kern.metric!r}: needs the euclidean metric"),
        (sample_scale is None, "sample_scale: takes no per-sample scales"),
        (not exclude_self, "exclude_self=True: cannot leave one out"),
    ]
    return [reason for ok, reason in checks if not ok]


def _binned(data, degree, ridge, rcond, slopes, grid_size, tolerance):
    """The binned local polynomial (see :func:`local_polynomial`) of :class:`LocalData` ``data``
    (``sw`` None: unweighted), in float64, returned in the samples' float type, and the queries
    it cannot resolve (:func:`~localkit.engine.passes.binned.unresolved`)."""
    queries, samples, Y, sw, kern = data
    dtype = samples.dtype
    n_q, d, t = len(queries), samples.shape[1], Y.shape[1]
    h = np.broadcast_to(np.asarray(kern.resolve_bandwidth(samples, sw), dtype=np.float64), (d,))
    if grid_size is None and tolerance is None:
        grid_size = MOMENT_GRID_SIZE[d]
    grid = Grid(samples, queries, h, kern.profile, grid_size, tolerance)
    refused = grid.refusal(tolerance, grid_size)
    if refused:
        raise ValueError("algorithm='binned' cannot compute this local polynomial: " + refused)
    Q = queries.astype(np.float64, copy=False)
    inside = grid.inside(Q)
    corners = list(grid.corners(Q[inside]))
    at, where = np.unique(np.concatenate([flat for flat, _ in corners]), return_inverse=True)
    E = monomial_exponents(d, 2 * degree)
    P = n_monomials(d, degree)  # E's first P rows are the monomials of degree <= degree (graded order)
    S, T, total = binned_moments(samples, Y, sw, h, E, P, grid, at)
    index = {tuple(e): i for i, e in enumerate(E)}
    pair = np.array([[index[tuple(E[a] + E[b])] for b in range(P)] for a in range(P)])
    S0 = np.where(S[0] > FLOOR * total, S[0], 0.0)  # FFT round-off where no weight is: no weight
    live = S0 > 0
    beta = np.zeros((len(at), P, t))
    bad = np.zeros(len(at), dtype=bool)
    if live.any():
        norm = S0[live]
        G = np.moveaxis(S[:, live][pair], -1, 0) / norm[:, None, None]
        b = np.moveaxis(T[:, :, live], -1, 0) / norm[:, None, None]
        beta[live], bad[live] = _solve(G, b, ridge, rcond)
    # blend the corners of each query's cell: shares times weight sums
    where = where.reshape(len(corners), -1)
    den = np.zeros(len(Q))
    num = np.zeros((len(Q), 1 + (d if slopes else 0), t))
    singular = np.zeros(len(Q), dtype=bool)
    for c, (_, share) in enumerate(corners):
        g = where[c]
        a = share * S0[g]
        den[inside] += a
        num[inside] += a[:, None, None] * beta[g, :num.shape[1]]
        singular[inside] |= (a > 0) & bad[g]
    empty = ~(den > 0)
    num /= np.where(empty, 1.0, den)[:, None, None]
    values = num[:, 0]
    if empty.any():  # beyond every sample's reach: the nearest sample's target
        index_ = nb.make_index(kern.scale(samples, h), "euclidean", exact=True)
        nearest = index_.kneighbors(kern.scale(queries[empty], h), n_neighbors=1)[1][:, 0]
        values[empty] = Y[nearest]
    grad = num[:, 1:] / h[None, :, None] if slopes else None
    return (LocalPolynomialFit(values.astype(dtype), singular & ~empty, empty,
                               None if grad is None else grad.astype(dtype), None),
            unresolved(den, total, kern.profile, tolerance))


def _check_bound(bound, kernel, bandwidth, n_neighbors, sample_weight, sample_scale=None):
    """A caller's ``bound`` must bind the kernel asked for, with the per-sample bandwidths asked for,
    at a bandwidth the weights do not change."""
    if bound is not None and not (bound.sample_scale is None if sample_scale is None else
                                  bound.sample_scale is not None and np.array_equal(bound.sample_scale, sample_scale)):
        raise ValueError("bound must bind the samples with the sample_scale given here (None: none)")
    if bound is not None and bound.kernel is not make_kernel(kernel, bandwidth, n_neighbors):
        raise ValueError(f"bound is {bound.kernel!r} bound to the samples; kernel is {kernel!r}: give the kernel it binds")
    if bound is not None and sample_weight is not None and isinstance(bound.kernel.bandwidth, str):
        raise ValueError(f"bound: the rule bandwidth={bound.kernel.bandwidth!r} is resolved on the weighted samples "
                         "here, not as bound; bind the kernel at its resolved bandwidth")


class LocalData(NamedTuple):
    """The checked arrays of a local fit, in the samples' float type: the queries, the samples,
    the targets ``Y`` (n_samples, t), the sample weights ``sw`` and the kernel."""

    queries: np.ndarray
    samples: np.ndarray
    Y: np.ndarray
    sw: np.ndarray
    kern: Kernel


def _prepare(queries, samples, targets, sample_weight, kernel, bandwidth, n_neighbors, exclude_self):
    """The :class:`LocalData` in the samples' float type (``targets`` None:
    no columns); a bandwidth rule weighted by the sample weights. ``samples`` may be a
    :class:`~localkit.engine.BoundKernel`, whose samples were checked when it bound them."""
    samples = samples.samples if isinstance(samples, BoundKernel) else check_points(samples, "samples")
    dtype = samples.dtype
    queries = samples if queries is None else check_points(queries, "queries", n_features=samples.shape[1],
                                                           dtype=dtype)
    if targets is None:
        Y = np.zeros((len(samples), 0), dtype=dtype)
    else:
        Y = check_array(targets, "targets", ndim=(1, 2)).reshape(len(samples), -1).astype(dtype, copy=False)
    sw = np.ones(len(samples), dtype=dtype)
    if sample_weight is not None:
        sw = check_array(sample_weight, "sample_weight", ndim=(1,)).astype(dtype, copy=False)
        if len(sw) != len(samples) or np.any(sw < 0):
            raise ValueError(f"sample_weight must be {len(samples)} non-negative numbers")
    if exclude_self and len(queries) != len(samples):
        raise ValueError("exclude_self=True needs the queries to be the samples")
    kern = make_kernel(kernel, bandwidth, n_neighbors)
    if sample_weight is not None and isinstance(kern.bandwidth, str):  # a rule, weighted as the weights are
        kern = kern._with(bandwidth=kern.resolve_bandwidth(samples, sw))
    return LocalData(queries, samples, Y, sw, kern)


def _blocks(data, degree, exclude_self, sample_scale, ridge, balls, algorithm, design=None, bound=None):
    """``(block, row_bytes, found)``: the path's ``block(rows) -> (G, b, weight sums, scale,
    nearest)`` (see :func:`_gathered`, :func:`_dense`) for monomials up to ``degree`` of the first
    ``design`` columns (None: every column) of :class:`LocalData` ``data``; ``bound``: the
    caller's kernel bound to the samples."""
    samples, kern = data.samples, data.kern
    design = samples.shape[1] if design is None else design
    E = monomial_exponents(design, degree)
    if (kern.n_neighbors is not None and kern.compact and algorithm != "dense" and sample_scale is None
            and design == samples.shape[1]):
        return _gathered(data, E, exclude_self, balls, None if bound is None else bound.memo)
    return (*_dense(data, E, exclude_self, sample_scale, ridge, design, bound), None)


@validate_params({"exclude_self": ["boolean"]}, prefer_skip_nested_validation=True)
def local_covariance(queries, samples, kernel="gaussian", bandwidth=1.0, n_neighbors=None, *, sample_weight=None,
                     exclude_self=False, bound=None, **options):
    """The kernel-weighted mean and covariance of the samples at each query, every moment taken
    about the query (the degree-1 design of :func:`local_polynomial`): with ``z_i = (x_i - x*) / s``,

        m(x*) = x* + s sum_i w_i z_i,    C(x*) = s (sum_i w_i z_i z_i^T - (sum_i w_i z_i)(sum_i w_i z_i)^T) s

    (``w`` the normalised weights). Moments about a far origin, ``E[x x^T] - m m^T``, lose
    ``(|x* - 0| / local spread)^2`` of the float's digits; about the query only ``|m - x*|``
    relative to the spread counts. ``bound`` as :func:`local_polynomial`; ``**options`` its engine
    options but ``grid_size`` and ``tolerance`` (exact paths only). Returns ``(mean,
    covariance, empty, nearest)``: queries without weight are ``empty``, ``nearest`` the index of
    their nearest sample (elsewhere 0), their mean and covariance 0.
    """
    opts = EngineOptions.of("local_covariance", options, _COVARIANCE_OPTIONS, EXACT_ALGORITHMS)
    _check_bound(bound, kernel, bandwidth, n_neighbors, sample_weight)
    data = _prepare(queries, samples if bound is None else bound, None, sample_weight, kernel, bandwidth,
                    n_neighbors, exclude_self)
    queries, samples = data.queries, data.samples
    dtype = samples.dtype
    n_q, d = queries.shape
    P = d + 1
    _check_budget(P, itemsize=dtype.itemsize, budget=opts.budget,
                  what=f"n_features={d}: one query's local covariance (a {P:,} x {P:,} system of moments) needs",
                  remedy="reduce the number of features first (e.g. with PCA)")
    block, row_bytes, _ = _blocks(data, 1, exclude_self, None, 0.0, None, opts.algorithm, bound=bound)
    bq = _query_block(opts, 3 * P * P * dtype.itemsize + row_bytes)
    mean = np.zeros((n_q, d), dtype=dtype)
    cov = np.zeros((n_q, d, d), dtype=dtype)
    empty = np.zeros(n_q, dtype=bool)
    nearest = np.zeros(n_q, dtype=np.intp)

    def run(rows):
        G, _, total, scale, near = block(rows)  # monomials 1, z_1 .. z_d (monomial_exponents' order)
        none = ~(total > 0)
        G = G / np.where(none, 1.0, total).astype(dtype)[:, None, None]
        s = np.broadcast_to(scale[:, :, 0] if np.ndim(scale) == 3 else scale, (len(G), d))
        first = G[:, 0, 1:]
        C = (G[:, 1:, 1:] - first[:, :, None] * first[:, None, :]) * s[:, :, None] * s[:, None, :]
        mean[rows] = np.where(none[:, None], 0.0, queries[rows] + first * s)
        cov[rows] = np.where(none[:, None, None], 0.0, C)
        empty[rows], nearest[rows] = none, np.where(none, near, 0)

    map_blocks(run, n_q, bq, opts.threads)
    return mean, cov, empty, nearest


def _query_block(options, per_query):
    """Queries per block of a local fit: ``options.block_size`` (the first of a pair), else as many
    as the memory budget gives each thread at ``per_query`` bytes each, at most 1,024."""
    if options.block_size is not None:
        return int(np.ravel(options.block_size)[0])
    return int(max(1, min(1024, options.budget // (per_query * options.threads))))


def _solve(G, b, ridge, rcond):
    """``beta`` of ``(G + ridge D) beta = b`` per query; the local mean (slopes 0) where G is singular.

    The test and the solve take the Gram matrix equilibrated to a unit diagonal,
    ``C = S^-1 G S^-1`` with ``S = diag(sqrt(G_jj))``: conditioning then measures collinearity of
    the monomials, not their units (at a bandwidth far wider than the data, ``z = (x - x*) / h``
    is tiny and the raw ``G`` looked singular: local linear silently became the local mean)."""
    P = G.shape[1]
    if ridge and P > 1:
        idx = np.arange(1, P)
        G[:, idx, idx] += ridge
    beta = np.zeros_like(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        diag = np.sqrt(np.einsum("qjj->qj", G))
        diag = np.where(diag > 0, diag, 1.0)  # a monomial that vanishes on every weighted sample: C is singular
        C = G / (diag[:, :, None] * diag[:, None, :])
        lam = np.linalg.eigvalsh(C) if P > 1 else C[:, :, 0]
        ok = np.isfinite(lam).all(axis=1) & (lam[:, 0] > rcond * lam[:, -1]) & (lam[:, -1] > 0)
        beta[:, 0, :] = b[:, 0, :] / G[:, 0, :1]  # the local weighted mean: psi_0 = 1
    if ok.any():
        beta[ok] = np.linalg.solve(C[ok], b[ok] / diag[ok, :, None]) / diag[ok, :, None]
    return beta, ~ok


def _gathered(data, E, exclude_self, balls, memo=None):
    """``block(rows) -> (G, b, weight sums, scale, nearest)`` over the k nearest samples, the
    design centred at each query and scaled by its radius; the extra bytes per query; and the
    array the grid path fills with the squared radii (None on the other paths). ``memo``: the
    caller's binding's (a kept :class:`~localkit.engine.BoundKernel`'s :meth:`~localkit.engine.BoundKernel.memo`),
    where the samples' grid index and sorted order are kept from one call to the next."""
    queries, samples, Y, sw, kern = data

    def kept(key, build):
        return build() if memo is None else memo(key, build)

    k = kern.n_neighbors
    if k + int(exclude_self) > len(samples):
        raise ValueError(f"n_neighbors must be <= n_samples{' - 1' if exclude_self else ''}"
                         f"={len(samples) - int(exclude_self)}, got {k}")
    h = kern.resolve_bandwidth(samples)
    Qs, Xs = kern.scale(queries, h), kern.scale(samples, h)
    twins = twin_groups(samples, Y) if exclude_self else None
    # the fused paths evaluate the compact profiles ``(1 - u^a)^b`` inline (``Profile.poly``)
    a, p = kern.profile.poly or (0, 0)
    tree = monomial_parents(E)
    # the fused paths weigh every sample within the k-th distance: for the uniform profile, whose
    # k-th neighbour counts, ties there would add samples; it keeps exactly k through the tree
    euclid = (kern.metric == "euclidean" and kern.profile.poly is not None and kern.profile.vanishes_at_edge
              and not exclude_self)
    if euclid and Xs.shape[1] > 1:
        index = kept(("grid_index", k), lambda: GridIndex(Xs, k))
        found = np.empty(len(Qs))
        if balls is not None and np.shape(balls) != (len(Qs),):
            raise ValueError(f"balls must have shape ({len(Qs)},), got {np.shape(balls)}")

        def grid_block(rows):
            G, b, total, radius, found[rows], near = grid_moments(
                index, Qs[rows], Y, sw, k, E, a, p, None if balls is None else balls[rows])
            return G, b, total, _per_query(radius), near
        return grid_block, 0, found
    if Xs.shape[1] == 1 and kern.metric == "euclidean" and twins is None:  # sorted order: windows
        order = kept("sorted_order", lambda: np.argsort(Xs[:, 0], kind="stable"))
        x, Ys, ws = np.ascontiguousarray(Xs[order, 0]), Y[order], sw[order]
        if euclid:
            def window_block(rows):
                q = Qs[rows, 0]
                lo = _window_starts(x, q, k)
                hi = lo + k
                # k samples at the query's point: the window is every sample there (nb.coincident)
                tied = (x[lo] == q) & (x[hi - 1] == q) & kern.profile.vanishes_at_edge
                lo[tied], hi[tied] = np.searchsorted(x, q[tied], "left"), np.searchsorted(x, q[tied], "right")
                S, T = _window_accumulate(x, Ys, ws, lo, hi, q, E.shape[0] - 1, a, p)
                radius = np.maximum(q - x[lo], x[hi - 1] - q)
                near = np.zeros(len(q), dtype=np.intp)
                for i in np.flatnonzero(~(S[:, 0] > 0)):  # only queries without weight need it
                    pos = lo[i] + np.arange(k)
                    near[i] = order[pos[np.abs(x[pos] - q[i]).argmin()]]
                return S[:, E[:, 0, None] + E[None, :, 0]], T, S[:, 0], _per_query(radius), near
            return window_block, 16 * k, None

        def sorted_lists(rows):
            dist, pos = _window_neighbors(x, order, Qs[rows, 0], k, exclude_self, rows.start)
            return dist, order[pos]

        def coincident(rows, dist):  # every sample at the query's point: a run of the sorted samples
            zero = np.flatnonzero((dist.max(axis=1) == 0) & kern.profile.vanishes_at_edge)
            q = Qs[rows, 0][zero]
            runs = [order[i:j] for i, j in zip(np.searchsorted(x, q, "left"), np.searchsorted(x, q, "right"))]
            if exclude_self:
                runs = [f[f != r + rows.start] for f, r in zip(runs, zero)]
            return zero, runs
        neighbours = sorted_lists
    else:
        index = nb.make_index(Xs, kern.metric, exact=True)

        def neighbours(rows):
            return nb.kneighbors(index, Qs[rows], k, exclude_self=exclude_self, row_offset=rows.start,
                                 groups=twins)

        def coincident(rows, dist):
            return nb.coincident(index, Qs[rows], dist, kern.profile, exclude_self=exclude_self,
                                 row_offset=rows.start, groups=twins)
    k0 = float(np.exp(kern.profile.log_k0))

    def list_block(rows):
        dist, idx = neighbours(rows)
        radius = dist.max(axis=1)
        w = np.exp(kern.profile.log_k(nb.scaled_sq_distances(dist, radius))).astype(Xs.dtype)
        inv = np.broadcast_to(np.where(radius > 0, 1.0 / np.where(radius > 0, radius, 1.0), 0.0)[:, None],
                              (len(idx), Xs.shape[1])).astype(Xs.dtype)
        G, b, total = _accumulate(Xs, Qs[rows], Y, sw, idx, w, inv, *tree)
        for r, f in zip(*coincident(rows, dist)):  # d_k = 0: every sample there, at z = 0 (psi = e_0)
            G[r], b[r] = 0.0, 0.0
            G[r, 0, 0] = total[r] = k0 * sw[f].sum()
            b[r, 0] = k0 * (sw[f] @ Y[f])
        return G, b, total, _per_query(radius), idx[np.arange(len(idx)), dist.argmin(axis=1)]
    return list_block, k * (24 + Xs.dtype.itemsize), None


def _per_query(radius):
    """Radii ``(n,)`` as design scales ``(n, 1, 1)`` (broadcast over features and targets)."""
    return radius[:, None, None]


def _window_starts(x_sorted, q, width):
    """Start ``l`` of the window of ``width`` nearest sorted samples, by bisection over queries.

    ``l`` moves right while ``x[l + width]`` is closer than ``x[l]``, as in Cleveland's lowess.
    """
    n = len(x_sorted)
    lo = np.zeros(len(q), dtype=np.intp)
    hi = np.full(len(q), n - width, dtype=np.intp)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        right = q - x_sorted[mid] > x_sorted[np.minimum(mid + width, n - 1)] - q
        lo = np.where(right & (lo < hi), mid + 1, lo)
        hi = np.where(~right & (lo < hi), mid, hi)
    return lo


def _window_neighbors(x_sorted, order, q, k, exclude_self, row_offset):
    """The k nearest samples of 1-D queries (positions in sorted order) and their distances.

    With ``exclude_self`` the window holds ``k + 1`` samples and the query's own sample
    (``order[pos] == row``) is dropped.
    """
    width = k + int(exclude_self)
    pos = _window_starts(x_sorted, q, width)[:, None] + np.arange(width)
    dist = np.abs(x_sorted[pos] - q[:, None])
    if exclude_self:
        rows = np.arange(len(q)) + row_offset
        is_self = order[pos] == rows[:, None]
        is_self[~is_self.any(axis=1), -1] = True  # a duplicate displaced it: drop the farthest
        keep = ~is_self
        pos, dist = pos[keep].reshape(len(q), k), dist[keep].reshape(len(q), k)
    return dist, pos


@njit(nogil=True, cache=True)
def _accumulate(X, Q, Y, sw, idx, w, inv, parent, var):
    """Unnormalised ``G = sum_j w_j r_j psi psi^T``, ``b = sum_j w_j r_j psi y_j^T`` and the
    weight sums over the samples ``idx (bq, k)`` of weights ``w (bq, k)``, ``psi`` the monomials
    of ``(x_j - x*) * inv`` (``inv (bq, d)``: one over the design scale); samples of zero weight
    cost one comparison."""
    bq, k = idx.shape
    d, P, t = X.shape[1], len(parent), Y.shape[1]
    G = np.zeros((bq, P, P), dtype=X.dtype)
    b = np.zeros((bq, P, t), dtype=X.dtype)
    total = np.zeros(bq, dtype=X.dtype)
    Z, WPsi, Psi, Yv = column_buffers(k, d, P, t, X.dtype)
    for i in range(bq):
        m = 0
        for j in range(k):
            s = idx[i, j]
            wj = w[i, j] * sw[s]
            if wj == 0.0:
                continue
            _column(X, Y, Q[i], s, wj, inv[i], Z, WPsi, Yv, m)
            m += 1
        total[i] = column_moments(Z, WPsi, Psi, Yv, m, parent, var, G[i], b[i])
    return G, b, total


@njit(nogil=True, cache=True, inline="always")
def _column(X, Y, q, s, w, inv, Z, WPsi, Yv, m):
    """Column ``m`` of the per-query scratch: sample ``s``'s offset (scaled by ``inv`` (d,)),
    weight and targets."""
    for c in range(X.shape[1]):
        Z[c, m] = (X[s, c] - q[c]) * inv[c]
    WPsi[0, m] = w
    for u in range(Y.shape[1]):
        Yv[u, m] = Y[s, u]


@njit(nogil=True, cache=True)
def _window_accumulate(x, Y, sw, lo, hi, q, degree, a, p):
    """1-D windows ``[lo, hi)`` of sorted samples: the power sums ``S_m = sum_j w_j dz_j^m``
    (m <= 2 degree) and ``T_m = sum_j w_j dz_j^m y_j`` (m <= degree), ``dz = (x_j - x*) / radius``,
    with the weights ``(1 - |dz|^a)^p r_j`` computed in the same pass (the profiles' ``_poly``; every
    window sample has ``|dz| <= 1``, the farthest gets weight 0). The Gram matrix is the Hankel matrix
    ``G_ac = S_(a+c)``."""
    bq, t = len(q), Y.shape[1]
    S = np.zeros((bq, 2 * degree + 1))
    T = np.zeros((bq, degree + 1, t))
    for i in range(bq):
        l, u = lo[i], hi[i]
        radius = max(q[i] - x[l], x[u - 1] - q[i])
        inv = 1.0 / radius if radius > 0 else 0.0
        if degree == 1 and t == 1:  # LOESS: five running sums in registers
            s0 = s1 = s2 = t0 = t1 = 0.0
            for j in range(l, u):
                dz = (x[j] - q[i]) * inv
                w = _poly(dz * dz, a, p) * sw[j]
                wd = w * dz
                s0 += w
                s1 += wd
                s2 += wd * dz
                t0 += w * Y[j, 0]
                t1 += wd * Y[j, 0]
            S[i, 0], S[i, 1], S[i, 2], T[i, 0, 0], T[i, 1, 0] = s0, s1, s2, t0, t1
            continue
        for j in range(l, u):
            dz = (x[j] - q[i]) * inv
            w = _poly(dz * dz, a, p) * sw[j]
            for m in range(2 * degree + 1):
                S[i, m] += w
                if m <= degree:
                    for c in range(t):
                        T[i, m, c] += w * Y[j, c]
                w *= dz
    return S, T


def _dense(data, E, exclude_self, sample_scale, ridge, design, bound=None):
    """``block(rows)`` from the engine's log-weights of a query block against every sample, the
    design centred at each query and scaled by the bandwidth ``s`` (the features' spread for kNN
    and softmax kernels); and the extra bytes per query (its row of weights and temporaries).
    ``bound``: the kernel already bound to the samples (else bound here)."""
    queries, samples, Y, sw, kern = data
    s_scale = None if sample_scale is None else check_array(sample_scale, "sample_scale", ndim=(1,))
    if s_scale is not None and (s_scale.shape != (len(samples),) or np.any(s_scale < 0)):
        raise ValueError(f"sample_scale must be {len(samples)} non-negative numbers")
    twins = twin_groups(samples, Y) if exclude_self else None  # the copies of a row: x and y
    if bound is not None and not exclude_self:
        weights = bound
    else:  # leave-one-out: groups of rows at one point with one target
        weights = BoundKernel(kern, samples, sample_scale=s_scale,
                              twins=np.arange(len(samples)) if twins is None else twins)
    log_weights, nearest = weights.log_weights, weights.nearest
    s = None
    if kern.composite:  # a product: each distance factor's columns in its bandwidths, categorical ones in levels
        s = np.ones(samples.shape[1], dtype=samples.dtype)
        for f in weights.factors:
            if f.bound is not None:
                s[f.cols] = np.broadcast_to(np.asarray(f.bound.h, dtype=np.float64), (len(f.cols),))
    elif kern.n_neighbors is None and not kern.is_softmax:
        h = np.broadcast_to(np.asarray(kern.resolve_bandwidth(samples), dtype=np.float64), (samples.shape[1],))
        tiny, huge = np.finfo(samples.dtype).tiny, np.finfo(samples.dtype).max
        if np.all((h >= tiny) & (h <= huge)):
            s = h.astype(samples.dtype)
        elif ridge:
            raise ValueError(f"ridge > 0 penalises slopes in units of the bandwidth, which is beyond the range of "
                             f"{samples.dtype} here (bandwidth {h.min():g}..{h.max():g}); pass float64 data")
        # else: without ridge the fit does not depend on the design's units: the samples' spread
    if s is None:
        s = samples.std(axis=0)
        s = np.where(s > 0, s, 1.0).astype(samples.dtype)
    s = s[:design]  # the design's columns (the others weigh only)
    inv_s = (1.0 / s).astype(samples.dtype)
    Xd = samples if design == samples.shape[1] else np.ascontiguousarray(samples[:, :design])
    every = np.arange(len(samples))
    tree = monomial_parents(E)

    def dense_block(rows):
        L = log_weights(queries[rows], exclude_self=exclude_self, row_offset=rows.start)
        top = L.max(axis=1, keepdims=True)
        L -= np.where(np.isfinite(top), top, 0.0)
        W = np.exp(flush_underflow(L, UNDERFLOW[L.dtype]), out=L).astype(samples.dtype, copy=False)
        G, b, total = _accumulate(Xd, queries[rows, :design], Y, sw, np.broadcast_to(every, W.shape), W,
                                  np.broadcast_to(inv_s, (len(W), len(inv_s))), *tree)
        near = np.zeros(len(W), dtype=np.intp)
        none = ~(total > 0)
        if none.any():  # leave-one-out: the nearest other sample (at another point), never its own
            near[none] = nearest(queries[rows][none],
                                 self_rows=rows.start + np.flatnonzero(none) if exclude_self else None)
        return G, b, total, s[None, :, None], near
    return dense_block, 3 * len(samples) * samples.dtype.itemsize
