"""Hopfield networks: associative memory by iterated retrieval.

*Modern (dense) networks* retrieve with the local mean of the stored patterns under the softmax
kernel: ``xi <- X^T softmax(beta X xi) = sum_mu K(xi, x_mu) x_mu / sum_nu K(xi, x_nu)`` with
``K(xi, x) = exp(beta <xi, x>)`` (kernel "softmax", bandwidth = temperature = ``1 / beta``; values:
the patterns; local model: the constant). One update is one engine pass over all probes.

*Classical networks* (Hopfield 1982) store bipolar patterns in Hebbian weights
``W = X^T X / N`` with a zero diagonal and update ``s <- sign(W s)``. Their weights are signed
inner products, not a localization kernel, so this update is a matrix product, not a local mean.
"""
from __future__ import annotations

from numbers import Integral


import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import StrOptions

from .._params import non_negative, positive
from ..engine import backend_of, bind, iterate, map_queries, row_max_abs_change
from ..kernels import Kernel
from ._base import KeptBindings, check_fit_in_memory

KINDS = ("modern", "classical")
UPDATES = ("synchronous", "asynchronous")
#: the default tolerance, and the floor that round-off sets on it: ``ROUND_OFF_ULPS`` machine
#: epsilons of the largest pattern entry (float32 fixed points on digits move by up to 4 of them)
TOL = 1e-8
ROUND_OFF_ULPS = 16


def _sign(h, s):
    """``sign(h)``, keeping the current state where the field is exactly 0."""
    return np.where(h > 0, 1.0, np.where(h < 0, -1.0, s))


class HopfieldNetwork(KeptBindings, BaseEstimator):
    """Associative memory: ``fit`` stores patterns, ``predict`` retrieves from probes.

    .. math::

        \\text{modern:}\\quad \\xi \\leftarrow X^\\top \\operatorname{softmax}(\\beta X \\xi)
        \\qquad\\text{classical:}\\quad s \\leftarrow \\operatorname{sign}(W s),\\;
        W = \\tfrac{1}{N} X^\\top X - \\tfrac{P}{N} I

    ``X`` (P, N) holds the patterns as rows. The modern update is the local mean of the patterns
    with the softmax kernel ``exp(beta <xi, x>)``; it stores exponentially many patterns and
    usually retrieves in one step. The classical network needs bipolar (+1/-1) patterns and
    recalls reliably below about ``0.14 N`` random patterns.

    Parameters
    ----------
    kind : {"modern", "classical"}, default="modern"
    beta : float, default=1.0
        Inverse temperature of the modern network (the kernel's bandwidth is ``1 / beta``).
    max_iter : int, default=100
        Updates (classical asynchronous: sweeps over all units) per probe at most.
    tol : float or None, default=None
        A probe stops when no unit moves by more than ``tol`` in an update (classical networks
        stop when no unit flips and ignore ``tol``). None means ``1e-8``, raised to
        ``16 * eps * max|x_mu|`` where that is larger (``eps`` the machine epsilon of the probes'
        dtype, ``max|x_mu|`` the largest entry of the stored patterns): the state is a convex
        combination of the patterns, so round-off alone moves a converged state by a few
        ``eps * max|x_mu|`` (measured on binarised and raw digits in float32: up to 4 of them),
        and a smaller ``tol`` would keep such a probe oscillating until ``max_iter``. In float64
        this is ``1e-8`` for any pattern entries below 2.8e6; in float32 it is ``1.9e-6`` for
        bipolar (+1/-1) patterns. A number given is used as it is.
    update : {"synchronous", "asynchronous"}, default="synchronous"
        Classical networks: all units at once, or one unit at a time in a random order per
        sweep (the energy never increases). The modern update is synchronous.
    random_state : int, RandomState or None, default=None
        The order of the asynchronous sweeps.
    verbose : None, bool or int, default=None
        A progress bar of the retrieval iterations on stderr: True shows it, False never, None on a
        terminal for runs longer than 2 s.

    Attributes
    ----------
    patterns_ : ndarray of shape (n_patterns, n_features)
    weights_ : ndarray of shape (n_features, n_features)
        Classical networks only: the Hebbian weights.

    Examples
    --------
    >>> import numpy as np
    >>> from localkit import HopfieldNetwork
    >>> P = np.array([[1, 1, 1, 1, -1, -1, -1, -1], [1, -1, 1, -1, 1, -1, 1, -1]])
    >>> net = HopfieldNetwork(kind="classical").fit(P)
    >>> net.predict([[1, 1, 1, -1, -1, -1, -1, -1]])  # one bit flipped
    array([[ 1.,  1.,  1.,  1., -1., -1., -1., -1.]])
    >>> np.sign(HopfieldNetwork(beta=4.0).fit(P).predict([[1, -1, 1, -1, 1, -1, 1, 1]]))
    array([[ 1., -1.,  1., -1.,  1., -1.,  1., -1.]])
    """

    def __init__(self, kind="modern", beta=1.0, max_iter=100, tol=None, update="synchronous", random_state=None,
                 verbose=None):
        self.kind = kind
        self.beta = beta
        self.max_iter = max_iter
        self.tol = tol
        self.update = update
        self.random_state = random_state
        self.verbose = verbose

    _parameter_constraints: dict = {
        "kind": [StrOptions(set(KINDS))],
        "beta": positive(),
        "max_iter": positive(Integral),
        "tol": non_negative() + [None],
        "update": [StrOptions(set(UPDATES))],
        "random_state": ["random_state"],
        "verbose": ["verbose", None],
    }

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: None = None):
        """Store the patterns ``X`` (n_patterns, n_features). Returns ``self``."""
        X = check_fit_in_memory(self, X)
        if self.kind == "classical":
            if not np.all(np.abs(X) == 1):
                raise ValueError("a classical Hopfield network stores bipolar patterns: every entry must be +1 or -1")
            n = X.shape[1]
            self.weights_ = X.T @ X / n
            np.fill_diagonal(self.weights_, 0.0)
        self.patterns_ = X
        if self.kind == "modern":  # bound once: every retrieval step is a pass over the stored patterns
            self._keep("patterns", bind(Kernel("softmax", bandwidth=1.0 / self.beta), X), X)
        return self

    def retrieve(self, X, history=False):
        """Iterate from the probes ``X``; returns the fixed-point driver's result, with the
        attributes ``state`` (the retrieved patterns), ``n_iter``, per-probe ``converged`` and
        ``row_iter``, and with ``history=True`` every state."""
        X = backend_of(X).check_queries(self, X)
        name = f"{self.kind} Hopfield retrieval"
        if self.kind == "modern":
            binding, patterns = self._kept["patterns"]
            stepper = binding.stepper(patterns, X, checked=True)  # X checked above: validated once
            step = lambda S, rows: stepper.means(S)
            return iterate(step, X, tol=self._tolerance(X.dtype), max_iter=self.max_iter, per_row=True, inclusive=True,
                           change=row_max_abs_change, history=history, progress=self.verbose, name=name)
        if not np.all(np.abs(X) == 1):
            raise ValueError("probes of a classical Hopfield network must be bipolar: every entry +1 or -1")
        W = self.weights_
        if self.update == "synchronous":
            step = lambda S, rows: _sign(S @ W, S)
        else:
            rng = check_random_state(self.random_state)

            def step(S, rows):  # one sweep: units in a random order, all moving probes at once
                S = S.copy()
                for k in rng.permutation(S.shape[1]):
                    S[:, k] = _sign(S @ W[:, k], S[:, k])
                return S
        return iterate(step, X, tol=0.0, max_iter=self.max_iter, per_row=True, inclusive=True,
                       change=row_max_abs_change, history=history, progress=self.verbose, name=name)

    def _tolerance(self, dtype):
        """``tol``, or its default for states of ``dtype`` (see the class docstring)."""
        if self.tol is not None:
            return self.tol
        scale = float(np.max(np.abs(self.patterns_), initial=0.0))
        return max(TOL, ROUND_OFF_ULPS * float(np.finfo(dtype).eps) * scale)

    @map_queries
    def predict(self, X: ArrayLike) -> np.ndarray:
        """The retrieved states, one row per probe."""
        return self.retrieve(X).state

    def energy(self, X):
        """The network's energy at each state (row of ``X``).

        Classical: ``E(s) = -1/2 s^T W s``. Modern (Ramsauer et al. 2020):
        ``E(xi) = -lse(beta, X xi) + 1/2 <xi, xi> + log(P) / beta + M^2 / 2`` with
        ``lse(beta, z) = log(sum exp(beta z)) / beta`` (the engine's log weight sum under the
        softmax kernel) and ``M`` the largest pattern norm. Neither update increases it.
        """
        X = backend_of(X).check_queries(self, X)
        if self.kind == "classical":
            return -0.5 * np.einsum("ij,ij->i", X @ self.weights_, X)
        lse = self._kept["patterns"][0].sums(X).log_weight_sum / self.beta
        P = self.patterns_
        M2 = np.max(np.einsum("ij,ij->i", P, P))
        return -lse + 0.5 * np.einsum("ij,ij->i", X, X) + np.log(len(P)) / self.beta + 0.5 * M2

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.requires_fit = True
        return tags
