"""Local polynomial regression and LOESS: the localization trick with a polynomial model."""
from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import validate_data

from .._params import KERNEL_PARAMS, N_NEIGHBORS_CONSTRAINT, non_negative
from .._validation import check_n_neighbors, check_regression_target
from ..engine.polynomial import local_polynomial
from ..kernels import Kernel
from ._base import FLOATS, LocalKernelMixin


class LocalPolynomialRegressor(LocalKernelMixin, RegressorMixin, BaseEstimator):
    """Local polynomial regression (LOESS): a weighted least-squares polynomial at each query.

    .. math::

        \\hat\\beta(x^*) = \\arg\\min_\\beta \\sum_i K(x^*, x_i)\\, r_i
        \\big(y_i - \\beta \\cdot \\psi(x_i - x^*)\\big)^2, \\qquad \\hat f(x^*) = \\hat\\beta_0

    with ``psi`` the monomials of total degree <= ``degree`` (in every feature) and ``r_i`` the
    robustness weights. The kernel is any profile of :class:`localkit.Kernel`, the values are the
    targets, the local model a polynomial: degree 0 is the local mean (Nadaraya–Watson), 1 local
    linear, 2 local quadratic. With ``kernel="tricube", frac=f, robust_iters=it`` and one feature
    it is Cleveland's LOWESS, statsmodels' ``lowess(frac=f, it=it, delta=0)``; with a Gaussian
    kernel and per-feature bandwidths and ``degree=1`` it is statsmodels'
    ``KernelReg(reg_type="ll")``. Fits are batched over queries through
    :func:`localkit.engine.polynomial.local_polynomial` (no Python loop over queries).

    Parameters
    ----------
    degree : int, default=1
    kernel : str, default="tricube"
    bandwidth : float, array of shape (n_features,), "scott", "silverman", "cv" or None
        A fixed bandwidth ``h`` ("cv": exact leave-one-out selection of an isotropic ``h`` for
        the non-robust fit, see :mod:`localkit.models.selection`). Cannot be combined with
        ``frac`` or ``n_neighbors``.
    frac : float in (0, 1] or None
        The LOESS span: ``h(x*)`` is the distance to the k-th nearest sample with
        ``k = max(2, int(frac * n + 1e-10))``, exactly as statsmodels' lowess (with a compact
        profile the k-th neighbour itself gets weight 0). When ``bandwidth``, ``frac`` and
        ``n_neighbors`` are all None, ``frac=2/3`` (lowess' default).
    n_neighbors : int or None
        The span as a number of neighbours (balloon bandwidth: ``h(x*)`` varies with the query).
    sample_neighbors : int or None
        Sample-point adaptive bandwidth: sample ``i`` gets ``h * h_i``, ``h_i`` the distance of
        ``x_i`` to its k-th nearest other sample, so ``K_i(x*) = k(|x* - x_i| / (h h_i))``;
        ``h`` is ``bandwidth`` (default 1, "cv" selects it with the ``h_i`` fixed).
    robust_iters : int, default=0
        Cleveland's robustness iterations: refit with ``r_i = B(e_i / (6 median|e|))``,
        ``B(u) = (1 - u^2)^2`` on ``|u| < 1`` (bisquare), ``e_i`` the residuals at the samples.
    ridge : float, default=0.0
        Added to the non-constant diagonal of the normalised local Gram matrix, in coordinates
        ``(x - x*) / s`` (``s`` = the neighbourhood radius for a span, the bandwidth otherwise).
        A query whose local design is still near-singular (too few neighbours, collinear
        points) falls back to the local mean, with a ``RuntimeWarning``.
    metric : {"euclidean", "manhattan", "chebyshev"}, default="euclidean"
    algorithm : {"auto", "dense", "neighbors"}, default="auto"
    n_jobs : int or None, default=None

    Attributes
    ----------
    bandwidth_ : float, ndarray or None (span)
    n_neighbors_ : int or None
        The span in neighbours (from ``frac`` or ``n_neighbors``).
    sample_scale_ : ndarray of shape (n_samples,) or None
        The sample-point factors ``h_i``.
    kernel_ : Kernel
    robust_weights_ : ndarray of shape (n_samples,)
        The robustness weights of the final fit (ones without ``robust_iters``).
    X_fit_, y_fit_ : the training data.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LocalPolynomialRegressor
    >>> x = np.linspace(0, 6, 300)[:, None]
    >>> y = np.sin(x).ravel()
    >>> for degree in (1, 2):  # sin(1.5) = 0.997: the quadratic removes the curvature bias
    ...     loess = LocalPolynomialRegressor(degree=degree, frac=0.2).fit(x, y)
    ...     print(round(float(loess.predict([[1.5]])[0]), 3))
    0.972
    0.997
    """

    #: queries without any weight get the target of their nearest sample
    empty = "nearest"

    def __init__(self, degree=1, kernel="tricube", bandwidth=None, frac=None, n_neighbors=None,
                 sample_neighbors=None, robust_iters=0, ridge=0.0, metric="euclidean", algorithm="auto",
                 n_jobs=None):
        self.degree = degree
        self.kernel = kernel
        self.bandwidth = bandwidth
        self.frac = frac
        self.n_neighbors = n_neighbors
        self.sample_neighbors = sample_neighbors
        self.robust_iters = robust_iters
        self.ridge = ridge
        self.metric = metric
        self.algorithm = algorithm
        self.n_jobs = n_jobs

    _parameter_constraints: dict = {
        **{k: v for k, v in KERNEL_PARAMS.items() if k != "empty"},  # empty is always "nearest"
        "degree": non_negative(Integral),
        "bandwidth": KERNEL_PARAMS["bandwidth"] + [None],
        "frac": [Interval(Real, 0, 1, closed="right"), None],
        "sample_neighbors": N_NEIGHBORS_CONSTRAINT,
        "robust_iters": non_negative(Integral),
        "ridge": non_negative(),
    }

    def _check_params(self, n):
        """The span and what depends on the data (the types are in ``_parameter_constraints``)."""
        given = [name for name in ("bandwidth", "frac", "n_neighbors") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of bandwidth, frac and n_neighbors, not {' and '.join(given)}")
        if self.sample_neighbors is not None:
            check_n_neighbors(self.sample_neighbors, n - 1, "sample_neighbors")
            if self.frac is not None or self.n_neighbors is not None:
                raise ValueError("sample_neighbors scales a fixed bandwidth per sample; it cannot be "
                                 "combined with frac or n_neighbors")
            return None
        if not given:
            return max(2, int(2.0 / 3.0 * n + 1e-10))
        if self.frac is not None:
            return max(2, int(self.frac * n + 1e-10))  # statsmodels' lowess span
        return check_n_neighbors(self.n_neighbors, n)

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Resolve the kernel (and the bandwidth), run the robustness iterations. Returns ``self``."""
        X, y = validate_data(self, X, y, dtype=FLOATS, y_numeric=True)
        y = check_regression_target(y, X.dtype)
        span = self._check_params(len(X))
        self.X_fit_, self.y_fit_ = X, y.astype(X.dtype, copy=False)
        self._fit_sample_scales(X)
        self.n_neighbors_ = None if span is None else min(span, len(X))
        if span is not None or self.bandwidth is None:  # a span, or sample-point factors alone
            self.bandwidth_ = None if span is not None else 1.0
            self.kernel_ = Kernel(self.kernel, bandwidth=self.bandwidth_ or 1.0, n_neighbors=self.n_neighbors_,
                                  metric=self.metric)
        else:
            self._fit_kernel(X, y)
        self.robust_weights_ = np.ones(len(X), dtype=X.dtype)
        for _ in range(self.robust_iters):
            residuals = self.y_fit_ - self._fit_at(X, self.kernel_)
            self.robust_weights_ = bisquare_weights(residuals).astype(X.dtype, copy=False)
        return self

    def predict(self, X):
        """The local polynomial fit at each row of ``X``."""
        X = self._validate_queries(X)
        return self._fit_at(X, self.kernel_)

    def _fit_at(self, X, kernel, exclude_self=False):
        out = local_polynomial(None if exclude_self else X, self.X_fit_, self.y_fit_, self.degree, kernel,
                               sample_weight=self.robust_weights_ if hasattr(self, "robust_weights_") else None,
                               sample_scale=self.sample_scale_, exclude_self=exclude_self, ridge=self.ridge,
                               algorithm=self.algorithm, n_jobs=self.n_jobs)
        if out.singular.any():
            warnings.warn(
                f"{int(out.singular.sum())} of {len(out.singular)} queries have a near-singular local "
                f"design for degree={self.degree} (too few neighbours or collinear points); they fall "
                "back to the local mean. Widen the bandwidth or span, or set ridge > 0.",
                RuntimeWarning, stacklevel=3)
        return out.values[:, 0]

    def loo_predict(self):
        """Exact leave-one-out fits at the training points (each sample's own weight dropped)."""
        return self._fit_at(self.X_fit_, self.kernel_, exclude_self=True)

    def _loo_loss(self, X, y, bandwidth):
        """Mean squared leave-one-out error of the (non-robust) fit with a fixed ``bandwidth``."""
        kernel = Kernel(self.kernel, bandwidth=bandwidth, metric=self.metric)
        out = local_polynomial(None, X, y, self.degree, kernel, sample_scale=self.sample_scale_,
                               exclude_self=True, ridge=self.ridge, algorithm=self.algorithm, n_jobs=self.n_jobs)
        return float(np.mean((out.values[:, 0] - y) ** 2))


def bisquare_weights(residuals):
    """Cleveland's robustness weights ``(1 - u^2)^2`` with ``u = min(|e| / (6 median|e|), 1)``.

    A zero median keeps the samples fitted exactly (weight 1) and drops all others, as
    statsmodels' lowess does.
    """
    a = np.abs(residuals)
    median = np.median(a)
    u = (a > 0).astype(float) if median == 0 else np.minimum(a / (6.0 * median), 1.0)
    return (1.0 - u * u) ** 2
