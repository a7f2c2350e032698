"""The localization trick for any estimator that accepts ``sample_weight``."""
from __future__ import annotations


import numpy as np
from numpy.typing import ArrayLike
from joblib import Parallel, delayed
from sklearn.base import (BaseEstimator, ClassifierMixin, MetaEstimatorMixin, RegressorMixin, _fit_context, clone,
                          is_classifier)
from sklearn.utils import get_tags
from sklearn.utils._param_validation import HasMethods
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, has_fit_parameter, validate_data

from .._params import BANDWIDTH_CONSTRAINT, N_JOBS_CONSTRAINT, N_NEIGHBORS_CONSTRAINT, PROFILE_CONSTRAINT, non_negative
from .._validation import check_class_labels, check_regression_target
from ..engine import BoundKernel, make_kernel, resolve_n_jobs
from ..kernels.bandwidth import resolve_bandwidth
from ._base import FLOATS, _is_default, check_sample_weight, default_bandwidth, warn_far_bandwidth
from ..engine import map_queries
from ..exceptions import EmptyNeighbourhoodWarning, warn

BLOCK = 128  # queries whose weights are computed in one engine call


def _inner_has(name):
    return lambda self: hasattr(self.estimator, name)


class Localized(MetaEstimatorMixin, BaseEstimator):
    """Any weighted estimator made local: one fit per query, weighted by the kernel.

    .. math::

        \\theta^*(x^*) = \\arg\\min_\\theta \\sum_i K(x^*, x_i)\\, \\ell(\\theta; x_i, y_i),
        \\qquad \\hat y(x^*) = f(x^*; \\theta^*(x^*))

    realised as ``clone(estimator).fit(X, y, sample_weight=K(x*, X)).predict(x*)``. The kernel
    is any distance profile of :class:`localkit.Kernel` (weights are the raw ``K``, with
    ``K(x, x) = 1``, so an estimator's own regularisation keeps its meaning), the values are the
    training targets, the local model is ``estimator``: ``Localized(LinearRegression())`` is
    local linear regression, ``Localized(LogisticRegression())`` local logistic regression.
    It is a regressor or a classifier as ``estimator`` is.

    Each query's fit is its own problem, so the loop over queries is inherent; the weights of a
    block of queries come from one engine call and blocks run in parallel with joblib.

    Parameters
    ----------
    estimator : estimator object
        Must have ``fit(X, y, sample_weight=...)`` and ``predict``.
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy"}, default="gaussian"
        A distance profile of :class:`localkit.Kernel` (not "softmax": ``K(x, x) = 1``);
        scikit-learn's names "rbf", "tophat", "flat", "exponential", "linear" and "quartic" are
        accepted for "gaussian", "uniform", "uniform", "laplacian", "triangular" and "biweight".
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
        ``h``, one per feature for an array, or a rule resolved on the samples as in
        :class:`localkit.LocalMeanRegressor`, weighted by ``sample_weight`` ("sj" takes equal
        weights only).
    n_neighbors : int or None, default=None
        Balloon kNN bandwidth; with a compact profile only the nearest samples carry weight.
    min_weight : float, default=0.0
        Samples whose weight ``c_i K(x*, x_i) < min_weight`` are left out of the query's fit
        (speed; ``c_i`` = 1 without ``sample_weight``); samples with zero weight are always left
        out, and by default no sample with positive weight is. Every profile has ``K <= 1``
        (``K(x, x) = 1``), so a ``min_weight`` above 1 (above ``max c_i`` with sample weights)
        would leave out every sample at every query and is a ``ValueError`` at ``fit``. Below
        that bound, a query whose samples all weigh less than ``min_weight`` falls back to the
        target of its nearest sample, and ``predict`` warns with the number of such queries.
    n_jobs : int or None, default=None
        joblib workers over query blocks (None: one).

    Attributes
    ----------
    classes_ : ndarray (classifiers)
        The global classes; a class absent from a neighbourhood gets probability 0.
    bandwidth_ : float or ndarray
    weights_ : BoundKernel
        The kernel bound to the training samples (the engine's object that gives the weights of
        a block of queries; internal).
    X_fit_, y_fit_ : the training data (samples of positive weight).
    sample_weight_ : ndarray of shape (n_samples_fit,) or None
        Their weights ``c_i``, which multiply ``K(x*, x_i)``.

    Notes
    -----
    A query with no sample of positive weight (outside every compact support) gets the target
    of its nearest sample, as does a query whose samples all weigh less than ``min_weight``
    (that one with a ``UserWarning``); a neighbourhood holding one class predicts it with
    probability 1.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from sklearn.linear_model import LogisticRegression
    >>> from localkit import Localized
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = Localized(LogisticRegression(), bandwidth=1.0).fit(X, y)
    >>> clf.predict(X[[0, 60, 120]])
    array([0, 1, 2])
    """

    def __init__(self, estimator, kernel="gaussian", bandwidth=1.0, n_neighbors=None, min_weight=0.0,
                 n_jobs=None):
        self.estimator = estimator
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.min_weight = min_weight
        self.n_jobs = n_jobs

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        inner = get_tags(self.estimator)
        tags.estimator_type = inner.estimator_type
        tags.classifier_tags = inner.classifier_tags
        tags.regressor_tags = inner.regressor_tags
        tags.target_tags.required = True
        tags.target_tags.multi_output = inner.target_tags.multi_output
        return tags

    _parameter_constraints: dict = {
        "estimator": [HasMethods(["fit", "predict"])],
        "kernel": PROFILE_CONSTRAINT,  # weights K(x, x) = 1: a distance profile
        "bandwidth": BANDWIDTH_CONSTRAINT,  # no "cv": each leave-one-out score would need n fits
        "n_neighbors": N_NEIGHBORS_CONSTRAINT,
        "min_weight": non_negative(),
        "n_jobs": N_JOBS_CONSTRAINT,
    }

    @_fit_context(prefer_skip_nested_validation=False)  # the inner estimator validates its own
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Check the estimator, bind the kernel to ``X``. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0`` multiplies the kernel weights, so
        each query's fit gets ``sample_weight = c_i K(x*, x_i)``; samples of zero weight are
        dropped here (also from kNN distances), and bandwidth rules take the weighted spread
        (as ``gaussian_kde(weights=c)``). A regressor's ``y`` may be 2-D if the estimator's is.
        """
        if not has_fit_parameter(self.estimator, "sample_weight"):
            raise TypeError(f"estimator {type(self.estimator).__name__} does not accept sample_weight in "
                            "fit, so it cannot be localized")
        classifier = is_classifier(self.estimator)
        # regressors take 2-D targets when the inner estimator does (it says so in its own fit)
        X, y = validate_data(self, X, y, dtype=FLOATS, y_numeric=not classifier, multi_output=not classifier)
        if classifier:
            check_class_labels(y)
            self.classes_ = np.unique(y)  # a class seen only with zero weight gets probability 0
        else:  # string targets would fit (no arithmetic yet) and fail at the first prediction
            y = check_regression_target(y, X.dtype)
        c = check_sample_weight(sample_weight, X)
        if c is not None:
            live = c > 0
            X, y, c = X[live], y[live], c[live]
        top = 1.0 if c is None else float(np.max(c))  # the largest weight c_i K any query can give
        if self.min_weight > top:
            given = "" if c is None else f" times sample_weight, whose largest is {top:.6g}"
            raise ValueError(f"min_weight={self.min_weight!r} leaves out every sample at every query: the weights "
                             f"K(x*, x_i) are at most 1{given}; min_weight must be in [0, {top:.6g}]")
        bandwidth = self.bandwidth
        if c is not None and isinstance(bandwidth, str):  # a rule, weighted as the fits are
            bandwidth = resolve_bandwidth(bandwidth, X, sample_weight=c)
        self.weights_ = BoundKernel(make_kernel(self.kernel, bandwidth, self.n_neighbors), X)
        self.bandwidth_ = self.weights_.h
        if self.n_neighbors is None and not isinstance(self.bandwidth, str) and len(X) > 1:
            warn_far_bandwidth(self.bandwidth_, X, c, default=_is_default(self.bandwidth, default_bandwidth(self)),
                               tends_to=f"the global model ({type(self.estimator).__name__} fitted with equal weights)")
        self.X_fit_, self.y_fit_, self.sample_weight_ = X, y, c
        return self

    def _local(self, X, method):
        """``method`` ("predict" or "predict_proba") of each query's local fit."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        blocks = [slice(i, min(i + BLOCK, len(X))) for i in range(0, len(X), BLOCK)]
        workers = resolve_n_jobs(self.n_jobs)
        parts = Parallel(n_jobs=min(workers, len(blocks)))(
            delayed(self._local_block)(X[s], method) for s in blocks)
        # counted in the workers, warned here: a joblib process's warnings would not reach the caller
        dropped = sum(n for _, n in parts)
        if dropped:
            warn(EmptyNeighbourhoodWarning(
                f"some queries have no sample of weight >= min_weight={self.min_weight!r} (their heaviest samples "
                "weigh less); they got the target of their nearest sample (the warning's n_empty and n_queries "
                "say how many). Lower min_weight or widen the bandwidth.", n_empty=dropped, n_queries=len(X)))
        return np.concatenate([out for out, _ in parts])

    def _local_block(self, Q, method):
        """The block's answers, and how many of its queries min_weight alone left without samples."""
        W = np.exp(self.weights_.log_weights(Q))
        if self.sample_weight_ is not None:
            W *= self.sample_weight_
        dropped = int(np.sum(np.any(W > 0, axis=1) & ~np.any(W >= self.min_weight, axis=1)))
        return np.array([self._fit_one(q, w, method) for q, w in zip(Q, W)]), dropped

    def _fit_one(self, q, w, method):
        keep = (w > 0) & (w >= self.min_weight)
        X, y = self.X_fit_[keep], self.y_fit_[keep]
        proba = method == "predict_proba"
        if not keep.any():  # empty neighbourhood: the nearest sample's target
            y = self.y_fit_[self.weights_.nearest(q[None])]
        if proba and len(np.unique(y)) == 1:
            return (self.classes_ == y[0]).astype(float)
        if not keep.any() or (is_classifier(self.estimator) and len(np.unique(y)) == 1):
            return y[0]
        est = clone(self.estimator).fit(X, y, sample_weight=w[keep])
        if not proba:
            return est.predict(q[None])[0]
        out = np.zeros(len(self.classes_))
        out[np.searchsorted(self.classes_, est.classes_)] = est.predict_proba(q[None])[0]
        return out

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """The prediction of each query's local fit at the query."""
        check_is_fitted(self)
        if is_classifier(self.estimator) and hasattr(self.estimator, "predict_proba"):
            return self.classes_[np.argmax(self.predict_proba(X), axis=1)]
        return self._local(X, "predict")

    @available_if(_inner_has("predict_proba"))
    @map_queries
    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities of each query's local fit, over the global ``classes_``."""
        proba = self._local(X, "predict_proba")
        return proba.astype(np.float32 if getattr(X, "dtype", None) == np.float32 else np.float64, copy=False)

    def score(self, X, y, sample_weight=None):
        """Accuracy for a classifier, R^2 for a regressor."""
        mixin = ClassifierMixin if is_classifier(self) else RegressorMixin
        return mixin.score(self, X, y, sample_weight=sample_weight)
