"""Denoising with local means: the optimal denoiser, and the lazy autoencoder.

* :class:`LocalMeanDenoiser`: for ``y = x + e``, ``e ~ N(0, sigma^2 I)`` and the clean samples as
  the prior, the posterior mean ``E[x | y]`` is the Gaussian local mean of the clean samples at
  ``y`` with bandwidth ``sigma``, the Bayes-optimal denoiser under squared loss (what a denoising
  autoencoder learns to approximate).
* :class:`LazyAutoencoder`: unsupervised kernel regression (Meinicke, Klanke, Memisevic & Ritter
  2005): latent codes ``z_i`` chosen so that the leave-one-out Nadaraya–Watson decoder
  ``z -> x`` reconstructs the data.
"""
from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, OneToOneFeatureMixin, TransformerMixin, _fit_context
from sklearn.decomposition import PCA
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import N_JOBS_CONSTRAINT, PROFILE_CONSTRAINT, positive
from .._progress import optimizer_progress, warn_optimizer
from ..engine import EngineOptions, bind, bind_points, check_smooth_kernel, local_mean, map_queries, \
    reconstruction_gradient, twin_groups
from ..kernels import Kernel
from .selection import spread
from ._base import FLOATS, KeptBindings, float_dtypes



class LocalMeanDenoiser(KeptBindings, OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    """The local mean of clean samples: the Bayes-optimal denoiser for Gaussian noise.

    .. math::

        \\hat x(y) = E[x \\mid y] = \\frac{\\sum_i K(y, x_i)\\, x_i}{\\sum_j K(y, x_j)},
        \\qquad K(y, x) = \\exp\\Big(-\\frac{|y - x|^2}{2 \\sigma^2}\\Big)

    With the clean samples ``x_i`` as the prior (each equally likely) and ``y = x + N(0,
    sigma^2 I)``, Bayes' rule gives ``P(x_i | y) = K(y, x_i) / sum_j K(y, x_j)``, so the local mean
    is the posterior mean, which minimises the expected squared error. Kernel: Gaussian of
    width ``noise_std`` (other profiles give a plain local mean); values: the clean samples;
    local model: the constant. ``n_iter > 1`` feeds the output back in: mean shift of the noisy
    points towards the modes of the clean data (denoising by projection onto its manifold).

    Parameters
    ----------
    noise_std : float, default=1.0
        ``sigma``, the standard deviation of the noise (per feature).
    kernel : {"gaussian", "epanechnikov", "tricube", "biweight", "triweight", "triangular", "uniform", \
            "cosine", "laplacian", "cauchy"}, default="gaussian"
        A profile of :class:`localkit.Kernel` (scikit-learn's names "rbf", "tophat", "flat",
        "exponential", "linear" and "quartic" are accepted for "gaussian", "uniform", "uniform",
        "laplacian", "triangular" and "biweight"); only the Gaussian gives the posterior mean.
    n_iter : int, default=1
        Local-mean steps (1: the posterior mean).
    n_jobs : int or None, default=None
        Threads of the engine.

    Attributes
    ----------
    X_fit_ : ndarray of shape (n_samples, n_features), the clean samples.
    kernel_ : Kernel

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LocalMeanDenoiser
    >>> clean = np.array([[0.0, 0.0], [4.0, 4.0]])
    >>> den = LocalMeanDenoiser(noise_std=0.5).fit(clean)
    >>> den.transform([[0.3, -0.2], [3.5, 4.4]]).round(3)
    array([[0., 0.],
           [4., 4.]])
    """

    def __init__(self, noise_std=1.0, kernel="gaussian", n_iter=1, n_jobs=None):
        self.noise_std = noise_std
        self.kernel = kernel
        self.n_iter = n_iter
        self.n_jobs = n_jobs

    _parameter_constraints: dict = {
        "noise_std": positive(),
        "kernel": PROFILE_CONSTRAINT,  # softmax has no noise model
        "n_iter": positive(numbers.Integral),
        "n_jobs": N_JOBS_CONSTRAINT,
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Store the clean samples (the prior). Returns ``self``."""
        X = validate_data(self, X, dtype=float_dtypes(X))  # tensors stay on their device
        self.kernel_ = Kernel(self.kernel, bandwidth=float(self.noise_std))
        self.X_fit_ = X
        self._keep("clean", bind(self.kernel_, X), X)  # every transform a pass over it
        return self

    @map_queries
    def transform(self, X: ArrayLike) -> np.ndarray:
        """The denoised samples: ``n_iter`` local means of the clean samples, from ``X``."""
        check_is_fitted(self)
        Y = validate_data(self, X, reset=False, dtype=float_dtypes(X))
        options = EngineOptions(n_jobs=self.n_jobs)
        for _ in range(self.n_iter):
            Y = self._kept_sums("clean", Y, options=options).mean
        return Y


def encoder_bandwidth(X, Z):
    """Data-space bandwidth of an encoder's start ``local_mean(x, X, Z, h)``: the ``h`` on a grid
    (spread of ``X`` times 1e-3 .. 1) with the lowest leave-one-out error of the codes ``Z``."""
    grid = (spread(X) or 1.0) * np.geomspace(1e-3, 1.0, 13)
    errors = [np.sum((local_mean(X, X, Z, bandwidth=h, exclude_self=True) - Z) ** 2) for h in grid]
    return float(grid[int(np.argmin(errors))])


def refine_codes(Z, objective, max_iter):
    """Minimise a per-row error for each code on its own; ``Z`` is updated in place and returned.

    ``objective(codes, rows)`` returns ``(errors, gradients)`` of the codes standing in for the rows
    ``rows`` of ``Z`` (row ``q`` of both depends on code ``q`` only). Normalised gradient steps
    whose length (in latent units, where the kernel width is 1) grows by 1.5 after a success and
    halves after a failure, so that a code never depends on the other rows.
    """
    err, grad = objective(Z, np.arange(len(Z)))
    step = np.full(len(Z), 0.5)
    for _ in range(max_iter):
        active = step > 1e-8
        if not active.any():
            break
        a = np.flatnonzero(active)
        norm = np.linalg.norm(grad[a], axis=1, keepdims=True)
        trial = Z[a] - step[a, None] * grad[a] / np.where(norm > 0, norm, 1.0)
        e_new, g_new = objective(trial, a)
        better = e_new < err[a]
        ok = a[better]
        Z[ok], err[ok], grad[ok] = trial[better], e_new[better], g_new[better]
        step[ok] *= 1.5
        step[a[~better]] *= 0.5
    return Z


class LazyAutoencoder(KeptBindings, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Unsupervised kernel regression: a lazy autoencoder whose decoder is a local mean.

    The decoder maps a latent point to the local mean of the data, with a kernel on the latent
    codes ``Z`` of the training samples (bandwidth 1: the scale of ``Z`` is learned instead):

    .. math::

        f(z) = \\frac{\\sum_i K(z, z_i)\\, x_i}{\\sum_j K(z, z_j)}, \\qquad
        Z^* = \\arg\\min_Z \\frac{1}{n} \\sum_i \\big|x_i - f_{-i}(z_i)\\big|^2

    ``f_{-i}`` leaves sample ``i`` out, which is what keeps the codes from spreading apart (each
    point would otherwise reconstruct itself). ``Z`` starts from the PCA scores, scaled by the best
    factor on a grid (leave-one-out error through the engine), then L-BFGS runs on the analytic
    gradient of that error. The encoder (``transform``) starts from the
    local mean of the codes in data space (its bandwidth chosen by leave-one-out at ``fit``) and
    refines each code on its own to minimise ``|x - f(z)|^2``. Kernel: a smooth profile on latent codes;
    values: the data; local model: the constant.

    Cost: every L-BFGS step forms the ``n x n`` leave-one-out weights in row blocks, ``O(n^2 (d +
    q))`` time and ``O(b n)`` memory; practical up to a few thousand samples (measured on a shared
    2-core machine: 0.03 s per step at n = 1000, 0.15 s at n = 2000, 0.5 s at n = 4000, so
    ``max_iter=200`` at n = 4000 takes close to two minutes). ``transform`` costs ``O(m n)`` per step.

    Parameters
    ----------
    n_components : int, default=2
        Latent dimension ``q``.
    kernel : {"gaussian", "cauchy"}, default="gaussian"
        A profile whose log is differentiable.
    max_iter : int, default=200
        L-BFGS iterations for the codes (``fit``) and refinement steps per code (``transform``).
    verbose : None, bool or int, default=None
        A progress bar of the L-BFGS iterations (with the loss) on stderr: True shows it, False
        never, None on a terminal for fits longer than 2 s.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_samples, n_components), the codes ``Z``.
    kernel_ : Kernel, the decoder's kernel on latent codes (bandwidth 1).
    X_fit_ : ndarray, the training data (the decoder's values).
    reconstruction_error_ : float, the final leave-one-out mean squared error (summed over features).
    init_error_ : float, the same for the scaled PCA start.
    encoder_bandwidth_ : float, the data-space bandwidth of the encoder's starting point.
    n_iter_ : int, L-BFGS iterations run by ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import LazyAutoencoder
    >>> t = np.linspace(0, 3, 60)
    >>> X = np.c_[np.cos(t), np.sin(t), 0.1 * t]
    >>> ukr = LazyAutoencoder(n_components=1, max_iter=50).fit(X)
    >>> bool(ukr.reconstruction_error_ < ukr.init_error_)
    True
    >>> ukr.inverse_transform(ukr.transform(X[:2])).shape
    (2, 3)
    """

    def __init__(self, n_components=2, kernel="gaussian", max_iter=200, verbose=None):
        self.n_components = n_components
        self.kernel = kernel
        self.max_iter = max_iter
        self.verbose = verbose

    _parameter_constraints: dict = {
        "n_components": positive(numbers.Integral),
        "kernel": PROFILE_CONSTRAINT,  # and smooth: checked by check_smooth_kernel
        "max_iter": positive(numbers.Integral),
        "verbose": ["verbose", None],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Learn the codes ``Z`` of the training data. Returns ``self``."""
        X = validate_data(self, X, dtype=FLOATS, ensure_min_samples=3)
        if self.n_components > X.shape[1]:
            raise ValueError(f"n_components must be <= n_features={X.shape[1]}, got {self.n_components}")
        self.kernel_ = Kernel(check_smooth_kernel(self.kernel), bandwidth=1.0)
        Xd = X.astype(np.float64)
        # leave-one-out leaves out every repeated row of X with the row (their codes are one
        # observation's, and round-off in the gradient moves them apart by ~1e-14)
        twins = twin_groups(Xd)
        if twins is None:
            twins = np.arange(len(Xd))
        Z0, self.init_error_ = self._scaled_pca(Xd, twins)
        n, q = Z0.shape
        bar, callback = optimizer_progress("lazy autoencoder", self.max_iter, self.verbose)
        with bar:
            res = minimize(lambda z: reconstruction_gradient(z.reshape(n, q), Xd, kernel=self.kernel_.name_,
                                                             twins=twins),
                           Z0.ravel(), jac=True, method="L-BFGS-B", callback=callback,
                           options={"maxiter": self.max_iter})
        warn_optimizer(res, "LazyAutoencoder", self.max_iter)
        Z = res.x.reshape(n, q)
        self.embedding_ = Z.astype(X.dtype)
        self.reconstruction_error_ = float(res.fun)
        self.n_iter_ = int(res.nit)
        self.X_fit_ = X
        self._n_features_out = q
        self.encoder_bandwidth_ = encoder_bandwidth(Xd, Z)
        # bound once: the encoder's start (data -> codes), the codes for the refinement's gradient
        # (float64) and the decoder (codes -> data, in X's precision)
        Zf = self.embedding_.astype(np.float64)
        self._keep("encoder", bind(Kernel("gaussian", bandwidth=self.encoder_bandwidth_), Xd), Zf)
        self._codes = bind_points(Zf, self.kernel_.name_)
        self._keep("decoder", bind(self.kernel_, self.embedding_), X)
        return self

    def _loo_error(self, Z, X, twins):
        F = local_mean(Z, Z, X, self.kernel_, exclude_self=True, twins=twins)
        return float(np.mean(np.sum((F - X) ** 2, axis=1)))

    def _scaled_pca(self, X, twins):
        """PCA scores at unit variance times the grid factor with the lowest leave-one-out error."""
        scores = PCA(self.n_components, svd_solver="full").set_output(transform="default").fit_transform(X)
        std = scores.std(axis=0)
        scores = scores / np.where(std > 0, std, 1.0)
        factors = np.geomspace(0.25, 4.0 * len(X) ** (1.0 / self.n_components), 16)
        errors = [self._loo_error(c * scores, X, twins) for c in factors]
        best = int(np.argmin(errors))
        return factors[best] * scores, errors[best]

    @map_queries
    def transform(self, X: ArrayLike) -> np.ndarray:
        """Codes of ``X``: the local mean of training codes in data space, refined point by point."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        Xd = X.astype(np.float64)
        Z = self._kept_sums("encoder", Xd).mean
        Xf = self._kept["encoder"][0].samples
        return refine_codes(Z, lambda trial, rows: reconstruction_gradient(
            self._codes, Xf, trial, Xd[rows], kernel=self.kernel_.name_, per_query=True),
            self.max_iter).astype(X.dtype)

    def inverse_transform(self, Z):
        """Decode: the local mean of the training data at latent points ``Z``."""
        check_is_fitted(self)
        Z = check_array(Z, dtype=FLOATS, input_name="Z")
        if Z.shape[1] != self.n_components:
            raise ValueError(f"Z has {Z.shape[1]} columns, but n_components={self.n_components}")
        return self._kept_sums("decoder", Z).mean
