"""The engine: the one place where kernel weights meet values.

* :func:`bind` — a kernel bound to its samples once, for passes on any array library (estimators
  keep the :class:`Binding` from ``fit``; NumPy samples are held in a :class:`BoundKernel`);
* :class:`BoundKernel` — a kernel bound to its samples (bandwidth, centring, indexes, sample
  weights), with the operations every model needs: weighted sums, weight blocks (for models that
  fit per query: the localization trick for arbitrary estimators), nearest samples;
  :class:`EngineOptions` — how a pass runs (empty policy, path, blocks, memory, threads);
* :func:`local_mean`, :func:`local_sums` — streaming weighted sums with an online log-sum-exp
  (dense BLAS path, neighbour path, compiled compact pass), leave-one-out, empty-neighbourhood policy;
* :func:`local_covariance`, :func:`local_polynomial` — the samples' weighted mean and covariance
  about each query, and batched local least squares;
  :class:`KDSurface` — the k-d tree and cubic blend of the interpolated LOESS surface;
* :func:`iterate` — the fixed-point driver (mean shift, relaxation labeling, Hopfield retrieval);
* :func:`prototype_weights` — normalised memberships of prototype-centred kernels (TSK, RBF nets);
* :func:`patch_local_mean` — the non-local (patch-similarity) local mean of images;
* :func:`reconstruction_gradient` — the gradient of a local mean's error w.r.t. its sample positions.
"""
from .blocks import block_sizes, map_blocks
from .binding import Binding, bind
from .bound import BoundKernel, BoundValues
from .iteration import FixedPoint, iterate
from .local_mean import LocalSums, local_mean, local_sums, make_kernel
from .loess_surface import KDSurface
from .options import EngineOptions
from .patches import patch_local_mean
from .polynomial import LocalPolynomialFit, local_covariance, local_polynomial
from .prototypes import prototype_weights
from .reconstruction import reconstruction_gradient
from .stream import OnlineLogSumExp, augment

__all__ = ["BoundKernel", "BoundValues", "Binding", "bind", "EngineOptions", "FixedPoint", "KDSurface", "LocalPolynomialFit", "LocalSums", "OnlineLogSumExp",
           "augment", "block_sizes", "iterate", "local_covariance", "local_mean", "local_polynomial",
           "local_sums",
           "make_kernel", "map_blocks", "patch_local_mean", "prototype_weights", "reconstruction_gradient"]
