"""Local layers for scikit-learn pipelines: one local-mean step over the training samples."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import _check_feature_names_in, check_is_fitted, validate_data

from .._params import ANY_METRIC_CONSTRAINT
from ._base import FLOATS, LocalMeanParams

VALUES = ("inputs", "targets")


class LocalMeanTransformer(LocalMeanParams, TransformerMixin, BaseEstimator):
    """One local-mean layer: each row becomes the local mean of the training samples' values.

    .. math::

        T(x^*) = \\frac{\\sum_i K(x^*, x_i)\\, v_i}{\\sum_j K(x^*, x_j)},
        \\qquad v_i = x_i \\ (\\text{values="inputs"}) \\ \\text{or} \\ y_i \\ (\\text{values="targets"})

    With ``values="inputs"`` this is one step of attention over the data set (queries: the rows,
    keys and values: the training samples), i.e. one mean-shift step towards the training data;
    with ``values="targets"`` it is the Nadaraya–Watson prediction as a feature. Layers chain in
    a pipeline, each layer's output the next one's input, which makes
    ``make_pipeline(LocalMeanTransformer(...), LocalMeanTransformer(...), LocalPolynomialRegressor(...))``
    a hierarchical local model.

    **Training rows.** ``transform`` weighs every training sample. ``fit_transform(X, y)`` (what a
    pipeline calls while fitting) returns, with ``leave_one_out=True``, the leave-one-out local
    means: each training row without its own weight, which is how a new sample sees the training
    set. Otherwise every training row would carry its own value (with ``values="targets"``: its
    own target, a leak), and the next layer would be fitted on rows unlike those it predicts, as
    with scikit-learn's ``TargetEncoder``. ``leave_one_out=False`` gives
    ``fit_transform(X) == fit(X).transform(X)``.

    **When stacking helps.** A local-mean layer on the inputs moves each point towards the local
    mean of its neighbourhood at scale ``h``: it removes structure finer than ``h`` (noise off
    the data's manifold) and keeps coarser structure. A stack helps when the inputs carry noise
    or nuisance variation at a small scale while the target varies on a larger one; where the
    target's fine structure matters, the layer blurs it and the flat model wins. Measured in
    ``benchmarks/bench_hierarchical.py`` (see ``benchmarks/RESULTS.md``).

    Parameters
    ----------
    kernel, bandwidth, n_neighbors, sample_neighbors, metric, empty, algorithm, n_jobs
        The kernel and engine options of :class:`~localkit.LocalMeanRegressor`, with these
        values: ``kernel`` a profile name ("gaussian", "epanechnikov", "tricube", "biweight",
        "triweight", "triangular", "uniform", "cosine", "laplacian", "cauchy", or
        scikit-learn's aliases), "softmax" or a :class:`~localkit.Kernel`; ``bandwidth`` a
        number, one per feature, "scott", "silverman", "isj", "sj" or "cv" (``h`` selected by
        the leave-one-out error of the values); ``metric`` "euclidean", "manhattan",
        "chebyshev", "minkowski", "cosine", "precomputed" or a callable; ``empty`` "nearest",
        "nan" or "raise"; ``algorithm`` "auto", "dense", "neighbors", "compiled", "binned" or
        "streamed".
    values : {"inputs", "targets"}, default="inputs"
        What the local mean averages: the training samples themselves or their targets ``y``.
    leave_one_out : bool, default=True
        ``fit_transform`` drops each training row's own weight (see above).

    Attributes
    ----------
    values_fit_ : ndarray of shape (n_samples, n_outputs), the values averaged.
    bandwidth_, kernel_, sample_scale_, X_fit_ : as in :class:`~localkit.LocalMeanRegressor`.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LocalMeanTransformer
    >>> X = np.array([[0.0], [0.2], [5.0]])
    >>> LocalMeanTransformer(bandwidth=1.0).fit(X).transform([[0.1], [4.0]]).round(2)
    array([[0.1 ],
           [4.99]])
    >>> LocalMeanTransformer(bandwidth=1.0).fit_transform(X).round(2)  # leave-one-out on the training rows
    array([[0.2 ],
           [0.  ],
           [0.15]])
    """

    def __init__(self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, sample_neighbors=None,
                 metric="euclidean", empty="nearest", algorithm="auto", n_jobs=None, values="inputs",
                 leave_one_out=True):
        # its own parameters only (no p, no sample_weight_type: fit takes no weights)
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.sample_neighbors = sample_neighbors
        self.metric = metric
        self.empty = empty
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.values = values
        self.leave_one_out = leave_one_out

    # its own parameters only: no p, sample_weight_type, weights or metric_params, and the metrics
    # the engine measures as they are (no coordinates mapped at fit)
    _parameter_constraints: dict = {**{k: v for k, v in LocalMeanParams._parameter_constraints.items()
                                       if k not in ("p", "sample_weight_type", "weights", "metric_params")},
                                    "metric": ANY_METRIC_CONSTRAINT, "values": [StrOptions(set(VALUES))],
                                    "leave_one_out": ["boolean"]}

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Store the training samples and their values, resolve the kernel. Returns ``self``."""
        if self.values == "targets":
            if y is None:
                raise ValueError("values='targets' averages the targets: fit needs y")
            X, y = validate_data(self, X, y, dtype=FLOATS, multi_output=True, y_numeric=True)
            V = y.astype(X.dtype, copy=False).reshape(len(X), -1)
        else:
            X = validate_data(self, X, dtype=FLOATS)
            V = X
        self._fit_sample_scales(X)
        self._fit_kernel(X, V)
        self.X_fit_, self.values_fit_ = X, V
        self._bind(X, V)
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """The local mean of the training values at each row of ``X`` (every training sample weighs)."""
        X = self._validate_queries(X)
        return self._local_sums(X).mean

    def fit_transform(self, X: ArrayLike, y: None = None) -> np.ndarray:
        """Fit, then the training rows' local means: leave-one-out with ``leave_one_out=True``."""
        self.fit(X, y)
        if not self.leave_one_out:
            return self.transform(X)
        return self._local_sums(None, exclude_self=True, queries_are_samples=True).mean

    def get_feature_names_out(self, input_features=None):
        """The input names (``values="inputs"``) or ``localmeantransformer_y0, ...`` (targets)."""
        check_is_fitted(self)
        names = _check_feature_names_in(self, input_features)
        if self.values == "inputs":
            return names
        return np.asarray([f"localmeantransformer_y{i}" for i in range(self.values_fit_.shape[1])], dtype=object)
