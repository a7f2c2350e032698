"""The planner: which path computes an engine pass (see :mod:`localkit.engine.paths`).

* a compact kNN kernel always takes the neighbour path, whose tree distances put the k-th
  neighbour at ``u = 1`` exactly (matrix-product distances could push it past the edge of the
  uniform profile);
* "auto" takes the compiled compact pass where it applies, up to ``COMPILED_MAX_FEATURES``
  features (measured faster than the dense and radius paths at d = 2, 4 and 8 for every
  bandwidth tried), else the radius path for compact profiles whose support holds few
  samples, else the dense path.
"""
from __future__ import annotations

import numpy as np

COMPILED_MAX_FEATURES = 16
#: bandwidths inside this range keep ``h^2`` a normal float for the compiled pass's raw coordinates
COMPILED_BANDWIDTHS = (1e-100, 1e100)


def compiled_applies(bound, q_scale, exclude_self):
    """True when the compiled compact pass can compute this pass."""
    kern = bound.kernel
    lo, hi = COMPILED_BANDWIDTHS
    return (kern.compact and kern.n_neighbors is None and kern.metric == "euclidean" and bound.scaled
            and q_scale is None and bound.sample_scale is None and not exclude_self
            and bool(np.all((bound.h > lo) & (bound.h < hi))))


def plan(bound, Q, q_scale, exclude_self):
    """``"dense"``, ``"neighbors"`` or ``"compiled"`` for this pass; raises when the requested
    algorithm cannot compute it."""
    kern, algorithm = bound.kernel, bound.options.algorithm
    compiled = compiled_applies(bound, q_scale, exclude_self)
    if algorithm == "compiled":
        if not compiled:
            raise ValueError("algorithm='compiled' needs a compact profile with a fixed bandwidth (between "
                             f"{COMPILED_BANDWIDTHS[0]:g} and {COMPILED_BANDWIDTHS[1]:g}), the euclidean metric, "
                             f"no per-point scales and exclude_self=False; got {kern!r}")
        return "compiled"
    if algorithm == "neighbors" and not kern.compact:
        raise ValueError("algorithm='neighbors' needs a compact profile (or a compact kNN kernel)")
    if kern.compact and kern.n_neighbors is not None:
        return "neighbors"
    radius_ok = kern.compact and bound.scaled and q_scale is None and kern.norm_metric
    if algorithm == "neighbors":
        if not radius_ok:
            raise ValueError("algorithm='neighbors' with a fixed bandwidth cannot take per-query scales "
                             "or bandwidths beyond the float range; use algorithm='dense'")
        return "neighbors"
    if algorithm == "dense":
        return "dense"
    if compiled and bound.n_features <= COMPILED_MAX_FEATURES:
        return "compiled"
    if radius_ok and _few_in_support(bound, Q):
        return "neighbors"
    return "dense"


def _few_in_support(bound, Q, probe=64, subset=20_000, fraction=0.05):
    """Estimate, from a probe of queries against a subset of samples, whether a radius query
    beats a full pass (few samples inside the support, low dimension)."""
    if bound.n_features > 16 or bound.n_samples < 2000:
        return False
    from .paths import log_weight_block

    rng = np.random.default_rng(0)
    rows = rng.choice(len(Q), size=min(probe, len(Q)), replace=False)
    cols = np.sort(rng.choice(bound.n_samples, size=min(subset, bound.n_samples), replace=False))
    L, _ = log_weight_block(bound, Q[rows], cols)
    return np.isfinite(L).mean() < fraction
