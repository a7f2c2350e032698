"""Kernel classification: class probabilities are the local mean of one-hot labels."""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context

from ..engine import backend_of
from ._base import LocalMeanParams


class LocalMeanClassifier(LocalMeanParams, ClassifierMixin, BaseEstimator):
    """Kernel (Nadaraya–Watson) classification: the local mean of one-hot labels.

    .. math::

        \\hat p(c \\mid x^*) = \\frac{\\sum_i K(x^*, x_i)\\, [y_i = c]}{\\sum_j K(x^*, x_j)},
        \\qquad \\hat y(x^*) = \\arg\\max_c \\hat p(c \\mid x^*)

    With ``kernel="uniform", n_neighbors=k`` it is scikit-learn's ``KNeighborsClassifier(k)``
    (ties between classes go to the first class in ``classes_``; where several samples tie at
    the k-th distance, each keeps a valid set of k of them, not necessarily the same).

    Parameters are those of :class:`localkit.LocalMeanRegressor`; ``empty="nearest"`` gives
    a query outside every compact support the label of its nearest training sample.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    bandwidth_, kernel_, X_fit_, sample_weight_ : as in :class:`localkit.LocalMeanRegressor`.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from localkit import LocalMeanClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = LocalMeanClassifier(kernel="uniform", n_neighbors=5).fit(X, y)
    >>> clf.predict(X[:3])
    array([0, 0, 0])
    """

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None):
        """Store the training data and the one-hot labels. Returns ``self``.

        ``sample_weight`` (n_samples,), optional: ``c_i >= 0`` multiplies the kernel,
        ``p(c | x*) = sum_i c_i K_i [y_i = c] / sum_j c_j K_j`` (as in
        :meth:`localkit.LocalMeanRegressor.fit`). Classes of zero-weight samples stay in
        ``classes_`` with probability 0.
        """
        X, y, backend = self._fit_data(X, y, sample_weight)
        self.classes_, self.onehot_ = backend.encode(y, X)
        self._fit_sample_scales(X)
        self._fit_kernel(X, y, self.sample_weight_)
        self.X_fit_ = X
        self._bind(X, self.onehot_)
        return self

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities: the local mean of the one-hot training labels."""
        X = self._validate_queries(X)
        return self._local_sums(X).mean

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The most probable class at each row of ``X``."""
        proba = self.predict_proba(X)
        return backend_of(proba).decode(self.classes_, proba)
