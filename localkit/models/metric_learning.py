"""Metric learning for kernel regression (Weinberger & Tesauro, 2007): a learned localization
kernel ``K(x*, x) = exp(-|A (x* - x)|^2 / 2)`` fitted on the leave-one-out error of its own
local mean."""
from __future__ import annotations

from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, RegressorMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from .._params import N_JOBS_CONSTRAINT, non_negative, positive
from .._progress import optimizer_progress, warn_optimizer
from .._validation import check_regression_target
from ..engine import EngineOptions, bind, map_queries, reconstruction_gradient
from ..kernels import Kernel
from ._base import KeptBindings
from .regression import LocalMeanRegressor

#: each evaluation of the objective weighs every pair of samples: time O(n^2 (r + 1)), memory the
#: engine's row blocks of the n x n weights
MAX_SAMPLES = 5000
FORMS = ("full", "diagonal")


class MetricLearningKernelRegressor(KeptBindings, ClassNamePrefixFeaturesOutMixin, TransformerMixin, RegressorMixin, BaseEstimator):
    """Nadaraya–Watson regression with a learned metric (MLKR).

    The kernel is Gaussian in a learned linear map ``A`` (``r x d``), the values are the
    targets, the local model the mean:

    .. math::

        K_A(x^*, x) = \\exp\\!\\big(-\\tfrac12 |A (x^* - x)|^2\\big), \\qquad
        \\hat f(x^*) = \\frac{\\sum_i K_A(x^*, x_i)\\, y_i}{\\sum_j K_A(x^*, x_j)}

    ``A`` minimises the leave-one-out squared error of that local mean, relative to the
    variance of ``y``, plus a penalty that pulls ``A`` towards the isotropic metric ``A_0``
    chosen by leave-one-out (``A_0 = I / h_cv``, or the top principal directions over ``h_cv``):

    .. math::

        J(A) = \\frac{1}{n\\,\\mathrm{var}(y)} \\sum_i \\big(y_i - \\hat f_{-i}(x_i)\\big)^2
               + \\alpha \\frac{|A - A_0|_F^2}{|A_0|_F^2}

    minimised with scipy's L-BFGS. The first term is the engine's leave-one-out reconstruction
    error of a local mean of ``y`` at the points ``Z = X A^T`` (the engine also gives its
    gradient ``G = dE/dZ``); the chain
    rule through ``Z`` gives ``dJ/dA = G^T X / var(y) + 2 alpha (A - A_0) / |A_0|^2``. Forms: full (``r = d``), low-rank (``n_components = r < d``)
    and diagonal (a learned bandwidth per feature, ``A = diag(a)``).

    With few samples and many parameters the leave-one-out objective overfits (it is a
    training criterion once ``A`` is fitted to it); ``alpha > 0`` keeps the learned metric
    near the cross-validated isotropic one, and ``alpha -> inf`` gives exactly that one.

    Each evaluation of the objective weighs all ``n x n`` pairs (time ``O(n^2)`` per L-BFGS
    step): ``fit`` refuses more than ``MAX_SAMPLES`` = 5000 samples; subsample, or learn on a
    subset and predict on all.

    Parameters
    ----------
    n_components : int or None, default=None
        Rank ``r`` of ``A`` (None: ``n_features``). Only with ``form="full"``.
    form : {"full", "diagonal"}, default="full"
    kernel : {"gaussian"}, default="gaussian"
        The profile of the learned kernel (the gradient above is the Gaussian's).
    alpha : float, default=0.0
        Strength of the pull towards the isotropic leave-one-out metric.
    max_iter : int, default=200
        L-BFGS iterations.
    tol : float, default=1e-6
        L-BFGS tolerance on the projected gradient.
    n_jobs : int or None, default=None
        Threads of the engine at prediction.
    verbose : None, bool or int, default=None
        A progress bar of the L-BFGS iterations (with the loss) on stderr: True shows it, False
        never, None on a terminal for fits longer than 2 s.

    Attributes
    ----------
    components_ : ndarray of shape (r, n_features)
        The learned ``A`` (for the diagonal form, ``diag(a)``).
    init_components_ : ndarray
        ``A_0``.
    loo_loss_ : float
        The final relative leave-one-out error ``J(A)`` without the penalty.
    n_iter_ : int
    X_fit_, y_fit_ : the training data.

    Examples
    --------
    >>> from sklearn.datasets import make_friedman1
    >>> from localkit import MetricLearningKernelRegressor
    >>> X, y = make_friedman1(n_samples=200, noise=1.0, random_state=0)
    >>> mlkr = MetricLearningKernelRegressor(form="diagonal", max_iter=50).fit(X, y)
    >>> mlkr.components_.shape
    (10, 10)
    """

    def __init__(self, n_components=None, form="full", kernel="gaussian", alpha=0.0, max_iter=200, tol=1e-6,
                 n_jobs=None, verbose=None):
        self.n_components = n_components
        self.form = form
        self.kernel = kernel
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol
        self.n_jobs = n_jobs
        self.verbose = verbose

    _parameter_constraints: dict = {
        "n_components": positive(Integral) + [None],
        "form": [StrOptions(set(FORMS))],
        "kernel": [StrOptions({"gaussian"})],  # the learned kernel's gradient is the Gaussian's
        "alpha": non_negative(),
        "max_iter": positive(Integral),
        "tol": non_negative(),
        "n_jobs": N_JOBS_CONSTRAINT,
        "verbose": ["verbose", None],
    }

    def _check_params(self, n, d):
        """What depends on the data (the rest is in ``_parameter_constraints``)."""
        r = d if self.n_components is None else self.n_components
        if r > d:
            raise ValueError(f"n_components must be None or an integer in [1, n_features={d}], "
                             f"got {self.n_components!r}")
        if self.form == "diagonal" and r != d:
            raise ValueError("n_components applies to form='full'; the diagonal form has one scale per feature")
        if n > MAX_SAMPLES:
            raise ValueError(f"MetricLearningKernelRegressor holds n x n weights; n_samples must be <= "
                             f"{MAX_SAMPLES}, got {n}: fit on a subsample")
        if n < 3:
            raise ValueError(f"MetricLearningKernelRegressor needs at least 3 samples, got n_samples={n}")
        return r

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike):
        """Learn ``A`` by L-BFGS on the leave-one-out objective. Returns ``self``."""
        X, y = validate_data(self, X, y, dtype=[np.float64], y_numeric=True)
        y = check_regression_target(y, np.float64)
        r = self._check_params(*X.shape)
        if np.all(X == X[0]):
            raise ValueError("X: all samples coincide; there is no metric to learn")
        # the objective (leave-one-out error / var y) and the bandwidth search do not change when y
        # is scaled, so they run on y / max|y|: squared errors stay finite for targets up to the
        # float range (at 1e300 they overflowed into NaN inside the bandwidth search)
        t = y / (float(np.max(np.abs(y))) or 1.0)
        var = float(np.var(t))
        if not var > 0:
            raise ValueError("y is constant; there is no metric to learn")
        h = LocalMeanRegressor(bandwidth="cv").fit(X, t).bandwidth_
        if self.form == "diagonal":
            A0 = np.full(X.shape[1], 1.0 / h)
        else:
            Xc = X - X.mean(axis=0)
            A0 = np.linalg.svd(Xc, full_matrices=False)[2][:r] / h if r < X.shape[1] else np.eye(r) / h
        Xc = X - X.mean(axis=0)
        # data near the ends of the float range (|x| ~ 1e299 overflows the gradient's x x^T terms):
        # learn A s on X / s, s a power of two (exact); ordinary data are left as they are
        span = float(np.max(np.abs(Xc)))
        s = 1.0 if 1e-100 < span < 1e100 else 2.0 ** np.round(np.log2(span))
        Xc, A0 = Xc / s, A0 * s
        norm0 = float(np.sum(A0 * A0))
        shape = A0.shape

        def objective(theta):
            A = theta.reshape(shape)
            loss, grad = loo_objective(Xc, t, A, var, kernel=self.kernel)
            diff = A - A0
            return (loss + self.alpha * np.sum(diff * diff) / norm0,
                    (grad + 2 * self.alpha * diff / norm0).ravel())

        # one BLAS thread: the objective is mostly elementwise n x n passes, and its small
        # products lose more to thread hand-offs than they gain (about 9x on 2 busy cores)
        bar, callback = optimizer_progress("metric learning", self.max_iter, self.verbose)
        with threadpool_limits(limits=1, user_api="blas"), bar:
            res = minimize(objective, A0.ravel(), jac=True, method="L-BFGS-B", callback=callback,
                           options={"maxiter": self.max_iter, "gtol": self.tol})
        warn_optimizer(res, "MetricLearningKernelRegressor", self.max_iter, tol=True)
        A = res.x.reshape(shape)
        self.loo_loss_ = loo_objective(Xc, t, A, var, gradient=False, kernel=self.kernel)[0]
        A, A0 = A / s, A0 / s
        self.init_components_ = np.diag(A0) if self.form == "diagonal" else A0
        self.components_ = np.diag(A) if self.form == "diagonal" else A
        self.n_iter_ = int(res.nit)
        self.X_fit_, self.y_fit_ = X, y
        self._n_features_out = self.components_.shape[0]
        # the embedded training rows bound once: every predict is a pass over them
        self._keep("embedded", bind(Kernel(self.kernel, bandwidth=1.0), X @ self.components_.T), y)
        return self

    @map_queries
    def transform(self, X: ArrayLike) -> np.ndarray:
        """The inputs in the learned metric, ``X A^T``."""
        return self._map(X)

    def _map(self, X):
        """``X A^T`` as an array: ``transform`` without its output container (``set_output``),
        which ``predict`` needs whatever ``transform_output`` is configured."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        return (X @ self.components_.T).astype(X.dtype, copy=False)  # float32 in, float32 out

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """The local mean of the training targets under the learned kernel."""
        Z = self._map(X)  # in float64, the training rows' precision; float32 in, float32 out
        return self._kept_sums("embedded", Z, options=EngineOptions(n_jobs=self.n_jobs)).mean.astype(Z.dtype,
                                                                                                      copy=False)


def loo_objective(X, y, A, var, gradient=True, kernel="gaussian"):
    """``(J, dJ/dA)`` without penalty: the leave-one-out squared error over ``var`` and its gradient.

    ``A`` is ``(r, d)`` (full or low-rank) or ``(d,)`` (diagonal). ``J`` is the engine's
    reconstruction error of the local mean of ``y`` at the mapped inputs ``Z = X A^T`` (or
    ``X * A``) with bandwidth 1, over ``var``, and the chain rule through ``Z`` gives
    ``dJ/dA = G^T X / var`` (diagonal: ``sum_i G_ik x_ik / var``) from its gradient
    ``G = dE/dZ``.
    """
    diagonal = A.ndim == 1
    Z = X * A if diagonal else X @ A.T
    error, G = reconstruction_gradient(Z, y[:, None], kernel=kernel, bandwidth=1.0)
    loss = error / var
    if not gradient:
        return loss, None
    G /= var
    if diagonal:
        return loss, np.einsum("ij,ij->j", G, X)
    return loss, G.T @ X
