"""The engine's host paths, one function each with one signature (the planner picks one:
:mod:`localkit.engine.planner`; on a device the one pass is
:func:`localkit.engine.backends.array_api.streamed_path`).

``path(bound, queries, Q, V_aug, q_scale, exclude_self) -> (S, shift)``: ``bound`` is the
:class:`~localkit.engine.BoundKernel`, ``queries`` the caller's points (``None``: the samples),
``Q`` the same in the engine's coordinates, ``V_aug`` the values with a column of ones (the binned
pass takes the queries as given and the values without that column: it bins the weights). The true
weighted sums are ``S * exp(shift[:, None])``: ``S[:, -1]`` is the weight sum,
``S[:, :-1] / S[:, -1:]`` the local mean.

* **dense** (:mod:`~localkit.engine.passes.dense`) — blocks of queries against blocks of samples,
  log-weights from one matrix product, an online log-sum-exp where weights underflow (compact
  profiles in many features: k-d tree leaves, those out of reach skipped by bounding boxes);
* **neighbors** (:mod:`~localkit.engine.passes.neighbors`) — a tree finds the k nearest samples
  (compact kNN kernels) or the samples within the support (compact profiles with a fixed bandwidth);
* **compiled** (:mod:`~localkit.engine.passes.compiled`) — one numba pass over samples sorted
  into strips;
* **binned** (:mod:`~localkit.engine.passes.binned`) — linear binning onto a grid, FFT
  convolution and multilinear interpolation, in 1 to 3 features (approximate, asked for only);
* **truncated** (:func:`~localkit.engine.passes.neighbors.truncated_path`) — a smooth profile summed
  over the k-means clusters of samples that carry each query's weight, visited until the weight
  the others can hold, bounded by ``sum_c W_c k(max(0, |q - c| - r_c) / h)``, is at most
  ``tolerance`` of the weight kept (returns that bound too).

The dense path and the device's pass form their blocks of log-weights each in its own way and sum
them by one loop, :func:`~localkit.engine.passes.streamed.stream_sums`.
"""
from .binned import binned_path
from .compiled import compiled_path
from .dense import dense_path
from .neighbors import neighbor_path, truncated_path

#: The planner's host paths by name (a device runs :func:`localkit.engine.backends.array_api.streamed_path`).
#: ``V_aug`` are the values and a column of ones; the paths apply the sample weights: the dense
#: path adds their logs to the log-weights (:mod:`~localkit.engine.passes.streamed` says why), the
#: others multiply.
PATHS = {"dense": dense_path, "neighbors": neighbor_path, "compiled": compiled_path, "binned": binned_path,
         "truncated": truncated_path}
