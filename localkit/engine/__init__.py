"""The engine: the one place where kernel weights meet values.

* :func:`backend_of` — where arrays live (NumPy, a device under array-API dispatch, a dask
  cluster): the checks and encoders a model calls, written once for every backend;
  :func:`map_queries` maps an in-memory estimator's method over a dask array's chunks;
* :func:`bind` — a kernel bound to its samples once, for passes on any array library (estimators
  keep the :class:`Binding` from ``fit``; NumPy samples are held in a :class:`BoundKernel`);
* :class:`BoundKernel` — a kernel bound to its samples (bandwidth, centring, indexes, sample
  weights), with the operations every model needs: weighted sums, weight blocks (for models that
  fit per query: the localization trick for arbitrary estimators), nearest samples;
  :class:`EngineOptions` — how a pass runs (empty policy, path, blocks, memory, threads);
  :func:`sparse_refusals` — why a kernel cannot be bound to sparse (CSR) samples, which take the
  neighbour path only;
* :func:`local_mean`, :func:`local_sums` — streaming weighted sums with an online log-sum-exp
  (dense BLAS path, neighbour path, compiled compact pass), leave-one-out, empty-neighbourhood policy;
* :func:`local_covariance`, :func:`local_polynomial` — the samples' weighted mean and covariance
  about each query, and batched local least squares;
  :class:`KDSurface` — the k-d tree and cubic blend of the interpolated LOESS surface;
* :func:`cell_loo_sums` — leave-one-out sums of a mixed product kernel by categorical cells and
  binned Gaussian sums (the objective of bandwidth searches at scale);
* :func:`iterate` — the fixed-point driver (mean shift, relaxation labeling, Hopfield retrieval);
* :func:`prototype_weights` — normalised memberships of prototype-centred kernels (TSK, RBF nets);
* :func:`patch_local_mean` — the non-local (patch-similarity) local mean of images;
* :func:`reconstruction_gradient` — the gradient of a local mean's error w.r.t. its sample positions;
* :class:`BoundAffinity` — local means whose weights are given (an affinity matrix or a function).
"""
from importlib import import_module

# public name -> (module of localkit.engine, its name there): imported on first use, so that
# ``localkit.nn`` takes the planner and the log-sum-exp state without the estimators' modules
_EXPORTS = {
    "augment": ("stream", "augment"),
    "backend_of": ("backends", "backend_of"),
    "bind": ("binding", "bind"),
    "bind_points": ("reconstruction", "bind_points"),
    "Binding": ("binding", "Binding"),
    "binned_polynomial_refusals": ("local_models.polynomial", "binned_polynomial_refusals"),
    "BINNED_TOLERANCE": ("passes.binned", "TOLERANCE"),
    "BinnedDistribution": ("passes.binned", "BinnedDistribution"),
    "block_sizes": ("blocks", "block_sizes"),
    "BoundAffinity": ("affinity", "BoundAffinity"),
    "BoundKernel": ("bound", "BoundKernel"),
    "BoundValues": ("bound", "BoundValues"),
    "cell_grid": ("cells", "cell_grid"),
    "cell_loo_sums": ("cells", "cell_loo_sums"),
    "cell_refusals": ("cells", "cell_refusals"),
    "chained_query_gradient": ("reconstruction", "chained_query_gradient"),
    "chained_reconstruction_gradient": ("reconstruction", "chained_reconstruction_gradient"),
    "check_design_fits": ("local_models.polynomial", "check_design_fits"),
    "check_empty": ("results", "check_empty"),
    "check_smooth_kernel": ("reconstruction", "check_smooth_kernel"),
    "DEFAULT_MEMORY_BUDGET": ("blocks", "DEFAULT_MEMORY_BUDGET"),
    "EngineOptions": ("options", "EngineOptions"),
    "FixedPoint": ("iteration", "FixedPoint"),
    "gaussian_patch_weights": ("patches", "gaussian_patch_weights"),
    "iterate": ("iteration", "iterate"),
    "KDSurface": ("local_models.loess_surface", "KDSurface"),
    "local_covariance": ("local_models.polynomial", "local_covariance"),
    "local_mean": ("mean", "local_mean"),
    "local_polynomial": ("local_models.polynomial", "local_polynomial"),
    "local_sums": ("mean", "local_sums"),
    "LocalPolynomialFit": ("local_models.polynomial", "LocalPolynomialFit"),
    "LocalSums": ("results", "LocalSums"),
    "make_kernel": ("bound", "make_kernel"),
    "map_blocks": ("blocks", "map_blocks"),
    "map_queries": ("backends", "map_queries"),
    "neighbors": ("passes.neighbors", None),  # the neighbour searches (models that need k nearest samples themselves)
    "OnlineLogSumExp": ("stream", "OnlineLogSumExp"),
    "patch_local_mean": ("patches", "patch_local_mean"),
    "Plan": ("planner", "Plan"),
    "prototype_weights": ("prototypes", "prototype_weights"),
    "reconstruction_gradient": ("reconstruction", "reconstruction_gradient"),
    "resolve_n_jobs": ("blocks", "resolve_n_jobs"),
    "row_max_abs_change": ("iteration", "row_max_abs_change"),
    "row_norm_change": ("iteration", "row_norm_change"),
    "sparse_refusals": ("planner", "sparse_refusals"),
    "sum_abs_change": ("iteration", "sum_abs_change"),
    "twin_groups": ("twins", "twin_groups"),
    "uniform_patch_weights": ("patches", "uniform_patch_weights"),
}
__all__ = sorted(_EXPORTS, key=str.lower)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'localkit.engine' has no attribute {name!r}")
    module, attr = _EXPORTS[name]
    value = import_module(f"localkit.engine.{module}")
    value = value if attr is None else getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
