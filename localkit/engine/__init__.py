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
from .affinity import BoundAffinity
from .backends import backend_of, map_queries
from .blocks import DEFAULT_MEMORY_BUDGET, block_sizes, map_blocks, resolve_n_jobs
from .binding import Binding, bind
from .bound import BoundKernel, BoundValues
from .cells import cell_grid, cell_loo_sums, cell_refusals
from .iteration import FixedPoint, iterate, row_max_abs_change, row_norm_change, sum_abs_change
from .local_mean import LocalSums, local_mean, local_sums, make_kernel
from .local_models.loess_surface import KDSurface
from .options import EngineOptions
from .passes import neighbors  # the neighbour searches (models that need k nearest samples themselves)
from .passes.binned import TOLERANCE as BINNED_TOLERANCE, BinnedDistribution
from .patches import gaussian_patch_weights, patch_local_mean, uniform_patch_weights
from .planner import Plan, sparse_refusals
from .local_models.polynomial import (LocalPolynomialFit, binned_polynomial_refusals, check_design_fits, local_covariance,
                                      local_polynomial)
from .prototypes import prototype_weights
from .reconstruction import (bind_points, check_smooth_kernel, chained_query_gradient,
                             chained_reconstruction_gradient, reconstruction_gradient)
from .results import check_empty
from .stream import OnlineLogSumExp, augment
from .twins import twin_groups

__all__ = [
    "augment",
    "BoundAffinity",
    "backend_of",
    "bind",
    "bind_points",
    "binned_polynomial_refusals",
    "Binding",
    "block_sizes",
    "BoundKernel",
    "BINNED_TOLERANCE",
    "BinnedDistribution",
    "BoundValues",
    "cell_grid",
    "cell_loo_sums",
    "cell_refusals",
    "chained_query_gradient",
    "check_empty",
    "chained_reconstruction_gradient",
    "check_design_fits",
    "check_smooth_kernel",
    "DEFAULT_MEMORY_BUDGET",
    "EngineOptions",
    "FixedPoint",
    "gaussian_patch_weights",
    "uniform_patch_weights",
    "iterate",
    "KDSurface",
    "local_covariance",
    "local_mean",
    "local_polynomial",
    "local_sums",
    "LocalPolynomialFit",
    "LocalSums",
    "make_kernel",
    "map_blocks",
    "map_queries",
    "neighbors",
    "OnlineLogSumExp",
    "patch_local_mean",
    "Plan",
    "prototype_weights",
    "reconstruction_gradient",
    "resolve_n_jobs",
    "row_max_abs_change",
    "row_norm_change",
    "sparse_refusals",
    "sum_abs_change",
    "twin_groups",
]

# the first call of a compiled path on a cold numba cache says so when it compiles for long (localkit._compiling)
from .._compiling import announce_compilation  # noqa: E402

announce_compilation()
