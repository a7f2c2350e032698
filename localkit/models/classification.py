"""Kernel classification: class probabilities are the local mean of one-hot labels."""
from __future__ import annotations

import dataclasses
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.exceptions import DataConversionWarning
from sklearn.utils.validation import check_is_fitted

from ..engine import backend_of
from ._base import MIXABLE_KERNEL, LocalMeanParams
from ..exceptions import LocalkitWarning, warn


class LocalMeanClassifier(LocalMeanParams, ClassifierMixin, BaseEstimator):
    """Kernel (Nadaraya–Watson) classification: the local mean of one-hot labels.

    .. math::

        \\hat p(c \\mid x^*) = \\frac{\\sum_i K(x^*, x_i)\\, [y_i = c]}{\\sum_j K(x^*, x_j)},
        \\qquad \\hat y(x^*) = \\arg\\max_c \\hat p(c \\mid x^*)

    With ``kernel="uniform", n_neighbors=k`` it is scikit-learn's ``KNeighborsClassifier(k)``
    (ties between classes go to the first class in ``classes_``; where several samples tie at
    the k-th distance, each keeps a valid set of k of them, not necessarily the same); with
    ``kernel="uniform"`` and a number ``bandwidth=r``, ``RadiusNeighborsClassifier(r)``.
    ``weights`` multiplies the kernel by a factor of the distance (``K(x^*, x_i)`` above becomes
    ``K(x^*, x_i) g_i``, as in :class:`localkit.LocalMeanRegressor`).

    Sparse (CSR) ``X`` is taken as by :class:`localkit.LocalMeanRegressor` (a compact profile
    with ``n_neighbors`` or a number ``bandwidth``, never densified): probabilities and labels
    then equal those of scikit-learn's ``KNeighborsClassifier`` / ``RadiusNeighborsClassifier``
    on the same sparse ``X``.

    A 2-D ``y`` (n_samples, n_outputs) fits one classifier per output column over the same
    weights, as ``KNeighborsClassifier``: ``classes_`` is then a list of arrays,
    :meth:`predict_proba` a list of arrays and :meth:`predict` an array of shape
    (n_queries, n_outputs).

    Parameters
    ----------
    kernel, bandwidth, n_neighbors, sample_neighbors, metric, p, empty, algorithm, n_jobs, \
sample_weight_type, weights, metric_params
        As in :class:`localkit.LocalMeanRegressor`, with the same accepted values: ``kernel``
        a profile name ("gaussian", "epanechnikov", "tricube", "biweight", "triweight",
        "triangular", "uniform", "cosine", "laplacian", "cauchy", or scikit-learn's aliases),
        "softmax", a :class:`localkit.Kernel` (``"cv"`` inside it chosen by the Brier score) or a
        list of them (mixture weights ``kernel_weights_`` on the simplex minimising the
        leave-one-out log-loss, ``loo_loss_``); ``bandwidth`` a number, one per feature,
        "scott", "silverman", "isj", "sj" or "cv" (the leave-one-out squared error of the
        class probabilities, the Brier score), or a full bandwidth matrix ("hpi", "hscv", a
        (d, d) array; ``bandwidth_matrix_``, as :class:`localkit.LocalMeanRegressor`); ``metric``
        "euclidean", "manhattan", "chebyshev", "minkowski", "seuclidean", "mahalanobis",
        "cosine", "precomputed" or a callable; ``empty`` "nearest", "nan" or "raise";
        ``algorithm`` "auto", "dense", "neighbors", "compiled", "binned", "streamed" or "approximate";
        ``sample_weight_type`` "frequency" or "prior"; ``weights`` "uniform", "distance" or a
        callable. ``empty="nearest"`` gives a query outside every compact support the label of
        its nearest training sample.
    outlier_label : label, "most_frequent", list of labels (one per output) or None, default=None
        What a query with an empty neighbourhood (no training sample in a compact kernel's
        support, or none left a weight by ``weights``) is given, as in scikit-learn's
        ``RadiusNeighborsClassifier``: its :meth:`predict` is that label (which need not be a
        class, but must be of the classes' type), its :meth:`predict_proba` is 1 for that class
        and 0 for the others (all 0, with a warning, for a label that is not a class).
        "most_frequent": the class of largest total ``sample_weight`` (the most frequent without
        weights; the first on ties). None: the ``empty`` policy decides.
    grid_size : int or tuple of ints, optional
        Grid points per feature of the binned pass (``algorithm="binned"``; one int, or one per
        feature); by default the fewest whose error bound meets ``tolerance``.
    tolerance : float in (0, 1), optional
        The relative error accepted from the binned pass, against its bound ``8 (delta / h)^2``
        (``4 delta / h`` for the triangular, Laplacian and uniform profiles; ``delta`` the grid
        spacing, see :doc:`/user_guide/binned`). It sets the default grid (``1e-4`` when None);
        given, ``algorithm="auto"`` also takes the binned pass where its bound on that grid meets
        it (never otherwise). With ``bandwidth="cv"`` inside a ``Kernel`` of Gaussian factors (at
        most three continuous columns) and categorical factors, the search evaluates its
        leave-one-out loss on cell sums within it (:mod:`localkit.models.cv_scale`). With
        ``algorithm="approximate"`` and a kNN or compact kernel: the share of the true nearest
        samples the graph's search may miss, its breadth the least whose recall measured on the
        first queries, less two standard errors, is at least ``1 - tolerance``.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,), or a list of them (one per output)
    outlier_label_ : list or None
        The label given to empty neighbourhoods, one per output.
    outputs_2d_ : bool
        True when ``y`` was 2-D (with more than one column).
    bandwidth_, kernel_, X_fit_, sample_weight_ : as in :class:`localkit.LocalMeanRegressor`.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from localkit import LocalMeanClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = LocalMeanClassifier(kernel="uniform", n_neighbors=5).fit(X, y)
    >>> clf.predict(X[:3])
    array([0, 0, 0])
    >>> clf.kneighbors(X[:1], n_neighbors=2)[1]
    array([[ 0, 17]])
    """

    _parameter_constraints: dict = {**LocalMeanParams._parameter_constraints, "kernel": MIXABLE_KERNEL,
                                    # scikit-learn's RadiusNeighborsClassifier's (a str: a label or "most_frequent")
                                    "outlier_label": [Integral, Real, str, "array-like", None]}

    def __init__(self, kernel="gaussian", bandwidth="scott", n_neighbors=None, sample_neighbors=None,
                 metric="euclidean", p=2, empty="nearest", algorithm="auto", n_jobs=None,
                 sample_weight_type="frequency", weights="uniform", metric_params=None, outlier_label=None,
                 grid_size=None, tolerance=None):
        super().__init__(kernel=kernel, bandwidth=bandwidth, n_neighbors=n_neighbors,
                         sample_neighbors=sample_neighbors, metric=metric, p=p, empty=empty, algorithm=algorithm,
                         n_jobs=n_jobs, sample_weight_type=sample_weight_type, weights=weights,
                         metric_params=metric_params, grid_size=grid_size, tolerance=tolerance)
        self.outlier_label = outlier_label

    _takes_sparse = True  # CSR X on the neighbour path (see "Sparse input")

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Store the training data and the one-hot labels. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0`` multiplies the kernel,
        ``p(c | x*) = sum_i c_i K_i [y_i = c] / sum_j c_j K_j`` (as in
        :meth:`localkit.LocalMeanRegressor.fit`). Classes of zero-weight samples stay in
        ``classes_`` with probability 0. ``y`` of shape (n_samples, n_outputs): one set of
        classes per column.
        """
        X, y, backend = self._fit_data(X, y, sample_weight, multi_output=True, accept_sparse="csr")
        self._check_sparse_fit(X)
        if y.ndim == 2 and y.shape[1] == 1:  # scikit-learn's KNeighborsClassifier: one output, warned
            warn(DataConversionWarning("A column-vector y was passed when a 1d array was expected. Please change the "
                                       "shape of y to (n_samples,), for example using ravel()."))
            y = y[:, 0]
        self.outputs_2d_ = y.ndim == 2
        if self.outputs_2d_:
            if not isinstance(X, np.ndarray):
                raise ValueError("a 2-D y (several outputs) needs NumPy arrays")
            encoded = [backend.encode(y[:, k], X) for k in range(y.shape[1])]
            self.classes_ = [c for c, _ in encoded]
            self.onehot_ = np.hstack([o for _, o in encoded])
        else:
            self.classes_, self.onehot_ = backend.encode(y, X)
        self.outlier_label_ = self._fit_outlier_label(y)
        Xm = self._fit_metric(X)  # the coordinates where the metric is a plain norm
        self._fit_sample_scales(Xm)
        self._fit_kernel(Xm, y, self.sample_weight_)
        self.X_fit_ = X
        self._bind(Xm, self.onehot_)
        self._check_weights()
        return self

    #: "cv" inside a Kernel and lists of kernels are learned by the leave-one-out of the local mean
    _kernel_cv = True

    def _fit_outlier_label(self, y):
        """``outlier_label_``: one label per output (scikit-learn's checks and messages)."""
        label = self.outlier_label
        if label is None:
            return None
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        if isinstance(label, str) and label == "most_frequent":
            backend_of(y).require_in_memory("outlier_label='most_frequent'", "it counts the labels")
            Y = np.asarray(y).reshape(len(y), -1)
            c = None if self.sample_weight_ is None else np.asarray(self.sample_weight_, dtype=np.float64)
            out = []
            for k, classes_k in enumerate(classes):
                codes = np.searchsorted(np.asarray(classes_k), Y[:, k])
                out.append(np.asarray(classes_k)[np.bincount(codes, weights=c, minlength=len(classes_k)).argmax()])
            return out
        if np.ndim(label) > 0:
            if len(label) != len(classes):
                raise ValueError(f"The length of outlier_label: {label} is inconsistent with the output length: "
                                 f"{len(classes)}")
            labels = list(label)
        else:
            labels = [label] * len(classes)
        for classes_k, label_k in zip(classes, labels):
            if np.ndim(label_k) > 0:
                raise TypeError(f"The outlier_label of classes {classes_k} is supposed to be a scalar, got "
                                f"{label_k}.")
            classes_k = np.asarray(classes_k)
            if np.append(classes_k, label_k).dtype != classes_k.dtype:
                raise TypeError(f"The dtype of outlier_label {label_k} is different from the dtype of classes "
                                f"{classes_k}.")
        return labels

    def _engine_options(self):
        options = super()._engine_options()
        if self.outlier_label is None:
            return options
        # outlier_label decides the empty rows (overwritten below): the policy must not raise
        return dataclasses.replace(options, empty="nearest")

    def _probabilities(self, X, *, loo=False):
        """``(proba, outliers)``: the local means of the concatenated one-hot labels (every output's
        columns side by side) and the queries given ``outlier_label_`` (None without one)."""
        sums = self._local_sums(X, exclude_self=loo, queries_are_samples=loo)
        proba = sums.mean
        if self.outlier_label_ is None:
            return proba, None
        outliers = np.asarray(sums.empty)
        if outliers.any():
            proba = np.array(proba, copy=True)
            proba[outliers] = 0.0
            start = 0
            for classes_k, label_k in zip(self._classes_list(), self.outlier_label_):
                at = np.flatnonzero(np.asarray(classes_k) == label_k)
                if at.size == 1:
                    proba[outliers, start + at[0]] = 1.0
                else:
                    warn(LocalkitWarning(f"Outlier label {label_k} is not in training classes. All class "
                                         "probabilities of outliers will be assigned with 0."))
                start += len(classes_k)
        return proba, outliers

    def _classes_list(self):
        return self.classes_ if self.outputs_2d_ else [self.classes_]

    def _split(self, proba):
        if not self.outputs_2d_:
            return proba
        bounds = np.cumsum([0] + [len(c) for c in self.classes_])
        return [proba[:, a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def _labels(self, proba, outliers):
        if not self.outputs_2d_ and outliers is None:
            return backend_of(proba).decode(self.classes_, proba)
        parts = self._split(proba) if self.outputs_2d_ else [proba]
        out = np.empty((len(proba), len(parts)), dtype=np.asarray(self._classes_list()[0]).dtype)
        for k, (classes_k, part) in enumerate(zip(self._classes_list(), parts)):
            out[:, k] = np.asarray(classes_k)[np.argmax(part, axis=1)]
            if outliers is not None and outliers.any():
                out[outliers, k] = self.outlier_label_[k]
        return out if self.outputs_2d_ else out[:, 0]

    def predict_proba(self, X: ArrayLike) -> np.ndarray | list:
        """Class probabilities: the local mean of the one-hot training labels (a list of arrays,
        one per output, for a 2-D ``y``)."""
        X = self._validate_queries(X)
        return self._split(self._probabilities(X)[0])

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The most probable class at each row of ``X`` (``outlier_label_`` where the
        neighbourhood is empty, if given)."""
        X = self._validate_queries(X)
        return self._labels(*self._probabilities(X))

    def loo_predict_proba(self) -> np.ndarray | list:
        """Leave-one-out class probabilities at the training points: each point's own weight
        dropped, and that of every other sample at the same point, as
        :meth:`localkit.LocalMeanRegressor.loo_predict`."""
        check_is_fitted(self)
        return self._split(self._probabilities(None, loo=True)[0])

    def loo_predict(self) -> np.ndarray:
        """Leave-one-out labels at the training points (see :meth:`loo_predict_proba`)."""
        check_is_fitted(self)
        return self._labels(*self._probabilities(None, loo=True))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
