"""Parameter constraints, stated once and checked by scikit-learn's own machinery.

Each estimator lists its parameters' allowed values in ``_parameter_constraints`` (built from the
pieces below) and checks them at the start of ``fit`` with ``self._validate_params()``; public
functions use :func:`sklearn.utils._param_validation.validate_params` with the same pieces. A
violation raises scikit-learn's ``InvalidParameterError`` (a subclass of both ``ValueError`` and
``TypeError``) whose message names the parameter, the allowed values and the value received::

    The 'n_jobs' parameter of LocalMeanRegressor must be an int in the range (-inf, -1], an int
    in the range [1, inf) or None. Got 0 instead.

What depends on the data (``n_neighbors <= n_samples``, a bandwidth array of one entry per
feature) is checked in ``fit`` by :mod:`localkit._validation`.
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import StrOptions

from ._constraints import Number, non_negative, positive  # noqa: F401 (the pieces, for the estimators)
from .engine.options import POLYNOMIAL_ALGORITHMS, constraints as engine_constraints
from .kernels import KERNEL_NAMES, METRICS, RULES
from .kernels.bandwidth_matrix import MATRIX_RULES
from .kernels.kernel import LINEAR_METRICS, NORM_METRICS
from .kernels.profiles import ALIASES


#: the engine options' constraints, declared once in :func:`localkit.engine.options.constraints`
ENGINE_CONSTRAINTS = engine_constraints()
#: a profile name, an alias of one, or "softmax" (functions also take a :class:`~localkit.Kernel`)
KERNEL_CONSTRAINT = [StrOptions(set(KERNEL_NAMES) | set(ALIASES))]
#: a distance profile (no softmax: the models that need a distance, such as densities and mean shift)
PROFILE_CONSTRAINT = [StrOptions(set(KERNEL_NAMES) - {"softmax"} | set(ALIASES))]
#: a finite positive number, a per-feature array (checked against the data in fit) or a rule
BANDWIDTH_CONSTRAINT = [Number(Real, 0, np.inf, closed="neither"), StrOptions(set(RULES) | set(MATRIX_RULES)),
                        "array-like"]
#: the estimators that can select it by leave-one-out also take "cv"
BANDWIDTH_CV_CONSTRAINT = [Number(Real, 0, np.inf, closed="neither"),
                           StrOptions(set(RULES) | set(MATRIX_RULES) | {"cv"}),
                           "array-like"]
#: None, or a count of neighbours (the upper bound n_samples is checked in fit)
N_NEIGHBORS_CONSTRAINT = [Number(Integral, 1, None, closed="left"), None]
#: scikit-learn's convention: None (1 unless a joblib context says otherwise), -1 all cores, never 0
N_JOBS_CONSTRAINT = ENGINE_CONSTRAINTS["n_jobs"]
#: the norms of x* - x (models that need coordinates: local polynomials, local PCA)
METRIC_CONSTRAINT = [StrOptions(set(NORM_METRICS))]
#: any distance the engine takes (local means): also cosine, precomputed and callables
ANY_METRIC_CONSTRAINT = [StrOptions(set(METRICS)), callable]
#: the local means' metrics: also those reduced to the euclidean on mapped coordinates at fit
#: ("seuclidean", "mahalanobis", with their matrices in ``metric_params``)
LOCAL_MEAN_METRIC_CONSTRAINT = [StrOptions(set(METRICS) | set(LINEAR_METRICS)), callable]
#: scikit-learn's neighbour weights: "uniform" (the kernel alone), "distance" (times 1 / d), a callable
WEIGHTS_CONSTRAINT = [StrOptions({"uniform", "distance"}), callable]
#: what sample weights mean: counts of repeated samples (scikit-learn's) or prior weights (R's)
SAMPLE_WEIGHT_TYPE_CONSTRAINT = [StrOptions({"frequency", "prior"})]
#: the public policies (not the engine's internal "defer")
EMPTY_CONSTRAINT = ENGINE_CONSTRAINTS["empty"][:1]
ALGORITHM_CONSTRAINT = ENGINE_CONSTRAINTS["algorithm"]
#: local polynomials' paths (no streamed form)
POLYNOMIAL_ALGORITHM_CONSTRAINT = [StrOptions(set(POLYNOMIAL_ALGORITHMS))]
#: the binned pass's grid and the error it may make (``algorithm="binned"``, or "auto" under a tolerance)
GRID_PARAMS = {name: ENGINE_CONSTRAINTS[name] for name in ("grid_size", "tolerance")}


#: the kernel parameters shared by every estimator built on :class:`localkit.models._base.LocalKernelMixin`
KERNEL_PARAMS = {
    "kernel": KERNEL_CONSTRAINT,
    "bandwidth": BANDWIDTH_CV_CONSTRAINT,
    "n_neighbors": N_NEIGHBORS_CONSTRAINT,
    "metric": METRIC_CONSTRAINT,
    "empty": EMPTY_CONSTRAINT,
    "algorithm": ALGORITHM_CONSTRAINT,
    "n_jobs": N_JOBS_CONSTRAINT,
}
