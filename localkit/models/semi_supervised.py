"""Relaxation labeling: the iterated local mean of label distributions.

Every sample carries a distribution ``p_i`` over the classes (one-hot for the labelled ones, zero
for the others to start with). One step replaces each ``p_i`` by the local mean of its
neighbours' distributions,

    p_i <- sum_j K(x_i, x_j) p_j / sum_j K(x_i, x_j),

renormalises it, and puts the labels back on the labelled samples (clamping). Kernel: any profile
(the Gaussian gives scikit-learn's ``LabelPropagation(kernel="rbf")``, the uniform kNN kernel its
``kernel="knn"``); values: the label distributions; local model: the constant. Soft clamping and a
symmetric normalisation give label spreading; a compatibility matrix gives the classical
Rosenfeld–Hummel–Zucker relaxation.
"""
from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from scipy.sparse import issparse
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import KERNEL_CONSTRAINT, BANDWIDTH_CONSTRAINT, N_NEIGHBORS_CONSTRAINT, non_negative, positive
from .._validation import check_array, check_class_labels, check_n_neighbors
from ..engine import DEFAULT_MEMORY_BUDGET, BoundAffinity, bind, sparse_refusals
from ..engine import iterate, sum_abs_change
from ..kernels import Kernel
from ._base import FLOATS, check_fit_in_memory
from ..engine import map_queries
from ..exceptions import EmptyNeighbourhoodWarning, warn

NORMALIZATIONS = ("mean", "symmetric")
#: scikit-learn's default max_iter: LabelPropagation's (hard clamping) and LabelSpreading's (soft)
MAX_ITER_CLAMPED, MAX_ITER_SOFT = 1000, 30


def _normalize_rows(P, overwrite=False):
    """Rows divided by their sums (rows summing to 0 are left alone), as scikit-learn does;
    ``overwrite``: in ``P``'s memory (a fresh array of the caller's)."""
    s = P.sum(axis=1, keepdims=True)
    s[s == 0] = 1
    if overwrite:
        P /= s
        return P
    return P / s


def _warn_no_label_mass(P, what, outcome):
    """One warning about the rows of ``P`` that carry no label mass (all zero), if any: which they
    are is the warning's ``rows``."""
    empty = np.flatnonzero(~np.any(P, axis=1))
    if len(empty):
        warn(EmptyNeighbourhoodWarning(
            f"some {what} received no label mass: no label reaches them through the kernel; {outcome}. A wider "
            "bandwidth or more neighbours, or a label among them, connects them (the warning's rows says which, "
            "n_empty and n_queries how many)", n_empty=len(empty), n_queries=len(P), rows=empty))


class RelaxationLabeling(ClassifierMixin, BaseEstimator):
    """Semi-supervised labels by iterated local means of label distributions.

    With label distributions ``P`` (n_samples, n_classes), one-hot rows ``Y`` for the labelled
    samples and zeros for the unlabelled (``y = -1``), one update is

    * hard clamping (``alpha=None``): ``P <- normalise(M P)``, then ``P_i = Y_i`` on labelled rows;
    * soft clamping (``alpha`` in (0, 1)): ``P <- alpha M P + (1 - alpha) Y``;
    * with a compatibility matrix ``r`` (n_classes x n_classes, entries in [-1, 1]), the
      Rosenfeld–Hummel–Zucker rule ``p_i(l) <- p_i(l) (1 + q_i(l)) / sum_m p_i(m) (1 + q_i(m))``,
      ``q_i(l) = sum_j w_ij sum_m r(l, m) p_j(m)`` (unlabelled rows start uniform), then the clamping;

    where ``M P`` is the local mean ``(M P)_i = sum_j K(x_i, x_j) p_j / sum_j K(x_i, x_j)``
    (``normalization="mean"``, the sample's own weight included: scikit-learn's
    ``LabelPropagation``), or ``D^{-1/2} W D^{-1/2} P`` with the self weight dropped
    (``normalization="symmetric"``: scikit-learn's ``LabelSpreading``), computed from the same
    engine pass as ``sqrt(d_i) * mean_j(p_j / sqrt(d_j))`` with ``d_i = sum_{j != i} K(x_i, x_j)``.
    The symmetric form equals ``LabelSpreading`` for a symmetric kernel (a fixed bandwidth); a kNN
    kernel is not symmetric, and there scikit-learn's Laplacian uses column sums and keeps
    ``k - 1`` other neighbours where ours keeps ``k``.
    It stops when ``sum |P_new - P_old| < tol`` (scikit-learn's rule) or after ``max_iter``
    updates; the final ``P`` is normalised by rows. ``kernel="gaussian", bandwidth=h`` is
    scikit-learn's ``kernel="rbf"`` with ``gamma = 1 / (2 h^2)``; ``kernel="uniform",
    n_neighbors=k`` its ``kernel="knn"``.

    The weights may also be given (``kernel`` a callable or "precomputed"): an affinity matrix
    ``A`` (non-negative, finite) takes the place of ``K(x_i, x_j)`` in every formula above,
    ``(M P)_i = sum_j A_ij p_j / sum_j A_ij`` (its diagonal included for ``"mean"``, dropped for
    ``"symmetric"``), dense or scipy-sparse.

    Sparse samples: ``X`` may be a scipy sparse matrix (kept as CSR, never densified) with a
    compact profile and ``n_neighbors`` (the kNN graph: ``kernel="uniform", n_neighbors=k`` is
    scikit-learn's ``kernel="knn"`` on the same sparse ``X``) or a number ``bandwidth`` (a radius
    graph); the neighbours come from scikit-learn's brute-force search on the CSR matrix
    (metrics "euclidean", "manhattan", "cosine"). Profiles that weigh every sample (the
    default Gaussian) and bandwidth rules need dense ``X``: a ``ValueError`` names them.

    Parameters
    ----------
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy", \
            "softmax", "precomputed"} or callable, default="gaussian"
        A profile of :class:`localkit.Kernel` (scikit-learn's names "rbf", "tophat", "flat",
        "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform", "uniform",
        "laplacian", "triangular" and "biweight") or "softmax"; or a callable
        ``kernel(A, B) -> (len(A), len(B))`` affinity matrix, as scikit-learn's label propagation
        takes (``fit`` uses ``kernel(X, X)``, :meth:`predict_proba` ``kernel(X_query, X_fit)``: rows
        are the points that receive, columns the samples that give; scikit-learn's ``predict_proba``
        uses ``kernel(X_fit, X_query).T``, the same for a symmetric kernel); or ``"precomputed"``:
        ``X`` is the (n_samples, n_samples) affinity matrix in ``fit`` and the (n_queries,
        n_samples) affinities of the queries to the training samples in :meth:`predict_proba` and
        :meth:`predict`. ``bandwidth`` is then not used, and ``n_neighbors`` must stay None.
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "isj" or "sj", default=1.0
        ``h``, one per feature for an array, or a rule resolved on the samples, as in
        :class:`localkit.LocalMeanRegressor`.
    n_neighbors : int or None, default=None
        kNN bandwidth: the distance to the k-th nearest sample (the sample itself included).
    alpha : float in (0, 1) or None, default=None
        None clamps the labelled samples; a number is the share of the neighbours' opinion
        (label spreading's ``alpha``).
    compatibility : array of shape (n_classes, n_classes) or None, default=None
        ``r(l, m)``: how much a neighbour's label ``m`` supports label ``l``.
    normalization : {"mean", "symmetric"}, default="mean"
    max_iter : int or None, default=None
        None: scikit-learn's default for the clamping chosen, 1000 with hard clamping
        (``LabelPropagation``'s) and 30 with soft clamping (``alpha`` set: ``LabelSpreading``'s).
    tol : float, default=1e-3
    verbose : None, bool or int, default=None
        A progress bar of the iterations on stderr: True shows it, False never, None on a
        terminal for runs longer than 2 s.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    label_distributions_ : ndarray of shape (n_samples, n_classes)
        In the data's floating dtype (float32 data: float32, where scikit-learn's
        ``LabelPropagation`` gives float64); so is :meth:`predict_proba`.
    transduction_ : ndarray of shape (n_samples,)
    n_iter_ : int
    X_fit_ : ndarray
        The training samples (for ``kernel="precomputed"``, their affinity matrix).
    kernel_ : Kernel, callable or "precomputed"

    Notes
    -----
    Samples that no label reaches (a kNN graph whose component has no labelled sample, or too
    few iterations) keep an all-zero row in ``label_distributions_`` and take ``classes_[0]``
    in ``transduction_``; queries whose weighing samples all have such rows get NaN rows from
    :meth:`predict_proba` (``0 / 0``) and ``classes_[0]`` from :meth:`predict`. These are
    scikit-learn's ``LabelPropagation`` outputs; here each call that produces them also warns
    (a ``UserWarning``) with how many rows and which.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import make_moons
    >>> from localkit import RelaxationLabeling
    >>> X, y = make_moons(200, noise=0.05, random_state=0)
    >>> y_partial = np.full_like(y, -1)
    >>> y_partial[[0, 1]] = y[[0, 1]]
    >>> model = RelaxationLabeling(kernel="uniform", n_neighbors=7).fit(X, y_partial)
    >>> float((model.transduction_ == y).mean())
    1.0
    """

    def __init__(self, kernel="gaussian", bandwidth=1.0, n_neighbors=None, alpha=None, compatibility=None,
                 normalization="mean", max_iter=None, tol=1e-3, verbose=None):
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.n_neighbors = n_neighbors
        self.alpha = alpha
        self.compatibility = compatibility
        self.normalization = normalization
        self.max_iter = max_iter
        self.tol = tol
        self.verbose = verbose

    _parameter_constraints: dict = {
        "kernel": [StrOptions(set(KERNEL_CONSTRAINT[0].options) | {"precomputed"}), callable],
        "bandwidth": BANDWIDTH_CONSTRAINT,
        "n_neighbors": N_NEIGHBORS_CONSTRAINT,
        "alpha": [Interval(Real, 0, 1, closed="neither"), None],  # None: hard clamping
        "compatibility": ["array-like", None],
        "normalization": [StrOptions(set(NORMALIZATIONS))],
        "max_iter": positive(Integral) + [None],
        "tol": non_negative(),
        "verbose": ["verbose", None],
    }

    def _check_compatibility(self, n_classes):
        if self.compatibility is None:
            return None
        r = check_array(self.compatibility, "compatibility", ndim=(2,), dtype=np.float64)
        if r.shape != (n_classes, n_classes):
            raise ValueError(f"compatibility must have shape (n_classes, n_classes) = ({n_classes}, {n_classes}), "
                             f"got {r.shape}")
        if np.any(np.abs(r) > 1):
            raise ValueError("compatibility entries must lie in [-1, 1] so that 1 + q stays >= 0")
        return r

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Propagate the labels of ``y`` (``-1`` = unlabelled) over ``X``. Returns ``self``."""
        # a sparse affinity graph (precomputed), or sparse samples for a profile (the neighbour path)
        sparse_ok = ["csr", "csc", "coo"] if self.kernel == "precomputed" else False if callable(self.kernel) else "csr"
        X, y = check_fit_in_memory(self, X, y, accept_sparse=sparse_ok)
        check_class_labels(y)
        given = self._given_weights()
        if given and self.n_neighbors is not None:
            raise ValueError(f"n_neighbors must be None with kernel={self.kernel!r}: the affinities are given, "
                             f"got n_neighbors={self.n_neighbors}")
        if self.kernel == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError(f"kernel='precomputed' takes X as the (n_samples, n_samples) affinity matrix, "
                             f"got X of shape {X.shape}")
        if not given:
            check_n_neighbors(self.n_neighbors, X.shape[0])
        unlabelled = (y == -1) if y.dtype.kind in "iuf" else np.zeros(len(y), dtype=bool)
        if unlabelled.all():
            raise ValueError("y has no labelled sample (every entry is -1); label at least one sample")
        self.classes_ = np.unique(y[~unlabelled])
        n_classes = len(self.classes_)
        r = self._check_compatibility(n_classes)
        if r is not None:  # the update in the data's precision: a float64 r would promote float32 P
            r = r.astype(X.dtype, copy=False)
        self.X_fit_ = X
        if given:  # the weights themselves, through the engine's local mean of given affinities
            self.kernel_ = self.kernel
            self._bound = BoundAffinity(X, None if self.kernel == "precomputed" else self.kernel, name=(
                "X (kernel='precomputed')" if self.kernel == "precomputed" else "kernel (the callable)"))
        else:
            kern = Kernel(self.kernel, bandwidth=self.bandwidth, n_neighbors=self.n_neighbors)
            refused = sparse_refusals(kern) if issparse(X) else []
            # sparse X for a kernel that weighs every pair (the Gaussian, as scikit-learn's rbf affinity
            # on CSR input): the propagation's operator holds n x n weights, so X as a dense n x d array
            # costs no more where it fits the same memory budget
            self._densified = bool(refused) and X.shape[0] * X.shape[1] * X.dtype.itemsize <= DEFAULT_MEMORY_BUDGET
            if self._densified:
                X, refused = X.toarray(), []
                self.X_fit_ = X
            if refused:
                raise ValueError("X is a sparse matrix, which RelaxationLabeling takes on the engine's neighbour path "
                                 "only (a compact kernel with n_neighbors or a number bandwidth): "
                                 + "; ".join(refused) + ". Or pass X.toarray() where the dense array fits in memory")
            if self.n_neighbors is None:  # rules ("scott", ...) resolved on the training data
                kern = Kernel(self.kernel, bandwidth=kern.resolve_bandwidth(X))
            self.kernel_ = kern
            # bound once: every iteration and predict_proba pass through it; the graph has no self-loops
            # (twins: one group per row, so only the diagonal is zero, as in scikit-learn's LabelSpreading,
            # not a leave-one-out, which leaves out every repeated row)
            self._bound = bind(kern, X, twins=np.arange(X.shape[0]))

        # the distributions in the data's precision (float32 in, float32 out): the engine's local means
        # of float32 data are float32, a float64 Y would only promote them after the fact
        Y = np.zeros((X.shape[0], n_classes), dtype=X.dtype)
        Y[~unlabelled, np.searchsorted(self.classes_, y[~unlabelled])] = 1.0
        graph = self._graph(self._bound)
        soft = self.alpha is not None
        Y_static = (1 - self.alpha) * Y if soft else Y

        labelled = ~unlabelled[:, None]

        def step(P):  # each step's arrays are fresh: normalised and clamped in place (a fixed point of ~20 us steps)
            if r is None:
                P_new = graph(P)
                if not soft:
                    P_new = _normalize_rows(P_new, overwrite=True)
            else:  # Rosenfeld-Hummel-Zucker: support q from the neighbours' opinions
                P_new = _normalize_rows(P * (1.0 + graph(P) @ r.T), overwrite=True)
            if soft:
                P_new *= self.alpha
                P_new += Y_static
            else:
                np.copyto(P_new, Y, where=labelled)
            return P_new

        P0 = Y.copy()
        if r is not None:  # a multiplicative update needs every label possible to start with
            P0[unlabelled] = 1.0 / n_classes
        max_iter = self.max_iter
        if max_iter is None:  # soft clamping contracts at rate alpha: LabelSpreading stops at 30
            max_iter = MAX_ITER_SOFT if soft else MAX_ITER_CLAMPED
        fp = iterate(step, P0, tol=self.tol, max_iter=max_iter, change=sum_abs_change,
                     progress=self.verbose, name="relaxation labeling")
        self.n_iter_ = fp.n_iter
        self.label_distributions_ = _normalize_rows(fp.state)
        self.transduction_ = self.classes_[np.argmax(self.label_distributions_, axis=1)]
        _warn_no_label_mass(self.label_distributions_, "training samples",
                            f"their label_distributions_ rows are 0 and transduction_ gives them classes_[0] = "
                            f"{self.classes_[:1].tolist()[0]!r}")
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # sparse X: an affinity graph (precomputed), samples on the neighbour path (compact profiles),
        # or made dense for a kernel that weighs every pair where it fits the memory budget
        tags.input_tags.sparse = not callable(self.kernel)
        return tags

    def _given_weights(self):
        """Whether ``kernel`` gives the weights (a callable or "precomputed") rather than a profile."""
        return callable(self.kernel) or self.kernel == "precomputed"

    def _graph(self, bound):
        """The propagation operator ``P -> M P`` over the kernel bound once to the samples: the
        normalised weights formed once where they fit the memory budget (as scikit-learn forms its
        affinity), else one engine pass per call (:meth:`~localkit.engine.BoundKernel.operator`)."""
        if self.normalization == "mean":
            return bound.operator()
        M = bound.operator(exclude_self=True)
        d = M.weight_sum
        root = np.sqrt(np.where(d > 0, d, 1.0))[:, None]  # isolated samples: degree 1, as scipy does
        return lambda P: root * M(P / root)

    @map_queries
    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """The local mean of the fitted label distributions at each row of ``X``, normalised.

        A row whose local mean is 0 (every sample weighing on it has an all-zero distribution)
        is NaN (``0 / 0``, as in scikit-learn's ``LabelPropagation``), with a warning.
        """
        check_is_fitted(self)
        fitted_sparse = getattr(getattr(self._bound, "bound", None), "sparse", False)
        densified = getattr(self, "_densified", False)  # sparse X made dense at fit: sparse queries too
        sparse_ok = ["csr", "csc", "coo"] if self.kernel_ == "precomputed" else "csr" if fitted_sparse or densified \
            else False
        X = validate_data(self, X, reset=False, dtype=FLOATS, accept_sparse=sparse_ok)
        if densified and issparse(X):
            X = X.toarray()
        M = self._bound.sums(X, self.label_distributions_).mean
        _warn_no_label_mass(M, "queries", f"their predict_proba rows are NaN (0 / 0) and predict gives them "
                                          f"classes_[0] = {self.classes_[:1].tolist()[0]!r}")
        with np.errstate(invalid="ignore"):
            return M / M.sum(axis=1, keepdims=True)

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """The most probable class at each row of ``X``."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]
