"""A hierarchical autoencoder: lazy (kernel-regression) autoencoders stacked, each level encoding
the codes of the level below, refined end to end through the chained reconstruction gradient."""
from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin, _fit_context
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted, validate_data

from .._params import PROFILE_CONSTRAINT, positive
from .._progress import optimizer_progress, warn_optimizer
from ..engine import bind, bind_points, chained_query_gradient, chained_reconstruction_gradient
from ..kernels import Kernel
from ._base import KeptBindings
from .denoise import FLOATS, LazyAutoencoder, encoder_bandwidth, refine_codes


def check_n_components(n_components, n_features):
    """``n_components`` as a tuple: non-empty, strictly decreasing positive ints, the first one
    below ``n_features`` (a code is smaller than what it encodes); an int ``q`` is one level ``(q,)``."""
    if isinstance(n_components, numbers.Integral) and not isinstance(n_components, bool):
        n_components = (n_components,)
    elif isinstance(n_components, np.ndarray) and n_components.ndim == 1:  # an array of ints, one per level
        n_components = tuple(n_components.tolist())
    if not isinstance(n_components, (tuple, list)) or len(n_components) == 0:
        raise ValueError(f"n_components must be a non-empty tuple of positive ints, one per level, e.g. (16, 2); "
                         f"got {n_components!r}")
    for q in n_components:
        if isinstance(q, bool) or not isinstance(q, numbers.Integral) or q < 1:
            raise ValueError(f"n_components must hold positive ints, got {n_components!r}")
    dims = (n_features,) + tuple(int(q) for q in n_components)
    if any(a <= b for a, b in zip(dims[:-1], dims[1:])):
        raise ValueError(f"n_components must be strictly decreasing and below n_features={n_features} "
                         f"(each level encodes the level below it), got {n_components!r}")
    return dims[1:]


class HierarchicalAutoencoder(KeptBindings, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Lazy autoencoders stacked: level ``l`` learns codes ``Z_l`` of the codes ``Z_{l-1}`` (``Z_0 = X``).

    Each level's decoder is a local mean (unsupervised kernel regression, as in
    :class:`~localkit.LazyAutoencoder`), ``f_l(y) = sum_j K(y, z_{l,j}) z_{l-1,j} / sum_j K(y, z_{l,j})``
    with a Gaussian (or Cauchy) kernel of bandwidth 1 on level ``l``'s codes. The whole decoder is
    the composition ``f_1 o f_2 o ... o f_L``, and the codes minimise its leave-one-out error

    .. math::

        E(Z_1, \\dots, Z_L) = \\frac{1}{n} \\sum_i \\big|x_i - f_{1,-i}(f_{2,-i}(\\cdots f_{L,-i}(z_{L,i})))\\big|^2

    ``fit`` first trains the levels greedily (level ``l`` is a ``LazyAutoencoder`` of ``Z_{l-1}``),
    then runs L-BFGS on all codes at once with the chained gradient (backpropagation through
    the local means). ``transform`` starts from the local mean of the top codes in data space and
    refines each code on its own to minimise ``|x - f_1(...f_L(z))|^2``; ``inverse_transform``
    decodes down every level. With one level this is exactly ``LazyAutoencoder`` (same defaults,
    same codes, same results); with more, the encoder also starts from the nearest training
    sample's code where that decodes better (the composed decoder has more local minima).

    Cost: ``O(n^2 (d + q_1 + ... + q_L))`` per L-BFGS step, memory ``O(b n)`` (row blocks).

    Parameters
    ----------
    n_components : tuple of int, default=(16, 2)
        The latent dimension of each level, strictly decreasing and below ``n_features``; an int
        ``q`` means one level, ``(q,)``.
    kernel : {"gaussian", "cauchy"}, default="gaussian"
        A profile whose log is differentiable, on every level's codes.
    max_iter : int, default=200
        L-BFGS iterations of each greedy level and of the end-to-end refinement, and refinement
        steps per code in ``transform``.
    verbose : None, bool or int, default=None
        Progress bars of the L-BFGS iterations on stderr, as in ``LazyAutoencoder``: True shows
        them, False never, None on a terminal for fits longer than 2 s.

    Attributes
    ----------
    embeddings_ : list of ndarray, the codes ``Z_1, ..., Z_L`` of the training samples.
    embedding_ : ndarray of shape (n_samples, n_components[-1]), the top codes ``Z_L``.
    kernel_ : Kernel, the decoders' kernel on latent codes (bandwidth 1).
    X_fit_ : ndarray, the training data.
    init_error_ : float, the leave-one-out error of the greedy stack (one level: of the scaled PCA start).
    reconstruction_error_ : float, the same after the end-to-end refinement (summed over features).
    encoder_bandwidth_ : float, the data-space bandwidth of the encoder's starting point.
    n_iter_ : int, L-BFGS iterations of the end-to-end refinement (one level: of the level's fit).

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import HierarchicalAutoencoder
    >>> t = np.linspace(0, 3, 60)
    >>> X = np.c_[np.cos(t), np.sin(t), 0.1 * t, 0.2 * np.cos(3 * t)]
    >>> import warnings
    >>> from localkit.exceptions import LocalkitConvergenceWarning
    >>> with warnings.catch_warnings():  # 30 iterations: a quick fit short of convergence, which it warns about
    ...     warnings.simplefilter("ignore", LocalkitConvergenceWarning)
    ...     hae = HierarchicalAutoencoder(n_components=(2, 1), max_iter=30).fit(X)
    >>> bool(hae.reconstruction_error_ <= hae.init_error_)
    True
    >>> hae.transform(X[:2]).shape, hae.inverse_transform(hae.transform(X[:2])).shape
    ((2, 1), (2, 4))
    """

    def __init__(self, n_components=(16, 2), kernel="gaussian", max_iter=200, verbose=None):
        self.n_components = n_components
        self.kernel = kernel
        self.max_iter = max_iter
        self.verbose = verbose

    _parameter_constraints: dict = {
        "n_components": [numbers.Integral, "array-like"],  # the levels' sizes: checked in fit (check_n_components)
        "kernel": PROFILE_CONSTRAINT,
        "max_iter": positive(numbers.Integral),
        "verbose": ["verbose", None],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Learn the codes of every level: greedily, then end to end. Returns ``self``."""
        X = validate_data(self, X, dtype=FLOATS, ensure_min_samples=3)
        dims = check_n_components(self.n_components, X.shape[1])
        codes, level = [], None
        for q in dims:  # greedy: each level a lazy autoencoder of the codes below it
            level = LazyAutoencoder(q, kernel=self.kernel, max_iter=self.max_iter,
                                    verbose=self.verbose).fit(codes[-1] if codes else X)
            codes.append(level.embedding_)
        self.kernel_ = level.kernel_
        Xd = X.astype(np.float64)
        if len(dims) == 1:
            Z = [level.embedding_.astype(np.float64)]
            self.init_error_, self.reconstruction_error_ = level.init_error_, level.reconstruction_error_
            self.n_iter_ = level.n_iter_
        else:
            Z, self.init_error_ = self._refine_end_to_end(codes, Xd)
        self.embeddings_ = [z.astype(X.dtype) for z in Z]
        self.embedding_ = self.embeddings_[-1]
        self._n_features_out = self.embedding_.shape[1]  # get_feature_names_out, set_output
        self.X_fit_ = X
        self.encoder_bandwidth_ = encoder_bandwidth(Xd, Z[-1])
        # bound once: the encoder's starts (data -> top codes: the local mean, the nearest sample),
        # every level's codes for the refinement's gradient (float64), the decoders (X's precision)
        top = self.embedding_.astype(np.float64)
        self._keep("encoder", bind(Kernel("gaussian", bandwidth=self.encoder_bandwidth_), Xd), top)
        self._keep("nearest", bind(Kernel("uniform", bandwidth=1.0, n_neighbors=1), Xd), top)
        self._codes = [bind_points(z, self.kernel_.name_) for z in self._codes_f64()]
        levels = [X] + self.embeddings_
        for lev in range(1, len(levels)):
            self._keep(f"decoder{lev}", bind(self.kernel_, levels[lev]), levels[lev - 1])
        return self

    def _refine_end_to_end(self, codes, X):
        """L-BFGS on all levels' codes at once; returns the codes and the greedy stack's error."""
        shapes = [z.shape for z in codes]
        cuts = np.cumsum([r * c for r, c in shapes])[:-1]
        unpack = lambda v: [part.reshape(s) for part, s in zip(np.split(v, cuts), shapes)]

        def objective(v):
            error, grads = chained_reconstruction_gradient(unpack(v), X, kernel=self.kernel_.name_)
            return error, np.concatenate([g.ravel() for g in grads])

        start = np.concatenate([z.astype(np.float64).ravel() for z in codes])
        bar, callback = optimizer_progress("hierarchical autoencoder, end to end", self.max_iter, self.verbose)
        with bar:
            res = minimize(objective, start, jac=True, method="L-BFGS-B", callback=callback,
                           options={"maxiter": self.max_iter})
        warn_optimizer(res, "HierarchicalAutoencoder (end to end)", self.max_iter)
        self.reconstruction_error_, self.n_iter_ = float(res.fun), int(res.nit)
        return unpack(res.x), objective(start)[0]

    def _codes_f64(self):
        return [z.astype(np.float64) for z in self.embeddings_]

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Top-level codes of ``X``: the local mean of the training codes in data space, refined
        code by code through the whole decoder."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=FLOATS)
        Xd, Xf = X.astype(np.float64), self._kept["encoder"][0].samples
        objective = lambda trial, rows: chained_query_gradient(self._codes, Xf, trial, Xd[rows],
                                                               kernel=self.kernel_.name_)
        Z = self._kept_sums("encoder", Xd).mean
        if len(self._codes) > 1:
            # The composed decoder is peaky: the local-mean start stalls in a poor local minimum
            # for many digits (held-out error 4.5 against 1.3 from the nearest sample's code,
            # 600 training digits, (16, 2)); take the nearest training sample's code (the 1-NN
            # local mean) where it decodes better.
            nearest = self._kept_sums("nearest", Xd).mean
            rows = np.arange(len(Z))
            better = objective(nearest, rows)[0] < objective(Z, rows)[0]
            Z[better] = nearest[better]
        return refine_codes(Z, objective, self.max_iter).astype(X.dtype)

    def inverse_transform(self, Z):
        """Decode: through every level's local mean, from the top codes ``Z`` down to data space."""
        check_is_fitted(self)
        Z = check_array(Z, dtype=FLOATS, input_name="Z")
        q = self.embedding_.shape[1]
        if Z.shape[1] != q:
            raise ValueError(f"Z has {Z.shape[1]} columns, but the top level has n_components[-1]={q}")
        for lev in range(len(self.embeddings_), 0, -1):
            Z = self._kept_sums(f"decoder{lev}", Z).mean
        return Z
